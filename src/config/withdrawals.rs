//! Keys Custodian holds and the withdrawals they sign: `[keys]` and `[withdrawals]`
//! (docs/withdrawals.md).

use serde::{Deserialize, Serialize};

/// Where custodial wallets' keys live.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct KeysConfig {
    /// `sealed`: made with k256 and sealed under the master key in the database (the default);
    /// `pkcs11`: made and kept inside an HSM.
    pub backend: String,
    /// The PKCS#11 module (`/usr/lib/softhsm/libsofthsm2.so`), for `pkcs11`.
    pub pkcs11_module: Option<std::path::PathBuf>,
    /// The label of the token that holds the keys, for `pkcs11`.
    pub pkcs11_token: Option<String>,
    /// A file holding the token's user PIN, for `pkcs11` (or the environment variable
    /// `CUSTODIAN_PKCS11_PIN`). The PIN itself is never a setting, so it is never printed.
    pub pkcs11_pin_file: Option<std::path::PathBuf>,
}

impl Default for KeysConfig {
    fn default() -> Self {
        Self { backend: "sealed".into(), pkcs11_module: None, pkcs11_token: None, pkcs11_pin_file: None }
    }
}

/// The environment variable that may hold the PKCS#11 user PIN.
pub const PKCS11_PIN_ENV: &str = "CUSTODIAN_PKCS11_PIN";

impl KeysConfig {
    pub(super) fn validate(&self) -> Result<(), String> {
        let bad = |what: &str| Err(format!("invalid configuration: {what}"));
        match self.backend.as_str() {
            "sealed" => Ok(()),
            "pkcs11" if self.pkcs11_module.is_none() => {
                bad("keys.pkcs11_module: required with keys.backend = \"pkcs11\"")
            }
            "pkcs11" if self.pkcs11_token.as_deref().is_none_or(str::is_empty) => {
                bad("keys.pkcs11_token: required with keys.backend = \"pkcs11\"")
            }
            "pkcs11" if self.pkcs11_pin_file.is_none() && std::env::var_os(PKCS11_PIN_ENV).is_none() => {
                bad("keys.pkcs11_pin_file (or CUSTODIAN_PKCS11_PIN): required with keys.backend = \"pkcs11\"")
            }
            "pkcs11" => Ok(()),
            other => bad(&format!("keys.backend: `{other}`; expected `sealed` or `pkcs11`")),
        }
    }

    /// The PKCS#11 user PIN: the file's first line, else the environment variable.
    pub fn pkcs11_pin(&self) -> Result<String, String> {
        if let Some(path) = &self.pkcs11_pin_file {
            let text = std::fs::read_to_string(path)
                .map_err(|e| format!("keys.pkcs11_pin_file: cannot read {}: {e}", path.display()))?;
            return Ok(text.lines().next().unwrap_or_default().to_string());
        }
        std::env::var(PKCS11_PIN_ENV).map_err(|_| format!("{PKCS11_PIN_ENV} is not set"))
    }
}

/// Withdrawals: approvals, fees and the signer's pace.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct WithdrawalsConfig {
    /// How long a pending approval may wait for its approvers, seconds; then it expires and
    /// its withdrawal is `canceled`.
    pub approval_ttl: u64,
    /// Highest max fee per gas a withdrawal may offer, wei (EIP-1559 `maxFeePerGas`): the
    /// signer never pays more, and this much per gas is held back from the balance for each
    /// withdrawal in flight.
    pub max_fee_per_gas: u64,
    /// The priority fee (tip) offered, wei per gas.
    pub priority_fee_per_gas: u64,
    /// Withdrawals of one wallet not yet final at once; past it a new one is refused.
    pub max_in_flight_per_wallet: u32,
    /// How often the signer looks for approved withdrawals and follows sent ones, ms. A last
    /// approval given in the same process wakes it at once; this bounds the wait for one given
    /// through another process.
    pub poll_interval_ms: u64,
    /// Withdrawals one signer round prepares and signs, or follows, at once, and addresses it
    /// sends for at once (one address's sends go in JSON-RPC batches, in nonce order); each
    /// waits on the node and the store; a round takes at most `custody::transaction::BATCH` of
    /// each.
    pub signer_concurrency: u32,
    /// Most raw transactions of one address sent in one JSON-RPC batch request, in nonce order
    /// (1 to 50; 1 sends each as a plain request, for a node that refuses batches). A refusal
    /// holds back that address's later batches until the next round.
    pub send_batch: u32,
    /// Seconds a sent withdrawal may wait unmined before it is replaced with higher fees.
    pub stuck_after: u64,
    /// Seconds a sent withdrawal may wait while the node holds it queued though it is next
    /// (the node knows it, and its pending count stops at its nonce) before it is replaced
    /// once, ahead of `stuck_after`; 0 turns this off. anvil's pool can keep a transaction
    /// waiting for its predecessor after that was mined (docs/withdrawals.md#held-by-the-node).
    pub queued_after: u64,
    /// Seconds an approved withdrawal may wait unsigned (a frozen wallet, a key store or node
    /// away) before it is `canceled` and told as `transactionExpire`.
    pub delivery_deadline: u64,
    /// How long a `webhook` policy rule's URL has to answer, waiting for a free slot included,
    /// ms; past it the rule fires (a policy check fails closed: docs/policy.md#webhook-rules).
    pub policy_webhook_timeout_ms: u64,
    /// Policy webhook checks this process makes at once; one that finds none free within its
    /// timeout fires its rule.
    pub policy_webhook_concurrency: u32,
    /// US dollars a wallet may send in a rolling 24 hours before its circuit breaker trips: a
    /// withdrawal that takes the total above it, and every one after while it stays above,
    /// needs a service admin's final approval (§6.1 `circuitBreaker`; docs/policy.md#circuit-breaker).
    pub circuit_breaker_usd: u64,
    /// Approvals a loosening of an enterprise's policy rules needs, each from a different admin
    /// of the enterprise other than the one who asked (docs/policy.md#enterprise-rules).
    pub enterprise_policy_approvals: u32,
    /// Seconds between the signer's nonce gap checks, which compare every signing address's
    /// next nonce with the node's pending count and fill each gap (0: every round; at most
    /// 3600; docs/withdrawals.md#nonce-gaps).
    pub gap_check_interval: u64,
}

