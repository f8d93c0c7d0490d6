//! USD prices for the circuit breaker (docs/policy.md#circuit-breaker): a Chainlink-style
//! aggregator read through the coin's node (`[prices.<coin>]`), else a price an operator set
//! (`custodian price set`). A feed that fails, answers nothing positive, is older than its
//! `max_age`, or is dated ahead of the service's clock by more than
//! [`FEED_FUTURE_TOLERANCE_SECS`] gives no price: the breaker then holds.

use std::{collections::HashMap, sync::Arc, time::Duration};

use alloy_primitives::{Address, U256, U512};
use alloy_sol_types::SolCall;

use super::Custody;
use crate::{
    chain::node::EthNode,
    config::{Config, PriceConfig},
    model::custody::UsdValue,
    types::Coin,
};

alloy_sol_types::sol! {
    function decimals() external view returns (uint8);
    function latestRoundData() external view returns (uint80 roundId, int256 answer, uint256 startedAt, uint256 updatedAt, uint80 answeredInRound);
}

/// How far ahead of the service's clock a feed's `updatedAt` may be, seconds: clocks drift
/// apart by a few seconds, but an answer dated further ahead would never grow older than
/// `max_age`, so it gives no price (docs/policy.md#circuit-breaker).
pub const FEED_FUTURE_TOLERANCE_SECS: i64 = 60;

/// Most decimal places a set price may have.
pub const MAX_PRICE_DECIMALS: usize = 18;
/// Most digits before the point of a set price.
pub const MAX_PRICE_WHOLE_DIGITS: usize = 15;

/// A price: `mantissa / 10^scale` US dollars per whole coin.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UsdPrice {
    pub mantissa: U256,
    pub scale: u8,
}

impl UsdPrice {
    /// Parses a decimal price of dollars (`"3000.25"`): positive, at most
    /// [`MAX_PRICE_WHOLE_DIGITS`] digits before the point and [`MAX_PRICE_DECIMALS`] after.
    pub fn parse(text: &str) -> Option<UsdPrice> {
        let (whole, frac) = text.split_once('.').unwrap_or((text, ""));
        let digits = |s: &str| s.bytes().all(|b| b.is_ascii_digit());
        if whole.is_empty() || !digits(whole) || !digits(frac) || (text.contains('.') && frac.is_empty()) {
            return None;
        }
        if whole.len() > MAX_PRICE_WHOLE_DIGITS || frac.len() > MAX_PRICE_DECIMALS {
            return None;
        }
        let mantissa = U256::from_str_radix(&format!("{whole}{frac}"), 10).ok()?;
        (mantissa > U256::ZERO).then(|| UsdPrice { mantissa, scale: u8::try_from(frac.len()).unwrap_or(0) })
    }

    /// In words: dollars per whole coin, trailing zeros dropped (`"3000.25"`).
    pub fn text(&self) -> String {
        super::policy::eval::units(self.mantissa, self.scale)
    }

    /// The value of `amount` base units of a coin of `decimals` places, whole cents rounded
    /// down, at most [`UsdValue::MAX_CENTS`].
    pub fn value(&self, amount: U256, decimals: u8) -> UsdValue {
        let exp = u32::from(decimals) + u32::from(self.scale);
        let cents = match U512::from(10u8).checked_pow(U512::from(exp)) {
            Some(div) => {
                U512::from(amount).saturating_mul(U512::from(self.mantissa)).saturating_mul(U512::from(100u8))
                    / div
            }
            None => U512::ZERO,
        };
        let max = U512::from(UsdValue::MAX_CENTS);
        let cents = if cents > max { UsdValue::MAX_CENTS } else { i64::try_from(cents).unwrap_or(0) };
        UsdValue { cents, rate: self.text() }
    }
}

/// What is known of a coin's price now.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Priced {
    /// No source is configured or set: its withdrawals are not valued.
    NoSource,
    Price(UsdPrice),
    /// A source that gives no usable price now, and why in words.
    Unavailable(String),
}

/// How long a process keeps a price an operator set before reading it again, ms of the
/// service's clock: a withdrawal then costs no query for it, and a new price reaches every
/// process within this.
pub const SET_PRICE_CACHE_MS: i64 = 1_000;

/// The nodes price feeds are read through, one per priced coin, made at start; and the prices
/// an operator set, as last read (at, ms; the price or none).
#[derive(Default)]
pub struct Feeds {
    nodes: HashMap<String, (Arc<EthNode>, Address, u64)>,
    set: std::sync::Mutex<HashMap<Coin, (i64, Option<String>)>>,
}

