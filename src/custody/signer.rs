//! The signer (docs/withdrawals.md#signing-and-broadcast): one task per configured chain, on
//! every process that runs the engine. Each round it expires approvals past their time, signs
//! withdrawals whose last approval came, sends what is signed, and follows what is sent.
//!
//! Money moves once: the nonce is stored on the withdrawal before signing, the signed bytes
//! before sending, and a withdrawal is signed only from `pendingDelivery` (a conditional
//! write, so two processes signing at once keep one signature). After a crash the same bytes
//! are sent again; a node that knows them already answers "already known", which counts as sent.

use std::{sync::Arc, time::Duration};

use futures_util::{stream, StreamExt};
use serde_json::json;
use tokio::sync::watch;

pub use super::transaction::RoundError;
use super::{
    batch::alone,
    events::{self, Announcement},
    memo::Memo,
    node::SendNode,
    Custody,
};
use crate::{
    audit::EntryExt,
    chain::node::EthNode,
    model::{
        audit::AuditType,
        custody::{ApprovalState, TxRequestState, Withdrawal},
    },
    store::{ApprovalFilter, WithdrawalFilter},
    types::Coin,
};

pub use super::transaction::BATCH;

/// How often the signer compares its nonces with the node's (`replace::reconcile`), seconds of
/// the service's clock.
pub const RECONCILE_EVERY: i64 = 30;

/// Starts a signer for each configured chain; each stops when `stop` turns true.
pub fn spawn_all(svc: &Custody, stop: watch::Receiver<bool>) -> Vec<tokio::task::JoinHandle<()>> {
    let mut handles = Vec::new();
    for (coin, chain) in &svc.config.chains {
        let Ok(coin) = coin.parse::<Coin>() else { continue };
        let timeout = Duration::from_secs(chain.rpc_timeout);
        let node = match EthNode::new(&chain.rpc_url, timeout, 1 << 20) {
            Ok(n) => Arc::new(n) as Arc<dyn SendNode>,
            Err(e) => {
                tracing::error!(coin = %coin, error = %e, "the signer cannot reach this chain's node");
                continue;
            }
        };
        let lease_ms = i64::try_from(chain.lease_ms).unwrap_or(15_000);
        handles.push(tokio::spawn(run(svc.clone(), coin, chain.chain_id, lease_ms, node, stop.clone())));
    }
    handles
}

/// The signer's lease name for `coin` (a row beside the chain watcher's in `chain_state`).
pub fn lease_name(coin: &Coin) -> String {
    format!("signer:{coin}")
}

async fn run(
    svc: Custody,
    coin: Coin,
    chain_id: u64,
    lease_ms: i64,
    node: Arc<dyn SendNode>,
    mut stop: watch::Receiver<bool>,
) {
    let pause = Duration::from_millis(svc.config.withdrawals.poll_interval_ms);
    let mut reconciled: Option<i64> = None;
    let holder = crate::ids::new_id();
    let lease = lease_name(&coin);
    while !*stop.borrow() {
        // One process signs for a chain (so for each of its addresses) at a time: the chain's
        // `lease_ms`, renewed each round. The conditional writes keep money moving once even
        // if two ever overlap (a round longer than the lease).
        let now_ms = svc.store.clock().now_ms();
        // Without the lease confirmed (held elsewhere, or the store away) nothing is signed.
        let held = match svc
            .store
            .take_chain_lease(&lease, &holder, now_ms, now_ms.saturating_add(lease_ms))
            .await
        {
            Ok(held) => held,
            Err(e) => {
                tracing::warn!(coin = %coin, error = %e, "the signer could not renew its lease; trying again");
                false
            }
        };
        if !held {
            svc.metrics.custody.rounds_held_back.inc();
            tokio::select! {
                _ = tokio::time::sleep(pause) => {}
                _ = stop.changed() => {}
            }
            continue;
        }
        let busy = match round(&svc, &coin, chain_id, node.as_ref()).await {
            Ok(busy) => busy,
            Err(e) => {
                tracing::warn!(coin = %coin, error = %e, "signer round failed; trying again");
                false
            }
        };
        // The gap check asks the node about every signing address: once a RECONCILE_EVERY.
        let now = svc.store.clock().now();
        if reconciled.is_none_or(|at| now.saturating_sub(at) >= RECONCILE_EVERY) {
            match super::replace::reconcile(&svc, &coin, node.as_ref()).await {
                Ok(()) => reconciled = Some(now),
                Err(e) => {
                    tracing::warn!(coin = %coin, error = %e, "the nonce gap check failed; trying again")
                }
            }
        }
        // A round that signed or sent something is followed at once: a backlog drains without
        // a pause per batch.
        if !busy {
            tokio::select! {
                _ = tokio::time::sleep(pause) => {}
                _ = stop.changed() => {}
            }
        }
    }
}

