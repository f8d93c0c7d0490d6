//! Single sign-on: `[sso]` (docs/sso.md).

use serde::{Deserialize, Serialize};

/// Bounds on sign-ins through an enterprise's identity provider.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct SsoConfig {
    /// Seconds a sign-in may spend at the provider: its `state` expires after.
    pub login_ttl: u64,
    /// Milliseconds each call to a provider (discovery, keys, token, userinfo) may take.
    pub timeout_ms: u64,
    /// Calls to providers this process makes at once; one that finds no free slot within its
    /// timeout fails the sign-in.
    pub concurrency: u32,
    /// Sign-ins started and not finished, across the service; past it new ones are refused
    /// (`TooManyRequests`) until some finish or expire.
    pub max_pending: u32,
    /// Sign-ins one client (an IPv4 address or IPv6 /64) may start and not finish within
    /// `login.window` seconds; past it, 429 `TooManyRequests` before the provider is called. A
    /// sign-in that finishes frees its place; a failed or abandoned one keeps it.
    pub max_starts_per_client: u32,
    /// Largest answer read from a provider (discovery, keys, token, userinfo), bytes; a larger
    /// one fails the sign-in rather than fill the memory.
    pub max_answer_bytes: usize,
    /// Longest session a sign-in gives, seconds; 0: the provider's `id_token` lifetime. Never
    /// longer than `login.session_ttl`.
    pub session_ttl: u64,
}

impl Default for SsoConfig {
    fn default() -> Self {
        Self {
            login_ttl: 600,
            timeout_ms: 10_000,
            concurrency: 16,
            max_pending: 10_000,
            max_starts_per_client: 30,
            max_answer_bytes: 1 << 20,
            session_ttl: 0,
        }
    }
}

impl SsoConfig {
    pub(super) fn validate(&self) -> Result<(), String> {
        let bad = |key: &str, what: &str| Err(format!("invalid configuration: sso.{key}: {what}"));
        if !(10..=3600).contains(&self.login_ttl) {
            return bad("login_ttl", "from 10 to 3600 seconds");
        }
        if !(100..=60_000).contains(&self.timeout_ms) {
            return bad("timeout_ms", "from 100 to 60000");
        }
        if !(1..=1000).contains(&self.concurrency) {
            return bad("concurrency", "from 1 to 1000");
        }
        if !(1..=1_000_000).contains(&self.max_pending) {
            return bad("max_pending", "from 1 to 1000000");
        }
        if !(1024..=64 << 20).contains(&self.max_answer_bytes) {
            return bad("max_answer_bytes", "from 1024 to 67108864");
        }
        if !(1..=100_000).contains(&self.max_starts_per_client) {
            return bad("max_starts_per_client", "from 1 to 100000");
        }
        Ok(())
    }
}
