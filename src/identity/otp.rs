//! One-time password checks (RFC 6238 TOTP) wherever an OTP is presented: login, access token
//! creation, unlock. A file of its own so that login and tokens both depend on it and not on
//! each other (docs/decisions.md#architecture).
//!
//! Layer rule: no web-framework types and nothing of the HTTP layer (docs/architecture.md).

use crate::model::audit::AuditType;
use std::{
    collections::HashMap,
    net::IpAddr,
    sync::{Arc, Mutex},
};

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
    types::{SecondFactor, UserId},
};

/// Most users whose OTP lock a process keeps; past it, locks nobody holds are dropped, and when
/// every one is held the users beyond share one lock.
pub const MAX_OTP_LOCKS: usize = 10_000;

/// One lock per user (at most [`MAX_OTP_LOCKS`]) that a user's OTP checks in this process take in
/// turn. The throttle counts each check as a failure until it passes, so checks run side by
/// side count each other: ten right codes at once (BitGoJS's `sendMany` in parallel) reached
/// `login.max_otp_failures` and were refused. One after another, a right code never counts as
/// a wrong one; wrong ones still do, up to the limit (docs/decisions.md#brute-force-limits).
#[derive(Default)]
pub struct OtpLocks {
    users: Mutex<HashMap<UserId, Arc<tokio::sync::Mutex<()>>>>,
    /// Shared by the users who find the map full of held locks.
    overflow: Arc<tokio::sync::Mutex<()>>,
}

impl OtpLocks {
    /// The lock of `user`'s OTP checks.
    fn of(&self, user: &UserId) -> Arc<tokio::sync::Mutex<()>> {
        let mut users = self.users.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(lock) = users.get(user) {
            return lock.clone();
        }
        if users.len() >= MAX_OTP_LOCKS {
            // Only the map holds an idle lock: whoever next needs it makes a new one.
            users.retain(|_, lock| Arc::strong_count(lock) > 1);
            if users.len() >= MAX_OTP_LOCKS {
                return self.overflow.clone();
            }
        }
        users.entry(user.clone()).or_default().clone()
    }
}

/// Checks a one-time password for `user` (a TOTP code, or a passkey assertion standing for
/// one: `super::passkeys`), presented from `ip`, and claims its time step (or challenge)
/// against replay. Used wherever an OTP is checked (login, access token creation, unlock,
/// withdrawals, approvals). Each check counts as a failure until it passes
/// (`identity::throttle`); one user's checks run one after another in a process
/// ([`OtpLocks`]). `Ok(false)` means wrong or replayed; `Throttled` (`TooManyOtpAttempts`)
/// after too many wrong codes.
pub async fn verify_otp(svc: &Identity, user: &User, code: &SecondFactor, ip: IpAddr) -> Result<bool> {
    let lock = svc.otp_locks.of(&user.id);
    let _turn = lock.lock().await;
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
