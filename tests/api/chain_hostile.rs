//! The chain watcher in front of a hostile node (`hostile_node`, a proxy to a real anvil): a
//! `null` receipt, an empty log list, a 50 MiB answer, amounts at and above 2^255. Nothing is
//! lost, nothing is wrong, nothing the node says is held or shown whole.

use serde_json::{json, Value};

use crate::chain::{
    chain_fixture_on, deploy_token, word_address, Anvil, Chain, OTHER, RICH, WALLET, WATCHED,
};
use crate::common::*;
use crate::hostile_node::HostileNode;

/// A chain fixture whose watcher reads `anvil` through a hostile proxy.
async fn behind_proxy(
    anvil: Anvil,
    tweak: impl FnOnce(&mut custodian::config::Config),
) -> (Chain, HostileNode) {
    let node = HostileNode::start(&anvil.url).await;
    let url = node.url.clone();
    let c = chain_fixture_on(anvil, |c| {
        c.chains.get_mut("hteth").unwrap().rpc_url = url;
        tweak(c);
    })
    .await;
    (c, node)
}

#[tokio::test]
async fn a_null_receipt_fails_the_block_until_the_node_answers_and_the_deposit_is_kept() {
    let anvil = Anvil::start().await;
    let (c, node) = behind_proxy(anvil, |c| c.chains.get_mut("hteth").unwrap().pending_pool = false).await;
    c.caught_up().await;
    node.lie(|l| l.null_receipts = 3);
    let txid = c.anvil.send(RICH, WATCHED, 3_333_333).await;
    c.anvil.mine(3).await;
    c.caught_up().await;
    assert!(node.count("eth_getTransactionReceipt") >= 4, "three null answers, then the receipt");
    let listed = c.transfers("").await;
    assert_eq!(listed.len(), 1, "{listed:?}");
    assert_eq!(listed[0]["txid"], txid.as_str());
    assert_eq!(listed[0]["valueString"], "3333333");
    assert_eq!(listed[0]["state"], "confirmed");
    until("the deposit's confirmed notification", 20, || async {
        c.notified().contains(&("confirmed".into(), "3333333".into(), txid.clone())).then_some(())
    })
    .await;
    let balance = c.wallet().await["balanceString"].as_str().map(str::to_string);
    assert_eq!(balance.as_deref(), Some(c.anvil.balance(WATCHED).await.to_string().as_str()));
}

#[tokio::test]
async fn a_blocks_receipts_are_asked_in_one_batch_and_a_null_among_them_fails_the_block() {
    let anvil = Anvil::start().await;
    let (c, node) = behind_proxy(anvil, |c| c.chains.get_mut("hteth").unwrap().pending_pool = false).await;
    c.caught_up().await;
    // Three deposits in one block; the first receipt of the first batch asked is `null`.
    c.anvil.rpc("evm_setAutomine", json!([false])).await;
    let mut txids = Vec::new();
    for wei in [1_001u128, 1_002, 1_003] {
        txids.push(c.anvil.send(RICH, WATCHED, wei).await);
    }
    node.lie(|l| l.null_receipts = 1);
    c.anvil.mine(3).await;
    c.caught_up().await;
    let sizes = node.batch_sizes("eth_getTransactionReceipt");
    assert!(
        sizes.len() >= 2 && sizes.iter().all(|n| *n == 3),
        "the block's three in one batch, twice: {sizes:?}"
    );
    let listed = c.transfers("").await;
    assert_eq!(listed.len(), 3, "{listed:?}");
    for t in &listed {
        assert_eq!(t["state"], "confirmed", "{t}");
        assert!(txids.iter().any(|id| t["txid"] == json!(id)), "{t}");
    }
}

#[tokio::test]
async fn a_50_mib_answer_is_cut_before_it_reaches_health_and_the_log() {
    let anvil = Anvil::start().await;
    let (c, node) = behind_proxy(anvil, |_| {}).await;
    c.caught_up().await;
    node.lie(|l| l.huge_head = Some(50 << 20));
    let error = until("the chain's error in /health", 20, || async {
        let health: Value =
            c.app.client.get(c.app.url("/health")).send().await.unwrap().json().await.unwrap();
        health["chains"][0]["error"].as_str().map(str::to_string)
    })
    .await;
    assert!(error.len() <= 256 + "node: ".len(), "{} bytes: {}", error.len(), &error[..200.min(error.len())]);
    let body = c.app.client.get(c.app.url("/health")).send().await.unwrap().bytes().await.unwrap();
    assert!(body.len() < 4096, "/health answered {} bytes", body.len());
    // The node mends: reading goes on.
    node.lie(|l| l.huge_head = None);
    c.anvil.mine(2).await;
    c.caught_up().await;
}

