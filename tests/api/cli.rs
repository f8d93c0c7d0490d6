//! The `custodian` binary itself: user creation output, configuration errors, shutdown.

use std::{
    io::Write,
    process::{Command, Stdio},
    time::Duration,
};

use serde_json::Value;

use crate::common::{Backend, TestDb};

const BIN: &str = env!("CARGO_BIN_EXE_custodian");

/// A folder to run the binary in, with the test's database: the default SQLite file under
/// ./data, or a PostgreSQL database of its own.
struct Scratch {
    dir: tempfile::TempDir,
    db: Option<TestDb>,
}

impl Scratch {
    fn new() -> Self {
        let dir = tempfile::tempdir().unwrap();
        let db = (crate::BACKEND == Backend::Postgres).then(|| TestDb::blocking(dir.path()));
        Scratch { dir, db }
    }

    fn cmd(&self) -> Command {
        let mut c = custodian(self.dir.path());
        if let Some(db) = &self.db {
            c.env("CUSTODIAN_DATABASE_URL", &db.url);
        }
        c
    }
}

fn custodian(dir: &std::path::Path) -> Command {
    let mut c = Command::new(BIN);
    c.current_dir(dir)
        .env_remove("CUSTODIAN_DATABASE_URL")
        .env_remove("CUSTODIAN_ENVIRONMENT")
        .env_remove("CUSTODIAN_LISTEN")
        .env_remove("CUSTODIAN_SECRET_KEY_FILE");
    c
}

#[test]
fn user_create_json_prints_exactly_one_object() {
    let scratch = Scratch::new();
    let dir = &scratch.dir;
    let mut child = scratch
        .cmd()
        .args([
            "user",
            "create",
            "--email",
            "Zoe@Example.com",
            "--name",
            "Zoe Q",
            "--password-stdin",
            "--json",
        ])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    child.stdin.take().unwrap().write_all(b"a long enough password\n").unwrap();
    let out = child.wait_with_output().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let v: Value = serde_json::from_slice(&out.stdout).expect("stdout is one JSON object");
    let obj = v.as_object().unwrap();
    let mut keys: Vec<_> = obj.keys().cloned().collect();
    keys.sort();
    assert_eq!(keys, ["email", "id", "otpauthUri", "totpSecret"]);
    assert_eq!(v["email"], "zoe@example.com");
    assert!(custodian::types::is_id(v["id"].as_str().unwrap()));
    assert!(v["otpauthUri"].as_str().unwrap().starts_with("otpauth://totp/"));
    // The default database and a 0600 master key were created under ./data.
    if crate::BACKEND == Backend::Sqlite {
        assert!(dir.path().join("data/custodian.db").exists());
    }
    let key = dir.path().join("data/master.key");
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        assert_eq!(std::fs::metadata(&key).unwrap().permissions().mode() & 0o777, 0o600);
    }
    // A short password is refused.
    let mut child = scratch
        .cmd()
        .args(["user", "create", "--email", "short@example.com", "--password-stdin"])
        .stdin(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    child.stdin.take().unwrap().write_all(b"short\n").unwrap();
    let out = child.wait_with_output().unwrap();
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stderr).contains("at least 12"));
}

#[test]
fn bad_setting_prints_one_line_and_exits_2() {
    let scratch = Scratch::new();
    let dir = &scratch.dir;
    let out = scratch.cmd().args(["migrate", "--environment", "staging"]).output().unwrap();
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(err.trim().lines().count(), 1, "{err}");
    let out = scratch.cmd().env("CUSTODIAN_LISTEN", "not-an-address").arg("migrate").output().unwrap();
    assert_eq!(out.status.code(), Some(2));
    for (k, v) in [
        ("CUSTODIAN_POSTGRES_SSLMODE", "sometimes"),
        ("CUSTODIAN_ROLE", "boss"),
        ("CUSTODIAN_DELIVERY_RETRY_SCHEDULE", "1,x"),
    ] {
        let out = scratch.cmd().env(k, v).arg("migrate").output().unwrap();
        assert_eq!(out.status.code(), Some(2), "{k}={v}");
    }
    assert_eq!(out.status.code(), Some(2));
    std::fs::write(dir.path().join("c.toml"), "listen = \"127.0.0.1:1\"\nbogus = 1\n").unwrap();
    let out = scratch.cmd().args(["migrate", "--config", "c.toml"]).output().unwrap();
    assert_eq!(out.status.code(), Some(2));
}

