//! Ingested upstream events (`POST /api/v2/internal/events`): idempotency by event id, and the
//! last body seen per transfer (for simulations that replay a real transfer).

use async_trait::async_trait;
use custodian_macros::sql_bounds;
use sqlx::FromRow;

use super::group_commit::{EventWrite, Recorded};
use super::sql::Dialect;
use super::sql_store::SqlStore;
use super::StoreResult;

/// Events and their results.
#[async_trait]
pub trait EventStore: Send + Sync {
    /// Records an ingested event and its notifications in one transaction, through the
    /// process's group-commit writer ([`super::group_commit`]) when it has one. When the event
    /// id was stored before, writes nothing and returns the stored result ([`Recorded`]).
    async fn record_event(&self, event: EventWrite) -> StoreResult<Recorded>;
    /// The most recent ingested event body naming this transfer.
    async fn event_by_transfer(&self, transfer_id: &str) -> StoreResult<Option<String>>;
    /// Deletes at most `limit` events ingested before `before_secs` (Unix seconds) and before
    /// the oldest notification left, which may read its payload from its event; how many. An
    /// event id seen again after that is ingested anew.
    async fn prune_events(&self, before_secs: i64, limit: u32) -> StoreResult<u64>;
}

#[sql_bounds]
#[async_trait]
impl<DB> EventStore for SqlStore<DB>
where
    for<'r> (String,): FromRow<'r, DB::Row>,
    for<'r> (String, String): FromRow<'r, DB::Row>,
    for<'r> (i64,): FromRow<'r, DB::Row>,
{
    #[tracing::instrument(level = "debug", skip_all)]
    async fn record_event(&self, event: EventWrite) -> StoreResult<Recorded> {
        self.writer.write(event).await
    }

    #[tracing::instrument(level = "debug", skip_all)]
    async fn event_by_transfer(&self, transfer_id: &str) -> StoreResult<Option<String>> {
        let sql = format!(
            "SELECT body FROM events WHERE {} ORDER BY created_at DESC LIMIT 1",
            super::event_keys::transfer_match::<DB>("$1", "$2")
        );
        Ok(sqlx::query_scalar(&sql)
            .bind(super::event_keys::transfer_key(transfer_id))
            .bind(transfer_id)
            .fetch_optional(&self.pool)
            .await?)
    }

    #[tracing::instrument(level = "debug", skip_all)]
    async fn prune_events(&self, before_secs: i64, limit: u32) -> StoreResult<u64> {
        // No event goes before a notification that may read its payload from it
        // (`outbox::rows::with_event_payloads`): the oldest notification left (ids sort by
        // creation) bounds the cut, one index probe.
        let oldest: Option<(i64,)> =
            sqlx::query_as("SELECT created_at FROM notifications ORDER BY id LIMIT 1")
                .fetch_optional(&self.pool)
                .await?;
        let before = oldest.map_or(before_secs, |(ms,)| before_secs.min(ms.div_euclid(1000)));
        let sql = "DELETE FROM events WHERE event_id IN (SELECT event_id FROM events \
             WHERE created_at < $1 LIMIT $2)";
        self.delete_batch(sql, before, limit).await
    }
}
