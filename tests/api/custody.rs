//! Withdrawals from custodial wallets on a real node (anvil): a key Custodian makes, a
//! withdrawal another admin approves, signed in the key store, sent and mined exactly once.

use serde_json::{json, Value};

use crate::chain::{watch, Anvil, ONE_ETH, OTHER, RICH};
use crate::common::*;

pub struct Custodial {
    pub anvil: Anvil,
    pub app: TestApp,
    pub alice: TestUser,
    pub bob: TestUser,
    /// Alice's session (the wallet's creator and spender), unlocked.
    pub alice_token: String,
    pub bob_token: String,
    pub enterprise: String,
    pub wallet: Value,
}

impl Custodial {
    pub fn wallet_id(&self) -> String {
        self.wallet["id"].as_str().unwrap().to_string()
    }

    pub fn address(&self) -> String {
        self.wallet["coinSpecific"]["baseAddress"].as_str().unwrap().to_string()
    }

    pub async fn initiate(&self, token: &str, body: &Value) -> reqwest::Response {
        let path = format!("/api/v2/hteth/wallet/{}/tx/initiate", self.wallet_id());
        self.app.post_auth(&path, token, body).await
    }

    pub async fn answer(&self, token: &str, approval: &str, body: &Value) -> reqwest::Response {
        self.app.put_auth(&format!("/api/v2/hteth/pendingapprovals/{approval}"), token, body).await
    }

    /// Waits until pending approval `id`, read by Alice, is in `state` (the signer's sweep
    /// expires approvals).
    pub async fn approval_becomes(&self, id: &str, state: &str) {
        let read = format!("/api/v2/hteth/pendingapprovals/{id}");
        until("the pending approval's state", 30, || async {
            let res = self.app.get_auth(&read, &self.alice_token).await;
            if res.status() == 429 {
                return None;
            }
            (expect_json(res, 200).await["state"] == state).then_some(())
        })
        .await;
    }

    pub async fn tx_request(&self, id: &str) -> Value {
        let path = format!("/api/v2/wallet/{}/txrequests?txRequestIds={id}", self.wallet_id());
        let body = expect_json(self.app.get_auth(&path, &self.alice_token).await, 200).await;
        body["txRequests"][0].clone()
    }

    /// Alice asks for `body`'s withdrawal and Bob approves it: its txRequest id.
    pub async fn approved(&self, body: &Value) -> String {
        let pending = expect_json(self.initiate(&self.alice_token, body).await, 200).await;
        let approve = json!({ "state": "approved", "otp": "000000" });
        expect_json(self.answer(&self.bob_token, pending["id"].as_str().unwrap(), &approve).await, 200).await;
        pending["txRequestId"].as_str().unwrap().to_string()
    }

    /// Waits until txRequest `id` is in `state`: the txRequest.
    pub async fn state_is(&self, id: &str, state: &str) -> Value {
        self.tx_request_where(id, &format!("the withdrawal is {state}"), |t| t["state"] == state).await
    }

    /// Waits until txRequest `id` satisfies `cond` (`what`, for a timeout): the txRequest. A 429
    /// (a long wait's polls meet the per-user rate limit) is waited out, so a slow run fails on
    /// the condition, not on the limit.
    pub async fn tx_request_where(&self, id: &str, what: &str, cond: impl Fn(&Value) -> bool) -> Value {
        let path = format!("/api/v2/wallet/{}/txrequests?txRequestIds={id}", self.wallet_id());
        until(what, 30, || async {
            let res = self.app.get_auth(&path, &self.alice_token).await;
            if res.status() == 429 {
                return None;
            }
            let t = expect_json(res, 200).await["txRequests"][0].clone();
            cond(&t).then_some(t)
        })
        .await
    }

    /// Alice asks for `amount` wei to `to`, Bob approves, and the signer sends it: its txRequest.
    pub async fn withdraw(&self, to: &str, amount: &str) -> Value {
        let id = self.approved(&json!({ "recipients": [{ "address": to, "amount": amount }] })).await;
        self.state_is(&id, "delivered").await
    }

