//! Running the real `custodian` binary as separate server processes on one database, for the
//! crash and scale-out tests.

use std::{
    io::Write,
    process::{Child, Command, Stdio},
    time::Duration,
};

use serde_json::{json, Value};

use crate::common::{TestDb, PASSWORD};

/// The wallet every process test uses.
pub const WALLET: &str = "0123456789abcdef0123456789abcdef";

/// A folder and database shared by several server processes, with a service admin and a wallet.
pub struct Cluster {
    pub dir: tempfile::TempDir,
    pub db: TestDb,
    /// Extra environment for every process (delivery settings).
    pub env: Vec<(String, String)>,
    pub client: reqwest::Client,
}

impl Cluster {
    /// Waits until the cluster's outbox has nothing due or in flight (see
    /// [`crate::common::wait_until_idle`]).
    pub async fn wait_until_idle(&self) {
        let config = custodian::config::Config { database_url: self.db.url.clone(), ..Default::default() };
        let store = custodian::store::open(&config).await.expect("open the cluster's database");
        crate::common::wait_until_idle(&store).await;
        store.close().await;
    }

    /// Creates the service admin `ops@example.com` and imports [`WALLET`] through the CLI.
    pub async fn new(env: &[(&str, &str)]) -> Self {
        let dir = tempfile::tempdir().unwrap();
        let db = TestDb::new(dir.path()).await;
        let env = env.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect();
        let c = Cluster { dir, db, env, client: reqwest::Client::builder().no_proxy().build().unwrap() };
        c.create_user("ops@example.com", true);
        let wallet = json!([{
            "id": WALLET, "label": "w", "coin": "tbtc", "allowBackupKeySigning": false, "approvalsRequired": 1,
            "coinSpecific": {}, "deleted": false, "disableTransactionNotifications": false,
            "hasLargeNumberOfAddresses": false, "isCold": false, "startDate": "2025-01-01T00:00:00Z",
        }]);
        std::fs::write(c.dir.path().join("w.json"), wallet.to_string()).unwrap();
        assert!(c.cmd(&["wallet", "import", "w.json"]).stdout(Stdio::null()).status().unwrap().success());
        c
    }

    /// The binary with the cluster's folder, database and environment.
    pub fn cmd(&self, args: &[&str]) -> Command {
        let mut c = Command::new(env!("CARGO_BIN_EXE_custodian"));
        c.args(args)
            .current_dir(self.dir.path())
            .env("CUSTODIAN_DATABASE_URL", &self.db.url)
            .env("CUSTODIAN_ENVIRONMENT", "test")
            .env_remove("CUSTODIAN_LISTEN")
            .env_remove("CUSTODIAN_SECRET_KEY_FILE")
            .stderr(Stdio::null());
        for (k, v) in &self.env {
            c.env(k, v);
        }
        c
    }

    /// Starts `custodian serve` on a free port and waits until /health answers.
    pub async fn start(&self) -> Server {
        self.start_role("all").await
    }

    /// [`Cluster::start`] with `--role` (api, worker or all).
    pub async fn start_role(&self, role: &str) -> Server {
        let port = free_port();
        let listen = format!("127.0.0.1:{port}");
        let child =
            self.cmd(&["serve", "--listen", &listen, "--role", role]).stdout(Stdio::null()).spawn().unwrap();
        self.until_healthy(Server { child: Some(child), base: format!("http://127.0.0.1:{port}") }).await
    }

    /// [`Cluster::start`] under a file-descriptor limit of `nofile` (soft and hard, through
    /// `prlimit`), its standard error written to `log`.
    pub async fn start_with_descriptors(&self, nofile: u64, log: &std::path::Path) -> Server {
        let port = free_port();
        let listen = format!("127.0.0.1:{port}");
        let serve = self.cmd(&["serve", "--listen", &listen]);
        let mut c = Command::new("prlimit");
        c.arg(format!("--nofile={nofile}:{nofile}")).arg(serve.get_program()).args(serve.get_args());
        c.current_dir(self.dir.path()).stdout(Stdio::null()).stderr(std::fs::File::create(log).unwrap());
        for (k, v) in serve.get_envs() {
            match v {
                Some(v) => c.env(k, v),
                None => c.env_remove(k),
            };
        }
        self.until_healthy(Server {
            child: Some(c.spawn().unwrap()),
            base: format!("http://127.0.0.1:{port}"),
        })
        .await
    }

