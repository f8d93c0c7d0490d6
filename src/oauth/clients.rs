//! Registered applications (RFC 6749 §2): a confidential client has a secret, shown once and
//! kept as its SHA-256; a public client has none. Every client must use PKCE (RFC 9700
//! §2.1.1) unless a confidential one was registered `pkce_optional`. Redirect URIs are matched
//! exactly, and must be https, or http on a loopback address (RFC 8252 §7.3).

use serde_json::json;
use subtle::ConstantTimeEq;

use super::{hash, new_secret, OAuthError};
use crate::{
    audit::{self, EntryExt},
    error::{Error, ErrorName, Result},
    grant::Grant,
    ids,
    model::{audit::AuditType, oauth::OAuthClient},
    store::DynStore,
    types::AnyId,
};

/// Most redirect URIs and scope values a client may have; most clients listed.
pub const MAX_REDIRECT_URIS: usize = 10;
pub const MAX_SCOPES: usize = 64;
pub const MAX_CLIENTS: u32 = 1000;

/// What a new client is made of.
#[derive(Debug, Clone)]
pub struct NewClient {
    pub name: String,
    pub redirect_uris: Vec<String>,
    pub scopes: Vec<String>,
    /// No secret: PKCE instead (native and browser applications).
    pub public: bool,
    /// How its id_tokens are signed: `ES256` (when `None`) or `RS256`.
    pub id_token_alg: Option<String>,
    /// A confidential client that may leave PKCE out (for BitGoJS's
    /// `authenticateWithAuthCode`); refused for a public client.
    pub pkce_optional: bool,
}

/// Checks a redirect URI: absolute, no fragment, https, or http on 127.0.0.1, [::1] or
/// localhost (RFC 8252 §7.3, §8.3). Errors: `InvalidField` (`redirectUri`).
pub fn check_redirect_uri(uri: &str) -> Result<()> {
    let bad = |why: &str| Error::invalid_field("redirectUri", format!("{uri}: {why}"));
    let url = url::Url::parse(uri).map_err(|e| bad(&e.to_string()))?;
    if url.fragment().is_some() {
        return Err(bad("must not have a fragment (RFC 6749 §3.1.2)"));
    }
    let loopback = matches!(url.host_str(), Some("127.0.0.1" | "[::1]" | "localhost"));
    match url.scheme() {
        "https" => Ok(()),
        "http" if loopback => Ok(()),
        _ => Err(bad("must be https, or http on a loopback address")),
    }
}

/// Registers a client; returns it and, for a confidential one, its secret (shown once).
/// Audited as `oauth.client_created`. Errors: `InvalidField` (`name`, `redirectUri`, `scope`).
pub async fn create(store: &DynStore, new: NewClient) -> Result<(OAuthClient, Option<String>)> {
    let name = new.name.trim();
    if name.is_empty() || name.chars().count() > 100 {
        return Err(Error::invalid_field("name", "1 to 100 characters"));
    }
    if new.redirect_uris.is_empty() || new.redirect_uris.len() > MAX_REDIRECT_URIS {
        return Err(Error::invalid_field("redirectUri", format!("1 to {MAX_REDIRECT_URIS} redirect URIs")));
    }
    for uri in &new.redirect_uris {
        check_redirect_uri(uri)?;
    }
    if new.scopes.is_empty() || new.scopes.len() > MAX_SCOPES {
        return Err(Error::invalid_field("scope", format!("1 to {MAX_SCOPES} scope values")));
    }
    for s in &new.scopes {
        Grant::parse(s).map_err(|e| Error::invalid_field("scope", format!("{s}: {e}")))?;
    }
    let id_token_alg = new.id_token_alg.unwrap_or_else(|| "ES256".into());
    if !matches!(id_token_alg.as_str(), "ES256" | "RS256") {
        return Err(Error::invalid_field("idTokenAlg", "ES256 or RS256"));
    }
    if new.public && new.pkce_optional {
        return Err(Error::invalid_field("pkceOptional", "a public client must use PKCE"));
    }
    let secret = (!new.public).then(|| new_secret("cs_"));
    let client = OAuthClient {
        id: ids::new_id().parse().map_err(|e: &str| Error::Internal(anyhow::anyhow!(e)))?,
        name: name.to_string(),
        secret_hash: secret.as_deref().map(hash),
        redirect_uris: new.redirect_uris,
        scopes: new.scopes,
        disabled: false,
        created_at: store.clock().now(),
        id_token_alg,
        pkce_optional: new.pkce_optional,
    };
    let entry = audit::entry(AuditType::OAuthClientCreated).data(json!({
        "clientId": client.id, "name": client.name, "public": new.public, "pkceOptional": new.pkce_optional,
        "redirectUris": client.redirect_uris, "scopes": client.scopes,
    }));
    store.add_oauth_client(&client, &[entry]).await?;
    Ok((client, secret))
}

