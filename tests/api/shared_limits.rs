//! The rate limits hold across processes on one PostgreSQL database
//! (docs/decisions.md#limits-shared-across-processes): a user hammering five `custodian serve`
//! processes in turn gets the configured rate, not five times it; a webhook's operation budget
//! is one budget whichever process is asked; and while the shared buckets cannot be reached a
//! write is refused (fail closed) and a read is counted in the process's own bucket.

use std::{
    sync::atomic::{AtomicUsize, Ordering},
    time::{Duration, Instant},
};

use custodian::{metrics::Metrics, token_bucket::Buckets};
use serde_json::{json, Value};

use crate::{
    outage::{through, upstream, CutProxy},
    procs::{Cluster, WALLET},
};

/// Burst 100, then 20 per second.
const REQUESTS: u32 = 100;
const PERIOD: u64 = 5;

/// Creates `alice@example.com` (no admin permission) and logs her in at `base`.
async fn alice(cluster: &Cluster, base: &str) -> String {
    cluster.create_user("alice@example.com", false);
    cluster.login_as(base, "alice@example.com").await
}

/// Eight clients send `GET /api/v2/user/me` as `token` to `bases` in turn for `secs` seconds.
/// Returns the 200s, the 429s and the seconds from the first request to the last answer.
async fn hammer(client: &reqwest::Client, bases: &[String], token: &str, secs: u64) -> (usize, usize, f64) {
    let (ok, limited, turn) = (AtomicUsize::new(0), AtomicUsize::new(0), AtomicUsize::new(0));
    let started = Instant::now();
    let until = started + Duration::from_secs(secs);
    let one_client = || async {
        while Instant::now() < until {
            let base = &bases[turn.fetch_add(1, Ordering::Relaxed) % bases.len()];
            let res = client.get(format!("{base}/api/v2/user/me")).bearer_auth(token).send().await.unwrap();
            match res.status().as_u16() {
                200 => ok.fetch_add(1, Ordering::Relaxed),
                429 => limited.fetch_add(1, Ordering::Relaxed),
                other => panic!("unexpected status {other}"),
            };
        }
    };
    futures_util::future::join_all((0..8).map(|_| one_client())).await;
    (ok.into_inner(), limited.into_inner(), started.elapsed().as_secs_f64())
}

