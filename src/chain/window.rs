//! The transfers a new block can still change: live ones (unconfirmed, confirmed) within
//! `max(confirmations, reorg_depth)` blocks, whose confirmations move on, and removed ones within
//! `reorg_depth`, which a later block may replace. Loaded from the store at each round's start,
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
}

impl Window {
    /// Live transfers at `live_from` and above, removed ones at `removed_from` and above.
    pub async fn load(store: &DynStore, chain: &str, live_from: u64, removed_from: u64) -> StoreResult<Self> {
        let mut live: BTreeMap<u64, Vec<Transfer>> = BTreeMap::new();
        for t in store.live_transfers(chain, live_from).await? {
            live.entry(t.height).or_default().push(t);
        }
        Ok(Self { live, removed: store.removed_transfers(chain, removed_from).await? })
    }

    /// Live transfers below `height`, lowest first.
    fn live_below(&self, height: u64) -> impl Iterator<Item = &Transfer> {
        self.live.range(..height).flat_map(|(_, ts)| ts)
    }

    /// What `block` changes: the live transfers below it that reach `confirmed_at` with it
    /// (and removed ones that a transaction of the same sender and nonce in it replaces), and
    /// every live transfer with the confirmations it has now (`found` at 1), for the counts
    /// wallet webhooks wait for. `found` are the block's own transfers, already in their state.
    pub fn advance(
        &self,
        block: &NodeBlock,
        found: &[Transfer],
        confirmed_at: u64,
    ) -> (Vec<Transfer>, Vec<(Transfer, u64)>) {
        let height = block.head.height;
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
        for orphan in &self.removed {
            let replaced = block.txs.iter().any(|tx| {
                tx.nonce == orphan.nonce
                    && checksummed_eth_address(&tx.from) == orphan.sender
                    && tx.hash.to_string() != orphan.txid
            });
            if replaced {
                let mut orphan = orphan.clone();
                orphan.state = TransferState::Replaced;
                changed.push(orphan);
            }
        }
        (changed, counts)
    }

    /// Takes in what a block wrote, then forgets what fell out of the window.
    pub fn apply(&mut self, written: &[Transfer], live_from: u64, removed_from: u64) {
        for t in written {
            for ts in self.live.values_mut() {
                ts.retain(|o| o.id != t.id);
            }
            self.removed.retain(|o| o.id != t.id);
            match t.state {
                TransferState::Unconfirmed | TransferState::Confirmed => {
                    self.live.entry(t.height).or_default().push(t.clone())
                }
                TransferState::Removed => self.removed.push(t.clone()),
                TransferState::Replaced => {}
            }
        }
        self.live = self.live.split_off(&live_from);
        self.live.retain(|_, ts| !ts.is_empty());
        self.removed.retain(|t| t.height >= removed_from);
    }
}
