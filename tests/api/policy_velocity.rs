//! Velocity limits and approval rules (docs/policy.md): a limit under, at and over, a window
//! that rolls over on the service's clock, two hosts at once that cannot both slip under a
//! limit, and the approvals `getApproval` and `getFinalApproval` rules ask for.

use serde_json::{json, Value};

use crate::chain::{ONE_ETH, OTHER};
use crate::common::*;
use crate::custody::{custodial, Custodial};

const TENTH: u128 = ONE_ETH / 10;

fn velocity(id: &str, limit: u128, window: u64, action: Value) -> Value {
    json!({ "id": id, "type": "velocityLimit", "condition": { "amountString": limit.to_string(), "timeWindow": window }, "action": action })
}

async fn add_rule(c: &Custodial, rule: &Value) {
    let path = format!("/api/v2/hteth/wallet/{}/policy/rule", c.wallet_id());
    expect_json(c.app.post_auth(&path, &c.alice_token, rule).await, 200).await;
}

fn pay(wei: u128, key: &str) -> Value {
    json!({ "recipients": [{ "address": OTHER, "amount": wei.to_string() }], "sequenceId": key })
}

/// A third admin of the wallet's enterprise, signed in.
async fn carol(c: &Custodial) -> (crate::common::TestUser, String) {
    let carol = c.app.create_user("carol@example.com").await;
    let user: custodian::types::UserId = carol.id.parse().unwrap();
    let enterprise: custodian::types::EnterpriseId = c.enterprise.parse().unwrap();
    c.app.state.store.upsert_membership(&enterprise, &user, true, &[]).await.unwrap();
    let token = c.app.login(&carol).await;
    (carol, token)
}

#[tokio::test]
async fn a_velocity_limit_passes_under_and_at_it_denies_over_it_and_rolls_with_the_clock() {
    let c = custodial(2 * ONE_ETH, 1).await;
    add_rule(&c, &velocity("daily", 5 * TENTH, 3_600, json!({ "type": "deny" }))).await;
    let path = format!("/api/v2/hteth/wallet/{}", c.wallet_id());
    let wallet = expect_json(c.app.get_auth(&path, &c.alice_token).await, 200).await;
    assert_eq!(
        wallet["admin"]["policy"]["rules"][0]["condition"],
        json!({ "amountString": (5 * TENTH).to_string(), "timeWindow": 3600, "excludeTags": [] })
    );
    // Under, then exactly at the limit: both pass, and the approval says the rule was evaluated.
    let first = expect_json(c.initiate(&c.alice_token, &pay(3 * TENTH, "a")).await, 200).await;
    assert_eq!(first["singleRunResults"], json!([{ "ruleId": "daily", "triggered": false }]));
    expect_json(c.initiate(&c.alice_token, &pay(2 * TENTH, "b")).await, 200).await;
    // The dry run says the next wei is over, and the real run then refuses it, storing nothing.
    let dry = format!("/api/v2/hteth/wallet/{}/policy/evaluate", c.wallet_id());
    let said = expect_json(c.app.post_auth(&dry, &c.alice_token, &pay(1, "x")).await, 200).await;
    assert_eq!(said["outcome"], "denied", "{said}");
    let body = assert_error(c.initiate(&c.alice_token, &pay(1, "c")).await, 403, "PolicyDenied").await;
    let reason = body["context"]["reasons"][0].as_str().unwrap();
    assert_eq!(
        reason, "velocity limit daily: 0.500000000000000001 hteth in the last 1 h would exceed 0.5 hteth",
        "{body}"
    );
    assert_eq!(c.app.raw_sql("SELECT id FROM withdrawals").await.len(), 2);
    // A canceled withdrawal no longer counts.
    let cancel = json!({ "state": "rejected" });
    expect_json(c.answer(&c.alice_token, first["id"].as_str().unwrap(), &cancel).await, 200).await;
    expect_json(c.initiate(&c.alice_token, &pay(3 * TENTH, "d")).await, 200).await;
    assert_error(c.initiate(&c.alice_token, &pay(1, "e")).await, 403, "PolicyDenied").await;
    // An hour later on the service's clock the window has rolled past them.
    c.app.state.store.clock().advance(std::time::Duration::from_secs(3_601));
    let token = c.app.login(&c.alice).await;
    expect_json(c.app.post_auth("/api/v2/user/unlock", &token, &json!({ "otp": "000000" })).await, 200).await;
    let later = expect_json(c.initiate(&token, &pay(5 * TENTH, "f")).await, 200).await;
    assert_eq!(later["singleRunResults"], json!([{ "ruleId": "daily", "triggered": false }]));
}

