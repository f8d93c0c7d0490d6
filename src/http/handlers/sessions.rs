//! Token and session lifecycle routes (docs/decisions.md#token-and-session-lifecycle; BitGo's paths): list and revoke the
//! caller's tokens, the calling session's view, unlock, lock, extension and logout, and token
//! templates. Each handler calls one function of `crate::identity::sessions`.

use axum::{extract::State, Json};
use serde::{Deserialize, Serialize};
use serde_json::{json, Value};
use utoipa::{IntoParams, ToSchema};

use super::identity::{unlock_view, AccessTokenResponse};
use crate::{
    custody::history,
    http::{
        auth::Auth,
        error::ApiResult,
        extract::{ApiJson, ApiPath, ApiQuery},
        ErrorResponse,
    },
    identity::sessions::{self, templates, DEFAULT_TOKEN_LIMIT, MAX_TOKEN_LIMIT},
    model::token::{SortOrder, TokenRecord, TokenTemplate},
    paging::PageRequest,
    types::{AnyId, TokenId, UserId},
    AppState,
};

/// `sort` of a token list: by creation time.
#[derive(Debug, Clone, Copy, Deserialize, ToSchema)]
pub enum Sort {
    #[serde(rename = "ASC")]
    Asc,
    #[serde(rename = "DESC")]
    Desc,
}

/// Paging of the token list.
#[derive(Debug, Deserialize, IntoParams)]
#[serde(rename_all = "camelCase")]
#[into_params(parameter_in = Query)]
pub struct TokenPaging {
    /// 1 to 200; 25 when absent.
    #[param(minimum = 1, maximum = 200)]
    pub limit: Option<u32>,
    /// The last token id of the previous page (`nextBatchPrevId`).
    pub prev_id: Option<AnyId>,
    /// `ASC` (default) or `DESC` by creation time.
    #[param(inline)]
    pub sort: Option<Sort>,
}

/// `{accessTokens, nextBatchPrevId}`: tokens without their secrets.
#[derive(Debug, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct TokenList {
    pub access_tokens: Vec<AccessTokenResponse>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub next_batch_prev_id: Option<String>,
}

/// Lists the caller's tokens that are neither revoked nor expired. Needs `user_manage`.
#[utoipa::path(get, path = "/api/v2/user/accesstoken", tag = "identity",
    security(("bearer" = [])), params(TokenPaging),
    responses((status = 200, body = TokenList),
        (status = 400, description = "A bad query value", body = ErrorResponse),
        (status = 403, description = "The token lacks user_manage", body = ErrorResponse),))]
pub async fn list_tokens(
    State(state): State<AppState>,
    Auth(auth): Auth,
    ApiQuery(q): ApiQuery<TokenPaging>,
) -> ApiResult<Json<TokenList>> {
    let prev = q.prev_id;
    let page = PageRequest::bounded(q.limit, prev, DEFAULT_TOKEN_LIMIT, MAX_TOKEN_LIMIT)?;
    let order = match q.sort {
        Some(Sort::Desc) => SortOrder::Descending,
        _ => SortOrder::Ascending,
    };
    let page = sessions::list_tokens(&state.identity, &auth, &page, order).await?;
    let now = state.store.clock().now();
    Ok(Json(TokenList {
        access_tokens: page.items.into_iter().map(|t| AccessTokenResponse::new(None, t, now)).collect(),
        next_batch_prev_id: page.next_batch_prev_id,
    }))
}

/// Revokes one of the caller's tokens: it is refused from the next request on, on every
/// process. Returns the token with `expires` now. Needs `user_manage`.
#[utoipa::path(delete, path = "/api/v2/user/accesstoken/{id}", tag = "identity",
    security(("bearer" = [])), params(("id" = TokenId, Path)),
    responses((status = 200, description = "The revoked token (§2.4, no secret)", body = AccessTokenResponse),
        (status = 400, description = "A bad path value", body = ErrorResponse),
        (status = 403, description = "The token lacks user_manage", body = ErrorResponse),
        (status = 404, description = "No such token of this user (TokenNotFound)", body = ErrorResponse),))]
pub async fn revoke_token(
    State(state): State<AppState>,
    Auth(auth): Auth,
    ApiPath(id): ApiPath<TokenId>,
) -> ApiResult<Json<AccessTokenResponse>> {
    let t = sessions::revoke_token(&state.identity, &auth, &id).await?;
    Ok(Json(AccessTokenResponse::new(None, t, state.store.clock().now())))
}

