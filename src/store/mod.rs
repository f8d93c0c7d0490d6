//! Storage behind traits: handlers and domain code call [`Store`]; only `store/*` knows SQL.
//! The backend is chosen from the database URL's scheme ([`open`]).

use std::sync::Arc;

use async_trait::async_trait;
use serde_json::Value;

pub mod postgres;
mod sql;
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

/// Balances in base units (USD cents for the withdraw hold), as decimal digit strings.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Balances {
    pub balance: Option<String>,
    pub confirmed: Option<String>,
    pub spendable: Option<String>,
    pub staking: Option<String>,
    pub reward: Option<String>,
    pub withdraw_hold_usd: Option<String>,
}

/// A validated wallet, ready to store.
#[derive(Debug, Clone)]
pub struct WalletRow {
    pub id: String,
    pub coin: String,
    pub enterprise: Option<String>,
    pub deleted: bool,
    /// Ids from `users[].user`: the users who may see the wallet.
    pub user_ids: Vec<String>,
    /// The §2.1 record without balances, as JSON object text.
    pub record: String,
    pub balances: Balances,
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

/// A webhook (spec §2.5). `scope` is `wallet`, `block` or `enterprise`.
#[derive(Debug, Clone)]
pub struct Webhook {
    pub id: String,
    pub scope: String,
    pub wallet_id: Option<String>,
    /// The enterprise whose secret signs its notifications (docs/webhooks.md).
    pub enterprise_id: Option<String>,
    /// The creator; the owner of a block webhook.
    pub user_id: String,
    pub coin: Option<String>,
    pub webhook_type: String,
    pub url: String,
    pub label: Option<String>,
    pub num_confirmations: Option<i64>,
    /// `active` or `suspended`.
    pub state: String,
    pub successive_failed_attempts: i64,
    pub failed_attempts_total: i64,
    pub listen_to_failure_states: bool,
    pub tx_request_states: Vec<String>,
    pub tx_request_transaction_states: Vec<String>,
    pub custom_headers: std::collections::BTreeMap<String, String>,
    pub allow_blocked_hosts: bool,
    /// Unix seconds.
    pub created_at: i64,
}

/// Which webhooks a list or removal applies to.
#[derive(Debug, Clone, Default)]
pub struct WebhookFilter {
    pub scope: String,
    pub wallet_id: Option<String>,
    pub enterprise_id: Option<String>,
    pub user_id: Option<String>,
    pub coin: Option<String>,
    pub webhook_type: Option<String>,
    /// Only webhooks in this state.
    pub state: Option<String>,
}

/// An enterprise's webhook secret, sealed with the master key.
#[derive(Debug, Clone)]
pub struct WebhookSecret {
    pub current_enc: Vec<u8>,
    /// The secret before the last rotation, valid for the grace period after it.
    pub previous_enc: Option<Vec<u8>>,
    /// Unix seconds.
    pub rotated_at: i64,
}

/// A notification in the outbox (spec §2.6). Times are Unix milliseconds.
#[derive(Debug, Clone)]
pub struct Notification {
    pub id: String,
    pub webhook_id: String,
    pub event_id: Option<String>,
    pub notification_type: String,
    /// `new`, `pending`, `processed` or `failed`.
    pub state: String,
    pub simulation: bool,
    pub retries: i64,
    /// The exact JSON text that is POSTed.
    pub payload: String,
    pub hash: String,
    pub idempotency_key: String,
    /// The other §2.6 fields of its level (wallet, enterprise, coin, transfer, ...).
    pub meta: Value,
    pub next_attempt_at: i64,
    pub created_at: i64,
    pub updated_at: i64,
}

/// One delivery attempt. Times in Unix milliseconds.
#[derive(Debug, Clone)]
pub struct Attempt {
    pub notification_id: String,
    pub webhook_id: String,
    pub started_at: i64,
    pub duration_ms: i64,
    pub status_code: Option<u16>,
    pub success: bool,
    /// The first 20 KB of the response body.
    pub response_body: Option<String>,
    pub error: Option<String>,
}

/// What follows an attempt.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Completion {
    Delivered,
    /// Failed; try again at this Unix millisecond.
    Retry(i64),
    /// Failed for the last time.
    Failed,
}

/// An attempt and what follows it, written together.
#[derive(Debug, Clone)]
pub struct Outcome {
    pub attempt: Attempt,
    pub completion: Completion,
}

/// When failures suspend a webhook.
#[derive(Debug, Clone, Copy)]
pub struct SuspendRule {
    pub window_ms: i64,
    pub max_in_window: u32,
    pub max_total: u32,
}

/// A claimed notification and its webhook.
#[derive(Debug, Clone)]
pub struct Claimed {
    pub notification: Notification,
    pub webhook: Webhook,
}

/// Gauges for /metrics.
#[derive(Debug, Clone, Copy, Default)]
pub struct DeliveryStats {
    pub due: i64,
    pub in_flight: i64,
    pub suspended_webhooks: i64,
}

