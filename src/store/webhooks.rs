//! Webhooks (spec §2.5) and the enterprise webhook secrets that sign their notifications.

use custodian_macros::sql_bounds;
use std::sync::Arc;

use async_trait::async_trait;

use super::audit::append_tx;

use crate::model::audit::AuditEntry;
use crate::types::AnyId;
use sqlx::FromRow;

use super::sql::{json_list, json_value, to_json, unique_violation, Dialect};
use super::sql_store::SqlStore;
use super::{StoreError, StoreResult};
use crate::model::webhook::LevelKind;
use crate::model::webhook::{Webhook, WebhookFilter, WebhookLevel, WebhookState};
use crate::types::{Coin, EnterpriseId, UserId, WalletId, WebhookId};

/// Longest webhook list an event's route keeps in the read cache.
pub const ROUTES_CACHED_MAX: usize = 1000;

impl WebhookFilter {
    /// The WHERE clause selecting the filter's webhooks, with its binds in placeholder order
    /// (`$1`...); more conditions may follow from `$n+1`.
    fn to_sql(&self) -> (String, Vec<&str>) {
        let mut sql = String::from("scope = $1");
        let mut binds = vec![self.scope.as_str()];
        for (col, v) in [
            ("wallet_id", self.wallet_id.as_deref()),
            ("enterprise_id", self.enterprise_id.as_deref()),
            ("user_id", self.user_id.as_deref()),
            ("coin", self.coin.as_deref()),
            ("type", self.webhook_type.as_deref()),
        ] {
            if let Some(v) = v {
                binds.push(v);
                sql.push_str(&format!(" AND {col} = ${}", binds.len()));
            }
        }
        if let Some(st) = self.state {
            binds.push(st.as_str());
            sql.push_str(&format!(" AND state = ${}", binds.len()));
        }
        (sql, binds)
    }
}

/// An enterprise's webhook secret, sealed with the master key.
#[derive(Debug, Clone, FromRow)]
pub struct WebhookSecret {
    pub current_enc: Vec<u8>,
    /// The secret before the last rotation, valid for the grace period after it.
    pub previous_enc: Option<Vec<u8>>,
    /// Unix seconds.
    pub rotated_at: i64,
}

/// Result of a secret rotation.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Rotation {
    Done,
    /// Rotated too recently; seconds to wait.
    TooSoon(i64),
}

/// How many webhooks may exist, checked with each insert (§8, docs/decisions.md#webhook-abuse-and-the-api-rate-limit).
#[derive(Debug, Clone, Copy)]
pub struct WebhookCaps {
    /// Of one type at the webhook's level (a wallet, an enterprise, a user and coin).
    pub per_type: u32,
    /// Block webhooks of one user, all coins.
    pub block_per_user: u32,
    /// Webhooks of every level bound to one enterprise.
    pub per_enterprise: u32,
}

/// Which cap an insert would have passed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CapReached {
    PerType,
    BlockPerUser,
    PerEnterprise,
}

/// Webhooks and webhook secrets.
#[async_trait]
pub trait WebhookStore: Send + Sync {
    /// Inserts a webhook unless that would pass one of `caps`; returns which then. The counts
    /// and the insert are one transaction, serialised with other webhook inserts.
    /// `audit` is written with it.
    async fn insert_webhook(
        &self,
        w: &Webhook,
        caps: WebhookCaps,
        audit: &[AuditEntry],
    ) -> StoreResult<Result<(), CapReached>>;
    async fn webhook_by_id(&self, id: &WebhookId) -> StoreResult<Option<Webhook>>;
    /// Webhooks matching `filter` with ids greater than `after_id`, by id, at most `limit`.
    async fn list_webhooks(
        &self,
        filter: &WebhookFilter,
        after_id: Option<&AnyId>,
        limit: u32,
    ) -> StoreResult<Vec<Webhook>>;
    /// Removes webhooks matching `filter` and (`id`, or `type` and `url`). Returns how many.
    async fn delete_webhooks(
        &self,
        filter: &WebhookFilter,
        id: Option<&WebhookId>,
        type_url: Option<(&str, &str)>,
        audit: &[AuditEntry],
    ) -> StoreResult<u64>;
    /// Every webhook `filter` selects, all pages of [`WebhookStore::list_webhooks`] (an event's
    /// fan-out), from the read cache on a hit (docs/decisions.md#performance). Lists longer than
    /// [`ROUTES_CACHED_MAX`] are read each time.
    async fn routing_webhooks(&self, filter: &WebhookFilter) -> StoreResult<Arc<Vec<Arc<Webhook>>>>;
    /// Makes a webhook active and clears its failure counters; false when no such webhook.
    async fn unblock_webhook(&self, id: &WebhookId, now_ms: i64, audit: &[AuditEntry]) -> StoreResult<bool>;