async fn aggregate_rate_with(processes: usize) {
    let (requests, period) = (REQUESTS.to_string(), PERIOD.to_string());
    let env =
        [("CUSTODIAN_RATE_LIMIT_REQUESTS", requests.as_str()), ("CUSTODIAN_RATE_LIMIT_PERIOD", &period)];
    let cluster = Cluster::new(&env).await;
    let mut servers = Vec::new();
    for _ in 0..processes {
        servers.push(cluster.start_role("api").await);
    }
    let bases: Vec<String> = servers.iter().map(|s| s.base.clone()).collect();
    let token = alice(&cluster, &bases[0]).await;
    let (ok, limited, secs) = hammer(&cluster.client, &bases, &token, 6).await;
    let allowed = f64::from(REQUESTS) + f64::from(REQUESTS) / PERIOD as f64 * secs;
    println!("{processes} process(es): {ok} allowed, {limited} refused in {secs:.1} s; the limit allows {allowed:.0}");
    assert!(limited > 0, "the limit bit");
    assert!((ok as f64) <= allowed * 1.10, "{ok} allowed past {allowed:.0} + 10%");
    assert!((ok as f64) >= allowed * 0.80, "only {ok} of {allowed:.0} allowed: tokens were lost");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_process_gives_a_user_the_configured_rate() {
    aggregate_rate_with(1).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn five_processes_give_a_user_the_configured_rate_not_five_times_it() {
    aggregate_rate_with(5).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_webhooks_operation_budget_is_one_across_processes() {
    let cluster = Cluster::new(&[("CUSTODIAN_WEBHOOKS_OPERATIONS_PER_MINUTE", "6")]).await;
    let servers =
        [cluster.start_role("api").await, cluster.start_role("api").await, cluster.start_role("api").await];
    let token = cluster.login(&servers[0].base).await;
    let hook: Value = cluster
        .client
        .post(format!("{}/api/v2/tbtc/wallet/{WALLET}/webhooks", servers[0].base))
        .bearer_auth(&token)
        .json(&json!({ "type": "transfer", "url": "https://example.com/hook" }))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let id = hook["id"].as_str().expect("webhook id");
    let mut statuses = Vec::new();
    for i in 0..12 {
        let base = &servers[i % servers.len()].base;
        let res = cluster
            .client
            .post(format!("{base}/api/v2/tbtc/wallet/{WALLET}/webhooks/{id}/simulate"))
            .bearer_auth(&token)
            .json(&json!({}))
            .send()
            .await
            .unwrap();
        statuses.push(res.status().as_u16());
    }
    let ok = statuses.iter().filter(|s| **s == 200).count();
    // Six in the bucket, and at most one more refilled (one per ten seconds) meanwhile.
    assert!((6..=7).contains(&ok), "{statuses:?}");
    assert!(statuses.iter().all(|s| *s == 200 || *s == 429), "{statuses:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unreachable_shared_buckets_refuse_writes_and_count_reads_here() {
    let dir = tempfile::tempdir().unwrap();
    let db = crate::common::TestDb::new(dir.path()).await;
    let proxy = CutProxy::start(upstream(&db.url)).await;
    let config = custodian::config::Config {
        database_url: through(&db.url, proxy.addr.port()),
        postgres: custodian::config::PostgresConfig { acquire_timeout_ms: 500, ..Default::default() },
        ..Default::default()
    };
    let store = custodian::store::open(&config).await.expect("open the database");
    let metrics = std::sync::Arc::new(Metrics::default());
    let limit = std::num::NonZeroU32::new(5).unwrap();
    let buckets = Buckets::new("api", limit, 60, (&store, true), metrics.clone());
    let message = || "limited".to_string();
    assert_eq!(buckets.check("u1", true, message).await.expect("allowed").remaining, 4);

    proxy.cut.send_replace(true);
    let (error, _) = buckets.check("u1", true, message).await.expect_err("a write is refused");
    assert!(matches!(error, custodian::error::Error::Unavailable(_)), "{error:?}");
    // A read is counted in this process's bucket: five, then refused.
    for _ in 0..5 {
        buckets.check("u1", false, message).await.expect("a read is counted here");
    }
    let (error, _) = buckets.check("u1", false, message).await.expect_err("this process's bucket is empty");
    assert!(matches!(error, custodian::error::Error::Throttled { .. }), "{error:?}");
    let text = metrics.encode().expect("metrics");
    for line in [
        r#"custodian_rate_limit_checks_total{limiter="api",outcome="unavailable"} 1"#,
        r#"custodian_rate_limit_checks_total{limiter="api",outcome="fallback"} 6"#,
    ] {
        assert!(text.contains(line), "{line} in\n{text}");
    }

    proxy.cut.send_replace(false);
    // Back on the shared bucket, which still holds what the first check left.
    let mut back = None;
    for _ in 0..40 {
        if let Ok(state) = buckets.check("u1", true, message).await {
            back = Some(state);
            break;
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    assert_eq!(back.expect("the shared bucket answers again").remaining, 3);
    store.close().await;
}

/// `rate_limit.shared = false`: each process keeps its own buckets, so two processes allow
/// twice the rate (the documented trade of the setting).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unshared_buckets_are_per_process() {
    let env = [("CUSTODIAN_RATE_LIMIT_REQUESTS", "5"), ("CUSTODIAN_RATE_LIMIT_SHARED", "false")];
    let cluster = Cluster::new(&env).await;
    let (a, b) = (cluster.start_role("api").await, cluster.start_role("api").await);
    let token = alice(&cluster, &a.base).await;
    let mut ok = 0;
    for i in 0..14 {
        let base = if i % 2 == 0 { &a.base } else { &b.base };
        let res =
            cluster.client.get(format!("{base}/api/v2/user/me")).bearer_auth(&token).send().await.unwrap();
        ok += usize::from(res.status() == 200);
    }
    assert_eq!(ok, 10, "five per process");
}
