//! The attack suite (docs/decisions.md#brute-force-limits): one test per control, each able to fail when its control is
//! missing. Logins come from other client addresses through a trusted proxy
//! (`X-Forwarded-For`), as they would behind a load balancer.

use futures_util::future::join_all;
use reqwest::{Method, Response};
use serde_json::{json, Value};

use crate::common::*;

/// Trusts 127.0.0.1 as a proxy, so `X-Forwarded-For` names the client.
fn behind_proxy(c: &mut custodian::config::Config) {
    c.trusted_proxies = vec!["127.0.0.1/32".parse().unwrap()];
}

async fn login_from(app: &TestApp, client: &str, email: &str, password: &str, otp: &str) -> Response {
    app.client
        .post(app.url("/api/v2/internal/user/login"))
        .header("x-forwarded-for", client)
        .json(&json!({ "email": email, "password": password, "otp": otp }))
        .send()
        .await
        .expect("request")
}

/// `n` failed logins at once, each for a distinct unknown email (`{prefix}{i}@example.com`).
async fn login_flood(app: &TestApp, prefix: &str, n: usize) -> Vec<Response> {
    join_all((0..n).map(|i| async move {
        app.login_raw(&format!("{prefix}{i}@example.com"), "wrong password", "000000").await
    }))
    .await
}

fn statuses(responses: &[Response]) -> (usize, usize, usize) {
    let count = |s: u16| responses.iter().filter(|r| r.status().as_u16() == s).count();
    (count(401), count(429), count(503))
}

#[tokio::test]
async fn parallel_password_guesses_are_all_counted() {
    // Room for every guess to be hashed, so that only the failure limit can stop them.
    let app = spawn_app_with(|c| {
        behind_proxy(c);
        c.login.hash_queue = 100;
        c.login.hash_wait_ms = 60_000;
        c.login.max_hashes_per_client = 100;
    })
    .await;
    let user = app.create_user("target@example.com").await;
    let guesses =
        (0..20).map(|i| {
            let (app, user) = (&app, &user);
            async move {
                login_from(app, "198.51.100.1", &user.email, &format!("guess number {i}"), "000000").await
            }
        });
    let responses = join_all(guesses).await;
    let (wrong, throttled, busy) = statuses(&responses);
    assert_eq!((wrong, throttled, busy), (5, 15, 0), "5 guesses tried, the others refused");
    // The limit holds for the right password from that client too.
    let res = login_from(&app, "198.51.100.1", &user.email, PASSWORD, "000000").await;
    assert_error(res, 429, "TooManyRequests").await;
}

#[tokio::test]
async fn one_address_cannot_lock_the_user_out_from_another() {
    let app = spawn_app_with(behind_proxy).await;
    let user = app.create_user("owner@example.com").await;
    for i in 0..12 {
        let res =
            login_from(&app, "203.0.113.66", &user.email, &format!("attacker guess {i}"), "000000").await;
        assert!(matches!(res.status().as_u16(), 401 | 429), "{}", res.status());
    }
    let res = login_from(&app, "203.0.113.66", &user.email, PASSWORD, "000000").await;
    assert_eq!(res.status(), 429, "the attacking address is throttled");
    let res = login_from(&app, "192.0.2.10", &user.email, PASSWORD, "000000").await;
    assert_eq!(res.status(), 200, "the owner logs in from elsewhere");
}

#[tokio::test]
async fn ipv6_clients_are_counted_per_slash_64() {
    let app = spawn_app_with(|c| {
        behind_proxy(c);
        c.login.max_failures_per_ip = 3;
    })
    .await;
    for i in 0..3 {
        let client = format!("2001:db8:0:7::{i:x}");
        let res =
            login_from(&app, &client, &format!("nobody{i}@example.com"), "wrong password", "000000").await;
        assert_eq!(res.status(), 401);
    }
    let user = app.create_user("v6@example.com").await;
    let res = login_from(&app, "2001:db8:0:7::ffff", &user.email, PASSWORD, "000000").await;
    assert_error(res, 429, "TooManyRequests").await;
    let res = login_from(&app, "2001:db8:0:8::1", &user.email, PASSWORD, "000000").await;
    assert_eq!(res.status(), 200, "another /64 is another client");
}

