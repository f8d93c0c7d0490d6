//! How a run of blocks reaches the store and the receivers: its transfers and balances first,
//! then its events, then its blocks and the checkpoint (docs/chains.md).

use super::{Run, WatchError, Watcher, STATE_WINDOW};
use crate::{
    chain::{alerts, announce},
    model::chain::{Appearance, Transfer, TransferState},
    store::BlockWrite,
};

impl Watcher {
    /// Writes a run's transfers and balances, then emits its events, then records its blocks
    /// and the checkpoint: a receiver told of a transfer finds it through the API, and a crash
    /// before the checkpoint replays the run, whose writes are the same and whose events then
    /// have the same ids.
    pub(super) async fn write(&mut self, mut run: Run, head: u64) -> Result<(), WatchError> {
        let (candidates, alerts) = (std::mem::take(&mut run.appeared), std::mem::take(&mut run.alerts));
        let Some(last) = run.heads.last() else { return Ok(()) };
        let appeared = self.first_appearances(candidates).await?;
        let near_head = head.saturating_sub(last.height) < STATE_WINDOW;
        let ((balances, token_balances), due) =
            self.run_balances(&run.written, last.height, near_head).await?;
        let effects = BlockWrite {
            chain: self.chain.as_str(),
            heads: &[],
            transfers: &run.written,
            appeared: &[],
            keep_from: 0,
            balances: &balances,
            token_balances: &token_balances,
            stale: &due,
            balances_read: near_head,
        };
        self.svc.store.record_blocks(effects).await?;
        self.announce(&run, alerts, &appeared, head).await?;
        let checkpoint = BlockWrite {
            chain: self.chain.as_str(),
            heads: &run.heads,
            transfers: &[],
            appeared: &appeared,
            keep_from: last.height.saturating_sub(self.config.reorg_depth),
            balances: &[],
            token_balances: &[],
            stale: &[],
            balances_read: false,
        };
        self.svc.store.record_blocks(checkpoint).await?;
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
    ) -> Result<(), WatchError> {
        let Some(last) = run.heads.last() else { return Ok(()) };
        let entered: Vec<Transfer> = run
            .written
            .iter()
            .filter(|t| t.state != TransferState::Unconfirmed || !run.quiet.contains(&t.id))
            .cloned()
            .collect();
        announce::block_transfers(&self.svc, &entered, &run.found, &run.counts).await?;
        if head.saturating_sub(last.height) < STATE_WINDOW && !run.fee_touched.is_empty() {
            let first = run.heads.first().map_or(last.height, |h| h.height);
            let (chain, book) = (&self.chain, &self.book);
            let low =
                alerts::low_balances(&*self.node, chain, &self.alerts, book, &run.fee_touched, first, last);
            raised.extend(low.await?);
        }
        raised.extend(announce::appearances(&self.chain, appeared));
        announce::all(&self.svc, raised).await?;
        for (i, block) in run.heads.iter().enumerate() {
            announce::blocks(&self.svc, &self.chain, self.config.reorg_depth, block, &run.heads[..i]).await?;
        }
        Ok(())
    }
}
