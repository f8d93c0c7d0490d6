//! The USD circuit breaker (docs/policy.md#circuit-breaker): withdrawals valued from a real
//! Chainlink-style feed on anvil (chain-tests/contracts/TestPriceFeed.sol), held for a service
//! admin once 24 hours' total passes the limit or the price is stale, `circuitBreaker` webhooks
//! on trip and reset, and a price an operator sets.

use serde_json::{json, Value};

use crate::chain::{word_number, Anvil, ONE_ETH, OTHER, RICH};
use crate::common::*;
use crate::custody::{custodial_on, Custodial};

const TENTH: u128 = ONE_ETH / 10;
/// The feed's places (Chainlink's USD feeds have 8).
const PLACES: u128 = 100_000_000;

/// Deploys the test feed answering `usd` dollars per ETH, updated now: its address.
async fn deploy_feed(anvil: &Anvil, usd: u128) -> String {
    let code = include_str!("../../chain-tests/contracts/TestPriceFeed.bin").trim();
    let args = format!("{}{}", word_number(8), word_number(usd * PLACES));
    let deploy = json!({ "from": RICH, "data": format!("0x{code}{args}"), "gas": "0x200000" });
    let tx = anvil.rpc("eth_sendTransaction", json!([deploy])).await;
    let receipt = until("the feed is deployed", 10, || async {
        Some(anvil.rpc("eth_getTransactionReceipt", json!([tx])).await).filter(|r| !r.is_null())
    })
    .await;
    receipt["contractAddress"].as_str().unwrap_or_else(|| panic!("{receipt}")).to_string()
}

/// Moves the feed's answer to `usd` dollars per ETH, updated at `at` (Unix seconds).
async fn move_feed(anvil: &Anvil, feed: &str, usd: u128, at: i64) {
    let selector = &alloy_primitives::keccak256("set(int256,uint256)")[..4];
    let data = format!("0x{}{}{}", hex::encode(selector), word_number(usd * PLACES), word_number(at as u128));
    let tx = anvil.rpc("eth_sendTransaction", json!([{ "from": RICH, "to": feed, "data": data }])).await;
    until("the feed moves", 10, || async {
        Some(anvil.rpc("eth_getTransactionReceipt", json!([tx])).await).filter(|r| !r.is_null())
    })
    .await;
}

fn pay(wei: u128, key: &str) -> Value {
    json!({ "recipients": [{ "address": OTHER, "amount": wei.to_string() }], "sequenceId": key })
}

async fn priced_wallet(usd: u128) -> (Custodial, String) {
    let anvil = Anvil::start().await;
    let feed = deploy_feed(&anvil, usd).await;
    let address = feed.clone();
    let c = custodial_on(anvil, 2 * ONE_ETH, 1, move |cfg| {
        let price = custodian::config::PriceConfig { feed: address, max_age: 3_600 };
        cfg.prices.insert("hteth".into(), price);
    })
    .await;
    (c, feed)
}

fn breaker_fired(approval: &Value) -> bool {
    approval["singleRunResults"].as_array().unwrap().iter().any(|r| r["ruleId"] == "circuitBreaker")
}

#[tokio::test]
async fn a_feed_price_over_the_limit_holds_withdrawals_for_a_service_admin_and_tells_trip_and_reset() {
    let (c, feed) = priced_wallet(3_000).await;
    let hook = c.hook("circuitBreaker").await;
    // At 3,000 USD per ETH a tenth is worth 300 USD: valued, not held.
    let first = expect_json(c.initiate(&c.alice_token, &pay(TENTH, "a")).await, 200).await;
    assert!(!breaker_fired(&first), "{first}");
    assert_eq!(first["approvalsRequired"], 1);
    assert_eq!(first["info"]["transactionRequest"]["usd"], json!(300.0), "{first}");
    assert_eq!(first["info"]["transactionRequest"]["usdRate"], json!(3000.0));
    let tx = c.tx_request(first["txRequestId"].as_str().unwrap()).await;
    assert_eq!((tx["usd"].clone(), tx["usdRate"].clone()), (json!(300.0), json!(3000.0)), "{tx}");
    // The price moves: a tenth is now 30 million dollars, over the 20 million limit.
    let now = c.app.state.store.clock().now();
    move_feed(&c.anvil, &feed, 300_000_000, now).await;
    // The dry run says so, and the real run then does it.
    let dry = format!("/api/v2/hteth/wallet/{}/policy/evaluate", c.wallet_id());
    let said = expect_json(c.app.post_auth(&dry, &c.alice_token, &pay(TENTH, "x")).await, 200).await;
    assert!(breaker_fired(&said), "{said}");
    assert_eq!((said["usd"].clone(), said["approvalsRequired"].clone()), (json!(30_000_000.0), json!(2)));
    let held = expect_json(c.initiate(&c.alice_token, &pay(TENTH, "b")).await, 200).await;
    assert!(breaker_fired(&held), "{held}");
    assert_eq!(held["reasons"], said["reasons"], "the dry run's reasons are the real run's");
    assert_eq!(held["approvalsRequired"], 2, "a service admin's final approval on top: {held}");
    let reason = held["reasons"].as_array().unwrap().last().unwrap().as_str().unwrap();
    assert_eq!(
        reason,
        "circuit breaker: $30,000,300.00 withdrawn in the last 24 h would exceed $20,000,000.00; a service admin approves"
    );
    let told = hook.wait_for(1, 30).await;
    let body: Value = serde_json::from_str(&told[0].body).unwrap();
    assert_eq!(
        (body["type"].clone(), body["state"].clone()),
        (json!("circuitBreaker"), json!("tripped")),
        "{body}"
    );
    assert_eq!(body["usd"], json!(30_000_300.0));
    // Bob's approval is not enough, and a second wallet admin cannot give the final one.
    let approve = json!({ "state": "approved", "otp": "000000" });
    let id = held["id"].as_str().unwrap();
    let after_bob = expect_json(c.answer(&c.bob_token, id, &approve).await, 200).await;
    assert_eq!(after_bob["state"], "pending");
    // A service admin, no admin of the wallet, gives it.
    let ops = c.app.create_user_with("ops@example.com", true).await;
    let ops_token = c.app.login(&ops).await;
    let done = expect_json(c.answer(&ops_token, id, &approve).await, 200).await;
    assert_eq!(done["state"], "approved", "{done}");
    // Tripped, the breaker holds the next one though the price is back, and tells nothing new.
    move_feed(&c.anvil, &feed, 3_000, now).await;
    let next = expect_json(c.initiate(&c.alice_token, &pay(TENTH, "c")).await, 200).await;
    assert!(breaker_fired(&next), "{next}");
    // A day later (the window counts whole minutes) it is empty: a signer round resets the
    // breaker and tells so.
    c.app.state.store.clock().advance(std::time::Duration::from_secs(86_400 + 60));
    let told = hook.wait_for(2, 30).await;
    assert_eq!(told.len(), 2, "one trip, one reset");
    let body: Value = serde_json::from_str(&told[1].body).unwrap();
    assert_eq!(body["state"], "reset", "{body}");
    let audited =
        c.app.raw_sql("SELECT type FROM audit_log WHERE type LIKE 'wallet.circuit%' ORDER BY seq").await;
    assert_eq!(audited, ["wallet.circuit_breaker_tripped", "wallet.circuit_breaker_reset"]);
}