impl Feeds {
    /// A client per `[prices.<coin>]` (its chain's `rpc_url` and `rpc_timeout`). Errors: a
    /// feed address or RPC URL that does not parse (checked at load, so only by a bug).
    pub fn new(config: &Config) -> anyhow::Result<Feeds> {
        let mut nodes = HashMap::new();
        for (coin, p) in &config.prices {
            let feed = p.feed_address(coin).map_err(anyhow::Error::msg)?;
            let chain = config
                .chains
                .get(PriceConfig::chain_of(coin))
                .ok_or_else(|| anyhow::anyhow!("prices.{coin}: no chain to read the feed through"))?;
            let node = EthNode::new(&chain.rpc_url, Duration::from_secs(chain.rpc_timeout), 1 << 16)
                .map_err(|e| anyhow::anyhow!("prices.{coin}: {e}"))?;
            nodes.insert(coin.clone(), (Arc::new(node), feed, p.max_age));
        }
        Ok(Feeds { nodes, set: Default::default() })
    }
}

/// Sets `coin`'s price to `usd` dollars per whole coin (the operator: `custodian price set`),
/// audited. Errors: `InvalidField` (`usd`: not a positive decimal of at most
/// [`MAX_PRICE_WHOLE_DIGITS`] + [`MAX_PRICE_DECIMALS`] digits; `coin`: one with a feed, which
/// would be read instead).
pub async fn set(svc: &Custody, coin: &Coin, usd: &str) -> crate::error::Result<UsdPrice> {
    use crate::audit::EntryExt;
    if svc.feeds.nodes.contains_key(coin.as_str()) {
        return Err(crate::error::Error::invalid_field(
            "coin",
            format!("{coin} is priced by its feed (prices.{coin}.feed), which a set price would not replace"),
        ));
    }
    let price = UsdPrice::parse(usd.trim()).ok_or_else(|| {
        crate::error::Error::invalid_field(
            "usd",
            format!("a positive decimal of US dollars, at most {MAX_PRICE_WHOLE_DIGITS} digits before the point and {MAX_PRICE_DECIMALS} after"),
        )
    })?;
    let now = svc.store.clock().now();
    let entry = crate::audit::entry(crate::model::audit::AuditType::PriceSet)
        .data(serde_json::json!({ "coin": coin.as_str(), "usd": price.text(), "by": "operator" }));
    svc.store.set_static_price(coin, &price.text(), now, &[entry]).await?;
    remember(svc, coin, svc.store.clock().now_ms(), Some(price.text()));
    Ok(price)
}

/// `coin`'s price now: its feed's when one is configured, else the one an operator set.
pub async fn price(svc: &Custody, coin: &Coin) -> Priced {
    if let Some((node, feed, max_age)) = svc.feeds.nodes.get(coin.as_str()) {
        return match read_feed(node, *feed).await {
            Ok((answer, decimals, updated)) => {
                judge_feed(coin, answer, decimals, updated, *max_age, svc.store.clock().now())
            }
            Err(e) => {
                tracing::warn!(%coin, error = %e, "reading the price feed failed");
                Priced::Unavailable(format!("the price feed of {coin} could not be read"))
            }
        };
    }
    let now = svc.store.clock().now_ms();
    let cached = svc.feeds.set.lock().ok().and_then(|c| c.get(coin).cloned());
    let usd = match cached {
        Some((at, usd)) if now.saturating_sub(at) < SET_PRICE_CACHE_MS && at <= now => usd,
        _ => match svc.store.static_price(coin).await {
            Ok(found) => {
                let usd = found.map(|(usd, _)| usd);
                remember(svc, coin, now, usd.clone());
                usd
            }
            Err(e) => {
                tracing::warn!(%coin, error = %e, "reading the set price failed");
                return Priced::Unavailable(format!("the price set for {coin} could not be read"));
            }
        },
    };
    match usd.as_deref().map(UsdPrice::parse) {
        Some(Some(p)) => Priced::Price(p),
        Some(None) => Priced::Unavailable(format!("the price set for {coin} is not a price")),
        None => Priced::NoSource,
    }
}

/// Keeps `coin`'s set price as read at `now` (ms) for [`SET_PRICE_CACHE_MS`].
fn remember(svc: &Custody, coin: &Coin, now: i64, usd: Option<String>) {
    if let Ok(mut c) = svc.feeds.set.lock() {
        c.insert(coin.clone(), (now, usd));
    }
}

