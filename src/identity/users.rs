//! Users and enterprises: creation (used by the CLI), the §2.3 user record, and
//! GET /api/v2/user/me.

use axum::{extract::State, Json};
use serde::Serialize;
use serde_json::{json, Value};
use utoipa::ToSchema;

use super::{password, scopes::Action, totp};
use crate::{
    http::error::{Error, Result},
    ids,
    store::{DynStore, Enterprise, Membership, User},
    AppState,
};

/// What creating a user returns: the TOTP seed is shown once, here.
#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct CreatedUser {
    pub id: String,
    pub email: String,
    /// Base32 TOTP seed (RFC 6238), for authenticator apps.
    pub totp_secret: String,
    pub otpauth_uri: String,
}

/// Checks an email address: one `@`, a non-empty local part, a dotted domain, no white space.
pub fn valid_email(email: &str) -> bool {
    let Some((local, domain)) = email.split_once('@') else { return false };
    !local.is_empty()
        && !domain.contains('@')
        && domain.contains('.')
        && !domain.starts_with('.')
        && !domain.ends_with('.')
        && email.len() <= 254
        && !email.chars().any(|c| c.is_whitespace() || c.is_control())
}

/// Creates a user with a new TOTP seed. `name` is "First Last" (split at the first space).
/// Errors: invalid email, password under [`password::MIN_PASSWORD_LEN`] characters, or an
/// existing user with that email.
pub async fn create_user(
    store: &DynStore,
    key: &crate::secrets::MasterKey,
    email: &str,
    name: Option<&str>,
    plain_password: &str,
    service_admin: bool,
) -> anyhow::Result<CreatedUser> {
    let email = email.trim().to_ascii_lowercase();
    if !valid_email(&email) {
        anyhow::bail!("{email:?} is not a valid email address");
    }
    if plain_password.chars().count() < password::MIN_PASSWORD_LEN {
        anyhow::bail!("the password must have at least {} characters", password::MIN_PASSWORD_LEN);
    }
    let pw = plain_password.to_string();
    let password_hash = tokio::task::spawn_blocking(move || password::hash(&pw)).await??;
    let id = ids::new_id();
    let seed = totp::new_seed();
    let (first, last) = match name.map(str::trim) {
        Some(n) => match n.split_once(' ') {
            Some((f, l)) => (f.to_string(), l.trim().to_string()),
            None => (n.to_string(), String::new()),
        },
        None => (String::new(), String::new()),
    };
    let now = ids::now();
    let user = User {
        id: id.clone(),
        email: email.clone(),
        name_first: first,
        name_last: last,
        password_hash,
        totp_secret_enc: key.seal(&totp::seed_aad(&id), &seed)?,
        totp_last_step: None,
        service_admin,
        is_active: true,
        timezone: "UTC".into(),
        locale: "en-US".into(),
        allowed_coins: Vec::new(),
        created_at: now,
        password_updated_at: now,
        last_login: None,
    };
    store.insert_user(&user).await.map_err(|e| anyhow::anyhow!("{e}"))?;
    Ok(CreatedUser {
        id,
        totp_secret: totp::seed_base32(&seed),
        otpauth_uri: totp::otpauth_uri(&seed, &email)?,
        email,
    })
}

/// Creates an enterprise named `name`, with the given id (32 hex) or a new one.
pub async fn create_enterprise(store: &DynStore, name: &str, id: Option<&str>) -> anyhow::Result<Enterprise> {
    let name = name.trim();
    if name.is_empty() {
        anyhow::bail!("the enterprise name must not be empty");
    }
    if id.is_some_and(|i| !ids::is_id(i)) {
        anyhow::bail!("the enterprise id must be 32 lowercase hex characters");
    }
    let id = id.map(str::to_string).unwrap_or_else(ids::new_id);
    let e = Enterprise { id, name: name.into(), created_at: ids::now() };
    store.insert_enterprise(&e).await.map_err(|e| anyhow::anyhow!("{e}"))?;
    Ok(e)
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
    pub id: String,
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

/// The token's own user. Needs the `profile` scope (docs/scopes.md).
#[utoipa::path(get, path = "/api/v2/user/me", tag = "identity",
    security(("bearer" = [])),
    responses(
        (status = 200, description = "The token's user (§2.3)", body = MeResponse),
        (status = 401, description = "Not authenticated", body = crate::http::ErrorResponse),
        (status = 403, description = "Token lacks the profile scope", body = crate::http::ErrorResponse),
    ))]
pub async fn me(State(state): State<AppState>, auth: super::auth::Auth) -> Result<Json<MeResponse>> {
    auth.require(state.policy(), Action::ViewProfile)?;
    let memberships = state.store.memberships(&auth.user.id).await?;
    Ok(Json(MeResponse { user: user_response(&auth.user, &memberships) }))
}

/// Checks that `user_id` belongs to enterprise `enterprise_id`; the 400 names `field`.
pub async fn require_membership(
    store: &DynStore,
    user_id: &str,
    enterprise_id: &str,
    field: &str,
) -> Result<Membership> {
    if !ids::is_id(enterprise_id) {
        return Err(Error::invalid_field(field, "must be a 32-hex enterprise id"));
    }
    store
        .memberships(user_id)
        .await?
        .into_iter()
        .find(|m| m.enterprise.id == enterprise_id)
        .ok_or_else(|| Error::invalid_field(field, "no such enterprise, or the user does not belong to it"))
}
