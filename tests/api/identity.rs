//! Login (§4.2), authentication (§5) and scope denials.

use custodian::config::Environment;
use serde_json::{json, Value};

use crate::common::*;

const USER_REQUIRED: &[&str] = &[
    "agreements",
    "allowedCoins",
    "serviceEmployee",
    "currency",
    "disableReset2FA",
    "organizations",
    "featureFlags",
    "forceResetPassword",
    "identity",
    "otpDevices",
    "phone",
    "timezone",
    "id",
    "username",
    "name",
    "enterprises",
    "email",
];

#[tokio::test]
async fn login_with_real_totp_returns_every_required_field() {
    let app = spawn_app().await;
    let user = app.create_user("Alice@Example.com").await;
    let enterprise = app.create_enterprise("Acme", &[(&user, true)]).await;
    let res = app.login_raw("alice@example.com", PASSWORD, &user.code(0)).await;
    assert_eq!(res.status(), 200);
    let body: Value = res.json().await.unwrap();
    for f in
        ["expires_at", "expires_in", "scope", "token_type", "grant_type", "user", "access_token", "token_id"]
    {
        assert!(body.get(f).is_some(), "{f} in {body}");
    }
    assert_eq!(body["token_type"], "bearer");
    assert_eq!(body["grant_type"], "password");
    assert_eq!(body["expires_in"], 3600);
    let expires_at = body["expires_at"].as_i64().unwrap();
    assert!((expires_at - custodian::clock::wall_now() - 3600).abs() <= 2);
    assert!(custodian::types::is_id(body["token_id"].as_str().unwrap()));
    let token = body["access_token"].as_str().unwrap();
    assert!(token.starts_with("v2x") && token.len() == 67);
    assert!(body["scope"].as_array().unwrap().iter().any(|s| s == "wallet_view_all"));
    let u = &body["user"];
    for f in USER_REQUIRED {
        assert!(u.get(*f).is_some(), "user.{f} in {u}");
    }
    assert_eq!(u["id"], user.id.as_str());
    assert_eq!(u["username"], "alice@example.com");
    assert_eq!(u["name"]["first"], "Test");
    assert_eq!(u["serviceEmployee"], false);
    assert_eq!(u["enterprises"][0]["id"], enterprise.as_str());
    assert_eq!(u["otpDevices"][0]["type"], "totp");
    assert!(u["lastLogin"].is_string());

    // The token works, and only its hash is stored.
    let me = app.me(token).await;
    assert_eq!(me.status(), 200);
    let me: Value = me.json().await.unwrap();
    assert_eq!(me["user"]["id"], user.id.as_str());
    let stored =
        app.state.store.token_by_hash(&custodian::identity::bearer::hash_token(token)).await.unwrap();
    assert_eq!(stored.unwrap().token_hash.len(), 64);
}

#[tokio::test]
async fn login_rejects_replayed_otp() {
    let app = spawn_app().await;
    let user = app.create_user("bob@example.com").await;
    let code = user.code(0);
    assert_eq!(app.login_raw(&user.email, PASSWORD, &code).await.status(), 200);
    let res = app.login_raw(&user.email, PASSWORD, &code).await;
    let body = assert_error(res, 401, "InvalidOtp").await;
    assert_eq!(body["needsOTP"], true);
    // An older step is refused too; the next one is accepted.
    assert_eq!(app.login_raw(&user.email, PASSWORD, &user.code(-1)).await.status(), 401);
    assert_eq!(app.login_raw(&user.email, PASSWORD, &user.code(1)).await.status(), 200);
}

#[tokio::test]
async fn login_rejects_wrong_password_and_unknown_email() {
    let app = spawn_app().await;
    let user = app.create_user("carol@example.com").await;
    let res = app.login_raw(&user.email, "wrong password 123", &user.code(0)).await;
    let body = assert_error(res, 401, "InvalidCredentials").await;
    assert!(body.get("needsOTP").is_none());
    let res = app.login_raw("nobody@example.com", PASSWORD, "000000").await;
    assert_error(res, 401, "InvalidCredentials").await;
}

#[tokio::test]
async fn login_rejects_wrong_or_missing_otp_with_needs_otp() {
    let app = spawn_app().await;
    let user = app.create_user("dan@example.com").await;
    let wrong = if user.code(0) == "123456" { "654321" } else { "123456" };
    let res = app.login_raw(&user.email, PASSWORD, wrong).await;
    let body = assert_error(res, 401, "InvalidOtp").await;
    assert_eq!(body["needsOTP"], true);
    let res =
        app.post("/api/v2/internal/user/login", &json!({ "email": user.email, "password": PASSWORD })).await;
    let body = assert_error(res, 401, "InvalidOtp").await;
    assert_eq!(body["needsOTP"], true);
}

