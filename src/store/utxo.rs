//! Multisig wallets of UTXO coins (docs/chains.md#utxo-chains): keychains (extended public
//! keys) and the addresses derived from them, kept in `wallet_addresses` with their chain code,
//! index and scripts.

use async_trait::async_trait;
use custodian_macros::sql_bounds;
use sqlx::FromRow;

use super::{sql::parse_stored, sql::Dialect, sql_store::SqlStore, StoreError, StoreResult};
use crate::model::{
    audit::AuditEntry,
    chain::{Position, Scripts, WalletAddress},
    wallet::WalletRow,
};
use crate::types::{Coin, KeyId, UserId, WalletId};

/// A keychain as stored.
#[derive(Debug, Clone, FromRow)]
pub struct KeychainRow {
    pub id: KeyId,
    pub coin: Coin,
    /// Base58 extended public key.
    pub r#pub: String,
    /// `user`, `backup` or `bitgo`.
    pub source: String,
    /// Who added it.
    pub user_id: UserId,
    /// The wallet that names it, once one does.
    pub wallet_id: Option<WalletId>,
    /// Unix seconds.
    pub created_at: i64,
}

/// A `wallet_addresses` row.
#[derive(Debug, Clone, FromRow)]
pub struct AddressRow {
    pub chain: String,
    pub address: String,
    pub label: Option<String>,
    pub created_at: i64,
    pub chain_code: Option<i32>,
    pub address_index: Option<i64>,
    pub coin_specific: Option<String>,
}

impl AddressRow {
    /// The address of `wallet` this row holds.
    pub fn into_address(self, wallet: &WalletId) -> StoreResult<WalletAddress> {
        let scripts = match &self.coin_specific {
            Some(text) => Some(
                serde_json::from_str::<Scripts>(text)
                    .map_err(|_| StoreError::malformed("address coinSpecific", text))?,
            ),
            None => None,
        };
        let position = match (self.chain_code, self.address_index) {
            (Some(chain), Some(index)) => Some(Position {
                chain: u32::try_from(chain)
                    .map_err(|_| StoreError::malformed("chain code", &chain.to_string()))?,
                index: u32::try_from(index)
                    .map_err(|_| StoreError::malformed("address index", &index.to_string()))?,
            }),
            _ => None,
        };
        Ok(WalletAddress {
            chain: parse_stored::<Coin>(&self.chain, "address chain")?,
            address: self.address,
            wallet_id: wallet.clone(),
            label: self.label,
            created_at: self.created_at,
            scripts,
            position,
        })
    }
}

/// What adding a UTXO address (derived or imported) came to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum UtxoAdded {
    Added,
    /// The address, or its chain code and index, is taken: for a derived one another request
    /// took the index first (derive the next and try again); for an imported one, some wallet
    /// watches it.
    Taken,
    /// The wallet holds the most addresses allowed.
    Full,
}

#[async_trait]
pub trait UtxoStore: Send + Sync {
    /// Keeps `row` with `audit` unless its user added `max` already; false when full.
    async fn add_keychain(&self, row: &KeychainRow, max: u32, audit: &[AuditEntry]) -> StoreResult<bool>;
    async fn keychain(&self, id: &KeyId) -> StoreResult<Option<KeychainRow>>;
    /// Makes wallet `wallet` naming `keys` (which must be `user`'s, of the wallet's coin, and
    /// named by no wallet yet: false otherwise, and nothing is written), with its first address
    /// and `audit`.
    async fn create_multisig_wallet(
        &self,
        wallet: &WalletRow,
        keys: &[KeyId],
        user: &UserId,
        first: &WalletAddress,
        audit: &[AuditEntry],
    ) -> StoreResult<bool>;
    /// The wallet that watches `address` on `chain`.
    async fn address_owner(&self, chain: &str, address: &str) -> StoreResult<Option<WalletId>>;
    /// The next index of `chain_code` in `wallet` (0 for its first).
    async fn next_address_index(&self, wallet: &WalletId, chain_code: u32) -> StoreResult<u32>;
    /// Adds UTXO address `a` (derived or imported) with `audit` unless its wallet holds `max`
    /// addresses (counted under the wallet's lock).
    async fn add_utxo_address(
        &self,
        a: &WalletAddress,
        max: u32,
        audit: &[AuditEntry],
    ) -> StoreResult<UtxoAdded>;
}

const KEYCHAIN_COLUMNS: &str = "id, coin, pub, source, user_id, wallet_id, created_at";

/// Inserts UTXO address `a` (derived or imported) inside `tx`: false when its address, or its
/// (wallet, chain code, index), is taken.
#[sql_bounds]
async fn insert_utxo_address_tx<DB>(tx: &mut DB::Connection, a: &WalletAddress) -> StoreResult<bool> {
    let scripts = a.scripts.as_ref().ok_or_else(|| StoreError::malformed("UTXO address", &a.address))?;
    let scripts = serde_json::to_string(scripts).map_err(|e| StoreError::Other(e.into()))?;
    let done = sqlx::query(
        "INSERT INTO wallet_addresses (chain, address, wallet_id, label, created_at, chain_code, address_index, \
         coin_specific) VALUES ($1, $2, $3, $4, $5, $6, $7, $8) ON CONFLICT DO NOTHING",
    )
    .bind(a.chain.as_str())
    .bind(a.address.as_str())
    .bind(a.wallet_id.as_str())
    .bind(a.label.as_deref())
    .bind(a.created_at)
    .bind(a.position.map(|p| i64::from(p.chain)))
    .bind(a.position.map(|p| i64::from(p.index)))
    .bind(scripts)
    .execute(&mut *tx)
    .await?;
    Ok(DB::rows_affected(&done) == 1)
}

