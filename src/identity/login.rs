//! Login (spec §4.2, §2.2): password + one-time password, with per-email and per-address
//! brute-force limits. Returns a session token and the user; the HTTP shape is in
//! `http/handlers/identity.rs`.
//!
//! Layer rule: no web-framework types and nothing of the HTTP layer (docs/architecture.md).

use crate::error::ErrorName;
use crate::model::audit::AuditType;
use std::net::IpAddr;

use super::{
    bearer::new_token_value,
    otp::verify_otp,
    scopes::{session_scopes, Grant, RESET_2FA_SCOPES},
    throttle,
    tokens::new_token_record,
};
use serde_json::json;

use crate::{
    audit::{self, EntryExt},
    error::{Error, Result},
    identity::Identity,
    model::{
        audit::AuditEntry,
        token::{GrantType, TokenKind, TokenRecord},
    },
    store::{Membership, User},
    types::{Email, OtpCode, SecondFactor},
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
    /// The password itself, or BitGo's form of it (`POST /api/auth/v1/session`).
    pub password_form: super::password::PasswordForm,
    /// BitGoJS's `extensionAddress`: the P2PKH address whose key must sign an extension of an
    /// extensible session ([`super::extension`]).
    pub extension_address: Option<String>,
    /// The client can take the token ECDH-encrypted ([`super::issuance`]): BitGoJS, which sends
    /// `BitGo-Auth-Version` and no `forceV1Auth`. Used when the user has an ECDH keychain.
    pub ecdh: bool,
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
    /// The token as it is handed over when the client takes it ECDH-encrypted: then `value`
    /// is not sent (it only signs the answer).
    pub encrypted: Option<super::issuance::EncryptedToken>,
    /// The xpub of the user's ECDH keychain (§2.3 `ecdhKeychain`); `None`: they have none
    /// (§2.2 `noECDHKeychain`).
    pub ecdh_keychain: Option<String>,
}

/// What a session is issued with, once every check passed.
#[derive(Debug, Clone, Default)]
pub struct SessionOptions {
    pub extensible: bool,
    /// The address of the key that must sign its extensions ([`super::extension`]).
    pub extension_address: Option<String>,
    /// Limited to the 2FA reset.
    pub reset: bool,
    /// Handed over ECDH-encrypted when the user has a keychain ([`Credentials::ecdh`]).
    pub ecdh: bool,
    pub grant_type: GrantType,
    /// Seconds, in place of `login.session_ttl` when shorter (a single sign-on's).
    pub ttl: Option<i64>,
}

/// The longest password, bytes; checked before any lookup or hashing (docs/decisions.md#brute-force-limits), with the
/// email's length ([`Email::MAX_LEN`]) and the OTP's shape ([`OtpCode`]).
pub const MAX_PASSWORD_BYTES: usize = 1024;
pub const OTP_DIGITS: usize = OtpCode::DIGITS;
/// The label a login session carries in token lists.
pub const LOGIN_SESSION_LABEL: &str = "login session";

/// Parses the credentials' email and OTP; refuses oversized or malformed ones with a 400 naming
/// the field. An absent or blank OTP is `None` (the first step of a two-step client).
fn parse_credentials(req: &Credentials) -> Result<(Email, Option<SecondFactor>)> {
    let email = Email::parse(&req.email).map_err(|e| Error::invalid_field("email", e))?;
    if let Some(address) = &req.extension_address {
        super::extension::parse_address(address)?;
    }
    if req.password.len() > MAX_PASSWORD_BYTES {
        return Err(Error::invalid_field("password", format!("at most {MAX_PASSWORD_BYTES} bytes")));
    }
    let otp = match req.otp.as_deref().map(str::trim).filter(|o| !o.is_empty()) {
        None => None,
        Some(o) => Some(SecondFactor::parse(o).ok_or_else(|| {
            Error::invalid_field("otp", format!("exactly {OTP_DIGITS} digits, or a passkey assertion"))
        })?),
    };
    Ok((email, otp))
}

/// Records a failed login of `email` (and its user, when known) for `reason`.
async fn failed(svc: &Identity, email: &str, user: Option<&User>, ip: IpAddr, reason: &str) {
    let mut entry = audit::entry(AuditType::LoginFailed).data(json!({ "email": email, "reason": reason }));
    entry.ip = Some(ip.to_string());
    entry.user_id = user.map(|u| u.id.clone());
    audit::record(&svc.store, &[entry]).await;
}

fn login_failed(needs_otp: bool) -> Error {
    if needs_otp {
        Error::LoginFailed {
            name: ErrorName::InvalidOtp,
            message: "a valid one-time password is required".into(),
            needs_otp: true,
        }
    } else {
        Error::LoginFailed {
            name: ErrorName::InvalidCredentials,
            message: "incorrect email or password".into(),
            needs_otp: false,
        }
    }
}