#[tokio::test]
async fn login_locks_out_an_email_after_five_failures() {
    let app = spawn_app().await;
    let user = app.create_user("erin@example.com").await;
    for _ in 0..5 {
        assert_eq!(app.login_raw(&user.email, "not the password", "000000").await.status(), 401);
    }
    let res = app.login_raw(&user.email, PASSWORD, "000000").await;
    let retry: u64 = res.headers()["retry-after"].to_str().unwrap().parse().unwrap();
    assert!((1..=900).contains(&retry), "Retry-After {retry}");
    let body = assert_error(res, 429, "TooManyRequests").await;
    assert_eq!(body["context"]["retryAfter"], retry);
    // Another email from the same address is not locked by the per-email limit.
    let other = app.create_user("frank@example.com").await;
    assert_eq!(app.login_raw(&other.email, PASSWORD, "000000").await.status(), 200);
}

#[tokio::test]
async fn login_limits_failures_per_client_address() {
    let app = spawn_app_with(|c| c.login.max_failures_per_ip = 3).await;
    let user = app.create_user("gina@example.com").await;
    for i in 0..3 {
        let res = app.login_raw(&format!("nobody{i}@example.com"), "not the password", "000000").await;
        assert_eq!(res.status(), 401);
    }
    let res = app.login_raw(&user.email, PASSWORD, "000000").await;
    assert_error(res, 429, "TooManyRequests").await;
}

#[tokio::test]
async fn production_refuses_the_fixed_test_code() {
    let app = spawn_app_with(|c| c.environment = Environment::Production).await;
    let user = app.create_user("hana@example.com").await;
    let res = app.login_raw(&user.email, PASSWORD, "000000").await;
    assert_error(res, 401, "InvalidOtp").await;
    let res = app.login_raw(&user.email, PASSWORD, &user.code(0)).await;
    assert_eq!(res.status(), 200);
    let body: Value = res.json().await.unwrap();
    assert!(!body["scope"].as_array().unwrap().iter().any(|s| s == "all"), "no `all` in production");
}

#[tokio::test]
async fn reset_2fa_login_gives_a_profile_only_token() {
    let app = spawn_app().await;
    let user = app.create_user("ivan@example.com").await;
    let res = app
        .post(
            "/api/v2/internal/user/login",
            &json!({ "email": user.email, "password": PASSWORD, "otp": "000000", "forReset2FA": true }),
        )
        .await;
    assert_eq!(res.status(), 200);
    let body: Value = res.json().await.unwrap();
    assert_eq!(body["scope"], json!(["openid", "profile"]));
    let token = body["access_token"].as_str().unwrap();
    assert_eq!(app.me(token).await.status(), 200);
    let res = app.create_token(token, json!({})).await;
    assert_error(res, 403, "InsufficientScope").await;
}

#[tokio::test]
async fn extensible_login_marks_the_token() {
    let app = spawn_app().await;
    let user = app.create_user("jo@example.com").await;
    let res = app
        .post(
            "/api/v2/internal/user/login",
            &json!({ "email": user.email, "password": PASSWORD, "otp": "000000", "extensible": true }),
        )
        .await;
    let body: Value = res.json().await.unwrap();
    let hash = custodian::identity::bearer::hash_token(body["access_token"].as_str().unwrap());
    let t = app.state.store.token_by_hash(&hash).await.unwrap().unwrap();
    assert!(t.is_extensible);
}

#[tokio::test]
async fn requests_without_usable_token_get_401_with_auth_required() {
    let app = spawn_app().await;
    let res = app.client.get(app.url("/api/v2/user/me")).send().await.unwrap();
    assert_eq!(res.headers()["x-auth-required"], "true");
    assert_error(res, 401, "AuthenticationRequired").await;
    let res = app.me(&format!("v2x{}", "a".repeat(64))).await;
    assert_eq!(res.headers()["x-auth-required"], "true");
    assert_error(res, 401, "InvalidToken").await;
    let res = app.me("garbage").await;
    assert_error(res, 401, "InvalidToken").await;
    let res =
        app.client.get(app.url("/api/v2/user/me")).header("authorization", "Basic abc").send().await.unwrap();
    assert_error(res, 401, "AuthenticationRequired").await;
}

