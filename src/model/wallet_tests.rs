//! Unit tests of the wallet record rules.

use serde_json::json;

use super::*;

fn hot() -> Value {
    json!({
        "id": "0123456789abcdef0123456789abcdef", "label": "w", "coin": "btc", "type": "hot",
        "allowBackupKeySigning": false, "approvalsRequired": 1, "coinSpecific": {}, "deleted": false,
        "disableTransactionNotifications": false, "hasLargeNumberOfAddresses": null, "isCold": false,
        "startDate": "2025-03-04T05:06:07Z",
    })
}

fn field_of(mut w: Value, patch: Value) -> String {
    for (k, v) in patch.as_object().unwrap() {
        if v.is_null() && k != "hasLargeNumberOfAddresses" {
            w.as_object_mut().unwrap().remove(k);
        } else {
            w[k] = v.clone();
        }
    }
    validate(&w, true).err().map(|e| e[0].field.clone()).unwrap_or_else(|| "OK".into())
}

#[test]
fn validation_names_the_field_at_fault() {
    assert_eq!(field_of(hot(), json!({})), "OK");
    assert_eq!(field_of(hot(), json!({ "m": 2, "n": 3 })), "OK");
    assert_eq!(field_of(hot(), json!({ "m": 1 })), "m");
    assert_eq!(field_of(hot(), json!({ "n": 2 })), "n");
    assert_eq!(field_of(hot(), json!({ "coin": "ofcbtc", "type": "trading", "m": 2 })), "m");
    assert_eq!(field_of(hot(), json!({ "coin": "ofcbtc", "type": "trading", "m": 1, "n": 1 })), "OK");
    assert_eq!(field_of(hot(), json!({ "type": "trading" })), "coin");
    assert_eq!(field_of(hot(), json!({ "type": "custodial", "m": 3, "n": 5 })), "OK");
    assert_eq!(field_of(hot(), json!({ "type": "custodial", "m": 4, "n": 3 })), "m");
    assert_eq!(field_of(hot(), json!({ "approvalsRequired": 0 })), "approvalsRequired");
    assert_eq!(field_of(hot(), json!({ "id": "ABC" })), "id");
    assert_eq!(field_of(hot(), json!({ "label": null })), "label");
    assert_eq!(field_of(hot(), json!({ "startDate": "yesterday" })), "startDate");
    assert_eq!(field_of(hot(), json!({ "subType": "lukewarm" })), "subType");
    assert_eq!(
        field_of(hot(), json!({ "multisigType": "tss", "multisigTypeVersion": "MPCv3" })),
        "multisigTypeVersion"
    );
    assert_eq!(field_of(hot(), json!({ "hasLargeNumberOfAddresses": "no" })), "hasLargeNumberOfAddresses");
    assert_eq!(field_of(hot(), json!({ "surprise": 1 })), "surprise");
    assert_eq!(field_of(hot(), json!({ "balanceString": "12a" })), "balanceString");
    assert_eq!(field_of(hot(), json!({ "balanceString": "12", "balance": 13 })), "balanceString");
    assert_eq!(field_of(hot(), json!({ "enterprise": "acme" })), "enterprise");
    assert_eq!(field_of(hot(), json!({ "users": ["alice"] })), "users");
    // EVM keyring consistency.
    let parent = json!({ "isParent": true, "enabledChildChains": ["polygon"], "archivedChildChains": [] });
    assert_eq!(field_of(hot(), parent), "OK");
    assert_eq!(field_of(hot(), json!({ "enabledChildChains": ["polygon"] })), "enabledChildChains");
    assert_eq!(
        field_of(
            hot(),
            json!({ "isParent": true, "evmKeyRingReferenceWalletId": "ffffffffffffffffffffffffffffffff" })
        ),
        "evmKeyRingReferenceWalletId"
    );
    assert_eq!(
        field_of(hot(), json!({ "evmKeyRingReferenceWalletId": "ffffffffffffffffffffffffffffffff" })),
        "OK"
    );
}

#[test]
fn render_adds_only_requested_balances() {
    let mut w = hot();
    w["balanceString"] = json!("00120");
    let row = validate(&w, false).unwrap_or_else(|e| panic!("{e:?}"));
    assert_eq!(row.balances.balance.as_ref().map(BaseUnits::as_str), Some("120"));
    let mut out = String::new();
    render(&row, Expand::default(), &mut out);
    let v: Value = serde_json::from_str(&out).unwrap();
    assert!(v.get("balanceString").is_none());
    out.clear();
    render(&row, Expand { balance: true, ..Expand::default() }, &mut out);
    let v: Value = serde_json::from_str(&out).unwrap();
    assert_eq!(v["balanceString"], "120");
    assert_eq!(v["balance"], 120);
    assert_eq!(v["label"], "w");
}
