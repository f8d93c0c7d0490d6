//! Webhooks (§4.4 to §4.10) and the delivery engine, with a real receiver.

use std::time::Duration;

use base64::Engine as _;
use custodian::config::Config;
use hmac::Mac;
use serde_json::{json, Value};

use crate::{
    common::*,
    receiver::{Answer, TestReceiver},
};

const WALLET: &str = "0123456789abcdef0123456789abcdef";

/// Delivery tuned for tests: the receiver on 127.0.0.1 allowed, 1-second retries.
fn fast(c: &mut Config) {
    c.delivery.allowed_cidrs = vec!["127.0.0.1/32".parse().unwrap()];
    c.delivery.retry_schedule = vec![1, 1, 1];
    c.delivery.timeout = 1;
    c.delivery.poll_interval_ms = 50;
}

struct Fixture {
    app: TestApp,
    user: TestUser,
    token: String,
    enterprise: String,
}

async fn fixture(tweak: impl FnOnce(&mut Config)) -> Fixture {
    let app = spawn_app_with(tweak).await;
    let user = app.create_user("hooks@example.com").await;
    let enterprise = app.create_enterprise("Acme", &[(&user, true)]).await;
    let record = json!({
        "id": WALLET, "label": "hot", "coin": "tbtc", "type": "hot", "m": 2, "n": 3, "enterprise": enterprise,
        "organization": "org-7", "allowBackupKeySigning": false, "approvalsRequired": 1, "coinSpecific": {},
        "deleted": false, "disableTransactionNotifications": false, "hasLargeNumberOfAddresses": false,
        "isCold": false, "startDate": "2025-01-01T00:00:00Z", "users": [{ "user": user.id, "permissions": ["admin"] }],
    });
    let s = custodian::wallets::import::import(&app.state.store, &json!([record]).to_string(), |_, _| {})
        .await
        .unwrap();
    assert_eq!(s.imported, 1);
    let token = app.login(&user).await;
    Fixture { app, user, token, enterprise }
}

impl Fixture {
    async fn wallet_hook(&self, body: Value) -> reqwest::Response {
        self.app.post_auth(&format!("/api/v2/tbtc/wallet/{WALLET}/webhooks"), &self.token, &body).await
    }

    async fn wallet_hook_id(&self, url: &str, typ: &str) -> String {
        let res = self.wallet_hook(json!({ "type": typ, "url": url, "label": "mine" })).await;
        let b: Value = res.json().await.unwrap();
        b["id"].as_str().unwrap_or_else(|| panic!("{b}")).to_string()
    }

    async fn secret(&self) -> String {
        let res = self
            .app
            .post_auth("/api/v2/webhook/secret", &self.token, &json!({ "enterpriseId": self.enterprise }))
            .await;
        let b: Value = res.json().await.unwrap();
        b["secret"].as_str().unwrap_or_else(|| panic!("{b}")).to_string()
    }

    async fn admin_token(&self) -> String {
        let ops = self.app.create_user_with("ops@example.com", true).await;
        self.app.login(&ops).await
    }

    async fn event(&self, admin: &str, body: Value) -> Value {
        let res = self.app.post_auth("/api/v2/internal/events", admin, &body).await;
        assert_eq!(res.status(), 200);
        res.json().await.unwrap()
    }

    async fn get(&self, path: &str) -> Value {
        self.app.get_auth(path, &self.token).await.json().await.unwrap()
    }
}

fn hmac_hex(key: &[u8], body: &[u8]) -> String {
    let mut m = hmac::Hmac::<sha2::Sha256>::new_from_slice(key).unwrap();
    m.update(body);
    hex::encode(m.finalize().into_bytes())
}

fn standard_sig(secret: &str, id: &str, ts: &str, body: &str) -> String {
    let key =
        base64::engine::general_purpose::STANDARD.decode(secret.strip_prefix("whsec_").unwrap()).unwrap();
    let mut m = hmac::Hmac::<sha2::Sha256>::new_from_slice(&key).unwrap();
    m.update(format!("{id}.{ts}.{body}").as_bytes());
    format!("v1,{}", base64::engine::general_purpose::STANDARD.encode(m.finalize().into_bytes()))
}

