//! Failed-login counters, by email and by client address, for the login throttle.

use async_trait::async_trait;
use sqlx::{Encode, Executor, FromRow, IntoArguments, Type};

use super::sql::{count_u32, Dialect, SqlStore};
use super::StoreResult;

/// Failed logins. Times are Unix seconds.
#[async_trait]
pub trait LoginThrottleStore: Send + Sync {
    /// Counts a failed login for `email` from `ip` at `at`.
    async fn record_login_failure(&self, email: &str, ip: &str, at: i64) -> StoreResult<()>;
    /// Failures for `email` since `since`: (count, oldest time).
    async fn login_failures_by_email(&self, email: &str, since: i64) -> StoreResult<(u32, Option<i64>)>;
    /// Failures from `ip` since `since`: (count, oldest time).
    async fn login_failures_by_ip(&self, ip: &str, since: i64) -> StoreResult<(u32, Option<i64>)>;
    /// Forgets the failures of `email` (after a successful login) and those older than `before`.
    async fn clear_login_failures(&self, email: &str, before: i64) -> StoreResult<()>;
}

#[async_trait]
impl<DB> LoginThrottleStore for SqlStore<DB>
where
    DB: Dialect,
    for<'c> &'c mut DB::Connection: Executor<'c, Database = DB>,
    for<'q> DB::Arguments<'q>: IntoArguments<'q, DB>,
    for<'q> &'q str: Encode<'q, DB> + Type<DB>,
    for<'q> i64: Encode<'q, DB> + Type<DB>,
    for<'q> Option<&'q str>: Encode<'q, DB>,
    for<'q> Option<String>: Encode<'q, DB>,
    for<'q> Option<i64>: Encode<'q, DB>,
    for<'r> (i64, Option<i64>): FromRow<'r, DB::Row>,
{
    async fn record_login_failure(&self, email: &str, ip: &str, at: i64) -> StoreResult<()> {
        sqlx::query("INSERT INTO login_failures (email, ip, at) VALUES ($1, $2, $3)")
            .bind(email)
            .bind(ip)
            .bind(at)
            .execute(&self.pool)
            .await?;
        Ok(())
    }

    async fn login_failures_by_email(&self, email: &str, since: i64) -> StoreResult<(u32, Option<i64>)> {
        let (n, oldest): (i64, Option<i64>) =
            sqlx::query_as("SELECT COUNT(*), MIN(at) FROM login_failures WHERE email = $1 AND at > $2")
                .bind(email)
                .bind(since)
                .fetch_one(&self.pool)
                .await?;
        Ok((count_u32(n), oldest))
    }

    async fn login_failures_by_ip(&self, ip: &str, since: i64) -> StoreResult<(u32, Option<i64>)> {
        let (n, oldest): (i64, Option<i64>) =
            sqlx::query_as("SELECT COUNT(*), MIN(at) FROM login_failures WHERE ip = $1 AND at > $2")
                .bind(ip)
                .bind(since)
                .fetch_one(&self.pool)
                .await?;
        Ok((count_u32(n), oldest))
    }

    async fn clear_login_failures(&self, email: &str, before: i64) -> StoreResult<()> {
        sqlx::query("DELETE FROM login_failures WHERE email = $1 OR at <= $2")
            .bind(email)
            .bind(before)
            .execute(&self.pool)
            .await?;
        Ok(())
    }
}
