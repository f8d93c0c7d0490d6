//! OAuth 2.0 endpoints (docs/decisions.md#oauth-20): the token endpoint, which answers in RFC 6749's
//! shapes (§5.1, and §5.2 errors `{error, error_description}`) rather than §7's, and the
//! authorization endpoint, which sends the browser to the console (where the user signs in and
//! consents: `console/oauth.rs`).

use axum::{
    body::Bytes,
    extract::{RawQuery, State},
    http::{header, HeaderMap, HeaderValue, StatusCode},
    response::{IntoResponse, Redirect, Response},
    Json,
};
use base64::{engine::general_purpose::STANDARD as B64, Engine};
use serde::Serialize;
use serde_json::{json, Map, Value};
use utoipa::ToSchema;

use super::{error::ApiError, error::ErrorBody, extract::ClientIp};
use crate::{
    oauth::{
        token::{exchange, TokenRequest},
        Failure, OAuthError,
    },
    AppState,
};

/// Largest token request read, bytes.
pub const MAX_TOKEN_BODY: usize = 16 * 1024;

/// The answer of RFC 6749 §5.1, with the login result's `expires_at`, `grant_type` and
/// `token_id` (§2.2).
#[derive(Debug, Serialize, ToSchema)]
pub struct TokenResponse {
    /// A `v2x` token: a Bearer token, or the key of HMAC-signed requests.
    pub access_token: String,
    /// Always "bearer".
    pub token_type: String,
    /// Seconds.
    pub expires_in: i64,
    /// Unix seconds.
    pub expires_at: i64,
    /// Space-separated scope values granted.
    pub scope: String,
    /// Used once: each use answers with a new one.
    pub refresh_token: String,
    /// The access token's public id.
    pub token_id: String,
    /// `authorization_code` or `refresh_token`.
    pub grant_type: String,
    /// With the `openid` scope: the OpenID Connect id_token (a JWS, ES256 or RS256).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub id_token: Option<String>,
}

/// An error of RFC 6749 §5.2.
#[derive(Debug, Serialize, ToSchema)]
pub struct OAuthErrorResponse {
    /// `invalid_request`, `invalid_client`, `invalid_grant`, `unauthorized_client`,
    /// `unsupported_grant_type` or `invalid_scope`.
    pub error: String,
    pub error_description: String,
    /// The request's id, as in every error of this service.
    #[serde(rename = "requestId")]
    pub request_id: String,
}

fn rfc_error(e: &OAuthError) -> Response {
    let mut body = Map::new();
    body.insert("error".into(), json!(e.error));
    body.insert("error_description".into(), json!(e.description));
    let status = StatusCode::from_u16(e.status).unwrap_or(StatusCode::BAD_REQUEST);
    let mut res = (status, Json(Value::Object(body.clone()))).into_response();
    if status == StatusCode::UNAUTHORIZED {
        res.headers_mut().insert(header::WWW_AUTHENTICATE, HeaderValue::from_static("Basic"));
    }
    res.extensions_mut().insert(ErrorBody(body));
    res
}

/// `Authorization: Basic` client credentials (RFC 6749 §2.3.1: each form-urlencoded).
fn basic_credentials(headers: &HeaderMap) -> Option<(String, String)> {
    let value = headers.get(header::AUTHORIZATION)?.to_str().ok()?;
    let (scheme, encoded) = value.split_once(' ')?;
    if !scheme.eq_ignore_ascii_case("basic") {
        return None;
    }
    let decoded = String::from_utf8(B64.decode(encoded.trim()).ok()?).ok()?;
    let (id, secret) = decoded.split_once(':')?;
    let unescape = |s: &str| {
        url::form_urlencoded::parse(format!("x={s}").as_bytes()).next().map(|(_, v)| v.into_owned())
    };
    Some((unescape(id)?, unescape(secret)?))
}

