//! BitGo's paths and BitGo's password form (issue 20 §2): the login BitGoJS sends, the users made
//! before that form was stored, and the `/api/v1` twins of the `/api/v2` routes.

use serde_json::{json, Value};

use crate::common::*;

/// BitGoJS's form of a password: hex HMAC-SHA256 keyed with the lower-cased email.
fn bitgo_form(email: &str, password: &str) -> String {
    use hmac::Mac;
    let mut m = hmac::Hmac::<sha2::Sha256>::new_from_slice(email.to_lowercase().as_bytes()).expect("key");
    m.update(password.as_bytes());
    hex::encode(m.finalize().into_bytes())
}

async fn sdk_login(app: &TestApp, email: &str, password: &str) -> reqwest::Response {
    app.post(
        "/api/auth/v1/session",
        &json!({ "email": email, "password": password, "otp": "000000", "forceSMS": false }),
    )
    .await
}

#[tokio::test]
async fn bitgo_login_takes_the_hmac_form_and_the_v2_login_the_plain_password() {
    let app = spawn_app().await;
    let user = app.create_user("Mixed.Case@example.com").await;
    let res =
        sdk_login(&app, "mixed.case@example.com", &bitgo_form("mixed.case@example.com", PASSWORD)).await;
    let body = expect_json(res, 200).await;
    assert!(body["access_token"].as_str().is_some_and(|t| t.starts_with("v2x")), "{body}");
    assert_eq!(body["user"]["username"], "mixed.case@example.com");
    // The plain password is not BitGo's form, and the form is not a password.
    assert_error(sdk_login(&app, &user.email, PASSWORD).await, 401, "InvalidCredentials").await;
    let hashed = bitgo_form(&user.email, PASSWORD);
    assert_error(app.login_raw(&user.email, &hashed, "000000").await, 401, "InvalidCredentials").await;
    app.login(&user).await;
}

#[tokio::test]
async fn a_user_made_before_the_bitgo_form_is_upgraded_at_a_plain_login() {
    let app = spawn_app().await;
    let user = app.create_user("legacy@example.com").await;
    // A hash of the plain password, as every user had before issue 20.
    let legacy = custodian::identity::password::hash(PASSWORD).expect("hash");
    let id: custodian::types::UserId = user.id.parse().expect("id");
    app.state
        .store
        .update_user(&id, custodian::store::UserChange::Password(legacy), custodian::ids::now(), &[])
        .await
        .expect("store the legacy hash");
    let form = bitgo_form(&user.email, PASSWORD);
    assert_error(sdk_login(&app, &user.email, &form).await, 401, "InvalidCredentials").await;
    app.login(&user).await;
    let stored = app.raw_sql(&format!("SELECT password_hash FROM users WHERE id = '{}'", user.id)).await;
    assert!(stored[0].starts_with("bitgo-hmac:$argon2id$"), "upgraded: {}", stored[0]);
    expect_json(sdk_login(&app, &user.email, &form).await, 200).await;
    app.login(&user).await;
}

#[tokio::test]
async fn bitgo_v1_paths_answer_as_their_v2_twins() {
    let app = spawn_app().await;
    let user = app.create_user("paths@example.com").await;
    let token = app.login(&user).await;
    let v1: Value = expect_json(app.get_auth("/api/v1/user/me", &token).await, 200).await;
    let v2: Value = expect_json(app.me(&token).await, 200).await;
    assert_eq!(v1, v2);
    let session = expect_json(app.get_auth("/api/v1/user/session", &token).await, 200).await;
    assert!(session["session"].is_object(), "{session}");
    let listed = expect_json(app.get_auth("/api/v1/user/accesstoken", &token).await, 200).await;
    assert!(listed["accessTokens"].is_array(), "{listed}");
    let ping = expect_json(app.client.get(app.url("/api/v1/ping")).send().await.expect("ping"), 200).await;
    assert_eq!(ping["status"], "service is ok!");
    let constants = expect_json(
        app.client.get(app.url("/api/v1/client/constants")).send().await.expect("constants"),
        200,
    )
    .await;
    assert!(constants["ttl"].as_u64().is_some_and(|t| t > 0), "{constants}");
    assert_eq!(constants["constants"]["server"], "custodian");
    let out =
        app.client.get(app.url("/api/v1/user/logout")).bearer_auth(&token).send().await.expect("logout");
    assert_eq!(out.status(), 200);
    assert_error(app.me(&token).await, 401, "InvalidToken").await;
}
