//! The operator console's reads over webhooks, the outbox and its attempts (docs/decisions.md#the-operator-console): searches
//! bounded by a tenancy and a time range, delivery counts by hour, queue gauges, and the
//! recovery of a webhook's failed notifications. Time ranges become id ranges: notification
//! ids begin with their creation millisecond ([`crate::ids::new_sequential_id`]), so a search
//! walks the primary key between two bounds rather than the whole table.

use async_trait::async_trait;
use custodian_macros::sql_bounds;
use sqlx::FromRow;

use super::rows::{with_event_payloads, AttemptRow, NotificationRow, ATTEMPT_COLUMNS, NOTIFICATION_COLUMNS};
use crate::ids::sequential_id_floor;
use crate::model::notification::{Attempt, Notification, NotificationState};
use crate::types::{AnyId, Coin, EnterpriseId, UserId, WalletId, WebhookId};
use crate::{
    model::{
        audit::AuditEntry,
        webhook::{LevelKind, Webhook, WebhookState},
    },
    store::{
        audit::append_tx,
        sql::{to_json, Dialect},
        sql_store::SqlStore,
        webhooks::{WebhookRow, WEBHOOK_COLUMNS},
        StoreResult,
    },
};

/// Whose webhooks a reader sees.
#[derive(Debug, Clone)]
pub enum Tenancy {
    /// Every webhook (a service admin).
    All,
    /// Webhooks bound to these enterprises (the reader administers them), and the reader's
    /// own block webhooks.
    Of { user_id: UserId, enterprises: Vec<EnterpriseId> },
}

/// Filters of the console's webhook list; `None` matches any.
#[derive(Debug, Clone, Default)]
pub struct WebhookSearch {
    pub level: Option<LevelKind>,
    pub coin: Option<Coin>,
    pub webhook_type: Option<String>,
    pub state: Option<WebhookState>,
    pub enterprise_id: Option<EnterpriseId>,
}

/// Filters of the console's notification log; the time range is required (it bounds the walk).
#[derive(Debug, Clone, Default)]
pub struct NotificationSearch {
    pub state: Option<NotificationState>,
    pub notification_type: Option<String>,
    pub webhook_id: Option<WebhookId>,
    pub wallet_id: Option<WalletId>,
    /// The `transfer` of a wallet notification (§2.6).
    pub transfer_id: Option<String>,
    /// Created at or after, Unix milliseconds.
    pub from_ms: i64,
    /// Created before, Unix milliseconds.
    pub to_ms: i64,
}

/// Attempts that started in one hour.
#[derive(Debug, Clone, Copy, FromRow)]
pub struct HourCount {
    /// Hours since the Unix epoch.
    pub hour: i64,
    pub delivered: i64,
    pub failed: i64,
}

/// Notifications waiting, for a tenancy.
#[derive(Debug, Clone, Copy, Default, FromRow)]
pub struct QueueCounts {
    /// Due now and not leased, of active webhooks.
    pub due: i64,
    /// Leased by a delivery worker.
    pub in_flight: i64,
    /// Waiting for their suspended webhook to be unblocked.
    pub held: i64,
}

/// When a webhook was last delivered to and last failed, Unix milliseconds.
#[derive(Debug, Clone, Copy, Default)]
pub struct LastAttempts {
    pub delivered_ms: Option<i64>,
    pub failed_ms: Option<i64>,
}

/// A failed attempt with what the console shows beside it.
#[derive(Debug, Clone)]
pub struct RecentFailure {
    pub attempt: Attempt,
    pub notification_type: String,
    pub url: String,
}

#[derive(FromRow)]
pub(in crate::store) struct FailureRow {
    #[sqlx(flatten)]
    attempt: AttemptRow,
    #[sqlx(rename = "type")]
    notification_type: String,
    url: String,
}

