//! Brute-force limits on logins and one-time passwords (docs/decisions.md#brute-force-limits). Every attempt is
//! recorded as a failure *before* its password or OTP is checked and forgotten when it
//! succeeds, so N parallel guesses count as N; an attempt refused by a limit is not recorded,
//! so an attacker's refused guesses do not extend anyone's lockout. Settings: `login.*`.
//!
//! Layer rule: no web-framework types (docs/architecture.md).

use crate::error::ErrorName;
use std::{collections::HashMap, net::IpAddr, sync::Mutex};

use crate::{
    error::{Error, Result},
    identity::Identity,
    store::{FailureCount, FailuresOf},
    types::UserId,
};

const LOGIN: &str = "login";
const OTP: &str = "otp";
const SSO: &str = "sso";
const HOUR: i64 = 3600;

/// The client a limit counts: an IPv4 address, or the /64 of an IPv6 address (one subscriber
/// usually holds a whole /64). IPv4-mapped IPv6 addresses count as their IPv4 address.
pub fn client_key(ip: IpAddr) -> String {
    match ip {
        IpAddr::V4(v4) => v4.to_string(),
        IpAddr::V6(v6) => match v6.to_ipv4_mapped() {
            Some(v4) => v4.to_string(),
            None => {
                let s = v6.segments();
                format!("{:x}:{:x}:{:x}:{:x}::/64", s[0], s[1], s[2], s[3])
            }
        },
    }
}

/// Most refusals a process remembers; beyond, expired ones are dropped, and if none has
/// expired the newest is not remembered (the database still decides).
const MAX_REMEMBERED: usize = 100_000;

/// How long a refusal is trusted before one attempt asks the database again, seconds. Short:
/// the count that refused may include attempts still in flight, which are forgotten if they
/// turn out not to be failures.
const RECHECK_SECS: i64 = 5;

/// Clients this process refused for the per-client limit. Their attempts are refused without
/// a database query (with the `Retry-After` the database gave); every [`RECHECK_SECS`] one
/// attempt goes to the database instead, and if it is admitted the client is forgotten. A
/// flood from one client over its limit thus costs the database one query per few seconds, and
/// legitimate logins do not queue behind it.
#[derive(Debug, Default)]
pub struct RefusedClients(Mutex<HashMap<String, Refusal>>);

#[derive(Debug, Clone, Copy)]
struct Refusal {
    /// Until when (Unix seconds) attempts are refused without asking the database.
    trusted_until: i64,
    /// What the database said: when the client may try again.
    retry_at: i64,
}

impl RefusedClients {
    /// When the client may retry, if it is to be refused without a query; `None` lets the
    /// attempt ask the database (and makes the others wait for its answer by trusting the
    /// refusal for another [`RECHECK_SECS`]).
    fn retry_at(&self, client: &str, now: i64) -> Option<i64> {
        let mut map = self.0.lock().unwrap_or_else(|p| p.into_inner());
        let r = map.get_mut(client).filter(|r| r.retry_at > now)?;
        if r.trusted_until > now {
            return Some(r.retry_at);
        }
        r.trusted_until = now + RECHECK_SECS;
        None
    }

    fn remember(&self, client: &str, retry_at: i64, now: i64) {
        let mut map = self.0.lock().unwrap_or_else(|p| p.into_inner());
        if map.len() >= MAX_REMEMBERED {
            map.retain(|_, r| r.retry_at > now);
        }
        if map.len() < MAX_REMEMBERED {
            map.insert(client.to_string(), Refusal { trusted_until: now + RECHECK_SECS, retry_at });
        }
    }

    fn admitted(&self, client: &str) {
        let mut map = self.0.lock().unwrap_or_else(|p| p.into_inner());
        if !map.is_empty() {
            map.remove(client);
        }
    }
}

/// A failure recorded ahead of the check it guards; [`Reservation::forget`] removes it.
#[derive(Debug)]
pub struct Reservation {
    id: i64,
}

impl Reservation {
    /// The guarded check passed, or was not tried: the attempt is not a failure.
    pub async fn forget(self, svc: &Identity) -> Result<()> {
        svc.store.forget_failure(self.id).await?;
        Ok(())
    }
}

fn secs(v: u64) -> i64 {
    i64::try_from(v).unwrap_or(i64::MAX)
}

