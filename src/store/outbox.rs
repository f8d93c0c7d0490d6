//! The outbox: notifications waiting for delivery (spec §2.6), their leases, and the record of
//! every delivery attempt. Writers add notifications in the transaction that causes them.

use std::collections::HashMap;

use async_trait::async_trait;
use serde_json::Value;
use sqlx::{Encode, Executor, FromRow, IntoArguments, Type};

use super::completion::{
    failure_counters, finish_notifications, insert_attempts, should_suspend, FailureRow,
};
use super::sql::{json_value, placeholders, to_json, Dialect, SqlStore};
use super::webhooks::{Webhook, WebhookRow};
use super::{StoreError, StoreResult};

/// Where a notification is in its delivery (spec §2.6 `state`; docs/webhooks.md).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NotificationState {
    /// Queued, never attempted.
    New,
    /// Leased by a worker, or waiting for a retry.
    Pending,
    /// Delivered.
    Processed,
    /// Failed for the last time.
    Failed,
}

impl NotificationState {
    /// Every state, in delivery order.
    pub const ALL: [NotificationState; 4] = [
        NotificationState::New,
        NotificationState::Pending,
        NotificationState::Processed,
        NotificationState::Failed,
    ];

    /// The spec's spelling, as stored.
    pub fn as_str(self) -> &'static str {
        match self {
            NotificationState::New => "new",
            NotificationState::Pending => "pending",
            NotificationState::Processed => "processed",
            NotificationState::Failed => "failed",
        }
    }

    /// The state spelt `s`, if any.
    pub fn parse(s: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|st| st.as_str() == s)
    }
}

/// A notification in the outbox (spec §2.6). Times are Unix milliseconds.
#[derive(Debug, Clone)]
pub struct Notification {
    pub id: String,
    pub webhook_id: String,
    pub event_id: Option<String>,
    pub notification_type: String,
    pub state: NotificationState,
    pub simulation: bool,
    pub retries: i64,
    /// The exact JSON text that is POSTed.
    pub payload: String,
    pub hash: String,
    pub idempotency_key: String,
    /// The other §2.6 fields of its level (wallet, enterprise, coin, transfer, ...).
    pub meta: Value,
    pub next_attempt_at_ms: i64,
    /// Until when a worker holds it (0: nobody). Written with the notification when it is
    /// handed straight to this process's engine (issue 12 §5).
    pub lease_until_ms: i64,
    pub created_at_ms: i64,
    pub updated_at_ms: i64,
}

/// One delivery attempt. Times in Unix milliseconds.
#[derive(Debug, Clone)]
pub struct Attempt {
    pub notification_id: String,
    pub webhook_id: String,
    pub started_at_ms: i64,
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

/// Who is at their share of delivery slots in this process: the claim leaves their
/// notifications for later (issue 9 §6).
#[derive(Debug, Clone, Default)]
pub struct Saturated {
    pub webhooks: Vec<String>,
    /// Tenants that are enterprises: every webhook bound to one.
    pub enterprises: Vec<String>,
    /// Tenants that are users: their webhooks bound to no enterprise.
    pub users: Vec<String>,
}

/// The outbox and its attempts.
#[async_trait]
pub trait OutboxStore: Send + Sync {
    /// Adds notifications to the outbox; one whose (webhook, idempotency key) exists is skipped.
    async fn insert_notifications(&self, n: &[Notification]) -> StoreResult<u64>;
    /// Leases up to `limit` due notifications of active webhooks until `lease_until_ms`, none
    /// of a webhook or tenant in `skip` (those at their share of delivery slots).
    async fn claim_due(
        &self,
        now_ms: i64,
        lease_until_ms: i64,
        limit: u32,
        skip: &Saturated,
    ) -> StoreResult<Vec<Claimed>>;
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
    /// A webhook's notifications (in `state` when given) with ids after `after_id`, by id.
    async fn list_notifications(
        &self,
        webhook_id: &str,
        state: Option<NotificationState>,
        after_id: Option<&str>,
        limit: u32,
    ) -> StoreResult<Vec<Notification>>;
    /// A notification's attempts, oldest first.
    async fn attempts(&self, notification_id: &str) -> StoreResult<Vec<Attempt>>;
    /// Queues a notification again now, with retries reset; None when it does not exist.
    async fn resend_notification(
        &self,
        webhook_id: &str,
        id: &str,
        now_ms: i64,
    ) -> StoreResult<Option<Notification>>;
    async fn delivery_stats(&self, now_ms: i64) -> StoreResult<DeliveryStats>;
    /// Deletes up to `limit` delivery attempts that started before `before_ms`; returns how many.
    async fn prune_attempts(&self, before_ms: i64, limit: u32) -> StoreResult<u64>;
    /// Deletes up to `limit` processed or failed notifications last changed before `before_ms`
    /// (their attempts with them); returns how many.
    async fn prune_notifications(&self, before_ms: i64, limit: u32) -> StoreResult<u64>;
}

#[derive(FromRow)]
pub(super) struct NotificationRow {
    id: String,
    webhook_id: String,
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
    fn into_notification(self) -> StoreResult<Notification> {
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
            payload: self.payload,
            hash: self.hash,
            idempotency_key: self.idempotency_key,
            meta: json_value(&self.meta)?,
            next_attempt_at_ms: self.next_attempt_at,
            lease_until_ms: self.lease_until,
            created_at_ms: self.created_at,
            updated_at_ms: self.updated_at,
        })
    }
}