/// The calling token's session.
#[derive(Debug, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct SessionView {
    /// The token's id.
    pub id: TokenId,
    /// Address of the client that created the token.
    pub ip: String,
    pub user: UserId,
    pub scope: Vec<String>,
    /// ISO 8601.
    pub created: String,
    /// ISO 8601.
    pub expires: String,
    pub origin: String,
    pub is_extensible: bool,
    /// How the session was granted (§2.2 `grant_type`): `password`, `passkey`,
    /// `authorization_code`, `refresh_token`, or `oauth` (single sign-on through the
    /// enterprise's identity provider, docs/sso.md); named as in the login result.
    #[serde(rename = "grant_type")]
    pub grant_type: String,
    /// `{time, expires}` (ISO 8601) while unlocked, with `txCount` and `txValue` (base units,
    /// a string past 2^53) of the withdrawals the session started since; and the token's
    /// `spendingLimits`.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(value_type = Option<Object>)]
    pub unlock: Option<Value>,
    /// For a single sign-on session (`grant_type: "oauth"`): the provider, `okta`, `msEntra`
    /// or `oidc` (docs/sso.md#sessions).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub sso_provider: Option<String>,
    /// For a single sign-on session: `{oauthRequired, expires}`, whether the enterprise
    /// requires single sign-on and when the session ends (ISO 8601).
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(value_type = Option<Object>)]
    pub oauth: Option<Value>,
}

/// `{session}`.
#[derive(Debug, Serialize, ToSchema)]
pub struct SessionResponse {
    pub session: SessionView,
}

impl SessionResponse {
    /// `now`: Unix seconds on the service's clock, which an unlock's end is compared with.
    /// `spent`: the withdrawals made under the unlock (`txCount`, `txValue` in base units).
    fn new(
        t: TokenRecord,
        now: i64,
        spent: Option<(u64, alloy_primitives::U256)>,
        sso: Option<(String, bool)>,
    ) -> Json<Self> {
        let mut unlock = unlock_view(&t, now);
        if let (Some(Value::Object(u)), Some((count, value))) = (unlock.as_mut(), spent) {
            u.insert("txCount".into(), json!(count));
            let value = match u64::try_from(value) {
                Ok(v) if v < 1 << 53 => json!(v),
                _ => json!(value.to_string()),
            };
            u.insert("txValue".into(), value);
        }
        Json(SessionResponse {
            session: SessionView {
                unlock,
                id: t.id,
                ip: t.ip.unwrap_or_default(),
                user: t.user_id,
                scope: t.scopes.iter().map(|g| g.to_scope_string()).collect(),
                created: crate::clock::iso(t.created_at),
                expires: crate::clock::iso(t.expires_at),
                origin: t.origin,
                is_extensible: t.is_extensible,
                grant_type: t.grant_type.as_str().into(),
                oauth: sso.as_ref().map(|(_, required)| {
                    json!({ "oauthRequired": required, "expires": crate::clock::iso(t.expires_at) })
                }),
                sso_provider: sso.map(|(provider, _)| provider),
            },
        })
    }
}

/// A single sign-on session's provider and whether it is required; `None` for other grants.
async fn sso_facts(
    state: &AppState,
    auth: &crate::identity::bearer::Principal,
) -> ApiResult<Option<(String, bool)>> {
    match auth.token.grant_type {
        crate::model::token::GrantType::Oauth => {
            Ok(crate::identity::sso_required::provider_of(&state.identity, &auth.user.id).await?)
        }
        _ => Ok(None),
    }
}

/// The calling token's session.
#[utoipa::path(get, path = "/api/v2/user/session", tag = "identity", security(("bearer" = [])),
    responses((status = 200, body = SessionResponse)))]
pub async fn session(State(state): State<AppState>, Auth(auth): Auth) -> ApiResult<Json<SessionResponse>> {
    let now = state.store.clock().now();
    let spent = history::unlock_totals(&state.custody, &auth.token, now).await?;
    let sso = sso_facts(&state, &auth).await?;
    Ok(SessionResponse::new((*auth.token).clone(), now, spent, sso))
}