#[tokio::test]
async fn a_velocity_approval_rule_asks_for_its_named_approver_and_says_why() {
    let c = custodial(2 * ONE_ETH, 1).await;
    let (_carol, carol_token) = carol(&c).await;
    add_rule(
        &c,
        &velocity("big", 5 * TENTH, 86_400, json!({ "type": "getApproval", "userIds": [c.bob.id] })),
    )
    .await;
    // Under the limit: any other admin's approval is enough.
    let small = expect_json(c.initiate(&c.alice_token, &pay(TENTH, "s")).await, 200).await;
    assert_eq!(small["ruleApprovals"], json!([]));
    let approve = json!({ "state": "approved", "otp": "000000" });
    let done = expect_json(c.answer(&carol_token, small["id"].as_str().unwrap(), &approve).await, 200).await;
    assert_eq!(done["state"], "approved");
    // Over it: held for Bob, with the reason in words.
    let big = expect_json(c.initiate(&c.alice_token, &pay(5 * TENTH, "b")).await, 200).await;
    assert_eq!(big["singleRunResults"], json!([{ "ruleId": "big", "triggered": true }]));
    assert_eq!(
        big["reasons"],
        json!(["velocity limit big: 0.6 hteth in the last 24 h would exceed 0.5 hteth"])
    );
    assert_eq!(big["ruleApprovals"], json!([{ "ruleId": "big", "userIds": [c.bob.id], "final": false }]));
    let id = big["id"].as_str().unwrap();
    let after_carol = expect_json(c.answer(&carol_token, id, &approve).await, 200).await;
    assert_eq!(after_carol["state"], "pending", "Carol is not the rule's approver");
    let after_bob = expect_json(c.answer(&c.bob_token, id, &approve).await, 200).await;
    assert_eq!(after_bob["state"], "approved");
    c.state_is(big["txRequestId"].as_str().unwrap(), "delivered").await;
    // The list shows the same.
    let listed = expect_json(
        c.app.get_auth(&format!("/api/v2/pendingapprovals?walletId={}", c.wallet_id()), &c.alice_token).await,
        200,
    )
    .await;
    let shown = listed["pendingApprovals"].as_array().unwrap().iter().find(|a| a["id"] == json!(id)).cloned();
    assert_eq!(shown.unwrap()["reasons"], big["reasons"]);
}

#[tokio::test]
async fn a_final_approval_comes_after_the_others_and_only_from_its_users() {
    let c = custodial(2 * ONE_ETH, 1).await;
    let (carol, carol_token) = carol(&c).await;
    add_rule(&c, &json!({ "id": "last", "type": "allTx", "condition": {}, "action": { "type": "getFinalApproval", "userIds": [carol.id] } })).await;
    // A rule naming someone who is not an admin of the wallet could never be met: refused.
    let dave = c.app.create_user("dave@example.com").await;
    let path = format!("/api/v2/hteth/wallet/{}/policy/rule", c.wallet_id());
    let bad = json!({ "id": "x", "type": "allTx", "condition": {}, "action": { "type": "getApproval", "userIds": [dave.id] } });
    let body = assert_error(c.app.post_auth(&path, &c.alice_token, &bad).await, 400, "InvalidField").await;
    assert_eq!(body["context"]["field"], "action.userIds");
    let pending = expect_json(c.initiate(&c.alice_token, &pay(TENTH, "f")).await, 200).await;
    assert_eq!(pending["approvalsRequired"], 2);
    let id = pending["id"].as_str().unwrap();
    let approve = json!({ "state": "approved", "otp": "000000" });
    // Carol first would use up the final approval: refused, nothing recorded.
    assert_error(c.answer(&carol_token, id, &approve).await, 403, "ApprovalNotAllowed").await;
    let after_bob = expect_json(c.answer(&c.bob_token, id, &approve).await, 200).await;
    assert_eq!(after_bob["state"], "pending");
    assert_eq!(after_bob["resolvers"].as_array().unwrap().len(), 1);
    let after_carol = expect_json(c.answer(&carol_token, id, &approve).await, 200).await;
    assert_eq!(after_carol["state"], "approved");
}

