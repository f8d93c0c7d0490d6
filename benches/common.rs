//! The databases a benchmark runs on: SQLite in a temporary folder, and PostgreSQL when
//! CUSTODIAN_BENCH_POSTGRES_URL names an admin URL (a fresh database is created and dropped).

use sqlx::Connection;

/// One database to run on.
pub struct BenchDb {
    pub label: &'static str,
    pub url: String,
    admin: Option<(String, String)>,
    _dir: tempfile::TempDir,
}

impl BenchDb {
    pub async fn drop_database(self) {
        if let Some((admin, name)) = &self.admin {
            if let Ok(mut c) = sqlx::PgConnection::connect(admin).await {
                let _ = sqlx::query(&format!("DROP DATABASE IF EXISTS {name} WITH (FORCE)"))
                    .execute(&mut c)
                    .await;
            }
        }
    }
}

/// The backends to run on: SQLite (false), and PostgreSQL (true) when
/// CUSTODIAN_BENCH_POSTGRES_URL is set; `BENCH_BACKENDS=sqlite` or `postgres` picks one.
pub fn backends() -> Vec<bool> {
    let postgres = std::env::var("CUSTODIAN_BENCH_POSTGRES_URL").is_ok();
    match std::env::var("BENCH_BACKENDS").as_deref() {
        Ok("postgres") if postgres => vec![true],
        Ok("sqlite") => vec![false],
        _ if postgres => vec![false, true],
        _ => vec![false],
    }
}

/// A fresh database: a SQLite file in a temporary folder, or a new PostgreSQL database.
pub async fn database(postgres: bool) -> anyhow::Result<BenchDb> {
    let dir = tempfile::tempdir()?;
    if !postgres {
        return Ok(BenchDb {
            label: "SQLite",
            url: format!("sqlite://{}", dir.path().join("bench.db").display()),
            admin: None,
            _dir: dir,
        });
    }
    let admin = std::env::var("CUSTODIAN_BENCH_POSTGRES_URL")?;
    let name = format!("custodian_bench_{}", custodian::ids::new_id());
    let mut c = sqlx::PgConnection::connect(&admin).await?;
    sqlx::query(&format!("CREATE DATABASE {name}")).execute(&mut c).await?;
    let base = admin.rsplit_once('/').map(|(b, _)| b.to_string()).unwrap_or(admin.clone());
    Ok(BenchDb { label: "PostgreSQL", url: format!("{base}/{name}"), admin: Some((admin, name)), _dir: dir })
}

/// Serves `state` on 127.0.0.1:0 and logs `email` in (password "benchmark password", the test
/// OTP). Returns the base URL, a client and the session token.
#[allow(dead_code)] // each bench is its own crate; the scale bench runs its server apart
pub async fn serve_and_login(
    state: &custodian::AppState,
    email: &str,
) -> anyhow::Result<(String, reqwest::Client, String)> {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let base = format!("http://{}", listener.local_addr()?);
    tokio::spawn(custodian::serve(listener, state.clone(), std::future::pending()));
    let client = reqwest::Client::builder().no_proxy().build()?;
    let token = login(&client, &base, email).await?;
    Ok((base, client, token))
}

/// Logs `email` in at `base` (password "benchmark password", the test OTP); the session token.
pub async fn login(client: &reqwest::Client, base: &str, email: &str) -> anyhow::Result<String> {
    let login: serde_json::Value = client
        .post(format!("{base}/api/v2/internal/user/login"))
        .json(&serde_json::json!({ "email": email, "password": "benchmark password", "otp": "000000" }))
        .send()
        .await?
        .json()
        .await?;
    let token = login["access_token"].as_str().unwrap_or_default().to_string();
    anyhow::ensure!(!token.is_empty(), "login of {email} failed: {login}");
    Ok(token)
}

/// Adds an active `transfer` webhook of the tbtc wallet `wallet`, bound to `enterprise`, owned by
/// `user` and pointing at `url`, with every cap out of the way.
#[allow(dead_code)] // the lookup bench adds no webhooks
pub async fn add_wallet_webhook(
    state: &custodian::AppState,
    user: &custodian::types::UserId,
    wallet: &str,
    enterprise: Option<custodian::types::EnterpriseId>,
    url: String,
) -> anyhow::Result<()> {
    let w = custodian::model::webhook::Webhook {
        id: custodian::types::WebhookId::new_random(),
        level: custodian::model::webhook::WebhookLevel::Wallet {
            coin: "tbtc".parse().map_err(anyhow::Error::msg)?,
            wallet_id: wallet.parse().map_err(anyhow::Error::msg)?,
            enterprise_id: enterprise,
            num_confirmations: 0,
        },
        user_id: user.clone(),
        webhook_type: "transfer".into(),
        url,
        label: None,
        state: custodian::model::webhook::WebhookState::Active,
        successive_failed_attempts: 0,
        failed_attempts_total: 0,
        listen_to_failure_states: false,
        tx_request_states: vec![],
        tx_request_transaction_states: vec![],
        custom_headers: Default::default(),
        allow_blocked_hosts: false,
        created_at: custodian::clock::wall_now(),
    };
    let caps =
        custodian::store::WebhookCaps { per_type: u32::MAX, block_per_user: 100, per_enterprise: u32::MAX };
    anyhow::ensure!(
        state.store.insert_webhook(&w, caps, &[]).await?.is_ok(),
        "webhook cap reached while setting up"
    );
    Ok(())
}

