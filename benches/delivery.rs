//! Webhook delivery benchmark (issues 4 §C and 12 §1), through the real server and engine:
//!
//! 1. end to end, what an integrator sees: 10,000 events POSTed to `/api/v2/internal/events`
//!    by 32 concurrent keep-alive clients, each fanning out to one webhook on a local receiver;
//!    throughput from the first send to the last receipt, and the API's p50/p99;
//! 2. latency: events POSTed at a steady 500/s and 1,000/s for 5 s, each fanning out to one
//!    webhook; event-to-receipt latency (from before the POST to the receiver's handler);
//! 3. drain only (not what a user sees): 10,000 notifications already queued, then the server
//!    started; time until the receiver has them all;
//! 4. fanout (only when named in `BENCH_PHASES`): 10,000 deliveries from events that each fan
//!    out to 1, 10 or 100 webhooks; deliveries/s and event-to-receipt p50/p99;
//! 5. signed (only when named in `BENCH_PHASES`): the end-to-end run with Bearer tokens and with
//!    BitGo's HMAC v2 signatures (each POST checked and recorded against replay), taking turns,
//!    three runs of each.
//!
//! The service admin's rate limit is set out of the way (`rate_limit.admin_requests = 0`).
//!
//! Run: `cargo bench --bench delivery`; with
//! `CUSTODIAN_BENCH_POSTGRES_URL=postgres://postgres@127.0.0.1:5432/postgres` also on PostgreSQL.
//! `BENCH_PHASES=e2e,latency,drain` picks phases (for a profiler); `BENCH_INGEST_ONLY=1` runs the
//! end-to-end phase with the delivery engine off and prints ingestion alone.

mod common;

use std::{
    sync::{
        atomic::{AtomicUsize, Ordering},
        Arc, Mutex,
    },
    time::{Duration, Instant, SystemTime, UNIX_EPOCH},
};

use axum::{body::Bytes, extract::State, routing::post, Router};
use custodian::{config::Config, identity::users, AppState};
use serde_json::{json, Value};

const WALLET: &str = "0123456789abcdef0123456789abcdef";

#[derive(Default)]
struct Sink {
    count: AtomicUsize,
    latencies: Mutex<Vec<f64>>,
}

fn now_us() -> u128 {
    SystemTime::now().duration_since(UNIX_EPOCH).unwrap_or_default().as_micros()
}

async fn receive(State(sink): State<Arc<Sink>>, body: Bytes) -> &'static str {
    if let Ok(v) = serde_json::from_slice::<Value>(&body) {
        if let Some(sent) = v.get("sentAtUs").and_then(Value::as_str).and_then(|s| s.parse::<u128>().ok()) {
            let ms = (now_us().saturating_sub(sent)) as f64 / 1000.0;
            if let Ok(mut l) = sink.latencies.lock() {
                l.push(ms);
            }
        }
    }
    sink.count.fetch_add(1, Ordering::Relaxed);
    "ok"
}

async fn receiver() -> anyhow::Result<(String, Arc<Sink>)> {
    let sink = Arc::new(Sink::default());
    let app = Router::new().route("/hook", post(receive)).with_state(sink.clone());
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let url = format!("http://{}/hook", listener.local_addr()?);
    tokio::spawn(async move { axum::serve(listener, app).await });
    Ok((url, sink))
}

