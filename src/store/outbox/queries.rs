//! The SQL of [`super::OutboxStore`] for both backends.

use custodian_macros::sql_bounds;
use std::{collections::HashMap, sync::Arc};

use async_trait::async_trait;
use sqlx::FromRow;

use super::{
    completion::{complete_tx, CompletionWrite, FailureRow},
    Claimed, Completed, DeliveryStats, OutboxStore, Outcome, Saturated, SuspendPolicy,
};

use super::rows::{
    insert_notifications_tx, with_event_payloads, AttemptRow, NotificationRow, ATTEMPT_COLUMNS,
    DELIVERED_ATTEMPT, NOTIFICATION_COLUMNS,
};
use crate::model::notification::{Attempt, Notification, NotificationState};
use crate::types::{AnyId, NotificationId, WebhookId};
use crate::{
    model::webhook::Webhook,
    store::{
        sql::{to_json, Dialect},
        sql_store::SqlStore,
        webhooks::WebhookRow,
        StoreResult,
    },
};

#[derive(FromRow)]
struct StatsRow {
    due: i64,
    in_flight: i64,
    suspended_webhooks: i64,
    held: i64,
}

#[sql_bounds]
#[async_trait]
impl<DB> OutboxStore for SqlStore<DB>
where
    for<'r> (String,): FromRow<'r, DB::Row>,
    for<'r> (i64,): FromRow<'r, DB::Row>,
    for<'r> NotificationRow: FromRow<'r, DB::Row>,
    for<'r> (String, String): FromRow<'r, DB::Row>,
    for<'r> WebhookRow: FromRow<'r, DB::Row>,
    for<'r> AttemptRow: FromRow<'r, DB::Row>,
    for<'r> StatsRow: FromRow<'r, DB::Row>,
    for<'r> FailureRow: FromRow<'r, DB::Row>,
{
    #[tracing::instrument(level = "debug", skip_all)]
    async fn insert_notifications(&self, n: &[Notification]) -> StoreResult<u64> {
        let mut tx = self.begin_write().await?;
        let written = insert_notifications_tx::<DB, _>(&mut tx, n).await?;
        tx.commit().await?;
        Ok(written.len() as u64)
    }

    #[tracing::instrument(level = "debug", skip_all)]
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
        let rows: Vec<NotificationRow> = match DB::RELAXED_COMMIT {
            // A claim is a lease: one lost in a crash is claimed again when it runs out, which
            // at-least-once delivery allows. So it need not wait for the WAL's flush; on
            // PostgreSQL that wait bounded the claim path (docs/decisions.md#performance-as-the-data-grows).
            Some(_) => {
                let mut tx = self.begin_relaxed().await?;
                let rows = q.fetch_all(&mut *tx).await?;
                tx.commit().await?;
                rows
            }
            None => {
                let _gate = self.write_gate().await;
                q.fetch_all(&self.pool).await?
            }
        };
        if rows.is_empty() {
            return Ok(Vec::new());
        }
        let notifications: Vec<Notification> =
            rows.into_iter().map(NotificationRow::into_notification).collect::<StoreResult<_>>()?;
        let notifications = with_event_payloads::<DB>(&self.pool, notifications).await?;
        let mut ids: Vec<&str> = notifications.iter().map(|n| n.webhook_id.as_str()).collect();
        ids.sort_unstable();
        ids.dedup();
        let hooks: Vec<WebhookRow> =
            sqlx::query_as(DB::WEBHOOKS_BY_IDS).bind(to_json(&ids)?).fetch_all(&self.pool).await?;
        // One record per webhook, shared by its notifications in the batch.
        let hooks: HashMap<WebhookId, std::sync::Arc<Webhook>> = hooks
            .into_iter()
            .map(|r| r.into_webhook().map(|w| (w.id.clone(), std::sync::Arc::new(w))))
            .collect::<StoreResult<_>>()?;
        Ok(notifications
            .into_iter()
            .filter_map(|n| {
                hooks.get(&n.webhook_id).cloned().map(|webhook| Claimed { notification: n, webhook })
            })
            .collect())
    }

    #[tracing::instrument(level = "debug", skip_all)]
    async fn defer(&self, ids: &[NotificationId], at_ms: i64) -> StoreResult<()> {
        let _gate = self.write_gate().await;
        sqlx::query(DB::DEFER).bind(at_ms).bind(to_json(ids)?).execute(&self.pool).await?;
        Ok(())
    }

    #[tracing::instrument(level = "debug", skip_all)]
    async fn complete(
        &self,
        outcomes: Arc<[Outcome]>,
        now_ms: i64,
        rule: Arc<dyn SuspendPolicy>,
    ) -> StoreResult<Completed> {
        // One writer for ingestion and outcomes where writes are serialised anyway (SQLite):
        // both write the outbox's newest pages, once per commit when they share it.
        let completed = if DB::SERIALIZE_WRITES {
            self.writer.complete(CompletionWrite { outcomes, now_ms, rule }).await?
        } else {
            let mut tx = self.begin_relaxed().await?;
            let completed = complete_tx::<DB>(&mut tx, &outcomes, now_ms, &*rule).await?;
            tx.commit().await?;
            completed
        };
        if !completed.suspended.is_empty() {
            self.cache.clear();
        }
        Ok(completed)
    }

    #[tracing::instrument(level = "debug", skip_all)]
    async fn release_retries(&self, webhook: &WebhookId, now_ms: i64, limit: u32) -> StoreResult<u64> {
        let _gate = self.write_gate().await;
        let done = sqlx::query(DB::RELEASE_RETRIES)
            .bind(now_ms)
            .bind(webhook)
            .bind(i64::from(limit))
            .execute(&self.pool)
            .await?;
        Ok(DB::rows_affected(&done))
    }

    #[tracing::instrument(level = "debug", skip_all)]
    async fn notification_by_id(
        &self,
        webhook_id: &WebhookId,
        id: &NotificationId,
    ) -> StoreResult<Option<Notification>> {
        let sql =
            format!("SELECT {NOTIFICATION_COLUMNS} FROM notifications WHERE webhook_id = $1 AND id = $2");
        let row: Option<NotificationRow> =
            sqlx::query_as(&sql).bind(webhook_id).bind(id).fetch_optional(&self.pool).await?;
        let found: Vec<Notification> =
            row.map(NotificationRow::into_notification).transpose()?.into_iter().collect();
        Ok(with_event_payloads::<DB>(&self.pool, found).await?.pop())
    }

    #[tracing::instrument(level = "debug", skip_all)]
    async fn list_notifications(
        &self,
        webhook_id: &WebhookId,
        state: Option<NotificationState>,
        after_id: Option<&AnyId>,
        limit: u32,
    ) -> StoreResult<Vec<Notification>> {
        let after_id = after_id.map(AnyId::as_str);
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
        let found = rows.into_iter().map(NotificationRow::into_notification).collect::<StoreResult<_>>()?;
        with_event_payloads::<DB>(&self.pool, found).await
    }

    #[tracing::instrument(level = "debug", skip_all)]
    async fn attempts(&self, notification_id: &NotificationId) -> StoreResult<Vec<Attempt>> {
        // The kept success is the latest attempt: last among attempts of the same millisecond.
        let sql = format!(
            "SELECT {ATTEMPT_COLUMNS} FROM (SELECT {ATTEMPT_COLUMNS}, id AS seq FROM delivery_attempts \
             WHERE notification_id = $1 UNION ALL SELECT {DELIVERED_ATTEMPT}, {} AS seq FROM notifications \
             WHERE id = $1 AND delivered_at IS NOT NULL) t ORDER BY started_at, seq",
            i64::MAX
        );
        let rows: Vec<AttemptRow> = sqlx::query_as(&sql).bind(notification_id).fetch_all(&self.pool).await?;
        Ok(rows.into_iter().map(AttemptRow::into_attempt).collect())
    }

    #[tracing::instrument(level = "debug", skip_all)]
    async fn resend_notification(
        &self,
        webhook_id: &WebhookId,
        id: &NotificationId,
        now_ms: i64,
    ) -> StoreResult<Option<Notification>> {
        let mut tx = self.begin_write().await?;
        // The success kept on the row becomes an attempt row: only processed notifications
        // keep one (the console's counts read them by their finish time).
        let moved = format!(
            "INSERT INTO delivery_attempts ({ATTEMPT_COLUMNS}) SELECT {DELIVERED_ATTEMPT} FROM notifications \
             WHERE webhook_id = $1 AND id = $2 AND delivered_at IS NOT NULL"
        );
        sqlx::query(&moved).bind(webhook_id).bind(id).execute(&mut *tx).await?;
        let res = sqlx::query(
            "UPDATE notifications SET state = 'new', retries = 0, next_attempt_at = $1, lease_until = 0, \
             updated_at = $1, delivered_at = NULL, delivered_ms = NULL, delivered_status = NULL, \
             delivered_body = NULL WHERE webhook_id = $2 AND id = $3",
        )
        .bind(now_ms)
        .bind(webhook_id)
        .bind(id)
        .execute(&mut *tx)
        .await?;
        if DB::rows_affected(&res) == 0 {
            return Ok(None);
        }
        tx.commit().await?;
        self.notification_by_id(webhook_id, id).await
    }

    #[tracing::instrument(level = "debug", skip_all)]
    async fn delivery_stats(&self, now_ms: i64) -> StoreResult<DeliveryStats> {
        let r: StatsRow = sqlx::query_as(
            "SELECT (SELECT COUNT(*) FROM notifications n JOIN webhooks w ON w.id = n.webhook_id \
             WHERE n.state IN ('new', 'pending') AND n.next_attempt_at <= $1 AND n.lease_until < $1 \
             AND w.state = 'active') AS due, \
             (SELECT COUNT(*) FROM notifications WHERE state = 'pending' AND lease_until >= $1) AS in_flight, \
             (SELECT COUNT(*) FROM webhooks WHERE state = 'suspended') AS suspended_webhooks, \
             (SELECT COUNT(*) FROM notifications n JOIN webhooks w ON w.id = n.webhook_id \
             WHERE n.state IN ('new', 'pending') AND w.state = 'suspended') AS held",
        )
        .bind(now_ms)
        .fetch_one(&self.pool)
        .await?;
        Ok(DeliveryStats {
            due: r.due,
            in_flight: r.in_flight,
            suspended_webhooks: r.suspended_webhooks,
            held: r.held,
        })
    }

    #[tracing::instrument(level = "debug", skip_all)]
    async fn undelivered_count(&self, webhook_id: &WebhookId) -> StoreResult<u64> {
        let n: i64 = sqlx::query_scalar(
            "SELECT COUNT(*) FROM notifications WHERE webhook_id = $1 AND state IN ('new', 'pending')",
        )
        .bind(webhook_id.as_str())
        .fetch_one(&self.pool)
        .await?;
        Ok(u64::try_from(n).unwrap_or(0))
    }

    #[tracing::instrument(level = "debug", skip_all)]
    async fn prune_attempts(&self, before_ms: i64, limit: u32) -> StoreResult<u64> {
        let sql = "DELETE FROM delivery_attempts WHERE id IN (SELECT id FROM delivery_attempts \
             WHERE started_at < $1 LIMIT $2)";
        self.delete_batch(sql, before_ms, limit).await
    }

    #[tracing::instrument(level = "debug", skip_all)]
    async fn vacuum_outbox(&self) -> StoreResult<bool> {
        let Some(sql) = DB::VACUUM_OUTBOX else { return Ok(false) };
        // The simple protocol: VACUUM is not run as a prepared statement.
        sqlx::raw_sql(sql).execute(&self.pool).await?;
        Ok(true)
    }

    #[tracing::instrument(level = "debug", skip_all)]
    async fn prune_notifications(&self, before_ms: i64, limit: u32) -> StoreResult<u64> {
        let sql = "DELETE FROM notifications WHERE id IN (SELECT id FROM notifications \
             WHERE state IN ('processed', 'failed') AND updated_at < $1 LIMIT $2)";
        self.delete_batch(sql, before_ms, limit).await
    }
}
