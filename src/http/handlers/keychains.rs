//! The routes BitGoJS's `authenticate({ensureEcdhKeychain: true})` calls: the user's settings
//! (`GET /api/v1/user/settings`, `PUT /api/v2/user/settings`) and keychain creation
//! (`POST /api/v1/keychain`, ECDH keychains only). Each handler calls one function of
//! `crate::identity::keychains`.

use axum::{extract::State, Json};
use serde::{Deserialize, Serialize};
use serde_json::{json, Value};
use utoipa::ToSchema;

use crate::{
    http::{auth::Auth, error::ApiResult, extract::ApiJson, ErrorResponse},
    identity::keychains::{self, Settings},
    AppState,
};

fn settings_json(s: &Settings) -> Value {
    let mut settings = json!({});
    if let Some(xpub) = &s.ecdh_keychain {
        settings["ecdhKeychain"] = json!(xpub);
    }
    json!({ "settings": settings })
}

/// The caller's settings, as BitGo serves them: `{settings: {ecdhKeychain?}}`.
#[utoipa::path(get, path = "/api/v2/user/settings", tag = "identity",
    security(("bearer" = [])),
    responses(
        (status = 200, description = "`{settings: {ecdhKeychain?}}`", body = Object),
        (status = 401, description = "Not authenticated", body = ErrorResponse),
        (status = 403, description = "The token lacks `profile`", body = ErrorResponse),
    ))]
pub async fn user_settings(State(state): State<AppState>, Auth(auth): Auth) -> ApiResult<Json<Value>> {
    Ok(Json(settings_json(&keychains::settings(&state.identity, &auth).await?)))
}

/// The settings a client may change.
#[derive(Debug, Deserialize, Serialize, ToSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct SettingsChange {
    /// The xpub of a keychain the caller added (`POST /api/v1/keychain`).
    #[schema(max_length = 200)]
    pub ecdh_keychain: String,
}

/// `{settings: {...}, otp?}`.
#[derive(Debug, Deserialize, Serialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct SettingsRequest {
    pub settings: SettingsChange,
    /// A fresh TOTP code or passkey assertion: needed unless the session's login was within
    /// `login.fresh_factor_secs` or the session is unlocked.
    #[schema(max_length = 8192)]
    pub otp: Option<String>,
}

/// Sets the caller's `ecdhKeychain` (audited as `user.ecdh_keychain_set`).
#[utoipa::path(put, path = "/api/v2/user/settings", tag = "identity",
    security(("bearer" = [])),
    request_body = SettingsRequest,
    responses(
        (status = 200, description = "`{settings: {ecdhKeychain}}`", body = Object),
        (status = 400, description = "Not a settings object", body = ErrorResponse),
        (status = 401, description = "Not authenticated, or no fresh second factor (InvalidOtp)", body = ErrorResponse),
        (status = 403, description = "The token lacks `user_manage`", body = ErrorResponse),
        (status = 404, description = "No keychain of the caller's has that xpub (NotFound)", body = ErrorResponse),
    ))]
pub async fn update_settings(
    State(state): State<AppState>,
    Auth(auth): Auth,
    ApiJson(req): ApiJson<SettingsRequest>,
) -> ApiResult<Json<Value>> {
    let otp = req.otp.as_deref();
    let set = keychains::set_ecdh_keychain(&state.identity, &auth, &req.settings.ecdh_keychain, otp).await?;
    Ok(Json(settings_json(&set)))
}

/// A keychain to keep: BitGoJS's `keychains().add` for an ECDH keychain.
#[derive(Debug, Deserialize, Serialize, ToSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct KeychainRequest {
    /// Only `ecdh` (the default: BitGoJS's v1 `keychains().add` leaves it out).
    #[schema(max_length = 20)]
    pub source: Option<String>,
    /// BitGo's keychain type; not used.
    #[serde(rename = "type")]
    #[schema(max_length = 50)]
    pub keychain_type: Option<String>,
    /// Not used.
    #[schema(max_length = 200)]
    pub original_passcode_encryption_code: Option<String>,
    /// A hardware key is not kept: `true` is refused.
    pub is_ledger: Option<bool>,
    /// A BIP32 xpub.
    #[schema(max_length = 200)]
    pub xpub: String,
    /// The xprv as the client encrypted it under the user's password (BitGo's envelope).
    #[schema(max_length = 8192)]
    pub encrypted_xprv: String,
    /// A fresh TOTP code or passkey assertion: needed unless the session's login was within
    /// `login.fresh_factor_secs` or the session is unlocked.
    #[schema(max_length = 8192)]
    pub otp: Option<String>,
}

/// Keeps an ECDH keychain of the caller's (audited as `user.ecdh_keychain_added`); the xprv
/// stays encrypted by the client.
#[utoipa::path(post, path = "/api/v1/keychain", tag = "identity",
    security(("bearer" = [])),
    request_body = KeychainRequest,
    responses(
        (status = 200, description = "`{id, source, xpub, encryptedXprv}`", body = Object),
        (status = 400, description = "Not an ecdh keychain, an xpub or an envelope", body = ErrorResponse),
        (status = 401, description = "Not authenticated, or no fresh second factor (InvalidOtp)", body = ErrorResponse),
        (status = 403, description = "The token lacks `user_manage`", body = ErrorResponse),
    ))]
pub async fn add_keychain(
    State(state): State<AppState>,
    Auth(auth): Auth,
    ApiJson(req): ApiJson<KeychainRequest>,
) -> ApiResult<Json<Value>> {
    if req.is_ledger == Some(true) {
        return Err(crate::error::Error::invalid_field("isLedger", "hardware keys are not kept").into());
    }
    let source = req.source.as_deref().unwrap_or("ecdh");
    let (xpub, xprv, otp) = (&req.xpub, &req.encrypted_xprv, req.otp.as_deref());
    let k = keychains::add_keychain(&state.identity, &auth, source, xpub, xprv, otp).await?;
    // BitGo's keychain id; here the xpub names it (a user keeps one keychain per xpub).
    let id = &crate::digest::sha256_hex(k.xpub.as_bytes())[..32];
    Ok(Json(json!({ "id": id, "source": "ecdh", "xpub": k.xpub, "encryptedXprv": k.encrypted_xprv })))
}