    /// A receiver with a wallet webhook of type `kind` (Alice's) pointing at it.
    pub async fn hook(&self, kind: &str) -> crate::receiver::TestReceiver {
        let receiver = crate::receiver::TestReceiver::start().await;
        let path = format!("/api/v2/hteth/wallet/{}/webhooks", self.wallet_id());
        let body = json!({ "type": kind, "url": receiver.url });
        expect_json(self.app.post_auth(&path, &self.alice_token, &body).await, 200).await;
        receiver
    }

    /// Waits until the watcher's balance of the wallet is `wei`, at the head and at the chain's
    /// confirmation depth (which new withdrawals are admitted against).
    pub async fn balance_is(&self, wei: u128) {
        let path = format!("/api/v2/hteth/wallet/{}?expandBalance=true", self.wallet_id());
        until("the wallet's balance", 30, || async {
            let w = expect_json(self.app.get_auth(&path, &self.alice_token).await, 200).await;
            let wanted = json!(wei.to_string());
            (w["balanceString"] == wanted && w["confirmedBalanceString"] == wanted).then_some(())
        })
        .await;
    }
}

/// A custodial wallet made through the API by Alice (admin of the enterprise), funded with
/// `fund` wei from anvil's dev account; Bob is the enterprise's other admin.
pub async fn custodial(fund: u128, approvals_required: u32) -> Custodial {
    custodial_with(fund, approvals_required, |_| {}).await
}

/// [`custodial`] with the configuration changed by `tweak` (the key store's backend).
pub async fn custodial_with(
    fund: u128,
    approvals_required: u32,
    tweak: impl FnOnce(&mut custodian::config::Config),
) -> Custodial {
    custodial_on(Anvil::start().await, fund, approvals_required, tweak).await
}

/// [`custodial_with`] on a node already running (a token deployed on it).
pub async fn custodial_on(
    anvil: Anvil,
    fund: u128,
    approvals_required: u32,
    tweak: impl FnOnce(&mut custodian::config::Config),
) -> Custodial {
    let app = spawn_app_with(|c| {
        watch(c, &anvil);
        c.withdrawals.poll_interval_ms = 50;
        tweak(c);
    })
    .await;
    let alice = app.create_user("alice@example.com").await;
    let bob = app.create_user("bob@example.com").await;
    let enterprise = app.create_enterprise("Fund", &[(&alice, true), (&bob, true)]).await;
    let alice_token = app.login(&alice).await;
    let bob_token = app.login(&bob).await;
    let body = json!({ "label": "cold", "enterprise": enterprise, "type": "custodial", "approvalsRequired": approvals_required });
    let wallet = expect_json(app.post_auth("/api/v2/hteth/wallet/add", &alice_token, &body).await, 200).await;
    let c = Custodial { anvil, app, alice, bob, alice_token, bob_token, enterprise, wallet };
    if fund > 0 {
        c.anvil.send(RICH, &c.address(), fund).await;
        c.anvil.mine(3).await;
        c.balance_is(fund).await;
    }
    expect_json(
        c.app.post_auth("/api/v2/user/unlock", &c.alice_token, &json!({ "otp": "000000" })).await,
        200,
    )
    .await;
    c
}

