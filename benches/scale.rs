//! Scale benchmarks (docs/decisions.md#performance-as-the-data-grows): the release `custodian` binary in its own process, as a
//! deployment runs it, fed by keep-alive clients and delivering to a receiver that live in this
//! process. The database is seeded here before the server starts (a service admin, enterprises,
//! wallets and their webhooks); everything measured goes through the public API.
//!
//! Phases (`BENCH_PHASES`, comma-separated; default `e2e,growth,backlog`; `soak` only when named):
//! - `e2e`: 10,000 events by 32 clients to one webhook on an empty database, three runs:
//!   deliveries/s from the first send to the last receipt.
//! - `growth`: `SCALE_CHUNKS` (12) chunks of `SCALE_CHUNK` (20,000) events by 32 clients into the
//!   same server; per chunk: deliveries/s, API p99, bytes stored per delivered event (the
//!   database's files, or PostgreSQL's `pg_database_size`) and the server's RSS.
//!   `SCALE_TRANSFER_IDS=1` gives every event a transfer id (as a chain transfer has).
//!   `SCALE_KEEP=FILE` keeps a copy of the SQLite database for a look inside.
//! - `soak`: `SOAK_RATE` (1,000) events/s for `SOAK_SECS` (1,200) with pruning on and a short
//!   retention (`SOAK_RETENTION_SECS`, 120; pruning every 10 s); per minute: event-to-receipt
//!   p50/p99 and the database's size, which must level off once retention starts pruning.
//! - `backlog`: tenant A's receiver answers 503 while `BACKLOG_EVENTS` (50,000) of A's events are
//!   ingested; tenant B meanwhile sends `BACKLOG_B_RATE` (200) events/s to a healthy receiver.
//!   Then A's receiver recovers and A sends one more event: its success makes A's waiting
//!   retries due at once. Reports A's drain rate, B's event-to-receipt p99 during the drain, and
//!   the same drain with B silent (the drain-only reference, measured in the same run).
//!
//! Run: `cargo bench --bench scale` (it uses the release binary cargo builds for benches); with
//! `CUSTODIAN_BENCH_POSTGRES_URL=postgres://postgres@127.0.0.1:5432/postgres` also on PostgreSQL.

mod common;

use std::{
    collections::HashMap,
    process::{Child, Command, Stdio},
    sync::{
        atomic::{AtomicBool, AtomicUsize, Ordering},
        Arc, Mutex,
    },
    time::{Duration, Instant, SystemTime, UNIX_EPOCH},
};

use axum::{
    body::Bytes,
    extract::{Path, State},
    http::StatusCode,
    routing::post,
    Router,
};
use custodian::{config::Config, identity::users, AppState};
use serde_json::{json, Value};
use sha2::Digest;
use sqlx::Connection;

const CLIENTS: usize = 32;
/// Most paced requests in flight: with a burst's [`CLIENTS`] beside them, under the server's
/// 128 connections per address (`connections.max_per_address`).
const PACED_IN_FLIGHT: u32 = 64;
const ADMIN: &str = "ops@example.com";

fn setting(name: &str, default: u64) -> u64 {
    std::env::var(name).ok().and_then(|v| v.parse().ok()).unwrap_or(default)
}

fn now_us() -> u128 {
    SystemTime::now().duration_since(UNIX_EPOCH).unwrap_or_default().as_micros()
}

fn percentile(sorted: &[f64], p: f64) -> f64 {
    if sorted.is_empty() {
        return f64::NAN;
    }
    sorted[((sorted.len() as f64 - 1.0) * p).round() as usize]
}

fn sorted(mut v: Vec<f64>) -> Vec<f64> {
    v.sort_by(f64::total_cmp);
    v
}

/// What the receiver got from one tenant's webhook.
#[derive(Default)]
struct Inbox {
    /// Answer 503 while false.
    healthy: AtomicBool,
    delivered: AtomicUsize,
    refused: AtomicUsize,
    /// (receipt time µs, event-to-receipt ms) of events that carry `sentAtUs`.
    latencies: Mutex<Vec<(u128, f64)>>,
    /// (answer time µs, API latency ms) of this tenant's paced events.
    api: Mutex<Vec<(u128, f64)>>,
}

impl Inbox {
    fn healthy() -> Arc<Self> {
        let inbox = Self::default();
        inbox.healthy.store(true, Ordering::SeqCst);
        Arc::new(inbox)
    }

