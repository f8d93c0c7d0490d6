//! A withdrawal's state changes the signer makes: each with its audit entry and its events,
//! written only from the state it was read in.

use serde_json::json;

use super::{
    events::{self, Announcement},
    transaction::RoundError,
    Custody,
};
use crate::{
    audit::EntryExt,
    model::{
        audit::AuditType,
        custody::{TxRequestState, Withdrawal},
    },
    store::{Batched, Move},
};

/// Moves `w` from `from` to `to` (with `error`), with `entry` and the change's events.
pub(super) async fn advance(
    svc: &Custody,
    w: &Withdrawal,
    from: TxRequestState,
    to: TxRequestState,
    error: Option<&str>,
    entry: crate::model::audit::AuditEntry,
) -> Result<(), RoundError> {
    move_to(svc, w, (from, to), error, entry, false).await
}

/// [`advance`], and `transactionExpire` too when `expired`.
async fn move_to(
    svc: &Custody,
    w: &Withdrawal,
    (from, to): (TxRequestState, TxRequestState),
    error: Option<&str>,
    entry: crate::model::audit::AuditEntry,
    expired: bool,
) -> Result<(), RoundError> {
    let now = svc.store.clock().now();
    let moved = Withdrawal { state: to, version: w.version + 1, updated_at: now, ..w.clone() };
    let mut told = events::tx_request_events(&moved, Some(from));
    if expired {
        told.push(events::expire_event(&moved, from));
    }
    let announce = Announcement::prepare(&svc.webhooks, &told).await?;
    let from = [from];
    let item = Batched {
        change: Move { id: &w.id, from: &from, to, error },
        audit: vec![entry],
        events: announce.writes(),
    };
    let written = svc.store.move_withdrawals(std::slice::from_ref(&item), now).await?.pop().flatten();
    drop(item);
    if let Some(recorded) = written {
        announce.committed(&svc.webhooks, &recorded).await;
    }
    Ok(())
}

/// Moves `w` from `from` to `failed` with `why`, audited as `withdrawal.failed`.
pub(super) async fn fail(
    svc: &Custody,
    w: &Withdrawal,
    from: TxRequestState,
    why: &str,
) -> Result<(), RoundError> {
    let entry = crate::audit::entry(AuditType::WithdrawalFailed)
        .wallet(Some(&w.wallet_id))
        .data(json!({ "txRequestId": w.id.as_str(), "reason": why }));
    advance(svc, w, from, TxRequestState::Failed, Some(why), entry).await
}

/// Cancels `w`, approved but not signed within `withdrawals.delivery_deadline`: `canceled`,
/// told as `txRequest` and `transactionExpire`, audited as `withdrawal.expired`.
pub(super) async fn expire_unsigned(svc: &Custody, w: &Withdrawal) -> Result<(), RoundError> {
    let why = "not signed within withdrawals.delivery_deadline";
    let entry = crate::audit::entry(AuditType::WithdrawalExpired)
        .wallet(Some(&w.wallet_id))
        .data(json!({ "txRequestId": w.id.as_str(), "reason": why }));
    let states = (TxRequestState::PendingDelivery, TxRequestState::Canceled);
    move_to(svc, w, states, Some(why), entry, true).await
}
