//! Storage behind traits: handlers and domain code call [`Store`]; only `store/*` knows SQL.
//! The backend is chosen from the database URL's scheme ([`open`]).

use std::sync::Arc;

use async_trait::async_trait;
use serde_json::Value;

pub use crate::wallets::model::{Balances, WalletRow};

pub mod sqlite;

/// What a store call can fail with.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    /// A unique constraint was violated; the string says what already exists.
    #[error("{0} already exists")]
    Conflict(String),
    #[error(transparent)]
    Other(#[from] anyhow::Error),
}

impl From<sqlx::Error> for StoreError {
    fn from(e: sqlx::Error) -> Self {
        StoreError::Other(e.into())
    }
}

pub type StoreResult<T> = Result<T, StoreError>;

/// A user (spec §2.3). The TOTP seed is only held encrypted ([`crate::secrets::MasterKey`]).
#[derive(Debug, Clone)]
pub struct User {
    pub id: String,
    /// Lower-cased; unique.
    pub email: String,
    pub name_first: String,
    pub name_last: String,
    /// PHC string of an argon2id hash.
    pub password_hash: String,
    /// Nonce || ciphertext of the raw TOTP seed.
    pub totp_secret_enc: Vec<u8>,
    /// Last RFC 6238 time step accepted, against replay.
    pub totp_last_step: Option<i64>,
    /// A service employee holding the service-admin permission.
    pub service_admin: bool,
    pub is_active: bool,
    pub timezone: String,
    pub locale: String,
    /// Coin symbols; empty means no restriction.
    pub allowed_coins: Vec<String>,
    /// Unix seconds.
    pub created_at: i64,
    pub password_updated_at: i64,
    pub last_login: Option<i64>,
}

/// An enterprise (a customer organisation).
#[derive(Debug, Clone)]
pub struct Enterprise {
    pub id: String,
    pub name: String,
    pub created_at: i64,
}

/// A user's membership of an enterprise.
#[derive(Debug, Clone)]
pub struct Membership {
    pub enterprise: Enterprise,
    pub is_admin: bool,
}

/// What a token was issued by, which bounds what it may do (docs/scopes.md).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TokenKind {
    /// From login with password + OTP.
    Session,
    /// From login with `forReset2FA`: may only read the profile.
    Reset2fa,
    /// From POST /api/v2/user/accesstoken.
    Access,
}

impl TokenKind {
    pub fn as_str(self) -> &'static str {
        match self {
            TokenKind::Session => "session",
            TokenKind::Reset2fa => "reset2fa",
            TokenKind::Access => "access",
        }
    }
    pub fn parse(s: &str) -> Self {
        match s {
            "session" => TokenKind::Session,
            "access" => TokenKind::Access,
            _ => TokenKind::Reset2fa,
        }
    }
}

/// An access token (spec §2.4). The secret itself is never stored: only its SHA-256.
#[derive(Debug, Clone)]
pub struct TokenRecord {
    /// Public id, 32 hex.
    pub id: String,
    /// Hex SHA-256 of the secret token value.
    pub token_hash: String,
    pub user_id: String,
    pub kind: TokenKind,
    pub label: Option<String>,
    pub scopes: Vec<String>,
    /// Unix seconds.
    pub created_at: i64,
    pub expires_at: i64,
    pub revoked_at: Option<i64>,
    /// Address of the client that requested it.
    pub ip: Option<String>,
    /// Normalised CIDR blocks; `None` means unrestricted.
    pub ip_restrict: Option<Vec<String>>,
    pub enterprise: Option<String>,
    pub is_extensible: bool,
    /// Carries the service-admin permission.
    pub admin: bool,
    /// `{coin: {txValueLimit, maxLimit?, allErc20TokensLimit?}}`.
    pub spending_limits: Option<Value>,
    pub permitted_wallets: Option<Vec<String>>,
    pub permitted_enterprises: Option<Vec<String>>,
    pub origin: String,
    pub parent_id: Option<String>,
}