/// One pass over the chain's withdrawals; public so tests can drive it. `Ok(true)` when it
/// signed or sent something (the next round then starts at once).
pub async fn round(
    svc: &Custody,
    coin: &Coin,
    chain_id: u64,
    node: &dyn SendNode,
) -> Result<bool, RoundError> {
    expire(svc, coin).await?;
    let of = |state: TxRequestState, unmined: bool| WithdrawalFilter {
        coin: Some(coin.clone()),
        states: Some(vec![state]),
        unmined,
        limit: BATCH,
        ..Default::default()
    };
    let deadline = i64::try_from(svc.config.withdrawals.delivery_deadline).unwrap_or(i64::MAX);
    let now = svc.store.clock().now();
    let mut to_sign = Vec::new();
    for w in svc.store.withdrawals(&of(TxRequestState::PendingDelivery, false)).await? {
        // Approved but never signed by its deadline (one with a nonce is signed next, so no gap).
        if w.nonce.is_none() && now.saturating_sub(w.updated_at) >= deadline {
            alone(coin, &w.id, super::progress::expire_unsigned(svc, &w).await);
        } else {
            to_sign.push(w);
        }
    }
    let memo = Memo::read(svc, node, &to_sign).await?;
    let limit = usize::try_from(svc.config.withdrawals.signer_concurrency).unwrap_or(1);
    // Signed ones (this round's and any a crash left) are sent; one withdrawal's failure (a
    // node error about it) does not hold the others back.
    let signed = super::batch::sign_all(svc, (coin, chain_id), node, &memo, to_sign).await?;
    let to_send = svc.store.withdrawals(&of(TxRequestState::Signed, false)).await?;
    let sent = super::batch::send_all(svc, coin, node, to_send).await?;
    let busy = signed > 0 || sent > 0;
    stream::iter(svc.store.withdrawals(&of(TxRequestState::Delivered, true)).await?)
        .for_each_concurrent(limit, |w| async move {
            alone(coin, &w.id, super::replace::follow(svc, chain_id, node, &w).await);
        })
        .await;
    super::replace::recheck_mined(svc, coin, node).await?;
    svc.metrics.custody.rounds.inc();
    Ok(busy)
}

/// Approvals past `expires_at` are closed and their withdrawals canceled.
async fn expire(svc: &Custody, coin: &Coin) -> Result<(), RoundError> {
    let now = svc.store.clock().now();
    let filter = ApprovalFilter {
        state: Some(ApprovalState::Pending),
        expired_before: Some(now),
        limit: BATCH,
        ..Default::default()
    };
    for a in svc.store.approvals(&filter).await? {
        if &a.coin != coin {
            continue;
        }
        let mut closed = a.clone();
        closed.state = ApprovalState::Rejected;
        let entry = crate::audit::entry(AuditType::WithdrawalExpired)
            .wallet(Some(&a.wallet_id))
            .data(json!({ "pendingApprovalId": a.id.as_str(), "txRequestId": a.tx_request_id.as_str() }));
        let mut events = vec![events::approval_event(&closed)];
        if let Some(w) = svc.store.withdrawal(&a.tx_request_id).await? {
            let w =
                Withdrawal { state: TxRequestState::Canceled, version: w.version + 1, updated_at: now, ..w };
            events.extend(events::tx_request_events(&w, Some(TxRequestState::PendingApproval)));
            events.push(events::expire_event(&w, TxRequestState::PendingApproval));
        }
        let announce = Announcement::prepare(&svc.webhooks, &events).await?;
        let next = Some(TxRequestState::Canceled);
        let written = svc
            .store
            .resolve_approval(&closed, a.resolvers.len(), next, now, &[entry], &announce.writes())
            .await?;
        if let Some(recorded) = written {
            announce.committed(&svc.webhooks, &recorded).await;
        }
    }
    Ok(())
}
