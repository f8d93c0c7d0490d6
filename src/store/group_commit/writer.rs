//! The writer task: one per process, it takes what is waiting (outcome batches first, then up
//! to `ingest.batch_max` events after an optional linger of `ingest.linger_us`), writes it in
//! one transaction and answers each caller after the commit; a round that fails is written
//! again part by part.

use custodian_macros::sql_bounds;
use std::time::Duration;

use std::sync::Arc;

use sqlx::{pool::PoolConnection, Database, FromRow, Pool};
use tokio::sync::{mpsc, oneshot};

use super::{events_tx, EventOutcome, EventWrite, Recorded};
use crate::config::IngestConfig;
use crate::store::outbox::completion::{complete_tx, CompletionWrite, FailureRow};
use crate::store::outbox::Completed;
use crate::store::sql::{Dialect, WriteGate};
use crate::store::{StoreError, StoreResult};

struct EventJob {
    event: EventWrite,
    reply: oneshot::Sender<EventOutcome>,
}

struct CompleteJob {
    write: CompletionWrite,
    reply: oneshot::Sender<StoreResult<Completed>>,
}

/// What the writer writes in one transaction.
pub struct Batch {
    events: Vec<EventWrite>,
    completions: Vec<CompletionWrite>,
}

impl Batch {
    fn jobs(&self) -> usize {
        self.events.len() + self.completions.len()
    }
}

/// What each part of a [`Batch`] got, in its order.
pub struct Written {
    events: Vec<Recorded>,
    completions: Vec<Completed>,
}

/// The sending side of a process's group-commit writer (events, and delivery outcomes on SQLite).
#[derive(Clone)]
pub struct Writer {
    events: mpsc::Sender<EventJob>,
    completions: mpsc::Sender<CompleteJob>,
}

impl Writer {
    /// Queues `event` and waits for its commit. Errors: the writer is gone (the store was
    /// closed), or the event's own write failed.
    pub async fn write(&self, event: EventWrite) -> EventOutcome {
        let (reply, answer) = oneshot::channel();
        self.events.send(EventJob { event, reply }).await.map_err(|_| closed())?;
        answer.await.map_err(|_| closed())?
    }

    /// Queues delivery outcomes and waits for their commit (with the next round's events).
    /// Errors: the writer is gone, or the outcomes' own write failed.
    pub(in crate::store) async fn complete(&self, write: CompletionWrite) -> StoreResult<Completed> {
        let (reply, answer) = oneshot::channel();
        self.completions.send(CompleteJob { write, reply }).await.map_err(|_| closed())?;
        answer.await.map_err(|_| closed())?
    }
}

fn closed() -> StoreError {
    StoreError::Other(anyhow::anyhow!("the group-commit writer has stopped"))
}

/// The writer's connection. Where writes are serialised (SQLite) it is the same one from round
/// to round: a commit by another connection empties a connection's page cache, and a writer
/// taking any pooled connection found its cache stale nearly every round (pages read again,
/// the memory map remapped). Elsewhere it is taken from the pool each round, so that the pool's
/// checks still see it.
pub struct WriterConn<DB: Database> {
    pool: Pool<DB>,
    kept: Arc<std::sync::Mutex<Option<PoolConnection<DB>>>>,
}

impl<DB: Database> Clone for WriterConn<DB> {
    fn clone(&self) -> Self {
        Self { pool: self.pool.clone(), kept: self.kept.clone() }
    }
}

/// Writes a batch in one transaction on `conn` and says what each part got. An error means
/// nothing of the batch was stored.
#[sql_bounds]
async fn write_batch<DB>(conn: &mut DB::Connection, gate: &WriteGate, batch: &Batch) -> StoreResult<Written>
where
    for<'r> (String,): FromRow<'r, DB::Row>,
    for<'r> (String, String): FromRow<'r, DB::Row>,
    for<'r> (i64,): FromRow<'r, DB::Row>,
    for<'r> FailureRow: FromRow<'r, DB::Row>,
{
    let _gate = match gate {
        Some(g) => Some(g.lock().await),
        None => None,
    };
    let mut tx = DB::begin_write_on(conn).await?;
    let refs: Vec<&EventWrite> = batch.events.iter().collect();
    let events = events_tx::<DB>(&mut tx, &refs).await?;
    let mut completions = Vec::with_capacity(batch.completions.len());
    for c in &batch.completions {
        completions.push(complete_tx::<DB>(&mut tx, &c.outcomes, c.now_ms, &*c.rule).await?);
    }
    tx.commit().await?;
    Ok(Written { events, completions })
}

