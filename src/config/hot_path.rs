//! Settings of the hot paths (docs/decisions.md#performance): group-commit ingestion and the read cache.

use serde::{Deserialize, Serialize};

/// Group-commit ingestion (docs/decisions.md#performance): one writer task per process gathers the events
/// waiting to be stored and writes them in one transaction.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct IngestConfig {
    /// Most events written in one transaction (1..=1000).
    pub batch_max: usize,
    /// How long the writer waits for more events after the first of a batch, microseconds
    /// (0..=2000). 0: it takes only what is already waiting, which under load is plenty.
    pub linger_us: u64,
    /// Events waiting for the writer at most; more requests wait for room (1..=100000).
    pub queue: usize,
}

impl Default for IngestConfig {
    fn default() -> Self {
        Self { batch_max: 256, linger_us: 0, queue: 4096 }
    }
}

/// The in-process read cache (docs/decisions.md#performance): token by hash, user by id, a user's memberships, and
/// the active webhooks an event routes to, so that an authenticated request and an event's
/// fan-out need no query on a hit.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct CacheConfig {
    /// Entries kept per kind (tokens, users, membership lists, webhook routes); 0 turns the
    /// cache off.
    pub capacity: usize,
    /// How often the process reads the database's cache version to learn of changes
    /// made by other processes, milliseconds (10..=500). Whatever this is, an entry is never
    /// used when the last successful read started more than 1 s ago.
    pub poll_interval_ms: u64,
}

impl Default for CacheConfig {
    fn default() -> Self {
        Self { capacity: 10_000, poll_interval_ms: 250 }
    }
}

impl IngestConfig {
    pub(super) fn validate(&self) -> Result<(), String> {
        if !(1..=1000).contains(&self.batch_max)
            || self.linger_us > 2000
            || !(1..=100_000).contains(&self.queue)
        {
            return Err("invalid configuration: ingest.batch_max must be 1..=1000, ingest.linger_us 0..=2000 and ingest.queue 1..=100000".into());
        }
        Ok(())
    }
}

impl CacheConfig {
    pub(super) fn validate(&self) -> Result<(), String> {
        if !(10..=500).contains(&self.poll_interval_ms) {
            return Err("invalid configuration: cache.poll_interval_ms must be 10..=500".into());
        }
        Ok(())
    }
}
