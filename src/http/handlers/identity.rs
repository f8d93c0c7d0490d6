//! Identity routes: login (§4.2), access token creation (§4.3) and the caller's profile.
//! Each handler extracts, calls one domain function in `crate::identity`, and shapes §2.2,
//! §2.3 or §2.4.

use axum::{
    extract::{Request, State},
    response::{IntoResponse, Response},
    Json,
};
use serde::{Deserialize, Serialize};
use serde_json::{json, Value};
use utoipa::ToSchema;

use crate::{
    http::{
        auth::Auth,
        error::ApiResult,
        extract::{json_value, ApiJson, ClientIp},
        hmac_edge::Handover,
        ErrorResponse,
    },
    identity::{
        self,
        login::Credentials,
        tokens::{CreateAccessTokenRequest, SERVICE_ADMIN_PERMISSION},
    },
    ids,
    model::token::TokenRecord,
    store::{Membership, User},
    types::{EnterpriseId, TokenId, UserId, WalletId},
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
    /// Six digits (RFC 6238). Required by §4.2; when absent the answer is 401 with
    /// `needsOTP: true`.
    #[serde(default)]
    #[schema(pattern = "^[0-9]{6}$")]
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
    /// Six digits (RFC 6238); when absent the answer is 401 with `needsOTP: true`.
    #[serde(default)]
    #[schema(pattern = "^[0-9]{6}$")]
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
    /// of the session must then be signed by that key.
    #[serde(default)]
    #[schema(max_length = 64)]
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
    LoginResponse {
        access_token: encrypted.is_none().then_some(s.value),
        no_ecdh_keychain: s.no_ecdh_keychain.then_some(true),
        encrypted_token: encrypted.as_ref().map(|e| e.encrypted_token.clone()),
        derivation_path: encrypted.as_ref().map(|e| e.derivation_path.clone()),
        encrypted_ecdh_xprv: encrypted.map(|e| e.encrypted_ecdh_xprv),
        expires_at: s.token.expires_at,
        expires_in: s.ttl_secs,
        scope: s.token.scopes.iter().map(|g| g.to_scope_string()).collect(),
        token_id: s.token.id,
        token_type: "bearer".into(),
        grant_type: s.token.grant_type.as_str().into(),
        user: user_response(&s.user, &s.memberships),
        warning: s.reset_2fa.then(|| "this session is limited to the 2FA reset process".to_string()),
    }
}

/// The access token of §2.4.
#[derive(Debug, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct AccessTokenResponse {
    pub id: TokenId,
    /// The secret token value; only in the response that creates the token, unless it is
    /// handed over ECDH-encrypted (`encryptedToken`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub token: Option<String>,
    /// The new token in BitGo's version 1 envelope, when the creating session was itself handed
    /// over ECDH-encrypted and the request was signed: opened as the login's `encryptedToken`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub encrypted_token: Option<String>,
    /// `m/999999/a/b`, with `encryptedToken`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub derivation_path: Option<String>,
    pub label: String,
    pub scope: Vec<String>,
    /// Address of the client that requested the token.
    pub ip: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ip_restrict: Option<Vec<String>>,
    /// ISO 8601.
    pub created: String,
    /// ISO 8601.
    pub expires: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub enterprise: Option<EnterpriseId>,
    pub user: UserId,
    pub is_extensible: bool,
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(value_type = Option<Object>)]
    pub unlock: Option<Value>,
    /// The environment that issued the token: "test" or "production".
    pub origin: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub service_admin_permissions: Option<Vec<String>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub permitted_wallets: Option<Vec<WalletId>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub permitted_enterprises: Option<Vec<EnterpriseId>>,
    /// ISO 8601; updated at most once a minute.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub last_used_at: Option<String>,
}

