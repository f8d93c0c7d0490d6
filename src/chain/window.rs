//! The transfers a new block can still change: live ones (unconfirmed, confirmed) within
//! `max(confirmations, reorg_depth)` blocks, whose confirmations move on, and removed ones within
//! `reorg_depth`, which a later block may replace, and pending ones (seen in the node's pool),
//! which a block includes or replaces. Loaded from the store at each round's start,
//! then kept in memory by the watcher, the chain's one writer while it holds the lease: a block
//! then costs no read of them.

use std::collections::BTreeMap;

use super::node::NodeBlock;
use crate::{
    model::chain::{Transfer, TransferState},
    store::{DynStore, StoreResult},
    types::checksummed_eth_address,
};

#[derive(Default)]
pub struct Window {
    live: BTreeMap<u64, Vec<Transfer>>,
    removed: Vec<Transfer>,
    /// In the node's pending pool when last seen (no block yet).
    pending: Vec<Transfer>,
}

impl Window {
    /// Live transfers at `live_from` and above, removed ones at `removed_from` and above.
    pub async fn load(store: &DynStore, chain: &str, live_from: u64, removed_from: u64) -> StoreResult<Self> {
        let mut live: BTreeMap<u64, Vec<Transfer>> = BTreeMap::new();
        let mut pending = Vec::new();
        for t in store.live_transfers(chain, live_from).await? {
            if t.block_hash.is_empty() {
                pending.push(t);
            } else {
                live.entry(t.height).or_default().push(t);
            }
        }
        Ok(Self { live, removed: store.removed_transfers(chain, removed_from).await?, pending })
    }

    /// The transfers waiting in the node's pool.
    pub fn pending(&self) -> &[Transfer] {
        &self.pending
    }

    /// Removed transfers a later block may still replace.
    pub fn removed(&self) -> &[Transfer] {
        &self.removed
    }

    /// Whether a transfer of transaction `txid` is pending or live in a block.
    pub fn holds_tx(&self, txid: &str) -> bool {
        self.pending.iter().any(|t| t.txid == txid) || self.live.values().flatten().any(|t| t.txid == txid)
    }

    /// Whether a transfer with this id is pending or live in a block.
    pub fn holds(&self, id: &str) -> bool {
        self.pending.iter().any(|t| t.id == id) || self.live.values().flatten().any(|t| t.id == id)
    }

    /// Live transfers below `height`, lowest first.
    fn live_below(&self, height: u64) -> impl Iterator<Item = &Transfer> {
        self.live.range(..height).flat_map(|(_, ts)| ts)
    }

    /// What the block at `height` changes: the live transfers below it that reach
    /// `confirmed_at` with it, removed and pending ones that a transaction in it conflicts with
    /// (`conflict`: `Some(false)` when another transaction replaces it, `Some(true)` when its
    /// own transaction is in the block yet moved nothing, so it is removed), and every live
    /// transfer with the confirmations it has now (`found` at 1), for the counts wallet
    /// webhooks wait for. `found` are the block's own transfers, already in their state.
    pub fn advance(
        &self,
        height: u64,
        found: &[Transfer],
        confirmed_at: u64,
        conflict: impl Fn(&Transfer) -> Option<bool>,
    ) -> (Vec<Transfer>, Vec<(Transfer, u64)>) {
        let mut changed = Vec::new();
        let mut counts: Vec<(Transfer, u64)> = found.iter().map(|t| (t.clone(), 1)).collect();
        for t in self.live_below(height) {
            if found.iter().any(|f| f.id == t.id) {
                continue;
            }
            let mut t = t.clone();
            let c = height - t.height + 1;
            t.confirmations = c;
            if t.state == TransferState::Unconfirmed && c >= confirmed_at {
                t.state = TransferState::Confirmed;
                changed.push(t.clone());
            }
            counts.push((t, c));
        }
        for waiting in self.removed.iter().chain(&self.pending) {
            let Some(mined) = conflict(waiting) else { continue };
            if mined && found.iter().any(|f| f.id == waiting.id) {
                continue;
            }
            // A removed transfer mined again would be among `found`; its own transaction failing
            // moves nothing.
            let mut t = waiting.clone();
            t.state = if mined { TransferState::Removed } else { TransferState::Replaced };
            if t.state != waiting.state {
                changed.push(t);
            }
        }
        (changed, counts)
    }

    /// The Ethereum rule for [`Self::advance`]: a transaction of `block` with the transfer's
    /// sender and nonce conflicts with it; mined when it is the transfer's own.
    pub fn same_nonce(block: &NodeBlock) -> impl Fn(&Transfer) -> Option<bool> + '_ {
        |waiting| {
            let tx = block.txs.iter().find(|tx| {
                tx.nonce == waiting.nonce && checksummed_eth_address(&tx.from) == waiting.sender
            })?;
            Some(tx.hash.to_string() == waiting.txid)
        }
    }

    /// Takes in what a block wrote, then forgets what fell out of the window.
    pub fn apply(&mut self, written: &[Transfer], live_from: u64, removed_from: u64) {
        for t in written {
            for ts in self.live.values_mut() {
                ts.retain(|o| o.id != t.id);
            }
            self.removed.retain(|o| o.id != t.id);
            self.pending.retain(|o| o.id != t.id);
            match t.state {
                TransferState::Unconfirmed if t.block_hash.is_empty() => self.pending.push(t.clone()),
                TransferState::Unconfirmed | TransferState::Confirmed => {
                    self.live.entry(t.height).or_default().push(t.clone())
                }
                TransferState::Removed if !t.block_hash.is_empty() => self.removed.push(t.clone()),
                TransferState::Removed => {}
                TransferState::Replaced => {}
            }
        }
        self.live = self.live.split_off(&live_from);
        self.live.retain(|_, ts| !ts.is_empty());
        self.removed.retain(|t| t.height >= removed_from);
    }
}
