//! Money moves once, and only as the rules say, under attack (docs/security.md): every way a
//! withdrawal once moved money wrongly or stranded a wallet, on a real anvil (a proxy in front
//! of it where a node must lie), each failing on the code before its fix.

use std::time::Duration;

use serde_json::{json, Value};

use crate::chain::{Anvil, ONE_ETH, OTHER};
use crate::common::*;
use crate::custody::{custodial, custodial_on, custodial_with, Custodial};
use crate::custody_stuck::behind_proxy;

/// Alice asks for `amount` wei to OTHER: the pending approval.
async fn ask(c: &Custodial, amount: u128) -> Value {
    let body = json!({ "recipients": [{ "address": OTHER, "amount": amount.to_string() }] });
    expect_json(c.initiate(&c.alice_token, &body).await, 200).await
}

/// Bob approves `pending`: the response.
async fn approve(c: &Custodial, pending: &Value) -> reqwest::Response {
    let approve = json!({ "state": "approved", "otp": "000000" });
    c.answer(&c.bob_token, pending["id"].as_str().unwrap(), &approve).await
}

/// Waits until the signer has seen txRequest `id` mined: its block.
async fn mined(c: &Custodial, id: &str) -> u64 {
    let t = c
        .tx_request_where(id, "the signer sees it mined", |t| t["transactions"][0]["blockHeight"].is_u64())
        .await;
    t["transactions"][0]["blockHeight"].as_u64().unwrap()
}

#[tokio::test]
async fn an_answer_at_or_after_expire_date_is_refused_though_no_sweep_closed_it() {
    // The signer idles a minute between rounds: no sweep closes the approval first.
    let c = custodial_with(ONE_ETH, 1, |cfg| {
        cfg.withdrawals.approval_ttl = 600;
        cfg.withdrawals.poll_interval_ms = 60_000;
    })
    .await;
    let early = ask(&c, 11).await;
    let late = ask(&c, 12).await;
    let expires = custodian::clock::parse_iso(late["expireDate"].as_str().unwrap()).unwrap();
    let clock = c.app.state.store.clock();
    // Five seconds before its expiry an approval counts.
    clock.advance(Duration::from_secs(u64::try_from(expires - 5 - clock.now()).unwrap_or(0)));
    let answered = expect_json(approve(&c, &early).await, 200).await;
    assert_eq!(answered["state"], "approved", "{answered}");
    // From its expireDate on, none does, swept or not.
    clock.advance(Duration::from_secs(u64::try_from(expires - clock.now()).unwrap_or(0)));
    let refused = assert_error(approve(&c, &late).await, 409, "ApprovalNotPending").await;
    assert!(refused["error"].as_str().unwrap().contains("expired"), "{refused}");
    let reject = json!({ "state": "rejected" });
    assert_error(
        c.answer(&c.bob_token, late["id"].as_str().unwrap(), &reject).await,
        409,
        "ApprovalNotPending",
    )
    .await;
    let id = late["txRequestId"].as_str().unwrap();
    let state = c.tx_request(id).await["state"].clone();
    assert!(state == "pendingApproval" || state == "canceled", "never handed to the signer: {state}");
    let audited = c.app.raw_sql("SELECT data FROM audit_log WHERE type = 'withdrawal.approved'").await;
    assert_eq!(audited.len(), 1, "only the answer in time was recorded: {audited:?}");
}

