//! Token buckets kept in this process's memory (governor's GCRA): the rate limits on SQLite,
//! and the fallback for reads while a shared bucket cannot be reached.

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

use super::{Limited, RateState};

type Limiter = DefaultKeyedRateLimiter<String, StateInformationMiddleware>;

/// Forget keys idle long enough to have a full bucket, once per this many checks.
const RETAIN_EVERY: u64 = 10_000;

/// Token buckets by key, all of one size, in this process.
pub struct LocalBuckets {
    limiter: Limiter,
    limit: u32,
    refill: Duration,
    clock: DefaultClock,
    checks: AtomicU64,
}

impl LocalBuckets {
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

    /// The most requests per period.
    pub fn limit(&self) -> u32 {
        self.limit
    }

    fn reset_after(&self, remaining: u32) -> u64 {
        let missing = self.limit.saturating_sub(remaining);
        (self.refill * missing).as_secs_f64().ceil() as u64
    }

    /// Takes one token of `key`. Errors: [`Limited`] with where the key stands and the seconds
    /// until a token is back, when its bucket is empty.
    pub fn take(&self, key: &str) -> Result<RateState, Limited> {
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
                Err(Limited::Empty { state, retry_after_secs: wait.max(1) })
            }
        }
    }
}
