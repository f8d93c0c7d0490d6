//! The circuit breaker's records (docs/policy.md#circuit-breaker): prices an operator set, the
//! cents each wallet sent per minute, and which wallets' breakers are tripped.

use async_trait::async_trait;
use custodian_macros::sql_bounds;
use sqlx::FromRow;

use super::{sql::Dialect, sql_store::SqlStore, velocity::UNCOUNTED, EventWrite, Recorded, StoreResult};
use crate::model::audit::AuditEntry;
use crate::types::{Coin, WalletId};

/// A tripped breaker: the wallet, since when (Unix seconds), and the 24-hour total (cents)
/// that tripped it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Tripped {
    pub wallet: WalletId,
    pub at: i64,
    pub cents: i64,
}

#[async_trait]
pub trait PriceStore: Send + Sync {
    /// The price an operator set for `coin`: (USD per whole coin, decimal; when, Unix seconds).
    async fn static_price(&self, coin: &Coin) -> StoreResult<Option<(String, i64)>>;
    /// Sets `coin`'s price to `usd` (decimal, checked by the caller) at `at`, with `audit`.
    async fn set_static_price(
        &self,
        coin: &Coin,
        usd: &str,
        at: i64,
        audit: &[AuditEntry],
    ) -> StoreResult<()>;
    /// Cents `wallet` sent from the minute of `since` (Unix seconds) on, by withdrawals not
    /// rejected, canceled or failed (outside any lock).
    async fn usd_sent(&self, wallet: &WalletId, since: i64) -> StoreResult<i64>;
    /// The tripped breakers of wallets of `coin`, at most `limit`, oldest first.
    async fn tripped(&self, coin: &Coin, limit: u32) -> StoreResult<Vec<Tripped>>;
    /// The wallet's tripped breaker, if it is.
    async fn breaker(&self, wallet: &WalletId) -> StoreResult<Option<Tripped>>;
    /// Trips (`Some((at, cents))`) or resets (`None`) `wallet`'s breaker with `audit` and
    /// `events`; `None` when it already was so (nothing written).
    async fn set_breaker(
        &self,
        wallet: &WalletId,
        coin: &Coin,
        trip: Option<(i64, i64)>,
        audit: &[AuditEntry],
        events: &[&EventWrite],
    ) -> StoreResult<Option<Vec<Recorded>>>;
}

/// Cents `wallet` sent from the minute of `since` on: the minutes' sums less what those
/// minutes lost to rejections, cancellations and failures. At most 1,441 minute rows and an
/// index range of lost withdrawals, however many withdrawals the window holds.
#[sql_bounds]
pub(super) async fn usd_sent_on<DB>(
    conn: &mut DB::Connection,
    wallet: &WalletId,
    since: i64,
) -> StoreResult<i64>
where
    for<'r> (i64,): FromRow<'r, DB::Row>,
{
    let minute = since.div_euclid(60);
    let (sent,): (i64,) = sqlx::query_as(
        "SELECT CAST(COALESCE(SUM(cents), 0) AS BIGINT) FROM usd_minutes WHERE wallet_id = $1 AND minute >= $2",
    )
    .bind(wallet.as_str())
    .bind(minute)
    .fetch_one(&mut *conn)
    .await?;
    let (lost,): (i64,) = sqlx::query_as(&format!(
        "SELECT CAST(COALESCE(SUM(usd_cents), 0) AS BIGINT) FROM withdrawals WHERE wallet_id = $1 \
         AND created_at >= $2 AND state IN {UNCOUNTED} AND usd_cents IS NOT NULL"
    ))
    .bind(wallet.as_str())
    .bind(minute.saturating_mul(60))
    .fetch_one(&mut *conn)
    .await?;
    Ok(sent.saturating_sub(lost).max(0))
}

/// Adds `cents` to `wallet`'s minute of `at` (Unix seconds), inside the creating transaction.
#[sql_bounds]
pub(super) async fn add_usd_sent<DB>(
    conn: &mut DB::Connection,
    wallet: &WalletId,
    at: i64,
    cents: i64,
) -> StoreResult<()> {
    sqlx::query(
        "INSERT INTO usd_minutes (wallet_id, minute, cents) VALUES ($1, $2, $3) \
         ON CONFLICT (wallet_id, minute) DO UPDATE SET cents = usd_minutes.cents + excluded.cents",
    )
    .bind(wallet.as_str())
    .bind(at.div_euclid(60))
    .bind(cents)
    .execute(&mut *conn)
    .await?;
    Ok(())
}

