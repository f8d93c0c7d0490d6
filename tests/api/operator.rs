//! The operator's commands (docs/decisions.md#token-and-session-lifecycle), run as the real binary on the test's database in the
//! production environment (real TOTP codes, the test's master key file).

use std::{io::Write, process::Stdio};

use custodian::config::Environment;
use serde_json::Value;

use crate::common::*;

async fn prod_app() -> TestApp {
    spawn_app_with(|c| c.environment = Environment::Production).await
}

/// Runs `custodian <args>` on `app`'s database and key, feeding `stdin`; returns (code, stdout).
pub fn run(app: &TestApp, args: &[&str], stdin: &str) -> (i32, String) {
    let mut command = std::process::Command::new(env!("CARGO_BIN_EXE_custodian"));
    // The server under test writes to the same SQLite file; a loaded machine may hold its
    // write lock for longer than the default 5 s.
    command.args(args).env("CUSTODIAN_DATABASE_URL", &app._db.url).env("CUSTODIAN_SQLITE_BUSY_TIMEOUT", "30");
    match &app.state.config.secret_key_file {
        Some(key) => command.env("CUSTODIAN_ENVIRONMENT", "production").env("CUSTODIAN_SECRET_KEY_FILE", key),
        None => command.env("CUSTODIAN_ENVIRONMENT", "test"),
    };
    let mut child = command
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("run custodian");
    child.stdin.take().expect("stdin").write_all(stdin.as_bytes()).expect("write stdin");
    let out = child.wait_with_output().expect("wait");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success() || !stderr.is_empty(), "a failure says why");
    if !out.status.success() {
        eprintln!("custodian {args:?} failed: {stderr}");
    }
    (out.status.code().unwrap_or(-1), String::from_utf8_lossy(&out.stdout).into_owned())
}

/// Logs in with the user's TOTP code `step` steps from now (each step once: RFC 6238 replay).
/// A login with the code of `step` steps from now. A 401 that crossed a step boundary (the
/// code was made in one step and checked in the next, past the window when `step` is -1) is
/// tried once more with a fresh code.
async fn login_at(app: &TestApp, user: &TestUser, password: &str, step: i64) -> reqwest::Response {
    let now_step = || custodian::clock::wall_now().div_euclid(custodian::identity::totp::STEP as i64);
    let before = now_step();
    let res = app.login_raw(&user.email, password, &user.code(step)).await;
    if res.status() == 401 && now_step() != before {
        return app.login_raw(&user.email, password, &user.code(step)).await;
    }
    res
}

async fn session(app: &TestApp, user: &TestUser, step: i64) -> String {
    let body = expect_json(login_at(app, user, PASSWORD, step).await, 200).await;
    body["access_token"].as_str().expect("token").to_string()
}

async fn audited(app: &TestApp) -> Vec<String> {
    app.raw_sql("SELECT type FROM audit_log ORDER BY seq").await
}

#[tokio::test]
async fn a_deactivated_user_loses_every_token_and_cannot_log_in() {
    let app = prod_app().await;
    let user = app.create_user("leaver@example.com").await;
    let s = session(&app, &user, -1).await;
    let (code, out) = run(&app, &["user", "deactivate", "--email", &user.email], "");
    assert_eq!(
        (code, out.trim()),
        (0, "leaver@example.com is deactivated: logins refused, 1 tokens revoked")
    );
    assert_error(app.me(&s).await, 401, "InvalidToken").await;
    assert_eq!(login_at(&app, &user, PASSWORD, 0).await.status(), 401);
    assert_eq!(run(&app, &["user", "activate", "--email", &user.email], "").0, 0);
    assert_eq!(login_at(&app, &user, PASSWORD, 0).await.status(), 200);
    let types = audited(&app).await;
    assert!(
        types.contains(&"user.deactivated".into()) && types.contains(&"user.activated".into()),
        "{types:?}"
    );
    let (code, _) = run(&app, &["user", "deactivate", "--email", "nobody@example.com"], "");
    assert_eq!(code, 1);
}

#[tokio::test]
async fn a_reset_otp_secret_replaces_the_old_one_at_once() {
    let app = prod_app().await;
    let user = app.create_user("lostphone@example.com").await;
    let (code, out) = run(&app, &["user", "reset-otp", "--email", &user.email, "--json"], "");
    assert_eq!(code, 0);
    let created: Value = serde_json::from_str(out.trim()).expect("one JSON object");
    assert!(created["otpauthUri"].as_str().is_some_and(|u| u.starts_with("otpauth://totp/")));
    let res = login_at(&app, &user, PASSWORD, 0).await;
    assert_error(res, 401, "InvalidOtp").await;
    let seed = totp_rs::Secret::Encoded(created["totpSecret"].as_str().unwrap().into()).to_bytes().unwrap();
    let fresh = TestUser { id: user.id.clone(), email: user.email.clone(), seed };
    assert_eq!(login_at(&app, &fresh, PASSWORD, 0).await.status(), 200);
    assert!(audited(&app).await.contains(&"user.otp_reset".into()));
}

#[tokio::test]
async fn set_password_replaces_the_password() {
    let app = prod_app().await;
    let user = app.create_user("forgetful@example.com").await;
    let new = "a brand new passphrase";
    let (code, out) =
        run(&app, &["user", "set-password", "--email", &user.email, "--password-stdin"], &format!("{new}\n"));
    assert_eq!((code, out.trim()), (0, "password of forgetful@example.com set"));
    assert_eq!(login_at(&app, &user, PASSWORD, -1).await.status(), 401);
    assert_eq!(login_at(&app, &user, new, -1).await.status(), 200);
    let (code, _) =
        run(&app, &["user", "set-password", "--email", &user.email, "--password-stdin"], "short\n");
    assert_eq!(code, 1, "too short");
    assert!(audited(&app).await.contains(&"user.password_set".into()));
}

#[tokio::test]
async fn tokens_are_listed_and_revoked_in_an_emergency() {
    let app = prod_app().await;
    let user = app.create_user("breached@example.com").await;
    let (s1, s2) = (session(&app, &user, -1).await, session(&app, &user, 0).await);
    let (code, out) = run(&app, &["token", "list", "--user", &user.email, "--json"], "");
    assert_eq!(code, 0);
    let listed: Vec<Value> = serde_json::from_str(out.trim()).expect("a JSON array");
    assert_eq!(listed.len(), 2);
    assert!(!out.contains(&s1) && !out.contains(&s2), "no secret listed");
    let args = ["token", "revoke", "--user", &user.email, "--created-from", "10.0.0.0/8"];
    assert_eq!(run(&app, &args, "").1.trim(), "0 tokens revoked");
    assert_eq!(app.me(&s1).await.status(), 200);
    let one = listed[0]["id"].as_str().unwrap();
    assert_eq!(run(&app, &["token", "revoke", "--id", one], "").1.trim(), "1 tokens revoked");
    let args = ["token", "revoke", "--user", &user.email, "--created-from", "127.0.0.0/8"];
    assert_eq!(run(&app, &args, "").1.trim(), "1 tokens revoked");
    // The command is another process: the server's cache learns of it within a second.
    let since = std::time::Instant::now();
    refused_within_a_second(since, "InvalidToken", || app.me(&s1)).await;
    refused_within_a_second(since, "InvalidToken", || app.me(&s2)).await;
    assert_eq!(run(&app, &["token", "revoke", "--id", one], "").0, 1, "already revoked");
    let types = audited(&app).await;
    assert_eq!(types.iter().filter(|t| *t == "token.revoked").count(), 2, "{types:?}");
}
