//! The PostgreSQL pool: `[postgres]`.

use serde::{Deserialize, Serialize};

/// PostgreSQL connection settings (docs/decisions.md#webhooks).
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct PostgresConfig {
    /// Connections in the pool.
    pub max_connections: u32,
    /// Longest a statement may run, seconds; then it fails and the request answers 503
    /// `ServiceUnavailable`. Migrations run without it.
    pub statement_timeout: u64,
    /// Longest a request waits for a pooled connection, milliseconds, also while the database
    /// does not answer at all; then 503 `ServiceUnavailable` (docs/decisions.md#connections-and-database-outages).
    pub acquire_timeout_ms: u64,
    /// TLS: disable, allow, prefer, require, verify-ca or verify-full. Unset: the URL's
    /// `sslmode`, else prefer.
    pub sslmode: Option<String>,
    /// How often the delivery worker vacuums the outbox's notifications table, seconds; 0
    /// leaves it to autovacuum. Every claim and completion leaves dead row versions that claims
    /// walk past until a vacuum; with autovacuum off or behind, delivery slowed to a seventh
    /// after 240,000 events (docs/decisions.md#performance-as-the-data-grows).
    pub vacuum_interval: u64,
}

impl Default for PostgresConfig {
    fn default() -> Self {
        Self {
            max_connections: 16,
            statement_timeout: 5,
            acquire_timeout_ms: 1500,
            sslmode: None,
            vacuum_interval: 30,
        }
    }
}
