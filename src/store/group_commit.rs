//! Group-commit ingestion (docs/decisions.md#performance): one writer task per process takes the events waiting
//! to be stored (up to `ingest.batch_max`, after an optional linger of `ingest.linger_us`) and
//! writes them, with their notifications, in one transaction of multi-row statements. Each
//! caller is answered after the commit, so a stored answer still means stored.
//!
//! What stays as it was: an event id is stored once (a repeat, in the batch or before it, gets
//! the first result), and an event's notifications commit with it (the outbox). When a batch
//! fails, each of its events is written again on its own, so a bad event fails only itself.
//!
//! One writer means ingestion never contends with itself for SQLite's write lock (no
//! `BEGIN IMMEDIATE` queue), and on PostgreSQL it turns N round-trip sequences into one.

use custodian_macros::sql_bounds;
use std::borrow::Cow;
use std::{
    collections::{HashMap, HashSet},
    time::Duration,
};

use sqlx::{FromRow, Pool};
use tokio::sync::{mpsc, oneshot};

use super::outbox::rows::insert_notifications_tx;

use super::sql::{begin_gated, Dialect, WriteGate};
use super::{StoreError, StoreResult};
use crate::config::IngestConfig;
use crate::model::notification::Notification;
use crate::types::WebhookId;

/// The stored form of [`EventWrite::webhooks`]: ids joined by commas.
fn stored_webhooks(ids: &[WebhookId]) -> String {
    ids.iter().map(WebhookId::as_str).collect::<Vec<_>>().join(",")
}

/// [`stored_webhooks`] read back; rows written before it hold the result's JSON text
/// (`{"eventId":…,"notifications":…,"webhooks":[…]}`).
fn webhooks_of_stored(text: &str) -> StoreResult<Vec<WebhookId>> {
    if text.starts_with('{') {
        #[derive(serde::Deserialize)]
        struct Earlier {
            #[serde(default)]
            webhooks: Vec<String>,
        }
        let earlier: Earlier = serde_json::from_str(text)
            .map_err(|e| StoreError::Other(anyhow::anyhow!("stored event result: {e}")))?;
        return earlier
            .webhooks
            .iter()
            .map(|id| WebhookId::from_stored(id).map_err(|_| StoreError::malformed("webhook id", id)))
            .collect();
    }
    text.split(',')
        .filter(|id| !id.is_empty())
        .map(|id| WebhookId::from_stored(id).map_err(|_| StoreError::malformed("webhook id", id)))
        .collect()
}

/// An event to store, with its notifications (owned: it crosses to the writer task).
#[derive(Debug, Clone)]
pub struct EventWrite {
    pub event_id: String,
    /// The event's JSON text.
    pub body: String,
    pub transfer_id: Option<String>,
    /// The webhooks notified: what a repeat of this event id is answered with (stored as
    /// their ids joined by commas, not the result's JSON: 50 bytes less per event).
    pub webhooks: Vec<WebhookId>,
    pub notifications: Vec<Notification>,
    /// When the event keeps its body (it names a transfer): the payload its notifications
    /// share, which they are then stored without ([`lean`]).
    pub payload: Option<crate::model::notification::EventPayload>,
}

/// What recording an event did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Recorded {
    /// Stored now. `skipped`: ids of its notifications not written because their (webhook,
    /// idempotency key) was in the outbox already (usually none).
    Now { skipped: Vec<crate::types::NotificationId> },
    /// The event id was stored before, notifying these webhooks; nothing written.
    Before(Vec<WebhookId>),
}

pub type EventOutcome = StoreResult<Recorded>;

struct Job {
    event: EventWrite,
    reply: oneshot::Sender<EventOutcome>,
}

/// The sending side of a process's event writer.
#[derive(Clone)]
pub struct EventWriter {
    tx: mpsc::Sender<Job>,
}

