//! Reading withdrawals (docs/withdrawals.md): BitGo's txRequest list, and one withdrawal's whole
//! story for the console's timeline: its approval's answers, every transaction signed for it
//! (replacements too), and the transfers the chain watcher recorded for them.

use crate::{
    error::{Error, ErrorName, Result},
    identity::bearer::Principal,
    model::{
        chain::Transfer,
        custody::{Approval, Attempt, Withdrawal},
    },
    store::{TransferFilter, WithdrawalFilter},
    types::{TxRequestId, WalletId},
};

use super::Custody;

/// Most txRequests in one list.
pub const MAX_PAGE: u32 = 500;
/// Most ids one list may name (`txRequestIds`).
pub const MAX_IDS: usize = 100;
/// Transactions of one withdrawal whose transfers a timeline looks up (the newest).
pub const MAX_TIMELINE_ATTEMPTS: usize = 20;

/// A withdrawal with every transaction signed for it, oldest first.
#[derive(Debug, Clone)]
pub struct WithdrawalRecord {
    pub withdrawal: Withdrawal,
    pub attempts: Vec<Attempt>,
    /// The transaction that filled its nonce, for a failed one that had taken a nonce
    /// (docs/withdrawals.md#nonce-gaps).
    pub fill: Option<crate::store::NonceFill>,
}

impl WithdrawalRecord {
    /// `withdrawal` with its transactions and the fill of its nonce, read from `store` (the CLI
    /// and the routes alike).
    pub async fn read(store: &crate::store::DynStore, withdrawal: Withdrawal) -> Result<Self> {
        let attempts = store.withdrawal_attempts(&withdrawal.id).await?;
        let fill = match (withdrawal.state, withdrawal.nonce) {
            (crate::model::custody::TxRequestState::Failed, Some(_)) => {
                store.nonce_fill_of(&withdrawal.id).await?
            }
            _ => None,
        };
        Ok(WithdrawalRecord { withdrawal, attempts, fill })
    }
}

/// The withdrawals of wallet `wallet_id` the caller may see, newest first: those named by `ids`
/// (at most [`MAX_IDS`]) or all, at most `limit` (1 to [`MAX_PAGE`]). Errors: `WalletNotFound`,
/// `InvalidField` (`limit`, `txRequestIds`).
pub async fn list(
    svc: &Custody,
    auth: &Principal,
    wallet_id: &WalletId,
    ids: Option<Vec<TxRequestId>>,
    limit: u32,
) -> Result<Vec<WithdrawalRecord>> {
    crate::wallets::wallet_row(&svc.wallets, auth, wallet_id).await?;
    if !(1..=MAX_PAGE).contains(&limit) {
        return Err(Error::invalid_field("limit", format!("from 1 to {MAX_PAGE}")));
    }
    if ids.as_ref().is_some_and(|i| i.len() > MAX_IDS) {
        return Err(Error::invalid_field("txRequestIds", format!("at most {MAX_IDS}")));
    }
    let filter = WithdrawalFilter {
        wallet: Some(wallet_id.clone()),
        ids,
        limit,
        newest_first: true,
        ..Default::default()
    };
    let mut out = Vec::new();
    for withdrawal in svc.store.withdrawals(&filter).await? {
        out.push(WithdrawalRecord::read(&svc.store, withdrawal).await?);
    }
    Ok(out)
}

/// One withdrawal's story.
#[derive(Debug, Clone)]
pub struct Timeline {
    pub record: WithdrawalRecord,
    pub approval: Option<Approval>,
    /// The chain watcher's transfers of the wallet for its transactions, by attempt order.
    pub transfers: Vec<Transfer>,
}

/// Withdrawal `id` of a wallet the caller may see, with its approval and transfers. Errors:
/// `TxRequestNotFound` (also for a wallet the caller may not see).
pub async fn timeline(svc: &Custody, auth: &Principal, id: &TxRequestId) -> Result<Timeline> {
    let not_found = || Error::not_found(ErrorName::TxRequestNotFound);
    let w = svc.store.withdrawal(id).await?.ok_or_else(not_found)?;
    crate::wallets::wallet_row(&svc.wallets, auth, &w.wallet_id).await.map_err(|_| not_found())?;
    let record = WithdrawalRecord::read(&svc.store, w).await?;
    let (w, attempts) = (&record.withdrawal, &record.attempts);
    let approval = svc.store.approval(&w.approval_id).await?;
    let coin = w.token.as_ref().map_or(&w.coin, |t| &t.coin);
    let mut transfers = Vec::new();
    let newest = attempts.iter().rev().take(MAX_TIMELINE_ATTEMPTS);
    for a in newest.collect::<Vec<_>>().into_iter().rev() {
        let filter = TransferFilter { txid: Some(a.hash.to_string()), ..Default::default() };
        transfers.extend(svc.store.wallet_transfers(&w.wallet_id, coin.as_str(), &filter, None, 2).await?);
    }
    Ok(Timeline { record, approval, transfers })
}

pub use crate::store::MAX_UNLOCK_COUNTED;

/// What session `t` started under its current unlock (§2.4 `unlock.txCount`, `txValue`): its
/// withdrawals since the unlock's `time`, in any state, at most [`MAX_UNLOCK_COUNTED`], and the
/// sum of their amounts in base units (of whichever coins they sent). `None` when `t` is not
/// unlocked at `now` (Unix seconds).
pub async fn unlock_totals(
    svc: &Custody,
    t: &crate::model::token::TokenRecord,
    now: i64,
) -> Result<Option<(u64, alloy_primitives::U256)>> {
    let Some(unlock) = t.unlock.filter(|u| u.expires > now) else { return Ok(None) };
    let filter = WithdrawalFilter {
        token: Some(t.id.clone()),
        created_from: Some(unlock.time),
        limit: MAX_UNLOCK_COUNTED,
        ..Default::default()
    };
    let found = svc.store.withdrawals(&filter).await?;
    let value = found.iter().fold(alloy_primitives::U256::ZERO, |a, w| a.saturating_add(w.total()));
    Ok(Some((u64::try_from(found.len()).unwrap_or(u64::MAX), value)))
}
