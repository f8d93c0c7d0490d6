//! One chain's watcher: holds the chain's lease, follows the node's head block by block from
//! the checkpoint, detects reorgs by parent hash, and turns what it sees into transfers,
//! balances and §6 events (docs/chains.md).
//!
//! Confirmations are counted against the block being processed, not the node's head at that
//! moment, so replaying a block after a crash computes the same states and the same event ids:
//! the outbox's idempotency on `eventId` then sends nothing twice.

use std::{collections::BTreeMap, sync::Arc, time::Duration};

use alloy_primitives::{Address, I256, U256};
use serde_json::json;
use tokio::sync::watch;

use super::{
    book::AddressBook,
    node::{ChainNode, NodeBlock, NodeError},
    Chains,
};
use crate::{
    config::ChainConfig,
    error::Error,
    model::{
        audit::AuditType,
        chain::{BlockHead, Transfer, TransferEntry, TransferState},
    },
    store::BlockWrite,
    types::{Coin, WalletId},
};

/// How long a watcher's lease lasts without renewal, milliseconds: another process takes the
/// chain over this long after the holder died.
pub const LEASE_MS: i64 = 15_000;

/// What can stop a round: the node, the store, or the domain.
#[derive(Debug, thiserror::Error)]
pub enum WatchError {
    #[error(transparent)]
    Node(#[from] NodeError),
    #[error(transparent)]
    Domain(#[from] Error),
}

impl From<crate::store::StoreError> for WatchError {
    fn from(e: crate::store::StoreError) -> Self {
        WatchError::Domain(e.into())
    }
}

pub struct Watcher {
    chain: Coin,
    config: ChainConfig,
    node: Arc<dyn ChainNode>,
    svc: Chains,
    holder: String,
    book: AddressBook,
    /// Token contracts and their coins.
    tokens: BTreeMap<Address, Coin>,
    /// Wallets whose balances changed while the watcher was too far behind the head to read
    /// them: refreshed at the first block within [`STATE_WINDOW`] of the head.
    stale: std::collections::BTreeSet<WalletId>,
}

/// Balances are read at blocks within this many of the node's head: a full (non-archive) node
/// keeps the state of its last 128 blocks only, so a backfill cannot read older ones.
pub const STATE_WINDOW: u64 = 64;

impl Watcher {
    pub fn new(chain: Coin, config: ChainConfig, node: Arc<dyn ChainNode>, svc: Chains) -> Self {
        let tokens = config
            .tokens
            .iter()
            .filter_map(|t| Some((crate::types::parse_eth_address(&t.contract).ok()?, t.coin.parse().ok()?)))
            .collect();
        Self {
            chain,
            config,
            node,
            svc,
            holder: crate::ids::new_id(),
            book: AddressBook::default(),
            tokens,
            stale: Default::default(),
        }
    }

    /// Runs until `stop` turns true. Node and database faults are logged (without the node's
    /// URL) and retried with backoff from the poll interval up to 30 s.
    pub async fn run(mut self, mut stop: watch::Receiver<bool>) {
        let poll = Duration::from_millis(self.config.poll_interval_ms);
        let mut backoff = poll;
        let mut checked_chain_id = false;
        loop {
            if *stop.borrow() {
                return;
            }
            let outcome = async {
                if !checked_chain_id {
                    self.check_chain_id().await?;
                    checked_chain_id = true;
                }
                self.round().await
            }
            .await;
            let wait = match outcome {
                Ok(true) => Duration::ZERO,
                Ok(false) => {
                    backoff = poll;
                    poll
                }
                Err(e) => {
                    tracing::warn!(chain = self.chain.as_str(), error = %e, "chain watcher round failed; retrying");
                    self.svc.metrics.chain.errors.get_or_create(&self.labels()).inc();
                    backoff = (backoff * 2).min(Duration::from_secs(30));
                    backoff
                }
            };
            if !wait.is_zero() {
                tokio::select! {
                    _ = tokio::time::sleep(wait) => {}
                    _ = stop.changed() => {}
                }
            }
        }
    }

    fn labels(&self) -> crate::metrics::ChainLabels {
        crate::metrics::ChainLabels { coin: self.chain.as_str().to_string() }
    }

    async fn check_chain_id(&self) -> Result<(), WatchError> {
        let id = self.node.chain_id().await?;
        if id != self.config.chain_id {
            return Err(Error::Internal(anyhow::anyhow!(
                "chains.{}.chain_id is {} but the node answers {id}",
                self.chain.as_str(),
                self.config.chain_id
            ))
            .into());
        }
        Ok(())
    }

    /// One round: renew the lease, then read up to `batch_blocks` blocks. `Ok(true)`: more
    /// blocks are waiting (go again at once).
    async fn round(&mut self) -> Result<bool, WatchError> {
        let store = self.svc.store.clone();
        let chain = self.chain.as_str();
        let now = crate::ids::now_ms();
        if !store.take_chain_lease(chain, &self.holder, now, now + LEASE_MS).await? {
            return Ok(false);
        }
        let status = store.chain_status(chain).await?.unwrap_or_default();
        let head = self.node.head().await?;
        store.set_chain_node(chain, head, status.halted.as_deref()).await?;
        let lag = head.saturating_sub(status.height.unwrap_or(head));
        self.svc.metrics.chain.lag.get_or_create(&self.labels()).set(i64::try_from(lag).unwrap_or(i64::MAX));
        if status.halted.is_some() {
            return Ok(false);
        }
        self.book.refresh(&store, chain).await?;
        let next = match status.height {
            Some(h) => h + 1,
            None => self.config.start_block.unwrap_or(head),
        };
        let mut tip = match (status.height, status.hash) {
            (Some(height), Some(hash)) => Some(BlockHead { height, hash, parent_hash: String::new() }),
            _ => None,
        };
        let end = head.min(next.saturating_add(self.config.batch_blocks - 1));
        for n in next..=end {
            let Some(block) = self.node.block(n).await? else { return Ok(false) };
            if let Some(tip) = &tip {
                if tip.height + 1 == n && block.head.parent_hash != tip.hash {
                    self.reorg(n - 1, head).await?;
                    return Ok(true);
                }
            }
            self.process(&block, head).await?;
            self.svc.metrics.chain.blocks.get_or_create(&self.labels()).inc();
            tip = Some(block.head);
        }
        Ok(end < head)
    }

    /// The block at `height` is no longer canonical: walk back to the common ancestor within
    /// `reorg_depth`, mark what the orphaned blocks recorded `removed` (and say so), and let the
    /// next round read the new branch. Deeper than `reorg_depth`: halt until resynced.
    async fn reorg(&mut self, height: u64, head: u64) -> Result<(), WatchError> {
        let store = self.svc.store.clone();
        let chain = self.chain.as_str();
        let kept = store.chain_heads(chain, height.saturating_sub(self.config.reorg_depth)).await?;
        let mut ancestor = None;
        for stored in kept.iter().rev() {
            match self.node.block(stored.height).await? {
                Some(b) if b.head.hash == stored.hash => {
                    ancestor = Some(stored.clone());
                    break;
                }
                _ => continue,
            }
        }
        let Some(ancestor) = ancestor.filter(|a| height - a.height < self.config.reorg_depth) else {
            let why = format!(
                "a reorg deeper than reorg_depth ({}) below block {height}; run `custodian chain resync --coin {chain} --from HEIGHT`",
                self.config.reorg_depth
            );
            tracing::error!(chain, "{why}");
            store.set_chain_node(chain, head, Some(&why)).await?;
            self.svc.metrics.chain.deep_reorgs.get_or_create(&self.labels()).inc();
            let entry = crate::audit::EntryExt::data(
                crate::audit::entry(AuditType::ChainReorgTooDeep),
                json!({ "coin": chain, "height": height, "reorgDepth": self.config.reorg_depth }),
            );
            crate::audit::record(&store, &[entry]).await;
            return Ok(());
        };
        let depth = height - ancestor.height;
        tracing::info!(chain, depth, ancestor = ancestor.height, "reorg");
        let removed = store.rewind_chain(chain, &ancestor, depth, crate::ids::now()).await?;
        for t in &removed {
            super::announce::transfer(&self.svc, t).await?;
            // Read again with the next block of the new branch.
            self.stale.insert(t.wallet_id.clone());
        }
        Ok(())
    }

    /// Finds the block's transfers, moves older ones' confirmations on, emits events, then
    /// writes the block's effects and the checkpoint in one transaction.
    async fn process(&mut self, block: &NodeBlock, head: u64) -> Result<(), WatchError> {
        let chain = self.chain.as_str();
        let height = block.head.height;
        let mut found = self.native_transfers(block).await?;
        found.extend(self.token_transfers(block).await?);
        let confirmed_at = self.config.confirmations;
        // `new_transfer` made them at one confirmation.
        for t in &mut found {
            t.state = if confirmed_at <= 1 { TransferState::Confirmed } else { TransferState::Unconfirmed };
        }
        // Older transfers: `confirmations` reached with this block, and the counts wallet
        // webhooks wait for (`numConfirmations`, told within `reorg_depth` blocks).
        let window = height.saturating_sub(confirmed_at.max(self.config.reorg_depth));
        let mut changed = Vec::new();
        let mut counts: Vec<(Transfer, u64)> = found.iter().map(|t| (t.clone(), 1)).collect();
        for mut t in self.svc.store.live_transfers(chain, window).await? {
            if t.height >= height || found.iter().any(|f| f.id == t.id) {
                continue;
            }
            let c = height - t.height + 1;
            if t.state == TransferState::Unconfirmed && c >= confirmed_at {
                t.state = TransferState::Confirmed;
                t.confirmations = c;
                changed.push(t.clone());
            }
            t.confirmations = c;
            counts.push((t, c));
        }
        // A transaction of the same sender and nonce as one a reorg removed replaces it.
        for mut orphan in
            self.svc.store.removed_transfers(chain, height.saturating_sub(self.config.reorg_depth)).await?
        {
            let replaced = block.txs.iter().any(|tx| {
                tx.nonce == orphan.nonce
                    && crate::types::checksummed_eth_address(&tx.from) == orphan.sender
                    && tx.hash.to_string() != orphan.txid
            });
            if replaced {
                orphan.state = TransferState::Replaced;
                changed.push(orphan);
            }
        }
        super::announce::block_transfers(&self.svc, &found, &changed, &counts).await?;
        super::announce::blocks(&self.svc, &self.chain, self.config.reorg_depth, &block.head).await?;
        let all: Vec<Transfer> = found.into_iter().chain(changed).collect();
        self.stale.extend(all.iter().map(|t| t.wallet_id.clone()));
        let balances = if head.saturating_sub(height) < STATE_WINDOW {
            let touched: Vec<WalletId> = std::mem::take(&mut self.stale).into_iter().collect();
            self.balances(&touched, height, &all).await?
        } else {
            Vec::new()
        };
        self.svc
            .store
            .record_block(BlockWrite {
                chain,
                head: &block.head,
                transfers: &all,
                keep_from: height.saturating_sub(self.config.reorg_depth),
                balances: &balances,
            })
            .await?;
        Ok(())
    }

    /// Native ETH moved by the block's successful transactions from or to a watched address.
    async fn native_transfers(&self, block: &NodeBlock) -> Result<Vec<Transfer>, WatchError> {
        let mut out: BTreeMap<String, Transfer> = BTreeMap::new();
        for tx in &block.txs {
            let from = self.book.owner(&tx.from);
            let to = tx.to.as_ref().and_then(|a| self.book.owner(a));
            if from.is_none() && to.is_none() {
                continue;
            }
            // A failed transaction moves no value; its fee alone is not a transfer here.
            let Some((true, fee)) = self.node.outcome(tx.hash).await? else { continue };
            if tx.value.is_zero() && from.is_none() {
                continue;
            }
            let txid = tx.hash.to_string();
            let mut add = |wallet: &WalletId, address: &Address, value: I256, fee: U256| {
                let t =
                    out.entry(Transfer::id_for(self.chain.as_str(), &txid, wallet)).or_insert_with(|| {
                        self.new_transfer(wallet, self.chain.clone(), &txid, block, tx.from, tx.nonce)
                    });
                t.entries.push(TransferEntry {
                    address: crate::types::checksummed_eth_address(address),
                    value: value.to_string(),
                });
                t.fee = (parse_u(&t.fee) + fee).to_string();
            };
            let value = I256::try_from(tx.value).unwrap_or(I256::MAX);
            if let Some(w) = from {
                add(w, &tx.from, -value - I256::try_from(fee).unwrap_or(I256::ZERO), fee);
            }
            if let (Some(w), Some(a)) = (to, tx.to.as_ref()) {
                add(w, a, value, U256::ZERO);
            }
        }
        Ok(out.into_values().map(total).collect())
    }

    /// Token amounts moved by `Transfer` logs of the configured contracts.
    async fn token_transfers(&self, block: &NodeBlock) -> Result<Vec<Transfer>, WatchError> {
        if self.tokens.is_empty() || self.book.is_empty() {
            return Ok(Vec::new());
        }
        let contracts: Vec<Address> = self.tokens.keys().copied().collect();
        let block_hash =
            block.head.hash.parse().map_err(|_| NodeError("a block hash is not 32 bytes".into()))?;
        let mut out: BTreeMap<String, Transfer> = BTreeMap::new();
        for log in self.node.token_logs(block_hash, &contracts).await? {
            let Some(coin) = self.tokens.get(&log.contract) else { continue };
            let txid = log.txid.to_string();
            let sender = block.txs.iter().find(|t| t.hash == log.txid).map(|t| (t.from, t.nonce));
            let (sender, nonce) = sender.unwrap_or((log.from, 0));
            let value = I256::try_from(log.value).unwrap_or(I256::MAX);
            for (address, value) in [(log.from, -value), (log.to, value)] {
                let Some(w) = self.book.owner(&address) else { continue };
                let t = out
                    .entry(Transfer::id_for(coin.as_str(), &txid, w))
                    .or_insert_with(|| self.new_transfer(w, coin.clone(), &txid, block, sender, nonce));
                t.entries.push(TransferEntry {
                    address: crate::types::checksummed_eth_address(&address),
                    value: value.to_string(),
                });
            }
        }
        Ok(out.into_values().map(total).collect())
    }

    fn new_transfer(
        &self,
        wallet: &WalletId,
        coin: Coin,
        txid: &str,
        block: &NodeBlock,
        sender: Address,
        nonce: u64,
    ) -> Transfer {
        Transfer {
            id: Transfer::id_for(coin.as_str(), txid, wallet),
            wallet_id: wallet.clone(),
            coin,
            chain: self.chain.clone(),
            txid: txid.to_string(),
            height: block.head.height,
            block_hash: block.head.hash.clone(),
            state: TransferState::Unconfirmed,
            value: "0".into(),
            fee: "0".into(),
            entries: Vec::new(),
            date: block.time,
            confirmations: 1,
            sender: crate::types::checksummed_eth_address(&sender),
            nonce,
        }
    }

    /// Balances of the chain coin from the node, summed over each wallet's addresses:
    /// `balanceString` at `height`, `confirmedBalanceString` at `confirmations` depth,
    /// `spendableBalanceString` the confirmed one less unconfirmed sends (the stored ones, as
    /// `changes` leave them).
    async fn balances(
        &self,
        wallets: &[WalletId],
        height: u64,
        changes: &[Transfer],
    ) -> Result<Vec<(WalletId, crate::model::wallet::Balances)>, WatchError> {
        let confirmed_height = (height + 1).saturating_sub(self.config.confirmations);
        let mut out = Vec::with_capacity(wallets.len());
        for w in wallets {
            let (mut latest, mut confirmed) = (U256::ZERO, U256::ZERO);
            for a in self.book.of_wallet(w) {
                latest += self.node.balance(*a, Some(height)).await?;
                confirmed += self.node.balance(*a, Some(confirmed_height)).await?;
            }
            let stored = self.svc.store.unconfirmed_sends(w, self.chain.as_str()).await?;
            let now = changes.iter().filter(|t| &t.wallet_id == w && t.coin == self.chain);
            let sends = stored
                .iter()
                .filter(|t| !changes.iter().any(|c| c.id == t.id))
                .chain(now.filter(|t| t.state == TransferState::Unconfirmed && t.value.starts_with('-')));
            let pending = sends.fold(U256::ZERO, |sum, t| sum + parse_u(t.value.trim_start_matches('-')));
            let spendable = confirmed.saturating_sub(pending);
            let balances = crate::model::wallet::Balances {
                balance: Some(units(latest)?),
                confirmed: Some(units(confirmed)?),
                spendable: Some(units(spendable)?),
                ..Default::default()
            };
            out.push((w.clone(), balances));
        }
        Ok(out)
    }
}

fn units(n: U256) -> Result<crate::types::BaseUnits, WatchError> {
    n.to_string().parse().map_err(|e| Error::Internal(anyhow::anyhow!("a balance: {e:?}")).into())
}

fn parse_u(s: &str) -> U256 {
    s.parse().unwrap_or(U256::ZERO)
}

/// Sets a transfer's value to the sum of its entries.
fn total(mut t: Transfer) -> Transfer {
    let sum = t.entries.iter().fold(I256::ZERO, |acc, e| acc + e.value.parse::<I256>().unwrap_or(I256::ZERO));
    t.value = sum.to_string();
    t
}

/// One watcher per configured chain, each with its own node client.
pub fn spawn_all(svc: &Chains, stop: watch::Receiver<bool>) -> Vec<tokio::task::JoinHandle<()>> {
    let mut handles = Vec::new();
    for (coin, config) in &svc.config.chains {
        let Ok(chain) = coin.parse::<Coin>() else { continue };
        let node = match super::node::EthNode::new(&config.rpc_url, Duration::from_secs(config.rpc_timeout)) {
            Ok(n) => Arc::new(n) as Arc<dyn ChainNode>,
            Err(e) => {
                tracing::error!(chain = coin.as_str(), error = %e, "chain watcher not started");
                continue;
            }
        };
        let watcher = Watcher::new(chain, config.clone(), node, svc.clone());
        handles.push(tokio::spawn(watcher.run(stop.clone())));
    }
    handles
}