#[derive(FromRow)]
struct AttemptRow {
    notification_id: String,
    webhook_id: String,
    started_at: i64,
    duration_ms: i64,
    status_code: Option<i64>,
    success: bool,
    response_body: Option<String>,
    error: Option<String>,
}

#[derive(FromRow)]
struct StatsRow {
    due: i64,
    in_flight: i64,
    suspended_webhooks: i64,
}

const NOTIFICATION_COLUMNS: &str = "id, webhook_id, event_id, type, state, simulation, retries, payload, \
    hash, idempotency_key, meta, next_attempt_at, lease_until, created_at, updated_at";

/// Adds notifications inside the caller's transaction (outbox: they commit with their cause);
/// returns the ids written (one whose (webhook, idempotency key) exists is skipped).
pub(super) async fn insert_notifications_tx<DB, N>(
    conn: &mut DB::Connection,
    notifications: &[N],
) -> StoreResult<Vec<String>>
where
    DB: Dialect,
    N: std::borrow::Borrow<Notification>,
    for<'c> &'c mut DB::Connection: Executor<'c, Database = DB>,
    for<'q> DB::Arguments<'q>: IntoArguments<'q, DB>,
    for<'q> &'q str: Encode<'q, DB> + Type<DB>,
    for<'q> String: Encode<'q, DB> + Type<DB>,
    for<'q> i64: Encode<'q, DB> + Type<DB>,
    for<'q> Option<&'q str>: Encode<'q, DB>,
    for<'q> Option<String>: Encode<'q, DB>,
    for<'q> Option<i64>: Encode<'q, DB>,
    for<'q> bool: Encode<'q, DB> + Type<DB>,
    for<'r> (String,): FromRow<'r, DB::Row>,
{
    // Multi-row statements (issue 12 §2): 15 parameters a row, under every engine's limit.
    const ROWS: usize = 64;
    let mut written = Vec::with_capacity(notifications.len());
    for chunk in notifications.chunks(ROWS) {
        let values: Vec<String> =
            (0..chunk.len()).map(|i| format!("({})", placeholders(i * 15 + 1, 15))).collect();
        let sql = format!(
            "INSERT INTO notifications ({NOTIFICATION_COLUMNS}) VALUES {} ON CONFLICT DO NOTHING RETURNING id",
            values.join(", ")
        );
        let mut q = sqlx::query_as::<DB, (String,)>(&sql);
        for x in chunk {
            let x = x.borrow();
            q = q.bind(x.id.as_str()).bind(x.webhook_id.as_str()).bind(x.event_id.as_deref());
            q = q.bind(x.notification_type.as_str()).bind(x.state.as_str()).bind(x.simulation);
            q = q.bind(x.retries).bind(x.payload.as_str()).bind(x.hash.as_str());
            q = q.bind(x.idempotency_key.as_str()).bind(x.meta.to_string()).bind(x.next_attempt_at_ms);
            q = q.bind(x.lease_until_ms).bind(x.created_at_ms).bind(x.updated_at_ms);
        }
        written.extend(q.fetch_all(&mut *conn).await?.into_iter().map(|(id,)| id));
    }
    Ok(written)
}

