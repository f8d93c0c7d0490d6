//! Webhook abuse and the API rate limit (docs/decisions.md#brute-force-limits): block webhook scope, coin
//! list and caps, known txRequest states, custom header values sealed at rest, fair delivery
//! slots between tenants, pruning of old delivery history, and per-user rate limit headers.

use serde_json::json;

use crate::{
    common::*,
    receiver::TestReceiver,
    webhooks::{fast, fixture, WALLET},
};

#[tokio::test]
async fn block_webhooks_need_a_manage_scope_and_a_known_coin() {
    let f = fixture(fast).await;
    let hook = json!({ "type": "block", "url": "https://example.com/b" });
    let viewer = f.app.token_with(&f.token, json!({ "scope": ["wallet_view_all"] })).await;
    let res = f.app.post_auth("/api/v2/tbtc/webhooks", &viewer, &hook).await;
    assert_error(res, 403, "InsufficientScope").await;
    let res = f.app.get_auth("/api/v2/tbtc/webhooks", &viewer).await;
    assert_error(res, 403, "InsufficientScope").await;
    let manager = f.app.token_with(&f.token, json!({ "scope": ["wallet_manage_all"] })).await;
    expect_json(f.app.post_auth("/api/v2/tbtc/webhooks", &manager, &hook).await, 200).await;
    let res = f.app.post_auth("/api/v2/zzz/webhooks", &manager, &hook).await;
    let body = assert_error(res, 400, "InvalidField").await;
    assert_eq!(body["context"]["field"], "coin");
}

#[tokio::test]
async fn block_webhooks_are_capped_per_user_and_webhooks_per_enterprise() {
    let f = fixture(|c| {
        fast(c);
        c.webhooks.max_per_user = 3;
        c.webhooks.max_per_enterprise = 4;
    })
    .await;
    let block = |coin: &str, typ: &str| {
        let (f, path) = (&f, format!("/api/v2/{coin}/webhooks"));
        let body = json!({ "type": typ, "url": "https://example.com/b" });
        async move { f.app.post_auth(&path, &f.token, &body).await }
    };
    for (coin, typ) in [("tbtc", "block"), ("tbtc", "wallet_confirmation"), ("btc", "block")] {
        expect_json(block(coin, typ).await, 200).await;
    }
    let body = assert_error(block("eth", "block").await, 400, "WebhookLimitReached").await;
    assert_eq!(body["context"]["max"], 3, "{body}");
    // The three block webhooks are bound to the user's enterprise: one more webhook fits.
    assert_eq!(
        f.wallet_hook(json!({ "type": "transfer", "url": "https://example.com/w" })).await.status(),
        200
    );
    let res = f.wallet_hook(json!({ "type": "transfer", "url": "https://example.com/w2" })).await;
    let body = assert_error(res, 400, "WebhookLimitReached").await;
    assert_eq!(body["context"]["max"], 4, "{body}");
}

#[tokio::test]
async fn parallel_creations_cannot_pass_the_cap() {
    let f = fixture(|c| {
        fast(c);
        c.webhooks.max_per_user = 5;
    })
    .await;
    let coins = ["btc", "tbtc", "eth", "hteth", "ltc", "tltc", "xrp", "txrp", "sol", "tsol", "xlm", "txlm"];
    let tries = coins.iter().map(|coin| {
        let f = &f;
        async move {
            let body = json!({ "type": "block", "url": "https://example.com/b" });
            f.app.post_auth(&format!("/api/v2/{coin}/webhooks"), &f.token, &body).await.status().as_u16()
        }
    });
    let statuses = futures_util::future::join_all(tries).await;
    assert_eq!(statuses.iter().filter(|s| **s == 200).count(), 5, "{statuses:?}");
    assert!(statuses.iter().all(|s| *s == 200 || *s == 400), "{statuses:?}");
}