#[tokio::test]
async fn a_custodial_wallet_holds_its_key_and_shows_only_the_public_part() {
    let c = custodial(0, 1).await;
    let w = &c.wallet;
    assert_eq!(w["type"], "custodial");
    assert_eq!(w["coin"], "hteth");
    assert_eq!(w["receiveAddress"]["address"], w["coinSpecific"]["baseAddress"]);
    let key_id = w["keys"][0].as_str().unwrap();
    let key =
        expect_json(c.app.get_auth(&format!("/api/v2/hteth/key/{key_id}"), &c.alice_token).await, 200).await;
    assert_eq!(key["ethAddress"].as_str().unwrap(), c.address().to_lowercase());
    assert!(key["pub"].as_str().unwrap().starts_with("0x04"), "{key}");
    assert!(key.get("prv").is_none() && key.get("encryptedPrv").is_none(), "{key}");
    // At rest the key is sealed: the stored handle is not the scalar, and opens only under its
    // own id.
    let stored = c.app.raw_sql("SELECT handle FROM custody_keys").await;
    assert_eq!(stored.len(), 1);
    assert!(stored[0].len() > 64 * 2 - 1, "a sealed scalar carries a nonce and a tag");
    // A stranger sees neither the wallet nor its key.
    let eve = c.app.create_user("eve@example.com").await;
    let eve_token = c.app.login(&eve).await;
    assert_error(c.app.get_auth(&format!("/api/v2/hteth/key/{key_id}"), &eve_token).await, 404, "NotFound")
        .await;
    // Made only by an admin of the enterprise, and only custodial.
    let body = json!({ "label": "x", "enterprise": c.enterprise, "type": "custodial" });
    assert_error(
        c.app.post_auth("/api/v2/hteth/wallet/add", &eve_token, &body).await,
        403,
        "InsufficientScope",
    )
    .await;
    let hot = json!({ "label": "x", "enterprise": c.enterprise, "type": "hot" });
    assert_error(
        c.app.post_auth("/api/v2/hteth/wallet/add", &c.alice_token, &hot).await,
        400,
        "InvalidField",
    )
    .await;
    let unwatched = json!({ "label": "x", "enterprise": c.enterprise, "type": "custodial" });
    assert_error(
        c.app.post_auth("/api/v2/tbtc/wallet/add", &c.alice_token, &unwatched).await,
        400,
        "InvalidField",
    )
    .await;
}

/// Waits until the watcher confirms send `hash` (its `receipt`, paying `amount` wei), and
/// checks BitGo's fields of it, listed and told to `hook` (a `transfer` webhook): `value`
/// includes the fee, `baseValue` ("value excluding network fees") does not; the receive that
/// funded the wallet paid none.
async fn send_is_told_with_bitgos_fields(
    c: &Custodial,
    hook: &crate::receiver::TestReceiver,
    hash: &str,
    receipt: &Value,
    amount: u128,
) {
    let path = format!("/api/v2/hteth/wallet/{}/transfer", c.wallet_id());
    let transfers = until("the send is confirmed", 30, || async {
        let body = expect_json(c.app.get_auth(&path, &c.alice_token).await, 200).await;
        let all = body["transfers"].as_array().unwrap().clone();
        all.iter().any(|t| t["txid"] == json!(hash) && t["state"] == "confirmed").then_some(all)
    })
    .await;
    let hex = |v: &Value| u128::from_str_radix(v.as_str().unwrap().trim_start_matches("0x"), 16).unwrap();
    let fee = hex(&receipt["gasUsed"]) * hex(&receipt["effectiveGasPrice"]);
    assert!(fee > 0, "{receipt}");
    let send = transfers.iter().find(|t| t["txid"] == json!(hash)).unwrap();
    let (value, base) = (format!("-{}", amount + fee), format!("-{amount}"));
    assert_eq!(
        (&send["type"], &send["feeString"], &send["valueString"], &send["baseValueString"]),
        (&json!("send"), &json!(fee.to_string()), &json!(value), &json!(base)),
        "{send}"
    );
    assert_eq!(send["baseValue"], json!(-i64::try_from(amount).unwrap()), "{send}");
    let receive = transfers.iter().find(|t| t["type"] == "receive").unwrap();
    assert_eq!(
        (&receive["valueString"], &receive["baseValueString"], &receive["feeString"]),
        (&receive["valueString"], &receive["valueString"], &json!("0")),
        "{receive}"
    );
    // The `transfer` webhook's notification of the confirmed send says the same.
    let told = until("the confirmed send is told", 30, || async {
        hook.received()
            .iter()
            .map(|r| serde_json::from_str::<Value>(&r.body).unwrap())
            .find(|b| b["hash"] == json!(hash) && b["state"] == "confirmed")
    })
    .await;
    assert_eq!(
        (&told["valueString"], &told["baseValueString"], &told["feeString"]),
        (&json!(value), &json!(base), &json!(fee.to_string())),
        "{told}"
    );
}

