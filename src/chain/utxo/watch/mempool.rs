//! The node's mempool (docs/chains.md#utxo-chains): polled at the head with `getrawmempool`,
//! then `getrawtransaction` for ids not seen before (at most `pool_max_new` a round; the
//! answer itself capped at `pool_max_bytes`). A transaction paying or spending a watched
//! wallet is an `unconfirmed` transfer at height 999999999, announced unless it signals
//! replace-by-fee (§6). One that leaves the mempool unmined is `replaced` when another
//! transaction spends one of its inputs, `removed` otherwise.

use std::collections::{BTreeSet, HashMap, HashSet};

use futures_util::StreamExt;

use super::super::effect::effects;
use super::super::legs::{transfer_of, Placement};
use super::super::node::{OutPoint, UtxoTx};
use super::set::{drop_pending, take_effect};
use super::UtxoWatcher;
use crate::chain::{announce, announce::Batch, follow::WatchError, window::Window};
use crate::model::chain::{Transfer, TransferState, PENDING_HEIGHT};
use crate::store::UtxoChanges;

/// Transactions fetched from the node at once.
const FETCH_CONCURRENCY: usize = 8;

/// The mempool's transactions as last read: their inputs, to tell a replacement.
#[derive(Default)]
pub struct Pool {
    known: HashMap<String, Vec<OutPoint>>,
}

impl Pool {
    pub fn clear(&mut self) {
        self.known.clear();
    }

    pub fn forget(&mut self, txid: &str) {
        self.known.remove(txid);
    }

    /// Known transactions that spend an outpoint `spent_by` says another transaction spends.
    pub fn conflicting(&self, spent_by: &HashMap<OutPoint, String>) -> Vec<String> {
        let hit = |txid: &String, inputs: &Vec<OutPoint>| {
            inputs.iter().any(|o| spent_by.get(o).is_some_and(|by| by != txid))
        };
        self.known.iter().filter(|(t, i)| hit(t, i)).map(|(t, _)| t.clone()).collect()
    }

    /// Whether a known transaction other than `txid` spends one of `inputs`.
    fn spends_any(&self, inputs: &[OutPoint], txid: &str) -> bool {
        self.known.iter().any(|(t, i)| t != txid && i.iter().any(|o| inputs.contains(o)))
    }
}

/// `txs` with each one after those of them it spends from (the mempool holds chains of
/// unconfirmed transactions; the node's order is by id).
fn parents_first(mut txs: Vec<UtxoTx>) -> Vec<UtxoTx> {
    let mut out: Vec<UtxoTx> = Vec::with_capacity(txs.len());
    while !txs.is_empty() {
        let waiting: HashSet<String> = txs.iter().map(|t| t.txid.clone()).collect();
        let (ready, rest): (Vec<UtxoTx>, Vec<UtxoTx>) = txs.into_iter().partition(|t| {
            !t.inputs
                .iter()
                .filter_map(|i| i.prev.as_ref())
                .any(|p| p.txid != t.txid && waiting.contains(&p.txid))
        });
        if ready.is_empty() {
            // A cycle cannot be; a lying node's answer is taken as it came.
            out.extend(rest);
            break;
        }
        out.extend(ready);
        txs = rest;
    }
    out
}

/// What one look at the mempool changes.
#[derive(Default)]
struct Look {
    written: Vec<Transfer>,
    quiet: BTreeSet<String>,
    changes: UtxoChanges,
}

