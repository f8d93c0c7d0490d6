//! An enterprise's identity provider for single sign-on (docs/sso.md#the-provider), Custodian's
//! own route `PUT`, `GET` and `DELETE /api/v2/enterprise/{enterpriseId}/oauthSetting`, with
//! BitGo's `oauthSetting` shapes.

use axum::{extract::State, http::StatusCode, Json};
use serde_json::Value;

use crate::{
    http::{
        auth::Auth,
        error::ApiResult,
        extract::{ApiJson, ApiPath},
        ErrorResponse,
    },
    identity::sso_settings::{self, OAuthSetting},
    types::EnterpriseId,
    AppState,
};

/// Sets the enterprise's identity provider: `{oauthProvider: "okta", oktaDomain}`,
/// `{oauthProvider: "msEntra", tenantId}` or `{oauthProvider: "oidc", issuer}` (https; http too
/// in the test environment), each with `clientId` and `clientSecret`; optionally `scopes`
/// (beside `openid`; default `email profile`), `groupsClaim` and `groupRoles` (a claim value to
/// `admin` or `member`; a person with none is refused). Replaces the one set before. Needs an
/// admin of the enterprise whose token has `enterprise_manage_all`. Answers the setting without
/// the secret, which is never shown again.
#[utoipa::path(put, path = "/api/v2/enterprise/{enterpriseId}/oauthSetting", tag = "sso", security(("bearer" = [])),
    params(("enterpriseId" = EnterpriseId, Path, description = "Enterprise id, 32 hex")),
    request_body = OAuthSetting,
    responses(
        (status = 200, description = "The setting, without `clientSecret`", body = OAuthSetting),
        (status = 400, description = "A missing or bad field (`MissingField`, `InvalidField` naming it)", body = ErrorResponse),
        (status = 403, description = "No enterprise_manage_all, or not an admin of the enterprise", body = ErrorResponse),
        (status = 404, description = "Not a member of the enterprise (`EnterpriseNotFound`)", body = ErrorResponse),
    ))]
pub async fn set_oauth_setting(
    State(state): State<AppState>,
    Auth(auth): Auth,
    ApiPath(enterprise): ApiPath<EnterpriseId>,
    ApiJson(body): ApiJson<Value>,
) -> ApiResult<Json<Value>> {
    Ok(Json(sso_settings::set(&state.identity, &auth, &enterprise, &body).await?))
}

/// The enterprise's identity provider, without its secret.
#[utoipa::path(get, path = "/api/v2/enterprise/{enterpriseId}/oauthSetting", tag = "sso", security(("bearer" = [])),
    params(("enterpriseId" = EnterpriseId, Path, description = "Enterprise id, 32 hex")),
    responses(
        (status = 200, description = "The setting, without `clientSecret`", body = OAuthSetting),
        (status = 403, description = "No enterprise_manage_all, or not an admin of the enterprise", body = ErrorResponse),
        (status = 404, description = "None set (`SsoNotConfigured`), or not a member (`EnterpriseNotFound`)", body = ErrorResponse),
    ))]
pub async fn get_oauth_setting(
    State(state): State<AppState>,
    Auth(auth): Auth,
    ApiPath(enterprise): ApiPath<EnterpriseId>,
) -> ApiResult<Json<Value>> {
    Ok(Json(sso_settings::get(&state.identity, &auth, &enterprise).await?))
}

/// Removes the enterprise's identity provider; its members sign in as before it. 204.
#[utoipa::path(delete, path = "/api/v2/enterprise/{enterpriseId}/oauthSetting", tag = "sso", security(("bearer" = [])),
    params(("enterpriseId" = EnterpriseId, Path, description = "Enterprise id, 32 hex")),
    responses(
        (status = 204, description = "Removed"),
        (status = 403, description = "No enterprise_manage_all, or not an admin of the enterprise", body = ErrorResponse),
        (status = 404, description = "None set (`SsoNotConfigured`), or not a member (`EnterpriseNotFound`)", body = ErrorResponse),
    ))]
pub async fn remove_oauth_setting(
    State(state): State<AppState>,
    Auth(auth): Auth,
    ApiPath(enterprise): ApiPath<EnterpriseId>,
) -> ApiResult<StatusCode> {
    sso_settings::remove(&state.identity, &auth, &enterprise).await?;
    Ok(StatusCode::NO_CONTENT)
}
