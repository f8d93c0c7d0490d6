//! Failed authentication attempts (logins and one-time passwords), counted by subject (an email
//! or a user id) and by client (an IPv4 address or an IPv6 /64), and the clients each user
//! logged in from. The rules that use them are in `identity::throttle`.

use async_trait::async_trait;
use custodian_macros::sql_bounds;
use sqlx::FromRow;

use super::sql::{count_u32, Dialect};
use super::sql_store::SqlStore;
use super::StoreResult;

/// Failures in a window: how many, the oldest and the latest (Unix seconds).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct FailureCount {
    pub count: u32,
    pub oldest: Option<i64>,
    pub latest: Option<i64>,
}

/// Whose failures to count.
#[derive(Debug, Clone, Copy)]
pub enum FailuresOf<'a> {
    /// One subject (email or user id) from one client.
    Pair { subject: &'a str, client: &'a str },
    /// One subject from any client.
    Subject(&'a str),
    /// One client, for any subject.
    Client(&'a str),
}

/// Failed attempts. `kind` is `login` or `otp`; times are Unix seconds.
#[async_trait]
pub trait LoginThrottleStore: Send + Sync {
    /// Records an attempt as failed before it is tried; returns its id, which orders attempts.
    async fn reserve_failure(&self, kind: &str, subject: &str, client: &str, at: i64) -> StoreResult<i64>;
    /// Removes a reserved failure (the attempt succeeded, or was refused without being tried).
    async fn forget_failure(&self, id: i64) -> StoreResult<()>;
    /// Failures of `who` since `since`, counting only ids up to `up_to`.
    async fn failures(
        &self,
        kind: &str,
        who: FailuresOf<'_>,
        since: i64,
        up_to: i64,
    ) -> StoreResult<FailureCount>;
    /// Forgets `subject`'s failures from `client` (after a success there) and every failure
    /// older than `before`.
    async fn clear_failures(&self, kind: &str, subject: &str, client: &str, before: i64) -> StoreResult<()>;
    /// Notes a successful login of `subject` from `client` at `at`.
    async fn remember_login_client(&self, subject: &str, client: &str, at: i64) -> StoreResult<()>;
    /// Whether `subject` logged in successfully from `client` since `since`.
    async fn known_login_client(&self, subject: &str, client: &str, since: i64) -> StoreResult<bool>;
}

#[derive(FromRow)]
struct CountRow {
    n: i64,
    oldest: Option<i64>,
    latest: Option<i64>,
}

impl From<CountRow> for FailureCount {
    fn from(r: CountRow) -> Self {
        FailureCount { count: count_u32(r.n), oldest: r.oldest, latest: r.latest }
    }
}

const COUNT: &str = "SELECT COUNT(*) AS n, MIN(at) AS oldest, MAX(at) AS latest FROM auth_failures";

#[sql_bounds]
#[async_trait]
impl<DB> LoginThrottleStore for SqlStore<DB>
where
    for<'r> (i64,): FromRow<'r, DB::Row>,
    for<'r> CountRow: FromRow<'r, DB::Row>,
{
    #[tracing::instrument(level = "debug", skip_all)]
    async fn reserve_failure(&self, kind: &str, subject: &str, client: &str, at: i64) -> StoreResult<i64> {
        Ok(sqlx::query_scalar(
            "INSERT INTO auth_failures (kind, subject, client, at) VALUES ($1, $2, $3, $4) RETURNING id",
        )
        .bind(kind)
        .bind(subject)
        .bind(client)
        .bind(at)
        .fetch_one(&self.pool)
        .await?)
    }

    #[tracing::instrument(level = "debug", skip_all)]
    async fn forget_failure(&self, id: i64) -> StoreResult<()> {
        sqlx::query("DELETE FROM auth_failures WHERE id = $1").bind(id).execute(&self.pool).await?;
        Ok(())
    }

    #[tracing::instrument(level = "debug", skip_all)]
    async fn failures(
        &self,
        kind: &str,
        who: FailuresOf<'_>,
        since: i64,
        up_to: i64,
    ) -> StoreResult<FailureCount> {
        // Both branches bind $4 and $5, so one statement shape serves all three.
        let (filter, a, b) = match who {
            FailuresOf::Pair { subject, client } => ("subject = $4 AND client = $5", subject, client),
            FailuresOf::Subject(subject) => ("subject = $4 AND $5 = ''", subject, ""),
            FailuresOf::Client(client) => ("client = $4 AND $5 = ''", client, ""),
        };
        let sql = format!("{COUNT} WHERE kind = $1 AND at > $2 AND id <= $3 AND {filter}");
        let r: CountRow = sqlx::query_as(&sql)
            .bind(kind)
            .bind(since)
            .bind(up_to)
            .bind(a)
            .bind(b)
            .fetch_one(&self.pool)
            .await?;
        Ok(r.into())
    }

    #[tracing::instrument(level = "debug", skip_all)]
    async fn clear_failures(&self, kind: &str, subject: &str, client: &str, before: i64) -> StoreResult<()> {
        sqlx::query(
            "DELETE FROM auth_failures WHERE (kind = $1 AND subject = $2 AND client = $3) OR at <= $4",
        )
        .bind(kind)
        .bind(subject)
        .bind(client)
        .bind(before)
        .execute(&self.pool)
        .await?;
        Ok(())
    }

    #[tracing::instrument(level = "debug", skip_all)]
    async fn remember_login_client(&self, subject: &str, client: &str, at: i64) -> StoreResult<()> {
        sqlx::query(
            "INSERT INTO login_clients (subject, client, at) VALUES ($1, $2, $3) \
             ON CONFLICT (subject, client) DO UPDATE SET at = excluded.at",
        )
        .bind(subject)
        .bind(client)
        .bind(at)
        .execute(&self.pool)
        .await?;
        Ok(())
    }

    #[tracing::instrument(level = "debug", skip_all)]
    async fn known_login_client(&self, subject: &str, client: &str, since: i64) -> StoreResult<bool> {
        let n: i64 = sqlx::query_scalar(
            "SELECT COUNT(*) FROM login_clients WHERE subject = $1 AND client = $2 AND at > $3",
        )
        .bind(subject)
        .bind(client)
        .bind(since)
        .fetch_one(&self.pool)
        .await?;
        Ok(n > 0)
    }
}
