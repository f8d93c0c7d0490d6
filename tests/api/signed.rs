//! Signed requests, BitGo's auth versions 2 and 3 (docs/decisions.md#signed-requests), signed here exactly as
//! `@bitgo/sdk-hmac` signs them: the request, the response check, the window, the replay guard
//! and every malformed header.

use reqwest::{Method, Response};
use serde_json::{json, Value};
use sha2::Digest;

use crate::{common::*, webhooks::WALLET};

/// The token is the key, as BitGoJS keys it.
fn hmac_hex(token: &str, subject: &[u8]) -> String {
    crate::webhooks::hmac_hex(token.as_bytes(), subject)
}

/// What a signed request is made of; a test changes one part to break it.
pub(crate) struct Signed {
    version: &'static str,
    method: Method,
    path: String,
    body: String,
    ts: i64,
}

impl Signed {
    pub(crate) fn new(version: &'static str, method: Method, path: &str, body: &str) -> Self {
        Signed { version, method, path: path.into(), body: body.into(), ts: custodian::clock::wall_now_ms() }
    }

    /// The SDK's request subject (`calculateHMACSubject` without a status).
    fn subject(&self) -> String {
        match self.version {
            "3.0" => format!("{}|{}|3.0|{}|{}", self.method.as_str(), self.ts, self.path, self.body),
            _ => format!("{}|{}|{}", self.ts, self.path, self.body),
        }
    }

    /// Sends it with `token`'s hash as the bearer and `mac` as the HMAC (None: the right one).
    pub(crate) async fn send(&self, app: &TestApp, token: &str, mac: Option<&str>) -> Response {
        let right = hmac_hex(token, self.subject().as_bytes());
        let mut req = app
            .client
            .request(self.method.clone(), app.url(&self.path))
            .header("Authorization", format!("Bearer {}", hex::encode(sha2::Sha256::digest(token))))
            .header("Auth-Timestamp", self.ts.to_string())
            .header("HMAC", mac.unwrap_or(&right))
            .header("BitGo-Auth-Version", self.version);
        if !self.body.is_empty() {
            req = req.header("Content-Type", "application/json").body(self.body.clone());
        }
        req.send().await.expect("request")
    }
}

/// Checks the response's `hmac` and `timestamp` as the SDK's `verifyResponse` does, and
/// returns its body.
pub(crate) async fn verified_body(res: Response, signed: &Signed, token: &str) -> Value {
    let status = res.status().as_u16();
    let header = |n: &str| res.headers().get(n).and_then(|v| v.to_str().ok()).map(str::to_string);
    let (ts, mac) = (header("timestamp").expect("timestamp header"), header("hmac").expect("hmac header"));
    let text = res.text().await.expect("body");
    let subject = match signed.version {
        "3.0" => format!("{}|{ts}|{}|{status}|{text}", signed.method.as_str(), signed.path),
        _ => format!("{ts}|{}|{status}|{text}", signed.path),
    };
    assert_eq!(mac, hmac_hex(token, subject.as_bytes()), "response HMAC over {subject:?}");
    let age = custodian::clock::wall_now_ms() - ts.parse::<i64>().expect("timestamp is ms");
    assert!((-60_000..=300_000).contains(&age), "response timestamp {age} ms old");
    serde_json::from_str(&text).expect("json")
}

async fn signed_setup() -> (TestApp, String) {
    let app = spawn_app().await;
    let user = app.create_user("signer@example.com").await;
    let e = app.create_enterprise("Signers", &[(&user, true)]).await;
    app.import_wallet(WALLET, &e, &[&user.id]).await;
    let token = app.login(&user).await;
    (app, token)
}