#[test]
fn a_bad_setting_names_what_the_user_set_and_where() {
    let scratch = Scratch::new();
    let dir = &scratch.dir;
    let line = |out: std::process::Output| {
        assert_eq!(out.status.code(), Some(2));
        let err = String::from_utf8_lossy(&out.stderr).trim().to_string();
        assert!(!err.contains("src/") && !err.contains("custodian::") && !err.contains("``"), "{err}");
        err
    };
    let err = line(scratch.cmd().env("CUSTODIAN_REQUEST_TIMEOUT", "soon").arg("migrate").output().unwrap());
    assert!(err.contains("environment variable CUSTODIAN_REQUEST_TIMEOUT"), "{err}");
    assert!(err.contains("expected a whole number"), "{err}");
    let err = line(scratch.cmd().env("CUSTODIAN_LOGIN_WINDOW", "x").arg("migrate").output().unwrap());
    assert!(err.contains("CUSTODIAN_LOGIN_WINDOW"), "{err}");
    let err = line(scratch.cmd().args(["migrate", "--environment", "staging"]).output().unwrap());
    assert!(err.contains("the flag --environment") && err.contains("production"), "{err}");
    std::fs::write(dir.path().join("c.toml"), "[delivery]\ntimeout = \"long\"\n").unwrap();
    let err = line(scratch.cmd().args(["migrate", "--config", "c.toml"]).output().unwrap());
    assert!(err.contains("delivery.timeout in ") && err.contains("c.toml"), "{err}");
}

#[test]
fn production_refuses_to_start_without_a_master_key() {
    let scratch = Scratch::new();
    let out = scratch
        .cmd()
        .args(["serve", "--environment", "production", "--listen", "127.0.0.1:0"])
        .output()
        .unwrap();
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("master key"));
}

