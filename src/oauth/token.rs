//! The token endpoint (RFC 6749 §4.1.3, §6; PKCE RFC 7636 §4.6): an authorization code or a
//! refresh token for an access token and a new refresh token. Codes and refresh tokens are
//! used once; a second use revokes the grant they belong to and is audited (§4.1.2, §10.4).
//! Access tokens are `v2x` tokens scoped to what was granted and what the user may do now.
//!
//! Everything is checked and built first (the id_token signed too); then one transaction uses
//! the code or refresh token and stores the new tokens and their audit entry, so a failure
//! leaves the old one usable and a client's retry is not taken for a reuse.

use std::net::IpAddr;

use base64::{engine::general_purpose::URL_SAFE_NO_PAD as B64URL, Engine};
use serde_json::json;
use sha2::{Digest, Sha256};

use super::{clients, hash, new_secret, Failure, OAuthError};
use crate::{
    audit::{self, EntryExt},
    grant::Grant,
    identity::{bearer::new_token_value, scopes::session_scopes, tokens::new_token_record, Identity},
    model::{
        audit::{AuditEntry, AuditType},
        oauth::{OAuthClient, OAuthGrant},
        token::{GrantType, TokenKind, TokenRecord},
    },
    store::{Exchange, Redeem, Redeemed},
    types::AnyId,
};

/// A token request's parameters (form-encoded per RFC 6749, or JSON as BitGoJS sends them).
#[derive(Debug, Clone, Default, serde::Deserialize, serde::Serialize, utoipa::ToSchema)]
pub struct TokenRequest {
    /// Anything else is 400 `unsupported_grant_type`.
    #[serde(default)]
    #[schema(pattern = "^(authorization_code|refresh_token)$")]
    pub grant_type: String,
    #[serde(default)]
    pub code: Option<String>,
    #[serde(default)]
    pub redirect_uri: Option<String>,
    #[serde(default)]
    pub code_verifier: Option<String>,
    #[serde(default)]
    pub refresh_token: Option<String>,
    /// A registered client's id with its secret (or HTTP Basic): which ones are registered no
    /// schema can state, so others are 401 `invalid_client` (RFC 6749 §5.2).
    #[serde(default)]
    pub client_id: Option<String>,
    #[serde(default)]
    pub client_secret: Option<String>,
    #[serde(default)]
    pub scope: Option<String>,
}

/// What the endpoint answers (§5.1), with the login result's `expires_at`, `grant_type` and
/// `token_id`.
#[derive(Debug, Clone)]
pub struct Issued {
    pub access_token: String,
    pub refresh_token: String,
    /// With the `openid` scope (OpenID Connect Core §3.1.3.3).
    pub id_token: Option<String>,
    pub token: TokenRecord,
    /// Seconds.
    pub expires_in: i64,
}