#[tokio::test]
async fn v2_and_v3_requests_are_accepted_and_their_responses_signed() {
    let (app, token) = signed_setup().await;
    for version in ["2.0", "3.0"] {
        let me = Signed::new(version, Method::GET, "/api/v2/user/me", "");
        let res = me.send(&app, &token, None).await;
        assert_eq!(res.status(), 200, "{version}");
        let body = verified_body(res, &me, &token).await;
        assert_eq!(body["user"]["username"], "signer@example.com", "{body}");

        let body = json!({ "ids": [WALLET] }).to_string();
        let lookup = Signed::new(version, Method::POST, "/api/v2/internal/wallet?expandBalance=true", &body);
        let res = lookup.send(&app, &token, None).await;
        assert_eq!(res.status(), 200, "{version}");
        let got = verified_body(res, &lookup, &token).await;
        assert_eq!(got["wallets"][0]["id"], WALLET, "{got}");
    }
    // An error after authentication is signed too.
    let missing =
        Signed::new("3.0", Method::GET, "/api/v2/tbtc/wallet/ffffffffffffffffffffffffffffffff/webhooks", "");
    let res = missing.send(&app, &token, None).await;
    assert_eq!(res.status(), 404);
    let body = verified_body(res, &missing, &token).await;
    assert!(body["requestId"].as_str().is_some(), "{body}");
}

#[tokio::test]
async fn a_signed_request_is_accepted_once() {
    let (app, token) = signed_setup().await;
    let body = json!({ "ids": [WALLET] }).to_string();
    for (method, path, body) in
        [(Method::POST, "/api/v2/internal/wallet", body.as_str()), (Method::GET, "/api/v2/user/me", "")]
    {
        let req = Signed::new("2.0", method, path, body);
        assert_eq!(req.send(&app, &token, None).await.status(), 200);
        let again = req.send(&app, &token, None).await;
        assert_eq!(again.headers()["x-auth-required"], "true");
        assert_error(again, 401, "RequestReplayed").await;
    }
}

/// A v2 signature does not cover the method: one captured on a read is refused when replayed
/// as a write, and one captured on a write when replayed as a read. v3 signs the method, so a
/// method swap there does not even verify.
#[tokio::test]
async fn a_signature_is_used_once_whatever_the_method() {
    let (app, token) = signed_setup().await;
    let hooks = format!("/api/v2/tbtc/wallet/{WALLET}/webhooks");
    let read = Signed::new("2.0", Method::GET, &hooks, "");
    assert_eq!(read.send(&app, &token, None).await.status(), 200);
    let as_delete = Signed { method: Method::DELETE, ..read };
    assert_error(as_delete.send(&app, &token, None).await, 401, "RequestReplayed").await;

    let body = json!({ "label": "swap", "otp": "000000", "scope": ["profile"] }).to_string();
    let write = Signed::new("2.0", Method::POST, "/api/v2/user/accesstoken", &body);
    assert_eq!(write.send(&app, &token, None).await.status(), 200);
    let as_get = Signed { method: Method::GET, ..write };
    assert_error(as_get.send(&app, &token, None).await, 401, "RequestReplayed").await;

    let read = Signed::new("3.0", Method::GET, &hooks, "");
    let mac = hmac_hex(&token, read.subject().as_bytes());
    assert_eq!(read.send(&app, &token, Some(&mac)).await.status(), 200);
    let as_delete = Signed { method: Method::DELETE, ..read };
    assert_error(as_delete.send(&app, &token, Some(&mac)).await, 401, "InvalidSignature").await;
}

