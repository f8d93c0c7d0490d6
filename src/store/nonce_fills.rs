//! Nonce gaps and their fills (docs/withdrawals.md#nonce-gaps): which withdrawals hold an
//! address's nonces, and the zero-value transactions the signer stored to fill the ones no
//! withdrawal will use. The rules (what is a gap, when to fill) are `custody::gaps`'.

use custodian_macros::sql_bounds;

use alloy_primitives::{Address, B256};
use async_trait::async_trait;
use sqlx::FromRow;

use super::{
    sql::{parse_stored, Dialect},
    sql_store::SqlStore,
    StoreError, StoreResult,
};
use crate::model::{audit::AuditEntry, custody::TxRequestState};
use crate::types::{KeyId, TxRequestId};

/// A zero-value transaction from `address` to itself at `nonce`, signed and stored before it
/// is sent.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NonceFill {
    pub chain: String,
    pub address: Address,
    pub nonce: u64,
    pub tx_hash: B256,
    /// EIP-2718 bytes.
    pub signed_tx: Vec<u8>,
    /// The failed withdrawal that had taken the nonce, when one had.
    pub tx_request_id: Option<TxRequestId>,
    /// Unix seconds.
    pub created_at: i64,
}

/// A withdrawal holding one of an address's nonces.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NonceHolder {
    pub nonce: u64,
    pub state: TxRequestState,
    pub tx_request_id: TxRequestId,
}

#[async_trait]
pub trait NonceFillStore: Send + Sync {
    /// The withdrawals of `chain` from `address` holding a nonce in `[from, to)`, any state, by
    /// nonce, at most `limit`.
    async fn nonce_holders(
        &self,
        chain: &str,
        address: Address,
        (from, to): (u64, u64),
        limit: u32,
    ) -> StoreResult<Vec<NonceHolder>>;
    /// The key of some withdrawal of `chain` from `address` (every one of an address shares it).
    async fn key_of_address(&self, chain: &str, address: Address) -> StoreResult<Option<KeyId>>;
    /// Stores `fill` with `audit`; `false` when the nonce has a fill already (nothing written).
    async fn add_nonce_fill(&self, fill: &NonceFill, audit: &[AuditEntry]) -> StoreResult<bool>;
    /// The fills of `address` at `from` or above, by nonce, at most `limit`.
    async fn nonce_fills(
        &self,
        chain: &str,
        address: Address,
        from: u64,
        limit: u32,
    ) -> StoreResult<Vec<NonceFill>>;
    /// The fill of the nonce withdrawal `id` had taken, when it was filled.
    async fn nonce_fill_of(&self, id: &TxRequestId) -> StoreResult<Option<NonceFill>>;
    /// The fills of `address` below `below` not yet known done (the node counts their nonce
    /// used, by the fill or by something else), by nonce, at most `limit`.
    async fn open_fills(
        &self,
        chain: &str,
        address: Address,
        below: u64,
        limit: u32,
    ) -> StoreResult<Vec<NonceFill>>;
    /// Makes `new` the fill of its nonce in place of `old` (signed again over a higher base fee),
    /// with `audit`; `false` when the stored fill is no longer `old` or is done.
    async fn replace_fill(&self, old: &NonceFill, new: &NonceFill, audit: &[AuditEntry])
        -> StoreResult<bool>;
    /// Marks the fill of `nonce` done.
    async fn finish_fill(&self, chain: &str, address: Address, nonce: u64) -> StoreResult<()>;
}

const FILL_COLUMNS: &str = "chain, address, nonce, tx_hash, signed_tx, tx_request_id, created_at";

#[derive(FromRow)]
pub(super) struct FillRow {
    chain: String,
    address: String,
    nonce: i64,
    tx_hash: String,
    signed_tx: String,
    tx_request_id: Option<String>,
    created_at: i64,
}

impl FillRow {
    fn into_fill(self) -> StoreResult<NonceFill> {
        Ok(NonceFill {
            address: parse_stored(&self.address, "fill address")?,
            nonce: u64::try_from(self.nonce).map_err(|_| StoreError::malformed("fill nonce", &self.chain))?,
            tx_hash: parse_stored(&self.tx_hash, "fill hash")?,
            signed_tx: hex::decode(&self.signed_tx)
                .map_err(|_| StoreError::malformed("fill", &self.tx_hash))?,
            tx_request_id: self.tx_request_id.map(|id| parse_stored(&id, "fill txRequest id")).transpose()?,
            created_at: self.created_at,
            chain: self.chain,
        })
    }
}

/// A nonce as the database holds it.
fn n(nonce: u64) -> i64 {
    i64::try_from(nonce).unwrap_or(i64::MAX)
}

/// The fills of `address` on `chain` whose nonce meets `condition` (of the store's own text,
/// comparing with `$3`, which is `nonce`), by nonce, at most `limit`.
#[sql_bounds]
async fn fills_where<DB>(
    store: &SqlStore<DB>,
    (chain, address): (&str, Address),
    condition: &str,
    nonce: u64,
    limit: u32,
) -> StoreResult<Vec<NonceFill>>
where
    for<'r> FillRow: FromRow<'r, DB::Row>,
{
    let rows: Vec<FillRow> = sqlx::query_as(&format!(
        "SELECT {FILL_COLUMNS} FROM nonce_fills WHERE chain = $1 AND address = $2 AND {condition} \
         ORDER BY nonce LIMIT $4"
    ))
    .bind(chain)
    .bind(address.to_checksum(None))
    .bind(n(nonce))
    .bind(i64::from(limit))
    .fetch_all(&store.pool)
    .await?;
    rows.into_iter().map(FillRow::into_fill).collect()
}