#[tokio::test]
async fn a_withdrawal_approved_by_another_admin_is_signed_sent_and_mined_once() {
    let c = custodial(2 * ONE_ETH, 1).await;
    let hook = c.hook("transfer").await;
    let before = c.anvil.balance(OTHER).await;
    let body = json!({ "recipients": [{ "address": OTHER, "amount": "1234567" }], "sequenceId": "pay-1", "comment": "rent" });
    let approval = expect_json(c.initiate(&c.alice_token, &body).await, 200).await;
    assert_eq!(approval["state"], "pending");
    assert_eq!(approval["info"]["type"], "transactionRequest");
    assert_eq!(approval["info"]["transactionRequest"]["requestedAmount"], "1234567");
    assert_eq!(approval["info"]["transactionRequest"]["sourceWallet"], json!(c.wallet_id()));
    let id = approval["id"].as_str().unwrap().to_string();
    let tx_request_id = approval["txRequestId"].as_str().unwrap().to_string();
    // The same sequenceId again: the same withdrawal, nothing new.
    let again = expect_json(c.initiate(&c.alice_token, &body).await, 200).await;
    assert_eq!(again["id"], json!(id));
    assert_eq!(c.app.raw_sql("SELECT id FROM withdrawals").await.len(), 1);
    // Nobody approves their own; an approval needs a fresh OTP.
    let approve = json!({ "state": "approved", "otp": "000000" });
    assert_error(c.answer(&c.alice_token, &id, &approve).await, 403, "ApprovalNotAllowed").await;
    assert_error(c.answer(&c.bob_token, &id, &json!({ "state": "approved" })).await, 401, "InvalidOtp").await;
    assert_eq!(c.tx_request(&tx_request_id).await["state"], "pendingApproval");
    let done = expect_json(c.answer(&c.bob_token, &id, &approve).await, 200).await;
    assert_eq!(done["state"], "approved");
    assert_eq!(done["resolvers"][0]["user"], json!(c.bob.id));
    // A second answer finds it resolved.
    assert_error(c.answer(&c.bob_token, &id, &approve).await, 409, "ApprovalNotPending").await;
    let sent = until("the withdrawal is sent", 30, || async {
        let t = c.tx_request(&tx_request_id).await;
        (t["state"] == "delivered").then_some(t)
    })
    .await;
    let hash = sent["transactions"][0]["txHash"].as_str().unwrap().to_string();
    c.anvil.mine(3).await;
    let receipt = c.anvil.rpc("eth_getTransactionReceipt", json!([hash])).await;
    assert_eq!(receipt["status"], "0x1", "{receipt}");
    assert_eq!(receipt["from"].as_str().unwrap(), c.address().to_lowercase());
    assert_eq!(c.anvil.balance(OTHER).await, before + 1_234_567);
    // One transaction from the wallet's address: nonce 0, and the next one is 1.
    let count = c.anvil.rpc("eth_getTransactionCount", json!([c.address(), "latest"])).await;
    assert_eq!(count, "0x1");
    // The watcher sees the send like any transfer, and confirms it.
    send_is_told_with_bitgos_fields(&c, &hook, &hash, &receipt, 1_234_567).await;
    let audit = c.app.raw_sql("SELECT type FROM audit_log WHERE type LIKE 'withdrawal.%' ORDER BY seq").await;
    for t in ["withdrawal.initiated", "withdrawal.approved", "withdrawal.signed", "withdrawal.broadcast"] {
        assert!(audit.iter().any(|a| a == t), "{t} missing from {audit:?}");
    }
}

