//! [`SqlStore`], the one implementation of the store traits, generic over the database
//! ([`super::sql::Dialect`]), and its start-up: the group-commit writer and the read cache's
//! version poller. Each aggregate's file implements its trait for it.

use custodian_macros::sql_bounds;
use std::{future::Future, sync::Arc, time::Duration};

use sqlx::{pool::PoolConnection, Database, Pool};

use super::{
    group_commit::{Batch, Writer, WriterConn, Written},
    read_cache::ReadCache,
    sql::{begin_gated, Dialect, WriteGate, WriteTx},
    StoreResult,
};
use crate::config::Config;

/// A store over a pool of `DB` connections ([`super::sqlite::SqliteStore`],
/// [`super::postgres::PostgresStore`]).
pub struct SqlStore<DB: Database> {
    pub(super) pool: Pool<DB>,
    /// The group-commit writer of ingested events (and, on SQLite, of delivery outcomes).
    pub(super) writer: Writer,
    /// Tokens, users, memberships and webhook routes (see [`ReadCache`]).
    pub(super) cache: Arc<ReadCache>,
    pub(super) gate: WriteGate,
    /// Records the MACs of signed writes in batches (the replay guard).
    pub(super) replay: super::replay::ReplayWriter,
    /// Connections the wallet lookup keeps between uses.
    pub(super) lane: ReadLane<DB>,
    /// The process's clock ([`crate::clock`]).
    pub(super) clock: crate::clock::Clock,
}

/// Pooled connections kept aside for the hottest read, the wallet lookup (docs/decisions.md#performance-as-the-data-grows): sqlx
/// 0.8 pings every connection that goes back to its pool, for SQLite a second round trip to
/// the connection's thread per query (8% of the server's CPU under 64 clients looking up one
/// wallet). The lookup runs on at most [`Dialect::READ_LANE`] connections that it takes from
/// the pool once and keeps; the rest of the pool serves everything else. A read that fails or
/// is cancelled drops its connection back to the pool, whose ping then checks it as before, and
/// the next read takes a fresh one. A lane of capacity 0 lends straight from the pool and keeps
/// nothing.
pub(super) struct ReadLane<DB: Database> {
    idle: std::sync::Mutex<Vec<PoolConnection<DB>>>,
    /// `None` for capacity 0.
    slots: Option<Arc<tokio::sync::Semaphore>>,
}

/// A connection lent by a [`ReadLane`]: [`Lent::keep`] after a successful read.
pub(super) struct Lent<'l, DB: Database> {
    conn: PoolConnection<DB>,
    lane: &'l ReadLane<DB>,
    /// The lane's slot; `None` when the lane keeps nothing.
    slot: Option<tokio::sync::OwnedSemaphorePermit>,
}

impl<DB: Database> ReadLane<DB> {
    /// Connections kept now.
    #[cfg(test)]
    pub(super) fn kept(&self) -> usize {
        self.idle.lock().map(|idle| idle.len()).unwrap_or(0)
    }

    fn new(capacity: usize) -> Self {
        let slots = (capacity > 0).then(|| Arc::new(tokio::sync::Semaphore::new(capacity)));
        ReadLane { idle: std::sync::Mutex::default(), slots }
    }

    /// Gives every kept connection back to its pool: a closing pool waits for each connection
    /// taken from it, and these would never come back by themselves.
    pub(super) fn release(&self) {
        let kept = self.idle.lock().map(|mut idle| std::mem::take(&mut *idle)).unwrap_or_default();
        drop(kept);
    }

    /// One of the lane's connections, waiting for a free one; taken from `pool` when the lane
    /// has fewer than its capacity.
    pub(super) async fn take(&self, pool: &Pool<DB>) -> sqlx::Result<Lent<'_, DB>> {
        let slot = match &self.slots {
            Some(slots) => Some(slots.clone().acquire_owned().await.map_err(|_| sqlx::Error::PoolClosed)?),
            None => None,
        };
        let kept = self.idle.lock().ok().and_then(|mut idle| idle.pop());
        let conn = match kept {
            Some(conn) => conn,
            None => pool.acquire().await?,
        };
        Ok(Lent { conn, lane: self, slot })
    }
}

