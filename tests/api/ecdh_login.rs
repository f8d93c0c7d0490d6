//! ECDH token issuance (BitGo's `encryptedToken`): a BitGo client of a user with an ECDH
//! keychain gets its session, and the tokens that session creates over signed requests,
//! sealed under the secret its keychain shares with the service; every other client gets the
//! token in the clear. Opened here exactly as BitGoJS's `handleTokenIssuance` opens it (the
//! SDK itself does so in sdk-tests/ and tests/sdk_interop.rs).

use bitcoin::{
    bip32::{DerivationPath, Xpriv, Xpub},
    secp256k1::Secp256k1,
    NetworkKind,
};
use custodian::identity::ecdh;
use rand::RngCore;
use reqwest::{Method, Response};
use serde_json::{json, Value};

use crate::{
    common::*,
    signed::{verified_body, Signed},
};

/// A user with an ECDH keychain whose xprv the test holds, and a plain session of theirs.
async fn user_with_keychain(app: &TestApp, email: &str) -> (TestUser, Xpriv, String) {
    let user = app.create_user(email).await;
    let session = app.login(&user).await;
    let mut seed = [0u8; 32];
    rand::thread_rng().fill_bytes(&mut seed);
    let xprv = Xpriv::new_master(NetworkKind::Main, &seed).unwrap();
    let xpub = Xpub::from_priv(&Secp256k1::new(), &xprv).to_string();
    let body =
        json!({ "source": "ecdh", "xpub": xpub, "encryptedXprv": ecdh::seal(PASSWORD, &xprv.to_string()) });
    expect_json(app.post_auth("/api/v1/keychain", &session, &body).await, 200).await;
    let set = json!({ "settings": { "ecdhKeychain": xpub } });
    expect_json(app.put_auth("/api/v2/user/settings", &session, &set).await, 200).await;
    (user, xprv, session)
}

/// What BitGoJS does with an encrypted answer: the xprv from `encryptedECDHXprv` (checked
/// against ours), the secret at `derivationPath` with the service's xpub, the token.
async fn open_token(app: &TestApp, body: &Value, xprv: &Xpriv) -> String {
    if let Some(envelope) = body["encryptedECDHXprv"].as_str() {
        assert_eq!(ecdh::open(PASSWORD, envelope).unwrap(), xprv.to_string());
    }
    let identity = &app.state.identity;
    let server = ecdh::server_xpub(&identity.store, &identity.key).await.unwrap();
    let path: DerivationPath = body["derivationPath"].as_str().expect("derivationPath").parse().unwrap();
    let secret = ecdh::shared_secret(xprv, &server, &path).unwrap();
    ecdh::open(&secret, body["encryptedToken"].as_str().expect("encryptedToken")).unwrap()
}

async fn login_as(app: &TestApp, path: &str, version: Option<&str>, extra: Value) -> Response {
    let mut body = json!({ "email": "ecdh@example.com", "password": PASSWORD, "otp": "000000" });
    body.as_object_mut().unwrap().extend(extra.as_object().cloned().unwrap_or_default());
    let mut req = app.client.post(app.url(path)).json(&body);
    if let Some(v) = version {
        req = req.header("BitGo-Auth-Version", v);
    }
    req.send().await.unwrap()
}

/// An answer's status, `timestamp` and `hmac` headers and body text.
struct Answer {
    status: u16,
    ts: String,
    mac: String,
    text: String,
}

async fn answer(res: Response) -> Answer {
    let header = |n: &str| res.headers().get(n).and_then(|v| v.to_str().ok()).unwrap_or_default().to_string();
    let (status, ts, mac) = (res.status().as_u16(), header("timestamp"), header("hmac"));
    Answer { status, ts, mac, text: res.text().await.unwrap() }
}

impl Answer {
    fn json(&self) -> Value {
        serde_json::from_str(&self.text).unwrap()
    }

    /// Whether the answer is signed with `token` as BitGoJS's `verifyResponse` checks it.
    fn signed_with(&self, token: &str, version: &str, path: &str) -> bool {
        let Answer { status, ts, mac, text } = self;
        let subject = match version {
            "3.0" => format!("POST|{ts}|{path}|{status}|{text}"),
            _ => format!("{ts}|{path}|{status}|{text}"),
        };
        *mac == crate::webhooks::hmac_hex(token.as_bytes(), subject.as_bytes())
    }
}

