//! Bounds on inbound connections (docs/decisions.md#connections-and-database-outages): how many, from whom, and how long one may sit
//! without a request.

use serde::{Deserialize, Serialize};

/// `[connections]`. Each cap, once reached, answers a new connection 503 `ServerBusy` and
/// closes it, rather than accepting until the process runs out of file descriptors.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct ConnectionsConfig {
    /// Inbound connections open at once per process. Lowered at start to what the descriptor
    /// limit leaves after `reserved_descriptors`, `delivery.concurrency` and the database pool.
    pub max: usize,
    /// Inbound connections open at once from one client address: an IPv4 address, or an IPv6
    /// /64 (one host's usual allocation). Peers in `trusted_proxies` are exempt, since every
    /// client behind them shares their address. 0 turns the cap off.
    pub max_per_address: usize,
    /// Seconds a connection may take to send a complete request head, counted from when the
    /// server starts waiting for one: from accept, or from the end of the previous response.
    pub header_read_timeout: u64,
    /// Seconds a kept-alive connection may sit without a new request after its last
    /// response; at most `header_read_timeout`.
    pub idle_timeout: u64,
    /// File descriptors kept back from inbound connections for files, DNS and the like, on
    /// top of `delivery.concurrency` and the database pool, so deliveries and queries never
    /// starve because of inbound sockets.
    pub reserved_descriptors: u64,
}

impl Default for ConnectionsConfig {
    fn default() -> Self {
        Self {
            max: 8192,
            max_per_address: 128,
            header_read_timeout: 30,
            idle_timeout: 10,
            reserved_descriptors: 256,
        }
    }
}

impl ConnectionsConfig {
    pub(super) fn validate(&self) -> Result<(), String> {
        if self.max == 0 || self.header_read_timeout == 0 || self.idle_timeout == 0 {
            return Err("invalid configuration: connections.max, connections.header_read_timeout and connections.idle_timeout must be positive".into());
        }
        if self.idle_timeout > self.header_read_timeout {
            return Err("invalid configuration: connections.idle_timeout may not exceed connections.header_read_timeout, which also counts the wait between requests".into());
        }
        Ok(())
    }
}