impl<DB: Database> Lent<'_, DB> {
    /// The connection to run the read on.
    pub(super) fn conn(&mut self) -> &mut DB::Connection {
        &mut self.conn
    }

    /// Keeps the connection for the lane's next read (back to the pool when the lane keeps
    /// nothing); the slot is freed after.
    pub(super) fn keep(self) {
        let Lent { conn, lane, slot } = self;
        if slot.is_some() {
            if let Ok(mut idle) = lane.idle.lock() {
                idle.push(conn);
            }
        }
    }
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
        W: Fn(WriterConn<DB>, WriteGate, Batch) -> WF + Send + 'static,
        WF: Future<Output = (Batch, StoreResult<Written>)> + Send + 'static,
        R: Fn(Pool<DB>) -> RF + Send + 'static,
        RF: Future<Output = StoreResult<i64>> + Send + 'static,
        P: Fn(Pool<DB>, WriteGate, Vec<(String, i64)>, i64) -> PF + Send + 'static,
        PF: Future<Output = StoreResult<Vec<String>>> + Send,
    {
        let gate: WriteGate = DB::SERIALIZE_WRITES.then(Arc::default);
        let writer = super::group_commit::spawn(pool.clone(), gate.clone(), &config.ingest, write);
        let cache = Arc::new(ReadCache::new(config.cache.capacity));
        if config.cache.capacity > 0 {
            let (weak, p) = (Arc::downgrade(&cache), pool.clone());
            let interval = Duration::from_millis(config.cache.poll_interval_ms);
            tokio::spawn(super::read_cache::poll(weak, interval, move || read_version(p.clone())));
        }
        let replay = super::replay::spawn(pool.clone(), gate.clone(), record_replays);
        let clock = crate::clock::Clock::default();
        Self { pool, writer, cache, gate, replay, lane: ReadLane::new(DB::READ_LANE), clock }
    }

    /// Begins a write transaction through the process's write gate.
    pub(super) async fn begin_write(&self) -> sqlx::Result<WriteTx<DB>> {
        begin_gated(&self.pool, &self.gate).await
    }

    /// Begins a write transaction whose commit need not wait for a flush to disk
    /// ([`Dialect::RELAXED_COMMIT`]): for writes whose loss in a crash only means a
    /// redelivery (claims, delivery outcomes).
    #[sql_bounds]
    pub(super) async fn begin_relaxed(&self) -> sqlx::Result<WriteTx<DB>> {
        let mut tx = self.begin_write().await?;
        if let Some(relaxed) = DB::RELAXED_COMMIT {
            sqlx::query(relaxed).execute(&mut *tx).await?;
        }
        Ok(tx)
    }

    /// Runs `sql`, a delete of at most `$2` rows older than `$1` (retention, in the table's
    /// time unit), under the write gate; returns how many rows went.
    #[sql_bounds]
    pub(super) async fn delete_batch(&self, sql: &str, before: i64, limit: u32) -> StoreResult<u64> {
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

#[cfg(test)]
mod tests {
    use super::*;

    /// The lane lends at most its capacity (a third read waits), keeps what is kept out of the
    /// pool, and a connection not kept (a failed or cancelled read) goes back to the pool.
    #[tokio::test]
    async fn the_read_lane_keeps_at_most_its_capacity() {
        let dir = tempfile::tempdir().unwrap();
        let url = format!("sqlite://{}?mode=rwc", dir.path().join("lane.db").display());
        let pool = sqlx::sqlite::SqlitePoolOptions::new().max_connections(4).connect(&url).await.unwrap();
        let lane = ReadLane::<sqlx::Sqlite>::new(2);
        let (mut a, b) = (lane.take(&pool).await.unwrap(), lane.take(&pool).await.unwrap());
        let third = tokio::time::timeout(Duration::from_millis(100), lane.take(&pool)).await;
        assert!(third.is_err(), "a third read waits for one of the two");
        let one: i64 = sqlx::query_scalar("SELECT 1").fetch_one(a.conn()).await.unwrap();
        assert_eq!(one, 1);
        a.keep();
        drop(b);
        // The kept one stays out of the pool; the dropped one went back to it.
        tokio::time::sleep(Duration::from_millis(50)).await;
        assert_eq!(lane.idle.lock().unwrap().len(), 1);
        assert_eq!((pool.size(), pool.num_idle()), (2, 1));
        // The next read gets the kept connection, without taking another from the pool.
        let c = lane.take(&pool).await.unwrap();
        assert_eq!(lane.idle.lock().unwrap().len(), 0);
        assert_eq!(pool.num_idle(), 1);
        c.keep();
        // A lane of capacity 0 lends from the pool and gives back to it.
        let none = ReadLane::<sqlx::Sqlite>::new(0);
        let d = none.take(&pool).await.unwrap();
        d.keep();
        tokio::time::sleep(Duration::from_millis(50)).await;
        assert_eq!(none.idle.lock().unwrap().len(), 0);
        assert_eq!(pool.num_idle(), 1);
    }

    /// A connection the lane keeps holds a closing pool for ever (sqlx waits for every
    /// connection taken from it); released first, the pool closes. A server once hung at
    /// shutdown on this after ten wallet reads at once.
    #[tokio::test]
    async fn a_pool_closes_once_the_lane_gives_back_what_it_keeps() {
        let dir = tempfile::tempdir().unwrap();
        let url = format!("sqlite://{}?mode=rwc", dir.path().join("lane.db").display());
        let pool = sqlx::sqlite::SqlitePoolOptions::new().max_connections(4).connect(&url).await.unwrap();
        let lane = ReadLane::<sqlx::Sqlite>::new(2);
        lane.take(&pool).await.unwrap().keep();
        assert_eq!(lane.idle.lock().unwrap().len(), 1);
        let held = tokio::time::timeout(Duration::from_millis(300), pool.close()).await;
        assert!(held.is_err(), "a kept connection holds the close");
        lane.release();
        let closed = tokio::time::timeout(Duration::from_secs(5), pool.close()).await;
        assert!(closed.is_ok(), "released, the pool closes");
        assert_eq!(lane.idle.lock().unwrap().len(), 0);
    }
}
