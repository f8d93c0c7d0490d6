//! Custody: the keys Custodian holds, withdrawals (txRequests), their pending approvals, and
//! each signing address's next nonce. The rules (who may, states, signing) are `custody`'s.

pub(super) mod attempts;
pub(super) mod create;
pub(super) mod rows;

use custodian_macros::sql_bounds;

use alloy_primitives::{Address, U256};
use async_trait::async_trait;
use sqlx::FromRow;

use crate::model::{
    audit::AuditEntry,
    custody::{Approval, ApprovalState, KeyRecord, TxRequestState, Withdrawal},
};
pub use crate::store::custody_create::{
    Judge, Reservation, Spending, SumWindow, MAX_UNLOCK_COUNTED, MAX_UNSETTLED_MINED,
};
pub use crate::store::custody_rows::{Batched, Created, Move, RecordSwap, Refusal, Signed, WithdrawalFilter};
use crate::store::{
    custody_rows::{
        select_withdrawals, ApprovalRow, KeyRow, Where, WithdrawalRow, APPROVAL_COLUMNS, KEY_COLUMNS,
        WITHDRAWAL_COLUMNS,
    },
    sql::{to_json, unique_violation, Dialect},
    sql_store::SqlStore,
    StoreResult,
};
use crate::store::{EventWrite, Recorded};
use crate::types::{ApprovalId, EnterpriseId, KeyId, TxRequestId, WalletId};

/// Which pending approvals to list, newest first.
#[derive(Debug, Clone, Default)]
pub struct ApprovalFilter {
    /// Only these wallets (the caller's visible ones); `None`: every wallet.
    pub wallets: Option<Vec<WalletId>>,
    pub enterprise: Option<EnterpriseId>,
    /// Only those of no wallet: changes to an enterprise's rules.
    pub enterprise_scope: bool,
    pub state: Option<ApprovalState>,
    /// Only those whose `expires_at` is before this (Unix seconds).
    pub expired_before: Option<i64>,
    /// Only those of this type (`transactionRequest`, `policyRuleRequest`).
    pub approval_type: Option<&'static str>,
    pub limit: u32,
}

