//! The unspent outputs of watched UTXO wallets (docs/chains.md#utxo-chains): Custodian's own
//! set, written by the UTXO watcher with its blocks ([`UtxoChanges`], inside
//! `ChainStore::record_blocks`'s transaction), undone by a reorg, and read for BitGo's
//! `unspents` route and the wallets' balances.

use async_trait::async_trait;
use custodian_macros::sql_bounds;
use sqlx::FromRow;

use super::chain_rows::{h, UPDATE_CHAIN_BALANCES};
use super::sql::{last_of_each, parse_stored, Dialect};
use super::sql_store::SqlStore;
use super::utxo::AddressRow;
use super::{StoreError, StoreResult};
use crate::model::chain::{Position, Unspent, PENDING_HEIGHT};
use crate::types::WalletId;

/// A watched output spent by a transaction: in a block at `height`, or in the mempool
/// ([`PENDING_HEIGHT`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Spend {
    pub txid: String,
    pub vout: u32,
    pub by: String,
    pub height: u64,
}

/// What a run of UTXO blocks, or a look at the mempool, changes in the set.
#[derive(Debug, Default)]
pub struct UtxoChanges {
    /// Outputs to watched wallets, new or now in a block (their height and hash move).
    pub outputs: Vec<Unspent>,
    pub spends: Vec<Spend>,
    /// Mempool transactions that left it unmined: their outputs go, their spends are undone.
    pub dropped: Vec<String>,
    /// Wallets' balances as the watcher's set now gives them.
    pub balances: Vec<(WalletId, UtxoBalance)>,
}

/// A UTXO wallet's balances in base units (docs/chains.md#utxo-chains): `balance` every
/// output not spent (mempool included), `confirmed` the outputs at `confirmations` not spent
/// in a block, `spendable` those not spent at all.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct UtxoBalance {
    pub balance: u64,
    pub confirmed: u64,
    pub spendable: u64,
}

/// Which unspents a page shows.
#[derive(Debug, Clone, Default)]
pub struct UnspentFilter {
    /// Only outputs in blocks at this height or below (BitGo's `minConfirms`).
    pub max_height: Option<u64>,
    /// Base units (BitGo's `minValue`).
    pub min_value: u64,
    /// After this outpoint (BitGo's `prevId`, `txid:vout`).
    pub after: Option<(String, u32)>,
    pub limit: u32,
}

/// An address of a UTXO chain as the watcher's book holds it.
#[derive(Debug, Clone)]
pub struct BookRow {
    pub wallet_id: WalletId,
    pub row: AddressRow,
}

#[async_trait]
pub trait UnspentStore: Send + Sync {
    /// A chain's watched outputs not spent in a block (those spent in the mempool included).
    async fn chain_unspents(&self, chain: &str) -> StoreResult<Vec<Unspent>>;
    /// A wallet's unspent outputs (not spent in a block nor in the mempool), by outpoint.
    async fn wallet_unspents(&self, wallet: &WalletId, f: &UnspentFilter) -> StoreResult<Vec<Unspent>>;
    /// Every added address of a UTXO chain with its scripts.
    async fn utxo_book(&self, chain: &str) -> StoreResult<Vec<BookRow>>;
}

const COLUMNS: &str = "chain, txid, vout, wallet_id, address, value, height, block_hash, date, chain_code, \
    address_index, spent_txid, spent_height";

#[derive(FromRow)]
struct UnspentRow {
    chain: String,
    txid: String,
    vout: i64,
    wallet_id: String,
    address: String,
    value: i64,
    height: i64,
    block_hash: String,
    date: i64,
    chain_code: Option<i64>,
    address_index: Option<i64>,
    spent_txid: Option<String>,
    spent_height: Option<i64>,
}