fn throttled(name: ErrorName, message: &str, retry_at: i64, now: i64) -> Error {
    Error::Throttled {
        name,
        message: message.into(),
        retry_after_secs: u64::try_from(retry_at - now).unwrap_or(0).max(1),
    }
}

/// Whether `c` (which includes the caller's own reservation when `own` is 1) reaches `max`.
fn reached(c: FailureCount, own: u32, max: u32) -> bool {
    c.count.saturating_sub(own) >= max
}

/// Applies the login limits for `email` from `client`, counting failures up to `up_to`.
async fn check_login(
    svc: &Identity,
    email: &str,
    client: &str,
    now: i64,
    up_to: i64,
    own: u32,
) -> Result<()> {
    let cfg = &svc.config.login;
    let window = secs(cfg.window);
    let since = now.saturating_sub(window);
    let message = "too many failed login attempts; try again later";
    let pair = svc.store.failures(LOGIN, FailuresOf::Pair { subject: email, client }, since, up_to).await?;
    if reached(pair, own, cfg.max_failures_per_email) {
        return Err(throttled(ErrorName::TooManyRequests, message, pair.oldest.unwrap_or(now) + window, now));
    }
    let by_client = svc.store.failures(LOGIN, FailuresOf::Client(client), since, up_to).await?;
    if reached(by_client, own, cfg.max_failures_per_ip) {
        let until = by_client.oldest.unwrap_or(now) + window;
        svc.refused_clients.remember(client, until, now);
        return Err(throttled(ErrorName::TooManyRequests, message, until, now));
    }
    let by_email = svc.store.failures(LOGIN, FailuresOf::Subject(email), now - HOUR, up_to).await?;
    if reached(by_email, own, cfg.email_delay_after) {
        let known_since = now.saturating_sub(secs(cfg.known_client_days).saturating_mul(86_400));
        if !svc.store.known_login_client(email, client, known_since).await? {
            let over = i64::from(by_email.count.saturating_sub(own) - cfg.email_delay_after) + 1;
            let delay = over.saturating_mul(secs(cfg.email_delay_step)).min(secs(cfg.email_delay_max));
            let retry_at = by_email.latest.unwrap_or(now) + delay;
            if retry_at > now {
                return Err(throttled(ErrorName::TooManyRequests, message, retry_at, now));
            }
        }
    }
    Ok(())
}

/// Admits a login attempt for `email` (lower-cased) from `client` ([`client_key`]) at `now`
/// (Unix seconds), recording it as a failure until it succeeds. Errors: `Throttled` when a
/// limit is reached (per email and client, per client, or the per-email wait).
pub async fn begin_login(svc: &Identity, email: &str, client: &str, now: i64) -> Result<Reservation> {
    if let Some(until) = svc.refused_clients.retry_at(client, now) {
        let message = "too many failed login attempts; try again later";
        return Err(throttled(ErrorName::TooManyRequests, message, until, now));
    }
    check_login(svc, email, client, now, i64::MAX, 0).await?;
    svc.refused_clients.admitted(client);
    let id = svc.store.reserve_failure(LOGIN, email, client, now).await?;
    // Parallel attempts all reserved before any was checked: only those within the limit in
    // reservation order go ahead.
    if let Err(e) = check_login(svc, email, client, now, id, 1).await {
        svc.store.forget_failure(id).await?;
        return Err(e);
    }
    Ok(Reservation { id })
}

/// After a successful login: forgets `email`'s failures from `client` and stale ones, and
/// remembers the client as one the user logs in from.
pub async fn login_succeeded(svc: &Identity, email: &str, client: &str, now: i64) -> Result<()> {
    let keep = secs(svc.config.login.window).max(HOUR);
    svc.store.clear_failures(LOGIN, email, client, now.saturating_sub(keep)).await?;
    svc.store.remember_login_client(email, client, now).await?;
    Ok(())
}

async fn check_otp(svc: &Identity, user_id: &UserId, now: i64, up_to: i64, own: u32) -> Result<()> {
    let cfg = &svc.config.login;
    let window = secs(cfg.window);
    let c = svc.store.failures(OTP, FailuresOf::Subject(user_id), now.saturating_sub(window), up_to).await?;
    if reached(c, own, cfg.max_otp_failures) {
        return Err(throttled(
            ErrorName::TooManyOtpAttempts,
            "too many wrong one-time passwords; try again later",
            c.oldest.unwrap_or(now) + window,
            now,
        ));
    }
    Ok(())
}

