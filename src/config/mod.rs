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

mod chains;
mod connections;
mod delivery;
mod hot_path;
mod login;
mod oauth;
mod passkeys;
mod postgres;
mod prices;
mod rate_limit;
mod sso;
mod tokens;
mod utxo;
mod webhooks;
mod withdrawals;

pub use chains::{watchable, ChainConfig, ChainFamily, Network, Secret, TokenConfig, WATCHABLE_COINS};
pub use connections::ConnectionsConfig;
pub use delivery::DeliveryConfig;
pub use hot_path::{CacheConfig, IngestConfig};
pub use login::LoginConfig;
pub use oauth::OAuthConfig;
pub use passkeys::PasskeysConfig;
pub use postgres::PostgresConfig;
pub use prices::PriceConfig;
pub use rate_limit::RateLimitConfig;
pub use sso::SsoConfig;
pub use tokens::TokensConfig;
pub use utxo::UtxoConfig;
pub use webhooks::{WebhooksConfig, DEFAULT_BLOCK_WEBHOOK_COINS};
pub use withdrawals::{KeysConfig, WithdrawalsConfig, PKCS11_PIN_ENV};

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
    /// Largest number of ids in one wallet lookup (docs/decisions.md#wallets).
    pub max_lookup_ids: usize,
    /// Longest time a request may take, seconds; then 408 `RequestTimeout` (docs/decisions.md#brute-force-limits).
    pub request_timeout: u64,
    /// Requests handled at once per process; beyond, 503 `ServerBusy` at once (docs/decisions.md#brute-force-limits).
    pub max_in_flight_requests: usize,
    /// `text` (default) or `json` log lines on standard error.
    pub log_format: String,
    /// How long `serve` waits for a SQLite database another process is writing, seconds, before
    /// a statement fails (the busy timeout).
    pub sqlite_busy_timeout: u64,
    /// How long an operator command (`user create`, `enterprise add-user`, ...) waits for a
    /// SQLite database a busy server holds, seconds, saying so after a moment (docs/decisions.md#faults-and-floods).
    pub cli_lock_wait: u64,
    pub login: LoginConfig,
    pub delivery: DeliveryConfig,
    pub postgres: PostgresConfig,
    pub tokens: TokensConfig,
    pub passkeys: PasskeysConfig,
    /// Where custodial wallets' keys live (docs/withdrawals.md).
    pub keys: KeysConfig,
    /// Approvals, fees and the signer (docs/withdrawals.md).
    pub withdrawals: WithdrawalsConfig,
    pub oauth: OAuthConfig,
    /// Sign-ins through enterprises' identity providers (docs/sso.md).
    pub sso: SsoConfig,
    /// Multisig wallets of UTXO coins: keychains and derived addresses (docs/chains.md#utxo-chains).
    pub utxo: UtxoConfig,
    pub webhooks: WebhooksConfig,
    pub rate_limit: RateLimitConfig,
    pub ingest: IngestConfig,
    pub cache: CacheConfig,
    pub connections: ConnectionsConfig,
    /// Chains the watcher follows, by coin (`[chains.hteth]`; docs/chains.md).
    pub chains: std::collections::BTreeMap<String, ChainConfig>,
    /// USD price feeds by coin, for the circuit breaker (`[prices.hteth]`;
    /// docs/policy.md#circuit-breaker).
    pub prices: std::collections::BTreeMap<String, PriceConfig>,
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
            passkeys: PasskeysConfig::default(),
            keys: KeysConfig::default(),
            withdrawals: WithdrawalsConfig::default(),
            oauth: OAuthConfig::default(),
            sso: SsoConfig::default(),
            utxo: UtxoConfig::default(),
            webhooks: WebhooksConfig::default(),
            rate_limit: RateLimitConfig::default(),
            ingest: IngestConfig::default(),
            cache: CacheConfig::default(),
            connections: ConnectionsConfig::default(),
            chains: Default::default(),
            prices: Default::default(),
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
    /// `serve --chain COIN.KEY=VALUE`: chain settings by coin and key, each value read as the
    /// environment's are (a number, a boolean, an array or a string).
    #[serde(skip_serializing_if = "std::collections::BTreeMap::is_empty")]
    pub chains: std::collections::BTreeMap<String, std::collections::BTreeMap<String, figment::value::Value>>,
}

