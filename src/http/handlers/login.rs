//! Login routes: §4.2's internal login, BitGo's (`/api/auth/v1/session`, `/api/v2/user/login`)
//! with a password and OTP or a passkey, and the §2.2 login result, handed over in the clear or
//! ECDH-encrypted (`crate::identity::issuance`). Each handler calls one domain function of
//! `crate::identity::login` or `crate::identity::passkey_login`.

use axum::{
    extract::State,
    response::{IntoResponse, Response},
    Json,
};
use serde::{Deserialize, Serialize};
use serde_json::Value;
use utoipa::ToSchema;

use super::identity::{user_response, UserResponse};
use crate::{
    http::{
        error::ApiResult,
        extract::{ApiJson, ClientIp},
        hmac_edge::Handover,
        ErrorResponse,
    },
    identity::{self, login::Credentials},
    types::TokenId,
    AppState,
};

/// Request body of §4.2.
#[derive(Debug, Deserialize, ToSchema, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct LoginRequest {
    /// 1 to 254 characters, without white space or control characters (surrounding white
    /// space is trimmed).
    #[schema(min_length = 1, max_length = 254, pattern = r"^\s*[^\s\x00-\x1f\x7f-\x9f]+\s*$")]
    pub email: String,
    /// Six digits (RFC 6238), or the JSON of a passkey assertion. Required by §4.2; when absent
    /// the answer is 401 with `needsOTP: true`.
    #[serde(default)]
    #[schema(pattern = r"^([0-9]{6}|\{.*)$", max_length = 16384)]
    pub otp: Option<String>,
    /// At most 1,024 bytes (the schema states 256 characters, which always fit).
    #[schema(max_length = 256)]
    pub password: String,
    #[serde(default)]
    pub extensible: Option<bool>,
    #[serde(default)]
    pub initial_hash: Option<String>,
    #[serde(default)]
    pub fingerprint_hash: Option<String>,
    /// Gives a token limited to the 2FA-reset flow (docs/scopes.md).
    #[serde(default, rename = "forReset2FA")]
    pub for_reset_2fa: Option<bool>,
    /// The token in the clear even to a client that could take it ECDH-encrypted.
    #[serde(default, rename = "forceV1Auth")]
    pub force_v1_auth: Option<bool>,
}

/// Login result of §2.2.
#[derive(Debug, Serialize, ToSchema)]
pub struct LoginResponse {
    /// The secret bearer token; shown only here. Absent when the token is handed over
    /// ECDH-encrypted (`encryptedToken`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub access_token: Option<String>,
    /// The token in BitGo's version 1 envelope (SJCL JSON) under the secret the user's ECDH
    /// keychain and the service's key share at `derivationPath`; the answer is then signed
    /// (`hmac`, `timestamp`) with the token itself.
    #[serde(rename = "encryptedToken", skip_serializing_if = "Option::is_none")]
    pub encrypted_token: Option<String>,
    /// `m/999999/a/b`, fresh for each token.
    #[serde(rename = "derivationPath", skip_serializing_if = "Option::is_none")]
    pub derivation_path: Option<String>,
    /// The keychain's xprv as the client encrypted it under its password.
    #[serde(rename = "encryptedECDHXprv", skip_serializing_if = "Option::is_none")]
    pub encrypted_ecdh_xprv: Option<String>,
    /// True when the user has no ECDH keychain.
    #[serde(rename = "noECDHKeychain", skip_serializing_if = "Option::is_none")]
    pub no_ecdh_keychain: Option<bool>,
    /// Unix seconds.
    pub expires_at: i64,
    /// Seconds.
    pub expires_in: i64,
    pub scope: Vec<String>,
    /// Public 32-hex id of the token.
    pub token_id: TokenId,
    /// Always "bearer".
    pub token_type: String,
    /// How the session was granted: `password` or `passkey`.
    pub grant_type: String,
    pub user: UserResponse,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub warning: Option<String>,
}

