//! The internal wallet lookup (§4.1, §2.1): visibility, fields, balances, limits, import.

use serde_json::{json, Value};

use crate::common::*;

/// A minimal valid §2.1 record.
fn wallet(id: &str, enterprise: Option<&str>, users: &[&str]) -> Value {
    let mut w = json!({
        "id": id, "label": format!("wallet {}", &id[..4]), "coin": "btc", "type": "hot", "m": 2, "n": 3,
        "allowBackupKeySigning": false, "approvalsRequired": 1, "coinSpecific": {}, "deleted": false,
        "disableTransactionNotifications": false, "hasLargeNumberOfAddresses": null, "isCold": false,
        "startDate": "2025-03-04T05:06:07.000Z",
        "users": users.iter().map(|u| json!({ "user": u, "permissions": ["view"] })).collect::<Vec<_>>(),
    });
    if let Some(e) = enterprise {
        w["enterprise"] = json!(e);
    }
    w
}

fn hex_id(n: u32) -> String {
    format!("{n:032x}")
}

async fn import(app: &TestApp, records: &[Value]) -> custodian::wallets::import::ImportSummary {
    let text = serde_json::to_string(records).unwrap();
    custodian::wallets::import::import(&app.state.store, &text, |_, _| {}).await.unwrap()
}

#[tokio::test]
async fn example_file_round_trips_every_field() {
    let app = spawn_app().await;
    let text =
        std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/examples/wallets.json")).unwrap();
    let originals: Vec<Value> = serde_json::from_str(&text).unwrap();
    assert!(originals.len() >= 30);
    let summary = custodian::wallets::import::import(&app.state.store, &text, |_, _| {}).await.unwrap();
    assert_eq!((summary.imported, summary.updated, summary.rejected.len()), (originals.len() as u64, 0, 0));
    let types: std::collections::BTreeSet<&str> =
        originals.iter().filter_map(|w| w["type"].as_str()).collect();
    assert_eq!(types.len(), custodian::model::wallet::WALLET_TYPES.len(), "every wallet type is covered");

    let admin = app.create_user_with("ops@example.com", true).await;
    let token = app.login(&admin).await;
    let ids: Vec<&str> = originals.iter().map(|w| w["id"].as_str().unwrap()).collect();
    let res = app
        .lookup(
            &token,
            "?expandBalance=true&includeStakingBalances=true&allTokens=true",
            &json!({ "ids": ids, "includeDeleted": true }),
        )
        .await;
    assert_eq!(res.status(), 200);
    let body: Value = serde_json::from_str(&res.text().await.unwrap()).unwrap();
    let got = body["wallets"].as_array().unwrap();
    assert_eq!(got.len(), originals.len());
    for (orig, got) in originals.iter().zip(got) {
        assert_eq!(orig["id"], got["id"], "request order");
        for (k, v) in orig.as_object().unwrap() {
            assert_eq!(&got[k], v, "field {k} of {}", orig["id"]);
        }
        // Numeric twins equal their strings, digit for digit.
        for (s, n) in [("balanceString", "balance"), ("confirmedBalanceString", "confirmedBalance")] {
            assert_eq!(got[s].as_str().unwrap(), got[n].to_string(), "{n} of {}", orig["id"]);
        }
    }
}

