//! Writing a run of processed blocks (`ChainStore::record_blocks`): their transfers, headers,
//! first appearances and balances, and the checkpoint, inside the caller's transaction.

use custodian_macros::sql_bounds;
use sqlx::FromRow;

use super::chain_rows::{
    h, UPDATE_CHAIN_BALANCES, UPSERT_CHAIN_HEAD, UPSERT_TRANSFERS, UPSERT_TRANSFERS_ON_CONFLICT,
};
use super::sql::{last_of_each, to_json, Dialect};
use super::{EventWrite, Recorded, StoreResult};
use crate::model::chain::{Appearance, BlockHead, Transfer};
use crate::model::wallet::Balances;
use crate::types::{Coin, WalletId};

/// The effects of a run of processed blocks, written in one transaction.
#[derive(Debug)]
pub struct BlockWrite<'a> {
    pub chain: &'a str,
    /// Consecutive blocks, lowest first; the checkpoint moves to the last. Empty for what the
    /// node's pending pool showed.
    pub heads: &'a [BlockHead],
    /// Transfers found in the blocks or whose state changed, in block order (a later one wins).
    pub transfers: &'a [Transfer],
    /// Addresses that appeared on chain for the first time in these blocks.
    pub appeared: &'a [Appearance],
    /// Headers below this height are dropped (beyond `reorg_depth`).
    pub keep_from: u64,
    /// Balances of the wallets the blocks touched, as of the last.
    pub balances: &'a [(WalletId, Balances)],
    /// Token balances (`balance`, `confirmed`, `spendable`) of the wallets the blocks touched.
    pub token_balances: &'a [(WalletId, Coin, Balances)],
    /// Wallets (and coins) whose balances the blocks changed but that were not read: too far
    /// behind the head. Kept until balances are read.
    pub stale: &'a [(WalletId, Coin)],
    /// Whether balances were read with this write: every kept stale wallet was among them.
    pub balances_read: bool,
    /// A UTXO chain's changes to its wallets' outputs, with the balances they give.
    pub utxo: Option<&'a super::unspents::UtxoChanges>,
    /// The §6 events of these changes (the outbox): stored with them or not at all, so a crash
    /// never leaves a state stored whose event is not, nor the reverse.
    pub events: &'a [EventWrite],
}