impl UtxoWatcher {
    /// Takes in the mempool's changes at tip `tip` (`tip_hash`): transfers, outputs and
    /// balances (no checkpoint) with their events, in one transaction.
    pub(super) async fn mempool(
        &mut self,
        window: &mut Window,
        tip: u64,
        tip_hash: &str,
    ) -> Result<(), WatchError> {
        let ids: HashSet<String> = match self.node.mempool().await {
            Ok(ids) => ids.into_iter().collect(),
            Err(e) => {
                self.svc.metrics.chain.pool_dropped.get_or_create(&self.labels()).inc();
                tracing::warn!(chain = self.chain.as_str(), error = %e, "the node's mempool was not read this round");
                return Ok(());
            }
        };
        self.pool.known.retain(|t, _| ids.contains(t));
        let mut look = Look::default();
        self.take_new(window, &ids, &mut look).await?;
        // What left the mempool may be in a block not read yet: only judged at the node's tip.
        if self.node.chain_info().await?.bestblockhash == tip_hash {
            self.take_gone(window, &ids, &mut look);
        }
        if look.written.is_empty() && self.due.is_empty() {
            return Ok(());
        }
        let mut batch = Batch::default();
        for t in look.written.iter().filter(|t| !look.quiet.contains(&t.id)) {
            let after =
                window.removed().iter().find(|r| r.id == t.id && t.state == TransferState::Unconfirmed);
            match after {
                Some(r) => batch.extend(announce::transfer_again(&self.svc, t, &r.block_hash).await?),
                None => batch.extend(announce::transfer(&self.svc, t).await?),
            }
        }
        self.record(&[], &look.written, &[], look.changes, tip, batch).await?;
        let (live_from, removed_from) = self.window_from(tip + 1);
        window.apply(&look.written, live_from, removed_from);
        Ok(())
    }

    /// Reads the transactions new to the mempool (at most `pool_max_new`) and takes in those
    /// that touch a watched wallet.
    async fn take_new(
        &mut self,
        window: &Window,
        ids: &HashSet<String>,
        look: &mut Look,
    ) -> Result<(), WatchError> {
        let new: Vec<String> = ids.iter().filter(|t| !self.pool.known.contains_key(*t)).cloned().collect();
        let max_new = usize::try_from(self.config.pool_max_new).unwrap_or(usize::MAX);
        let deferred = u64::try_from(new.len().saturating_sub(max_new)).unwrap_or(0);
        self.svc.metrics.chain.pool_deferred.get_or_create(&self.labels()).inc_by(deferred);
        let node = self.node.clone();
        // A transaction gone meanwhile (mined, replaced) is not an error: it is read next round.
        let fetched: Vec<UtxoTx> = futures_util::stream::iter(new.into_iter().take(max_new))
            .map(|id| {
                let node = node.clone();
                async move { node.transaction(&id).await.ok() }
            })
            .buffer_unordered(FETCH_CONCURRENCY)
            .filter_map(|t| async move { t })
            .collect()
            .await;
        let at = Placement {
            height: PENDING_HEIGHT,
            block_hash: String::new(),
            date: self.svc.store.clock().now(),
        };
        let unspent = self.unspent.get_or_insert_with(HashMap::new);
        for tx in parents_first(fetched) {
            self.pool
                .known
                .insert(tx.txid.clone(), tx.inputs.iter().filter_map(|i| i.prev.clone()).collect());
            if window.holds_tx(&tx.txid) {
                continue;
            }
            for e in effects(&tx, self.book.scripts(), unspent)? {
                let mut t = transfer_of(&self.chain, &tx, &e, self.book.scripts(), self.params, &at);
                t.confirmations = 0;
                if tx.signals_rbf() {
                    look.quiet.insert(t.id.clone());
                }
                take_effect(unspent, &mut look.changes, &self.chain, &tx.txid, e, &at);
                look.written.push(t);
            }
        }
        Ok(())
    }

    /// Pending transfers whose transaction left the mempool unmined: `replaced` when another
    /// transaction there spends one of its inputs, `removed` otherwise.
    fn take_gone(&mut self, window: &Window, ids: &HashSet<String>, look: &mut Look) {
        let unspent = self.unspent.get_or_insert_with(HashMap::new);
        for t in window.pending().iter().filter(|t| !ids.contains(&t.txid)) {
            let inputs: Vec<OutPoint> = t
                .utxo
                .iter()
                .flat_map(|u| &u.inputs)
                .filter_map(|leg| {
                    let (txid, vout) = leg.id.rsplit_once(':')?;
                    Some(OutPoint { txid: txid.to_string(), vout: vout.parse().ok()? })
                })
                .collect();
            let mut t = t.clone();
            t.state = match self.pool.spends_any(&inputs, &t.txid) {
                true => TransferState::Replaced,
                false => TransferState::Removed,
            };
            if t.utxo.as_ref().is_some_and(|u| u.rbf) {
                look.quiet.insert(t.id.clone());
            }
            if !look.changes.dropped.contains(&t.txid) {
                look.changes.dropped.push(t.txid.clone());
                drop_pending(unspent, &t.txid);
            }
            look.written.push(t);
        }
    }
}
