//! Access token creation (§4.3, §2.4): fields, validation, templates, parent bounds.

use custodian::config::Environment;
use serde_json::{json, Value};

use crate::common::*;

const W1: &str = "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa";
const W2: &str = "bbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbb";

#[tokio::test]
async fn create_access_token_returns_the_2_4_fields() {
    let app = spawn_app().await;
    let user = app.create_user("owner@example.com").await;
    let enterprise = app.create_enterprise("Acme", &[(&user, false)]).await;
    let session = app.login_raw(&user.email, PASSWORD, &user.code(0)).await;
    let session: Value = session.json().await.unwrap();
    let session = session["access_token"].as_str().unwrap();
    // A JSON integer beyond u128, which must stay exact.
    let big: Value = serde_json::from_str("1000000000000000000000000000000000000000").unwrap();
    // One code for both requests: computed twice, a TOTP step ending in between would make the
    // second a new, valid code.
    let otp = user.code(1);
    let res = app
        .post_auth(
            "/api/v2/user/accesstoken",
            session,
            &json!({
                "label": "treasury bot",
                "otp": otp,
                "scope": ["profile", format!("wallet_spend:{W1}"), "wallet_view_all", "profile"],
                "duration": 600,
                "enterprise": enterprise,
                "ipRestrict": ["127.0.0.1", "192.168.7.9/16", "2001:DB8::1"],
                "spendingLimits": [
                    { "coin": "eth", "txValueLimit": big, "maxLimit": false },
                    { "coin": "btc", "txValueLimit": "000125000",
                      "allErc20TokensLimit": { "enabled": true, "maxLimit": false, "txValueLimit": "5" } }
                ],
                "permittedWallets": [W1, W2],
            }),
        )
        .await;
    let status = res.status();
    let body: Value = res.json().await.unwrap();
    assert_eq!(status, 200, "{body}");
    assert!(custodian::types::is_id(body["id"].as_str().unwrap()));
    let token = body["token"].as_str().unwrap();
    assert!(
        token.starts_with("v2x") && token.len() == 67 && token[3..].bytes().all(|c| c.is_ascii_hexdigit())
    );
    assert_eq!(body["label"], "treasury bot");
    assert_eq!(body["scope"], json!(["profile", format!("wallet_spend:{W1}"), "wallet_view_all"]));
    assert_eq!(body["ip"], "127.0.0.1");
    assert_eq!(body["ipRestrict"], json!(["127.0.0.1", "192.168.0.0/16", "2001:db8::1"]));
    assert_eq!(body["enterprise"], enterprise.as_str());
    assert_eq!(body["user"], user.id.as_str());
    assert_eq!(body["isExtensible"], false);
    assert_eq!(body["origin"], "test");
    let created = chrono::DateTime::parse_from_rfc3339(body["created"].as_str().unwrap()).unwrap();
    let expires = chrono::DateTime::parse_from_rfc3339(body["expires"].as_str().unwrap()).unwrap();
    assert_eq!((expires - created).num_seconds(), 600);
    assert_eq!(
        body["unlock"]["spendingLimits"]["eth"]["txValueLimit"],
        "1000000000000000000000000000000000000000"
    );
    assert_eq!(body["unlock"]["spendingLimits"]["btc"]["txValueLimit"], "125000");
    assert_eq!(body["unlock"]["spendingLimits"]["btc"]["allErc20TokensLimit"]["txValueLimit"], "5");
    // Only the hash is stored, and the token authenticates.
    let stored = app
        .state
        .store
        .token_by_hash(&custodian::identity::bearer::hash_token(token))
        .await
        .unwrap()
        .expect("stored by hash");
    assert_ne!(stored.token_hash, token);
    assert_eq!(app.me(token).await.status(), 200);
    // The OTP step was consumed.
    let again =
        app.post_auth("/api/v2/user/accesstoken", session, &json!({ "label": "x", "otp": otp })).await;
    assert_error(again, 401, "InvalidOtp").await;
}

