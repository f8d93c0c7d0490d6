//! The audit log (docs/decisions.md#token-and-session-lifecycle): entries for security-relevant changes, who may read them, and
//! the hash chain that `custodian audit verify` checks.

use std::process::Command;

use serde_json::{json, Value};

use crate::{
    common::*,
    webhooks::{fast, fixture, WALLET},
};

async fn audit(app: &TestApp, token: &str, query: &str) -> Vec<Value> {
    let body = expect_json(app.get_auth(&format!("/api/v2/auditlog{query}"), token).await, 200).await;
    body["auditLogs"].as_array().expect("auditLogs").clone()
}

fn types(entries: &[Value]) -> Vec<&str> {
    entries.iter().map(|e| e["type"].as_str().unwrap()).collect()
}

fn verify(app: &TestApp) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_custodian"))
        .args(["audit", "verify"])
        .env("CUSTODIAN_DATABASE_URL", &app._db.url)
        .env_remove("CUSTODIAN_ENVIRONMENT")
        .output()
        .expect("run custodian audit verify")
}

#[tokio::test]
async fn security_events_are_audited_without_secrets() {
    let f = fixture(fast).await;
    let app = &f.app;
    // Failures: a wrong password, a wrong OTP at token creation.
    assert_eq!(app.login_raw(&f.user.email, "wrong password!!", "000000").await.status(), 401);
    let res = app.create_token(&f.token, json!({ "otp": "123456", "scope": ["profile"] })).await;
    assert_eq!(res.status(), 401);
    // Token lifecycle.
    let created = expect_json(app.create_token(&f.token, json!({ "scope": ["profile"] })).await, 200).await;
    let (id, secret) = (created["id"].as_str().unwrap(), created["token"].as_str().unwrap());
    let del = app.client.delete(app.url(&format!("/api/v2/user/accesstoken/{id}"))).bearer_auth(&f.token);
    expect_json(del.send().await.unwrap(), 200).await;
    expect_json(app.post_auth("/api/v2/user/unlock", &f.token, &json!({ "otp": "000000" })).await, 200).await;
    expect_json(app.post_auth("/api/v2/user/lock", &f.token, &json!({})).await, 200).await;
    // Webhooks and secrets.
    let webhook_secret = f.secret().await;
    let hook = f.wallet_hook_id("https://example.com/h", "transfer").await;
    expect_json(app.post_auth(&format!("/api/v2/webhook/{hook}/unblock"), &f.token, &json!({})).await, 200)
        .await;
    let path = format!("/api/v2/tbtc/wallet/{WALLET}/webhooks");
    let res =
        app.client.delete(app.url(&path)).bearer_auth(&f.token).json(&json!({ "id": hook })).send().await;
    expect_json(res.unwrap(), 200).await;

    let entries = audit(app, &f.token, "?limit=500").await;
    let seen = types(&entries);
    for t in [
        "login.succeeded",
        "login.failed",
        "otp.failed",
        "token.created",
        "token.revoked",
        "session.unlocked",
        "session.locked",
        "webhook_secret.rotated",
        "webhook.created",
        "webhook.unblocked",
        "webhook.removed",
    ] {
        assert!(seen.contains(&t), "{t} missing from {seen:?}");
    }
    let text = serde_json::to_string(&entries).unwrap();
    // (A wrong OTP is not searched for: six digits can occur in any hex id or hash.)
    for s in [PASSWORD, "wrong password!!", secret, webhook_secret.as_str(), f.token.as_str()] {
        assert!(!text.contains(s), "a secret in the audit log: {s}");
    }
    assert!(entries.iter().all(|e| e["data"].get("otp").is_none()));
    let failed = entries.iter().find(|e| e["type"] == "login.failed").unwrap();
    assert_eq!(failed["data"]["reason"], "invalid_credentials");
    assert_eq!(failed["userId"], f.user.id);
    let revoked = entries.iter().find(|e| e["type"] == "token.revoked").unwrap();
    assert_eq!(revoked["data"]["id"], id);
    assert!(revoked["requestId"].as_str().is_some_and(custodian::types::is_id), "{revoked}");
    let hooked = entries.iter().find(|e| e["type"] == "webhook.created").unwrap();
    assert_eq!((&hooked["walletId"], &hooked["enterpriseId"]), (&json!(WALLET), &json!(f.enterprise)));
    // Newest first; filters by type and date.
    let only = audit(app, &f.token, "?type=token.created").await;
    assert!(!only.is_empty() && only.iter().all(|e| e["type"] == "token.created"));
    assert!(audit(app, &f.token, "?dateGte=2999-01-01T00:00:00Z").await.is_empty());
    let unknown = app.get_auth("/api/v2/auditlog?type=token.stolen", &f.token).await;
    assert_eq!(assert_error(unknown, 400, "InvalidField").await["context"]["field"], "type");
    let logout = app.get_auth("/api/v2/user/logout", &f.token).await;
    assert_eq!(logout.status(), 200);
    let again = app.login(&f.user).await;
    assert_eq!(types(&audit(app, &again, "?limit=2").await), ["login.succeeded", "logout"]);
}