#[sql_bounds]
#[async_trait]
impl<DB> NonceFillStore for SqlStore<DB>
where
    for<'r> FillRow: FromRow<'r, DB::Row>,
    for<'r> (String,): FromRow<'r, DB::Row>,
    for<'r> (String, String): FromRow<'r, DB::Row>,
    for<'r> (i64, String, String): FromRow<'r, DB::Row>,
{
    async fn nonce_holders(
        &self,
        chain: &str,
        address: Address,
        (from, to): (u64, u64),
        limit: u32,
    ) -> StoreResult<Vec<NonceHolder>> {
        let rows: Vec<(i64, String, String)> = sqlx::query_as(
            "SELECT nonce, state, id FROM withdrawals WHERE coin = $1 AND from_address = $2 \
             AND nonce >= $3 AND nonce < $4 ORDER BY nonce LIMIT $5",
        )
        .bind(chain)
        .bind(address.to_checksum(None))
        .bind(n(from))
        .bind(n(to))
        .bind(i64::from(limit))
        .fetch_all(&self.pool)
        .await?;
        rows.into_iter()
            .map(|(nonce, state, id)| {
                Ok(NonceHolder {
                    nonce: u64::try_from(nonce).map_err(|_| StoreError::malformed("nonce", &id))?,
                    state: TxRequestState::parse(&state)
                        .ok_or_else(|| StoreError::malformed("state", &id))?,
                    tx_request_id: parse_stored(&id, "txRequest id")?,
                })
            })
            .collect()
    }

    async fn key_of_address(&self, chain: &str, address: Address) -> StoreResult<Option<KeyId>> {
        let row: Option<(String,)> =
            sqlx::query_as("SELECT key_id FROM withdrawals WHERE coin = $1 AND from_address = $2 LIMIT 1")
                .bind(chain)
                .bind(address.to_checksum(None))
                .fetch_optional(&self.pool)
                .await?;
        row.map(|(k,)| parse_stored(&k, "key id")).transpose()
    }

    async fn add_nonce_fill(&self, f: &NonceFill, audit: &[AuditEntry]) -> StoreResult<bool> {
        let mut tx = self.begin_write().await?;
        let done = sqlx::query(&format!(
            "INSERT INTO nonce_fills ({FILL_COLUMNS}) VALUES ($1, $2, $3, $4, $5, $6, $7) \
             ON CONFLICT (chain, address, nonce) DO NOTHING"
        ))
        .bind(f.chain.as_str())
        .bind(f.address.to_checksum(None))
        .bind(n(f.nonce))
        .bind(f.tx_hash.to_string())
        .bind(hex::encode(&f.signed_tx))
        .bind(f.tx_request_id.as_ref().map(|id| id.as_str().to_string()))
        .bind(f.created_at)
        .execute(&mut *tx)
        .await?;
        if DB::rows_affected(&done) != 1 {
            return Ok(false);
        }
        super::audit::append_tx::<DB>(&mut tx, audit).await?;
        tx.commit().await?;
        Ok(true)
    }

    async fn nonce_fills(
        &self,
        chain: &str,
        address: Address,
        from: u64,
        limit: u32,
    ) -> StoreResult<Vec<NonceFill>> {
        fills_where(self, (chain, address), "nonce >= $3", from, limit).await
    }

    async fn open_fills(
        &self,
        chain: &str,
        address: Address,
        below: u64,
        limit: u32,
    ) -> StoreResult<Vec<NonceFill>> {
        fills_where(self, (chain, address), "nonce < $3 AND done = 0", below, limit).await
    }

    async fn replace_fill(
        &self,
        old: &NonceFill,
        new: &NonceFill,
        audit: &[AuditEntry],
    ) -> StoreResult<bool> {
        let mut tx = self.begin_write().await?;
        let done = sqlx::query(
            "UPDATE nonce_fills SET tx_hash = $5, signed_tx = $6 WHERE chain = $1 AND address = $2 AND nonce = $3 \
             AND tx_hash = $4 AND done = 0",
        )
        .bind(old.chain.as_str())
        .bind(old.address.to_checksum(None))
        .bind(n(old.nonce))
        .bind(old.tx_hash.to_string())
        .bind(new.tx_hash.to_string())
        .bind(hex::encode(&new.signed_tx))
        .execute(&mut *tx)
        .await?;
        if DB::rows_affected(&done) != 1 {
            return Ok(false);
        }
        super::audit::append_tx::<DB>(&mut tx, audit).await?;
        tx.commit().await?;
        Ok(true)
    }

    async fn finish_fill(&self, chain: &str, address: Address, nonce: u64) -> StoreResult<()> {
        let mut tx = self.begin_write().await?;
        sqlx::query("UPDATE nonce_fills SET done = 1 WHERE chain = $1 AND address = $2 AND nonce = $3")
            .bind(chain)
            .bind(address.to_checksum(None))
            .bind(n(nonce))
            .execute(&mut *tx)
            .await?;
        tx.commit().await?;
        Ok(())
    }

    async fn nonce_fill_of(&self, id: &TxRequestId) -> StoreResult<Option<NonceFill>> {
        let row: Option<FillRow> =
            sqlx::query_as(&format!("SELECT {FILL_COLUMNS} FROM nonce_fills WHERE tx_request_id = $1"))
                .bind(id.as_str())
                .fetch_optional(&self.pool)
                .await?;
        row.map(FillRow::into_fill).transpose()
    }
}
