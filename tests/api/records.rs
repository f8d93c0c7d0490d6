//! Real-shaped BitGo wallet records (docs/decisions.md#real-wallet-records): extra fields kept verbatim, `--strict` refusing
//! them, a wallet's coin and type immutable, and every problem of a record reported at once.

use custodian::wallets::import::{import, import_with, ImportOptions};
use serde_json::{json, Value};

use crate::common::*;

const FIXTURE: &str = include_str!("../fixtures/bitgo-shaped-wallets.json");

fn records() -> Vec<Value> {
    serde_json::from_str(FIXTURE).expect("fixture is a JSON array")
}

#[tokio::test]
async fn bitgo_shaped_records_import_and_come_back_unchanged() {
    let app = spawn_app().await;
    let s = import(&app.state.store, FIXTURE, |_, _| {}).await.unwrap();
    assert_eq!((s.imported, s.rejected.len()), (4, 0), "{:?}", s.rejected);
    let ops = app.create_user_with("ops@example.com", true).await;
    let token = app.login(&ops).await;
    let ids: Vec<Value> = records().iter().map(|r| r["id"].clone()).collect();
    let body = json!({ "ids": ids });
    let got = expect_json(app.lookup(&token, "?expandBalance=true", &body).await, 200).await;
    let got = got["wallets"].as_array().unwrap();
    assert_eq!(got.len(), 4);
    for (want, have) in records().iter().zip(got) {
        for (k, v) in want.as_object().unwrap() {
            assert_eq!(&have[k], v, "{k} of {}", want["id"]);
        }
    }
    assert_eq!(got[1]["balanceString"], "340282366920938463463374607431768211456", "above 2^64");
    assert_eq!(got[0]["pendingApprovals"], json!([]));
    assert_eq!(got[0]["customTags"], json!(["treasury", "ops"]));
}

#[tokio::test]
async fn strict_imports_refuse_fields_the_spec_does_not_list() {
    let app = spawn_app().await;
    let opts = ImportOptions { strict: true, ..Default::default() };
    let s = import_with(&app.state.store, FIXTURE, opts, |_, _| {}).await.unwrap();
    assert_eq!((s.imported, s.rejected.len()), (0, 4));
    let fields: Vec<&str> = s.rejected[0].violations.iter().map(|v| v.field.as_str()).collect();
    for f in ["bitgoOrg", "pendingApprovals", "creator", "customTags", "safe", "source"] {
        assert!(fields.contains(&f), "{f} in {fields:?}");
    }
}

#[tokio::test]
async fn a_wallets_coin_and_type_never_change_unless_allowed() {
    let app = spawn_app().await;
    let first = records()[0].clone();
    import(&app.state.store, &json!([first]).to_string(), |_, _| {}).await.unwrap();
    let mut changed = first.clone();
    changed["coin"] = json!("thbar");
    changed.as_object_mut().unwrap().remove("type");
    let other = records()[2].clone();
    let text = json!([changed, other]).to_string();
    let s = import(&app.state.store, &text, |_, _| {}).await.unwrap();
    assert_eq!((s.imported, s.updated, s.rejected.len()), (1, 0, 1), "the rest of the batch imports");
    let fields: Vec<&str> = s.rejected[0].violations.iter().map(|v| v.field.as_str()).collect();
    assert_eq!(fields, ["coin", "type"]);
    assert!(s.rejected[0].violations[0].reason.contains("stored tbtc, given thbar"));
    let stored = app
        .raw_sql(&format!("SELECT coin FROM wallets WHERE id = '{}'", first["id"].as_str().unwrap()))
        .await;
    assert_eq!(stored, ["tbtc"]);

    let opts = ImportOptions { allow_identity_change: true, ..Default::default() };
    let s = import_with(&app.state.store, &json!([changed]).to_string(), opts, |_, _| {}).await.unwrap();
    assert_eq!((s.updated, s.rejected.len()), (1, 0));
    let audited = app.raw_sql("SELECT type FROM audit_log WHERE type = 'wallet.identity_changed'").await;
    assert_eq!(audited.len(), 1, "a deliberate change is audited");
}

#[tokio::test]
async fn a_record_with_three_problems_reports_three() {
    let app = spawn_app().await;
    let mut bad = records()[0].clone();
    let obj = bad.as_object_mut().unwrap();
    obj.remove("label");
    obj.insert("approvalsRequired".into(), json!(0));
    obj.insert("startDate".into(), json!("yesterday"));
    let s = import(&app.state.store, &json!([bad]).to_string(), |_, _| {}).await.unwrap();
    assert_eq!(s.rejected.len(), 1);
    let mut fields: Vec<&str> = s.rejected[0].violations.iter().map(|v| v.field.as_str()).collect();
    fields.sort();
    assert_eq!(fields, ["approvalsRequired", "label", "startDate"]);
    let summary = serde_json::to_value(&s).unwrap();
    assert_eq!(summary["rejected"][0]["violations"].as_array().map(Vec::len), Some(3), "in --json too");
}

