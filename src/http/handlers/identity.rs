//! Identity routes: access token creation (§4.3) and the caller's profile (§2.3). Each
//! handler extracts, calls one domain function in `crate::identity`, and shapes §2.3 or §2.4.
//! Login is in `super::login`.

use axum::{
    extract::{Request, State},
    Json,
};
use serde::Serialize;
use serde_json::{json, Value};
use utoipa::ToSchema;

use crate::{
    http::{auth::Auth, error::ApiResult, extract::json_value, ErrorResponse},
    identity::{
        self,
        tokens::{CreateAccessTokenRequest, SERVICE_ADMIN_PERMISSION},
    },
    model::token::TokenRecord,
    store::{Membership, User},
    types::{EnterpriseId, TokenId, UserId, WalletId},
    AppState,
};

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
        unlock.insert("time".into(), json!(crate::clock::iso(u.time)));
        unlock.insert("expires".into(), json!(crate::clock::iso(u.expires)));
    }
    (!unlock.is_empty()).then_some(Value::Object(unlock))
}

impl AccessTokenResponse {
    /// The §2.4 view of `t`; `value` is the secret, given only when the token is created.
    /// `now`: Unix seconds on the service's clock, which an unlock's end is compared with.
    pub fn new(value: Option<String>, t: TokenRecord, now: i64) -> Self {
        AccessTokenResponse {
            unlock: unlock_view(&t, now),
            last_used_at: t.last_used_at.map(crate::clock::iso),
            token: value,
            encrypted_token: None,
            derivation_path: None,
            label: t.label.unwrap_or_default(),
            scope: t.scopes.iter().map(|g| g.to_scope_string()).collect(),
            ip: t.ip.unwrap_or_default(),
            ip_restrict: t.ip_restrict.map(|list| list.iter().map(ToString::to_string).collect()),
            created: crate::clock::iso(t.created_at),
            expires: crate::clock::iso(t.expires_at),
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
    let now = state.store.clock().now();
    let Some(encrypted) = created.encrypted else {
        return Ok(Json(AccessTokenResponse::new(Some(created.value), created.record, now)));
    };
    Ok(Json(AccessTokenResponse {
        encrypted_token: Some(encrypted.encrypted_token),
        derivation_path: Some(encrypted.derivation_path),
        ..AccessTokenResponse::new(None, created.record, now)
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
        last_login: user.last_login.map(crate::clock::iso),
        create_time: crate::clock::iso(user.created_at),
        password_updated_at: crate::clock::iso(user.password_updated_at),
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
