//! Withdrawals (docs/withdrawals.md), measured as a custody operator sees them.
//!
//! **Throughput.** BENCH_WITHDRAWALS (200) withdrawals from one custodial wallet, each initiated
//! and approved through the real service's API (SQLite), with the signer held back meanwhile by
//! another holder of its lease. The lease is released, and the clock runs from the last
//! approval's request until the node has mined the wallet's last transaction (anvil,
//! automine): withdrawals/s. Beside it, in
//! the same run and on the same node, the ceiling: a loop that signs the same transfers with
//! consecutive nonces (k256 in process) and sends them raw, until its last is mined. The ceiling
//! runs twice before the service (whose watcher keeps polling the node after); the ratio is
//! against the better.
//!
//! **Signing latency.** BENCH_SIGNATURES (1,000) signatures of random digests through
//! `custody::keys::sign` (what the signer calls: sign, make s low, recover and verify), one at a
//! time, with the `sealed` backend and with SoftHSM2 over PKCS#11 (skipped when it is not
//! installed): p50 and p99.
//!
//! Run: `cargo bench --bench custody` (needs `npm install` in chain-tests/);
//! `BENCH_PHASE=throughput` or `signing` runs one; `BENCH_SIGNER_CONCURRENCY` sets
//! `withdrawals.signer_concurrency` (its default otherwise).

#[allow(dead_code)] // each bench is its own crate and uses part of common
mod common;

use std::time::{Duration, Instant};

use alloy_consensus::{SignableTransaction, TxEip1559};
use alloy_eips::eip2718::Encodable2718;
use alloy_primitives::{Address, TxKind, B256, U256};
use common::Node;
use custodian::{
    config::Config,
    custody::keys::{self, KeyStore},
    model::custody::KeyRecord,
    types::KeyId,
    AppState,
};
use serde_json::{json, Value};

const RICH: &str = "0xf39Fd6e51aad88F6F4ce6aB8827279cffFb92266";
/// anvil's second dev account (0x70997970…): the ceiling's sender.
const CEILING_KEY: &str = "59c6995e998f97a5a0044966f0945389dc9e86dae88c7a8412f4603b6b78690d";
const PAYEE: &str = "0x3C44CdDdB6a900fa2b585dd299e03d12FA4293BC";
const SOFTHSM: &str = "/usr/lib/softhsm/libsofthsm2.so";

fn env_usize(name: &str, default: usize) -> usize {
    std::env::var(name).ok().and_then(|v| v.parse().ok()).unwrap_or(default)
}

fn hex_u64(v: &Value) -> u64 {
    v.as_str().and_then(|s| u64::from_str_radix(s.trim_start_matches("0x"), 16).ok()).unwrap_or(0)
}