#[tokio::test]
async fn tx_request_states_must_be_known_states() {
    let f = fixture(fast).await;
    let res = f
        .wallet_hook(json!({ "type": "txRequest", "url": "https://example.com/t",
            "txRequestStates": ["pendingApproval", "bogus"] }))
        .await;
    let body = assert_error(res, 400, "InvalidField").await;
    assert_eq!(body["context"]["field"], "txRequestStates[1]");
    let res = f
        .wallet_hook(json!({ "type": "txRequestTransaction", "url": "https://example.com/t",
            "txRequestTransactionStates": ["pendingApproval"] }))
        .await;
    let body = assert_error(res, 400, "InvalidField").await;
    assert_eq!(
        body["context"]["field"], "txRequestTransactionStates[0]",
        "a txRequest state, not a transaction's"
    );
    let ok = f
        .wallet_hook(json!({ "type": "txRequest", "url": "https://example.com/t",
            "txRequestStates": ["pendingApproval", "signed", "signed"] }))
        .await;
    assert_eq!(expect_json(ok, 200).await["txRequestStates"], json!(["pendingApproval", "signed"]));
}

#[tokio::test]
async fn custom_header_values_are_sealed_at_rest_and_delivered_plain() {
    let f = fixture(fast).await;
    let rx = TestReceiver::start().await;
    let credential = "Bearer receiver-credential-4711";
    let hook = f
        .wallet_hook(json!({ "type": "transfer", "url": rx.url,
            "customHttpHeaders": { "Authorization": credential } }))
        .await;
    let id = expect_json(hook, 200).await["id"].as_str().unwrap().to_string();
    let stored = f.app.raw_sql(&format!("SELECT custom_headers FROM webhooks WHERE id = '{id}'")).await;
    assert_eq!(stored.len(), 1);
    assert!(!stored[0].contains("receiver-credential"), "stored in the clear: {}", stored[0]);
    assert!(stored[0].contains("Authorization"), "the name stays readable: {}", stored[0]);
    let path = format!("/api/v2/tbtc/wallet/{WALLET}/webhooks/{id}/simulate");
    expect_json(f.app.post_auth(&path, &f.token, &json!({})).await, 200).await;
    let got = rx.wait_for(1, 10).await;
    assert_eq!(got[0].headers["authorization"], credential);
}

