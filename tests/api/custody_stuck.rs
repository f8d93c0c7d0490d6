//! What the chain does to a sent withdrawal: stuck below the base fee, it is replaced at its
//! nonce with higher fees (the replacement mined, the first never); reorged away, it is sent
//! again. Either way the payee is paid once.

use std::time::Duration;

use serde_json::{json, Value};

use crate::chain::{Anvil, ONE_ETH, OTHER};
use crate::common::*;
use crate::custody::{custodial_on, custodial_with, Custodial};
use crate::hostile_node::HostileNode;

fn hex_u128(v: &Value) -> u128 {
    u128::from_str_radix(v.as_str().unwrap().trim_start_matches("0x"), 16).unwrap()
}

/// Another process's lease on the chain's signer, far in the future: nothing is signed here.
async fn hold_signer_elsewhere(c: &Custodial) {
    c.app
        .raw_sql(
            "INSERT INTO chain_state (chain, lease_holder, lease_until_ms) VALUES ('signer:hteth', 'elsewhere', 99999999999999) \
             ON CONFLICT (chain) DO UPDATE SET lease_holder = 'elsewhere', lease_until_ms = 99999999999999",
        )
        .await;
}

/// The other process's lease lapses: this one's signer takes it.
async fn release_signer(c: &Custodial) {
    c.app.raw_sql("UPDATE chain_state SET lease_until_ms = 0 WHERE chain = 'signer:hteth'").await;
}

/// Alice asks for `amount` wei to OTHER and Bob approves: its txRequest id.
async fn approved(c: &Custodial, amount: &str) -> String {
    c.approved(&json!({ "recipients": [{ "address": OTHER, "amount": amount }] })).await
}

#[tokio::test]
async fn a_stuck_withdrawal_is_replaced_with_higher_fees_and_only_the_replacement_is_mined() {
    let c = custodial_with(ONE_ETH, 1, |cfg| cfg.withdrawals.stuck_after = 60).await;
    c.anvil.rpc("evm_setAutomine", json!([false])).await;
    let before = c.anvil.balance(OTHER).await;
    let sent = c.withdraw(OTHER, "31337").await;
    let id = sent["txRequestId"].as_str().unwrap();
    let first = sent["transactions"][0]["txHash"].as_str().unwrap().to_string();
    let offered = hex_u128(&c.anvil.rpc("eth_getTransactionByHash", json!([first])).await["maxFeePerGas"]);
    // The next block's base fee far above what it offered: a block is mined without it.
    c.anvil.rpc("anvil_setNextBlockBaseFeePerGas", json!([format!("0x{:x}", offered * 4)])).await;
    c.anvil.mine(1).await;
    assert!(c.anvil.rpc("eth_getTransactionReceipt", json!([first])).await.is_null());
    // Before `stuck_after` nothing is replaced; after it, a replacement at the same nonce.
    c.app.state.store.clock().advance(Duration::from_secs(61));
    let replaced = until("a replacement with higher fees", 30, || async {
        let t = c.tx_request(id).await;
        (t["transactions"][0]["replacedTxHashes"] == json!([first])).then_some(t)
    })
    .await;
    let second = replaced["transactions"][0]["txHash"].as_str().unwrap().to_string();
    assert_ne!(second, first);
    assert_eq!(replaced["transactions"][0]["nonce"], sent["transactions"][0]["nonce"]);
    let tx = c.anvil.rpc("eth_getTransactionByHash", json!([second])).await;
    assert!(hex_u128(&tx["maxFeePerGas"]) * 10 >= offered * 11, "a bump of at least 10%: {tx}");
    c.anvil.mine(1).await;
    until("the replacement is mined and seen", 30, || async {
        c.tx_request(id).await["transactions"][0]["blockHeight"].as_u64().map(|_| ())
    })
    .await;
    let receipt = c.anvil.rpc("eth_getTransactionReceipt", json!([second])).await;
    assert_eq!(receipt["status"], "0x1", "{receipt}");
    assert!(c.anvil.rpc("eth_getTransactionReceipt", json!([first])).await.is_null());
    assert_eq!(c.anvil.rpc("eth_getTransactionCount", json!([c.address(), "latest"])).await, "0x1");
    assert_eq!(c.anvil.balance(OTHER).await, before + 31337);
    assert!(metric_value(&c.app, "custodian_custody_replacements_total").await >= 1);
    let audit = c.app.raw_sql("SELECT type FROM audit_log WHERE type = 'withdrawal.replaced'").await;
    assert_eq!(audit.len(), 1, "one replacement: {audit:?}");
}

