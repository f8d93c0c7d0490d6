//! Storing a new withdrawal under its wallet's lock, and the velocity sums a policy reads
//! (docs/policy.md#velocity). The lock makes the reading and the writing one step: two
//! withdrawals of a wallet, from any processes, are judged one after the other, so together
//! they cannot slip under an in-flight cap, a balance or a velocity limit.

use alloy_primitives::U256;
use custodian_macros::sql_bounds;
use sqlx::FromRow;

use crate::model::{
    audit::AuditEntry,
    custody::{Approval, TxRequestState, Withdrawal},
};
use crate::store::{
    custody_rows::{
        recipients_json, select_withdrawals, subject_columns, Created, Refusal, WithdrawalFilter,
        WithdrawalRow, APPROVAL_COLUMNS, WITHDRAWAL_COLUMNS,
    },
    sql::{to_json, unique_violation, Dialect},
    sql_store::SqlStore,
    velocity::{self, words, LostRow, PlaceRow},
    EventWrite, StoreError, StoreResult,
};
use crate::types::{Coin, EnterpriseId, TokenId, TxRequestId, WalletId};

/// Withdrawals one unlock's `txValue` counts at most (as `custody::history` shows it).
pub const MAX_UNLOCK_COUNTED: u32 = 10_000;

/// Withdrawals of one wallet mined but not yet confirmed by the chain watcher that admission
/// reads beside the in-flight cap: a wallet's sends within its chain's confirmation depth.
pub const MAX_UNSETTLED_MINED: u32 = 10_000;

/// What a new withdrawal's judge reads under the wallet's lock.
#[derive(Debug)]
pub struct Reservation<'a> {
    /// The wallet's withdrawals in these states that are not settled (their send not confirmed
    /// by the watcher), at most `in_flight_limit` unmined and [`MAX_UNSETTLED_MINED`] mined.
    pub in_flight: &'a [TxRequestState],
    pub in_flight_limit: u32,
    /// The velocity windows to sum, as [`crate::store::CustodyStore::velocity_sums`] does.
    pub windows: &'a [SumWindow],
    /// The start of the circuit breaker's window (Unix seconds): the cents the wallet sent
    /// since, as [`crate::store::PriceStore::usd_sent`] reads them; `None`: not read.
    pub usd_since: Option<i64>,
    /// An unlocked session with a `txValueLimit` and its unlock's `time` (Unix seconds): the
    /// token is locked too and what it started since is summed ([`Spending::unlock_sent`]).
    pub unlock_since: Option<(&'a TokenId, i64)>,
}

/// A velocity window: base units of `coin` withdrawn since `since` (Unix seconds).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SumWindow {
    pub coin: Coin,
    pub since: i64,
}

/// What the judge is handed: the withdrawals in flight, and each window's sum (in the order of
/// [`Reservation::windows`]).
#[derive(Debug)]
pub struct Spending {
    pub flying: Vec<Withdrawal>,
    pub sums: Vec<U256>,
    /// Cents sent since [`Reservation::usd_since`], when asked.
    pub usd_sent: Option<i64>,
    /// Base units the session of [`Reservation::unlock_since`] started since its unlock, any
    /// state, any coin (its `unlock.txValue`), when asked; `U256::MAX` past
    /// [`MAX_UNLOCK_COUNTED`] withdrawals (what is not counted cannot be let through).
    pub unlock_sent: Option<U256>,
    /// The wallet's `confirmedBalanceString` and, for a token withdrawal, its confirmed balance
    /// of the token, read under the lock after `flying` (so a watcher write between the two
    /// reads can only count a payment twice, never not at all).
    pub confirmed: Option<String>,
    pub token_confirmed: Option<String>,
}

/// Decides, under the wallet's lock, the approval a new withdrawal is stored with, or refuses it.
pub type Judge<'a> = &'a (dyn Fn(&Spending) -> Result<Approval, Refusal> + Send + Sync);

/// Each window's sum, with the ledger tops read on the way ([`crate::store::velocity::sums_and_tops`]),
/// on `conn` (inside the creating transaction, or alone).
#[sql_bounds]
pub(in crate::store) async fn velocity_sums<DB>(
    conn: &mut DB::Connection,
    wallet: &WalletId,
    windows: &[SumWindow],
    upto: Option<&TxRequestId>,
) -> StoreResult<(Vec<U256>, Vec<(String, Option<velocity::Place>)>)>
where
    for<'r> PlaceRow: FromRow<'r, DB::Row>,
    for<'r> LostRow: FromRow<'r, DB::Row>,
    for<'r> (String,): FromRow<'r, DB::Row>,
    for<'r> (i64, i64, String, String): FromRow<'r, DB::Row>,
    for<'r> (i64, i64, i64, String): FromRow<'r, DB::Row>,
{
    let windows: Vec<(&str, i64)> = windows.iter().map(|w| (w.coin.as_str(), w.since)).collect();
    velocity::sums_and_tops::<DB>(conn, wallet, &windows, upto).await
}