    async fn webhook_secret(&self, enterprise_id: &EnterpriseId) -> StoreResult<Option<WebhookSecret>>;
    /// Stores `new_enc` as the current secret, keeping the old one as previous, unless the last
    /// rotation was less than `min_interval` seconds before `now` (Unix seconds).
    async fn rotate_webhook_secret(
        &self,
        enterprise_id: &EnterpriseId,
        new_enc: &[u8],
        now: i64,
        min_interval: i64,
        audit: &[AuditEntry],
    ) -> StoreResult<Rotation>;
}

#[derive(FromRow)]
pub(super) struct WebhookRow {
    id: WebhookId,
    scope: String,
    wallet_id: Option<WalletId>,
    enterprise_id: Option<EnterpriseId>,
    user_id: UserId,
    coin: Option<Coin>,
    #[sqlx(rename = "type")]
    webhook_type: String,
    url: String,
    label: Option<String>,
    num_confirmations: Option<i64>,
    state: String,
    successive_failed_attempts: i64,
    failed_attempts_total: i64,
    listen_to_failure_states: bool,
    tx_request_states: String,
    tx_request_transaction_states: String,
    custom_headers: String,
    allow_blocked_hosts: bool,
    created_at: i64,
}

impl WebhookRow {
    pub(super) fn into_webhook(self) -> StoreResult<Webhook> {
        let level = WebhookLevel::from_columns(
            &self.scope,
            self.coin,
            self.wallet_id,
            self.enterprise_id,
            self.num_confirmations,
        )
        .ok_or_else(|| StoreError::Other(anyhow::anyhow!("stored webhook {} has no valid level", self.id)))?;
        Ok(Webhook {
            id: self.id,
            level,
            user_id: self.user_id,
            webhook_type: self.webhook_type,
            url: self.url,
            label: self.label,
            state: WebhookState::parse(&self.state)
                .ok_or_else(|| StoreError::Other(anyhow::anyhow!("stored webhook state {:?}", self.state)))?,
            successive_failed_attempts: self.successive_failed_attempts,
            failed_attempts_total: self.failed_attempts_total,
            listen_to_failure_states: self.listen_to_failure_states,
            tx_request_states: json_list(&self.tx_request_states)?,
            tx_request_transaction_states: json_list(&self.tx_request_transaction_states)?,
            custom_headers: json_value(&self.custom_headers)?,
            allow_blocked_hosts: self.allow_blocked_hosts,
            created_at: self.created_at,
        })
    }
}

/// The columns of [`WebhookRow`], for `SELECT`.
pub(super) const WEBHOOK_COLUMNS: &str = "id, scope, wallet_id, enterprise_id, user_id, coin, type, url, \
    label, num_confirmations, state, successive_failed_attempts, failed_attempts_total, \
    listen_to_failure_states, tx_request_states, tx_request_transaction_states, custom_headers, \
    allow_blocked_hosts, created_at";

const INSERT_WEBHOOK: &str = "INSERT INTO webhooks (id, scope, wallet_id, enterprise_id, user_id, coin, \
    type, url, label, num_confirmations, state, listen_to_failure_states, tx_request_states, \
    tx_request_transaction_states, custom_headers, allow_blocked_hosts, created_at) \
    VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15, $16, $17)";

