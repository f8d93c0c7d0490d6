//! Building and signing a withdrawal's transaction (docs/withdrawals.md#signing-and-broadcast),
//! for its first signature (`signer`) and its replacements (`replace`).

use alloy_consensus::{SignableTransaction, TxEip1559};
use alloy_eips::eip2718::Encodable2718;
use alloy_primitives::TxKind;

use crate::custody::{keys, node::SendNode, Custody};
use crate::{chain::node::NodeError, model::custody::Withdrawal};

/// Withdrawals the signer takes per state per round.
pub const BATCH: u32 = 50;

/// What a round can fail with; the round is tried again after the pause.
#[derive(Debug, thiserror::Error)]
pub enum RoundError {
    #[error(transparent)]
    Store(#[from] crate::store::StoreError),
    #[error(transparent)]
    Node(#[from] NodeError),
    #[error(transparent)]
    Key(#[from] keys::KeyError),
    #[error(transparent)]
    Domain(#[from] crate::error::Error),
}

/// Signs `tx` with `key`, whose address must be `from`, in the key store (the signature
/// checked to recover it: `keys::sign`): its EIP-2718 bytes and hash.
pub async fn sign_tx(
    svc: &Custody,
    key: &crate::model::custody::KeyRecord,
    tx: TxEip1559,
    from: alloy_primitives::Address,
) -> Result<(Vec<u8>, alloy_primitives::B256), RoundError> {
    if key.address != from {
        return Err(keys::KeyError::Backend("the key's address is not the withdrawal's".into()).into());
    }
    let digest = tx.signature_hash();
    let metrics = svc.metrics.clone();
    let sig = keys::sign(svc.keys.as_ref(), key, &digest, || {
        metrics.custody.unverified.inc();
    })
    .await?;
    // `keys::sign` recovered the key's address from this very digest (`tx`'s signature hash),
    // so the signed transaction recovers it too: one recovery, not two.
    let signed = tx.into_signed(sig);
    Ok((signed.encoded_2718(), *signed.hash()))
}

/// The gas `w`'s transaction to `to` needs: the node's estimate, exact for a plain transfer, plus
/// 20% for a contract call. Errors: the node's, which says "execution reverted" for a call that
/// would fail.
pub async fn gas_of(
    node: &dyn SendNode,
    w: &Withdrawal,
    to: alloy_primitives::Address,
) -> Result<u64, NodeError> {
    let (to, value, input) = crate::custody::tokens::call_of(w, to);
    let estimated = node.estimate_gas(w.from, to, value, input).await?;
    Ok(if estimated == crate::custody::withdrawal::TRANSFER_GAS {
        estimated
    } else {
        estimated.saturating_mul(6) / 5
    })
}

/// An EIP-1559 transfer of `w` at `(nonce, gas)`, with `base`, the node's next base fee
/// (`min(2 × base + tip, withdrawals.max_fee_per_gas)`) (`gas` from [`gas_of`]).
pub fn build(
    svc: &Custody,
    chain_id: u64,
    base: u128,
    w: &Withdrawal,
    (nonce, gas): (u64, u64),
    to: alloy_primitives::Address,
    floor: Option<(u128, u128)>,
) -> TxEip1559 {
    let cfg = &svc.config.withdrawals;
    // A replacement offers at least `floor` (max fee, tip): the node's bump over the last.
    let (floor_max, floor_tip) = floor.unwrap_or_default();
    let tip = u128::from(cfg.priority_fee_per_gas).max(floor_tip);
    let max_fee =
        base.saturating_mul(2).saturating_add(tip).max(floor_max).min(u128::from(cfg.max_fee_per_gas));
    let (to, value, input) = crate::custody::tokens::call_of(w, to);
    TxEip1559 {
        chain_id,
        nonce,
        gas_limit: gas,
        max_fee_per_gas: max_fee,
        max_priority_fee_per_gas: tip.min(max_fee),
        to: TxKind::Call(to),
        value,
        access_list: Default::default(),
        input,
    }
}