/// Result of a secret rotation.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Rotation {
    Done,
    /// Rotated too recently; seconds to wait.
    TooSoon(i64),
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

    /// Stores a token and, in the same transaction, the notifications it fires (outbox).
    async fn insert_token(&self, t: &TokenRecord, notifications: &[Notification]) -> StoreResult<()>;
    async fn token_by_id(&self, id: &str) -> StoreResult<Option<TokenRecord>>;
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

    /// Inserts a webhook unless its level already has `max_per_type` of that type (§8);
    /// returns false then. The count and insert are one transaction.
    async fn insert_webhook(&self, w: &Webhook, max_per_type: u32) -> StoreResult<bool>;
    async fn webhook_by_id(&self, id: &str) -> StoreResult<Option<Webhook>>;
    /// Webhooks matching `filter` with ids greater than `after_id`, by id, at most `limit`.
    async fn list_webhooks(
        &self,
        filter: &WebhookFilter,
        after_id: Option<&str>,
        limit: u32,
    ) -> StoreResult<Vec<Webhook>>;
    /// Removes webhooks matching `filter` and (`id`, or `type` and `url`). Returns how many.
    async fn delete_webhooks(
        &self,
        filter: &WebhookFilter,
        id: Option<&str>,
        type_url: Option<(&str, &str)>,
    ) -> StoreResult<u64>;
    /// Makes a webhook active and clears its failure counters; false when no such webhook.
    async fn unblock_webhook(&self, id: &str, now_ms: i64) -> StoreResult<bool>;

    async fn webhook_secret(&self, enterprise_id: &str) -> StoreResult<Option<WebhookSecret>>;
    /// Stores `new_enc` as the current secret, keeping the old one as previous, unless the last
    /// rotation was less than `min_interval` seconds before `now`.
    async fn rotate_webhook_secret(
        &self,
        enterprise_id: &str,
        new_enc: &[u8],
        now: i64,
        min_interval: i64,
    ) -> StoreResult<Rotation>;

    /// Adds notifications to the outbox; one whose (webhook, idempotency key) exists is skipped.
    async fn insert_notifications(&self, n: &[Notification]) -> StoreResult<u64>;
    /// Records an ingested event and its notifications in one transaction. When `event_id` was
    /// seen before, writes nothing and returns the stored result.
    async fn record_event(
        &self,
        event_id: &str,
        body: &str,
        transfer_id: Option<&str>,
        result: &str,
        notifications: &[Notification],
    ) -> StoreResult<Option<String>>;
    /// The most recent ingested event body naming this transfer.
    async fn event_by_transfer(&self, transfer_id: &str) -> StoreResult<Option<String>>;
    /// Leases up to `limit` due notifications of active webhooks until `lease_until_ms`.
    async fn claim_due(&self, now_ms: i64, lease_until_ms: i64, limit: u32) -> StoreResult<Vec<Claimed>>;
    /// Gives back claimed notifications unattempted, due again at `at_ms` (no attempt counted).
    async fn defer(&self, ids: &[String], at_ms: i64) -> StoreResult<()>;
    /// Writes attempts and their consequences in one transaction; returns webhooks suspended.
    async fn complete(
        &self,
        outcomes: &[Outcome],
        now_ms: i64,
        rule: SuspendRule,
    ) -> StoreResult<Vec<String>>;
    async fn notification_by_id(&self, webhook_id: &str, id: &str) -> StoreResult<Option<Notification>>;
    async fn list_notifications(
        &self,
        webhook_id: &str,
        state: Option<&str>,
        after_id: Option<&str>,
        limit: u32,
    ) -> StoreResult<Vec<Notification>>;
    async fn attempts(&self, notification_id: &str) -> StoreResult<Vec<Attempt>>;
    /// Queues a notification again now, with retries reset; None when it does not exist.
    async fn resend_notification(
        &self,
        webhook_id: &str,
        id: &str,
        now_ms: i64,
    ) -> StoreResult<Option<Notification>>;
    async fn delivery_stats(&self, now_ms: i64) -> StoreResult<DeliveryStats>;

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

/// Opens the configured database and applies migrations. The backend is chosen by the URL's
/// scheme: `sqlite://PATH` (the embedded default; file and folder created) or
/// `postgres://...` / `postgresql://...`.
pub async fn open(config: &crate::config::Config) -> anyhow::Result<DynStore> {
    let url = config.database_url.as_str();
    if url.starts_with("sqlite:") {
        Ok(Arc::new(sqlite::SqliteStore::open(url).await?))
    } else if url.starts_with("postgres://") || url.starts_with("postgresql://") {
        Ok(Arc::new(postgres::PostgresStore::open(url, &config.postgres).await?))
    } else {
        anyhow::bail!("database URL scheme not supported (use sqlite://PATH or postgres://...)")
    }
}
