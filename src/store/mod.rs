//! Storage: one trait per concern, composed into [`Store`]; only `store/*` knows SQL.
//!
//! | file            | trait                  | holds                                        |
//! |-----------------|------------------------|----------------------------------------------|
//! | `users.rs`      | [`UserStore`]          | users, TOTP replay counter                   |
//! | `tokens.rs`     | [`TokenStore`]         | access tokens, token templates               |
//! | `enterprises.rs`| [`EnterpriseStore`]    | enterprises, memberships                     |
//! | `wallets.rs`    | [`WalletStore`]        | wallet records, balances                     |
//! | `webhooks.rs`   | [`WebhookStore`]       | webhooks, enterprise webhook secrets         |
//! | `outbox/`       | [`OutboxStore`]        | notifications, leases, delivery attempts     |
//! | `outbox/search.rs` | [`SearchStore`]   | the console's searches, counts by hour, recovery |
//! | `events.rs`     | [`EventStore`]         | ingested events (idempotency by event id)    |
//! | `throttle.rs`   | [`LoginThrottleStore`] | failed logins and OTPs, login clients        |
//! | `audit.rs`      | [`AuditStore`]         | the audit log, a hash chain                  |
//! | `rate_buckets.rs` | [`RateBucketStore`]  | rate limits' token buckets (PostgreSQL only) |
//! | `custody/`      | [`CustodyStore`]       | custody keys, withdrawals, pending approvals, nonces |
//! | `custody/attempts.rs` | [`AttemptStore`] | every transaction signed for a withdrawal |
//! | `nonce_fills.rs` | [`NonceFillStore`] | nonce gaps' holders and the signer's fills |
//! | `custody/create.rs` | (`CustodyStore`) | a new withdrawal judged under its wallet's lock |
//! | `velocity.rs` | (`CustodyStore`) | the velocity ledger: a window's sum in a few index reads |
//! | `chain.rs` (and `chain_*.rs`) | [`ChainStore`] | watched addresses, headers, checkpoints, transfers |
//! | `keys.rs`       | [`KeyStore`]           | sealed server keys                           |
//! | `passkeys.rs`   | [`PasskeyStore`]       | passkeys, WebAuthn challenges                |
//! | `oauth.rs`      | [`OAuthStore`]         | OAuth clients, codes, grants, refresh tokens |
//! | `prices.rs`     | [`PriceStore`]         | prices set by hand, the circuit breaker      |
//! | `sso.rs`        | [`SsoStore`]           | identity providers, linked people, sign-ins under way |
//! | `utxo.rs`       | [`UtxoStore`]          | keychains, UTXO wallets' addresses           |
//! | `unspents.rs`   | [`UnspentStore`]       | UTXO wallets' unspent outputs, their balances |
//!
//! Each file holds its records, its trait, and the one SQL implementation for both backends
//! (`sql.rs` says how). The backend is chosen from the database URL's scheme ([`open`]). The
//! store may use shared record types but never a domain service.

use std::sync::Arc;

use async_trait::async_trait;
use sqlx::Executor;

mod audit;
mod chain;
mod chain_reads;
mod chain_rows;
mod chain_write;
mod custody;
mod enterprises;
mod event_keys;
mod events;
pub mod group_commit;
mod keys;
mod nonce_fills;
mod oauth;
mod oauth_exchange;
mod outbox;
mod passkeys;
pub mod postgres;
mod prices;
mod rate_buckets;
pub mod read_cache;
mod replay;
mod sql;
mod sql_store;
pub mod sqlite;
mod sso;
mod throttle;
mod tokens;
mod unspents;
mod users;
mod utxo;
mod velocity;
mod wallets;
mod webhooks;

pub use audit::{AuditFilter, AuditStore};
pub use chain::{BlockWrite, ChainStore, NodeReport, TokenBalanceRow, TransferFilter};
pub use custody::attempts::{AttemptStore, Replacement};
use custody::{attempts as custody_attempts, create as custody_create, rows as custody_rows};
pub use custody::{
    ApprovalFilter, Batched, Created, CustodyStore, Judge, Move, RecordSwap, Refusal, Reservation, Signed,
    Spending, SumWindow, WithdrawalFilter, MAX_UNLOCK_COUNTED, MAX_UNSETTLED_MINED,
};
pub use enterprises::{Enterprise, EnterpriseStore, Member, Membership};
pub use events::EventStore;
pub use group_commit::{EventWrite, Recorded};
pub use keys::KeyStore;
pub use nonce_fills::{NonceFill, NonceFillStore, NonceHolder};
pub use oauth::{Exchange, OAuthStore, Redeem, Redeemed};
pub use outbox::{
    Claimed, Completion, DeliveryStats, FailureFacts, HourCount, LastAttempts, NotificationSearch,
    OutboxStore, Outcome, QueueCounts, RecentFailure, Saturated, SearchStore, SuspendPolicy, Tenancy,
    WebhookSearch,
};
pub use passkeys::{ChallengeKept, PasskeyAdded, PasskeyStore};
pub use prices::{PriceStore, Tripped};
pub use rate_buckets::{BucketShape, RateBucketStore, Reserved};
pub use sql::Dialect;
pub use sql_store::SqlStore;
pub use sso::{SsoLoginRow, SsoSettingRow, SsoStore};
pub use throttle::{FailureCount, FailuresOf, LoginThrottleStore};
pub use tokens::TokenStore;
pub use unspents::{BookRow, Spend, UnspentFilter, UnspentStore, UtxoBalance, UtxoChanges};
pub use users::{User, UserChange, UserStore};
pub use utxo::{AddressRow, KeychainRow, UtxoAdded, UtxoStore};
pub use wallets::WalletStore;
pub use webhooks::{CapReached, Rotation, WebhookCaps, WebhookSecret, WebhookStore, ROUTES_CACHED_MAX};

