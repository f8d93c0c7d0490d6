//! Nonce gaps (docs/withdrawals.md#nonce-gaps): a nonce handed out that no transaction will use
//! stalls every later transaction of its address, for good. One appears when a withdrawal that
//! had taken a nonce fails before it reached the chain, or when the node's pending count was
//! answered too high when nonces were reserved. The signer finds each one by comparing the
//! store's next nonce with the node's pending count, and fills it as OpenZeppelin's relayer
//! does: a zero-value transaction from the address to itself at that nonce, signed in the key
//! store, stored (and audited) before it is sent, sent again until mined.

use alloy_consensus::TxEip1559;
use alloy_primitives::{Address, TxKind, U256};
use serde_json::json;

use crate::custody::{
    node::{SendNode, SendRefusal},
    transaction::{sign_tx, RoundError, BATCH},
    Custody,
};
use crate::{
    audit::EntryExt,
    model::{audit::AuditType, custody::TxRequestState},
    store::{NonceFill, NonceHolder},
    types::Coin,
};

/// Signing addresses compared with the node per check (by address).
pub const MAX_RECONCILED: u32 = BATCH * 10;
/// Nonces of one address looked at, and filled, per check: a node that answered its pending
/// count far too high once cannot make the signer sign without end.
pub const MAX_FILLS_PER_CHECK: u64 = 16;

/// Whether a withdrawal in `state` holding a nonce will still use it.
fn uses_nonce(state: TxRequestState) -> bool {
    matches!(state, TxRequestState::PendingDelivery | TxRequestState::Signed | TxRequestState::Delivered)
}

/// The nonces in `[with_node, next)` no withdrawal will use (`holders` hold the range's nonces).
pub fn gaps(with_node: u64, next: u64, holders: &[NonceHolder]) -> Vec<u64> {
    let used = |n: u64| holders.iter().any(|h| h.nonce == n && uses_nonce(h.state));
    (with_node..next).filter(|n| !used(*n)).collect()
}

/// Compares the next [`MAX_RECONCILED`] signing addresses after `after` (the last check's
/// cursor; `None`: from the first), each its next nonce in the store with the node's pending
/// count, and fills every gap (at most [`MAX_FILLS_PER_CHECK`] an address a check), then sends
/// each stored fill the node has not counted yet, and settles the fills it has: one whose nonce
/// went to the failed withdrawal's own transaction after all brings that withdrawal back
/// (`delivered`). The widest gap still open at the node among the addresses checked is the
/// gauge `custodian_custody_nonce_gap` (0 when none; a filled one counts until its fill is
/// mined). One address's trouble (a node error about it) is logged and does not hold the
/// others back. Answers the next check's cursor: the last address checked when the page was
/// full, else `None` (the next check starts from the first again).
pub(super) async fn reconcile(
    svc: &Custody,
    (coin, chain_id): (&Coin, u64),
    node: &dyn SendNode,
    after: Option<Address>,
) -> Result<Option<Address>, RoundError> {
    let mut widest = 0u64;
    let page = svc.store.nonce_counters(coin.as_str(), after, MAX_RECONCILED).await?;
    for (address, next) in &page {
        match reconcile_one(svc, (coin, chain_id), node, *address, *next).await {
            Ok(gap) => widest = widest.max(gap),
            Err(e) => {
                tracing::warn!(coin = %coin, %address, error = %e, "the nonce gap check of an address failed; trying again next check")
            }
        }
    }
    svc.metrics.custody.nonce_gap.set(i64::try_from(widest).unwrap_or(i64::MAX));
    let full = page.len() >= usize::try_from(MAX_RECONCILED).unwrap_or(usize::MAX);
    Ok(page.last().map(|(a, _)| *a).filter(|_| full))
}