#[tokio::test]
async fn otp_guesses_at_token_creation_stop_at_five() {
    let app = spawn_app_with(|c| c.environment = custodian::config::Environment::Production).await;
    let user = app.create_user("otp-target@example.com").await;
    let res = app.login_raw(&user.email, PASSWORD, &user.code(0)).await;
    let session: Value = res.json().await.unwrap();
    let session = session["access_token"].as_str().unwrap().to_string();
    let valid = [user.code(-1), user.code(0), user.code(1)];
    let wrong: Vec<String> =
        (0..1_000_000).map(|n| format!("{n:06}")).filter(|c| !valid.contains(c)).take(8).collect();
    let mut answers = Vec::new();
    for code in &wrong {
        let res = app.create_token(&session, json!({ "otp": code, "ipRestrict": ["127.0.0.1"] })).await;
        answers.push(res.status().as_u16());
    }
    assert_eq!(answers, [401, 401, 401, 401, 401, 429, 429, 429], "five wrong codes, then throttled");
    // Now even the right code is refused, from a new session too.
    let res = app.create_token(&session, json!({ "otp": user.code(1), "ipRestrict": ["127.0.0.1"] })).await;
    let body = assert_error(res, 429, "TooManyOtpAttempts").await;
    assert!(body["context"]["retryAfter"].as_u64().is_some_and(|s| s > 0));
    let res = app.login_raw(&user.email, PASSWORD, &user.code(1)).await;
    assert_error(res, 429, "TooManyOtpAttempts").await;
}

#[tokio::test]
async fn parallel_otp_guesses_are_all_counted() {
    let app = spawn_app_with(|c| c.environment = custodian::config::Environment::Production).await;
    let user = app.create_user("otp-race@example.com").await;
    let res = app.login_raw(&user.email, PASSWORD, &user.code(0)).await;
    let session: Value = res.json().await.unwrap();
    let session = session["access_token"].as_str().unwrap().to_string();
    let valid = [user.code(-1), user.code(0), user.code(1)];
    let wrong: Vec<String> =
        (0..1_000_000).map(|n| format!("{n:06}")).filter(|c| !valid.contains(c)).take(20).collect();
    let guesses = wrong
        .iter()
        .map(|code| app.create_token(&session, json!({ "otp": code, "ipRestrict": ["127.0.0.1"] })));
    let responses = join_all(guesses).await;
    let (tried, throttled, _) = statuses(&responses);
    assert!(tried <= 5, "at most 5 OTP guesses may be tried, {tried} were");
    assert_eq!(tried + throttled, 20);
}

#[tokio::test]
async fn credentials_are_length_checked_before_any_work() {
    let app = spawn_app().await;
    let long_email = format!("{}@example.com", "a".repeat(250));
    for (body, field) in [
        (json!({ "email": long_email, "password": "x", "otp": "000000" }), "email"),
        (json!({ "email": "a@example.com", "password": "p".repeat(1025), "otp": "000000" }), "password"),
        (json!({ "email": "a@example.com", "password": "x", "otp": "12345" }), "otp"),
        (json!({ "email": "a@example.com", "password": "x", "otp": "12345a" }), "otp"),
    ] {
        let res = app.post("/api/v2/internal/user/login", &body).await;
        let body = assert_error(res, 400, "InvalidField").await;
        assert_eq!(body["context"]["field"], field);
    }
    assert_eq!(app.state.identity.hashing.peak(), 0, "no password was hashed");
}

#[tokio::test]
async fn password_hashing_never_exceeds_its_limit() {
    let app = spawn_app_with(|c| {
        c.login.max_concurrent_hashes = 2;
        c.login.hash_queue = 200;
        c.login.hash_wait_ms = 120_000;
        // 200 connections from one address: past the default per-address cap.
        c.connections.max_per_address = 1000;
        c.login.max_hashes_per_client = 200;
        c.login.max_failures_per_ip = 1_000_000;
    })
    .await;
    let responses = login_flood(&app, "flood", 200).await;
    let (wrong, _, _) = statuses(&responses);
    assert_eq!(wrong, 200, "each login waited its turn and was answered 401");
    let peak = metric_value(&app, "custodian_login_hashes_peak").await;
    assert!((1..=2).contains(&peak), "peak hashes in flight {peak}");
}

