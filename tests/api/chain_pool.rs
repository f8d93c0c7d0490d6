//! The node's pending pool against a real anvil with automine off: a transfer is `unconfirmed`
//! while its transaction waits in the pool, `replaced` when another of its sender's nonce is
//! mined instead, `removed` when it leaves the pool unmined, and a mined one is not told
//! `unconfirmed` twice.

use serde_json::json;

use crate::chain::*;
use crate::common::*;

/// The (state, valueString) notifications received for transaction `hash`, in arrival order.
fn told(c: &Chain, hash: &str) -> Vec<(String, String)> {
    c.notified().into_iter().filter(|(_, _, h)| h == hash).map(|(s, v, _)| (s, v)).collect()
}

async fn until_told(c: &Chain, hash: &str, state: &str) {
    until(&format!("{state} for {hash}"), 20, || async {
        told(c, hash).iter().any(|(s, _)| s == state).then_some(())
    })
    .await;
}

#[tokio::test]
async fn a_pending_transfer_is_unconfirmed_before_its_block_then_replaced_mined_or_dropped() {
    let c = chain_fixture().await;
    c.anvil.mine(1).await;
    c.caught_up().await;
    c.anvil.rpc("evm_setAutomine", json!([false])).await;

    // In the pool only: unconfirmed, at BitGo's height for an unmined transaction.
    let nonce = c.anvil.rpc("eth_getTransactionCount", json!([RICH, "pending"])).await;
    let paid = c.anvil.send(RICH, WATCHED, ONE_ETH).await;
    until_told(&c, &paid, "unconfirmed").await;
    let listed = c.transfers(&format!("?txHash={paid}")).await;
    assert_eq!(listed.len(), 1, "{listed:?}");
    assert_eq!(listed[0]["height"], 999_999_999, "{:?}", listed[0]);
    assert_eq!(listed[0]["confirmations"], 0, "{:?}", listed[0]);
    assert_eq!(listed[0]["state"], "unconfirmed", "{:?}", listed[0]);

    // The sender spends the same nonce elsewhere with a higher fee, and that one is mined.
    let fee = "0x174876e800"; // 100 gwei
    let instead = json!({ "from": RICH, "to": OTHER, "value": "0x1", "nonce": nonce, "gas": "0x5208",
        "maxFeePerGas": fee, "maxPriorityFeePerGas": fee });
    c.anvil.rpc("eth_sendTransaction", json!([instead])).await;
    c.anvil.mine(1).await;
    until_told(&c, &paid, "replaced").await;
    c.caught_up().await;
    let replaced = c.transfers("?state=replaced").await;
    assert_eq!(replaced.len(), 1, "{replaced:?}");
    assert_eq!(replaced[0]["txid"].as_str(), Some(paid.as_str()));

    // A pending transfer that is mined: unconfirmed once (not again at its block), then
    // confirmed at three confirmations.
    let mined = c.anvil.send(RICH, WATCHED, 2 * ONE_ETH).await;
    until_told(&c, &mined, "unconfirmed").await;
    c.anvil.mine(3).await;
    until_told(&c, &mined, "confirmed").await;
    // Told it is confirmed, a receiver finds it so through the API at once: a block's transfers
    // are stored before their events are sent.
    let told_confirmed = c.transfers(&format!("?txHash={mined}")).await;
    assert_eq!(told_confirmed[0]["state"], "confirmed", "{told_confirmed:?}");
    c.caught_up().await;
    let states: Vec<String> = told(&c, &mined).into_iter().map(|(s, _)| s).collect();
    assert_eq!(states, ["unconfirmed", "confirmed"]);
    let listed = c.transfers(&format!("?txHash={mined}")).await;
    let height = listed[0]["height"].as_u64().unwrap();
    assert!(height < 999_999_999 && height > 0, "{:?}", listed[0]);

    // A transaction the pool drops: removed once it has been gone for reorg_depth (8) blocks.
    let dropped = c.anvil.send(RICH, WATCHED, 3 * ONE_ETH).await;
    until_told(&c, &dropped, "unconfirmed").await;
    c.anvil.rpc("anvil_dropTransaction", json!([dropped])).await;
    c.anvil.mine(10).await;
    until_told(&c, &dropped, "removed").await;
    let states: Vec<String> = told(&c, &dropped).into_iter().map(|(s, _)| s).collect();
    assert_eq!(states, ["unconfirmed", "removed"]);
    assert_eq!(told(&c, &paid).len(), 2, "{:?}", told(&c, &paid));
}