#[tokio::test]
async fn two_hosts_at_once_cannot_both_slip_under_a_velocity_limit() {
    let c = custodial(3 * ONE_ETH, 1).await;
    add_rule(&c, &velocity("cap", 10 * TENTH, 3_600, json!({ "type": "deny" }))).await;
    // A second server on the same database, serving the API only: its own pool and write gate.
    let url = c.app._db.url.clone();
    let anvil = c.anvil.url.clone();
    let other = spawn_app_with(|cfg| {
        cfg.database_url = url;
        cfg.role = custodian::config::Role::Api;
        cfg.chains.insert(
            "hteth".into(),
            custodian::config::ChainConfig { rpc_url: anvil, chain_id: 31337, ..Default::default() },
        );
    })
    .await;
    // Six withdrawals of 0.3 ETH, three through each host, all at once: exactly three fit.
    let path = format!("/api/v2/hteth/wallet/{}/tx/initiate", c.wallet_id());
    let sends = (0..6).map(|i| {
        let app = if i % 2 == 0 { &c.app } else { &other };
        let (path, token) = (path.clone(), c.alice_token.clone());
        async move { app.post_auth(&path, &token, &pay(3 * TENTH, &format!("k{i}"))).await }
    });
    let answers = futures_util::future::join_all(sends).await;
    let mut codes = Vec::new();
    for res in answers {
        let status = res.status().as_u16();
        let body: Value = res.json().await.unwrap();
        if status != 200 {
            assert_eq!(body["name"], "PolicyDenied", "{body}");
        }
        codes.push(status);
    }
    assert_eq!(codes.iter().filter(|s| **s == 200).count(), 3, "{codes:?}");
    assert_eq!(c.app.raw_sql("SELECT id FROM withdrawals").await.len(), 3);
}

#[tokio::test]
async fn a_limit_lowered_while_withdrawals_wait_fails_only_those_past_it_before_signing() {
    let c = custodial(2 * ONE_ETH, 1).await;
    add_rule(&c, &velocity("cap", 10 * TENTH, 3_600, json!({ "type": "deny" }))).await;
    // Two of 0.3 ETH, approved once the wallet is frozen: they wait unsigned.
    let a = expect_json(c.initiate(&c.alice_token, &pay(3 * TENTH, "a")).await, 200).await;
    let b = expect_json(c.initiate(&c.alice_token, &pay(3 * TENTH, "b")).await, 200).await;
    let freeze = format!("/api/v2/hteth/wallet/{}/freeze", c.wallet_id());
    expect_json(c.app.post_auth(&freeze, &c.alice_token, &json!({})).await, 200).await;
    let approve = json!({ "state": "approved", "otp": "000000" });
    for p in [&a, &b] {
        expect_json(c.answer(&c.bob_token, p["id"].as_str().unwrap(), &approve).await, 200).await;
    }
    let (first, second) = (a["txRequestId"].as_str().unwrap(), b["txRequestId"].as_str().unwrap());
    // The limit drops to 0.5 ETH (a tightening, at once). Before signing, each is judged with
    // what was stored before it: the first (0.3) passes, the second (0.6) is denied unsigned.
    let path = format!("/api/v2/hteth/wallet/{}/policy/rule", c.wallet_id());
    let lower = velocity("cap", 5 * TENTH, 3_600, json!({ "type": "deny" }));
    expect_json(c.app.put_auth(&path, &c.alice_token, &lower).await, 200).await;
    let wallet_id: custodian::types::WalletId = c.wallet_id().parse().unwrap();
    custodian::custody::freeze::unfreeze(&c.app.state.custody, &wallet_id).await.unwrap();
    c.state_is(first, "delivered").await;
    let failed = c.state_is(second, "failed").await;
    assert!(failed.to_string().contains("velocity limit cap"), "{failed}");
    let sql = format!("SELECT tx_request_id FROM withdrawal_attempts WHERE tx_request_id = '{second}'");
    assert!(c.app.raw_sql(&sql).await.is_empty(), "the denied withdrawal was signed");
}

/// A withdrawal stored before the velocity ledger (no running total) is still counted: its
/// wallet's windows are summed row by row.
#[tokio::test]
async fn a_withdrawal_from_before_the_ledger_is_counted_by_a_scan() {
    let c = custodial(2 * ONE_ETH, 1).await;
    add_rule(&c, &velocity("daily", 5 * TENTH, 86_400, json!({ "type": "deny" }))).await;
    expect_json(c.initiate(&c.alice_token, &pay(3 * TENTH, "a")).await, 200).await;
    c.app.raw_sql("UPDATE withdrawals SET vcoin = NULL, vseq = NULL, vtime = NULL, cum_total = NULL").await;
    // 0.3 + 0.3 is over the limit only if the old row counts.
    let body =
        assert_error(c.initiate(&c.alice_token, &pay(3 * TENTH, "b")).await, 403, "PolicyDenied").await;
    assert!(body["context"]["reasons"][0].as_str().unwrap().contains("0.6 hteth"), "{body}");
    expect_json(c.initiate(&c.alice_token, &pay(TENTH, "c")).await, 200).await;
    let dry = format!("/api/v2/hteth/wallet/{}/policy/evaluate", c.wallet_id());
    let said = expect_json(c.app.post_auth(&dry, &c.alice_token, &pay(2 * TENTH, "x")).await, 200).await;
    assert_eq!(said["outcome"], "denied", "0.3 + 0.1 + 0.2 is over: {said}");
}
