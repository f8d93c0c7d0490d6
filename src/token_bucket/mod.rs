//! Token buckets by key (a user, a webhook): the per-user API rate limit and the per-webhook
//! operation limit count requests in them (docs/decisions.md#limits-shared-across-processes).
//!
//! On PostgreSQL the buckets are the database's, shared by every process ([`shared`]): N API
//! processes allow a user the configured rate, not N times it. A process reserves a few tokens
//! at a time, so most requests cost no round trip. When the database cannot be reached a
//! request that may change state is refused (503, fail closed) and a read is counted in this
//! process's own bucket instead. On SQLite, which serves one process, the buckets are this
//! process's ([`local`]).
//!
//! Layer rule: no web-framework types (docs/architecture.md).

use std::{num::NonZeroU32, sync::Arc};

use crate::{
    error::{Error, ErrorName},
    metrics::{LimiterLabels, Metrics},
    store::DynStore,
};

pub mod local;
pub mod shared;

/// Where a key stands: the `RateLimit-Limit`, `RateLimit-Remaining` and `RateLimit-Reset`
/// header values (requests, requests, seconds until the bucket is full again).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RateState {
    pub limit: u32,
    pub remaining: u32,
    pub reset_secs: u64,
}

/// Why a token was not taken: the key's bucket is empty.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Limited {
    Empty { state: RateState, retry_after_secs: u64 },
}

/// One limiter's buckets, all of one size: `limit` requests per `period` seconds per key,
/// refilled evenly.
pub struct Buckets {
    /// The metrics label and the shared buckets' name prefix (`api`, `webhook_operations`).
    name: &'static str,
    local: local::LocalBuckets,
    shared: Option<shared::SharedBuckets>,
    metrics: Arc<Metrics>,
}

impl Buckets {
    /// Shared through `store` when `share` and the store shares buckets (PostgreSQL), else
    /// this process's own.
    pub fn new(
        name: &'static str,
        limit: NonZeroU32,
        period_secs: u64,
        (store, share): (&DynStore, bool),
        metrics: Arc<Metrics>,
    ) -> Self {
        let shared = (share && store.shares_rate_buckets())
            .then(|| shared::SharedBuckets::new(name, limit, period_secs, store.clone(), metrics.clone()));
        Self { name, local: local::LocalBuckets::new(limit, period_secs), shared, metrics }
    }

    /// The most requests per period.
    pub fn limit(&self) -> u32 {
        self.local.limit()
    }

    fn count(&self, outcome: &'static str) {
        self.metrics.limiters.checks.get_or_create(&LimiterLabels { limiter: self.name, outcome }).inc();
    }

    /// Counts one request of `key`; `writes`: the request may change state. Returns where the
    /// key stands. Errors, with where the key stands when known: `Throttled` (429
    /// `TooManyRequests` with `Retry-After`, saying `message`) when its bucket is empty;
    /// `Unavailable` (503) for a request that writes while the shared buckets cannot be
    /// reached.
    pub async fn check(
        &self,
        key: &str,
        writes: bool,
        message: impl FnOnce() -> String,
    ) -> Result<RateState, (Error, Option<RateState>)> {
        let taken = match &self.shared {
            None => self.local.take(key),
            Some(shared) => match shared.take(key).await {
                Ok(taken) => taken,
                Err(cause) if writes => {
                    self.count("unavailable");
                    tracing::debug!(limiter = self.name, %cause, "shared rate limit unreachable: refused");
                    let message = "the rate limit cannot be checked while the database is unavailable; try again shortly";
                    return Err((Error::Unavailable(message.into()), None));
                }
                Err(cause) => {
                    self.count("fallback");
                    tracing::debug!(limiter = self.name, %cause, "shared rate limit unreachable: this process counts");
                    self.local.take(key)
                }
            },
        };
        match taken {
            Ok(state) => {
                self.count("allowed");
                Ok(state)
            }
            Err(Limited::Empty { state, retry_after_secs }) => {
                self.count("throttled");
                let error = Error::Throttled {
                    name: ErrorName::TooManyRequests,
                    message: message(),
                    retry_after_secs,
                };
                Err((error, Some(state)))
            }
        }
    }
}
