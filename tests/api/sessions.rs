//! The token and session lifecycle (docs/decisions.md#token-and-session-lifecycle): list and revoke tokens, token templates
//! over HTTP, the session view, unlock and lock, extension and logout.

use serde_json::{json, Value};

use crate::common::*;

async fn list(app: &TestApp, token: &str, query: &str) -> Value {
    expect_json(app.get_auth(&format!("/api/v2/user/accesstoken{query}"), token).await, 200).await
}

fn ids_of(page: &Value) -> Vec<String> {
    page["accessTokens"].as_array().unwrap().iter().map(|t| t["id"].as_str().unwrap().to_string()).collect()
}

#[tokio::test]
async fn tokens_are_listed_by_creation_in_pages_without_secrets() {
    let app = spawn_app().await;
    let user = app.create_user("lister@example.com").await;
    let session = app.login(&user).await;
    let mut secrets = vec![session.clone()];
    // Creation times are whole seconds: one token a second keeps the order unambiguous.
    for label in ["a", "b", "c"] {
        let second = custodian::clock::wall_now();
        crate::common::until("the next second", 3, || async {
            (custodian::clock::wall_now() > second).then_some(())
        })
        .await;
        secrets.push(app.token_with(&session, json!({ "scope": ["profile"], "label": label })).await);
    }
    let all = list(&app, &session, "?limit=200").await;
    assert_eq!(ids_of(&all).len(), 4, "the session and three tokens: {all}");
    let text = all.to_string();
    for s in &secrets {
        assert!(!text.contains(s.as_str()), "a secret in the list");
    }
    assert!(all["accessTokens"].as_array().unwrap().iter().all(|t| t.get("token").is_none()));
    let me = all["accessTokens"].as_array().unwrap().iter().find(|t| t["label"] == "login session").cloned();
    assert!(me.is_some_and(|t| t["lastUsedAt"].is_string()), "the session has been used");

    let first = list(&app, &session, "?limit=2").await;
    let prev = first["nextBatchPrevId"].as_str().expect("another page").to_string();
    let second = list(&app, &session, &format!("?limit=2&prevId={prev}")).await;
    assert!(second.get("nextBatchPrevId").is_none(), "{second}");
    let paged: Vec<String> = ids_of(&first).into_iter().chain(ids_of(&second)).collect();
    assert_eq!(paged, ids_of(&all), "pages in creation order");
    let labels: Vec<&str> =
        all["accessTokens"].as_array().unwrap().iter().map(|t| t["label"].as_str().unwrap()).collect();
    assert_eq!(labels[1..], ["a", "b", "c"]);
    let desc = list(&app, &session, "?limit=200&sort=DESC").await;
    let mut reversed = ids_of(&all);
    reversed.reverse();
    assert_eq!(ids_of(&desc), reversed);
    for bad in ["?limit=0", "?limit=201", "?sort=UP", "?prevId=xyz"] {
        assert_eq!(
            app.get_auth(&format!("/api/v2/user/accesstoken{bad}"), &session).await.status(),
            400,
            "{bad}"
        );
    }
    // A refused value is echoed with its control characters escaped, never raw.
    let res = app.get_auth("/api/v2/user/accesstoken?sort=%C3%93%00.H%0A", &session).await;
    let body = expect_json(res, 400).await;
    let message = body["error"].as_str().unwrap();
    assert!(!message.chars().any(char::is_control), "{message:?}");
    assert!(message.contains("Ó\\u{0}.H\\u{a}"), "{message:?}");
    // Another user sees only their own; a token without user_manage sees nothing.
    let other = app.create_user("other@example.com").await;
    let other_session = app.login(&other).await;
    assert_eq!(ids_of(&list(&app, &other_session, "").await).len(), 1);
    let narrow = app.token_with(&session, json!({ "scope": ["profile"] })).await;
    assert_error(app.get_auth("/api/v2/user/accesstoken", &narrow).await, 403, "InsufficientScope").await;
}

#[tokio::test]
async fn a_revoked_token_is_refused_at_once() {
    let app = spawn_app().await;
    let user = app.create_user("revoker@example.com").await;
    let session = app.login(&user).await;
    let created = expect_json(app.create_token(&session, json!({ "scope": ["profile"] })).await, 200).await;
    let (id, secret) = (created["id"].as_str().unwrap(), created["token"].as_str().unwrap());
    assert_eq!(app.me(secret).await.status(), 200);
    let path = format!("/api/v2/user/accesstoken/{id}");
    let res = app.client.delete(app.url(&path)).bearer_auth(&session).send().await.unwrap();
    let revoked = expect_json(res, 200).await;
    assert_eq!(revoked["id"], id);
    assert!(revoked.get("token").is_none());
    let expires = chrono::DateTime::parse_from_rfc3339(revoked["expires"].as_str().unwrap()).unwrap();
    assert!((expires.timestamp() - custodian::clock::wall_now()).abs() <= 2, "expires is now: {revoked}");
    assert_error(app.me(secret).await, 401, "InvalidToken").await;
    assert!(!ids_of(&list(&app, &session, "").await).contains(&id.to_string()), "no longer listed");
    let again = app.client.delete(app.url(&path)).bearer_auth(&session).send().await.unwrap();
    assert_error(again, 404, "TokenNotFound").await;
    // Another user's token cannot be named.
    let other = app.create_user("victim@example.com").await;
    let other_session = app.login(&other).await;
    let theirs =
        expect_json(app.create_token(&other_session, json!({ "scope": ["profile"] })).await, 200).await;
    let path = format!("/api/v2/user/accesstoken/{}", theirs["id"].as_str().unwrap());
    let res = app.client.delete(app.url(&path)).bearer_auth(&session).send().await.unwrap();
    assert_error(res, 404, "TokenNotFound").await;
    assert_eq!(app.me(theirs["token"].as_str().unwrap()).await.status(), 200);
}

