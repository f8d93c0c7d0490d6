//! The per-user API rate limit: `[rate_limit]`.

use serde::{Deserialize, Serialize};

/// The per-user API rate limit (docs/decisions.md#webhook-abuse-and-the-api-rate-limit): a token
/// bucket per user, shared by every process on PostgreSQL
/// (docs/decisions.md#limits-shared-across-processes).
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct RateLimitConfig {
    /// Requests a user may make per `period` (BitGo documents 360 per minute).
    pub requests: u32,
    /// Requests a service admin's tokens may make per `period`; 0: no limit.
    pub admin_requests: u32,
    /// Length of the window, seconds.
    pub period: u64,
    /// On PostgreSQL, keep this limit's and the per-webhook operation limit's buckets in the
    /// database for every process (true), or in each process (false: N processes allow N times
    /// the rate). SQLite always keeps them in the process.
    pub shared: bool,
}

impl Default for RateLimitConfig {
    fn default() -> Self {
        Self { requests: 360, admin_requests: 600_000, period: 60, shared: true }
    }
}
