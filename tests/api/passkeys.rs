//! Passkeys through the API, with a software authenticator (`soft_passkey`): registration
//! after a fresh factor, sign-in as BitGoJS's `authenticateWithPasskey` sends it, the
//! assertion that stands for an OTP, removal, and every refusal (replay, wrong origin,
//! counter regression, no fresh factor, limits).

use reqwest::Response;
use serde_json::{json, Value};

use crate::{common::*, soft_passkey::SoftPasskey};

const ORIGIN: &str = "http://localhost:3080";

/// A user with a registered soft passkey, and a session of theirs.
pub async fn with_passkey(app: &TestApp, email: &str) -> (TestUser, String, SoftPasskey, String) {
    let user = app.create_user(email).await;
    let session = app.login(&user).await;
    let mut key = SoftPasskey::new("localhost", ORIGIN);
    let options = expect_json(app.get_auth("/api/v2/user/otp/webauthn/register", &session).await, 200).await;
    let credential = key.register(&options).to_string();
    let add =
        json!({ "type": "webauthn", "otp": credential, "label": "laptop", "verificationOtp": "000000" });
    let device = expect_json(app.put_auth("/api/v2/user/otp", &session, &add).await, 200).await;
    let id = device["id"].as_str().unwrap().to_string();
    (user, session, key, id)
}

pub async fn challenge(app: &TestApp, email: Option<&str>) -> Value {
    let body = email.map_or(json!({}), |e| json!({ "email": e }));
    expect_json(app.post("/api/auth/v1/passkey/challenge", &body).await, 200).await
}

pub async fn sign_in(app: &TestApp, assertion: &Value) -> Response {
    let body = json!({ "passkey": assertion.to_string(), "userId": assertion["response"]["userHandle"] });
    app.post("/api/auth/v1/session", &body).await
}

#[tokio::test]
async fn a_passkey_is_added_with_a_fresh_factor_and_signs_in_in_place_of_password_and_otp() {
    let app = spawn_app().await;
    let user = app.create_user("pk@example.com").await;
    let session = app.login(&user).await;
    let options = expect_json(app.get_auth("/api/v2/user/otp/webauthn/register", &session).await, 200).await;
    let handle = options["publicKey"]["user"]["id"].as_str().unwrap();
    assert_eq!(custodian::identity::webauthn::user_handle(&user.id.parse().unwrap()).as_bytes().len(), 16);
    assert_eq!(hex::encode(base64_url(handle)), user.id, "the user handle is the id's 16 bytes");
    assert_eq!(options["publicKey"]["authenticatorSelection"]["userVerification"], "required");
    let mut key = SoftPasskey::new("localhost", ORIGIN);
    let credential = key.register(&options).to_string();
    // A session alone cannot add a passkey.
    let bare = json!({ "type": "webauthn", "otp": credential, "label": "laptop" });
    assert_error(app.put_auth("/api/v2/user/otp", &session, &bare).await, 401, "InvalidOtp").await;
    let refused = app.raw_sql("SELECT data FROM audit_log WHERE type = 'otp.failed'").await;
    assert!(refused.iter().any(|d| d.contains("no fresh factor")), "audited: {refused:?}");
    let add =
        json!({ "type": "webauthn", "otp": credential, "label": "laptop", "verificationOtp": "000000" });
    let device = expect_json(app.put_auth("/api/v2/user/otp", &session, &add).await, 200).await;
    assert_eq!((device["type"].as_str(), device["label"].as_str()), (Some("webauthn"), Some("laptop")));
    // The challenge was used: the same credential again is refused.
    assert_error(app.put_auth("/api/v2/user/otp", &session, &add).await, 400, "InvalidField").await;
    let me = expect_json(app.me(&session).await, 200).await;
    let devices = me["user"]["otpDevices"].as_array().unwrap();
    assert!(devices.iter().any(|d| d["type"] == "webauthn" && d["id"] == device["id"]), "{devices:?}");

    // Sign in, with or without an email.
    for email in [Some("pk@example.com"), None] {
        let assertion = key.assert(&challenge(&app, email).await);
        let login = expect_json(sign_in(&app, &assertion).await, 200).await;
        assert_eq!(login["grant_type"], "passkey");
        let token = login["access_token"].as_str().unwrap();
        assert_eq!(expect_json(app.me(token).await, 200).await["user"]["id"], user.id.as_str());
    }
    let me = expect_json(app.me(&session).await, 200).await;
    let used = me["user"]["otpDevices"].as_array().unwrap().iter().find(|d| d["type"] == "webauthn").cloned();
    assert!(used.unwrap()["lastUsed"].is_string(), "a use is recorded");
}

fn base64_url(s: &str) -> Vec<u8> {
    use base64::Engine;
    base64::engine::general_purpose::URL_SAFE_NO_PAD.decode(s).unwrap()
}