#[tokio::test]
async fn two_approvers_at_once_both_count_or_one_is_told_to_read_again() {
    let c = custodial(ONE_ETH, 2).await;
    let carol = c.app.create_user("carol@example.com").await;
    let e = c.enterprise.parse().unwrap();
    custodian::identity::users::add_member(&c.app.state.store, &e, &carol.email, true).await.unwrap();
    let carol_token = c.app.login(&carol).await;
    let approve = json!({ "state": "approved", "otp": "000000" });
    for round in 0..8u128 {
        let pending = ask(&c, 100 + round).await;
        let id = pending["id"].as_str().unwrap();
        let (bob, carol) =
            tokio::join!(c.answer(&c.bob_token, id, &approve), c.answer(&carol_token, id, &approve));
        let mut ok = 0;
        for res in [bob, carol] {
            match res.status().as_u16() {
                200 => ok += 1,
                409 => {
                    assert_error(res, 409, "ApprovalNotPending").await;
                }
                other => panic!("round {round}: {other} {}", res.text().await.unwrap()),
            }
        }
        let read = expect_json(
            c.app.get_auth(&format!("/api/v2/hteth/pendingapprovals/{id}"), &c.alice_token).await,
            200,
        )
        .await;
        let recorded = read["resolvers"].as_array().unwrap().len();
        assert_eq!(recorded, ok, "round {round}: every 200 is an answer recorded, and only those: {read}");
        assert_eq!(read["state"] == "approved", ok == 2, "round {round}: {read}");
    }
}

#[tokio::test]
async fn an_unlocked_session_s_tx_value_limit_caps_what_it_sends_in_all() {
    let c = custodial(ONE_ETH, 1).await;
    let limited = c
        .app
        .token_with(
            &c.alice_token,
            json!({ "scope": ["wallet_spend_all", "wallet_view_all", "user_manage"], "txValueLimit": "5000" }),
        )
        .await;
    expect_json(c.app.post_auth("/api/v2/user/unlock", &limited, &json!({ "otp": "000000" })).await, 200)
        .await;
    let send = |amount: u128| json!({ "recipients": [{ "address": OTHER, "amount": amount.to_string() }] });
    expect_json(c.initiate(&limited, &send(4_000)).await, 200).await;
    let over = assert_error(c.initiate(&limited, &send(1_001)).await, 400, "SpendingLimitExceeded").await;
    assert_eq!(over["context"]["txValueLimit"], "5000", "{over}");
    // Exactly up to the limit passes; one base unit more does not.
    expect_json(c.initiate(&limited, &send(1_000)).await, 200).await;
    assert_error(c.initiate(&limited, &send(1)).await, 400, "SpendingLimitExceeded").await;
    let session = expect_json(c.app.get_auth("/api/v2/user/session", &limited).await, 200).await;
    assert_eq!(session["session"]["unlock"]["txValue"], 5_000, "{session}");
    assert_eq!(c.app.raw_sql("SELECT id FROM withdrawals").await.len(), 2);
    // Another unlocked session without a txValueLimit is not held by this one's.
    expect_json(c.initiate(&c.alice_token, &send(1_000)).await, 200).await;
}

#[tokio::test]
async fn a_withdrawal_counts_against_the_confirmed_balance_until_the_watcher_confirms_its_send() {
    let (node, c) = behind_proxy(|_| {}).await;
    // The watcher reads no block past this one: it lags the signer, which sees the receipt.
    let head = c.anvil.head().await;
    node.lie(|l| l.hold_from = Some(head + 1));
    let first = ask(&c, ONE_ETH * 9 / 10).await;
    expect_json(approve(&c, &first).await, 200).await;
    mined(&c, first["txRequestId"].as_str().unwrap()).await;
    // The confirmed balance still holds the 0.9 ETH the node paid out: it is not there to pay.
    let body = json!({ "recipients": [{ "address": OTHER, "amount": (ONE_ETH / 2).to_string() }] });
    assert_error(c.initiate(&c.alice_token, &body).await, 400, "InsufficientBalance").await;
    // Once the watcher confirms the send, the balance holds it and what is left can be spent.
    node.lie(|l| l.hold_from = None);
    c.anvil.mine(3).await;
    let path = format!("/api/v2/hteth/wallet/{}?expandBalance=true", c.wallet_id());
    until("the watcher confirms the send", 30, || async {
        let w = expect_json(c.app.get_auth(&path, &c.alice_token).await, 200).await;
        (w["confirmedBalanceString"].as_str().is_some_and(|b| b.parse::<u128>().unwrap() < ONE_ETH / 10))
            .then_some(())
    })
    .await;
    let settled = c.app.raw_sql("SELECT CAST(settled AS TEXT) FROM withdrawals").await;
    assert_eq!(settled, vec!["1"], "{settled:?}");
    ask(&c, ONE_ETH / 20).await;
    assert_error(c.initiate(&c.alice_token, &body).await, 400, "InsufficientBalance").await;
}

