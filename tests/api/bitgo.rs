//! BitGo's paths and BitGo's password form (docs/decisions.md#bitgos-paths-and-password-form): the login BitGoJS sends, the users made
//! before that form was stored, and the `/api/v1` twins of the `/api/v2` routes.

use serde_json::{json, Value};

use crate::common::*;

/// BitGoJS's form of a password: hex HMAC-SHA256 keyed with the lower-cased email.
fn bitgo_form(email: &str, password: &str) -> String {
    crate::webhooks::hmac_hex(email.to_lowercase().as_bytes(), password.as_bytes())
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
    // A hash of the plain password, as every user had before BitGo's password form.
    let legacy = custodian::identity::password::hash(PASSWORD).expect("hash");
    let id: custodian::types::UserId = user.id.parse().expect("id");
    app.state
        .store
        .update_user(&id, custodian::store::UserChange::Password(legacy), custodian::clock::wall_now(), &[])
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

#[tokio::test]
async fn one_wallet_its_transfer_and_the_coin_notifications_read_as_bitgo_serves_them() {
    use crate::webhooks::{fixture, WALLET};
    let f = fixture(|_| {}).await;
    let got = expect_json(
        f.app.get_auth(&format!("/api/v2/tbtc/wallet/{WALLET}?expandBalance=true"), &f.token).await,
        200,
    )
    .await;
    assert_eq!(got["id"], WALLET);
    assert_eq!(got["coin"], "tbtc");
    assert!(got["balanceString"].is_string(), "rendered as the lookup renders it: {got}");
    let looked = f.app.lookup(&f.token, "?expandBalance=true", &json!({ "ids": [WALLET] })).await;
    assert_eq!(expect_json(looked, 200).await["wallets"][0], got);
    assert_error(
        f.app.get_auth(&format!("/api/v2/btc/wallet/{WALLET}"), &f.token).await,
        404,
        "WalletNotFound",
    )
    .await;
    let stranger = f.app.create_user("stranger@example.com").await;
    let other = f.app.login(&stranger).await;
    assert_error(
        f.app.get_auth(&format!("/api/v2/tbtc/wallet/{WALLET}"), &other).await,
        404,
        "WalletNotFound",
    )
    .await;

    let admin = f.admin_token().await;
    let event = json!({ "eventId": "t-1", "type": "transfer", "walletId": WALLET, "coin": "tbtc",
        "transferId": "tr-77", "hash": "0xfeed", "state": "confirmed", "valueString": "5000" });
    f.event(&admin, event).await;
    let path = format!("/api/v2/tbtc/wallet/{WALLET}/transfer/tr-77");
    let transfer = expect_json(f.app.get_auth(&path, &f.token).await, 200).await;
    for (k, v) in [
        ("id", "tr-77"),
        ("wallet", WALLET),
        ("coin", "tbtc"),
        ("txid", "0xfeed"),
        ("state", "confirmed"),
        ("valueString", "5000"),
    ] {
        assert_eq!(transfer[k], v, "{k} in {transfer}");
    }
    assert_error(
        f.app.get_auth(&format!("/api/v2/tbtc/wallet/{WALLET}/transfer/tr-78"), &f.token).await,
        404,
        "NotFound",
    )
    .await;
    assert_error(f.app.get_auth(&path, &other).await, 404, "WalletNotFound").await;

    let hook = f
        .app
        .post_auth(
            "/api/v2/tbtc/webhooks",
            &f.token,
            &json!({ "type": "block", "url": "https://example.com/b" }),
        )
        .await;
    let hook = expect_json(hook, 200).await;
    f.event(
        &admin,
        json!({ "eventId": "b-1", "type": "block", "coin": "tbtc", "blockId": "blk-1", "confirmations": 1 }),
    )
    .await;
    let list =
        expect_json(f.app.get_auth("/api/v2/tbtc/webhooks/notifications?limit=10", &f.token).await, 200)
            .await;
    let notes = list["notifications"].as_array().expect("notifications");
    assert_eq!(notes.len(), 1, "{list}");
    assert_eq!(notes[0]["webhook"], hook["id"]);
    let none = expect_json(f.app.get_auth("/api/v2/tbtc/webhooks/notifications", &other).await, 200).await;
    assert_eq!(none["notifications"], json!([]), "another user's list is their own");
}

/// A session made with an `extensionAddress` is extended only with that key's Bitcoin signed
/// message of `{timestamp}|{token}|{duration}` (what BitGoJS's `extendToken` sends).
#[tokio::test]
async fn an_extension_needs_the_signature_of_the_sessions_extension_key() {
    use bitcoin::{hashes::Hash, secp256k1, sign_message, Network, PrivateKey, PublicKey};
    let app = spawn_app().await;
    let user = app.create_user("extend@example.com").await;
    let secp = secp256k1::Secp256k1::new();
    let key = secp256k1::SecretKey::from_slice(&[42u8; 32]).expect("key");
    let public = PublicKey::from_private_key(&secp, &PrivateKey::new(key, Network::Testnet));
    let address = bitcoin::Address::p2pkh(public, Network::Testnet).to_string();
    let login = app
        .post(
            "/api/auth/v1/session",
            &json!({ "email": user.email, "password": bitgo_form(&user.email, PASSWORD), "otp": "000000",
                "extensible": true, "extensionAddress": address }),
        )
        .await;
    let token = expect_json(login, 200).await["access_token"].as_str().expect("token").to_string();
    let sign = |ts: i64, duration: u64| {
        let hash = sign_message::signed_msg_hash(&format!("{ts}|{token}|{duration}"));
        let digest = secp256k1::Message::from_digest(hash.to_byte_array());
        let signature = sign_message::MessageSignature::new(secp.sign_ecdsa_recoverable(&digest, &key), true);
        hex::encode(signature.serialize())
    };
    let extend = |ts: Option<i64>, signature: Option<String>, duration: u64| {
        let mut req = app
            .client
            .post(app.url("/api/v1/user/extendtoken"))
            .bearer_auth(&token)
            .json(&json!({ "duration": duration }));
        if let (Some(ts), Some(signature)) = (ts, signature) {
            req = req.header("timestamp", ts.to_string()).header("signature", signature);
        }
        req.send()
    };
    let now = custodian::clock::wall_now_ms();
    assert_error(extend(None, None, 3600).await.expect("bare"), 401, "InvalidSignature").await;
    assert_error(
        extend(Some(now), Some(sign(now, 3600)), 7200).await.expect("other duration"),
        401,
        "InvalidSignature",
    )
    .await;
    let old = now - 600_000;
    assert_error(extend(Some(old), Some(sign(old, 3600)), 3600).await.expect("stale"), 401, "StaleRequest")
        .await;
    let ok = expect_json(extend(Some(now), Some(sign(now, 3600)), 3600).await.expect("signed"), 200).await;
    assert!(ok["expires"].is_string(), "{ok}");
    let bad = app
        .post(
            "/api/auth/v1/session",
            &json!({ "email": user.email, "password": bitgo_form(&user.email, PASSWORD),
            "otp": "000000", "extensible": true, "extensionAddress": "not an address" }),
        )
        .await;
    let body = assert_error(bad, 400, "InvalidField").await;
    assert_eq!(body["context"]["field"], "extensionAddress");
}

/// BitGoJS's `addAccessToken` may send a top-level `txValueLimit`: it becomes the token's
/// `unlock.txValueLimit`, and a token made from it may not exceed it.
#[tokio::test]
async fn a_top_level_tx_value_limit_becomes_unlock_tx_value_limit() {
    let app = spawn_app().await;
    let user = app.create_user("limits@example.com").await;
    let session = app.login(&user).await;
    let made = expect_json(
        app.create_token(
            &session,
            json!({ "scope": ["wallet_view_all", "crypto_compare"], "txValueLimit": 5000 }),
        )
        .await,
        200,
    )
    .await;
    assert_eq!(made["unlock"]["txValueLimit"], 5000, "{made}");
    let child_of = made["token"].as_str().expect("token").to_string();
    let over =
        app.create_token(&child_of, json!({ "scope": ["wallet_view_all"], "txValueLimit": 6000 })).await;
    let body = assert_error(over, 400, "ExceedsCreatingToken").await;
    assert_eq!(body["context"]["field"], "txValueLimit");
    let inherited =
        expect_json(app.create_token(&child_of, json!({ "scope": ["wallet_view_all"] })).await, 200).await;
    assert_eq!(inherited["unlock"]["txValueLimit"], 5000, "{inherited}");
    let bad = app.create_token(&session, json!({ "scope": ["wallet_view_all"], "txValueLimit": 1.5 })).await;
    assert_eq!(assert_error(bad, 400, "InvalidField").await["context"]["field"], "txValueLimit");
}

#[tokio::test]
async fn a_transfer_stored_before_transfer_keys_is_found() {
    use crate::webhooks::{fixture, WALLET};
    let f = fixture(|_| {}).await;
    // A transfer's event stored before events were keyed by a hash of the transfer id (its id
    // in `transfer_id`, its body with its eventId) is found as before.
    f.app
        .raw_sql(&format!(
            "INSERT INTO events (event_id, result, body, transfer_id, created_at) VALUES ('t-old', '', \
             '{{\"eventId\":\"t-old\",\"type\":\"transfer\",\"walletId\":\"{WALLET}\",\"transferId\":\"tr-old\",\"hash\":\"0xbeef\"}}', \
             'tr-old', 1)"
        ))
        .await;
    let old = expect_json(
        f.app.get_auth(&format!("/api/v2/tbtc/wallet/{WALLET}/transfer/tr-old"), &f.token).await,
        200,
    )
    .await;
    assert_eq!(old["txid"], "0xbeef", "{old}");
}