#[tokio::test]
async fn a_withdrawal_whose_block_is_reorged_away_is_sent_again_and_mined_once() {
    let c = custodial_with(ONE_ETH, 1, |_| {}).await;
    let receiver = c.hook("transfer").await;
    let before = c.anvil.balance(OTHER).await;
    let body = json!({ "recipients": [{ "address": OTHER, "amount": "2718" }] });
    let pending = expect_json(c.initiate(&c.alice_token, &body).await, 200).await;
    let approve = json!({ "state": "approved", "otp": "000000" });
    expect_json(c.answer(&c.bob_token, pending["id"].as_str().unwrap(), &approve).await, 200).await;
    let id = pending["txRequestId"].as_str().unwrap();
    let mined = until("the signer sees it mined", 30, || async {
        let t = c.tx_request(id).await;
        t["transactions"][0]["blockHeight"].as_u64().map(|b| (b, t))
    })
    .await;
    let (block, hash) = (mined.0, mined.1["transactions"][0]["txHash"].as_str().unwrap().to_string());
    assert_eq!(c.anvil.head().await, block);
    let sends = || {
        receiver
            .received()
            .iter()
            .map(|r| serde_json::from_str::<Value>(&r.body).unwrap())
            .filter(|b| b["transferType"] == "send" && b["hash"] == json!(hash))
            .map(|b| b["state"].as_str().unwrap_or_default().to_string())
            .collect::<Vec<String>>()
    };
    // The watcher has told it before the reorg (else it never saw the first block).
    until("the send is told unconfirmed", 30, || async { (!sends().is_empty()).then_some(()) }).await;
    // The block that holds it is replaced by an empty one: the transaction is gone.
    c.anvil.rpc("anvil_reorg", json!([1, []])).await;
    assert!(c.anvil.rpc("eth_getTransactionReceipt", json!([hash])).await.is_null());
    let again = until("it is sent again and mined in another block", 30, || async {
        let receipt = c.anvil.rpc("eth_getTransactionReceipt", json!([hash])).await;
        let t = c.tx_request(id).await;
        let seen = t["transactions"][0]["blockHeight"].as_u64();
        (!receipt.is_null() && seen.is_some_and(|b| b > block)).then_some(receipt)
    })
    .await;
    assert_eq!(again["status"], "0x1", "{again}");
    assert_eq!(c.anvil.rpc("eth_getTransactionCount", json!([c.address(), "latest"])).await, "0x1");
    assert_eq!(c.anvil.balance(OTHER).await, before + 2718);
    // The reorg is told (`removed`) and so is the block that holds it again (`unconfirmed`). The
    // watcher may write both in one step, and a webhook's notifications go out several at a
    // time (`delivery.per_webhook_concurrency`), so these two may arrive in either order; the
    // blocks that confirm it are mined only once both have arrived.
    let count = |states: &[String], state: &str| states.iter().filter(|s| *s == state).count();
    until("the send is told removed and seen again", 30, || async {
        let states = sends();
        (count(&states, "removed") == 1 && count(&states, "unconfirmed") == 2).then_some(())
    })
    .await;
    c.anvil.mine(3).await;
    let states = until("the send is told confirmed after the reorg", 30, || async {
        let states = sends();
        (states.last().map(String::as_str) == Some("confirmed")).then_some(states)
    })
    .await;
    assert_eq!(states[0], "unconfirmed", "{states:?}");
    assert_eq!(count(&states, "removed"), 1, "{states:?}");
    assert_eq!(count(&states, "unconfirmed"), 2, "{states:?}");
    assert_eq!(count(&states, "confirmed"), 1, "confirmed once, after the reorg: {states:?}");
}

