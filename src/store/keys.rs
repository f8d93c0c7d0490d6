//! Keys the service holds for itself (`server_keys`), sealed by the caller under the master
//! key: the store sees only their sealed text.

use async_trait::async_trait;
use sqlx::{Encode, Executor, FromRow, IntoArguments, Type};

use super::{sql::Dialect, sql_store::SqlStore, StoreResult};

#[async_trait]
pub trait KeyStore: Send + Sync {
    /// The sealed key named `name`, if one was made.
    async fn server_key(&self, name: &str) -> StoreResult<Option<String>>;
    /// Stores `sealed` as the key `name` unless one exists (another process made it first);
    /// returns the key that is stored now.
    async fn keep_server_key(&self, name: &str, sealed: &str, now: i64) -> StoreResult<String>;
}

#[async_trait]
impl<DB> KeyStore for SqlStore<DB>
where
    DB: Dialect,
    for<'c> &'c mut DB::Connection: Executor<'c, Database = DB>,
    for<'q> DB::Arguments<'q>: IntoArguments<'q, DB>,
    for<'q> &'q str: Encode<'q, DB> + Type<DB>,
    for<'q> i64: Encode<'q, DB> + Type<DB>,
    for<'r> (String,): FromRow<'r, DB::Row>,
{
    async fn server_key(&self, name: &str) -> StoreResult<Option<String>> {
        let row: Option<(String,)> = sqlx::query_as("SELECT sealed FROM server_keys WHERE name = $1")
            .bind(name)
            .fetch_optional(&self.pool)
            .await?;
        Ok(row.map(|(s,)| s))
    }

    async fn keep_server_key(&self, name: &str, sealed: &str, now: i64) -> StoreResult<String> {
        let mut tx = self.begin_write().await?;
        sqlx::query(
            "INSERT INTO server_keys (name, sealed, created_at) VALUES ($1, $2, $3) ON CONFLICT (name) DO NOTHING",
        )
        .bind(name)
        .bind(sealed)
        .bind(now)
        .execute(&mut *tx)
        .await?;
        let (kept,): (String,) = sqlx::query_as("SELECT sealed FROM server_keys WHERE name = $1")
            .bind(name)
            .fetch_one(&mut *tx)
            .await?;
        tx.commit().await?;
        Ok(kept)
    }
}