impl EventWriter {
    /// Queues `event` and waits for its commit. Errors: the writer is gone (the store was
    /// closed), or the event's own write failed.
    pub async fn write(&self, event: EventWrite) -> EventOutcome {
        let (reply, answer) = oneshot::channel();
        self.tx.send(Job { event, reply }).await.map_err(|_| closed())?;
        answer.await.map_err(|_| closed())?
    }
}

fn closed() -> StoreError {
    StoreError::Other(anyhow::anyhow!("the event writer has stopped"))
}

/// Writes a batch of events in one transaction and says what each got: see [`EventOutcome`].
/// An error means nothing of the batch was stored.
#[sql_bounds]
pub(super) async fn write_batch<DB>(
    pool: &Pool<DB>,
    gate: &WriteGate,
    events: &[&EventWrite],
) -> StoreResult<Vec<Recorded>>
where
    for<'r> (String,): FromRow<'r, DB::Row>,
    for<'r> (String, String): FromRow<'r, DB::Row>,
{
    let mut tx = begin_gated(pool, gate).await?;
    let outcomes = events_tx::<DB>(&mut tx, events).await?;
    tx.commit().await?;
    Ok(outcomes)
}

/// [`write_batch`] inside the caller's transaction (the chain watcher's, which writes a run's
/// transfers and checkpoint with their events, so that neither is stored without the other).
/// What each event got is final once the caller commits.
#[sql_bounds]
pub(super) async fn events_tx<DB>(
    tx: &mut DB::Connection,
    events: &[&EventWrite],
) -> StoreResult<Vec<Recorded>>
where
    for<'r> (String,): FromRow<'r, DB::Row>,
    for<'r> (String, String): FromRow<'r, DB::Row>,
{
    if events.is_empty() {
        return Ok(Vec::new());
    }
    // The first of each event id in the batch is the one written; later ones are repeats.
    let mut first: HashMap<&str, usize> = HashMap::with_capacity(events.len());
    let unique: Vec<&EventWrite> = events
        .iter()
        .enumerate()
        .filter(|(i, e)| *first.entry(&e.event_id).or_insert(*i) == *i)
        .map(|(_, e)| *e)
        .collect();
    let now = crate::clock::wall_now();
    let mut inserted: HashSet<String> = HashSet::with_capacity(unique.len());
    for chunk in unique.chunks(EVENT_ROWS_PER_STATEMENT) {
        let values: Vec<String> =
            (0..chunk.len()).map(|i| format!("({})", DB::row_params(i * 5 + 1, 5))).collect();
        let sql = format!(
            "INSERT INTO events (event_id, result, body, transfer_key, created_at) VALUES {} \
             ON CONFLICT DO NOTHING RETURNING event_id",
            values.join(", ")
        );
        let mut q = sqlx::query_as::<DB, (String,)>(&sql);
        for e in chunk {
            // The body is read back to replay a transfer (`event_by_transfer`) and as the payload
            // of its notifications: kept only for events that name one
            // (docs/decisions.md#performance-as-the-data-grows).
            let body = if e.transfer_id.is_some() { e.body.as_str() } else { "" };
            q = q.bind(e.event_id.as_str()).bind(stored_webhooks(&e.webhooks)).bind(body);
            q = q.bind(e.transfer_id.as_deref().map(super::event_keys::transfer_key)).bind(now);
        }
        inserted.extend(q.fetch_all(&mut *tx).await?.into_iter().map(|(id,)| id));
    }
    let earlier: Vec<&str> =
        unique.iter().map(|e| e.event_id.as_str()).filter(|id| !inserted.contains(*id)).collect();
    let mut stored: HashMap<String, String> = HashMap::with_capacity(earlier.len());
    for chunk in earlier.chunks(EVENT_ROWS_PER_STATEMENT) {
        let sql = format!(
            "SELECT event_id, result FROM events WHERE event_id IN ({})",
            DB::row_params(1, chunk.len())
        );
        let mut q = sqlx::query_as::<DB, (String, String)>(&sql);
        for id in chunk {
            q = q.bind(*id);
        }
        stored.extend(q.fetch_all(&mut *tx).await?);
    }
    let notifications: Vec<Cow<'_, Notification>> =
        unique.iter().filter(|e| inserted.contains(&e.event_id)).flat_map(|e| lean(e)).collect();
    let written = insert_notifications_tx::<DB, _>(&mut *tx, &notifications).await?;
    let skipped: HashSet<&str> = if written.len() == notifications.len() {
        HashSet::new()
    } else {
        let written: HashSet<&str> = written.iter().map(String::as_str).collect();
        notifications.iter().map(|n| n.id.as_str()).filter(|id| !written.contains(id)).collect()
    };
    outcomes(events, &first, &inserted, &stored, &skipped)
}