/// `unlock` of §2.4: the token's spending limits, and `time` / `expires` while it is unlocked.
pub(crate) fn unlock_view(t: &TokenRecord, now: i64) -> Option<Value> {
    let mut unlock = serde_json::Map::new();
    if let Some(limits) = &t.spending_limits {
        unlock.insert("spendingLimits".into(), limits.clone());
    }
    if let Some(limit) = t.tx_value_limit.as_ref().and_then(|l| l.as_str().parse::<serde_json::Number>().ok())
    {
        unlock.insert("txValueLimit".into(), Value::Number(limit));
    }
    if let Some(u) = t.unlock.filter(|u| u.expires > now) {
        unlock.insert("time".into(), json!(ids::iso(u.time)));
        unlock.insert("expires".into(), json!(ids::iso(u.expires)));
    }
    (!unlock.is_empty()).then_some(Value::Object(unlock))
}

impl AccessTokenResponse {
    /// The §2.4 view of `t`; `value` is the secret, given only when the token is created.
    pub fn new(value: Option<String>, t: TokenRecord) -> Self {
        AccessTokenResponse {
            unlock: unlock_view(&t, ids::now()),
            last_used_at: t.last_used_at.map(ids::iso),
            token: value,
            encrypted_token: None,
            derivation_path: None,
            label: t.label.unwrap_or_default(),
            scope: t.scopes.iter().map(|g| g.to_scope_string()).collect(),
            ip: t.ip.unwrap_or_default(),
            ip_restrict: t.ip_restrict.map(|list| list.iter().map(ToString::to_string).collect()),
            created: ids::iso(t.created_at),
            expires: ids::iso(t.expires_at),
            enterprise: t.enterprise,
            user: t.user_id,
            is_extensible: t.is_extensible,
            origin: t.origin,
            service_admin_permissions: t.admin.then(|| vec![SERVICE_ADMIN_PERMISSION.to_string()]),
            permitted_wallets: t.permitted_wallets,
            permitted_enterprises: t.permitted_enterprises,
            id: t.id,
        }
    }
}

/// Creates an access token for the caller's user. Needs a correct OTP of that user. The new
/// token cannot exceed the creating one (scopes, permitted lists, enterprise, expiry, admin).
#[utoipa::path(post, path = "/api/v2/user/accesstoken", tag = "identity",
    security(("bearer" = [])),
    request_body = CreateAccessTokenRequest,
    responses(
        (status = 200, description = "The new token (§2.4)", body = AccessTokenResponse),
        (status = 400, description = "A field is invalid; context.field names it", body = ErrorResponse),
        (status = 401, description = "Not authenticated, or wrong OTP (needsOTP)", body = ErrorResponse),
        (status = 403, description = "The token may not create tokens", body = ErrorResponse),
        (status = 429, description = "Too many wrong one-time passwords (TooManyOtpAttempts)", body = ErrorResponse),
    ))]
pub async fn create_access_token(
    State(state): State<AppState>,
    Auth(auth): Auth,
    req: Request,
) -> ApiResult<Json<AccessTokenResponse>> {
    let body = json_value(req, &state).await?;
    let created = identity::tokens::create_access_token(&state.identity, &auth, body).await?;
    let Some(encrypted) = created.encrypted else {
        return Ok(Json(AccessTokenResponse::new(Some(created.value), created.record)));
    };
    Ok(Json(AccessTokenResponse {
        encrypted_token: Some(encrypted.encrypted_token),
        derivation_path: Some(encrypted.derivation_path),
        ..AccessTokenResponse::new(None, created.record)
    }))
}