#[test]
fn serve_stops_cleanly_on_sigterm() {
    let scratch = Scratch::new();
    let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
    let mut child = scratch
        .cmd()
        .args(["serve", "--listen", &format!("127.0.0.1:{port}")])
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut up = false;
    for _ in 0..100 {
        if std::net::TcpStream::connect(("127.0.0.1", port)).is_ok() {
            up = true;
            break;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    assert!(up, "server did not start");
    let status = Command::new("kill").args(["-TERM", &child.id().to_string()]).status().unwrap();
    assert!(status.success());
    let mut code = None;
    for _ in 0..100 {
        if let Some(s) = child.try_wait().unwrap() {
            code = s.code();
            break;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    if code.is_none() {
        let _ = child.kill();
    }
    assert_eq!(code, Some(0));
}

#[test]
fn enterprise_and_template_commands_print_json() {
    let scratch = Scratch::new();
    let dir = &scratch.dir;
    let out = scratch.cmd().args(["enterprise", "create", "--name", "Acme Fund", "--json"]).output().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let e: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(e["name"], "Acme Fund");
    let id = e["id"].as_str().unwrap();
    assert!(custodian::types::is_id(id));

    let mut child = scratch
        .cmd()
        .args(["user", "create", "--email", "amy@example.com", "--password-stdin", "--json"])
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .spawn()
        .unwrap();
    child.stdin.take().unwrap().write_all(b"a long enough password\n").unwrap();
    assert!(child.wait().unwrap().success());
    let out = scratch
        .cmd()
        .args(["enterprise", "add-user", "--enterprise", id, "--email", "amy@example.com", "--admin"])
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let out = scratch
        .cmd()
        .args(["enterprise", "add-user", "--enterprise", &"0".repeat(32), "--email", "amy@example.com"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));

    std::fs::write(dir.path().join("t.json"), r#"{"scope":["profile"],"duration":60}"#).unwrap();
    let out =
        scratch.cmd().args(["token-template", "create", "--json-file", "t.json", "--json"]).output().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let t: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert!(custodian::types::is_id(t["id"].as_str().unwrap()));
    assert_eq!(t["fields"]["duration"], 60);
    std::fs::write(dir.path().join("bad.json"), r#"{"scope":["nope"]}"#).unwrap();
    let out = scratch.cmd().args(["token-template", "create", "--json-file", "bad.json"]).output().unwrap();
    assert_eq!(out.status.code(), Some(1));
}

#[test]
fn wallet_import_prints_a_json_summary_and_set_balance_updates() {
    let scratch = Scratch::new();
    let dir = &scratch.dir;
    let good = r#"{"id":"0123456789abcdef0123456789abcdef","label":"w","coin":"btc","allowBackupKeySigning":false,"approvalsRequired":1,"coinSpecific":{},"deleted":false,"disableTransactionNotifications":false,"hasLargeNumberOfAddresses":null,"isCold":false,"startDate":"2025-01-01T00:00:00Z"}"#;
    let bad = r#"{"id":"nope"}"#;
    std::fs::write(dir.path().join("w.ndjson"), format!("{good}\n{bad}\n")).unwrap();
    let out = scratch.cmd().args(["wallet", "import", "w.ndjson", "--json"]).output().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let s: Value = serde_json::from_slice(&out.stdout).expect("one JSON object");
    assert_eq!(s["imported"], 1);
    assert_eq!(s["updated"], 0);
    assert_eq!(s["rejected"][0]["line"], 2);
    assert_eq!(s["rejected"][0]["field"], "allowBackupKeySigning");
    assert!(!dir.path().join("data/master.key").exists(), "importing needs no master key");

    let out = scratch
        .cmd()
        .args(["wallet", "set-balance", "--id", "0123456789abcdef0123456789abcdef", "--balance", "123"])
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let out = scratch
        .cmd()
        .args(["wallet", "set-balance", "--id", "0123456789abcdef0123456789abcdef", "--balance", "1.5"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    let out = scratch
        .cmd()
        .args([
            "enterprise",
            "create",
            "--name",
            "Kept",
            "--id",
            "5f2a1c9e8d7b6a5f4e3d2c1b0a998877",
            "--json",
        ])
        .output()
        .unwrap();
    let e: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(e["id"], "5f2a1c9e8d7b6a5f4e3d2c1b0a998877");
}

#[test]
fn event_emit_fans_out_and_is_idempotent() {
    let scratch = Scratch::new();
    let dir = &scratch.dir;
    let ev = r#"{"eventId":"cli-1","type":"block","coin":"tbtc","blockId":"b1","confirmations":1}"#;
    std::fs::write(dir.path().join("e.json"), ev).unwrap();
    for _ in 0..2 {
        let out = scratch.cmd().args(["event", "emit", "--json-file", "e.json"]).output().unwrap();
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
        let r: Value = serde_json::from_slice(&out.stdout).unwrap();
        assert_eq!(r["eventId"], "cli-1");
        assert_eq!(r["notifications"], 0);
    }
    std::fs::write(dir.path().join("bad.json"), r#"{"eventId":"x","type":"nope"}"#).unwrap();
    let out = scratch.cmd().args(["event", "emit", "--json-file", "bad.json"]).output().unwrap();
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stderr).contains("webhook type"));
}

/// Runs the binary to completion; returns (success, standard error).
fn run_to_end(cmd: &mut Command) -> (bool, String) {
    let out = cmd.stdout(Stdio::null()).output().unwrap();
    (out.status.success(), String::from_utf8_lossy(&out.stderr).into_owned())
}

#[test]
fn a_defaulted_test_environment_refuses_a_public_address() {
    let scratch = Scratch::new();
    let (ok, stderr) = run_to_end(scratch.cmd().args(["serve", "--listen", "0.0.0.0:0"]));
    assert!(!ok, "serve must refuse");
    assert!(stderr.contains("refusing to serve the test environment"), "{stderr}");
}

#[test]
fn a_production_key_file_readable_by_others_is_refused() {
    use std::os::unix::fs::PermissionsExt;
    let scratch = Scratch::new();
    let key = scratch.dir.path().join("master.key");
    std::fs::write(&key, "ab".repeat(32)).unwrap();
    std::fs::set_permissions(&key, std::fs::Permissions::from_mode(0o644)).unwrap();
    let args = [
        "--environment",
        "production",
        "--secret-key-file",
        "master.key",
        "serve",
        "--listen",
        "127.0.0.1:0",
    ];
    let (ok, stderr) = run_to_end(scratch.cmd().args(args));
    assert!(!ok, "serve must refuse");
    assert!(stderr.contains("readable by group or others"), "{stderr}");
}

#[test]
fn the_sqlite_file_and_folder_are_private() {
    use std::os::unix::fs::PermissionsExt;
    let dir = tempfile::tempdir().unwrap();
    let (ok, stderr) = run_to_end(
        custodian(dir.path()).args(["migrate"]).env("CUSTODIAN_DATABASE_URL", "sqlite://private/db/c.db"),
    );
    assert!(ok, "{stderr}");
    let mode = |p: &str| std::fs::metadata(dir.path().join(p)).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode("private"), 0o700);
    assert_eq!(mode("private/db"), 0o700);
    assert_eq!(mode("private/db/c.db"), 0o600);
}

#[test]
fn a_generated_master_key_and_its_folder_are_private() {
    use std::os::unix::fs::PermissionsExt;
    let dir = tempfile::tempdir().unwrap();
    let mut cmd = custodian(dir.path());
    cmd.args(["user", "create", "--email", "keys@example.com", "--password-stdin"])
        .env("CUSTODIAN_DATABASE_URL", "sqlite://fresh/c.db")
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped());
    let mut child = cmd.spawn().unwrap();
    std::io::Write::write_all(child.stdin.as_mut().unwrap(), b"correct horse battery staple\n").unwrap();
    let out = child.wait_with_output().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let mode = |p: &str| std::fs::metadata(dir.path().join(p)).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode("fresh"), 0o700, "the folder the master key was generated in");
    assert_eq!(mode("fresh/master.key"), 0o600);
}

/// An operator command against a SQLite file whose write lock another process
/// holds waits for it, saying so, and succeeds once it is free; it never fails for that reason.
#[tokio::test]
async fn a_command_waits_for_a_locked_sqlite_database() {
    use sqlx::{Connection, Executor};
    if crate::BACKEND == Backend::Postgres {
        return;
    }
    let scratch = Scratch::new();
    assert!(scratch.cmd().arg("migrate").stderr(Stdio::null()).status().unwrap().success());
    let db = scratch.dir.path().join("data/custodian.db");
    let mut holder = sqlx::SqliteConnection::connect(&format!("sqlite://{}", db.display())).await.unwrap();
    holder.execute("BEGIN IMMEDIATE").await.unwrap();
    let mut child = scratch
        .cmd()
        .args(["enterprise", "create", "--name", "Waited", "--json"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    // The command says it waits; only then is the lock given up.
    let stderr = child.stderr.take().unwrap();
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        use std::io::BufRead;
        for line in std::io::BufReader::new(stderr).lines().map_while(Result::ok) {
            let _ = tx.send(line);
        }
    });
    let said = rx.recv_timeout(Duration::from_secs(20)).expect("a message while the lock is held");
    assert!(said.contains("waiting for the database"), "{said}");
    holder.execute("ROLLBACK").await.unwrap();
    let out = child.wait_with_output().unwrap();
    assert!(out.status.success(), "the command succeeded after the wait");
    let created: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(created["name"], "Waited");
}

#[test]
fn chains_are_set_in_the_environment_and_a_bad_one_is_one_line() {
    let scratch = Scratch::new();
    let contract = "0x5FbDB2315678afecb367f032d93F642f64180aa3";
    let out = scratch
        .cmd()
        .env("CUSTODIAN_CHAINS_HTETH_RPC_URL", "http://127.0.0.1:9/?key=secret-key")
        .env("CUSTODIAN_CHAINS_HTETH_CHAIN_ID", "31337")
        .env(
            "CUSTODIAN_CHAINS_HTETH_TOKENS",
            format!("[{{coin=\"hteth:tst\",contract=\"{contract}\",decimals=18}}]"),
        )
        .args(["chain", "status", "--json"])
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let status: Value = serde_json::from_str(text.trim()).unwrap_or_else(|e| panic!("{e}: {text}"));
    assert_eq!(status["coin"], "hteth");
    for (k, v, names) in [
        ("CUSTODIAN_CHAINS_HTETH_CHAIN_ID", "0", "chains.hteth.chain_id"),
        ("CUSTODIAN_CHAINS_HTETH_RPC_URL", "ftp://secret-key@node", "chains.hteth.rpc_url"),
        ("CUSTODIAN_CHAINS_BTC_RPC_URL", "http://node", "chains.btc"),
    ] {
        let mut cmd = scratch.cmd();
        cmd.env("CUSTODIAN_CHAINS_HTETH_RPC_URL", "http://127.0.0.1:9")
            .env("CUSTODIAN_CHAINS_HTETH_CHAIN_ID", "31337")
            .env("CUSTODIAN_CHAINS_BTC_CHAIN_ID", "1");
        if k != "CUSTODIAN_CHAINS_BTC_RPC_URL" {
            cmd.env_remove("CUSTODIAN_CHAINS_BTC_CHAIN_ID");
        }
        let out = cmd.env(k, v).args(["chain", "status"]).output().unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{k}={v}: {err}");
        assert_eq!(err.trim().lines().count(), 1, "{err}");
        assert!(err.contains(names), "{err}");
        // The node's URL may hold a key: it is never echoed.
        assert!(!err.contains("secret-key"), "{err}");
    }
}

#[test]
fn chains_are_set_with_serve_flags_and_a_bad_one_is_one_line() {
    let scratch = Scratch::new();
    for (flags, names) in [
        (vec!["--chain", "nonsense"], "--chain nonsense: expected COIN.KEY=VALUE"),
        (
            vec!["--chain", "hteth.rpc_url=http://127.0.0.1:9", "--chain", "hteth.chain_id=abc"],
            "the flag --chain hteth.chain_id",
        ),
        (vec!["--chain", "hteth.rpc_url=http://127.0.0.1:9"], "chains.hteth.chain_id"),
    ] {
        let out = scratch.cmd().arg("serve").args(&flags).output().unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{flags:?}: {err}");
        assert_eq!(err.trim().lines().count(), 1, "{err}");
        assert!(err.contains(names), "{flags:?}: {err}");
    }
    // Good flags: the chain is watched (its node is away, which /health says).
    let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
    let mut child = scratch
        .cmd()
        .args(["serve", "--listen", &format!("127.0.0.1:{port}")])
        .args(["--chain", "hteth.rpc_url=http://127.0.0.1:9", "--chain", "hteth.chain_id=31337"])
        .args(["--chain", "hteth.poll_interval_ms=100"])
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut health = String::new();
    for _ in 0..100 {
        if let Ok(mut s) = std::net::TcpStream::connect(("127.0.0.1", port)) {
            use std::io::{Read, Write};
            let _ = s.write_all(b"GET /health HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n");
            health.clear();
            let _ = s.read_to_string(&mut health);
            if health.contains("\"error\"") {
                break;
            }
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    let _ = child.kill();
    let _ = child.wait();
    assert!(health.contains("\"coin\":\"hteth\""), "{health}");
    assert!(health.contains("\"error\":\"node:"), "{health}");
}

#[test]
fn the_ecdh_key_is_made_once_sealed_and_shown_as_an_xpub() {
    let scratch = Scratch::new();
    let show = |cmd: &mut Command| {
        let out = cmd.args(["ecdh", "show-xpub"]).output().unwrap();
        (
            out.status.code(),
            String::from_utf8_lossy(&out.stdout).trim().to_string(),
            String::from_utf8_lossy(&out.stderr).to_string(),
        )
    };
    let (code, first, err) = show(&mut scratch.cmd());
    assert_eq!(code, Some(0), "{err}");
    assert!(first.starts_with("xpub") && first.len() == 111, "{first}");
    let (_, second, _) = show(&mut scratch.cmd());
    assert_eq!(first, second, "made once");
    // Sealed at rest: on SQLite, no private key text in the database's files.
    if scratch.db.is_none() {
        for entry in std::fs::read_dir(scratch.dir.path().join("data")).unwrap() {
            let bytes = std::fs::read(entry.unwrap().path()).unwrap();
            // Every master xprv serializes as `xprv9s…` (a column name holds `xprv` alone).
            assert!(!bytes.windows(6).any(|w| w == b"xprv9s"), "an xprv in the clear");
        }
    }
    // Another master key cannot open it, and does not make a second one.
    let other = scratch.dir.path().join("other.key");
    std::fs::write(&other, "11".repeat(32)).unwrap();
    std::fs::set_permissions(&other, std::os::unix::fs::PermissionsExt::from_mode(0o600)).unwrap();
    let (code, out, err) = show(scratch.cmd().env("CUSTODIAN_SECRET_KEY_FILE", &other));
    assert_eq!(code, Some(1), "{out}");
    assert!(err.contains("cannot decrypt a stored secret"), "{err}");
    assert_eq!(show(&mut scratch.cmd()).1, first);
}

#[test]
fn passkey_settings_are_read_from_the_environment_and_bad_ones_refused_at_start() {
    let scratch = Scratch::new();
    let run = |vars: &[(&str, &str)]| {
        let mut cmd = scratch.cmd();
        for (k, v) in vars {
            cmd.env(k, v);
        }
        let out = cmd.args(["ecdh", "show-xpub"]).output().unwrap();
        (out.status.code(), String::from_utf8_lossy(&out.stderr).to_string())
    };
    let origins = "https://custody.example, https://console.custody.example";
    let good =
        run(&[("CUSTODIAN_PASSKEYS_RP_ID", "custody.example"), ("CUSTODIAN_PASSKEYS_ORIGINS", origins)]);
    assert_eq!(good.0, Some(0), "{}", good.1);
    let (code, err) = run(&[("CUSTODIAN_PASSKEYS_RP_ID", "127.0.0.1")]);
    assert_ne!(code, Some(0));
    assert!(err.contains("passkeys.rp_id"), "{err}");
    // An origin outside the relying party's domain.
    let (code, err) = run(&[("CUSTODIAN_PASSKEYS_ORIGINS", "https://evil.example")]);
    assert_ne!(code, Some(0));
    assert!(err.contains("passkeys"), "{err}");
}

/// `[prices.<coin>]` in the environment: a feed read through the chain's node, which here does
/// not answer, gives no price (the breaker holds); a bad feed, age or chain is one line naming it.
#[test]
fn price_feeds_are_set_in_the_environment_and_a_bad_one_is_one_line() {
    let scratch = Scratch::new();
    let feed = "0x5FbDB2315678afecb367f032d93F642f64180aa3";
    let chain = |cmd: &mut Command| {
        cmd.env("CUSTODIAN_CHAINS_HTETH_RPC_URL", "http://127.0.0.1:9")
            .env("CUSTODIAN_CHAINS_HTETH_CHAIN_ID", "31337");
    };
    let mut cmd = scratch.cmd();
    chain(&mut cmd);
    let out = cmd
        .env("CUSTODIAN_PRICES_HTETH_FEED", feed)
        .args(["price", "show", "--coin", "hteth"])
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert_eq!(text.trim(), "hteth: no price now: the price feed of hteth could not be read");
    // A feed's coin cannot be given a price by hand: the feed would be read instead.
    let mut cmd = scratch.cmd();
    chain(&mut cmd);
    let out = cmd
        .env("CUSTODIAN_PRICES_HTETH_FEED", feed)
        .args(["price", "set", "--coin", "hteth", "--usd", "1"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1), "{}", String::from_utf8_lossy(&out.stderr));
    for (k, v, names) in [
        ("CUSTODIAN_PRICES_HTETH_FEED", "0x12", "prices.hteth.feed"),
        ("CUSTODIAN_PRICES_HTETH_MAX_AGE", "0", "prices.hteth.max_age"),
        ("CUSTODIAN_PRICES_TETH_FEED", feed, "chains.teth"),
    ] {
        let mut cmd = scratch.cmd();
        chain(&mut cmd);
        if k == "CUSTODIAN_PRICES_HTETH_MAX_AGE" {
            cmd.env("CUSTODIAN_PRICES_HTETH_FEED", feed);
        }
        let out = cmd.env(k, v).args(["price", "show", "--coin", "hteth"]).output().unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{k}={v}: {err}");
        assert_eq!(err.trim().lines().count(), 1, "{err}");
        assert!(err.contains(names), "{err}");
    }
}

/// `custodian price set` and `price show` on a database with no server: a bad price is refused
/// with the rule and exit 1, changing nothing; a good one is printed back as the breaker reads it.
#[test]
fn price_set_refuses_a_bad_price_and_show_prints_the_set_one() {
    let scratch = Scratch::new();
    let show = || {
        let out = scratch.cmd().args(["price", "show", "--coin", "hteth"]).output().unwrap();
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
        String::from_utf8_lossy(&out.stdout).trim().to_string()
    };
    assert_eq!(show(), "hteth: no price source; its withdrawals are not valued");
    for bad in ["0", "abc", "1.5e3", "1234567890123456"] {
        let out = scratch.cmd().args(["price", "set", "--coin", "hteth", "--usd", bad]).output().unwrap();
        assert_eq!(out.status.code(), Some(1), "{bad}");
        assert!(String::from_utf8_lossy(&out.stderr).contains("a positive decimal of US dollars"), "{bad}");
    }
    assert_eq!(show(), "hteth: no price source; its withdrawals are not valued");
    let out = scratch.cmd().args(["price", "set", "--coin", "hteth", "--usd", "3000.250"]).output().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert_eq!(String::from_utf8_lossy(&out.stdout).trim(), "hteth is priced at 3000.25 USD");
    assert_eq!(show(), "hteth: 3000.25 USD");
}
