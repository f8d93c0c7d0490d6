//! What the one SQL implementation of the store traits (`sql_store::SqlStore`) is written
//! with: the [`Dialect`] of each database, the write gate, and small encoding helpers. It
//! depends on no other file of the store.
//!
//! Statements are written once with `$n` placeholders, which both SQLite and PostgreSQL accept.
//! Where the dialects differ (JSON arrays, string aggregation, `SKIP LOCKED`, commit durability,
//! how a write transaction begins) the statement is a constant of [`Dialect`], stated in full by
//! each backend (`sqlite.rs`, `postgres.rs`); nothing rewrites statement text at run time.
//!
//! Rust does not carry bounds on other types (`i64: Encode<DB>`) from a trait's where clause to
//! its users, so the sqlx bounds every statement needs are added to each generic impl and
//! function by the `#[sql_bounds]` attribute (the `custodian-macros` crate, `macros/`); an impl
//! states only the rows it reads (`for<'r> Row: FromRow<'r, DB::Row>`). They are checked once
//! per backend when `open` builds the store.

use std::{future::Future, sync::Arc};

use anyhow::Context;
use sqlx::{Database, Pool, Transaction};

use super::{StoreError, StoreResult};

/// What one database engine says differently. Implemented for `sqlx::Sqlite` and
/// `sqlx::Postgres`; `$1` binds a JSON array of ids as text wherever a statement takes "ids".
pub trait Dialect: Database {
    /// Run first in a transaction whose loss in a crash only means a redelivery (at least
    /// once), so that its commit need not wait for a flush to disk.
    const RELAXED_COMMIT: Option<&'static str>;
    /// Clears dead row versions from the outbox (PostgreSQL's VACUUM); none where freed space
    /// is reused without one (SQLite).
    const VACUUM_OUTBOX: Option<&'static str>;
    /// `id` of the wallets among ids `$1`.
    const EXISTING_WALLET_IDS: &'static str;
    /// One text value packing the wallets among ids `$1` (deleted ones only when `$2`):
    /// fields joined by U+001F, records by U+001E, in [`super::wallets::unpack_wallet`]'s order.
    const WALLETS_PACKED: &'static str;
    /// Leases due notifications of active webhooks: `$1` lease until (ms), `$2` now (ms), `$3`
    /// limit; returns the leased rows. Concurrent processes must not lease the same row.
    const CLAIM_DUE_ALL: &'static str;
    /// [`Dialect::CLAIM_DUE_ALL`], but none of webhooks `$4`, of enterprises `$5`, or of users
    /// `$6` (their webhooks bound to no enterprise): used only when some are at their share, so
    /// the usual claim keeps its simple plan.
    const CLAIM_DUE_SKIPPING: &'static str;
    /// Makes up to `$3` of webhook `$2`'s notifications waiting for a retry (pending,
    /// unleased, scheduled after `$1`) due at `$1`, soonest first, through the claimable index.
    const RELEASE_RETRIES: &'static str;
    /// The webhooks among ids `$1`.
    const WEBHOOKS_BY_IDS: &'static str;
    /// Gives back notifications `$2` unattempted, due at `$1` (ms).
    const DEFER: &'static str;
    /// Sets notifications `$4` to state `$1`, adding `$2` retries, at `$3` (ms).
    const FINISH: &'static str;

    /// Whether the rate limits' token buckets live in the database, shared by every process
    /// (PostgreSQL), rather than in the one process's memory (SQLite).
    const SHARES_RATE_BUCKETS: bool;

    /// Run first in a webhook insert so that its cap counts see every concurrent insert.
    const SERIALIZE_WEBHOOK_INSERTS: Option<&'static str>;

    /// Locks wallet `$1` until the transaction ends: two withdrawals of one wallet are judged
    /// one after the other, across processes (its in-flight cap, balance and velocity limits).
    const LOCK_WALLET: &'static str;
    /// Locks access token `$1` until the transaction ends: two withdrawals of one unlocked
    /// session, of any wallets, are judged one after the other against its `txValueLimit`
    /// (taken after the wallet's lock, never before).
    const LOCK_TOKEN: &'static str;
    /// Reads the audit chain's last hash and locks it until the transaction ends.
    const LOCK_AUDIT_HEAD: &'static str;
    /// The text elements of the JSON array bound as `$param`, as a subquery's rows.
    fn json_text_elements(param: usize) -> String;
    /// Parameters `first..first + n` of a statement whose parameters all appear in order, once
    /// each (multi-row inserts): `$1, $2, ...`, or SQLite's nameless `?`, which binds in order
    /// without sqlx asking each parameter's name (a scan of all names per parameter:
    /// quadratic in a statement of hundreds).
    fn row_params(first: usize, n: usize) -> String {
        placeholders(first, n)
    }
    /// The text value of `key` in the JSON object held as text in column `column`.
    fn json_text_field(column: &str, key: &str) -> String;

    /// Rows a statement changed.
    fn rows_affected(r: &Self::QueryResult) -> u64;