#[tokio::test]
async fn a_bitgo_client_of_a_user_with_a_keychain_gets_its_session_ecdh_encrypted_and_signed() {
    let app = spawn_app().await;
    let (user, xprv, _) = user_with_keychain(&app, "ecdh@example.com").await;
    for (path, version) in [("/api/v2/user/login", "2.0"), ("/api/v2/internal/user/login", "3.0")] {
        // The first is BitGo's example scripts' path, with the plain password.
        let got = answer(login_as(&app, path, Some(version), json!({})).await).await;
        let body = got.json();
        assert_eq!(got.status, 200, "{body}");
        assert!(body.get("access_token").is_none() && body.get("noECDHKeychain").is_none(), "{body}");
        assert!(body["derivationPath"].as_str().unwrap().starts_with("m/999999/"), "{body}");
        let token = open_token(&app, &body, &xprv).await;
        assert!(token.starts_with("v2x") && token.len() == 67, "{token}");
        assert!(got.signed_with(&token, version, path), "the answer is signed with the token it carries");
        assert_eq!(body["grant_type"], "password");
        assert!(body["user"]["ecdhKeychain"].as_str().unwrap().starts_with("xpub"), "{body}");
        let me = expect_json(app.get_auth("/api/v2/user/me", &token).await, 200).await;
        assert_eq!(me["user"]["id"], user.id.as_str());
    }
    // Without BitGo-Auth-Version (not BitGoJS), or with forceV1Auth: in the clear.
    for (version, extra) in [(None, json!({})), (Some("2.0"), json!({ "forceV1Auth": true }))] {
        let body = expect_json(login_as(&app, "/api/v2/user/login", version, extra).await, 200).await;
        assert!(body["access_token"].is_string() && body.get("encryptedToken").is_none(), "{body}");
        assert!(body.get("noECDHKeychain").is_none(), "{body}");
    }
    // Each ECDH session has a path of its own, kept with it and audited.
    let paths =
        app.raw_sql("SELECT derivation_path FROM access_tokens WHERE derivation_path IS NOT NULL").await;
    assert_eq!(paths.len(), 2);
    assert_ne!(paths[0], paths[1]);
    let audited = app
        .raw_sql("SELECT data FROM audit_log WHERE type = 'login.succeeded' AND data LIKE '%m/999999/%'")
        .await;
    assert_eq!(audited.len(), 2, "{audited:?}");
}

#[tokio::test]
async fn a_user_without_a_keychain_gets_the_token_in_the_clear_and_is_told_so() {
    let app = spawn_app().await;
    let user = app.create_user("plain@example.com").await;
    let res = app
        .client
        .post(app.url("/api/v2/user/login"))
        .header("BitGo-Auth-Version", "2.0")
        .json(&json!({ "email": user.email, "password": PASSWORD, "otp": "000000" }))
        .send()
        .await
        .unwrap();
    let body = expect_json(res, 200).await;
    assert!(body["access_token"].is_string(), "{body}");
    assert_eq!(body["noECDHKeychain"], true, "{body}");
    assert!(body["user"]["ecdhKeychain"].is_null(), "{body}");
    assert!(body.get("encryptedToken").is_none(), "{body}");
}

#[tokio::test]
async fn tokens_an_ecdh_session_creates_over_signed_requests_are_ecdh_encrypted() {
    let app = spawn_app().await;
    let (_, xprv, plain_session) = user_with_keychain(&app, "ecdh@example.com").await;
    let got = answer(login_as(&app, "/api/v2/user/login", Some("2.0"), json!({})).await).await;
    let session = open_token(&app, &got.json(), &xprv).await;
    let fields = json!({ "label": "from ecdh", "scope": ["wallet_view_all"], "otp": "000000" }).to_string();
    for version in ["2.0", "3.0"] {
        let signed = Signed::new(version, Method::POST, "/api/auth/v1/accesstoken", &fields);
        let body = verified_body(signed.send(&app, &session, None).await, &signed, &session).await;
        assert!(body.get("token").is_none(), "{body}");
        let token = open_token(&app, &body, &xprv).await;
        let listed = expect_json(app.get_auth("/api/v2/user/accesstoken", &token).await, 403).await;
        assert_eq!(listed["name"], "InsufficientScope", "the new token works, with its own scopes");
    }
    // Sent as a Bearer (BitGoJS's forceV1Auth), or signed by a session handed over in the
    // clear: the token in the clear.
    let body: Value = serde_json::from_str(&fields).unwrap();
    let bearer = expect_json(app.post_auth("/api/auth/v1/accesstoken", &session, &body).await, 200).await;
    assert!(bearer["token"].is_string() && bearer.get("encryptedToken").is_none(), "{bearer}");
    let signed = Signed::new("2.0", Method::POST, "/api/auth/v1/accesstoken", &fields);
    let body = verified_body(signed.send(&app, &plain_session, None).await, &signed, &plain_session).await;
    assert!(body["token"].is_string() && body.get("encryptedToken").is_none(), "{body}");
}
