//! Per-webhook limits on the operator actions that make work: simulate, resend and unblock
//! (issue 9 §6). A token bucket per webhook and process (governor), counted after the access
//! check, so only those who may manage a webhook can spend its budget.
//!
//! Layer rule: no web-framework types (docs/architecture.md).

use std::num::NonZeroU32;

use governor::{
    clock::{Clock, DefaultClock},
    DefaultKeyedRateLimiter, Quota, RateLimiter,
};

use crate::error::{Error, Result};

/// Simulate, resend and unblock calls per webhook and minute (`webhooks.operations_per_minute`).
pub struct OperationLimiter {
    limiter: DefaultKeyedRateLimiter<String>,
    clock: DefaultClock,
}

impl OperationLimiter {
    /// At most `per_minute` operations per webhook (at least 1), refilled evenly over the minute.
    pub fn new(per_minute: u32) -> Self {
        let quota = Quota::per_minute(NonZeroU32::new(per_minute).unwrap_or(NonZeroU32::MIN));
        Self { limiter: RateLimiter::keyed(quota), clock: DefaultClock::default() }
    }

    /// Counts one operation on `webhook_id`. Errors: `Throttled` (429 with `Retry-After`) when
    /// its bucket is empty.
    pub fn check(&self, webhook_id: &str) -> Result<()> {
        self.limiter.check_key(&webhook_id.to_string()).map_err(|not_until| {
            let wait = not_until.wait_time_from(self.clock.now());
            Error::Throttled {
                name: "TooManyRequests",
                message: "too many simulate, resend or unblock calls for this webhook; try again later"
                    .into(),
                retry_after_secs: wait.as_secs().max(1),
            }
        })
    }
}
