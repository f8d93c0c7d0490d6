//! Wallet policy rules (docs/policy.md): BitGo's `policy/rule` routes, a tightening applied at
//! once and a loosening waiting for other admins, a whitelist deny at initiation and again before signing, and
//! the dry run.

use serde_json::{json, Value};

use crate::chain::{ONE_ETH, OTHER};
use crate::common::*;
use crate::custody::{custodial, Custodial};

const PAYEE: &str = "0x90F79bf6EB2c4f870365E785982E1f101E93b906";

fn rule_path(c: &Custodial) -> String {
    format!("/api/v2/hteth/wallet/{}/policy/rule", c.wallet_id())
}

async fn delete(c: &Custodial, token: &str, body: &Value) -> reqwest::Response {
    let req = c.app.client.delete(c.app.url(&rule_path(c))).bearer_auth(token).json(body);
    req.send().await.unwrap()
}

async fn rules(c: &Custodial) -> Value {
    let path = format!("/api/v2/hteth/wallet/{}", c.wallet_id());
    expect_json(c.app.get_auth(&path, &c.alice_token).await, 200).await["admin"]["policy"]["rules"].clone()
}

fn whitelist(addresses: &[&str]) -> Value {
    json!({ "id": "payees", "type": "coinAddressWhitelist", "condition": { "addresses": addresses }, "action": { "type": "deny" } })
}

#[tokio::test]
async fn rules_are_added_tightened_at_once_and_a_loosening_changes_nothing_by_itself() {
    let c = custodial(0, 1).await;
    let path = rule_path(&c);
    // Bad rules name their field and store nothing.
    let bad = [
        (json!({ "type": "allTx", "condition": {}, "action": { "type": "deny" } }), "MissingField"),
        (
            json!({ "id": "r1", "type": "webhook", "condition": { "url": 7 }, "action": { "type": "deny" } }),
            "InvalidField",
        ),
        (
            json!({ "id": "r1", "type": "allTx", "condition": {}, "action": { "type": "allow" } }),
            "InvalidField",
        ),
        (whitelist(&["0x1234"]), "InvalidField"),
    ];
    for (body, name) in bad {
        assert_error(c.app.post_auth(&path, &c.alice_token, &body).await, 400, name).await;
    }
    assert_eq!(rules(&c).await, Value::Null);
    // A user of the wallet's enterprise who is not an admin may not.
    let carol = c.app.create_user("carol@example.com").await;
    let carol_token = c.app.login(&carol).await;
    let res = c.app.post_auth(&path, &carol_token, &whitelist(&[OTHER, PAYEE])).await;
    assert!(matches!(res.status().as_u16(), 403 | 404), "{}", res.status());
    // Alice (an admin) adds it: the wallet comes back with it.
    let wallet =
        expect_json(c.app.post_auth(&path, &c.alice_token, &whitelist(&[OTHER, PAYEE])).await, 200).await;
    assert_eq!(wallet["id"], json!(c.wallet_id()));
    assert_eq!(wallet["admin"]["policy"]["rules"][0]["condition"]["addresses"].as_array().unwrap().len(), 2);
    assert_error(c.app.post_auth(&path, &c.alice_token, &whitelist(&[OTHER])).await, 409, "AlreadyExists")
        .await;
    // Taking an address off tightens: at once.
    let take = json!({ "id": "payees", "type": "coinAddressWhitelist", "condition": { "remove": PAYEE }, "action": { "type": "deny" } });
    expect_json(c.app.put_auth(&path, &c.alice_token, &take).await, 200).await;
    assert_eq!(rules(&c).await[0]["condition"]["addresses"], json!([OTHER]));
    // Putting it back, changing the action's type, or removing the rule loosens: not applied,
    // each a pending approval of type policyRuleRequest for other admins.
    let add = json!({ "id": "payees", "type": "coinAddressWhitelist", "condition": { "add": PAYEE }, "action": { "type": "deny" } });
    let pending = expect_json(c.app.put_auth(&path, &c.alice_token, &add).await, 200).await;
    assert_eq!(pending["state"], "pending", "{pending}");
    assert_eq!(pending["info"]["type"], "policyRuleRequest");
    assert_eq!(pending["info"]["policyRuleRequest"]["action"], "update");
    assert!(pending["info"]["policyRuleRequest"]["reason"].as_str().unwrap().contains("adds"), "{pending}");
    let all = json!({ "id": "payees", "type": "allTx", "condition": {}, "action": { "type": "deny" } });
    let pending = expect_json(c.app.put_auth(&path, &c.alice_token, &all).await, 200).await;
    assert_eq!(pending["info"]["policyRuleRequest"]["update"]["type"], "allTx");
    let pending = expect_json(delete(&c, &c.alice_token, &json!({ "id": "payees" })).await, 200).await;
    assert_eq!(pending["info"]["policyRuleRequest"]["action"], "remove");
    assert_error(delete(&c, &c.alice_token, &json!({ "id": "nope" })).await, 404, "PolicyRuleNotFound").await;
    assert_eq!(rules(&c).await[0]["condition"]["addresses"], json!([OTHER]));
    // Each change that landed is audited with the rule before and after; each request too.
    let audit = c
        .app
        .raw_sql("SELECT type || ' ' || data FROM audit_log WHERE type LIKE 'policy.%' ORDER BY seq")
        .await;
    assert_eq!(audit.len(), 5, "{audit:?}");
    assert!(audit[0].starts_with("policy.rule_created") && audit[0].contains("\"before\":null"), "{audit:?}");
    assert!(audit[1].starts_with("policy.rule_updated") && audit[1].contains(PAYEE), "{audit:?}");
    assert!(audit[2..].iter().all(|e| e.starts_with("policy.change_requested")), "{audit:?}");
}