#[tokio::test]
async fn a_nonce_reserved_but_never_with_the_node_is_reported_then_filled_and_the_wallet_moves_on() {
    let c = custodial_with(ONE_ETH, 1, |cfg| cfg.withdrawals.gap_check_interval = 1).await;
    c.withdraw(OTHER, "1").await;
    let rounds = metric_value(&c.app, "custodian_custody_signer_rounds_total").await;
    until("a round after the send", 30, || async {
        (metric_value(&c.app, "custodian_custody_signer_rounds_total").await > rounds).then_some(())
    })
    .await;
    assert_eq!(metric_value(&c.app, "custodian_custody_nonce_gap").await, 0, "no gap after a clean send");
    assert_eq!(metric_value(&c.app, "custodian_custody_nonce_fills_total").await, 0);
    // A nonce the store handed out that no transaction carries (a node's pending count answered
    // one too high when it was reserved): every later transaction of the address waits behind it.
    c.app.raw_sql("UPDATE signer_nonces SET next_nonce = next_nonce + 1").await;
    let before = c.anvil.nonce(&c.address()).await;
    // The check runs every `withdrawals.gap_check_interval` seconds of the service's clock.
    c.app.state.store.clock().advance(Duration::from_secs(2));
    until("the gap is filled", 30, || async {
        (metric_value(&c.app, "custodian_custody_nonce_fills_total").await == 1).then_some(())
    })
    .await;
    // The fill is a zero-value transaction from the address to itself at the missing nonce,
    // audited, and mined: the node's count moves past it.
    let audited = c.app.raw_sql("SELECT data FROM audit_log WHERE type = 'withdrawal.nonce_filled'").await;
    assert_eq!(audited.len(), 1, "{audited:?}");
    let entry: Value = serde_json::from_str(&audited[0]).unwrap();
    assert_eq!(entry["nonce"], json!(before), "{entry}");
    until("the node counts the fill", 30, || async {
        (c.anvil.nonce(&c.address()).await == before + 1).then_some(())
    })
    .await;
    c.app.state.store.clock().advance(Duration::from_secs(2));
    until("the gap gauge returns to 0", 30, || async {
        (metric_value(&c.app, "custodian_custody_nonce_gap").await == 0).then_some(())
    })
    .await;
    // The next withdrawal takes the nonce after the fill and is mined.
    let next = c.withdraw(OTHER, "2").await;
    assert_eq!(next["transactions"][0]["nonce"], json!(before + 1), "{next}");
    c.anvil.mine(1).await;
    until("the node counts the next withdrawal", 30, || async {
        (c.anvil.nonce(&c.address()).await == before + 2).then_some(())
    })
    .await;
}

#[tokio::test]
async fn the_sends_transfer_notifications_name_their_withdrawal() {
    let c = custodial_with(ONE_ETH, 1, |_| {}).await;
    let receiver = c.hook("transfer").await;
    let sent = c.withdraw(OTHER, "12").await;
    c.anvil.mine(3).await;
    let sends = until("the send is told confirmed", 30, || async {
        let sends: Vec<Value> = receiver
            .received()
            .iter()
            .map(|r| serde_json::from_str::<Value>(&r.body).unwrap())
            .filter(|b| b["transferType"] == "send")
            .collect();
        sends.iter().any(|b| b["state"] == "confirmed").then_some(sends)
    })
    .await;
    for send in &sends {
        assert_eq!(send["txRequestId"], sent["txRequestId"], "{send}");
    }
}

#[tokio::test]
async fn while_another_process_holds_the_signer_lease_nothing_is_signed_here_then_all_at_the_concurrency_limit(
) {
    let c = custodial_with(ONE_ETH, 1, |cfg| cfg.withdrawals.signer_concurrency = 2).await;
    hold_signer_elsewhere(&c).await;
    let mut ids = Vec::new();
    for amount in ["77", "78", "79", "80"] {
        ids.push(approved(&c, amount).await);
    }
    let held = metric_value(&c.app, "custodian_custody_signer_rounds_held_back_total").await;
    until("three rounds held back after the approval", 30, || async {
        (metric_value(&c.app, "custodian_custody_signer_rounds_held_back_total").await >= held + 3)
            .then_some(())
    })
    .await;
    for id in &ids {
        assert_eq!(c.tx_request(id).await["state"], "pendingDelivery");
    }
    // The other process's lease lapses: this one takes it and sends all four, two at a time
    // (`withdrawals.signer_concurrency`), at consecutive nonces.
    release_signer(&c).await;
    let mut nonces = Vec::new();
    for id in &ids {
        let t = until("the withdrawals are sent once the lease lapsed", 30, || async {
            let t = c.tx_request(id).await;
            (t["state"] == "delivered").then_some(t)
        })
        .await;
        nonces.push(t["transactions"][0]["nonce"].as_u64().unwrap());
    }
    nonces.sort_unstable();
    assert_eq!(nonces, [0, 1, 2, 3]);
    assert_eq!(metric_value(&c.app, "custodian_custody_signer_concurrency_peak").await, 2);
}

