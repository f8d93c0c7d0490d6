//! `lowFee` on a UTXO chain (§6.1, docs/chains.md#utxo-chains): the node's fee estimate for
//! confirmation within [`FEE_TARGET`] blocks (`estimatesmartfee`), read once a run at the head.
//! A wallet whose threshold (base units per 1000 virtual bytes) the estimate crosses downward
//! hears of it once, the event's id carrying the block.

use super::UtxoWatcher;
use crate::chain::follow::WatchError;
use crate::model::chain::BlockHead;
use crate::webhooks::event::{Event, LowFeeEvent};

/// Blocks within which the estimate is for confirmation.
pub const FEE_TARGET: u64 = 2;

impl UtxoWatcher {
    /// The `lowFee` events the estimate at block `last` raises. The first estimate after a
    /// start (or while the node has too little data) only sets the mark.
    pub(super) async fn low_fee(&mut self, last: &BlockHead) -> Result<Vec<Event>, WatchError> {
        let Some(now) = self.node.fee_rate(FEE_TARGET).await? else { return Ok(Vec::new()) };
        let Some(before) = self.fee_rate.replace(now) else { return Ok(Vec::new()) };
        let alerts = self.svc.store.fee_alerts(self.chain.as_str()).await?;
        Ok(alerts
            .iter()
            .filter_map(|(wallet, a)| {
                let threshold: u64 = a.low_fee.as_ref()?.as_str().parse().ok()?;
                (before >= threshold && now < threshold).then(|| {
                    Event::LowFee(LowFeeEvent {
                        coin: self.chain.clone(),
                        wallet_id: wallet.clone(),
                        height: last.height,
                        average_base_fee: now.to_string(),
                        threshold: threshold.to_string(),
                        block_hash: last.hash.clone(),
                    })
                })
            })
            .collect())
    }
}
