//! Reading ahead: each block with what the watcher will ask about it (the receipts of its
//! watched transactions, the configured tokens' `Transfer` logs), read for up to `read_ahead`
//! blocks beyond the one being processed and handed over in height order. Processing a block
//! (the store, the outbox) then overlaps the node's answers for the next ones.
//!
//! A reorg while blocks are read ahead is caught as before: each block's parent hash is checked
//! against the one processed before it, and what was read beyond is dropped.

use std::{collections::HashMap, sync::Arc};

use alloy_primitives::{Address, B256, U256};
use futures_util::{StreamExt, TryStreamExt};
use tokio::sync::Semaphore;

use super::ahead::Ahead;
use super::node::{ChainNode, NodeBlock, NodeError, TokenLog};
use crate::types::WalletId;

/// Reads of a block's logs before an empty answer that its bloom filter contradicts is
/// believed.
pub const LOG_READS: u32 = 3;
/// Most receipts asked in one JSON-RPC batch: a block's watched transactions in a few requests
/// rather than one each (an exchange's wallet may have hundreds in one block).
pub const RECEIPTS_PER_BATCH: usize = 64;
/// The pause before the second read of a block's logs (twice that before the third).
const LOG_REREAD_PAUSE: std::time::Duration = std::time::Duration::from_millis(250);

/// The configured contracts whose watched `Transfer` logs `bloom` allows: the contract, the
/// event's signature and a watched address as a topic must all be in it. An empty answer
/// proves no such log is in the block.
fn may_hold_watched(
    bloom: &alloy_primitives::Bloom,
    contracts: &[Address],
    owners: &HashMap<Address, WalletId>,
) -> Vec<Address> {
    use alloy_primitives::BloomInput;
    use alloy_sol_types::SolEvent;
    let signature = super::node::Transfer::SIGNATURE_HASH;
    if !bloom.contains_input(BloomInput::Raw(signature.as_slice())) {
        return Vec::new();
    }
    let watched_topic = owners
        .keys()
        .any(|a| bloom.contains_input(BloomInput::Raw(B256::left_padding_from(a.as_slice()).as_slice())));
    if !watched_topic {
        return Vec::new();
    }
    contracts.iter().copied().filter(|c| bloom.contains_input(BloomInput::Raw(c.as_slice()))).collect()
}

/// A block as read ahead.
pub struct Fetched {
    pub block: NodeBlock,
    /// Success and fee (wei) of each transaction touching a watched address.
    pub outcomes: HashMap<B256, (bool, U256)>,
    /// The block's `Transfer` logs of the configured token contracts.
    pub logs: Vec<TokenLog>,
}

/// What reading ahead needs; cheap to clone into each block's read.
#[derive(Clone)]
pub struct Reader {
    pub node: Arc<dyn ChainNode>,
    /// The watched addresses (the address book at the round's start).
    pub owners: Arc<HashMap<Address, WalletId>>,
    pub contracts: Arc<[Address]>,
    /// One permit per node request in flight: `read_ahead` in all.
    pub permits: Arc<Semaphore>,
    pub read_ahead: usize,
}

impl Reader {
    /// Reads blocks `from..=to` in a task of their own, so that they arrive while the watcher
    /// writes: at most `read_ahead` requests in flight and `read_ahead` blocks waiting. A
    /// `None` (the node's head moved back) or an error ends the reading.
    pub fn spawn(self, from: u64, to: u64) -> Ahead<Result<Option<Fetched>, NodeError>> {
        let read_ahead = self.read_ahead.max(1);
        let blocks =
            futures_util::stream::iter(from..=to).map(move |n| self.clone().block(n)).buffered(read_ahead);
        Ahead::spawn(blocks, read_ahead, |b| !matches!(b, Ok(Some(_))))
    }

    async fn block(self, height: u64) -> Result<Option<Fetched>, NodeError> {
        let block = {
            let _permit = self.permit().await?;
            self.node.block(height).await?
        };
        let Some(block) = block else { return Ok(None) };
        let watched: Vec<B256> = block
            .txs
            .iter()
            .filter(|tx| tx.touched().iter().any(|a| self.owners.contains_key(a)))
            .map(|tx| tx.hash)
            .collect();
        let hash: B256 =
            block.head.hash.parse().map_err(|_| NodeError::new("a block hash is not 32 bytes"))?;
        // The receipts in batches of RECEIPTS_PER_BATCH, each batch one of the node requests
        // in flight.
        let outcomes = futures_util::stream::iter(watched.chunks(RECEIPTS_PER_BATCH).map(<[B256]>::to_vec))
            .map(|txs| {
                let reader = self.clone();
                async move {
                    let _permit = reader.permit().await?;
                    let outcomes = reader.node.outcomes(&txs, hash).await?;
                    Ok::<_, NodeError>(futures_util::stream::iter(txs.into_iter().zip(outcomes).map(Ok)))
                }
            })
            .buffer_unordered(self.read_ahead.max(1))
            .try_flatten()
            .try_collect::<HashMap<_, _>>();
        let logs = self.logs(&block, hash);
        let (outcomes, logs) = futures_util::try_join!(outcomes, logs)?;
        Ok(Some(Fetched { block, outcomes, logs }))
    }

    /// The block's `Transfer` logs of the configured contracts. When its bloom filter says a
    /// watched address may be in one but the node gives none, the node is asked again (a
    /// load-balanced node may answer before it has the block's logs); after
    /// [`LOG_READS`] answers that agree, the bloom's false positive is believed.
    async fn logs(&self, block: &NodeBlock, hash: B256) -> Result<Vec<TokenLog>, NodeError> {
        if self.contracts.is_empty() || self.owners.is_empty() {
            return Ok(Vec::new());
        }
        let may_hold = may_hold_watched(&block.logs_bloom, &self.contracts, &self.owners);
        if may_hold.is_empty() {
            return Ok(Vec::new());
        }
        let mut reads = 0;
        loop {
            let logs = {
                let _permit = self.permit().await?;
                self.node.token_logs(hash, &may_hold).await?
            };
            reads += 1;
            let watched =
                logs.iter().any(|l| self.owners.contains_key(&l.from) || self.owners.contains_key(&l.to));
            if watched || reads >= LOG_READS {
                return Ok(logs);
            }
            tokio::time::sleep(LOG_REREAD_PAUSE * reads).await;
        }
    }

    async fn permit(&self) -> Result<tokio::sync::SemaphorePermit<'_>, NodeError> {
        self.permits.acquire().await.map_err(|_| NodeError::new("the watcher is stopping"))
    }
}