#[async_trait]
pub trait CustodyStore: Send + Sync {
    async fn add_custody_key(&self, k: &KeyRecord, audit: &[AuditEntry]) -> StoreResult<()>;
    async fn custody_key(&self, id: &KeyId) -> StoreResult<Option<KeyRecord>>;
    /// Keys by id, at most `limit`, after `after`.
    async fn custody_keys(&self, after: Option<&KeyId>, limit: u32) -> StoreResult<Vec<KeyRecord>>;
    /// Stores a new withdrawal and its approval, with `audit` and `events`, in one
    /// transaction. When the wallet already has a withdrawal with the same idempotency key,
    /// nothing is written and that one is returned. Otherwise, under the wallet's lock (held
    /// until the commit, across processes), reads what `reserve` asks and hands it to `judge`,
    /// which answers the approval to store or a refusal (nothing written).
    async fn create_withdrawal(
        &self,
        w: &Withdrawal,
        reserve: &Reservation<'_>,
        judge: Judge<'_>,
        audit: &[AuditEntry],
        events: &[&EventWrite],
    ) -> StoreResult<Created>;
    /// Base units withdrawn from `wallet` in each window: its coin's withdrawals created at or
    /// after `since`, not rejected, canceled or failed; with `upto`, only those stored before
    /// that withdrawal (under the wallet's lock, in the order they were judged).
    async fn velocity_sums(
        &self,
        wallet: &WalletId,
        windows: &[SumWindow],
        upto: Option<&TxRequestId>,
    ) -> StoreResult<Vec<U256>>;
    async fn withdrawal(&self, id: &TxRequestId) -> StoreResult<Option<Withdrawal>>;
    async fn withdrawals(&self, f: &WithdrawalFilter) -> StoreResult<Vec<Withdrawal>>;
    async fn approval(&self, id: &ApprovalId) -> StoreResult<Option<Approval>>;
    async fn approvals(&self, f: &ApprovalFilter) -> StoreResult<Vec<Approval>>;
    /// Stores approval `a` of a subject other than a withdrawal (a rule change), with `audit`
    /// and `events`, in one transaction.
    async fn create_approval(
        &self,
        a: &Approval,
        audit: &[AuditEntry],
        events: &[&EventWrite],
    ) -> StoreResult<Vec<Recorded>>;
    /// Writes `a`'s state and resolvers if the stored approval is still `pending` with
    /// `resolved_before` resolvers (no one answered meanwhile), moves its withdrawal to `next`
    /// when given (`(state, the version it was decided from)`: only if still at that version),
    /// and swaps a wallet's record when `record` says (only if it is still `before`), with
    /// `events`; `None` when someone else changed any of them first (nothing written).
    #[allow(clippy::too_many_arguments)] // one transaction's parts, each its own
    async fn resolve_approval(
        &self,
        a: &Approval,
        resolved_before: usize,
        next: Option<(TxRequestState, i64)>,
        record: Option<RecordSwap<'_>>,
        now: i64,
        audit: &[AuditEntry],
        events: &[&EventWrite],
    ) -> StoreResult<Option<Vec<Recorded>>>;
    /// Each withdrawal's nonce, in one transaction: the one it has, or its address's next one
    /// (at least the node's pending count given), stored on the withdrawal before it is signed.
    /// `wanted`: (withdrawal, its address, the node's pending nonce of the address).
    async fn reserve_nonces(
        &self,
        chain: &str,
        wanted: &[(&TxRequestId, Address, u64)],
    ) -> StoreResult<Vec<u64>>;
    /// Stores each signed transaction and its hash (state `signed`) with its audit and events,
    /// in one transaction; per item `None` when the withdrawal is no longer `pendingDelivery`.
    async fn store_signed(
        &self,
        items: &[Batched<'_, Signed<'_>>],
        now: i64,
    ) -> StoreResult<Vec<Option<Vec<Recorded>>>>;
    /// Moves each withdrawal from one of its `from` to its `to` (with its `error`), with its audit
    /// and events, in one transaction; per item `None` when it was in none of them.
    async fn move_withdrawals(
        &self,
        items: &[Batched<'_, Move<'_>>],
        now: i64,
    ) -> StoreResult<Vec<Option<Vec<Recorded>>>>;
    /// Records the block that mined a sent withdrawal (`None`: not mined, or reorged away).
    async fn set_mined(&self, id: &TxRequestId, block: Option<u64>) -> StoreResult<()>;
}