    async fn until_healthy(&self, server: Server) -> Server {
        for _ in 0..200 {
            if self
                .client
                .get(format!("{}/health", server.base))
                .send()
                .await
                .is_ok_and(|r| r.status() == 200)
            {
                return server;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        panic!("server did not start");
    }

    /// Creates the user `email` (password [`PASSWORD`]) through the CLI, a service admin when
    /// `service_admin`.
    pub fn create_user(&self, email: &str, service_admin: bool) {
        let mut args = vec!["user", "create", "--email", email, "--password-stdin", "--json"];
        if service_admin {
            args.push("--service-admin");
        }
        let mut create = self.cmd(&args).stdin(Stdio::piped()).stdout(Stdio::piped()).spawn().unwrap();
        create.stdin.take().unwrap().write_all(format!("{PASSWORD}\n").as_bytes()).unwrap();
        assert!(create.wait_with_output().unwrap().status.success());
    }

    /// A session token of the service admin.
    pub async fn login(&self, base: &str) -> String {
        self.login_as(base, "ops@example.com").await
    }

    /// A session token of `email` (password [`PASSWORD`], the test OTP).
    pub async fn login_as(&self, base: &str, email: &str) -> String {
        let login: Value = self
            .client
            .post(format!("{base}/api/v2/internal/user/login"))
            .json(&json!({ "email": email, "password": PASSWORD, "otp": "000000" }))
            .send()
            .await
            .unwrap()
            .json()
            .await
            .unwrap();
        login["access_token"].as_str().unwrap().to_string()
    }

    /// Registers `n` transfer webhooks on [`WALLET`] pointing at `url`.
    pub async fn webhooks(&self, base: &str, token: &str, url: &str, n: usize) {
        for i in 0..n {
            let res = self
                .client
                .post(format!("{base}/api/v2/tbtc/wallet/{WALLET}/webhooks"))
                .bearer_auth(token)
                .json(&json!({ "type": "transfer", "url": format!("{url}?h={i}") }))
                .send()
                .await
                .unwrap();
            assert_eq!(res.status(), 200);
        }
    }

    /// Posts transfer events `{prefix}-{i}` for `i` in `range`, to the servers in turn.
    pub async fn events(&self, bases: &[&str], token: &str, prefix: &str, range: std::ops::Range<usize>) {
        for i in range {
            let base = bases[i % bases.len()];
            let res = self
                .client
                .post(format!("{base}/api/v2/internal/events"))
                .bearer_auth(token)
                .json(&json!({ "eventId": format!("{prefix}-{i}"), "type": "transfer", "walletId": WALLET }))
                .send()
                .await
                .unwrap();
            assert_eq!(res.status(), 200);
        }
    }
}

/// A running server process; killed when dropped, so a failing test leaves none behind.
pub struct Server {
    child: Option<Child>,
    pub base: String,
}

impl Server {
    /// SIGKILL: the process dies at once, mid-delivery.
    pub fn kill(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }

    /// SIGTERM: a clean stop.
    pub fn stop(mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = Command::new("kill").args(["-TERM", &c.id().to_string()]).status();
            let _ = c.wait();
        }
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        self.kill();
    }
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port()
}

/// Distinct `webhook-id` headers (notification ids) among `received`.
pub fn distinct(received: &[crate::receiver::Received]) -> usize {
    received
        .iter()
        .filter_map(|r| r.headers.get("webhook-id").and_then(|v| v.to_str().ok()))
        .collect::<std::collections::HashSet<_>>()
        .len()
}
