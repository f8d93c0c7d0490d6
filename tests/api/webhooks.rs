//! Webhook registration and access (§4.4, §4.6, §4.8, §8), and the fixture the delivery and
//! event suites share.

use base64::Engine as _;
use custodian::config::Config;
use hmac::Mac;
use serde_json::{json, Value};

use crate::common::*;

pub(crate) const WALLET: &str = "0123456789abcdef0123456789abcdef";

/// Delivery tuned for tests: the receiver on 127.0.0.1 allowed, 1-second retries.
pub(crate) fn fast(c: &mut Config) {
    c.delivery.allowed_cidrs = vec!["127.0.0.1/32".parse().unwrap()];
    c.delivery.retry_schedule = vec![1, 1, 1];
    c.delivery.timeout = 1;
    c.delivery.poll_interval_ms = 50;
}

pub(crate) struct Fixture {
    pub app: TestApp,
    pub user: TestUser,
    pub token: String,
    pub enterprise: String,
}

pub(crate) async fn fixture(tweak: impl FnOnce(&mut Config)) -> Fixture {
    let app = spawn_app_with(tweak).await;
    let user = app.create_user("hooks@example.com").await;
    let enterprise = app.create_enterprise("Acme", &[(&user, true)]).await;
    app.import_wallet(WALLET, &enterprise, &[&user.id]).await;
    let token = app.login(&user).await;
    Fixture { app, user, token, enterprise }
}

impl Fixture {
    pub async fn wallet_hook(&self, body: Value) -> reqwest::Response {
        self.app.post_auth(&format!("/api/v2/tbtc/wallet/{WALLET}/webhooks"), &self.token, &body).await
    }

    pub async fn wallet_hook_id(&self, url: &str, typ: &str) -> String {
        let res = self.wallet_hook(json!({ "type": typ, "url": url, "label": "mine" })).await;
        let b: Value = res.json().await.unwrap();
        b["id"].as_str().unwrap_or_else(|| panic!("{b}")).to_string()
    }

    pub async fn secret(&self) -> String {
        let b = expect_json(self.app.rotate_secret(&self.token, &self.enterprise).await, 200).await;
        b["secret"].as_str().unwrap_or_else(|| panic!("{b}")).to_string()
    }

    pub async fn admin_token(&self) -> String {
        let ops = self.app.create_user_with("ops@example.com", true).await;
        self.app.login(&ops).await
    }

    pub async fn event(&self, admin: &str, body: Value) -> Value {
        expect_json(self.app.ingest(admin, &body).await, 200).await
    }

    pub async fn get(&self, path: &str) -> Value {
        self.app.get_auth(path, &self.token).await.json().await.unwrap()
    }
}

pub(crate) fn hmac_hex(key: &[u8], body: &[u8]) -> String {
    let mut m = hmac::Hmac::<sha2::Sha256>::new_from_slice(key).unwrap();
    m.update(body);
    hex::encode(m.finalize().into_bytes())
}

pub(crate) fn standard_sig(secret: &str, id: &str, ts: &str, body: &str) -> String {
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
    assert!(custodian::types::is_id(w["id"].as_str().unwrap()));
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

    lists_are_paged(&f, &b, &e).await;
    removals_at_each_level(&f, &b, &e).await;
}

/// The three lists of `create_list_and_remove_at_each_level`, paged with limit and prevId.
async fn lists_are_paged(f: &Fixture, b: &Value, e: &Value) {
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
}

/// Removal by type and url, by id, and the enterprise route's 204 (then 404).
async fn removals_at_each_level(f: &Fixture, b: &Value, e: &Value) {
    let delete = |path: String, body: Option<Value>| {
        let mut req = f.app.client.delete(f.app.url(&path)).bearer_auth(&f.token);
        if let Some(body) = body {
            req = req.json(&body);
        }
        async move { req.send().await.unwrap() }
    };
    let body = json!({ "type": "transfer", "url": "https://example.com/hook" });
    let removed: Value =
        delete(format!("/api/v2/tbtc/wallet/{WALLET}/webhooks"), Some(body)).await.json().await.unwrap();
    assert_eq!(removed["removed"], 1);
    let removed: Value =
        delete("/api/v2/tbtc/webhooks".into(), Some(json!({ "id": b["id"] }))).await.json().await.unwrap();
    assert_eq!(removed["removed"], 1);
    let path = format!("/api/v2/enterprise/{}/webhook/{}", f.enterprise, e["id"].as_str().unwrap());
    assert_eq!(delete(path.clone(), None).await.status(), 204);
    assert_error(delete(path, None).await, 404, "WebhookNotFound").await;
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
    custom_headers_cannot_change_framing(&f).await;
    level_rules_are_validated(&f).await;
}