#[tokio::test]
async fn a_node_switched_to_another_chain_mid_run_is_not_read_until_it_switches_back() {
    let anvil = Anvil::start().await;
    let (c, node) = behind_proxy(anvil, |_| {}).await;
    c.caught_up().await;
    node.lie(|l| l.chain_id = Some(1));
    // The id is checked again after any failed round: here the node's head answer is over its
    // 4 MiB cap, so a round fails at once.
    node.lie(|l| l.huge_head = Some(5 << 20));
    let error = until("the other chain named in /health", 20, || async {
        let health: Value =
            c.app.client.get(c.app.url("/health")).send().await.unwrap().json().await.unwrap();
        health["chains"][0]["error"].as_str().filter(|e| e.contains("answers 1")).map(str::to_string)
    })
    .await;
    assert!(error.contains("not chains.hteth.chain_id 31337"), "{error}");
    node.lie(|l| l.huge_head = None);
    let stopped_at = custodian::chain::status(&c.app.state.chains).await.unwrap()[0].height;
    c.anvil.mine(3).await;
    // Wrong chain: nothing more is read (asked again with backoff, a few rounds).
    until("a few refused rounds", 20, || async { (node.count("eth_chainId") >= 4).then_some(()) }).await;
    assert_eq!(custodian::chain::status(&c.app.state.chains).await.unwrap()[0].height, stopped_at);
    node.lie(|l| l.chain_id = None);
    c.caught_up().await;
}

/// 2^255 + 5 as a 32-byte word.
fn word_2_255_plus_5() -> String {
    format!("8{}5", "0".repeat(62))
}

#[tokio::test]
async fn token_amounts_at_and_above_2_pow_255_are_exact_in_the_api_and_the_webhook() {
    let anvil = Anvil::start().await;
    // The whole supply is 2^256 - 1.
    let (contract, token) = deploy_token(&anvil, &"f".repeat(64)).await;
    let (c, _node) = behind_proxy(anvil, |c| c.chains.get_mut("hteth").unwrap().tokens.push(token)).await;
    let call = |from: &str, to: &str| json!({ "from": from, "to": contract, "data": format!("0xa9059cbb{}{}", word_address(to), word_2_255_plus_5()) });
    let inbound = c.anvil.rpc("eth_sendTransaction", json!([call(RICH, WATCHED)])).await;
    c.anvil.mine(1).await;
    let outbound = c.anvil.rpc("eth_sendTransaction", json!([call(WATCHED, OTHER)])).await;
    c.anvil.mine(3).await;
    c.caught_up().await;
    let exact = "57896044618658097711785492504343953926634992332820282019728792003956564819973";
    let listed = expect_json(
        c.app.get_auth(&format!("/api/v2/hteth:tst/wallet/{WALLET}/transfer"), &c.token).await,
        200,
    )
    .await;
    let rows: Vec<(String, String)> = listed["transfers"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| (t["txid"].as_str().unwrap().to_string(), t["valueString"].as_str().unwrap().to_string()))
        .collect();
    assert_eq!(
        rows,
        [
            (outbound.as_str().unwrap().to_string(), format!("-{exact}")),
            (inbound.as_str().unwrap().to_string(), exact.to_string())
        ]
    );
    until("both token transfers notified confirmed, exact", 20, || async {
        let told: Vec<String> = c
            .receiver
            .received()
            .iter()
            .map(|r| serde_json::from_str::<Value>(&r.body).unwrap())
            .filter(|b| b["coin"] == "hteth:tst" && b["state"] == "confirmed")
            .map(|b| b["valueString"].as_str().unwrap_or_default().to_string())
            .collect();
        (told.contains(&exact.to_string()) && told.contains(&format!("-{exact}"))).then_some(())
    })
    .await;
}