/// Exchanges a code or a refresh token. `basic` is the client's HTTP Basic credentials, when
/// sent (`client_secret_basic`); otherwise `client_id` and `client_secret` come in the body.
/// Errors (RFC 6749 §5.2): `invalid_request`, `invalid_client` (401), `invalid_grant` (an
/// unknown, expired, reused or foreign code or refresh token, a wrong `redirect_uri` or PKCE
/// verifier, a revoked grant or an inactive user), `unsupported_grant_type`.
pub async fn exchange(
    svc: &Identity,
    req: &TokenRequest,
    basic: Option<(String, String)>,
    ip: IpAddr,
    issuer: &str,
) -> Result<Issued, Failure> {
    let (client_id, secret) = match (&basic, &req.client_id) {
        (Some((id, secret)), _) => (id.clone(), Some(secret.clone())),
        (None, Some(id)) => (id.clone(), req.client_secret.clone()),
        (None, None) => return Err(OAuthError::invalid_client("client_id is required").into()),
    };
    let client = clients::authenticate(&svc.store, &client_id, secret.as_deref()).await?;
    let now = svc.store.clock().now();
    let (grant, nonce, redeem) = match req.grant_type.as_str() {
        "authorization_code" => by_code(svc, &client, req, now).await?,
        "refresh_token" => by_refresh_token(svc, &client, req).await?,
        "" => return Err(OAuthError::invalid_request("grant_type is required").into()),
        other => {
            return Err(OAuthError::unsupported_grant_type(format!(
                "{other}: use authorization_code or refresh_token"
            ))
            .into())
        }
    };
    let grant_type = match redeem {
        Hashed::Code(_) => GrantType::AuthorizationCode,
        Hashed::RefreshToken(_) => GrantType::RefreshToken,
    };
    let user = svc.store.user_by_id(&grant.user_id).await?.filter(|u| u.is_active);
    let Some(user) = user else { return Err(OAuthError::invalid_grant("the user is not active").into()) };
    let (mut issued, stored) = issue(svc, &client, &grant, grant_type, ip, now)?;
    // Signed before the commit: nothing is stored that the client cannot be given.
    if grant.scopes.iter().any(|s| s == "openid") {
        issued.id_token =
            Some(super::oidc::id_token(svc, issuer, &client, &grant, &user, nonce.as_deref()).await?);
    }
    let exchange = Exchange {
        redeem: redeem.as_redeem(),
        grant: &grant.id,
        now,
        refresh_hash: &stored.refresh_hash,
        refresh_expires_at: stored.refresh_expires_at,
        token: &issued.token,
        audit: std::slice::from_ref(&stored.audit),
    };
    match svc.store.exchange_oauth(exchange).await? {
        Redeemed::Fresh(()) => Ok(issued),
        Redeemed::Reused(grant) => {
            let what = match redeem {
                Hashed::Code(_) => AuditType::OAuthCodeReused,
                Hashed::RefreshToken(_) => AuditType::OAuthRefreshReused,
            };
            Err(reused(svc, &client, &grant, what).await?.into())
        }
        Redeemed::Invalid => {
            Err(OAuthError::invalid_grant("unknown or expired, or its grant was revoked").into())
        }
    }
}

/// The SHA-256 of what the request uses.
enum Hashed {
    Code(String),
    RefreshToken(String),
}

impl Hashed {
    fn as_redeem(&self) -> Redeem<'_> {
        match self {
            Hashed::Code(h) => Redeem::Code(h),
            Hashed::RefreshToken(h) => Redeem::RefreshToken(h),
        }
    }
}

/// A reused code or refresh token: the grant is revoked, and the use audited.
async fn reused(
    svc: &Identity,
    client: &OAuthClient,
    grant: &AnyId,
    what: AuditType,
) -> Result<OAuthError, Failure> {
    let data = json!({ "clientId": client.id, "grantId": grant });
    let entries =
        [audit::entry(what).data(data.clone()), audit::entry(AuditType::OAuthGrantRevoked).data(data)];
    if !svc.store.revoke_oauth_grant(grant, svc.store.clock().now(), &entries).await? {
        audit::record(&svc.store, &entries[..1]).await;
    }
    Ok(OAuthError::invalid_grant("this was used before: every token of its grant is revoked"))
}

/// The grant and nonce of a code, checked (nothing is written: the exchange uses it). A code
/// used before revokes its grant.
async fn by_code(
    svc: &Identity,
    client: &OAuthClient,
    req: &TokenRequest,
    now: i64,
) -> Result<(OAuthGrant, Option<String>, Hashed), Failure> {
    let code = req
        .code
        .as_deref()
        .filter(|c| !c.is_empty())
        .ok_or_else(|| OAuthError::invalid_request("code is required"))?;
    let hashed = hash(code);
    let record = match svc.store.oauth_code(&hashed).await? {
        Some(c) if c.used_at.is_some() => {
            return Err(reused(svc, client, &c.grant_id, AuditType::OAuthCodeReused).await?.into())
        }
        Some(c) if c.expires_at > now => c,
        _ => return Err(OAuthError::invalid_grant("unknown or expired code").into()),
    };
    let grant = live_grant(svc, client, &record.grant_id).await?;
    if record.redirect_uri.is_some() && record.redirect_uri != req.redirect_uri {
        return Err(OAuthError::invalid_grant("redirect_uri differs from the authorization request's").into());
    }
    match (&record.code_challenge, req.code_verifier.as_deref()) {
        (None, None) => {}
        // RFC 9700 §2.1.1: a verifier for a code issued without a challenge is a downgrade.
        (None, Some(_)) => {
            return Err(OAuthError::invalid_grant(
                "code_verifier sent for a code issued without code_challenge",
            )
            .into())
        }
        (Some(challenge), Some(verifier)) if pkce_matches(challenge, verifier) => {}
        (Some(_), _) => {
            return Err(OAuthError::invalid_grant("code_verifier does not match the code_challenge").into())
        }
    }
    Ok((grant, record.nonce, Hashed::Code(hashed)))
}

