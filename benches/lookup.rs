//! Wallet lookup benchmark (issues 3 and 12): POST /api/v2/internal/wallet with 1, 100 and 1000
//! ids through the real HTTP server, 10,000 wallets stored. Prints p50/p99 per size with one
//! client, then requests/s with 64 concurrent keep-alive connections for 1 and 100 ids beside
//! a reference measured in the same run (on SQLite): a bare axum route doing one sqlx
//! primary-key query for the same ids and returning the stored records. The per-user rate
//! limit is set out of the way.
//!
//! Run: `cargo bench --bench lookup`; with `BENCH_STORE=1` it also times the store query alone;
//! `BENCH_SERVE=SECS` only serves both routes that long, for a load generator in another
//! process (`scripts/lookup_wrk.sh` runs `wrk -c64` against them);
//! `BENCH_PROFILE_IDS=N` runs only the concurrent lookup of N ids (to profile it; the reference's
//! with `BENCH_PROFILE_REFERENCE=1`); `BENCH_ROUNDS`
//! sets the alternating rounds of the concurrent comparison (15);
//! with `CUSTODIAN_BENCH_POSTGRES_URL=postgres://postgres@127.0.0.1:5432/postgres` it also runs
//! on PostgreSQL, and there compares the rate limiter shared through the database with each
//! process's own (`rate_limit.shared`), two servers on the same database in alternating rounds
//! (docs/decisions.md#limits-shared-across-processes); `BENCH_LIMITER_ONLY=1` runs only that.

mod common;

use std::time::{Duration, Instant};

use custodian::{config::Config, AppState};
use rand::{seq::SliceRandom, SeedableRng};
use serde_json::{json, Value};

const WALLETS: usize = 10_000;

fn record(i: usize, user: &str, enterprise: &str) -> Value {
    let coin = ["btc", "eth", "sol", "ofcbtc"][i % 4];
    json!({
        "id": format!("{i:032x}"), "label": format!("Wallet {i}"), "coin": coin,
        "type": if i % 4 == 3 { "trading" } else { "hot" },
        "m": if i % 4 == 3 { 1 } else { 2 }, "n": if i % 4 == 3 { 1 } else { 3 },
        "allowBackupKeySigning": false, "approvalsRequired": 1,
        "coinSpecific": { "rootAddress": format!("0x{i:040x}") }, "deleted": false,
        "disableTransactionNotifications": false, "hasLargeNumberOfAddresses": false, "isCold": false,
        "startDate": "2025-01-02T03:04:05.000Z", "enterprise": enterprise,
        "keys": [format!("{i:024x}"), format!("{:024x}", i + 1), format!("{:024x}", i + 2)],
        "users": [{ "user": user, "permissions": ["admin", "spend", "view"] }],
        "receiveAddress": { "address": format!("addr{i}"), "chain": 0, "index": 0 },
        "balanceString": format!("{}", (i as u128) * 1_000_000_000_000_000_000_000u128),
        "confirmedBalanceString": "1000", "spendableBalanceString": "900",
    })
}

fn percentile(sorted: &[Duration], p: f64) -> f64 {
    let idx = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[idx].as_secs_f64() * 1000.0
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    for postgres in common::backends() {
        let db = common::database(postgres).await?;
        run(db.label, &db.url).await?;
        db.drop_database().await;
    }
    Ok(())
}