/// The registered clients, oldest first, at most [`MAX_CLIENTS`].
pub async fn list(store: &DynStore) -> Result<Vec<OAuthClient>> {
    Ok(store.oauth_clients(MAX_CLIENTS).await?)
}

/// Disables a client (its grants are revoked: every token it holds stops at once) or enables
/// it again. Audited as `oauth.client_disabled`. Errors: `NotFound`.
pub async fn set_disabled(store: &DynStore, id: &AnyId, disabled: bool) -> Result<()> {
    let entry =
        audit::entry(AuditType::OAuthClientDisabled).data(json!({ "clientId": id, "disabled": disabled }));
    if !store.set_oauth_client_disabled(id, disabled, store.clock().now(), &[entry]).await? {
        return Err(Error::NotFound { name: ErrorName::NotFound, message: "no client has this id".into() });
    }
    Ok(())
}

/// Lets a confidential client leave PKCE out (`optional`), or requires it again: for an
/// application registered before PKCE was required of every client that uses BitGoJS's
/// `authenticateWithAuthCode`. Audited as `oauth.client_pkce_set`. Errors: `NotFound`,
/// `InvalidField` (`pkceOptional`: a public client must use PKCE).
pub async fn set_pkce_optional(store: &DynStore, id: &AnyId, optional: bool) -> Result<()> {
    let not_found = || Error::NotFound { name: ErrorName::NotFound, message: "no client has this id".into() };
    let client = store.oauth_client(id).await?.ok_or_else(not_found)?;
    if optional && client.secret_hash.is_none() {
        return Err(Error::invalid_field("pkceOptional", "a public client must use PKCE"));
    }
    let entry =
        audit::entry(AuditType::OAuthClientPkceSet).data(json!({ "clientId": id, "pkceOptional": optional }));
    if !store.set_oauth_client_pkce(id, optional, &[entry]).await? {
        return Err(not_found());
    }
    Ok(())
}

/// The client `client_id`, authenticated (RFC 6749 §2.3): a confidential client by its
/// secret, a public one by having none. A disabled or unknown client, or a wrong or missing
/// secret, is `invalid_client`.
pub async fn authenticate(
    store: &DynStore,
    client_id: &str,
    secret: Option<&str>,
) -> std::result::Result<OAuthClient, super::Failure> {
    let unknown = || OAuthError::invalid_client("unknown or disabled client, or a wrong secret");
    let Ok(id) = client_id.parse::<AnyId>() else { return Err(unknown().into()) };
    let client = store.oauth_client(&id).await?.filter(|c| !c.disabled).ok_or_else(unknown)?;
    match (&client.secret_hash, secret.filter(|s| !s.is_empty())) {
        (None, None) => Ok(client),
        (Some(kept), Some(given)) if bool::from(kept.as_bytes().ct_eq(hash(given).as_bytes())) => Ok(client),
        _ => Err(unknown().into()),
    }
}

/// Gives a confidential client a new secret (shown once); the old one stops at once. Audited
/// as `oauth.client_secret_rotated`. Errors: `NotFound` (no such confidential client).
pub async fn rotate_secret(store: &DynStore, id: &AnyId) -> Result<String> {
    let secret = new_secret("cs_");
    let entry = audit::entry(AuditType::OAuthClientSecretRotated).data(json!({ "clientId": id }));
    if !store.set_oauth_client_secret(id, &hash(&secret), &[entry]).await? {
        return Err(Error::NotFound {
            name: ErrorName::NotFound,
            message: "no confidential client has this id".into(),
        });
    }
    Ok(secret)
}

/// Deletes a client; its grants are revoked first. Audited as `oauth.client_deleted`. Errors:
/// `NotFound`.
pub async fn delete(store: &DynStore, id: &AnyId) -> Result<()> {
    let entry = audit::entry(AuditType::OAuthClientDeleted).data(json!({ "clientId": id }));
    if !store.delete_oauth_client(id, store.clock().now(), &[entry]).await? {
        return Err(Error::NotFound { name: ErrorName::NotFound, message: "no client has this id".into() });
    }
    Ok(())
}
