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
        audit::{AuditEntry, AuditType},
        custody::{TxRequestState, Withdrawal},
    },
    store::{Batched, Move},
};

/// One state change the signer makes: `w` from `from` to `to` (with `error` for people), with
/// `entry`; told as `txRequest`/`txRequestTransaction`, and `transactionExpire` too when `expired`.
pub(super) struct Change<'a> {
    pub w: Withdrawal,
    pub from: TxRequestState,
    pub to: TxRequestState,
    pub error: Option<&'a str>,
    pub entry: AuditEntry,
    pub expired: bool,
}

/// Writes `changes` in one store transaction, each only from its `from`, with their events:
/// how many were written.
pub(super) async fn move_all(svc: &Custody, changes: Vec<Change<'_>>) -> Result<usize, RoundError> {
    if changes.is_empty() {
        return Ok(0);
    }
    let now = svc.store.clock().now();
    let mut prepared = Vec::with_capacity(changes.len());
    for c in changes {
        let moved = Withdrawal { state: c.to, version: c.w.version + 1, updated_at: now, ..c.w };
        let mut told = events::tx_request_events(&moved, Some(c.from));
        if c.expired {
            told.push(events::expire_event(&moved, c.from));
        }
        let announce = Announcement::prepare(&svc.webhooks, &told).await?;
        prepared.push((moved, [c.from], c.error, c.entry, announce));
    }
    let items: Vec<Batched<'_, Move<'_>>> = prepared
        .iter()
        .map(|(moved, from, error, entry, announce)| Batched {
            change: Move { id: &moved.id, from, to: moved.state, error: *error },
            audit: vec![entry.clone()],
            events: announce.writes(),
        })
        .collect();
    let written = svc.store.move_withdrawals(&items, now).await?;
    drop(items);
    let mut count = 0;
    for ((.., announce), w) in prepared.into_iter().zip(written) {
        if let Some(recorded) = w {
            announce.committed(&svc.webhooks, &recorded).await;
            count += 1;
        }
    }
    Ok(count)
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
    let to = TxRequestState::Failed;
    let change = Change { w: w.clone(), from, to, error: Some(why), entry, expired: false };
    move_all(svc, vec![change]).await.map(drop)
}

/// Cancels `w`, approved but not signed within `withdrawals.delivery_deadline`: `canceled`,
/// told as `txRequest` and `transactionExpire`, audited as `withdrawal.expired`.
pub(super) async fn expire_unsigned(svc: &Custody, w: &Withdrawal) -> Result<(), RoundError> {
    let why = "not signed within withdrawals.delivery_deadline";
    let entry = crate::audit::entry(AuditType::WithdrawalExpired)
        .wallet(Some(&w.wallet_id))
        .data(json!({ "txRequestId": w.id.as_str(), "reason": why }));
    let (from, to) = (TxRequestState::PendingDelivery, TxRequestState::Canceled);
    let change = Change { w: w.clone(), from, to, error: Some(why), entry, expired: true };
    move_all(svc, vec![change]).await.map(drop)
}