/// Body of an unlock.
#[derive(Debug, Deserialize, Serialize, ToSchema)]
pub struct UnlockRequest {
    /// Six digits (RFC 6238), or the JSON of a passkey assertion answering
    /// `GET /api/v2/user/otp/webauthn/auth`; counts toward the OTP failure limit.
    #[schema(pattern = r"^([0-9]{6}|\{.*)$", max_length = 16384)]
    pub otp: String,
    /// Seconds, 1 to 3600; 600 when absent.
    #[schema(minimum = 1, maximum = 3600)]
    pub duration: Option<u64>,
}

/// Unlocks the calling session for `duration` seconds after an OTP check.
#[utoipa::path(post, path = "/api/v2/user/unlock", tag = "identity", security(("bearer" = [])),
    request_body = UnlockRequest,
    responses((status = 200, body = SessionResponse),
        (status = 400, description = "A bad field; context.field names it", body = ErrorResponse),
        (status = 401, description = "Not authenticated, or a wrong OTP (InvalidOtp)", body = ErrorResponse),
        (status = 403, description = "A 2FA-reset token", body = ErrorResponse)))]
pub async fn unlock(
    State(state): State<AppState>,
    Auth(auth): Auth,
    ApiJson(req): ApiJson<UnlockRequest>,
) -> ApiResult<Json<SessionResponse>> {
    let t = sessions::unlock(&state.identity, &auth, &req.otp, req.duration).await?;
    let sso = sso_facts(&state, &auth).await?;
    Ok(SessionResponse::new(t, state.store.clock().now(), Some((0, alloy_primitives::U256::ZERO)), sso))
}

/// Ends the calling session's unlock.
#[utoipa::path(post, path = "/api/v2/user/lock", tag = "identity", security(("bearer" = [])),
    responses((status = 200, body = SessionResponse)))]
pub async fn lock(State(state): State<AppState>, Auth(auth): Auth) -> ApiResult<Json<SessionResponse>> {
    let sso = sso_facts(&state, &auth).await?;
    Ok(SessionResponse::new(
        sessions::lock(&state.identity, &auth).await?,
        state.store.clock().now(),
        None,
        sso,
    ))
}

/// Body of an extension.
#[derive(Debug, Deserialize, Serialize, ToSchema)]
pub struct ExtendRequest {
    /// Seconds from now; capped at `login.session_max_ttl` after the token's creation.
    #[schema(minimum = 1)]
    pub duration: u64,
}

/// Extends the calling token, when it was created extensible (login with `extensible: true`).
/// A session made by BitGoJS with an `extensionAddress` needs the `timestamp` (Unix ms) and
/// `signature` (hex Bitcoin signed message of `{timestamp}|{token}|{duration}`) headers.
#[utoipa::path(post, path = "/api/v2/user/extendtoken", tag = "identity", security(("bearer" = [])),
    request_body = ExtendRequest,
    responses((status = 200, description = "The token (§2.4, no secret)", body = AccessTokenResponse),
        (status = 400, description = "A bad duration", body = ErrorResponse),
        (status = 409, description = "The token was not created extensible (TokenNotExtensible)", body = ErrorResponse),
        (status = 401, description = "Not authenticated, or a missing or wrong extension signature", body = ErrorResponse)))]
pub async fn extend_token(
    State(state): State<AppState>,
    headers: axum::http::HeaderMap,
    Auth(auth): Auth,
    ApiJson(req): ApiJson<ExtendRequest>,
) -> ApiResult<Json<AccessTokenResponse>> {
    let text = |name: &str| headers.get(name).and_then(|v| v.to_str().ok());
    let proof = match (text("timestamp"), text("signature")) {
        (Some(timestamp), Some(signature)) => Some(sessions::ExtensionProof { timestamp, signature }),
        _ => None,
    };
    let t = sessions::extend(&state.identity, &auth, req.duration, proof).await?;
    Ok(Json(AccessTokenResponse::new(None, t, state.store.clock().now())))
}

/// `{}`.
#[derive(Debug, Serialize, ToSchema)]
pub struct Empty {}

/// Revokes the calling token.
#[utoipa::path(get, path = "/api/v2/user/logout", tag = "identity", security(("bearer" = [])),
    responses((status = 200, body = Empty)))]
pub async fn logout(State(state): State<AppState>, Auth(auth): Auth) -> ApiResult<Json<Empty>> {
    sessions::logout(&state.identity, &auth).await?;
    Ok(Json(Empty {}))
}

