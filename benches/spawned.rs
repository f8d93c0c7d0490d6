//! The real `custodian` binary in its own process, for the login benchmarks: a fresh SQLite
//! database in a folder with one user, `serve` on a free port, killed when dropped.

use std::{
    io::Write,
    process::{Child, Command, Stdio},
    time::Duration,
};

/// A setting of the benchmark from the environment, or `default`.
pub fn setting(name: &str, default: u64) -> u64 {
    std::env::var(name).ok().and_then(|v| v.parse().ok()).unwrap_or(default)
}

/// The server process; killed when dropped.
pub struct Server(pub Child);

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Creates the user `email` with `password` in a SQLite database in `dir`, serves `bin` on it
/// (test environment), and waits until `/health` answers; the server and its base URL.
pub async fn start(
    bin: &str,
    dir: &std::path::Path,
    email: &str,
    password: &str,
) -> anyhow::Result<(Server, String)> {
    let db = format!("sqlite://{}", dir.join("bench.db").display());
    let mut create = Command::new(bin)
        .args(["user", "create", "--email", email, "--password-stdin", "--json"])
        .env("CUSTODIAN_DATABASE_URL", &db)
        .env("CUSTODIAN_ENVIRONMENT", "test")
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()?;
    if let Some(stdin) = create.stdin.as_mut() {
        writeln!(stdin, "{password}")?;
    }
    anyhow::ensure!(create.wait()?.success(), "user create failed");
    let port = std::net::TcpListener::bind("127.0.0.1:0")?.local_addr()?.port();
    let child = Command::new(bin)
        .args(["serve", "--listen", &format!("127.0.0.1:{port}")])
        .env("CUSTODIAN_DATABASE_URL", &db)
        .env("CUSTODIAN_ENVIRONMENT", "test")
        .env("RUST_LOG", "error")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()?;
    let server = Server(child);
    let base = format!("http://127.0.0.1:{port}");
    let probe = reqwest::Client::builder().no_proxy().build()?;
    for _ in 0..200 {
        if probe.get(format!("{base}/health")).send().await.is_ok_and(|r| r.status().is_success()) {
            return Ok((server, base));
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    anyhow::bail!("the server did not become healthy")
}