#[tokio::test]
async fn a_rejected_or_canceled_withdrawal_is_never_signed() {
    let c = custodial(ONE_ETH, 1).await;
    let body = json!({ "recipients": [{ "address": OTHER, "amount": "1000" }] });
    let first = expect_json(c.initiate(&c.alice_token, &body).await, 200).await;
    let rejected = expect_json(
        c.answer(&c.bob_token, first["id"].as_str().unwrap(), &json!({ "state": "rejected" })).await,
        200,
    )
    .await;
    assert_eq!(rejected["state"], "rejected");
    assert_eq!(c.tx_request(first["txRequestId"].as_str().unwrap()).await["state"], "rejected");
    let second = expect_json(c.initiate(&c.alice_token, &body).await, 200).await;
    // The initiator may cancel their own, without an OTP.
    expect_json(
        c.answer(&c.alice_token, second["id"].as_str().unwrap(), &json!({ "state": "rejected" })).await,
        200,
    )
    .await;
    assert_eq!(c.tx_request(second["txRequestId"].as_str().unwrap()).await["state"], "canceled");
    // Two whole rounds of the signer pass; nothing leaves the address.
    let rounds = metric_value(&c.app, "custodian_custody_signer_rounds_total").await;
    until("two more rounds of the signer", 30, || async {
        (metric_value(&c.app, "custodian_custody_signer_rounds_total").await >= rounds + 2).then_some(())
    })
    .await;
    let count = c.anvil.rpc("eth_getTransactionCount", json!([c.address(), "pending"])).await;
    assert_eq!(count, "0x0");
}

#[tokio::test]
async fn withdrawals_are_refused_with_the_spec_error_and_change_nothing() {
    let c = custodial(ONE_ETH, 1).await;
    let one =
        |address: &str, amount: Value| json!({ "recipients": [{ "address": address, "amount": amount }] });
    let cases = [
        (one("0x3C44CdDdB6a900fa2b585dd299e03d12FA4293Bc", json!("1")), 400, "InvalidField"),
        (one("0x1234", json!("1")), 400, "InvalidField"),
        (one(OTHER, json!("0")), 400, "InvalidField"),
        (one(OTHER, json!("-5")), 400, "InvalidField"),
        (one(OTHER, json!("1.5")), 400, "InvalidField"),
        (one(OTHER, json!(ONE_ETH.to_string())), 400, "InsufficientBalance"),
        (json!({ "recipients": [] }), 400, "MissingField"),
        (
            json!({ "recipients": [{ "address": OTHER, "amount": "1" }, { "address": OTHER, "amount": "1" }] }),
            400,
            "InvalidField",
        ),
        (
            json!({ "recipients": [{ "address": OTHER, "amount": "1", "tokenName": "hteth:usdc" }] }),
            400,
            "InvalidField",
        ),
    ];
    for (body, status, name) in cases {
        assert_error(c.initiate(&c.alice_token, &body).await, status, name).await;
    }
    // The zero address burns what it is paid: refused on both routes, the field named.
    let zero = "0x0000000000000000000000000000000000000000";
    let refused =
        assert_error(c.initiate(&c.alice_token, &one(zero, json!("1"))).await, 400, "InvalidField").await;
    assert_eq!(refused["context"]["field"], "recipients[0].address", "{refused}");
    let intent = json!({ "intent": { "intentType": "payment",
        "recipients": [{ "address": { "address": zero }, "amount": { "value": "1" } }] } });
    let path = format!("/api/v2/wallet/{}/txrequests", c.wallet_id());
    let refused =
        assert_error(c.app.post_auth(&path, &c.alice_token, &intent).await, 400, "InvalidField").await;
    assert_eq!(refused["context"]["field"], "recipients[0].address", "{refused}");
    // Bob is an enterprise admin but not a spender of the wallet.
    expect_json(c.app.post_auth("/api/v2/user/unlock", &c.bob_token, &json!({ "otp": "000000" })).await, 200)
        .await;
    assert_error(c.initiate(&c.bob_token, &one(OTHER, json!("1"))).await, 403, "InsufficientScope").await;
    // A token without wallet_spend.
    let viewer = c.app.token_with(&c.alice_token, json!({ "scope": ["wallet_view_all"] })).await;
    assert_error(c.initiate(&viewer, &one(OTHER, json!("1"))).await, 403, "InsufficientScope").await;
    // A token with a spending limit may send up to it without an unlock; without one it must
    // be unlocked (needsUnlock).
    let limited = c
        .app
        .token_with(
            &c.alice_token,
            json!({ "scope": ["wallet_spend_all", "wallet_view_all"], "spendingLimits": [{ "coin": "hteth", "txValueLimit": "500" }] }),
        )
        .await;
    assert_error(c.initiate(&limited, &one(OTHER, json!("501"))).await, 400, "SpendingLimitExceeded").await;
    expect_json(c.initiate(&limited, &one(OTHER, json!("500"))).await, 200).await;
    let unlimited =
        c.app.token_with(&c.alice_token, json!({ "scope": ["wallet_spend_all", "wallet_view_all"] })).await;
    let body = assert_error(c.initiate(&unlimited, &one(OTHER, json!("1"))).await, 401, "NeedsUnlock").await;
    assert_eq!(body["needsUnlock"], true, "{body}");
    assert_eq!(c.app.raw_sql("SELECT id FROM withdrawals").await.len(), 1);
    let refused = c.app.raw_sql("SELECT type FROM audit_log WHERE type = 'withdrawal.refused'").await;
    assert!(refused.len() >= 12, "every refusal is audited: {refused:?}");
}