/// Admits an OTP check for `user_id` from `client`, wherever an OTP is checked, recording it as
/// a failure until it succeeds. Errors: `Throttled` (`TooManyOtpAttempts`) after
/// `login.max_otp_failures` wrong codes within `login.window`, whatever the token or address.
pub async fn begin_otp(svc: &Identity, user_id: &UserId, client: &str, now: i64) -> Result<Reservation> {
    check_otp(svc, user_id, now, i64::MAX, 0).await?;
    let id = svc.store.reserve_failure(OTP, user_id, client, now).await?;
    if let Err(e) = check_otp(svc, user_id, now, id, 1).await {
        svc.store.forget_failure(id).await?;
        return Err(e);
    }
    Ok(Reservation { id })
}

async fn check_sso(svc: &Identity, client: &str, now: i64, up_to: i64, own: u32) -> Result<()> {
    let window = secs(svc.config.login.window);
    let c = svc.store.failures(SSO, FailuresOf::Client(client), now.saturating_sub(window), up_to).await?;
    if reached(c, own, svc.config.sso.max_starts_per_client) {
        return Err(throttled(
            ErrorName::TooManyRequests,
            "too many single sign-ons started from this address; try again later",
            c.oldest.unwrap_or(now) + window,
            now,
        ));
    }
    Ok(())
}

/// Admits the start of a single sign-on into `enterprise` from `client`, counted before the
/// provider is called and kept until [`sso_finished`]. Errors: `Throttled` (`TooManyRequests`)
/// after `sso.max_starts_per_client` unfinished starts within `login.window`.
pub async fn begin_sso(svc: &Identity, enterprise: &str, client: &str, now: i64) -> Result<()> {
    check_sso(svc, client, now, i64::MAX, 0).await?;
    let id = svc.store.reserve_failure(SSO, enterprise, client, now).await?;
    if let Err(e) = check_sso(svc, client, now, id, 1).await {
        svc.store.forget_failure(id).await?;
        return Err(e);
    }
    Ok(())
}

/// A single sign-on into `enterprise` finished from `client`: its starts no longer count.
pub async fn sso_finished(svc: &Identity, enterprise: &str, client: &str, now: i64) -> Result<()> {
    let keep = secs(svc.config.login.window).max(HOUR);
    svc.store.clear_failures(SSO, enterprise, client, now.saturating_sub(keep)).await?;
    Ok(())
}

/// Throttling is recorded once per subject and minute per process, not per refused attempt: a
/// flood must not turn into a flood of audit writes.
#[derive(Debug, Default)]
pub struct ThrottleNotes(Mutex<HashMap<String, i64>>);

/// Most subjects remembered by [`ThrottleNotes`].
const MAX_THROTTLE_NOTES: usize = 10_000;

impl ThrottleNotes {
    /// Whether a throttling of `subject` at `now` (Unix seconds) should be recorded.
    pub fn first_in_minute(&self, subject: &str, now: i64) -> bool {
        let mut map = self.0.lock().unwrap_or_else(|p| p.into_inner());
        if map.get(subject).is_some_and(|t| now - t < 60) {
            return false;
        }
        if map.len() >= MAX_THROTTLE_NOTES {
            map.retain(|_, t| now - *t < 60);
            if map.len() >= MAX_THROTTLE_NOTES {
                return false;
            }
        }
        map.insert(subject.to_string(), now);
        true
    }
}

#[cfg(test)]
mod tests {
    use super::client_key;

    #[test]
    fn clients_are_ipv4_addresses_or_ipv6_slash_64s() {
        assert_eq!(client_key("192.0.2.7".parse().unwrap()), "192.0.2.7");
        assert_eq!(client_key("::ffff:192.0.2.7".parse().unwrap()), "192.0.2.7");
        assert_eq!(client_key("2001:db8:1:2:3:4:5:6".parse().unwrap()), "2001:db8:1:2::/64");
        assert_eq!(client_key("2001:db8:1:2::9".parse().unwrap()), "2001:db8:1:2::/64");
    }
}
