//! Enterprise policy rules (docs/policy.md#enterprise-rules): one rule for every wallet of an
//! enterprise and coin, named `enterprise.<id>` among a wallet's; a tightening at once, a
//! loosening only with other enterprise admins' approval.

use serde_json::{json, Value};

use crate::chain::{ONE_ETH, OTHER};
use crate::common::*;
use crate::custody::custodial;

const PAYEE: &str = "0x90F79bf6EB2c4f870365E785982E1f101E93b906";

#[tokio::test]
async fn an_enterprise_rule_holds_for_its_wallets_and_only_its_admins_change_it() {
    let c = custodial(2 * ONE_ETH, 1).await;
    let path = format!("/api/v2/hteth/enterprise/{}/policy/rule", c.enterprise);
    let rule = json!({ "id": "payees", "type": "coinAddressWhitelist", "condition": { "addresses": [PAYEE] }, "action": { "type": "deny" } });
    // Someone outside the enterprise neither sees nor changes its rules.
    let eve = c.app.create_user("eve@example.com").await;
    let eve_token = c.app.login(&eve).await;
    assert_error(c.app.post_auth(&path, &eve_token, &rule).await, 404, "EnterpriseNotFound").await;
    assert_error(c.app.get_auth(&path, &eve_token).await, 404, "EnterpriseNotFound").await;
    let made = expect_json(c.app.post_auth(&path, &c.alice_token, &rule).await, 200).await;
    assert_eq!(made["rules"][0]["id"], "payees");
    assert_eq!(expect_json(c.app.get_auth(&path, &c.bob_token).await, 200).await, made);
    // The wallet's evaluation counts it, named enterprise.payees.
    let off = json!({ "recipients": [{ "address": OTHER, "amount": "1000" }] });
    let body = assert_error(c.initiate(&c.alice_token, &off).await, 403, "PolicyDenied").await;
    assert_eq!(
        body["context"]["singleRunResults"],
        json!([{ "ruleId": "enterprise.payees", "triggered": true }])
    );
    let on = json!({ "recipients": [{ "address": PAYEE, "amount": "1000" }] });
    let pending = expect_json(c.initiate(&c.alice_token, &on).await, 200).await;
    assert_eq!(pending["singleRunResults"], json!([{ "ruleId": "enterprise.payees", "triggered": false }]));
    // Loosening waits for approval and changes nothing yet; a wallet rule may not take the prefix.
    let pending = expect_json(c.app.put_auth(&path, &c.alice_token, &add(OTHER)).await, 200).await;
    assert_eq!((pending["state"].as_str(), pending["scope"].as_str()), (Some("pending"), Some("enterprise")));
    let pending = expect_json(remove(&c, &c.alice_token).await, 200).await;
    assert_eq!(pending["info"]["policyRuleRequest"]["action"], "remove", "{pending}");
    // Eve, in no enterprise, may not ask either.
    assert_error(remove(&c, &eve_token).await, 404, "EnterpriseNotFound").await;
    assert_eq!(expect_json(c.app.get_auth(&path, &c.alice_token).await, 200).await, made);
    let wallet_rule = format!("/api/v2/hteth/wallet/{}/policy/rule", c.wallet_id());
    let named =
        json!({ "id": "enterprise.x", "type": "allTx", "condition": {}, "action": { "type": "deny" } });
    let body =
        assert_error(c.app.post_auth(&wallet_rule, &c.alice_token, &named).await, 400, "InvalidField").await;
    assert_eq!(body["context"]["field"], "id");
    // The change is audited under the enterprise.
    let audit = c.app.raw_sql("SELECT enterprise_id FROM audit_log WHERE type = 'policy.rule_created'").await;
    assert_eq!(audit, vec![c.enterprise.clone()]);
}

fn add(address: &str) -> Value {
    json!({ "id": "payees", "type": "coinAddressWhitelist", "condition": { "add": address }, "action": { "type": "deny" } })
}

async fn remove(c: &crate::custody::Custodial, token: &str) -> reqwest::Response {
    let path = format!("/api/v2/hteth/enterprise/{}/policy/rule", c.enterprise);
    c.app
        .client
        .delete(c.app.url(&path))
        .bearer_auth(token)
        .json(&json!({ "id": "payees" }))
        .send()
        .await
        .unwrap()
}