#[tokio::test]
async fn a_deposit_reorged_away_after_the_request_holds_the_withdrawal_unsigned_without_a_nonce() {
    let anvil = Anvil::start().await;
    let c = custodial_on(anvil, 0, 1, |cfg| cfg.withdrawals.gap_check_interval = 0).await;
    c.anvil.send(crate::chain::RICH, &c.address(), ONE_ETH).await;
    c.anvil.mine(3).await;
    c.balance_is(ONE_ETH).await;
    let pending = ask(&c, ONE_ETH / 2).await;
    // The deposit's block and the three after it are reorged away; the new branch has none.
    c.anvil.rpc("anvil_reorg", json!([4, []])).await;
    c.anvil.mine(1).await;
    c.balance_is(0).await;
    expect_json(approve(&c, &pending).await, 200).await;
    until("the signer holds it for funds", 30, || async {
        (metric_value(&c.app, "custodian_custody_held_for_funds_total").await >= 1).then_some(())
    })
    .await;
    let t = c.tx_request(pending["txRequestId"].as_str().unwrap()).await;
    assert_eq!(t["state"], "pendingDelivery", "{t}");
    assert!(t["transactions"][0].get("nonce").is_none_or(Value::is_null), "no nonce taken: {t}");
    assert_eq!(c.app.raw_sql("SELECT address FROM signer_nonces").await.len(), 0, "no nonce handed out");
    assert_eq!(c.anvil.nonce(&c.address()).await, 0);
    assert_eq!(metric_value(&c.app, "custodian_custody_nonce_gap").await, 0);
}

#[tokio::test]
async fn a_node_that_takes_a_send_and_answers_insufficient_funds_does_not_fail_it() {
    let (node, c) = behind_proxy(|_| {}).await;
    let before = c.anvil.balance(OTHER).await;
    node.lie(|l| l.take_then_refuse = 1);
    let pending = ask(&c, 4_242).await;
    expect_json(approve(&c, &pending).await, 200).await;
    let id = pending["txRequestId"].as_str().unwrap();
    mined(&c, id).await;
    assert_eq!(node.count("eth_sendRawTransaction"), 1, "taken at the first send");
    assert_eq!(c.tx_request(id).await["state"], "delivered");
    assert_eq!(c.anvil.balance(OTHER).await, before + 4_242);
    assert!(c.app.raw_sql("SELECT data FROM audit_log WHERE type = 'withdrawal.failed'").await.is_empty());
}