#[tokio::test]
async fn a_loosening_waits_for_another_admin_and_applies_with_the_last_approval() {
    let c = custodial(0, 1).await;
    let path = rule_path(&c);
    let hook = c.hook("pendingapproval").await;
    expect_json(c.app.post_auth(&path, &c.alice_token, &whitelist(&[OTHER])).await, 200).await;
    let add = json!({ "id": "payees", "type": "coinAddressWhitelist", "condition": { "add": PAYEE }, "action": { "type": "deny" } });
    let pending = expect_json(c.app.put_auth(&path, &c.alice_token, &add).await, 200).await;
    let id = pending["id"].as_str().unwrap().to_string();
    assert!(pending.get("txRequestId").is_none(), "{pending}");
    // The pending approvals list shows it; its asker may not approve it.
    let listed = format!("/api/v2/pendingapprovals?walletId={}", c.wallet_id());
    let list = expect_json(c.app.get_auth(&listed, &c.bob_token).await, 200).await;
    assert_eq!(list["pendingApprovals"][0]["info"]["type"], "policyRuleRequest");
    let approve = json!({ "state": "approved", "otp": "000000" });
    assert_error(c.answer(&c.alice_token, &id, &approve).await, 403, "ApprovalNotAllowed").await;
    assert_eq!(rules(&c).await[0]["condition"]["addresses"], json!([OTHER]));
    // Bob's approval is the last one needed: the rule changes with it.
    let done = expect_json(c.answer(&c.bob_token, &id, &approve).await, 200).await;
    assert_eq!(done["state"], "approved");
    assert_eq!(rules(&c).await[0]["condition"]["addresses"], json!([OTHER, PAYEE]));
    let audit = c.app.raw_sql("SELECT data FROM audit_log WHERE type = 'policy.rule_updated'").await;
    assert!(audit.len() == 1 && audit[0].contains(&id), "{audit:?}");
    // A removal Bob rejects changes nothing.
    let remove = expect_json(delete(&c, &c.alice_token, &json!({ "id": "payees" })).await, 200).await;
    let reject = json!({ "state": "rejected" });
    expect_json(c.answer(&c.bob_token, remove["id"].as_str().unwrap(), &reject).await, 200).await;
    assert_eq!(rules(&c).await.as_array().unwrap().len(), 1);
    // A removal asked for, then the rule tightened at once: the approvers approved a change from
    // the rule as it was, so the last approval is refused and nothing changes.
    let remove = expect_json(delete(&c, &c.alice_token, &json!({ "id": "payees" })).await, 200).await;
    let take = json!({ "id": "payees", "type": "coinAddressWhitelist", "condition": { "remove": OTHER }, "action": { "type": "deny" } });
    expect_json(c.app.put_auth(&path, &c.alice_token, &take).await, 200).await;
    let id = remove["id"].as_str().unwrap();
    assert_error(c.answer(&c.bob_token, id, &approve).await, 409, "PolicyRuleNotFound").await;
    assert_eq!(rules(&c).await[0]["condition"]["addresses"], json!([PAYEE]));
    // The pendingapproval webhook told each, typed policyRuleRequest.
    let told: Vec<Value> =
        hook.wait_for(5, 30).await.iter().map(|n| serde_json::from_str(&n.body).unwrap()).collect();
    let states: Vec<&str> = told.iter().map(|n| n["state"].as_str().unwrap()).collect();
    assert_eq!(states, ["pending", "approved", "pending", "rejected", "pending"], "{told:?}");
    assert!(told.iter().all(|n| n["pendingApprovalType"] == "policyRuleRequest"), "{told:?}");
    assert!(told.iter().all(|n| n.get("txRequestId").is_none()), "{told:?}");
}