async fn run(label: &str, url: &str) -> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    let state = seeded(url, dir.path()).await?;
    let (base, client, token) = common::serve_and_login(&state, "bench@example.com").await?;
    let ids: Vec<String> = (0..WALLETS).map(|i| format!("{i:032x}")).collect();

    if std::env::var("BENCH_STORE").is_ok() {
        store_only(&state, &ids).await?;
    }
    if std::env::var("BENCH_LIMITER_ONLY").is_ok() {
        // Only the limiter comparison, which runs on PostgreSQL.
        if !url.starts_with("sqlite://") {
            compare_limiters(&client, url, dir.path(), &ids).await?;
        }
        return Ok(());
    }
    if let Ok(secs) = std::env::var("BENCH_SERVE") {
        // For a load generator in another process (`wrk`, scripts/lookup_wrk.sh): both
        // routes, and the token, written to BENCH_SERVE_FILE; then serve for that long.
        let reference = reference_route(url).await?;
        let file = std::env::var("BENCH_SERVE_FILE").unwrap_or_else(|_| "lookup-serve.env".into());
        std::fs::write(
            &file,
            format!(
                "CUSTODIAN_URL={base}/api/v2/internal/wallet?expandBalance=true\nREFERENCE_URL={reference}\nTOKEN={token}\n"
            ),
        )?;
        println!("serving for {secs} s; URLs and token in {file}");
        tokio::time::sleep(Duration::from_secs(secs.parse()?)).await;
        return Ok(());
    }
    if let Ok(size) = std::env::var("BENCH_PROFILE_IDS") {
        // Only the concurrent lookup of this many ids (Custodian's, or with
        // BENCH_PROFILE_REFERENCE=1 the reference's), for a profiler; 10 s.
        let (path, token) = match std::env::var("BENCH_PROFILE_REFERENCE") {
            Ok(_) => (reference_route(url).await?, None),
            Err(_) => (format!("{base}/api/v2/internal/wallet?expandBalance=true"), Some(token.as_str())),
        };
        let mut total = 0.0;
        for _ in 0..5 {
            total += concurrent(&client, &path, token, &ids, size.parse()?).await?;
        }
        println!("{size} ids: {:.0} req/s ({label}, {path})", total / 5.0);
        return Ok(());
    }
    println!("wallet lookup, {label}, {WALLETS} wallets stored, expandBalance=true");
    latencies(&client, &base, &token, &ids).await?;
    let reference = match url.strip_prefix("sqlite://") {
        Some(_) => Some(reference_route(url).await?),
        None => None,
    };
    compare(&client, &base, &token, &ids, reference.as_deref(), label).await?;
    if reference.is_none() {
        compare_limiters(&client, url, dir.path(), &ids).await?;
    }
    Ok(())
}

/// Lookups of 1 id per second through two servers on the same database, built alike but for
/// `rate_limit.shared` (the buckets in the database, or each process's own), in alternating
/// rounds; prints the median ratio. The limit is high (a reservation per 100 requests, the
/// batch at any limit past 5,000 per period) so that neither refuses.
async fn compare_limiters(
    client: &reqwest::Client,
    url: &str,
    dir: &std::path::Path,
    ids: &[String],
) -> anyhow::Result<()> {
    let server = |shared: bool| async move {
        let mut config = Config {
            database_url: url.to_string(),
            secret_key_file: Some(dir.join("key")),
            ..Config::default()
        };
        config.rate_limit.requests = u32::MAX;
        config.rate_limit.shared = shared;
        let state = AppState::new(config).await?;
        let (base, _, token) = common::serve_and_login(&state, "bench@example.com").await?;
        anyhow::Ok((base, token))
    };
    let (base, token) = server(true).await?;
    let (local_base, local_token) = server(false).await?;
    let (base, token) = (base.as_str(), token.as_str());
    let path = |b: &str| format!("{b}/api/v2/internal/wallet?expandBalance=true");
    let rounds: usize = std::env::var("BENCH_ROUNDS").ok().and_then(|r| r.parse().ok()).unwrap_or(15).max(1);
    let mut ratios = Vec::new();
    for round in 0..rounds {
        // Each goes first every other round, so that drift falls on both.
        let (shared, own) = if round % 2 == 0 {
            let shared = concurrent(client, &path(base), Some(token), ids, 1).await?;
            (shared, concurrent(client, &path(&local_base), Some(&local_token), ids, 1).await?)
        } else {
            let own = concurrent(client, &path(&local_base), Some(&local_token), ids, 1).await?;
            (concurrent(client, &path(base), Some(token), ids, 1).await?, own)
        };
        ratios.push((shared / own, shared, own));
    }
    ratios.sort_by(|a, b| a.0.total_cmp(&b.0));
    let (ratio, shared, own) = ratios[ratios.len() / 2];
    println!(
        "rate limiter, 1 id, 64 connections: shared {shared:.0} req/s, per process {own:.0} req/s, \
         median ratio {ratio:.2} (range {:.2}-{:.2}, {rounds} alternating rounds)",
        ratios[0].0,
        ratios[ratios.len() - 1].0
    );
    Ok(())
}