#[tokio::test]
async fn a_send_refused_for_good_fails_and_its_nonce_is_filled_so_the_wallet_moves_on() {
    let (node, c) = behind_proxy(|cfg| cfg.withdrawals.gap_check_interval = 0).await;
    let before = c.anvil.balance(OTHER).await;
    // The node never gets it: its nonce is taken and now unused.
    node.lie(|l| l.refuse_sends = (1, "insufficient funds for gas * price + value"));
    let first = ask(&c, 1_111).await;
    expect_json(approve(&c, &first).await, 200).await;
    let failed = c.state_is(first["txRequestId"].as_str().unwrap(), "failed").await;
    assert_eq!(failed["transactions"][0]["nonce"], 0, "{failed}");
    until("the nonce is filled and mined", 30, || async {
        (c.anvil.nonce(&c.address()).await == 1).then_some(())
    })
    .await;
    assert_eq!(metric_value(&c.app, "custodian_custody_nonce_fills_total").await, 1);
    let fill = c.app.raw_sql("SELECT tx_request_id FROM nonce_fills").await;
    assert_eq!(fill, vec![first["txRequestId"].as_str().unwrap().to_string()]);
    // The failed withdrawal shows the transaction that filled its nonce.
    let shown = c.tx_request(first["txRequestId"].as_str().unwrap()).await;
    let filled = &shown["transactions"][0]["nonceFill"];
    assert_eq!(filled["nonce"], 0, "{shown}");
    let receipt = c.anvil.rpc("eth_getTransactionReceipt", json!([filled["txHash"]])).await;
    assert_eq!(receipt["status"], "0x1", "{receipt}");
    // The next withdrawal is not stranded behind the gap.
    let second = ask(&c, 2_222).await;
    expect_json(approve(&c, &second).await, 200).await;
    mined(&c, second["txRequestId"].as_str().unwrap()).await;
    assert_eq!(c.anvil.balance(OTHER).await, before + 2_222, "the failed one never paid");
    until("the gap gauge is 0", 30, || async {
        (metric_value(&c.app, "custodian_custody_nonce_gap").await == 0).then_some(())
    })
    .await;
}

#[tokio::test]
async fn one_false_reverted_receipt_neither_fails_a_paid_withdrawal_nor_opens_a_velocity_limit() {
    let (node, c) = behind_proxy(|_| {}).await;
    let rule = json!({ "id": "daily", "type": "velocityLimit",
        "condition": { "amountString": (ONE_ETH / 2).to_string(), "timeWindow": 86_400 }, "action": { "type": "deny" } });
    let path = format!("/api/v2/hteth/wallet/{}/policy/rule", c.wallet_id());
    expect_json(c.app.post_auth(&path, &c.alice_token, &rule).await, 200).await;
    let before = c.anvil.balance(OTHER).await;
    node.lie(|l| l.reverted_receipts = 1);
    let paid = ask(&c, ONE_ETH * 2 / 5).await;
    expect_json(approve(&c, &paid).await, 200).await;
    let id = paid["txRequestId"].as_str().unwrap();
    mined(&c, id).await;
    assert_eq!(c.tx_request(id).await["state"], "delivered", "one answer does not decide it");
    // Still in the velocity sum: 0.4 + 0.4 ETH in a day would pass 0.5.
    let more = json!({ "recipients": [{ "address": OTHER, "amount": (ONE_ETH * 2 / 5).to_string() }] });
    assert_error(c.initiate(&c.alice_token, &more).await, 403, "PolicyDenied").await;
    // Read again at the confirmation depth, the receipt says it paid: it never fails.
    c.anvil.mine(4).await;
    let rounds = metric_value(&c.app, "custodian_custody_signer_rounds_total").await;
    until("two signer rounds past the depth", 30, || async {
        (metric_value(&c.app, "custodian_custody_signer_rounds_total").await > rounds + 1).then_some(())
    })
    .await;
    assert_eq!(c.tx_request(id).await["state"], "delivered");
    assert_eq!(c.anvil.balance(OTHER).await, before + ONE_ETH * 2 / 5);
    assert!(c.app.raw_sql("SELECT data FROM audit_log WHERE type = 'withdrawal.failed'").await.is_empty());
}

#[tokio::test]
async fn a_signed_withdrawal_refused_as_underpriced_is_signed_again_at_its_nonce() {
    let (node, c) = behind_proxy(|_| {}).await;
    node.lie(|l| l.refuse_sends = (1, "transaction underpriced"));
    let pending = ask(&c, 3_333).await;
    expect_json(approve(&c, &pending).await, 200).await;
    let id = pending["txRequestId"].as_str().unwrap();
    mined(&c, id).await;
    assert_eq!(metric_value(&c.app, "custodian_custody_repriced_total").await, 1);
    let t = c.tx_request(id).await;
    let replaced = t["transactions"][0]["replacedTxHashes"].as_array().cloned().unwrap_or_default();
    assert_eq!(replaced.len(), 1, "the refused bytes are kept as replaced: {t}");
    assert_eq!(t["transactions"][0]["nonce"], 0, "{t}");
    assert_eq!(c.anvil.nonce(&c.address()).await, 1, "one transaction mined");
}

