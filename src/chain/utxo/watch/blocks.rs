//! What a UTXO block does, and how a run of blocks reaches the store: its transfers, the
//! watched outputs it creates and spends, the balances they give, its header and checkpoint,
//! and its events, in one transaction (docs/chains.md#utxo-chains).

use std::collections::{BTreeSet, HashMap};

use super::super::effect::effects;
use super::super::legs::{transfer_of, Placement};
use super::super::node::{OutPoint, UtxoBlock};
use super::set::{drop_pending, take_effect};
use super::UtxoWatcher;
use crate::chain::{announce, announce::Batch, follow::WatchError, window::Window};
use crate::model::chain::{Appearance, BlockHead, Transfer, TransferState};
use crate::store::UtxoChanges;

/// What a run of blocks read together changes, in block order.
#[derive(Default)]
pub struct UtxoRun {
    pub heads: Vec<BlockHead>,
    /// The blocks' own transfers.
    found: Vec<Transfer>,
    /// Live transfers with the confirmations each block gave them.
    counts: Vec<(Transfer, u64)>,
    /// Transfers found or whose state changed; a later one wins.
    written: Vec<Transfer>,
    /// (transfer id, state) entered without an event (§6: no `unconfirmed` for a transaction
    /// first seen in a block; nothing for an RBF transaction never announced).
    quiet: BTreeSet<(String, &'static str)>,
    appeared: Vec<Appearance>,
    changes: UtxoChanges,
}

/// Whether `t`'s transaction spends an outpoint that `spent` says another transaction spends.
fn conflicts(t: &Transfer, spent: &HashMap<OutPoint, String>) -> bool {
    let inputs = t.utxo.as_ref().map(|u| u.inputs.as_slice()).unwrap_or_default();
    inputs.iter().any(|leg| {
        let Some((txid, vout)) = leg.id.rsplit_once(':') else { return false };
        let Ok(vout) = vout.parse() else { return false };
        spent.get(&OutPoint { txid: txid.to_string(), vout }).is_some_and(|by| by != &t.txid)
    })
}

impl UtxoWatcher {
    /// Finds the block's transfers, moves the set and older transfers on, in memory: `run`
    /// gathers what its blocks change, for [`Self::write`].
    pub(super) fn find(
        &mut self,
        block: &UtxoBlock,
        window: &mut Window,
        run: &mut UtxoRun,
    ) -> Result<(), WatchError> {
        let height = block.height;
        let at = Placement { height, block_hash: block.hash.clone(), date: block.time };
        let mut found = Vec::new();
        let mut spent_by: HashMap<OutPoint, String> = HashMap::new();
        let unspent = self.unspent.get_or_insert_with(HashMap::new);
        for tx in &block.txs {
            for prev in tx.inputs.iter().filter_map(|i| i.prev.clone()) {
                spent_by.insert(prev, tx.txid.clone());
            }
            for e in effects(tx, self.book.scripts(), unspent)? {
                found.push(transfer_of(&self.chain, tx, &e, self.book.scripts(), self.params, &at));
                for leg in &e.received {
                    if !run.appeared.iter().any(|p| p.address == leg.address) {
                        run.appeared.push(Appearance {
                            address: leg.address.clone(),
                            base: false,
                            wallet_id: e.wallet.clone(),
                            height,
                            block_hash: block.hash.clone(),
                            txid: tx.txid.clone(),
                        });
                    }
                }
                take_effect(unspent, &mut run.changes, &self.chain, &tx.txid, e, &at);
            }
            self.pool.forget(&tx.txid);
        }
        // Mempool transactions a block transaction conflicts with are gone for good.
        for txid in self.pool.conflicting(&spent_by) {
            run.changes.dropped.push(txid.clone());
            drop_pending(unspent, &txid);
            self.pool.forget(&txid);
        }
        let confirmed_at = self.config.confirmations;
        for t in &mut found {
            if confirmed_at <= 1 {
                t.state = TransferState::Confirmed;
            } else {
                run.quiet.insert((t.id.clone(), TransferState::Unconfirmed.as_str()));
            }
        }
        let conflict = |t: &Transfer| conflicts(t, &spent_by).then_some(false);
        let (changed, counts) = window.advance(height, &found, confirmed_at, conflict);
        for t in changed.iter().filter(|t| t.state == TransferState::Replaced) {
            if t.block_hash.is_empty() && !run.changes.dropped.contains(&t.txid) {
                run.changes.dropped.push(t.txid.clone());
                drop_pending(unspent, &t.txid);
            }
            if t.utxo.as_ref().is_some_and(|u| u.rbf) && t.block_hash.is_empty() {
                run.quiet.insert((t.id.clone(), TransferState::Replaced.as_str()));
            }
        }
        let written: Vec<Transfer> = found.iter().chain(&changed).cloned().collect();
        let (live_from, removed_from) = self.window_from(height);
        window.apply(&written, live_from, removed_from);
        run.found.extend(found);
        run.counts.extend(counts);
        run.written.extend(written);
        run.heads.push(BlockHead {
            height,
            hash: block.hash.clone(),
            parent_hash: block.parent.clone().unwrap_or_default(),
        });
        Ok(())
    }

    /// Writes a run's transfers, outputs, balances, blocks and checkpoint with its events, in
    /// one transaction; a crash before the commit replays the run with the same event ids. A
    /// run that ends at the node's head `head` also reads the fee estimate (`lowFee`).
    pub(super) async fn write(&mut self, mut run: UtxoRun, head: u64) -> Result<(), WatchError> {
        let Some(last) = run.heads.last().cloned() else { return Ok(()) };
        let appeared = crate::chain::follow::first_appearances(
            &self.svc,
            &self.chain,
            std::mem::take(&mut run.appeared),
        )
        .await?;
        let mut batch = Batch::default();
        let entered: Vec<Transfer> = run
            .written
            .iter()
            .filter(|t| !run.quiet.contains(&(t.id.clone(), t.state.as_str())))
            .cloned()
            .collect();
        batch.extend(announce::block_transfers(&self.svc, &entered, &run.found, &run.counts).await?);
        let mut raised = announce::appearances(&self.chain, &appeared);
        if last.height == head {
            raised.extend(self.low_fee(&last).await?);
        }
        batch.extend(announce::all(&self.svc, raised).await?);
        for (i, block) in run.heads.iter().enumerate() {
            let depth = self.config.reorg_depth;
            batch.extend(announce::blocks(&self.svc, &self.chain, depth, block, &run.heads[..i]).await?);
        }
        self.record(&run.heads, &run.written, &appeared, run.changes, last.height, batch).await?;
        let blocks = u64::try_from(run.heads.len()).unwrap_or(0);
        self.svc.metrics.chain.blocks.get_or_create(&self.labels()).inc_by(blocks);
        Ok(())
    }
}