/// A server state on `url` with the benchmark's user, enterprise and [`WALLETS`] wallets; the
/// per-user rate limit set out of the way (a benchmark measures the service, not the limit).
async fn seeded(url: &str, dir: &std::path::Path) -> anyhow::Result<AppState> {
    let mut config =
        Config { database_url: url.to_string(), secret_key_file: Some(dir.join("key")), ..Config::default() };
    config.rate_limit.requests = u32::MAX;
    std::fs::write(dir.join("key"), "22".repeat(32))?;
    let state = AppState::new(config).await?;
    let (user, enterprise) = common::owner(&state).await?;
    let records: Vec<Value> = (0..WALLETS).map(|i| record(i, user.as_str(), enterprise.as_str())).collect();
    let summary =
        custodian::wallets::import::import(&state.store, &serde_json::to_string(&records)?, |_, _| {})
            .await?;
    assert_eq!(summary.imported as usize, WALLETS);
    Ok(state)
}

/// The store's query alone for 1,000 ids (`BENCH_STORE=1`).
async fn store_only(state: &AppState, ids: &[String]) -> anyhow::Result<()> {
    let pick: Vec<custodian::types::WalletId> =
        ids.choose_multiple(&mut rand::thread_rng(), 1000).filter_map(|id| id.parse().ok()).collect();
    let mut t = Vec::new();
    for _ in 0..100 {
        let s = Instant::now();
        let rows = state.store.wallets_by_ids(&pick, false).await?;
        t.push(s.elapsed());
        assert_eq!(rows.len(), 1000);
    }
    t.sort();
    println!("store only 1000: p50 {:.2} ms", percentile(&t, 0.5));
    Ok(())
}

/// p50 and p99 with one client for 1, 100 and 1,000 ids.
async fn latencies(client: &reqwest::Client, base: &str, token: &str, ids: &[String]) -> anyhow::Result<()> {
    let mut rng = rand::thread_rng();
    println!("{:>6} {:>8} {:>9} {:>9}", "ids", "requests", "p50 ms", "p99 ms");
    for (size, rounds) in [(1usize, 2000usize), (100, 1000), (1000, 300)] {
        let mut times = Vec::with_capacity(rounds);
        for round in 0..rounds + 20 {
            let pick: Vec<&String> = ids.choose_multiple(&mut rng, size).collect();
            let body = json!({ "ids": pick });
            let start = Instant::now();
            let res = client
                .post(format!("{base}/api/v2/internal/wallet?expandBalance=true"))
                .bearer_auth(token)
                .json(&body)
                .send()
                .await?;
            let status = res.status();
            let bytes = res.bytes().await?;
            let elapsed = start.elapsed();
            anyhow::ensure!(status == 200, "status {status}");
            if round == 0 {
                let v: Value = serde_json::from_slice(&bytes)?;
                anyhow::ensure!(v["wallets"].as_array().map(Vec::len) == Some(size), "wrong count");
            }
            if round >= 20 {
                times.push(elapsed);
            }
        }
        times.sort();
        println!("{size:>6} {rounds:>8} {:>9.2} {:>9.2}", percentile(&times, 0.5), percentile(&times, 0.99));
    }
    Ok(())
}