#[tokio::test]
async fn create_list_and_remove_at_each_level() {
    let f = fixture(fast).await;
    // Wallet level (§2.5).
    let res = f
        .wallet_hook(json!({ "type": "transfer", "url": "https://example.com/hook", "label": "deposits",
            "listenToFailureStates": true, "txRequestStates": ["signed"] }))
        .await;
    assert_eq!(res.status(), 200);
    let w: Value = res.json().await.unwrap();
    assert!(custodian::ids::is_id(w["id"].as_str().unwrap()));
    assert_eq!(w["scope"], "wallet");
    assert_eq!(w["walletId"], WALLET);
    assert_eq!(w["coin"], "tbtc");
    assert_eq!(w["type"], "transfer");
    assert_eq!(w["label"], "deposits");
    assert_eq!(w["version"], 2);
    assert_eq!(w["state"], "active");
    assert_eq!(w["successiveFailedAttempts"], 0);
    assert_eq!(w["listenToFailureStates"], true);
    assert_eq!(w["txRequestStates"], json!(["signed"]));
    assert_eq!(w["txRequestTransactionStates"], json!([]));
    assert!(w.get("userId").is_none() && w.get("enterpriseId").is_none());
    chrono::DateTime::parse_from_rfc3339(w["created"].as_str().unwrap()).unwrap();

    // Block level: no scope, userId and numConfirmations.
    let res = f.app.post_auth("/api/v2/tbtc/webhooks", &f.token,
        &json!({ "type": "block", "url": "https://example.com/b", "label": "blocks", "numConfirmations": 6 })).await;
    let b: Value = res.json().await.unwrap();
    assert!(b.get("scope").is_none(), "{b}");
    assert_eq!(b["userId"], f.user.id.as_str());
    assert_eq!(b["coin"], "tbtc");
    assert_eq!(b["numConfirmations"], 6);
    assert_eq!(b["listenToFailureStates"], false);
    assert_eq!(b["version"], 2);

    // Enterprise level.
    let res = f
        .app
        .post_auth(
            &format!("/api/v2/enterprise/{}/webhooks", f.enterprise),
            &f.token,
            &json!({ "type": "accessToken", "url": "https://example.com/e", "label": "tokens" }),
        )
        .await;
    let e: Value = res.json().await.unwrap();
    assert_eq!(e["scope"], "enterprise");
    assert_eq!(e["enterpriseId"], f.enterprise.as_str());
    assert!(e.get("coin").is_none() && e.get("walletId").is_none());

    // Lists, paged with limit and prevId.
    let l = f.get(&format!("/api/v2/tbtc/wallet/{WALLET}/webhooks")).await;
    assert_eq!(l["webhooks"].as_array().unwrap().len(), 1);
    for i in 0..2 {
        f.wallet_hook(json!({ "type": "txRequest", "url": format!("https://example.com/{i}") })).await;
    }
    let p1 = f.get(&format!("/api/v2/tbtc/wallet/{WALLET}/webhooks?limit=2")).await;
    assert_eq!(p1["webhooks"].as_array().unwrap().len(), 2);
    let next = p1["nextBatchPrevId"].as_str().expect("more to come");
    let p2 = f.get(&format!("/api/v2/tbtc/wallet/{WALLET}/webhooks?limit=2&prevId={next}")).await;
    assert_eq!(p2["webhooks"].as_array().unwrap().len(), 1);
    assert!(p2.get("nextBatchPrevId").is_none());
    let res = f.app.get_auth(&format!("/api/v2/tbtc/wallet/{WALLET}/webhooks?limit=0"), &f.token).await;
    assert_error(res, 400, "InvalidField").await;
    let l = f.get("/api/v2/tbtc/webhooks").await;
    assert_eq!(l["webhooks"][0]["id"], b["id"]);
    let l = f.get(&format!("/api/v2/enterprise/{}/webhooks", f.enterprise)).await;
    assert_eq!(l["webhooks"][0]["id"], e["id"]);

    // Removal: by type and url, by id, and the enterprise route's 204.
    let removed: Value = f
        .app
        .client
        .delete(f.app.url(&format!("/api/v2/tbtc/wallet/{WALLET}/webhooks")))
        .bearer_auth(&f.token)
        .json(&json!({ "type": "transfer", "url": "https://example.com/hook" }))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(removed["removed"], 1);
    let removed: Value = f
        .app
        .client
        .delete(f.app.url("/api/v2/tbtc/webhooks"))
        .bearer_auth(&f.token)
        .json(&json!({ "id": b["id"] }))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(removed["removed"], 1);
    let res = f
        .app
        .client
        .delete(f.app.url(&format!(
            "/api/v2/enterprise/{}/webhook/{}",
            f.enterprise,
            e["id"].as_str().unwrap()
        )))
        .bearer_auth(&f.token)
        .send()
        .await
        .unwrap();
    assert_eq!(res.status(), 204);
    let res = f
        .app
        .client
        .delete(f.app.url(&format!(
            "/api/v2/enterprise/{}/webhook/{}",
            f.enterprise,
            e["id"].as_str().unwrap()
        )))
        .bearer_auth(&f.token)
        .send()
        .await
        .unwrap();
    assert_error(res, 404, "WebhookNotFound").await;
    assert_eq!(f.get("/api/v2/tbtc/webhooks").await["webhooks"], json!([]));
}

#[tokio::test]
async fn registration_is_validated() {
    let f = fixture(fast).await;
    let cases = [
        (json!({ "type": "block", "url": "https://example.com" }), "InvalidWebhookType", "type"),
        (json!({ "type": "transfer", "url": "ftp://example.com" }), "InvalidField", "url"),
        (json!({ "type": "transfer", "url": "not a url" }), "InvalidField", "url"),
        (
            json!({ "type": "transfer", "url": format!("https://example.com/{}", "a".repeat(2100)) }),
            "InvalidField",
            "url",
        ),
        (
            json!({ "type": "transfer", "url": "https://example.com", "customHttpHeaders": { "Content-Type": "text/plain" } }),
            "InvalidField",
            "customHttpHeaders.Content-Type",
        ),
        (
            json!({ "type": "transfer", "url": "https://example.com", "customHttpHeaders": { "bad header": "x" } }),
            "InvalidField",
            "customHttpHeaders.bad header",
        ),
        (
            json!({ "type": "transfer", "url": "https://example.com", "customHttpHeaders": { "X-Ok": "line\nbreak" } }),
            "InvalidField",
            "customHttpHeaders.X-Ok",
        ),
        (json!({ "url": "https://example.com" }), "MissingField", "type"),
    ];
    for (body, name, field) in cases {
        let res = f.wallet_hook(body.clone()).await;
        let b = assert_error(res, 400, name).await;
        assert_eq!(b["context"]["field"], field, "{body}");
    }
    let res = f
        .app
        .post_auth(
            "/api/v2/tbtc/webhooks",
            &f.token,
            &json!({ "type": "transfer", "url": "https://example.com" }),
        )
        .await;
    assert_error(res, 400, "InvalidWebhookType").await;
    let res = f
        .app
        .post_auth(
            "/api/v2/tbtc/webhooks",
            &f.token,
            &json!({ "type": "block", "url": "https://example.com", "numConfirmations": -1 }),
        )
        .await;
    assert_error(res, 400, "InvalidField").await;
    let res = f
        .app
        .post_auth(
            &format!("/api/v2/enterprise/{}/webhooks", f.enterprise),
            &f.token,
            &json!({ "type": "transfer", "url": "https://example.com" }),
        )
        .await;
    assert_error(res, 400, "InvalidWebhookType").await;
    let res = f
        .wallet_hook(json!({ "type": "transfer", "url": "https://example.com", "allowBlockedHosts": true }))
        .await;
    assert_error(res, 403, "InsufficientScope").await;
    // The wallet must exist, under that coin.
    let res = f
        .app
        .post_auth(
            &format!("/api/v2/btc/wallet/{WALLET}/webhooks"),
            &f.token,
            &json!({ "type": "transfer", "url": "https://example.com" }),
        )
        .await;
    assert_error(res, 404, "WalletNotFound").await;
    let res = f
        .app
        .post_auth(
            &format!("/api/v2/enterprise/{}/webhooks", "f".repeat(32)),
            &f.token,
            &json!({ "type": "accessToken", "url": "https://example.com" }),
        )
        .await;
    assert_error(res, 404, "EnterpriseNotFound").await;
    assert_eq!(
        f.get(&format!("/api/v2/tbtc/wallet/{WALLET}/webhooks")).await["webhooks"],
        json!([]),
        "nothing was created"
    );
}

