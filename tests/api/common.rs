//! The test harness: the real server on 127.0.0.1:0 over a fresh SQLite file, a real HTTP
//! client, and helpers to create users and sign in.

use std::path::PathBuf;

use custodian::{
    config::{Config, Environment},
    identity::{totp, users},
    AppState,
};
use reqwest::{Client, Response};
use serde_json::{json, Value};

pub use crate::watchdog::{init_test_log, watch_this_test};

pub const PASSWORD: &str = "correct horse battery staple";

/// Which database a test binary runs on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Backend {
    Sqlite,
    Postgres,
}

/// A fresh database for one test: a SQLite file in the test's folder, or a PostgreSQL database
/// created on CUSTODIAN_TEST_POSTGRES_URL's server and dropped when this is dropped.
pub struct TestDb {
    pub url: String,
    admin: Option<(String, String)>,
}

fn admin_url() -> String {
    std::env::var("CUSTODIAN_TEST_POSTGRES_URL").expect("CUSTODIAN_TEST_POSTGRES_URL")
}

/// `url` with its database name replaced by `name`.
fn with_database(url: &str, name: &str) -> String {
    let (base, query) =
        url.split_once('?').map(|(b, q)| (b, format!("?{q}"))).unwrap_or((url, String::new()));
    let cut = base
        .rfind('/')
        .filter(|i| base[..*i].contains("//") && !base[..*i].ends_with('/'))
        .unwrap_or(base.len());
    format!("{}/{name}{query}", &base[..cut])
}

async fn pg_admin(sql: &str) {
    use sqlx::Connection;
    let mut conn =
        sqlx::PgConnection::connect(&admin_url()).await.expect("connect to CUSTODIAN_TEST_POSTGRES_URL");
    sqlx::query(sql).execute(&mut conn).await.unwrap_or_else(|e| panic!("{sql}: {e}"));
}

impl TestDb {
    /// The database for a test whose files live in `dir`; the test is watched from here
    /// ([`watch_this_test`]).
    pub async fn new(dir: &std::path::Path) -> Self {
        watch_this_test();
        Self::create(dir).await
    }

    async fn create(dir: &std::path::Path) -> Self {
        match crate::BACKEND {
            Backend::Sqlite => {
                TestDb { url: format!("sqlite://{}", dir.join("custodian.db").display()), admin: None }
            }
            Backend::Postgres => {
                let name = format!("custodian_test_{}", custodian::ids::new_id());
                pg_admin(&format!("CREATE DATABASE {name}")).await;
                TestDb { url: with_database(&admin_url(), &name), admin: Some((admin_url(), name)) }
            }
        }
    }

    /// [`TestDb::new`] for synchronous tests.
    pub fn blocking(dir: &std::path::Path) -> Self {
        watch_this_test();
        let dir = dir.to_path_buf();
        std::thread::spawn(move || {
            tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .unwrap()
                .block_on(TestDb::create(&dir))
        })
        .join()
        .unwrap()
    }
}

impl Drop for TestDb {
    fn drop(&mut self) {
        if let Some((_, name)) = self.admin.take() {
            let _ = std::thread::spawn(move || {
                if let Ok(rt) = tokio::runtime::Builder::new_current_thread().enable_all().build() {
                    rt.block_on(pg_admin(&format!("DROP DATABASE IF EXISTS {name} WITH (FORCE)")));
                }
            })
            .join();
        }
    }
}

pub struct TestApp {
    pub base: String,
    pub client: Client,
    pub state: AppState,
    /// Dropped after the server: the test's database, then its folder.
    pub _db: TestDb,
    pub _dir: tempfile::TempDir,
}

/// A user created through the library (as the CLI does), with its TOTP seed.
pub struct TestUser {
    pub id: String,
    pub email: String,
    pub seed: Vec<u8>,
}

impl TestUser {
    /// The TOTP code `offset` steps from now (RFC 6238, 30 s steps).
    pub fn code(&self, offset: i64) -> String {
        let at = custodian::clock::wall_now() + offset * totp::STEP as i64;
        totp::code_at(&self.seed, at as u64).expect("code")
    }
}

pub async fn spawn_app() -> TestApp {
    spawn_app_with(|_| {}).await
}