/// A form-encoded (RFC 6749) or JSON body (BitGoJS) as `T`; anything else is
/// `invalid_request`.
fn parse_body<T: serde::de::DeserializeOwned>(headers: &HeaderMap, body: &[u8]) -> Result<T, OAuthError> {
    let kind = headers.get(header::CONTENT_TYPE).and_then(|v| v.to_str().ok()).unwrap_or_default();
    if kind.starts_with("application/json") {
        serde_json::from_slice(body)
            .map_err(|e| OAuthError::invalid_request(format!("not a JSON request: {e}")))
    } else if kind.starts_with("application/x-www-form-urlencoded") {
        serde_urlencoded::from_bytes(body)
            .map_err(|e| OAuthError::invalid_request(format!("not a form request: {e}")))
    } else {
        Err(OAuthError::invalid_request(
            "Content-Type must be application/x-www-form-urlencoded or application/json",
        ))
    }
}

/// The token endpoint (RFC 6749 §3.2): `authorization_code` (with PKCE when the authorization
/// request had a challenge) and `refresh_token` (rotated on every use). The body is
/// form-encoded (RFC 6749) or JSON (BitGoJS's `authenticateWithAuthCode` and `refreshToken`);
/// the client authenticates with HTTP Basic, or `client_id` and `client_secret` in the body.
#[utoipa::path(post, path = "/oauth/token", tag = "oauth",
    request_body(content = TokenRequest, content_type = "application/x-www-form-urlencoded"),
    responses(
        (status = 200, description = "Tokens (RFC 6749 §5.1)", body = TokenResponse),
        (status = 400, description = "RFC 6749 §5.2 error", body = OAuthErrorResponse),
        (status = 401, description = "invalid_client", body = OAuthErrorResponse),
        (status = 413, description = "Body over 16 KiB", body = OAuthErrorResponse),
    ))]
pub async fn token(
    State(state): State<AppState>,
    ClientIp(ip): ClientIp,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    if body.len() > MAX_TOKEN_BODY {
        return rfc_error(&OAuthError {
            error: "invalid_request",
            description: "body over 16 KiB".into(),
            status: 413,
        });
    }
    let req = match parse_body(&headers, &body) {
        Ok(r) => r,
        Err(e) => return rfc_error(&e),
    };
    let issuer = issuer(&state, &headers);
    let basic = basic_credentials(&headers);
    let by_basic = basic.is_some();
    let mut res = match exchange(&state.identity, &req, basic, ip, &issuer).await {
        Ok(issued) => Json(TokenResponse {
            access_token: issued.access_token,
            token_type: "bearer".into(),
            expires_in: issued.expires_in,
            expires_at: issued.token.expires_at,
            scope: issued.token.scopes.iter().map(|g| g.to_scope_string()).collect::<Vec<_>>().join(" "),
            refresh_token: issued.refresh_token,
            token_id: issued.token.id.to_string(),
            grant_type: issued.token.grant_type.as_str().into(),
            id_token: issued.id_token,
        })
        .into_response(),
        Err(e) => oauth_failure(e, by_basic),
    };
    res.headers_mut().insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    res.headers_mut().insert(header::PRAGMA, HeaderValue::from_static("no-cache"));
    res
}

/// A revocation or introspection request (RFC 7009 §2.1, RFC 7662 §2.1).
#[derive(Debug, Default, serde::Deserialize, serde::Serialize, ToSchema)]
pub struct TokenQuery {
    /// The access or refresh token.
    #[serde(default)]
    #[schema(required = true, min_length = 1)]
    pub token: String,
    #[serde(default)]
    pub token_type_hint: Option<String>,
    #[serde(default)]
    pub client_id: Option<String>,
    #[serde(default)]
    pub client_secret: Option<String>,
}

