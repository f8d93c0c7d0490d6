//! Bearer-token authentication (spec §5): token values, their stored hashes, and
//! [`authenticate`], which turns a presented token into a [`Principal`]. Missing, unknown,
//! expired or revoked tokens, and tokens used from outside their `ipRestrict`, are
//! [`Error::Unauthenticated`].
//!
//! Layer rule: no web-framework types and nothing of the HTTP layer (docs/architecture.md).

use crate::error::ErrorName;
use std::{net::IpAddr, sync::Arc};

use crate::{
    error::{Error, Result},
    identity::{
        scopes::{Action, Policy},
        Identity,
    },
    model::{
        audit::{AuditEntry, AuditType},
        token::TokenRecord,
    },
    store::User,
};

/// Prefix of every token value; the rest is 64 lowercase hex characters (256 bits).
pub const TOKEN_PREFIX: &str = "v2x";

/// A new secret token value from the OS CSPRNG.
pub fn new_token_value() -> String {
    let mut b = [0u8; 32];
    rand::RngCore::fill_bytes(&mut rand::rngs::OsRng, &mut b);
    format!("{TOKEN_PREFIX}{}", hex::encode(b))
}

/// Hex SHA-256 of a token value: the only form in which tokens are stored.
pub fn hash_token(value: &str) -> String {
    crate::digest::sha256_hex(value.as_bytes())
}

/// What a token's sealed value is bound to: its id, so a sealed value copied to another row
/// does not open.
pub fn token_aad(id: &crate::types::TokenId) -> String {
    format!("token:{id}")
}

fn well_formed(value: &str) -> bool {
    value
        .strip_prefix(TOKEN_PREFIX)
        .is_some_and(|h| h.len() == 64 && h.bytes().all(|c| c.is_ascii_digit() || (b'a'..=b'f').contains(&c)))
}

/// An authenticated caller: the token presented, its user, and the address it came from.
#[derive(Debug, Clone)]
pub struct Principal {
    /// Shared with the read cache (docs/decisions.md#performance).
    pub token: Arc<TokenRecord>,
    pub user: Arc<User>,
    /// The client address the request came from.
    pub client_ip: IpAddr,
    /// The request's id (`request-id`), for the audit log.
    pub request_id: Option<String>,
    /// The request was signed with the token (HMAC, auth v2 to v4), not sent as a Bearer.
    pub signed: bool,
}

impl Principal {
    /// A new audit entry of `entry_type` done by this caller: its user, token, address and
    /// request.
    pub fn audit(&self, entry_type: AuditType) -> AuditEntry {
        AuditEntry {
            user_id: Some(self.user.id.clone()),
            ip: Some(self.client_ip.to_string()),
            token_id: Some(self.token.id.clone()),
            request_id: self.request_id.clone(),
            ..crate::audit::entry(entry_type)
        }
    }

    /// Asks the scope policy; a denial is [`Error::Forbidden`] naming the scope that was needed.
    pub fn require(&self, policy: Policy, action: Action<'_>) -> Result<()> {
        policy
            .check(&self.token, action)
            .map_err(|d| Error::forbidden("the access token's scopes do not permit this", &d.required))
    }
}

fn unauthenticated(name: ErrorName, message: &str) -> Error {
    Error::Unauthenticated { name, message: message.into() }
}

/// The principal of `authorization` (the whole header value, `Bearer <token>`), used from
/// `client_ip`. Errors: `AuthenticationRequired` (no or malformed header), `InvalidToken`
/// (unknown, revoked, or its user inactive), `TokenExpired`, `IpNotAllowed` (outside the
/// token's `ipRestrict`, spec §5.5).
pub async fn authenticate(
    svc: &Identity,
    authorization: Option<&str>,
    client_ip: IpAddr,
) -> Result<Principal> {
    let header = authorization.ok_or_else(|| {
        unauthenticated(ErrorName::AuthenticationRequired, "an Authorization: Bearer token is required")
    })?;
    // The scheme is case-insensitive (RFC 9110 §11.1): `Bearer`, `bearer` and `BEARER` alike.
    let value = header
        .split_once(' ')
        .filter(|(scheme, _)| scheme.eq_ignore_ascii_case("bearer"))
        .map(|(_, token)| token.trim())
        .ok_or_else(|| {
            unauthenticated(
                ErrorName::AuthenticationRequired,
                "the Authorization header must be Bearer <token>",
            )
        })?;
    if !well_formed(value) {
        return Err(unauthenticated(ErrorName::InvalidToken, "unknown or revoked access token"));
    }
    let token = svc
        .store
        .token_by_hash(&hash_token(value))
        .await?
        .filter(|t| t.revoked_at.is_none())
        .ok_or_else(|| unauthenticated(ErrorName::InvalidToken, "unknown or revoked access token"))?;
    principal_of_token(svc, token, client_ip).await
}

/// The principal of a token found by its hash (Bearer or signed): refused when expired, used
/// from outside its `ipRestrict`, or its user is not active; records its use at most once a
/// minute.
pub(super) async fn principal_of_token(
    svc: &Identity,
    token: Arc<TokenRecord>,
    client_ip: IpAddr,
) -> Result<Principal> {
    if svc.store.clock().now() >= token.expires_at {
        return Err(unauthenticated(ErrorName::TokenExpired, "the access token has expired"));
    }
    if let Some(allowed) = &token.ip_restrict {
        let inside = allowed.iter().any(|c| c.contains_ip(&client_ip));
        if !inside {
            return Err(unauthenticated(
                ErrorName::IpNotAllowed,
                "the access token may not be used from this address",
            ));
        }
    }
    let user = svc
        .store
        .user_by_id(&token.user_id)
        .await?
        .filter(|u| u.is_active)
        .ok_or_else(|| unauthenticated(ErrorName::InvalidToken, "the token's user is not active"))?;
    let now = svc.store.clock().now();
    if token.last_used_at.is_none_or(|t| t <= now - crate::model::token::TOUCH_EVERY_SECS) {
        // At most one write a minute per token; a failure only leaves lastUsedAt older.
        if let Err(e) = svc.store.touch_token(&token.id, &token.token_hash, now).await {
            tracing::warn!(error = %e, "recording a token's last use failed");
        }
    }
    Ok(Principal { token, user, client_ip, request_id: None, signed: false })
}
