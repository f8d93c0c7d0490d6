//! Login flood (docs/decisions.md#brute-force-limits): the real `custodian` binary on SQLite, attacked by one client
//! (127.0.0.1) holding `CONNECTIONS` keep-alive connections that send failed logins as fast as
//! they are answered (half for the victim's email, half for unknown ones), while a legitimate
//! client on 127.0.0.2 (the whole 127/8 is loopback on Linux) logs the victim in correctly once
//! a second. Reports the server's peak RSS (VmHWM), the legitimate client's success rate and
//! latency, and what the attacker got.
//!
//!   cargo bench --bench login_flood
//!   LOGIN_FLOOD_SECS=10 LOGIN_FLOOD_CONNECTIONS=256 cargo bench --bench login_flood
//!
//! Targets (docs/decisions.md#brute-force-limits): peak RSS <= 150 MiB; legitimate success 100% with p99 <= 2 s.

#[path = "spawned.rs"]
mod spawned;

use spawned::{setting, start};
use std::{
    collections::BTreeMap,
    net::{IpAddr, Ipv4Addr},
    sync::{Arc, Mutex},
    time::{Duration, Instant},
};

use serde_json::json;

const EMAIL: &str = "victim@example.com";
const PASSWORD: &str = "the victim's password";

/// `VmHWM` (peak resident set) and `Threads` of a process, from /proc.
fn peak_rss_and_threads(pid: u32) -> (u64, u64) {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    let field = |name: &str| -> u64 {
        status
            .lines()
            .find_map(|l| l.strip_prefix(name))
            .and_then(|v| v.split_whitespace().next())
            .and_then(|v| v.parse().ok())
            .unwrap_or(0)
    };
    (field("VmHWM:"), field("Threads:"))
}

fn percentile(sorted: &[f64], p: f64) -> f64 {
    if sorted.is_empty() {
        return f64::NAN;
    }
    sorted[((sorted.len() as f64 - 1.0) * p).round() as usize]
}

/// One legitimate login; its latency in seconds and whether it got a token.
async fn legit_login(client: &reqwest::Client, base: &str) -> (f64, bool) {
    let t0 = Instant::now();
    let body = json!({ "email": EMAIL, "password": PASSWORD, "otp": "000000" });
    let ok = match client.post(format!("{base}/api/v2/internal/user/login")).json(&body).send().await {
        Ok(r) => r.status() == 200,
        Err(_) => false,
    };
    (t0.elapsed().as_secs_f64(), ok)
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let secs = setting("LOGIN_FLOOD_SECS", 30);
    let connections = setting("LOGIN_FLOOD_CONNECTIONS", 1000) as usize;
    let dir = tempfile::tempdir()?;
    let (server, base) = start(env!("CARGO_BIN_EXE_custodian"), dir.path(), EMAIL, PASSWORD).await?;
    let pid = server.0.id();

    let legit = reqwest::Client::builder()
        .no_proxy()
        .local_address(IpAddr::V4(Ipv4Addr::new(127, 0, 0, 2)))
        .timeout(Duration::from_secs(30))
        .build()?;
    // The victim has logged in from its address before: a known client.
    let (_, ok) = legit_login(&legit, &base).await;
    anyhow::ensure!(ok, "the first legitimate login failed");
    let (rss_before, _) = peak_rss_and_threads(pid);

    let attacker = reqwest::Client::builder()
        .no_proxy()
        .pool_max_idle_per_host(connections)
        .timeout(Duration::from_secs(60))
        .build()?;
    let statuses: Arc<Mutex<BTreeMap<String, u64>>> = Arc::default();
    let deadline = Instant::now() + Duration::from_secs(secs);
    let tasks = flood(&attacker, &base, connections, deadline, &statuses);
    let (mut latencies, successes) = legitimate_logins(legit, base.clone(), deadline)?;
    for t in tasks {
        let _ = t.await;
    }
    let (peak_kib, threads) = peak_rss_and_threads(pid);
    drop(server);

    latencies.sort_by(f64::total_cmp);
    let total: u64 = statuses.lock().unwrap_or_else(|e| e.into_inner()).values().sum();
    println!("login flood: {connections} attacker connections from 127.0.0.1 for {secs} s; one legitimate login a second from 127.0.0.2");
    println!(
        "server: peak RSS {:.1} MiB (before the flood {:.1} MiB), {threads} threads at the end",
        peak_kib as f64 / 1024.0,
        rss_before as f64 / 1024.0
    );
    println!(
        "legitimate: {successes}/{} succeeded, p50 {:.0} ms, p99 {:.0} ms, max {:.0} ms",
        latencies.len(),
        percentile(&latencies, 0.50) * 1000.0,
        percentile(&latencies, 0.99) * 1000.0,
        latencies.last().copied().unwrap_or(f64::NAN) * 1000.0
    );
    println!("attacker: {total} requests ({:.0}/s):", total as f64 / secs as f64);
    for (status, n) in statuses.lock().unwrap_or_else(|e| e.into_inner()).iter() {
        println!("  {status}: {n}");
    }
    let rss_ok = peak_kib <= 150 * 1024;
    let legit_ok = successes == latencies.len() && percentile(&latencies, 0.99) <= 2.0;
    println!(
        "targets: peak RSS <= 150 MiB {}; legitimate 100% with p99 <= 2 s {}",
        if rss_ok { "met" } else { "MISSED" },
        if legit_ok { "met" } else { "MISSED" }
    );
    Ok(())
}