/// An event's notifications as stored. When the event keeps its body (it names a transfer),
/// a notification that shares the payload the event gives is stored without it (payload '',
/// and meta '' when it is just the transfer): the event is its one copy, read back by
/// `outbox::rows::with_event_payloads` (docs/decisions.md#performance-as-the-data-grows).
/// Nothing is parsed: sharing is the payload's own text, as the fan-out made it.
fn lean(e: &EventWrite) -> Vec<Cow<'_, Notification>> {
    let Some(shared) = &e.payload else { return e.notifications.iter().map(Cow::Borrowed).collect() };
    e.notifications
        .iter()
        .map(|n| {
            if !std::sync::Arc::ptr_eq(&n.payload, &shared.text)
                || n.event_id.as_deref() != Some(e.event_id.as_str())
            {
                return Cow::Borrowed(n);
            }
            let mut stored = n.clone();
            stored.payload = "".into();
            if stored.meta == shared.wallet_meta {
                stored.meta = serde_json::Value::Null;
            }
            Cow::Owned(stored)
        })
        .collect()
}

/// What each event of a committed batch got: stored now (the first of its id that was
/// inserted), the first result of a repeat in the batch, or the result stored before.
fn outcomes(
    events: &[&EventWrite],
    first: &HashMap<&str, usize>,
    inserted: &HashSet<String>,
    stored: &HashMap<String, String>,
    skipped: &HashSet<&str>,
) -> StoreResult<Vec<Recorded>> {
    events
        .iter()
        .enumerate()
        .map(|(i, e)| {
            let first = first.get(e.event_id.as_str()).copied().unwrap_or(i);
            if first == i && inserted.contains(&e.event_id) {
                let skipped = e
                    .notifications
                    .iter()
                    .filter(|n| skipped.contains(n.id.as_str()))
                    .map(|n| n.id.clone())
                    .collect();
                Ok(Recorded::Now { skipped })
            } else if inserted.contains(&e.event_id) {
                Ok(Recorded::Before(events[first].webhooks.clone()))
            } else {
                let text = stored.get(&e.event_id).ok_or_else(|| {
                    StoreError::Other(anyhow::anyhow!("event {} neither stored nor found", e.event_id))
                })?;
                webhooks_of_stored(text).map(Recorded::Before)
            }
        })
        .collect()
}

/// [`write_batch`] over owned events, handing them back (for a retry one by one): the writer
/// task's step, named per backend so that the task's future has a concrete type.
#[sql_bounds]
pub(super) async fn write_owned<DB>(
    pool: Pool<DB>,
    gate: WriteGate,
    events: Vec<EventWrite>,
) -> (Vec<EventWrite>, StoreResult<Vec<Recorded>>)
where
    for<'r> (String,): FromRow<'r, DB::Row>,
    for<'r> (String, String): FromRow<'r, DB::Row>,
{
    let result = {
        let refs: Vec<&EventWrite> = events.iter().collect();
        write_batch::<DB>(&pool, &gate, &refs).await
    };
    (events, result)
}

/// Events per multi-row statement: 5 parameters each, under every engine's parameter limit.
const EVENT_ROWS_PER_STATEMENT: usize = 100;