#[tokio::test]
async fn a_full_hashing_queue_answers_503_server_busy() {
    let app = spawn_app_with(|c| {
        c.login.max_concurrent_hashes = 1;
        c.login.hash_queue = 0;
        c.login.max_hashes_per_client = 100;
        c.login.max_failures_per_ip = 1_000_000;
    })
    .await;
    let responses = login_flood(&app, "busy", 12).await;
    let (wrong, _, busy) = statuses(&responses);
    assert!(wrong >= 1 && busy >= 1, "{wrong} tried, {busy} refused");
    assert_eq!(wrong + busy, 12);
    let refused = responses.into_iter().find(|r| r.status() == 503).unwrap();
    assert_eq!(refused.headers()["retry-after"], "1");
    assert_error(refused, 503, "ServerBusy").await;
}

#[tokio::test]
async fn one_client_holds_at_most_its_share_of_hashing() {
    let app = spawn_app_with(|c| {
        c.login.max_concurrent_hashes = 1;
        c.login.hash_queue = 100;
        c.login.hash_wait_ms = 60_000;
        c.login.max_hashes_per_client = 2;
        c.login.max_failures_per_ip = 1_000_000;
    })
    .await;
    let responses = login_flood(&app, "share", 10).await;
    let (wrong, throttled, _) = statuses(&responses);
    assert!(throttled >= 1, "a client with 10 logins in flight is throttled ({wrong} tried)");
    assert_eq!(wrong + throttled, 10);
}

#[tokio::test]
async fn invented_http_methods_are_not_metric_labels() {
    let app = spawn_app().await;
    let method = Method::from_bytes(b"FROBNICATE").unwrap();
    let res = app.client.request(method, app.url("/health")).send().await.unwrap();
    assert!(res.status().is_client_error());
    let text = app.client.get(app.url("/metrics")).send().await.unwrap().text().await.unwrap();
    assert!(!text.contains("FROBNICATE"), "the method is not a label");
    assert!(text.contains("method=\"other\""), "it is counted as other");
}

#[tokio::test]
async fn distributed_guessing_makes_the_email_wait_except_from_known_clients() {
    let app = spawn_app_with(|c| {
        behind_proxy(c);
        c.login.email_delay_after = 3;
        c.login.email_delay_step = 30;
    })
    .await;
    let user = app.create_user("popular@example.com").await;
    // The owner's usual place.
    assert_eq!(login_from(&app, "192.0.2.50", &user.email, PASSWORD, "000000").await.status(), 200);
    for i in 1..=3 {
        let res = login_from(&app, &format!("198.51.100.{i}"), &user.email, "botnet guess", "000000").await;
        assert_eq!(res.status(), 401);
    }
    let res = login_from(&app, "198.51.100.99", &user.email, PASSWORD, "000000").await;
    let retry: u64 = res.headers()["retry-after"].to_str().unwrap().parse().unwrap();
    assert!((1..=30).contains(&retry), "Retry-After {retry}");
    assert_error(res, 429, "TooManyRequests").await;
    assert_eq!(login_from(&app, "192.0.2.50", &user.email, PASSWORD, "000000").await.status(), 200);
}

#[tokio::test]
async fn a_child_token_cannot_widen_ip_restrict() {
    let app = spawn_app().await;
    let user = app.create_user("narrow@example.com").await;
    let session = app.login(&user).await;
    let parent = app.token_with(&session, json!({ "ipRestrict": ["127.0.0.1", "10.1.0.0/16"] })).await;
    for (blocks, field) in [
        (json!(["0.0.0.0/0", "::/0"]), "ipRestrict[0]"),
        (json!(["127.0.0.1", "10.0.0.0/8"]), "ipRestrict[1]"),
        (json!(["::ffff:10.2.0.0/112"]), "ipRestrict[0]"),
    ] {
        let res = app.create_token(&parent, json!({ "ipRestrict": blocks })).await;
        let body = assert_error(res, 400, "ExceedsCreatingToken").await;
        assert_eq!(body["context"]["field"], field, "{blocks}");
    }
    // Inside the parent's blocks (an IPv4-mapped entry counts as IPv4), or absent: the parent's.
    let res = app.create_token(&parent, json!({ "ipRestrict": ["10.1.2.0/24", "::ffff:127.0.0.1"] })).await;
    let body: Value = res.json().await.unwrap();
    assert_eq!(body["ipRestrict"], json!(["10.1.2.0/24", "127.0.0.1"]), "{body}");
    let res = app.create_token(&parent, json!({})).await;
    let body: Value = res.json().await.unwrap();
    assert_eq!(body["ipRestrict"], json!(["127.0.0.1", "10.1.0.0/16"]), "{body}");
}

