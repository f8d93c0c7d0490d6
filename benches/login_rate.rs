//! Login rate: successful password logins per second through the public API, from
//! `LOGIN_RATE_CLIENTS` keep-alive clients (each on its own loopback address, 127.0.0.10 and up,
//! so no per-client limit is what is measured), against the real `custodian` binary on SQLite.
//! Each login hashes the password (argon2id), so the rate is the hashing bound
//! (`login.max_concurrent_hashes`, one per core) plus what a login does around it.
//!
//! With `LOGIN_RATE_BASELINE_BIN` (another build, e.g. the commit before a change), both
//! binaries are measured in alternating rounds of the same run, and the ratio is printed: the
//! reference a change is judged against. Also measured, on this build: logins of a user with
//! an ECDH keychain through BitGoJS's path, which hand the token over ECDH-encrypted.
//!
//!   cargo bench --bench login_rate
//!   LOGIN_RATE_BASELINE_BIN=/tmp/custodian-before LOGIN_RATE_SECS=20 cargo bench --bench login_rate

#[path = "spawned.rs"]
mod spawned;

use spawned::{setting, start};
use std::{
    net::{IpAddr, Ipv4Addr},
    sync::{
        atomic::{AtomicU64, Ordering},
        Arc,
    },
    time::{Duration, Instant},
};

use serde_json::{json, Value};

const EMAIL: &str = "rate@example.com";
const PASSWORD: &str = "benchmark password";

/// Logins per second over `secs`, `clients` at once; `bitgo` sends `BitGo-Auth-Version` (the
/// ECDH handover for a user with a keychain). Every answer must be a 200.
async fn rate(base: &str, clients: usize, secs: u64, bitgo: bool) -> anyhow::Result<f64> {
    let done = Arc::new(AtomicU64::new(0));
    let refused = Arc::new(AtomicU64::new(0));
    let until = Instant::now() + Duration::from_secs(secs);
    let mut tasks = Vec::new();
    for i in 0..clients {
        let client = reqwest::Client::builder()
            .no_proxy()
            .local_address(IpAddr::V4(Ipv4Addr::new(127, 0, 0, 10 + i as u8)))
            .build()?;
        let (base, done, refused) = (base.to_string(), done.clone(), refused.clone());
        tasks.push(tokio::spawn(async move {
            let body = json!({ "email": EMAIL, "password": PASSWORD, "otp": "000000" });
            while Instant::now() < until {
                let mut req = client.post(format!("{base}/api/v2/internal/user/login")).json(&body);
                if bitgo {
                    req = req.header("BitGo-Auth-Version", "2.0");
                }
                match req.send().await {
                    Ok(r) if r.status() == 200 => {
                        let _ = r.bytes().await;
                        done.fetch_add(1, Ordering::Relaxed);
                    }
                    _ => {
                        refused.fetch_add(1, Ordering::Relaxed);
                    }
                }
            }
        }));
    }
    let start = Instant::now();
    for t in tasks {
        t.await?;
    }
    let n = done.load(Ordering::Relaxed);
    anyhow::ensure!(refused.load(Ordering::Relaxed) == 0, "some logins were refused");
    Ok(n as f64 / start.elapsed().as_secs_f64())
}

/// Gives the user an ECDH keychain (a random xpub; its envelope is opaque to the server).
async fn add_keychain(base: &str) -> anyhow::Result<()> {
    let client = reqwest::Client::builder().no_proxy().build()?;
    let login: Value = client
        .post(format!("{base}/api/v2/internal/user/login"))
        .json(&json!({ "email": EMAIL, "password": PASSWORD, "otp": "000000" }))
        .send()
        .await?
        .json()
        .await?;
    let token = login["access_token"].as_str().unwrap_or_default().to_string();
    let seed: [u8; 32] = rand::random();
    let xprv = bitcoin::bip32::Xpriv::new_master(bitcoin::NetworkKind::Main, &seed)?;
    let xpub = bitcoin::bip32::Xpub::from_priv(&bitcoin::secp256k1::Secp256k1::new(), &xprv).to_string();
    let envelope = custodian::identity::ecdh::seal(PASSWORD, &xprv.to_string());
    let keychain = json!({ "source": "ecdh", "xpub": xpub, "encryptedXprv": envelope });
    let r = client.post(format!("{base}/api/v1/keychain")).bearer_auth(&token).json(&keychain).send().await?;
    anyhow::ensure!(r.status() == 200, "keychain: {}", r.status());
    let set = json!({ "settings": { "ecdhKeychain": xpub } });
    let r = client.put(format!("{base}/api/v2/user/settings")).bearer_auth(&token).json(&set).send().await?;
    anyhow::ensure!(r.status() == 200, "settings: {}", r.status());
    Ok(())
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(|a, b| a.total_cmp(b));
    v[v.len() / 2]
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let secs = setting("LOGIN_RATE_SECS", 15);
    let clients = setting("LOGIN_RATE_CLIENTS", 4) as usize;
    let rounds = setting("LOGIN_RATE_ROUNDS", 3) as usize;
    let current = env!("CARGO_BIN_EXE_custodian").to_string();
    let baseline = std::env::var("LOGIN_RATE_BASELINE_BIN").ok();
    let mut builds = vec![("this build", current.clone())];
    if let Some(b) = &baseline {
        builds.push(("baseline", b.clone()));
    }
    println!("login rate: {clients} clients, {secs} s per round, {rounds} rounds per build, SQLite");
    let mut results: Vec<Vec<f64>> = vec![Vec::new(); builds.len()];
    for round in 0..rounds {
        for (i, (label, bin)) in builds.iter().enumerate() {
            let dir = tempfile::tempdir()?;
            let (_server, base) = start(bin, dir.path(), EMAIL, PASSWORD).await?;
            rate(&base, clients, 2, false).await?; // warm-up
            let r = rate(&base, clients, secs, false).await?;
            println!("  round {round} {label}: {r:.1} password logins/s");
            results[i].push(r);
        }
    }
    let this = median(results[0].clone());
    println!("this build: median {this:.1} password logins/s");
    if baseline.is_some() {
        let base = median(results[1].clone());
        println!("baseline:   median {base:.1} password logins/s; ratio {:.3}", this / base);
    }
    let dir = tempfile::tempdir()?;
    let (_server, base) = start(&current, dir.path(), EMAIL, PASSWORD).await?;
    add_keychain(&base).await?;
    rate(&base, clients, 2, true).await?;
    let ecdh = rate(&base, clients, secs, true).await?;
    println!("this build, a user with an ECDH keychain through BitGoJS's path: {ecdh:.1} logins/s");
    Ok(())
}
