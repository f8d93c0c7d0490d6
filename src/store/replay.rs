//! The replay guard's writer (docs/decisions.md#signed-requests): the MACs of signed requests that change state are
//! recorded in the database, so that every process sharing it refuses a second sight. One row
//! per request would cost each signed write a transaction of its own (ingestion at half speed in
//! the delivery bench), so requests arriving together are recorded together: one transaction
//! and one `INSERT ... ON CONFLICT DO NOTHING RETURNING` per batch, like the event writer's group
//! commit ([`super::group_commit`]).

use custodian_macros::sql_bounds;
use std::{collections::HashSet, future::Future};

use sqlx::{Database, FromRow, Pool};
use tokio::sync::{mpsc, oneshot};

use super::sql::{begin_gated, Dialect, WriteGate};
use super::{StoreError, StoreResult};

/// Most MACs recorded in one statement (two parameters each).
const BATCH: usize = 256;
/// Requests waiting for the writer at most; beyond, senders wait (back-pressure).
const QUEUE: usize = 4096;

struct Job {
    hmac: String,
    expires_at: i64,
    reply: oneshot::Sender<StoreResult<bool>>,
}

/// Hands MACs to the writer task.
pub(super) struct ReplayWriter {
    tx: mpsc::Sender<Job>,
}

fn stopped() -> StoreError {
    StoreError::Other(anyhow::anyhow!("the replay writer has stopped"))
}

/// Starts the writer over `pool`; `insert` records one batch (a backend's
/// [`insert_batch`]) and returns the MACs it inserted.
pub(super) fn spawn<DB, F, Fut>(pool: Pool<DB>, gate: WriteGate, insert: F) -> ReplayWriter
where
    DB: Database,
    F: Fn(Pool<DB>, WriteGate, Vec<(String, i64)>, i64) -> Fut + Send + 'static,
    Fut: Future<Output = StoreResult<Vec<String>>> + Send,
{
    let (tx, mut rx) = mpsc::channel::<Job>(QUEUE);
    tokio::spawn(async move {
        while let Some(first) = rx.recv().await {
            let mut jobs = vec![first];
            while jobs.len() < BATCH {
                match rx.try_recv() {
                    Ok(j) => jobs.push(j),
                    Err(_) => break,
                }
            }
            // A MAC twice in one batch: the first sight goes to the database, the rest are
            // replays whatever it answers.
            let mut seen = HashSet::with_capacity(jobs.len());
            let rows: Vec<(String, i64)> = jobs
                .iter()
                .filter(|j| seen.insert(j.hmac.clone()))
                .map(|j| (j.hmac.clone(), j.expires_at))
                .collect();
            match insert(pool.clone(), gate.clone(), rows, crate::clock::wall_now_ms()).await {
                Ok(inserted) => {
                    let mut fresh: HashSet<String> = inserted.into_iter().collect();
                    for j in jobs {
                        let first = fresh.remove(&j.hmac);
                        let _ = j.reply.send(Ok(first));
                    }
                }
                Err(e) => {
                    let unavailable = matches!(e, StoreError::Unavailable(_));
                    let cause = e.to_string();
                    for j in jobs {
                        let e = if unavailable {
                            StoreError::Unavailable(cause.clone())
                        } else {
                            StoreError::Other(anyhow::anyhow!("recording a signed request: {cause}"))
                        };
                        let _ = j.reply.send(Err(e));
                    }
                }
            }
        }
    });
    ReplayWriter { tx }
}

impl ReplayWriter {
    /// Records `hmac` until `expires_at` (Unix ms); false when it was recorded already.
    pub(super) async fn record(&self, hmac: &str, expires_at: i64) -> StoreResult<bool> {
        let (reply, answer) = oneshot::channel();
        self.tx.send(Job { hmac: hmac.to_string(), expires_at, reply }).await.map_err(|_| stopped())?;
        answer.await.map_err(|_| stopped())?
    }
}

/// One batch in one transaction: first removes up to `2 * BATCH` rows whose window has passed
/// (so the table holds about one window of requests), then inserts `rows` that are not there
/// yet. Returns the MACs inserted.
#[sql_bounds]
pub(super) async fn insert_batch<DB>(
    pool: Pool<DB>,
    gate: WriteGate,
    rows: Vec<(String, i64)>,
    now_ms: i64,
) -> StoreResult<Vec<String>>
where
    for<'r> (String,): FromRow<'r, DB::Row>,
{
    let mut tx = begin_gated(&pool, &gate).await?;
    // Up to twice as many expired rows go as new ones come, so the table never outgrows about
    // one window of requests however fast they arrive; with nothing expired this is one empty
    // index range scan.
    sqlx::query(&format!(
        "DELETE FROM signed_requests WHERE hmac IN \
         (SELECT hmac FROM signed_requests WHERE expires_at < $1 LIMIT {})",
        2 * BATCH
    ))
    .bind(now_ms)
    .execute(&mut *tx)
    .await?;
    let values: Vec<String> =
        (0..rows.len()).map(|i| format!("({})", DB::row_params(i * 2 + 1, 2))).collect();
    let sql = format!(
        "INSERT INTO signed_requests (hmac, expires_at) VALUES {} ON CONFLICT (hmac) DO NOTHING RETURNING hmac",
        values.join(", ")
    );
    let mut q = sqlx::query_as::<DB, (String,)>(&sql);
    for (hmac, expires_at) in rows {
        q = q.bind(hmac).bind(expires_at);
    }
    let inserted = q.fetch_all(&mut *tx).await?;
    tx.commit().await?;
    Ok(inserted.into_iter().map(|(h,)| h).collect())
}
