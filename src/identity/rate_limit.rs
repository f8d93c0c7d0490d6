//! The per-user API rate limit (docs/decisions.md#webhook-abuse-and-the-api-rate-limit): a token bucket per user and process (governor's
//! GCRA), `rate_limit.requests` per `rate_limit.period` seconds (BitGo documents 360 per
//! minute), a separate allowance for service admins. Counted when a request authenticates,
//! before its handler runs.
//!
//! Per process, not shared: N API processes allow N times the rate. A shared bucket would put a
//! database write on every request; docs/decisions.md says why this is the trade.
//!
//! Layer rule: no web-framework types (docs/architecture.md).

use crate::error::ErrorName;
use std::{
    num::NonZeroU32,
    sync::atomic::{AtomicU64, Ordering},
    time::Duration,
};

use governor::{
    clock::{Clock, DefaultClock},
    middleware::StateInformationMiddleware,
    DefaultKeyedRateLimiter, Quota, RateLimiter,
};

use crate::{config::RateLimitConfig, error::Error};

type Limiter = DefaultKeyedRateLimiter<String, StateInformationMiddleware>;

/// Forget users idle long enough to have a full bucket, once per this many checks.
const RETAIN_EVERY: u64 = 10_000;

/// Where a user stands: the `RateLimit-Limit`, `RateLimit-Remaining` and `RateLimit-Reset`
/// header values (requests, requests, seconds until the bucket is full again).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RateState {
    pub limit: u32,
    pub remaining: u32,
    pub reset_secs: u64,
}

/// Token buckets by key (a user, a webhook), all of one size, per process (governor's GCRA).
pub struct KeyedBuckets {
    limiter: Limiter,
    limit: u32,
    refill: Duration,
    clock: DefaultClock,
    checks: AtomicU64,
}

impl KeyedBuckets {
    /// `limit` requests per `period_secs` for each key, refilled evenly.
    pub fn new(limit: NonZeroU32, period_secs: u64) -> Self {
        let refill = (Duration::from_secs(period_secs.max(1)) / limit.get()).max(Duration::from_nanos(1));
        let quota = Quota::with_period(refill).unwrap_or_else(|| Quota::per_second(limit)).allow_burst(limit);
        Self {
            limiter: RateLimiter::keyed(quota).with_middleware(),
            limit: limit.get(),
            refill,
            clock: DefaultClock::default(),
            checks: AtomicU64::new(0),
        }
    }

    fn reset_after(&self, remaining: u32) -> u64 {
        let missing = self.limit.saturating_sub(remaining);
        (self.refill * missing).as_secs_f64().ceil() as u64
    }

    /// Counts one request of `key`. Returns where the key stands. Errors: `Throttled` (429
    /// `TooManyRequests` with `Retry-After`, saying `message`), with where the key stands, when
    /// its bucket is empty.
    pub fn check(
        &self,
        key: &str,
        message: impl FnOnce() -> String,
    ) -> Result<RateState, (Error, RateState)> {
        if self.checks.fetch_add(1, Ordering::Relaxed) % RETAIN_EVERY == RETAIN_EVERY - 1 {
            self.limiter.retain_recent();
        }
        match self.limiter.check_key(&key.to_string()) {
            Ok(snapshot) => {
                let remaining = snapshot.remaining_burst_capacity();
                Ok(RateState { limit: self.limit, remaining, reset_secs: self.reset_after(remaining) })
            }
            Err(not_until) => {
                let wait = not_until.wait_time_from(self.clock.now()).as_secs_f64().ceil() as u64;
                let state = RateState { limit: self.limit, remaining: 0, reset_secs: self.reset_after(0) };
                let error = Error::Throttled {
                    name: ErrorName::TooManyRequests,
                    message: message(),
                    retry_after_secs: wait.max(1),
                };
                Err((error, state))
            }
        }
    }
}

/// The API rate limiter of one process.
pub struct ApiRateLimiter {
    users: KeyedBuckets,
    /// None: service admins are not limited (`rate_limit.admin_requests = 0`).
    admins: Option<KeyedBuckets>,
}

impl ApiRateLimiter {
    /// From `rate_limit.*` (validated: `requests` and `period` positive).
    pub fn new(cfg: &RateLimitConfig) -> Self {
        Self {
            users: KeyedBuckets::new(NonZeroU32::new(cfg.requests).unwrap_or(NonZeroU32::MIN), cfg.period),
            admins: NonZeroU32::new(cfg.admin_requests).map(|n| KeyedBuckets::new(n, cfg.period)),
        }
    }

    /// Counts one request of `user_id` (`admin`: the token carries the service-admin
    /// permission). Returns where the user stands, or `None` for an unlimited admin.
    /// Errors: `Throttled` (429 `TooManyRequests` with `Retry-After`), with where the user
    /// stands, when the bucket is empty.
    pub fn check(
        &self,
        user_id: &crate::types::UserId,
        admin: bool,
    ) -> Result<Option<RateState>, (Error, RateState)> {
        let buckets = match (admin, &self.admins) {
            (true, None) => return Ok(None),
            (true, Some(b)) => b,
            (false, _) => &self.users,
        };
        let message =
            || format!("rate limit of {} requests per period exceeded; try again later", buckets.limit);
        buckets.check(user_id, message).map(Some)
    }
}
