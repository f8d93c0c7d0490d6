//! Multisig wallets of UTXO coins: `[utxo]` (docs/chains.md#utxo-chains).

use serde::{Deserialize, Serialize};

/// Bounds on what clients add for UTXO wallets.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct UtxoConfig {
    /// Keychains (extended public keys) one user may add (`POST /api/v2/{coin}/key`); past it,
    /// 400 `KeychainLimitReached`.
    pub max_keychains_per_user: u32,
    /// Addresses one wallet may derive (`POST /api/v2/{coin}/wallet/{id}/address`), every chain
    /// code together; past it, 400 `AddressLimitReached`. Each is watched on every block.
    pub max_addresses_per_wallet: u32,
}

impl Default for UtxoConfig {
    fn default() -> Self {
        Self { max_keychains_per_user: 1000, max_addresses_per_wallet: 100_000 }
    }
}

impl UtxoConfig {
    pub(super) fn validate(&self) -> Result<(), String> {
        let bad = |key: &str, what: &str| Err(format!("invalid configuration: utxo.{key}: {what}"));
        if !(1..=1_000_000).contains(&self.max_keychains_per_user) {
            return bad("max_keychains_per_user", "from 1 to 1000000");
        }
        if !(1..=10_000_000).contains(&self.max_addresses_per_wallet) {
            return bad("max_addresses_per_wallet", "from 1 to 10000000");
        }
        Ok(())
    }
}
