//! POST /api/v2/internal/user/login (spec §4.2, §2.2): password + one-time password, with
//! per-email and per-address brute-force limits.

use axum::{extract::State, Json};
use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

use super::{
    auth::{hash_token, new_token_value},
    password,
    scopes::{session_scopes, RESET_2FA_SCOPES},
    totp::{self, OtpCheck},
    users::{user_response, UserResponse},
};
use crate::{
    http::{
        error::{Error, Result},
        extract::{ApiJson, ClientIp},
        ErrorResponse,
    },
    ids,
    store::{TokenKind, TokenRecord, User},
    AppState,
};

/// Request body of §4.2.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct LoginRequest {
    pub email: String,
    /// Required by §4.2; when absent the answer is 401 with `needsOTP: true`.
    #[serde(default)]
    pub otp: Option<String>,
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
}

/// Login result of §2.2.
#[derive(Debug, Serialize, ToSchema)]
pub struct LoginResponse {
    /// The secret bearer token; shown only here.
    pub access_token: String,
    /// Unix seconds.
    pub expires_at: i64,
    /// Seconds.
    pub expires_in: i64,
    pub scope: Vec<String>,
    /// Public 32-hex id of the token.
    pub token_id: String,
    /// Always "bearer".
    pub token_type: String,
    /// Always "password" here.
    pub grant_type: String,
    pub user: UserResponse,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub warning: Option<String>,
}

/// Refuses the attempt with 429 when `email` or `ip` has too many recent failures.
async fn check_lockout(state: &AppState, email: &str, ip: &str, now: i64) -> Result<()> {
    let cfg = &state.config.login;
    let window = i64::try_from(cfg.window).unwrap_or(i64::MAX);
    let since = now.saturating_sub(window);
    let by_email = state.store.login_failures_by_email(email, since).await?;
    let by_ip = state.store.login_failures_by_ip(ip, since).await?;
    for ((count, oldest), max) in [(by_email, cfg.max_failures_per_email), (by_ip, cfg.max_failures_per_ip)] {
        if count >= max {
            let retry_after = oldest.map(|o| o + window - now).unwrap_or(window).max(1);
            return Err(Error::TooManyRequests {
                message: "too many failed login attempts; try again later".into(),
                retry_after: u64::try_from(retry_after).unwrap_or(1),
            });
        }
    }
    Ok(())
}

/// Checks a one-time password for `user` and claims its time step against replay.
/// Shared by login and access token creation. `Ok(false)` means wrong or replayed.
pub async fn verify_otp(state: &AppState, user: &User, code: &str) -> Result<bool> {
    match totp::check(&state.key, state.config.environment, user, code, ids::now())? {
        OtpCheck::Invalid => Ok(false),
        OtpCheck::Valid(None) => Ok(true),
        OtpCheck::Valid(Some(step)) => Ok(state.store.advance_totp_step(&user.id, step).await?),
    }
}

fn login_failed(needs_otp: bool) -> Error {
    if needs_otp {
        Error::LoginFailed {
            name: "InvalidOtp",
            message: "a valid one-time password is required".into(),
            needs_otp: true,
        }
    } else {
        Error::LoginFailed {
            name: "InvalidCredentials",
            message: "incorrect email or password".into(),
            needs_otp: false,
        }
    }
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
    ApiJson(req): ApiJson<LoginRequest>,
) -> Result<Json<LoginResponse>> {
    let email = req.email.trim().to_ascii_lowercase();
    let ip_text = ip.to_string();
    let now = ids::now();
    check_lockout(&state, &email, &ip_text, now).await?;

    let user = state.store.user_by_email(&email).await?.filter(|u| u.is_active);
    let password_ok = password::verify(req.password, user.as_ref().map(|u| u.password_hash.clone())).await;
    let (Some(user), true) = (user, password_ok) else {
        state.store.record_login_failure(&email, &ip_text, now).await?;
        return Err(login_failed(false));
    };
    let Some(otp) = req.otp.as_deref().map(str::trim).filter(|o| !o.is_empty()) else {
        // The usual first step of a two-step client: not counted as a failure.
        return Err(login_failed(true));
    };
    if !verify_otp(&state, &user, otp).await? {
        state.store.record_login_failure(&email, &ip_text, now).await?;
        return Err(login_failed(true));
    }
    let window = i64::try_from(state.config.login.window).unwrap_or(i64::MAX);
    state.store.clear_login_failures(&email, now.saturating_sub(window)).await?;
    state.store.set_last_login(&user.id, now).await?;

    let reset = req.for_reset_2fa.unwrap_or(false);
    let ttl = i64::try_from(state.config.login.session_ttl).unwrap_or(3600);
    let scopes = if reset {
        RESET_2FA_SCOPES.iter().map(|s| s.to_string()).collect()
    } else {
        session_scopes(state.config.environment)
    };
    let value = new_token_value();
    let token = TokenRecord {
        id: ids::new_id(),
        token_hash: hash_token(&value),
        user_id: user.id.clone(),
        kind: if reset { TokenKind::Reset2fa } else { TokenKind::Session },
        label: None,
        scopes: scopes.clone(),
        created_at: now,
        expires_at: now + ttl,
        revoked_at: None,
        ip: Some(ip_text),
        ip_restrict: None,
        enterprise: None,
        is_extensible: req.extensible.unwrap_or(false) && !reset,
        admin: user.service_admin && !reset,
        spending_limits: None,
        permitted_wallets: None,
        permitted_enterprises: None,
        origin: state.config.environment.as_str().into(),
        parent_id: None,
    };
    state.store.insert_token(&token, &[]).await?;
    let mut user = user;
    user.last_login = Some(now);
    let memberships = state.store.memberships(&user.id).await?;
    Ok(Json(LoginResponse {
        access_token: value,
        expires_at: token.expires_at,
        expires_in: ttl,
        scope: scopes,
        token_id: token.id,
        token_type: "bearer".into(),
        grant_type: "password".into(),
        user: user_response(&user, &memberships),
        warning: reset.then(|| "this session is limited to the 2FA reset process".to_string()),
    }))
}
