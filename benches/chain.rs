//! Chain watcher backfill (docs/chains.md): a real anvil holding BENCH_BLOCKS blocks (5,000) that
//! carry BENCH_PER_BLOCK watched transfers each (4: 20,000), read by the real service (SQLite)
//! from block 0 until its checkpoint reaches the head, with a transfer webhook so every
//! transfer's notifications go through the outbox. Beside it, in the same run, the ceiling: a
//! loop doing the same node reads with no processing (each block with its transactions, a
//! receipt per watched transaction, and within 64 blocks of the head the wallet's balance at
//! the block and at confirmation depth). Prints blocks/s and transfers/s of both and their ratio.
//!
//! `BENCH_WATCHED=100000` adds that many wallets watched at addresses no block touches: the
//! address book is matched in memory, so the backfill's speed must not move.
//!
//! `BENCH_PHASE=latency`: instead, one block a second for BENCH_LATENCY_BLOCKS (60) blocks, each
//! with one payment to the watched wallet, and the time from the block being mined to the
//! receiver getting its `unconfirmed` notification, at the default poll interval (1,000 ms,
//! BENCH_POLL_MS). Beside it, the floor of any poller: a loop asking the node for its head at
//! the same interval, and when it first sees each block.
//!
//! Run: `cargo bench --bench chain` (needs `npm install` in chain-tests/).

#[allow(dead_code)] // each bench is its own crate and uses part of common
mod common;

use std::{
    collections::HashMap,
    sync::{
        atomic::{AtomicU64, Ordering},
        Arc, Mutex,
    },
    time::{Duration, Instant},
};

use common::Node;
use custodian::{config::ChainConfig, AppState};
use serde_json::{json, Value};

const RICH: &str = "0xf39Fd6e51aad88F6F4ce6aB8827279cffFb92266";
const WATCHED: &str = "0x70997970C51812dc3A010C7d01b50e0d17dc79C8";

fn env_usize(name: &str, default: usize) -> usize {
    std::env::var(name).ok().and_then(|v| v.parse().ok()).unwrap_or(default)
}

async fn start_node() -> anyhow::Result<Node> {
    common::start_anvil(&["--no-mining"]).await
}

/// The ceiling: the watcher's node reads for blocks 1..=head, nothing else.
async fn ceiling(node: &Node, head: u64, confirmations: u64) -> anyhow::Result<Duration> {
    let started = Instant::now();
    for n in 1..=head {
        let block = node.rpc("eth_getBlockByNumber", json!([format!("0x{n:x}"), true])).await?;
        for tx in block["transactions"].as_array().into_iter().flatten() {
            node.rpc("eth_getTransactionReceipt", json!([tx["hash"]])).await?;
        }
        // Balances are read near the head only (`chain::watcher::STATE_WINDOW`).
        if head - n < custodian::chain::watcher::STATE_WINDOW {
            let confirmed = (n + 1).saturating_sub(confirmations);
            node.rpc("eth_getBalance", json!([WATCHED, format!("0x{n:x}")])).await?;
            node.rpc("eth_getBalance", json!([WATCHED, format!("0x{confirmed:x}")])).await?;
        }
    }
    Ok(started.elapsed())
}

/// Writes `blocks` blocks of `per_block` payments to the watched address.
async fn fill(node: &Node, blocks: u64, per_block: usize) -> anyhow::Result<()> {
    let filling = Instant::now();
    for b in 0..blocks {
        for _ in 0..per_block {
            let tx = json!({ "from": RICH, "to": WATCHED, "value": "0x1" });
            node.rpc("eth_sendTransaction", json!([tx])).await?;
        }
        node.rpc("evm_mine", json!([])).await?;
        if (b + 1) % 1000 == 0 {
            eprintln!("node: {} blocks written ({:.0} s)", b + 1, filling.elapsed().as_secs_f64());
        }
    }
    Ok(())
}

/// What a receiver got: how many notifications, and when each `unconfirmed` transfer's arrived,
/// by transaction hash.
#[derive(Default)]
struct Received {
    count: AtomicU64,
    unconfirmed: Mutex<HashMap<String, Instant>>,
}