#[tokio::test]
async fn the_callback_url_is_exactly_what_the_openapi_document_allows() {
    let f = fixture(fast).await;
    let doc = expect_json(f.app.client.get(f.app.url("/openapi.json")).send().await.unwrap(), 200).await;
    for level in ["WalletWebhookRequest", "BlockWebhookRequest", "EnterpriseWebhookRequest"] {
        let url = &doc["components"]["schemas"][level]["properties"]["url"];
        assert_eq!(url["pattern"], custodian::webhooks::callback_url::URL_PATTERN, "{level}");
    }
    // Forms the document allows, the server takes; an IP host too (127.0.0.1 is allowed here).
    for url in [
        "https://1password.example:65535/hook",
        "HTTPS://Hooks.Example.com?only=query",
        "http://127.0.0.1:4000/deposits",
        "https://example.com/%7Euser#part",
    ] {
        let res = f.wallet_hook(json!({ "type": "transfer", "url": url })).await;
        assert_eq!(res.status(), 200, "{url}: {}", res.text().await.unwrap());
    }
    // What it refuses, the server refuses, naming `url`, and stores nothing.
    for url in [
        "http://E.wgn.Jgn.hp.w.A*",
        "https://user:secret@example.com/",
        "https://example.com:65536/",
        "https://example.com./",
        "https://example.com/caf\u{e9}",
        "https://example.com/a b",
        "http://01.2.3.4/",
    ] {
        let b =
            assert_error(f.wallet_hook(json!({ "type": "transfer", "url": url })).await, 400, "InvalidField")
                .await;
        assert_eq!(b["context"]["field"], "url", "{url}");
    }
    let listed = f.app.get_auth(&format!("/api/v2/tbtc/wallet/{WALLET}/webhooks"), &f.token).await;
    assert_eq!(expect_json(listed, 200).await["webhooks"].as_array().map(Vec::len), Some(4));
}

/// Hop-by-hop and framing headers and `User-Agent` are refused in
/// `customHttpHeaders`, and values hold to printable ASCII.
async fn custom_headers_cannot_change_framing(f: &Fixture) {
    let names = [
        "User-Agent",
        "Content-Encoding",
        "Expect",
        "Upgrade",
        "TE",
        "Keep-Alive",
        "Proxy-Connection",
        "Trailer",
    ];
    for name in names {
        let body =
            json!({ "type": "transfer", "url": "https://example.com", "customHttpHeaders": { name: "x" } });
        let b = assert_error(f.wallet_hook(body).await, 400, "InvalidField").await;
        assert_eq!(b["context"]["field"], format!("customHttpHeaders.{name}"));
    }
    let body = json!({ "type": "transfer", "url": "https://example.com", "customHttpHeaders": { "X-Note": "caf\u{e9}" } });
    let b = assert_error(f.wallet_hook(body).await, 400, "InvalidField").await;
    assert_eq!(b["context"]["field"], "customHttpHeaders.X-Note");
    // One name in two cases is one header given twice.
    let body = json!({ "type": "transfer", "url": "https://example.com", "customHttpHeaders": { "x-a": "1", "X-A": "2" } });
    let b = assert_error(f.wallet_hook(body).await, 400, "InvalidField").await;
    assert!(b["context"]["field"].as_str().unwrap().eq_ignore_ascii_case("customHttpHeaders.x-a"), "{b}");
}

/// `registration_is_validated`, continued: each level's types and fields, who may set
/// allowBlockedHosts, and that the wallet or enterprise must exist.
async fn level_rules_are_validated(f: &Fixture) {
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
    let too_many = json!({ "type": "block", "url": "https://example.com", "numConfirmations": 1_000_001 });
    let res = f.app.post_auth("/api/v2/tbtc/webhooks", &f.token, &too_many).await;
    let body = assert_error(res, 400, "InvalidField").await;
    assert_eq!(body["context"]["field"], "numConfirmations");
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
    f.app
        .state
        .store
        .upsert_membership(&f.enterprise.parse().unwrap(), &member.id.parse().unwrap(), false, &[])
        .await
        .unwrap();
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