impl From<LoginRequest> for Credentials {
    fn from(r: LoginRequest) -> Self {
        Credentials {
            email: r.email,
            otp: r.otp,
            password: r.password,
            extensible: r.extensible.unwrap_or(false),
            for_reset_2fa: r.for_reset_2fa.unwrap_or(false),
            password_form: identity::password::PasswordForm::Plain,
            extension_address: None,
            ecdh: !r.force_v1_auth.unwrap_or(false),
        }
    }
}

/// Request body of BitGo's login, as BitGoJS sends it (`POST /api/auth/v1/session`).
#[derive(Debug, Deserialize, ToSchema, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct SessionLoginRequest {
    /// Lower-cased by the SDK; 1 to 254 characters.
    #[schema(min_length = 1, max_length = 254, pattern = r"^\s*[^\s\x00-\x1f\x7f-\x9f]+\s*$")]
    pub email: String,
    /// BitGo's form of the password: lowercase hex HMAC-SHA256 of the password keyed with the
    /// lower-cased email.
    #[schema(pattern = "^[0-9a-fA-F]{64}$")]
    pub password: String,
    /// Six digits (RFC 6238), or the JSON of a passkey assertion; when absent the answer is 401
    /// with `needsOTP: true`.
    #[serde(default)]
    #[schema(pattern = r"^([0-9]{6}|\{.*)$", max_length = 16384)]
    pub otp: Option<String>,
    /// Accepted and ignored: no SMS is sent.
    #[serde(default, rename = "forceSMS")]
    pub force_sms: Option<bool>,
    /// Accepted and ignored (BitGo remembers the device).
    #[serde(default)]
    #[schema(value_type = Option<Object>)]
    pub trust: Option<Value>,
    #[serde(default)]
    pub extensible: Option<bool>,
    /// The Bitcoin P2PKH address of the SDK's extension key (with `extensible`): an extension
    /// of the session must then be signed by that key. Its Base58Check checksum must hold,
    /// which no schema can state: a string of this shape that fails it is 400 `InvalidField`.
    #[serde(default)]
    #[schema(max_length = 64, pattern = "^[1mn][1-9A-HJ-NP-Za-km-z]{25,33}$")]
    pub extension_address: Option<String>,
    #[serde(default, rename = "forReset2FA")]
    pub for_reset_2fa: Option<bool>,
    #[serde(default)]
    pub initial_hash: Option<String>,
    #[serde(default)]
    pub fingerprint_hash: Option<String>,
    /// The token in the clear (`access_token`) even for a user with an ECDH keychain.
    #[serde(default, rename = "forceV1Auth")]
    pub force_v1_auth: Option<bool>,
}

/// BitGoJS's `authenticateWithPasskey`: a passkey assertion and the user it names.
#[derive(Debug, Deserialize, ToSchema, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct PasskeyLoginRequest {
    /// The JSON of `navigator.credentials.get()`'s credential, answering a challenge of
    /// `POST /api/auth/v1/passkey/challenge`.
    #[schema(max_length = 16384)]
    pub passkey: String,
    /// The credential's `response.userHandle` (base64url of the user's 16-byte id).
    #[schema(max_length = 64)]
    pub user_id: String,
    #[serde(default)]
    pub initial_hash: Option<String>,
    #[serde(default)]
    pub fingerprint_hash: Option<String>,
}

/// `POST /api/auth/v1/session`: a passkey, or email, password and OTP.
#[derive(Debug, Deserialize, ToSchema, Serialize)]
#[serde(untagged)]
pub enum SessionLogin {
    Passkey(PasskeyLoginRequest),
    Password(SessionLoginRequest),
}

/// BitGo's login path for BitGoJS's `authenticate()` and `authenticateWithPasskey()`: the same login as
/// `/api/v2/internal/user/login` (throttles, hashing bounds, audit), with the password in
/// BitGo's HMAC form (docs/decisions.md#bitgos-paths-and-password-form). Users made before that form was stored log in once with
/// the plain password first (docs/decisions.md).
#[utoipa::path(post, path = "/api/auth/v1/session", tag = "identity",
    request_body = SessionLogin,
    responses(
        (status = 200, description = "Login result (§2.2)", body = LoginResponse),
        (status = 400, description = "Malformed request", body = ErrorResponse),
        (status = 401, description = "Wrong credentials or OTP", body = ErrorResponse),
        (status = 429, description = "Too many failed attempts", body = ErrorResponse),
    ))]