/// Writes `w` and its events; what each event got ([`Recorded`]), final once committed.
#[sql_bounds]
pub(super) async fn blocks<DB>(tx: &mut DB::Connection, w: &BlockWrite<'_>) -> StoreResult<Vec<Recorded>>
where
    for<'r> (String,): FromRow<'r, DB::Row>,
    for<'r> (String, String): FromRow<'r, DB::Row>,
    for<'r> (i64, i64, i64): FromRow<'r, DB::Row>,
{
    let now_ms = crate::clock::wall_now_ms();
    upsert_transfers::<DB>(tx, w.transfers, now_ms).await?;
    settle_withdrawals::<DB>(tx, w.transfers).await?;
    for a in w.appeared {
        sqlx::query(
            "INSERT INTO chain_appearances (chain, address, wallet_id, height, txid) VALUES ($1, $2, $3, $4, $5) \
             ON CONFLICT (chain, address) DO NOTHING",
        )
        .bind(w.chain)
        .bind(a.address.as_str())
        .bind(a.wallet_id.as_str())
        .bind(h(a.height))
        .bind(a.txid.as_str())
        .execute(&mut *tx)
        .await?;
    }
    checkpoint::<DB>(tx, w).await?;
    // Without touching `updated_at`: it tells the watcher's address book that records changed.
    for (wallet, b) in w.balances {
        let [balance, confirmed, spendable, ..] = b.texts();
        sqlx::query(UPDATE_CHAIN_BALANCES)
            .bind(balance)
            .bind(confirmed)
            .bind(spendable)
            .bind(wallet.as_str())
            .execute(&mut *tx)
            .await?;
    }
    token_balances::<DB>(tx, w.token_balances).await?;
    if let Some(c) = w.utxo {
        let keep_from = (!w.heads.is_empty()).then_some(w.keep_from);
        super::unspents::apply::<DB>(tx, w.chain, c, keep_from).await?;
    }
    stale::<DB>(tx, w).await?;
    let events: Vec<&EventWrite> = w.events.iter().collect();
    super::group_commit::events_tx::<DB>(tx, &events).await
}

/// Adds or updates transfers, many to a statement (docs/decisions.md#performance): 17
/// parameters a row; a transfer named twice keeps its last state.
#[sql_bounds]
async fn upsert_transfers<DB>(
    tx: &mut DB::Connection,
    transfers: &[Transfer],
    now_ms: i64,
) -> StoreResult<()> {
    const ROWS: usize = 64;
    for chunk in last_of_each(transfers, |t| t.id.as_str()).chunks(ROWS) {
        let values: Vec<String> =
            (0..chunk.len()).map(|i| format!("({})", DB::row_params(i * 17 + 1, 17))).collect();
        let sql = format!("{UPSERT_TRANSFERS} {} {UPSERT_TRANSFERS_ON_CONFLICT}", values.join(", "));
        let mut q = sqlx::query(&sql);
        for t in chunk {
            q = q.bind(t.id.as_str()).bind(t.wallet_id.as_str()).bind(t.coin.as_str()).bind(t.chain.as_str());
            q = q.bind(t.txid.as_str()).bind(h(t.height)).bind(t.block_hash.as_str()).bind(t.state.as_str());
            q = q.bind(t.value.as_str()).bind(t.fee.as_str()).bind(to_json(&t.entries)?).bind(t.date);
            q = q.bind(h(t.confirmations)).bind(t.sender.as_str()).bind(h(t.nonce)).bind(now_ms);
            q = q.bind(t.utxo.as_ref().map(to_json).transpose()?);
        }
        q.execute(&mut *tx).await?;
    }
    Ok(())
}

/// Marks settled the withdrawals one of whose transactions `transfers` record as a `confirmed`
/// send (written with the confirmed balances that now hold it), and unmarks those whose send
/// is in another state now. A withdrawal admits against the confirmed balance less the
/// withdrawals not settled (`custody::reserve`).
#[sql_bounds]
async fn settle_withdrawals<DB>(tx: &mut DB::Connection, transfers: &[Transfer]) -> StoreResult<()> {
    const HASHES: usize = 64;
    let sends: Vec<&Transfer> =
        last_of_each(transfers, |t| t.id.as_str()).into_iter().filter(|t| t.value.starts_with('-')).collect();
    for settled in [true, false] {
        let hashes: Vec<String> = sends
            .iter()
            .filter(|t| (t.state == crate::model::chain::TransferState::Confirmed) == settled)
            .map(|t| t.txid.to_ascii_lowercase())
            .collect();
        for chunk in hashes.chunks(HASHES) {
            // `settled` is the store's own 0 or 1, written into the text; only the hashes are bound.
            // A withdrawal is unsettled again only when none of its transactions' sends is
            // confirmed now: a replaced attempt's send turning `replaced` in the write that
            // confirms the mined one leaves it settled.
            let flag = i64::from(settled);
            let keep = match settled {
                true => "",
                false => " AND NOT EXISTS (SELECT 1 FROM withdrawal_attempts a JOIN transfers t ON t.txid = a.tx_hash \
                           WHERE a.tx_request_id = withdrawals.id AND t.wallet_id = withdrawals.wallet_id \
                           AND t.state = 'confirmed')",
            };
            let sql = format!(
                "UPDATE withdrawals SET settled = {flag} WHERE settled <> {flag} AND id IN (SELECT tx_request_id \
                 FROM withdrawal_attempts WHERE tx_hash IN ({})){keep}",
                DB::row_params(1, chunk.len())
            );
            let mut q = sqlx::query(&sql);
            for hash in chunk {
                q = q.bind(hash.as_str());
            }
            q.execute(&mut *tx).await?;
        }
    }
    Ok(())
}

/// Keeps the wallets whose balances are due, or forgets them once read.
#[sql_bounds]
async fn stale<DB>(tx: &mut DB::Connection, w: &BlockWrite<'_>) -> StoreResult<()> {
    if w.balances_read {
        sqlx::query("DELETE FROM chain_stale_balances WHERE chain = $1")
            .bind(w.chain)
            .execute(&mut *tx)
            .await?;
    }
    for (wallet, coin) in w.stale {
        sqlx::query(
            "INSERT INTO chain_stale_balances (chain, wallet_id, coin) VALUES ($1, $2, $3) \
             ON CONFLICT (chain, wallet_id, coin) DO NOTHING",
        )
        .bind(w.chain)
        .bind(wallet.as_str())
        .bind(coin.as_str())
        .execute(&mut *tx)
        .await?;
    }
    Ok(())
}

/// The run's block headers, those beyond `reorg_depth` dropped, and the checkpoint at the last.
/// No blocks (what the node's pending pool showed): the checkpoint stays.
#[sql_bounds]
async fn checkpoint<DB>(tx: &mut DB::Connection, w: &BlockWrite<'_>) -> StoreResult<()> {
    let Some(last) = w.heads.last() else { return Ok(()) };
    for head in w.heads {
        sqlx::query(UPSERT_CHAIN_HEAD)
            .bind(w.chain)
            .bind(h(head.height))
            .bind(head.hash.as_str())
            .bind(head.parent_hash.as_str())
            .execute(&mut *tx)
            .await?;
    }
    sqlx::query("DELETE FROM chain_heads WHERE chain = $1 AND height < $2")
        .bind(w.chain)
        .bind(h(w.keep_from))
        .execute(&mut *tx)
        .await?;
    sqlx::query("UPDATE chain_state SET height = $2, hash = $3 WHERE chain = $1")
        .bind(w.chain)
        .bind(h(last.height))
        .bind(last.hash.as_str())
        .execute(&mut *tx)
        .await?;
    Ok(())
}

#[sql_bounds]
async fn token_balances<DB>(tx: &mut DB::Connection, rows: &[(WalletId, Coin, Balances)]) -> StoreResult<()> {
    for (wallet, coin, b) in rows {
        let [balance, confirmed, spendable, ..] = b.texts();
        sqlx::query(
            "INSERT INTO wallet_token_balances (wallet_id, coin, balance, confirmed_balance, spendable_balance) \
             VALUES ($1, $2, $3, $4, $5) ON CONFLICT (wallet_id, coin) DO UPDATE SET balance = excluded.balance, \
             confirmed_balance = excluded.confirmed_balance, spendable_balance = excluded.spendable_balance",
        )
        .bind(wallet.as_str())
        .bind(coin.as_str())
        .bind(balance.unwrap_or("0"))
        .bind(confirmed.unwrap_or("0"))
        .bind(spendable.unwrap_or("0"))
        .execute(&mut *tx)
        .await?;
    }
    Ok(())
}

/// Undoes the blocks above `ancestor` (a reorg `depth` blocks deep, seen at `now`, Unix
/// seconds): their transfers are `removed`, their headers and first appearances dropped, and
/// the checkpoint moves to the ancestor.
#[sql_bounds]
pub(super) async fn rewind<DB>(
    tx: &mut DB::Connection,
    chain: &str,
    ancestor: &BlockHead,
    depth: u64,
    now: i64,
) -> StoreResult<()> {
    let tip = ancestor.height + depth;
    // A confirmed send the reorg takes away no longer settles its withdrawal.
    sqlx::query(
        "UPDATE withdrawals SET settled = 0 WHERE settled = 1 AND id IN (SELECT a.tx_request_id FROM \
         withdrawal_attempts a JOIN transfers t ON t.txid = a.tx_hash WHERE t.chain = $1 AND t.height > $2 \
         AND t.state = 'confirmed')",
    )
    .bind(chain)
    .bind(h(ancestor.height))
    .execute(&mut *tx)
    .await?;
    sqlx::query(
        "UPDATE transfers SET state = 'removed', confirmations = $3 - height + 1 WHERE chain = $1 \
         AND height > $2 AND state IN ('unconfirmed', 'confirmed') AND block_hash <> ''",
    )
    .bind(chain)
    .bind(h(ancestor.height))
    .bind(h(tip))
    .execute(&mut *tx)
    .await?;
    super::unspents::rewind::<DB>(tx, chain, ancestor.height).await?;
    for table in ["chain_heads", "chain_appearances"] {
        sqlx::query(&format!("DELETE FROM {table} WHERE chain = $1 AND height > $2"))
            .bind(chain)
            .bind(h(ancestor.height))
            .execute(&mut *tx)
            .await?;
    }
    sqlx::query(
        "UPDATE chain_state SET height = $2, hash = $3, last_reorg_depth = $4, last_reorg_at = $5 WHERE chain = $1",
    )
    .bind(chain)
    .bind(h(ancestor.height))
    .bind(ancestor.hash.as_str())
    .bind(h(depth))
    .bind(now)
    .execute(&mut *tx)
    .await?;
    Ok(())
}
