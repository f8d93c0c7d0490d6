//! Every transaction signed for a withdrawal (`withdrawal_attempts`): the first, stored with
//! it (`store_signed`), and each replacement of a stuck one at the same nonce with higher fees.
//! The rules (when to replace, by how much) are `custody::replace`'s.

use custodian_macros::sql_bounds;

use alloy_primitives::{Address, B256};
use async_trait::async_trait;
use sqlx::FromRow;

use crate::model::{
    audit::AuditEntry,
    custody::{Attempt, TxRequestState},
};
use crate::store::{
    sql::{parse_stored, Dialect},
    sql_store::SqlStore,
    StoreError, StoreResult,
};
use crate::types::TxRequestId;

/// A replacement to store: the new current transaction of a withdrawal.
#[derive(Debug)]
pub struct Replacement<'a> {
    pub id: &'a TxRequestId,
    /// The transaction it replaces (still the withdrawal's current one, or nothing is written).
    pub replaces: &'a B256,
    pub attempt: &'a Attempt,
    /// Gas limit × max fee per gas, wei.
    pub fee_reserve: &'a alloy_primitives::U256,
}

#[async_trait]
pub trait AttemptStore: Send + Sync {
    /// A withdrawal's transactions, first to last.
    async fn withdrawal_attempts(&self, id: &TxRequestId) -> StoreResult<Vec<Attempt>>;
    /// Makes `r.attempt` the withdrawal's current transaction (still `signed` or `delivered`,
    /// not seen mined, its version bumped), keeping the one it replaces among its attempts, with `audit`; `false` when the
    /// current transaction is no longer `r.replaces` (another process replaced it first).
    async fn replace_signed(&self, r: &Replacement<'_>, now: i64, audit: &[AuditEntry]) -> StoreResult<bool>;
    /// The attempt `hash` was mined in `block`: it becomes the withdrawal's transaction.
    async fn settle_mined(&self, id: &TxRequestId, hash: &B256, block: u64) -> StoreResult<()>;
    /// The signing addresses of `chain` after `after` (by their checksummed text; `None`: from
    /// the first), each with its next nonce, at most `limit`.
    async fn nonce_counters(
        &self,
        chain: &str,
        after: Option<Address>,
        limit: u32,
    ) -> StoreResult<Vec<(Address, u64)>>;
    /// The withdrawal one of whose transactions has hash `hash` (`0x` and 64 lower-case hex).
    async fn tx_request_of(&self, hash: &str) -> StoreResult<Option<TxRequestId>>;
}

#[derive(FromRow)]
pub(in crate::store) struct AttemptRow {
    attempt: i64,
    tx_hash: String,
    signed_tx: String,
    max_fee_per_gas: String,
    priority_fee_per_gas: String,
    created_at: i64,
}

impl AttemptRow {
    fn into_attempt(self) -> StoreResult<Attempt> {
        Ok(Attempt {
            attempt: self.attempt,
            hash: parse_stored(&self.tx_hash, "attempt hash")?,
            signed_tx: hex::decode(&self.signed_tx)
                .map_err(|_| StoreError::malformed("attempt", &self.tx_hash))?,
            max_fee_per_gas: parse_stored(&self.max_fee_per_gas, "max fee")?,
            priority_fee_per_gas: parse_stored(&self.priority_fee_per_gas, "priority fee")?,
            created_at: self.created_at,
        })
    }
}

/// Inserts `a` as attempt `a.attempt` of withdrawal `id`, in the caller's transaction.
#[sql_bounds]
pub(in crate::store) async fn insert_attempt<DB>(
    tx: &mut DB::Connection,
    id: &TxRequestId,
    a: &Attempt,
) -> StoreResult<()> {
    insert_attempts::<DB>(tx, &[(id, a)]).await
}

/// Attempts per multi-row insert: 7 parameters each, under every engine's limit.
const ATTEMPT_ROWS_PER_STATEMENT: usize = 50;

/// Inserts each `(id, a)` as attempt `a.attempt` of withdrawal `id`, in the caller's
/// transaction, in multi-row statements.
#[sql_bounds]
pub(in crate::store) async fn insert_attempts<DB>(
    tx: &mut DB::Connection,
    attempts: &[(&TxRequestId, &Attempt)],
) -> StoreResult<()> {
    for chunk in attempts.chunks(ATTEMPT_ROWS_PER_STATEMENT) {
        let values: Vec<String> =
            (0..chunk.len()).map(|i| format!("({})", DB::row_params(i * 7 + 1, 7))).collect();
        let sql = format!(
            "INSERT INTO withdrawal_attempts (tx_request_id, attempt, tx_hash, signed_tx, max_fee_per_gas, \
             priority_fee_per_gas, created_at) VALUES {}",
            values.join(", ")
        );
        let mut q = sqlx::query(&sql);
        for (id, a) in chunk {
            q = q.bind(id.as_str()).bind(a.attempt).bind(a.hash.to_string()).bind(hex::encode(&a.signed_tx));
            q = q
                .bind(a.max_fee_per_gas.to_string())
                .bind(a.priority_fee_per_gas.to_string())
                .bind(a.created_at);
        }
        q.execute(&mut *tx).await?;
    }
    Ok(())
}

#[sql_bounds]
#[async_trait]
impl<DB> AttemptStore for SqlStore<DB>
where
    for<'r> AttemptRow: FromRow<'r, DB::Row>,
    for<'r> (String,): FromRow<'r, DB::Row>,
    for<'r> (String, i64): FromRow<'r, DB::Row>,
{
    async fn withdrawal_attempts(&self, id: &TxRequestId) -> StoreResult<Vec<Attempt>> {
        let rows: Vec<AttemptRow> = sqlx::query_as(
            "SELECT attempt, tx_hash, signed_tx, max_fee_per_gas, priority_fee_per_gas, created_at \
             FROM withdrawal_attempts WHERE tx_request_id = $1 ORDER BY attempt",
        )
        .bind(id.as_str())
        .fetch_all(&self.pool)
        .await?;
        rows.into_iter().map(AttemptRow::into_attempt).collect()
    }

    async fn replace_signed(&self, r: &Replacement<'_>, now: i64, audit: &[AuditEntry]) -> StoreResult<bool> {
        let mut tx = self.begin_write().await?;
        let done = sqlx::query(
            "UPDATE withdrawals SET tx_hash = $3, signed_tx = $4, fee_reserve = $5, version = version + 1, \
             updated_at = $6 WHERE id = $1 AND tx_hash = $2 AND state IN ($7, $8) AND mined_block IS NULL",
        )
        .bind(r.id.as_str())
        .bind(r.replaces.to_string())
        .bind(r.attempt.hash.to_string())
        .bind(hex::encode(&r.attempt.signed_tx))
        .bind(r.fee_reserve.to_string())
        .bind(now)
        .bind(TxRequestState::Signed.as_str())
        .bind(TxRequestState::Delivered.as_str())
        .execute(&mut *tx)
        .await?;
        if DB::rows_affected(&done) != 1 {
            return Ok(false);
        }
        insert_attempt::<DB>(&mut tx, r.id, r.attempt).await?;
        crate::store::audit::append_tx::<DB>(&mut tx, audit).await?;
        tx.commit().await?;
        Ok(true)
    }

    async fn settle_mined(&self, id: &TxRequestId, hash: &B256, block: u64) -> StoreResult<()> {
        let mut tx = self.begin_write().await?;
        let block = i64::try_from(block).map_err(|_| StoreError::malformed("block", "above i64"))?;
        sqlx::query(
            "UPDATE withdrawals SET mined_block = $3, tx_hash = $2, signed_tx = \
             (SELECT signed_tx FROM withdrawal_attempts WHERE tx_request_id = $1 AND tx_hash = $2) \
             WHERE id = $1 AND EXISTS (SELECT 1 FROM withdrawal_attempts WHERE tx_request_id = $1 AND tx_hash = $2)",
        )
        .bind(id.as_str())
        .bind(hash.to_string())
        .bind(block)
        .execute(&mut *tx)
        .await?;
        tx.commit().await?;
        Ok(())
    }

    async fn nonce_counters(
        &self,
        chain: &str,
        after: Option<Address>,
        limit: u32,
    ) -> StoreResult<Vec<(Address, u64)>> {
        let rows: Vec<(String, i64)> = sqlx::query_as(
            "SELECT address, next_nonce FROM signer_nonces WHERE chain = $1 AND address > $2 \
             ORDER BY address LIMIT $3",
        )
        .bind(chain)
        .bind(after.map(|a| a.to_checksum(None)).unwrap_or_default())
        .bind(i64::from(limit))
        .fetch_all(&self.pool)
        .await?;
        rows.into_iter()
            .map(|(address, next)| {
                Ok((parse_stored(&address, "signing address")?, u64::try_from(next).unwrap_or_default()))
            })
            .collect()
    }

    async fn tx_request_of(&self, hash: &str) -> StoreResult<Option<TxRequestId>> {
        let row: Option<(String,)> =
            sqlx::query_as("SELECT tx_request_id FROM withdrawal_attempts WHERE tx_hash = $1")
                .bind(hash)
                .fetch_optional(&self.pool)
                .await?;
        row.map(|(id,)| parse_stored(&id, "txRequest id")).transpose()
    }
}

/// Nonce reservations ([`crate::store::CustodyStore::reserve_nonces`]) in the caller's transaction,
/// in `wanted`'s order: each address's counter raised to the node's next nonce (the highest
/// asked) and read once, each withdrawal without a nonce given the next, the counter written
/// once. A withdrawal that has a nonce (another process reserved it meanwhile) keeps it and the
/// counter does not move for it, so no nonce is skipped.
#[sql_bounds]
pub(in crate::store) async fn reserve_nonces_tx<DB>(
    tx: &mut DB::Connection,
    chain: &str,
    wanted: &[(&TxRequestId, Address, u64)],
) -> StoreResult<Vec<u64>>
where
    for<'r> (i64,): FromRow<'r, DB::Row>,
    for<'r> (Option<i64>,): FromRow<'r, DB::Row>,
{
    let mut node_next: std::collections::BTreeMap<Address, u64> = std::collections::BTreeMap::new();
    for (_, from, next) in wanted {
        let highest = node_next.entry(*from).or_default();
        *highest = (*highest).max(*next);
    }
    // The counters' rows are written first, in address order, so PostgreSQL holds their locks
    // for what follows: reservations of one address take turns, and two batches never wait on
    // each other's rows in opposite orders. Each counter: (as read, next to give).
    let mut counters: std::collections::BTreeMap<Address, (i64, i64)> = std::collections::BTreeMap::new();
    for (from, next) in node_next {
        let next = i64::try_from(next).map_err(|_| StoreError::malformed("nonce", "above i64"))?;
        let (counter,): (i64,) = sqlx::query_as(
            "INSERT INTO signer_nonces (chain, address, next_nonce) VALUES ($1, $2, $3) \
             ON CONFLICT (chain, address) DO UPDATE SET next_nonce = \
             CASE WHEN signer_nonces.next_nonce < $3 THEN $3 ELSE signer_nonces.next_nonce END \
             RETURNING next_nonce",
        )
        .bind(chain)
        .bind(from.to_checksum(None))
        .bind(next)
        .fetch_one(&mut *tx)
        .await?;
        counters.insert(from, (counter, counter));
    }
    let mut out = Vec::with_capacity(wanted.len());
    for (id, from, _) in wanted {
        let (_, counter) = counters
            .get_mut(from)
            .ok_or_else(|| StoreError::malformed("signing address", "without a counter"))?;
        let taken = sqlx::query("UPDATE withdrawals SET nonce = $2 WHERE id = $1 AND nonce IS NULL")
            .bind(id.as_str())
            .bind(*counter)
            .execute(&mut *tx)
            .await?;
        if DB::rows_affected(&taken) == 1 {
            out.push(u64::try_from(*counter).unwrap_or_default());
            *counter += 1;
            continue;
        }
        let (held,): (Option<i64>,) = sqlx::query_as("SELECT nonce FROM withdrawals WHERE id = $1")
            .bind(id.as_str())
            .fetch_one(&mut *tx)
            .await?;
        out.push(
            held.and_then(|n| u64::try_from(n).ok())
                .ok_or_else(|| StoreError::malformed("withdrawal nonce", id.as_str()))?,
        );
    }
    for (from, (read, next)) in counters {
        if next != read {
            sqlx::query("UPDATE signer_nonces SET next_nonce = $3 WHERE chain = $1 AND address = $2")
                .bind(chain)
                .bind(from.to_checksum(None))
                .bind(next)
                .execute(&mut *tx)
                .await?;
        }
    }
    Ok(out)
}
