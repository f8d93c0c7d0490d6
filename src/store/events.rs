//! Ingested upstream events (`POST /api/v2/internal/events`): idempotency by event id, and the
//! last body seen per transfer (for simulations that replay a real transfer).

use async_trait::async_trait;
use sqlx::{Encode, Executor, FromRow, IntoArguments, Type};

use super::outbox::{insert_notifications_tx, Notification};
use super::sql::{Dialect, SqlStore};
use super::StoreResult;

/// Events and their results.
#[async_trait]
pub trait EventStore: Send + Sync {
    /// Records an ingested event and its notifications in one transaction. When `event_id` was
    /// seen before, writes nothing and returns the stored result.
    async fn record_event(
        &self,
        event_id: &str,
        body: &str,
        transfer_id: Option<&str>,
        result: &str,
        notifications: &[Notification],
    ) -> StoreResult<Option<String>>;
    /// The most recent ingested event body naming this transfer.
    async fn event_by_transfer(&self, transfer_id: &str) -> StoreResult<Option<String>>;
}

#[async_trait]
impl<DB> EventStore for SqlStore<DB>
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
{
    async fn record_event(
        &self,
        event_id: &str,
        body: &str,
        transfer_id: Option<&str>,
        result: &str,
        notifications: &[Notification],
    ) -> StoreResult<Option<String>> {
        let mut tx = DB::begin_write(&self.pool).await?;
        let inserted = sqlx::query(
            "INSERT INTO events (event_id, result, body, transfer_id, created_at) \
             VALUES ($1, $2, $3, $4, $5) ON CONFLICT DO NOTHING",
        )
        .bind(event_id)
        .bind(result)
        .bind(body)
        .bind(transfer_id)
        .bind(crate::ids::now())
        .execute(&mut *tx)
        .await
        .map(|r| DB::rows_affected(&r))?;
        if inserted == 0 {
            let stored: String = sqlx::query_scalar("SELECT result FROM events WHERE event_id = $1")
                .bind(event_id)
                .fetch_one(&mut *tx)
                .await?;
            return Ok(Some(stored));
        }
        insert_notifications_tx::<DB>(&mut tx, notifications).await?;
        tx.commit().await?;
        Ok(None)
    }

    async fn event_by_transfer(&self, transfer_id: &str) -> StoreResult<Option<String>> {
        Ok(sqlx::query_scalar(
            "SELECT body FROM events WHERE transfer_id = $1 ORDER BY created_at DESC LIMIT 1",
        )
        .bind(transfer_id)
        .fetch_optional(&self.pool)
        .await?)
    }
}