#[tokio::test]
async fn a_sessions_unlock_counts_the_withdrawals_it_started() {
    let c = custodial(ONE_ETH, 1).await;
    let one = |amount: &str| json!({ "recipients": [{ "address": OTHER, "amount": amount }] });
    let session =
        || async { expect_json(c.app.get_auth("/api/v2/user/session", &c.alice_token).await, 200).await };
    assert_eq!(session().await["session"]["unlock"]["txCount"], 0);
    expect_json(c.initiate(&c.alice_token, &one("5")).await, 200).await;
    expect_json(c.initiate(&c.alice_token, &one("7")).await, 200).await;
    let unlock = session().await["session"]["unlock"].clone();
    assert_eq!((unlock["txCount"].clone(), unlock["txValue"].clone()), (json!(2), json!(12)), "{unlock}");
    // Another token's withdrawal is not this session's; a new unlock starts counting again.
    let limited = c
        .app
        .token_with(
            &c.alice_token,
            json!({ "scope": ["wallet_spend_all", "wallet_view_all", "crypto_compare"], "spendingLimits": [{ "coin": "hteth", "txValueLimit": "500" }] }),
        )
        .await;
    expect_json(c.initiate(&limited, &one("500")).await, 200).await;
    assert_eq!(session().await["session"]["unlock"]["txCount"], 2);
    c.app.state.store.clock().advance(std::time::Duration::from_secs(1));
    let again = c.app.post_auth("/api/v2/user/unlock", &c.alice_token, &json!({ "otp": "000000" })).await;
    assert_eq!(expect_json(again, 200).await["session"]["unlock"]["txCount"], 0);
    assert_eq!(session().await["session"]["unlock"]["txValue"], 0);
}