#[tokio::test]
async fn stale_tampered_and_malformed_signatures_are_401() {
    let (app, token) = signed_setup().await;
    let now = custodian::clock::wall_now_ms();
    for (offset, what) in [(-301_000, "six minutes old"), (61_000, "a minute ahead")] {
        let mut req = Signed::new("2.0", Method::GET, "/api/v2/user/me", "");
        req.ts = now + offset;
        let res = req.send(&app, &token, None).await;
        assert_eq!(res.status(), 401, "{what}");
        assert_error(res, 401, "StaleRequest").await;
    }
    // Signed over one body, sent with another.
    let req =
        Signed::new("3.0", Method::POST, "/api/v2/internal/wallet", &json!({ "ids": [WALLET] }).to_string());
    let mac = hmac_hex(&token, req.subject().as_bytes());
    let tampered = Signed { body: json!({ "ids": ["0".repeat(32)] }).to_string(), ..req };
    assert_error(tampered.send(&app, &token, Some(&mac)).await, 401, "InvalidSignature").await;
    let req = Signed::new("2.0", Method::GET, "/api/v2/user/me", "");
    assert_error(req.send(&app, &token, Some("zz")).await, 401, "InvalidSignature").await;
    assert_error(req.send(&app, &token, Some(&"0".repeat(64))).await, 401, "InvalidSignature").await;
    // The hash of the token as a plain bearer, without a signature.
    let hash = hex::encode(sha2::Sha256::digest(&token));
    let res = app.get_auth("/api/v2/user/me", &hash).await;
    assert_eq!(res.headers()["x-auth-required"], "true");
    assert_error(res, 401, "InvalidToken").await;
    // An unknown token, signed correctly with itself.
    let unknown = format!("v2x{}", "ab".repeat(32));
    assert_error(req.send(&app, &unknown, None).await, 401, "InvalidToken").await;
    // Headers that do not parse.
    let url = app.url("/api/v2/user/me");
    let bearer = format!("Bearer {hash}");
    let ts = now.to_string();
    let mac = hmac_hex(&token, format!("{ts}|/api/v2/user/me|").as_bytes());
    for (name, value, error) in [
        ("Auth-Timestamp", "soon", "AuthenticationRequired"),
        ("BitGo-Auth-Version", "9.0", "AuthenticationRequired"),
        ("Authorization", "Bearer short", "AuthenticationRequired"),
        ("HMAC", "", "InvalidSignature"),
    ] {
        let mut headers = vec![
            ("Authorization", bearer.as_str()),
            ("Auth-Timestamp", ts.as_str()),
            ("HMAC", mac.as_str()),
            ("BitGo-Auth-Version", "2.0"),
        ];
        for h in headers.iter_mut().filter(|h| h.0 == name) {
            h.1 = value;
        }
        let mut r = app.client.get(&url);
        for (n, v) in headers {
            r = r.header(n, v);
        }
        let res = r.send().await.expect("request");
        assert_eq!(res.headers()["x-auth-required"], "true", "{name}: {value}");
        assert_error(res, 401, error).await;
    }
}

#[tokio::test]
async fn token_values_are_sealed_at_rest() {
    let (app, token) = signed_setup().await;
    let hash = hex::encode(sha2::Sha256::digest(&token));
    let sealed = app
        .raw_sql(&format!("SELECT {} FROM access_tokens WHERE token_hash = '{hash}'", hex_of("sealed_value")))
        .await;
    assert_eq!(sealed.len(), 1, "one sealed value");
    assert!(sealed[0].len() > 2 * token.len(), "nonce, ciphertext and tag: {}", sealed[0]);
    assert!(!sealed[0].contains(&hex::encode(token.as_bytes())), "the value is not stored in the clear");
}

/// The SQL of `column`'s bytes as hex text, in this backend's spelling.
fn hex_of(column: &str) -> String {
    match crate::BACKEND {
        Backend::Sqlite => format!("lower(hex({column}))"),
        Backend::Postgres => format!("encode({column}, 'hex')"),
    }
}

