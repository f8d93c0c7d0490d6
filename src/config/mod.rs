//! Configuration: embedded defaults -> TOML file -> `CUSTODIAN_*` environment -> command-line flags
//! (later sources win). Validated once at start; a bad setting is one clear line and exit code 2.

use std::{
    net::SocketAddr,
    path::{Path, PathBuf},
};

use figment::{
    providers::{Env, Format, Serialized, Toml},
    Figment,
};
use ipnet::IpNet;
use serde::{Deserialize, Serialize};

mod connections;
mod hot_path;
pub use connections::ConnectionsConfig;
pub use hot_path::{CacheConfig, IngestConfig};

/// Deployment environment (spec §4.3, §5): `production` requires `ipRestrict` on tokens, refuses the
/// fixed test OTP and needs a configured master key.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Environment {
    Test,
    Production,
}

impl Environment {
    /// The name reported as `origin` on access tokens (spec §2.4).
    pub fn as_str(self) -> &'static str {
        match self {
            Environment::Test => "test",
            Environment::Production => "production",
        }
    }
}

/// Login brute-force limits (issue 2 §4).
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct LoginConfig {
    /// Failed logins allowed per (email, client) within `window` before 429. A client is an
    /// IPv4 address or an IPv6 /64.
    pub max_failures_per_email: u32,
    /// Failed logins allowed per client, across all emails, within `window` before 429.
    pub max_failures_per_ip: u32,
    /// Length of the counting window, seconds.
    pub window: u64,
    /// Failed logins of one email from all clients within an hour after which each further
    /// attempt waits (429 with a growing `Retry-After`); clients the user logged in from in
    /// the last `known_client_days` are exempt.
    pub email_delay_after: u32,
    /// The wait grows by this many seconds per failure over `email_delay_after`.
    pub email_delay_step: u64,
    /// The longest wait, seconds: the per-email rule never locks an account for good.
    pub email_delay_max: u64,
    /// Days a successful login keeps its client exempt from the per-email wait.
    pub known_client_days: u64,
    /// Wrong one-time passwords allowed per user within `window`, wherever an OTP is checked,
    /// before that user's OTP checks answer 429 `TooManyOtpAttempts`.
    pub max_otp_failures: u32,
    /// argon2id hashes computed at once (each holds 19 MiB). Default: the number of cores.
    pub max_concurrent_hashes: usize,
    /// Logins that may wait for a hashing slot; beyond, 503 `ServerBusy`. Default: 4x
    /// `max_concurrent_hashes`.
    pub hash_queue: usize,
    /// The longest wait for a hashing slot, milliseconds; then 503 `ServerBusy`.
    pub hash_wait_ms: u64,
    /// Hashing slots or queue places one client may hold at once; beyond, 429.
    pub max_hashes_per_client: usize,
    /// Lifetime of a login session token, seconds (`expires_in` of §2.2).
    pub session_ttl: u64,
    /// The longest an extensible session may be extended to, seconds from its creation
    /// (`POST /api/v2/user/extendtoken`).
    pub session_max_ttl: u64,
}

impl Default for LoginConfig {
    fn default() -> Self {
        let cores = std::thread::available_parallelism().map(|n| n.get()).unwrap_or(2);
        Self {
            max_failures_per_email: 5,
            max_failures_per_ip: 50,
            window: 15 * 60,
            email_delay_after: 50,
            email_delay_step: 10,
            email_delay_max: 15 * 60,
            known_client_days: 30,
            max_otp_failures: 5,
            max_concurrent_hashes: cores,
            hash_queue: 4 * cores,
            hash_wait_ms: 2000,
            max_hashes_per_client: 2,
            session_ttl: 3600,
            session_max_ttl: 86_400,
        }
    }
}