impl Overrides {
    /// Takes one `--chain COIN.KEY=VALUE`. Errors: one line naming the flag.
    pub fn chain(&mut self, flag: &str) -> Result<(), String> {
        let bad = || {
            format!("invalid configuration: the flag --chain {flag}: expected COIN.KEY=VALUE (hteth.chain_id=31337)")
        };
        let (key, value) = flag.split_once('=').ok_or_else(bad)?;
        let (coin, key) = key.split_once('.').ok_or_else(bad)?;
        if coin.is_empty() || key.is_empty() {
            return Err(bad());
        }
        let value = value.parse().unwrap_or_else(|never: std::convert::Infallible| match never {});
        self.chains.entry(coin.to_string()).or_default().insert(key.to_string(), value);
        Ok(())
    }
}

/// Sections whose keys are spelt `CUSTODIAN_<SECTION>_<KEY>` in the environment.
const ENV_SECTIONS: &[&str] = &[
    "login",
    "delivery",
    "postgres",
    "tokens",
    "webhooks",
    "rate_limit",
    "ingest",
    "cache",
    "connections",
    "passkeys",
    "keys",
    "withdrawals",
    "sso",
    "utxo",
];

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

/// One line for a bad setting: the key as the user spelt it (the flag, the environment
/// variable, or the key in the named file), what was wrong, and what is allowed.
fn describe(e: &figment::Error) -> String {
    let path: Vec<&str> = e.path.iter().map(String::as_str).skip_while(|s| *s == "default").collect();
    let key = path.join(".");
    let name = e.metadata.as_ref().map(|m| m.name.as_ref()).unwrap_or("");
    let origin = if name.contains("Overrides") {
        match key.strip_prefix("chains.") {
            Some(chain_key) => format!("the flag --chain {chain_key}"),
            None => format!("the flag --{}", key.replace('_', "-")),
        }
    } else if name.contains("nvironment") {
        format!("the environment variable CUSTODIAN_{}", key.replace('.', "_").to_ascii_uppercase())
    } else if let Some(figment::Source::File(file)) = e.metadata.as_ref().and_then(|m| m.source.as_ref()) {
        format!("{key} in {}", file.display())
    } else {
        key
    };
    let what = e.kind.to_string();
    let what = ["u64", "u32", "u16", "usize", "i64"]
        .iter()
        .fold(what, |w, t| w.replace(&format!("expected {t}"), "expected a whole number"));
    format!("invalid configuration: {origin}: {}", what.replace("``", "`"))
}

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
                            || key.starts_with("chains_")
                            || key.starts_with("prices_")
                            || ENV_SECTIONS.iter().any(|s| key.starts_with(&format!("{s}_")))
                    })
                    .map(|key| {
                        let key = key.as_str().to_ascii_lowercase();
                        // CUSTODIAN_CHAINS_<COIN>_<KEY>: chain coins hold no underscore.
                        if let Some((coin, rest)) =
                            key.strip_prefix("chains_").and_then(|r| r.split_once('_'))
                        {
                            return format!("chains.{coin}.{rest}").into();
                        }
                        // CUSTODIAN_PRICES_<COIN>_<KEY>, likewise (a token coin's only in a file).
                        if let Some((coin, rest)) =
                            key.strip_prefix("prices_").and_then(|r| r.split_once('_'))
                        {
                            return format!("prices.{coin}.{rest}").into();
                        }
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
        let mut config: Config =
            fig.extract().map_err(|e| e.into_iter().next().map(|e| describe(&e)).unwrap_or_default())?;
        config.environment_explicit = explicit;
        config.validate()?;
        Ok(config)
    }

    fn validate(&self) -> Result<(), String> {
        prices::validate(&self.prices, &self.chains)?;
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
        chains::validate(&self.chains)?;
        self.ingest.validate()?;
        self.passkeys.validate()?;
        self.keys.validate()?;
        self.withdrawals.validate()?;
        self.oauth.validate()?;
        self.sso.validate()?;
        self.utxo.validate()?;
        self.connections.validate()?;
        self.cache.validate()
    }
}

/// Accepts a TOML array or one comma-separated string (as environment variables give it).
pub(crate) fn de_cidr_list<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Vec<IpNet>, D::Error> {
    let items = de_string_list(d)?;
    items.iter().map(|s| crate::types::parse_cidr(s).map_err(serde::de::Error::custom)).collect()
}

/// Accepts a TOML array of strings or one comma-separated string.
pub(crate) fn de_string_list<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Vec<String>, D::Error> {
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
pub(crate) fn de_number_list<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Vec<u64>, D::Error> {
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

#[cfg(test)]
mod documented;