#[tokio::test]
async fn at_most_ten_webhooks_of_a_type_per_level() {
    let f = fixture(fast).await;
    for i in 0..10 {
        let res =
            f.wallet_hook(json!({ "type": "transfer", "url": format!("https://example.com/{i}") })).await;
        assert_eq!(res.status(), 200);
    }
    let res = f.wallet_hook(json!({ "type": "transfer", "url": "https://example.com/11" })).await;
    assert_error(res, 400, "WebhookLimitReached").await;
    assert_eq!(
        f.wallet_hook(json!({ "type": "txRequest", "url": "https://example.com/x" })).await.status(),
        200,
        "other types are counted apart"
    );
    for i in 0..10 {
        f.app
            .post_auth(
                "/api/v2/tbtc/webhooks",
                &f.token,
                &json!({ "type": "block", "url": format!("https://example.com/{i}") }),
            )
            .await;
    }
    let res = f
        .app
        .post_auth(
            "/api/v2/tbtc/webhooks",
            &f.token,
            &json!({ "type": "block", "url": "https://example.com/z" }),
        )
        .await;
    assert_error(res, 400, "WebhookLimitReached").await;
    for i in 0..10 {
        f.app
            .post_auth(
                &format!("/api/v2/enterprise/{}/webhooks", f.enterprise),
                &f.token,
                &json!({ "type": "bankAccount", "url": format!("https://example.com/{i}") }),
            )
            .await;
    }
    let res = f
        .app
        .post_auth(
            &format!("/api/v2/enterprise/{}/webhooks", f.enterprise),
            &f.token,
            &json!({ "type": "bankAccount", "url": "https://example.com/z" }),
        )
        .await;
    assert_error(res, 400, "WebhookLimitReached").await;
}

#[tokio::test]
async fn access_needs_wallet_manage_and_enterprise_admin() {
    let f = fixture(fast).await;
    let stranger = f.app.create_user("stranger@example.com").await;
    let st = f.app.login(&stranger).await;
    let res = f
        .app
        .post_auth(
            &format!("/api/v2/tbtc/wallet/{WALLET}/webhooks"),
            &st,
            &json!({ "type": "transfer", "url": "https://example.com" }),
        )
        .await;
    assert_error(res, 404, "WalletNotFound").await;
    let view_only = f.app.token_with(&f.token, json!({ "scope": ["wallet_view_all"] })).await;
    let res = f
        .app
        .post_auth(
            &format!("/api/v2/tbtc/wallet/{WALLET}/webhooks"),
            &view_only,
            &json!({ "type": "transfer", "url": "https://example.com" }),
        )
        .await;
    assert_error(res, 403, "InsufficientScope").await;
    let manage_one =
        f.app.token_with(&f.token, json!({ "scope": [format!("wallet_manage:{WALLET}")] })).await;
    let res = f
        .app
        .post_auth(
            &format!("/api/v2/tbtc/wallet/{WALLET}/webhooks"),
            &manage_one,
            &json!({ "type": "transfer", "url": "https://example.com" }),
        )
        .await;
    assert_eq!(res.status(), 200);
    let member = f.app.create_user("member@example.com").await;
    f.app.state.store.upsert_membership(&f.enterprise, &member.id, false).await.unwrap();
    let mt = f.app.login(&member).await;
    let res = f
        .app
        .post_auth(
            &format!("/api/v2/enterprise/{}/webhooks", f.enterprise),
            &mt,
            &json!({ "type": "accessToken", "url": "https://example.com" }),
        )
        .await;
    assert_error(res, 403, "InsufficientScope").await;
    let res = f.app.post_auth("/api/v2/webhook/secret", &mt, &json!({ "enterpriseId": f.enterprise })).await;
    assert_error(res, 403, "InsufficientScope").await;
}