/// The scheme is matched case-insensitively (RFC 9110 §11.1).
#[tokio::test]
async fn the_bearer_scheme_is_case_insensitive() {
    let app = spawn_app().await;
    let user = app.create_user("case@example.com").await;
    let session = app.login(&user).await;
    for scheme in ["Bearer", "bearer", "BEARER", "bEaReR"] {
        let res = app
            .client
            .get(app.url("/api/v2/user/me"))
            .header("authorization", format!("{scheme} {session}"))
            .send()
            .await
            .unwrap();
        assert_eq!(res.status(), 200, "scheme {scheme}");
    }
}

#[tokio::test]
async fn expired_token_is_refused() {
    let app = spawn_app().await;
    let user = app.create_user("kim@example.com").await;
    let session = app.login(&user).await;
    let token = app.token_with(&session, json!({ "scope": ["profile"], "duration": 1 })).await;
    // Valid for its one second, then refused: wait for the refusal, not for a fixed time.
    let res = crate::common::until("the one-second token to expire", 5, || async {
        let res = app.me(&token).await;
        (res.status() == 401).then_some(res)
    })
    .await;
    assert_eq!(res.headers()["x-auth-required"], "true");
    assert_error(res, 401, "TokenExpired").await;
}

#[tokio::test]
async fn token_is_refused_outside_its_ip_restriction() {
    let app = spawn_app().await;
    let user = app.create_user("lee@example.com").await;
    let session = app.login(&user).await;
    let outside =
        app.token_with(&session, json!({ "scope": ["profile"], "ipRestrict": ["10.0.0.0/8"] })).await;
    let res = app.me(&outside).await;
    assert_error(res, 401, "IpNotAllowed").await;
    // X-Forwarded-For is ignored from a peer that is not a trusted proxy.
    let res = app
        .client
        .get(app.url("/api/v2/user/me"))
        .bearer_auth(&outside)
        .header("x-forwarded-for", "10.1.2.3")
        .send()
        .await
        .unwrap();
    assert_eq!(res.status(), 401);
    let inside = app.token_with(&session, json!({ "scope": ["profile"], "ipRestrict": ["127.0.0.1"] })).await;
    assert_eq!(app.me(&inside).await.status(), 200);
}

#[tokio::test]
async fn trusted_proxy_forwarded_address_is_used() {
    let app = spawn_app_with(|c| c.trusted_proxies = vec!["127.0.0.1/32".parse().unwrap()]).await;
    let user = app.create_user("max@example.com").await;
    let session = app.login(&user).await;
    let token = app.token_with(&session, json!({ "scope": ["profile"], "ipRestrict": ["10.0.0.0/8"] })).await;
    let res = app
        .client
        .get(app.url("/api/v2/user/me"))
        .bearer_auth(&token)
        .header("x-forwarded-for", "203.0.113.9, 10.1.2.3")
        .send()
        .await
        .unwrap();
    assert_eq!(res.status(), 200);
    let res = app
        .client
        .get(app.url("/api/v2/user/me"))
        .bearer_auth(&token)
        .header("x-forwarded-for", "203.0.113.9")
        .send()
        .await
        .unwrap();
    assert_error(res, 401, "IpNotAllowed").await;
}

#[tokio::test]
async fn token_without_profile_scope_is_denied_the_profile() {
    let app = spawn_app().await;
    let user = app.create_user("nina@example.com").await;
    let session = app.login(&user).await;
    let token = app.token_with(&session, json!({ "scope": ["wallet_view_all"] })).await;
    let res = app.me(&token).await;
    let body = assert_error(res, 403, "InsufficientScope").await;
    assert_eq!(body["context"]["requiredScope"], "profile");
}

/// TOTP steps follow the service's clock: a code is used once, and once the clock has moved
/// three steps on, the code of the wall clock's step is too old and the code of the service's
/// new step is taken (RFC 6238 §4, §5.2).
#[tokio::test]
async fn totp_steps_follow_the_services_clock() {
    let app = spawn_app_with(|c| c.environment = Environment::Production).await;
    let user = app.create_user("steps@example.com").await;
    let now_code = user.code(0);
    assert_eq!(app.login_raw(&user.email, PASSWORD, &now_code).await.status(), 200);
    assert_error(app.login_raw(&user.email, PASSWORD, &now_code).await, 401, "InvalidOtp").await;
    let steps = 3;
    app.state.store.clock().advance(std::time::Duration::from_secs(30 * steps));
    assert_error(app.login_raw(&user.email, PASSWORD, &user.code(-1)).await, 401, "InvalidOtp").await;
    assert_eq!(app.login_raw(&user.email, PASSWORD, &user.code(steps as i64)).await.status(), 200);
}