#[tokio::test]
async fn a_pending_count_answered_too_high_leaves_no_gap_for_long() {
    let (node, c) = behind_proxy(|cfg| cfg.withdrawals.gap_check_interval = 0).await;
    let before = c.anvil.balance(OTHER).await;
    node.lie(|l| l.pending_nonce_plus = (1, 3));
    let pending = ask(&c, 5_555).await;
    expect_json(approve(&c, &pending).await, 200).await;
    let id = pending["txRequestId"].as_str().unwrap();
    let t = c.state_is(id, "delivered").await;
    assert_eq!(t["transactions"][0]["nonce"], 3, "the lie made it skip three nonces: {t}");
    // The three skipped nonces are filled; the withdrawal behind them is mined.
    until("the three nonces filled", 30, || async {
        (metric_value(&c.app, "custodian_custody_nonce_fills_total").await == 3).then_some(())
    })
    .await;
    c.anvil.mine(1).await;
    mined(&c, id).await;
    assert_eq!(c.anvil.nonce(&c.address()).await, 4);
    assert_eq!(metric_value(&c.app, "custodian_custody_nonce_fills_total").await, 3);
    assert_eq!(c.anvil.balance(OTHER).await, before + 5_555, "paid once");
    until("the gap gauge is 0", 30, || async {
        (metric_value(&c.app, "custodian_custody_nonce_gap").await == 0).then_some(())
    })
    .await;
}

/// The rules a policy path holds: an enterprise's (its GET), or the wallet's record's.
async fn rules_at(c: &Custodial, path: &str) -> Value {
    if path.contains("/enterprise/") {
        return expect_json(c.app.get_auth(path, &c.alice_token).await, 200).await["rules"].clone();
    }
    let wallet = format!("/api/v2/hteth/wallet/{}", c.wallet_id());
    expect_json(c.app.get_auth(&wallet, &c.alice_token).await, 200).await["admin"]["policy"]["rules"].clone()
}

#[tokio::test]
async fn a_change_of_named_approvers_is_approved_first_on_the_wallet_and_the_enterprise() {
    let c = custodial(ONE_ETH, 1).await;
    let carol = c.app.create_user("carol@example.com").await;
    let e = c.enterprise.parse().unwrap();
    custodian::identity::users::add_member(&c.app.state.store, &e, &carol.email, true).await.unwrap();
    let bob = c.bob.id.clone();
    let wallet = format!("/api/v2/hteth/wallet/{}/policy/rule", c.wallet_id());
    let enterprise = format!("/api/v2/hteth/enterprise/{}/policy/rule", c.enterprise);
    for path in [wallet, enterprise] {
        let rule = json!({ "id": "named", "type": "allTx", "condition": {}, "action": { "type": "getApproval", "userIds": [bob] } });
        expect_json(c.app.post_auth(&path, &c.alice_token, &rule).await, 200).await;
        let before = rules_at(&c, &path).await;
        // A stricter action naming someone else: Carol could approve without Bob.
        let swap = json!({ "id": "named", "type": "allTx", "condition": {}, "action": { "type": "getFinalApproval", "userIds": [carol.id] } });
        let pending = expect_json(c.app.put_auth(&path, &c.alice_token, &swap).await, 200).await;
        assert_eq!(pending["state"], "pending", "{path}: {pending}");
        assert_eq!(pending["info"]["policyRuleRequest"]["action"], "update", "{pending}");
        assert_eq!(rules_at(&c, &path).await, before, "{path}: nothing changed yet");
    }
}