/// What a store call can fail with.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    /// A unique constraint was violated; the string says what already exists.
    #[error("{0} already exists")]
    Conflict(String),
    /// The database does not answer now: the connection was refused or lost, no pooled
    /// connection came free within the acquire timeout, the server is shutting down or busy,
    /// or a statement ran past its timeout. A transaction that failed so was not applied,
    /// unless the connection was lost after its commit was sent (then a retry with the same
    /// idempotency key finds it). The string is the cause, for logs only: it can name hosts.
    #[error("database unavailable: {0}")]
    Unavailable(String),
    #[error(transparent)]
    Other(#[from] anyhow::Error),
}

impl StoreError {
    /// A stored value that no valid write could have left: a corrupted row, an internal error
    /// naming `what` and showing `value`.
    pub(crate) fn malformed(what: &str, value: &str) -> Self {
        StoreError::Other(anyhow::anyhow!("malformed stored {what}: {value:?}"))
    }
}

impl From<sqlx::Error> for StoreError {
    fn from(e: sqlx::Error) -> Self {
        if unavailable(&e) {
            return StoreError::Unavailable(e.to_string());
        }
        StoreError::Other(e.into())
    }
}

/// Whether `e` says the database is away or overloaded rather than that the statement is
/// wrong. PostgreSQL SQLSTATE classes: 08 connection exception, 53 insufficient resources,
/// 57P01-57P03 shutdown or not yet accepting, 57014 statement timeout; SQLite: 5 (BUSY) and
/// 6 (LOCKED) after the busy timeout.
fn unavailable(e: &sqlx::Error) -> bool {
    match e {
        sqlx::Error::Io(_)
        | sqlx::Error::Tls(_)
        | sqlx::Error::PoolTimedOut
        | sqlx::Error::PoolClosed
        | sqlx::Error::WorkerCrashed
        | sqlx::Error::Protocol(_) => true,
        sqlx::Error::Database(db) => db.code().is_some_and(|code| {
            code.starts_with("08")
                || code.starts_with("53")
                || matches!(code.as_ref(), "57P01" | "57P02" | "57P03" | "57014" | "5" | "6")
        }),
        _ => false,
    }
}

pub type StoreResult<T> = Result<T, StoreError>;

/// Everything the service stores: every concern's trait, plus the connection's life.
#[async_trait]
pub trait Store:
    UserStore
    + TokenStore
    + EnterpriseStore
    + WalletStore
    + WebhookStore
    + OutboxStore
    + SearchStore
    + EventStore
    + LoginThrottleStore
    + AuditStore
    + ChainStore
    + KeyStore
    + PasskeyStore
    + OAuthStore
    + RateBucketStore
    + CustodyStore
    + AttemptStore
    + NonceFillStore
    + PriceStore
    + SsoStore
    + UtxoStore
    + UnspentStore
    + Send
    + Sync
    + 'static
{
    /// Answers when the database answers.
    async fn ping(&self) -> StoreResult<()>;
    /// Closes the connections; later calls fail. Used at shutdown.
    async fn close(&self);
    /// The process's clock, which the domain and the store read ([`crate::clock`]).
    fn clock(&self) -> &crate::clock::Clock;
}

#[async_trait]
impl<DB: Dialect> Store for SqlStore<DB>
where
    SqlStore<DB>: UserStore
        + TokenStore
        + EnterpriseStore
        + WalletStore
        + WebhookStore
        + OutboxStore
        + SearchStore
        + EventStore
        + LoginThrottleStore
        + AuditStore
        + ChainStore
        + KeyStore
        + PasskeyStore
        + OAuthStore
        + RateBucketStore
        + CustodyStore
        + AttemptStore
        + NonceFillStore
        + PriceStore
        + SsoStore
        + UtxoStore
        + UnspentStore,
    for<'c> &'c mut DB::Connection: Executor<'c, Database = DB>,
{
    async fn ping(&self) -> StoreResult<()> {
        self.pool.execute("SELECT 1").await?;
        Ok(())
    }

    async fn close(&self) {
        self.lane.release();
        self.pool.close().await;
    }

    fn clock(&self) -> &crate::clock::Clock {
        &self.clock
    }
}

/// A shared store handle.
pub type DynStore = Arc<dyn Store>;

/// Opens the configured database and applies migrations. The backend is chosen by the URL's
/// scheme: `sqlite://PATH` (the embedded default; file and folder created) or
/// `postgres://...` / `postgresql://...`.
pub async fn open(config: &crate::config::Config) -> anyhow::Result<DynStore> {
    let url = config.database_url.as_str();
    if url.starts_with("sqlite:") {
        Ok(Arc::new(sqlite::SqliteStore::open(url, config).await?))
    } else if url.starts_with("postgres://") || url.starts_with("postgresql://") {
        Ok(Arc::new(postgres::PostgresStore::open(url, config).await?))
    } else {
        anyhow::bail!("database URL scheme not supported (use sqlite://PATH or postgres://...)")
    }
}
