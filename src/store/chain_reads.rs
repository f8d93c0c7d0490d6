//! Reads of the chain tables that take a connection: which addresses have appeared on chain, a
//! wallet's token balances.

use custodian_macros::sql_bounds;
use sqlx::FromRow;

use super::{sql::Dialect, StoreResult};
use crate::types::WalletId;

/// A token balance row: (token coin, balance, confirmed, spendable), base units.
pub type TokenBalanceRow = (String, String, String, String);

/// Those of `addresses` that have appeared on `chain` (500 to a query).
#[sql_bounds]
pub(super) async fn appeared<DB>(
    conn: &mut DB::Connection,
    chain: &str,
    addresses: &[String],
) -> StoreResult<Vec<String>>
where
    for<'r> (String,): FromRow<'r, DB::Row>,
{
    let mut seen = Vec::new();
    for part in addresses.chunks(500) {
        let marks: Vec<String> = (2..part.len() + 2).map(|i| format!("${i}")).collect();
        let sql = format!(
            "SELECT address FROM chain_appearances WHERE chain = $1 AND address IN ({})",
            marks.join(", ")
        );
        let q =
            part.iter().fold(sqlx::query_as::<DB, (String,)>(&sql).bind(chain), |q, a| q.bind(a.as_str()));
        seen.extend(q.fetch_all(&mut *conn).await?.into_iter().map(|(a,)| a));
    }
    Ok(seen)
}

/// `wallet`'s token balances by token coin.
#[sql_bounds]
pub(super) async fn token_balances<DB>(
    conn: &mut DB::Connection,
    wallet: &WalletId,
) -> StoreResult<Vec<TokenBalanceRow>>
where
    for<'r> TokenBalanceRow: FromRow<'r, DB::Row>,
{
    Ok(sqlx::query_as(
        "SELECT coin, balance, confirmed_balance, spendable_balance FROM wallet_token_balances \
         WHERE wallet_id = $1 ORDER BY coin",
    )
    .bind(wallet.as_str())
    .fetch_all(&mut *conn)
    .await?)
}