/// The feed's answer, its decimals and when it was updated (Unix seconds).
async fn read_feed(
    node: &EthNode,
    feed: Address,
) -> Result<(alloy_primitives::I256, u8, U256), crate::chain::node::NodeError> {
    use crate::chain::node::NodeError;
    let ask = |data: Vec<u8>| serde_json::json!({ "to": feed, "data": alloy_primitives::Bytes::from(data) });
    let (d, r) = tokio::join!(
        node.call::<_, alloy_primitives::Bytes>("eth_call", (ask(decimalsCall {}.abi_encode()), "latest")),
        node.call::<_, alloy_primitives::Bytes>(
            "eth_call",
            (ask(latestRoundDataCall {}.abi_encode()), "latest")
        ),
    );
    let decimals =
        decimalsCall::abi_decode_returns(&d?).map_err(|e| NodeError::new(format!("decimals: {e}")))?;
    let round = latestRoundDataCall::abi_decode_returns(&r?)
        .map_err(|e| NodeError::new(format!("latestRoundData: {e}")))?;
    Ok((round.answer, decimals, round.updatedAt))
}

/// A feed's answer as a price: positive, of at most 36 decimals, and updated at most
/// `max_age` seconds before `now` and at most [`FEED_FUTURE_TOLERANCE_SECS`] after it.
fn judge_feed(
    coin: &Coin,
    answer: alloy_primitives::I256,
    decimals: u8,
    updated: U256,
    max_age: u64,
    now: i64,
) -> Priced {
    if answer <= alloy_primitives::I256::ZERO || decimals > 36 {
        return Priced::Unavailable(format!("the price feed of {coin} answers no positive price"));
    }
    let updated = i64::try_from(updated).unwrap_or(i64::MAX);
    let ahead = updated.saturating_sub(now);
    if ahead > FEED_FUTURE_TOLERANCE_SECS {
        return Priced::Unavailable(format!(
            "the price feed of {coin} is dated {ahead} s in the future, more than {FEED_FUTURE_TOLERANCE_SECS} s ahead of this service's clock"
        ));
    }
    let age = now.saturating_sub(updated);
    if age > i64::try_from(max_age).unwrap_or(i64::MAX) {
        return Priced::Unavailable(format!(
            "the price feed of {coin} was last updated {age} s ago, more than prices.{coin}.max_age ({max_age} s)"
        ));
    }
    Priced::Price(UsdPrice { mantissa: answer.unsigned_abs(), scale: decimals })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn prices_parse_as_dollars_and_value_amounts_in_cents_rounded_down() {
        let p = UsdPrice::parse("3000.25").unwrap();
        assert_eq!((p.mantissa, p.scale), (U256::from(300_025u64), 2));
        assert_eq!(p.text(), "3000.25");
        // 1.5 ETH at 3000.25 = 4500.375 USD.
        let v = p.value(U256::from(1_500_000_000_000_000_000u128), 18);
        assert_eq!(v, UsdValue { cents: 450_037, rate: "3000.25".into() });
        assert_eq!(UsdPrice::parse("1").unwrap().value(U256::from(1u8), 18).cents, 0);
        assert_eq!(UsdPrice::parse("1").unwrap().value(U256::MAX, 0).cents, UsdValue::MAX_CENTS);
        for bad in
            ["", "0", "0.00", "-1", "1.", ".5", "1e3", "1,000", "1234567890123456", "1.0000000000000000001"]
        {
            assert_eq!(UsdPrice::parse(bad), None, "{bad}");
        }
    }

    #[test]
    fn a_stale_or_non_positive_feed_answer_is_no_price() {
        let coin: Coin = "hteth".parse().unwrap();
        let answer = alloy_primitives::I256::try_from(300_000_000_000i64).unwrap();
        let at = U256::from(1_000u64);
        assert_eq!(
            judge_feed(&coin, answer, 8, at, 60, 1_060),
            Priced::Price(UsdPrice { mantissa: U256::from(300_000_000_000u64), scale: 8 })
        );
        assert!(matches!(judge_feed(&coin, answer, 8, at, 60, 1_061), Priced::Unavailable(_)));
        // Dated in the future: usable within the tolerance, not beyond it, however large.
        let ahead = |by: i64| judge_feed(&coin, answer, 8, U256::from(1_000 + by), 60, 1_000);
        assert!(matches!(ahead(FEED_FUTURE_TOLERANCE_SECS), Priced::Price(_)));
        assert!(matches!(ahead(FEED_FUTURE_TOLERANCE_SECS + 1), Priced::Unavailable(_)));
        assert!(matches!(ahead(10 * 365 * 86_400), Priced::Unavailable(_)));
        assert!(matches!(judge_feed(&coin, answer, 8, U256::MAX, 60, 1_000), Priced::Unavailable(_)));
        assert!(matches!(
            judge_feed(&coin, alloy_primitives::I256::ZERO, 8, at, 60, 1_000),
            Priced::Unavailable(_)
        ));
        assert!(matches!(
            judge_feed(&coin, alloy_primitives::I256::MINUS_ONE, 8, at, 60, 1_000),
            Priced::Unavailable(_)
        ));
    }
}
