//! Wallet records (spec §2.1) and their balances.

use std::collections::HashSet;

use async_trait::async_trait;
use sqlx::{Encode, Executor, FromRow, IntoArguments, Type};

use super::sql::{to_json, Dialect, SqlStore};
use super::{StoreError, StoreResult};

/// Balances in base units (USD cents for the withdraw hold), as decimal digit strings.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Balances {
    pub balance: Option<String>,
    pub confirmed: Option<String>,
    pub spendable: Option<String>,
    pub staking: Option<String>,
    pub reward: Option<String>,
    pub withdraw_hold_usd: Option<String>,
}

/// A validated wallet, ready to store.
#[derive(Debug, Clone)]
pub struct WalletRow {
    pub id: String,
    pub coin: String,
    pub enterprise: Option<String>,
    pub deleted: bool,
    /// Ids from `users[].user`: the users who may see the wallet.
    pub user_ids: Vec<String>,
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
    /// Unknown ids are absent; order is unspecified.
    async fn wallets_by_ids(&self, ids: &[String], include_deleted: bool) -> StoreResult<Vec<WalletRow>>;
    /// Sets the balances given in `balances` (others unchanged); `None` when no such wallet.
    /// `audit` is written with the change, when the wallet exists.
    async fn update_wallet_balances(
        &self,
        id: &str,
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
    let opt = |s: &str| (!s.is_empty()).then(|| s.to_string());
    let id = next()?.to_string();
    let coin = next()?.to_string();
    let enterprise = opt(next()?);
    let deleted = next()? != "0";
    let user_ids = next()?.split(',').filter(|s| !s.is_empty()).map(str::to_string).collect();
    let balances = Balances {
        balance: opt(next()?),
        confirmed: opt(next()?),
        spendable: opt(next()?),
        staking: opt(next()?),
        reward: opt(next()?),
        withdraw_hold_usd: opt(next()?),
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
            let b = &w.balances;
            sqlx::query(UPSERT_WALLET)
                .bind(w.id.as_str())
                .bind(w.coin.as_str())
                .bind(w.enterprise.as_deref())
                .bind(w.deleted)
                .bind(w.user_ids.join(","))
                .bind(w.record.as_str())
                .bind(b.balance.as_deref())
                .bind(b.confirmed.as_deref())
                .bind(b.spendable.as_deref())
                .bind(b.staking.as_deref())
                .bind(b.reward.as_deref())
                .bind(b.withdraw_hold_usd.as_deref())
                .bind(now)
                .execute(&mut *tx)
                .await?;
            if existing.contains(&w.id) || !seen.insert(w.id.as_str()) {
                updated += 1;
            } else {
                inserted += 1;
            }
        }
        super::audit::append_tx::<DB>(&mut tx, audit).await?;
        tx.commit().await?;
        Ok((inserted, updated))
    }

    async fn wallets_by_ids(&self, ids: &[String], include_deleted: bool) -> StoreResult<Vec<WalletRow>> {
        let packed: Option<String> = sqlx::query_scalar(DB::WALLETS_PACKED)
            .bind(to_json(ids)?)
            .bind(include_deleted)
            .fetch_one(&self.pool)
            .await?;
        let Some(packed) = packed else { return Ok(Vec::new()) };
        packed.split('\u{1e}').map(unpack_wallet).collect()
    }

    async fn update_wallet_balances(
        &self,
        id: &str,
        b: &Balances,
        audit: &[super::AuditEntry],
    ) -> StoreResult<Option<WalletRow>> {
        let mut tx = self.begin_write().await?;
        let res = sqlx::query(UPDATE_BALANCES)
            .bind(b.balance.as_deref())
            .bind(b.confirmed.as_deref())
            .bind(b.spendable.as_deref())
            .bind(b.staking.as_deref())
            .bind(b.reward.as_deref())
            .bind(b.withdraw_hold_usd.as_deref())
            .bind(crate::ids::now())
            .bind(id)
            .execute(&mut *tx)
            .await?;
        if DB::rows_affected(&res) == 0 {
            return Ok(None);
        }
        super::audit::append_tx::<DB>(&mut tx, audit).await?;
        tx.commit().await?;
        Ok(self.wallets_by_ids(&[id.to_string()], true).await?.pop())
    }
}
