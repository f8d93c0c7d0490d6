//! UTXO watcher backfill (docs/chains.md#utxo-chains): Litecoin Core in regtest (Debian's
//! `litecoind`) holding BENCH_BLOCKS blocks (2,000) that each carry one transaction paying
//! BENCH_PER_BLOCK watched outputs (10: 20,000), read by the real service (SQLite) from block 0
//! until its checkpoint reaches the head, with a transfer webhook so every transfer's
//! notification goes through the outbox. Beside it, in the same run, the ceiling: a loop doing
//! the same node reads with nothing else (`getblockhash`, then `getblock <hash> 2`, per block).
//! Then the same backfill again with BENCH_WATCHED (100,000) more addresses watched that no
//! block pays: the scripts are matched in memory, so a block must cost what it did.
//!
//! Run: `cargo bench --bench utxo` (needs `apt-get install litecoind`). `BENCH_NODE_DIR=/some/dir`
//! keeps the node's blocks there, and a later run with the same folder skips the fill (~3 min).

#[allow(dead_code)] // each bench is its own crate and uses part of common
mod common;

use std::{
    process::{Child, Command, Stdio},
    sync::{
        atomic::{AtomicU64, Ordering},
        Arc,
    },
    time::{Duration, Instant},
};

use bitcoin::hashes::Hash;
use custodian::{
    config::{ChainConfig, ChainFamily, Network, Secret},
    AppState,
};
use serde_json::{json, Value};

const LITECOIND: &str = "/usr/lib/litecoin/litecoind";

fn env_usize(name: &str, default: usize) -> usize {
    std::env::var(name).ok().and_then(|v| v.parse().ok()).unwrap_or(default)
}

/// A regtest node on free ports, killed on drop.
struct Litecoind {
    child: Child,
    /// Removed on drop; `None` when BENCH_NODE_DIR names a folder kept between runs.
    temp: Option<tempfile::TempDir>,
    url: String,
    http: reqwest::Client,
}

impl Drop for Litecoind {
    fn drop(&mut self) {
        // A kept node is stopped cleanly (SIGTERM), or it forgets blocks it had not flushed.
        if self.temp.is_none() {
            let _ = Command::new("kill").args(["-TERM", &self.child.id().to_string()]).status();
        } else {
            let _ = self.child.kill();
        }
        let _ = self.child.wait();
    }
}

fn free_port() -> anyhow::Result<u16> {
    Ok(std::net::TcpListener::bind("127.0.0.1:0")?.local_addr()?.port())
}