/// Logs a user in with email, password and a one-time password (TOTP, RFC 6238) from
/// `ip`. Errors: `Invalid` for oversized fields or a malformed OTP, `Throttled` after too many
/// failures (settings `login.*`, `identity::throttle`), `Busy` when password hashing is at
/// capacity, `LoginFailed` (`InvalidCredentials`, or `InvalidOtp` with `needs_otp`).
pub async fn login(svc: &Identity, req: Credentials, ip: IpAddr) -> Result<Session> {
    let (address, otp) = parse_credentials(&req)?;
    let email = address.as_str();
    let client = throttle::client_key(ip);
    let now = svc.store.clock().now();
    let admission = svc.hashing.admit(&client)?;
    let attempt = match throttle::begin_login(svc, email, &client, now).await {
        Ok(a) => a,
        Err(e) => {
            if svc.throttle_notes.first_in_minute(&format!("login:{email}:{client}"), now) {
                let entry = audit::entry(AuditType::LoginThrottled).data(json!({ "email": email }));
                audit::record(&svc.store, &[AuditEntry { ip: Some(ip.to_string()), ..entry }]).await;
            }
            return Err(e);
        }
    };

    let user = svc.store.user_by_email(&address).await?.filter(|u| u.is_active);
    let stored = user.as_ref().map(|u| u.password_hash.as_str());
    let (offered, phc, upgrade) = super::password::candidate(email, &req.password, req.password_form, stored);
    let options = SessionOptions {
        extensible: req.extensible,
        extension_address: req.extension_address.clone().filter(|_| req.extensible),
        reset: req.for_reset_2fa,
        ecdh: req.ecdh,
        grant_type: GrantType::Password,
        ttl: None,
    };
    let password_ok = match admission.verify(offered, phc).await {
        Ok(ok) => ok,
        Err(e) => {
            // Refused for capacity, not tried: not a failure.
            attempt.forget(svc).await?;
            return Err(e);
        }
    };
    let user = match (user, password_ok) {
        (Some(user), true) => user,
        (user, _) => {
            failed(svc, email, user.as_ref(), ip, "invalid_credentials").await;
            return Err(login_failed(false));
        }
    };
    let Some(otp) = otp else {
        // The usual first step of a two-step client: not counted as a failure.
        attempt.forget(svc).await?;
        return Err(login_failed(true));
    };
    if !verify_otp(svc, &user, &otp, ip).await? {
        failed(svc, email, Some(&user), ip, "invalid_otp").await;
        return Err(login_failed(true));
    }
    attempt.forget(svc).await?;
    if upgrade {
        upgrade_password(svc, &user, &req.password).await;
    }
    throttle::login_succeeded(svc, email, &client, now).await?;
    svc.store.set_last_login(&user.id, now, &[]).await?;
    issue_session(svc, user, ip, now, options).await
}

/// Stores the BitGo form of a user's plain password in place of the hash of the plain password
/// (docs/decisions.md#bitgos-paths-and-password-form), so that BitGoJS can log them in from now on. A failure is logged: the old
/// hash still works.
async fn upgrade_password(svc: &Identity, user: &User, plain: &str) {
    let (email, plain) = (user.email.to_string(), plain.to_string());
    let phc = tokio::task::spawn_blocking(move || super::password::hash_for_storage(&email, &plain)).await;
    let stored = match phc {
        Ok(Ok(phc)) => {
            svc.store
                .update_user(&user.id, crate::store::UserChange::Password(phc), svc.store.clock().now(), &[])
                .await
        }
        Ok(Err(e)) => Err(e.into()),
        Err(e) => Err(anyhow::Error::from(e).into()),
    };
    if let Err(e) = stored {
        tracing::warn!(error = %e, "storing the upgraded password hash failed");
    }
}

/// The session token of a login that passed every check, stored with its audit entry, and
/// sealed for the user's ECDH keychain when `options.ecdh` and they have one.
pub(super) async fn issue_session(
    svc: &Identity,
    mut user: User,
    ip: IpAddr,
    now: i64,
    options: SessionOptions,
) -> Result<Session> {
    let SessionOptions { extensible, extension_address, reset, ecdh, grant_type, ttl } = options;
    let memberships = svc.store.memberships(&user.id).await?;
    if matches!(grant_type, GrantType::Password | GrantType::Passkey) {
        super::sso_required::check_required(svc, &user, &memberships, grant_type, ip).await?;
    }
    let most = i64::try_from(svc.config.login.session_ttl).unwrap_or(3600);
    let ttl = ttl.map_or(most, |t| t.clamp(1, most));
    let scopes = if reset {
        RESET_2FA_SCOPES.iter().map(|s| Grant::plain(*s)).collect()
    } else {
        session_scopes(svc.config.environment)
    };
    let value = new_token_value();
    let mut token = new_token_record(
        svc,
        &value,
        &user.id,
        if reset { TokenKind::Reset2fa } else { TokenKind::Session },
        scopes,
        now,
        now + ttl,
        ip,
    )?;
    // Named in token lists (API and console) for what it is; §4.2 gives a login no label.
    token.label = Some(if reset { "2FA reset session" } else { LOGIN_SESSION_LABEL }.into());
    token.is_extensible = extensible && !reset;
    token.extension_address = extension_address.filter(|_| token.is_extensible);
    token.admin = user.service_admin && !reset;
    token.grant_type = grant_type;
    let keychain = svc.store.ecdh_keychain(&user.id).await?;
    let ecdh_keychain = keychain.as_ref().map(|k| k.xpub.clone());
    let handover = keychain.filter(|_| ecdh && !reset).map(|k| (k, super::issuance::fresh_path()));
    token.derivation_path = handover.as_ref().map(|(_, (_, text))| text.clone());
    // Sealed before the token is stored, so that a failure leaves no token nobody holds.
    let encrypted = match handover {
        Some((keychain, path)) => Some(super::issuance::encrypt(svc, &keychain, path, &value).await?),
        None => None,
    };
    let mut entry = audit::entry(AuditType::LoginSucceeded).data(json!({
        "forReset2FA": reset,
        "grantType": grant_type.as_str(),
        "derivationPath": token.derivation_path,
    }));
    entry.user_id = Some(user.id.clone());
    entry.ip = Some(ip.to_string());
    entry.token_id = Some(token.id.clone());
    svc.store.insert_token(&token, &[], &[entry]).await?;
    user.last_login = Some(now);
    Ok(Session { value, token, user, memberships, ttl_secs: ttl, reset_2fa: reset, encrypted, ecdh_keychain })
}