/// [`reconcile`] for `address`, whose next nonce in the store is `next`: its gap still open at
/// the node.
async fn reconcile_one(
    svc: &Custody,
    (coin, chain_id): (&Coin, u64),
    node: &dyn SendNode,
    address: Address,
    next: u64,
) -> Result<u64, RoundError> {
    let with_node = node.pending_nonce(address).await?;
    settle_fills(svc, coin, node, address, with_node).await?;
    // A failed withdrawal among the latest nonces the node counts used, with no fill: the nonce
    // went to its own transaction, so it paid after all.
    let recent = (with_node.saturating_sub(MAX_FILLS_PER_CHECK), with_node);
    for h in svc.store.nonce_holders(coin.as_str(), address, recent, BATCH).await? {
        if h.state == TxRequestState::Failed && svc.store.nonce_fill_of(&h.tx_request_id).await?.is_none() {
            revive(svc, coin, node, &h.tx_request_id).await?;
        }
    }
    if next <= with_node {
        return Ok(0);
    }
    let upto = next.min(with_node.saturating_add(MAX_FILLS_PER_CHECK));
    let holders = svc.store.nonce_holders(coin.as_str(), address, (with_node, upto), BATCH).await?;
    let open = gaps(with_node, upto, &holders);
    if !open.is_empty() {
        tracing::warn!(coin = %coin, %address, next, with_node, gap = open.len(), "nonces reserved that no transaction will use: filling them");
    }
    let filled = svc.store.nonce_fills(coin.as_str(), address, with_node, BATCH).await?;
    for nonce in open.iter().filter(|n| !filled.iter().any(|f| f.nonce == **n)) {
        let failed = holders.iter().find(|h| h.nonce == *nonce).map(|h| h.tx_request_id.clone());
        // A failed withdrawal whose own transaction the node has after all is not filled over.
        if let Some(id) = &failed {
            if own_transaction(svc, node, id).await?.is_some() {
                continue;
            }
        }
        fill(svc, (coin, chain_id), node, address, *nonce, Refill::First(failed)).await?;
    }
    // Every fill not yet counted by the node, the new ones too: a crash or a lost send
    // resends the same bytes.
    for f in svc.store.nonce_fills(coin.as_str(), address, with_node, BATCH).await? {
        svc.metrics.custody.broadcasts.inc();
        match node.send_raw(&f.signed_tx).await {
            Ok(_) | Err(SendRefusal::Known) => {}
            Err(SendRefusal::Other(e)) => return Err(e.into()),
            // The base fee rose past what it offers: signed again over it, sent next check.
            Err(SendRefusal::Underpriced) => {
                fill(svc, (coin, chain_id), node, address, f.nonce, Refill::Over(&f)).await?;
            }
            Err(e) => {
                tracing::warn!(coin = %coin, %address, nonce = f.nonce, error = ?e, "the node refused a nonce fill; sending it again next check")
            }
        }
    }
    Ok(open.len() as u64)
}

/// The fills of `address` whose nonce the node counts used (below `with_node`): done when the
/// fill was mined; when it was not, the nonce went to something else, and a failed withdrawal
/// whose own transaction that was is `delivered` again (it paid). Neither seen: asked again
/// next check.
async fn settle_fills(
    svc: &Custody,
    coin: &Coin,
    node: &dyn SendNode,
    address: Address,
    with_node: u64,
) -> Result<(), RoundError> {
    for f in svc.store.open_fills(coin.as_str(), address, with_node, MAX_FILLS_PER_CHECK as u32).await? {
        if node.mined(f.tx_hash).await?.is_some() {
            svc.store.finish_fill(coin.as_str(), address, f.nonce).await?;
            continue;
        }
        let Some(id) = &f.tx_request_id else { continue };
        if revive(svc, coin, node, id).await? {
            svc.store.finish_fill(coin.as_str(), address, f.nonce).await?;
        }
    }
    Ok(())
}

/// Failed withdrawal `id` back to `delivered` when one of its own transactions was mined and
/// paid after all (audited as `withdrawal.found_mined`): whether it was.
async fn revive(
    svc: &Custody,
    coin: &Coin,
    node: &dyn SendNode,
    id: &crate::types::TxRequestId,
) -> Result<bool, RoundError> {
    let Some((w, Some((hash, m)))) = own_transaction(svc, node, id).await? else { return Ok(false) };
    // Mined but reverted: it failed for good, as it says.
    if !m.success && !crate::custody::tokens::logged(&w, &m) {
        return Ok(false);
    }
    tracing::warn!(coin = %coin, txRequestId = %id, %hash, block = m.block, "a failed withdrawal's own transaction was mined after all: it paid");
    let entry = crate::audit::entry(AuditType::WithdrawalFoundMined)
        .wallet(Some(&w.wallet_id))
        .data(json!({ "txRequestId": id.as_str(), "txHash": hash.to_string(), "block": m.block }));
    let command = crate::custody::withdrawal::machine::Command::FoundMined { tx_hash: hash, block: m.block };
    let change =
        crate::custody::progress::Change { w: w.clone(), command, error: None, entry, expired: false };
    if crate::custody::progress::move_all(svc, vec![change]).await? != 1 {
        return Ok(false);
    }
    svc.store.settle_mined(&w.id, &hash, m.block).await?;
    Ok(true)
}

/// Failed withdrawal `id` when the node has one of its own transactions (in its pool or
/// mined), with the mined one's hash and receipt when mined.
async fn own_transaction(
    svc: &Custody,
    node: &dyn SendNode,
    id: &crate::types::TxRequestId,
) -> Result<
    Option<(
        crate::model::custody::Withdrawal,
        Option<(alloy_primitives::B256, crate::custody::node::Mined)>,
    )>,
    RoundError,
> {
    let Some(w) = svc.store.withdrawal(id).await?.filter(|w| w.state == TxRequestState::Failed) else {
        return Ok(None);
    };
    for a in svc.store.withdrawal_attempts(id).await?.iter().rev() {
        if let Some(m) = node.mined(a.hash).await? {
            return Ok(Some((w, Some((a.hash, m)))));
        }
        if node.knows(a.hash).await? {
            return Ok(Some((w, None)));
        }
    }
    Ok(None)
}

/// A fill to make: the first of its nonce (naming the failed withdrawal that had taken it), or
/// one over a fill the node refused as underpriced.
enum Refill<'a> {
    First(Option<crate::types::TxRequestId>),
    Over(&'a NonceFill),
}

