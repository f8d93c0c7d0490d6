//! Events fanned out to webhooks (§4.11), token notifications, metrics, and delivery across
//! server processes and restarts.

use std::time::Duration;

use serde_json::{json, Value};

use crate::{
    common::*,
    receiver::TestReceiver,
    webhooks::{fast, fixture, hmac_hex, WALLET},
};

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
    wait_until_idle(&f.app.state.store).await;
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

/// Integer amounts of any length (20 ETH in wei, and 10^80) are accepted and delivered with
/// every digit, as the same digits in a string are.
#[tokio::test]
async fn integer_amounts_beyond_64_bits_keep_every_digit() {
    let f = fixture(fast).await;
    let rx = TestReceiver::start().await;
    f.wallet_hook_id(&rx.url, "transfer").await;
    let admin = f.admin_token().await;
    let body = format!(
        r#"{{"eventId": "ev-wei", "type": "transfer", "walletId": "{WALLET}", "coin": "tbtc", "transferId": "tr-wei", "value": 20000000000000000000, "baseValue": -100000000000000000000000000000000000000000000000000000000000000000000000000000000}}"#
    );
    let res = f
        .app
        .client
        .post(f.app.url("/api/v2/internal/events"))
        .bearer_auth(&admin)
        .header("Content-Type", "application/json")
        .body(body)
        .send()
        .await
        .unwrap();
    assert_eq!(expect_json(res, 200).await["notifications"], 1);
    let got = rx.wait_for(1, 10).await;
    assert!(got[0].body.contains("\"value\":20000000000000000000"), "{}", got[0].body);
    assert!(got[0].body.contains("\"baseValue\":-100000000000000000000000000000000000000000000000000000000000000000000000000000000"), "{}", got[0].body);
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
    wait_until_idle(&f.app.state.store).await;
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
    let stored = f.app.state.store.wallets_by_ids(&[WALLET.parse().unwrap()], false).await.unwrap();
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
    let res = f.app.ingest(&f.token, &ev).await;
    assert_error(res, 403, "InsufficientScope").await;
    let res = f.app.ingest(&admin, &json!({ "eventId": "e", "type": "teleport" })).await;
    assert_error(res, 400, "InvalidWebhookType").await;
    let res = f.app.ingest(&admin, &json!({ "eventId": "e", "type": "transfer" })).await;
    assert_error(res, 400, "MissingField").await;
}

/// An event notification keeps neither its hash nor its idempotency key nor its
/// level's fields (derived when read), yet shows and sends the same values as before: the
/// event's `hash`, else the payload's SHA-256, and SHA-256 of `{webhook}:event:{eventId}`.
#[tokio::test]
async fn event_notifications_derive_what_they_do_not_store() {
    use sha2::Digest;
    let f = fixture(fast).await;
    let rx = TestReceiver::start().await;
    let hook = f.wallet_hook_id(&rx.url, "transfer").await;
    let admin = f.admin_token().await;
    f.event(&admin, json!({ "eventId": "ev-h", "type": "transfer", "walletId": WALLET, "hash": "0xfeed", "transferId": "tr-h" })).await;
    f.event(&admin, json!({ "eventId": "ev-n", "type": "transfer", "walletId": WALLET })).await;
    let got = rx.wait_for(2, 10).await;
    wait_until_idle(&f.app.state.store).await;
    let list = f.get(&format!("/api/v2/webhook/{hook}/notifications")).await;
    let shown = list["notifications"].as_array().unwrap();
    assert_eq!(shown.len(), 2, "{list}");
    for n in shown {
        let payload = n["payload"].as_str().unwrap();
        let event = if payload.contains("0xfeed") { "ev-h" } else { "ev-n" };
        let key = hex::encode(sha2::Sha256::digest(format!("{hook}:event:{event}").as_bytes()));
        assert_eq!(n["idempotencyKey"], key, "{n}");
        let sent = got.iter().find(|r| r.body == payload).expect("the payload was POSTed");
        assert_eq!(sent.headers["idempotency-key"].to_str().unwrap(), key);
        let hash = if event == "ev-h" {
            "0xfeed".to_string()
        } else {
            hex::encode(sha2::Sha256::digest(payload.as_bytes()))
        };
        assert_eq!(n["hash"], hash, "{n}");
        for (k, v) in
            [("wallet", json!(WALLET)), ("coin", json!("tbtc")), ("enterprise", json!(f.enterprise))]
        {
            assert_eq!(n[k], v, "{k} in {n}");
        }
        assert_eq!(n.get("transfer").is_some(), event == "ev-h", "{n}");
    }
    // A transfer's event keeps its body (without the eventId its row holds): it is the one copy
    // of its notification's payload and meta. An event naming no transfer keeps none, and its
    // notification keeps the payload.
    let stored = f
        .app
        .raw_sql(
            "SELECT hash || '|' || idempotency_key || '|' || meta || '|' || \
             CASE WHEN payload = '' THEN 'derived' ELSE 'kept' END FROM notifications ORDER BY id",
        )
        .await;
    assert_eq!(stored, vec!["|||derived".to_string(), "||{}|kept".to_string()]);
    let bodies = f.app.raw_sql("SELECT event_id || ':' || body FROM events ORDER BY event_id").await;
    assert_eq!(bodies.len(), 2);
    assert!(
        bodies[0].starts_with("ev-h:{") && !bodies[0].contains("eventId") && bodies[1] == "ev-n:",
        "only a transfer's body is kept: {bodies:?}"
    );
    // The console's search by transfer finds the derived one.
    let search = custodian::store::NotificationSearch {
        transfer_id: Some("tr-h".into()),
        from_ms: 0,
        to_ms: custodian::clock::wall_now_ms() + 60_000,
        ..Default::default()
    };
    let found = f
        .app
        .state
        .store
        .search_notifications(&custodian::store::Tenancy::All, &search, None, 10)
        .await
        .unwrap();
    assert_eq!(found.len(), 1, "{found:?}");
    assert!(found[0].payload.contains("0xfeed") && found[0].meta["transfer"] == "tr-h", "{found:?}");
}