#[tokio::test]
async fn simulated_wallet_notification_is_delivered_signed() {
    let f = fixture(fast).await;
    let rx = TestReceiver::start().await;
    let secret = f.secret().await;
    assert!(secret.starts_with("whsec_"));
    let res = f
        .wallet_hook(
            json!({ "type": "transfer", "url": rx.url, "customHttpHeaders": { "X-Receiver-Token": "abc" } }),
        )
        .await;
    let hook: Value = res.json().await.unwrap();
    let hook_id = hook["id"].as_str().unwrap();
    let res = f
        .app
        .post_auth(
            &format!("/api/v2/tbtc/wallet/{WALLET}/webhooks/{hook_id}/simulate"),
            &f.token,
            &json!({ "transferId": "5f0c5e1a2b3c4d5e6f708192a3b4c5d6" }),
        )
        .await;
    assert_eq!(res.status(), 200);
    let body: Value = res.json().await.unwrap();
    let n = &body["webhookNotifications"][0];
    for (k, v) in [
        ("simulation", json!(true)),
        ("state", json!("new")),
        ("retries", json!(0)),
        ("version", json!(2)),
        ("webhook", json!(hook_id)),
        ("type", json!("transfer")),
        ("wallet", json!(WALLET)),
        ("coin", json!("tbtc")),
        ("enterprise", json!(f.enterprise)),
        ("organization", json!("org-7")),
        ("url", json!(rx.url)),
        ("transfer", json!("5f0c5e1a2b3c4d5e6f708192a3b4c5d6")),
    ] {
        assert_eq!(n[k], v, "{k} in {n}");
    }
    for k in ["id", "hash", "idempotencyKey", "updatedAt", "payload"] {
        assert!(n[k].as_str().is_some_and(|s| !s.is_empty()), "{k} in {n}");
    }
    let payload: Value = serde_json::from_str(n["payload"].as_str().unwrap()).unwrap();
    assert_eq!(payload["placeholder"], true, "unknown transfer: placeholder data, marked");
    assert_eq!(payload["simulation"], true);

    let got = rx.wait_for(1, 10).await;
    let r = &got[0];
    assert_eq!(r.body, n["payload"].as_str().unwrap(), "the exact payload is POSTed");
    let h = |k: &str| r.headers.get(k).and_then(|v| v.to_str().ok()).unwrap_or_default().to_string();
    assert_eq!(h("content-type"), "application/json");
    assert_eq!(h("idempotency-key"), n["idempotencyKey"].as_str().unwrap());
    assert_eq!(h("x-receiver-token"), "abc");
    assert_eq!(h("webhook-id"), n["id"].as_str().unwrap());
    assert_eq!(
        h("x-signature-sha256"),
        hmac_hex(secret.as_bytes(), r.body.as_bytes()),
        "BitGo-style signature"
    );
    assert_eq!(
        h("webhook-signature"),
        standard_sig(&secret, &h("webhook-id"), &h("webhook-timestamp"), &r.body),
        "Standard Webhooks signature"
    );
    let ts: i64 = h("webhook-timestamp").parse().unwrap();
    assert!((ts - custodian::ids::now()).abs() <= 5);

    // The operator's views show it processed, with one successful attempt.
    let list = f.get(&format!("/api/v2/webhook/{hook_id}/notifications?state=processed")).await;
    let nid = n["id"].as_str().unwrap();
    assert_eq!(list["notifications"][0]["id"], nid, "{list}");
    let attempts = f.get(&format!("/api/v2/webhook/{hook_id}/notifications/{nid}/attempts")).await;
    assert_eq!(attempts["attempts"][0]["statusCode"], 200);
    assert_eq!(attempts["attempts"][0]["responseBody"], "receiver says hi");
    // Resend delivers it again.
    let res = f
        .app
        .post_auth(&format!("/api/v2/webhook/{hook_id}/notifications/{nid}/resend"), &f.token, &json!({}))
        .await;
    assert_eq!(res.status(), 200);
    rx.wait_for(2, 10).await;
}

#[tokio::test]
async fn block_and_enterprise_simulations_have_their_level_fields() {
    let f = fixture(fast).await;
    let rx = TestReceiver::start().await;
    let b: Value = f
        .app
        .post_auth("/api/v2/tbtc/webhooks", &f.token, &json!({ "type": "block", "url": rx.url }))
        .await
        .json()
        .await
        .unwrap();
    assert!(b["id"].is_string(), "{b}");
    let res = f
        .app
        .post_auth(
            &format!("/api/v2/tbtc/webhooks/{}/simulate", b["id"].as_str().unwrap()),
            &f.token,
            &json!({ "blockId": "00000000000000000002a7c4c1e48d76c5a37902165a270156b7a8d72728a054" }),
        )
        .await;
    let body: Value = res.json().await.unwrap();
    let n = &body["webhookNotifications"][0];
    assert_eq!(n["type"], "block");
    assert_eq!(n["coin"], "tbtc");
    assert_eq!(n["hash"], "00000000000000000002a7c4c1e48d76c5a37902165a270156b7a8d72728a054");
    assert_eq!(n["state"], "new");
    assert!(n.get("wallet").is_none() && n.get("idempotencyKey").is_none());

    let e: Value = f
        .app
        .post_auth(
            &format!("/api/v2/enterprise/{}/webhooks", f.enterprise),
            &f.token,
            &json!({ "type": "accessToken", "url": rx.url }),
        )
        .await
        .json()
        .await
        .unwrap();
    let created: Value = f
        .app
        .create_token(&f.token, json!({ "scope": ["profile"], "enterprise": f.enterprise }))
        .await
        .json()
        .await
        .unwrap();
    let res = f
        .app
        .post_auth(
            &format!("/api/v2/enterprise/{}/webhook/{}/simulate", f.enterprise, e["id"].as_str().unwrap()),
            &f.token,
            &json!({ "accessTokenId": created["id"] }),
        )
        .await;
    let body: Value = res.json().await.unwrap();
    let n = &body["webhookNotifications"][0];
    assert_eq!(n["accessToken"], created["id"]);
    assert_eq!(n["allowBlockedHosts"], false);
    assert_eq!(n["simulation"], true);
    let payload: Value = serde_json::from_str(n["payload"].as_str().unwrap()).unwrap();
    assert_eq!(payload["label"], "test token", "built from the real token");
    assert!(payload.get("placeholder").is_none());
    // Block sim + the real accessToken notification from the creation + the enterprise sim.
    rx.wait_for(3, 10).await;
}