fn parse_query(headers: &HeaderMap, body: &[u8]) -> Result<TokenQuery, OAuthError> {
    let q: TokenQuery = parse_body(headers, body)?;
    if q.token.is_empty() {
        return Err(OAuthError::invalid_request("token is required"));
    }
    // No value here may hold a NUL (the schema's rule for every string): refused even where
    // the field is not used, as for a service admin's introspection with a stray client_secret.
    let fields = [Some(&q.token), q.token_type_hint.as_ref(), q.client_id.as_ref(), q.client_secret.as_ref()];
    if fields.into_iter().flatten().any(|v| v.contains('\0')) {
        return Err(OAuthError::invalid_request("a value holds a NUL character"));
    }
    Ok(q)
}

/// The client's credentials: HTTP Basic, else the body's.
fn client_of(headers: &HeaderMap, q: &TokenQuery) -> Option<(String, Option<String>, bool)> {
    match basic_credentials(headers) {
        Some((id, secret)) => Some((id, Some(secret), true)),
        None => q.client_id.clone().map(|id| (id, q.client_secret.clone(), false)),
    }
}

/// A failure as answered: `invalid_client` is 401 when the client authenticated with HTTP
/// Basic and 400 when its credentials came in the body (RFC 6749 §5.2).
fn oauth_failure(e: Failure, basic: bool) -> Response {
    match e {
        Failure::OAuth(e) if e.error == "invalid_client" && !basic => {
            rfc_error(&OAuthError { status: 400, ..e })
        }
        Failure::OAuth(e) => rfc_error(&e),
        Failure::Service(e) => ApiError::from(e).into_response(),
    }
}

/// Token revocation (RFC 7009): the client ends one of its access or refresh tokens, and with
/// it the whole grant. An unknown token is answered 200 too (§2.2).
#[utoipa::path(post, path = "/oauth/revoke", tag = "oauth",
    request_body(content = TokenQuery, content_type = "application/x-www-form-urlencoded"),
    responses(
        (status = 200, description = "Revoked, or nothing to revoke", body = Object),
        (status = 400, description = "RFC 6749 §5.2 error", body = OAuthErrorResponse),
        (status = 401, description = "invalid_client (HTTP Basic)", body = OAuthErrorResponse),
    ))]
pub async fn revoke(State(state): State<AppState>, headers: HeaderMap, body: Bytes) -> Response {
    let q = match parse_query(&headers, &body) {
        Ok(q) => q,
        Err(e) => return rfc_error(&e),
    };
    let Some((id, secret, basic)) = client_of(&headers, &q) else {
        return rfc_error(&OAuthError::invalid_client("client credentials are required"));
    };
    match crate::oauth::revoke::revoke(&state.identity, &id, secret.as_deref(), &q.token).await {
        Ok(()) => Json(json!({})).into_response(),
        Err(e) => oauth_failure(e, basic),
    }
}

/// Token introspection (RFC 7662) for confidential clients (their own tokens) and service
/// admins (a Bearer token with the service-admin permission: any token).
#[utoipa::path(post, path = "/oauth/introspect", tag = "oauth",
    request_body(content = TokenQuery, content_type = "application/x-www-form-urlencoded"),
    responses(
        (status = 200, description = "`{active, scope, client_id, username, sub, token_type, exp, iat}`", body = Object),
        (status = 400, description = "RFC 6749 §5.2 error", body = OAuthErrorResponse),
        (status = 401, description = "invalid_client", body = OAuthErrorResponse),
    ))]