#[tokio::test]
async fn each_invalid_field_is_a_400_naming_it_and_changes_nothing() {
    let app = spawn_app().await;
    let user = app.create_user("val@example.com").await;
    let stranger = app.create_user("stranger@example.com").await;
    let foreign = app.create_enterprise("Other", &[(&stranger, true)]).await;
    let session = app.login(&user).await;
    let cases: Vec<(Value, &str, &str)> = vec![
        (json!({ "label": null, "otp": "000000" }), "MissingField", "label"),
        (json!({ "label": "   " }), "MissingField", "label"),
        (json!({ "otp": "" }), "MissingField", "otp"),
        (json!({ "otp": "12345" }), "InvalidField", "otp"),
        (json!({ "label": 7 }), "InvalidField", "label"),
        (json!({ "scope": ["wallet_view_all", "fly_to_moon"] }), "InvalidField", "scope[1]"),
        (json!({ "scope": [format!("profile:{W1}")] }), "InvalidField", "scope[0]"),
        (json!({ "scope": ["wallet_view:NOTANID"] }), "InvalidField", "scope[0]"),
        (json!({ "duration": 0 }), "InvalidField", "duration"),
        (json!({ "duration": 315360001u64 }), "InvalidField", "duration"),
        (json!({ "duration": 1.5 }), "InvalidField", "duration"),
        (json!({ "duration": "60" }), "InvalidField", "duration"),
        (json!({ "ipRestrict": ["127.0.0.1", "300.1.1.1"] }), "InvalidField", "ipRestrict[1]"),
        (json!({ "ipRestrict": "127.0.0.1" }), "InvalidField", "ipRestrict"),
        (json!({ "enterprise": "ACME" }), "InvalidField", "enterprise"),
        (json!({ "enterprise": foreign }), "InvalidField", "enterprise"),
        (
            json!({ "spendingLimits": [{ "coin": "BTC", "txValueLimit": "1" }] }),
            "InvalidField",
            "spendingLimits[0].coin",
        ),
        (
            json!({ "spendingLimits": [{ "coin": "btc", "txValueLimit": "1.5" }] }),
            "InvalidField",
            "spendingLimits[0].txValueLimit",
        ),
        (
            json!({ "spendingLimits": [{ "coin": "btc", "txValueLimit": -1 }] }),
            "InvalidField",
            "spendingLimits[0].txValueLimit",
        ),
        (json!({ "spendingLimits": [{ "coin": "btc" }] }), "MissingField", "spendingLimits[0].txValueLimit"),
        (
            json!({ "spendingLimits": [{ "coin": "btc", "txValueLimit": "1" }, { "coin": "btc", "txValueLimit": "2" }] }),
            "InvalidField",
            "spendingLimits[1].coin",
        ),
        (json!({ "permittedWallets": [W1, "xyz"] }), "InvalidField", "permittedWallets[1]"),
        (json!({ "permittedEnterprises": ["short"] }), "InvalidField", "permittedEnterprises[0]"),
        (json!({ "accessTokenTemplateId": W1 }), "InvalidField", "accessTokenTemplateId"),
        (json!({ "admin": true }), "InvalidField", "admin"),
    ];
    for (mut fields, name, field) in cases {
        // A real code (000000 is exempt from the replay rule): were it spent by a failure, the
        // last request below would be refused as a replay.
        fields.as_object_mut().expect("object").entry("otp").or_insert(json!(user.code(0)));
        let res = app.create_token(&session, fields.clone()).await;
        let body = assert_error(res, 400, name).await;
        assert_eq!(body["context"]["field"], field, "for {fields}: {body}");
    }
    // None of the failures consumed the user's current code.
    let res = app
        .post_auth("/api/v2/user/accesstoken", &session, &json!({ "label": "ok", "otp": user.code(0) }))
        .await;
    assert_eq!(res.status(), 200);
}

#[tokio::test]
async fn wrong_otp_is_401_with_needs_otp() {
    let app = spawn_app().await;
    let user = app.create_user("otp@example.com").await;
    let session = app.login(&user).await;
    let wrong = if user.code(0) == "111111" { "222222" } else { "111111" };
    let res = app.create_token(&session, json!({ "otp": wrong })).await;
    let body = assert_error(res, 401, "InvalidOtp").await;
    assert_eq!(body["needsOTP"], true);
}

#[tokio::test]
async fn a_login_session_mints_long_lived_tokens() {
    let app = spawn_app().await;
    let user = app.create_user("long@example.com").await;
    let session = app.login(&user).await;
    // A day, then the 10-year maximum (written as a float, which JSON Schema counts as whole).
    for (duration, secs) in [(json!(86_400), 86_400), (json!(315_360_000.0), 315_360_000)] {
        let res = app.create_token(&session, json!({ "duration": duration })).await;
        let body: Value = res.json().await.unwrap();
        let expires = chrono::DateTime::parse_from_rfc3339(body["expires"].as_str().unwrap()).unwrap();
        let created = chrono::DateTime::parse_from_rfc3339(body["created"].as_str().unwrap()).unwrap();
        assert!(((expires - created).num_seconds() - secs).abs() <= 1, "{body}");
    }
}

#[tokio::test]
async fn production_requires_ip_restrict() {
    let app = spawn_app_with(|c| c.environment = Environment::Production).await;
    let user = app.create_user("prod@example.com").await;
    let res = app.login_raw(&user.email, PASSWORD, &user.code(0)).await;
    let session: Value = res.json().await.unwrap();
    let session = session["access_token"].as_str().unwrap();
    for fields in [json!({}), json!({ "ipRestrict": [] }), json!({ "ipRestrict": null })] {
        let res = app.create_token(session, fields).await;
        let body = assert_error(res, 400, "InvalidField").await;
        assert_eq!(body["context"]["field"], "ipRestrict");
    }
    let res = app
        .create_token(
            session,
            json!({ "otp": user.code(1), "ipRestrict": ["127.0.0.1"], "scope": ["profile"] }),
        )
        .await;
    assert_eq!(res.status(), 200);
    let body: Value = res.json().await.unwrap();
    assert_eq!(body["origin"], "production");
}

