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
//!
//! On SQLite it also records delivery outcomes (`OutboxStore::complete`), in the transaction
//! of the events it writes next: both write the outbox's newest pages, and a page written by
//! two commits is two frames in the write-ahead log and two copies at its checkpoint
//! (docs/decisions.md#performance-as-the-data-grows). Outcomes waiting go first in a round.

use custodian_macros::sql_bounds;
use std::borrow::Cow;
use std::collections::{HashMap, HashSet};

use sqlx::FromRow;

use super::outbox::rows::insert_notifications_tx;
use super::sql::Dialect;
use super::{StoreError, StoreResult};
use crate::model::notification::Notification;
use crate::types::WebhookId;

mod writer;
pub(super) use writer::{spawn, write_owned};
pub use writer::{Batch, Writer, WriterConn, Written};

#[cfg(test)]
mod tests;

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

/// The events of a writer's batch ([`writer`]) inside the caller's transaction (the chain watcher's, which writes a run's
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

/// Events per multi-row statement: 5 parameters each, under every engine's parameter limit.
const EVENT_ROWS_PER_STATEMENT: usize = 100;