#[tokio::test]
async fn a_derived_payload_outlives_the_retention_of_its_event() {
    // Events are pruned no earlier than the oldest notification left: one still waiting for
    // its receiver (a retry in a minute) keeps its event, and with it its payload.
    let f = fixture(|c| {
        fast(c);
        c.delivery.retry_schedule = vec![60];
    })
    .await;
    let rx = TestReceiver::start().await;
    rx.always(503);
    let hook = f.wallet_hook_id(&rx.url, "transfer").await;
    let admin = f.admin_token().await;
    f.event(
        &admin,
        json!({ "eventId": "ev-kept", "type": "transfer", "walletId": WALLET, "transferId": "tr-kept" }),
    )
    .await;
    rx.wait_for(1, 10).await;
    let days = f.app.state.config.delivery.retention_days;
    let later = custodian::clock::wall_now_ms() + ((days + 1.0) * 86_400_000.0) as i64;
    let pruned =
        custodian::delivery::prune::prune_once(&f.app.state.store, &f.app.state.config, later).await.unwrap();
    assert_eq!(pruned.events, 0, "{pruned:?}");
    assert_eq!(f.app.raw_sql("SELECT event_id FROM events").await, vec!["ev-kept".to_string()]);
    let list = f.get(&format!("/api/v2/webhook/{hook}/notifications")).await;
    let payload = list["notifications"][0]["payload"].as_str().unwrap_or_default().to_string();
    assert!(payload.contains("\"transferId\":\"tr-kept\"") && !payload.contains("eventId"), "{list}");
    assert_eq!(list["notifications"][0]["transfer"], "tr-kept", "{list}");
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
    wait_until_idle(&f.app.state.store).await;
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
    wait_until_idle(&f.app.state.store).await;
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

/// An event's notifications go straight to this process's engine while it has
/// free slots, written leased; the rest wait in the outbox and are claimed. Each arrives once.
#[tokio::test]
async fn fresh_notifications_are_handed_to_the_engine_and_the_rest_claimed() {
    let f = fixture(|c| {
        fast(c);
        c.delivery.timeout = 10;
        c.delivery.concurrency = 2;
    })
    .await;
    let rx = TestReceiver::start().await;
    // Each delivery holds its slot for a second: the third event finds none free.
    rx.delay_all(1000);
    f.wallet_hook_id(&rx.url, "transfer").await;
    let admin = f.admin_token().await;
    for i in 0..6 {
        f.event(&admin, json!({ "eventId": format!("h{i}"), "type": "transfer", "walletId": WALLET })).await;
    }
    rx.wait_for(6, 30).await;
    wait_until_idle(&f.app.state.store).await;
    assert_eq!(crate::procs::distinct(&rx.received()), 6, "each notification arrives");
    assert_eq!(rx.received().len(), 6, "and only once");
    let handed = metric_value(&f.app, "custodian_webhook_notifications_handed_total").await;
    let claimed = metric_value(&f.app, "custodian_webhook_notifications_claimed_total").await;
    assert!(handed >= 1, "the first events' notifications were handed over ({handed})");
    assert!(claimed >= 1, "those without a free slot were claimed ({claimed})");
    assert_eq!(handed + claimed, 6, "none both handed and claimed");
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
    cluster.wait_until_idle().await;
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
    // Every delivery was the worker's: the api process counted none.
    let api_metrics =
        cluster.client.get(format!("{}/metrics", api.base)).send().await.unwrap().text().await.unwrap();
    let worker_metrics =
        cluster.client.get(format!("{}/metrics", worker.base)).send().await.unwrap().text().await.unwrap();
    assert!(worker_metrics.contains("custodian_webhook_deliveries_total{"), "the worker counts deliveries");
    assert!(!api_metrics.contains("custodian_webhook_deliveries_total{"), "an api process delivers nothing");
    api.stop();
    worker.stop();
}

/// A hanging receiver gets at most its share of delivery slots: a quick one behind it is
/// delivered to while it still hangs. Without the per-webhook share it would hold all eight
/// slots, and the quick receiver would get nothing until it is released.
#[tokio::test]
async fn a_slow_receiver_cannot_hold_every_delivery_slot() {
    let f = fixture(|c| {
        fast(c);
        // Longer than the test: no hanging delivery times out and frees its slot.
        c.delivery.timeout = 120;
        c.delivery.concurrency = 8;
        c.delivery.per_webhook_concurrency = 2;
    })
    .await;
    let slow = TestReceiver::start().await;
    slow.hold();
    let quick = TestReceiver::start().await;
    f.wallet_hook_id(&slow.url, "transfer").await;
    f.wallet_hook_id(&quick.url, "txRequest").await;
    let admin = f.admin_token().await;
    for i in 0..20 {
        f.event(&admin, json!({ "eventId": format!("slow-{i}"), "type": "transfer", "walletId": WALLET }))
            .await;
    }
    slow.wait_for(2, 30).await;
    for i in 0..5 {
        f.event(&admin, json!({ "eventId": format!("quick-{i}"), "type": "txRequest", "walletId": WALLET }))
            .await;
    }
    quick.wait_for(5, 60).await;
    assert_eq!(slow.received().len(), 2, "the hanging receiver holds its two slots, no more");
    slow.release();
    slow.wait_for(20, 60).await;
}

/// The same eventId sent by many clients at once, so that the copies meet in one
/// group-commit batch or race across batches, is stored once: every answer is the first
/// result, and one notification is delivered. Other events of the same batches are unharmed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_copies_of_an_event_are_stored_once() {
    let f = fixture(fast).await;
    let rx = TestReceiver::start().await;
    let hook = f.wallet_hook_id(&rx.url, "transfer").await;
    let admin = f.admin_token().await;
    let mut tasks = Vec::new();
    for i in 0..24 {
        let (client, url, admin) =
            (f.app.client.clone(), f.app.url("/api/v2/internal/events"), admin.clone());
        let id = if i % 3 == 0 { format!("other-{i}") } else { "twin".to_string() };
        let ev = json!({ "eventId": id, "type": "transfer", "walletId": WALLET, "hash": format!("h{i}") });
        tasks.push(tokio::spawn(async move {
            let res = client.post(url).bearer_auth(admin).json(&ev).send().await.unwrap();
            assert_eq!(res.status(), 200);
            (id, res.json::<Value>().await.unwrap())
        }));
    }
    let mut twins = Vec::new();
    for t in tasks {
        let (id, body) = t.await.unwrap();
        assert_eq!(body["webhooks"], json!([hook]), "{body}");
        if id == "twin" {
            twins.push(body);
        }
    }
    assert_eq!(twins.len(), 16);
    assert!(twins.iter().all(|b| *b == twins[0]), "every copy gets the first result");
    rx.wait_for(1 + 8, 10).await;
    wait_until_idle(&f.app.state.store).await;
    let got = rx.received();
    assert_eq!(got.len(), 9, "one notification for the twin, one for each other event");
    let others: Vec<String> = (0..24).step_by(3).map(|i| format!("h{i}")).collect();
    let twin_hashes: Vec<String> = got
        .iter()
        .filter_map(|r| serde_json::from_str::<Value>(&r.body).ok())
        .filter_map(|p| p["hash"].as_str().map(str::to_string))
        .filter(|h| !others.contains(h))
        .collect();
    assert_eq!(twin_hashes.len(), 1, "the twin was notified once: {twin_hashes:?}");
}