/// Requests/s with 64 connections for 1 and 100 ids, beside the reference when there is one.
/// Short alternating rounds, each Custodian's then the reference's: this machine's drift over
/// seconds is as wide as the gap being measured, so the ratio is taken per round and the median
/// reported with the range.
async fn compare(
    client: &reqwest::Client,
    base: &str,
    token: &str,
    ids: &[String],
    reference: Option<&str>,
    label: &str,
) -> anyhow::Result<()> {
    let rounds: usize = std::env::var("BENCH_ROUNDS").ok().and_then(|r| r.parse().ok()).unwrap_or(15).max(1);
    println!("concurrent, 64 keep-alive connections, {CONCURRENT_SECS} s each, {rounds} alternating rounds");
    let path = format!("{base}/api/v2/internal/wallet?expandBalance=true");
    for size in [1usize, 100] {
        let Some(r) = reference else {
            let ours = concurrent(client, &path, Some(token), ids, size).await?;
            println!("{size:>6} ids: custodian {ours:.0} req/s ({label})");
            continue;
        };
        let mut ratios = Vec::with_capacity(rounds);
        for _ in 0..rounds {
            let ours = concurrent(client, &path, Some(token), ids, size).await?;
            let refr = concurrent(client, r, None, ids, size).await?;
            ratios.push((ours / refr, ours, refr));
        }
        ratios.sort_by(|a, b| a.0.total_cmp(&b.0));
        let (ratio, ours, refr) = ratios[ratios.len() / 2];
        println!(
            "{size:>6} ids: custodian {ours:.0} req/s, reference {refr:.0} req/s, median ratio {ratio:.2} \
             (range {:.2}-{:.2}, {label})",
            ratios[0].0,
            ratios[ratios.len() - 1].0
        );
    }
    Ok(())
}

/// Seconds each concurrent measurement runs.
const CONCURRENT_SECS: u64 = 2;

/// Requests per second of POSTing `{ids}` of `size` random ids to `url` over 64 concurrent
/// keep-alive connections for [`CONCURRENT_SECS`].
async fn concurrent(
    client: &reqwest::Client,
    url: &str,
    token: Option<&str>,
    ids: &[String],
    size: usize,
) -> anyhow::Result<f64> {
    let deadline = Instant::now() + Duration::from_secs(CONCURRENT_SECS);
    let mut tasks = Vec::new();
    for _ in 0..64 {
        let (client, url, token, ids) =
            (client.clone(), url.to_string(), token.map(str::to_string), ids.to_vec());
        tasks.push(tokio::spawn(async move {
            let mut n = 0u64;
            let mut rng = rand::rngs::StdRng::from_entropy();
            while Instant::now() < deadline {
                let pick: Vec<&String> = ids.choose_multiple(&mut rng, size).collect();
                let mut req = client.post(&url).json(&json!({ "ids": pick }));
                if let Some(t) = &token {
                    req = req.bearer_auth(t);
                }
                let res = req.send().await?;
                anyhow::ensure!(res.status() == 200, "status {}", res.status());
                res.bytes().await?;
                n += 1;
            }
            Ok(n)
        }));
    }
    let mut total = 0;
    for t in tasks {
        total += t.await??;
    }
    Ok(total as f64 / CONCURRENT_SECS as f64)
}

/// The reference: a bare axum route on the same SQLite file doing one primary-key query for
/// the ids and returning the stored records as `{wallets: [...]}`. Returns its URL.
async fn reference_route(db_url: &str) -> anyhow::Result<String> {
    use axum::{extract::State, routing::post, Json, Router};
    // The same connection settings as Custodian's SQLite store (WAL, synchronous=NORMAL, reads
    // through a 1 GiB memory map, 8 connections, no check before each use), so the ratio
    // measures everything but the query.
    let opts = <sqlx::sqlite::SqliteConnectOptions as std::str::FromStr>::from_str(db_url)?
        .journal_mode(sqlx::sqlite::SqliteJournalMode::Wal)
        .synchronous(sqlx::sqlite::SqliteSynchronous::Normal)
        .pragma("mmap_size", (1u64 << 30).to_string());
    let pool = sqlx::sqlite::SqlitePoolOptions::new()
        .max_connections(8)
        .test_before_acquire(false)
        .connect_with(opts)
        .await?;
    async fn handler(State(pool): State<sqlx::SqlitePool>, Json(body): Json<Value>) -> String {
        let ids = body["ids"].to_string();
        let rows: Vec<String> =
            sqlx::query_scalar("SELECT record FROM wallets WHERE id IN (SELECT value FROM json_each(?))")
                .bind(ids)
                .fetch_all(&pool)
                .await
                .unwrap_or_default();
        format!("{{\"wallets\":[{}]}}", rows.join(","))
    }
    let app = Router::new().route("/reference", post(handler)).with_state(pool);
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let url = format!("http://{}/reference", listener.local_addr()?);
    tokio::spawn(async move { axum::serve(listener, app).await });
    Ok(url)
}