#[tokio::test]
async fn readers_see_their_own_their_enterprises_or_everything() {
    let app = spawn_app().await;
    let (alice, bob) = (app.create_user("alice@example.com").await, app.create_user("bob@example.com").await);
    let carol = app.create_user("carol@example.com").await;
    let ops = app.create_user_with("ops@example.com", true).await;
    let e = app.create_enterprise("Acme", &[(&alice, true), (&bob, false)]).await;
    let (a, b, c, o) =
        (app.login(&alice).await, app.login(&bob).await, app.login(&carol).await, app.login(&ops).await);
    // Bob does something in the enterprise: a token bound to it.
    expect_json(app.create_token(&b, json!({ "scope": ["profile"], "enterprise": e })).await, 200).await;
    let bobs = |entries: &[Value]| entries.iter().any(|x| x["userId"] == bob.id);
    assert!(bobs(&audit(&app, &b, "").await), "his own");
    let seen_by_admin = audit(&app, &a, "").await;
    assert!(
        seen_by_admin.iter().any(|x| x["type"] == "token.created" && x["enterpriseId"] == e),
        "the admin sees the enterprise's"
    );
    assert!(
        !seen_by_admin.iter().any(|x| x["type"] == "login.succeeded" && x["userId"] == bob.id),
        "not his logins"
    );
    assert!(!bobs(&audit(&app, &c, "").await), "another user sees nothing of his");
    assert!(bobs(&audit(&app, &o, "").await), "a service admin sees all");
    // The scope rule: auditlogs_view_all or a login session.
    let narrow = app.token_with(&a, json!({ "scope": ["profile"] })).await;
    assert_error(app.get_auth("/api/v2/auditlog", &narrow).await, 403, "InsufficientScope").await;
    let reader = app.token_with(&a, json!({ "scope": ["auditlogs_view_all"] })).await;
    assert_eq!(app.get_auth("/api/v2/auditlog", &reader).await.status(), 200);
    let res = app.get_auth("/api/v2/auditlog?dateGte=yesterday", &a).await;
    assert_error(res, 400, "InvalidField").await;
}

#[tokio::test]
async fn verify_finds_an_edited_entry() {
    let app = spawn_app().await;
    let user = app.create_user("chain@example.com").await;
    for _ in 0..3 {
        app.login(&user).await;
    }
    let out = verify(&app);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert_eq!(String::from_utf8_lossy(&out.stdout).trim(), "ok 4 entries", "user.created and three logins");
    let ids = app.raw_sql("SELECT id FROM audit_log ORDER BY seq").await;
    app.raw_sql(&format!("UPDATE audit_log SET ip = '203.0.113.9' WHERE id = '{}'", ids[1])).await;
    let out = verify(&app);
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains(&ids[1]) && err.contains("broken"), "{err}");
}

