//! Prices in US dollars for the circuit breaker: `[prices.<coin>]` (docs/policy.md#circuit-breaker).

use serde::{Deserialize, Serialize};

/// Where a coin's USD price comes from: a Chainlink-style aggregator contract read through the
/// node of the coin's chain (`chains.<chain>`, the part of the coin before any `:`).
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct PriceConfig {
    /// The aggregator's address: `latestRoundData()` gives the answer (USD per whole coin) and
    /// when it was updated, `decimals()` its places.
    pub feed: String,
    /// Seconds after its last update that a feed's answer is stale: a stale price holds every
    /// withdrawal of the coin for a service admin, never lets one pass.
    pub max_age: u64,
}

impl Default for PriceConfig {
    fn default() -> Self {
        Self { feed: String::new(), max_age: 3600 }
    }
}

impl PriceConfig {
    /// The feed's address. Errors: one line naming the setting.
    pub fn feed_address(&self, coin: &str) -> Result<alloy_primitives::Address, String> {
        self.feed.parse().map_err(|_| {
            format!("invalid configuration: prices.{coin}.feed: `{}` is not a 0x-prefixed address", self.feed)
        })
    }

    /// The chain whose node is asked: the coin, or the chain of a token coin (`hteth:usdc`).
    pub fn chain_of(coin: &str) -> &str {
        coin.split_once(':').map_or(coin, |(chain, _)| chain)
    }
}

/// Checks every `[prices.<coin>]`: a valid feed address, a `max_age` of 1 s to a week, and a
/// chain the watcher is configured for.
pub(super) fn validate(
    prices: &std::collections::BTreeMap<String, PriceConfig>,
    chains: &std::collections::BTreeMap<String, super::ChainConfig>,
) -> Result<(), String> {
    for (coin, p) in prices {
        p.feed_address(coin)?;
        if !(1..=7 * 24 * 3600).contains(&p.max_age) {
            return Err(format!("invalid configuration: prices.{coin}.max_age: from 1 to 604800 seconds"));
        }
        let chain = PriceConfig::chain_of(coin);
        if chains.get(chain).is_none_or(|c| c.is_utxo()) {
            return Err(format!(
                "invalid configuration: prices.{coin}.feed: the feed is read through chains.{chain}, which is not a configured Ethereum chain"
            ));
        }
    }
    Ok(())
}