#[sql_bounds]
#[async_trait]
impl<DB> WebhookStore for SqlStore<DB>
where
    for<'r> (i64,): FromRow<'r, DB::Row>,
    for<'r> WebhookRow: FromRow<'r, DB::Row>,
    for<'r> WebhookSecret: FromRow<'r, DB::Row>,
    for<'r> (String,): FromRow<'r, DB::Row>,
{
    #[tracing::instrument(level = "debug", skip_all)]
    async fn insert_webhook(
        &self,
        w: &Webhook,
        caps: WebhookCaps,
        audit: &[AuditEntry],
    ) -> StoreResult<Result<(), CapReached>> {
        let mut tx = self.begin_write().await?;
        if let Some(lock) = DB::SERIALIZE_WEBHOOK_INSERTS {
            sqlx::query(lock).execute(&mut *tx).await?;
        }
        let mut checks = vec![(WebhookFilter::limit_for(w), caps.per_type, CapReached::PerType)];
        if let WebhookLevel::Block { .. } = &w.level {
            let mine = WebhookFilter {
                scope: LevelKind::Block,
                user_id: Some(w.user_id.clone()),
                ..Default::default()
            };
            checks.push((mine, caps.block_per_user, CapReached::BlockPerUser));
        }
        for (filter, max, cap) in checks {
            let (where_sql, binds) = filter.to_sql();
            let sql = format!("SELECT COUNT(*) FROM webhooks WHERE {where_sql}");
            let mut count = sqlx::query_scalar::<_, i64>(&sql);
            for b in binds {
                count = count.bind(b);
            }
            if count.fetch_one(&mut *tx).await? >= i64::from(max) {
                return Ok(Err(cap));
            }
        }
        if let Some(e) = w.level.enterprise_id() {
            let n: i64 = sqlx::query_scalar("SELECT COUNT(*) FROM webhooks WHERE enterprise_id = $1")
                .bind(e)
                .fetch_one(&mut *tx)
                .await?;
            if n >= i64::from(caps.per_enterprise) {
                return Ok(Err(CapReached::PerEnterprise));
            }
        }
        sqlx::query(INSERT_WEBHOOK)
            .bind(w.id.as_str())
            .bind(w.level.name())
            .bind(w.level.wallet_id().map(WalletId::as_str))
            .bind(w.level.enterprise_id().map(EnterpriseId::as_str))
            .bind(w.user_id.as_str())
            .bind(w.level.coin().map(Coin::as_str))
            .bind(w.webhook_type.as_str())
            .bind(w.url.as_str())
            .bind(w.label.as_deref())
            .bind(w.level.num_confirmations())
            .bind(w.state.as_str())
            .bind(w.listen_to_failure_states)
            .bind(to_json(&w.tx_request_states)?)
            .bind(to_json(&w.tx_request_transaction_states)?)
            .bind(to_json(&w.custom_headers)?)
            .bind(w.allow_blocked_hosts)
            .bind(w.created_at)
            .execute(&mut *tx)
            .await
            .map_err(|e| unique_violation(e, "a webhook with this id"))?;
        append_tx::<DB>(&mut tx, audit).await?;
        tx.commit().await?;
        self.cache.clear();
        Ok(Ok(()))
    }

    #[tracing::instrument(level = "debug", skip_all)]
    async fn webhook_by_id(&self, id: &WebhookId) -> StoreResult<Option<Webhook>> {
        let sql = format!("SELECT {WEBHOOK_COLUMNS} FROM webhooks WHERE id = $1");
        let row: Option<WebhookRow> = sqlx::query_as(&sql).bind(id).fetch_optional(&self.pool).await?;
        row.map(WebhookRow::into_webhook).transpose()
    }

    #[tracing::instrument(level = "debug", skip_all)]
    async fn list_webhooks(
        &self,
        filter: &WebhookFilter,
        after_id: Option<&AnyId>,
        limit: u32,
    ) -> StoreResult<Vec<Webhook>> {
        let after_id = after_id.map(AnyId::as_str);
        let (where_sql, binds) = filter.to_sql();
        let n = binds.len();
        let sql = format!(
            "SELECT {WEBHOOK_COLUMNS} FROM webhooks WHERE {where_sql} AND id > ${} ORDER BY id LIMIT ${}",
            n + 1,
            n + 2
        );
        let mut q = sqlx::query_as::<_, WebhookRow>(&sql);
        for b in binds {
            q = q.bind(b);
        }
        let rows = q.bind(after_id.unwrap_or("")).bind(i64::from(limit)).fetch_all(&self.pool).await?;
        rows.into_iter().map(WebhookRow::into_webhook).collect()
    }

    #[tracing::instrument(level = "debug", skip_all)]
    async fn delete_webhooks(
        &self,
        filter: &WebhookFilter,
        id: Option<&WebhookId>,
        type_url: Option<(&str, &str)>,
        audit: &[AuditEntry],
    ) -> StoreResult<u64> {
        let (mut where_sql, mut binds) = filter.to_sql();
        if let Some(id) = id {
            binds.push(id);
            where_sql.push_str(&format!(" AND id = ${}", binds.len()));
        }
        if let Some((t, u)) = type_url {
            binds.push(t);
            binds.push(u);
            where_sql.push_str(&format!(" AND type = ${} AND url = ${}", binds.len() - 1, binds.len()));
        }
        // Notifications first, then the webhooks: a delivery's completion locks a notification
        // and then its webhook, and the cascade from the webhook would take them the other way
        // round (a deadlock on PostgreSQL, found by the BitGoJS suite).
        let children = format!(
            "DELETE FROM notifications WHERE webhook_id IN (SELECT id FROM webhooks WHERE {where_sql})"
        );
        let sql = format!("DELETE FROM webhooks WHERE {where_sql}");
        let mut tx = self.begin_write().await?;
        let mut q = sqlx::query(&children);
        for b in &binds {
            q = q.bind(*b);
        }
        q.execute(&mut *tx).await?;
        let mut q = sqlx::query(&sql);
        for b in binds {
            q = q.bind(b);
        }
        let removed = DB::rows_affected(&q.execute(&mut *tx).await?);
        if removed > 0 {
            append_tx::<DB>(&mut tx, audit).await?;
        }
        tx.commit().await?;
        self.cache.clear();
        Ok(removed)
    }

    #[tracing::instrument(level = "debug", skip_all)]
    async fn routing_webhooks(&self, filter: &WebhookFilter) -> StoreResult<Arc<Vec<Arc<Webhook>>>> {
        let key = super::read_cache::route_key(filter);
        if let Some(hooks) = self.cache.routes(&key) {
            return Ok(hooks);
        }
        let at = self.cache.generation();
        let mut hooks = Vec::new();
        loop {
            let page = self
                .list_webhooks(filter, hooks.last().map(|w: &Webhook| w.id.to_cursor()).as_ref(), 500)
                .await?;
            let full = page.len() == 500;
            hooks.extend(page);
            if !full {
                break;
            }
        }
        // Each record shared: a notification handed to the engine holds its webhook's.
        let hooks: Arc<Vec<Arc<Webhook>>> = Arc::new(hooks.into_iter().map(Arc::new).collect());
        if hooks.len() <= ROUTES_CACHED_MAX {
            self.cache.put_routes(at, key, hooks.clone());
        }
        Ok(hooks)
    }

    #[tracing::instrument(level = "debug", skip_all)]
    async fn unblock_webhook(&self, id: &WebhookId, now_ms: i64, audit: &[AuditEntry]) -> StoreResult<bool> {
        let mut tx = self.begin_write().await?;
        let res = sqlx::query(
            "UPDATE webhooks SET state = 'active', successive_failed_attempts = 0, \
             failed_attempts_total = 0, counters_reset_at = $1 WHERE id = $2",
        )
        .bind(now_ms)
        .bind(id)
        .execute(&mut *tx)
        .await?;
        let done = DB::rows_affected(&res) == 1;
        if done {
            append_tx::<DB>(&mut tx, audit).await?;
        }
        tx.commit().await?;
        self.cache.clear();
        Ok(done)
    }

    #[tracing::instrument(level = "debug", skip_all)]
    async fn webhook_secret(&self, enterprise_id: &EnterpriseId) -> StoreResult<Option<WebhookSecret>> {
        Ok(sqlx::query_as(
            "SELECT current_enc, previous_enc, rotated_at FROM webhook_secrets WHERE enterprise_id = $1",
        )
        .bind(enterprise_id)
        .fetch_optional(&self.pool)
        .await?)
    }

    #[tracing::instrument(level = "debug", skip_all)]
    async fn rotate_webhook_secret(
        &self,
        enterprise_id: &EnterpriseId,
        new_enc: &[u8],
        now: i64,
        min_interval: i64,
        audit: &[AuditEntry],
    ) -> StoreResult<Rotation> {
        let mut tx = self.begin_write().await?;
        let last: Option<i64> =
            sqlx::query_scalar("SELECT rotated_at FROM webhook_secrets WHERE enterprise_id = $1")
                .bind(enterprise_id)
                .fetch_optional(&mut *tx)
                .await?;
        if let Some(last) = last {
            if now < last + min_interval {
                return Ok(Rotation::TooSoon(last + min_interval - now));
            }
        }
        sqlx::query(
            "INSERT INTO webhook_secrets (enterprise_id, current_enc, previous_enc, rotated_at) \
             VALUES ($1, $2, NULL, $3) ON CONFLICT (enterprise_id) DO UPDATE SET \
             previous_enc = webhook_secrets.current_enc, current_enc = excluded.current_enc, \
             rotated_at = excluded.rotated_at",
        )
        .bind(enterprise_id)
        .bind(new_enc)
        .bind(now)
        .execute(&mut *tx)
        .await?;
        append_tx::<DB>(&mut tx, audit).await?;
        tx.commit().await?;
        Ok(Rotation::Done)
    }
}

impl WebhookLevel {
    /// Rebuilds a level from its stored columns.
    fn from_columns(
        scope: &str,
        coin: Option<Coin>,
        wallet_id: Option<WalletId>,
        enterprise_id: Option<EnterpriseId>,
        num_confirmations: Option<i64>,
    ) -> Option<Self> {
        Some(match scope {
            "wallet" => WebhookLevel::Wallet {
                coin: coin?,
                wallet_id: wallet_id?,
                enterprise_id,
                num_confirmations: num_confirmations.unwrap_or(0),
            },
            "block" => WebhookLevel::Block {
                coin: coin?,
                num_confirmations: num_confirmations.unwrap_or(0),
                enterprise_id,
            },
            "enterprise" => WebhookLevel::Enterprise { enterprise_id: enterprise_id? },
            _ => return None,
        })
    }
}
