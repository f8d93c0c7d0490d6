//! The per-user API rate limit (docs/decisions.md#webhook-abuse-and-the-api-rate-limit):
//! `rate_limit.requests` per `rate_limit.period` seconds per user (BitGo documents 360 per
//! minute), a separate allowance for service admins. Counted when a request authenticates,
//! before its handler runs. On PostgreSQL the buckets are shared by every process
//! (docs/decisions.md#limits-shared-across-processes, [`crate::token_bucket`]).
//!
//! Layer rule: no web-framework types (docs/architecture.md).

use std::{num::NonZeroU32, sync::Arc};

use crate::{
    config::RateLimitConfig,
    error::Error,
    metrics::Metrics,
    store::DynStore,
    token_bucket::{Buckets, RateState},
};

/// The API rate limiter.
pub struct ApiRateLimiter {
    users: Buckets,
    /// None: service admins are not limited (`rate_limit.admin_requests = 0`).
    admins: Option<Buckets>,
}

impl ApiRateLimiter {
    /// From `rate_limit.*` (validated: `requests` and `period` positive).
    pub fn new(cfg: &RateLimitConfig, store: &DynStore, metrics: Arc<Metrics>) -> Self {
        let users = NonZeroU32::new(cfg.requests).unwrap_or(NonZeroU32::MIN);
        Self {
            users: Buckets::new("api", users, cfg.period, (store, cfg.shared), metrics.clone()),
            admins: NonZeroU32::new(cfg.admin_requests)
                .map(|n| Buckets::new("api_admin", n, cfg.period, (store, cfg.shared), metrics)),
        }
    }

    /// Counts one request of `user_id` (`admin`: the token carries the service-admin
    /// permission; `writes`: the request may change state). Returns where the user stands, or
    /// `None` for an unlimited admin. Errors, with where the user stands when known:
    /// `Throttled` (429 `TooManyRequests` with `Retry-After`) when the bucket is empty;
    /// `Unavailable` (503) for a write while the shared buckets cannot be reached.
    pub async fn check(
        &self,
        user_id: &crate::types::UserId,
        admin: bool,
        writes: bool,
    ) -> Result<Option<RateState>, (Error, Option<RateState>)> {
        let buckets = match (admin, &self.admins) {
            (true, None) => return Ok(None),
            (true, Some(b)) => b,
            (false, _) => &self.users,
        };
        let limit = buckets.limit();
        let message = || format!("rate limit of {limit} requests per period exceeded; try again later");
        buckets.check(user_id, writes, message).await.map(Some)
    }
}
