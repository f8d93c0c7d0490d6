//! Fee alerts (§6.1): `lowFee` when the average base fee of the last [`FEE_BLOCKS`] blocks falls
//! below a wallet's threshold, `lowFeeAddressBalance` when the balance of its fee address
//! (`coinSpecific.feeAddress`) does. Each is sent when the value crosses the threshold downward
//! at a block, not at every block below it, so a crossing is one event whose id carries the
//! block hash (docs/chains.md, "Events").

use std::collections::{BTreeSet, VecDeque};

use alloy_primitives::U256;

use super::{book::AddressBook, node::ChainNode, node::NodeBlock, node::NodeError};
use crate::{
    model::chain::{BlockHead, FeeAlerts},
    types::{checksummed_eth_address, Coin, WalletId},
    webhooks::event::{Event, LowFeeBalanceEvent, LowFeeEvent},
};

/// Blocks whose base fees are averaged.
pub const FEE_BLOCKS: usize = 10;

/// The base fees of the latest consecutive blocks read (wei).
#[derive(Default)]
pub struct BaseFees {
    recent: VecDeque<(u64, u128)>,
}

impl BaseFees {
    /// Takes in a block's base fee. `(before, now)`: the average of the [`FEE_BLOCKS`] blocks
    /// below it and of the [`FEE_BLOCKS`] ending with it, once that many consecutive blocks
    /// were read (after a start or a reorg, 11 blocks).
    pub fn push(&mut self, height: u64, base_fee: Option<u128>) -> Option<(u128, u128)> {
        if self.recent.back().is_some_and(|(h, _)| h + 1 != height) {
            self.recent.clear();
        }
        let Some(fee) = base_fee else {
            self.recent.clear();
            return None;
        };
        self.recent.push_back((height, fee));
        while self.recent.len() > FEE_BLOCKS + 1 {
            self.recent.pop_front();
        }
        if self.recent.len() <= FEE_BLOCKS {
            return None;
        }
        let fees: Vec<u128> = self.recent.iter().map(|(_, f)| *f).collect();
        let average = |s: &[u128]| s.iter().fold(0u128, |a, f| a.saturating_add(*f)) / FEE_BLOCKS as u128;
        Some((average(&fees[..FEE_BLOCKS]), average(&fees[1..])))
    }

    pub fn clear(&mut self) {
        self.recent.clear();
    }
}

/// An alert a run of blocks raised: its event.
pub type Alert = Event;

fn wei(b: &crate::types::BaseUnits) -> U256 {
    b.as_str().parse().unwrap_or(U256::MAX)
}

/// `lowFee` for each wallet whose threshold the average crossed downward at `block`.
pub fn low_fee(
    chain: &Coin,
    alerts: &[(WalletId, FeeAlerts)],
    block: &BlockHead,
    (before, now): (u128, u128),
) -> Vec<Alert> {
    let (before, now) = (U256::from(before), U256::from(now));
    alerts
        .iter()
        .filter_map(|(w, a)| Some((w, a.low_fee.as_ref()?)))
        .filter(|(_, t)| before >= wei(t) && now < wei(t))
        .map(|(w, t)| {
            Event::LowFee(LowFeeEvent {
                coin: chain.clone(),
                wallet_id: w.clone(),
                height: block.height,
                average_base_fee: now.to_string(),
                threshold: t.as_str().to_string(),
                block_hash: block.hash.clone(),
            })
        })
        .collect()
}

/// The wallets with a balance alert whose fee address a transaction of `block` touches.
pub fn fee_address_touched(
    alerts: &[(WalletId, FeeAlerts)],
    book: &AddressBook,
    block: &NodeBlock,
    into: &mut BTreeSet<WalletId>,
) {
    for (w, a) in alerts {
        if a.low_fee_address_balance.is_none() {
            continue;
        }
        let Some(fee) = book.fee_address(w) else { continue };
        if block.txs.iter().any(|tx| tx.touched().contains(fee)) {
            into.insert(w.clone());
        }
    }
}

/// `lowFeeAddressBalance` for each of `touched` whose fee address held at least its threshold
/// below `first` and less at `last` (a run of blocks `first..=last.height`).
pub async fn low_balances(
    node: &dyn ChainNode,
    chain: &Coin,
    alerts: &[(WalletId, FeeAlerts)],
    book: &AddressBook,
    touched: &BTreeSet<WalletId>,
    first: u64,
    last: &BlockHead,
) -> Result<Vec<Alert>, NodeError> {
    let mut out = Vec::new();
    for (w, a) in alerts.iter().filter(|(w, _)| touched.contains(w)) {
        let (Some(t), Some(fee)) = (a.low_fee_address_balance.as_ref(), book.fee_address(w)) else {
            continue;
        };
        let before = node.balance(*fee, Some(first.saturating_sub(1))).await?;
        let now = node.balance(*fee, Some(last.height)).await?;
        if before >= wei(t) && now < wei(t) {
            out.push(Event::LowFeeAddressBalance(LowFeeBalanceEvent {
                coin: chain.clone(),
                wallet_id: w.clone(),
                height: last.height,
                address: checksummed_eth_address(fee),
                balance: now.to_string(),
                threshold: t.as_str().to_string(),
                block_hash: last.hash.clone(),
            }));
        }
    }
    Ok(out)
}
