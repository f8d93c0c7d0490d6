//! The outbox's rows and the one write other store files make inside their own transaction:
//! [`insert_notifications_tx`], so that notifications commit with their cause. A leaf below the
//! `impl ... for SqlStore` blocks: the group-commit writer (`group_commit/`), token creation and the
//! outbox's own queries call it.

use custodian_macros::sql_bounds;
use sqlx::FromRow;

use crate::{
    model::notification::{Attempt, Notification, NotificationState},
    store::{
        sql::{json_value, Dialect},
        StoreError, StoreResult,
    },
    types::{NotificationId, WebhookId},
};

#[derive(FromRow)]
pub(in crate::store) struct NotificationRow {
    id: NotificationId,
    webhook_id: WebhookId,
    event_id: Option<String>,
    #[sqlx(rename = "type")]
    notification_type: String,
    state: String,
    simulation: bool,
    retries: i64,
    payload: String,
    hash: String,
    idempotency_key: String,
    meta: String,
    next_attempt_at: i64,
    lease_until: i64,
    created_at: i64,
    updated_at: i64,
}

impl NotificationRow {
    pub(in crate::store) fn into_notification(self) -> StoreResult<Notification> {
        Ok(Notification {
            id: self.id,
            webhook_id: self.webhook_id,
            event_id: self.event_id,
            notification_type: self.notification_type,
            state: NotificationState::parse(&self.state).ok_or_else(|| {
                StoreError::Other(anyhow::anyhow!("stored notification state {:?}", self.state))
            })?,
            simulation: self.simulation,
            retries: self.retries,
            payload: self.payload.into(),
            // '' stands for "derived", as written by `insert_notifications_tx`.
            hash: Some(self.hash).filter(|h| !h.is_empty()),
            idempotency_key: Some(self.idempotency_key).filter(|k| !k.is_empty()),
            // '' stands for "derived from the event" (`with_event_payloads`).
            meta: if self.meta.is_empty() { serde_json::Value::Null } else { json_value(&self.meta)? },
            next_attempt_at_ms: self.next_attempt_at,
            lease_until_ms: self.lease_until,
            created_at_ms: self.created_at,
            updated_at_ms: self.updated_at,
        })
    }
}

#[derive(FromRow)]
pub(in crate::store) struct AttemptRow {
    notification_id: NotificationId,
    webhook_id: WebhookId,
    started_at: i64,
    duration_ms: i64,
    status_code: Option<i64>,
    success: bool,
    response_body: Option<String>,
    error: Option<String>,
}

impl AttemptRow {
    pub(in crate::store) fn into_attempt(self) -> Attempt {
        Attempt {
            notification_id: self.notification_id,
            webhook_id: self.webhook_id,
            started_at_ms: self.started_at,
            duration_ms: self.duration_ms,
            status_code: self.status_code.and_then(|c| u16::try_from(c).ok()),
            success: self.success,
            response_body: self.response_body,
            error: self.error,
        }
    }
}

/// The columns of [`AttemptRow`], for `SELECT` (prefix them with the table's alias by hand).
pub(in crate::store) const ATTEMPT_COLUMNS: &str =
    "notification_id, webhook_id, started_at, duration_ms, status_code, success, response_body, error";

/// A notification's successful attempt kept on its row (`completion.rs`), as the columns of
/// [`AttemptRow`]; only where `delivered_at IS NOT NULL`.
pub(in crate::store) const DELIVERED_ATTEMPT: &str =
    "id AS notification_id, webhook_id, delivered_at AS started_at, \
    delivered_ms AS duration_ms, delivered_status AS status_code, TRUE AS success, \
    delivered_body AS response_body, CAST(NULL AS TEXT) AS error";

pub(in crate::store) const NOTIFICATION_COLUMNS: &str =
    "id, webhook_id, event_id, type, state, simulation, retries, payload, \
    hash, idempotency_key, meta, next_attempt_at, lease_until, created_at, updated_at";