// Long: one outbox aged step by step, each kind of row checked as its retention passes.
#[tokio::test]
async fn old_attempts_and_finished_notifications_are_pruned() {
    let f = fixture(|c| {
        fast(c);
        c.delivery.retention_days = 30.0;
        c.delivery.prune_interval_ms = 100;
    })
    .await;
    let rx = TestReceiver::start().await;
    let hook = f.wallet_hook_id(&rx.url, "transfer").await;
    let simulate = || {
        let (f, path) = (&f, format!("/api/v2/tbtc/wallet/{WALLET}/webhooks/{hook}/simulate"));
        async move {
            let n = expect_json(f.app.post_auth(&path, &f.token, &json!({})).await, 200).await;
            n["webhookNotifications"][0]["id"].as_str().unwrap().to_string()
        }
    };
    let (old, recent) = (simulate().await, simulate().await);
    rx.wait_for(2, 10).await;
    wait_until_idle(&f.app.state.store).await;
    // A notification still to deliver (its receiver refuses it: a retry is due later) is
    // never pruned, however old.
    let refusing = TestReceiver::start().await;
    refusing.always(503);
    let due_hook = f.wallet_hook_id(&refusing.url, "transfer").await;
    let path = format!("/api/v2/tbtc/wallet/{WALLET}/webhooks/{due_hook}/simulate");
    let due = expect_json(f.app.post_auth(&path, &f.token, &json!({})).await, 200).await;
    let due = due["webhookNotifications"][0]["id"].as_str().unwrap().to_string();
    refusing.wait_for(1, 10).await;
    wait_until_idle(&f.app.state.store).await;
    // 31 days ago, in milliseconds.
    let aged = custodian::clock::wall_now_ms() - 31 * 86_400_000;
    f.app
        .raw_sql(&format!(
            "UPDATE notifications SET updated_at = {aged}, created_at = {aged} WHERE id = '{due}'"
        ))
        .await;
    f.app.raw_sql(&format!("UPDATE notifications SET updated_at = {aged} WHERE id = '{old}'")).await;
    // The due notification's failed attempt is a delivery_attempts row (a success is kept on
    // its notification, and goes with it).
    f.app
        .raw_sql(&format!("UPDATE delivery_attempts SET started_at = {aged} WHERE notification_id = '{due}'"))
        .await;
    let path = format!("/api/v2/webhook/{hook}/notifications");
    let listed = || async {
        let l = f.get(&path).await;
        let ids = l["notifications"].as_array().unwrap().iter();
        ids.map(|n| n["id"].as_str().unwrap().to_string()).collect::<Vec<_>>()
    };
    until("the old notification to be pruned", 10, || async {
        let ids = listed().await;
        (!ids.contains(&old)).then_some(())
    })
    .await;
    assert_eq!(listed().await, vec![recent.clone()], "the recent one stays");
    let kept = f.app.raw_sql(&format!("SELECT state FROM notifications WHERE id = '{due}'")).await;
    assert_eq!(kept, vec!["pending".to_string()], "the one still to deliver stays");
    let attempts = f.get(&format!("/api/v2/webhook/{hook}/notifications/{recent}/attempts")).await;
    assert_eq!(attempts["attempts"].as_array().map(Vec::len), Some(1), "{attempts}");
    let left = f.app.raw_sql(&format!("SELECT id FROM notifications WHERE id = '{old}'")).await;
    assert!(left.is_empty(), "its successful attempt went with it");
    until("the old attempt to be pruned", 10, || async {
        let left = f
            .app
            .raw_sql(&format!(
                "SELECT notification_id FROM delivery_attempts WHERE notification_id = '{due}'"
            ))
            .await;
        left.is_empty().then_some(())
    })
    .await;
    // Ingested events go too once past retention (docs/decisions.md#performance-as-the-data-grows), and only those.
    let admin = f.admin_token().await;
    for id in ["ev-old", "ev-new"] {
        f.event(&admin, json!({ "eventId": id, "type": "transfer", "walletId": WALLET })).await;
    }
    let aged_secs = aged / 1000;
    f.app.raw_sql(&format!("UPDATE events SET created_at = {aged_secs} WHERE event_id = 'ev-old'")).await;
    until("the old event to be pruned", 10, || async {
        let left = f.app.raw_sql("SELECT event_id FROM events ORDER BY event_id").await;
        (left == vec!["ev-new".to_string()]).then_some(())
    })
    .await;
}

/// The worker vacuums PostgreSQL's notifications table every
/// `postgres.vacuum_interval` seconds (this machine's PostgreSQL runs without autovacuum);
/// SQLite has nothing to vacuum.
#[tokio::test]
async fn the_worker_vacuums_the_outbox_where_the_backend_needs_it() {
    let f = fixture(|c| {
        fast(c);
        c.postgres.vacuum_interval = 1;
    })
    .await;
    let vacuumed = f.app.state.store.vacuum_outbox().await.expect("vacuum");
    match crate::BACKEND {
        Backend::Sqlite => assert!(!vacuumed, "SQLite reuses freed pages without a vacuum"),
        Backend::Postgres => {
            assert!(vacuumed);
            // The worker's own rounds: the table's vacuum count grows without this test's call.
            let count = || async {
                let n = f
                    .app
                    .raw_sql("SELECT CAST(vacuum_count AS TEXT) FROM pg_stat_user_tables WHERE relname = 'notifications'")
                    .await;
                n.first().and_then(|n| n.parse::<i64>().ok()).unwrap_or(0)
            };
            let first = until("the explicit vacuum to be counted", 10, || async {
                let n = count().await;
                (n > 0).then_some(n)
            })
            .await;
            until("the worker to vacuum again", 15, || async { (count().await > first).then_some(()) }).await;
        }
    }
}

