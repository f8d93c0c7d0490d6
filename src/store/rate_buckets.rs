//! The rate limits' token buckets shared by every process on one PostgreSQL database
//! (docs/decisions.md#limits-shared-across-processes). A process reserves a few tokens at a time
//! and gives back those it did not spend; the rules (batch size, when to give back, failing
//! closed) are in `token_bucket::shared`. SQLite serves one process, whose own buckets suffice:
//! there [`RateBucketStore::shares_rate_buckets`] is false and nothing here is called.

use async_trait::async_trait;
use custodian_macros::sql_bounds;
use sqlx::FromRow;

use super::sql::Dialect;
use super::sql_store::SqlStore;
use super::{StoreError, StoreResult};

/// What one reservation got: whole tokens taken, and the tokens left in the bucket after it.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Reserved {
    pub granted: u32,
    pub left: f64,
}

/// A bucket's shape: at most `capacity` tokens, refilled evenly at `per_second`.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct BucketShape {
    pub capacity: f64,
    pub per_second: f64,
}

/// Shared token buckets.
#[async_trait]
pub trait RateBucketStore: Send + Sync {
    /// Whether buckets are kept in the database (PostgreSQL) for every process to share.
    fn shares_rate_buckets(&self) -> bool;
    /// Takes up to `want` whole tokens from `bucket` (refilled first by the time since its last
    /// refresh, by the database's clock; a new bucket starts full). Errors: `Unavailable` when
    /// the database does not answer; `Other` where buckets are not shared.
    async fn reserve_tokens(&self, bucket: &str, shape: BucketShape, want: u32) -> StoreResult<Reserved>;
    /// Gives back unspent tokens: `(bucket, tokens)` pairs, each bucket capped at `capacity`.
    async fn refund_tokens(&self, capacity: f64, refunds: &[(String, u32)]) -> StoreResult<()>;
    /// Removes up to 1,000 buckets named `<prefix>:...` untouched for `idle_secs` seconds (one
    /// period): full again, as a missing bucket is.
    async fn forget_idle_buckets(&self, prefix: &str, idle_secs: f64) -> StoreResult<()>;
}

/// `$1` bucket, `$2` capacity, `$3` tokens per second, `$4` tokens wanted. PostgreSQL evaluates
/// every `SET` expression against the old row, so `granted` and `tokens` see the same refill.
const RESERVE: &str = "INSERT INTO rate_buckets AS b (bucket, tokens, refreshed_at, granted) \
     VALUES ($1, $2 - LEAST($4, $2), CAST(EXTRACT(EPOCH FROM clock_timestamp()) AS DOUBLE PRECISION), LEAST($4, $2)) \
     ON CONFLICT (bucket) DO UPDATE SET \
       granted = LEAST($4, FLOOR(LEAST($2, b.tokens + GREATEST(0, EXCLUDED.refreshed_at - b.refreshed_at) * $3))), \
       tokens = LEAST($2, b.tokens + GREATEST(0, EXCLUDED.refreshed_at - b.refreshed_at) * $3) \
         - LEAST($4, FLOOR(LEAST($2, b.tokens + GREATEST(0, EXCLUDED.refreshed_at - b.refreshed_at) * $3))), \
       refreshed_at = EXCLUDED.refreshed_at \
     RETURNING granted, tokens";

/// `$1` a JSON array of `{"bucket", "n"}`, `$2` capacity.
const REFUND: &str = "UPDATE rate_buckets AS b SET tokens = LEAST($2, b.tokens + v.n) \
     FROM json_to_recordset(CAST($1 AS json)) AS v(bucket text, n float8) WHERE b.bucket = v.bucket";

const FORGET: &str = "DELETE FROM rate_buckets WHERE bucket IN (SELECT bucket FROM rate_buckets \
     WHERE refreshed_at < CAST(EXTRACT(EPOCH FROM clock_timestamp()) AS DOUBLE PRECISION) - $1 \
     AND LEFT(bucket, LENGTH($2)) = $2 LIMIT 1000)";

fn not_shared() -> StoreError {
    StoreError::Other(anyhow::anyhow!("rate buckets are shared only on PostgreSQL"))
}

#[sql_bounds]
#[async_trait]
impl<DB> RateBucketStore for SqlStore<DB>
where
    for<'r> (f64, f64): FromRow<'r, DB::Row>,
{
    fn shares_rate_buckets(&self) -> bool {
        DB::SHARES_RATE_BUCKETS
    }

    #[tracing::instrument(level = "debug", skip_all)]
    async fn reserve_tokens(&self, bucket: &str, shape: BucketShape, want: u32) -> StoreResult<Reserved> {
        if !DB::SHARES_RATE_BUCKETS {
            return Err(not_shared());
        }
        let (granted, left): (f64, f64) = sqlx::query_as(RESERVE)
            .bind(bucket)
            .bind(shape.capacity)
            .bind(shape.per_second)
            .bind(f64::from(want))
            .fetch_one(&self.pool)
            .await?;
        // `granted` is a whole number from 0 to `want`.
        Ok(Reserved { granted: granted.clamp(0.0, f64::from(want)) as u32, left: left.max(0.0) })
    }

    #[tracing::instrument(level = "debug", skip_all)]
    async fn refund_tokens(&self, capacity: f64, refunds: &[(String, u32)]) -> StoreResult<()> {
        if !DB::SHARES_RATE_BUCKETS {
            return Err(not_shared());
        }
        let rows: Vec<serde_json::Value> =
            refunds.iter().map(|(bucket, n)| serde_json::json!({ "bucket": bucket, "n": n })).collect();
        let rows = super::sql::to_json(&rows)?;
        sqlx::query(REFUND).bind(rows).bind(capacity).execute(&self.pool).await?;
        Ok(())
    }

    #[tracing::instrument(level = "debug", skip_all)]
    async fn forget_idle_buckets(&self, prefix: &str, idle_secs: f64) -> StoreResult<()> {
        if !DB::SHARES_RATE_BUCKETS {
            return Err(not_shared());
        }
        sqlx::query(FORGET).bind(idle_secs).bind(format!("{prefix}:")).execute(&self.pool).await?;
        Ok(())
    }
}
