//! The events of withdrawals (docs/withdrawals.md#events): `pendingapproval`, `txRequest`,
//! `txRequestTransaction` and `transactionExpire`, each built from the change it tells and
//! stored in the transaction of that change (the fan-out prepares them before, and hands them
//! to the engine after the commit), so a crash keeps both or neither. Their ids come from the
//! withdrawal's identity and version, so a repeat of a change cannot notify twice.

use crate::{
    error::Result,
    model::custody::{Approval, TxRequestState, Withdrawal},
    store::{EventWrite, Recorded},
    webhooks::{
        event::{Event, PendingApprovalEvent, TxRequestEvent},
        events::{prepare_routed, Prepared},
        Webhooks,
    },
};

/// Events of one change, fanned out and waiting to be stored with it.
#[derive(Default)]
pub struct Announcement {
    prepared: Vec<Prepared>,
}

impl Announcement {
    /// Fans `events` out to the wallet's webhooks of their types; a `txRequest` or
    /// `txRequestTransaction` webhook with states listed gets only those states.
    pub async fn prepare(svc: &Webhooks, events: &[Event]) -> Result<Self> {
        let mut prepared = Vec::with_capacity(events.len());
        for event in events {
            let state = match event {
                Event::TxRequest(e) | Event::TxRequestTransaction(e) => Some(e.new_state),
                _ => None,
            };
            let is_tx = matches!(event, Event::TxRequestTransaction(_));
            let keep = |w: &crate::model::webhook::Webhook| {
                let listed = if is_tx { &w.tx_request_transaction_states } else { &w.tx_request_states };
                state.is_none_or(|s| listed.is_empty() || listed.iter().any(|l| l == s))
            };
            if let Some(p) = prepare_routed(svc, event, keep).await? {
                prepared.push(p);
            }
        }
        Ok(Announcement { prepared })
    }

    /// The rows to store in the change's transaction.
    pub fn writes(&self) -> Vec<&EventWrite> {
        self.prepared.iter().map(|p| &p.event).collect()
    }

    /// After the commit: the engine takes what was written.
    pub async fn committed(self, svc: &Webhooks, recorded: &[Recorded]) {
        for (p, r) in self.prepared.into_iter().zip(recorded) {
            p.handoff.committed(svc, r).await;
        }
    }
}

/// `pendingapproval` for `a` as it is now.
pub fn approval_event(a: &Approval) -> Event {
    Event::PendingApproval(PendingApprovalEvent {
        coin: a.coin.clone(),
        wallet_id: a.wallet_id.clone(),
        enterprise_id: a.enterprise.clone(),
        pending_approval_id: a.id.as_str().to_string(),
        pending_approval_type: a.kind(),
        state: a.state.as_str(),
        tx_request_id: a.tx_request_id().map(|id| id.as_str().to_string()),
        answers: a.resolvers.len(),
    })
}

/// The state of a txRequest's one transaction, in BitGo's transaction states
/// (`webhooks::TX_REQUEST_TRANSACTION_STATES`).
pub fn transaction_state(s: TxRequestState) -> &'static str {
    match s {
        TxRequestState::PendingApproval => "initialized",
        TxRequestState::PendingDelivery => "pendingSignature",
        TxRequestState::Signed => "signed",
        TxRequestState::Delivered => "delivered",
        TxRequestState::Rejected | TxRequestState::Canceled => "rejected",
        TxRequestState::Failed => "failed",
    }
}

fn change(w: &Withdrawal, kind: &'static str, old: &'static str, new: &'static str) -> TxRequestEvent {
    TxRequestEvent {
        coin: w.coin.clone(),
        wallet_id: w.wallet_id.clone(),
        enterprise_id: w.enterprise.clone(),
        tx_request_id: w.id.as_str().to_string(),
        tx_request_version: w.version,
        webhook_type: kind,
        sequence_ids: vec![w.idempotency_key.clone()],
        old_state: old,
        new_state: new,
        tx_hash: w.tx_hash.map(|h| h.to_string()),
    }
}

/// `txRequest` for `w` (as it is after the change, its version bumped) moving from `old`,
/// and `txRequestTransaction` when its transaction's state moved too. A new withdrawal is
/// `old = None`: from `initialized`.
pub fn tx_request_events(w: &Withdrawal, old: Option<TxRequestState>) -> Vec<Event> {
    let old_request = old.map_or("initialized", TxRequestState::as_str);
    let mut events = vec![Event::TxRequest(change(w, "txRequest", old_request, w.state.as_str()))];
    let (from, to) = (old.map_or("initialized", transaction_state), transaction_state(w.state));
    if from != to {
        events.push(Event::TxRequestTransaction(change(w, "txRequestTransaction", from, to)));
    }
    events
}

/// `transactionExpire` for `w`, whose approval expired.
pub fn expire_event(w: &Withdrawal, from: TxRequestState) -> Event {
    Event::TransactionExpire(change(w, "transactionExpire", from.as_str(), w.state.as_str()))
}