impl Litecoind {
    async fn start() -> anyhow::Result<Litecoind> {
        anyhow::ensure!(
            std::path::Path::new(LITECOIND).exists(),
            "litecoind is missing: apt-get install litecoind"
        );
        // BENCH_NODE_DIR keeps the node's blocks for the next run, which then skips the fill.
        let (dir, kept) = match std::env::var_os("BENCH_NODE_DIR") {
            Some(path) => (None, std::path::PathBuf::from(path)),
            None => {
                let dir = tempfile::tempdir()?;
                let path = dir.path().to_path_buf();
                (Some(dir), path)
            }
        };
        std::fs::create_dir_all(&kept)?;
        let (rpc, p2p) = (free_port()?, free_port()?);
        let child = Command::new(LITECOIND)
            .args([
                "-regtest".to_string(),
                format!("-datadir={}", kept.display()),
                format!("-rpcport={rpc}"),
                format!("-port={p2p}"),
                "-rpcuser=bench".into(),
                "-rpcpassword=bench".into(),
                "-rpcbind=127.0.0.1".into(),
                "-rpcallowip=127.0.0.1".into(),
                "-listen=0".into(),
                "-fallbackfee=0.0001".into(),
                "-rpcworkqueue=64".into(),
            ])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()?;
        let node = Litecoind {
            child,
            temp: dir,
            url: format!("http://127.0.0.1:{rpc}"),
            http: reqwest::Client::new(),
        };
        for _ in 0..600 {
            if node.rpc("getblockcount", json!([])).await.is_ok() {
                return Ok(node);
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        anyhow::bail!("litecoind did not answer within a minute")
    }

    async fn call(&self, url: &str, method: &str, params: Value) -> anyhow::Result<Value> {
        let body = json!({ "jsonrpc": "1.0", "id": 1, "method": method, "params": params });
        let res = self.http.post(url).basic_auth("bench", Some("bench")).json(&body).send().await?;
        let v: Value = res.json().await?;
        anyhow::ensure!(v["error"].is_null(), "{method}: {}", v["error"]);
        Ok(v["result"].clone())
    }

    async fn rpc(&self, method: &str, params: Value) -> anyhow::Result<Value> {
        self.call(&self.url, method, params).await
    }

    async fn miner(&self, method: &str, params: Value) -> anyhow::Result<Value> {
        self.call(&format!("{}/wallet/miner", self.url), method, params).await
    }

    /// Mines `n` blocks to `to`, with the peg-in Litecoin's MWEB needs at regtest block 432.
    async fn generate(&self, n: u64, to: &Value) -> anyhow::Result<()> {
        let count = self.rpc("getblockcount", json!([])).await?.as_u64().unwrap_or(0);
        if count < 432 && count + n >= 432 {
            let before = 431 - count;
            if before > 0 {
                self.rpc("generatetoaddress", json!([before, to])).await?;
            }
            let mweb = self.miner("getnewaddress", json!(["", "mweb"])).await?;
            self.miner("sendtoaddress", json!([mweb, 1])).await?;
            self.rpc("generatetoaddress", json!([n - before, to])).await?;
            return Ok(());
        }
        self.rpc("generatetoaddress", json!([n, to])).await?;
        Ok(())
    }
}

/// The `i`th P2SH address of a script hash no one holds, as Litecoin's regtest writes it (the
/// testnet `Q…` form BitGo's `tltc` uses too).
fn address(i: u64) -> String {
    let hash = bitcoin::hashes::hash160::Hash::hash(&i.to_be_bytes());
    let mut payload = vec![0x3a];
    payload.extend_from_slice(hash.as_byte_array());
    bitcoin::base58::encode_check(&payload)
}

/// Writes `blocks` blocks, each with one transaction paying `per_block` of `watched` a litoshi
/// amount; the head's height.
async fn fill(node: &Litecoind, blocks: u64, per_block: usize, watched: &[String]) -> anyhow::Result<u64> {
    let filling = Instant::now();
    let have = node.rpc("getblockcount", json!([])).await?.as_u64().unwrap_or(0);
    if have > 0 {
        eprintln!("node: {have} blocks kept in BENCH_NODE_DIR, not filled again");
        return Ok(have);
    }
    node.rpc("createwallet", json!(["miner"])).await?;
    let miner = node.miner("getnewaddress", json!([])).await?;
    node.generate(101, &miner).await?;
    // Later blocks pay their reward elsewhere: a wallet of thousands of coinbase outputs makes
    // each `sendmany` slower than the last; 100 mature rewards pay for every block.
    let away = json!(address(u64::MAX));
    for b in 0..blocks {
        let mut outputs = serde_json::Map::new();
        for k in 0..per_block {
            outputs.insert(watched[(b as usize * per_block + k) % watched.len()].clone(), json!(0.0001));
        }
        node.miner("sendmany", json!(["", outputs])).await?;
        node.generate(1, &away).await?;
        if (b + 1) % 500 == 0 {
            eprintln!("node: {} blocks written ({:.0} s)", b + 1, filling.elapsed().as_secs_f64());
        }
    }
    Ok(node.rpc("getblockcount", json!([])).await?.as_u64().unwrap_or(0))
}

/// The ceiling: the watcher's node reads for blocks 0..=head, nothing else.
async fn ceiling(node: &Litecoind, head: u64) -> anyhow::Result<Duration> {
    let started = Instant::now();
    for n in 0..=head {
        let hash = node.rpc("getblockhash", json!([n])).await?;
        node.rpc("getblock", json!([hash, 2])).await?;
    }
    Ok(started.elapsed())
}

/// The service (SQLite, in this process) watching `node` as tltc from block 0, a wallet
/// watched at `watched`, `extra` more addresses on another wallet, and a transfer webhook.
struct Service {
    state: AppState,
    received: Arc<AtomicU64>,
    stop: tokio::sync::oneshot::Sender<()>,
    server: tokio::task::JoinHandle<anyhow::Result<()>>,
    _dir: tempfile::TempDir,
}

async fn receiver() -> anyhow::Result<(String, Arc<AtomicU64>)> {
    let count = Arc::new(AtomicU64::new(0));
    let sink = count.clone();
    let app = axum::Router::new().route(
        "/hook",
        axum::routing::post(move || {
            let sink = sink.clone();
            async move {
                sink.fetch_add(1, Ordering::Relaxed);
                "ok"
            }
        }),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let url = format!("http://{}/hook", listener.local_addr()?);
    tokio::spawn(async move { axum::serve(listener, app).await });
    Ok((url, count))
}

/// Imports a tltc wallet `id` watching `addresses` (the first as its `receiveAddress`).
async fn wallet(state: &AppState, id: &str, addresses: &[String], owner: &str) -> anyhow::Result<()> {
    let mut record = json!({
        "id": id, "label": "bench", "coin": "tltc", "type": "hot", "allowBackupKeySigning": false,
        "approvalsRequired": 1, "receiveAddress": { "address": addresses[0] }, "coinSpecific": {},
        "deleted": false, "disableTransactionNotifications": false, "hasLargeNumberOfAddresses": false,
        "isCold": false, "startDate": "2025-01-01T00:00:00Z",
    });
    record["users"] = json!([{ "user": owner, "permissions": ["admin"] }]);
    custodian::wallets::import::import(&state.store, &json!([record]).to_string(), |_, _| {}).await?;
    let wallet_id: custodian::types::WalletId = id.parse().map_err(anyhow::Error::msg)?;
    for a in &addresses[1..] {
        custodian::chain::add_address(&state.chains, None, &wallet_id, a, None).await?;
    }
    Ok(())
}

// Long: the service's setup, one step after another (config, user, wallets, webhook, serve).
async fn service(node: &Litecoind, watched: &[String], extra: usize) -> anyhow::Result<Service> {
    let dir = tempfile::tempdir()?;
    let chain = ChainConfig {
        family: ChainFamily::Utxo,
        rpc_url: node.url.clone(),
        network: Some(Network::Regtest),
        rpc_user: Some("bench".into()),
        rpc_password: Some(Secret("bench".into())),
        confirmations: 2,
        start_block: Some(0),
        poll_interval_ms: 20,
        ..ChainConfig::default()
    };
    let (hook_url, received) = receiver().await?;
    let (state, user, enterprise) = common::chain_service_state(dir.path(), "tltc", chain).await?;
    wallet(&state, "b1cb1cb1cb1cb1cb1cb1cb1cb1cb1cb1", watched, user.as_str()).await?;
    if extra > 0 {
        // Wallets watched at addresses no block pays, each its record's receiveAddress.
        let others: Vec<Value> = (0..extra as u64)
            .map(|i| {
                json!({
                    "id": format!("{:032x}", i + 1), "label": "other", "coin": "tltc", "type": "hot",
                    "allowBackupKeySigning": false, "approvalsRequired": 1,
                    "receiveAddress": { "address": address(1_000_000 + i) }, "coinSpecific": {},
                    "deleted": false, "disableTransactionNotifications": false,
                    "hasLargeNumberOfAddresses": false, "isCold": false, "startDate": "2025-01-01T00:00:00Z",
                })
            })
            .collect();
        custodian::wallets::import::import(&state.store, &serde_json::to_string(&others)?, |_, _| {}).await?;
    }
    common::add_wallet_webhook(
        &state,
        &user,
        "b1cb1cb1cb1cb1cb1cb1cb1cb1cb1cb1",
        Some(enterprise.clone()),
        hook_url,
    )
    .await?;
    Ok(Service {
        state,
        received,
        stop: tokio::sync::oneshot::channel().0,
        server: tokio::spawn(async { Ok(()) }),
        _dir: dir,
    })
}

impl Service {
    /// Starts serving (the watcher with it) and times the backfill to `head`.
    /// The whole time, and the second half's time and blocks (a block's cost without the
    /// start: the address book's load, the first round).
    async fn backfill(&mut self, head: u64) -> anyhow::Result<(Duration, Duration, u64)> {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
        let (stop, stop_rx) = tokio::sync::oneshot::channel::<()>();
        let started = Instant::now();
        self.stop = stop;
        self.server = tokio::spawn(custodian::serve(listener, self.state.clone(), async {
            let _ = stop_rx.await;
        }));
        let mut halfway = None;
        loop {
            let s = custodian::chain::status(&self.state.chains).await?;
            if halfway.is_none() && s[0].height.is_some_and(|h| h >= head / 2) {
                halfway = Some((Instant::now(), s[0].height.unwrap_or(0)));
            }
            if s[0].height == Some(head) {
                let (at, from) = halfway.unwrap_or((started, 0));
                return Ok((started.elapsed(), at.elapsed(), head - from));
            }
            anyhow::ensure!(
                started.elapsed() < Duration::from_secs(3600),
                "no end within an hour: {:?}",
                s[0]
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    async fn stop(self) {
        let _ = self.stop.send(());
        let _ = self.server.await;
    }
}

// Long: the bench's one story (fill, ceiling, two backfills, report), read top to bottom.
#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let blocks = env_usize("BENCH_BLOCKS", 2_000) as u64;
    let per_block = env_usize("BENCH_PER_BLOCK", 10);
    let extra = env_usize("BENCH_WATCHED", 100_000);
    let node = Litecoind::start().await?;
    let watched: Vec<String> = (0..10).map(address).collect();
    let head = fill(&node, blocks, per_block, &watched).await?;
    let outputs = blocks as usize * per_block;
    // The ceiling is measured before and after each backfill (this machine's speed drifts by
    // a third from minute to minute); each backfill is set against the mean of its two.
    let mut ceilings = vec![ceiling(&node, head).await?];
    let mut runs = Vec::new();
    for extra in [0, extra] {
        let mut svc = service(&node, &watched, extra).await?;
        let (took, half, half_blocks) = svc.backfill(head).await?;
        let told = svc.received.load(Ordering::Relaxed);
        svc.stop().await;
        ceilings.push(ceiling(&node, head).await?);
        runs.push((extra + watched.len(), took, told, half, half_blocks));
    }
    let per_s = |d: Duration, n: f64| n / d.as_secs_f64();
    println!(
        "backfill of {} blocks carrying {outputs} watched outputs (Litecoin Core regtest, SQLite):",
        head + 1
    );
    let rates: Vec<String> =
        ceilings.iter().map(|c| format!("{:.0}", per_s(*c, (head + 1) as f64))).collect();
    println!(
        "  ceiling (getblockhash + getblock verbosity 2 only, before, between and after): {} blocks/s",
        rates.join(", ")
    );
    for (i, (addresses, took, told, half, half_blocks)) in runs.iter().enumerate() {
        let around = (ceilings[i] + ceilings[i + 1]) / 2;
        println!(
            "  Custodian, {addresses} watched addresses: {:.0} blocks/s, {:.0} outputs/s ({:.2} of the ceiling around it; {told} notifications by then); second half alone {:.0} blocks/s",
            per_s(*took, (head + 1) as f64),
            per_s(*took, outputs as f64),
            around.as_secs_f64() / took.as_secs_f64(),
            per_s(*half, *half_blocks as f64)
        );
    }
    if let [(_, few, _, few_half, few_n), (many_n, many, _, many_half, many_half_n)] = runs.as_slice() {
        let per_block = |d: &Duration, n: &u64| d.as_secs_f64() / *n as f64;
        println!(
            "  a block with {many_n} watched addresses costs {:.2} of one with 10 (whole backfill), {:.2} (second halves)",
            many.as_secs_f64() / few.as_secs_f64(),
            per_block(many_half, many_half_n) / per_block(few_half, few_n)
        );
    }
    Ok(())
}
