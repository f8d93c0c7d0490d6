//! The chain tables' rows and their conversion into `model::chain` records: a leaf below
//! `chain.rs`'s queries.

use sqlx::FromRow;

use super::sql::{json_value, parse_stored};
use super::StoreResult;
use crate::model::chain::{ChainStatus, Transfer, TransferState};

#[derive(FromRow)]
pub(super) struct TransferRow {
    id: String,
    wallet_id: String,
    coin: String,
    chain: String,
    txid: String,
    height: i64,
    block_hash: String,
    state: String,
    value: String,
    fee: String,
    entries: String,
    date: i64,
    confirmations: i64,
    sender: String,
    nonce: i64,
    utxo: Option<String>,
}

impl TransferRow {
    pub(super) fn into_transfer(self) -> StoreResult<Transfer> {
        Ok(Transfer {
            wallet_id: parse_stored(&self.wallet_id, "transfer wallet")?,
            coin: parse_stored(&self.coin, "transfer coin")?,
            chain: parse_stored(&self.chain, "transfer chain")?,
            state: TransferState::parse(&self.state)
                .ok_or_else(|| super::StoreError::malformed("transfer state", &self.state))?,
            entries: json_value(&self.entries)?,
            id: self.id,
            txid: self.txid,
            height: u64::try_from(self.height).unwrap_or(0),
            block_hash: self.block_hash,
            value: self.value,
            fee: self.fee,
            date: self.date,
            confirmations: u64::try_from(self.confirmations).unwrap_or(0),
            sender: self.sender,
            nonce: u64::try_from(self.nonce).unwrap_or(0),
            utxo: self.utxo.as_deref().map(json_value).transpose()?,
        })
    }
}

pub(super) fn rows(rows: Vec<TransferRow>) -> StoreResult<Vec<Transfer>> {
    rows.into_iter().map(TransferRow::into_transfer).collect()
}

pub(super) const TRANSFER_COLUMNS: &str =
    "id, wallet_id, coin, chain, txid, height, block_hash, state, value, fee, \
    entries, date, confirmations, sender, nonce, utxo";

pub(super) const UPSERT_CHAIN_HEAD: &str = "INSERT INTO chain_heads (chain, height, hash, parent_hash) \
    VALUES ($1, $2, $3, $4) ON CONFLICT (chain, height) DO UPDATE SET hash = excluded.hash, \
    parent_hash = excluded.parent_hash";

/// A transfer upsert's head, before its rows of 17 values (`VALUES (...), (...)`).
pub(super) const UPSERT_TRANSFERS: &str = "INSERT INTO transfers (id, wallet_id, coin, chain, txid, height, \
    block_hash, state, value, fee, entries, date, confirmations, sender, nonce, seen_ms, utxo) VALUES";
/// After the rows: what an existing transfer takes (not its first-seen time).
pub(super) const UPSERT_TRANSFERS_ON_CONFLICT: &str = "ON CONFLICT (id) DO UPDATE SET height = excluded.height, \
    block_hash = excluded.block_hash, state = excluded.state, value = excluded.value, fee = excluded.fee, \
    entries = excluded.entries, date = excluded.date, confirmations = excluded.confirmations, utxo = excluded.utxo";

#[derive(FromRow)]
pub(super) struct ChainStateRow {
    chain: String,
    height: Option<i64>,
    hash: Option<String>,
    node_head: Option<i64>,
    halted: Option<String>,
    last_reorg_depth: Option<i64>,
    last_reorg_at: Option<i64>,
    lease_holder: Option<String>,
    lease_until_ms: Option<i64>,
    blocks_per_s_milli: Option<i64>,
    last_error: Option<String>,
}

impl ChainStateRow {
    pub(super) fn into_status(self) -> ChainStatus {
        let u = |n: Option<i64>| n.and_then(|n| u64::try_from(n).ok());
        ChainStatus {
            chain: self.chain,
            height: u(self.height),
            hash: self.hash,
            node_head: u(self.node_head),
            halted: self.halted,
            last_reorg_depth: u(self.last_reorg_depth),
            last_reorg_at: self.last_reorg_at,
            lease_holder: self.lease_holder,
            lease_until: self.lease_until_ms,
            blocks_per_second: self.blocks_per_s_milli.map(|m| m as f64 / 1000.0),
            error: self.last_error,
        }
    }
}

/// The balances the chain watcher keeps, leaving `updated_at` (the address book's sign that
/// records changed) alone.
pub(super) const UPDATE_CHAIN_BALANCES: &str = "UPDATE wallets SET balance = COALESCE($1, balance), \
    confirmed_balance = COALESCE($2, confirmed_balance), spendable_balance = COALESCE($3, spendable_balance) \
    WHERE id = $4";

/// Heights are below 2^63 on any chain; a larger one is stored as the largest.
pub(super) fn h(n: u64) -> i64 {
    i64::try_from(n).unwrap_or(i64::MAX)
}