    /// Event-to-receipt latencies received at or after `since_us` (and before `until_us`).
    fn latencies_between(&self, since_us: u128, until_us: u128) -> Vec<f64> {
        between(&self.latencies, since_us, until_us)
    }

    /// API latencies of paced events answered at or after `since_us` (and before `until_us`).
    fn api_between(&self, since_us: u128, until_us: u128) -> Vec<f64> {
        between(&self.api, since_us, until_us)
    }
}

/// The latencies of `timed` stamped in `[since_us, until_us)`, sorted.
fn between(timed: &Mutex<Vec<(u128, f64)>>, since_us: u128, until_us: u128) -> Vec<f64> {
    let l = timed.lock().map(|l| l.clone()).unwrap_or_default();
    sorted(l.into_iter().filter(|(at, _)| *at >= since_us && *at < until_us).map(|(_, ms)| ms).collect())
}

impl Inbox {}

type Inboxes = Arc<HashMap<String, Arc<Inbox>>>;

async fn receive(State(inboxes): State<Inboxes>, Path(tenant): Path<String>, body: Bytes) -> StatusCode {
    let Some(inbox) = inboxes.get(&tenant) else { return StatusCode::NOT_FOUND };
    if !inbox.healthy.load(Ordering::SeqCst) {
        inbox.refused.fetch_add(1, Ordering::Relaxed);
        return StatusCode::SERVICE_UNAVAILABLE;
    }
    if let Ok(v) = serde_json::from_slice::<Value>(&body) {
        if let Some(sent) = v.get("sentAtUs").and_then(Value::as_str).and_then(|s| s.parse::<u128>().ok()) {
            let now = now_us();
            let ms = now.saturating_sub(sent) as f64 / 1000.0;
            if let Ok(mut l) = inbox.latencies.lock() {
                l.push((now, ms));
            }
        }
    }
    inbox.delivered.fetch_add(1, Ordering::Relaxed);
    StatusCode::OK
}

/// A receiver for `tenants`, each at `/{tenant}`; its base URL.
async fn receiver(inboxes: Inboxes) -> anyhow::Result<String> {
    let app = Router::new().route("/{tenant}", post(receive)).with_state(inboxes);
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let url = format!("http://{}", listener.local_addr()?);
    tokio::spawn(async move { axum::serve(listener, app).await });
    Ok(url)
}

/// One tenant: an enterprise with one wallet whose transfer webhook points at `url`.
struct Tenant {
    wallet: String,
    url: String,
}

/// Seeds `db_url` (service admin [`ADMIN`], one enterprise, wallet and webhook per tenant) with
/// the library, then lets go of it; the key file is written into `dir`.
async fn seed(db_url: &str, dir: &std::path::Path, tenants: &[Tenant]) -> anyhow::Result<()> {
    std::fs::write(dir.join("key"), "22".repeat(32))?;
    let config = Config {
        database_url: db_url.to_string(),
        secret_key_file: Some(dir.join("key")),
        ..Config::default()
    };
    let state = AppState::new(config).await?;
    let admin =
        users::create_user(&state.store, &state.identity.key, ADMIN, None, "benchmark password", true)
            .await?;
    for (i, t) in tenants.iter().enumerate() {
        let enterprise = users::create_enterprise(&state.store, &format!("Tenant {i}"), None).await?;
        let record = json!([{
            "id": t.wallet, "label": "w", "coin": "tbtc", "allowBackupKeySigning": false, "approvalsRequired": 1,
            "coinSpecific": {}, "deleted": false, "disableTransactionNotifications": false, "enterprise": enterprise.id,
            "hasLargeNumberOfAddresses": false, "isCold": false, "startDate": "2025-01-01T00:00:00Z",
        }]);
        custodian::wallets::import::import(&state.store, &record.to_string(), |_, _| {}).await?;
        common::add_wallet_webhook(&state, &admin.id, &t.wallet, Some(enterprise.id.clone()), t.url.clone())
            .await?;
    }
    Ok(())
}