#[tokio::test]
async fn replayed_foreign_origin_regressed_and_unknown_assertions_are_refused_and_audited() {
    let app = spawn_app().await;
    let (_, _, mut key, _) = with_passkey(&app, "pk@example.com").await;
    let assertion = key.assert(&challenge(&app, Some("pk@example.com")).await);
    expect_json(sign_in(&app, &assertion).await, 200).await;
    // The same answer twice: its challenge is gone.
    assert_error(sign_in(&app, &assertion).await, 401, "InvalidCredentials").await;
    // Another origin (a phishing page).
    let options = challenge(&app, None).await;
    let phished = key.assert_with(&options, key.counter + 1, "https://custodian.example.evil");
    assert_error(sign_in(&app, &phished).await, 401, "InvalidCredentials").await;
    // The right origin, but in a frame of another (crossOrigin), refused as registration does.
    let framed = key.assert_in_frame(&challenge(&app, None).await, key.counter + 1);
    assert_error(sign_in(&app, &framed).await, 401, "InvalidCredentials").await;
    // A counter that went backwards: a cloned authenticator.
    let cloned = key.assert_with(&challenge(&app, None).await, 1, ORIGIN);
    assert_error(sign_in(&app, &cloned).await, 401, "InvalidCredentials").await;
    let regressed = app.raw_sql("SELECT type FROM audit_log WHERE type = 'passkey.counter_regressed'").await;
    assert_eq!(regressed.len(), 1);
    // A challenge for one user cannot be answered by another's passkey.
    let (_, _, mut other, _) = with_passkey(&app, "other@example.com").await;
    let crossed = other.assert(&challenge(&app, Some("pk@example.com")).await);
    assert_error(sign_in(&app, &crossed).await, 401, "InvalidCredentials").await;
    // A userId that is not the assertion's, and one that is not a handle.
    let mut mismatched = json!({ "passkey": key.assert(&challenge(&app, None).await).to_string() });
    mismatched["userId"] = other.assert(&challenge(&app, None).await)["response"]["userHandle"].clone();
    assert_error(app.post("/api/auth/v1/session", &mismatched).await, 401, "InvalidCredentials").await;
    let bad = json!({ "passkey": "{}", "userId": "not a handle" });
    assert_error(app.post("/api/auth/v1/session", &bad).await, 400, "InvalidField").await;
    let failed =
        app.raw_sql("SELECT data FROM audit_log WHERE type = 'login.failed' AND data LIKE '%passkey%'").await;
    assert!(failed.len() >= 4, "{failed:?}");
}

#[tokio::test]
async fn the_sign_in_challenge_is_the_same_for_an_unknown_email() {
    let app = spawn_app().await;
    with_passkey(&app, "pk@example.com").await;
    let shape = |v: &Value| {
        let mut keys: Vec<String> = v["publicKey"].as_object().unwrap().keys().cloned().collect();
        keys.sort();
        (keys, v["publicKey"]["allowCredentials"].clone(), v["publicKey"]["rpId"].clone())
    };
    let known = challenge(&app, Some("pk@example.com")).await;
    let unknown = challenge(&app, Some("nobody@example.com")).await;
    assert_eq!(shape(&known), shape(&unknown));
    assert_ne!(known["publicKey"]["challenge"], unknown["publicKey"]["challenge"]);
}

#[tokio::test]
async fn a_passkey_assertion_stands_for_the_otp_once() {
    let app = spawn_app().await;
    let (_, session, mut key, _) = with_passkey(&app, "pk@example.com").await;
    let options = expect_json(app.get_auth("/api/v2/user/otp/webauthn/auth", &session).await, 200).await;
    assert_eq!(options["publicKey"]["allowCredentials"].as_array().map(Vec::len), Some(1));
    let assertion = key.assert(&options).to_string();
    let fields = json!({ "label": "by passkey", "scope": ["wallet_view_all"], "otp": assertion });
    expect_json(app.post_auth("/api/v2/user/accesstoken", &session, &fields).await, 200).await;
    assert_error(app.post_auth("/api/v2/user/accesstoken", &session, &fields).await, 401, "InvalidOtp").await;
    let options = expect_json(app.get_auth("/api/v2/user/otp/webauthn/auth", &session).await, 200).await;
    let unlock = json!({ "otp": key.assert(&options).to_string() });
    expect_json(app.post_auth("/api/v2/user/unlock", &session, &unlock).await, 200).await;
    // Without a passkey there is nothing to assert.
    let bare = app.create_user("bare@example.com").await;
    let bare = app.login(&bare).await;
    assert_error(app.get_auth("/api/v2/user/otp/webauthn/auth", &bare).await, 404, "NotFound").await;
}

