//! Passkeys on BitGo's paths: an OTP device of type `webauthn` (register, add, remove, an
//! assertion challenge for a signed-in user) and the sign-in challenge. Each handler calls one
//! function of `crate::identity::passkeys` or `crate::identity::passkey_login`; sign-in itself
//! is `POST /api/auth/v1/session` (`super::identity::session_login`).

use axum::{extract::State, Json};
use serde::{Deserialize, Serialize};
use serde_json::{json, Value};
use utoipa::ToSchema;

use crate::{
    error::Error,
    http::{
        auth::Auth,
        error::ApiResult,
        extract::{ApiJson, ApiPath, ClientIp},
        ErrorResponse,
    },
    identity::{passkey_login, passkeys},
    model::passkey::PasskeyRecord,
    types::AnyId,
    AppState,
};

/// A passkey as `otpDevices` lists it.
pub fn device_json(p: &PasskeyRecord) -> Value {
    json!({
        "id": p.id,
        "type": "webauthn",
        "label": p.label,
        "verified": true,
        "created": crate::clock::iso(p.created_at),
        "lastUsed": p.last_used_at.map(crate::clock::iso),
    })
}

/// Creation options for a new passkey (`{publicKey}`: WebAuthn's
/// `PublicKeyCredentialCreationOptions`, binary fields base64url), answered with
/// `PUT /api/v2/user/otp` before `passkeys.challenge_ttl` seconds pass.
#[utoipa::path(get, path = "/api/v2/user/otp/webauthn/register", tag = "identity",
    security(("bearer" = [])),
    responses(
        (status = 200, description = "`{publicKey}` creation options", body = Object),
        (status = 401, description = "Not authenticated", body = ErrorResponse),
        (status = 403, description = "The token lacks `user_manage`", body = ErrorResponse),
        (status = 503, description = "Too many ceremonies waiting (ServerBusy)", body = ErrorResponse),
    ))]
pub async fn register_options(State(state): State<AppState>, Auth(auth): Auth) -> ApiResult<Json<Value>> {
    Ok(Json(passkeys::registration_options(&state.identity, &auth).await?))
}

/// `PUT /api/v2/user/otp`: adds an OTP device; only passkeys (`type: "webauthn"`) are added here.
#[derive(Debug, Deserialize, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct AddDeviceRequest {
    /// `webauthn`.
    #[serde(rename = "type")]
    #[schema(pattern = "^webauthn$")]
    pub device_type: String,
    /// The JSON of `navigator.credentials.create()`'s credential.
    #[schema(max_length = 16384)]
    pub otp: String,
    /// At most 100 characters; "Passkey" when absent.
    #[serde(default)]
    #[schema(max_length = 100)]
    pub label: Option<String>,
    /// A fresh factor of the caller's: six TOTP digits, or the JSON of a passkey assertion
    /// answering `GET /api/v2/user/otp/webauthn/auth`.
    #[serde(default)]
    #[schema(pattern = r"^([0-9]{6}|\{.*)$", max_length = 16384)]
    pub verification_otp: Option<String>,
}

/// Adds a passkey answering the caller's registration challenge, after a fresh OTP or passkey
/// assertion (`verificationOtp`): a session alone cannot. Audited as `user.passkey_added`.
/// The answer is the device as `otpDevices` lists it.
#[utoipa::path(put, path = "/api/v2/user/otp", tag = "identity",
    security(("bearer" = [])),
    request_body = AddDeviceRequest,
    responses(
        (status = 200, description = "The passkey, as an OTP device", body = Object),
        (status = 400, description = "Not a webauthn device, or a credential that does not verify", body = ErrorResponse),
        (status = 401, description = "Not authenticated, or no fresh factor (InvalidOtp)", body = ErrorResponse),
        (status = 403, description = "The token lacks `user_manage`", body = ErrorResponse),
        (status = 409, description = "Registered already, or passkeys.max_per_user reached", body = ErrorResponse),
        (status = 429, description = "Too many wrong one-time passwords", body = ErrorResponse),
    ))]
pub async fn add_device(
    State(state): State<AppState>,
    Auth(auth): Auth,
    ApiJson(req): ApiJson<AddDeviceRequest>,
) -> ApiResult<Json<Value>> {
    if req.device_type != "webauthn" {
        return Err(Error::invalid_field("type", "only passkeys (webauthn) are added here").into());
    }
    let added = passkeys::add(
        &state.identity,
        &auth,
        &req.otp,
        req.label.as_deref(),
        req.verification_otp.as_deref(),
    )
    .await?;
    Ok(Json(device_json(&added)))
}

