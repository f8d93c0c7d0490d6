//! Wallet records (spec §2.1) and their balances.

use custodian_macros::sql_bounds;
use std::collections::HashSet;

use async_trait::async_trait;
use sqlx::FromRow;

use super::sql::{to_json, Dialect};
use super::sql_store::SqlStore;
use super::{StoreError, StoreResult};
use crate::model::wallet::{Balances, WalletRow};
use crate::types::{BaseUnits, Coin, EnterpriseId, SharedText, UserId, WalletId};
use std::sync::Arc;

impl Balances {
    /// The six amounts as text, in the column order of the statements below (balance,
    /// confirmed, spendable, staking, reward, withdraw hold).
    pub(super) fn texts(&self) -> [Option<&str>; 6] {
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

/// Wallet records and balances.
#[async_trait]
pub trait WalletStore: Send + Sync {
    /// Inserts or replaces wallets in one transaction. Balances absent from a row keep their
    /// stored value. Returns (inserted, updated).
    /// `audit` is written with the batch.
    async fn upsert_wallets(
        &self,
        rows: &[WalletRow],
        audit: &[crate::model::audit::AuditEntry],
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
        audit: &[crate::model::audit::AuditEntry],
    ) -> StoreResult<Option<WalletRow>>;
    /// Replaces wallet `id`'s §2.1 record (JSON object text, validated by the caller) if it is
    /// still `before` (no other change landed meanwhile), with `audit` and `events`; `None`
    /// when it changed or does not exist.
    async fn set_wallet_record(
        &self,
        id: &WalletId,
        before: &str,
        record: &str,
        audit: &[crate::model::audit::AuditEntry],
        events: &[&super::EventWrite],
    ) -> StoreResult<Option<Vec<super::Recorded>>>;
}

/// One record of [`Dialect::WALLETS_PACKED`]'s answer, `packed[range]`. Packing the answer in
/// one value makes a 1000-id lookup several times faster than decoding a row per wallet; the
/// separators cannot occur inside the values (hex ids, digits, and serde_json's JSON text, which
/// escapes every control character). The record and amounts stay slices of `packed`; ids and
/// the coin are copied inline, so a row costs no allocation but its user list.
pub(super) fn unpack_wallet(packed: &Arc<String>, range: std::ops::Range<usize>) -> StoreResult<WalletRow> {
    // Named by its start, the wallet id when the row has one (not the whole record).
    let start = packed.get(range.clone()).map(|t| t.get(..32).unwrap_or(t)).unwrap_or_default();
    let malformed = || StoreError::malformed("packed wallet row", start);
    let text = packed.get(range.clone()).ok_or_else(malformed)?;
    let mut at = 0;
    // The next field's range within `packed`; the 12th and last (the record) runs to the end.
    let mut next = |last: bool| {
        let len = if last { text.len() - at } else { text[at..].find('\u{1f}').ok_or_else(malformed)? };
        let field = range.start + at..range.start + at + len;
        at += len + 1;
        Ok::<_, StoreError>(field)
    };
    let str_of = |r: std::ops::Range<usize>| packed.get(r).ok_or_else(malformed);
    // What the row holds was checked when it was written (as sqlx::Type decoding assumes).
    let amount = |r: std::ops::Range<usize>| {
        Ok::<_, StoreError>(match r.is_empty() {
            true => None,
            false => Some(BaseUnits::from_stored(SharedText::slice(packed, r).ok_or_else(malformed)?)),
        })
    };
    let id = WalletId::from_stored(str_of(next(false)?)?).map_err(|_| malformed())?;
    let coin = Coin::from_stored(str_of(next(false)?)?).map_err(|_| malformed())?;
    let enterprise = match str_of(next(false)?)? {
        "" => None,
        e => Some(EnterpriseId::from_stored(e).map_err(|_| malformed())?),
    };
    let deleted = str_of(next(false)?)? != "0";
    let user_ids = str_of(next(false)?)?
        .split(',')
        .filter(|s| !s.is_empty())
        .map(|u| UserId::from_stored(u).map_err(|_| malformed()))
        .collect::<StoreResult<_>>()?;
    let balances = Balances {
        balance: amount(next(false)?)?,
        confirmed: amount(next(false)?)?,
        spendable: amount(next(false)?)?,
        staking: amount(next(false)?)?,
        reward: amount(next(false)?)?,
        withdraw_hold_usd: amount(next(false)?)?,
    };
    let record = SharedText::slice(packed, next(true)?).ok_or_else(malformed)?;
    Ok(WalletRow { id, coin, enterprise, deleted, user_ids, record, balances })
}

/// Inserts or replaces wallet `w` inside `tx`, at `now` (Unix ms).
#[sql_bounds]
pub(super) async fn upsert_wallet_tx<DB>(
    tx: &mut DB::Connection,
    w: &WalletRow,
    now: i64,
) -> Result<(), sqlx::Error> {
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
    Ok(())
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

#[sql_bounds]
#[async_trait]
impl<DB> WalletStore for SqlStore<DB>
where
    for<'r> (String,): FromRow<'r, DB::Row>,
    for<'r> (Option<String>,): FromRow<'r, DB::Row>,
    for<'r> (String, String): FromRow<'r, DB::Row>,
{
    #[tracing::instrument(level = "debug", skip_all)]
    async fn upsert_wallets(
        &self,
        rows: &[WalletRow],
        audit: &[crate::model::audit::AuditEntry],
    ) -> StoreResult<(u64, u64)> {
        let mut tx = self.begin_write().await?;
        let ids: Vec<&str> = rows.iter().map(|r| r.id.as_str()).collect();
        let existing: Vec<String> =
            sqlx::query_scalar(DB::EXISTING_WALLET_IDS).bind(to_json(&ids)?).fetch_all(&mut *tx).await?;
        let existing: HashSet<String> = existing.into_iter().collect();
        let now = self.clock.now_ms();
        let (mut inserted, mut updated) = (0, 0);
        let mut seen = HashSet::new();
        for w in rows {
            upsert_wallet_tx::<DB>(&mut tx, w, now).await?;
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
        let packed = Arc::new(packed);
        let mut rows = Vec::with_capacity(ids.len());
        let mut start = 0;
        for record in packed.split('\u{1e}') {
            rows.push(unpack_wallet(&packed, start..start + record.len())?);
            start += record.len() + 1;
        }
        Ok(rows)
    }

    async fn set_wallet_record(
        &self,
        id: &WalletId,
        before: &str,
        record: &str,
        audit: &[crate::model::audit::AuditEntry],
        events: &[&super::EventWrite],
    ) -> StoreResult<Option<Vec<super::Recorded>>> {
        let mut tx = self.begin_write().await?;
        let done =
            sqlx::query("UPDATE wallets SET record = $3, updated_at = $4 WHERE id = $1 AND record = $2")
                .bind(id.as_str())
                .bind(before)
                .bind(record)
                .bind(self.clock.now_ms())
                .execute(&mut *tx)
                .await?;
        if DB::rows_affected(&done) != 1 {
            return Ok(None);
        }
        super::audit::append_tx::<DB>(&mut tx, audit).await?;
        let recorded = super::group_commit::events_tx::<DB>(&mut tx, events).await?;
        tx.commit().await?;
        Ok(Some(recorded))
    }

    #[tracing::instrument(level = "debug", skip_all)]
    async fn update_wallet_balances(
        &self,
        id: &WalletId,
        b: &Balances,
        audit: &[crate::model::audit::AuditEntry],
    ) -> StoreResult<Option<WalletRow>> {
        let mut tx = self.begin_write().await?;
        let mut q = sqlx::query(UPDATE_BALANCES);
        for amount in b.texts() {
            q = q.bind(amount);
        }
        let res = q.bind(self.clock.now_ms()).bind(id.as_str()).execute(&mut *tx).await?;
        if DB::rows_affected(&res) == 0 {
            return Ok(None);
        }
        super::audit::append_tx::<DB>(&mut tx, audit).await?;
        tx.commit().await?;
        Ok(self.wallets_by_ids(std::slice::from_ref(id), true).await?.pop())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn packed(rows: &[&str]) -> Arc<String> {
        Arc::new(rows.join("\u{1e}"))
    }

    #[test]
    fn a_packed_row_unpacks_into_slices_of_the_answer() {
        let id = "0123456789abcdef0123456789abcdef";
        let user = "fedcba9876543210fedcba9876543210";
        let row = format!("{id}\u{1f}tbtc\u{1f}\u{1f}0\u{1f}{user},{id}\u{1f}1500\u{1f}\u{1f}\u{1f}\u{1f}\u{1f}7\u{1f}{{\"id\":\"{id}\"}}");
        let text = packed(&["skipped", &row]);
        let start = "skipped".len() + 1;
        let w = unpack_wallet(&text, start..text.len()).expect("a well-formed row");
        assert_eq!(w.id.as_str(), id);
        assert_eq!(w.coin.as_str(), "tbtc");
        assert_eq!(w.enterprise, None);
        assert!(!w.deleted);
        assert_eq!(w.user_ids.iter().map(UserId::as_str).collect::<Vec<_>>(), [user, id]);
        assert_eq!(w.balances.balance.as_ref().map(BaseUnits::as_str), Some("1500"));
        assert_eq!(w.balances.confirmed, None);
        assert_eq!(w.balances.withdraw_hold_usd.as_ref().map(BaseUnits::as_str), Some("7"));
        assert_eq!(&*w.record, format!("{{\"id\":\"{id}\"}}"));
    }

    #[test]
    fn a_malformed_packed_row_is_an_error_not_a_panic() {
        let id = "0123456789abcdef0123456789abcdef";
        for bad in [
            String::new(),
            format!("{id}\u{1f}tbtc\u{1f}\u{1f}0"),
            // An id longer than any valid one does not fit the inline text.
            format!("{id}00\u{1f}tbtc\u{1f}\u{1f}0\u{1f}\u{1f}\u{1f}\u{1f}\u{1f}\u{1f}\u{1f}\u{1f}{{}}"),
        ] {
            let text = packed(&[&bad]);
            assert!(unpack_wallet(&text, 0..text.len()).is_err(), "{bad:?}");
        }
        let text = packed(&["short"]);
        assert!(unpack_wallet(&text, 0..text.len() + 5).is_err());
    }
}