/// Revokes the calling token (the POST form).
#[utoipa::path(post, path = "/api/v2/user/logout", tag = "identity", security(("bearer" = [])),
    responses((status = 200, body = Empty)))]
pub async fn logout_post(state: State<AppState>, auth: Auth) -> ApiResult<Json<Empty>> {
    logout(state, auth).await
}

/// An access token template.
#[derive(Debug, Serialize, ToSchema)]
pub struct TemplateResponse {
    pub id: AnyId,
    /// ISO 8601.
    pub created: String,
    /// The §4.3 request fields it supplies.
    #[schema(value_type = Object)]
    pub fields: Value,
}

impl From<TokenTemplate> for TemplateResponse {
    fn from(t: TokenTemplate) -> Self {
        TemplateResponse { id: t.id, created: crate::clock::iso(t.created_at), fields: t.fields }
    }
}

/// `{templates, nextBatchPrevId}`.
#[derive(Debug, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct TemplateList {
    pub templates: Vec<TemplateResponse>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub next_batch_prev_id: Option<String>,
}

/// Creates a token template from §4.3 fields (`scope`, `label`, `duration`, `ipRestrict`,
/// `enterprise`, `spendingLimits`, `permittedEnterprises`, `permittedWallets`). Service admins.
#[utoipa::path(post, path = "/api/v2/user/accesstokentemplate", tag = "identity",
    security(("bearer" = [])), request_body(content = Object, description = "Template fields"),
    responses((status = 200, body = TemplateResponse),
        (status = 400, description = "A field is not allowed or invalid", body = ErrorResponse),
        (status = 403, description = "Not a service admin", body = ErrorResponse)))]
pub async fn create_template(
    State(state): State<AppState>,
    Auth(auth): Auth,
    ApiJson(fields): ApiJson<Value>,
) -> ApiResult<Json<TemplateResponse>> {
    Ok(Json(templates::create(&state.identity, &auth, fields).await?.into()))
}

/// Lists token templates by id. Service admins.
#[utoipa::path(get, path = "/api/v2/user/accesstokentemplate", tag = "identity",
    security(("bearer" = [])), params(super::webhooks::Paging),
    responses((status = 200, body = TemplateList),
        (status = 400, description = "A bad query value", body = ErrorResponse),
        (status = 403, description = "Not a service admin", body = ErrorResponse),))]
pub async fn list_templates(
    State(state): State<AppState>,
    Auth(auth): Auth,
    ApiQuery(paging): ApiQuery<super::webhooks::Paging>,
) -> ApiResult<Json<TemplateList>> {
    let page = templates::list(&state.identity, &auth, &paging.checked()?).await?;
    Ok(Json(TemplateList {
        templates: page.items.into_iter().map(Into::into).collect(),
        next_batch_prev_id: page.next_batch_prev_id,
    }))
}

/// One token template. Service admins.
#[utoipa::path(get, path = "/api/v2/user/accesstokentemplate/{id}", tag = "identity",
    security(("bearer" = [])), params(("id" = AnyId, Path)),
    responses((status = 200, body = TemplateResponse),
        (status = 400, description = "A bad path value", body = ErrorResponse),
        (status = 403, description = "Not a service admin", body = ErrorResponse),
        (status = 404, description = "TemplateNotFound", body = ErrorResponse),))]
pub async fn get_template(
    State(state): State<AppState>,
    Auth(auth): Auth,
    ApiPath(id): ApiPath<AnyId>,
) -> ApiResult<Json<TemplateResponse>> {
    Ok(Json(templates::get(&state.identity, &auth, &id).await?.into()))
}

/// Removes a token template; returns it. Service admins.
#[utoipa::path(delete, path = "/api/v2/user/accesstokentemplate/{id}", tag = "identity",
    security(("bearer" = [])), params(("id" = AnyId, Path)),
    responses((status = 200, body = TemplateResponse),
        (status = 400, description = "A bad path value", body = ErrorResponse),
        (status = 403, description = "Not a service admin", body = ErrorResponse),
        (status = 404, description = "TemplateNotFound", body = ErrorResponse),))]
pub async fn delete_template(
    State(state): State<AppState>,
    Auth(auth): Auth,
    ApiPath(id): ApiPath<AnyId>,
) -> ApiResult<Json<TemplateResponse>> {
    Ok(Json(templates::delete(&state.identity, &auth, &id).await?.into()))
}