async fn setup(db_url: &str, url: &str, webhooks: usize) -> anyhow::Result<(tempfile::TempDir, AppState)> {
    let dir = tempfile::tempdir()?;
    let mut config = Config {
        database_url: db_url.to_string(),
        secret_key_file: Some(dir.path().join("key")),
        ..Config::default()
    };
    std::fs::write(dir.path().join("key"), "22".repeat(32))?;
    config.delivery.allowed_cidrs = vec!["127.0.0.1/32".parse()?];
    config.delivery.poll_interval_ms = 100;
    // A benchmark measures the service, not the rate limit.
    config.rate_limit.admin_requests = 0;
    if std::env::var("BENCH_INGEST_ONLY").is_ok() {
        // Ingestion alone (no delivery engine), to see what each half costs.
        config.role = custodian::config::Role::Api;
    }
    if let Ok(c) = std::env::var("BENCH_CONCURRENCY") {
        config.delivery.concurrency = c.parse()?;
    }
    // One tenant (a single enterprise), as README advises for such a deployment.
    config.delivery.per_tenant_concurrency = config.delivery.concurrency;
    let state = AppState::new(config).await?;
    let admin = users::create_user(
        &state.store,
        &state.identity.key,
        "ops@example.com",
        None,
        "benchmark password",
        true,
    )
    .await?;
    let record = json!([{
        "id": WALLET, "label": "w", "coin": "tbtc", "allowBackupKeySigning": false, "approvalsRequired": 1,
        "coinSpecific": {}, "deleted": false, "disableTransactionNotifications": false,
        "hasLargeNumberOfAddresses": false, "isCold": false, "startDate": "2025-01-01T00:00:00Z",
    }]);
    custodian::wallets::import::import(&state.store, &record.to_string(), |_, _| {}).await?;
    for i in 0..webhooks {
        common::add_wallet_webhook(&state, &admin.id, WALLET, None, format!("{url}?h={i}")).await?;
    }
    Ok((dir, state))
}

/// A line of /proc/self/status in MiB (`VmRSS`, `VmHWM`): this process holds the server, the
/// clients and the receiver, so it bounds the server's own figure from above.
fn status_mib(field: &str) -> f64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    status
        .lines()
        .find_map(|l| {
            l.strip_prefix(field)?
                .trim_start_matches(':')
                .trim()
                .strip_suffix("kB")?
                .trim()
                .parse::<f64>()
                .ok()
        })
        .map_or(f64::NAN, |kb| kb / 1024.0)
}

fn percentile(sorted: &[f64], p: f64) -> f64 {
    if sorted.is_empty() {
        return f64::NAN;
    }
    sorted[((sorted.len() as f64 - 1.0) * p).round() as usize]
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    // BENCH_PHASES=e2e,latency,drain picks phases (all by default), e.g. for a profile.
    let phases = std::env::var("BENCH_PHASES").unwrap_or_else(|_| "e2e,latency,drain".into());
    if phases.contains("e2e") {
        for postgres in common::backends() {
            let db = common::database(postgres).await?;
            end_to_end(db.label, &db.url, false).await?;
            db.drop_database().await;
        }
    }
    // BENCH_PHASES=fanout: one event to 1, 10 and 100 webhooks (docs/decisions.md#performance-as-the-data-grows).
    if phases.contains("fanout") {
        for n in [1, 10, 100] {
            for postgres in common::backends() {
                let db = common::database(postgres).await?;
                fan_out(db.label, &db.url, n).await?;
                db.drop_database().await;
            }
        }
    }
    // BENCH_PHASES=signed: the cost of BitGo's signed requests and their replay guard on
    // ingestion (docs/decisions.md#signed-requests), Bearer and HMAC v2 runs taking turns, three of each.
    if phases.contains("signed") {
        for _ in 0..3 {
            for signed in [false, true] {
                for postgres in common::backends() {
                    let db = common::database(postgres).await?;
                    end_to_end(db.label, &db.url, signed).await?;
                    db.drop_database().await;
                }
            }
        }
    }
    if phases.contains("latency") {
        for rate in [500, 1000] {
            for postgres in common::backends() {
                let db = common::database(postgres).await?;
                latency(db.label, &db.url, rate).await?;
                db.drop_database().await;
            }
        }
    }
    if phases.contains("drain") {
        for postgres in common::backends() {
            let db = common::database(postgres).await?;
            throughput(db.label, &db.url).await?;
            db.drop_database().await;
        }
    }
    Ok(())
}

/// Events sent, and concurrent keep-alive clients, of the end-to-end run.
const E2E_EVENTS: usize = 10_000;
const E2E_CLIENTS: usize = 32;

/// The headers of BitGo's auth v2 for a POST of `body` to `path` with `token`.
fn signed_headers(token: &str, path: &str, body: &str) -> Vec<(&'static str, String)> {
    use hmac::Mac;
    use sha2::Digest;
    let ts = custodian::clock::wall_now_ms().to_string();
    let mut m = hmac::Hmac::<sha2::Sha256>::new_from_slice(token.as_bytes()).expect("any key length");
    m.update(format!("{ts}|{path}|{body}").as_bytes());
    vec![
        ("Authorization", format!("Bearer {}", hex::encode(sha2::Sha256::digest(token.as_bytes())))),
        ("Auth-Timestamp", ts),
        ("HMAC", hex::encode(m.finalize().into_bytes())),
        ("BitGo-Auth-Version", "2.0".into()),
    ]
}