#[tokio::test]
async fn balance_fields_appear_only_when_asked() {
    let app = spawn_app().await;
    let mut hot = wallet(&hex_id(1), None, &[]);
    hot["balanceString"] = json!("5");
    hot["stakingBalanceString"] = json!("6");
    let mut ofc = wallet(&hex_id(2), None, &[]);
    ofc["coin"] = json!("ofcbtc");
    ofc["type"] = json!("trading");
    ofc["m"] = json!(1);
    ofc["n"] = json!(1);
    ofc["withdrawHoldAmountUsdString"] = json!("700");
    import(&app, &[hot, ofc]).await;
    let admin = app.create_user_with("ops@example.com", true).await;
    let token = app.login(&admin).await;
    let ids = json!({ "ids": [hex_id(1), hex_id(2)] });
    let balance_keys = [
        "balanceString",
        "balance",
        "confirmedBalanceString",
        "confirmedBalance",
        "spendableBalanceString",
        "spendableBalance",
    ];
    let staking_keys = ["stakingBalanceString", "rewardBalanceString"];
    let cases: Vec<(&str, Vec<&str>, Vec<&str>)> = vec![
        ("", vec![], vec![]),
        ("?expandBalance=true", balance_keys.to_vec(), balance_keys.to_vec()),
        ("?includeStakingBalances=true", staking_keys.to_vec(), staking_keys.to_vec()),
        ("?allTokens=true", vec![], vec!["withdrawHoldAmountUsdString"]),
        ("?expandBalance=false&allTokens=false", vec![], vec![]),
    ];
    let all: Vec<&str> = balance_keys
        .iter()
        .chain(staking_keys.iter())
        .copied()
        .chain(["withdrawHoldAmountUsdString"])
        .collect();
    for (query, hot_keys, ofc_keys) in cases {
        let body: Value = app.lookup(&token, query, &ids.clone()).await.json().await.unwrap();
        for (w, keys) in body["wallets"].as_array().unwrap().iter().zip([hot_keys, ofc_keys]) {
            for k in &all {
                assert_eq!(w.get(*k).is_some(), keys.contains(k), "{k} with {query:?} on {}", w["coin"]);
            }
        }
    }
    let body: Value = app
        .lookup(&token, "?expandBalance=true&includeStakingBalances=1", &ids.clone())
        .await
        .json()
        .await
        .unwrap();
    assert_eq!(body["wallets"][0]["balanceString"], "5");
    assert_eq!(body["wallets"][0]["confirmedBalanceString"], "0", "unset balances read as zero");
    assert_eq!(body["wallets"][0]["stakingBalanceString"], "6");
    let res = app.lookup(&token, "?expandBalance=maybe", &ids).await;
    let b = assert_error(res, 400, "InvalidField").await;
    assert_eq!(b["context"]["field"], "expandBalance");
}

#[tokio::test]
async fn a_78_digit_balance_round_trips_exactly() {
    let app = spawn_app().await;
    import(&app, &[wallet(&hex_id(7), None, &[])]).await;
    let admin = app.create_user_with("ops@example.com", true).await;
    let token = app.login(&admin).await;
    let big = "115792089237316195423570985008687907853269984665640564039457584007913129639935";
    assert_eq!(big.len(), 78);
    let res = app
        .post_auth(
            &format!("/api/v2/internal/wallet/{}/balance", hex_id(7)),
            &token,
            &json!({ "balanceString": big }),
        )
        .await;
    assert_eq!(res.status(), 200);
    let text =
        app.lookup(&token, "?expandBalance=true", &json!({ "ids": [hex_id(7)] })).await.text().await.unwrap();
    assert!(text.contains(&format!("\"balanceString\":\"{big}\"")), "{text}");
    assert!(text.contains(&format!("\"balance\":{big}")), "numeric twin is the exact integer: {text}");
}

#[tokio::test]
async fn balance_updates_need_a_service_admin_and_a_known_wallet() {
    let app = spawn_app().await;
    let user = app.create_user("user@example.com").await;
    import(&app, &[wallet(&hex_id(8), None, &[&user.id])]).await;
    let token = app.login(&user).await;
    let path = format!("/api/v2/internal/wallet/{}/balance", hex_id(8));
    let res = app.post_auth(&path, &token, &json!({ "balanceString": "1" })).await;
    assert_error(res, 403, "InsufficientScope").await;
    let admin = app.create_user_with("ops@example.com", true).await;
    let admin = app.login(&admin).await;
    let res = app
        .post_auth(
            &format!("/api/v2/internal/wallet/{}/balance", hex_id(9)),
            &admin,
            &json!({ "balanceString": "1" }),
        )
        .await;
    assert_error(res, 404, "WalletNotFound").await;
    for bad in [
        json!({ "balanceString": "-1" }),
        json!({ "balanceString": "1.5" }),
        json!({}),
        json!({ "nope": "1" }),
    ] {
        let res = app.post_auth(&path, &admin, &bad).await;
        assert_error(res, 400, "InvalidField").await;
    }
    let res = app.post_auth(&path, &admin, &json!({ "spendableBalanceString": 42 })).await;
    let w: Value = res.json().await.unwrap();
    assert_eq!(w["spendableBalanceString"], "42");
    assert_eq!(w["balanceString"], "0");
}