#[tokio::test]
async fn a_tenant_with_hanging_receivers_leaves_slots_for_the_others() {
    fn slots(c: &mut custodian::config::Config) {
        fast(c);
        c.delivery.timeout = 30;
        c.delivery.concurrency = 8;
        c.delivery.per_webhook_concurrency = 8;
        c.delivery.per_tenant_concurrency = 4;
        c.webhooks.operations_per_minute = 1000;
    }
    // An API-only host stores every notification first, so that the worker's first claim
    // finds all of tenant A's 12 at once: 4 start, 4 wait in memory for A's share. Those
    // waiting once counted against the 4 free permits and B was never claimed.
    let f = fixture(|c| {
        slots(c);
        c.role = custodian::config::Role::Api;
    })
    .await;
    let tarpit = TestReceiver::start().await;
    tarpit.delay_all(60_000);
    let fast_rx = TestReceiver::start().await;
    // Tenant A (the fixture's enterprise) hangs; tenant B is a second enterprise and wallet.
    let hung = f.wallet_hook_id(&tarpit.url, "transfer").await;
    let b_user = f.app.create_user("tenant-b@example.com").await;
    let b_enterprise = f.app.create_enterprise("B", &[(&b_user, true)]).await;
    let b_wallet = "fedcba9876543210fedcba9876543210";
    f.app.import_wallet(b_wallet, &b_enterprise, &[&b_user.id]).await;
    let b_token = f.app.login(&b_user).await;
    let b_path = format!("/api/v2/tbtc/wallet/{b_wallet}/webhooks");
    let b_hook = expect_json(
        f.app.post_auth(&b_path, &b_token, &json!({ "type": "transfer", "url": fast_rx.url })).await,
        200,
    )
    .await;
    let b_hook = b_hook["id"].as_str().unwrap().to_string();

    for _ in 0..12 {
        let path = format!("/api/v2/tbtc/wallet/{WALLET}/webhooks/{hung}/simulate");
        expect_json(f.app.post_auth(&path, &f.token, &json!({})).await, 200).await;
    }
    for _ in 0..8 {
        let path = format!("{b_path}/{b_hook}/simulate");
        expect_json(f.app.post_auth(&path, &b_token, &json!({})).await, 200).await;
    }
    let url = f.app._db.url.clone();
    let _worker = spawn_app_with(|c| {
        slots(c);
        c.database_url = url;
        c.role = custodian::config::Role::Worker;
    })
    .await;
    tarpit.wait_for(4, 10).await;
    // Without a per-tenant share, A's hanging deliveries would hold all 8 slots for 30 s.
    fast_rx.wait_for(8, 10).await;
    assert_eq!(tarpit.received().len(), 4, "tenant A holds only its share");
}

#[tokio::test]
async fn each_user_has_a_rate_limit_with_headers() {
    let app = spawn_app_with(|c| {
        c.rate_limit.requests = 5;
        c.rate_limit.period = 60;
        c.rate_limit.admin_requests = 0;
    })
    .await;
    let (alice, bob) = (app.create_user("alice@example.com").await, app.create_user("bob@example.com").await);
    let ops = app.create_user_with("ops@example.com", true).await;
    let (a, b, admin) = (app.login(&alice).await, app.login(&bob).await, app.login(&ops).await);
    let header = |res: &reqwest::Response, name: &str| -> u64 {
        res.headers().get(name).unwrap_or_else(|| panic!("{name}")).to_str().unwrap().parse().unwrap()
    };
    for left in (0..5).rev() {
        let res = app.me(&a).await;
        assert_eq!(res.status(), 200);
        assert_eq!(header(&res, "ratelimit-limit"), 5);
        assert_eq!(header(&res, "ratelimit-remaining"), left);
        assert!(header(&res, "ratelimit-reset") <= 60);
    }
    let res = app.me(&a).await;
    assert_eq!(header(&res, "ratelimit-remaining"), 0);
    assert!((1..=60).contains(&header(&res, "retry-after")));
    assert_error(res, 429, "TooManyRequests").await;
    // Another token of the same user shares the bucket; another user has its own.
    let second = app.login(&alice).await;
    assert_eq!(app.me(&second).await.status(), 429);
    assert_eq!(app.me(&b).await.status(), 200);
    // rate_limit.admin_requests = 0: service admins are not limited.
    for _ in 0..10 {
        let res = app.me(&admin).await;
        assert_eq!(res.status(), 200);
        assert!(res.headers().get("ratelimit-limit").is_none());
    }
}