/// A member of `c`'s enterprise, an admin when `admin`, and their session token.
async fn member(c: &crate::custody::Custodial, email: &str, admin: bool) -> String {
    let user = c.app.create_user(email).await;
    let id: custodian::types::UserId = user.id.parse().unwrap();
    let enterprise: custodian::types::EnterpriseId = c.enterprise.parse().unwrap();
    c.app.state.store.upsert_membership(&enterprise, &id, admin, &[]).await.unwrap();
    c.app.login(&user).await
}

#[tokio::test]
async fn an_enterprise_loosening_waits_for_another_enterprise_admin_and_applies_with_the_last_approval() {
    let c = custodial(2 * ONE_ETH, 1).await;
    let path = format!("/api/v2/hteth/enterprise/{}/policy/rule", c.enterprise);
    let receiver = crate::receiver::TestReceiver::start().await;
    let hooks = format!("/api/v2/enterprise/{}/webhooks", c.enterprise);
    let hook = json!({ "type": "pendingapproval", "url": receiver.url });
    expect_json(c.app.post_auth(&hooks, &c.alice_token, &hook).await, 200).await;
    let carol_token = member(&c, "carol@example.com", false).await;
    let eve_token = c.app.login(&c.app.create_user("eve@example.com").await).await;
    let rule = json!({ "id": "payees", "type": "coinAddressWhitelist", "condition": { "addresses": [PAYEE] }, "action": { "type": "deny" } });
    expect_json(c.app.post_auth(&path, &c.alice_token, &rule).await, 200).await;
    let pending = expect_json(c.app.put_auth(&path, &c.alice_token, &add(OTHER)).await, 200).await;
    let id = pending["id"].as_str().unwrap().to_string();
    assert_eq!(pending["enterprise"], json!(c.enterprise), "{pending}");
    assert!(pending.get("wallet").is_none() && pending.get("txRequestId").is_none(), "{pending}");
    // The enterprise's members see it, in the list and alone; others and a wallet's list do not.
    let listed = |token: &str| {
        let token = token.to_string();
        let c = &c;
        async move {
            let list = expect_json(c.app.get_auth("/api/v2/pendingapprovals", &token).await, 200).await;
            list["pendingApprovals"]
                .as_array()
                .unwrap()
                .iter()
                .map(|a| a["id"].as_str().unwrap().to_string())
                .collect::<Vec<_>>()
        }
    };
    assert_eq!(listed(&c.bob_token).await, vec![id.clone()]);
    assert_eq!(listed(&carol_token).await, vec![id.clone()]);
    assert!(listed(&eve_token).await.is_empty());
    let of_wallet = format!("/api/v2/pendingapprovals?walletId={}", c.wallet_id());
    let list = expect_json(c.app.get_auth(&of_wallet, &c.bob_token).await, 200).await;
    assert_eq!(list["pendingApprovals"], json!([]));
    let one = format!("/api/v2/hteth/pendingapprovals/{id}");
    assert_eq!(expect_json(c.app.get_auth(&one, &carol_token).await, 200).await["id"], json!(id));
    assert_error(c.app.get_auth(&one, &eve_token).await, 404, "ApprovalNotFound").await;
    // Its asker and a member who is not an admin may not approve it; the rule holds meanwhile.
    let approve = json!({ "state": "approved", "otp": "000000" });
    assert_error(c.answer(&c.alice_token, &id, &approve).await, 403, "ApprovalNotAllowed").await;
    assert_error(c.answer(&carol_token, &id, &approve).await, 403, "ApprovalNotAllowed").await;
    assert_error(c.answer(&eve_token, &id, &approve).await, 404, "ApprovalNotFound").await;
    let off = json!({ "recipients": [{ "address": OTHER, "amount": "1000" }] });
    assert_error(c.initiate(&c.alice_token, &off).await, 403, "PolicyDenied").await;
    // Bob, another admin of the enterprise, gives the last approval: the rule changes with it.
    let done = expect_json(c.answer(&c.bob_token, &id, &approve).await, 200).await;
    assert_eq!(done["state"], "approved");
    let rules = expect_json(c.app.get_auth(&path, &c.alice_token).await, 200).await;
    assert_eq!(rules["rules"][0]["condition"]["addresses"], json!([PAYEE, OTHER]));
    expect_json(c.initiate(&c.alice_token, &off).await, 200).await;
    let audit = c
        .app
        .raw_sql("SELECT enterprise_id || ' ' || data FROM audit_log WHERE type = 'policy.rule_updated'")
        .await;
    assert!(audit.len() == 1 && audit[0].starts_with(&c.enterprise) && audit[0].contains(&id), "{audit:?}");
    // A removal Bob rejects changes nothing.
    let removal = expect_json(remove(&c, &c.alice_token).await, 200).await;
    let reject = json!({ "state": "rejected" });
    expect_json(c.answer(&c.bob_token, removal["id"].as_str().unwrap(), &reject).await, 200).await;
    let after = expect_json(c.app.get_auth(&path, &c.alice_token).await, 200).await;
    assert_eq!(after, rules);
    // The enterprise's pendingapproval webhook told each step, with the enterprise and no wallet.
    let told: Vec<Value> =
        receiver.wait_for(4, 30).await.iter().map(|n| serde_json::from_str(&n.body).unwrap()).collect();
    let states: Vec<&str> = told.iter().map(|n| n["state"].as_str().unwrap()).collect();
    assert_eq!(states, ["pending", "approved", "pending", "rejected"], "{told:?}");
    assert!(
        told.iter().all(|n| n["pendingApprovalType"] == "policyRuleRequest"
            && n["enterpriseId"] == json!(c.enterprise)
            && n.get("walletId").is_none()),
        "{told:?}"
    );
}