/// Boots the server with the default test configuration changed by `tweak`.
pub async fn spawn_app_with(tweak: impl FnOnce(&mut Config)) -> TestApp {
    init_test_log();
    let dir = tempfile::tempdir().expect("tempdir");
    let db = TestDb::new(dir.path()).await;
    let mut config = Config { database_url: db.url.clone(), ..Config::default() };
    // A hundred tests share two cores and one PostgreSQL: give a slow moment room. The outage
    // test puts the defaults back.
    config.postgres.acquire_timeout_ms = 10_000;
    config.postgres.statement_timeout = 30;
    tweak(&mut config);
    if config.environment == Environment::Production && config.secret_key_file.is_none() {
        let key: PathBuf = dir.path().join("prod.key");
        std::fs::write(&key, "11".repeat(32)).expect("key");
        // Production refuses a key file others can read.
        std::fs::set_permissions(&key, std::os::unix::fs::PermissionsExt::from_mode(0o600))
            .expect("key mode");
        config.secret_key_file = Some(key);
    }
    let state = AppState::new(config).await.expect("state");
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let addr = listener.local_addr().expect("addr");
    tokio::spawn(custodian::serve(listener, state.clone(), std::future::pending()));
    TestApp {
        base: format!("http://{addr}"),
        client: Client::builder().no_proxy().build().expect("client"),
        state,
        _db: db,
        _dir: dir,
    }
}

impl TestApp {
    pub fn url(&self, path: &str) -> String {
        format!("{}{}", self.base, path)
    }

    pub async fn create_user(&self, email: &str) -> TestUser {
        self.create_user_with(email, false).await
    }

    pub async fn create_user_with(&self, email: &str, service_admin: bool) -> TestUser {
        let c = users::create_user(
            &self.state.store,
            &self.state.identity.key,
            email,
            Some("Test User"),
            PASSWORD,
            service_admin,
        )
        .await
        .expect("create user");
        let seed = totp_rs::Secret::Encoded(c.totp_secret.clone()).to_bytes().expect("seed");
        TestUser { id: c.id.to_string(), email: c.email, seed }
    }

    pub async fn create_enterprise(&self, name: &str, members: &[(&TestUser, bool)]) -> String {
        let e = users::create_enterprise(&self.state.store, name, None).await.expect("enterprise");
        for (u, admin) in members {
            let user: custodian::types::UserId = u.id.parse().expect("user id");
            self.state.store.upsert_membership(&e.id, &user, *admin, &[]).await.expect("member");
        }
        e.id.to_string()
    }

    pub async fn post(&self, path: &str, body: &Value) -> Response {
        self.client.post(self.url(path)).json(body).send().await.expect("request")
    }

    pub async fn post_auth(&self, path: &str, token: &str, body: &Value) -> Response {
        self.client.post(self.url(path)).bearer_auth(token).json(body).send().await.expect("request")
    }

    pub async fn put_auth(&self, path: &str, token: &str, body: &Value) -> Response {
        self.client.put(self.url(path)).bearer_auth(token).json(body).send().await.expect("request")
    }

    pub async fn get_auth(&self, path: &str, token: &str) -> Response {
        self.client.get(self.url(path)).bearer_auth(token).send().await.expect("request")
    }

    pub async fn login_raw(&self, email: &str, password: &str, otp: &str) -> Response {
        self.post("/api/v2/internal/user/login", &json!({ "email": email, "password": password, "otp": otp }))
            .await
    }

    /// Logs in with the test environment's fixed code; returns the session token.
    pub async fn login(&self, user: &TestUser) -> String {
        let res = self.login_raw(&user.email, PASSWORD, "000000").await;
        assert_eq!(res.status(), 200, "login failed");
        let body: Value = res.json().await.expect("json");
        body["access_token"].as_str().expect("access_token").to_string()
    }

    /// Creates an access token from `parent` with `fields` (label and otp added when absent).
    pub async fn create_token(&self, parent: &str, mut fields: Value) -> Response {
        let obj = fields.as_object_mut().expect("object");
        obj.entry("label").or_insert(json!("test token"));
        obj.entry("otp").or_insert(json!("000000"));
        self.post_auth("/api/v2/user/accesstoken", parent, &fields).await
    }