/// The webhook delivery engine (issue 4 §B).
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct DeliveryConfig {
    /// CIDR blocks delivery may reach even though they are not globally routable.
    #[serde(deserialize_with = "de_cidr_list")]
    pub allowed_cidrs: Vec<IpNet>,
    /// Delay before each retry, seconds (BitGo's schedule: 1, 5, 10, 30, 60, 120, 240 minutes).
    #[serde(deserialize_with = "de_number_list")]
    pub retry_schedule: Vec<u64>,
    /// Per-attempt timeout, seconds.
    pub timeout: u64,
    /// Deliveries in flight at once per process.
    pub concurrency: usize,
    /// Deliveries in flight at once per webhook and process, so that one slow receiver cannot
    /// hold every slot.
    pub per_webhook_concurrency: usize,
    /// Failures within `suspend_window` that suspend a webhook.
    pub suspend_after_failures: u32,
    /// Seconds.
    pub suspend_window: u64,
    /// Failures over a webhook's life that suspend it.
    pub suspend_after_total_failures: u32,
    /// How often to look for due notifications when not woken, milliseconds.
    pub poll_interval_ms: u64,
    /// Deliveries in flight at once per tenant (an enterprise, or the owner of a block webhook
    /// without one) and process, so that one tenant's hanging receivers leave the other slots
    /// to everyone else (issue 9 §6). Default: half of `concurrency`'s default; a deployment
    /// with one enterprise may raise it to `concurrency`.
    pub per_tenant_concurrency: usize,
    /// Days delivery attempts and finished (processed or failed) notifications are kept; older
    /// ones are pruned by the worker in small batches (issue 9 §6). 0 keeps them for ever;
    /// fractions are allowed (0.01 is 14.4 minutes, for soak benchmarks of pruning).
    pub retention_days: f64,
    /// How often the worker prunes, milliseconds (it also prunes when it starts).
    pub prune_interval_ms: u64,
}

impl Default for DeliveryConfig {
    fn default() -> Self {
        Self {
            allowed_cidrs: Vec::new(),
            retry_schedule: vec![60, 300, 600, 1800, 3600, 7200, 14400],
            timeout: 10,
            concurrency: 64,
            per_webhook_concurrency: 16,
            suspend_after_failures: 100,
            suspend_window: 7 * 24 * 3600,
            suspend_after_total_failures: 500,
            poll_interval_ms: 250,
            per_tenant_concurrency: 32,
            retention_days: 30.0,
            prune_interval_ms: 600_000,
        }
    }
}

/// Webhook operation limits (issue 9 §6).
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct WebhooksConfig {
    /// Simulate, resend and unblock calls allowed per webhook and minute, per process.
    pub operations_per_minute: u32,
    /// Block webhooks one user may hold, all coins together.
    pub max_per_user: u32,
    /// Webhooks of every level signed by one enterprise (its wallets', its own, and block
    /// webhooks bound to it).
    pub max_per_enterprise: u32,
    /// Notifications kept for one suspended webhook until it is unblocked; beyond, new ones are
    /// refused (audited, counted) rather than stored (issue 21 §3).
    pub max_held: u64,
    /// Most failed notifications one recover queues again (issue 22 §4); a larger backlog
    /// takes several recovers.
    pub recover_max: u32,
    /// Coin symbols a block webhook may name (a TOML array or one comma-separated string).
    #[serde(deserialize_with = "de_string_list")]
    pub coins: Vec<String>,
}

/// Coins a block webhook may name by default: the coins of examples/wallets.json and BitGo's
/// common main and test network symbols.
pub const DEFAULT_BLOCK_WEBHOOK_COINS: &[&str] = &[
    "ada",
    "algo",
    "apt",
    "arbeth",
    "atom",
    "avaxc",
    "avaxp",
    "baseeth",
    "bch",
    "bld",
    "bsc",
    "bsv",
    "btc",
    "btg",
    "celo",
    "coreum",
    "dash",
    "doge",
    "dot",
    "eos",
    "eth",
    "hash",
    "hbar",
    "hteth",
    "injective",
    "ltc",
    "near",
    "ofc",
    "opeth",
    "osmo",
    "polygon",
    "sei",
    "sol",
    "stx",
    "sui",
    "tada",
    "talgo",
    "tapt",
    "tarbeth",
    "tatom",
    "tavaxc",
    "tavaxp",
    "tbaseeth",
    "tbch",
    "tbld",
    "tbsc",
    "tbsv",
    "tbtc",
    "tbtc4",
    "tbtcsig",
    "tcelo",
    "tcoreum",
    "tdash",
    "tdoge",
    "tdot",
    "teos",
    "teth",
    "thash",
    "thbar",
    "tia",
    "tinjective",
    "tltc",
    "tnear",
    "ton",
    "topeth",
    "tosmo",
    "tpolygon",
    "trx",
    "tsei",
    "tsol",
    "tstx",
    "tsui",
    "ttia",
    "tton",
    "ttrx",
    "txlm",
    "txrp",
    "txtz",
    "tzec",
    "xlm",
    "xrp",
    "xtz",
    "zec",
];