/// Adds notifications inside the caller's transaction (outbox: they commit with their cause);
/// returns the ids written (one whose (webhook, idempotency key) exists is skipped).
#[sql_bounds]
pub(in crate::store) async fn insert_notifications_tx<DB, N>(
    conn: &mut DB::Connection,
    notifications: &[N],
) -> StoreResult<Vec<String>>
where
    N: std::borrow::Borrow<Notification>,
    for<'r> (String,): FromRow<'r, DB::Row>,
{
    // Multi-row statements (docs/decisions.md#performance): 15 parameters a row, under every engine's limit.
    const ROWS: usize = 64;
    let mut written = Vec::with_capacity(notifications.len());
    for chunk in notifications.chunks(ROWS) {
        let values: Vec<String> =
            (0..chunk.len()).map(|i| format!("({})", DB::row_params(i * 15 + 1, 15))).collect();
        let sql = format!(
            "INSERT INTO notifications ({NOTIFICATION_COLUMNS}) VALUES {} ON CONFLICT DO NOTHING RETURNING id",
            values.join(", ")
        );
        let mut q = sqlx::query_as::<DB, (String,)>(&sql);
        for x in chunk {
            let x = x.borrow();
            q = q.bind(x.id.as_str()).bind(x.webhook_id.as_str()).bind(x.event_id.as_deref());
            q = q.bind(x.notification_type.as_str()).bind(x.state.as_str()).bind(x.simulation);
            q = q.bind(x.retries).bind(&*x.payload).bind(x.hash.as_deref().unwrap_or(""));
            q = q
                .bind(x.idempotency_key.as_deref().unwrap_or(""))
                // Null: derived from the event when read (`with_event_payloads`).
                .bind(if x.meta.is_null() { String::new() } else { x.meta.to_string() })
                .bind(x.next_attempt_at_ms);
            q = q.bind(x.lease_until_ms).bind(x.created_at_ms).bind(x.updated_at_ms);
        }
        written.extend(q.fetch_all(&mut *conn).await?.into_iter().map(|(id,)| id));
    }
    Ok(written)
}

/// Fills in what notifications of an event that keeps its body were stored without: the
/// payload (and the meta when it was just the transfer), derived from the event as
/// `notifications::from_event` made them (docs/decisions.md#performance-as-the-data-grows).
/// Events are pruned no earlier than their notifications, so the event is there; were it not,
/// the payload would be `{}` and the fault logged. Takes the pool, not a connection: most reads
/// have nothing to fill and then touch no connection.
#[sql_bounds]
pub(in crate::store) async fn with_event_payloads<DB>(
    pool: &sqlx::Pool<DB>,
    mut notifications: Vec<Notification>,
) -> StoreResult<Vec<Notification>>
where
    for<'r> (String, String): FromRow<'r, DB::Row>,
{
    let mut wanted: Vec<&str> =
        notifications.iter().filter(|n| n.payload.is_empty()).filter_map(|n| n.event_id.as_deref()).collect();
    if wanted.is_empty() {
        return Ok(notifications);
    }
    wanted.sort_unstable();
    wanted.dedup();
    let mut bodies: std::collections::HashMap<String, String> = std::collections::HashMap::new();
    for part in wanted.chunks(500) {
        let sql = format!(
            "SELECT event_id, body FROM events WHERE event_id IN ({})",
            DB::row_params(1, part.len())
        );
        let q = part.iter().fold(sqlx::query_as::<DB, (String, String)>(&sql), |q, id| q.bind(*id));
        bodies.extend(q.fetch_all(pool).await?);
    }
    for n in notifications.iter_mut().filter(|n| n.payload.is_empty()) {
        let event = n
            .event_id
            .as_ref()
            .and_then(|id| bodies.get(id))
            .and_then(|b| serde_json::from_str::<serde_json::Map<String, serde_json::Value>>(b).ok());
        let Some(event) = event else {
            tracing::error!(notification = %n.id, "a notification's event is missing: its payload is empty");
            n.payload = "{}".into();
            n.meta = serde_json::json!({});
            continue;
        };
        let payload = crate::model::notification::event_payload(&event);
        if n.meta.is_null() {
            n.meta = crate::model::notification::event_meta(&payload);
        }
        n.payload = serde_json::Value::Object(payload).to_string().into();
    }
    Ok(notifications)
}
