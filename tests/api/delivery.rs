//! Delivery of webhook notifications to a real receiver: signatures, verification, retries,
//! suspension and the SSRF guard (§2.6, §2.7, §4.10).

use std::time::Duration;

use serde_json::{json, Value};

use crate::{
    common::*,
    receiver::{Answer, TestReceiver},
    webhooks::{fast, fixture, hmac_hex, standard_sig, Fixture, WALLET},
};

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

    received_signed(&rx, n, &secret).await;

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
    wait_until_idle(&f.app.state.store).await;
    // Both successes are listed, in order: the first moved off the notification by the resend
    // (docs/decisions.md#performance-as-the-data-grows keeps a notification's success on its row).
    let attempts = f.get(&format!("/api/v2/webhook/{hook_id}/notifications/{nid}/attempts")).await;
    let a = attempts["attempts"].as_array().unwrap();
    assert_eq!(a.len(), 2, "{attempts}");
    assert!(a.iter().all(|a| a["statusCode"] == 200 && a["success"] == true), "{attempts}");
    assert!(a[0]["startedAt"].as_str() <= a[1]["startedAt"].as_str(), "{attempts}");
}

/// What the receiver got for notification `n`: its exact payload, its headers and both
/// signatures under `secret`.
async fn received_signed(rx: &TestReceiver, n: &Value, secret: &str) {
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
        standard_sig(secret, &h("webhook-id"), &h("webhook-timestamp"), &r.body),
        "Standard Webhooks signature"
    );
    let ts: i64 = h("webhook-timestamp").parse().unwrap();
    assert!((ts - custodian::clock::wall_now()).abs() <= 5);
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
    let old = stored_secret_an_hour_ago(&f).await;
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
    let res = f.app.rotate_secret(&f.token, &f.enterprise).await;
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