#[tokio::test]
async fn visibility_follows_users_scopes_and_permitted_lists() {
    let app = spawn_app().await;
    let alice = app.create_user("alice@example.com").await;
    let bob = app.create_user("bob@example.com").await;
    let acme = app.create_enterprise("Acme", &[(&alice, false)]).await;
    let other = app.create_enterprise("Other", &[(&alice, true)]).await;
    // 1: alice's, in Acme. 2: alice's, in Other. 3: bob's, in Acme. 4: nobody listed, in Other
    // (alice is Other's admin). 5: bob's, no enterprise.
    import(
        &app,
        &[
            wallet(&hex_id(1), Some(&acme), &[&alice.id]),
            wallet(&hex_id(2), Some(&other), &[&alice.id]),
            wallet(&hex_id(3), Some(&acme), &[&bob.id]),
            wallet(&hex_id(4), Some(&other), &[]),
            wallet(&hex_id(5), None, &[&bob.id]),
        ],
    )
    .await;
    let all: Vec<String> = (1..=6).map(hex_id).collect(); // 6 does not exist
    let ids = |v: &[u32]| v.iter().map(|n| hex_id(*n)).collect::<Vec<_>>();
    let session = app.login(&alice).await;
    assert_eq!(app.lookup_ids(&session, &all).await, ids(&[1, 2, 4]), "login session");
    let bob_session = app.login(&bob).await;
    assert_eq!(app.lookup_ids(&bob_session, &all).await, ids(&[3, 5]));

    let t = app.token_with(&session, json!({ "scope": ["wallet_view_all"] })).await;
    assert_eq!(app.lookup_ids(&t, &all).await, ids(&[1, 2, 4]), "wallet_view_all");
    let t = app
        .token_with(
            &session,
            json!({ "scope": [format!("wallet_view:{}", hex_id(2)), format!("wallet_view:{}", hex_id(3))] }),
        )
        .await;
    assert_eq!(
        app.lookup_ids(&t, &all).await,
        ids(&[2]),
        "wallet_view:<id>, and never another user's wallet"
    );
    let t =
        app.token_with(&session, json!({ "scope": ["wallet_view_enterprise"], "enterprise": other })).await;
    assert_eq!(app.lookup_ids(&t, &all).await, ids(&[2, 4]), "wallet_view_enterprise");
    let t =
        app.token_with(&session, json!({ "scope": ["wallet_view"], "permittedWallets": [hex_id(1)] })).await;
    assert_eq!(
        app.lookup_ids(&t, &all).await,
        ids(&[1]),
        "plain wallet_view takes permittedWallets as context"
    );
    let t = app
        .token_with(
            &session,
            json!({ "scope": ["wallet_view_all"], "permittedWallets": [hex_id(4), hex_id(3)] }),
        )
        .await;
    assert_eq!(app.lookup_ids(&t, &all).await, ids(&[4]), "permittedWallets narrows");
    let t = app
        .token_with(&session, json!({ "scope": ["wallet_view_all"], "permittedEnterprises": [acme] }))
        .await;
    assert_eq!(app.lookup_ids(&t, &all).await, ids(&[1]), "permittedEnterprises narrows");
    let t = app.token_with(&session, json!({ "scope": ["wallet_spend_all", "profile"] })).await;
    assert_eq!(app.lookup_ids(&t, &all).await, Vec::<String>::new(), "no view scope sees nothing");

    let ops = app.create_user_with("ops@example.com", true).await;
    let ops = app.login(&ops).await;
    assert_eq!(app.lookup_ids(&ops, &all).await, ids(&[1, 2, 3, 4, 5]), "service admin sees all");
}