/// The events route refuses a repeated key, at the top or inside, as every typed
/// route does (serde_json's value would keep the last copy). Nothing is stored.
#[tokio::test]
async fn repeated_keys_in_an_event_are_refused() {
    let f = fixture(fast).await;
    let admin = f.admin_token().await;
    let post = |text: String| {
        let (app, admin) = (&f.app, admin.clone());
        async move {
            app.client
                .post(app.url("/api/v2/internal/events"))
                .bearer_auth(admin)
                .header("content-type", "application/json")
                .body(text)
                .send()
                .await
                .unwrap()
        }
    };
    let top = format!(
        r#"{{"eventId":"dup-1","type":"transfer","walletId":"{WALLET}","walletId":"{}"}}"#,
        "f".repeat(32)
    );
    let b = assert_error(post(top).await, 400, "InvalidField").await;
    assert_eq!(b["context"]["field"], "walletId");
    let nested =
        format!(r#"{{"eventId":"dup-2","type":"transfer","walletId":"{WALLET}","extra":{{"a":1,"a":2}}}}"#);
    let b = assert_error(post(nested).await, 400, "InvalidField").await;
    assert_eq!(b["context"]["field"], "extra.a");
    // Neither was stored: the same eventIds are fresh afterwards.
    let ok = f.event(&admin, json!({ "eventId": "dup-1", "type": "transfer", "walletId": WALLET })).await;
    assert_eq!(ok["eventId"], "dup-1");
}