/// An access token template (issue 2 §5): default field values for token creation.
#[derive(Debug, Clone)]
pub struct TokenTemplate {
    pub id: String,
    /// A JSON object with the request fields of §4.3 it supplies.
    pub fields: Value,
    pub created_at: i64,
}

/// Everything the service stores. One implementation per database.
#[async_trait]
pub trait Store: Send + Sync + 'static {
    /// Answers when the database answers.
    async fn ping(&self) -> StoreResult<()>;
    /// Closes the connections; later calls fail. Used at shutdown.
    async fn close(&self);

    async fn insert_user(&self, user: &User) -> StoreResult<()>;
    async fn user_by_id(&self, id: &str) -> StoreResult<Option<User>>;
    /// `email` must already be lower-cased.
    async fn user_by_email(&self, email: &str) -> StoreResult<Option<User>>;
    /// Records `step` as the user's last accepted TOTP step if it is newer than the stored one.
    /// Returns false when it is not (a replayed or older code).
    async fn advance_totp_step(&self, user_id: &str, step: i64) -> StoreResult<bool>;
    async fn set_last_login(&self, user_id: &str, at: i64) -> StoreResult<()>;

    async fn insert_enterprise(&self, e: &Enterprise) -> StoreResult<()>;
    async fn enterprise_by_id(&self, id: &str) -> StoreResult<Option<Enterprise>>;
    /// Adds the user to the enterprise, or updates the admin flag when already a member.
    async fn upsert_membership(&self, enterprise_id: &str, user_id: &str, is_admin: bool) -> StoreResult<()>;
    async fn memberships(&self, user_id: &str) -> StoreResult<Vec<Membership>>;

    async fn insert_token(&self, t: &TokenRecord) -> StoreResult<()>;
    async fn token_by_hash(&self, token_hash: &str) -> StoreResult<Option<TokenRecord>>;

    async fn insert_template(&self, t: &TokenTemplate) -> StoreResult<()>;
    async fn template_by_id(&self, id: &str) -> StoreResult<Option<TokenTemplate>>;

    /// Inserts or replaces wallets in one transaction. Balances absent from a row keep their
    /// stored value. Returns (inserted, updated).
    async fn upsert_wallets(&self, rows: &[WalletRow]) -> StoreResult<(u64, u64)>;
    /// The wallets with these ids, in one query; deleted ones only with `include_deleted`.
    /// Unknown ids are absent; order is unspecified.
    async fn wallets_by_ids(&self, ids: &[String], include_deleted: bool) -> StoreResult<Vec<WalletRow>>;
    /// Sets the balances given in `balances` (others unchanged); `None` when no such wallet.
    async fn update_wallet_balances(&self, id: &str, balances: &Balances) -> StoreResult<Option<WalletRow>>;

    /// Counts a failed login for `email` from `ip` at `at` (Unix seconds).
    async fn record_login_failure(&self, email: &str, ip: &str, at: i64) -> StoreResult<()>;
    /// Failures for `email` since `since`: (count, oldest time).
    async fn login_failures_by_email(&self, email: &str, since: i64) -> StoreResult<(u32, Option<i64>)>;
    /// Failures from `ip` since `since`: (count, oldest time).
    async fn login_failures_by_ip(&self, ip: &str, since: i64) -> StoreResult<(u32, Option<i64>)>;
    /// Forgets the failures of `email` (after a successful login) and those older than `before`.
    async fn clear_login_failures(&self, email: &str, before: i64) -> StoreResult<()>;
}

/// A shared store handle.
pub type DynStore = Arc<dyn Store>;

/// Opens (creating if needed) the database at `url` and applies migrations.
/// `sqlite://path` is the embedded default; other schemes are refused with a clear error.
pub async fn open(url: &str) -> anyhow::Result<DynStore> {
    if url.starts_with("sqlite:") {
        Ok(Arc::new(sqlite::SqliteStore::open(url).await?))
    } else {
        anyhow::bail!("database URL scheme not supported: {url:?} (use sqlite://PATH)")
    }
}