#[tokio::test]
async fn a_stale_feed_holds_every_withdrawal_and_a_fresh_one_passes() {
    let (c, feed) = priced_wallet(3_000).await;
    let now = c.app.state.store.clock().now();
    move_feed(&c.anvil, &feed, 3_000, now - 7_200).await;
    let held = expect_json(c.initiate(&c.alice_token, &pay(TENTH, "a")).await, 200).await;
    assert!(breaker_fired(&held), "{held}");
    let reason = held["reasons"].as_array().unwrap().last().unwrap().as_str().unwrap();
    assert!(reason.contains("more than prices.hteth.max_age (3600 s)"), "{reason}");
    assert_eq!(held["info"]["transactionRequest"].get("usd"), None, "no price, no value: {held}");
    // Dated a day ahead: it would never grow stale, so it is no price either.
    move_feed(&c.anvil, &feed, 3_000, now + 86_400).await;
    let ahead = expect_json(c.initiate(&c.alice_token, &pay(TENTH, "c")).await, 200).await;
    assert!(breaker_fired(&ahead), "{ahead}");
    let reason = ahead["reasons"].as_array().unwrap().last().unwrap().as_str().unwrap();
    assert!(reason.contains("in the future"), "{reason}");
    move_feed(&c.anvil, &feed, 3_000, now).await;
    let passes = expect_json(c.initiate(&c.alice_token, &pay(TENTH, "b")).await, 200).await;
    assert!(!breaker_fired(&passes), "{passes}");
}

/// A price an operator set (`custodian price set`, which calls `custody::prices::set`; the
/// binary itself is tested in `cli.rs`) values withdrawals, and one over the limit is held.
#[tokio::test]
async fn a_price_an_operator_sets_is_audited_and_values_withdrawals() {
    let c = crate::custody::custodial(2 * ONE_ETH, 1).await;
    // No price source: not valued, not held.
    let plain = expect_json(c.initiate(&c.alice_token, &pay(TENTH, "a")).await, 200).await;
    assert_eq!(plain["info"]["transactionRequest"].get("usd"), None, "{plain}");
    let coin: custodian::types::Coin = "hteth".parse().unwrap();
    let set = |usd: &'static str| {
        let custody = c.app.state.custody.clone();
        let coin = coin.clone();
        async move { custodian::custody::prices::set(&custody, &coin, usd).await }
    };
    for bad in ["0", "-5", "abc", "1.5e3", "1234567890123456"] {
        let refused = set(bad).await.expect_err(bad);
        assert!(refused.to_string().contains("positive decimal"), "{bad}: {refused}");
    }
    assert!(c.app.raw_sql("SELECT coin FROM prices").await.is_empty(), "a refused price changes nothing");
    set("250000000.50").await.expect("a price");
    // 0.1 ETH is now $25,000,000.05: over the limit at once.
    let held = expect_json(c.initiate(&c.alice_token, &pay(TENTH, "b")).await, 200).await;
    assert_eq!(held["info"]["transactionRequest"]["usd"], json!(25_000_000.05), "{held}");
    assert!(breaker_fired(&held), "{held}");
    let audited = c.app.raw_sql("SELECT type FROM audit_log WHERE type = 'price.set'").await;
    assert_eq!(audited.len(), 1);
}