#[tokio::test]
async fn an_approver_sees_the_amount_in_units_people_by_email_the_wallet_by_label_and_a_new_payee() {
    let c = custodial(ONE_ETH, 1).await;
    let first = ask(&c, ONE_ETH * 9 / 10).await;
    let request = &first["info"]["transactionRequest"];
    // BitGo's base units stay; what a person reads is added beside them.
    assert_eq!(request["requestedAmount"], "900000000000000000", "{first}");
    assert_eq!(request["requestedAmountUnits"], "0.9", "{first}");
    assert_eq!(request["coin"], "hteth");
    assert_eq!(request["initiator"]["email"], "alice@example.com", "{first}");
    assert_eq!(request["walletLabel"], "cold");
    assert_eq!(request["firstTimePayees"], json!([OTHER]), "{first}");
    expect_json(approve(&c, &first).await, 200).await;
    mined(&c, first["txRequestId"].as_str().unwrap()).await;
    let read = format!("/api/v2/hteth/pendingapprovals/{}", first["id"].as_str().unwrap());
    let answered = expect_json(c.app.get_auth(&read, &c.alice_token).await, 200).await;
    let approvers = &answered["info"]["transactionRequest"]["approvers"];
    assert_eq!(approvers[0]["email"], "bob@example.com", "{answered}");
    assert_eq!(approvers[0]["resolutionType"], "approved", "{answered}");
    // Paid once from this wallet, the payee is no longer new.
    let second = ask(&c, 7).await;
    assert_eq!(second["info"]["transactionRequest"]["firstTimePayees"], json!([]), "{second}");
    assert_eq!(second["info"]["transactionRequest"]["requestedAmountUnits"], "0.000000000000000007");
}

#[tokio::test]
async fn a_pending_count_answered_absurdly_high_costs_a_bounded_number_of_fills() {
    let (node, c) = behind_proxy(|cfg| cfg.withdrawals.gap_check_interval = 0).await;
    node.lie(|l| l.pending_nonce_plus = (1, 1_000_000));
    let pending = ask(&c, 6_666).await;
    expect_json(approve(&c, &pending).await, 200).await;
    let id = pending["txRequestId"].as_str().unwrap();
    let t = c.state_is(id, "delivered").await;
    // Believed only up to MAX_POOL_AHEAD past the mined count.
    assert_eq!(t["transactions"][0]["nonce"], 16, "{t}");
    until("the skipped nonces filled", 30, || async {
        (metric_value(&c.app, "custodian_custody_nonce_fills_total").await == 16).then_some(())
    })
    .await;
    c.anvil.mine(1).await;
    mined(&c, id).await;
    let rounds = metric_value(&c.app, "custodian_custody_signer_rounds_total").await;
    until("more rounds", 30, || async {
        (metric_value(&c.app, "custodian_custody_signer_rounds_total").await > rounds + 3).then_some(())
    })
    .await;
    assert_eq!(metric_value(&c.app, "custodian_custody_nonce_fills_total").await, 16, "no more fills");
    assert_eq!(metric_value(&c.app, "custodian_custody_nonce_gap").await, 0);
}