#[tokio::test]
async fn verify_checks_the_enterprise_secret_including_rotation_grace() {
    let f = fixture(fast).await;
    let hook = f.wallet_hook_id("https://example.com/h", "transfer").await;
    let path = format!("/api/v2/webhook/{hook}/verify");
    let payload = r#"{"type":"transfer","hash":"abc"}"#;
    let res =
        f.app.post_auth(&path, &f.token, &json!({ "signature": "00", "notificationPayload": payload })).await;
    assert_error(res, 400, "NoWebhookSecret").await;
    // An old secret, rotated long ago, so that the next rotation is allowed.
    let old = custodian::webhooks::signing::new_secret();
    let sealed = f
        .app
        .state
        .key
        .seal(&custodian::webhooks::secrets::secret_aad(&f.enterprise), old.as_bytes())
        .unwrap();
    f.app
        .state
        .store
        .rotate_webhook_secret(&f.enterprise, &sealed, custodian::ids::now() - 3600, 300)
        .await
        .unwrap();
    let verify = |sig: String| {
        let (app, path, token) = (&f.app, path.clone(), f.token.clone());
        async move {
            let r: Value = app
                .post_auth(&path, &token, &json!({ "signature": sig, "notificationPayload": payload }))
                .await
                .json()
                .await
                .unwrap();
            r
        }
    };
    let r = verify(hmac_hex(old.as_bytes(), payload.as_bytes())).await;
    assert_eq!(r, json!({ "webhookId": hook, "isValid": true }));
    let new = f.secret().await;
    assert_eq!(verify(hmac_hex(new.as_bytes(), payload.as_bytes())).await["isValid"], true);
    assert_eq!(
        verify(hmac_hex(old.as_bytes(), payload.as_bytes())).await["isValid"],
        true,
        "previous secret within 24 h"
    );
    assert_eq!(verify(hmac_hex(b"wrong", payload.as_bytes())).await["isValid"], false);
    assert_eq!(verify(hmac_hex(new.as_bytes(), b"tampered")).await["isValid"], false);
    // Deliveries during the grace period carry Standard Webhooks signatures under both secrets.
    let rx = TestReceiver::start().await;
    let live = f.wallet_hook_id(&rx.url, "transfer").await;
    f.app
        .post_auth(&format!("/api/v2/tbtc/wallet/{WALLET}/webhooks/{live}/simulate"), &f.token, &json!({}))
        .await;
    let got = rx.wait_for(1, 10).await;
    let h = |k: &str| got[0].headers[k].to_str().unwrap().to_string();
    let (id, ts) = (h("webhook-id"), h("webhook-timestamp"));
    let want = format!(
        "{} {}",
        standard_sig(&new, &id, &ts, &got[0].body),
        standard_sig(&old, &id, &ts, &got[0].body)
    );
    assert_eq!(h("webhook-signature"), want);
    assert_eq!(h("x-signature-sha256"), hmac_hex(new.as_bytes(), got[0].body.as_bytes()));
    // A second rotation within 5 minutes is refused.
    let res =
        f.app.post_auth("/api/v2/webhook/secret", &f.token, &json!({ "enterpriseId": f.enterprise })).await;
    assert!(res.headers().contains_key("retry-after"));
    assert_error(res, 429, "TooManyRequests").await;
    let res = f
        .app
        .post_auth(
            &format!("/api/v2/webhook/{}/verify", "9".repeat(32)),
            &f.token,
            &json!({ "signature": "00", "notificationPayload": "{}" }),
        )
        .await;
    assert_error(res, 404, "WebhookNotFound").await;
}

#[tokio::test]
async fn failed_deliveries_are_retried_and_recorded() {
    let f = fixture(fast).await;
    let rx = TestReceiver::start().await;
    rx.plan(&[
        Answer { status: 500, retry_after: None, delay_ms: 0 },
        Answer { status: 302, retry_after: None, delay_ms: 0 }, // redirects are not followed
        Answer { status: 200, retry_after: None, delay_ms: 1500 }, // over the 1 s timeout
    ]);
    let hook = f.wallet_hook_id(&rx.url, "transfer").await;
    let admin = f.admin_token().await;
    f.event(&admin, json!({ "eventId": "ev-1", "type": "transfer", "walletId": WALLET, "coin": "tbtc", "transferId": "t1", "hash": "h1" })).await;
    let got = rx.wait_for(4, 20).await;
    let gap = got[1].at - got[0].at;
    assert!(
        gap >= Duration::from_millis(700) && gap <= Duration::from_millis(2500),
        "retry after ~1 s (+-20%), got {gap:?}"
    );
    assert_eq!(
        got[0].headers["idempotency-key"], got[3].headers["idempotency-key"],
        "same key on every attempt"
    );
    tokio::time::sleep(Duration::from_millis(300)).await;
    let list = f.get(&format!("/api/v2/webhook/{hook}/notifications")).await;
    let n = &list["notifications"][0];
    assert_eq!(n["state"], "processed", "{n}");
    assert_eq!(n["retries"], 3);
    let attempts =
        f.get(&format!("/api/v2/webhook/{hook}/notifications/{}/attempts", n["id"].as_str().unwrap())).await;
    let a = attempts["attempts"].as_array().unwrap();
    assert_eq!(a.len(), 4);
    assert_eq!(a[0]["statusCode"], 500);
    assert_eq!(a[0]["responseBody"], "receiver says hi");
    assert_eq!(a[1]["statusCode"], 302);
    assert_eq!(a[1]["success"], false);
    assert!(a[2]["error"].as_str().unwrap().contains("timed out"), "{}", a[2]);
    assert_eq!(a[3]["statusCode"], 200);
    let hooks = f.get(&format!("/api/v2/tbtc/wallet/{WALLET}/webhooks")).await;
    assert_eq!(hooks["webhooks"][0]["successiveFailedAttempts"], 0, "reset on success");
}

