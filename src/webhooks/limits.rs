//! Per-webhook limits: on the operator actions that make work (simulate, resend, unblock and
//! verify; docs/decisions.md#webhook-abuse-and-the-api-rate-limit, docs/decisions.md#faults-and-floods), and on what a suspended webhook holds (docs/decisions.md#faults-and-floods). A token bucket per webhook ([`crate::token_bucket`]), counted after the access
//! check, so only those who may manage a webhook can spend its budget.
//!
//! Layer rule: no web-framework types (docs/architecture.md).

use std::{num::NonZeroU32, sync::Arc};

use crate::{error::Result, metrics::Metrics, store::DynStore, token_bucket::Buckets, types::WebhookId};

/// Simulate, resend, unblock and verify calls per webhook and minute
/// (`webhooks.operations_per_minute`), shared by every process on PostgreSQL
/// (docs/decisions.md#limits-shared-across-processes).
pub struct OperationLimiter(Buckets);

impl OperationLimiter {
    /// At most `per_minute` operations per webhook (at least 1), refilled evenly over the
    /// minute; `shared` as `rate_limit.shared` says.
    pub fn new(per_minute: u32, (store, shared): (&DynStore, bool), metrics: Arc<Metrics>) -> Self {
        let limit = NonZeroU32::new(per_minute).unwrap_or(NonZeroU32::MIN);
        Self(Buckets::new("webhook_operations", limit, 60, (store, shared), metrics))
    }

    /// Counts one operation on `webhook_id` (each makes work: it counts as a write). Errors:
    /// `Throttled` (429 with `Retry-After`) when its bucket is empty; `Unavailable` (503) when
    /// the shared buckets cannot be reached.
    pub async fn check(&self, webhook_id: &WebhookId) -> Result<()> {
        let message =
            || "too many simulate, resend or unblock calls for this webhook; try again later".to_string();
        self.0.check(webhook_id, true, message).await.map(drop).map_err(|(e, _)| e)
    }
}

/// How long a suspended webhook's count of held notifications is reused, before the store is
/// asked again.
const HELD_TTL: std::time::Duration = std::time::Duration::from_secs(1);
/// Most webhooks whose count is remembered; past it the memory starts over.
const MAX_HELD_ENTRIES: usize = 10_000;

/// Each suspended webhook's undelivered notifications, as last counted by the store (at most
/// [`HELD_TTL`] ago) plus those this process held since. The count is a scan of the webhook's
/// notifications: an event stream to a webhook at its cap asks for it once a second, not once
/// per event. Across processes the cap is approximate by that second's worth.
#[derive(Default)]
pub struct HeldCounts(std::sync::Mutex<std::collections::HashMap<WebhookId, (u64, std::time::Instant)>>);

impl HeldCounts {
    /// The remembered count of `id`, if fresh.
    pub fn get(&self, id: &WebhookId) -> Option<u64> {
        let map = self.0.lock().ok()?;
        map.get(id).filter(|(_, at)| at.elapsed() < HELD_TTL).map(|(n, _)| *n)
    }

    /// Remembers `n` for `id` as counted now.
    pub fn set(&self, id: &WebhookId, n: u64) {
        if let Ok(mut map) = self.0.lock() {
            if map.len() >= MAX_HELD_ENTRIES {
                map.clear();
            }
            map.insert(id.clone(), (n, std::time::Instant::now()));
        }
    }

    /// Counts one more held by this process.
    pub fn add_one(&self, id: &WebhookId) {
        if let Ok(mut map) = self.0.lock() {
            if let Some((n, _)) = map.get_mut(id) {
                *n += 1;
            }
        }
    }
}
