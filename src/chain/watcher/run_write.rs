//! How a run of blocks reaches the store and the receivers: its transfers, balances, blocks,
//! checkpoint and events in one transaction, then the events to the engine (docs/chains.md).

use super::{Run, WatchError, Watcher, STATE_WINDOW};
use crate::{
    chain::{alerts, announce, announce::Batch},
    model::chain::{Appearance, Transfer, TransferState},
    store::BlockWrite,
};

impl Watcher {
    /// Writes a run's transfers, balances, blocks and checkpoint with its events, in one
    /// transaction: a receiver told of a transfer finds it through the API, and a crash before
    /// the commit replays the run, whose writes are the same and whose events then have the
    /// same ids; a crash after it leaves nothing that an event would still have to tell.
    pub(super) async fn write(&mut self, mut run: Run, head: u64) -> Result<(), WatchError> {
        let (candidates, alerts) = (std::mem::take(&mut run.appeared), std::mem::take(&mut run.alerts));
        let Some(last) = run.heads.last() else { return Ok(()) };
        let appeared = self.first_appearances(candidates).await?;
        let near_head = head.saturating_sub(last.height) < STATE_WINDOW;
        let ((balances, token_balances), due) =
            self.run_balances(&run.written, last.height, near_head).await?;
        let batch = self.announce(&run, alerts, &appeared, head).await?;
        let write = BlockWrite {
            chain: self.chain.as_str(),
            heads: &run.heads,
            transfers: &run.written,
            appeared: &appeared,
            keep_from: last.height.saturating_sub(self.config.reorg_depth),
            balances: &balances,
            token_balances: &token_balances,
            stale: &due,
            balances_read: near_head,
            utxo: None,
            events: &batch.events,
        };
        let recorded = self.svc.store.record_blocks(write).await?;
        batch.committed(&self.svc, &recorded).await;
        let blocks = u64::try_from(run.heads.len()).unwrap_or(0);
        self.svc.metrics.chain.blocks.get_or_create(&self.labels()).inc_by(blocks);
        Ok(())
    }

    /// A run's events: its transfers, its alerts (`raised`), first appearances and blocks.
    async fn announce(
        &self,
        run: &Run,
        mut raised: Vec<alerts::Alert>,
        appeared: &[Appearance],
        head: u64,
    ) -> Result<Batch, WatchError> {
        let mut batch = Batch::default();
        let Some(last) = run.heads.last() else { return Ok(batch) };
        let entered: Vec<Transfer> = run
            .written
            .iter()
            .filter(|t| t.state != TransferState::Unconfirmed || !run.quiet.contains(&t.id))
            .cloned()
            .collect();
        batch.extend(announce::block_transfers(&self.svc, &entered, &run.found, &run.counts).await?);
        if head.saturating_sub(last.height) < STATE_WINDOW && !run.fee_touched.is_empty() {
            let first = run.heads.first().map_or(last.height, |h| h.height);
            let (chain, book) = (&self.chain, &self.book);
            let low =
                alerts::low_balances(&*self.node, chain, &self.alerts, book, &run.fee_touched, first, last);
            raised.extend(low.await?);
        }
        raised.extend(announce::appearances(&self.chain, appeared));
        batch.extend(announce::all(&self.svc, raised).await?);
        for (i, block) in run.heads.iter().enumerate() {
            let depth = self.config.reorg_depth;
            batch.extend(announce::blocks(&self.svc, &self.chain, depth, block, &run.heads[..i]).await?);
        }
        Ok(batch)
    }
}
