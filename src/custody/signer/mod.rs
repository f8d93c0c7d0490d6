//! The signer (docs/withdrawals.md#signing-and-broadcast): one task per configured chain, on
//! every process that runs the engine. Each round it expires approvals past their time, signs
//! withdrawals whose last approval came, sends what is signed, and follows what is sent.
//!
//! Money moves once: the nonce is stored on the withdrawal before signing, the signed bytes
//! before sending, and a withdrawal is signed only from `pendingDelivery` (a conditional
//! write, so two processes signing at once keep one signature). After a crash the same bytes
//! are sent again; a node that knows them already answers "already known", which counts as sent.

pub(crate) mod batch;
pub mod gaps;
pub(crate) mod memo;
pub mod node;
pub(crate) mod progress;
pub mod replace;
pub mod transaction;

use std::{sync::Arc, time::Duration};

use futures_util::{stream, StreamExt};
use serde_json::json;
use tokio::sync::watch;

pub use crate::custody::transaction::RoundError;
use crate::custody::{
    batch::alone,
    events::{self, Announcement},
    memo::Memo,
    node::SendNode,
    withdrawal::machine::{self, Command, State},
    Custody,
};
use crate::{
    audit::EntryExt,
    chain::node::EthNode,
    model::{
        audit::AuditType,
        custody::{ApprovalState, ApprovalSubject, TxRequestState, Withdrawal},
    },
    store::{ApprovalFilter, WithdrawalFilter},
    types::Coin,
};

pub use crate::custody::transaction::BATCH;

/// Starts a signer for each configured chain; each stops when `stop` turns true.
pub fn spawn_all(svc: &Custody, stop: watch::Receiver<bool>) -> Vec<tokio::task::JoinHandle<()>> {
    let mut handles = Vec::new();
    for (coin, chain) in svc.config.chains.iter().filter(|(_, c)| !c.is_utxo()) {
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
    // Where the next gap check starts among the chain's signing addresses.
    let mut gap_cursor = None;
    let mut followed = None;
    let holder = crate::ids::new_id();
    let lease = lease_name(&coin);
    let mut wake = svc.wake.subscribe();
    while !*stop.borrow() {
        // A wake that came during this round is for it: its reads come after.
        wake.mark_unchanged();
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
            idle(pause, &mut wake, &mut stop).await;
            continue;
        }
        // Following sent withdrawals waits for a pause to pass while a backlog is signed and
        // sent: a send is what moves the money; a receipt can wait that long.
        let follow = followed.is_none_or(|at: tokio::time::Instant| at.elapsed() >= pause);
        if follow {
            followed = Some(tokio::time::Instant::now());
        }
        let busy = match round(&svc, &coin, chain_id, node.as_ref(), follow).await {
            Ok(busy) => busy,
            Err(e) => {
                tracing::warn!(coin = %coin, error = %e, "signer round failed; trying again");
                false
            }
        };
        // The gap check asks the node about every signing address: once a
        // `withdrawals.gap_check_interval` of the service's clock.
        let now = svc.store.clock().now();
        let every = i64::try_from(svc.config.withdrawals.gap_check_interval).unwrap_or(i64::MAX);
        if reconciled.is_none_or(|at| now.saturating_sub(at) >= every) {
            match crate::custody::gaps::reconcile(&svc, (&coin, chain_id), node.as_ref(), gap_cursor).await {
                Ok(next) => {
                    reconciled = Some(now);
                    gap_cursor = next;
                }
                Err(e) => {
                    tracing::warn!(coin = %coin, error = %e, "the nonce gap check failed; trying again")
                }
            }
        }
        // A round that signed or sent something is followed at once: a backlog drains without
        // a pause per batch.
        if !busy {
            idle(pause, &mut wake, &mut stop).await;
        }
    }
}

/// Waits `pause`, or less: until an approval in this process wakes the signer, or it stops.
async fn idle(pause: Duration, wake: &mut watch::Receiver<u64>, stop: &mut watch::Receiver<bool>) {
    tokio::select! {
        _ = tokio::time::sleep(pause) => {}
        _ = wake.changed() => {}
        _ = stop.changed() => {}
    }
}

/// One pass over the chain's withdrawals: expire, sign, send, and when `follow`, follow the
/// sent ones. `Ok(true)` when it signed or sent something (the next round then starts at once).
///
/// A backlog is pipelined: the next batch is signed while this one is sent (the node's work
/// beside the key store's). Each withdrawal still has its nonce stored before it is signed and
/// its signed bytes stored before they are sent; batches are sent in the order of their nonces.
pub async fn round(
    svc: &Custody,
    coin: &Coin,
    chain_id: u64,
    node: &dyn SendNode,
    follow: bool,
) -> Result<bool, RoundError> {
    let started = tokio::time::Instant::now();
    expire(svc, coin).await?;
    crate::custody::breaker::reset_due(svc, coin).await?;
    let signed_of = WithdrawalFilter {
        coin: Some(coin.clone()),
        states: Some(vec![TxRequestState::Signed]),
        nonce_first: true,
        limit: BATCH,
        ..Default::default()
    };
    // Signed ones (the last round's lookahead, any a crash left) are sent first.
    let mut to_send = svc.store.withdrawals(&signed_of).await?;
    let mut signed = 0;
    if to_send.is_empty() {
        // A backlog's first batch is small, so its sends start soon; the next is signed beside them.
        signed = sign_next(svc, coin, chain_id, node, svc.config.withdrawals.signer_concurrency).await?;
        to_send = svc.store.withdrawals(&signed_of).await?;
    }
    // One withdrawal's failure (a node error about it) does not hold the others back.
    let (sent, ahead) = tokio::join!(
        crate::custody::batch::send_all(svc, (coin, chain_id), node, to_send),
        sign_next(svc, coin, chain_id, node, BATCH)
    );
    let (sent, ahead) = (sent?, ahead?);
    let sending = started.elapsed();
    if follow {
        follow_all(svc, coin, chain_id, node).await?;
    }
    svc.metrics.custody.rounds.inc();
    let busy = signed + sent + ahead > 0;
    if busy {
        let ms = crate::custody::batch::millis;
        tracing::debug!(coin = %coin, signed = signed + ahead, sent, sending_ms = ms(sending),
            round_ms = ms(started.elapsed()), follow, "signer round");
    }
    Ok(busy)
}