#[tokio::test]
async fn a_reorg_of_the_newest_withdrawal_is_seen_behind_a_full_batch_of_older_mined_ones() {
    let batch = custodian::custody::transaction::BATCH;
    // Every block of the test within the reorg depth, so all are candidates for the check.
    let c = custodial_with(ONE_ETH, 1, |cfg| {
        cfg.withdrawals.max_in_flight_per_wallet = 100;
        cfg.chains.get_mut("hteth").unwrap().reorg_depth = 200;
    })
    .await;
    let approve = json!({ "state": "approved", "otp": "000000" });
    let withdraw = |amount: u32| {
        let c = &c;
        let approve = approve.clone();
        async move {
            let body = json!({ "recipients": [{ "address": OTHER, "amount": amount.to_string() }] });
            let pending = expect_json(c.initiate(&c.alice_token, &body).await, 200).await;
            expect_json(c.answer(&c.bob_token, pending["id"].as_str().unwrap(), &approve).await, 200).await;
            pending["txRequestId"].as_str().unwrap().to_string()
        }
    };
    let mined = |id: String| {
        let c = &c;
        async move {
            until("seen mined", 60, || async {
                let t = c.tx_request(&id).await;
                let tx = &t["transactions"][0];
                tx["blockHeight"].as_u64().map(|b| (b, tx["txHash"].as_str().unwrap_or_default().to_string()))
            })
            .await
        }
    };
    // A full batch of mined withdrawals, then one more, made a second later and mined last.
    let mut older = Vec::new();
    for i in 0..batch {
        older.push(withdraw(1000 + i).await);
    }
    for id in older {
        mined(id).await;
    }
    c.app.state.store.clock().advance(Duration::from_secs(1));
    let newest = withdraw(5000).await;
    let (block, hash) = mined(newest.clone()).await;
    assert_eq!(c.anvil.head().await, block, "the newest is in the head block");
    c.anvil.rpc("anvil_reorg", json!([1, []])).await;
    // Behind a full batch of older mined ones, the newest's reorg is still seen: sent again.
    until("the newest is mined again", 60, || async {
        let t = c.tx_request(&newest).await;
        let seen = t["transactions"][0]["blockHeight"].as_u64();
        let receipt = c.anvil.rpc("eth_getTransactionReceipt", json!([hash])).await;
        (!receipt.is_null() && seen.is_some_and(|b| b > block)).then_some(())
    })
    .await;
}

/// Alice's and Bob's custodial wallet (1 ETH, one approval) whose node is a proxy in front of a
/// new anvil, `tweak` applied to the configuration: the proxy and the service.
pub async fn behind_proxy(tweak: impl FnOnce(&mut custodian::config::Config)) -> (HostileNode, Custodial) {
    let anvil = Anvil::start().await;
    let node = HostileNode::start(&anvil.url).await;
    let url = node.url.clone();
    let c = custodial_on(anvil, ONE_ETH, 1, |cfg| {
        cfg.chains.get_mut("hteth").unwrap().rpc_url = url;
        tweak(cfg);
    })
    .await;
    (node, c)
}

/// Four approved withdrawals signed at once, sent through a proxy (`send_batch` set by
/// `tweak`), Alice's wallet: the proxy, the service, and the four txRequest ids.
async fn four_signed_at_once(
    tweak: impl FnOnce(&mut custodian::config::Config),
) -> (HostileNode, Custodial, Vec<String>) {
    let (node, c) = behind_proxy(|cfg| {
        cfg.withdrawals.signer_concurrency = 8;
        tweak(cfg);
    })
    .await;
    hold_signer_elsewhere(&c).await;
    let mut ids = Vec::new();
    for amount in ["101", "102", "103", "104"] {
        ids.push(approved(&c, amount).await);
    }
    // Mined only when the test says, so the node's pool holds any after a refused nonce.
    c.anvil.rpc("evm_setAutomine", json!([false])).await;
    (node, c, ids)
}

/// Waits until each of `ids` is delivered, then mines them: all four at consecutive nonces,
/// the payee paid each once.
async fn all_sent_and_mined(c: &Custodial, ids: &[String], before: u128) {
    let mut nonces = Vec::new();
    for id in ids {
        nonces.push(c.state_is(id, "delivered").await["transactions"][0]["nonce"].as_u64().unwrap());
    }
    nonces.sort_unstable();
    assert_eq!(nonces, [0, 1, 2, 3], "consecutive nonces");
    c.anvil.mine(1).await;
    assert_eq!(c.anvil.rpc("eth_getTransactionCount", json!([c.address(), "latest"])).await, "0x4");
    assert_eq!(c.anvil.balance(OTHER).await, before + 101 + 102 + 103 + 104);
}

