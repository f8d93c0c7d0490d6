//! The pending pool and memory (docs/chains.md#the-pending-pool): the release `custodian` binary
//! in its own process watches anvil (`--no-mining`) through a proxy in this process that can
//! answer `txpool_content` with a pool of BENCH_POOL_ENTRIES (100,000) transactions, about
//! 60 MB of JSON, 10 of them paying the watched wallet. Per run: the server's RSS with the
//! node's own (one-transaction) pool, its peak while the big pool is answered for
//! BENCH_POOL_ROUNDS (10) rounds, and its RSS after as many rounds of the small pool again.
//!
//! Two runs: `chains.<coin>.pool_max_bytes` at its default (8 MiB: the big answer is dropped
//! unread) and at 256 MiB (read and matched against the address book); the second checks that
//! the 10 transfers were found, so the pool was read, not refused.
//!
//! Run: `cargo bench --bench pool` (needs `npm install` in chain-tests/).

#[allow(dead_code)] // each bench is its own crate and uses part of common
mod common;

use std::{
    process::{Command, Stdio},
    sync::{
        atomic::{AtomicBool, AtomicU64, Ordering},
        Arc,
    },
    time::{Duration, Instant},
};

use axum::{body::Bytes, extract::State, routing::post, Router};
use serde_json::{json, Map, Value};
use sqlx::Connection;

const RICH: &str = "0xf39Fd6e51aad88F6F4ce6aB8827279cffFb92266";
const WATCHED: &str = "0x70997970C51812dc3A010C7d01b50e0d17dc79C8";
/// Pool entries that pay the watched wallet.
const PAYING: usize = 10;

fn env_usize(name: &str, default: usize) -> usize {
    std::env::var(name).ok().and_then(|v| v.parse().ok()).unwrap_or(default)
}

/// The proxy's state: whether to answer the big pool, and how often the pool was asked.
struct Proxy {
    upstream: String,
    client: reqwest::Client,
    big: AtomicBool,
    /// `txpool_content`'s `result` of the big pool, serialised once.
    pool: Bytes,
    asked: AtomicU64,
}

async fn relay(State(p): State<Arc<Proxy>>, body: Bytes) -> Bytes {
    let req: Value = serde_json::from_slice(&body).unwrap_or_default();
    if req["method"] == "txpool_content" {
        p.asked.fetch_add(1, Ordering::SeqCst);
        if p.big.load(Ordering::SeqCst) {
            let head = format!("{{\"jsonrpc\":\"2.0\",\"id\":{},\"result\":", req["id"]);
            return Bytes::from([head.as_bytes(), &p.pool, b"}"].concat());
        }
    }
    let res = p.client.post(&p.upstream).header("content-type", "application/json").body(body).send().await;
    match res {
        Ok(r) => r.bytes().await.unwrap_or_default(),
        Err(_) => Bytes::new(),
    }
}

/// `n` pool entries in `txpool_content`'s shape (by sender, by nonce), each a copy of the node's
/// own pending transaction `template` with its sender, nonce, hash and payee changed.
fn big_pool(template: &Value, n: usize) -> anyhow::Result<Bytes> {
    let mut pending = Map::new();
    for i in 0..n {
        let sender = format!("0x{:040x}", 0x10000 + i / 100);
        let mut tx = template.clone();
        tx["from"] = json!(sender);
        tx["nonce"] = json!(format!("0x{:x}", i % 100));
        tx["hash"] = json!(format!("0x{:064x}", i + 1));
        tx["to"] = json!(if i < PAYING { WATCHED.to_string() } else { format!("0x{:040x}", 0x200000 + i) });
        let by_nonce = pending.entry(sender).or_insert_with(|| json!({}));
        by_nonce[(i % 100).to_string()] = tx;
    }
    Ok(Bytes::from(serde_json::to_vec(&json!({ "pending": pending, "queued": {} }))?))
}

/// Waits until the pool was asked `rounds` more times (the server's rounds at the head),
/// sampling the server's RSS meanwhile: the largest sample, MiB.
async fn rounds(proxy: &Proxy, pid: u32, rounds: u64) -> anyhow::Result<f64> {
    let target = proxy.asked.load(Ordering::SeqCst) + rounds;
    let deadline = Instant::now() + Duration::from_secs(300);
    let mut peak = common::rss_mib(pid);
    while proxy.asked.load(Ordering::SeqCst) < target {
        anyhow::ensure!(Instant::now() < deadline, "the server stopped asking for the pool");
        tokio::time::sleep(Duration::from_millis(20)).await;
        peak = peak.max(common::rss_mib(pid));
    }
    Ok(peak)
}