/// Inserts approval `a` inside `tx`.
#[sql_bounds]
pub(in crate::store) async fn insert_approval<DB>(tx: &mut DB::Connection, a: &Approval) -> StoreResult<()> {
    let (kind, tx_request, info) = subject_columns(a)?;
    sqlx::query(&format!(
        "INSERT INTO pending_approvals ({APPROVAL_COLUMNS}) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14)"
    ))
    .bind(a.id.as_str())
    .bind(a.wallet_id.as_ref().map(WalletId::as_str))
    .bind(a.coin.as_str())
    .bind(a.enterprise.as_ref().map(EnterpriseId::as_str))
    .bind(a.creator.as_str())
    .bind(a.state.as_str())
    .bind(i64::from(a.approvals_required))
    .bind(to_json(&a.resolvers)?)
    .bind(tx_request)
    .bind(a.created_at)
    .bind(a.expires_at)
    .bind(to_json(&a.policy)?)
    .bind(kind)
    .bind(info)
    .execute(&mut *tx)
    .await?;
    Ok(())
}

/// [`crate::store::CustodyStore::create_withdrawal`].
// Long: one transaction: the lock, the idempotency check, the judge, both inserts, the audit
// and the events.
#[sql_bounds]
pub(in crate::store) async fn create_withdrawal<DB>(
    store: &SqlStore<DB>,
    w: &Withdrawal,
    reserve: &Reservation<'_>,
    judge: Judge<'_>,
    audit: &[AuditEntry],
    events: &[&EventWrite],
) -> StoreResult<Created>
where
    for<'r> WithdrawalRow: FromRow<'r, DB::Row>,
    for<'r> PlaceRow: FromRow<'r, DB::Row>,
    for<'r> LostRow: FromRow<'r, DB::Row>,
    for<'r> (String,): FromRow<'r, DB::Row>,
    for<'r> (String, String): FromRow<'r, DB::Row>,
    for<'r> (i64, i64, String, String): FromRow<'r, DB::Row>,
    for<'r> (i64, i64, i64, String): FromRow<'r, DB::Row>,
    for<'r> (i64,): FromRow<'r, DB::Row>,
    for<'r> (Option<String>,): FromRow<'r, DB::Row>,
{
    let mut tx = store.begin_write().await?;
    let _: Option<(String,)> =
        sqlx::query_as(DB::LOCK_WALLET).bind(w.wallet_id.as_str()).fetch_optional(&mut *tx).await?;
    let existing: Option<WithdrawalRow> = sqlx::query_as(&format!(
        "SELECT {WITHDRAWAL_COLUMNS} FROM withdrawals WHERE wallet_id = $1 AND idempotency_key = $2"
    ))
    .bind(w.wallet_id.as_str())
    .bind(w.idempotency_key.as_str())
    .fetch_optional(&mut *tx)
    .await?;
    if let Some(row) = existing {
        return Ok(Created::Existing(Box::new(row.into_withdrawal()?)));
    }
    // Every withdrawal the confirmed balance does not hold yet: those not sent, and those sent
    // whose send the watcher has not confirmed (mined or not).
    let filter = WithdrawalFilter {
        wallet: Some(w.wallet_id.clone()),
        states: Some(reserve.in_flight.to_vec()),
        unsettled: true,
        limit: reserve.in_flight_limit.saturating_add(MAX_UNSETTLED_MINED),
        ..Default::default()
    };
    let (sql, params) = select_withdrawals(&filter);
    let rows = params.bind(sqlx::query_as::<DB, WithdrawalRow>(&sql)).fetch_all(&mut *tx).await?;
    let flying = rows.into_iter().map(WithdrawalRow::into_withdrawal).collect::<StoreResult<Vec<_>>>()?;
    let (sums, tops) = velocity_sums::<DB>(&mut tx, &w.wallet_id, reserve.windows, None).await?;
    let usd_sent = match reserve.usd_since {
        Some(since) => Some(crate::store::prices::usd_sent_on::<DB>(&mut tx, &w.wallet_id, since).await?),
        None => None,
    };
    let unlock_sent = match reserve.unlock_since {
        Some((token, since)) => {
            let _: Option<(String,)> =
                sqlx::query_as(DB::LOCK_TOKEN).bind(token.as_str()).fetch_optional(&mut *tx).await?;
            let filter = WithdrawalFilter {
                token: Some(token.clone()),
                created_from: Some(since),
                limit: MAX_UNLOCK_COUNTED,
                ..Default::default()
            };
            let (sql, params) = select_withdrawals(&filter);
            let rows = params.bind(sqlx::query_as::<DB, WithdrawalRow>(&sql)).fetch_all(&mut *tx).await?;
            let counted = rows.len();
            let mut sent = U256::ZERO;
            for row in rows {
                sent = sent.saturating_add(row.into_withdrawal()?.total());
            }
            Some(if counted >= usize::try_from(MAX_UNLOCK_COUNTED).unwrap_or(usize::MAX) {
                U256::MAX
            } else {
                sent
            })
        }
        None => None,
    };
    let (confirmed,): (Option<String>,) =
        sqlx::query_as("SELECT confirmed_balance FROM wallets WHERE id = $1")
            .bind(w.wallet_id.as_str())
            .fetch_optional(&mut *tx)
            .await?
            .unwrap_or((None,));
    let token_confirmed = match &w.token {
        Some(t) => {
            let row: Option<(Option<String>,)> = sqlx::query_as(
                "SELECT confirmed_balance FROM wallet_token_balances WHERE wallet_id = $1 AND coin = $2",
            )
            .bind(w.wallet_id.as_str())
            .bind(t.coin.as_str())
            .fetch_optional(&mut *tx)
            .await?;
            row.and_then(|(b,)| b)
        }
        None => None,
    };
    let a = match judge(&Spending { flying, sums, usd_sent, unlock_sent, confirmed, token_confirmed }) {
        Ok(a) => a,
        Err(refused) => return Ok(Created::Refused(refused)),
    };
    let [w0, w1, w2, w3, w4, w5, w6, w7] = words(w.total());
    let vcoin = w.token.as_ref().map_or(&w.coin, |t| &t.coin).as_str();
    // The sums read this ledger's top already when a window counts its coin.
    let place = match tops.into_iter().find(|(coin, _)| coin == vcoin) {
        Some((_, top)) => top,
        None => velocity::latest::<DB>(&mut tx, &w.wallet_id, vcoin).await?,
    };
    let place = place.unwrap_or_default();
    let place = place.next(w.total(), w.created_at);
    let inserted = sqlx::query(&format!(
        "INSERT INTO withdrawals ({WITHDRAWAL_COLUMNS}, amount_w0, amount_w1, amount_w2, amount_w3, \
         amount_w4, amount_w5, amount_w6, amount_w7, vcoin, vseq, vtime, cum_total) VALUES ($1, $2, $3, $4, \
         $5, $6, $7, $8, $9, $16, $17, $10, $11, $12, $13, NULL, NULL, NULL, $14, NULL, NULL, $15, $15, $18, \
         $31, $32, $19, $20, $21, $22, $23, $24, $25, $26, $27, $28, $29, $30)"
    ))
    .bind(w.id.as_str())
    .bind(w.wallet_id.as_str())
    .bind(w.coin.as_str())
    .bind(w.enterprise.as_ref().map(EnterpriseId::as_str))
    .bind(w.creator.as_str())
    .bind(w.idempotency_key.as_str())
    .bind(w.state.as_str())
    .bind(w.version)
    .bind(recipients_json(&w.recipients)?)
    .bind(w.comment.as_deref())
    .bind(w.key_id.as_str())
    .bind(w.from.to_checksum(None))
    .bind(w.approval_id.as_str())
    .bind(w.fee_reserve.to_string())
    .bind(w.created_at)
    .bind(w.token.as_ref().map(|t| t.coin.as_str().to_string()))
    .bind(w.token.as_ref().map(|t| t.contract.to_checksum(None)))
    .bind(w.token_id.as_ref().map(|t| t.as_str().to_string()))
    .bind(w0)
    .bind(w1)
    .bind(w2)
    .bind(w3)
    .bind(w4)
    .bind(w5)
    .bind(w6)
    .bind(w7)
    .bind(vcoin)
    .bind(place.vseq)
    .bind(place.vtime)
    .bind(place.cum.to_string())
    .bind(w.usd.as_ref().map(|u| u.cents))
    .bind(w.usd.as_ref().map(|u| u.rate.as_str()))
    .execute(&mut *tx)
    .await;
    if let Err(e) = inserted {
        // A concurrent request with the same key won (the lock makes this rare): answer its
        // withdrawal.
        let e = unique_violation(e, "withdrawal");
        if matches!(e, StoreError::Conflict(_)) {
            drop(tx);
            let row: Option<WithdrawalRow> = sqlx::query_as(&format!(
                "SELECT {WITHDRAWAL_COLUMNS} FROM withdrawals WHERE wallet_id = $1 AND idempotency_key = $2"
            ))
            .bind(w.wallet_id.as_str())
            .bind(w.idempotency_key.as_str())
            .fetch_optional(&store.pool)
            .await?;
            return row
                .map(WithdrawalRow::into_withdrawal)
                .transpose()?
                .map(|w| Created::Existing(Box::new(w)))
                .ok_or(e);
        }
        return Err(e);
    }
    if let Some(usd) = &w.usd {
        crate::store::prices::add_usd_sent::<DB>(&mut tx, &w.wallet_id, w.created_at, usd.cents).await?;
    }
    insert_approval::<DB>(&mut tx, &a).await?;
    crate::store::audit::append_tx::<DB>(&mut tx, audit).await?;
    let recorded = crate::store::group_commit::events_tx::<DB>(&mut tx, events).await?;
    tx.commit().await?;
    Ok(Created::New(recorded, Box::new(a)))
}
