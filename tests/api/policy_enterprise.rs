//! Enterprise policy rules (docs/policy.md#enterprise-rules): one rule for every wallet of an
//! enterprise and coin, named `enterprise.<id>` among a wallet's; a tightening at once, a
//! loosening refused.

use serde_json::json;

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
    // Loosening is refused and changes nothing; a wallet rule may not take the prefix.
    let add = json!({ "id": "payees", "type": "coinAddressWhitelist", "condition": { "add": OTHER }, "action": { "type": "deny" } });
    assert_error(c.app.put_auth(&path, &c.alice_token, &add).await, 403, "PolicyChangeNeedsApproval").await;
    let remove =
        c.app.client.delete(c.app.url(&path)).bearer_auth(&c.alice_token).json(&json!({ "id": "payees" }));
    assert_error(remove.send().await.unwrap(), 403, "PolicyChangeNeedsApproval").await;
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