#[tokio::test]
async fn a_child_token_cannot_raise_spending_limits() {
    let app = spawn_app().await;
    let user = app.create_user("limits@example.com").await;
    let session = app.login(&user).await;
    let parent = app
        .token_with(&session, json!({ "spendingLimits": [{ "coin": "tbtc", "txValueLimit": "100000" }] }))
        .await;
    let res = app
        .create_token(&parent, json!({ "spendingLimits": [{ "coin": "tbtc", "txValueLimit": "100001" }] }))
        .await;
    let body = assert_error(res, 400, "ExceedsCreatingToken").await;
    assert_eq!(body["context"]["field"], "spendingLimits.tbtc.txValueLimit");
    // Lower, or another coin (the parent's tbtc limit carried over), is fine.
    let res = app
        .create_token(&parent, json!({ "spendingLimits": [{ "coin": "teth", "txValueLimit": "5" }] }))
        .await;
    let body: Value = res.json().await.unwrap();
    let limits = body["unlock"]["spendingLimits"].to_string();
    assert!(limits.contains("teth") && limits.contains("tbtc") && limits.contains("100000"), "{body}");
    let res = app
        .create_token(&parent, json!({ "spendingLimits": [{ "coin": "tbtc", "txValueLimit": 99999 }] }))
        .await;
    assert_eq!(res.status(), 200);
}

#[tokio::test]
async fn every_list_in_a_request_is_capped() {
    let app = spawn_app().await;
    let user = app.create_user("lists@example.com").await;
    let session = app.login(&user).await;
    let id = "0123456789abcdef0123456789abcdef";
    let limits: Vec<Value> =
        (0..101).map(|i| json!({ "coin": format!("c{i}"), "txValueLimit": "1" })).collect();
    for (fields, field) in [
        (json!({ "scope": vec!["wallet_view_all"; 65] }), "scope"),
        (json!({ "ipRestrict": vec!["127.0.0.1"; 101] }), "ipRestrict"),
        (json!({ "permittedWallets": vec![id; 1001] }), "permittedWallets"),
        (json!({ "permittedEnterprises": vec![id; 1001] }), "permittedEnterprises"),
        (json!({ "spendingLimits": limits }), "spendingLimits"),
    ] {
        let res = app.create_token(&session, fields).await;
        let body = assert_error(res, 400, "InvalidField").await;
        assert_eq!(body["context"]["field"], field);
    }
    let headers: serde_json::Map<String, Value> = (0..21).map(|i| (format!("x-h{i}"), json!("v"))).collect();
    let hook = |extra: Value| {
        let mut body = json!({ "type": "block", "url": "https://example.com/hook" });
        body.as_object_mut().unwrap().extend(extra.as_object().unwrap().clone());
        body
    };
    for (extra, field) in [
        (json!({ "customHttpHeaders": headers }), "customHttpHeaders"),
        (json!({ "customHttpHeaders": { "x-big": "v".repeat(1025) } }), "customHttpHeaders.x-big"),
        (json!({ "txRequestStates": vec!["signed"; 21] }), "txRequestStates"),
        (json!({ "txRequestTransactionStates": ["not a state"] }), "txRequestTransactionStates[0]"),
    ] {
        let res = app.post_auth("/api/v2/tbtc/webhooks", &session, &hook(extra)).await;
        let body = assert_error(res, 400, "InvalidField").await;
        assert_eq!(body["context"]["field"], field);
    }
}

#[tokio::test]
async fn slow_requests_time_out_with_408() {
    let app = spawn_app_with(|c| {
        c.request_timeout = 1;
        c.login.max_concurrent_hashes = 1;
        // 200 connections from one address: past the default per-address cap.
        c.connections.max_per_address = 1000;
        c.login.hash_queue = 1000;
        c.login.hash_wait_ms = 600_000;
        c.login.max_hashes_per_client = 1000;
        c.login.max_failures_per_ip = 1_000_000;
    })
    .await;
    // One hashing slot and 200 logins: the last ones wait far beyond a second.
    let responses = login_flood(&app, "slow", 200).await;
    let timed_out = responses.into_iter().find(|r| r.status() == 408).expect("a request timed out");
    assert_error(timed_out, 408, "RequestTimeout").await;
}

