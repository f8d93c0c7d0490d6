//! `webhook` policy rules (docs/policy.md#webhook-rules): the proposed withdrawal POSTed to the
//! operator's URL, signed; a 200 passes; any other answer, a timeout or no free slot fires the
//! rule (fail closed); the SSRF guard applies.

use serde_json::{json, Value};

use crate::chain::{ONE_ETH, OTHER};
use crate::common::*;
use crate::custody::{custodial_with, Custodial};
use crate::receiver::{Answer, TestReceiver};

async fn with_hook(timeout_ms: u64, concurrency: u32) -> (Custodial, TestReceiver) {
    let c = custodial_with(2 * ONE_ETH, 1, |cfg| {
        cfg.withdrawals.policy_webhook_timeout_ms = timeout_ms;
        cfg.withdrawals.policy_webhook_concurrency = concurrency;
    })
    .await;
    let receiver = TestReceiver::start().await;
    let rule = json!({ "id": "ops-check", "type": "webhook", "condition": { "url": receiver.url }, "action": { "type": "deny" } });
    let path = format!("/api/v2/hteth/wallet/{}/policy/rule", c.wallet_id());
    expect_json(c.app.post_auth(&path, &c.alice_token, &rule).await, 200).await;
    (c, receiver)
}

fn pay(key: &str) -> Value {
    json!({ "recipients": [{ "address": OTHER, "amount": "1000" }], "sequenceId": key })
}

fn answer(status: u16, delay_ms: u64) -> Answer {
    Answer { status, retry_after: None, delay_ms }
}

#[tokio::test]
async fn a_webhook_rule_passes_on_200_and_fails_closed_on_anything_else() {
    let (c, receiver) = with_hook(2_000, 4).await;
    let secret = expect_json(c.app.rotate_secret(&c.alice_token, &c.enterprise).await, 200).await["secret"]
        .as_str()
        .unwrap()
        .to_string();
    // A 200: the withdrawal goes on, and the URL was told what it is, signed.
    let passed = expect_json(c.initiate(&c.alice_token, &pay("a")).await, 200).await;
    assert_eq!(passed["singleRunResults"], json!([{ "ruleId": "ops-check", "triggered": false }]));
    let got = receiver.received();
    let body: Value = serde_json::from_str(&got[0].body).unwrap();
    assert_eq!(body["type"], "policyCheck");
    assert_eq!(body["stage"], "initiation");
    assert_eq!(body["ruleId"], "ops-check");
    assert_eq!(body["txRequestId"], passed["txRequestId"]);
    assert_eq!(body["recipients"], json!([{ "address": OTHER, "amount": "1000" }]));
    assert_eq!(body["approvalsRequired"], 1);
    let signature = got[0].headers["x-signature-sha256"].to_str().unwrap();
    assert!(custodian::notifications::signing::verify_bitgo(&secret, got[0].body.as_bytes(), signature));
    // A refusal, a server error and an answer too late each deny it, naming why; nothing stored.
    for (status, delay, why) in
        [(403, 0, "answered 403"), (500, 0, "answered 500"), (200, 4_000, "within 2000 ms")]
    {
        receiver.plan(&[answer(status, delay)]);
        let body = assert_error(c.initiate(&c.alice_token, &pay(why)).await, 403, "PolicyDenied").await;
        assert!(body["error"].as_str().unwrap().contains(why), "{body}");
    }
    assert_eq!(c.app.raw_sql("SELECT id FROM withdrawals").await.len(), 1);
    // The dry run asks too, and says so.
    let dry = format!("/api/v2/hteth/wallet/{}/policy/evaluate", c.wallet_id());
    receiver.plan(&[answer(418, 0)]);
    let said = expect_json(c.app.post_auth(&dry, &c.alice_token, &pay("d")).await, 200).await;
    assert_eq!(said["outcome"], "denied", "{said}");
    let last: Value = serde_json::from_str(&receiver.received().last().unwrap().body).unwrap();
    assert_eq!(last["stage"], "dryRun");
    // A URL the SSRF guard refuses is refused when the rule is written.
    let path = format!("/api/v2/hteth/wallet/{}/policy/rule", c.wallet_id());
    let metadata = json!({ "id": "meta", "type": "webhook", "condition": { "url": "http://169.254.169.254/latest" }, "action": { "type": "deny" } });
    let body =
        assert_error(c.app.post_auth(&path, &c.alice_token, &metadata).await, 400, "InvalidField").await;
    assert_eq!(body["context"]["field"], "condition.url");
}

#[tokio::test]
async fn a_check_that_finds_no_free_slot_in_time_fails_closed() {
    // One slot; each answer takes 2,100 ms of a 4,000 ms budget: the second check waits for the
    // first's slot, and its own answer cannot come in time (4,200 ms), however fast the machine.
    let (c, receiver) = with_hook(4_000, 1).await;
    receiver.delay_all(2_100);
    let (a, b) = futures_util::future::join(
        c.initiate(&c.alice_token, &pay("a")),
        c.initiate(&c.alice_token, &pay("b")),
    )
    .await;
    let mut statuses = [a.status().as_u16(), b.status().as_u16()];
    statuses.sort_unstable();
    assert_eq!(statuses, [200, 403]);
    assert_eq!(c.app.raw_sql("SELECT id FROM withdrawals").await.len(), 1);
}
