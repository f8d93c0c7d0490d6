//! Token revocation (RFC 7009), introspection (RFC 7662), and a user's view of the
//! applications they authorized. Revoking a refresh token, an access token of a grant, or the
//! grant itself ends the whole grant: its access and refresh tokens stop at once, on every
//! process.

use serde_json::{json, Value};

use super::{clients, hash, Failure};
use crate::{
    audit::{self, EntryExt},
    error::{Error, ErrorName, Result},
    identity::{bearer::hash_token, bearer::Principal, Identity},
    model::{
        audit::AuditType,
        oauth::{OAuthClient, OAuthGrant},
    },
    store::DynStore,
    types::AnyId,
};

/// Most grants listed for a user.
pub const MAX_GRANTS: u32 = 200;

/// The grant `token` belongs to: a refresh token's, or an access token's.
async fn grant_of(store: &DynStore, token: &str) -> Result<Option<AnyId>> {
    if let Some(t) = store.token_by_hash(&hash_token(token)).await? {
        return Ok(t.oauth_grant.clone());
    }
    Ok(store.refresh_token_grant(&hash(token)).await?)
}

/// RFC 7009: the client revokes one of its tokens (an access or refresh token), which ends
/// its grant. An unknown token, or another client's, is answered as success (§2.2) and changes
/// nothing. Errors: `invalid_client`.
pub async fn revoke(
    svc: &Identity,
    client_id: &str,
    secret: Option<&str>,
    token: &str,
) -> std::result::Result<(), Failure> {
    let client = clients::authenticate(&svc.store, client_id, secret).await?;
    let Some(grant_id) = grant_of(&svc.store, token).await? else { return Ok(()) };
    let Some(grant) = svc.store.oauth_grant(&grant_id).await?.filter(|g| g.client_id == client.id) else {
        return Ok(());
    };
    let entry = revocation_entry(&grant, "client");
    svc.store.revoke_oauth_grant(&grant.id, svc.store.clock().now(), &[entry]).await?;
    Ok(())
}

/// The audit entry of a grant's revocation, and who revoked it (`client`, `user`).
fn revocation_entry(g: &OAuthGrant, by: &str) -> crate::model::audit::AuditEntry {
    let mut entry = audit::entry(AuditType::OAuthGrantRevoked)
        .data(json!({ "clientId": g.client_id, "grantId": g.id, "by": by }));
    entry.user_id = Some(g.user_id.clone());
    entry
}

/// RFC 7662: what `token` is, for a confidential client (its own tokens) or a service admin
/// (any): `{active: false}` for an unknown, expired, revoked or foreign token, else `active`,
/// `scope`, `client_id`, `username`, `sub`, `token_type`, `exp`, `iat`. Errors:
/// `invalid_client`.
pub async fn introspect(
    svc: &Identity,
    caller: Introspector<'_>,
    token: &str,
) -> std::result::Result<Value, Failure> {
    let client = match caller {
        Introspector::Client { id, secret } => {
            let c = clients::authenticate(&svc.store, id, Some(secret)).await?;
            Some(c)
        }
        Introspector::ServiceAdmin => None,
    };
    let inactive = json!({ "active": false });
    let Some(t) = svc.store.token_by_hash(&hash_token(token)).await? else { return Ok(inactive) };
    let now = svc.store.clock().now();
    if t.revoked_at.is_some() || t.expires_at <= now {
        return Ok(inactive);
    }
    let grant = match &t.oauth_grant {
        Some(g) => svc.store.oauth_grant(g).await?,
        None => None,
    };
    if client.as_ref().is_some_and(|c| grant.as_ref().is_none_or(|g| g.client_id != c.id)) {
        return Ok(inactive);
    }
    let user = svc.store.user_by_id(&t.user_id).await?;
    Ok(json!({
        "active": true,
        "scope": t.scopes.iter().map(|g| g.to_scope_string()).collect::<Vec<_>>().join(" "),
        "client_id": grant.as_ref().map(|g| g.client_id.to_string()),
        "username": user.map(|u| u.email.to_string()),
        "sub": t.user_id,
        "token_type": "bearer",
        "exp": t.expires_at,
        "iat": t.created_at,
    }))
}

/// Who asks [`introspect`].
#[derive(Debug, Clone, Copy)]
pub enum Introspector<'a> {
    Client { id: &'a str, secret: &'a str },
    ServiceAdmin,
}

/// The applications the caller authorized: each live grant with its client.
pub async fn my_grants(store: &DynStore, auth: &Principal) -> Result<Vec<(OAuthGrant, Option<OAuthClient>)>> {
    let grants = store.oauth_grants(&auth.user.id, MAX_GRANTS).await?;
    let mut out = Vec::with_capacity(grants.len());
    for g in grants {
        let client = store.oauth_client(&g.client_id).await?;
        out.push((g, client));
    }
    Ok(out)
}

/// The caller revokes one of their grants. Audited as `oauth.grant_revoked`. Errors:
/// `NotFound` (no live grant of theirs has this id).
pub async fn revoke_mine(store: &DynStore, auth: &Principal, id: &AnyId) -> Result<()> {
    let grant = store.oauth_grant(id).await?.filter(|g| g.user_id == auth.user.id && g.revoked_at.is_none());
    let Some(grant) = grant else {
        return Err(Error::NotFound {
            name: ErrorName::NotFound,
            message: "no application access of yours has this id".into(),
        });
    };
    let mut entry = revocation_entry(&grant, "user");
    entry.ip = Some(auth.client_ip.to_string());
    entry.token_id = Some(auth.token.id.clone());
    store.revoke_oauth_grant(&grant.id, store.clock().now(), &[entry]).await?;
    Ok(())
}
