//! OAuth 2.0: `[oauth]`.

use serde::{Deserialize, Serialize};

/// Lifetimes of what the authorization server issues (docs/decisions.md#oauth-20), seconds.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct OAuthConfig {
    /// An authorization code's life (RFC 6749 §4.1.2 recommends at most 10 minutes).
    pub code_ttl: u64,
    /// An access token's life.
    pub access_token_ttl: u64,
    /// A refresh token's life; each use gives a new one.
    pub refresh_token_ttl: u64,
    /// The issuer (`iss`, and the base of the discovery document's URLs): the service's public
    /// URL, e.g. `https://custody.example`. Empty: `http://` and the request's `Host`.
    pub issuer: String,
}

impl Default for OAuthConfig {
    fn default() -> Self {
        Self {
            code_ttl: 60,
            access_token_ttl: 3600,
            refresh_token_ttl: 30 * 24 * 3600,
            issuer: String::new(),
        }
    }
}

impl OAuthConfig {
    pub(super) fn validate(&self) -> Result<(), String> {
        if self.code_ttl == 0 || self.access_token_ttl == 0 || self.refresh_token_ttl == 0 {
            return Err("invalid configuration: oauth.code_ttl, oauth.access_token_ttl and oauth.refresh_token_ttl must be positive".into());
        }
        Ok(())
    }
}
