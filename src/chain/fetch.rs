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
use tokio::sync::{mpsc, Semaphore};

use super::node::{ChainNode, NodeBlock, NodeError, TokenLog};
use crate::types::WalletId;

/// A block as read ahead.
pub struct Fetched {
    pub block: NodeBlock,
    /// Success and fee (wei) of each transaction touching a watched address; `None`: no receipt.
    pub outcomes: HashMap<B256, Option<(bool, U256)>>,
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

/// Blocks read ahead by their own task, in height order; the task stops when this is dropped.
pub struct Ahead {
    rx: mpsc::Receiver<Result<Option<Fetched>, NodeError>>,
    task: tokio::task::JoinHandle<()>,
}

impl Ahead {
    /// The blocks read so far, lowest first: waits for one, then takes those already read, up to
    /// `max`. Empty when every block was handed over.
    pub async fn next_run(&mut self, max: usize) -> Vec<Result<Option<Fetched>, NodeError>> {
        let Some(first) = self.rx.recv().await else { return Vec::new() };
        let mut run = vec![first];
        while run.len() < max {
            match self.rx.try_recv() {
                Ok(b) => run.push(b),
                Err(_) => break,
            }
        }
        run
    }
}

impl Drop for Ahead {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl Reader {
    /// Reads blocks `from..=to` in a task of their own, so that they arrive while the watcher
    /// writes: at most `read_ahead` requests in flight and `read_ahead` blocks waiting. A
    /// `None` (the node's head moved back) or an error ends the reading.
    pub fn spawn(self, from: u64, to: u64) -> Ahead {
        let read_ahead = self.read_ahead.max(1);
        let (tx, rx) = mpsc::channel(read_ahead);
        let blocks =
            futures_util::stream::iter(from..=to).map(move |n| self.clone().block(n)).buffered(read_ahead);
        let task = tokio::spawn(async move {
            futures_util::pin_mut!(blocks);
            while let Some(b) = blocks.next().await {
                let last = !matches!(b, Ok(Some(_)));
                if tx.send(b).await.is_err() || last {
                    return;
                }
            }
        });
        Ahead { rx, task }
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
        let outcomes = futures_util::stream::iter(watched)
            .map(|tx| {
                let reader = self.clone();
                async move {
                    let _permit = reader.permit().await?;
                    Ok::<_, NodeError>((tx, reader.node.outcome(tx).await?))
                }
            })
            .buffer_unordered(self.read_ahead.max(1))
            .try_collect::<HashMap<_, _>>();
        let logs = async {
            if self.contracts.is_empty() || self.owners.is_empty() {
                return Ok(Vec::new());
            }
            let hash: B256 =
                block.head.hash.parse().map_err(|_| NodeError("a block hash is not 32 bytes".into()))?;
            let _permit = self.permit().await?;
            self.node.token_logs(hash, &self.contracts).await
        };
        let (outcomes, logs) = futures_util::try_join!(outcomes, logs)?;
        Ok(Some(Fetched { block, outcomes, logs }))
    }

    async fn permit(&self) -> Result<tokio::sync::SemaphorePermit<'_>, NodeError> {
        self.permits.acquire().await.map_err(|_| NodeError("the watcher is stopping".into()))
    }
}
