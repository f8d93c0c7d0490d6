//! The OAuth 2.0 authorization server (RFC 6749 with PKCE, RFC 7636; docs/decisions.md#oauth-20):
//! registered applications ([`clients`]), the authorization endpoint's checks and the user's
//! consent ([`authorize`]), and the token endpoint ([`token`]). Access tokens are the service's
//! own `v2x` tokens, so every route and HMAC authentication work with them.
//!
//! Layer rule: no web-framework types and nothing of the HTTP layer (docs/architecture.md).

pub mod authorize;
pub mod clients;
pub mod oidc;
pub mod revoke;
pub mod token;

use base64::{engine::general_purpose::URL_SAFE_NO_PAD as B64URL, Engine};
use rand::RngCore;

/// A new random secret: `prefix` and 32 random bytes, base64url.
pub(crate) fn new_secret(prefix: &str) -> String {
    let mut bytes = [0u8; 32];
    rand::rngs::OsRng.fill_bytes(&mut bytes);
    format!("{prefix}{}", B64URL.encode(bytes))
}

/// How a secret is kept and looked up: hex SHA-256 (secrets are random, so no stretching).
pub(crate) fn hash(secret: &str) -> String {
    crate::digest::sha256_hex(secret.as_bytes())
}

/// An error of RFC 6749 §5.2 (token endpoint) or §4.1.2.1 (authorization endpoint): its
/// `error` code, a description, and the HTTP status it is answered with.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OAuthError {
    pub error: &'static str,
    pub description: String,
    pub status: u16,
}

impl OAuthError {
    pub fn invalid_request(d: impl Into<String>) -> Self {
        OAuthError { error: "invalid_request", description: d.into(), status: 400 }
    }
    pub fn invalid_client(d: impl Into<String>) -> Self {
        OAuthError { error: "invalid_client", description: d.into(), status: 401 }
    }
    pub fn invalid_grant(d: impl Into<String>) -> Self {
        OAuthError { error: "invalid_grant", description: d.into(), status: 400 }
    }
    pub fn invalid_scope(d: impl Into<String>) -> Self {
        OAuthError { error: "invalid_scope", description: d.into(), status: 400 }
    }
    pub fn unsupported_grant_type(d: impl Into<String>) -> Self {
        OAuthError { error: "unsupported_grant_type", description: d.into(), status: 400 }
    }
}

/// A failure of an OAuth step: an RFC error for the client, or the service's own (the
/// database away: 503).
#[derive(Debug)]
pub enum Failure {
    OAuth(OAuthError),
    Service(crate::error::Error),
}

impl From<OAuthError> for Failure {
    fn from(e: OAuthError) -> Self {
        Failure::OAuth(e)
    }
}

impl From<crate::error::Error> for Failure {
    fn from(e: crate::error::Error) -> Self {
        Failure::Service(e)
    }
}

impl From<crate::store::StoreError> for Failure {
    fn from(e: crate::store::StoreError) -> Self {
        Failure::Service(e.into())
    }
}