/// A new secret stored for the fixture's enterprise as rotated an hour ago (so the next
/// rotation is allowed and keeps it as the previous one); returns it.
async fn stored_secret_an_hour_ago(f: &Fixture) -> String {
    let secret = custodian::notifications::signing::new_secret();
    let enterprise = f.enterprise.parse().unwrap();
    let aad = custodian::notifications::secret_cache::secret_aad(&enterprise);
    let sealed = f.app.state.identity.key.seal(&aad, secret.as_bytes()).unwrap();
    let store = &f.app.state.store;
    store
        .rotate_webhook_secret(&enterprise, &sealed, custodian::clock::wall_now() - 3600, 300, &[])
        .await
        .unwrap();
    secret
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
    wait_until_idle(&f.app.state.store).await;
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

/// A successful attempt is kept on its notification, not as a delivery_attempts
/// row; the console's counts, latencies and "last delivered" read both.
#[tokio::test]
async fn successes_on_notifications_are_counted_beside_failed_attempts() {
    use custodian::store::Tenancy;
    let f = fixture(fast).await;
    let rx = TestReceiver::start().await;
    rx.plan(&[Answer { status: 500, retry_after: None, delay_ms: 0 }]);
    let hook: custodian::types::WebhookId = f.wallet_hook_id(&rx.url, "transfer").await.parse().unwrap();
    let admin = f.admin_token().await;
    let start = custodian::clock::wall_now_ms();
    f.event(&admin, json!({ "eventId": "ev-count-1", "type": "transfer", "walletId": WALLET })).await;
    rx.wait_for(2, 10).await;
    f.event(&admin, json!({ "eventId": "ev-count-2", "type": "transfer", "walletId": WALLET })).await;
    rx.wait_for(3, 10).await;
    wait_until_idle(&f.app.state.store).await;
    let rows = f.app.raw_sql("SELECT CAST(success AS TEXT) FROM delivery_attempts").await;
    assert_eq!(rows.len(), 1, "only the failure is a row: {rows:?}");
    let store = &f.app.state.store;
    let since = start - 3_600_000;
    let hours = store.attempts_by_hour(&Tenancy::All, since).await.unwrap();
    let (delivered, failed) = hours.iter().fold((0, 0), |(d, x), h| (d + h.delivered, x + h.failed));
    assert_eq!((delivered, failed), (2, 1), "{hours:?}");
    assert_eq!(store.attempt_durations(&Tenancy::All, since, 100).await.unwrap().len(), 3);
    assert_eq!(store.attempt_durations(&Tenancy::All, since, 2).await.unwrap().len(), 2, "capped");
    let last = store.last_attempts(std::slice::from_ref(&hook)).await.unwrap();
    let (delivered_ms, failed_ms) = (last[0].delivered_ms.unwrap(), last[0].failed_ms.unwrap());
    assert!(delivered_ms >= start && failed_ms >= start && delivered_ms > failed_ms, "{last:?}");
    assert_eq!(store.recent_failures(&Tenancy::All, since, 10).await.unwrap().len(), 1);
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
        c.delivery.per_webhook_concurrency = 1;
        c.webhooks.max_held = 2;
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
    let state = until("the webhook to be suspended", 10, || async {
        let hooks = f.get(&format!("/api/v2/tbtc/wallet/{WALLET}/webhooks")).await;
        Some(hooks["webhooks"][0].clone()).filter(|w| w["state"] == "suspended")
    })
    .await;
    assert_eq!(state["successiveFailedAttempts"], 3);
    let failed = f.get(&format!("/api/v2/webhook/{hook}/notifications?state=failed")).await;
    assert_eq!(failed["notifications"].as_array().unwrap().len(), 3, "no retries left: failed");
    suspended_webhooks_hold_and_release(&f, &rx, &hook, &admin).await;
}

/// While suspended, a webhook's new notifications are held (up to
/// `webhooks.max_held`, 2 here; beyond, refused with a metric and an audit entry), and unblocking
/// releases them in order.
async fn suspended_webhooks_hold_and_release(f: &Fixture, rx: &TestReceiver, hook: &str, admin: &str) {
    for (i, transfer) in [(3, "t3"), (4, "t4"), (5, "t5")] {
        let ev = json!({ "eventId": format!("ev-s{i}"), "type": "transfer", "walletId": WALLET, "transferId": transfer });
        let r = f.event(admin, ev).await;
        assert_eq!(r["notifications"], if i < 5 { 1 } else { 0 }, "held, then refused past the cap");
    }
    let list = f.get(&format!("/api/v2/webhook/{hook}/notifications")).await;
    assert_eq!(list["held"], 2, "{list}");
    assert_eq!(crate::common::metric_value(&f.app, "custodian_webhook_notifications_held ").await, 2);
    assert_eq!(
        crate::common::metric_value(&f.app, "custodian_webhook_notifications_refused_total ").await,
        1
    );
    let audit: Value = f.get("/api/v2/auditlog?type=webhook.notifications_refused").await;
    assert_eq!(audit["auditLogs"][0]["data"]["eventId"], "ev-s5", "{audit}");
    assert_eq!(rx.received().len(), 3, "nothing delivered while suspended");
    rx.always(200);
    let res = f.app.post_auth(&format!("/api/v2/webhook/{hook}/unblock"), &f.token, &json!({})).await;
    let w: Value = res.json().await.unwrap();
    assert_eq!(w["state"], "active");
    assert_eq!(w["successiveFailedAttempts"], 0);
    let got = rx.wait_for(5, 10).await;
    assert!(got[3].body.contains("\"t3\"") && got[4].body.contains("\"t4\""), "released in order");
    f.event(admin, json!({ "eventId": "ev-s6", "type": "transfer", "walletId": WALLET })).await;
    rx.wait_for(6, 10).await;
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
    // A literal blocked address is refused at registration (docs/decisions.md#faults-and-floods), in any spelling.
    let port = rx.port;
    for url in [
        rx.url.clone(),
        format!("http://[::1]:{port}/hook"),
        "http://169.254.169.254/latest/meta-data".into(),
        "http://10.0.0.1/hook".into(),
        format!("http://0x7f000001:{port}/hook"),
        format!("http://[::ffff:127.0.0.1]:{port}/hook"),
    ] {
        let b =
            assert_error(f.wallet_hook(json!({ "type": "transfer", "url": url })).await, 400, "InvalidField")
                .await;
        assert_eq!(b["context"]["field"], "url", "{url}");
    }
    // A name is checked when delivery resolves it.
    let by_name = f.wallet_hook_id(&format!("http://localhost:{port}/hook"), "transfer").await;
    let admin = f.admin_token().await;
    f.event(&admin, json!({ "eventId": "ev-x", "type": "transfer", "walletId": WALLET })).await;
    let hook = &by_name;
    let nid = until("the notification to fail", 10, || async {
        let list = f.get(&format!("/api/v2/webhook/{hook}/notifications")).await;
        let n = &list["notifications"][0];
        (n["state"] == "failed").then(|| n["id"].as_str().unwrap_or_default().to_string())
    })
    .await;
    let attempts = f.get(&format!("/api/v2/webhook/{hook}/notifications/{nid}/attempts")).await;
    let err = attempts["attempts"][0]["error"].as_str().unwrap_or_default().to_string();
    assert!(err.contains("not a globally routable address"), "{hook}: {attempts}");
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

/// Once a failing receiver answers 2xx again, its notifications waiting for a retry are sent
/// at once instead of at their scheduled time (docs/decisions.md#performance-as-the-data-grows): here a minute away.
#[tokio::test]
async fn a_receiver_that_recovers_gets_its_waiting_retries_at_once() {
    let f = fixture(|c| {
        fast(c);
        c.delivery.retry_schedule = vec![60, 60];
    })
    .await;
    let rx = TestReceiver::start().await;
    rx.always(500);
    f.wallet_hook_id(&rx.url, "transfer").await;
    let admin = f.admin_token().await;
    for i in 0..3 {
        f.event(&admin, json!({ "eventId": format!("ev-r{i}"), "type": "transfer", "walletId": WALLET }))
            .await;
    }
    rx.wait_for(3, 10).await;
    rx.always(200);
    f.event(&admin, json!({ "eventId": "ev-r-ok", "type": "transfer", "walletId": WALLET })).await;
    // 3 failures, the new event, then the 3 retries well before their minute.
    let got = rx.wait_for(7, 10).await;
    let retried: std::collections::HashSet<_> =
        got[4..].iter().filter_map(|r| r.headers.get("webhook-id").and_then(|v| v.to_str().ok())).collect();
    let failed: std::collections::HashSet<_> =
        got[..3].iter().filter_map(|r| r.headers.get("webhook-id").and_then(|v| v.to_str().ok())).collect();
    assert_eq!(retried, failed, "the three that failed are the three sent again");
}

/// More waiting retries than one release batch (512): once the receiver answers again they
/// are made due batch after batch and all arrive long before their scheduled minute, each
/// exactly once (docs/decisions.md#performance-as-the-data-grows).
#[tokio::test]
async fn a_receiver_that_recovers_gets_more_retries_than_one_batch_at_once() {
    const EVENTS: usize = 600;
    let f = fixture(|c| {
        fast(c);
        c.delivery.retry_schedule = vec![60, 60];
        c.delivery.suspend_after_failures = 10_000;
        c.delivery.suspend_after_total_failures = 10_000;
    })
    .await;
    let rx = TestReceiver::start().await;
    rx.always(500);
    f.wallet_hook_id(&rx.url, "transfer").await;
    let admin = f.admin_token().await;
    let ids: Vec<usize> = (0..EVENTS).collect();
    for chunk in ids.chunks(EVENTS / 8) {
        futures_util::future::join_all(chunk.iter().map(|i| {
            f.event(&admin, json!({ "eventId": format!("ev-b{i}"), "type": "transfer", "walletId": WALLET }))
        }))
        .await;
    }
    rx.wait_for(EVENTS, 30).await;
    rx.always(200);
    f.event(&admin, json!({ "eventId": "ev-b-ok", "type": "transfer", "walletId": WALLET })).await;
    let got = rx.wait_for(2 * EVENTS + 1, 30).await;
    let ids = |rs: &[crate::receiver::Received]| -> std::collections::HashSet<String> {
        rs.iter()
            .filter_map(|r| r.headers.get("webhook-id").and_then(|v| v.to_str().ok()).map(str::to_string))
            .collect()
    };
    let failed = ids(&got[..EVENTS]);
    let retried = ids(&got[EVENTS + 1..]);
    assert_eq!(failed.len(), EVENTS);
    assert_eq!(retried, failed, "every one that failed is sent again");
    assert_eq!(got.len(), 2 * EVENTS + 1, "and only once");
}

/// `POST /api/v2/webhook/{id}/recover` (docs/decisions.md#the-operator-console) queues again the notifications that failed
/// for good since a time, at most `webhooks.recover_max` per call, at most 14 days back, and
/// records each call in the audit log with its count.
#[tokio::test]
async fn recover_redelivers_failed_notifications_since_a_time_within_its_limits() {
    let f = fixture(|c| {
        fast(c);
        c.delivery.retry_schedule = vec![];
        c.webhooks.recover_max = 2;
    })
    .await;
    let rx = TestReceiver::start().await;
    rx.always(500);
    let hook = f.wallet_hook_id(&rx.url, "transfer").await;
    let admin = f.admin_token().await;
    for i in 0..3 {
        f.event(&admin, json!({ "eventId": format!("ev-rc{i}"), "type": "transfer", "walletId": WALLET }))
            .await;
    }
    until("three failed notifications", 10, || async {
        let list = f.get(&format!("/api/v2/webhook/{hook}/notifications?state=failed")).await;
        (list["notifications"].as_array().map_or(0, Vec::len) == 3).then_some(())
    })
    .await;
    let path = format!("/api/v2/webhook/{hook}/recover");
    let ago = |secs: i64| (chrono::Utc::now() - chrono::Duration::seconds(secs)).to_rfc3339();
    for since in [ago(15 * 86_400), ago(-3_600), "yesterday".to_string()] {
        let b = assert_error(
            f.app.post_auth(&path, &f.token, &json!({ "since": since })).await,
            400,
            "InvalidField",
        )
        .await;
        assert_eq!(b["context"]["field"], "since", "{since}");
    }
    rx.always(200);
    let mut counts = Vec::new();
    for _ in 0..3 {
        let res = f.app.post_auth(&path, &f.token, &json!({ "since": ago(3_600) })).await;
        assert_eq!(res.status(), 200);
        let body: Value = res.json().await.unwrap();
        counts.push(body["count"].as_u64().unwrap_or(99));
    }
    // The cap bites: two, then the last one, then nothing left.
    assert_eq!(counts, vec![2, 1, 0]);
    rx.wait_for(6, 10).await;
    until("nothing failed", 10, || async {
        let list = f.get(&format!("/api/v2/webhook/{hook}/notifications?state=processed")).await;
        (list["notifications"].as_array().map_or(0, Vec::len) == 3).then_some(())
    })
    .await;
    let audit = f.get("/api/v2/auditlog?type=webhook.recovered").await;
    let logged: Vec<u64> =
        audit["auditLogs"].as_array().unwrap().iter().filter_map(|e| e["data"]["count"].as_u64()).collect();
    assert_eq!(logged, vec![0, 1, 2], "newest first: {audit}");
}

/// A retry is due at its scheduled time on the service's clock: moving the clock past it
/// sends it, with no hour of waiting (and without the recovered-receiver shortcut: no other
/// notification of this webhook succeeds meanwhile).
#[tokio::test]
async fn a_retry_is_sent_when_the_clock_reaches_its_time() {
    let f = fixture(|c| {
        fast(c);
        c.delivery.retry_schedule = vec![3600];
    })
    .await;
    let rx = TestReceiver::start().await;
    rx.plan(&[crate::receiver::Answer { status: 500, retry_after: None, delay_ms: 0 }]);
    f.wallet_hook_id(&rx.url, "transfer").await;
    let admin = f.admin_token().await;
    f.event(&admin, json!({ "eventId": "ev-later", "type": "transfer", "walletId": WALLET })).await;
    rx.wait_for(1, 10).await;
    // Failed and scheduled an hour on: nothing is due now.
    until("the failure recorded", 10, || async {
        let s = f.app.state.store.delivery_stats(f.app.state.store.clock().now_ms()).await.unwrap();
        (s.due == 0 && s.in_flight == 0).then_some(())
    })
    .await;
    assert_eq!(rx.received().len(), 1);
    // The retry is an hour on, with +-20% jitter: not due before 48 minutes, due after 72.
    let store = &f.app.state.store;
    store.clock().advance(Duration::from_secs(2800));
    assert_eq!(store.delivery_stats(store.clock().now_ms()).await.unwrap().due, 0, "not due yet");
    store.clock().advance(Duration::from_secs(1600));
    let got = rx.wait_for(2, 10).await;
    assert_eq!(
        got[0].headers.get("idempotency-key"),
        got[1].headers.get("idempotency-key"),
        "the same notification"
    );
}

/// Delivered history leaves at its retention on the service's clock: two days on, with a
/// one-day retention, the worker's next pruning round takes the notification and its attempt.
#[tokio::test]
async fn delivered_history_is_pruned_when_the_clock_passes_its_retention() {
    let f = fixture(|c| {
        fast(c);
        c.delivery.retention_days = 1.0;
        c.delivery.prune_interval_ms = 50;
    })
    .await;
    let rx = TestReceiver::start().await;
    f.wallet_hook_id(&rx.url, "transfer").await;
    let admin = f.admin_token().await;
    f.event(&admin, json!({ "eventId": "ev-old", "type": "transfer", "walletId": WALLET })).await;
    rx.wait_for(1, 10).await;
    wait_until_idle(&f.app.state.store).await;
    let count = "SELECT CAST(count(*) AS TEXT) FROM notifications";
    assert_eq!(f.app.raw_sql(count).await, ["1"], "kept within its retention");
    f.app.state.store.clock().advance(Duration::from_secs(2 * 86_400));
    until("the notification pruned", 10, || async { (f.app.raw_sql(count).await == ["0"]).then_some(()) })
        .await;
    let attempts = f.app.raw_sql("SELECT CAST(count(*) AS TEXT) FROM delivery_attempts").await;
    assert_eq!(attempts, ["0"]);
}

/// A notification leased by a process that died is claimed again when its lease runs out on
/// the service's clock, not before.
#[tokio::test]
async fn a_dead_workers_lease_runs_out_on_the_services_clock() {
    let f = fixture(fast).await;
    let rx = TestReceiver::start().await;
    f.wallet_hook_id(&rx.url, "transfer").await;
    let admin = f.admin_token().await;
    f.event(&admin, json!({ "eventId": "ev-leased", "type": "transfer", "walletId": WALLET })).await;
    rx.wait_for(1, 10).await;
    wait_until_idle(&f.app.state.store).await;
    // As a worker that claimed it an hour long and died would leave it.
    let until_ms = f.app.state.store.clock().now_ms() + 3_600_000;
    f.app
        .raw_sql(&format!(
            "UPDATE notifications SET state = 'pending', next_attempt_at = 0, lease_until = {until_ms}"
        ))
        .await;
    let store = &f.app.state.store;
    let stats = store.delivery_stats(store.clock().now_ms()).await.unwrap();
    assert_eq!((stats.due, stats.in_flight), (0, 1), "held by the dead worker's lease");
    store.clock().advance(Duration::from_secs(3601));
    let got = rx.wait_for(2, 10).await;
    assert_eq!(got[0].headers.get("idempotency-key"), got[1].headers.get("idempotency-key"));
}