#[tokio::test]
async fn a_withdrawal_failed_on_three_false_answers_is_delivered_again_once_its_transaction_is_found_mined() {
    let (node, c) = behind_proxy(|cfg| cfg.withdrawals.gap_check_interval = 0).await;
    let before = c.anvil.balance(OTHER).await;
    // The watcher reads no new block meanwhile, so only the signer hears the lies.
    let head = c.anvil.head().await;
    node.lie(|l| {
        l.hold_from = Some(head + 1);
        l.take_then_refuse = 1;
        l.null_tx_by_hash = 1;
        l.null_receipts = 1;
    });
    let pending = ask(&c, 7_777).await;
    expect_json(approve(&c, &pending).await, 200).await;
    let id = pending["txRequestId"].as_str().unwrap();
    // The node took it, then said "insufficient funds", then knew nothing of it: failed. Its
    // nonce was then used by its own transaction, which paid: it is followed again.
    let back = c
        .tx_request_where(id, "it is delivered again", |t| {
            t["state"] == "delivered" && t["transactions"][0]["blockHeight"].is_u64()
        })
        .await;
    assert_eq!(back["transactions"][0]["nonce"], 0, "{back}");
    assert_eq!(c.anvil.balance(OTHER).await, before + 7_777, "paid once");
    assert!(c.app.raw_sql("SELECT tx_hash FROM nonce_fills").await.is_empty(), "nothing filled over it");
    let failed = c.app.raw_sql("SELECT data FROM audit_log WHERE type = 'withdrawal.failed'").await;
    assert_eq!(failed.len(), 1, "it was failed first: {failed:?}");
    let found = c.app.raw_sql("SELECT data FROM audit_log WHERE type = 'withdrawal.found_mined'").await;
    assert_eq!(found.len(), 1, "{found:?}");
    node.lie(|l| l.hold_from = None);
    // Back in flight and in the sums until the watcher confirms it.
    let body = json!({ "recipients": [{ "address": OTHER, "amount": (ONE_ETH - 7_777).to_string() }] });
    assert_error(c.initiate(&c.alice_token, &body).await, 400, "InsufficientBalance").await;
}

#[tokio::test]
async fn a_gap_past_the_first_500_signing_addresses_is_still_filled() {
    let c = custodial_with(ONE_ETH, 1, |cfg| cfg.withdrawals.gap_check_interval = 0).await;
    c.withdraw(OTHER, "1").await;
    // 500 signing addresses that sort before the wallet's, none with a gap.
    let many = match crate::BACKEND {
        Backend::Sqlite => "WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < 500) \
             INSERT INTO signer_nonces (chain, address, next_nonce) SELECT 'hteth', printf('0x%040x', i), 0 FROM n",
        Backend::Postgres => "INSERT INTO signer_nonces (chain, address, next_nonce) \
             SELECT 'hteth', '0x' || lpad(to_hex(i), 40, '0'), 0 FROM generate_series(1, 500) AS i",
    };
    c.app.raw_sql(many).await;
    c.app
        .raw_sql(&format!(
            "UPDATE signer_nonces SET next_nonce = next_nonce + 1 WHERE address = '{}'",
            c.address()
        ))
        .await;
    until("the wallet's gap is filled", 60, || async {
        (metric_value(&c.app, "custodian_custody_nonce_fills_total").await == 1).then_some(())
    })
    .await;
}

#[tokio::test]
async fn a_nonce_fill_refused_as_underpriced_is_signed_again_over_it() {
    let (node, c) = behind_proxy(|cfg| cfg.withdrawals.gap_check_interval = 0).await;
    c.withdraw(OTHER, "1").await;
    let before = c.anvil.nonce(&c.address()).await;
    // The fill's first send is refused as underpriced (the base fee rose past what it offers).
    node.lie(|l| l.refuse_sends = (1, "transaction underpriced"));
    c.app.raw_sql("UPDATE signer_nonces SET next_nonce = next_nonce + 1").await;
    until("the fill is mined", 30, || async {
        (c.anvil.nonce(&c.address()).await == before + 1).then_some(())
    })
    .await;
    assert_eq!(metric_value(&c.app, "custodian_custody_nonce_fills_total").await, 1);
    assert_eq!(metric_value(&c.app, "custodian_custody_repriced_total").await, 1, "signed again once");
    let audited =
        c.app.raw_sql("SELECT data FROM audit_log WHERE type = 'withdrawal.nonce_filled' ORDER BY seq").await;
    assert_eq!(audited.len(), 2, "{audited:?}");
    let first: Value = serde_json::from_str(&audited[0]).unwrap();
    let second: Value = serde_json::from_str(&audited[1]).unwrap();
    assert_eq!(second["replaces"], first["txHash"], "{second}");
    let stored = c.app.raw_sql("SELECT tx_hash FROM nonce_fills").await;
    assert_eq!(stored, vec![second["txHash"].as_str().unwrap().to_string()]);
}