    /// Creates an access token and returns its secret value.
    pub async fn token_with(&self, parent: &str, fields: Value) -> String {
        let res = self.create_token(parent, fields).await;
        let status = res.status();
        let body: Value = res.json().await.expect("json");
        assert_eq!(status, 200, "token creation failed: {body}");
        body["token"].as_str().expect("token").to_string()
    }
}

/// One helper per endpoint the suites call often: each sends one request of the spec and returns
/// the response, or, for the `_ok` forms, asserts 200 and decodes the body.
impl TestApp {
    /// GET /api/v2/user/me (§4.2).
    pub async fn me(&self, token: &str) -> Response {
        self.get_auth("/api/v2/user/me", token).await
    }

    /// POST /api/v2/internal/wallet (§4.1) with `query` (e.g. `?expandBalance=true`) and `body`.
    pub async fn lookup(&self, token: &str, query: &str, body: &Value) -> Response {
        self.post_auth(&format!("/api/v2/internal/wallet{query}"), token, body).await
    }

    /// The ids of the wallets the lookup of `ids` returns, in order (200 asserted).
    pub async fn lookup_ids<S: AsRef<str>>(&self, token: &str, ids: &[S]) -> Vec<String> {
        let ids: Vec<&str> = ids.iter().map(AsRef::as_ref).collect();
        let body = expect_json(self.lookup(token, "", &json!({ "ids": ids })).await, 200).await;
        body["wallets"]
            .as_array()
            .expect("wallets")
            .iter()
            .filter_map(|w| w["id"].as_str())
            .map(String::from)
            .collect()
    }

    /// POST /api/v2/webhook/secret for `enterprise`.
    pub async fn rotate_secret(&self, token: &str, enterprise: &str) -> Response {
        self.post_auth("/api/v2/webhook/secret", token, &json!({ "enterpriseId": enterprise })).await
    }

    /// POST /api/v2/internal/events (§4.11) with `event`.
    pub async fn ingest(&self, token: &str, event: &Value) -> Response {
        self.post_auth("/api/v2/internal/events", token, event).await
    }
}

/// Asserts `status` (showing the body when it differs) and decodes the JSON body.
pub async fn expect_json(res: Response, status: u16) -> Value {
    let got = res.status().as_u16();
    let text = res.text().await.expect("body");
    assert_eq!(got, status, "status, with body {text}");
    serde_json::from_str(&text).unwrap_or_else(|e| panic!("JSON body ({e}): {text}"))
}

/// Asserts the §7 error shape and that `requestId` equals the `request-id` header; returns the body.
pub async fn assert_error(res: Response, status: u16, name: &str) -> Value {
    assert_eq!(res.status().as_u16(), status, "status");
    let header =
        res.headers().get("request-id").and_then(|v| v.to_str().ok()).expect("request-id header").to_string();
    let body: Value = res.json().await.expect("error body is JSON");
    assert_eq!(body["name"], name, "name in {body}");
    assert!(body["error"].as_str().is_some_and(|s| !s.is_empty()), "error message in {body}");
    assert!(body["context"].is_object(), "context object in {body}");
    assert_eq!(body["requestId"], header, "requestId equals the header");
    body
}

/// Asks with `token` (`ask`) until it is refused with 401 `name`, and asserts that no request
/// started a second or more after `since` was let through: a change committed by another
/// process takes effect within 1 s (docs/decisions.md#performance, the authentication cache's bound).
pub async fn refused_within_a_second<F, Fut>(since: std::time::Instant, name: &str, mut ask: F)
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Response>,
{
    loop {
        let started = std::time::Instant::now();
        let res = ask().await;
        if res.status() == 401 {
            assert_error(res, 401, name).await;
            return;
        }
        assert_eq!(res.status(), 200, "before the change takes effect the token still works");
        let late = started.duration_since(since);
        assert!(late < std::time::Duration::from_secs(1), "still accepted {late:?} after the change");
        tokio::time::sleep(std::time::Duration::from_millis(10)).await;
    }
}