/// Version 4 (`@bitgo/sdk-hmac` `hmacv4`): the token id as the bearer, seconds, a body hash and a
/// request id; the response signed over the same fields with its status.
#[tokio::test]
async fn v4_requests_are_accepted_once_and_their_responses_signed() {
    let (app, _) = signed_setup().await;
    let user = app.create_user("v4@example.com").await;
    let login = expect_json(app.login_raw(&user.email, PASSWORD, "000000").await, 200).await;
    let (token, token_id) =
        (login["access_token"].as_str().expect("token"), login["token_id"].as_str().expect("id"));
    let body = json!({ "otp": "000000" }).to_string();
    let (path, request_id) = ("/api/v2/user/unlock", "1b7a1d2b-7a2f-4e4b-a1f8-c2a5a0f84e3e");
    let send = |ts: i64, sig_body: &str, sent_body: &str| {
        let hash = hex::encode(sha2::Sha256::digest(sig_body.as_bytes()));
        let preimage = format!("{ts}\nPOST\n{path}\n{hash}\n{request_id}\n");
        app.client
            .post(app.url(path))
            .header("Authorization", format!("Bearer {token_id}"))
            .header("X-Request-Timestamp", ts.to_string())
            .header("X-Content-SHA256", hash)
            .header("X-Auth-Request-Id", request_id)
            .header("X-Signature", hmac_hex(token, preimage.as_bytes()))
            .header("Content-Type", "application/json")
            .body(sent_body.to_string())
            .send()
    };
    let now = custodian::clock::wall_now();
    let res = send(now, &body, &body).await.expect("request");
    assert_eq!(res.status(), 200);
    let header = |n: &str| res.headers().get(n).and_then(|v| v.to_str().ok()).unwrap_or("").to_string();
    let (ts, hash, id, sig) = (
        header("x-request-timestamp"),
        header("x-content-sha256"),
        header("x-auth-request-id"),
        header("x-signature"),
    );
    let text = res.text().await.expect("body");
    assert_eq!(hash, hex::encode(sha2::Sha256::digest(text.as_bytes())));
    assert_eq!(id, request_id);
    let preimage = format!("{ts}\nPOST\n{path}\n200\n{hash}\n{id}\n");
    assert_eq!(sig, hmac_hex(token, preimage.as_bytes()), "response signature over {preimage:?}");
    assert!((now - 5..=now + 5).contains(&ts.parse::<i64>().expect("seconds")));

    assert_error(send(now, &body, &body).await.expect("again"), 401, "RequestReplayed").await;
    let other = json!({ "otp": "111111" }).to_string();
    assert_error(send(now + 1, &body, &other).await.expect("tampered"), 401, "InvalidSignature").await;
    assert_error(send(now - 400, &body, &body).await.expect("stale"), 401, "StaleRequest").await;
}

/// A state-changing signed request seen by one process is refused by another process sharing
/// the database: the replay guard for writes is the database's.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_signed_write_replayed_to_another_process_is_refused() {
    use crate::procs::Cluster;
    let cluster = Cluster::new(&[]).await;
    let (a, b) = (cluster.start().await, cluster.start().await);
    let token = cluster.login(&a.base).await;
    let req =
        Signed::new("3.0", Method::POST, "/api/v2/user/unlock", &json!({ "otp": "000000" }).to_string());
    let send = |base: &str| {
        let right = hmac_hex(&token, req.subject().as_bytes());
        cluster
            .client
            .post(format!("{base}{}", req.path))
            .header("Authorization", format!("Bearer {}", hex::encode(sha2::Sha256::digest(&token))))
            .header("Auth-Timestamp", req.ts.to_string())
            .header("HMAC", right)
            .header("BitGo-Auth-Version", req.version)
            .header("Content-Type", "application/json")
            .body(req.body.clone())
            .send()
    };
    assert_eq!(send(&a.base).await.expect("first").status(), 200);
    let replayed = send(&b.base).await.expect("replay");
    assert_eq!(replayed.status(), 401);
    let body: Value = replayed.json().await.expect("json");
    assert_eq!(body["name"], "RequestReplayed", "{body}");
}