#[sql_bounds]
#[async_trait]
impl<DB> UtxoStore for SqlStore<DB>
where
    for<'r> KeychainRow: FromRow<'r, DB::Row>,
    for<'r> (i64,): FromRow<'r, DB::Row>,
    for<'r> (String,): FromRow<'r, DB::Row>,
{
    async fn add_keychain(&self, r: &KeychainRow, max: u32, audit: &[AuditEntry]) -> StoreResult<bool> {
        let mut tx = self.begin_write().await?;
        let (held,): (i64,) = sqlx::query_as("SELECT COUNT(*) FROM keychains WHERE user_id = $1")
            .bind(r.user_id.as_str())
            .fetch_one(&mut *tx)
            .await?;
        if held >= i64::from(max) {
            return Ok(false);
        }
        sqlx::query(&format!(
            "INSERT INTO keychains ({KEYCHAIN_COLUMNS}) VALUES ($1, $2, $3, $4, $5, $6, $7)"
        ))
        .bind(r.id.as_str())
        .bind(r.coin.as_str())
        .bind(r.r#pub.as_str())
        .bind(r.source.as_str())
        .bind(r.user_id.as_str())
        .bind(r.wallet_id.as_ref().map(WalletId::as_str))
        .bind(r.created_at)
        .execute(&mut *tx)
        .await?;
        super::audit::append_tx::<DB>(&mut tx, audit).await?;
        tx.commit().await?;
        Ok(true)
    }

    async fn keychain(&self, id: &KeyId) -> StoreResult<Option<KeychainRow>> {
        let sql = format!("SELECT {KEYCHAIN_COLUMNS} FROM keychains WHERE id = $1");
        Ok(sqlx::query_as(&sql).bind(id.as_str()).fetch_optional(&self.pool).await?)
    }

    async fn create_multisig_wallet(
        &self,
        wallet: &WalletRow,
        keys: &[KeyId],
        user: &UserId,
        first: &WalletAddress,
        audit: &[AuditEntry],
    ) -> StoreResult<bool> {
        let mut tx = self.begin_write().await?;
        for key in keys {
            let done = sqlx::query(
                "UPDATE keychains SET wallet_id = $1 WHERE id = $2 AND user_id = $3 AND coin = $4 \
                 AND wallet_id IS NULL",
            )
            .bind(wallet.id.as_str())
            .bind(key.as_str())
            .bind(user.as_str())
            .bind(wallet.coin.as_str())
            .execute(&mut *tx)
            .await?;
            if DB::rows_affected(&done) != 1 {
                return Ok(false);
            }
        }
        super::wallets::upsert_wallet_tx::<DB>(&mut tx, wallet, self.clock.now_ms()).await?;
        if !insert_utxo_address_tx::<DB>(&mut tx, first).await? {
            return Err(StoreError::Conflict("the wallet's first address".into()));
        }
        super::audit::append_tx::<DB>(&mut tx, audit).await?;
        tx.commit().await?;
        Ok(true)
    }

    async fn address_owner(&self, chain: &str, address: &str) -> StoreResult<Option<WalletId>> {
        let owner: Option<(String,)> =
            sqlx::query_as("SELECT wallet_id FROM wallet_addresses WHERE chain = $1 AND address = $2")
                .bind(chain)
                .bind(address)
                .fetch_optional(&self.pool)
                .await?;
        owner.map(|(w,)| parse_stored(&w, "address wallet")).transpose()
    }

    async fn next_address_index(&self, wallet: &WalletId, chain_code: u32) -> StoreResult<u32> {
        let (next,): (i64,) = sqlx::query_as(
            "SELECT COALESCE(MAX(address_index) + 1, 0) FROM wallet_addresses WHERE wallet_id = $1 \
             AND chain_code = $2",
        )
        .bind(wallet.as_str())
        .bind(i64::from(chain_code))
        .fetch_one(&self.pool)
        .await?;
        u32::try_from(next).map_err(|_| StoreError::malformed("address index", &next.to_string()))
    }

    async fn add_utxo_address(
        &self,
        a: &WalletAddress,
        max: u32,
        audit: &[AuditEntry],
    ) -> StoreResult<UtxoAdded> {
        let mut tx = self.begin_write().await?;
        // Under the wallet's lock, so concurrent requests cannot all pass the count.
        let locked: Option<(String,)> =
            sqlx::query_as(DB::LOCK_WALLET).bind(a.wallet_id.as_str()).fetch_optional(&mut *tx).await?;
        if locked.is_none() {
            return Err(StoreError::malformed("derived address wallet", a.wallet_id.as_str()));
        }
        let (held,): (i64,) = sqlx::query_as("SELECT COUNT(*) FROM wallet_addresses WHERE wallet_id = $1")
            .bind(a.wallet_id.as_str())
            .fetch_one(&mut *tx)
            .await?;
        if held >= i64::from(max) {
            return Ok(UtxoAdded::Full);
        }
        if !insert_utxo_address_tx::<DB>(&mut tx, a).await? {
            return Ok(UtxoAdded::Taken);
        }
        super::audit::append_tx::<DB>(&mut tx, audit).await?;
        tx.commit().await?;
        Ok(UtxoAdded::Added)
    }
}