#[async_trait]
impl<DB> OutboxStore for SqlStore<DB>
where
    DB: Dialect,
    for<'c> &'c mut DB::Connection: Executor<'c, Database = DB>,
    for<'q> DB::Arguments<'q>: IntoArguments<'q, DB>,
    for<'q> &'q str: Encode<'q, DB> + Type<DB>,
    for<'q> String: Encode<'q, DB> + Type<DB>,
    for<'q> i64: Encode<'q, DB> + Type<DB>,
    for<'q> Option<&'q str>: Encode<'q, DB>,
    for<'q> Option<String>: Encode<'q, DB>,
    for<'q> Option<i64>: Encode<'q, DB>,
    for<'q> bool: Encode<'q, DB> + Type<DB>,
    for<'r> (String,): FromRow<'r, DB::Row>,
    for<'r> (i64,): FromRow<'r, DB::Row>,
    for<'r> NotificationRow: FromRow<'r, DB::Row>,
    for<'r> WebhookRow: FromRow<'r, DB::Row>,
    for<'r> AttemptRow: FromRow<'r, DB::Row>,
    for<'r> StatsRow: FromRow<'r, DB::Row>,
    for<'r> FailureRow: FromRow<'r, DB::Row>,
{
    async fn insert_notifications(&self, n: &[Notification]) -> StoreResult<u64> {
        let mut tx = self.begin_write().await?;
        let written = insert_notifications_tx::<DB, _>(&mut tx, n).await?;
        tx.commit().await?;
        Ok(written.len() as u64)
    }

    async fn claim_due(
        &self,
        now_ms: i64,
        lease_until_ms: i64,
        limit: u32,
        skip: &Saturated,
    ) -> StoreResult<Vec<Claimed>> {
        let skipping = !(skip.webhooks.is_empty() && skip.enterprises.is_empty() && skip.users.is_empty());
        let q = sqlx::query_as(if skipping { DB::CLAIM_DUE_SKIPPING } else { DB::CLAIM_DUE_ALL })
            .bind(lease_until_ms)
            .bind(now_ms)
            .bind(i64::from(limit));
        let q = if skipping {
            q.bind(to_json(&skip.webhooks)?).bind(to_json(&skip.enterprises)?).bind(to_json(&skip.users)?)
        } else {
            q
        };
        let rows: Vec<NotificationRow> = {
            let _gate = self.write_gate().await;
            q.fetch_all(&self.pool).await?
        };
        if rows.is_empty() {
            return Ok(Vec::new());
        }
        let notifications: Vec<Notification> =
            rows.into_iter().map(NotificationRow::into_notification).collect::<StoreResult<_>>()?;
        let mut ids: Vec<&str> = notifications.iter().map(|n| n.webhook_id.as_str()).collect();
        ids.sort_unstable();
        ids.dedup();
        let hooks: Vec<WebhookRow> =
            sqlx::query_as(DB::WEBHOOKS_BY_IDS).bind(to_json(&ids)?).fetch_all(&self.pool).await?;
        let hooks: HashMap<String, Webhook> = hooks
            .into_iter()
            .map(|r| r.into_webhook().map(|w| (w.id.clone(), w)))
            .collect::<StoreResult<_>>()?;
        Ok(notifications
            .into_iter()
            .filter_map(|n| {
                hooks.get(&n.webhook_id).cloned().map(|webhook| Claimed { notification: n, webhook })
            })
            .collect())
    }

    async fn defer(&self, ids: &[String], at_ms: i64) -> StoreResult<()> {
        let _gate = self.write_gate().await;
        sqlx::query(DB::DEFER).bind(at_ms).bind(to_json(ids)?).execute(&self.pool).await?;
        Ok(())
    }

    async fn complete(
        &self,
        outcomes: &[Outcome],
        now_ms: i64,
        rule: SuspendRule,
    ) -> StoreResult<Vec<String>> {
        let mut tx = self.begin_write().await?;
        if let Some(relaxed) = DB::RELAXED_COMMIT {
            sqlx::query(relaxed).execute(&mut *tx).await?;
        }
        insert_attempts::<DB>(&mut tx, outcomes).await?;
        finish_notifications::<DB>(&mut tx, outcomes, now_ms).await?;
        // Webhook counters, one statement per webhook: failures after its last success in this
        // batch continue (or restart) the successive count.
        let mut suspended = Vec::new();
        for (id, reset, fails_after, fails) in failure_counters(outcomes) {
            // A batch of successes on a webhook without failures changes nothing: no write.
            sqlx::query(
                "UPDATE webhooks SET successive_failed_attempts = CASE WHEN $1 THEN $2 \
                 ELSE successive_failed_attempts + $2 END, \
                 failed_attempts_total = failed_attempts_total + $3 WHERE id = $4 \
                 AND NOT ($1 AND $2 = 0 AND $3 = 0 AND successive_failed_attempts = 0)",
            )
            .bind(reset)
            .bind(fails_after)
            .bind(fails)
            .bind(id)
            .execute(&mut *tx)
            .await?;
            if fails > 0 && should_suspend::<DB>(&mut tx, id, now_ms, rule).await? {
                sqlx::query("UPDATE webhooks SET state = 'suspended' WHERE id = $1")
                    .bind(id)
                    .execute(&mut *tx)
                    .await?;
                suspended.push(id.to_string());
            }
        }
        tx.commit().await?;
        if !suspended.is_empty() {
            self.cache.clear();
        }
        Ok(suspended)
    }

    async fn notification_by_id(&self, webhook_id: &str, id: &str) -> StoreResult<Option<Notification>> {
        let sql =
            format!("SELECT {NOTIFICATION_COLUMNS} FROM notifications WHERE webhook_id = $1 AND id = $2");
        let row: Option<NotificationRow> =
            sqlx::query_as(&sql).bind(webhook_id).bind(id).fetch_optional(&self.pool).await?;
        row.map(NotificationRow::into_notification).transpose()
    }

    async fn list_notifications(
        &self,
        webhook_id: &str,
        state: Option<NotificationState>,
        after_id: Option<&str>,
        limit: u32,
    ) -> StoreResult<Vec<Notification>> {
        let sql = format!(
            "SELECT {NOTIFICATION_COLUMNS} FROM notifications WHERE webhook_id = $1 \
             AND (CAST($2 AS TEXT) IS NULL OR state = $2) AND id > $3 ORDER BY id LIMIT $4"
        );
        let rows: Vec<NotificationRow> = sqlx::query_as(&sql)
            .bind(webhook_id)
            .bind(state.map(NotificationState::as_str))
            .bind(after_id.unwrap_or(""))
            .bind(i64::from(limit))
            .fetch_all(&self.pool)
            .await?;
        rows.into_iter().map(NotificationRow::into_notification).collect()
    }

    async fn attempts(&self, notification_id: &str) -> StoreResult<Vec<Attempt>> {
        let rows: Vec<AttemptRow> = sqlx::query_as(
            "SELECT notification_id, webhook_id, started_at, duration_ms, status_code, success, \
             response_body, error FROM delivery_attempts WHERE notification_id = $1 ORDER BY id",
        )
        .bind(notification_id)
        .fetch_all(&self.pool)
        .await?;
        Ok(rows
            .into_iter()
            .map(|r| Attempt {
                notification_id: r.notification_id,
                webhook_id: r.webhook_id,
                started_at_ms: r.started_at,
                duration_ms: r.duration_ms,
                status_code: r.status_code.and_then(|c| u16::try_from(c).ok()),
                success: r.success,
                response_body: r.response_body,
                error: r.error,
            })
            .collect())
    }

    async fn resend_notification(
        &self,
        webhook_id: &str,
        id: &str,
        now_ms: i64,
    ) -> StoreResult<Option<Notification>> {
        let res = sqlx::query(
            "UPDATE notifications SET state = 'new', retries = 0, next_attempt_at = $1, lease_until = 0, \
             updated_at = $1 WHERE webhook_id = $2 AND id = $3",
        )
        .bind(now_ms)
        .bind(webhook_id)
        .bind(id)
        .execute(&self.pool)
        .await?;
        if DB::rows_affected(&res) == 0 {
            return Ok(None);
        }
        self.notification_by_id(webhook_id, id).await
    }

    async fn delivery_stats(&self, now_ms: i64) -> StoreResult<DeliveryStats> {
        let r: StatsRow = sqlx::query_as(
            "SELECT (SELECT COUNT(*) FROM notifications WHERE state IN ('new', 'pending') \
             AND next_attempt_at <= $1 AND lease_until < $1) AS due, \
             (SELECT COUNT(*) FROM notifications WHERE state = 'pending' AND lease_until >= $1) AS in_flight, \
             (SELECT COUNT(*) FROM webhooks WHERE state = 'suspended') AS suspended_webhooks",
        )
        .bind(now_ms)
        .fetch_one(&self.pool)
        .await?;
        Ok(DeliveryStats { due: r.due, in_flight: r.in_flight, suspended_webhooks: r.suspended_webhooks })
    }

    async fn prune_attempts(&self, before_ms: i64, limit: u32) -> StoreResult<u64> {
        let _gate = self.write_gate().await;
        let r = sqlx::query(
            "DELETE FROM delivery_attempts WHERE id IN (SELECT id FROM delivery_attempts \
             WHERE started_at < $1 LIMIT $2)",
        )
        .bind(before_ms)
        .bind(i64::from(limit))
        .execute(&self.pool)
        .await?;
        Ok(DB::rows_affected(&r))
    }

    async fn prune_notifications(&self, before_ms: i64, limit: u32) -> StoreResult<u64> {
        let _gate = self.write_gate().await;
        let r = sqlx::query(
            "DELETE FROM notifications WHERE id IN (SELECT id FROM notifications \
             WHERE state IN ('processed', 'failed') AND updated_at < $1 LIMIT $2)",
        )
        .bind(before_ms)
        .bind(i64::from(limit))
        .execute(&self.pool)
        .await?;
        Ok(DB::rows_affected(&r))
    }
}
