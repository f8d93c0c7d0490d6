//! Passkeys (WebAuthn): `[passkeys]`.

use serde::{Deserialize, Serialize};

/// The relying party passkeys are made for, and the bounds of their ceremonies
/// (docs/decisions.md#passkeys).
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct PasskeysConfig {
    /// The relying party id (WebAuthn §5.1.2): the host name browsers bind passkeys to, the
    /// console's host or a parent domain of it. Never an IP address.
    pub rp_id: String,
    /// The name authenticators show.
    pub rp_name: String,
    /// The origins (`scheme://host[:port]`) a ceremony may come from: the console's address as
    /// browsers reach it. Each must be `rp_id` or a subdomain of it. A TOML array or one
    /// comma-separated string.
    #[serde(deserialize_with = "super::de_string_list")]
    pub origins: Vec<String>,
    /// Accept any port on those origins (for development and tests on random ports).
    pub allow_any_port: bool,
    /// How long a challenge may be answered, seconds; it is used once.
    pub challenge_ttl: u64,
    /// Unanswered challenges kept at most, across users; past it a new one is 503 `ServerBusy`
    /// until older ones expire (the sign-in challenge needs no account).
    pub max_pending_challenges: usize,
    /// Unanswered challenges one client (an IPv4 address or an IPv6 /64) may hold; past it,
    /// 429 `TooManyRequests`, so one client cannot fill `max_pending_challenges` for everyone.
    pub max_pending_per_client: usize,
    /// Passkeys a user may have.
    pub max_per_user: usize,
}

impl Default for PasskeysConfig {
    fn default() -> Self {
        Self {
            rp_id: "localhost".into(),
            rp_name: "Custodian".into(),
            origins: vec!["http://localhost:3080".into()],
            allow_any_port: false,
            challenge_ttl: 300,
            max_pending_challenges: 10_000,
            max_pending_per_client: 20,
            max_per_user: 10,
        }
    }
}

impl PasskeysConfig {
    pub(super) fn validate(&self) -> Result<(), String> {
        if self.rp_id.is_empty() || self.rp_id.parse::<std::net::IpAddr>().is_ok() {
            return Err("invalid configuration: passkeys.rp_id must be a host name, not an address".into());
        }
        if self.origins.is_empty() {
            return Err("invalid configuration: passkeys.origins must name at least one origin".into());
        }
        if self.challenge_ttl == 0
            || self.max_pending_challenges == 0
            || self.max_pending_per_client == 0
            || self.max_per_user == 0
        {
            return Err("invalid configuration: passkeys.challenge_ttl, passkeys.max_pending_challenges and passkeys.max_per_user must be positive".into());
        }
        Ok(())
    }
}