impl UnspentRow {
    fn into_unspent(self) -> StoreResult<Unspent> {
        let n =
            |v: i64, what: &str| u64::try_from(v).map_err(|_| StoreError::malformed(what, &v.to_string()));
        let small =
            |v: i64, what: &str| u32::try_from(v).map_err(|_| StoreError::malformed(what, &v.to_string()));
        let position = match (self.chain_code, self.address_index) {
            (Some(c), Some(i)) => {
                Some(Position { chain: small(c, "chain code")?, index: small(i, "index")? })
            }
            _ => None,
        };
        let spent = match (self.spent_txid, self.spent_height) {
            (Some(by), Some(at)) => Some((by, n(at, "spent height")?)),
            _ => None,
        };
        Ok(Unspent {
            chain: parse_stored(&self.chain, "unspent chain")?,
            wallet_id: parse_stored(&self.wallet_id, "unspent wallet")?,
            vout: small(self.vout, "vout")?,
            value: n(self.value, "unspent value")?,
            height: n(self.height, "unspent height")?,
            txid: self.txid,
            address: self.address,
            block_hash: self.block_hash,
            date: self.date,
            position,
            spent,
        })
    }
}

fn unspents(rows: Vec<UnspentRow>) -> StoreResult<Vec<Unspent>> {
    rows.into_iter().map(UnspentRow::into_unspent).collect()
}

/// Base units as stored: below 2^63 on any UTXO chain (21e14 satoshis in all).
fn v(n: u64) -> i64 {
    i64::try_from(n).unwrap_or(i64::MAX)
}

/// Writes `c` for `chain` inside the caller's transaction; `keep_from`: spent outputs below
/// it (beyond `reorg_depth`) are forgotten, `None` for a look at the mempool.
#[sql_bounds]
pub(super) async fn apply<DB>(
    tx: &mut DB::Connection,
    chain: &str,
    c: &UtxoChanges,
    keep_from: Option<u64>,
) -> StoreResult<()> {
    let pending = h(PENDING_HEIGHT);
    for txid in &c.dropped {
        sqlx::query("DELETE FROM utxos WHERE chain = $1 AND txid = $2 AND height = $3")
            .bind(chain)
            .bind(txid.as_str())
            .bind(pending)
            .execute(&mut *tx)
            .await?;
        sqlx::query(
            "UPDATE utxos SET spent_txid = NULL, spent_height = NULL WHERE chain = $1 AND spent_txid = $2 \
             AND spent_height = $3",
        )
        .bind(chain)
        .bind(txid.as_str())
        .bind(pending)
        .execute(&mut *tx)
        .await?;
    }
    insert_outputs::<DB>(tx, chain, &c.outputs).await?;
    for s in &c.spends {
        sqlx::query(
            "UPDATE utxos SET spent_txid = $4, spent_height = $5 WHERE chain = $1 AND txid = $2 AND vout = $3",
        )
        .bind(chain)
        .bind(s.txid.as_str())
        .bind(i64::from(s.vout))
        .bind(s.by.as_str())
        .bind(h(s.height))
        .execute(&mut *tx)
        .await?;
    }
    if let Some(keep_from) = keep_from {
        sqlx::query("DELETE FROM utxos WHERE chain = $1 AND spent_height < $2")
            .bind(chain)
            .bind(h(keep_from))
            .execute(&mut *tx)
            .await?;
    }
    balances::<DB>(tx, c).await
}

/// Adds or moves (into a block) outputs, many to a statement (docs/decisions.md#performance):
/// 11 parameters a row. An outpoint named twice keeps its last row: one statement may not
/// update a row twice.
#[sql_bounds]
async fn insert_outputs<DB>(tx: &mut DB::Connection, chain: &str, outputs: &[Unspent]) -> StoreResult<()> {
    const ROWS: usize = 64;
    let kept = last_of_each(outputs, |o| (o.txid.as_str(), o.vout));
    for chunk in kept.chunks(ROWS) {
        let values: Vec<String> =
            (0..chunk.len()).map(|i| format!("({}, NULL, NULL)", DB::row_params(i * 11 + 1, 11))).collect();
        let sql = format!(
            "INSERT INTO utxos ({COLUMNS}) VALUES {} ON CONFLICT (chain, txid, vout) DO UPDATE SET \
             height = excluded.height, block_hash = excluded.block_hash, date = excluded.date",
            values.join(", ")
        );
        let mut q = sqlx::query(&sql);
        for o in chunk {
            q = q.bind(chain).bind(o.txid.as_str()).bind(i64::from(o.vout)).bind(o.wallet_id.as_str());
            q = q.bind(o.address.as_str()).bind(v(o.value)).bind(h(o.height)).bind(o.block_hash.as_str());
            q = q.bind(o.date).bind(o.position.map(|p| i64::from(p.chain)));
            q = q.bind(o.position.map(|p| i64::from(p.index)));
        }
        q.execute(&mut *tx).await?;
    }
    Ok(())
}