/// Signs the next `limit` approved withdrawals (`pendingDelivery`), expiring those past
/// `withdrawals.delivery_deadline` unsigned: how many were signed.
async fn sign_next(
    svc: &Custody,
    coin: &Coin,
    chain_id: u64,
    node: &dyn SendNode,
    limit: u32,
) -> Result<usize, RoundError> {
    let approved = WithdrawalFilter {
        coin: Some(coin.clone()),
        states: Some(vec![TxRequestState::PendingDelivery]),
        limit,
        ..Default::default()
    };
    let deadline = i64::try_from(svc.config.withdrawals.delivery_deadline).unwrap_or(i64::MAX);
    let now = svc.store.clock().now();
    let mut to_sign = Vec::new();
    for w in svc.store.withdrawals(&approved).await? {
        // Approved but never signed by its deadline (one with a nonce is signed next, so no gap).
        if w.nonce.is_none() && now.saturating_sub(w.updated_at) >= deadline {
            alone(coin, &w.id, crate::custody::progress::expire_unsigned(svc, &w).await);
        } else {
            to_sign.push(w);
        }
    }
    if to_sign.is_empty() {
        return Ok(0);
    }
    let memo = Memo::read(svc, node, &to_sign).await?;
    crate::custody::batch::sign_all(svc, (coin, chain_id), node, &memo, to_sign).await
}

/// Follows the chain's sent withdrawals not yet seen mined, then checks the mined ones still are.
async fn follow_all(
    svc: &Custody,
    coin: &Coin,
    chain_id: u64,
    node: &dyn SendNode,
) -> Result<(), RoundError> {
    let limit = usize::try_from(svc.config.withdrawals.signer_concurrency).unwrap_or(1);
    let of = WithdrawalFilter {
        coin: Some(coin.clone()),
        states: Some(vec![TxRequestState::Delivered]),
        unmined: true,
        limit: BATCH,
        ..Default::default()
    };
    let seen = std::sync::Mutex::new(Vec::new());
    stream::iter(svc.store.withdrawals(&of).await?)
        .for_each_concurrent(limit, |w| {
            let seen = &seen;
            async move {
                match crate::custody::replace::follow(svc, chain_id, node, &w).await {
                    Ok(true) => {
                        seen.lock().unwrap_or_else(std::sync::PoisonError::into_inner).push(w.id.clone())
                    }
                    done => alone(coin, &w.id, done.map(drop)),
                }
            }
        })
        .await;
    let seen = seen.into_inner().unwrap_or_else(std::sync::PoisonError::into_inner);
    crate::custody::replace::recheck_mined(svc, coin, node, &seen).await
}

/// Approvals past `expires_at` are closed and their withdrawals canceled (a rule change's is
/// dropped).
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
        let entry = match &a.subject {
            ApprovalSubject::Withdrawal(id) => crate::audit::entry(AuditType::WithdrawalExpired)
                .data(json!({ "pendingApprovalId": a.id.as_str(), "txRequestId": id.as_str() })),
            ApprovalSubject::PolicyRule(r) => crate::audit::entry(AuditType::PolicyChangeExpired)
                .data(json!({ "pendingApprovalId": a.id.as_str(), "ruleId": r.rule_id })),
        };
        let mut entry = entry.wallet(a.wallet_id.as_ref());
        if a.wallet_id.is_none() {
            entry.enterprise_id = a.enterprise.clone();
        }
        let mut events = vec![events::approval_event(&closed)];
        let w = match a.tx_request_id() {
            Some(id) => svc.store.withdrawal(id).await?,
            None => None,
        };
        let mut next = None;
        if let Some(w) = w {
            let Some(state) = State::of(&w, Some(a.expires_at)) else { continue };
            // Only a withdrawal still waiting for approvers expires with its approval.
            let Ok(to) = machine::step(state, Command::Expire, now) else { continue };
            next = Some((to.name(), w.version));
            let w = Withdrawal { state: to.name(), version: w.version + 1, updated_at: now, ..w };
            events.extend(events::tx_request_events(&w, Some(TxRequestState::PendingApproval)));
            events.push(events::expire_event(&w, TxRequestState::PendingApproval));
        }
        let announce = Announcement::prepare(&svc.webhooks, &events).await?;
        let written = svc
            .store
            .resolve_approval(&closed, a.resolvers.len(), next, None, now, &[entry], &announce.writes())
            .await?;
        if let Some(recorded) = written {
            announce.committed(&svc.webhooks, &recorded).await;
        }
    }
    Ok(())
}