#[derive(FromRow)]
struct TrippedRow {
    wallet_id: String,
    tripped_at: i64,
    usd_cents: i64,
}

impl TrippedRow {
    fn tripped(self) -> StoreResult<Tripped> {
        Ok(Tripped {
            wallet: super::sql::parse_stored(&self.wallet_id, "wallet id")?,
            at: self.tripped_at,
            cents: self.usd_cents,
        })
    }
}

#[sql_bounds]
#[async_trait]
impl<DB> PriceStore for SqlStore<DB>
where
    for<'r> (i64,): FromRow<'r, DB::Row>,
    for<'r> (String,): FromRow<'r, DB::Row>,
    for<'r> (String, String): FromRow<'r, DB::Row>,
    for<'r> (String, i64): FromRow<'r, DB::Row>,
    for<'r> TrippedRow: FromRow<'r, DB::Row>,
{
    #[tracing::instrument(level = "debug", skip_all)]
    async fn static_price(&self, coin: &Coin) -> StoreResult<Option<(String, i64)>> {
        Ok(sqlx::query_as("SELECT usd, set_at FROM prices WHERE coin = $1")
            .bind(coin.as_str())
            .fetch_optional(&self.pool)
            .await?)
    }

    async fn set_static_price(
        &self,
        coin: &Coin,
        usd: &str,
        at: i64,
        audit: &[AuditEntry],
    ) -> StoreResult<()> {
        let mut tx = self.begin_write().await?;
        sqlx::query(
            "INSERT INTO prices (coin, usd, set_at) VALUES ($1, $2, $3) \
             ON CONFLICT (coin) DO UPDATE SET usd = excluded.usd, set_at = excluded.set_at",
        )
        .bind(coin.as_str())
        .bind(usd)
        .bind(at)
        .execute(&mut *tx)
        .await?;
        super::audit::append_tx::<DB>(&mut tx, audit).await?;
        tx.commit().await?;
        Ok(())
    }

    #[tracing::instrument(level = "debug", skip_all)]
    async fn usd_sent(&self, wallet: &WalletId, since: i64) -> StoreResult<i64> {
        let mut conn = self.pool.acquire().await?;
        usd_sent_on::<DB>(&mut conn, wallet, since).await
    }

    async fn tripped(&self, coin: &Coin, limit: u32) -> StoreResult<Vec<Tripped>> {
        let rows: Vec<TrippedRow> = sqlx::query_as(
            "SELECT wallet_id, tripped_at, usd_cents FROM circuit_breakers WHERE coin = $1 \
             ORDER BY tripped_at, wallet_id LIMIT $2",
        )
        .bind(coin.as_str())
        .bind(i64::from(limit))
        .fetch_all(&self.pool)
        .await?;
        rows.into_iter().map(TrippedRow::tripped).collect()
    }

    async fn breaker(&self, wallet: &WalletId) -> StoreResult<Option<Tripped>> {
        let row: Option<TrippedRow> = sqlx::query_as(
            "SELECT wallet_id, tripped_at, usd_cents FROM circuit_breakers WHERE wallet_id = $1",
        )
        .bind(wallet.as_str())
        .fetch_optional(&self.pool)
        .await?;
        row.map(TrippedRow::tripped).transpose()
    }

    async fn set_breaker(
        &self,
        wallet: &WalletId,
        coin: &Coin,
        trip: Option<(i64, i64)>,
        audit: &[AuditEntry],
        events: &[&EventWrite],
    ) -> StoreResult<Option<Vec<Recorded>>> {
        let mut tx = self.begin_write().await?;
        let done = match trip {
            Some((at, cents)) => {
                sqlx::query(
                    "INSERT INTO circuit_breakers (wallet_id, coin, tripped_at, usd_cents) VALUES ($1, $2, $3, $4) \
                     ON CONFLICT (wallet_id) DO NOTHING",
                )
                .bind(wallet.as_str())
                .bind(coin.as_str())
                .bind(at)
                .bind(cents)
                .execute(&mut *tx)
                .await?
            }
            None => {
                sqlx::query("DELETE FROM circuit_breakers WHERE wallet_id = $1")
                    .bind(wallet.as_str())
                    .execute(&mut *tx)
                    .await?
            }
        };
        if DB::rows_affected(&done) != 1 {
            return Ok(None);
        }
        super::audit::append_tx::<DB>(&mut tx, audit).await?;
        let recorded = super::group_commit::events_tx::<DB>(&mut tx, events).await?;
        tx.commit().await?;
        Ok(Some(recorded))
    }
}