/// Writes the wallets' balances (as text, like every balance column).
#[sql_bounds]
async fn balances<DB>(tx: &mut DB::Connection, c: &UtxoChanges) -> StoreResult<()> {
    for (wallet, b) in &c.balances {
        sqlx::query(UPDATE_CHAIN_BALANCES)
            .bind(b.balance.to_string())
            .bind(b.confirmed.to_string())
            .bind(b.spendable.to_string())
            .bind(wallet.as_str())
            .execute(&mut *tx)
            .await?;
    }
    Ok(())
}

/// Undoes the blocks above `ancestor` in the set: their outputs go, their spends are undone
/// (what returns to the mempool is read from it again).
#[sql_bounds]
pub(super) async fn rewind<DB>(tx: &mut DB::Connection, chain: &str, ancestor: u64) -> StoreResult<()> {
    let pending = h(PENDING_HEIGHT);
    sqlx::query("DELETE FROM utxos WHERE chain = $1 AND height > $2 AND height <> $3")
        .bind(chain)
        .bind(h(ancestor))
        .bind(pending)
        .execute(&mut *tx)
        .await?;
    sqlx::query(
        "UPDATE utxos SET spent_txid = NULL, spent_height = NULL WHERE chain = $1 AND spent_height > $2 \
         AND spent_height <> $3",
    )
    .bind(chain)
    .bind(h(ancestor))
    .bind(pending)
    .execute(&mut *tx)
    .await?;
    Ok(())
}

#[sql_bounds]
#[async_trait]
impl<DB> UnspentStore for SqlStore<DB>
where
    for<'r> UnspentRow: FromRow<'r, DB::Row>,
    for<'r> (String, String, Option<String>, i64, Option<i32>, Option<i64>, Option<String>):
        FromRow<'r, DB::Row>,
{
    async fn chain_unspents(&self, chain: &str) -> StoreResult<Vec<Unspent>> {
        let rows: Vec<UnspentRow> = sqlx::query_as(&format!(
            "SELECT {COLUMNS} FROM utxos WHERE chain = $1 AND (spent_height IS NULL OR spent_height = $2)"
        ))
        .bind(chain)
        .bind(h(PENDING_HEIGHT))
        .fetch_all(&self.pool)
        .await?;
        unspents(rows)
    }

    async fn wallet_unspents(&self, wallet: &WalletId, f: &UnspentFilter) -> StoreResult<Vec<Unspent>> {
        let (after_txid, after_vout) = match &f.after {
            Some((txid, vout)) => (txid.as_str(), i64::from(*vout)),
            None => ("", -1),
        };
        let rows: Vec<UnspentRow> = sqlx::query_as(&format!(
            "SELECT {COLUMNS} FROM utxos WHERE wallet_id = $1 AND spent_txid IS NULL AND height <= $2 \
             AND value >= $3 AND (txid > $4 OR (txid = $4 AND vout > $5)) ORDER BY txid, vout LIMIT $6"
        ))
        .bind(wallet.as_str())
        .bind(h(f.max_height.unwrap_or(PENDING_HEIGHT)))
        .bind(v(f.min_value))
        .bind(after_txid)
        .bind(after_vout)
        .bind(i64::from(f.limit))
        .fetch_all(&self.pool)
        .await?;
        unspents(rows)
    }

    async fn utxo_book(&self, chain: &str) -> StoreResult<Vec<BookRow>> {
        let rows: Vec<(String, String, Option<String>, i64, Option<i32>, Option<i64>, Option<String>)> =
            sqlx::query_as(
                "SELECT wallet_id, address, label, created_at, chain_code, address_index, coin_specific \
                 FROM wallet_addresses WHERE chain = $1",
            )
            .bind(chain)
            .fetch_all(&self.pool)
            .await?;
        rows.into_iter()
            .map(|(wallet, address, label, created_at, chain_code, address_index, coin_specific)| {
                Ok(BookRow {
                    wallet_id: parse_stored(&wallet, "address wallet")?,
                    row: AddressRow {
                        chain: chain.to_string(),
                        address,
                        label,
                        created_at,
                        chain_code,
                        address_index,
                        coin_specific,
                    },
                })
            })
            .collect()
    }
}