async fn end_to_end(label: &str, db_url: &str, signed: bool) -> anyhow::Result<()> {
    let (url, sink) = receiver().await?;
    let (_dir, state) = setup(db_url, &url, 1).await?;
    let (base, client, token) = common::serve_and_login(&state, "ops@example.com").await?;
    let idle_rss = status_mib("VmRSS");
    let started = Instant::now();
    let mut tasks = Vec::new();
    for c in 0..E2E_CLIENTS {
        let (client, token, base) = (client.clone(), token.clone(), base.clone());
        tasks.push(tokio::spawn(async move {
            let mut api_ms = Vec::with_capacity(E2E_EVENTS / E2E_CLIENTS);
            for i in (c..E2E_EVENTS).step_by(E2E_CLIENTS) {
                let ev = json!({ "eventId": format!("x{i}"), "type": "transfer", "walletId": WALLET, "hash": format!("h{i}") });
                let t0 = Instant::now();
                let path = "/api/v2/internal/events";
                let mut req = client.post(format!("{base}{path}"));
                if signed {
                    let body = ev.to_string();
                    for (name, value) in signed_headers(&token, path, &body) {
                        req = req.header(name, value);
                    }
                    req = req.header("Content-Type", "application/json").body(body);
                } else {
                    req = req.bearer_auth(&token).json(&ev);
                }
                let res = req.send().await;
                if !res.is_ok_and(|r| r.status().is_success()) {
                    return Err(anyhow::anyhow!("event {i} was not accepted"));
                }
                api_ms.push(t0.elapsed().as_secs_f64() * 1000.0);
            }
            Ok(api_ms)
        }));
    }
    let mut api = Vec::with_capacity(E2E_EVENTS);
    for t in tasks {
        api.extend(t.await??);
    }
    let ingest_secs = started.elapsed().as_secs_f64();
    if std::env::var("BENCH_INGEST_ONLY").is_ok() {
        println!("ingest only: {:.0} events/s ({label})", E2E_EVENTS as f64 / ingest_secs);
        return Ok(());
    }
    while sink.count.load(Ordering::Relaxed) < E2E_EVENTS {
        anyhow::ensure!(started.elapsed() < Duration::from_secs(300), "end-to-end run did not finish");
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
    let secs = started.elapsed().as_secs_f64();
    api.sort_by(f64::total_cmp);
    println!(
        "end to end{}: {E2E_EVENTS} events by {E2E_CLIENTS} clients, last receipt after {secs:.2} s = {:.0} deliveries/s; \
         ingest {:.0} events/s, API p50 {:.1} ms, p99 {:.1} ms ({label})",
        if signed { ", signed (HMAC v2)" } else { "" },
        E2E_EVENTS as f64 / secs,
        E2E_EVENTS as f64 / ingest_secs,
        percentile(&api, 0.5),
        percentile(&api, 0.99),
    );
    println!(
        "  bench process RSS (server, clients and receiver): {idle_rss:.1} MiB before the run, peak {:.1} MiB ({label})",
        status_mib("VmHWM")
    );
    Ok(())
}

async fn throughput(label: &str, db_url: &str) -> anyhow::Result<()> {
    let (url, sink) = receiver().await?;
    let (_dir, state) = setup(db_url, &url, 10).await?;
    for i in 0..1000 {
        custodian::webhooks::events::ingest(&state.webhooks, json!({ "eventId": format!("e{i}"), "type": "transfer", "walletId": WALLET, "hash": format!("h{i}") }))
            .await
            .map_err(|e| anyhow::anyhow!("{e}"))?;
    }
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let start = Instant::now();
    tokio::spawn(custodian::serve(listener, state.clone(), std::future::pending()));
    while sink.count.load(Ordering::Relaxed) < 10_000 {
        anyhow::ensure!(start.elapsed() < Duration::from_secs(120), "throughput run did not finish");
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let secs = start.elapsed().as_secs_f64();
    println!(
        "drain only: 10000 queued notifications delivered in {secs:.2} s = {:.0} deliveries/s ({label})",
        10_000.0 / secs
    );
    Ok(())
}

async fn latency(label: &str, db_url: &str, rate: u64) -> anyhow::Result<()> {
    let (url, sink) = receiver().await?;
    let (_dir, state) = setup(db_url, &url, 1).await?;
    let (base, client, token) = common::serve_and_login(&state, "ops@example.com").await?;
    let total = usize::try_from(rate * 5)?;
    let mut tick = tokio::time::interval(Duration::from_micros(1_000_000 / rate));
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Burst);
    let started = Instant::now();
    for i in 0..total {
        tick.tick().await;
        let (client, token, base) = (client.clone(), token.clone(), base.clone());
        tokio::spawn(async move {
            let ev = json!({ "eventId": format!("l{rate}-{i}"), "type": "transfer", "walletId": WALLET, "sentAtUs": now_us().to_string() });
            let _ = client
                .post(format!("{base}/api/v2/internal/events"))
                .bearer_auth(&token)
                .json(&ev)
                .send()
                .await;
        });
    }
    let sent_secs = started.elapsed().as_secs_f64();
    while sink.count.load(Ordering::Relaxed) < total {
        anyhow::ensure!(started.elapsed() < Duration::from_secs(120), "latency run did not finish");
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let mut l = sink.latencies.lock().map(|l| l.clone()).unwrap_or_default();
    l.sort_by(f64::total_cmp);
    println!(
        "latency: {total} events at {:.0}/s, event-to-receipt p50 {:.2} ms, p99 {:.2} ms, max {:.2} ms ({label})",
        total as f64 / sent_secs,
        percentile(&l, 0.5),
        percentile(&l, 0.99),
        l.last().copied().unwrap_or(f64::NAN),
    );
    Ok(())
}

/// Deliveries of the fan-out run, whatever the number of webhooks per event.
const FAN_OUT_DELIVERIES: usize = 10_000;

/// `FAN_OUT_DELIVERIES / webhooks` events by 32 keep-alive clients, each to `webhooks` webhooks
/// of one wallet: deliveries/s to the last receipt and event-to-receipt latency.
async fn fan_out(label: &str, db_url: &str, webhooks: usize) -> anyhow::Result<()> {
    let (url, sink) = receiver().await?;
    let (_dir, state) = setup(db_url, &url, webhooks).await?;
    let (base, client, token) = common::serve_and_login(&state, "ops@example.com").await?;
    let events = FAN_OUT_DELIVERIES / webhooks;
    let started = Instant::now();
    let mut tasks = Vec::new();
    for c in 0..E2E_CLIENTS {
        let (client, token, base) = (client.clone(), token.clone(), base.clone());
        tasks.push(tokio::spawn(async move {
            for i in (c..events).step_by(E2E_CLIENTS) {
                let ev = json!({ "eventId": format!("f{i}"), "type": "transfer", "walletId": WALLET, "sentAtUs": now_us().to_string() });
                let res = client.post(format!("{base}/api/v2/internal/events")).bearer_auth(&token).json(&ev).send().await;
                anyhow::ensure!(res.is_ok_and(|r| r.status().is_success()), "event {i} was not accepted");
            }
            Ok(())
        }));
    }
    for t in tasks {
        t.await??;
    }
    let total = events * webhooks;
    while sink.count.load(Ordering::Relaxed) < total {
        anyhow::ensure!(started.elapsed() < Duration::from_secs(300), "fan-out run did not finish");
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
    let secs = started.elapsed().as_secs_f64();
    let mut l = sink.latencies.lock().map(|l| l.clone()).unwrap_or_default();
    l.sort_by(f64::total_cmp);
    println!(
        "fan-out: {events} events x {webhooks} webhooks by {E2E_CLIENTS} clients = {total} deliveries in {secs:.2} s = {:.0} deliveries/s; \
         event-to-receipt p50 {:.1} ms, p99 {:.1} ms ({label})",
        total as f64 / secs,
        percentile(&l, 0.5),
        percentile(&l, 0.99),
    );
    Ok(())
}