#[tokio::test]
async fn a_withdrawal_tells_its_approval_and_each_state_change_to_the_wallets_webhooks() {
    let c = custodial(ONE_ETH, 1).await;
    let receiver = crate::receiver::TestReceiver::start().await;
    let hooks = [
        json!({ "type": "pendingapproval", "url": receiver.url }),
        json!({ "type": "txRequest", "url": receiver.url }),
        json!({ "type": "txRequestTransaction", "url": receiver.url, "txRequestTransactionStates": ["signed", "delivered"] }),
    ];
    for hook in hooks {
        let path = format!("/api/v2/hteth/wallet/{}/webhooks", c.wallet_id());
        expect_json(c.app.post_auth(&path, &c.alice_token, &hook).await, 200).await;
    }
    let body = json!({ "recipients": [{ "address": OTHER, "amount": "5" }], "sequenceId": "told" });
    let pending = expect_json(c.initiate(&c.alice_token, &body).await, 200).await;
    let approve = json!({ "state": "approved", "otp": "000000" });
    expect_json(c.answer(&c.bob_token, pending["id"].as_str().unwrap(), &approve).await, 200).await;
    // pendingapproval: pending, approved; txRequest: four changes; txRequestTransaction: only
    // the two states the webhook lists.
    let got = receiver.wait_for(8, 30).await;
    let mut told: Vec<(String, String, String)> = got
        .iter()
        .map(|r| serde_json::from_str::<Value>(&r.body).unwrap())
        .map(|b| {
            let s = |k: &str| b[k].as_str().unwrap_or_default().to_string();
            assert_eq!(b["walletId"], json!(c.wallet_id()), "{b}");
            if b["type"] != "pendingapproval" {
                assert_eq!(b["txRequestId"], pending["txRequestId"], "{b}");
                assert_eq!(b["sequenceIds"], json!(["told"]), "{b}");
            }
            (
                s("type"),
                s("oldState"),
                if b["type"] == "pendingapproval" { s("state") } else { s("newState") },
            )
        })
        .collect();
    told.sort();
    let want: Vec<(String, String, String)> = [
        ("pendingapproval", "", "approved"),
        ("pendingapproval", "", "pending"),
        ("txRequest", "initialized", "pendingApproval"),
        ("txRequest", "pendingApproval", "pendingDelivery"),
        ("txRequest", "pendingDelivery", "signed"),
        ("txRequest", "signed", "delivered"),
        ("txRequestTransaction", "pendingSignature", "signed"),
        ("txRequestTransaction", "signed", "delivered"),
    ]
    .iter()
    .map(|(a, b, c)| (a.to_string(), b.to_string(), c.to_string()))
    .collect();
    assert_eq!(told, want);
    // Nothing more: once the signer has seen it mined, its later rounds find nothing to tell.
    c.anvil.mine(3).await;
    let id = pending["txRequestId"].as_str().unwrap();
    until("the signer sees it mined", 30, || async {
        c.tx_request(id).await["transactions"][0]["blockHeight"].as_u64().map(|_| ())
    })
    .await;
    wait_until_idle(&c.app.state.store).await;
    assert_eq!(receiver.received().len(), 8);
}

#[tokio::test]
async fn a_frozen_wallet_refuses_withdrawals_holds_approved_ones_and_tells_its_admin_webhooks() {
    let c = custodial(ONE_ETH, 1).await;
    let receiver = crate::receiver::TestReceiver::start().await;
    let path = format!("/api/v2/hteth/wallet/{}/webhooks", c.wallet_id());
    expect_json(
        c.app.post_auth(&path, &c.alice_token, &json!({ "type": "admin", "url": receiver.url })).await,
        200,
    )
    .await;
    // One approved just before the freeze: held, not signed.
    let body = json!({ "recipients": [{ "address": OTHER, "amount": "9" }] });
    let pending = expect_json(c.initiate(&c.alice_token, &body).await, 200).await;
    let freeze = format!("/api/v2/hteth/wallet/{}/freeze", c.wallet_id());
    let frozen =
        expect_json(c.app.post_auth(&freeze, &c.bob_token, &json!({ "duration": 600 })).await, 200).await;
    assert!(frozen["expires"].is_string(), "{frozen}");
    let approve = json!({ "state": "approved", "otp": "000000" });
    expect_json(c.answer(&c.bob_token, pending["id"].as_str().unwrap(), &approve).await, 200).await;
    assert_error(c.initiate(&c.alice_token, &body).await, 400, "WalletFrozen").await;
    let told = receiver.wait_for(1, 20).await;
    let event: Value = serde_json::from_str(&told[0].body).unwrap();
    assert_eq!(
        (event["type"].as_str(), event["action"].as_str()),
        (Some("admin"), Some("freeze")),
        "{event}"
    );
    assert_eq!(event["freeze"]["expires"], frozen["expires"]);
    let w = expect_json(
        c.app.get_auth(&format!("/api/v2/hteth/wallet/{}", c.wallet_id()), &c.alice_token).await,
        200,
    )
    .await;
    assert_eq!(w["freeze"], frozen);
    let id = pending["txRequestId"].as_str().unwrap();
    // Two whole rounds of the signer pass while it is frozen: the approved one waits, unsigned.
    let rounds = metric_value(&c.app, "custodian_custody_signer_rounds_total").await;
    until("two more rounds of the signer", 30, || async {
        (metric_value(&c.app, "custodian_custody_signer_rounds_total").await >= rounds + 2).then_some(())
    })
    .await;
    assert_eq!(c.tx_request(id).await["state"], "pendingDelivery");
    // The operator ends it early (`custodian wallet unfreeze`): the withdrawal goes out.
    let wallet_id: custodian::types::WalletId = c.wallet_id().parse().unwrap();
    custodian::custody::freeze::unfreeze(&c.app.state.custody, &wallet_id).await.unwrap();
    until("the held withdrawal is sent after the unfreeze", 30, || async {
        (c.tx_request(id).await["state"] == "delivered").then_some(())
    })
    .await;
    let told = receiver.wait_for(2, 20).await;
    let event: Value = serde_json::from_str(&told[1].body).unwrap();
    assert_eq!(event["action"], "unfreeze", "{event}");
    let audit =
        c.app.raw_sql("SELECT type FROM audit_log WHERE type LIKE 'wallet.%frozen' ORDER BY seq").await;
    assert_eq!(audit, ["wallet.frozen", "wallet.unfrozen"]);
}