#[tokio::test]
async fn requests_beyond_the_in_flight_limit_are_shed_with_503() {
    let app = spawn_app_with(|c| {
        c.max_in_flight_requests = 2;
        c.login.max_concurrent_hashes = 1;
        c.login.hash_queue = 100;
        c.login.hash_wait_ms = 60_000;
        c.login.max_hashes_per_client = 100;
        c.login.max_failures_per_ip = 1_000_000;
    })
    .await;
    let responses = login_flood(&app, "shed", 20).await;
    let (tried, _, shed) = statuses(&responses);
    assert!(tried >= 1 && shed >= 1, "{tried} handled, {shed} shed");
    let res = responses.into_iter().find(|r| r.status() == 503).unwrap();
    assert_error(res, 503, "ServerBusy").await;
}

#[tokio::test]
async fn service_admin_tokens_are_bound_by_their_scopes_and_permitted_lists() {
    let app = spawn_app().await;
    let ops = app.create_user_with("ops@example.com", true).await;
    let e1 = app.create_enterprise("One", &[]).await;
    let e2 = app.create_enterprise("Two", &[]).await;
    let (w1, w2) = ("11111111111111111111111111111111", "22222222222222222222222222222222");
    app.import_wallet(w1, &e1, &[]).await;
    app.import_wallet(w2, &e2, &[]).await;
    let session = app.login(&ops).await;
    let narrowed = app
        .token_with(
            &session,
            json!({
                "admin": true,
                "scope": ["enterprise_manage_all", "enterprise_view_all", "wallet_view_all", "wallet_manage_all"],
                "permittedEnterprises": [e1],
            }),
        )
        .await;
    // Membership is waived inside the permitted enterprise...
    let res = app.rotate_secret(&narrowed, &e1).await;
    assert_eq!(res.status(), 200);
    assert_eq!(app.get_auth(&format!("/api/v2/enterprise/{e1}/webhooks"), &narrowed).await.status(), 200);
    // ...but nowhere else.
    let res = app.rotate_secret(&narrowed, &e2).await;
    assert_error(res, 403, "InsufficientScope").await;
    let res = app.get_auth(&format!("/api/v2/enterprise/{e2}/webhooks"), &narrowed).await;
    assert_error(res, 403, "InsufficientScope").await;
    let res = app.get_auth(&format!("/api/v2/tbtc/wallet/{w2}/webhooks"), &narrowed).await;
    assert_error(res, 403, "InsufficientScope").await;
    let seen = app.lookup_ids(&narrowed, &[w1, w2]).await;
    assert_eq!(seen, [w1], "the lookup shows only the permitted enterprise's wallet");

    // An admin token without wallet scopes sees no wallet and manages no webhook.
    let profile_only = app.token_with(&session, json!({ "admin": true, "scope": ["profile"] })).await;
    assert!(app.lookup_ids(&profile_only, &[w1]).await.is_empty(), "no wallet without a view scope");
    let res = app.get_auth(&format!("/api/v2/tbtc/wallet/{w1}/webhooks"), &profile_only).await;
    assert_error(res, 403, "InsufficientScope").await;
    let res = app.rotate_secret(&profile_only, &e1).await;
    assert_error(res, 403, "InsufficientScope").await;

    // Another user's block webhook, bound to E2, is outside the narrowed token's reach.
    let bob = app.create_user("bob@example.com").await;
    app.state
        .store
        .upsert_membership(&e2.parse().unwrap(), &bob.id.parse().unwrap(), false, &[])
        .await
        .expect("member");
    let bob_session = app.login(&bob).await;
    let hook = json!({ "type": "block", "url": "https://example.com/b" });
    let b = expect_json(app.post_auth("/api/v2/tbtc/webhooks", &bob_session, &hook).await, 200).await;
    let unblock = format!("/api/v2/webhook/{}/unblock", b["id"].as_str().unwrap());
    let res = app.post_auth(&unblock, &narrowed, &json!({})).await;
    assert_error(res, 404, "WebhookNotFound").await;
    assert_eq!(app.post_auth(&unblock, &session, &json!({})).await.status(), 200, "an unnarrowed admin may");
}