/// A receiver that records what it gets; its URL and the record.
async fn receiver() -> anyhow::Result<(String, Arc<Received>)> {
    let received = Arc::new(Received::default());
    let sink = received.clone();
    let app = axum::Router::new().route(
        "/hook",
        axum::routing::post(move |body: String| {
            let sink = sink.clone();
            async move {
                let at = Instant::now();
                sink.count.fetch_add(1, Ordering::Relaxed);
                let v: Value = serde_json::from_str(&body).unwrap_or_default();
                if let (Some("unconfirmed"), Some(hash)) = (v["state"].as_str(), v["hash"].as_str()) {
                    if let Ok(mut seen) = sink.unconfirmed.lock() {
                        seen.entry(hash.to_string()).or_insert(at);
                    }
                }
                "ok"
            }
        }),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let url = format!("http://{}/hook", listener.local_addr()?);
    tokio::spawn(async move { axum::serve(listener, app).await });
    Ok((url, received))
}

/// The service (SQLite, in this process) watching `node` as hteth from block 0, polling every
/// `poll_ms`, with the bench wallet (and `extra` more, at addresses no block touches) and a
/// transfer webhook to a receiver.
struct Service {
    state: AppState,
    received: Arc<Received>,
    stop: tokio::sync::oneshot::Sender<()>,
    server: tokio::task::JoinHandle<anyhow::Result<()>>,
    _dir: tempfile::TempDir,
}

// Long: the service's setup, one step after another (config, user, wallets, webhook, serve).
async fn service(node: &Node, poll_ms: u64, extra: usize) -> anyhow::Result<Service> {
    let dir = tempfile::tempdir()?;
    let chain = ChainConfig {
        rpc_url: node.url.clone(),
        chain_id: 31337,
        start_block: Some(0),
        poll_interval_ms: poll_ms,
        ..ChainConfig::default()
    };
    let (hook_url, received) = receiver().await?;
    let (state, user, enterprise) = common::chain_service_state(dir.path(), "hteth", chain).await?;
    let wallet = "be11be11be11be11be11be11be11be11";
    let record = json!([{
        "id": wallet, "label": "bench", "coin": "hteth", "type": "hot", "enterprise": enterprise,
        "allowBackupKeySigning": false, "approvalsRequired": 1, "coinSpecific": { "baseAddress": WATCHED },
        "deleted": false, "disableTransactionNotifications": false, "hasLargeNumberOfAddresses": false,
        "isCold": false, "startDate": "2025-01-01T00:00:00Z", "users": [{ "user": user, "permissions": ["admin"] }],
    }]);
    custodian::wallets::import::import(&state.store, &record.to_string(), |_, _| {}).await?;
    if extra > 0 {
        let others: Vec<Value> = (0..extra)
            .map(|i| {
                json!({
                    "id": format!("{:032x}", i + 1), "label": "other", "coin": "hteth", "type": "hot",
                    "allowBackupKeySigning": false, "approvalsRequired": 1,
                    "coinSpecific": { "baseAddress": format!("0x{:040x}", i + 0x1000) }, "deleted": false,
                    "disableTransactionNotifications": false, "hasLargeNumberOfAddresses": false,
                    "isCold": false, "startDate": "2025-01-01T00:00:00Z",
                })
            })
            .collect();
        custodian::wallets::import::import(&state.store, &serde_json::to_string(&others)?, |_, _| {}).await?;
    }
    common::add_wallet_webhook(&state, &user, wallet, Some(enterprise.clone()), hook_url).await?;
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let (stop, stop_rx) = tokio::sync::oneshot::channel::<()>();
    let server = tokio::spawn(custodian::serve(listener, state.clone(), async {
        let _ = stop_rx.await;
    }));
    Ok(Service { state, received, stop, server, _dir: dir })
}

impl Service {
    async fn checkpoint(&self) -> anyhow::Result<Option<u64>> {
        Ok(custodian::chain::status(&self.state.chains).await?[0].height)
    }

    async fn stop(self) {
        let _ = self.stop.send(());
        let _ = self.server.await;
    }
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    match std::env::var("BENCH_PHASE").as_deref() {
        Ok("latency") => latency().await,
        _ => backfill().await,
    }
}

/// p50, p99 and the largest of `ms`, sorted here.
fn percentiles(mut ms: Vec<f64>) -> (f64, f64, f64) {
    ms.sort_by(f64::total_cmp);
    let at = |q: f64| ms.get(((ms.len() as f64 - 1.0) * q).round() as usize).copied().unwrap_or(f64::NAN);
    (at(0.5), at(0.99), ms.last().copied().unwrap_or(f64::NAN))
}

// Long: the latency phase's one story (service, blocks a second, the poller beside it, report).
async fn latency() -> anyhow::Result<()> {
    let blocks = env_usize("BENCH_LATENCY_BLOCKS", 60) as u64;
    let poll_ms = env_usize("BENCH_POLL_MS", 1000) as u64;
    let node = Arc::new(start_node().await?);
    let svc = service(&node, poll_ms, 0).await?;
    while svc.checkpoint().await? != Some(0) {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    // The floor: a loop asking for the head every `poll_ms`, noting when it first sees each.
    let seen: Arc<Mutex<HashMap<u64, Instant>>> = Arc::default();
    let poller = {
        let (node, seen) = (node.clone(), seen.clone());
        tokio::spawn(async move {
            loop {
                if let Ok(v) = node.rpc("eth_blockNumber", json!([])).await {
                    let head = u64::from_str_radix(v.as_str().unwrap_or("0x0").trim_start_matches("0x"), 16);
                    if let (Ok(head), Ok(mut seen)) = (head, seen.lock()) {
                        seen.entry(head).or_insert_with(Instant::now);
                    }
                }
                tokio::time::sleep(Duration::from_millis(poll_ms)).await;
            }
        })
    };
    let mut mined: Vec<(u64, String, Instant)> = Vec::new();
    let mut tick = tokio::time::interval(Duration::from_secs(1));
    for height in 1..=blocks {
        tick.tick().await;
        let tx = json!({ "from": RICH, "to": WATCHED, "value": "0x1" });
        let hash = node.rpc("eth_sendTransaction", json!([tx])).await?;
        node.rpc("evm_mine", json!([])).await?;
        mined.push((height, hash.as_str().unwrap_or_default().to_string(), Instant::now()));
    }
    let deadline = Instant::now() + Duration::from_secs(30);
    while svc.received.unconfirmed.lock().map(|s| s.len()).unwrap_or(0) < mined.len()
        && Instant::now() < deadline
    {
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    poller.abort();
    let ms = |from: Instant, to: Instant| to.saturating_duration_since(from).as_secs_f64() * 1000.0;
    let (mut ours, mut floor) = (Vec::new(), Vec::new());
    if let (Ok(got), Ok(seen)) = (svc.received.unconfirmed.lock(), seen.lock()) {
        for (height, hash, at) in &mined {
            ours.extend(got.get(hash).map(|t| ms(*at, *t)));
            floor.extend(seen.get(height).map(|t| ms(*at, *t)));
        }
    }
    let got = ours.len();
    let ((p50, p99, max), (f50, f99, fmax)) = (percentiles(ours), percentiles(floor));
    println!("latency, a mined block to its unconfirmed notification at the receiver: {blocks} blocks, one a second, poll {poll_ms} ms (anvil, SQLite):");
    println!("  Custodian: p50 {p50:.0} ms, p99 {p99:.0} ms, max {max:.0} ms ({got} of {blocks} notified within 30 s)");
    println!("  a bare poller of the head at the same interval: p50 {f50:.0} ms, p99 {f99:.0} ms, max {fmax:.0} ms");
    svc.stop().await;
    Ok(())
}

// Long: the backfill's one story (fill, ceiling, service, wait, report), read top to bottom.
async fn backfill() -> anyhow::Result<()> {
    let blocks = env_usize("BENCH_BLOCKS", 5_000) as u64;
    let per_block = env_usize("BENCH_PER_BLOCK", 4);
    let node = start_node().await?;
    fill(&node, blocks, per_block).await?;
    let head = blocks;
    let transfers = blocks as usize * per_block;
    let ceiling_time = ceiling(&node, head, 12).await?;
    // BENCH_WATCHED more wallets, each watched at an address no block touches: the address
    // book's size must not change a block's cost.
    let extra = env_usize("BENCH_WATCHED", 0);
    let svc = service(&node, 20, extra).await?;
    let started = Instant::now();
    // The second half of the backfill, timed apart: a block's cost without the start (loading
    // the address book, the first round).
    let mut halfway = None;
    loop {
        let s = custodian::chain::status(&svc.state.chains).await?;
        if halfway.is_none() && s[0].height.is_some_and(|h| h >= head / 2) {
            halfway = Some((Instant::now(), s[0].height.unwrap_or(0)));
        }
        if s[0].height == Some(head) {
            break;
        }
        if started.elapsed() > Duration::from_secs(3600) {
            anyhow::bail!("the backfill did not finish within an hour: {:?}", s[0]);
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let watcher_time = started.elapsed();
    let per_s = |d: Duration, n: f64| n / d.as_secs_f64();
    println!(
        "backfill of {blocks} blocks carrying {transfers} watched transfers, {} watched addresses (anvil, SQLite):",
        extra + 1
    );
    println!(
        "  ceiling (node reads only): {:.0} blocks/s, {:.0} transfers/s",
        per_s(ceiling_time, blocks as f64),
        per_s(ceiling_time, transfers as f64)
    );
    println!(
        "  Custodian:                 {:.0} blocks/s, {:.0} transfers/s ({:.2} of the ceiling)",
        per_s(watcher_time, blocks as f64),
        per_s(watcher_time, transfers as f64),
        ceiling_time.as_secs_f64() / watcher_time.as_secs_f64()
    );
    if let Some((at, from)) = halfway {
        println!(
            "  Custodian, second half alone: {:.0} blocks/s ({} blocks)",
            per_s(at.elapsed(), (head - from) as f64),
            head - from
        );
    }
    println!(
        "  notifications received when the checkpoint reached the head: {}",
        svc.received.count.load(Ordering::Relaxed)
    );
    svc.stop().await;
    Ok(())
}