/// A running anvil (chain-tests/node_modules, installed by `npm install` there), killed on drop.
#[allow(dead_code)] // not every bench runs a node
pub struct Node {
    child: std::process::Child,
    pub url: String,
    http: reqwest::Client,
}

impl Drop for Node {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

#[allow(dead_code)]
impl Node {
    /// A JSON-RPC call's `result`; an `error` answer is an error.
    pub async fn rpc(&self, method: &str, params: serde_json::Value) -> anyhow::Result<serde_json::Value> {
        let body = serde_json::json!({ "jsonrpc": "2.0", "id": 1, "method": method, "params": params });
        let v: serde_json::Value = self.http.post(&self.url).json(&body).send().await?.json().await?;
        if let Some(e) = v.get("error") {
            anyhow::bail!("{method}: {e}");
        }
        Ok(v["result"].clone())
    }
}

/// Starts anvil on a free port with `args` and waits until it answers.
#[allow(dead_code)]
pub async fn start_anvil(args: &[&str]) -> anyhow::Result<Node> {
    let bin = format!("{}/chain-tests/node_modules/.bin/anvil", env!("CARGO_MANIFEST_DIR"));
    let port = std::net::TcpListener::bind("127.0.0.1:0")?.local_addr()?.port();
    let child = std::process::Command::new(bin)
        .args(["--port", &port.to_string(), "--silent"])
        .args(args)
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()?;
    let node = Node { child, url: format!("http://127.0.0.1:{port}"), http: reqwest::Client::new() };
    for _ in 0..100 {
        if node.rpc("eth_blockNumber", serde_json::json!([])).await.is_ok() {
            return Ok(node);
        }
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
    anyhow::bail!("anvil did not start")
}

/// An enterprise named `name` whose admins are `emails`, each made a user with the password
/// "benchmark password".
#[allow(dead_code)] // each bench is its own crate
pub async fn enterprise_of_admins(
    state: &custodian::AppState,
    name: &str,
    emails: &[&str],
) -> anyhow::Result<custodian::store::Enterprise> {
    let enterprise = custodian::identity::users::create_enterprise(&state.store, name, None).await?;
    for who in emails {
        custodian::identity::users::create_user(
            &state.store,
            &state.identity.key,
            who,
            None,
            "benchmark password",
            false,
        )
        .await?;
        custodian::identity::users::add_member(&state.store, &enterprise.id, who, true).await?;
    }
    Ok(enterprise)
}

/// Points `config`'s `hteth` chain at `node`, read from its current head.
#[allow(dead_code)] // each bench is its own crate
pub async fn watch_from_head(config: &mut custodian::config::Config, node: &Node) -> anyhow::Result<()> {
    let head = node.rpc("eth_blockNumber", serde_json::json!([])).await?;
    let head = u64::from_str_radix(head.as_str().unwrap_or("0x0").trim_start_matches("0x"), 16)?;
    let chain = custodian::config::ChainConfig {
        rpc_url: node.url.clone(),
        chain_id: 31337,
        start_block: Some(head),
        ..Default::default()
    };
    config.chains.insert("hteth".into(), chain);
    Ok(())
}

/// A service on a fresh SQLite file in `dir` watching `chain` as `coin` (deliveries to
/// 127.0.0.1 allowed, rate limits out of the way), with a user and an enterprise to own what
/// the bench adds: (state, user, enterprise).
#[allow(dead_code)] // the chain benches only
pub async fn chain_service_state(
    dir: &std::path::Path,
    coin: &str,
    chain: custodian::config::ChainConfig,
) -> anyhow::Result<(custodian::AppState, custodian::types::UserId, custodian::types::EnterpriseId)> {
    let mut config = custodian::config::Config {
        database_url: format!("sqlite://{}/bench.db", dir.display()),
        secret_key_file: Some(dir.join("key")),
        ..Default::default()
    };
    std::fs::write(dir.join("key"), "22".repeat(32))?;
    config.delivery.allowed_cidrs = vec!["127.0.0.1/32".parse()?];
    config.rate_limit.requests = 1_000_000;
    config.utxo.max_addresses_per_wallet = 10_000_000;
    config.chains.insert(coin.into(), chain);
    let state = custodian::AppState::new(config).await?;
    let (user, enterprise) = owner(&state).await?;
    Ok((state, user, enterprise))
}

/// The bench's user and enterprise, owners of what it adds: (user, enterprise).
#[allow(dead_code)] // the lookup and chain benches only
pub async fn owner(
    state: &custodian::AppState,
) -> anyhow::Result<(custodian::types::UserId, custodian::types::EnterpriseId)> {
    use custodian::identity::users;
    let user = users::create_user(
        &state.store,
        &state.identity.key,
        "bench@example.com",
        None,
        "benchmark password",
        false,
    )
    .await?;
    let enterprise = users::create_enterprise(&state.store, "Bench", None).await?;
    Ok((user.id, enterprise.id))
}

/// A child process killed (and waited for) when dropped.
#[allow(dead_code)] // each bench is its own crate
pub struct Killed(pub std::process::Child);

impl Drop for Killed {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// `VmRSS` of process `pid`, MiB (NaN when it cannot be read).
#[allow(dead_code)] // each bench is its own crate
pub fn rss_mib(pid: u32) -> f64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.split_whitespace().next())
        .and_then(|v| v.parse::<f64>().ok())
        .map_or(f64::NAN, |kb| kb / 1024.0)
}