#[tokio::test]
async fn deleted_wallets_only_with_include_deleted() {
    let app = spawn_app().await;
    let user = app.create_user("del@example.com").await;
    let mut gone = wallet(&hex_id(2), None, &[&user.id]);
    gone["deleted"] = json!(true);
    import(&app, &[wallet(&hex_id(1), None, &[&user.id]), gone]).await;
    let token = app.login(&user).await;
    let both = json!({ "ids": [hex_id(2), hex_id(1)] });
    let body: Value = app.lookup(&token, "", &both.clone()).await.json().await.unwrap();
    assert_eq!(body["wallets"].as_array().unwrap().len(), 1);
    let mut with = both.clone();
    with["includeDeleted"] = json!(true);
    let body: Value = app.lookup(&token, "", &with).await.json().await.unwrap();
    assert_eq!(body["wallets"][0]["id"], hex_id(2).as_str(), "request order");
    assert_eq!(body["wallets"][0]["deleted"], true);
    assert_eq!(body["wallets"][1]["id"], hex_id(1).as_str());
}

#[tokio::test]
async fn lookup_limits_and_id_validation() {
    let app = spawn_app_with(|c| c.max_lookup_ids = 5).await;
    let user = app.create_user("lim@example.com").await;
    import(&app, &[wallet(&hex_id(1), None, &[&user.id])]).await;
    let token = app.login(&user).await;
    let res = app.lookup(&token, "", &json!({ "ids": [hex_id(1), "ABC"] })).await;
    let b = assert_error(res, 400, "InvalidField").await;
    assert_eq!(b["context"]["index"], 1);
    assert_eq!(b["context"]["field"], "ids[1]");
    let res = app.lookup(&token, "", &json!({ "ids": [] })).await;
    assert_error(res, 400, "InvalidField").await;
    let res = app.lookup(&token, "", &json!({ "ids": (1..=6).map(hex_id).collect::<Vec<_>>() })).await;
    let b = assert_error(res, 400, "TooManyIds").await;
    assert_eq!(b["context"]["max"], 5);
    // Duplicates collapse, so six mentions of one id is within the limit and returns it once.
    let res = app.lookup(&token, "", &json!({ "ids": vec![hex_id(1); 6] })).await;
    let body: Value = res.json().await.unwrap();
    assert_eq!(body["wallets"].as_array().unwrap().len(), 1);
    let res = app.lookup(&token, "", &json!({ "ids": "x" })).await;
    assert_error(res, 400, "InvalidField").await;
    let res = app.lookup(&token, "", &json!({ "ids": [hex_id(1)], "includeDeleted": "yes" })).await;
    assert_error(res, 400, "InvalidField").await;
    let res = app.post("/api/v2/internal/wallet", &json!({ "ids": [hex_id(1)] })).await;
    assert_error(res, 401, "AuthenticationRequired").await;
}

#[tokio::test]
async fn import_skips_bad_records_and_reports_them() {
    let app = spawn_app().await;
    let admin = app.create_user_with("ops@example.com", true).await;
    let good1 = wallet(&hex_id(1), None, &[]);
    let good2 = wallet(&hex_id(2), None, &[]);
    let mut bad_type = wallet(&hex_id(3), None, &[]);
    bad_type["type"] = json!("warm");
    let mut bad_mn = wallet(&hex_id(4), None, &[]);
    bad_mn["m"] = json!(1);
    let ndjson = [
        good1.to_string(),
        "{not json".to_string(),
        bad_type.to_string(),
        String::new(),
        bad_mn.to_string(),
        good2.to_string(),
    ]
    .join("\n");
    let s = custodian::wallets::import::import(&app.state.store, &ndjson, |_, _| {}).await.unwrap();
    assert_eq!((s.imported, s.updated), (2, 0));
    let lines: Vec<_> = s.rejected.iter().map(|r| (r.line, r.field.as_str())).collect();
    assert_eq!(lines, vec![(Some(2), ""), (Some(3), "type"), (Some(5), "m")]);
    assert_eq!(s.rejected[1].id.as_deref(), Some(hex_id(3).as_str()));
    let token = app.login(&admin).await;
    let all: Vec<String> = (1..=4).map(hex_id).collect();
    assert_eq!(
        app.lookup_ids(&token, &all).await,
        vec![hex_id(1), hex_id(2)],
        "nothing of a bad record was written"
    );
    // Re-importing counts updates.
    let s = import(&app, &[good1]).await;
    assert_eq!((s.imported, s.updated), (0, 1));
}