/// [`write_batch`] over an owned batch, handing it back (for a retry part by part): the
/// writer task's step, named per backend so that the task's future has a concrete type. A
/// kept connection is given up after an error; the next round takes a fresh one.
#[sql_bounds]
pub(in crate::store) async fn write_owned<DB>(
    conn: WriterConn<DB>,
    gate: WriteGate,
    batch: Batch,
) -> (Batch, StoreResult<Written>)
where
    for<'r> (String,): FromRow<'r, DB::Row>,
    for<'r> (String, String): FromRow<'r, DB::Row>,
    for<'r> (i64,): FromRow<'r, DB::Row>,
    for<'r> FailureRow: FromRow<'r, DB::Row>,
{
    let kept = conn.kept.lock().ok().and_then(|mut k| k.take());
    let mut c = match kept {
        Some(c) => c,
        None => match conn.pool.acquire().await {
            Ok(c) => c,
            Err(e) => return (batch, Err(e.into())),
        },
    };
    let result = write_batch::<DB>(&mut c, &gate, &batch).await;
    if result.is_ok() && DB::SERIALIZE_WRITES {
        if let Ok(mut k) = conn.kept.lock() {
            // Checked under the lock that `give_back_on_close` takes: a closing pool waits for
            // every connection, so none is kept once it closes.
            if !conn.pool.is_closed() {
                *k = Some(c);
            }
        }
    }
    (batch, result)
}

/// Outcome batches that may wait for the writer: the engine's completion loop sends one at a
/// time and waits for it.
const COMPLETIONS_QUEUE: usize = 16;

/// Starts the writer task of `pool`; it ends when every [`Writer`] is dropped.
/// Called by each backend with its concrete database type.
pub(in crate::store) fn spawn<DB, F, Fut>(
    pool: Pool<DB>,
    gate: WriteGate,
    cfg: &IngestConfig,
    write: F,
) -> Writer
where
    DB: Dialect,
    F: Fn(WriterConn<DB>, WriteGate, Batch) -> Fut + Send + 'static,
    Fut: std::future::Future<Output = (Batch, StoreResult<Written>)> + Send + 'static,
{
    let (events, events_rx) = mpsc::channel(cfg.queue);
    let (completions, completions_rx) = mpsc::channel(COMPLETIONS_QUEUE);
    let (batch_max, linger) = (cfg.batch_max, Duration::from_micros(cfg.linger_us));
    let inbox = Inbox { events: events_rx, completions: completions_rx };
    let conn = WriterConn { pool, kept: Arc::default() };
    let (alive, writer_gone) = oneshot::channel::<()>();
    tokio::spawn(give_back_on_close(conn.clone(), writer_gone));
    tokio::spawn(async move {
        run(conn, gate, inbox, batch_max, linger, write).await;
        drop(alive);
    });
    Writer { events, completions }
}

/// Drops the kept connection when the pool closes (`Store::close` waits for every connection);
/// ends with the writer otherwise.
async fn give_back_on_close<DB: Database>(conn: WriterConn<DB>, writer_gone: oneshot::Receiver<()>) {
    tokio::select! {
        _ = conn.pool.close_event() => {
            if let Ok(mut k) = conn.kept.lock() {
                k.take();
            }
        }
        _ = writer_gone => {}
    }
}

struct Inbox {
    events: mpsc::Receiver<EventJob>,
    completions: mpsc::Receiver<CompleteJob>,
}