#[tokio::test]
async fn templates_are_managed_over_http_by_service_admins() {
    let app = spawn_app().await;
    let ops = app.create_user_with("ops@example.com", true).await;
    let admin = app.login(&ops).await;
    let user = app.create_user("plain@example.com").await;
    let plain = app.login(&user).await;
    let path = "/api/v2/user/accesstokentemplate";
    let fields = json!({ "scope": ["profile"], "label": "from template" });
    assert_error(app.post_auth(path, &plain, &fields).await, 403, "InsufficientScope").await;
    let t = expect_json(app.post_auth(path, &admin, &fields).await, 200).await;
    let id = t["id"].as_str().unwrap().to_string();
    assert_eq!(t["fields"], fields);
    let bad = app.post_auth(path, &admin, &json!({ "token": "x" })).await;
    assert_error(bad, 400, "InvalidField").await;
    assert_eq!(expect_json(app.get_auth(path, &admin).await, 200).await["templates"][0]["id"], id);
    assert_eq!(expect_json(app.get_auth(&format!("{path}/{id}"), &admin).await, 200).await["fields"], fields);
    // A token made from it gets its fields.
    let body = json!({ "accessTokenTemplateId": id, "otp": "000000" });
    let made = app.post_auth("/api/v2/user/accesstoken", &plain, &body).await;
    assert_eq!(expect_json(made, 200).await["label"], "from template");
    let res = app.client.delete(app.url(&format!("{path}/{id}"))).bearer_auth(&admin).send().await.unwrap();
    assert_eq!(expect_json(res, 200).await["id"], id);
    assert_error(app.get_auth(&format!("{path}/{id}"), &admin).await, 404, "TemplateNotFound").await;
}

#[tokio::test]
async fn a_template_with_a_bad_spending_limit_is_refused_when_made() {
    let app = spawn_app().await;
    let ops = app.create_user_with("ops@example.com", true).await;
    let admin = app.login(&ops).await;
    let path = "/api/v2/user/accesstokentemplate";
    let fields = json!({ "spendingLimits": [{ "coin": "btc", "txValueLimit": {} }] });
    let body = assert_error(app.post_auth(path, &admin, &fields).await, 400, "InvalidField").await;
    assert!(body["context"]["field"].as_str().unwrap_or("").contains("txValueLimit"), "{body}");
    // A duration no token may have (0 s) is refused as a token request refuses it.
    let body =
        assert_error(app.post_auth(path, &admin, &json!({ "duration": 0 })).await, 400, "InvalidField").await;
    assert_eq!(body["context"]["field"], "duration", "{body}");
    assert_eq!(expect_json(app.get_auth(path, &admin).await, 200).await["templates"], json!([]));
}

#[tokio::test]
async fn a_template_is_held_to_the_token_requests_list_caps() {
    let app = spawn_app().await;
    let ops = app.create_user_with("ops@example.com", true).await;
    let admin = app.login(&ops).await;
    let path = "/api/v2/user/accesstokentemplate";
    let wallet = "2b2c0f09e020facd54ad7d338ad39bf6";
    for (field, list) in [
        ("permittedWallets", json!(vec![wallet; 1001])),
        ("permittedEnterprises", json!(vec![wallet; 1001])),
        ("scope", json!(vec!["profile"; 65])),
        ("ipRestrict", json!(vec!["127.0.0.1"; 101])),
        ("spendingLimits", json!(vec![json!({ "coin": "btc", "txValueLimit": "1" }); 101])),
    ] {
        let body =
            assert_error(app.post_auth(path, &admin, &json!({ field: list })).await, 400, "InvalidField")
                .await;
        assert_eq!(body["context"]["field"], field, "{body}");
    }
    assert_eq!(expect_json(app.get_auth(path, &admin).await, 200).await["templates"], json!([]));
    let at_cap = json!({ "permittedWallets": vec![wallet; 1000] });
    expect_json(app.post_auth(path, &admin, &at_cap).await, 200).await;
}

