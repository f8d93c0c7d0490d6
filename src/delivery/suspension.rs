//! When repeated failures suspend a webhook (docs/webhooks.md, settings `delivery.suspend_*`):
//! more than `suspend_after_failures` failed attempts within `suspend_window` seconds, or
//! `suspend_after_total_failures` since the last unblock. The store applies the verdict in the
//! transaction that records the failures (`store::SuspendPolicy`).

use crate::{
    config::DeliveryConfig,
    store::{FailureFacts, SuspendPolicy},
};

/// The suspension rule of one deployment.
#[derive(Debug, Clone, Copy)]
pub struct SuspendRule {
    /// Milliseconds.
    pub window_ms: i64,
    pub max_in_window: u32,
    pub max_total: u32,
}

impl SuspendRule {
    /// The rule of `delivery.*`.
    pub fn of(cfg: &DeliveryConfig) -> Self {
        SuspendRule {
            window_ms: i64::try_from(cfg.suspend_window).unwrap_or(i64::MAX / 2000) * 1000,
            max_in_window: cfg.suspend_after_failures,
            max_total: cfg.suspend_after_total_failures,
        }
    }
}

impl SuspendPolicy for SuspendRule {
    fn window_ms(&self) -> i64 {
        self.window_ms
    }

    fn suspends(&self, facts: FailureFacts) -> bool {
        facts.in_window >= i64::from(self.max_in_window) || facts.total >= i64::from(self.max_total)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn suspends_at_either_limit_and_not_below() {
        let rule = SuspendRule { window_ms: 60_000, max_in_window: 10, max_total: 100 };
        assert!(!rule.suspends(FailureFacts { in_window: 9, total: 99 }));
        assert!(rule.suspends(FailureFacts { in_window: 10, total: 10 }));
        assert!(rule.suspends(FailureFacts { in_window: 0, total: 100 }));
    }
}