/// The user record of spec §2.3 (required fields and the optional ones the service knows).
#[derive(Debug, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct UserResponse {
    #[schema(value_type = Object)]
    pub agreements: Value,
    pub allowed_coins: Vec<String>,
    pub service_employee: bool,
    #[schema(value_type = Object)]
    pub currency: Value,
    #[serde(rename = "disableReset2FA")]
    pub disable_reset_2fa: bool,
    #[schema(value_type = Vec<Object>)]
    pub organizations: Vec<Value>,
    pub feature_flags: Vec<String>,
    pub force_reset_password: bool,
    #[schema(value_type = Object)]
    pub identity: Value,
    #[schema(value_type = Vec<Object>)]
    pub otp_devices: Vec<Value>,
    #[schema(value_type = Object)]
    pub phone: Value,
    pub timezone: String,
    /// 32 hex characters.
    pub id: UserId,
    /// The email address.
    pub username: String,
    #[schema(value_type = Object)]
    pub name: Value,
    #[schema(value_type = Vec<Object>)]
    pub enterprises: Vec<Value>,
    #[schema(value_type = Object)]
    pub email: Value,
    pub is_active: bool,
    pub is_frozen: bool,
    pub locale: String,
    #[schema(value_type = Option<String>)]
    pub ecdh_keychain: Option<String>,
    /// ISO 8601.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub last_login: Option<String>,
    pub create_time: String,
    pub password_updated_at: String,
}

/// A stable id for the user's one TOTP device, distinct from the user id.
fn otp_device_id(user_id: &str) -> String {
    use sha2::Digest;
    hex::encode(&sha2::Sha256::digest(format!("otp-device:{user_id}").as_bytes())[..16])
}

/// Builds the §2.3 record of `user` with its enterprise memberships.
pub fn user_response(user: &User, memberships: &[Membership]) -> UserResponse {
    let full = format!("{} {}", user.name_first, user.name_last).trim().to_string();
    UserResponse {
        agreements: json!({}),
        allowed_coins: user.allowed_coins.clone(),
        service_employee: user.service_admin,
        currency: json!({ "currency": "USD", "bitcoinUnit": "BTC" }),
        disable_reset_2fa: false,
        organizations: Vec::new(),
        feature_flags: Vec::new(),
        force_reset_password: false,
        identity: json!({ "verified": false }),
        otp_devices: vec![json!({
            "id": otp_device_id(&user.id),
            "type": "totp",
            "label": "Authenticator app",
            "verified": true,
        })],
        phone: json!({}),
        timezone: user.timezone.clone(),
        id: user.id.clone(),
        username: user.email.clone(),
        name: json!({ "first": user.name_first, "last": user.name_last, "full": full }),
        enterprises: memberships
            .iter()
            .map(|m| json!({ "id": m.enterprise.id, "name": m.enterprise.name, "isAdmin": m.is_admin }))
            .collect(),
        email: json!({ "email": user.email, "verified": true }),
        is_active: user.is_active,
        is_frozen: false,
        locale: user.locale.clone(),
        ecdh_keychain: None,
        last_login: user.last_login.map(ids::iso),
        create_time: ids::iso(user.created_at),
        password_updated_at: ids::iso(user.password_updated_at),
    }
}

/// `{ user: <§2.3> }`, as BitGo's /user/me answers.
#[derive(Debug, Serialize, ToSchema)]
pub struct MeResponse {
    pub user: UserResponse,
}

/// The token's own user, with its `ecdhKeychain` once set. Needs the `profile` scope (docs/scopes.md).
#[utoipa::path(get, path = "/api/v2/user/me", tag = "identity",
    security(("bearer" = [])),
    responses(
        (status = 200, description = "The token's user (§2.3)", body = MeResponse),
        (status = 403, description = "Token lacks the profile scope", body = ErrorResponse),
    ))]
pub async fn me(State(state): State<AppState>, Auth(auth): Auth) -> ApiResult<Json<MeResponse>> {
    let (user, memberships) = identity::users::profile(&state.identity, &auth).await?;
    let mut user = user_response(&user, &memberships);
    user.ecdh_keychain = crate::identity::keychains::settings(&state.identity, &auth).await?.ecdh_keychain;
    let passkeys = crate::identity::passkeys::list(&state.identity, &auth).await?;
    user.otp_devices.extend(passkeys.iter().map(super::passkeys::device_json));
    Ok(Json(MeResponse { user }))
}