/// The console's reads (docs/decisions.md#the-operator-console).
#[async_trait]
pub trait SearchStore: Send + Sync {
    /// Webhooks of `tenancy` matching `search`, by id after `after_id`, at most `limit`.
    async fn search_webhooks(
        &self,
        tenancy: &Tenancy,
        search: &WebhookSearch,
        after_id: Option<&AnyId>,
        limit: u32,
    ) -> StoreResult<Vec<Webhook>>;
    /// Notifications of `tenancy`'s webhooks matching `search`, newest first, older than
    /// `before_id`, at most `limit`.
    async fn search_notifications(
        &self,
        tenancy: &Tenancy,
        search: &NotificationSearch,
        before_id: Option<&AnyId>,
        limit: u32,
    ) -> StoreResult<Vec<Notification>>;
    /// Attempts since `since_ms` by the hour they started in, delivered and failed; hours
    /// without attempts are absent.
    async fn attempts_by_hour(&self, tenancy: &Tenancy, since_ms: i64) -> StoreResult<Vec<HourCount>>;
    /// Durations (ms) of the latest attempts since `since_ms`, at most `limit`.
    async fn attempt_durations(&self, tenancy: &Tenancy, since_ms: i64, limit: u32) -> StoreResult<Vec<i64>>;
    /// The latest failed attempts since `since_ms`, newest first, at most `limit`.
    async fn recent_failures(
        &self,
        tenancy: &Tenancy,
        since_ms: i64,
        limit: u32,
    ) -> StoreResult<Vec<RecentFailure>>;
    /// When each of `webhook_ids` was last delivered to (to the second) and last failed
    /// (attempt start, Unix ms), in the order given: two index lookups per webhook.
    async fn last_attempts(&self, webhook_ids: &[WebhookId]) -> StoreResult<Vec<LastAttempts>>;
    /// Notifications due, in flight and held now (`now_ms`).
    async fn queue_counts(&self, tenancy: &Tenancy, now_ms: i64) -> StoreResult<QueueCounts>;
    /// How many of `webhook_id`'s notifications created since `since_ms` failed for good,
    /// counting at most `limit`.
    async fn failed_since(&self, webhook_id: &WebhookId, since_ms: i64, limit: u32) -> StoreResult<u64>;
    /// Queues again now, with retries reset, up to `limit` of `webhook_id`'s failed
    /// notifications created since `since_ms` (oldest first), writing `audit` with them, its
    /// `data.count` set to how many; returns how many.
    async fn recover_failed(
        &self,
        webhook_id: &WebhookId,
        since_ms: i64,
        limit: u32,
        now_ms: i64,
        audit: AuditEntry,
    ) -> StoreResult<u64>;
}

/// A statement's binds in placeholder order, of the two types the console's filters need.
#[derive(Default)]
struct Binds(Vec<Bind>);

enum Bind {
    Text(String),
    Int(i64),
}

impl Binds {
    /// Binds `v` and returns its placeholder.
    fn text(&mut self, v: impl Into<String>) -> String {
        self.0.push(Bind::Text(v.into()));
        format!("${}", self.0.len())
    }

    /// Binds `v` and returns its placeholder's number.
    fn text_at(&mut self, v: impl Into<String>) -> usize {
        self.0.push(Bind::Text(v.into()));
        self.0.len()
    }

    fn int(&mut self, v: i64) -> String {
        self.0.push(Bind::Int(v));
        format!("${}", self.0.len())
    }

    /// `tenancy` as a condition on the webhooks aliased `w`.
    fn tenancy<DB: Dialect>(&mut self, tenancy: &Tenancy) -> StoreResult<String> {
        Ok(match tenancy {
            Tenancy::All => "1 = 1".to_string(),
            Tenancy::Of { user_id, enterprises } => {
                let list = DB::json_text_elements(self.text_at(to_json(enterprises)?));
                let me = self.text(user_id.as_str());
                format!("(w.enterprise_id IN ({list}) OR (w.scope = 'block' AND w.user_id = {me}))")
            }
        })
    }
}

/// Binds `binds` to `q` in order.
macro_rules! bind_all {
    ($q:expr, $binds:expr) => {{
        let mut q = $q;
        for b in $binds.0 {
            q = match b {
                Bind::Text(s) => q.bind(s),
                Bind::Int(i) => q.bind(i),
            };
        }
        q
    }};
}

/// `columns` each prefixed with `alias.`.
fn prefixed(columns: &str, alias: &str) -> String {
    columns.split(',').map(|c| format!("{alias}.{}", c.trim())).collect::<Vec<_>>().join(", ")
}

