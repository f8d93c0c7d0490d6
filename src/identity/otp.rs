//! One-time password checks (RFC 6238 TOTP) wherever an OTP is presented: login, access token
//! creation, unlock. A file of its own so that login and tokens both depend on it and not on
//! each other (docs/decisions.md#architecture).
//!
//! Layer rule: no web-framework types and nothing of the HTTP layer (docs/architecture.md).

use crate::model::audit::AuditType;
use std::net::IpAddr;

use serde_json::json;

use super::{
    throttle,
    totp::{self, OtpCheck},
    Identity,
};
use crate::{
    audit::{self, EntryExt},
    error::Result,
    store::User,
    types::SecondFactor,
};

/// Checks a one-time password for `user` (a TOTP code, or a passkey assertion standing for
/// one: `super::passkeys`), presented from `ip`, and claims its time step (or challenge)
/// against replay. Used wherever an OTP is checked (login, access token creation). Each check
/// counts as a failure until it passes (`identity::throttle`). `Ok(false)` means wrong or
/// replayed; `Throttled` (`TooManyOtpAttempts`) after too many wrong codes.
pub async fn verify_otp(svc: &Identity, user: &User, code: &SecondFactor, ip: IpAddr) -> Result<bool> {
    let now = svc.store.clock().now();
    let attempt = match throttle::begin_otp(svc, &user.id, &throttle::client_key(ip), now).await {
        Ok(a) => a,
        Err(e) => {
            if svc.throttle_notes.first_in_minute(&format!("otp:{}", user.id), now) {
                let entry = audit::entry(AuditType::OtpThrottled).data(json!({})).ip_and_user(ip, &user.id);
                audit::record(&svc.store, &[entry]).await;
            }
            return Err(e);
        }
    };
    let ok = match code {
        SecondFactor::Totp(code) => match totp::check(&svc.key, svc.config.environment, user, code, now)? {
            OtpCheck::Invalid => false,
            OtpCheck::Valid(None) => true,
            OtpCheck::Valid(Some(step)) => svc.store.advance_totp_step(&user.id, step).await?,
        },
        SecondFactor::Passkey(assertion) => super::webauthn::verify_assertion(svc, user, assertion).await?,
    };
    if ok {
        attempt.forget(svc).await?;
    } else {
        audit::record(&svc.store, &[audit::entry(AuditType::OtpFailed).ip_and_user(ip, &user.id)]).await;
    }
    Ok(ok)
}