/// Waits until `address` has `count` transactions mined.
async fn mined(node: &Node, address: &str, count: u64) -> anyhow::Result<()> {
    let deadline = Instant::now() + Duration::from_secs(600);
    while hex_u64(&node.rpc("eth_getTransactionCount", json!([address, "latest"])).await?) < count {
        anyhow::ensure!(Instant::now() < deadline, "{address} did not reach {count} mined transactions");
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    Ok(())
}

/// The ceiling: `n` transfers signed in process with consecutive nonces and sent raw, one after
/// another, until the last is mined.
async fn ceiling(node: &Node, n: usize) -> anyhow::Result<Duration> {
    let key = k256::ecdsa::SigningKey::from_slice(&hex::decode(CEILING_KEY)?)?;
    let from = Address::from_private_key(&key);
    let first = hex_u64(&node.rpc("eth_getTransactionCount", json!([from, "pending"])).await?);
    let price = u128::from(hex_u64(&node.rpc("eth_gasPrice", json!([])).await?));
    let started = Instant::now();
    for i in 0..n as u64 {
        let tx = TxEip1559 {
            chain_id: 31337,
            nonce: first + i,
            gas_limit: 21_000,
            max_fee_per_gas: price * 2 + 1_000_000_000,
            max_priority_fee_per_gas: 1_000_000_000,
            to: TxKind::Call(PAYEE.parse()?),
            value: U256::from(1_000),
            access_list: Default::default(),
            input: Default::default(),
        };
        let (sig, recid) = key.sign_prehash_recoverable(tx.signature_hash().as_slice())?;
        let signed =
            tx.into_signed(alloy_primitives::Signature::from_signature_and_parity(sig, recid.is_y_odd()));
        let raw = format!("0x{}", hex::encode(signed.encoded_2718()));
        node.rpc("eth_sendRawTransaction", json!([raw])).await?;
    }
    mined(node, &from.to_string(), first + n as u64).await?;
    Ok(started.elapsed())
}

fn config(dir: &std::path::Path) -> anyhow::Result<Config> {
    let config = Config {
        database_url: format!("sqlite://{}/bench.db", dir.display()),
        secret_key_file: Some(dir.join("key")),
        ..Config::default()
    };
    std::fs::write(dir.join("key"), "22".repeat(32))?;
    Ok(config)
}

struct Api {
    base: String,
    client: reqwest::Client,
}

impl Api {
    async fn call(
        &self,
        method: reqwest::Method,
        path: &str,
        token: &str,
        body: &Value,
    ) -> anyhow::Result<Value> {
        let res = self
            .client
            .request(method, format!("{}{path}", self.base))
            .bearer_auth(token)
            .json(body)
            .send()
            .await?;
        let status = res.status();
        let v: Value = res.json().await?;
        anyhow::ensure!(status.is_success(), "{path}: {status} {v}");
        Ok(v)
    }
}

// Long: the service's setup and the run, one step after another.
async fn service(node: &Node, n: usize) -> anyhow::Result<(Duration, u64)> {
    let dir = tempfile::tempdir()?;
    let mut config = config(dir.path())?;
    config.rate_limit.requests = 1_000_000;
    config.withdrawals.max_in_flight_per_wallet = u32::try_from(n)? + 10;
    // anvil's pool now and then holds one queued though it is next (docs/withdrawals.md#held-by-the-node):
    // freed after 2 s rather than the default 30, as an operator on anvil would set it.
    config.withdrawals.queued_after = 2;
    if let Some(limit) = std::env::var("BENCH_SIGNER_CONCURRENCY").ok().and_then(|v| v.parse().ok()) {
        config.withdrawals.signer_concurrency = limit;
    }
    common::watch_from_head(&mut config, node).await?;
    let state = AppState::new(config).await?;
    let enterprise =
        common::enterprise_of_admins(&state, "Bench", &["alice@example.com", "bob@example.com"]).await?;
    // The signer waits behind another holder's lease (taken before it starts) until every
    // withdrawal is approved.
    let lease = custodian::custody::signer::lease_name(&"hteth".parse().map_err(anyhow::Error::msg)?);
    let now = state.store.clock().now_ms();
    anyhow::ensure!(state.store.take_chain_lease(&lease, "bench", now, now + 3_600_000).await?, "lease");
    let (base, client, alice) = common::serve_and_login(&state, "alice@example.com").await?;
    let bob = common::login(&client, &base, "bob@example.com").await?;
    let api = Api { base, client };
    let body =
        json!({ "label": "bench", "enterprise": enterprise.id, "type": "custodial", "approvalsRequired": 1 });
    let wallet = api.call(reqwest::Method::POST, "/api/v2/hteth/wallet/add", &alice, &body).await?;
    let (id, address) = (
        wallet["id"].as_str().unwrap_or_default(),
        wallet["coinSpecific"]["baseAddress"].as_str().unwrap_or_default(),
    );
    node.rpc("eth_sendTransaction", json!([{ "from": RICH, "to": address, "value": "0x56bc75e2d63100000" }]))
        .await?;
    node.rpc("anvil_mine", json!(["0x3"])).await?;
    let path = format!("/api/v2/hteth/wallet/{id}?expandBalance=true");
    // Withdrawals are admitted against the confirmed balance.
    while api.call(reqwest::Method::GET, &path, &alice, &Value::Null).await?["confirmedBalanceString"]
        == json!("0")
    {
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    api.call(
        reqwest::Method::POST,
        "/api/v2/user/unlock",
        &alice,
        &json!({ "otp": "000000", "duration": 3600 }),
    )
    .await?;
    let approve = json!({ "state": "approved", "otp": "000000" });
    let mut last = String::new();
    for i in 0..n {
        let body = json!({ "recipients": [{ "address": PAYEE, "amount": "1000" }] });
        let pending = api
            .call(reqwest::Method::POST, &format!("/api/v2/hteth/wallet/{id}/tx/initiate"), &alice, &body)
            .await?;
        let path = format!("/api/v2/hteth/pendingapprovals/{}", pending["id"].as_str().unwrap_or_default());
        if i + 1 == n {
            last = path;
        } else {
            api.call(reqwest::Method::PUT, &path, &bob, &approve).await?;
        }
    }
    // The lease is given up as the clock starts; the last approval wakes the signer (or its
    // poll comes first), with all of them to sign.
    let now = state.store.clock().now_ms();
    state.store.take_chain_lease(&lease, "bench", now, now).await?;
    let started = Instant::now();
    api.call(reqwest::Method::PUT, &last, &bob, &approve).await?;
    mined(node, address, n as u64).await?;
    Ok((started.elapsed(), state.metrics.custody.held_queued.get()))
}

async fn throughput() -> anyhow::Result<()> {
    let n = env_usize("BENCH_WITHDRAWALS", 200);
    let node = common::start_anvil(&[]).await?;
    // Both ceiling runs come first: the service keeps its watcher polling the node afterwards.
    let first = ceiling(&node, n).await?;
    let second = ceiling(&node, n).await?;
    let (served, held) = service(&node, n).await?;
    let rate = |d: Duration| n as f64 / d.as_secs_f64();
    let best = rate(first).max(rate(second));
    println!(
        "throughput: {n} approved withdrawals mined at {:.1}/s; raw-send ceiling {:.1}/s and {:.1}/s; ratio {:.2} to the better{}",
        rate(served),
        rate(first),
        rate(second),
        rate(served) / best,
        if held == 0 { String::new() } else { format!(" (anvil held {held} queued though next: replaced after queued_after)") }
    );
    Ok(())
}

fn percentile(sorted: &[f64], p: f64) -> f64 {
    let i = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted.get(i).copied().unwrap_or(f64::NAN)
}

/// p50 and p99 (ms) of `n` signatures through `keys::sign` with a fresh key of `store`.
async fn latency(store: &dyn KeyStore, n: usize) -> anyhow::Result<(f64, f64)> {
    let id = KeyId::new_random();
    let made = store.generate(&id).await?;
    let record = KeyRecord {
        id,
        wallet_id: custodian::types::WalletId::new_random(),
        backend: store.backend().into(),
        address: keys::address_of(&made.public_key)?,
        public_key: made.public_key,
        handle: made.handle,
        created_at: 0,
    };
    let mut ms = Vec::with_capacity(n);
    for i in 0..n {
        let digest: B256 = alloy_primitives::keccak256(i.to_be_bytes());
        let started = Instant::now();
        keys::sign(store, &record, &digest, || {}).await?;
        ms.push(started.elapsed().as_secs_f64() * 1000.0);
    }
    ms.sort_by(f64::total_cmp);
    Ok((percentile(&ms, 0.5), percentile(&ms, 0.99)))
}

/// A SoftHSM2 token in `dir`, `SOFTHSM2_CONF` pointed at it; the PIN file.
fn softhsm(dir: &std::path::Path) -> anyhow::Result<std::path::PathBuf> {
    let tokens = dir.join("tokens");
    std::fs::create_dir(&tokens)?;
    let conf = dir.join("softhsm2.conf");
    std::fs::write(
        &conf,
        format!("directories.tokendir = {}\nobjectstore.backend = file\n", tokens.display()),
    )?;
    std::env::set_var("SOFTHSM2_CONF", &conf);
    let made = std::process::Command::new("softhsm2-util")
        .args(["--init-token", "--free", "--label", "bench", "--pin", "1234", "--so-pin", "5678"])
        .output()?;
    anyhow::ensure!(made.status.success(), "{}", String::from_utf8_lossy(&made.stderr));
    let pin = dir.join("pin");
    std::fs::write(&pin, "1234")?;
    Ok(pin)
}

async fn signing() -> anyhow::Result<()> {
    let n = env_usize("BENCH_SIGNATURES", 1_000);
    let dir = tempfile::tempdir()?;
    let sealed = AppState::new(config(dir.path())?).await?;
    let (p50, p99) = latency(sealed.custody.keys.as_ref(), n).await?;
    println!("signing, sealed: {n} signatures p50 {p50:.3} ms, p99 {p99:.3} ms");
    if !std::path::Path::new(SOFTHSM).exists() {
        println!("signing, SoftHSM2: not installed ({SOFTHSM}); skipped");
        return Ok(());
    }
    let hsm_dir = tempfile::tempdir()?;
    let mut cfg = config(hsm_dir.path())?;
    cfg.keys.backend = "pkcs11".into();
    cfg.keys.pkcs11_module = Some(SOFTHSM.into());
    cfg.keys.pkcs11_token = Some("bench".into());
    cfg.keys.pkcs11_pin_file = Some(softhsm(hsm_dir.path())?);
    let hsm = AppState::new(cfg).await?;
    let (p50, p99) = latency(hsm.custody.keys.as_ref(), n).await?;
    println!("signing, SoftHSM2 (PKCS#11): {n} signatures p50 {p50:.3} ms, p99 {p99:.3} ms");
    Ok(())
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    // The service's log, when RUST_LOG asks for it (to see why a run was slow).
    if std::env::var_os("RUST_LOG").is_some() {
        tracing_subscriber::fmt().with_env_filter(tracing_subscriber::EnvFilter::from_default_env()).init();
    }
    match std::env::var("BENCH_PHASE").as_deref() {
        Ok("throughput") => throughput().await,
        Ok("signing") => signing().await,
        _ => {
            signing().await?;
            throughput().await
        }
    }
}