#[tokio::test]
async fn forwarded_addresses_are_believed_only_through_trusted_proxies() {
    let app = spawn_app_with(behind_proxy).await;
    let user = app.create_user("xff@example.com").await;
    let session = app.login(&user).await;
    let ip_seen = |xff: &'static str| {
        let (app, session) = (&app, &session);
        async move {
            let res = app
                .client
                .post(app.url("/api/v2/user/accesstoken"))
                .bearer_auth(session)
                .header("x-forwarded-for", xff)
                .json(&json!({ "label": "x", "otp": "000000" }))
                .send()
                .await
                .unwrap();
            let body: Value = res.json().await.unwrap();
            body["ip"].as_str().unwrap_or_else(|| panic!("{body}")).to_string()
        }
    };
    assert_eq!(ip_seen("198.51.100.20:5555").await, "198.51.100.20", "ip:port is understood");
    assert_eq!(ip_seen("[2001:db8::20]:443").await, "2001:db8::20", "[v6]:port is understood");
    // A spoofed left part behind an unparseable hop is not believed: the proxy itself is.
    assert_eq!(ip_seen("203.0.113.5, not-an-address").await, "127.0.0.1");
}

#[tokio::test]
async fn production_refuses_wide_ip_restrict_unless_allowed() {
    for allow in [false, true] {
        let app = spawn_app_with(|c| {
            c.environment = custodian::config::Environment::Production;
            c.tokens.allow_wide_ip_restrict = allow;
        })
        .await;
        let user = app.create_user("wide@example.com").await;
        let res = app.login_raw(&user.email, PASSWORD, &user.code(0)).await;
        let session: Value = res.json().await.unwrap();
        let session = session["access_token"].as_str().unwrap().to_string();
        let res = app
            .create_token(&session, json!({ "otp": user.code(1), "ipRestrict": ["10.0.0.0/8", "::/0"] }))
            .await;
        if allow {
            assert_eq!(res.status(), 200);
        } else {
            let body = assert_error(res, 400, "InvalidField").await;
            assert_eq!(body["context"]["field"], "ipRestrict[1]");
        }
    }
}

#[tokio::test]
async fn simulate_resend_unblock_and_verify_are_limited_per_webhook() {
    use crate::webhooks::{fast, fixture, WALLET};
    let f = fixture(|c| {
        fast(c);
        c.webhooks.operations_per_minute = 3;
    })
    .await;
    let hook = f.wallet_hook_id("https://example.com/hook", "transfer").await;
    let other = f.wallet_hook_id("https://example.com/other", "transfer").await;
    let simulate = |id: String| {
        let f = &f;
        async move {
            let path = format!("/api/v2/tbtc/wallet/{WALLET}/webhooks/{id}/simulate");
            f.app.post_auth(&path, &f.token, &json!({})).await
        }
    };
    for _ in 0..2 {
        assert_eq!(simulate(hook.clone()).await.status(), 200);
    }
    let unblock = f.app.post_auth(&format!("/api/v2/webhook/{hook}/unblock"), &f.token, &json!({})).await;
    assert_eq!(unblock.status(), 200, "the third operation is allowed");
    let res = simulate(hook.clone()).await;
    let retry: u64 = res.headers()["retry-after"].to_str().unwrap().parse().unwrap();
    assert!((1..=60).contains(&retry), "Retry-After {retry}");
    assert_error(res, 429, "TooManyRequests").await;
    let res = f.app.post_auth(&format!("/api/v2/webhook/{hook}/unblock"), &f.token, &json!({})).await;
    assert_error(res, 429, "TooManyRequests").await;
    assert_eq!(simulate(other.clone()).await.status(), 200, "another webhook has its own budget");
    // Verification counts too (docs/decisions.md#faults-and-floods), before the signature is even looked at.
    let verify = format!("/api/v2/webhook/{other}/verify");
    let guess = json!({ "signature": "00", "notificationPayload": "{}" });
    for _ in 0..2 {
        assert_ne!(f.app.post_auth(&verify, &f.token, &guess).await.status(), 429);
    }
    assert_error(f.app.post_auth(&verify, &f.token, &guess).await, 429, "TooManyRequests").await;
}