impl Inbox {
    /// The next round's jobs: waits for the first, then takes every outcome batch waiting and
    /// up to `batch_max` events (lingering up to `linger` for more). None once every sender
    /// is gone and nothing is left.
    async fn round(
        &mut self,
        batch_max: usize,
        linger: Duration,
    ) -> Option<(Vec<EventJob>, Vec<CompleteJob>)> {
        let (mut events, mut completions) = (Vec::new(), Vec::new());
        tokio::select! {
            biased;
            Some(c) = self.completions.recv() => completions.push(c),
            Some(e) = self.events.recv() => events.push(e),
            else => return None,
        }
        if !linger.is_zero() && !events.is_empty() {
            let deadline = tokio::time::Instant::now() + linger;
            while events.len() < batch_max {
                match tokio::time::timeout_at(deadline, self.events.recv()).await {
                    Ok(Some(j)) => events.push(j),
                    _ => break,
                }
            }
        }
        while events.len() < batch_max {
            match self.events.try_recv() {
                Ok(j) => events.push(j),
                Err(_) => break,
            }
        }
        while let Ok(c) = self.completions.try_recv() {
            completions.push(c);
        }
        Some((events, completions))
    }
}

/// Where the answers of a batch's parts go.
struct Replies {
    events: Vec<oneshot::Sender<EventOutcome>>,
    completions: Vec<oneshot::Sender<StoreResult<Completed>>>,
}

impl Replies {
    fn fail_all(self, mut e: impl FnMut() -> StoreError) {
        for r in self.events {
            let _ = r.send(Err(e()));
        }
        for r in self.completions {
            let _ = r.send(Err(e()));
        }
    }
}

async fn run<DB, F, Fut>(
    conn: WriterConn<DB>,
    gate: WriteGate,
    mut inbox: Inbox,
    batch_max: usize,
    linger: Duration,
    write: F,
) where
    DB: Dialect,
    F: Fn(WriterConn<DB>, WriteGate, Batch) -> Fut,
    Fut: std::future::Future<Output = (Batch, StoreResult<Written>)>,
{
    while let Some((event_jobs, complete_jobs)) = inbox.round(batch_max, linger).await {
        let (events, event_replies): (Vec<EventWrite>, Vec<_>) =
            event_jobs.into_iter().map(|j| (j.event, j.reply)).unzip();
        let (completions, completion_replies): (Vec<CompletionWrite>, Vec<_>) =
            complete_jobs.into_iter().map(|j| (j.write, j.reply)).unzip();
        let replies = Replies { events: event_replies, completions: completion_replies };
        let (batch, result) = write(conn.clone(), gate.clone(), Batch { events, completions }).await;
        match result {
            Ok(written) => {
                for (reply, outcome) in replies.events.into_iter().zip(written.events) {
                    let _ = reply.send(Ok(outcome));
                }
                for (reply, completed) in replies.completions.into_iter().zip(written.completions) {
                    let _ = reply.send(Ok(completed));
                }
            }
            Err(e) if batch.jobs() == 1 => {
                let mut e = Some(e);
                replies.fail_all(|| e.take().unwrap_or_else(closed));
            }
            // The database is away: one at a time would only make each wait for it again.
            Err(StoreError::Unavailable(cause)) => {
                replies.fail_all(|| StoreError::Unavailable(cause.clone()));
            }
            Err(e) => {
                tracing::warn!(error = %e, events = batch.events.len(), outcome_batches = batch.completions.len(), "a batch of writes failed; writing each part on its own");
                for (event, reply) in batch.events.into_iter().zip(replies.events) {
                    let one = Batch { events: vec![event], completions: Vec::new() };
                    let (_, written) = write(conn.clone(), gate.clone(), one).await;
                    let _ = reply.send(written.and_then(|w| w.events.into_iter().next().ok_or_else(closed)));
                }
                for (c, reply) in batch.completions.into_iter().zip(replies.completions) {
                    let one = Batch { events: Vec::new(), completions: vec![c] };
                    let (_, written) = write(conn.clone(), gate.clone(), one).await;
                    let _ =
                        reply.send(written.and_then(|w| w.completions.into_iter().next().ok_or_else(closed)));
                }
            }
        }
    }
}