    /// Whether the process runs one write transaction at a time through an async gate rather
    /// than letting them meet at the database's lock (SQLite, whose busy handler sleeps up to
    /// 100 ms between retries: the latency tail the profile showed).
    const SERIALIZE_WRITES: bool;

    /// Most connections the hottest read keeps out of the pool between uses
    /// ([`super::sql_store::ReadLane`]); 0 for none.
    const READ_LANE: usize;

    /// Begins a transaction that writes: it must not fail later for having read first.
    fn begin_write(
        pool: &Pool<Self>,
    ) -> impl Future<Output = sqlx::Result<Transaction<'static, Self>>> + Send;

    /// [`Dialect::begin_write`] on a connection the caller holds.
    fn begin_write_on(
        conn: &mut Self::Connection,
    ) -> impl Future<Output = sqlx::Result<Transaction<'_, Self>>> + Send;
}

/// The process's write gate, when the database wants writes serialised
/// ([`Dialect::SERIALIZE_WRITES`]).
pub(super) type WriteGate = Option<Arc<tokio::sync::Mutex<()>>>;

/// A write transaction holding the write gate until it ends; derefs to the connection, as a
/// `Transaction` does.
pub(super) struct WriteTx<DB: Database> {
    tx: Transaction<'static, DB>,
    _gate: Option<tokio::sync::OwnedMutexGuard<()>>,
}

impl<DB: Database> std::ops::Deref for WriteTx<DB> {
    type Target = DB::Connection;

    fn deref(&self) -> &DB::Connection {
        &self.tx
    }
}

impl<DB: Database> std::ops::DerefMut for WriteTx<DB> {
    fn deref_mut(&mut self) -> &mut DB::Connection {
        &mut self.tx
    }
}

impl<DB: Database> WriteTx<DB> {
    pub(super) async fn commit(self) -> sqlx::Result<()> {
        self.tx.commit().await
    }
}

/// Takes the gate (if any), then begins a write transaction.
pub(super) async fn begin_gated<DB: Dialect>(pool: &Pool<DB>, gate: &WriteGate) -> sqlx::Result<WriteTx<DB>> {
    let guard = match gate {
        Some(g) => Some(g.clone().lock_owned().await),
        None => None,
    };
    Ok(WriteTx { tx: DB::begin_write(pool).await?, _gate: guard })
}

/// Parses a stored value into its type (ids, coins, amounts): a value that does not parse is a
/// corrupted row, an internal error naming `what`.
pub(super) fn parse_stored<T: std::str::FromStr>(s: &str, what: &str) -> StoreResult<T> {
    s.parse().map_err(|_| StoreError::malformed(what, s))
}

/// Decodes a JSON array column.
pub(super) fn json_list(s: &str) -> StoreResult<Vec<String>> {
    serde_json::from_str(s).context("stored JSON list").map_err(StoreError::Other)
}

/// Decodes an optional JSON array column.
pub(super) fn json_list_opt(s: Option<String>) -> StoreResult<Option<Vec<String>>> {
    s.as_deref().map(json_list).transpose()
}

/// Decodes a JSON column.
pub(super) fn json_value<T: serde::de::DeserializeOwned>(s: &str) -> StoreResult<T> {
    serde_json::from_str(s).context("stored JSON").map_err(StoreError::Other)
}

/// Encodes a value as JSON text for a TEXT column.
pub(super) fn to_json<T: serde::Serialize + ?Sized>(v: &T) -> StoreResult<String> {
    serde_json::to_string(v).context("encoding JSON").map_err(StoreError::Other)
}

/// Encodes an optional value as JSON text, NULL when absent.
pub(super) fn to_json_opt<T: serde::Serialize>(v: &Option<T>) -> StoreResult<Option<String>> {
    v.as_ref().map(to_json).transpose()
}

/// Maps a unique-constraint violation to [`StoreError::Conflict`] naming `what`.
pub(super) fn unique_violation(e: sqlx::Error, what: &str) -> StoreError {
    match &e {
        sqlx::Error::Database(db) if db.is_unique_violation() => StoreError::Conflict(what.into()),
        _ => e.into(),
    }
}

/// `$first, $first+1, ...`: `n` numbered placeholders.
pub(super) fn placeholders(first: usize, n: usize) -> String {
    (first..first + n).map(|i| format!("${i}")).collect::<Vec<_>>().join(", ")
}

/// The last item of each key, in the order those last ones came: a multi-row upsert may not
/// touch one row twice (PostgreSQL refuses), and a later item wins.
pub(super) fn last_of_each<'a, T, K: std::hash::Hash + Eq>(
    items: &'a [T],
    key: impl Fn(&'a T) -> K,
) -> Vec<&'a T> {
    let mut last = std::collections::HashMap::new();
    for (i, item) in items.iter().enumerate() {
        last.insert(key(item), i);
    }
    items
        .iter()
        .enumerate()
        .filter(|(i, item)| last.get(&key(item)) == Some(i))
        .map(|(_, item)| item)
        .collect()
}

/// A count as `u32`, saturating.
pub(super) fn count_u32(n: i64) -> u32 {
    u32::try_from(n.max(0)).unwrap_or(u32::MAX)
}