/// The max fee and tip per gas a signed fill offered (0 for bytes that do not decode).
fn offered(raw: &[u8]) -> (u128, u128) {
    use alloy_eips::eip2718::Decodable2718;
    match alloy_consensus::TxEnvelope::decode_2718(&mut &raw[..]) {
        Ok(alloy_consensus::TxEnvelope::Eip1559(t)) => {
            (t.tx().max_fee_per_gas, t.tx().max_priority_fee_per_gas)
        }
        _ => (0, 0),
    }
}

/// Signs and stores a zero-value transaction from `address` to itself at `nonce`, audited as
/// `withdrawal.nonce_filled`: at `2 × base fee + tip`, and over a refused one (`Refill::Over`)
/// both fees raised by 12.5% at least, never above `withdrawals.max_fee_per_gas` (at the cap,
/// nothing is signed and it waits for the base fee to fall).
async fn fill(
    svc: &Custody,
    (coin, chain_id): (&Coin, u64),
    node: &dyn SendNode,
    address: Address,
    nonce: u64,
    refill: Refill<'_>,
) -> Result<(), RoundError> {
    let key = match svc.store.key_of_address(coin.as_str(), address).await? {
        Some(id) => svc.store.custody_key(&id).await?,
        None => None,
    };
    let Some(key) = key else {
        tracing::error!(coin = %coin, %address, nonce, "a nonce gap of an address whose key is gone: it cannot be filled");
        return Ok(());
    };
    let cfg = &svc.config.withdrawals;
    let base = node.next_base_fee().await?;
    let cap = u128::from(cfg.max_fee_per_gas);
    let (floor_max, floor_tip) = match &refill {
        Refill::Over(f) => {
            let (max, tip) = offered(&f.signed_tx);
            (max.saturating_mul(9).div_ceil(8), tip.saturating_mul(9).div_ceil(8))
        }
        Refill::First(_) => (0, 0),
    };
    let tip = u128::from(cfg.priority_fee_per_gas).max(floor_tip);
    let max_fee = base.saturating_mul(2).saturating_add(tip).max(floor_max).min(cap);
    if max_fee < floor_max || tip > max_fee {
        svc.metrics.custody.at_fee_cap.inc();
        return Ok(());
    }
    let tx = TxEip1559 {
        chain_id,
        nonce,
        gas_limit: crate::custody::withdrawal::TRANSFER_GAS,
        max_fee_per_gas: max_fee,
        max_priority_fee_per_gas: tip,
        to: TxKind::Call(address),
        value: U256::ZERO,
        access_list: Default::default(),
        input: Default::default(),
    };
    let (raw, hash) = sign_tx(svc, &key, tx, address).await?;
    let now = svc.store.clock().now();
    let (failed, replaces) = match &refill {
        Refill::First(failed) => (failed.clone(), None),
        Refill::Over(f) => (f.tx_request_id.clone(), Some(f.tx_hash)),
    };
    let entry = crate::audit::entry(AuditType::WithdrawalNonceFilled).data(json!({
        "coin": coin.as_str(), "address": address.to_checksum(None), "nonce": nonce, "txHash": hash.to_string(),
        "txRequestId": failed.as_ref().map(|id| id.as_str()), "replaces": replaces.map(|h| h.to_string()),
    }));
    let f = NonceFill {
        chain: coin.as_str().to_string(),
        address,
        nonce,
        tx_hash: hash,
        signed_tx: raw,
        tx_request_id: failed,
        created_at: now,
    };
    let stored = match &refill {
        Refill::First(_) => svc.store.add_nonce_fill(&f, &[entry]).await?,
        Refill::Over(old) => svc.store.replace_fill(old, &f, &[entry]).await?,
    };
    if stored {
        let counter = match refill {
            Refill::First(_) => &svc.metrics.custody.nonce_fills,
            Refill::Over(_) => &svc.metrics.custody.repriced,
        };
        counter.inc();
        tracing::info!(coin = %coin, %address, nonce, txHash = %hash, "filled a nonce gap");
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn held(nonce: u64, state: TxRequestState) -> NonceHolder {
        NonceHolder { nonce, state, tx_request_id: crate::types::TxRequestId::new_random() }
    }

    #[test]
    fn a_nonce_no_live_withdrawal_holds_is_a_gap() {
        // Nonce 1 failed after it was taken; 2 and 3 wait queued behind it.
        let holders = [
            held(1, TxRequestState::Failed),
            held(2, TxRequestState::Delivered),
            held(3, TxRequestState::Signed),
        ];
        assert_eq!(gaps(1, 4, &holders), vec![1]);
        // Nonces skipped on a pending count answered too high: each one a gap.
        assert_eq!(gaps(0, 3, &[]), vec![0, 1, 2]);
        assert_eq!(gaps(4, 4, &holders), Vec::<u64>::new());
        assert_eq!(
            gaps(2, 4, &[held(2, TxRequestState::PendingDelivery), held(3, TxRequestState::Delivered)]),
            Vec::<u64>::new()
        );
    }
}