#[tokio::test]
async fn an_enterprise_loosening_needs_the_configured_approvals_and_expires_unanswered() {
    let c = crate::custody::custodial_with(0, 1, |cfg| {
        cfg.withdrawals.enterprise_policy_approvals = 2;
        cfg.withdrawals.approval_ttl = 60;
    })
    .await;
    let path = format!("/api/v2/hteth/enterprise/{}/policy/rule", c.enterprise);
    let dave_token = member(&c, "dave@example.com", true).await;
    let rule = json!({ "id": "payees", "type": "coinAddressWhitelist", "condition": { "addresses": [PAYEE] }, "action": { "type": "deny" } });
    expect_json(c.app.post_auth(&path, &c.alice_token, &rule).await, 200).await;
    let pending = expect_json(remove(&c, &c.alice_token).await, 200).await;
    assert_eq!(pending["approvalsRequired"], 2, "{pending}");
    let id = pending["id"].as_str().unwrap().to_string();
    // One approval of two leaves it pending and the rule in place; the second removes it.
    let approve = json!({ "state": "approved", "otp": "000000" });
    let half = expect_json(c.answer(&c.bob_token, &id, &approve).await, 200).await;
    assert_eq!(half["state"], "pending");
    assert_eq!(
        expect_json(c.app.get_auth(&path, &c.alice_token).await, 200).await["rules"][0]["id"],
        "payees"
    );
    expect_json(c.answer(&dave_token, &id, &approve).await, 200).await;
    assert_eq!(expect_json(c.app.get_auth(&path, &c.alice_token).await, 200).await["rules"], json!([]));
    // A loosening nobody answers in time expires and changes nothing.
    expect_json(c.app.post_auth(&path, &c.alice_token, &rule).await, 200).await;
    let pending = expect_json(remove(&c, &c.alice_token).await, 200).await;
    let id = pending["id"].as_str().unwrap().to_string();
    c.app.state.store.clock().advance(std::time::Duration::from_secs(61));
    c.approval_becomes(&id, "rejected").await;
    assert_error(c.answer(&c.bob_token, &id, &approve).await, 409, "ApprovalNotPending").await;
    assert_eq!(
        expect_json(c.app.get_auth(&path, &c.alice_token).await, 200).await["rules"][0]["id"],
        "payees"
    );
    let audit =
        c.app.raw_sql("SELECT enterprise_id FROM audit_log WHERE type = 'policy.change_expired'").await;
    assert_eq!(audit, vec![c.enterprise.clone()]);
}