#[tokio::test]
async fn a_whitelist_denies_other_payees_at_initiation_and_again_before_signing() {
    let c = custodial(2 * ONE_ETH, 1).await;
    let path = rule_path(&c);
    expect_json(c.app.post_auth(&path, &c.alice_token, &whitelist(&[OTHER, PAYEE])).await, 200).await;
    // The dry run says what the real run then does, and stores nothing.
    let dry = format!("/api/v2/hteth/wallet/{}/policy/evaluate", c.wallet_id());
    let off = json!({ "recipients": [{ "address": "0x15d34AAf54267DB7D7c367839AAf71A00a2C6A65", "amount": "1000" }] });
    let said = expect_json(c.app.post_auth(&dry, &c.alice_token, &off).await, 200).await;
    assert_eq!(said["outcome"], "denied", "{said}");
    assert_eq!(said["singleRunResults"], json!([{ "ruleId": "payees", "triggered": true }]));
    assert!(said["reasons"][0].as_str().unwrap().contains("not on the whitelist"), "{said}");
    let on = json!({ "recipients": [{ "address": PAYEE, "amount": "1000" }] });
    let said = expect_json(c.app.post_auth(&dry, &c.alice_token, &on).await, 200).await;
    assert_eq!(said["outcome"], "pendingApproval", "{said}");
    assert_eq!(said["singleRunResults"], json!([{ "ruleId": "payees", "triggered": false }]));
    assert_eq!(said["approvalsRequired"], 1);
    let bad = json!({ "recipients": [{ "address": "0x12", "amount": "1000" }] });
    assert_error(c.app.post_auth(&dry, &c.alice_token, &bad).await, 400, "InvalidField").await;
    assert!(c.app.raw_sql("SELECT id FROM withdrawals").await.is_empty());
    // A payee off the list: refused with the rule named, nothing stored.
    let body = assert_error(c.initiate(&c.alice_token, &off).await, 403, "PolicyDenied").await;
    assert!(body["error"].as_str().unwrap().contains("payees"), "{body}");
    assert_eq!(body["context"]["singleRunResults"], json!([{ "ruleId": "payees", "triggered": true }]));
    assert!(c.app.raw_sql("SELECT id FROM withdrawals").await.is_empty());
    // A listed payee passes. The wallet is frozen before the approval, so it waits unsigned.
    let body = json!({ "recipients": [{ "address": PAYEE, "amount": "1000" }] });
    let pending = expect_json(c.initiate(&c.alice_token, &body).await, 200).await;
    let held = pending["txRequestId"].as_str().unwrap().to_string();
    let freeze = format!("/api/v2/hteth/wallet/{}/freeze", c.wallet_id());
    expect_json(c.app.post_auth(&freeze, &c.alice_token, &json!({})).await, 200).await;
    let approve = json!({ "state": "approved", "otp": "000000" });
    expect_json(c.answer(&c.bob_token, pending["id"].as_str().unwrap(), &approve).await, 200).await;
    c.state_is(&held, "pendingDelivery").await;
    // Meanwhile PAYEE leaves the list (a tightening, at once): when the freeze ends, the
    // signer checks the rules again and fails the held withdrawal without signing it.
    let take = json!({ "id": "payees", "type": "coinAddressWhitelist", "condition": { "remove": PAYEE }, "action": { "type": "deny" } });
    expect_json(c.app.put_auth(&path, &c.alice_token, &take).await, 200).await;
    let wallet_id: custodian::types::WalletId = c.wallet_id().parse().unwrap();
    custodian::custody::freeze::unfreeze(&c.app.state.custody, &wallet_id).await.unwrap();
    let failed = c.state_is(&held, "failed").await;
    assert!(failed.to_string().contains("denied by policy"), "{failed}");
    let sql = format!("SELECT tx_request_id FROM withdrawal_attempts WHERE tx_request_id = '{held}'");
    assert!(c.app.raw_sql(&sql).await.is_empty(), "the denied withdrawal was signed");
    assert!(c.app.raw_sql("SELECT tx_request_id FROM withdrawal_attempts").await.is_empty());
}