pub async fn session_login(
    State(state): State<AppState>,
    ClientIp(ip): ClientIp,
    handover: Handover,
    ApiJson(req): ApiJson<SessionLogin>,
) -> ApiResult<Response> {
    let req = match req {
        SessionLogin::Password(req) => req,
        SessionLogin::Passkey(p) => {
            let s = identity::passkey_login::login(&state.identity, &p.passkey, &p.user_id, ip).await?;
            return Ok(Json(login_response(s)).into_response());
        }
    };
    let credentials = Credentials {
        email: req.email,
        otp: req.otp,
        password: req.password,
        extensible: req.extensible.unwrap_or(false),
        for_reset_2fa: req.for_reset_2fa.unwrap_or(false),
        password_form: identity::password::PasswordForm::BitGo,
        extension_address: req.extension_address,
        ecdh: !req.force_v1_auth.unwrap_or(false),
    };
    login_answer(&state, credentials, ip, handover).await
}

/// Logs a user in with email, password and a one-time password (TOTP, RFC 6238).
#[utoipa::path(post, path = "/api/v2/internal/user/login", tag = "identity",
    request_body = LoginRequest,
    responses(
        (status = 200, description = "Login result (§2.2)", body = LoginResponse),
        (status = 400, description = "Malformed request", body = ErrorResponse),
        (status = 401, description = "Wrong credentials or OTP", body = ErrorResponse),
        (status = 429, description = "Too many failed attempts", body = ErrorResponse),
    ))]
pub async fn login(
    State(state): State<AppState>,
    ClientIp(ip): ClientIp,
    handover: Handover,
    ApiJson(req): ApiJson<LoginRequest>,
) -> ApiResult<Response> {
    login_answer(&state, req.into(), ip, handover).await
}

/// Logs in and answers §2.2: the token in the clear, or ECDH-encrypted when the client sent
/// `BitGo-Auth-Version` and the user has a keychain, then signed with the token it carries.
async fn login_answer(
    state: &AppState,
    mut credentials: Credentials,
    ip: std::net::IpAddr,
    handover: Handover,
) -> ApiResult<Response> {
    credentials.ecdh &= handover.version.is_some();
    let s = identity::login::login(&state.identity, credentials, ip).await?;
    let signer = s.encrypted.as_ref().and_then(|_| handover.signer(&s.value));
    let answer = Json(login_response(s)).into_response();
    Ok(match signer {
        Some(signer) => crate::http::hmac_edge::sign(answer, &signer).await,
        None => answer,
    })
}

fn login_response(s: identity::login::Session) -> LoginResponse {
    let encrypted = s.encrypted;
    let mut user = user_response(&s.user, &s.memberships);
    user.ecdh_keychain = s.ecdh_keychain.clone();
    LoginResponse {
        access_token: encrypted.is_none().then_some(s.value),
        no_ecdh_keychain: s.ecdh_keychain.is_none().then_some(true),
        encrypted_token: encrypted.as_ref().map(|e| e.encrypted_token.clone()),
        derivation_path: encrypted.as_ref().map(|e| e.derivation_path.clone()),
        encrypted_ecdh_xprv: encrypted.map(|e| e.encrypted_ecdh_xprv),
        expires_at: s.token.expires_at,
        expires_in: s.ttl_secs,
        scope: s.token.scopes.iter().map(|g| g.to_scope_string()).collect(),
        token_id: s.token.id,
        token_type: "bearer".into(),
        grant_type: s.token.grant_type.as_str().into(),
        user,
        warning: s.reset_2fa.then(|| "this session is limited to the 2FA reset process".to_string()),
    }
}