/// Polls `check` until it gives a value (panics after `secs`, naming `what`): the bounded wait
/// every test uses instead of sleeping and hoping.
pub async fn until<T, F, Fut>(what: &str, secs: u64, mut check: F) -> T
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Option<T>>,
{
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(secs);
    loop {
        if let Some(v) = check().await {
            return v;
        }
        assert!(std::time::Instant::now() < deadline, "timed out after {secs} s waiting for {what}");
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
}

/// Polls `check` (which reports how far the work has come, and a value once done) until it
/// gives a value. Panics, naming `what` and the last progress, only when the progress has not
/// moved for `stall_secs`: long work on a loaded machine is waited for, a stuck one is not.
pub async fn until_advancing<T, F, Fut>(what: &str, stall_secs: u64, mut check: F) -> T
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = (u64, Option<T>)>,
{
    let stall = std::time::Duration::from_secs(stall_secs);
    let (mut last, mut moved) = (None, std::time::Instant::now());
    loop {
        let (progress, done) = check().await;
        if let Some(v) = done {
            return v;
        }
        if last != Some(progress) {
            (last, moved) = (Some(progress), std::time::Instant::now());
        }
        assert!(moved.elapsed() < stall, "stuck at {progress} for {stall_secs} s waiting for {what}");
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
}

/// Waits until `store` has no notification due or in flight: every delivery has finished, so
/// whatever a receiver got is all it will get.
pub async fn wait_until_idle(store: &custodian::store::DynStore) {
    until("the outbox to drain", 20, || async {
        let s = store.delivery_stats(store.clock().now_ms()).await.expect("stats");
        (s.due == 0 && s.in_flight == 0).then_some(())
    })
    .await
}

impl TestApp {
    /// Imports a tbtc wallet `id` of `enterprise` whose `users` are admins of it.
    pub async fn import_wallet(&self, id: &str, enterprise: &str, users: &[&str]) {
        let users: Vec<Value> =
            users.iter().map(|u| json!({ "user": u, "permissions": ["admin"] })).collect();
        let record = json!({
            "id": id, "label": "hot", "coin": "tbtc", "type": "hot", "m": 2, "n": 3, "enterprise": enterprise,
            "organization": "org-7", "allowBackupKeySigning": false, "approvalsRequired": 1, "coinSpecific": {},
            "deleted": false, "disableTransactionNotifications": false, "hasLargeNumberOfAddresses": false,
            "isCold": false, "startDate": "2025-01-01T00:00:00Z", "users": users,
        });
        let s =
            custodian::wallets::import::import(&self.state.store, &json!([record]).to_string(), |_, _| {})
                .await
                .expect("import");
        assert_eq!(s.imported, 1, "{:?}", s);
    }

    /// Runs `sql` on the test's database directly (bypassing the service), returning the first
    /// column of each row as text: for checking what is stored at rest, or ageing rows.
    pub async fn raw_sql(&self, sql: &str) -> Vec<String> {
        use sqlx::Row;
        match crate::BACKEND {
            Backend::Sqlite => {
                let pool = sqlx::SqlitePool::connect(&self._db.url).await.expect("connect");
                let rows = sqlx::query(sql).fetch_all(&pool).await.unwrap_or_else(|e| panic!("{sql}: {e}"));
                // Closed here, not dropped: a dropped pool's connection may hold the file's
                // write lock until it is reaped, and an operator command run next waits on it.
                pool.close().await;
                rows.iter().filter_map(|r| r.try_get::<String, _>(0).ok()).collect()
            }
            Backend::Postgres => {
                let pool = sqlx::PgPool::connect(&self._db.url).await.expect("connect");
                let rows = sqlx::query(sql).fetch_all(&pool).await.unwrap_or_else(|e| panic!("{sql}: {e}"));
                rows.iter().filter_map(|r| r.try_get::<String, _>(0).ok()).collect()
            }
        }
    }
}

/// Reads one unlabelled gauge or counter from /metrics.
pub async fn metric_value(app: &TestApp, name: &str) -> i64 {
    let text = app.client.get(app.url("/metrics")).send().await.unwrap().text().await.unwrap();
    text.lines()
        .find_map(|l| l.strip_prefix(name).and_then(|v| v.trim().parse().ok()))
        .unwrap_or_else(|| panic!("{name} in {text}"))
}