/// `connections` attacker tasks sending wrong logins until `deadline`, counting answers by
/// status in `statuses`.
fn flood(
    attacker: &reqwest::Client,
    base: &str,
    connections: usize,
    deadline: Instant,
    statuses: &Arc<Mutex<BTreeMap<String, u64>>>,
) -> Vec<tokio::task::JoinHandle<()>> {
    let mut tasks = Vec::new();
    for c in 0..connections {
        let (attacker, base, statuses) = (attacker.clone(), base.to_string(), statuses.clone());
        tasks.push(tokio::spawn(async move {
            let mut n = 0u64;
            while Instant::now() < deadline {
                n += 1;
                let email = if n % 2 == 0 { EMAIL.to_string() } else { format!("u{c}-{n}@example.com") };
                let body = json!({ "email": email, "password": "wrong password", "otp": "000000" });
                let key = match attacker
                    .post(format!("{base}/api/v2/internal/user/login"))
                    .json(&body)
                    .send()
                    .await
                {
                    Ok(r) => r.status().as_u16().to_string(),
                    Err(e) if e.is_timeout() => "timeout".to_string(),
                    Err(_) => "connection error".to_string(),
                };
                *statuses.lock().unwrap_or_else(|e| e.into_inner()).entry(key).or_default() += 1;
            }
        }));
    }

    tasks
}

/// One legitimate login a second until `deadline`, on a thread and runtime of its own, so that
/// what it measures is the server, not the attacker's tasks queued in this process. Returns the
/// latencies (seconds) and how many succeeded.
fn legitimate_logins(
    legit: reqwest::Client,
    base: String,
    deadline: Instant,
) -> anyhow::Result<(Vec<f64>, usize)> {
    let thread = std::thread::spawn(move || -> anyhow::Result<(Vec<f64>, usize)> {
        let rt = tokio::runtime::Builder::new_current_thread().enable_all().build()?;
        Ok(rt.block_on(async move {
            let (mut latencies, mut successes) = (Vec::new(), 0);
            while Instant::now() < deadline {
                let next = Instant::now() + Duration::from_secs(1);
                let (secs, ok) = legit_login(&legit, &base).await;
                latencies.push(secs);
                successes += usize::from(ok);
                tokio::time::sleep_until(next.into()).await;
            }
            (latencies, successes)
        }))
    });
    thread.join().map_err(|_| anyhow::anyhow!("the legitimate client panicked"))?
}
