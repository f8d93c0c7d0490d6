//! Wallet records (spec §2.1) and their balances.

use std::collections::HashSet;

use async_trait::async_trait;
use sqlx::{Encode, Executor, FromRow, IntoArguments, Type};

use super::sql::{to_json, Dialect};
use super::sql_store::SqlStore;
use super::{StoreError, StoreResult};
use crate::types::{BaseUnits, Coin, EnterpriseId, UserId, WalletId};

/// Balances in base units (USD cents for the withdraw hold).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Balances {
    pub balance: Option<BaseUnits>,
    pub confirmed: Option<BaseUnits>,
    pub spendable: Option<BaseUnits>,
    pub staking: Option<BaseUnits>,
    pub reward: Option<BaseUnits>,
    pub withdraw_hold_usd: Option<BaseUnits>,
}

impl Balances {
    /// The six amounts as text, in the column order of the statements below (balance,
    /// confirmed, spendable, staking, reward, withdraw hold).
    fn texts(&self) -> [Option<&str>; 6] {
        [
            &self.balance,
            &self.confirmed,
            &self.spendable,
            &self.staking,
            &self.reward,
            &self.withdraw_hold_usd,
        ]
        .map(|a| a.as_ref().map(BaseUnits::as_str))
    }
}

/// A validated wallet, ready to store.
#[derive(Debug, Clone)]
pub struct WalletRow {
    pub id: WalletId,
    pub coin: Coin,
    pub enterprise: Option<EnterpriseId>,
    pub deleted: bool,
    /// Ids from `users[].user`: the users who may see the wallet.
    pub user_ids: Vec<UserId>,
    /// The §2.1 record without balances, as JSON object text.
    pub record: String,
    pub balances: Balances,
}

/// Wallet records and balances.
#[async_trait]
pub trait WalletStore: Send + Sync {
    /// Inserts or replaces wallets in one transaction. Balances absent from a row keep their
    /// stored value. Returns (inserted, updated).
    /// `audit` is written with the batch.
    async fn upsert_wallets(
        &self,
        rows: &[WalletRow],
        audit: &[super::AuditEntry],
    ) -> StoreResult<(u64, u64)>;
    /// The wallets with these ids, in one query; deleted ones only with `include_deleted`.
    /// Unknown ids are absent; order is unspecified (SQLite answers in the order given). An id
    /// given twice may come back twice: callers pass distinct ids or collapse by id.
    async fn wallets_by_ids(&self, ids: &[WalletId], include_deleted: bool) -> StoreResult<Vec<WalletRow>>;
    /// Sets the balances given in `balances` (others unchanged); `None` when no such wallet.
    /// `audit` is written with the change, when the wallet exists.
    async fn update_wallet_balances(
        &self,
        id: &WalletId,
        balances: &Balances,
        audit: &[super::AuditEntry],
    ) -> StoreResult<Option<WalletRow>>;
}

/// One record of [`Dialect::WALLETS_PACKED`]'s answer. Packing the answer in one value makes a
/// 1000-id lookup several times faster than decoding a row per wallet; the separators cannot
/// occur inside the values (hex ids, digits, and serde_json's JSON text, which escapes every
/// control character).
pub(super) fn unpack_wallet(packed: &str) -> StoreResult<WalletRow> {
    let mut f = packed.splitn(12, '\u{1f}');
    let mut next =
        || f.next().ok_or_else(|| StoreError::Other(anyhow::anyhow!("malformed packed wallet row")));
    // What the row holds was checked when it was written (as sqlx::Type decoding assumes).
    let amount = |s: &str| (!s.is_empty()).then(|| BaseUnits::from_stored(s));
    let id = WalletId::from_stored(next()?);
    let coin = Coin::from_stored(next()?);
    let enterprise = Some(next()?).filter(|s| !s.is_empty()).map(EnterpriseId::from_stored);
    let deleted = next()? != "0";
    let user_ids = next()?.split(',').filter(|s| !s.is_empty()).map(UserId::from_stored).collect();
    let balances = Balances {
        balance: amount(next()?),
        confirmed: amount(next()?),
        spendable: amount(next()?),
        staking: amount(next()?),
        reward: amount(next()?),
        withdraw_hold_usd: amount(next()?),
    };
    let record = next()?.to_string();
    Ok(WalletRow { id, coin, enterprise, deleted, user_ids, record, balances })
}

const UPSERT_WALLET: &str = "INSERT INTO wallets (id, coin, enterprise, deleted, user_ids, record, balance, \
    confirmed_balance, spendable_balance, staking_balance, reward_balance, withdraw_hold_usd, updated_at) \
    VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13) \
    ON CONFLICT (id) DO UPDATE SET coin = excluded.coin, enterprise = excluded.enterprise, \
    deleted = excluded.deleted, user_ids = excluded.user_ids, record = excluded.record, \
    balance = COALESCE(excluded.balance, wallets.balance), \
    confirmed_balance = COALESCE(excluded.confirmed_balance, wallets.confirmed_balance), \
    spendable_balance = COALESCE(excluded.spendable_balance, wallets.spendable_balance), \
    staking_balance = COALESCE(excluded.staking_balance, wallets.staking_balance), \
    reward_balance = COALESCE(excluded.reward_balance, wallets.reward_balance), \
    withdraw_hold_usd = COALESCE(excluded.withdraw_hold_usd, wallets.withdraw_hold_usd), \
    updated_at = excluded.updated_at";

