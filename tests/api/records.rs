//! Real-shaped BitGo wallet records (issue 11): extra fields kept verbatim, `--strict` refusing
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
