//! Per-webhook limits on the operator actions that make work: simulate, resend and unblock
//! (issue 9 §6). A token bucket per webhook and process (governor), counted after the access
//! check, so only those who may manage a webhook can spend its budget.
//!
//! Layer rule: no web-framework types (docs/architecture.md).

use std::num::NonZeroU32;

use crate::{error::Result, identity::rate_limit::KeyedBuckets};

/// Simulate, resend and unblock calls per webhook and minute (`webhooks.operations_per_minute`).
pub struct OperationLimiter(KeyedBuckets);

impl OperationLimiter {
    /// At most `per_minute` operations per webhook (at least 1), refilled evenly over the minute.
    pub fn new(per_minute: u32) -> Self {
        Self(KeyedBuckets::new(NonZeroU32::new(per_minute).unwrap_or(NonZeroU32::MIN), 60))
    }

    /// Counts one operation on `webhook_id`. Errors: `Throttled` (429 with `Retry-After`) when
    /// its bucket is empty.
    pub fn check(&self, webhook_id: &str) -> Result<()> {
        let message =
            || "too many simulate, resend or unblock calls for this webhook; try again later".to_string();
        self.0.check(webhook_id, message).map(drop).map_err(|(e, _)| e)
    }
}