#[tokio::test]
async fn template_supplies_absent_fields_and_request_overrides_present_ones() {
    let app = spawn_app().await;
    let user = app.create_user("tmpl@example.com").await;
    let session = app.login(&user).await;
    let template = custodian::identity::tokens::create_template(
        &app.state.store,
        json!({
            "scope": ["profile", "wallet_view_all"],
            "ipRestrict": ["10.0.0.0/8"],
            "duration": 120,
            "permittedWallets": [W1],
        }),
    )
    .await
    .unwrap();
    // Absent fields come from the template.
    let res = app.create_token(&session, json!({ "accessTokenTemplateId": template.id })).await;
    let body: Value = res.json().await.unwrap();
    assert_eq!(body["scope"], json!(["profile", "wallet_view_all"]));
    assert_eq!(body["ipRestrict"], json!(["10.0.0.0/8"]));
    assert_eq!(body["permittedWallets"], json!([W1]));
    // Present fields, even empty arrays, override it.
    let res = app
        .create_token(
            &session,
            json!({ "accessTokenTemplateId": template.id, "scope": ["profile"], "ipRestrict": [], "permittedWallets": [] }),
        )
        .await;
    let body: Value = res.json().await.unwrap();
    assert_eq!(body["scope"], json!(["profile"]));
    assert!(body.get("ipRestrict").is_none(), "empty ipRestrict overrides: {body}");
    assert_eq!(body["permittedWallets"], json!([]));
    let created = chrono::DateTime::parse_from_rfc3339(body["created"].as_str().unwrap()).unwrap();
    let expires = chrono::DateTime::parse_from_rfc3339(body["expires"].as_str().unwrap()).unwrap();
    assert_eq!((expires - created).num_seconds(), 120, "duration still from the template");
    // Templates are checked when created.
    let bad =
        custodian::identity::tokens::create_template(&app.state.store, json!({ "otp": "000000" })).await;
    assert!(bad.is_err());
    let bad =
        custodian::identity::tokens::create_template(&app.state.store, json!({ "scope": ["nope"] })).await;
    assert!(bad.is_err());
}

#[tokio::test]
async fn a_token_cannot_create_a_larger_token() {
    let app = spawn_app().await;
    let user = app.create_user("parent@example.com").await;
    let session = app.login(&user).await;
    let parent = app
        .token_with(
            &session,
            json!({ "scope": ["profile", "wallet_view_all", format!("wallet_spend:{W1}")], "duration": 3000,
                    "permittedWallets": [W1, W2] }),
        )
        .await;
    // Narrower is fine, and permitted lists are inherited when absent.
    let res = app
        .create_token(
            &parent,
            json!({ "scope": [format!("wallet_view:{W2}"), format!("wallet_spend:{W1}")] }),
        )
        .await;
    let body: Value = res.json().await.unwrap();
    assert_eq!(body["permittedWallets"], json!([W1, W2]), "{body}");
    let expires = chrono::DateTime::parse_from_rfc3339(body["expires"].as_str().unwrap()).unwrap();
    assert!(expires.timestamp() <= custodian::clock::wall_now() + 3000, "capped at the parent's expiry");

    let res = app.create_token(&parent, json!({ "scope": ["wallet_spend_all"] })).await;
    let b = assert_error(res, 400, "ExceedsCreatingToken").await;
    assert_eq!(b["context"]["field"], "scope[0]");
    let res = app.create_token(&parent, json!({ "scope": [format!("wallet_spend:{W2}")] })).await;
    assert_error(res, 400, "ExceedsCreatingToken").await;
    let res = app.create_token(&parent, json!({ "duration": 4000 })).await;
    let b = assert_error(res, 400, "ExceedsCreatingToken").await;
    assert_eq!(b["context"]["field"], "duration");
    let res = app
        .create_token(&parent, json!({ "permittedWallets": [W1, "cccccccccccccccccccccccccccccccc"] }))
        .await;
    let b = assert_error(res, 400, "ExceedsCreatingToken").await;
    assert_eq!(b["context"]["field"], "permittedWallets[1]");
}

#[tokio::test]
async fn service_admin_sessions_may_create_admin_tokens() {
    let app = spawn_app().await;
    let admin = app.create_user_with("ops@example.com", true).await;
    let session = app.login(&admin).await;
    let res = app.create_token(&session, json!({ "admin": true, "scope": ["profile"] })).await;
    let body: Value = res.json().await.unwrap();
    assert_eq!(body["serviceAdminPermissions"], json!(["service_admin"]), "{body}");
    let me: Value = app.me(body["token"].as_str().unwrap()).await.json().await.unwrap();
    assert_eq!(me["user"]["serviceEmployee"], true);
}