/// A SQLite file in `dir` holding the watched wallet.
async fn seed(dir: &std::path::Path) -> anyhow::Result<String> {
    let chain = custodian::config::ChainConfig {
        rpc_url: "http://127.0.0.1:1".into(),
        chain_id: 31337,
        ..Default::default()
    };
    let (state, user, enterprise) = common::chain_service_state(dir, "hteth", chain).await?;
    let record = json!([{
        "id": "be11be11be11be11be11be11be11be11", "label": "bench", "coin": "hteth", "type": "hot",
        "enterprise": enterprise, "allowBackupKeySigning": false, "approvalsRequired": 1,
        "coinSpecific": { "baseAddress": WATCHED }, "deleted": false, "disableTransactionNotifications": false,
        "hasLargeNumberOfAddresses": false, "isCold": false, "startDate": "2025-01-01T00:00:00Z",
        "users": [{ "user": user, "permissions": ["admin"] }],
    }]);
    custodian::wallets::import::import(&state.store, &record.to_string(), |_, _| {}).await?;
    Ok(format!("sqlite://{}/bench.db", dir.display()))
}

/// One run with `pool_max_bytes` (`None`: the default): RSS before, at its peak, and after, MiB;
/// and the transfers the watcher found.
async fn run(proxy: &Arc<Proxy>, proxy_url: &str, pool_max_bytes: Option<u64>) -> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    let db = seed(dir.path()).await?;
    let port = std::net::TcpListener::bind("127.0.0.1:0")?.local_addr()?.port();
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_custodian"));
    cmd.args(["serve", "--listen", &format!("127.0.0.1:{port}")])
        .env("CUSTODIAN_DATABASE_URL", &db)
        .env("CUSTODIAN_ENVIRONMENT", "test")
        .env("CUSTODIAN_SECRET_KEY_FILE", dir.path().join("key"))
        .env("CUSTODIAN_CHAINS_HTETH_RPC_URL", proxy_url)
        .env("CUSTODIAN_CHAINS_HTETH_CHAIN_ID", "31337")
        .env("CUSTODIAN_CHAINS_HTETH_START_BLOCK", "0")
        .env("CUSTODIAN_CHAINS_HTETH_POLL_INTERVAL_MS", "200")
        .env("RUST_LOG", "error")
        .stdout(Stdio::null())
        .stderr(Stdio::inherit());
    if let Some(bytes) = pool_max_bytes {
        cmd.env("CUSTODIAN_CHAINS_HTETH_POOL_MAX_BYTES", bytes.to_string());
    }
    let child = cmd.spawn()?;
    let server = common::Killed(child);
    let pid = server.0.id();
    let n = env_usize("BENCH_POOL_ROUNDS", 10) as u64;
    proxy.big.store(false, Ordering::SeqCst);
    rounds(proxy, pid, 5).await?;
    let before = common::rss_mib(pid);
    proxy.big.store(true, Ordering::SeqCst);
    let peak = rounds(proxy, pid, n).await?;
    proxy.big.store(false, Ordering::SeqCst);
    let after_peak = rounds(proxy, pid, n).await?;
    let after = common::rss_mib(pid);
    drop(server);
    let mut c = sqlx::SqliteConnection::connect(&db).await?;
    // The big pool's hashes are small numbers; the node's own transaction is not counted.
    let found: i64 = sqlx::query_scalar(
        "SELECT COUNT(*) FROM transfers WHERE height = 999999999 AND txid LIKE '0x00000000%'",
    )
    .fetch_one(&mut c)
    .await?;
    let cap = pool_max_bytes.map_or("default 8 MiB".to_string(), |b| format!("{} MiB", b >> 20));
    println!(
        "pool_max_bytes {cap}: RSS {before:.1} MiB with the node's pool, peak {:.1} MiB over {n} rounds of {} entries ({:.1} MB), {after:.1} MiB after {n} rounds without it; {found} pool transfers found",
        peak.max(after_peak),
        env_usize("BENCH_POOL_ENTRIES", 100_000),
        proxy.pool.len() as f64 / 1e6,
    );
    if pool_max_bytes.is_some() {
        anyhow::ensure!(found == PAYING as i64, "the big pool was not read: {found} transfers found");
    }
    Ok(())
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let node = common::start_anvil(&["--no-mining"]).await?;
    node.rpc("eth_sendTransaction", json!([{ "from": RICH, "to": WATCHED, "value": "0x1" }])).await?;
    let pool = node.rpc("txpool_content", json!([])).await?;
    let template = pool["pending"]
        .as_object()
        .and_then(|by_sender| by_sender.values().next())
        .and_then(|by_nonce| by_nonce.as_object()?.values().next())
        .cloned()
        .ok_or_else(|| anyhow::anyhow!("anvil's pool holds no transaction"))?;
    let proxy = Arc::new(Proxy {
        upstream: node.url.clone(),
        client: reqwest::Client::builder().no_proxy().build()?,
        big: AtomicBool::new(false),
        pool: big_pool(&template, env_usize("BENCH_POOL_ENTRIES", 100_000))?,
        asked: AtomicU64::new(0),
    });
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let url = format!("http://{}", listener.local_addr()?);
    let app = Router::new().route("/", post(relay)).with_state(proxy.clone());
    tokio::spawn(async move { axum::serve(listener, app).await });
    run(&proxy, &url, None).await?;
    run(&proxy, &url, Some(256 << 20)).await
}