#[tokio::test]
async fn a_wallet_holds_at_most_50_rules_a_whitelist_at_most_1000_addresses_and_20_loosenings_waiting() {
    let c = custodial(0, 1).await;
    let path = rule_path(&c);
    let addresses: Vec<String> = (0..1_001u32).map(|i| format!("0x{i:040x}")).collect();
    let too_long = json!({ "id": "big", "type": "coinAddressWhitelist", "condition": { "addresses": addresses }, "action": { "type": "deny" } });
    let body =
        assert_error(c.app.post_auth(&path, &c.alice_token, &too_long).await, 400, "InvalidField").await;
    assert_eq!(body["context"]["field"], "condition.addresses");
    for i in 0..50 {
        let rule =
            json!({ "id": format!("r{i}"), "type": "allTx", "condition": {}, "action": { "type": "deny" } });
        expect_json(c.app.post_auth(&path, &c.alice_token, &rule).await, 200).await;
    }
    let one_more = json!({ "id": "r50", "type": "allTx", "condition": {}, "action": { "type": "deny" } });
    let body =
        assert_error(c.app.post_auth(&path, &c.alice_token, &one_more).await, 409, "AlreadyExists").await;
    assert!(body["error"].as_str().unwrap().contains("at most 50"), "{body}");
    assert_eq!(rules(&c).await.as_array().unwrap().len(), 50);
    // At most 20 loosenings wait at once; the 21st is refused and stores nothing.
    for i in 0..20 {
        expect_json(delete(&c, &c.alice_token, &json!({ "id": format!("r{i}") })).await, 200).await;
    }
    let body =
        assert_error(delete(&c, &c.alice_token, &json!({ "id": "r20" })).await, 409, "TooManyRuleChanges")
            .await;
    assert!(body["error"].as_str().unwrap().contains("20"), "{body}");
    assert_eq!(c.app.raw_sql("SELECT id FROM pending_approvals").await.len(), 20);
}