/// A signed read seen by one process is refused by another process sharing the database, for
/// each auth version: the replay record is the database's for reads too.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_signed_read_replayed_to_another_process_is_refused() {
    use crate::procs::Cluster;
    let cluster = Cluster::new(&[]).await;
    let (a, b) = (cluster.start().await, cluster.start().await);
    let token = cluster.login(&a.base).await;
    for version in ["2.0", "3.0"] {
        let req = Signed::new(version, Method::GET, "/api/v2/user/me", "");
        let send = |base: &str| {
            cluster
                .client
                .get(format!("{base}{}", req.path))
                .header("Authorization", format!("Bearer {}", hex::encode(sha2::Sha256::digest(&token))))
                .header("Auth-Timestamp", req.ts.to_string())
                .header("HMAC", hmac_hex(&token, req.subject().as_bytes()))
                .header("BitGo-Auth-Version", req.version)
                .send()
        };
        assert_eq!(send(&a.base).await.expect("first").status(), 200, "v{version}");
        let replayed = send(&b.base).await.expect("replay");
        assert_eq!(replayed.status(), 401, "v{version}");
        let body: Value = replayed.json().await.expect("json");
        assert_eq!(body["name"], "RequestReplayed", "v{version}: {body}");
    }
    // v4: the login's token_id as the bearer; the method is signed, so a swap does not verify.
    let login: Value = cluster
        .client
        .post(format!("{}/api/v2/internal/user/login", a.base))
        .json(&json!({ "email": "ops@example.com", "password": crate::common::PASSWORD, "otp": "000000" }))
        .send()
        .await
        .expect("login")
        .json()
        .await
        .expect("json");
    let (token, token_id) = (login["access_token"].as_str().unwrap(), login["token_id"].as_str().unwrap());
    let (ts, path, request_id) =
        (custodian::clock::wall_now(), "/api/v2/user/me", "5a1c0f3e-0d7b-4a3e-9b1e-2f6c7d8e9a0b");
    let hash = hex::encode(sha2::Sha256::digest(b""));
    let signature = hmac_hex(token, format!("{ts}\nGET\n{path}\n{hash}\n{request_id}\n").as_bytes());
    let send = |base: &str, method: Method| {
        cluster
            .client
            .request(method, format!("{base}{path}"))
            .header("Authorization", format!("Bearer {token_id}"))
            .header("X-Request-Timestamp", ts.to_string())
            .header("X-Content-SHA256", &hash)
            .header("X-Auth-Request-Id", request_id)
            .header("X-Signature", &signature)
            .send()
    };
    assert_eq!(send(&a.base, Method::GET).await.expect("first").status(), 200, "v4");
    assert_error(send(&b.base, Method::GET).await.expect("replay"), 401, "RequestReplayed").await;
    assert_error(send(&a.base, Method::DELETE).await.expect("swap"), 401, "InvalidSignature").await;
    // The same X-Auth-Request-Id on another request, rightly signed, on either process: refused.
    let other = "/api/v2/user/session";
    for base in [&a.base, &b.base] {
        let signature = hmac_hex(token, format!("{ts}\nGET\n{other}\n{hash}\n{request_id}\n").as_bytes());
        let res = cluster
            .client
            .get(format!("{base}{other}"))
            .header("Authorization", format!("Bearer {token_id}"))
            .header("X-Request-Timestamp", ts.to_string())
            .header("X-Content-SHA256", &hash)
            .header("X-Auth-Request-Id", request_id)
            .header("X-Signature", signature)
            .send()
            .await
            .expect("reused id");
        assert_error(res, 401, "RequestReplayed").await;
    }
}

/// The same signed write sent twenty times at once (so several land in one batch of the replay
/// writer): exactly one is accepted.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_signed_write_sent_many_times_at_once_is_accepted_once() {
    let (app, token) = signed_setup().await;
    let req =
        Signed::new("2.0", Method::POST, "/api/v2/internal/wallet", &json!({ "ids": [WALLET] }).to_string());
    let sends = (0..20).map(|_| req.send(&app, &token, None));
    let statuses: Vec<u16> =
        futures_util::future::join_all(sends).await.iter().map(|r| r.status().as_u16()).collect();
    assert_eq!(statuses.iter().filter(|s| **s == 200).count(), 1, "{statuses:?}");
    assert_eq!(statuses.iter().filter(|s| **s == 401).count(), 19, "{statuses:?}");
}

/// The replay records of writes leave once their window has passed: the table holds about one
/// window of requests, not every request ever signed.
#[tokio::test]
async fn expired_replay_records_are_removed_by_later_writes() {
    let (app, token) = signed_setup().await;
    let body = json!({ "ids": [WALLET] }).to_string();
    for _ in 0..3 {
        let req = Signed::new("2.0", Method::POST, "/api/v2/internal/wallet", &body);
        assert_eq!(req.send(&app, &token, None).await.status(), 200);
        // Paces the requests so that each has its own millisecond timestamp (a new MAC).
        tokio::time::sleep(std::time::Duration::from_millis(2)).await;
    }
    let count = "SELECT CAST(count(*) AS TEXT) FROM signed_requests";
    assert_eq!(app.raw_sql(count).await, vec!["3".to_string()]);
    app.raw_sql("UPDATE signed_requests SET expires_at = 0").await;
    let req = Signed::new("3.0", Method::POST, "/api/v2/internal/wallet", &body);
    assert_eq!(req.send(&app, &token, None).await.status(), 200);
    assert_eq!(app.raw_sql(count).await, vec!["1".to_string()], "only the new record is left");
}