#[sql_bounds]
#[async_trait]
impl<DB> CustodyStore for SqlStore<DB>
where
    for<'r> KeyRow: FromRow<'r, DB::Row>,
    for<'r> WithdrawalRow: FromRow<'r, DB::Row>,
    for<'r> ApprovalRow: FromRow<'r, DB::Row>,
    for<'r> (Option<i64>,): FromRow<'r, DB::Row>,
    for<'r> (Option<String>,): FromRow<'r, DB::Row>,
    for<'r> (i64,): FromRow<'r, DB::Row>,
    for<'r> (String,): FromRow<'r, DB::Row>,
    for<'r> (String, String): FromRow<'r, DB::Row>,
    for<'r> crate::store::velocity::LostRow: FromRow<'r, DB::Row>,
    for<'r> crate::store::velocity::PlaceRow: FromRow<'r, DB::Row>,
    for<'r> (i64, i64, String, String): FromRow<'r, DB::Row>,
    for<'r> (i64, i64, i64, String): FromRow<'r, DB::Row>,
{
    async fn add_custody_key(&self, k: &KeyRecord, audit: &[AuditEntry]) -> StoreResult<()> {
        let mut tx = self.begin_write().await?;
        sqlx::query(&format!("INSERT INTO custody_keys ({KEY_COLUMNS}) VALUES ($1, $2, $3, $4, $5, $6, $7)"))
            .bind(k.id.as_str())
            .bind(k.wallet_id.as_str())
            .bind(k.backend.as_str())
            .bind(hex::encode(&k.public_key))
            .bind(k.address.to_checksum(None))
            .bind(hex::encode(&k.handle))
            .bind(k.created_at)
            .execute(&mut *tx)
            .await
            .map_err(|e| unique_violation(e, "key"))?;
        crate::store::audit::append_tx::<DB>(&mut tx, audit).await?;
        tx.commit().await?;
        Ok(())
    }

    async fn custody_key(&self, id: &KeyId) -> StoreResult<Option<KeyRecord>> {
        let row: Option<KeyRow> =
            sqlx::query_as(&format!("SELECT {KEY_COLUMNS} FROM custody_keys WHERE id = $1"))
                .bind(id.as_str())
                .fetch_optional(&self.pool)
                .await?;
        row.map(KeyRow::into_record).transpose()
    }

    async fn custody_keys(&self, after: Option<&KeyId>, limit: u32) -> StoreResult<Vec<KeyRecord>> {
        let rows: Vec<KeyRow> = sqlx::query_as(&format!(
            "SELECT {KEY_COLUMNS} FROM custody_keys WHERE id > $1 ORDER BY id LIMIT $2"
        ))
        .bind(after.map(KeyId::as_str).unwrap_or(""))
        .bind(i64::from(limit))
        .fetch_all(&self.pool)
        .await?;
        rows.into_iter().map(KeyRow::into_record).collect()
    }

    async fn create_withdrawal(
        &self,
        w: &Withdrawal,
        reserve: &Reservation<'_>,
        judge: Judge<'_>,
        audit: &[AuditEntry],
        events: &[&EventWrite],
    ) -> StoreResult<Created> {
        crate::store::custody_create::create_withdrawal(self, w, reserve, judge, audit, events).await
    }

    async fn velocity_sums(
        &self,
        wallet: &WalletId,
        windows: &[SumWindow],
        upto: Option<&TxRequestId>,
    ) -> StoreResult<Vec<U256>> {
        let mut conn = self.pool.acquire().await?;
        Ok(crate::store::custody_create::velocity_sums::<DB>(&mut conn, wallet, windows, upto).await?.0)
    }

    async fn withdrawal(&self, id: &TxRequestId) -> StoreResult<Option<Withdrawal>> {
        let row: Option<WithdrawalRow> =
            sqlx::query_as(&format!("SELECT {WITHDRAWAL_COLUMNS} FROM withdrawals WHERE id = $1"))
                .bind(id.as_str())
                .fetch_optional(&self.pool)
                .await?;
        row.map(WithdrawalRow::into_withdrawal).transpose()
    }

    async fn withdrawals(&self, f: &WithdrawalFilter) -> StoreResult<Vec<Withdrawal>> {
        let (sql, w) = select_withdrawals(f);
        let rows = w.bind(sqlx::query_as::<DB, WithdrawalRow>(&sql)).fetch_all(&self.pool).await?;
        rows.into_iter().map(WithdrawalRow::into_withdrawal).collect()
    }

    async fn approval(&self, id: &ApprovalId) -> StoreResult<Option<Approval>> {
        let row: Option<ApprovalRow> =
            sqlx::query_as(&format!("SELECT {APPROVAL_COLUMNS} FROM pending_approvals WHERE id = $1"))
                .bind(id.as_str())
                .fetch_optional(&self.pool)
                .await?;
        row.map(ApprovalRow::into_approval).transpose()
    }

    async fn approvals(&self, f: &ApprovalFilter) -> StoreResult<Vec<Approval>> {
        let mut w = Where::default();
        w.any("wallet_id", f.wallets.as_ref().map(|ws| ws.iter().map(|w| w.as_str().to_string()).collect()));
        w.eq("enterprise", f.enterprise.as_ref().map(|e| e.as_str().to_string()));
        w.eq("state", f.state.map(|s| s.as_str().to_string()));
        w.eq("approval_type", f.approval_type.map(str::to_string));
        if f.enterprise_scope {
            w.raw("wallet_id IS NULL");
        }
        if let Some(t) = f.expired_before {
            // A number the store wrote, not a client's text.
            w.raw(&format!("expires_at < {t}"));
        }
        let sql = format!(
            "SELECT {APPROVAL_COLUMNS} FROM pending_approvals WHERE {} ORDER BY created_at DESC, id LIMIT {}",
            w.sql(),
            f.limit
        );
        let rows = w.bind(sqlx::query_as::<DB, ApprovalRow>(&sql)).fetch_all(&self.pool).await?;
        rows.into_iter().map(ApprovalRow::into_approval).collect()
    }

    async fn create_approval(
        &self,
        a: &Approval,
        audit: &[AuditEntry],
        events: &[&EventWrite],
    ) -> StoreResult<Vec<Recorded>> {
        let mut tx = self.begin_write().await?;
        crate::store::custody_create::insert_approval::<DB>(&mut tx, a).await?;
        crate::store::audit::append_tx::<DB>(&mut tx, audit).await?;
        let recorded = crate::store::group_commit::events_tx::<DB>(&mut tx, events).await?;
        tx.commit().await?;
        Ok(recorded)
    }

    async fn resolve_approval(
        &self,
        a: &Approval,
        resolved_before: usize,
        next: Option<(TxRequestState, i64)>,
        record: Option<RecordSwap<'_>>,
        now: i64,
        audit: &[AuditEntry],
        events: &[&EventWrite],
    ) -> StoreResult<Option<Vec<Recorded>>> {
        let mut tx = self.begin_write().await?;
        let current: Option<ApprovalRow> = sqlx::query_as(&format!(
            "SELECT {APPROVAL_COLUMNS} FROM pending_approvals WHERE id = $1 AND state = 'pending'"
        ))
        .bind(a.id.as_str())
        .fetch_optional(&mut *tx)
        .await?;
        let Some(current) = current else { return Ok(None) };
        let read = current.resolvers_text().to_string();
        if current.into_approval()?.resolvers.len() != resolved_before {
            return Ok(None);
        }
        // Guarded by the answers read, not only the state: under PostgreSQL's read committed two
        // answers at once both read no answer, and the second's update, run after the first
        // commits, would otherwise overwrite the first's answer with its own.
        let done = sqlx::query(
            "UPDATE pending_approvals SET state = $2, resolvers = $3 WHERE id = $1 AND state = 'pending' \
             AND resolvers = $4",
        )
        .bind(a.id.as_str())
        .bind(a.state.as_str())
        .bind(to_json(&a.resolvers)?)
        .bind(read)
        .execute(&mut *tx)
        .await?;
        if DB::rows_affected(&done) != 1 {
            return Ok(None);
        }
        let swapped = match record {
            None => 1,
            Some(RecordSwap::Wallet { wallet, before, after }) => {
                let done = sqlx::query(
                    "UPDATE wallets SET record = $3, updated_at = $4 WHERE id = $1 AND record = $2",
                )
                .bind(wallet.as_str())
                .bind(before)
                .bind(after)
                .bind(self.clock.now_ms())
                .execute(&mut *tx)
                .await?;
                DB::rows_affected(&done)
            }
            Some(RecordSwap::EnterpriseRules { enterprise, coin, before, after }) => {
                crate::store::enterprises::swap_rules_tx::<DB>(&mut tx, enterprise, coin, before, after, now)
                    .await?
            }
        };
        if swapped != 1 {
            return Ok(None);
        }
        if let (Some((next, version)), Some(id)) = (next, a.tx_request_id()) {
            let done = sqlx::query(
                "UPDATE withdrawals SET state = $2, version = version + 1, updated_at = $3 \
                 WHERE id = $1 AND version = $4",
            )
            .bind(id.as_str())
            .bind(next.as_str())
            .bind(now)
            .bind(version)
            .execute(&mut *tx)
            .await?;
            if DB::rows_affected(&done) != 1 {
                return Ok(None);
            }
        }
        crate::store::audit::append_tx::<DB>(&mut tx, audit).await?;
        let recorded = crate::store::group_commit::events_tx::<DB>(&mut tx, events).await?;
        tx.commit().await?;
        Ok(Some(recorded))
    }

    async fn reserve_nonces(
        &self,
        chain: &str,
        wanted: &[(&TxRequestId, Address, u64)],
    ) -> StoreResult<Vec<u64>> {
        let mut tx = self.begin_write().await?;
        let out = crate::store::custody_attempts::reserve_nonces_tx::<DB>(&mut tx, chain, wanted).await?;
        tx.commit().await?;
        Ok(out)
    }

    async fn store_signed(
        &self,
        items: &[Batched<'_, Signed<'_>>],
        now: i64,
    ) -> StoreResult<Vec<Option<Vec<Recorded>>>> {
        let mut tx = self.begin_write().await?;
        let mut made = Vec::with_capacity(items.len());
        for item in items {
            let Signed { id, version, attempt, fee_reserve } = &item.change;
            let done = sqlx::query(
                "UPDATE withdrawals SET state = $6, tx_hash = $2, signed_tx = $3, fee_reserve = $4, \
                 version = version + 1, updated_at = $5 WHERE id = $1 AND version = $7 AND nonce IS NOT NULL",
            )
            .bind(id.as_str())
            .bind(attempt.hash.to_string())
            .bind(hex::encode(&attempt.signed_tx))
            .bind(fee_reserve.to_string())
            .bind(now)
            .bind(TxRequestState::Signed.as_str())
            .bind(version)
            .execute(&mut *tx)
            .await?;
            made.push(DB::rows_affected(&done) == 1);
        }
        let attempts: Vec<(&TxRequestId, &crate::model::custody::Attempt)> = items
            .iter()
            .zip(&made)
            .filter(|(_, m)| **m)
            .map(|(item, _)| (item.change.id, item.change.attempt))
            .collect();
        crate::store::custody_attempts::insert_attempts::<DB>(&mut tx, &attempts).await?;
        let out = record_made::<DB, _>(&mut tx, items, &made).await?;
        tx.commit().await?;
        Ok(out)
    }

    async fn move_withdrawals(
        &self,
        items: &[Batched<'_, Move<'_>>],
        now: i64,
    ) -> StoreResult<Vec<Option<Vec<Recorded>>>> {
        let mut tx = self.begin_write().await?;
        let mut made = Vec::with_capacity(items.len());
        for item in items {
            let Move { id, version, to, error } = item.change;
            let done = sqlx::query(
                "UPDATE withdrawals SET state = $2, error = COALESCE($3, error), version = version + 1, \
                 updated_at = $4 WHERE id = $1 AND version = $5",
            )
            .bind(id.as_str())
            .bind(to.as_str())
            .bind(error)
            .bind(now)
            .bind(version)
            .execute(&mut *tx)
            .await?;
            made.push(DB::rows_affected(&done) == 1);
        }
        let out = record_made::<DB, _>(&mut tx, items, &made).await?;
        tx.commit().await?;
        Ok(out)
    }

    async fn set_mined(&self, id: &TxRequestId, block: Option<u64>) -> StoreResult<()> {
        let mut tx = self.begin_write().await?;
        sqlx::query("UPDATE withdrawals SET mined_block = $2 WHERE id = $1")
            .bind(id.as_str())
            .bind(block.and_then(|b| i64::try_from(b).ok()))
            .execute(&mut *tx)
            .await?;
        tx.commit().await?;
        Ok(())
    }
}