#[tokio::test]
async fn parallel_appends_keep_one_linear_chain() {
    // Parallel OTP checks count as failures until they pass: raise that limit for this test.
    let app = spawn_app_with(|c| c.login.max_otp_failures = 1000).await;
    let user = app.create_user("busy@example.com").await;
    let session = app.login(&user).await;
    let creations = (0..20).map(|_| app.create_token(&session, json!({ "scope": ["profile"] })));
    let statuses: Vec<u16> =
        futures_util::future::join_all(creations).await.iter().map(|r| r.status().as_u16()).collect();
    assert!(statuses.iter().all(|s| *s == 200), "{statuses:?}");
    let out = verify(&app);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert_eq!(
        String::from_utf8_lossy(&out.stdout).trim(),
        "ok 22 entries",
        "user.created, a login, 20 tokens"
    );
}

#[tokio::test]
async fn operator_changes_to_users_memberships_and_wallets_are_audited() {
    let app = spawn_app().await;
    let ops = app.create_user_with("ops@example.com", true).await;
    let alice = app.create_user("alice@example.com").await;
    let e = app.create_enterprise("Acme", &[]).await;
    custodian::identity::users::add_member(&app.state.store, &e.parse().unwrap(), &alice.email, true)
        .await
        .expect("member");
    app.import_wallet(WALLET, &e, &[&alice.id]).await;
    let admin = app.login(&ops).await;
    let res = app
        .post_auth(
            &format!("/api/v2/internal/wallet/{WALLET}/balance"),
            &admin,
            &json!({ "balanceString": "5" }),
        )
        .await;
    expect_json(res, 200).await;
    let all = audit(&app, &admin, "?limit=500").await;
    let find =
        |t: &str| all.iter().find(|x| x["type"] == t).cloned().unwrap_or_else(|| panic!("{t} in {all:?}"));
    assert_eq!(find("user.created")["userId"], alice.id);
    let created = find("enterprise.created");
    assert_eq!((&created["enterpriseId"], &created["data"]["name"]), (&json!(e), &json!("Acme")));
    let member = find("enterprise.member_set");
    assert_eq!(
        (&member["userId"], &member["enterpriseId"], &member["data"]["isAdmin"]),
        (&json!(alice.id), &json!(e), &json!(true))
    );
    assert_eq!(find("wallet.imported")["data"]["walletIds"], json!([WALLET]));
    let balance = find("wallet.balance_set");
    assert_eq!((&balance["walletId"], &balance["userId"]), (&json!(WALLET), &json!(ops.id)));
}

#[tokio::test]
async fn throttling_and_extension_are_audited_once_not_per_attempt() {
    let app = spawn_app().await;
    let user = app.create_user("target@example.com").await;
    for _ in 0..8 {
        app.login_raw("ghost@example.com", "not the password", "000000").await;
    }
    let res = app
        .post(
            "/api/v2/internal/user/login",
            &json!({ "email": user.email, "password": PASSWORD, "otp": "000000", "extensible": true }),
        )
        .await;
    let token = expect_json(res, 200).await["access_token"].as_str().unwrap().to_string();
    expect_json(app.post_auth("/api/v2/user/extendtoken", &token, &json!({ "duration": 7200 })).await, 200)
        .await;
    let session = app.login(&user).await;
    for _ in 0..8 {
        app.create_token(&session, json!({ "otp": "111111", "scope": ["profile"] })).await;
    }
    let types = app.raw_sql("SELECT type FROM audit_log").await;
    let count = |t: &str| types.iter().filter(|x| *x == t).count();
    assert_eq!(count("login.failed"), 5, "{types:?}");
    assert_eq!(count("login.throttled"), 1, "three refusals, one entry a minute");
    assert_eq!(count("otp.failed"), 5);
    assert_eq!(count("otp.throttled"), 1);
    assert_eq!(count("token.extended"), 1);
}