#[tokio::test]
async fn a_rule_past_its_lock_date_is_loosened_only_at_a_service_admin_s_request() {
    let c = custodial(0, 1).await;
    let path = rule_path(&c);
    let mut locked = whitelist(&[OTHER, PAYEE]);
    locked["lockDate"] = json!("2026-01-01T00:00:00Z");
    let wallet = expect_json(c.app.post_auth(&path, &c.alice_token, &locked).await, 200).await;
    assert_eq!(wallet["admin"]["policy"]["rules"][0]["lockDate"], "2026-01-01T00:00:00.000Z");
    // Alice, a wallet admin, may no longer ask to loosen it: nothing is stored.
    let body =
        assert_error(delete(&c, &c.alice_token, &json!({ "id": "payees" })).await, 403, "PolicyRuleLocked")
            .await;
    assert!(body["error"].as_str().unwrap().contains("service admin"), "{body}");
    let clear = json!({ "id": "payees", "type": "coinAddressWhitelist", "condition": { "addresses": [OTHER, PAYEE] }, "action": { "type": "deny" }, "lockDate": null });
    assert_error(c.app.put_auth(&path, &c.alice_token, &clear).await, 403, "PolicyRuleLocked").await;
    assert!(c.app.raw_sql("SELECT id FROM pending_approvals").await.is_empty());
    // A locked rule does not change at once even to tighten: that too is a service admin's
    // request, approved by others.
    let take = json!({ "id": "payees", "type": "coinAddressWhitelist", "condition": { "remove": PAYEE }, "action": { "type": "deny" } });
    assert_error(c.app.put_auth(&path, &c.alice_token, &take).await, 403, "PolicyRuleLocked").await;
    assert_eq!(rules(&c).await[0]["condition"]["addresses"], json!([OTHER, PAYEE]));
    assert_eq!(rules(&c).await[0]["lockDate"], "2026-01-01T00:00:00.000Z");
    // A service admin (here also in the enterprise) may ask; other admins still approve it.
    let ops = c.app.create_user_with("ops@example.com", true).await;
    let user: custodian::types::UserId = ops.id.parse().unwrap();
    let enterprise: custodian::types::EnterpriseId = c.enterprise.parse().unwrap();
    c.app.state.store.upsert_membership(&enterprise, &user, true, &[]).await.unwrap();
    let ops_token = c.app.login(&ops).await;
    let pending = expect_json(delete(&c, &ops_token, &json!({ "id": "payees" })).await, 200).await;
    assert_eq!(pending["state"], "pending");
    let approve = json!({ "state": "approved", "otp": "000000" });
    expect_json(c.answer(&c.bob_token, pending["id"].as_str().unwrap(), &approve).await, 200).await;
    assert_eq!(rules(&c).await, json!([]));
}

#[tokio::test]
async fn a_loosening_not_approved_in_time_expires_and_changes_nothing() {
    let c = crate::custody::custodial_with(0, 1, |cfg| cfg.withdrawals.approval_ttl = 60).await;
    let path = rule_path(&c);
    expect_json(c.app.post_auth(&path, &c.alice_token, &whitelist(&[OTHER])).await, 200).await;
    let pending = expect_json(delete(&c, &c.alice_token, &json!({ "id": "payees" })).await, 200).await;
    let id = pending["id"].as_str().unwrap().to_string();
    c.app.state.store.clock().advance(std::time::Duration::from_secs(61));
    c.approval_becomes(&id, "rejected").await;
    let approve = json!({ "state": "approved", "otp": "000000" });
    assert_error(c.answer(&c.bob_token, &id, &approve).await, 409, "ApprovalNotPending").await;
    assert_eq!(rules(&c).await.as_array().unwrap().len(), 1);
    let audit = c.app.raw_sql("SELECT data FROM audit_log WHERE type = 'policy.change_expired'").await;
    assert!(audit.len() == 1 && audit[0].contains("payees"), "{audit:?}");
}
