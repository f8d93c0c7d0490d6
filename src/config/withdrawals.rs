//! Keys Custodian holds and the withdrawals they sign: `[keys]` and `[withdrawals]`
//! (docs/withdrawals.md).

use serde::{Deserialize, Serialize};

/// Where custodial wallets' keys live.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct KeysConfig {
    /// `sealed`: made with k256 and sealed under the master key in the database (the default).
    pub backend: String,
}

impl Default for KeysConfig {
    fn default() -> Self {
        Self { backend: "sealed".into() }
    }
}

impl KeysConfig {
    pub(super) fn validate(&self) -> Result<(), String> {
        match self.backend.as_str() {
            "sealed" => Ok(()),
            other => Err(format!("invalid configuration: keys.backend: `{other}`; expected `sealed`")),
        }
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
    /// How often the signer looks for approved withdrawals and follows sent ones, ms.
    pub poll_interval_ms: u64,
}

impl Default for WithdrawalsConfig {
    fn default() -> Self {
        Self {
            approval_ttl: 7 * 24 * 3600,
            max_fee_per_gas: 200_000_000_000,
            priority_fee_per_gas: 1_000_000_000,
            max_in_flight_per_wallet: 100,
            poll_interval_ms: 500,
        }
    }
}

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
        if !(10..=60_000).contains(&self.poll_interval_ms) {
            return bad("poll_interval_ms", "from 10 to 60000");
        }
        Ok(())
    }
}
