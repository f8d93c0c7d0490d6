//! Approvals beyond one: distinct approvers for `approvalsRequired: 2`, approvals that expire,
//! a token's spending limits lifted by an unlock (§4.3), and the last approval waking the signer.

use std::time::Duration;

use serde_json::json;

use crate::chain::{ONE_ETH, OTHER};
use crate::common::*;
use crate::custody::{custodial, custodial_with};

#[tokio::test]
async fn two_required_approvals_need_two_distinct_admins() {
    let c = custodial(ONE_ETH, 2).await;
    let carol = c.app.create_user("carol@example.com").await;
    let enterprise: custodian::types::EnterpriseId = c.enterprise.parse().unwrap();
    let carol_id: custodian::types::UserId = carol.id.parse().unwrap();
    c.app.state.store.upsert_membership(&enterprise, &carol_id, true, &[]).await.unwrap();
    let carol_token = c.app.login(&carol).await;
    let body = json!({ "recipients": [{ "address": OTHER, "amount": "77" }] });
    let pending = expect_json(c.initiate(&c.alice_token, &body).await, 200).await;
    assert_eq!(pending["approvalsRequired"], 2);
    let (id, tx) = (pending["id"].as_str().unwrap(), pending["txRequestId"].as_str().unwrap());
    let approve = json!({ "state": "approved", "otp": "000000" });
    let once = expect_json(c.answer(&c.bob_token, id, &approve).await, 200).await;
    assert_eq!(once["state"], "pending", "one of two: {once}");
    assert_eq!(c.tx_request(tx).await["state"], "pendingApproval");
    // The same admin twice does not count twice.
    assert_error(c.answer(&c.bob_token, id, &approve).await, 403, "ApprovalNotAllowed").await;
    let twice = expect_json(c.answer(&carol_token, id, &approve).await, 200).await;
    assert_eq!(twice["state"], "approved");
    assert_eq!(twice["resolvers"].as_array().unwrap().len(), 2);
    until("the withdrawal is sent", 30, || async {
        (c.tx_request(tx).await["state"] == "delivered").then_some(())
    })
    .await;
}

#[tokio::test]
async fn an_approval_not_given_in_time_expires_and_its_withdrawal_is_canceled() {
    let c = custodial_with(ONE_ETH, 1, |cfg| cfg.withdrawals.approval_ttl = 60).await;
    let receiver = crate::receiver::TestReceiver::start().await;
    let path = format!("/api/v2/hteth/wallet/{}/webhooks", c.wallet_id());
    let hook = json!({ "type": "transactionExpire", "url": receiver.url });
    expect_json(c.app.post_auth(&path, &c.alice_token, &hook).await, 200).await;
    let body = json!({ "recipients": [{ "address": OTHER, "amount": "88" }] });
    let pending = expect_json(c.initiate(&c.alice_token, &body).await, 200).await;
    let (id, tx) = (pending["id"].as_str().unwrap(), pending["txRequestId"].as_str().unwrap());
    c.app.state.store.clock().advance(Duration::from_secs(61));
    until("the approval expires", 30, || async {
        (c.tx_request(tx).await["state"] == "canceled").then_some(())
    })
    .await;
    let approval = expect_json(
        c.app.get_auth(&format!("/api/v2/hteth/pendingapprovals/{id}"), &c.alice_token).await,
        200,
    )
    .await;
    assert_eq!(approval["state"], "rejected");
    let approve = json!({ "state": "approved", "otp": "000000" });
    assert_error(c.answer(&c.bob_token, id, &approve).await, 409, "ApprovalNotPending").await;
    let told = receiver.wait_for(1, 20).await;
    let event: serde_json::Value = serde_json::from_str(&told[0].body).unwrap();
    assert_eq!(
        (event["type"].as_str(), event["txRequestId"].as_str()),
        (Some("transactionExpire"), Some(tx)),
        "{event}"
    );
    let audit = c.app.raw_sql("SELECT type FROM audit_log WHERE type = 'withdrawal.expired'").await;
    assert_eq!(audit.len(), 1);
}