impl Default for WebhooksConfig {
    fn default() -> Self {
        Self {
            operations_per_minute: 10,
            max_per_user: 100,
            max_per_enterprise: 1_000,
            max_held: 10_000,
            recover_max: 10_000,
            coins: DEFAULT_BLOCK_WEBHOOK_COINS.iter().map(|c| c.to_string()).collect(),
        }
    }
}

/// The per-user API rate limit (issue 9 §7): a token bucket per user and process.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct RateLimitConfig {
    /// Requests a user may make per `period` (BitGo documents 360 per minute).
    pub requests: u32,
    /// Requests a service admin's tokens may make per `period`; 0: no limit.
    pub admin_requests: u32,
    /// Length of the window, seconds.
    pub period: u64,
}

impl Default for RateLimitConfig {
    fn default() -> Self {
        Self { requests: 360, admin_requests: 600_000, period: 60 }
    }
}

/// Access token rules (issue 9 §4).
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct TokensConfig {
    /// Allows `ipRestrict` blocks wider than /8 (IPv4) or /32 (IPv6) in production.
    pub allow_wide_ip_restrict: bool,
    /// How old a signed request's `Auth-Timestamp` may be, seconds (issue 20 §1; BitGoJS
    /// checks responses with the same 5 minutes).
    pub hmac_window_back: u64,
    /// How far ahead of this server's clock it may be, seconds.
    pub hmac_window_ahead: u64,
    /// Signed reads remembered per process against replay; past it, signed reads are answered
    /// 503 `ServerBusy` until older ones leave the window.
    pub hmac_read_replay_capacity: usize,
}

impl Default for TokensConfig {
    fn default() -> Self {
        Self {
            allow_wide_ip_restrict: false,
            hmac_window_back: 300,
            hmac_window_ahead: 60,
            hmac_read_replay_capacity: 100_000,
        }
    }
}

/// PostgreSQL connection settings (issue 5).
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct PostgresConfig {
    /// Connections in the pool.
    pub max_connections: u32,
    /// Longest a statement may run, seconds; then it fails and the request answers 503
    /// `ServiceUnavailable`. Migrations run without it.
    pub statement_timeout: u64,
    /// Longest a request waits for a pooled connection, milliseconds, also while the database
    /// does not answer at all; then 503 `ServiceUnavailable` (issue 21 §2).
    pub acquire_timeout_ms: u64,
    /// TLS: disable, allow, prefer, require, verify-ca or verify-full. Unset: the URL's
    /// `sslmode`, else prefer.
    pub sslmode: Option<String>,
    /// How often the delivery worker vacuums the outbox's notifications table, seconds; 0
    /// leaves it to autovacuum. Every claim and completion leaves dead row versions that claims
    /// walk past until a vacuum; with autovacuum off or behind, delivery slowed to a seventh
    /// after 240,000 events (issue 23 §2).
    pub vacuum_interval: u64,
}

impl Default for PostgresConfig {
    fn default() -> Self {
        Self {
            max_connections: 16,
            statement_timeout: 5,
            acquire_timeout_ms: 1500,
            sslmode: None,
            vacuum_interval: 30,
        }
    }
}

/// What a `serve` process runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Role {
    /// The HTTP API only.
    Api,
    /// The delivery engine only (with /health and /metrics).
    Worker,
    /// Both.
    All,
}

/// The whole configuration of one process.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Config {
    /// Address `serve` listens on.
    pub listen: SocketAddr,
    /// `sqlite://path` (default) or, later, `postgres://...`.
    pub database_url: String,
    pub environment: Environment,
    /// File holding the 32-byte master key as 64 hex characters.
    pub secret_key_file: Option<PathBuf>,
    /// Peers whose `X-Forwarded-For` is believed (CIDR blocks or addresses).
    #[serde(deserialize_with = "de_cidr_list")]
    pub trusted_proxies: Vec<IpNet>,
    /// Largest number of ids in one wallet lookup (issue 3).
    pub max_lookup_ids: usize,
    /// Longest time a request may take, seconds; then 408 `RequestTimeout` (issue 9 §8).
    pub request_timeout: u64,
    /// Requests handled at once per process; beyond, 503 `ServerBusy` at once (issue 9 §8).
    pub max_in_flight_requests: usize,
    /// `text` (default) or `json` log lines on standard error.
    pub log_format: String,
    /// How long `serve` waits for a SQLite database another process is writing, seconds, before
    /// a statement fails (the busy timeout).
    pub sqlite_busy_timeout: u64,
    /// How long an operator command (`user create`, `enterprise add-user`, ...) waits for a
    /// SQLite database a busy server holds, seconds, saying so after a moment (issue 21 §4).
    pub cli_lock_wait: u64,
    pub login: LoginConfig,
    pub delivery: DeliveryConfig,
    pub postgres: PostgresConfig,
    pub tokens: TokensConfig,
    pub webhooks: WebhooksConfig,
    pub rate_limit: RateLimitConfig,
    pub ingest: IngestConfig,
    pub cache: CacheConfig,
    pub connections: ConnectionsConfig,
    /// What `serve` runs: api, worker or all.
    pub role: Role,
    /// Whether `environment` was chosen (flag, environment variable or file) rather than
    /// defaulted; `serve` refuses a non-loopback address in a defaulted test environment.
    #[serde(skip)]
    pub environment_explicit: bool,
}

