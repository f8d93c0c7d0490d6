//! What wallet policy costs a withdrawal (docs/policy.md), as the initiator sees it.
//!
//! Two custodial wallets on one service (SQLite, in the bench process), each with
//! BENCH_HISTORY (10,000) withdrawals in the last hour (sent and mined: inside every velocity
//! window, outside the in-flight cap). Wallet R has 50 rules: a 1,000-address whitelist holding
//! the payee, 40 velocity limits with 40 different windows (each its own sum, the worst case),
//! 9 `allTx` `getApproval` rules. Wallet P has none: the reference. One keep-alive client
//! initiates BENCH_WITHDRAWALS (300) withdrawals through `/tx/initiate`, alternating the two
//! wallets so drift hits both alike: p50 and mean latency of each, and R's over P's.
//!
//! Run: `cargo bench --bench policy` (needs `npm install` in chain-tests/).

#[allow(dead_code)] // each bench is its own crate and uses part of common
mod common;

use std::time::{Duration, Instant};

use custodian::{config::Config, AppState};
use serde_json::{json, Value};

const RICH: &str = "0xf39Fd6e51aad88F6F4ce6aB8827279cffFb92266";
const PAYEE: &str = "0x3C44CdDdB6a900fa2b585dd299e03d12FA4293BC";

fn env_usize(name: &str, default: usize) -> usize {
    std::env::var(name).ok().and_then(|v| v.parse().ok()).unwrap_or(default)
}

struct Api {
    base: String,
    client: reqwest::Client,
    token: String,
}

impl Api {
    async fn post(&self, path: &str, body: &Value) -> anyhow::Result<Value> {
        let res = self
            .client
            .post(format!("{}{path}", self.base))
            .bearer_auth(&self.token)
            .json(body)
            .send()
            .await?;
        let status = res.status();
        let v: Value = res.json().await?;
        anyhow::ensure!(status.is_success(), "{path}: {status} {v}");
        Ok(v)
    }

    async fn get(&self, path: &str) -> anyhow::Result<Value> {
        let res = self.client.get(format!("{}{path}", self.base)).bearer_auth(&self.token).send().await?;
        Ok(res.json().await?)
    }
}