/// The audit entries and events of a batch's items whose change was made (`made`, in the
/// items' order), written together inside `tx`: one append to the audit chain and one events
/// write for the batch rather than one of each per item. Per item its events' outcomes, `None`
/// where its change was not made.
#[sql_bounds]
async fn record_made<DB, T>(
    tx: &mut DB::Connection,
    items: &[Batched<'_, T>],
    made: &[bool],
) -> StoreResult<Vec<Option<Vec<Recorded>>>>
where
    T: Sync,
    for<'r> (String,): FromRow<'r, DB::Row>,
    for<'r> (String, String): FromRow<'r, DB::Row>,
{
    let done = || items.iter().zip(made).filter(|(_, m)| **m).map(|(item, _)| item);
    let audit: Vec<&AuditEntry> = done().flat_map(|item| item.audit.iter()).collect();
    crate::store::audit::append_refs_tx::<DB>(&mut *tx, &audit).await?;
    let events: Vec<&crate::store::EventWrite> =
        done().flat_map(|item| item.events.iter().copied()).collect();
    let mut outcomes = crate::store::group_commit::events_tx::<DB>(&mut *tx, &events).await?.into_iter();
    Ok(items
        .iter()
        .zip(made)
        .map(|(item, m)| m.then(|| outcomes.by_ref().take(item.events.len()).collect()))
        .collect())
}