/// Ten withdrawals of 1 wei Alice asks for at once, each with `otp` (`round` keeps their
/// idempotency keys apart): their statuses.
async fn ten_at_once(c: &Custodial, otp: &str, round: u32) -> Vec<u16> {
    futures_util::future::join_all((0..10).map(|i| async move {
        let body = json!({ "recipients": [{ "address": OTHER, "amount": "1" }], "otp": otp, "sequenceId": format!("{otp}-{round}-{i}") });
        c.initiate(&c.alice_token, &body).await.status().as_u16()
    }))
    .await
}

#[tokio::test]
async fn ten_withdrawals_at_once_with_a_right_code_all_pass_and_wrong_codes_still_stop_at_the_limit() {
    // A limit of 2 (5 by default): three checks side by side are enough to trip it, so the test
    // does not hang on how the ten happen to interleave.
    let c = crate::custody::custodial_with(ONE_ETH, 1, |cfg| cfg.login.max_otp_failures = 2).await;
    // BitGoJS's sendMany in parallel, each with a right code. "000000" is the test environment's
    // code: right every time and never claimed against replay (a real code is claimed once per
    // step), so these are ten right codes at once, each counted as a failure until it passes.
    for round in 0..2 {
        let answers = ten_at_once(&c, "000000", round).await;
        assert_eq!(answers, [200; 10], "a right code never counts as a wrong one");
    }
    assert_eq!(c.app.raw_sql("SELECT id FROM withdrawals").await.len(), 20);
    // Ten wrong codes at once: login.max_otp_failures are wrong, the rest throttled.
    let valid = [c.alice.code(-1), c.alice.code(0), c.alice.code(1), "000000".to_string()];
    let wrong = (1..1_000_000).map(|n| format!("{n:06}")).find(|code| !valid.contains(code)).unwrap();
    let mut answers = ten_at_once(&c, &wrong, 0).await;
    answers.sort();
    assert_eq!(answers, [401, 401, 429, 429, 429, 429, 429, 429, 429, 429]);
    // Now the right code is refused too, and nothing more was made.
    let body = json!({ "recipients": [{ "address": OTHER, "amount": "1" }], "otp": "000000" });
    assert_error(c.initiate(&c.alice_token, &body).await, 429, "TooManyOtpAttempts").await;
    assert_eq!(c.app.raw_sql("SELECT id FROM withdrawals").await.len(), 20);
}