/// Starts the writer task of `pool`; it ends when every [`EventWriter`] is dropped.
/// Called by each backend with its concrete database type.
pub(super) fn spawn<DB, F, Fut>(pool: Pool<DB>, gate: WriteGate, cfg: &IngestConfig, write: F) -> EventWriter
where
    DB: Dialect,
    F: Fn(Pool<DB>, WriteGate, Vec<EventWrite>) -> Fut + Send + 'static,
    Fut: std::future::Future<Output = (Vec<EventWrite>, StoreResult<Vec<Recorded>>)> + Send + 'static,
{
    let (tx, rx) = mpsc::channel(cfg.queue);
    let (batch_max, linger) = (cfg.batch_max, Duration::from_micros(cfg.linger_us));
    tokio::spawn(run(pool, gate, rx, batch_max, linger, write));
    EventWriter { tx }
}

async fn run<DB, F, Fut>(
    pool: Pool<DB>,
    gate: WriteGate,
    mut rx: mpsc::Receiver<Job>,
    batch_max: usize,
    linger: Duration,
    write: F,
) where
    DB: Dialect,
    F: Fn(Pool<DB>, WriteGate, Vec<EventWrite>) -> Fut,
    Fut: std::future::Future<Output = (Vec<EventWrite>, StoreResult<Vec<Recorded>>)>,
{
    while let Some(job) = rx.recv().await {
        let mut jobs = vec![job];
        if !linger.is_zero() {
            let deadline = tokio::time::Instant::now() + linger;
            while jobs.len() < batch_max {
                match tokio::time::timeout_at(deadline, rx.recv()).await {
                    Ok(Some(j)) => jobs.push(j),
                    _ => break,
                }
            }
        }
        while jobs.len() < batch_max {
            match rx.try_recv() {
                Ok(j) => jobs.push(j),
                Err(_) => break,
            }
        }
        let (events, replies): (Vec<EventWrite>, Vec<_>) =
            jobs.into_iter().map(|j| (j.event, j.reply)).unzip();
        let single = events.len() == 1;
        let (events, result) = write(pool.clone(), gate.clone(), events).await;
        match result {
            Ok(outcomes) => {
                for (reply, outcome) in replies.into_iter().zip(outcomes) {
                    let _ = reply.send(Ok(outcome));
                }
            }
            Err(e) if single => {
                let _ = replies.into_iter().next().map(|r| r.send(Err(e)));
            }
            // The database is away: one at a time would only make each wait for it again.
            Err(StoreError::Unavailable(cause)) => {
                for reply in replies {
                    let _ = reply.send(Err(StoreError::Unavailable(cause.clone())));
                }
            }
            Err(e) => {
                tracing::warn!(error = %e, events = events.len(), "a batch of events failed; writing each on its own");
                for (event, reply) in events.into_iter().zip(replies) {
                    let (_, one) = write(pool.clone(), gate.clone(), vec![event]).await;
                    let _ = reply.send(one.and_then(|mut v| v.pop().ok_or_else(closed)));
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::{sqlite::SqliteStore, EventStore};

    fn event(id: &str) -> EventWrite {
        EventWrite {
            event_id: id.into(),
            body: "{}".into(),
            transfer_id: None,
            webhooks: vec![crate::types::test_id(id)],
            notifications: Vec::new(),
            payload: None,
        }
    }

    /// Results stored before the compact form (JSON text) and in it read back the same.
    #[test]
    fn stored_webhooks_read_back_in_both_forms() {
        let ids: Vec<WebhookId> = vec![crate::types::test_id("a"), crate::types::test_id("b")];
        assert_eq!(webhooks_of_stored(&stored_webhooks(&ids)).unwrap(), ids);
        assert_eq!(webhooks_of_stored(&stored_webhooks(&[])).unwrap(), Vec::<WebhookId>::new());
        let json =
            format!("{{\"eventId\":\"e\",\"notifications\":2,\"webhooks\":[\"{}\",\"{}\"]}}", ids[0], ids[1]);
        assert_eq!(webhooks_of_stored(&json).unwrap(), ids);
        assert!(webhooks_of_stored("{not json").is_err());
    }

    /// An event the database refuses fails alone; the others of its batch are
    /// stored, and a repeat of one of them in the same batch gets its result.
    #[tokio::test]
    async fn a_bad_event_fails_only_itself() {
        let dir = tempfile::tempdir().unwrap();
        let mut config = crate::config::Config::default();
        // Long enough that the four writes below are one batch.
        config.ingest.linger_us = 2000;
        let url = format!("sqlite://{}", dir.path().join("t.db").display());
        let store = SqliteStore::open(&url, &config).await.unwrap();
        sqlx::query(
            "CREATE TRIGGER refuse_bad BEFORE INSERT ON events WHEN NEW.event_id = 'bad' \
             BEGIN SELECT RAISE(ABORT, 'refused for the test'); END",
        )
        .execute(&store.pool)
        .await
        .unwrap();
        let (a, bad, b, again) = tokio::join!(
            store.record_event(event("a")),
            store.record_event(event("bad")),
            store.record_event(event("b")),
            store.record_event(event("a")),
        );
        assert!(bad.is_err(), "the refused event fails");
        assert_eq!(a.unwrap(), Recorded::Now { skipped: Vec::new() }, "stored");
        assert_eq!(b.unwrap(), Recorded::Now { skipped: Vec::new() }, "stored");
        assert_eq!(
            again.unwrap(),
            Recorded::Before(vec![crate::types::test_id("a")]),
            "the repeat gets the first result"
        );
        let n: i64 = sqlx::query_scalar("SELECT count(*) FROM events").fetch_one(&store.pool).await.unwrap();
        assert_eq!(n, 2);
    }

    fn notification(id: &str, key: &str) -> Notification {
        Notification {
            id: crate::types::test_id(id),
            webhook_id: crate::types::test_id("w1"),
            event_id: None,
            notification_type: "block".into(),
            state: crate::model::notification::NotificationState::Pending,
            simulation: false,
            retries: 0,
            payload: "{}".into(),
            hash: Some("h".into()),
            idempotency_key: Some(key.into()),
            meta: serde_json::json!({}),
            next_attempt_at_ms: 0,
            lease_until_ms: 1,
            created_at_ms: 0,
            updated_at_ms: 0,
        }
    }

    /// A notification the outbox skips (its webhook and idempotency key are there
    /// already) is reported, so that ingestion never hands an unwritten row to the engine.
    #[tokio::test]
    async fn notifications_skipped_by_their_idempotency_key_are_reported() {
        let w1: crate::types::WebhookId = crate::types::test_id("w1");
        let dir = tempfile::tempdir().unwrap();
        let url = format!("sqlite://{}", dir.path().join("t.db").display());
        let store = SqliteStore::open(&url, &crate::config::Config::default()).await.unwrap();
        sqlx::query(
            "INSERT INTO webhooks (id, scope, user_id, type, url, created_at) \
             VALUES ($1, 'block', 'u1', 'block', 'https://example.com/hook', 0)",
        )
        .bind(w1.as_str())
        .execute(&store.pool)
        .await
        .unwrap();
        let first = EventWrite { notifications: vec![notification("n1", "k1")], ..event("a") };
        assert_eq!(store.record_event(first).await.unwrap(), Recorded::Now { skipped: Vec::new() });
        let second = EventWrite {
            notifications: vec![notification("n2", "k1"), notification("n3", "k2")],
            ..event("b")
        };
        assert_eq!(
            store.record_event(second).await.unwrap(),
            Recorded::Now { skipped: vec![crate::types::test_id("n2")] },
            "n2's key was taken by n1"
        );
        let ids: Vec<crate::types::NotificationId> =
            sqlx::query_scalar("SELECT id FROM notifications ORDER BY id")
                .fetch_all(&store.pool)
                .await
                .unwrap();
        let want: [crate::types::NotificationId; 2] =
            [crate::types::test_id("n1"), crate::types::test_id("n3")];
        assert_eq!(ids, want);
    }
}
