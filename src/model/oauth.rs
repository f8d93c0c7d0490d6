//! OAuth 2.0 records (RFC 6749): a registered application, a grant a user gave it, and an
//! authorization code. Secrets (client secrets, codes, refresh tokens) are kept only as their
//! SHA-256.

use crate::types::{AnyId, UserId};

/// A registered application.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OAuthClient {
    /// `client_id`, 32 hex.
    pub id: AnyId,
    pub name: String,
    /// Hex SHA-256 of the secret; `None` for a public client, which must use PKCE.
    pub secret_hash: Option<String>,
    /// Matched exactly (RFC 6749 §3.1.2, RFC 8252 §7.3 for loopback).
    pub redirect_uris: Vec<String>,
    /// The scope values it may ask for.
    pub scopes: Vec<String>,
    pub disabled: bool,
    /// Unix seconds.
    pub created_at: i64,
    /// How its id_tokens are signed: `ES256` (the default) or `RS256`.
    pub id_token_alg: String,
    /// A confidential client allowed to leave PKCE out (BitGoJS's `authenticateWithAuthCode`
    /// sends no `code_verifier`); every other client must use it (RFC 9700 §2.1.1).
    pub pkce_optional: bool,
}

/// One authorization a user gave a client: its code, and the refresh and access tokens that
/// came of it. Revoking it ends them all.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OAuthGrant {
    pub id: AnyId,
    pub user_id: UserId,
    pub client_id: AnyId,
    /// The scope values granted.
    pub scopes: Vec<String>,
    /// Unix seconds.
    pub created_at: i64,
    pub last_used_at: Option<i64>,
    pub revoked_at: Option<i64>,
    /// How the user signed in before consenting (OpenID Connect `amr`: `pwd` and `otp`, or
    /// `hwk` and `user` for a passkey).
    pub amr: Vec<String>,
    /// When, Unix seconds (`auth_time`).
    pub auth_time: i64,
}

/// An authorization code (RFC 6749 §4.1.2), by its SHA-256.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AuthorizationCode {
    pub code_hash: String,
    pub grant_id: AnyId,
    /// The `redirect_uri` of the authorization request, when it named one: the token request
    /// must name the same (§4.1.3).
    pub redirect_uri: Option<String>,
    /// PKCE S256 challenge (RFC 7636 §4.2), base64url.
    pub code_challenge: Option<String>,
    /// OpenID Connect `nonce`, for the id_token.
    pub nonce: Option<String>,
    /// When the user signed in, Unix seconds.
    pub auth_time: i64,
    pub expires_at: i64,
    pub used_at: Option<i64>,
}

/// A key id_tokens are signed with (OpenID Connect Core §10.1).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OidcKey {
    /// `kid`, 32 hex.
    pub kid: String,
    /// `ES256` or `RS256`.
    pub alg: String,
    /// The private key (PKCS#8 for ES256, PKCS#1 for RS256, DER) sealed under the master key,
    /// hex.
    pub sealed: String,
    /// The public key as a JWK (RFC 7517), JSON.
    pub public_jwk: String,
    pub created_at: i64,
    /// When a newer key of its algorithm replaced it; it stays published until what it signed
    /// has expired.
    pub retired_at: Option<i64>,
}
