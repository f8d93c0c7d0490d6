//! [`SqlStore`], the one implementation of the store traits, generic over the database
//! ([`super::sql::Dialect`]), and its start-up: the group-commit writer and the read cache's
//! version poller. Each aggregate's file implements its trait for it.

use std::{future::Future, sync::Arc, time::Duration};

use sqlx::{Database, Pool};

use super::{
    group_commit::{EventWrite, EventWriter, Recorded},
    read_cache::ReadCache,
    sql::{begin_gated, Dialect, WriteGate, WriteTx},
    StoreResult,
};
use crate::config::Config;

/// A store over a pool of `DB` connections ([`super::sqlite::SqliteStore`],
/// [`super::postgres::PostgresStore`]).
pub struct SqlStore<DB: Database> {
    pub(super) pool: Pool<DB>,
    /// The group-commit writer of ingested events; without one, each event is its own
    /// transaction.
    pub(super) event_writer: Option<EventWriter>,
    /// Tokens, users, memberships and webhook routes (see [`ReadCache`]).
    pub(super) cache: Arc<ReadCache>,
    pub(super) gate: WriteGate,
    /// Records the MACs of signed writes in batches (the replay guard).
    pub(super) replay: super::replay::ReplayWriter,
}

impl<DB: Dialect> SqlStore<DB> {
    /// A store over `pool` with its hot-path helpers started: the group-commit writer
    /// (`config.ingest`, steps by `write`), the authentication cache with its version poller
    /// (`config.cache`, reads by `read_version`) and the replay guard's writer
    /// (`record_replays`). Each backend passes its concrete steps.
    pub(super) fn start<W, WF, R, RF, P, PF>(
        pool: Pool<DB>,
        config: &Config,
        (write, read_version, record_replays): (W, R, P),
    ) -> Self
    where
        W: Fn(Pool<DB>, WriteGate, Vec<EventWrite>) -> WF + Send + 'static,
        WF: Future<Output = (Vec<EventWrite>, StoreResult<Vec<Recorded>>)> + Send + 'static,
        R: Fn(Pool<DB>) -> RF + Send + 'static,
        RF: Future<Output = StoreResult<i64>> + Send + 'static,
        P: Fn(Pool<DB>, WriteGate, Vec<(String, i64)>, i64) -> PF + Send + 'static,
        PF: Future<Output = StoreResult<Vec<String>>> + Send,
    {
        let gate: WriteGate = DB::SERIALIZE_WRITES.then(Arc::default);
        let event_writer =
            Some(super::group_commit::spawn(pool.clone(), gate.clone(), &config.ingest, write));
        let cache = Arc::new(ReadCache::new(config.cache.capacity));
        if config.cache.capacity > 0 {
            let (weak, p) = (Arc::downgrade(&cache), pool.clone());
            let interval = Duration::from_millis(config.cache.poll_interval_ms);
            tokio::spawn(super::read_cache::poll(weak, interval, move || read_version(p.clone())));
        }
        let replay = super::replay::spawn(pool.clone(), gate.clone(), record_replays);
        Self { pool, event_writer, cache, gate, replay }
    }

    /// Begins a write transaction through the process's write gate.
    pub(super) async fn begin_write(&self) -> sqlx::Result<WriteTx<DB>> {
        begin_gated(&self.pool, &self.gate).await
    }

    /// Begins a write transaction whose commit need not wait for a flush to disk
    /// ([`Dialect::RELAXED_COMMIT`]): for writes whose loss in a crash only means a
    /// redelivery (claims, delivery outcomes).
    pub(super) async fn begin_relaxed(&self) -> sqlx::Result<WriteTx<DB>>
    where
        for<'c> &'c mut DB::Connection: sqlx::Executor<'c, Database = DB>,
        for<'q> DB::Arguments<'q>: sqlx::IntoArguments<'q, DB>,
    {
        let mut tx = self.begin_write().await?;
        if let Some(relaxed) = DB::RELAXED_COMMIT {
            sqlx::query(relaxed).execute(&mut *tx).await?;
        }
        Ok(tx)
    }

    /// Runs `sql`, a delete of at most `$2` rows older than `$1` (retention, in the table's
    /// time unit), under the write gate; returns how many rows went.
    pub(super) async fn delete_batch(&self, sql: &str, before: i64, limit: u32) -> StoreResult<u64>
    where
        for<'c> &'c mut DB::Connection: sqlx::Executor<'c, Database = DB>,
        for<'q> DB::Arguments<'q>: sqlx::IntoArguments<'q, DB>,
        for<'q> i64: sqlx::Encode<'q, DB> + sqlx::Type<DB>,
    {
        let _gate = self.write_gate().await;
        let r = sqlx::query(sql).bind(before).bind(i64::from(limit)).execute(&self.pool).await?;
        Ok(DB::rows_affected(&r))
    }

    /// Holds the write gate for a single-statement write (dropped when done).
    pub(super) async fn write_gate(&self) -> Option<tokio::sync::OwnedMutexGuard<()>> {
        match &self.gate {
            Some(g) => Some(g.clone().lock_owned().await),
            None => None,
        }
    }
}
