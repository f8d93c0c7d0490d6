//! Login brute-force limits and sessions: `[login]`.

use serde::{Deserialize, Serialize};

/// Login brute-force limits (docs/decisions.md#identity).
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct LoginConfig {
    /// Failed logins allowed per (email, client) within `window` before 429. A client is an
    /// IPv4 address or an IPv6 /64.
    pub max_failures_per_email: u32,
    /// Failed logins allowed per client, across all emails, within `window` before 429.
    pub max_failures_per_ip: u32,
    /// Length of the counting window, seconds.
    pub window: u64,
    /// Failed logins of one email from all clients within an hour after which each further
    /// attempt waits (429 with a growing `Retry-After`); clients the user logged in from in
    /// the last `known_client_days` are exempt.
    pub email_delay_after: u32,
    /// The wait grows by this many seconds per failure over `email_delay_after`.
    pub email_delay_step: u64,
    /// The longest wait, seconds: the per-email rule never locks an account for good.
    pub email_delay_max: u64,
    /// Days a successful login keeps its client exempt from the per-email wait.
    pub known_client_days: u64,
    /// Seconds after a login (password and OTP, or a passkey) during which its session counts
    /// as a fresh second factor for changing how the user's tokens are sealed (an ECDH
    /// keychain, `ecdhKeychain`): BitGoJS's `ensureEcdhKeychain` does that right after
    /// logging in. Later, such a change needs an `otp` in the request, or an unlocked session.
    pub fresh_factor_secs: u64,
    /// Wrong one-time passwords allowed per user within `window`, wherever an OTP is checked,
    /// before that user's OTP checks answer 429 `TooManyOtpAttempts`.
    pub max_otp_failures: u32,
    /// argon2id hashes computed at once (each holds 19 MiB). Default: the number of cores.
    pub max_concurrent_hashes: usize,
    /// Logins that may wait for a hashing slot; beyond, 503 `ServerBusy`. Default: 4x
    /// `max_concurrent_hashes`.
    pub hash_queue: usize,
    /// The longest wait for a hashing slot, milliseconds; then 503 `ServerBusy`.
    pub hash_wait_ms: u64,
    /// Hashing slots or queue places one client may hold at once; beyond, 429.
    pub max_hashes_per_client: usize,
    /// Lifetime of a login session token, seconds (`expires_in` of §2.2).
    pub session_ttl: u64,
    /// The longest an extensible session may be extended to, seconds from its creation
    /// (`POST /api/v2/user/extendtoken`).
    pub session_max_ttl: u64,
}

impl Default for LoginConfig {
    fn default() -> Self {
        let cores = std::thread::available_parallelism().map(|n| n.get()).unwrap_or(2);
        Self {
            max_failures_per_email: 5,
            max_failures_per_ip: 50,
            window: 15 * 60,
            email_delay_after: 50,
            email_delay_step: 10,
            email_delay_max: 15 * 60,
            known_client_days: 30,
            fresh_factor_secs: 300,
            max_otp_failures: 5,
            max_concurrent_hashes: cores,
            hash_queue: 4 * cores,
            hash_wait_ms: 2000,
            max_hashes_per_client: 2,
            session_ttl: 3600,
            session_max_ttl: 86_400,
        }
    }
}