/// RFC 7636 §4.6: `BASE64URL(SHA256(verifier)) == challenge`, the verifier 43 to 128
/// unreserved characters.
pub fn pkce_matches(challenge: &str, verifier: &str) -> bool {
    let unreserved =
        verifier.bytes().all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'.' | b'_' | b'~'));
    (43..=128).contains(&verifier.len())
        && unreserved
        && bool::from(subtle::ConstantTimeEq::ct_eq(
            B64URL.encode(Sha256::digest(verifier.as_bytes())).as_bytes(),
            challenge.as_bytes(),
        ))
}

/// The grant of a refresh token (nothing is written: the exchange uses it and finds out
/// whether it was used before or expired).
async fn by_refresh_token(
    svc: &Identity,
    client: &OAuthClient,
    req: &TokenRequest,
) -> Result<(OAuthGrant, Option<String>, Hashed), Failure> {
    let token = req
        .refresh_token
        .as_deref()
        .filter(|t| !t.is_empty())
        .ok_or_else(|| OAuthError::invalid_request("refresh_token is required"))?;
    let hashed = hash(token);
    let Some(grant) = svc.store.refresh_token_grant(&hashed).await? else {
        return Err(OAuthError::invalid_grant("unknown or expired refresh token").into());
    };
    Ok((live_grant(svc, client, &grant).await?, None, Hashed::RefreshToken(hashed)))
}

/// The grant, if it is this client's and not revoked.
async fn live_grant(svc: &Identity, client: &OAuthClient, id: &AnyId) -> Result<OAuthGrant, Failure> {
    svc.store
        .oauth_grant(id)
        .await?
        .filter(|g| g.client_id == client.id && g.revoked_at.is_none())
        .ok_or_else(|| OAuthError::invalid_grant("the grant was revoked, or is another client's").into())
}

/// What an exchange stores besides the access token: the new refresh token's SHA-256 and
/// expiry (Unix seconds), and the audit entry.
struct ToStore {
    refresh_hash: String,
    refresh_expires_at: i64,
    audit: AuditEntry,
}

/// A new access token and refresh token of `grant` for `user` (active), scoped to what was
/// granted and what a session of the user holds now; built, not stored.
fn issue(
    svc: &Identity,
    client: &OAuthClient,
    grant: &OAuthGrant,
    grant_type: GrantType,
    ip: IpAddr,
    now: i64,
) -> Result<(Issued, ToStore), Failure> {
    let session = session_scopes(svc.config.environment);
    let scopes: Vec<Grant> = grant
        .scopes
        .iter()
        .filter_map(|s| Grant::parse(s).ok())
        .filter(|g| svc.policy.grant_covers(&session, g, false))
        .collect();
    let ttl = i64::try_from(svc.config.oauth.access_token_ttl).unwrap_or(3600);
    let value = new_token_value();
    let mut token =
        new_token_record(svc, &value, &grant.user_id, TokenKind::Access, scopes, now, now + ttl, ip)?;
    token.label = Some(format!("OAuth: {}", client.name));
    token.grant_type = grant_type;
    token.oauth_grant = Some(grant.id.clone());
    let refresh = new_secret("rt_");
    let refresh_ttl = i64::try_from(svc.config.oauth.refresh_token_ttl).unwrap_or(2_592_000);
    let audit = AuditEntry {
        user_id: Some(grant.user_id.clone()),
        ip: Some(ip.to_string()),
        token_id: Some(token.id.clone()),
        ..audit::entry(AuditType::OAuthTokenIssued).data(json!({
            "clientId": client.id, "grantId": grant.id, "grantType": grant_type.as_str(), "tokenId": token.id,
        }))
    };
    let stored = ToStore { refresh_hash: hash(&refresh), refresh_expires_at: now + refresh_ttl, audit };
    Ok((
        Issued { access_token: value, refresh_token: refresh, id_token: None, token, expires_in: ttl },
        stored,
    ))
}
