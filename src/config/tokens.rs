//! Access tokens: `[tokens]`.

use serde::{Deserialize, Serialize};

/// Access token rules (docs/decisions.md#brute-force-limits).
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct TokensConfig {
    /// Allows `ipRestrict` blocks wider than /8 (IPv4) or /32 (IPv6) in production.
    pub allow_wide_ip_restrict: bool,
    /// How old a signed request's `Auth-Timestamp` may be, seconds (docs/decisions.md#signed-requests; BitGoJS
    /// checks responses with the same 5 minutes).
    pub hmac_window_back: u64,
    /// How far ahead of this server's clock it may be, seconds.
    pub hmac_window_ahead: u64,
    /// Signed reads remembered per process against replay; past it, signed reads are answered
    /// 503 `ServerBusy` until older ones leave the window.
    pub hmac_read_replay_capacity: usize,
}

impl Default for TokensConfig {
    fn default() -> Self {
        Self {
            allow_wide_ip_restrict: false,
            hmac_window_back: 300,
            hmac_window_ahead: 60,
            hmac_read_replay_capacity: 100_000,
        }
    }
}
