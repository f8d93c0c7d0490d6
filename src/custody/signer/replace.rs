//! Following a sent withdrawal until it is mined (docs/withdrawals.md#stuck-transactions): the
//! block that mined it is noted; a transaction the node lost is sent again, the same bytes; one
//! not mined within `withdrawals.stuck_after` seconds is replaced at the same nonce with both
//! fees raised by at least the node's replacement bump (10% on geth and anvil; Custodian raises
//! them by 12.5%), and never above `withdrawals.max_fee_per_gas`. Every transaction is kept:
//! whichever is mined wins, and the others are `replaced` (one nonce is mined once).

use alloy_primitives::U256;
use serde_json::json;

use crate::custody::{
    node::{SendNode, SendRefusal},
    transaction::{build, gas_of, sign_tx, RoundError},
    withdrawal::machine::{self, Command, State},
    Custody,
};
use crate::{
    audit::EntryExt,
    model::{
        audit::AuditType,
        custody::{Attempt, Withdrawal},
    },
    store::Replacement,
};

/// A replacement's fees over the last: ×9/8 (12.5%), above the 10% nodes require.
fn bumped(fee: u128) -> u128 {
    fee.saturating_mul(9).div_ceil(8)
}

/// Notes the block that mined `w`'s current transaction or any it replaced (`Ok(true)`); sends
/// it again when the node lost it; replaces it when stuck (not mined `withdrawals.stuck_after`
/// seconds after it was sent or last replaced).
pub(super) async fn follow(
    svc: &Custody,
    chain_id: u64,
    node: &dyn SendNode,
    w: &Withdrawal,
) -> Result<bool, RoundError> {
    let Some(current) = w.tx_hash else { return Ok(false) };
    let attempts = svc.store.withdrawal_attempts(&w.id).await?;
    // The newest first: a replacement is the likelier to be mined.
    for a in attempts.iter().rev() {
        if let Some(m) = node.mined(a.hash).await? {
            // A reverted receipt (status 0) is one answer: the block is noted and the receipt
            // read again at the confirmation depth before it fails (`recheck_mined`). Until
            // then the withdrawal stays in flight and in the velocity sums.
            if !m.success {
                tracing::info!(txRequestId = %w.id, block = m.block, "a withdrawal's receipt says it reverted; read again at the confirmation depth");
            }
            let next =
                State::of(w, None).and_then(|s| machine::step(s, Command::Mined { block: m.block }, 0).ok());
            if next.is_some() {
                svc.store.settle_mined(&w.id, &a.hash, m.block).await?;
            }
            return Ok(true);
        }
    }
    let knows = node.knows(current).await?;
    if !knows {
        // Lost (a restarted node, a reorg): the same bytes again. A node that drops what pays
        // less than the base fee refuses them as underpriced: then it is stuck, below.
        if let Some(raw) = &w.signed_tx {
            svc.metrics.custody.broadcasts.inc();
            match node.send_raw(raw).await {
                Ok(_) | Err(SendRefusal::Known) => return Ok(false),
                Err(SendRefusal::Underpriced) | Err(SendRefusal::InsufficientFunds) => {}
                Err(SendRefusal::Other(e)) => return Err(e.into()),
            }
        }
    }
    let waited = svc.store.clock().now().saturating_sub(w.updated_at);
    let stuck_after = i64::try_from(svc.config.withdrawals.stuck_after).unwrap_or(i64::MAX);
    let Some(last) = attempts.last() else { return Ok(false) };
    if waited >= stuck_after || (knows && attempts.len() == 1 && held_queued(svc, node, w, waited).await?) {
        return replace(svc, chain_id, node, w, last).await.map(|()| false);
    }
    Ok(false)
}

/// Whether the node has held `w`, sent `waited` seconds ago, queued past
/// `withdrawals.queued_after` though it is next: the node knows it and its pending count
/// stops at its nonce, so nothing before it is missing. anvil's pool does this to a
/// transaction that arrived while its predecessor was being mined (it waits for a marker that
/// was pruned): only a new transaction at the nonce frees it. Asked only of a first
/// transaction, so a node that answers `pending` as `latest` costs at most one early bump.
async fn held_queued(
    svc: &Custody,
    node: &dyn SendNode,
    w: &Withdrawal,
    waited: i64,
) -> Result<bool, RoundError> {
    let after = svc.config.withdrawals.queued_after;
    let (Some(nonce), Ok(after)) = (w.nonce, i64::try_from(after)) else { return Ok(false) };
    if after == 0 || waited < after || node.pending_nonce(w.from).await? != nonce {
        return Ok(false);
    }
    tracing::info!(coin = %w.coin, txRequestId = %w.id, nonce, "the node holds a withdrawal queued though it is next; replacing it");
    svc.metrics.custody.held_queued.inc();
    Ok(true)
}