/// A funded custodial wallet: its id.
async fn wallet(api: &Api, node: &common::Node, enterprise: &str, label: &str) -> anyhow::Result<String> {
    let body =
        json!({ "label": label, "enterprise": enterprise, "type": "custodial", "approvalsRequired": 1 });
    let w = api.post("/api/v2/hteth/wallet/add", &body).await?;
    let id = w["id"].as_str().unwrap_or_default().to_string();
    let address = w["coinSpecific"]["baseAddress"].clone();
    node.rpc("eth_sendTransaction", json!([{ "from": RICH, "to": address, "value": "0x56bc75e2d63100000" }]))
        .await?;
    node.rpc("anvil_mine", json!(["0x3"])).await?;
    while api.get(&format!("/api/v2/hteth/wallet/{id}?expandBalance=true")).await?["confirmedBalanceString"]
        == json!("0")
    {
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    Ok(id)
}

/// `n` mined withdrawals of 1,000 wei from `wallet`, created over the last hour, written
/// straight into the database (through the API they would take minutes and the in-flight cap).
async fn history(db: &str, wallet: &str, tag: u64, n: usize, now: i64) -> anyhow::Result<()> {
    let pool = sqlx::SqlitePool::connect(db).await?;
    let mut tx = pool.begin().await?;
    for i in 0..n {
        let id = format!("{:016x}{:016x}", 0xb000_0000u64 + tag, i as u64);
        // Created over the last 3,000 s, oldest first, each with its place in the wallet's
        // velocity ledger (docs/policy.md).
        let at = now - 3_000 + (i * 3_000 / n) as i64;
        sqlx::query(
            "INSERT INTO withdrawals (id, wallet_id, coin, creator, idempotency_key, state, version, recipients, \
             key_id, from_address, approval_id, fee_reserve, mined_block, created_at, updated_at, amount_w0, \
             amount_w1, amount_w2, amount_w3, amount_w4, amount_w5, amount_w6, amount_w7, vcoin, vseq, vtime, \
             cum_total) VALUES ($1, $2, 'hteth', $3, $1, 'delivered', 1, $4, $3, $5, $1, '0', 1, $6, $6, 1000, 0, 0, \
             0, 0, 0, 0, 0, 'hteth', $7, $6, $8)",
        )
        .bind(&id)
        .bind(wallet)
        .bind(format!("{:032x}", 1))
        .bind(json!([{ "address": PAYEE, "amount": "1000" }]).to_string())
        .bind(RICH)
        .bind(at)
        .bind(i as i64 + 1)
        .bind((1_000 * (i as u64 + 1)).to_string())
        .execute(&mut *tx)
        .await?;
    }
    tx.commit().await?;
    pool.close().await;
    Ok(())
}

/// The 50 rules of wallet R.
fn rules() -> Vec<Value> {
    let mut addresses: Vec<String> = (1..1_000u32).map(|i| format!("0x{i:040x}")).collect();
    addresses.push(PAYEE.into());
    let mut rules = vec![
        json!({ "id": "payees", "type": "coinAddressWhitelist", "condition": { "addresses": addresses }, "action": { "type": "deny" } }),
    ];
    for i in 0..40u64 {
        rules.push(json!({ "id": format!("v{i}"), "type": "velocityLimit", "condition": { "amountString": "1000000000000000000000", "timeWindow": 3_600 + i }, "action": { "type": "getApproval" } }));
    }
    for i in 0..9 {
        rules.push(json!({ "id": format!("all{i}"), "type": "allTx", "condition": {}, "action": { "type": "getApproval" } }));
    }
    rules
}

fn percentile(sorted: &[f64], p: f64) -> f64 {
    let i = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted.get(i).copied().unwrap_or(f64::NAN)
}

fn summary(ms: &mut [f64]) -> (f64, f64) {
    ms.sort_by(f64::total_cmp);
    (percentile(ms, 0.5), ms.iter().sum::<f64>() / ms.len() as f64)
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let n = env_usize("BENCH_WITHDRAWALS", 300);
    let past = env_usize("BENCH_HISTORY", 10_000);
    let node = common::start_anvil(&[]).await?;
    let dir = tempfile::tempdir()?;
    let db = format!("sqlite://{}/bench.db", dir.path().display());
    std::fs::write(dir.path().join("key"), "22".repeat(32))?;
    let mut config = Config {
        database_url: db.clone(),
        secret_key_file: Some(dir.path().join("key")),
        ..Config::default()
    };
    config.rate_limit.requests = 1_000_000;
    config.withdrawals.max_in_flight_per_wallet = u32::try_from(n)? + 10;
    common::watch_from_head(&mut config, &node).await?;
    let state = AppState::new(config).await?;
    let enterprise = common::enterprise_of_admins(&state, "Bench", &["alice@example.com"]).await?;
    let (base, client, token) = common::serve_and_login(&state, "alice@example.com").await?;
    let api = Api { base, client, token };
    let plain = wallet(&api, &node, enterprise.id.as_str(), "plain").await?;
    let ruled = wallet(&api, &node, enterprise.id.as_str(), "ruled").await?;
    for rule in rules() {
        api.post(&format!("/api/v2/hteth/wallet/{ruled}/policy/rule"), &rule).await?;
    }
    let now = state.store.clock().now();
    for (tag, w) in [&plain, &ruled].into_iter().enumerate() {
        history(&db, w, tag as u64, past, now).await?;
    }
    api.post("/api/v2/user/unlock", &json!({ "otp": "000000", "duration": 3600 })).await?;
    let body = json!({ "recipients": [{ "address": PAYEE, "amount": "1000" }] });
    let (mut p, mut r) = (Vec::with_capacity(n), Vec::with_capacity(n));
    for i in 0..2 * n {
        let (id, out) = if i % 2 == 0 { (&plain, &mut p) } else { (&ruled, &mut r) };
        let started = Instant::now();
        let made = api.post(&format!("/api/v2/hteth/wallet/{id}/tx/initiate"), &body).await?;
        out.push(started.elapsed().as_secs_f64() * 1000.0);
        if i == 1 {
            anyhow::ensure!(made["singleRunResults"].as_array().map(Vec::len) == Some(50), "{made}");
        }
    }
    let ((p50, pmean), (r50, rmean)) = (summary(&mut p), summary(&mut r));
    println!(
        "policy: {n} withdrawals per wallet, {past} in each window; no rules p50 {p50:.2} ms mean {pmean:.2} ms; \
         50 rules p50 {r50:.2} ms mean {rmean:.2} ms; ratio p50 {:.2}, mean {:.2}",
        r50 / p50,
        rmean / pmean
    );
    Ok(())
}