#[tokio::test]
async fn event_known_fields_are_checked_and_others_reach_the_payload() {
    use crate::{
        receiver::TestReceiver,
        webhooks::{fast, fixture, WALLET},
    };
    let f = fixture(fast).await;
    let admin = f.admin_token().await;
    let rx = TestReceiver::start().await;
    f.wallet_hook_id(&rx.url, "transfer").await;
    let base = json!({ "eventId": "t-1", "type": "transfer", "walletId": WALLET, "coin": "tbtc" });
    for (field, bad) in [
        ("state", json!("done")),
        ("valueString", json!("1.5")),
        ("feeString", json!("-3")),
        ("transfer", json!("not-an-id")),
        ("walletType", json!("piggybank")),
    ] {
        let mut ev = base.clone();
        ev[field] = bad;
        let body = assert_error(f.app.ingest(&admin, &ev).await, 400, "InvalidField").await;
        assert_eq!(body["context"]["field"], field);
    }
    let mut ev = base.clone();
    for (k, v) in [
        ("transfer", json!("5f0c5e1a2b3c4d5e6f708192")),
        ("state", json!("confirmed")),
        ("transferType", json!("send")),
        ("walletType", json!("hot")),
        ("baseValue", json!(-150000)),
        ("baseValueString", json!("-150000")),
        ("valueString", json!("-150000")),
        ("feeString", json!("1200")),
        ("initiator", json!(["ops@example.com"])),
        ("receiver", json!("tb1qreceiver")),
        ("upstreamExtra", json!({ "kept": [1, 2] })),
    ] {
        ev[k] = v;
    }
    expect_json(f.app.ingest(&admin, &ev).await, 200).await;
    let got = rx.wait_for(1, 10).await;
    let payload: Value = serde_json::from_str(&got[0].body).unwrap();
    assert_eq!(payload["upstreamExtra"], json!({ "kept": [1, 2] }), "unknown fields pass through");
    assert_eq!(payload["baseValueString"], "-150000");
    assert_eq!(payload["initiator"], json!(["ops@example.com"]));
}

#[tokio::test]
async fn a_simulated_transfer_has_the_shape_of_a_real_one() {
    use crate::webhooks::{fast, fixture, WALLET};
    let f = fixture(fast).await;
    let hook = f.wallet_hook_id("https://example.com/h", "transfer").await;
    let path = format!("/api/v2/tbtc/wallet/{WALLET}/webhooks/{hook}/simulate");
    let n = expect_json(f.app.post_auth(&path, &f.token, &json!({})).await, 200).await;
    let p: Value = serde_json::from_str(n["webhookNotifications"][0]["payload"].as_str().unwrap()).unwrap();
    assert_eq!((&p["simulation"], &p["placeholder"]), (&json!(true), &json!(true)));
    assert_eq!(p["walletType"], "hot", "the wallet's type");
    for k in ["hash", "transfer", "coin", "type", "state", "wallet", "transferType", "receiver"] {
        assert!(p[k].is_string(), "{k} in {p}");
    }
    for k in ["baseValueString", "valueString", "feeString"] {
        assert_eq!(p[k], "0", "{k}");
    }
    assert_eq!((&p["baseValue"], &p["value"], &p["initiator"]), (&json!(0), &json!(0), &json!([])));
}

#[tokio::test]
async fn simulated_pending_approvals_and_tx_requests_have_their_real_fields() {
    use crate::webhooks::{fast, fixture, WALLET};
    let f = fixture(fast).await;
    let payload = |typ: &'static str| {
        let f = &f;
        async move {
            let hook = f.wallet_hook_id("https://example.com/h", typ).await;
            let path = format!("/api/v2/tbtc/wallet/{WALLET}/webhooks/{hook}/simulate");
            let n = expect_json(f.app.post_auth(&path, &f.token, &json!({})).await, 200).await;
            serde_json::from_str::<Value>(n["webhookNotifications"][0]["payload"].as_str().unwrap()).unwrap()
        }
    };
    let p = payload("pendingapproval").await;
    for k in ["type", "pendingApprovalType", "pendingApprovalId", "walletId", "walletLabel", "state"] {
        assert!(p[k].is_string(), "{k} in {p}");
    }
    assert_eq!((&p["walletLabel"], &p["simulation"]), (&json!("hot"), &json!(true)));
    let p = payload("txRequest").await;
    for k in
        ["enterpriseId", "organizationId", "walletId", "txRequestId", "webhookType", "oldState", "newState"]
    {
        assert!(p[k].is_string(), "{k} in {p}");
    }
    assert_eq!((&p["txRequestVersion"], &p["sequenceIds"]), (&json!(1), &json!([])));
    assert_eq!(p["enterpriseId"], f.enterprise);
}