/// `pool_max_new` bites: of five transfers that show in the pool in one round, at most two are
/// announced in a round; the rest follow in later rounds (counted as deferred), each told once.
#[tokio::test]
async fn transfers_new_to_the_pool_are_announced_at_most_pool_max_new_a_round() {
    let anvil = Anvil::start().await;
    let (c, node) = behind_proxy(anvil, |c| c.chains.get_mut("hteth").unwrap().pool_max_new = 2).await;
    c.caught_up().await;
    c.anvil.rpc("evm_setAutomine", json!([false])).await;
    // The pool looks empty while the five are sent, then shows them all at once.
    node.lie(|l| l.empty_pool = true);
    let mut sent = Vec::new();
    for i in 1..=5u128 {
        sent.push(c.anvil.send(RICH, WATCHED, i * crate::chain::ONE_ETH).await);
    }
    node.lie(|l| l.empty_pool = false);
    let told =
        |hash: &str| c.notified().into_iter().filter(|(s, _, h)| h == hash && s == "unconfirmed").count();
    until("every pending transfer told unconfirmed", 20, || async {
        sent.iter().all(|h| told(h) > 0).then_some(())
    })
    .await;
    assert!(sent.iter().all(|h| told(h) == 1), "each told once");
    let text = c.app.client.get(c.app.url("/metrics")).send().await.unwrap().text().await.unwrap();
    let deferred: f64 = text
        .lines()
        .find(|l| l.starts_with("custodian_chain_pool_deferred_total"))
        .and_then(|l| l.rsplit(' ').next()?.parse().ok())
        .unwrap_or(0.0);
    assert!(deferred >= 3.0, "at least three left for a later round: {deferred}");
}

/// A pool answer over `pool_max_bytes` is dropped unread for the round (counted), and the
/// blocks go on being read: one that declares its length (dropped before it is read).
#[tokio::test]
async fn a_pool_over_its_byte_cap_is_dropped_unread_and_blocks_go_on() {
    pool_over_its_byte_cap(false).await;
}

/// The same, for an answer without a declared length (a chunked body): read up to the cap.
#[tokio::test]
async fn a_streamed_pool_over_its_byte_cap_is_dropped_at_the_cap_and_blocks_go_on() {
    pool_over_its_byte_cap(true).await;
}

async fn pool_over_its_byte_cap(stream: bool) {
    let anvil = Anvil::start().await;
    let (c, node) =
        behind_proxy(anvil, |c| c.chains.get_mut("hteth").unwrap().pool_max_bytes = 64 * 1024).await;
    c.caught_up().await;
    node.lie(|l| {
        l.huge_pool = Some(1 << 20);
        l.stream_answers = stream;
    });
    let dropped = || async {
        let text = c.app.client.get(c.app.url("/metrics")).send().await.unwrap().text().await.unwrap();
        text.lines()
            .find(|l| l.starts_with("custodian_chain_pool_dropped_total"))
            .and_then(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
            .unwrap_or(0.0)
    };
    until("a pool answer dropped", 20, || async { (dropped().await >= 1.0).then_some(()) }).await;
    let txid = c.anvil.send(RICH, WATCHED, 7).await;
    c.anvil.mine(3).await;
    c.caught_up().await;
    wait_until_idle(&c.app.state.store).await;
    assert!(c.notified().contains(&("confirmed".into(), "7".into(), txid)), "{:?}", c.notified());
}

/// A token transfer within `confirmations` blocks of the token's deployment: the confirmed
/// balance is read at a height where the contract has no code yet, which answers nothing;
/// that is a balance of 0, not an error that stops the watcher at that block for good.
#[tokio::test]
async fn a_token_transfer_right_after_its_deployment_is_read() {
    let anvil = Anvil::start().await;
    let (contract, token) = deploy_token(&anvil, &crate::chain::word_number(1000)).await;
    let call = json!({ "from": RICH, "to": contract, "data": format!("0xa9059cbb{}{}", word_address(WATCHED), crate::chain::word_number(5)) });
    anvil.rpc("eth_sendTransaction", json!([call])).await;
    let c = chain_fixture_on(anvil, |c| c.chains.get_mut("hteth").unwrap().tokens.push(token)).await;
    // Read again from the first block with the wallet known (it may have been imported after
    // the first round began): one run reads every block, and the balances at the
    // deployment's own depth.
    c.caught_up().await;
    custodian::chain::resync(&c.app.state.chains, "hteth", 0).await.unwrap();
    c.caught_up().await;
    let listed = expect_json(
        c.app.get_auth(&format!("/api/v2/hteth:tst/wallet/{WALLET}/transfer"), &c.token).await,
        200,
    )
    .await;
    assert_eq!(listed["transfers"][0]["valueString"], "5", "{listed}");
}