impl Default for WithdrawalsConfig {
    fn default() -> Self {
        Self {
            approval_ttl: 7 * 24 * 3600,
            max_fee_per_gas: 200_000_000_000,
            priority_fee_per_gas: 1_000_000_000,
            max_in_flight_per_wallet: 100,
            poll_interval_ms: 500,
            signer_concurrency: 16,
            send_batch: 50,
            stuck_after: 180,
            queued_after: 30,
            delivery_deadline: 24 * 3600,
            policy_webhook_timeout_ms: 5_000,
            policy_webhook_concurrency: 16,
            circuit_breaker_usd: 20_000_000,
            enterprise_policy_approvals: 1,
            gap_check_interval: 30,
        }
    }
}

/// The highest `circuit_breaker_usd`: a trillion dollars, so that every total the breaker
/// compares fits its cents in 64 bits.
pub const MAX_BREAKER_USD: u64 = 1_000_000_000_000;

impl WithdrawalsConfig {
    pub(super) fn validate(&self) -> Result<(), String> {
        let bad = |key: &str, what: &str| Err(format!("invalid configuration: withdrawals.{key}: {what}"));
        if self.approval_ttl == 0 {
            return bad("approval_ttl", "must be at least 1 second");
        }
        if self.max_fee_per_gas == 0 || self.priority_fee_per_gas > self.max_fee_per_gas {
            return bad("max_fee_per_gas", "must be at least 1 and at least priority_fee_per_gas");
        }
        if self.max_in_flight_per_wallet == 0 || self.max_in_flight_per_wallet > 10_000 {
            return bad("max_in_flight_per_wallet", "from 1 to 10000");
        }
        if self.stuck_after == 0 {
            return bad("stuck_after", "must be at least 1 second");
        }
        if self.queued_after >= self.stuck_after {
            return bad("queued_after", "must be below stuck_after (0 turns it off)");
        }
        if !(1..=64).contains(&self.signer_concurrency) {
            return bad("signer_concurrency", "from 1 to 64");
        }
        // At most a signer round's batch (`custody::transaction::BATCH`).
        if !(1..=50).contains(&self.send_batch) {
            return bad("send_batch", "from 1 to 50");
        }
        if self.gap_check_interval > 3_600 {
            return bad("gap_check_interval", "from 0 to 3600 seconds");
        }
        if self.delivery_deadline == 0 {
            return bad("delivery_deadline", "must be at least 1 second");
        }
        if !(10..=60_000).contains(&self.poll_interval_ms) {
            return bad("poll_interval_ms", "from 10 to 60000");
        }
        if !(10..=60_000).contains(&self.policy_webhook_timeout_ms) {
            return bad("policy_webhook_timeout_ms", "from 10 to 60000");
        }
        if !(1..=1_000).contains(&self.policy_webhook_concurrency) {
            return bad("policy_webhook_concurrency", "from 1 to 1000");
        }
        if !(1..=MAX_BREAKER_USD).contains(&self.circuit_breaker_usd) {
            return bad("circuit_breaker_usd", "from 1 to 1000000000000 (a trillion)");
        }
        if !(1..=10).contains(&self.enterprise_policy_approvals) {
            return bad("enterprise_policy_approvals", "from 1 to 10");
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::WithdrawalsConfig;

    #[test]
    fn send_batch_is_from_one_to_a_rounds_batch() {
        for (n, ok) in [(0, false), (1, true), (50, true), (51, false)] {
            let c = WithdrawalsConfig { send_batch: n, ..Default::default() };
            assert_eq!(c.validate().is_ok(), ok, "send_batch {n}: {:?}", c.validate());
        }
    }

    #[test]
    fn queued_after_is_below_stuck_after_or_off() {
        for (queued_after, ok) in [(0, true), (30, true), (179, true), (180, false), (500, false)] {
            let c = WithdrawalsConfig { queued_after, stuck_after: 180, ..Default::default() };
            assert_eq!(c.validate().is_ok(), ok, "queued_after {queued_after}: {:?}", c.validate());
        }
    }
}