#[tokio::test]
async fn a_session_is_unlocked_with_an_otp_and_locked_again() {
    let app = spawn_app().await;
    let user = app.create_user("unlock@example.com").await;
    let session = app.login(&user).await;
    let view = expect_json(app.get_auth("/api/v2/user/session", &session).await, 200).await;
    let s = &view["session"];
    assert_eq!(s["user"], user.id);
    assert_eq!(s["origin"], "test");
    assert_eq!(s["isExtensible"], false);
    assert!(s["scope"].as_array().is_some_and(|a| a.contains(&json!("wallet_view_all"))));
    assert!(s.get("unlock").is_none(), "{s}");
    for k in ["id", "ip", "created", "expires"] {
        assert!(s[k].is_string(), "{k} in {s}");
    }
    let res =
        app.post_auth("/api/v2/user/unlock", &session, &json!({ "otp": "000000", "duration": 3601 })).await;
    assert_error(res, 400, "InvalidField").await;
    let unlocked = expect_json(
        app.post_auth("/api/v2/user/unlock", &session, &json!({ "otp": "000000", "duration": 120 })).await,
        200,
    )
    .await;
    let u = &unlocked["session"]["unlock"];
    let t = |k: &str| chrono::DateTime::parse_from_rfc3339(u[k].as_str().unwrap()).unwrap().timestamp();
    assert_eq!(t("expires") - t("time"), 120, "{u}");
    let view = expect_json(app.get_auth("/api/v2/user/session", &session).await, 200).await;
    assert_eq!(view["session"]["unlock"], *u, "stored");
    // The token list shows the unlock's times; what it spent is the session view's.
    let listed = list(&app, &session, "").await;
    let shown = &listed["accessTokens"][0]["unlock"];
    assert_eq!(
        (&shown["time"], &shown["expires"]),
        (&u["time"], &u["expires"]),
        "the token view shows it too"
    );
    assert_eq!((&u["txCount"], &u["txValue"]), (&json!(0), &json!(0)), "{u}");
    let locked = expect_json(app.post_auth("/api/v2/user/lock", &session, &json!({})).await, 200).await;
    assert!(locked["session"].get("unlock").is_none(), "{locked}");
    let view = expect_json(app.get_auth("/api/v2/user/session", &session).await, 200).await;
    assert!(view["session"].get("unlock").is_none());
}

#[tokio::test]
async fn wrong_unlock_codes_count_toward_the_otp_limit() {
    let app = spawn_app_with(|c| c.environment = custodian::config::Environment::Production).await;
    let user = app.create_user("prod-unlock@example.com").await;
    let res = app.login_raw(&user.email, PASSWORD, &user.code(0)).await;
    let session = expect_json(res, 200).await["access_token"].as_str().unwrap().to_string();
    for _ in 0..5 {
        let res = app.post_auth("/api/v2/user/unlock", &session, &json!({ "otp": "000001" })).await;
        assert_error(res, 401, "InvalidOtp").await;
    }
    let res = app.post_auth("/api/v2/user/unlock", &session, &json!({ "otp": user.code(1) })).await;
    assert_error(res, 429, "TooManyOtpAttempts").await;
}

#[tokio::test]
async fn only_extensible_sessions_extend_up_to_their_maximum() {
    let app = spawn_app_with(|c| c.login.session_max_ttl = 7200).await;
    let user = app.create_user("extend@example.com").await;
    let res = app
        .post(
            "/api/v2/internal/user/login",
            &json!({ "email": user.email, "password": PASSWORD, "otp": "000000", "extensible": true }),
        )
        .await;
    let login = expect_json(res, 200).await;
    let token = login["access_token"].as_str().unwrap();
    let extended = expect_json(
        app.post_auth("/api/v2/user/extendtoken", token, &json!({ "duration": 100_000 })).await,
        200,
    )
    .await;
    let expires =
        chrono::DateTime::parse_from_rfc3339(extended["expires"].as_str().unwrap()).unwrap().timestamp();
    let created =
        chrono::DateTime::parse_from_rfc3339(extended["created"].as_str().unwrap()).unwrap().timestamp();
    assert_eq!(expires - created, 7200, "capped at login.session_max_ttl");
    let view = expect_json(app.get_auth("/api/v2/user/session", token).await, 200).await;
    assert_eq!(view["session"]["expires"], extended["expires"], "stored");
    let plain = app.login(&user).await;
    let res = app.post_auth("/api/v2/user/extendtoken", &plain, &json!({ "duration": 60 })).await;
    assert_error(res, 409, "TokenNotExtensible").await;
}

#[tokio::test]
async fn logout_revokes_the_calling_token() {
    let app = spawn_app().await;
    let user = app.create_user("bye@example.com").await;
    let (a, b) = (app.login(&user).await, app.login(&user).await);
    assert_eq!(expect_json(app.get_auth("/api/v2/user/logout", &a).await, 200).await, json!({}));
    assert_error(app.me(&a).await, 401, "InvalidToken").await;
    assert_eq!(app.me(&b).await.status(), 200, "other sessions stay");
    assert_eq!(app.post_auth("/api/v2/user/logout", &b, &json!({})).await.status(), 200);
    assert_error(app.me(&b).await, 401, "InvalidToken").await;
}