const UPDATE_BALANCES: &str = "UPDATE wallets SET balance = COALESCE($1, balance), \
    confirmed_balance = COALESCE($2, confirmed_balance), spendable_balance = COALESCE($3, spendable_balance), \
    staking_balance = COALESCE($4, staking_balance), reward_balance = COALESCE($5, reward_balance), \
    withdraw_hold_usd = COALESCE($6, withdraw_hold_usd), updated_at = $7 WHERE id = $8";

#[async_trait]
impl<DB> WalletStore for SqlStore<DB>
where
    DB: Dialect,
    for<'c> &'c mut DB::Connection: Executor<'c, Database = DB>,
    for<'q> DB::Arguments<'q>: IntoArguments<'q, DB>,
    for<'q> &'q str: Encode<'q, DB> + Type<DB>,
    for<'q> String: Encode<'q, DB> + Type<DB>,
    for<'q> i64: Encode<'q, DB> + Type<DB>,
    for<'q> Option<&'q str>: Encode<'q, DB>,
    for<'q> Option<String>: Encode<'q, DB>,
    for<'q> Option<i64>: Encode<'q, DB>,
    for<'q> bool: Encode<'q, DB> + Type<DB>,
    for<'r> (String,): FromRow<'r, DB::Row>,
    for<'r> (Option<String>,): FromRow<'r, DB::Row>,
{
    #[tracing::instrument(level = "debug", skip_all)]
    async fn upsert_wallets(
        &self,
        rows: &[WalletRow],
        audit: &[super::AuditEntry],
    ) -> StoreResult<(u64, u64)> {
        let mut tx = self.begin_write().await?;
        let ids: Vec<&str> = rows.iter().map(|r| r.id.as_str()).collect();
        let existing: Vec<String> =
            sqlx::query_scalar(DB::EXISTING_WALLET_IDS).bind(to_json(&ids)?).fetch_all(&mut *tx).await?;
        let existing: HashSet<String> = existing.into_iter().collect();
        let now = crate::ids::now();
        let (mut inserted, mut updated) = (0, 0);
        let mut seen = HashSet::new();
        for w in rows {
            let mut q = sqlx::query(UPSERT_WALLET)
                .bind(w.id.as_str())
                .bind(w.coin.as_str())
                .bind(w.enterprise.as_ref().map(EnterpriseId::as_str))
                .bind(w.deleted)
                .bind(w.user_ids.iter().map(UserId::as_str).collect::<Vec<_>>().join(","))
                .bind(w.record.as_str());
            for amount in w.balances.texts() {
                q = q.bind(amount);
            }
            q.bind(now).execute(&mut *tx).await?;
            if existing.contains(w.id.as_str()) || !seen.insert(w.id.as_str()) {
                updated += 1;
            } else {
                inserted += 1;
            }
        }
        super::audit::append_tx::<DB>(&mut tx, audit).await?;
        tx.commit().await?;
        Ok((inserted, updated))
    }

    #[tracing::instrument(level = "debug", skip_all)]
    async fn wallets_by_ids(&self, ids: &[WalletId], include_deleted: bool) -> StoreResult<Vec<WalletRow>> {
        let mut lent = self.lane.take(&self.pool).await?;
        let packed: Option<String> = sqlx::query_scalar(DB::WALLETS_PACKED)
            .bind(to_json(ids)?)
            .bind(include_deleted)
            .fetch_one(lent.conn())
            .await?;
        lent.keep();
        let Some(packed) = packed else { return Ok(Vec::new()) };
        packed.split('\u{1e}').map(unpack_wallet).collect()
    }

    #[tracing::instrument(level = "debug", skip_all)]
    async fn update_wallet_balances(
        &self,
        id: &WalletId,
        b: &Balances,
        audit: &[super::AuditEntry],
    ) -> StoreResult<Option<WalletRow>> {
        let mut tx = self.begin_write().await?;
        let mut q = sqlx::query(UPDATE_BALANCES);
        for amount in b.texts() {
            q = q.bind(amount);
        }
        let res = q.bind(crate::ids::now()).bind(id.as_str()).execute(&mut *tx).await?;
        if DB::rows_affected(&res) == 0 {
            return Ok(None);
        }
        super::audit::append_tx::<DB>(&mut tx, audit).await?;
        tx.commit().await?;
        Ok(self.wallets_by_ids(std::slice::from_ref(id), true).await?.pop())
    }
}