/// Signs `w` again at its nonce with fees over `last`'s, stores it, then sends it.
async fn replace(
    svc: &Custody,
    chain_id: u64,
    node: &dyn SendNode,
    w: &Withdrawal,
    last: &Attempt,
) -> Result<(), RoundError> {
    let (Some(nonce), Some(to), Some(current)) =
        (w.nonce, w.recipients.first().map(|r| r.address), w.tx_hash)
    else {
        return Ok(());
    };
    let Some(key) = svc.store.custody_key(&w.key_id).await? else { return Ok(()) };
    let Some(state) = State::of(w, None) else { return Ok(()) };
    let floor = (bumped(last.max_fee_per_gas), bumped(last.priority_fee_per_gas));
    let gas = gas_of(node, w, to).await?;
    let base = node.next_base_fee().await?;
    let tx = build(svc, chain_id, base, w, (nonce, gas), to, Some(floor));
    if tx.max_fee_per_gas < floor.0 || tx.max_priority_fee_per_gas < floor.1 {
        // At the cap: a replacement the node would refuse. It waits for the base fee to fall.
        svc.metrics.custody.at_fee_cap.inc();
        return Ok(());
    }
    let (gas, max_fee, tip) = (tx.gas_limit, tx.max_fee_per_gas, tx.max_priority_fee_per_gas);
    let (raw, hash) = sign_tx(svc, &key, tx, w.from).await?;
    let now = svc.store.clock().now();
    if machine::step(state, Command::Replace { tx_hash: hash }, now).is_err() {
        return Ok(());
    }
    let attempt = Attempt {
        attempt: last.attempt + 1,
        hash,
        signed_tx: raw,
        max_fee_per_gas: max_fee,
        priority_fee_per_gas: tip,
        created_at: now,
    };
    let entry = crate::audit::entry(AuditType::WithdrawalReplaced).wallet(Some(&w.wallet_id)).data(json!({
        "txRequestId": w.id.as_str(), "replaces": current.to_string(), "txHash": hash.to_string(),
        "nonce": nonce, "maxFeePerGas": max_fee.to_string(), "maxPriorityFeePerGas": tip.to_string(),
    }));
    let reserve = U256::from(gas) * U256::from(max_fee);
    let r = Replacement { id: &w.id, replaces: &current, attempt: &attempt, fee_reserve: &reserve };
    if !svc.store.replace_signed(&r, now, &[entry]).await? {
        return Ok(());
    }
    svc.metrics.custody.replacements.inc();
    svc.metrics.custody.broadcasts.inc();
    match node.send_raw(&attempt.signed_tx).await {
        Ok(_) | Err(SendRefusal::Known) | Err(SendRefusal::Underpriced) => Ok(()),
        Err(SendRefusal::InsufficientFunds) => Ok(()),
        Err(SendRefusal::Other(e)) => Err(e.into()),
    }
}

/// A signed withdrawal the node refuses as underpriced (the base fee rose after it was signed):
/// signed again at its nonce over the last fees and the next base fee, within
/// `withdrawals.max_fee_per_gas`, stored, then sent ([`replace`]).
pub(super) async fn reprice(
    svc: &Custody,
    chain_id: u64,
    node: &dyn SendNode,
    w: &Withdrawal,
) -> Result<(), RoundError> {
    let attempts = svc.store.withdrawal_attempts(&w.id).await?;
    let Some(last) = attempts.last() else { return Ok(()) };
    svc.metrics.custody.repriced.inc();
    replace(svc, chain_id, node, w, last).await
}

/// Withdrawals seen mined within the chain's `reorg_depth` (or `confirmations`, if deeper) of
/// the head: one whose block a reorg took away is followed again (sent again when the node
/// dropped it), one mined again elsewhere gets its new block, and one whose receipt still says
/// it did not pay once its block is `confirmations` deep fails for good.
pub(super) async fn recheck_mined(
    svc: &Custody,
    coin: &crate::types::Coin,
    node: &dyn SendNode,
    just_seen: &[crate::types::TxRequestId],
) -> Result<(), RoundError> {
    use futures_util::StreamExt;
    let chain = svc.config.chains.get(coin.as_str());
    let confirmations = chain.map_or(12, |c| c.confirmations);
    let depth = chain.map_or(64, |c| c.reorg_depth).max(confirmations);
    let head = node.head().await?;
    // The latest mined first: a reorg takes the latest blocks.
    let filter = crate::store::WithdrawalFilter {
        coin: Some(coin.clone()),
        states: Some(vec![crate::model::custody::TxRequestState::Delivered]),
        mined_from: Some(head.saturating_sub(depth)),
        latest_mined_first: true,
        limit: crate::custody::transaction::BATCH,
        ..Default::default()
    };
    let limit = usize::try_from(svc.config.withdrawals.signer_concurrency).unwrap_or(1);
    let checked: Vec<Result<(), RoundError>> = futures_util::stream::iter(svc.store.withdrawals(&filter).await?)
        .map(|w| async move {
            let Some(hash) = w.tx_hash else { return Ok(()) };
            let mined = node.mined(hash).await?;
            let now = mined.as_ref().map(|m| m.block);
            if now != w.mined_block {
                if now.is_none() {
                    tracing::warn!(txRequestId = %w.id, %hash, "a withdrawal's block was reorged away; following it again");
                }
                svc.store.set_mined(&w.id, now).await?;
                return Ok(());
            }
            // A receipt first seen this round is read again in a later one, not twice in one.
            if let Some(m) = mined.filter(|_| !just_seen.contains(&w.id)) {
                let paid = m.success || crate::custody::tokens::logged(&w, &m);
                let deep = (head + 1).saturating_sub(m.block);
                if !paid && deep >= confirmations {
                    let why = format!(
                        "mined in block {} but reverted (receipt status 0, read again {deep} blocks deep): the fee was paid, the payee was not",
                        m.block
                    );
                    let settle = Command::Settle { paid, depth: deep, confirmations };
                    crate::custody::progress::fail(svc, &w, settle, &why).await?;
                }
            }
            Ok(())
        })
        .buffer_unordered(limit)
        .collect()
        .await;
    checked.into_iter().collect()
}