pub async fn introspect(
    State(state): State<AppState>,
    ClientIp(ip): ClientIp,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    use crate::oauth::revoke::Introspector;
    let q = match parse_query(&headers, &body) {
        Ok(q) => q,
        Err(e) => return rfc_error(&e),
    };
    let client = client_of(&headers, &q);
    let caller = match &client {
        Some((id, Some(secret), _)) => Introspector::Client { id, secret },
        Some((_, None, basic)) => {
            return oauth_failure(
                OAuthError::invalid_client("a confidential client's secret is required").into(),
                *basic,
            )
        }
        None => {
            let bearer = headers.get(header::AUTHORIZATION).and_then(|v| v.to_str().ok());
            match crate::identity::bearer::authenticate(&state.identity, bearer, ip).await {
                Ok(p) if p.token.admin => Introspector::ServiceAdmin,
                _ => {
                    return rfc_error(&OAuthError::invalid_client(
                        "a confidential client or a service admin's token is required",
                    ))
                }
            }
        }
    };
    match crate::oauth::revoke::introspect(&state.identity, caller, &q.token).await {
        Ok(v) => Json(v).into_response(),
        Err(e) => oauth_failure(e, client.is_some_and(|c| c.2)),
    }
}

/// `GET /oauth/authorize` (RFC 6749 §4.1.1): the console's consent page, with the same query.
pub async fn authorize(RawQuery(query): RawQuery) -> Redirect {
    let query = query.map(|q| format!("?{q}")).unwrap_or_default();
    Redirect::to(&format!("/console/oauth/authorize{query}"))
}

/// The OpenID Connect issuer: `oauth.issuer`, or `http://` and the request's `Host`.
pub fn issuer(state: &AppState, headers: &HeaderMap) -> String {
    let configured = state.config.oauth.issuer.trim_end_matches('/');
    if !configured.is_empty() {
        return configured.to_string();
    }
    let host = headers.get(header::HOST).and_then(|h| h.to_str().ok()).unwrap_or("127.0.0.1");
    let host: String = host
        .chars()
        .filter(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '-' | ':' | '[' | ']'))
        .collect();
    format!("http://{host}")
}

/// OpenID Connect Discovery 1.0: the provider's configuration.
#[utoipa::path(get, path = "/.well-known/openid-configuration", tag = "oauth",
    responses((status = 200, description = "The discovery document (OIDC Discovery 1.0 §3)", body = Object)))]
pub async fn discovery(State(state): State<AppState>, headers: HeaderMap) -> Json<Value> {
    Json(crate::oauth::oidc::discovery(&issuer(&state, &headers)))
}

/// The keys id_tokens are signed with (RFC 7517 JWK Set); a rotated-out key stays until what it
/// signed has expired.
#[utoipa::path(get, path = "/oauth/jwks", tag = "oauth",
    responses(
        (status = 200, description = "`{keys: [JWK]}`", body = Object),
        (status = 503, description = "The database is unavailable", body = super::ErrorResponse),
    ))]
pub async fn jwks(State(state): State<AppState>) -> super::error::ApiResult<Json<Value>> {
    Ok(Json(crate::oauth::oidc::jwks(&state.identity).await?))
}

/// OpenID Connect userinfo (OIDC Core §5.3): the claims of the token's user its scopes
/// release. Needs a token with `openid`.
#[utoipa::path(get, path = "/oauth/userinfo", tag = "oauth", security(("bearer" = [])),
    responses(
        (status = 200, description = "`{sub, email?, email_verified?, name?, enterprises?}`", body = Object),
        (status = 401, description = "Not authenticated", body = super::ErrorResponse),
        (status = 403, description = "The token lacks `openid`", body = super::ErrorResponse),
    ))]
pub async fn userinfo(
    State(state): State<AppState>,
    super::auth::Auth(auth): super::auth::Auth,
) -> super::error::ApiResult<Json<Value>> {
    let scopes: Vec<String> = auth.token.scopes.iter().map(|g| g.to_scope_string()).collect();
    if !scopes.iter().any(|s| s == "openid" || s == "all") {
        return Err(crate::error::Error::Forbidden {
            name: crate::error::ErrorName::InsufficientScope,
            message: "userinfo needs a token with the openid scope".into(),
            context: json!({ "requiredScope": "openid" }),
        }
        .into());
    }
    Ok(Json(crate::oauth::oidc::user_claims(&state.store, &auth.user, &scopes).await?))
}