#[tokio::test]
async fn unlocking_a_token_with_spending_limits_lifts_them() {
    let c = custodial(ONE_ETH, 1).await;
    let limited = c
        .app
        .token_with(
            &c.alice_token,
            json!({ "scope": ["wallet_spend_all", "wallet_view_all", "user_manage"], "spendingLimits": [{ "coin": "hteth", "txValueLimit": "500" }] }),
        )
        .await;
    let over = json!({ "recipients": [{ "address": OTHER, "amount": "501" }] });
    assert_error(c.initiate(&limited, &over).await, 400, "SpendingLimitExceeded").await;
    expect_json(c.app.post_auth("/api/v2/user/unlock", &limited, &json!({ "otp": "000000" })).await, 200)
        .await;
    expect_json(c.initiate(&limited, &over).await, 200).await;
}

#[tokio::test]
async fn withdrawals_in_flight_are_capped_per_wallet() {
    let c = custodial_with(ONE_ETH, 1, |cfg| cfg.withdrawals.max_in_flight_per_wallet = 2).await;
    let body = json!({ "recipients": [{ "address": OTHER, "amount": "3" }] });
    for _ in 0..2 {
        expect_json(c.initiate(&c.alice_token, &body).await, 200).await;
    }
    assert_error(c.initiate(&c.alice_token, &body).await, 409, "TooManyWithdrawals").await;
    assert_eq!(c.app.raw_sql("SELECT id FROM withdrawals").await.len(), 2);
}

#[tokio::test]
async fn an_approved_withdrawal_not_signed_by_its_deadline_is_canceled_and_told() {
    let c = custodial_with(ONE_ETH, 1, |cfg| cfg.withdrawals.delivery_deadline = 120).await;
    let receiver = c.hook("transactionExpire").await;
    // Frozen after it was asked for, it is approved and held unsigned.
    let body = json!({ "recipients": [{ "address": OTHER, "amount": "66" }] });
    let pending = expect_json(c.initiate(&c.alice_token, &body).await, 200).await;
    let freeze = format!("/api/v2/hteth/wallet/{}/freeze", c.wallet_id());
    expect_json(c.app.post_auth(&freeze, &c.bob_token, &json!({ "duration": 3600 })).await, 200).await;
    let approve = json!({ "state": "approved", "otp": "000000" });
    expect_json(c.answer(&c.bob_token, pending["id"].as_str().unwrap(), &approve).await, 200).await;
    let tx = pending["txRequestId"].as_str().unwrap();
    let rounds = metric_value(&c.app, "custodian_custody_signer_rounds_total").await;
    until("two rounds hold it", 30, || async {
        (metric_value(&c.app, "custodian_custody_signer_rounds_total").await >= rounds + 2).then_some(())
    })
    .await;
    assert_eq!(c.tx_request(tx).await["state"], "pendingDelivery");
    c.app.state.store.clock().advance(Duration::from_secs(121));
    let canceled = c.state_is(tx, "canceled").await;
    assert_eq!(canceled["error"], "not signed within withdrawals.delivery_deadline", "{canceled}");
    let told = receiver.wait_for(1, 20).await;
    let event: serde_json::Value = serde_json::from_str(&told[0].body).unwrap();
    assert_eq!(
        (
            event["type"].as_str(),
            event["txRequestId"].as_str(),
            event["oldState"].as_str(),
            event["newState"].as_str()
        ),
        (Some("transactionExpire"), Some(tx), Some("pendingDelivery"), Some("canceled")),
        "{event}"
    );
    let audit = c.app.raw_sql("SELECT type FROM audit_log WHERE type = 'withdrawal.expired'").await;
    assert_eq!(audit.len(), 1);
    let count = c.anvil.rpc("eth_getTransactionCount", json!([c.address(), "pending"])).await;
    assert_eq!(count, "0x0", "nothing left the address");
}

#[tokio::test]
async fn the_last_approval_wakes_the_signer_without_waiting_for_its_poll() {
    // The signer's first round runs at start; its next poll is a minute away, past the wait.
    let c = custodial_with(ONE_ETH, 1, |c| c.withdrawals.poll_interval_ms = 60_000).await;
    let id = c.approved(&json!({ "recipients": [{ "address": OTHER, "amount": "1000" }] })).await;
    let sent = c.state_is(&id, "delivered").await;
    let hash = sent["transactions"][0]["txHash"].as_str().unwrap();
    let tx = c.anvil.rpc("eth_getTransactionByHash", json!([hash])).await;
    assert_eq!(tx["from"].as_str().unwrap(), c.address().to_lowercase());
}