/// `DELETE /api/v2/user/otp/{id}`: the caller's fresh factor.
#[derive(Debug, Default, Deserialize, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct RemoveDeviceRequest {
    /// Six TOTP digits, or the JSON of a passkey assertion.
    #[serde(default)]
    #[schema(pattern = r"^([0-9]{6}|\{.*)$", max_length = 16384, example = "000000")]
    pub otp: Option<String>,
}

/// Removes the caller's passkey `id`, after a fresh OTP or passkey assertion in the body.
/// Audited as `user.passkey_removed`.
#[utoipa::path(delete, path = "/api/v2/user/otp/{id}", tag = "identity",
    security(("bearer" = [])),
    params(("id" = String, Path, description = "The passkey's id (32 hex)", pattern = "^[0-9a-f]{32}$")),
    request_body = Option<RemoveDeviceRequest>,
    responses(
        (status = 200, description = "`{id}` of the removed passkey", body = Object),
        (status = 400, description = "A bad path value", body = ErrorResponse),
        (status = 401, description = "Not authenticated, or no fresh factor (InvalidOtp)", body = ErrorResponse),
        (status = 403, description = "The token lacks `user_manage`", body = ErrorResponse),
        (status = 404, description = "No passkey of the caller's has this id", body = ErrorResponse),
        (status = 429, description = "Too many wrong one-time passwords", body = ErrorResponse),
    ))]
pub async fn remove_device(
    State(state): State<AppState>,
    Auth(auth): Auth,
    ApiPath(id): ApiPath<AnyId>,
    body: Option<ApiJson<RemoveDeviceRequest>>,
) -> ApiResult<Json<Value>> {
    let fresh = body.and_then(|ApiJson(b)| b.otp);
    passkeys::remove(&state.identity, &auth, &id, fresh.as_deref()).await?;
    Ok(Json(json!({ "id": id })))
}

/// Request options (`{publicKey}`) for an assertion by one of the caller's passkeys; the
/// assertion's JSON is then accepted wherever an OTP is (token creation, unlock, login, adding
/// or removing a passkey), once.
#[utoipa::path(get, path = "/api/v2/user/otp/webauthn/auth", tag = "identity",
    security(("bearer" = [])),
    responses(
        (status = 200, description = "`{publicKey}` request options", body = Object),
        (status = 401, description = "Not authenticated", body = ErrorResponse),
        (status = 403, description = "The token lacks `profile`", body = ErrorResponse),
        (status = 404, description = "The caller has no passkey", body = ErrorResponse),
        (status = 503, description = "Too many ceremonies waiting (ServerBusy)", body = ErrorResponse),
    ))]
pub async fn assertion_options(State(state): State<AppState>, Auth(auth): Auth) -> ApiResult<Json<Value>> {
    Ok(Json(passkeys::assertion_options(&state.identity, &auth).await?))
}

/// `POST /api/auth/v1/passkey/challenge`.
#[derive(Debug, Default, Deserialize, Serialize, ToSchema)]
pub struct ChallengeRequest {
    /// When given (not blank), only that user's passkeys can answer; the answer is the same
    /// either way.
    #[serde(default)]
    #[schema(max_length = 254, pattern = r"^\s*[^\s\x00-\x1f\x7f-\x9f]*\s*$")]
    pub email: Option<String>,
}

/// A sign-in challenge: request options (`{publicKey}`) for a discoverable passkey, answered
/// through `POST /api/auth/v1/session` with `{passkey, userId}` before
/// `passkeys.challenge_ttl` seconds pass.
#[utoipa::path(post, path = "/api/auth/v1/passkey/challenge", tag = "identity",
    request_body = Option<ChallengeRequest>,
    responses(
        (status = 200, description = "`{publicKey}` request options", body = Object),
        (status = 400, description = "Malformed email", body = ErrorResponse),
        (status = 429, description = "This client holds passkeys.max_pending_per_client challenges (TooManyRequests)", body = ErrorResponse),
        (status = 503, description = "Too many ceremonies waiting (ServerBusy)", body = ErrorResponse),
    ))]
pub async fn sign_in_challenge(
    State(state): State<AppState>,
    ClientIp(ip): ClientIp,
    body: Option<ApiJson<ChallengeRequest>>,
) -> ApiResult<Json<Value>> {
    let email = body.and_then(|ApiJson(b)| b.email);
    Ok(Json(passkey_login::challenge(&state.identity, email.as_deref(), ip).await?))
}
