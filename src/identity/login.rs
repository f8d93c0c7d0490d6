//! Login (spec §4.2, §2.2): password + one-time password, with per-email and per-address
//! brute-force limits. Returns a session token and the user; the HTTP shape is in
//! `http/handlers/identity.rs`.
//!
//! Layer rule: no web-framework types and nothing of the HTTP layer (docs/architecture.md).

use std::net::IpAddr;

use super::{
    auth::{hash_token, new_token_value},
    password,
    scopes::{session_scopes, RESET_2FA_SCOPES},
    tokens::new_token_record,
    totp::{self, OtpCheck},
};
use crate::{
    error::{Error, Result},
    ids,
    store::{Membership, TokenKind, TokenRecord, User},
    AppState,
};

/// What a login presents (§4.2).
#[derive(Debug, Clone, Default)]
pub struct Credentials {
    pub email: String,
    /// Required by §4.2; when absent the answer is `InvalidOtp` with `needs_otp`.
    pub otp: Option<String>,
    pub password: String,
    pub extensible: bool,
    /// Gives a token limited to the 2FA-reset flow (docs/scopes.md).
    pub for_reset_2fa: bool,
}

/// A successful login: the new session token (its secret value shown once) and its user.
#[derive(Debug)]
pub struct Session {
    /// The secret bearer token.
    pub value: String,
    pub token: TokenRecord,
    pub user: User,
    pub memberships: Vec<Membership>,
    /// Seconds.
    pub ttl_secs: i64,
    /// True for a 2FA-reset session.
    pub reset_2fa: bool,
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
            return Err(Error::Throttled {
                message: "too many failed login attempts; try again later".into(),
                retry_after_secs: u64::try_from(retry_after).unwrap_or(1),
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

/// Logs a user in with email, password and a one-time password (TOTP, RFC 6238) from
/// `client_ip`. Errors: `Throttled` after too many failures (settings `login.*`),
/// `LoginFailed` (`InvalidCredentials`, or `InvalidOtp` with `needs_otp`).
pub async fn login(state: &AppState, req: Credentials, ip: IpAddr) -> Result<Session> {
    let email = req.email.trim().to_ascii_lowercase();
    let ip_text = ip.to_string();
    let now = ids::now();
    check_lockout(state, &email, &ip_text, now).await?;

    let user = state.store.user_by_email(&email).await?.filter(|u| u.is_active);
    let password_ok = password::verify(req.password, user.as_ref().map(|u| u.password_hash.clone())).await;
    let (Some(mut user), true) = (user, password_ok) else {
        state.store.record_login_failure(&email, &ip_text, now).await?;
        return Err(login_failed(false));
    };
    let Some(otp) = req.otp.as_deref().map(str::trim).filter(|o| !o.is_empty()) else {
        // The usual first step of a two-step client: not counted as a failure.
        return Err(login_failed(true));
    };
    if !verify_otp(state, &user, otp).await? {
        state.store.record_login_failure(&email, &ip_text, now).await?;
        return Err(login_failed(true));
    }
    let window = i64::try_from(state.config.login.window).unwrap_or(i64::MAX);
    state.store.clear_login_failures(&email, now.saturating_sub(window)).await?;
    state.store.set_last_login(&user.id, now).await?;

    let reset = req.for_reset_2fa;
    let ttl = i64::try_from(state.config.login.session_ttl).unwrap_or(3600);
    let scopes = if reset {
        RESET_2FA_SCOPES.iter().map(|s| s.to_string()).collect()
    } else {
        session_scopes(state.config.environment)
    };
    let value = new_token_value();
    let mut token = new_token_record(
        state,
        hash_token(&value),
        &user.id,
        if reset { TokenKind::Reset2fa } else { TokenKind::Session },
        scopes,
        now,
        now + ttl,
        ip,
    );
    token.is_extensible = req.extensible && !reset;
    token.admin = user.service_admin && !reset;
    state.store.insert_token(&token, &[]).await?;
    user.last_login = Some(now);
    let memberships = state.store.memberships(&user.id).await?;
    Ok(Session { value, token, user, memberships, ttl_secs: ttl, reset_2fa: reset })
}