#[tokio::test]
async fn removing_a_passkey_needs_a_fresh_factor_and_then_it_signs_in_no_more() {
    let app = spawn_app().await;
    let (_, session, mut key, id) = with_passkey(&app, "pk@example.com").await;
    // An id that is none of the caller's passkeys is 404 before any factor is asked for.
    let unknown = app.url("/api/v1/user/otp/0123456789abcdef0123456789abcdef");
    assert_error(app.client.delete(unknown).bearer_auth(&session).send().await.unwrap(), 404, "NotFound")
        .await;
    let path = format!("/api/v1/user/otp/{id}");
    let res = app.client.delete(app.url(&path)).bearer_auth(&session).send().await.unwrap();
    assert_error(res, 401, "InvalidOtp").await;
    let res = app.client.delete(app.url(&path)).bearer_auth(&session).json(&json!({ "otp": "000000" }));
    assert_eq!(expect_json(res.send().await.unwrap(), 200).await["id"], id.as_str());
    let res = app.client.delete(app.url(&path)).bearer_auth(&session).json(&json!({ "otp": "000000" }));
    assert_error(res.send().await.unwrap(), 404, "NotFound").await;
    let assertion = key.assert(&challenge(&app, None).await);
    assert_error(sign_in(&app, &assertion).await, 401, "InvalidCredentials").await;
    let audit = app.raw_sql("SELECT type FROM audit_log WHERE type LIKE 'user.passkey%' ORDER BY seq").await;
    assert_eq!(audit, ["user.passkey_added", "user.passkey_removed"]);
}

#[tokio::test]
async fn passkeys_per_user_and_waiting_challenges_are_bounded() {
    let app = spawn_app_with(|c| {
        c.passkeys.max_per_user = 1;
        c.passkeys.max_pending_challenges = 3;
    })
    .await;
    let (_, session, _, _) = with_passkey(&app, "pk@example.com").await;
    let options = expect_json(app.get_auth("/api/v2/user/otp/webauthn/register", &session).await, 200).await;
    let credential = SoftPasskey::new("localhost", ORIGIN).register(&options).to_string();
    let add = json!({ "type": "webauthn", "otp": credential, "verificationOtp": "000000" });
    assert_error(app.put_auth("/api/v2/user/otp", &session, &add).await, 409, "AlreadyExists").await;
    for _ in 0..3 {
        challenge(&app, None).await;
    }
    assert_error(app.post("/api/auth/v1/passkey/challenge", &json!({})).await, 503, "ServerBusy").await;
    // One client cannot hold them all: past its share it waits, and others still get theirs.
    let app = spawn_app_with(|c| c.passkeys.max_pending_per_client = 2).await;
    challenge(&app, None).await;
    challenge(&app, Some("pk@example.com")).await;
    let res = app.post("/api/auth/v1/passkey/challenge", &json!({})).await;
    assert!(res.headers().contains_key("retry-after"));
    assert_error(res, 429, "TooManyRequests").await;
}

#[tokio::test]
async fn refused_passkey_attempts_count_toward_the_login_lockout() {
    let app = spawn_app_with(|c| {
        c.login.max_failures_per_email = 3;
        c.login.email_delay_after = 100;
    })
    .await;
    let (user, _, mut key, _) = with_passkey(&app, "pk@example.com").await;
    for _ in 0..3 {
        let phished = key.assert_with(&challenge(&app, None).await, key.counter + 1, "https://evil.example");
        assert_error(sign_in(&app, &phished).await, 401, "InvalidCredentials").await;
    }
    // Locked: a good passkey, and the password, wait like any locked login.
    let good = key.assert(&challenge(&app, None).await);
    let res = sign_in(&app, &good).await;
    assert_eq!(res.status(), 429);
    assert_eq!(app.login_raw(&user.email, PASSWORD, "000000").await.status(), 429);
}

#[tokio::test]
async fn an_operator_removes_a_users_passkeys_and_it_is_audited() {
    use custodian::identity::user_admin::{remove_passkeys, By};
    let app = spawn_app().await;
    let (user, _, mut key, _) = with_passkey(&app, "pk@example.com").await;
    let (_, removed) = remove_passkeys(&app.state.store, "pk@example.com", By::Operator).await.unwrap();
    assert_eq!(removed, 1);
    let assertion = key.assert(&challenge(&app, None).await);
    assert_error(sign_in(&app, &assertion).await, 401, "InvalidCredentials").await;
    assert_eq!(
        app.login_raw(&user.email, PASSWORD, "000000").await.status(),
        200,
        "password and TOTP still work"
    );
    let audit = app.raw_sql("SELECT data FROM audit_log WHERE type = 'user.passkeys_removed_by_admin'").await;
    assert_eq!(audit.len(), 1);
    assert!(audit[0].contains("\"removed\":1"), "{audit:?}");
}
