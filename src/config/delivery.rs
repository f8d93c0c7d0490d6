//! Webhook delivery: `[delivery]`.

use ipnet::IpNet;
use serde::{Deserialize, Serialize};

use super::{de_cidr_list, de_number_list};

/// The webhook delivery engine (docs/decisions.md#webhooks).
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct DeliveryConfig {
    /// CIDR blocks delivery may reach even though they are not globally routable.
    #[serde(deserialize_with = "de_cidr_list")]
    pub allowed_cidrs: Vec<IpNet>,
    /// Delay before each retry, seconds (BitGo's schedule: 1, 5, 10, 30, 60, 120, 240 minutes).
    #[serde(deserialize_with = "de_number_list")]
    pub retry_schedule: Vec<u64>,
    /// Per-attempt timeout, seconds.
    pub timeout: u64,
    /// Deliveries in flight at once per process.
    pub concurrency: usize,
    /// Deliveries in flight at once per webhook and process, so that one slow receiver cannot
    /// hold every slot.
    pub per_webhook_concurrency: usize,
    /// Failures within `suspend_window` that suspend a webhook.
    pub suspend_after_failures: u32,
    /// Seconds.
    pub suspend_window: u64,
    /// Failures over a webhook's life that suspend it.
    pub suspend_after_total_failures: u32,
    /// How often to look for due notifications when not woken, milliseconds.
    pub poll_interval_ms: u64,
    /// Deliveries in flight at once per tenant (an enterprise, or the owner of a block webhook
    /// without one) and process, so that one tenant's hanging receivers leave the other slots
    /// to everyone else (docs/decisions.md#webhook-abuse-and-the-api-rate-limit). Default: half of `concurrency`'s default; a deployment
    /// with one enterprise may raise it to `concurrency`.
    pub per_tenant_concurrency: usize,
    /// Days delivery attempts and finished (processed or failed) notifications are kept; older
    /// ones are pruned by the worker in small batches (docs/decisions.md#webhook-abuse-and-the-api-rate-limit). 0 keeps them for ever;
    /// fractions are allowed (0.01 is 14.4 minutes, for soak benchmarks of pruning).
    pub retention_days: f64,
    /// How often the worker prunes, milliseconds (it also prunes when it starts).
    pub prune_interval_ms: u64,
}

impl Default for DeliveryConfig {
    fn default() -> Self {
        Self {
            allowed_cidrs: Vec::new(),
            retry_schedule: vec![60, 300, 600, 1800, 3600, 7200, 14400],
            timeout: 10,
            concurrency: 64,
            per_webhook_concurrency: 16,
            suspend_after_failures: 100,
            suspend_window: 7 * 24 * 3600,
            suspend_after_total_failures: 500,
            poll_interval_ms: 250,
            per_tenant_concurrency: 32,
            retention_days: 30.0,
            prune_interval_ms: 600_000,
        }
    }
}