#[tokio::test]
async fn an_addresss_sends_go_in_one_batch_and_one_the_node_refuses_is_sent_again_alone() {
    let (node, c, ids) = four_signed_at_once(|_| {}).await;
    let before = c.anvil.balance(OTHER).await;
    node.lie(|l| l.refuse_in_batch = Some((1, "internal error: try again")));
    release_signer(&c).await;
    all_sent_and_mined(&c, &ids, before).await;
    // One batch of the four in nonce order, its second refused, then that one again alone.
    assert_eq!(
        node.batch_sizes("eth_sendRawTransaction"),
        [4],
        "one batch; the refused one again as a plain request"
    );
    assert_eq!(node.count("eth_sendRawTransaction"), 5, "four in one batch, the refused one again");
    assert_eq!(metric_value(&c.app, "custodian_custody_broadcasts_total").await, 5);
}

#[tokio::test]
async fn send_batch_bounds_a_batch_and_at_one_sends_no_batch_at_all() {
    for (per_batch, batches) in [(2, vec![2, 2]), (1, vec![])] {
        let (node, c, ids) = four_signed_at_once(|cfg| cfg.withdrawals.send_batch = per_batch).await;
        let before = c.anvil.balance(OTHER).await;
        release_signer(&c).await;
        all_sent_and_mined(&c, &ids, before).await;
        assert_eq!(node.batch_sizes("eth_sendRawTransaction"), batches, "send_batch {per_batch}");
        assert_eq!(node.count("eth_sendRawTransaction"), 4, "send_batch {per_batch}");
    }
}

/// anvil's pool can hold a transaction queued though it is next: one that arrived while its
/// predecessor was being mined waits for a marker already pruned. The test makes that state
/// with anvil's own methods: the wallet's nonce set to 1, so the withdrawal is signed at 1;
/// back to 0 while it is sent, so anvil queues it behind nonce 0; then 1 again. The node knows
/// it, its pending count stops at 1, and nothing but a new transaction at the nonce frees it.
#[tokio::test]
async fn a_withdrawal_the_node_holds_queued_though_it_is_next_is_replaced_after_queued_after() {
    let (node, c) = behind_proxy(|cfg| {
        cfg.withdrawals.stuck_after = 3600;
        cfg.withdrawals.queued_after = 20;
    })
    .await;
    let set_nonce = |n: u64| c.anvil.rpc("anvil_setNonce", json!([c.address(), format!("0x{n:x}")]));
    set_nonce(1).await;
    node.lie(|l| l.hold_methods = vec!["eth_sendRawTransaction"]);
    let before = c.anvil.balance(OTHER).await;
    let id = approved(&c, "31337").await;
    let signed = c.state_is(&id, "signed").await;
    assert_eq!(signed["transactions"][0]["nonce"], 1, "{signed}");
    let first = signed["transactions"][0]["txHash"].as_str().unwrap().to_string();
    set_nonce(0).await;
    node.lie(|l| l.hold_methods.clear());
    c.state_is(&id, "delivered").await;
    set_nonce(1).await;
    assert_eq!(c.anvil.rpc("txpool_status", json!([])).await["queued"], "0x1", "anvil holds it queued");
    assert_eq!(c.anvil.rpc("eth_getTransactionCount", json!([c.address(), "pending"])).await, "0x1");
    // Far before `stuck_after`: past `queued_after`, a replacement at the same nonce.
    c.app.state.store.clock().advance(Duration::from_secs(21));
    let replaced = |t: &Value| t["transactions"][0]["replacedTxHashes"] == json!([first]);
    c.tx_request_where(&id, "a replacement of the queued transaction", replaced).await;
    let seen = |t: &Value| t["transactions"][0]["blockHeight"].is_u64();
    let mined = c.tx_request_where(&id, "the replacement is mined and seen", seen).await;
    let second = mined["transactions"][0]["txHash"].as_str().unwrap().to_string();
    assert_ne!(second, first);
    assert_eq!(c.anvil.rpc("eth_getTransactionReceipt", json!([second])).await["status"], "0x1");
    assert!(c.anvil.rpc("eth_getTransactionReceipt", json!([first])).await.is_null());
    assert_eq!(c.anvil.rpc("eth_getTransactionCount", json!([c.address(), "latest"])).await, "0x2");
    assert_eq!(c.anvil.balance(OTHER).await, before + 31337, "paid once");
    assert_eq!(metric_value(&c.app, "custodian_custody_held_queued_total").await, 1);
    let audit = c.app.raw_sql("SELECT type FROM audit_log WHERE type = 'withdrawal.replaced'").await;
    assert_eq!(audit.len(), 1, "one replacement: {audit:?}");
}