#[tokio::test]
async fn retry_after_sets_the_delay_within_bounds() {
    let f = fixture(|c| {
        fast(c);
        c.delivery.retry_schedule = vec![1];
    })
    .await;
    let rx = TestReceiver::start().await;
    rx.plan(&[Answer { status: 503, retry_after: Some(2), delay_ms: 0 }]);
    f.wallet_hook_id(&rx.url, "transfer").await;
    let admin = f.admin_token().await;
    f.event(&admin, json!({ "eventId": "ev-ra", "type": "transfer", "walletId": WALLET })).await;
    let got = rx.wait_for(2, 10).await;
    let gap = got[1].at - got[0].at;
    assert!(
        gap >= Duration::from_millis(1900) && gap < Duration::from_millis(3000),
        "Retry-After 2 s honoured: {gap:?}"
    );
}

#[tokio::test]
async fn a_webhook_is_suspended_after_repeated_failures_and_unblocked() {
    let f = fixture(|c| {
        fast(c);
        c.delivery.retry_schedule = vec![];
        c.delivery.suspend_after_failures = 3;
    })
    .await;
    let rx = TestReceiver::start().await;
    rx.always(500);
    let hook = f.wallet_hook_id(&rx.url, "transfer").await;
    let admin = f.admin_token().await;
    for i in 0..3 {
        f.event(&admin, json!({ "eventId": format!("ev-s{i}"), "type": "transfer", "walletId": WALLET }))
            .await;
    }
    rx.wait_for(3, 10).await;
    let mut state = Value::Null;
    for _ in 0..50 {
        let hooks = f.get(&format!("/api/v2/tbtc/wallet/{WALLET}/webhooks")).await;
        state = hooks["webhooks"][0].clone();
        if state["state"] == "suspended" {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert_eq!(state["state"], "suspended", "{state}");
    assert_eq!(state["successiveFailedAttempts"], 3);
    let failed = f.get(&format!("/api/v2/webhook/{hook}/notifications?state=failed")).await;
    assert_eq!(failed["notifications"].as_array().unwrap().len(), 3, "no retries left: failed");
    // Suspended: receives nothing.
    let r = f.event(&admin, json!({ "eventId": "ev-s3", "type": "transfer", "walletId": WALLET })).await;
    assert_eq!(r["notifications"], 0);
    let res = f.app.post_auth(&format!("/api/v2/webhook/{hook}/unblock"), &f.token, &json!({})).await;
    let w: Value = res.json().await.unwrap();
    assert_eq!(w["state"], "active");
    assert_eq!(w["successiveFailedAttempts"], 0);
    rx.always(200);
    f.event(&admin, json!({ "eventId": "ev-s4", "type": "transfer", "walletId": WALLET })).await;
    rx.wait_for(4, 10).await;
}

#[tokio::test]
async fn delivery_refuses_non_routable_destinations() {
    let f = fixture(|c| {
        fast(c);
        c.delivery.allowed_cidrs = vec![];
        c.delivery.retry_schedule = vec![];
    })
    .await;
    let rx = TestReceiver::start().await;
    let by_ip = f.wallet_hook_id(&rx.url, "transfer").await;
    let by_name = f.wallet_hook_id(&format!("http://localhost:{}/hook", rx.port), "transfer").await;
    let admin = f.admin_token().await;
    f.event(&admin, json!({ "eventId": "ev-x", "type": "transfer", "walletId": WALLET })).await;
    for hook in [&by_ip, &by_name] {
        let mut attempts = Value::Null;
        for _ in 0..100 {
            let list = f.get(&format!("/api/v2/webhook/{hook}/notifications")).await;
            if list["notifications"][0]["state"] == "failed" {
                let nid = list["notifications"][0]["id"].as_str().unwrap().to_string();
                attempts = f.get(&format!("/api/v2/webhook/{hook}/notifications/{nid}/attempts")).await;
                break;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        let err = attempts["attempts"][0]["error"].as_str().unwrap_or_default().to_string();
        assert!(err.contains("not a globally routable address"), "{hook}: {attempts}");
    }
    assert!(rx.received().is_empty(), "nothing reached the internal receiver");
    // A service admin's allowBlockedHosts overrides the guard.
    let res = f
        .app
        .post_auth(
            &format!("/api/v2/tbtc/wallet/{WALLET}/webhooks"),
            &admin,
            &json!({ "type": "transfer", "url": rx.url, "allowBlockedHosts": true }),
        )
        .await;
    assert_eq!(res.status(), 200);
    f.event(&admin, json!({ "eventId": "ev-y", "type": "transfer", "walletId": WALLET })).await;
    rx.wait_for(1, 10).await;
}

#[tokio::test]
async fn creating_an_access_token_fires_the_enterprise_webhook() {
    let f = fixture(fast).await;
    let rx = TestReceiver::start().await;
    let secret = f.secret().await;
    f.app
        .post_auth(
            &format!("/api/v2/enterprise/{}/webhooks", f.enterprise),
            &f.token,
            &json!({ "type": "accessToken", "url": rx.url }),
        )
        .await;
    let created: Value = f
        .app
        .create_token(&f.token, json!({ "scope": ["profile"], "label": "ci bot" }))
        .await
        .json()
        .await
        .unwrap();
    assert!(created.get("enterprise").is_none());
    let created: Value = f
        .app
        .create_token(
            &f.token,
            json!({ "scope": ["profile"], "label": "ci bot", "enterprise": f.enterprise }),
        )
        .await
        .json()
        .await
        .unwrap();
    let got = rx.wait_for(1, 10).await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(rx.received().len(), 1, "only the token with an enterprise fires");
    let p: Value = serde_json::from_str(&got[0].body).unwrap();
    assert_eq!(p["type"], "accessToken");
    assert_eq!(p["accessTokenId"], created["id"]);
    assert_eq!(p["label"], "ci bot");
    assert!(!got[0].body.contains(created["token"].as_str().unwrap()), "the token value is never sent");
    assert_eq!(
        got[0].headers["x-signature-sha256"].to_str().unwrap(),
        hmac_hex(secret.as_bytes(), got[0].body.as_bytes())
    );
}

#[tokio::test]
async fn events_fan_out_once_per_event_id() {
    let f = fixture(fast).await;
    let rx = TestReceiver::start().await;
    let a = f.wallet_hook_id(&rx.url, "transfer").await;
    let b = f.wallet_hook_id(&format!("{}?second", rx.url), "transfer").await;
    f.wallet_hook_id(&rx.url, "txRequest").await;
    let admin = f.admin_token().await;
    let ev = json!({ "eventId": "ev-fan", "type": "transfer", "walletId": WALLET, "coin": "tbtc", "transferId": "tr-9", "hash": "0xabc", "state": "confirmed", "valueString": "123456789012345678901234567890" });
    let r1 = f.event(&admin, ev.clone()).await;
    assert_eq!(r1["notifications"], 2);
    let mut hooks: Vec<&str> = r1["webhooks"].as_array().unwrap().iter().filter_map(Value::as_str).collect();
    hooks.sort();
    let mut want = vec![a.as_str(), b.as_str()];
    want.sort();
    assert_eq!(hooks, want);
    let r2 = f.event(&admin, ev.clone()).await;
    assert_eq!(r1, r2, "a repeated eventId returns the original result");
    let got = rx.wait_for(2, 10).await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(rx.received().len(), 2, "and sends nothing more");
    let p: Value = serde_json::from_str(&got[0].body).unwrap();
    assert_eq!(p["wallet"], WALLET);
    assert_eq!(p["hash"], "0xabc");
    assert!(got[0].body.contains("\"valueString\":\"123456789012345678901234567890\""));
    // A simulation of that transfer now uses the ingested event's data.
    let sim: Value = f
        .app
        .post_auth(
            &format!("/api/v2/tbtc/wallet/{WALLET}/webhooks/{a}/simulate"),
            &f.token,
            &json!({ "transferId": "tr-9" }),
        )
        .await
        .json()
        .await
        .unwrap();
    let payload: Value =
        serde_json::from_str(sim["webhookNotifications"][0]["payload"].as_str().unwrap()).unwrap();
    assert_eq!(payload["hash"], "0xabc");
    assert!(payload.get("placeholder").is_none());
    // Another wallet's webhook cannot borrow that transfer's data.
    let other = "fedcba9876543210fedcba9876543210";
    let stored = f.app.state.store.wallets_by_ids(&[WALLET.to_string()], false).await.unwrap();
    let mut rec: Value = serde_json::from_str(&stored[0].record).unwrap();
    rec["id"] = json!(other);
    custodian::wallets::import::import(&f.app.state.store, &json!([rec]).to_string(), |_, _| {})
        .await
        .unwrap();
    let hook_other: Value = f
        .app
        .post_auth(
            &format!("/api/v2/tbtc/wallet/{other}/webhooks"),
            &f.token,
            &json!({ "type": "transfer", "url": "https://example.com/o" }),
        )
        .await
        .json()
        .await
        .unwrap();
    let path =
        format!("/api/v2/tbtc/wallet/{other}/webhooks/{}/simulate", hook_other["id"].as_str().unwrap());
    let sim: Value =
        f.app.post_auth(&path, &f.token, &json!({ "transferId": "tr-9" })).await.json().await.unwrap();
    let payload: Value =
        serde_json::from_str(sim["webhookNotifications"][0]["payload"].as_str().unwrap()).unwrap();
    assert_eq!(payload["placeholder"], true, "{payload}");
    assert_ne!(payload["hash"], "0xabc");
    // Only service admins ingest events, and bad events are refused.
    let res = f.app.post_auth("/api/v2/internal/events", &f.token, &ev).await;
    assert_error(res, 403, "InsufficientScope").await;
    let res = f
        .app
        .post_auth("/api/v2/internal/events", &admin, &json!({ "eventId": "e", "type": "teleport" }))
        .await;
    assert_error(res, 400, "InvalidWebhookType").await;
    let res = f
        .app
        .post_auth("/api/v2/internal/events", &admin, &json!({ "eventId": "e", "type": "transfer" }))
        .await;
    assert_error(res, 400, "MissingField").await;
}

#[tokio::test]
async fn block_events_honour_num_confirmations_once_per_block() {
    let f = fixture(fast).await;
    let rx = TestReceiver::start().await;
    f.app
        .post_auth(
            "/api/v2/tbtc/webhooks",
            &f.token,
            &json!({ "type": "block", "url": rx.url, "numConfirmations": 3 }),
        )
        .await;
    let admin = f.admin_token().await;
    let r = f.event(&admin, json!({ "eventId": "b1-c1", "type": "block", "coin": "tbtc", "blockId": "blk1", "confirmations": 1 })).await;
    assert_eq!(r["notifications"], 0);
    let r = f.event(&admin, json!({ "eventId": "b1-c3", "type": "block", "coin": "tbtc", "blockId": "blk1", "confirmations": 3 })).await;
    assert_eq!(r["notifications"], 1);
    f.event(
        &admin,
        json!({ "eventId": "b1-c4", "type": "block", "coin": "tbtc", "blockId": "blk1", "confirmations": 4 }),
    )
    .await;
    f.event(&admin, json!({ "eventId": "other-coin", "type": "block", "coin": "btc", "blockId": "blk1", "confirmations": 9 })).await;
    rx.wait_for(1, 10).await;
    tokio::time::sleep(Duration::from_millis(400)).await;
    assert_eq!(rx.received().len(), 1, "one notification for the block");
}

#[tokio::test]
async fn metrics_are_exported() {
    let f = fixture(fast).await;
    let rx = TestReceiver::start().await;
    f.wallet_hook_id(&rx.url, "transfer").await;
    let admin = f.admin_token().await;
    f.event(&admin, json!({ "eventId": "m1", "type": "transfer", "walletId": WALLET })).await;
    rx.wait_for(1, 10).await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    let text = f.app.client.get(f.app.url("/metrics")).send().await.unwrap().text().await.unwrap();
    for needle in [
        "custodian_webhook_deliveries_total{outcome=\"delivered\"} 1",
        "custodian_webhook_attempt_duration_seconds_bucket",
        "custodian_webhook_notifications_due",
        "custodian_webhook_notifications_in_flight",
        "custodian_webhooks_suspended",
        "custodian_http_requests_total{method=\"POST\",route=\"/api/v2/internal/events\",status=\"200\"} 1",
        "custodian_http_request_duration_seconds_bucket",
    ] {
        assert!(text.contains(needle), "{needle} missing from:\n{text}");
    }
}

/// Kills the server process mid-delivery with SIGKILL; after a restart on the same database
/// every notification still arrives (at least once).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_notification_is_lost_when_the_server_is_killed() {
    use crate::procs::{distinct, Cluster};
    let rx = TestReceiver::start().await;
    rx.delay_all(30);
    let cluster = Cluster::new(&[
        ("CUSTODIAN_DELIVERY_ALLOWED_CIDRS", "127.0.0.1/32"),
        ("CUSTODIAN_DELIVERY_RETRY_SCHEDULE", "1,1,1"),
        ("CUSTODIAN_DELIVERY_TIMEOUT", "2"),
        ("CUSTODIAN_DELIVERY_POLL_INTERVAL_MS", "50"),
        ("CUSTODIAN_DELIVERY_CONCURRENCY", "16"),
    ])
    .await;
    let mut server = cluster.start().await;
    let base = server.base.clone();
    let token = cluster.login(&base).await;
    cluster.webhooks(&base, &token, &rx.url, 10).await;
    cluster.events(&[&base], &token, "crash", 0..100).await;
    // Mid-way: some delivered, most not.
    rx.wait_for(100, 60).await;
    server.kill();
    let before = rx.received().len();
    assert!(before < 1000, "the kill came too late to test anything ({before} delivered)");

    let server = cluster.start().await;
    rx.delay_all(0);
    let deadline = std::time::Instant::now() + Duration::from_secs(90);
    while distinct(&rx.received()) < 1000 && std::time::Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    server.stop();
    assert_eq!(
        distinct(&rx.received()),
        1000,
        "every notification arrives after the crash (killed after {before})"
    );
}

/// An API-only process takes events; a worker-only process, which serves no API, delivers them.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn api_and_worker_roles_split_the_work() {
    use crate::procs::{distinct, Cluster};
    let rx = TestReceiver::start().await;
    let cluster = Cluster::new(&[
        ("CUSTODIAN_DELIVERY_ALLOWED_CIDRS", "127.0.0.1/32"),
        ("CUSTODIAN_DELIVERY_POLL_INTERVAL_MS", "50"),
    ])
    .await;
    let api = cluster.start_role("api").await;
    let token = cluster.login(&api.base).await;
    cluster.webhooks(&api.base, &token, &rx.url, 2).await;
    cluster.events(&[&api.base], &token, "role", 0..5).await;
    tokio::time::sleep(Duration::from_millis(600)).await;
    assert!(rx.received().is_empty(), "an api process delivers nothing");
    let worker = cluster.start_role("worker").await;
    let res = cluster
        .client
        .get(format!("{}/api/v2/user/me", worker.base))
        .bearer_auth(&token)
        .send()
        .await
        .unwrap();
    assert_eq!(res.status(), 404, "a worker serves no API");
    let metrics = cluster.client.get(format!("{}/metrics", worker.base)).send().await.unwrap();
    assert_eq!(metrics.status(), 200);
    rx.wait_for(10, 20).await;
    assert_eq!(distinct(&rx.received()), 10);
    api.stop();
    worker.stop();
}

/// A slow receiver gets at most its share of delivery slots: a fast one behind it is not kept
/// waiting.
#[tokio::test]
async fn a_slow_receiver_cannot_hold_every_delivery_slot() {
    let f = fixture(|c| {
        fast(c);
        c.delivery.timeout = 5;
        c.delivery.concurrency = 8;
        c.delivery.per_webhook_concurrency = 2;
    })
    .await;
    let slow = TestReceiver::start().await;
    slow.delay_all(1000);
    let quick = TestReceiver::start().await;
    f.wallet_hook_id(&slow.url, "transfer").await;
    f.wallet_hook_id(&quick.url, "txRequest").await;
    let admin = f.admin_token().await;
    for i in 0..20 {
        f.event(&admin, json!({ "eventId": format!("slow-{i}"), "type": "transfer", "walletId": WALLET }))
            .await;
    }
    tokio::time::sleep(Duration::from_millis(300)).await;
    let start = std::time::Instant::now();
    for i in 0..5 {
        f.event(&admin, json!({ "eventId": format!("quick-{i}"), "type": "txRequest", "walletId": WALLET }))
            .await;
    }
    quick.wait_for(5, 10).await;
    assert!(start.elapsed() < Duration::from_millis(900), "the quick receiver waited {:?}", start.elapsed());
    assert!(slow.received().len() <= 4, "at most 2 slots per webhook: {} in 1.2 s", slow.received().len());
    slow.wait_for(20, 30).await;
}