impl Default for Config {
    fn default() -> Self {
        Self {
            listen: SocketAddr::from(([127, 0, 0, 1], 3080)),
            database_url: "sqlite://data/custodian.db".into(),
            environment: Environment::Test,
            secret_key_file: None,
            trusted_proxies: Vec::new(),
            max_lookup_ids: 1000,
            request_timeout: 30,
            max_in_flight_requests: 1024,
            log_format: "text".into(),
            sqlite_busy_timeout: 5,
            cli_lock_wait: 60,
            login: LoginConfig::default(),
            delivery: DeliveryConfig::default(),
            postgres: PostgresConfig::default(),
            tokens: TokensConfig::default(),
            webhooks: WebhooksConfig::default(),
            rate_limit: RateLimitConfig::default(),
            ingest: IngestConfig::default(),
            cache: CacheConfig::default(),
            connections: ConnectionsConfig::default(),
            role: Role::All,
            environment_explicit: false,
        }
    }
}

/// Values given on the command line; `None` leaves the lower layers in force.
#[derive(Debug, Default, Clone, Serialize)]
pub struct Overrides {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub listen: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub database_url: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub environment: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub secret_key_file: Option<PathBuf>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub role: Option<String>,
}

/// Sections whose keys are spelt `CUSTODIAN_<SECTION>_<KEY>` in the environment.
const ENV_SECTIONS: &[&str] =
    &["login", "delivery", "postgres", "tokens", "webhooks", "rate_limit", "ingest", "cache", "connections"];

/// Top-level keys read from `CUSTODIAN_*`; other variables with that prefix (such as the test
/// harness's `CUSTODIAN_TEST_POSTGRES_URL`) are not settings and are ignored.
const ENV_KEYS: &[&str] = &[
    "listen",
    "database_url",
    "environment",
    "secret_key_file",
    "trusted_proxies",
    "max_lookup_ids",
    "request_timeout",
    "max_in_flight_requests",
    "log_format",
    "sqlite_busy_timeout",
    "cli_lock_wait",
    "role",
];

impl Config {
    /// Loads and validates. Errors are one human-readable line.
    pub fn load(file: Option<&Path>, overrides: &Overrides) -> Result<Config, String> {
        let mut fig = Figment::from(Serialized::defaults(Config::default()));
        if let Some(path) = file {
            if !path.exists() {
                return Err(format!("config file {} does not exist", path.display()));
            }
            fig = fig.merge(Toml::file(path));
        }
        fig = fig
            .merge(
                Env::prefixed("CUSTODIAN_")
                    .filter(|key| {
                        let key = key.as_str().to_ascii_lowercase();
                        ENV_KEYS.contains(&key.as_str())
                            || ENV_SECTIONS.iter().any(|s| key.starts_with(&format!("{s}_")))
                    })
                    .map(|key| {
                        let key = key.as_str().to_ascii_lowercase();
                        for section in ENV_SECTIONS {
                            if let Some(rest) = key.strip_prefix(&format!("{section}_")) {
                                return format!("{section}.{rest}").into();
                            }
                        }
                        key.into()
                    }),
            )
            .merge(Serialized::defaults(overrides));
        let explicit = overrides.environment.is_some()
            || std::env::var_os("CUSTODIAN_ENVIRONMENT").is_some()
            || file.is_some_and(|p| Figment::from(Toml::file(p)).contains("environment"));
        let mut config: Config = fig.extract().map_err(|e| {
            let e = e.into_iter().next().map(|e| e.to_string()).unwrap_or_default();
            format!("invalid configuration: {e}")
        })?;
        config.environment_explicit = explicit;
        config.validate()?;
        Ok(config)
    }