#[sql_bounds]
#[async_trait]
impl<DB> SearchStore for SqlStore<DB>
where
    for<'r> (i64,): FromRow<'r, DB::Row>,
    for<'r> (Option<i64>,): FromRow<'r, DB::Row>,
    for<'r> (i64, i64): FromRow<'r, DB::Row>,
    for<'r> (String,): FromRow<'r, DB::Row>,
    for<'r> NotificationRow: FromRow<'r, DB::Row>,
    for<'r> (String, String): FromRow<'r, DB::Row>,
    for<'r> WebhookRow: FromRow<'r, DB::Row>,
    for<'r> FailureRow: FromRow<'r, DB::Row>,
    for<'r> HourCount: FromRow<'r, DB::Row>,
    for<'r> QueueCounts: FromRow<'r, DB::Row>,
{
    #[tracing::instrument(level = "debug", skip_all)]
    async fn search_webhooks(
        &self,
        tenancy: &Tenancy,
        search: &WebhookSearch,
        after_id: Option<&AnyId>,
        limit: u32,
    ) -> StoreResult<Vec<Webhook>> {
        let mut b = Binds::default();
        let mut sql = format!(
            "SELECT {} FROM webhooks w WHERE {}",
            prefixed(WEBHOOK_COLUMNS, "w"),
            b.tenancy::<DB>(tenancy)?
        );
        for (col, v) in [
            ("scope", search.level.map(|l| l.as_str().to_string())),
            ("coin", search.coin.as_ref().map(|c| c.to_string())),
            ("type", search.webhook_type.clone()),
            ("state", search.state.map(|s| s.as_str().to_string())),
            ("enterprise_id", search.enterprise_id.as_ref().map(|e| e.to_string())),
        ] {
            if let Some(v) = v {
                sql.push_str(&format!(" AND w.{col} = {}", b.text(v)));
            }
        }
        let after = b.text(after_id.map(AnyId::as_str).unwrap_or(""));
        sql.push_str(&format!(" AND w.id > {after} ORDER BY w.id LIMIT {}", b.int(i64::from(limit))));
        let rows: Vec<WebhookRow> = bind_all!(sqlx::query_as(&sql), b).fetch_all(&self.pool).await?;
        rows.into_iter().map(WebhookRow::into_webhook).collect()
    }

    #[tracing::instrument(level = "debug", skip_all)]
    async fn search_notifications(
        &self,
        tenancy: &Tenancy,
        search: &NotificationSearch,
        before_id: Option<&AnyId>,
        limit: u32,
    ) -> StoreResult<Vec<Notification>> {
        let mut b = Binds::default();
        let (lo, hi) = (sequential_id_floor(search.from_ms), sequential_id_floor(search.to_ms));
        let hi = match before_id {
            Some(before) if before.as_str() < hi.as_str() => before.to_string(),
            _ => hi,
        };
        let mut sql = format!(
            "SELECT {} FROM notifications n JOIN webhooks w ON w.id = n.webhook_id \
             WHERE n.id >= {} AND n.id < {} AND {}",
            prefixed(NOTIFICATION_COLUMNS, "n"),
            b.text(lo),
            b.text(hi),
            b.tenancy::<DB>(tenancy)?
        );
        let transfer = DB::json_text_field("n.meta", "transfer");
        for (col, v) in [
            ("n.state", search.state.map(|s| s.as_str().to_string())),
            ("n.type", search.notification_type.clone()),
            ("n.webhook_id", search.webhook_id.as_ref().map(|w| w.to_string())),
            ("w.wallet_id", search.wallet_id.as_ref().map(|w| w.to_string())),
        ] {
            if let Some(v) = v {
                sql.push_str(&format!(" AND {col} = {}", b.text(v)));
            }
        }
        if let Some(t) = &search.transfer_id {
            // Meta '' is derived from the event, which is found by its transfer.
            let key = b.int(crate::store::event_keys::transfer_key(t));
            let t = b.text(t.clone());
            let of_transfer = crate::store::event_keys::transfer_match::<DB>(&key, &t);
            sql.push_str(&format!(
                " AND CASE WHEN n.meta = '' THEN n.event_id IN (SELECT event_id FROM events \
                 WHERE {of_transfer}) ELSE {transfer} = {t} END"
            ));
        }
        sql.push_str(&format!(" ORDER BY n.id DESC LIMIT {}", b.int(i64::from(limit))));
        let rows: Vec<NotificationRow> = bind_all!(sqlx::query_as(&sql), b).fetch_all(&self.pool).await?;
        let found = rows.into_iter().map(NotificationRow::into_notification).collect::<StoreResult<_>>()?;
        with_event_payloads::<DB>(&self.pool, found).await
    }

    #[tracing::instrument(level = "debug", skip_all)]
    async fn attempts_by_hour(&self, tenancy: &Tenancy, since_ms: i64) -> StoreResult<Vec<HourCount>> {
        // Attempt rows by their start, and the successes kept on notifications: those are all
        // processed, so the index of finished notifications by finish time bounds the scan.
        let mut b = Binds::default();
        let since = b.int(since_ms);
        let rows_tenancy = b.tenancy::<DB>(tenancy)?;
        let kept_tenancy = b.tenancy::<DB>(tenancy)?;
        let sql = format!(
            "SELECT hour, COALESCE(SUM(delivered), 0) AS delivered, COALESCE(SUM(failed), 0) AS failed FROM ( \
             SELECT a.started_at / 3600000 AS hour, CASE WHEN a.success THEN 1 ELSE 0 END AS delivered, \
             CASE WHEN a.success THEN 0 ELSE 1 END AS failed \
             FROM delivery_attempts a JOIN webhooks w ON w.id = a.webhook_id \
             WHERE a.started_at >= {since} AND {rows_tenancy} \
             UNION ALL SELECT n.delivered_at / 3600000, 1, 0 FROM notifications n JOIN webhooks w ON w.id = n.webhook_id \
             WHERE n.state IN ('processed', 'failed') AND n.updated_at >= {since} AND n.delivered_at >= {since} \
             AND {kept_tenancy}) t GROUP BY hour ORDER BY 1"
        );
        Ok(bind_all!(sqlx::query_as(&sql), b).fetch_all(&self.pool).await?)
    }

    #[tracing::instrument(level = "debug", skip_all)]
    async fn attempt_durations(&self, tenancy: &Tenancy, since_ms: i64, limit: u32) -> StoreResult<Vec<i64>> {
        // The latest of each source, by their own index, then the latest `limit` of both.
        let mut b = Binds::default();
        let sql = format!(
            "SELECT a.started_at, a.duration_ms FROM delivery_attempts a JOIN webhooks w ON w.id = a.webhook_id \
             WHERE a.started_at >= {} AND {} ORDER BY a.started_at DESC LIMIT {}",
            b.int(since_ms),
            b.tenancy::<DB>(tenancy)?,
            b.int(i64::from(limit))
        );
        let mut rows: Vec<(i64, i64)> = bind_all!(sqlx::query_as(&sql), b).fetch_all(&self.pool).await?;
        let mut b = Binds::default();
        let since = b.int(since_ms);
        let sql = format!(
            "SELECT n.delivered_at, n.delivered_ms FROM notifications n JOIN webhooks w ON w.id = n.webhook_id \
             WHERE n.state IN ('processed', 'failed') AND n.updated_at >= {since} AND n.delivered_at >= {since} \
             AND {} ORDER BY n.updated_at DESC LIMIT {}",
            b.tenancy::<DB>(tenancy)?,
            b.int(i64::from(limit))
        );
        let kept: Vec<(i64, i64)> = bind_all!(sqlx::query_as(&sql), b).fetch_all(&self.pool).await?;
        rows.extend(kept);
        rows.sort_unstable_by_key(|r| std::cmp::Reverse(r.0));
        rows.truncate(usize::try_from(limit).unwrap_or(usize::MAX));
        Ok(rows.into_iter().map(|(_, d)| d).collect())
    }

    #[tracing::instrument(level = "debug", skip_all)]
    async fn recent_failures(
        &self,
        tenancy: &Tenancy,
        since_ms: i64,
        limit: u32,
    ) -> StoreResult<Vec<RecentFailure>> {
        let mut b = Binds::default();
        let sql = format!(
            "SELECT {}, n.type, w.url FROM delivery_attempts a \
             JOIN webhooks w ON w.id = a.webhook_id JOIN notifications n ON n.id = a.notification_id \
             WHERE a.started_at >= {} AND NOT a.success AND {} ORDER BY a.started_at DESC LIMIT {}",
            prefixed(ATTEMPT_COLUMNS, "a"),
            b.int(since_ms),
            b.tenancy::<DB>(tenancy)?,
            b.int(i64::from(limit))
        );
        let rows: Vec<FailureRow> = bind_all!(sqlx::query_as(&sql), b).fetch_all(&self.pool).await?;
        Ok(rows
            .into_iter()
            .map(|r| RecentFailure {
                attempt: r.attempt.into_attempt(),
                notification_type: r.notification_type,
                url: r.url,
            })
            .collect())
    }

    #[tracing::instrument(level = "debug", skip_all)]
    async fn last_attempts(&self, webhook_ids: &[WebhookId]) -> StoreResult<Vec<LastAttempts>> {
        let mut out = Vec::with_capacity(webhook_ids.len());
        for id in webhook_ids {
            let (delivered_ms,): (Option<i64>,) =
                sqlx::query_as("SELECT last_delivered_at FROM webhooks WHERE id = $1")
                    .bind(id)
                    .fetch_optional(&self.pool)
                    .await?
                    .unwrap_or((None,));
            let (failed_ms,): (Option<i64>,) = sqlx::query_as(
                "SELECT MAX(started_at) FROM delivery_attempts WHERE webhook_id = $1 AND success = $2",
            )
            .bind(id)
            .bind(false)
            .fetch_one(&self.pool)
            .await?;
            out.push(LastAttempts { delivered_ms, failed_ms });
        }
        Ok(out)
    }

    #[tracing::instrument(level = "debug", skip_all)]
    async fn queue_counts(&self, tenancy: &Tenancy, now_ms: i64) -> StoreResult<QueueCounts> {
        let mut b = Binds::default();
        let now = b.int(now_ms);
        let sql = format!(
            "SELECT \
             COALESCE(SUM(CASE WHEN w.state = 'active' AND n.lease_until < {now} AND n.next_attempt_at <= {now} \
             THEN 1 ELSE 0 END), 0) AS due, \
             COALESCE(SUM(CASE WHEN n.lease_until >= {now} THEN 1 ELSE 0 END), 0) AS in_flight, \
             COALESCE(SUM(CASE WHEN w.state = 'suspended' THEN 1 ELSE 0 END), 0) AS held \
             FROM notifications n JOIN webhooks w ON w.id = n.webhook_id \
             WHERE n.state IN ('new', 'pending') AND {}",
            b.tenancy::<DB>(tenancy)?
        );
        Ok(bind_all!(sqlx::query_as(&sql), b).fetch_one(&self.pool).await?)
    }

    #[tracing::instrument(level = "debug", skip_all)]
    async fn failed_since(&self, webhook_id: &WebhookId, since_ms: i64, limit: u32) -> StoreResult<u64> {
        let (n,): (i64,) = sqlx::query_as(
            "SELECT COUNT(*) FROM (SELECT 1 AS one FROM notifications \
             WHERE webhook_id = $1 AND state = 'failed' AND id >= $2 LIMIT $3) t",
        )
        .bind(webhook_id)
        .bind(sequential_id_floor(since_ms))
        .bind(i64::from(limit))
        .fetch_one(&self.pool)
        .await?;
        Ok(u64::try_from(n).unwrap_or(0))
    }

    #[tracing::instrument(level = "debug", skip_all)]
    async fn recover_failed(
        &self,
        webhook_id: &WebhookId,
        since_ms: i64,
        limit: u32,
        now_ms: i64,
        mut audit: AuditEntry,
    ) -> StoreResult<u64> {
        let mut tx = self.begin_write().await?;
        let res = sqlx::query(
            "UPDATE notifications SET state = 'new', retries = 0, next_attempt_at = $1, lease_until = 0, \
             updated_at = $1 WHERE state = 'failed' AND id IN (SELECT id FROM notifications \
             WHERE webhook_id = $2 AND state = 'failed' AND id >= $3 ORDER BY id LIMIT $4)",
        )
        .bind(now_ms)
        .bind(webhook_id)
        .bind(sequential_id_floor(since_ms))
        .bind(i64::from(limit))
        .execute(&mut *tx)
        .await?;
        let n = DB::rows_affected(&res);
        if let Some(data) = audit.data.as_object_mut() {
            data.insert("count".into(), n.into());
        }
        append_tx::<DB>(&mut tx, &[audit]).await?;
        tx.commit().await?;
        Ok(n)
    }
}