/// The server process; killed when dropped.
struct Server {
    child: Child,
    base: String,
    db_url: String,
    client: reqwest::Client,
    token: String,
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Server {
    /// Starts `custodian serve` on `db_url` with the bench's settings and `extra` ones
    /// (`CUSTODIAN_*` variables), waits for /health and logs the service admin in.
    async fn start(db_url: &str, dir: &std::path::Path, extra: &[(&str, String)]) -> anyhow::Result<Self> {
        let port = std::net::TcpListener::bind("127.0.0.1:0")?.local_addr()?.port();
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_custodian"));
        cmd.args(["serve", "--listen", &format!("127.0.0.1:{port}")])
            .env("CUSTODIAN_DATABASE_URL", db_url)
            .env("CUSTODIAN_ENVIRONMENT", "test")
            .env("CUSTODIAN_SECRET_KEY_FILE", dir.join("key"))
            .env("CUSTODIAN_DELIVERY_ALLOWED_CIDRS", "127.0.0.1/32")
            // A benchmark measures the service, not the rate limit.
            .env("CUSTODIAN_RATE_LIMIT_ADMIN_REQUESTS", "0")
            .env("RUST_LOG", "error")
            .stdout(Stdio::null())
            .stderr(Stdio::inherit());
        for (k, v) in extra {
            cmd.env(k, v);
        }
        let child = cmd.spawn()?;
        let base = format!("http://127.0.0.1:{port}");
        // Idle connections are dropped before the server's `connections.idle_timeout` (10 s)
        // closes them, so that no request goes out on a connection being closed.
        let client = reqwest::Client::builder()
            .no_proxy()
            .pool_max_idle_per_host(256)
            .pool_idle_timeout(Duration::from_secs(5))
            .build()?;
        let mut server = Server { child, base, db_url: db_url.to_string(), client, token: String::new() };
        for _ in 0..400 {
            if server
                .client
                .get(format!("{}/health", server.base))
                .send()
                .await
                .is_ok_and(|r| r.status().is_success())
            {
                server.token = common::login(&server.client, &server.base, ADMIN).await?;
                return Ok(server);
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        anyhow::bail!("the server did not become healthy")
    }

    /// The values of `/metrics` counters named `names` (0 when absent).
    async fn counters(&self, names: &[&str]) -> anyhow::Result<Vec<f64>> {
        let text = self
            .client
            .get(format!("{}/metrics", self.base))
            .bearer_auth(&self.token)
            .send()
            .await?
            .text()
            .await?;
        Ok(names
            .iter()
            .map(|name| {
                text.lines()
                    .filter(|l| l.starts_with(name) && !l.starts_with('#'))
                    .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
                    .sum()
            })
            .collect())
    }

    /// `VmRSS` of the server process, MiB.
    fn rss_mib(&self) -> f64 {
        common::rss_mib(self.child.id())
    }

    /// Bytes the database holds: SQLite's file and its WAL (separately), or PostgreSQL's
    /// `pg_database_size` (and 0).
    async fn db_bytes(&self) -> anyhow::Result<(u64, u64)> {
        if let Some(path) = self.db_url.strip_prefix("sqlite://") {
            let size = |p: String| std::fs::metadata(p).map(|m| m.len()).unwrap_or(0);
            return Ok((size(path.to_string()), size(format!("{path}-wal"))));
        }
        let mut c = sqlx::PgConnection::connect(&self.db_url).await?;
        let n: i64 =
            sqlx::query_scalar("SELECT pg_database_size(current_database())").fetch_one(&mut c).await?;
        Ok((u64::try_from(n).unwrap_or(0), 0))
    }

    /// POSTs one event for `wallet`, stamped with the time it is sent.
    async fn event(&self, wallet: &str, id: &str) -> anyhow::Result<f64> {
        self.event_to(&self.base, wallet, id).await
    }

    /// [`Server::event`] to the service at `base` (this server, or the relay).
    async fn event_to(&self, base: &str, wallet: &str, id: &str) -> anyhow::Result<f64> {
        let mut ev = json!({ "eventId": id, "type": "transfer", "walletId": wallet, "sentAtUs": now_us().to_string() });
        if setting("SCALE_TRANSFER_IDS", 0) == 1 {
            // A transfer id, as a chain transfer always has: its event body is kept to answer
            // `GET .../transfer/{id}`.
            ev["transferId"] = json!(hex::encode(&sha2::Sha256::digest(id.as_bytes())[..16]));
        }
        let t0 = Instant::now();
        let res = self
            .client
            .post(format!("{base}/api/v2/internal/events"))
            .bearer_auth(&self.token)
            .json(&ev)
            .send()
            .await?;
        anyhow::ensure!(res.status().is_success(), "event {id} was refused: {}", res.status());
        Ok(t0.elapsed().as_secs_f64() * 1000.0)
    }

    /// `n` events for `wallet` by [`CLIENTS`] keep-alive clients, ids `{prefix}{i}`; the API's
    /// latencies, ms.
    async fn burst(self: &Arc<Self>, wallet: &str, prefix: &str, n: usize) -> anyhow::Result<Vec<f64>> {
        let base = self.base.clone();
        self.burst_to(&base, wallet, prefix, n).await
    }

    /// [`Server::burst`] to the service at `base` (this server, or the relay).
    async fn burst_to(
        self: &Arc<Self>,
        base: &str,
        wallet: &str,
        prefix: &str,
        n: usize,
    ) -> anyhow::Result<Vec<f64>> {
        let mut tasks = Vec::new();
        for c in 0..CLIENTS {
            let (me, wallet, prefix, base) =
                (self.clone(), wallet.to_string(), prefix.to_string(), base.to_string());
            tasks.push(tokio::spawn(async move {
                let mut api = Vec::with_capacity(n / CLIENTS + 1);
                for i in (c..n).step_by(CLIENTS) {
                    api.push(me.event_to(&base, &wallet, &format!("{prefix}{i}")).await?);
                }
                anyhow::Ok(api)
            }));
        }
        let mut api = Vec::with_capacity(n);
        for t in tasks {
            api.extend(t.await??);
        }
        Ok(api)
    }

    /// Sends `rate` events/s for `wallet` until `stop` turns true (each on its own task, at most
    /// [`PACED_IN_FLIGHT`] in flight), noting API latencies in `inbox`; how many were
    /// accepted. Refusals are printed and not counted.
    fn paced(
        self: &Arc<Self>,
        wallet: &str,
        prefix: &str,
        rate: u64,
        stop: Arc<AtomicBool>,
        inbox: Arc<Inbox>,
    ) -> tokio::task::JoinHandle<usize> {
        let (me, wallet, prefix) = (self.clone(), wallet.to_string(), prefix.to_string());
        tokio::spawn(async move {
            let bound = Arc::new(tokio::sync::Semaphore::new(PACED_IN_FLIGHT as usize));
            let accepted = Arc::new(AtomicUsize::new(0));
            let mut tick = tokio::time::interval(Duration::from_micros(1_000_000 / rate.max(1)));
            tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Burst);
            let mut sent = 0;
            while !stop.load(Ordering::SeqCst) {
                tick.tick().await;
                let Ok(permit) = bound.clone().acquire_owned().await else { break };
                let (me, wallet, id) = (me.clone(), wallet.clone(), format!("{prefix}{sent}"));
                let (accepted, inbox) = (accepted.clone(), inbox.clone());
                tokio::spawn(async move {
                    match me.event(&wallet, &id).await {
                        Ok(ms) => {
                            accepted.fetch_add(1, Ordering::SeqCst);
                            if let Ok(mut l) = inbox.api.lock() {
                                l.push((now_us(), ms));
                            }
                        }
                        Err(e) => eprintln!("paced event: {e}"),
                    }
                    drop(permit);
                });
                sent += 1;
            }
            // Wait for the last requests to be answered.
            let _ = bound.acquire_many(PACED_IN_FLIGHT).await;
            accepted.load(Ordering::SeqCst)
        })
    }
}

/// Waits until `inbox` has `n` deliveries, at most `limit`.
async fn until_delivered(inbox: &Inbox, n: usize, limit: Duration) -> anyhow::Result<()> {
    let t0 = Instant::now();
    while inbox.delivered.load(Ordering::Relaxed) < n {
        anyhow::ensure!(
            t0.elapsed() < limit,
            "only {} of {n} delivered after {limit:?}",
            inbox.delivered.load(Ordering::Relaxed)
        );
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
    Ok(())
}

/// One tenant on a fresh server: its inbox and the server (one enterprise, so its share is all
/// of `delivery.concurrency`, as README advises).
async fn single(
    db_url: &str,
    dir: &std::path::Path,
    extra: &[(&str, String)],
) -> anyhow::Result<(Arc<Inbox>, Arc<Server>)> {
    let (inbox, server, _) = single_at(db_url, dir, extra).await?;
    Ok((inbox, server))
}

/// [`single`], and the URL its webhook delivers to.
async fn single_at(
    db_url: &str,
    dir: &std::path::Path,
    extra: &[(&str, String)],
) -> anyhow::Result<(Arc<Inbox>, Arc<Server>, String)> {
    let inbox = Inbox::healthy();
    let url = receiver(Arc::new(HashMap::from([("a".to_string(), inbox.clone())]))).await?;
    let wallet = format!("{:032x}", 0xa);
    let hook = format!("{url}/a");
    seed(db_url, dir, &[Tenant { wallet, url: hook.clone() }]).await?;
    let mut env = vec![("CUSTODIAN_DELIVERY_PER_TENANT_CONCURRENCY", "64".to_string())];
    env.extend_from_slice(extra);
    Ok((inbox, Arc::new(Server::start(db_url, dir, &env).await?), hook))
}

/// The reference a delivery rate is held against: a relay that answers each event at once and
/// forwards its body to the receiver (one keep-alive client), doing nothing else. Same clients,
/// same receiver, same machine, same run. Its base URL.
async fn relay(to: String) -> anyhow::Result<String> {
    #[derive(Clone)]
    struct Relay {
        client: reqwest::Client,
        to: Arc<str>,
    }
    async fn forward(State(r): State<Relay>, body: Bytes) -> StatusCode {
        tokio::spawn(async move {
            let _ = r.client.post(&*r.to).header("content-type", "application/json").body(body).send().await;
        });
        StatusCode::OK
    }
    let state = Relay { client: reqwest::Client::builder().no_proxy().build()?, to: to.into() };
    let app = Router::new().route("/api/v2/internal/events", post(forward)).with_state(state);
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let url = format!("http://{}", listener.local_addr()?);
    tokio::spawn(async move { axum::serve(listener, app).await });
    Ok(url)
}

async fn end_to_end(label: &str, db_url: &str) -> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    let (inbox, server, hook_url) = single_at(db_url, dir.path(), &[]).await?;
    let wallet = format!("{:032x}", 0xa);
    let relay = relay(hook_url).await?;
    let mut ratios = Vec::new();
    for run in 0..3 {
        let n = 10_000;
        let mut rates = [0.0; 2];
        // The relay and the service take turns, so that the machine's state is alike for both.
        for (i, (base, what)) in
            [(relay.clone(), "relay"), (server.base.clone(), "service")].into_iter().enumerate()
        {
            let before = inbox.delivered.load(Ordering::Relaxed);
            let t0 = Instant::now();
            let api = sorted(server.burst_to(&base, &wallet, &format!("e{run}-{what}-"), n).await?);
            until_delivered(&inbox, before + n, Duration::from_secs(300)).await?;
            let secs = t0.elapsed().as_secs_f64();
            rates[i] = n as f64 / secs;
            println!(
                "e2e run {} {what}: {n} events by {CLIENTS} clients, last receipt after {secs:.2} s = {:.0} deliveries/s; API p50 {:.1} ms, p99 {:.1} ms ({label})",
                run + 1,
                rates[i],
                percentile(&api, 0.5),
                percentile(&api, 0.99),
            );
        }
        ratios.push(rates[1] / rates[0]);
    }
    let ratios = sorted(ratios);
    println!(
        "e2e: service / relay = {:.2} (median of 3; {:.2} to {:.2}) ({label})",
        ratios[1], ratios[0], ratios[2]
    );
    Ok(())
}

async fn growth(label: &str, db_url: &str) -> anyhow::Result<()> {
    let chunks = setting("SCALE_CHUNKS", 12) as usize;
    let chunk = setting("SCALE_CHUNK", 20_000) as usize;
    let dir = tempfile::tempdir()?;
    let (inbox, server) = single(db_url, dir.path(), &[]).await?;
    let wallet = format!("{:032x}", 0xa);
    let (empty, _) = server.db_bytes().await?;
    let mut rates = Vec::new();
    for c in 0..chunks {
        let before = inbox.delivered.load(Ordering::Relaxed);
        let t0 = Instant::now();
        let api = sorted(server.burst(&wallet, &format!("g{c}-"), chunk).await?);
        until_delivered(&inbox, before + chunk, Duration::from_secs(600)).await?;
        let secs = t0.elapsed().as_secs_f64();
        let delivered = before + chunk;
        let (file, wal) = server.db_bytes().await?;
        rates.push(chunk as f64 / secs);
        println!(
            "growth chunk {:>2}: {:>7} stored, {:.0} deliveries/s, API p99 {:.1} ms, {:.0} B per event ({:.1} MiB{}), server RSS {:.0} MiB ({label})",
            c + 1,
            delivered,
            chunk as f64 / secs,
            percentile(&api, 0.99),
            (file + wal).saturating_sub(empty) as f64 / delivered as f64,
            file as f64 / 1048576.0,
            if wal > 0 { format!(" + WAL {:.1} MiB", wal as f64 / 1048576.0) } else { String::new() },
            server.rss_mib(),
        );
    }
    if let (Ok(to), Some(path)) = (std::env::var("SCALE_KEEP"), db_url.strip_prefix("sqlite://")) {
        // For a look inside (`sqlite3 FILE` with dbstat): the file and its WAL.
        std::fs::copy(path, &to)?;
        std::fs::copy(format!("{path}-wal"), format!("{to}-wal"))?;
    }
    if rates.len() >= 8 {
        let best = |r: &[f64]| r.iter().copied().fold(f64::NAN, f64::max);
        let n = rates.len();
        println!(
            "growth: best of the last 4 chunks / best of the first 4 = {:.2} ({label})",
            best(&rates[n - 4..]) / best(&rates[..4])
        );
    }
    Ok(())
}

async fn soak(label: &str, db_url: &str) -> anyhow::Result<()> {
    let rate = setting("SOAK_RATE", 1000);
    let secs = setting("SOAK_SECS", 1200);
    let retention = setting("SOAK_RETENTION_SECS", 120);
    let minute = setting("SOAK_REPORT_SECS", 60);
    let dir = tempfile::tempdir()?;
    let env = [
        ("CUSTODIAN_DELIVERY_RETENTION_DAYS", format!("{}", retention as f64 / 86_400.0)),
        ("CUSTODIAN_DELIVERY_PRUNE_INTERVAL_MS", "10000".to_string()),
    ];
    let (inbox, server) = single(db_url, dir.path(), &env).await?;
    let wallet = format!("{:032x}", 0xa);
    let stop = Arc::new(AtomicBool::new(false));
    let sender = server.paced(&wallet, "s", rate, stop.clone(), inbox.clone());
    let t0 = now_us();
    for m in 1..=secs.div_ceil(minute) {
        tokio::time::sleep(Duration::from_secs(minute)).await;
        let end = t0 + u128::from(m * minute) * 1_000_000;
        let l = inbox.latencies_between(end - u128::from(minute) * 1_000_000, end);
        let (file, wal) = server.db_bytes().await?;
        println!(
            "soak {:>4} s: {} received, event-to-receipt p50 {:.1} ms, p99 {:.1} ms; database {:.1} MiB{}, server RSS {:.0} MiB ({label})",
            m * minute,
            l.len(),
            percentile(&l, 0.5),
            percentile(&l, 0.99),
            file as f64 / 1048576.0,
            if wal > 0 { format!(" + WAL {:.1} MiB", wal as f64 / 1048576.0) } else { String::new() },
            server.rss_mib(),
        );
    }
    stop.store(true, Ordering::SeqCst);
    let sent = sender.await?;
    until_delivered(&inbox, sent, Duration::from_secs(60)).await?;
    println!(
        "soak: {sent} events at {rate}/s for {secs} s, all delivered, retention {retention} s ({label})"
    );
    Ok(())
}

/// Tenant A's backlog draining, with tenant B sending `b_rate` events/s meanwhile (0: silent).
async fn backlog(label: &str, db_url: &str, b_rate: u64) -> anyhow::Result<f64> {
    let events = setting("BACKLOG_EVENTS", 50_000) as usize;
    let dir = tempfile::tempdir()?;
    let (a, b) = (Arc::new(Inbox::default()), Inbox::healthy());
    let url = receiver(Arc::new(HashMap::from([("a".into(), a.clone()), ("b".into(), b.clone())]))).await?;
    let (wa, wb) = (format!("{:032x}", 0xa), format!("{:032x}", 0xb));
    let tenants = [
        Tenant { wallet: wa.clone(), url: format!("{url}/a") },
        Tenant { wallet: wb.clone(), url: format!("{url}/b") },
    ];
    seed(db_url, dir.path(), &tenants).await?;
    // Defaults but for suspension, which would otherwise stop A's webhook after 100 failures.
    let env = [
        ("CUSTODIAN_DELIVERY_SUSPEND_AFTER_FAILURES", "10000000".to_string()),
        ("CUSTODIAN_DELIVERY_SUSPEND_AFTER_TOTAL_FAILURES", "10000000".to_string()),
    ];
    let server = Arc::new(Server::start(db_url, dir.path(), &env).await?);
    let stop = Arc::new(AtomicBool::new(false));
    let b_sender = (b_rate > 0).then(|| server.paced(&wb, "b", b_rate, stop.clone(), b.clone()));
    let t0 = Instant::now();
    server.burst(&wa, "a", events).await?;
    // Every event of A has been refused once and waits for its retry.
    while a.refused.load(Ordering::Relaxed) < events {
        anyhow::ensure!(t0.elapsed() < Duration::from_secs(600), "A's events were not all attempted");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let ingest = t0.elapsed().as_secs_f64();
    a.healthy.store(true, Ordering::SeqCst);
    let recovered = now_us();
    let names = [
        "custodian_webhook_notifications_handed_total",
        "custodian_webhook_notifications_claimed_total",
        "custodian_webhook_claims_total",
        "custodian_webhook_claim_seconds_total",
    ];
    let before = server.counters(&names).await?;
    let t1 = Instant::now();
    server.event(&wa, "a-recovered").await?;
    until_delivered(&a, events + 1, Duration::from_secs(900)).await?;
    let drain = t1.elapsed().as_secs_f64();
    let during = b.latencies_between(recovered, now_us());
    let api = b.api_between(recovered, now_us());
    let after = server.counters(&names).await?;
    stop.store(true, Ordering::SeqCst);
    let b_sent = match b_sender {
        Some(s) => s.await?,
        None => 0,
    };
    until_delivered(&b, b_sent, Duration::from_secs(60)).await?;
    let rate = events as f64 / drain;
    println!(
        "  during the drain: {:.0} notifications handed by ingestion, {:.0} claimed from the outbox \
         by {:.0} claim queries taking {:.2} s ({label})",
        after[0] - before[0],
        after[1] - before[1],
        after[2] - before[2],
        after[3] - before[3]
    );
    println!(
        "backlog{}: {events} of A's events refused in {ingest:.1} s, then drained in {drain:.2} s = {rate:.0} deliveries/s{} ({label})",
        if b_rate > 0 { format!(", B at {b_rate}/s") } else { ", B silent (drain-only reference)".into() },
        if b_rate > 0 {
            format!(
                "; B's event-to-receipt during the drain: {} events, p50 {:.1} ms, p99 {:.1} ms, max {:.1} ms \
                 (its API answers: p50 {:.1} ms, p99 {:.1} ms)",
                during.len(),
                percentile(&during, 0.5),
                percentile(&during, 0.99),
                during.last().copied().unwrap_or(f64::NAN),
                percentile(&api, 0.5),
                percentile(&api, 0.99),
            )
        } else {
            String::new()
        },
    );
    Ok(rate)
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let phases = std::env::var("BENCH_PHASES").unwrap_or_else(|_| "e2e,growth,backlog".into());
    for phase in phases.split(',').map(str::trim) {
        for postgres in common::backends() {
            let db = common::database(postgres).await?;
            match phase {
                "e2e" => end_to_end(db.label, &db.url).await?,
                "growth" => growth(db.label, &db.url).await?,
                "soak" => soak(db.label, &db.url).await?,
                "backlog" => {
                    let with_b = backlog(db.label, &db.url, setting("BACKLOG_B_RATE", 200)).await?;
                    let alone_db = common::database(postgres).await?;
                    let alone = backlog(alone_db.label, &alone_db.url, 0).await?;
                    println!(
                        "backlog: drain with B sending / drain-only = {:.2} ({})",
                        with_b / alone,
                        db.label
                    );
                    alone_db.drop_database().await;
                }
                other => anyhow::bail!("unknown phase {other}: e2e, growth, soak or backlog"),
            }
            db.drop_database().await;
        }
    }
    Ok(())
}