    fn validate(&self) -> Result<(), String> {
        if !(self.database_url.starts_with("sqlite:") || self.database_url.starts_with("postgres")) {
            return Err("invalid configuration: database_url must start with sqlite:// or postgres://".into());
        }
        if self.login.window == 0 || self.login.session_ttl == 0 {
            return Err("invalid configuration: login.window and login.session_ttl must be positive".into());
        }
        if let Some(mode) = &self.postgres.sslmode {
            const MODES: &[&str] = &["disable", "allow", "prefer", "require", "verify-ca", "verify-full"];
            if !MODES.contains(&mode.as_str()) {
                return Err(format!(
                    "invalid configuration: postgres.sslmode must be one of {}",
                    MODES.join(", ")
                ));
            }
        }
        if self.postgres.max_connections == 0
            || self.postgres.statement_timeout == 0
            || self.postgres.acquire_timeout_ms == 0
        {
            return Err("invalid configuration: postgres.max_connections, postgres.statement_timeout and postgres.acquire_timeout_ms must be positive".into());
        }
        if self.log_format != "text" && self.log_format != "json" {
            return Err(format!(
                "invalid configuration: log_format must be text or json, got {:?}",
                self.log_format
            ));
        }
        if self.delivery.timeout == 0
            || self.delivery.concurrency == 0
            || self.delivery.poll_interval_ms == 0
            || self.delivery.prune_interval_ms == 0
            || !(self.delivery.retention_days.is_finite() && self.delivery.retention_days >= 0.0)
        {
            return Err("invalid configuration: delivery.timeout, delivery.concurrency, delivery.poll_interval_ms and delivery.prune_interval_ms must be positive, delivery.retention_days zero or more".into());
        }
        if self.request_timeout == 0 || self.max_in_flight_requests == 0 {
            return Err(
                "invalid configuration: request_timeout and max_in_flight_requests must be positive".into()
            );
        }
        if self.rate_limit.requests == 0 || self.rate_limit.period == 0 {
            return Err(
                "invalid configuration: rate_limit.requests and rate_limit.period must be positive".into()
            );
        }
        if self.delivery.per_tenant_concurrency == 0 || self.delivery.per_webhook_concurrency == 0 {
            return Err("invalid configuration: delivery.per_tenant_concurrency and delivery.per_webhook_concurrency must be positive".into());
        }
        if self.max_lookup_ids == 0 {
            return Err("invalid configuration: max_lookup_ids must be positive".into());
        }
        self.ingest.validate()?;
        self.connections.validate()?;
        self.cache.validate()
    }
}

/// Accepts a TOML array or one comma-separated string (as environment variables give it).
fn de_cidr_list<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Vec<IpNet>, D::Error> {
    let items = de_string_list(d)?;
    items.iter().map(|s| crate::types::parse_cidr(s).map_err(serde::de::Error::custom)).collect()
}

/// Accepts a TOML array of strings or one comma-separated string.
fn de_string_list<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Vec<String>, D::Error> {
    #[derive(Deserialize)]
    #[serde(untagged)]
    enum Raw {
        List(Vec<String>),
        One(String),
    }
    Ok(match Raw::deserialize(d)? {
        Raw::List(v) => v,
        Raw::One(s) => s.split(',').map(|s| s.trim().to_string()).filter(|s| !s.is_empty()).collect(),
    })
}

/// Accepts a TOML array of integers or one comma-separated string.
fn de_number_list<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Vec<u64>, D::Error> {
    #[derive(Deserialize)]
    #[serde(untagged)]
    enum Raw {
        List(Vec<u64>),
        One(String),
        Single(u64),
    }
    match Raw::deserialize(d)? {
        Raw::List(v) => Ok(v),
        Raw::Single(n) => Ok(vec![n]),
        Raw::One(s) => s
            .split(',')
            .map(str::trim)
            .filter(|s| !s.is_empty())
            .map(|s| {
                s.parse::<u64>()
                    .map_err(|_| serde::de::Error::custom(format!("{s:?} is not a whole number of seconds")))
            })
            .collect(),
    }
}

/// The file path of a `sqlite:` database URL (`sqlite://path?options` or `sqlite:path`).
pub fn sqlite_path(url: &str) -> String {
    let rest = url.trim_start_matches("sqlite:").trim_start_matches("//");
    rest.split('?').next().unwrap_or_default().to_string()
}
