//! One chain's watcher: holds the chain's lease, follows the node's head block by block from
//! the checkpoint, detects reorgs by parent hash, and turns what it sees into transfers,
//! balances and §6 events (docs/chains.md).
//!
//! Confirmations are counted against the block being processed, not the node's head at that
//! moment, so replaying a block after a crash computes the same states and the same event ids:
//! the outbox's idempotency on `eventId` then sends nothing twice.

use std::{
    collections::{BTreeMap, BTreeSet},
    sync::Arc,
    time::Duration,
};

use alloy_primitives::Address;
use serde_json::json;
use tokio::sync::watch;

use super::{
    alerts::{self, BaseFees},
    announce::Batch,
    book::AddressBook,
    fetch::{Fetched, Reader},
    found::Finder,
    node::{ChainNode, NodeError},
    pool::Pool,
    speed::Speed,
    window::Window,
    Chains,
};
use crate::{
    config::ChainConfig,
    error::Error,
    model::{
        audit::AuditType,
        chain::{Appearance, BlockHead, FeeAlerts, Transfer, TransferState},
    },
    store::{BlockWrite, NodeReport},
    types::{Coin, WalletId},
};

/// The longest time between two checks of the node's chain id.
pub const CHAIN_ID_EVERY: Duration = Duration::from_secs(60);

/// While catching up, the least time between two checks of whether the watched address set
/// changed (at the head it is checked every round).
pub const BOOK_CHECK: Duration = Duration::from_secs(1);

/// What can stop a round: the node, the store, or the domain.
mod run_write;

#[derive(Debug, thiserror::Error)]
pub enum WatchError {
    #[error(transparent)]
    Node(#[from] NodeError),
    #[error(transparent)]
    Domain(#[from] Error),
    #[error(transparent)]
    Overflow(#[from] super::found::Overflow),
}

impl From<crate::store::StoreError> for WatchError {
    fn from(e: crate::store::StoreError) -> Self {
        WatchError::Domain(e.into())
    }
}

pub struct Watcher {
    pub(super) chain: Coin,
    pub(super) config: ChainConfig,
    pub(super) node: Arc<dyn ChainNode>,
    pub(super) svc: Chains,
    holder: String,
    pub(super) book: AddressBook,
    /// Token contracts and their coins.
    pub(super) tokens: BTreeMap<Address, Coin>,
    /// Wallets whose balances changed while the watcher was too far behind the head to read
    /// them: refreshed at the first block within [`STATE_WINDOW`] of the head. Also kept in
    /// the store, and read back at the first round (`stale_loaded`).
    pub(super) stale: BTreeSet<(WalletId, Coin)>,
    stale_loaded: bool,
    /// Base fees of the latest blocks, for `lowFee`.
    fees: BaseFees,
    /// The chain's wallets' fee alerts, read each round.
    alerts: Vec<(WalletId, FeeAlerts)>,
    /// Whether the last round left blocks waiting.
    catching_up: bool,
    /// The node's pending pool as last read.
    pool: Pool,
    /// Blocks processed per second, measured every [`Speed::EVERY`].
    speed: Speed,
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
            stale_loaded: false,
            fees: BaseFees::default(),
            alerts: Vec::new(),
            catching_up: false,
            pool: Pool::default(),
            speed: Speed::default(),
        }
    }

    /// Runs until `stop` turns true. Node and database faults are logged (without the node's
    /// URL) and retried with backoff from the poll interval up to 30 s.
    pub async fn run(mut self, mut stop: watch::Receiver<bool>) {
        let poll = Duration::from_millis(self.config.poll_interval_ms);
        let mut backoff = poll;
        // When the node's chain id was last found right: checked again after any error and at
        // least every CHAIN_ID_EVERY, so a node switched to another chain is stopped early.
        let mut chain_id_ok: Option<tokio::time::Instant> = None;
        loop {
            if *stop.borrow() {
                return;
            }
            let outcome = async {
                if chain_id_ok.is_none_or(|at| at.elapsed() >= CHAIN_ID_EVERY) {
                    self.check_chain_id().await?;
                    chain_id_ok = Some(tokio::time::Instant::now());
                }
                self.round().await
            }
            .await;
            if outcome.is_err() {
                chain_id_ok = None;
            }
            self.catching_up = matches!(outcome, Ok(true));
            let wait = match outcome {
                Ok(true) => Duration::ZERO,
                Ok(false) => {
                    backoff = poll;
                    poll
                }
                Err(e) => {
                    tracing::warn!(chain = self.chain.as_str(), error = %e, "chain watcher round failed; retrying");
                    self.svc.metrics.chain.errors.get_or_create(&self.labels()).inc();
                    // What was due may have been taken by a write that failed: read it again.
                    self.stale_loaded = false;
                    // Best effort: the database may be what failed.
                    let why = crate::text::clip(e.to_string(), super::node::NodeError::MAX_BYTES);
                    let report = NodeReport { error: Some(Some(&why)), ..Default::default() };
                    let _ = self.svc.store.set_chain_node(self.chain.as_str(), &report).await;
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

    /// Reading stops while the node answers another chain's id: the round fails, naming it in
    /// `/health` and the console, and is tried again with backoff.
    async fn check_chain_id(&self) -> Result<(), WatchError> {
        let id = self.node.chain_id().await?;
        if id != self.config.chain_id {
            self.svc.metrics.chain.wrong_chain.get_or_create(&self.labels()).inc();
            return Err(NodeError::new(format!(
                "eth_chainId: the node answers {id}, not chains.{}.chain_id {}; not reading from it",
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
        let chain_coin = self.chain.clone();
        let chain = chain_coin.as_str();
        let now = store.clock().now_ms();
        let lease_ms = i64::try_from(self.config.lease_ms).unwrap_or(15_000);
        if !store.take_chain_lease(chain, &self.holder, now, now + lease_ms).await? {
            return Ok(false);
        }
        self.load_due().await?;
        let status = store.chain_status(chain).await?.unwrap_or_default();
        let head = self.node.head().await?;
        let speed = self.speed.measure(status.height);
        let report = NodeReport {
            head: Some(head),
            blocks_per_second: speed,
            error: Some(None),
            ..Default::default()
        };
        store.set_chain_node(chain, &report).await?;
        let lag = head.saturating_sub(status.height.unwrap_or(head));
        self.svc.metrics.chain.lag.get_or_create(&self.labels()).set(i64::try_from(lag).unwrap_or(i64::MAX));
        if status.halted.is_some() {
            return Ok(false);
        }
        let every = if self.catching_up { BOOK_CHECK } else { Duration::ZERO };
        self.book.refresh(&store, chain, every).await?;
        self.alerts = store.fee_alerts(chain).await?;
        let next = match status.height {
            Some(h) => h + 1,
            None => self.config.start_block.unwrap_or(head),
        };
        let mut tip = match (status.height, status.hash) {
            (Some(height), Some(hash)) => Some(BlockHead { height, hash, parent_hash: String::new() }),
            _ => None,
        };
        let end = head.min(next.saturating_add(self.config.batch_blocks - 1));
        let (live_from, removed_from) = self.window_from(next);
        let mut window = Window::load(&store, chain, live_from, removed_from).await?;
        let read_ahead = usize::try_from(self.config.read_ahead).unwrap_or(1);
        // Blocks already read are taken together (up to `read_ahead`): while catching up they
        // are processed and written as one run, their events in one outbox write.
        let mut blocks = self.reader(read_ahead).spawn(next, end);
        loop {
            let chunk = blocks.next_run(read_ahead).await;
            if chunk.is_empty() {
                break;
            }
            let mut run = Run::default();
            let mut stop = None;
            for fetched in chunk {
                let Some(fetched) = fetched? else {
                    stop = Some(None);
                    break;
                };
                let n = fetched.block.head.height;
                if tip.as_ref().is_some_and(|t| t.height + 1 == n && fetched.block.head.parent_hash != t.hash)
                {
                    stop = Some(Some(n - 1));
                    break;
                }
                self.find(&fetched, &mut window, &mut run)?;
                tip = Some(fetched.block.head);
            }
            self.write(run, head).await?;
            match stop {
                Some(Some(orphaned)) => {
                    self.reorg(orphaned, head).await?;
                    return Ok(true);
                }
                Some(None) => return Ok(false),
                None => {}
            }
        }
        if end >= head && self.config.pending_pool {
            self.pending(&window, head).await?;
        }
        Ok(end < head)
    }

    /// Takes in the pending pool's changes at the head: the transfers and balances (no
    /// checkpoint) with their events, in one transaction.
    async fn pending(&mut self, window: &Window, head: u64) -> Result<(), WatchError> {
        let finder = Finder { chain: &self.chain, book: &self.book, tokens: &self.tokens };
        let max_new = usize::try_from(self.config.pool_max_new).unwrap_or(usize::MAX);
        let limits = (head, self.config.reorg_depth, max_new);
        let read = self.pool.changes(&*self.node, &finder, window, limits).await?;
        let metrics = &self.svc.metrics.chain;
        if read.too_large {
            metrics.pool_dropped.get_or_create(&self.labels()).inc();
            tracing::warn!(
                chain = self.chain.as_str(),
                "the node's pending pool is over pool_max_bytes; not read this round"
            );
        }
        metrics.pool_deferred.get_or_create(&self.labels()).inc_by(read.deferred);
        let changes = read.transfers;
        if changes.is_empty() {
            self.pool.settle(window, &changes);
            return Ok(());
        }
        let touched: std::collections::BTreeSet<(WalletId, Coin)> =
            changes.iter().map(|t| (t.wallet_id.clone(), t.coin.clone())).collect();
        let touched: Vec<(WalletId, Coin)> = touched.into_iter().collect();
        let (balances, token_balances) = self.split_balances(&touched, head, &changes).await?;
        let mut batch = Batch::default();
        for t in &changes {
            batch.extend(super::announce::transfer(&self.svc, t).await?);
        }
        let write = BlockWrite {
            chain: self.chain.as_str(),
            heads: &[],
            transfers: &changes,
            appeared: &[],
            keep_from: 0,
            balances: &balances,
            token_balances: &token_balances,
            stale: &[],
            balances_read: false,
            events: &batch.events,
        };
        let recorded = self.svc.store.record_blocks(write).await?;
        batch.committed(&self.svc, &recorded).await;
        self.pool.settle(window, &changes);
        Ok(())
    }

    /// Once (and after a failed round), the wallets whose balances a backfill left due, as kept
    /// in the store by this or an earlier process.
    async fn load_due(&mut self) -> Result<(), WatchError> {
        if !self.stale_loaded {
            self.stale.extend(self.svc.store.stale_balances(self.chain.as_str()).await?);
            self.stale_loaded = true;
        }
        Ok(())
    }

    /// Where the transfers a block at `height` can still change begin: live ones, removed ones
    /// ([`Window`]).
    fn window_from(&self, height: u64) -> (u64, u64) {
        let c = &self.config;
        (height.saturating_sub(c.confirmations.max(c.reorg_depth)), height.saturating_sub(c.reorg_depth))
    }

    fn reader(&self, read_ahead: usize) -> Reader {
        Reader {
            node: self.node.clone(),
            owners: self.book.owners(),
            contracts: self.tokens.keys().copied().collect(),
            permits: Arc::new(tokio::sync::Semaphore::new(read_ahead)),
            read_ahead,
        }
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
            store
                .set_chain_node(
                    chain,
                    &NodeReport { head: Some(head), halted: Some(&why), ..Default::default() },
                )
                .await?;
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
        // What the rewind removes, as it will be, so that their `removed` events are stored
        // with it: the watcher holds the chain's lease, so nothing changes them meanwhile.
        let tip = ancestor.height + depth;
        let mut removed = store.live_transfers(chain, ancestor.height + 1).await?;
        removed.retain(|t| !t.block_hash.is_empty());
        let mut batch = Batch::default();
        for t in &mut removed {
            t.state = TransferState::Removed;
            t.confirmations = (tip + 1).saturating_sub(t.height);
            batch.extend(super::announce::transfer(&self.svc, t).await?);
        }
        let recorded =
            store.rewind_chain(chain, &ancestor, depth, store.clock().now(), &batch.events).await?;
        batch.committed(&self.svc, &recorded).await;
        // Read again with the next block of the new branch.
        self.stale.extend(removed.into_iter().map(|t| (t.wallet_id, t.coin)));
        Ok(())
    }

    /// Finds the block's transfers and moves older ones' confirmations on, in memory: `run`
    /// gathers what its blocks change, for [`Self::write`].
    fn find(&mut self, fetched: &Fetched, window: &mut Window, run: &mut Run) -> Result<(), WatchError> {
        let height = fetched.block.head.height;
        let finder = Finder { chain: &self.chain, book: &self.book, tokens: &self.tokens };
        let mut found = finder.transfers(fetched)?;
        let confirmed_at = self.config.confirmations;
        for t in &mut found {
            t.state = if confirmed_at <= 1 { TransferState::Confirmed } else { TransferState::Unconfirmed };
        }
        // Already told as unconfirmed when the pool showed them.
        run.quiet.extend(
            found.iter().filter(|t| window.pending().iter().any(|p| p.id == t.id)).map(|t| t.id.clone()),
        );
        let (changed, counts) = window.advance(&fetched.block, &found, confirmed_at);
        if let Some(averages) = self.fees.push(height, fetched.block.base_fee) {
            run.alerts.extend(alerts::low_fee(&self.chain, &self.alerts, &fetched.block.head, averages));
        }
        alerts::fee_address_touched(&self.alerts, &self.book, &fetched.block, &mut run.fee_touched);
        for a in finder.appearances(fetched, &found) {
            if !run.appeared.iter().any(|b| b.address == a.address) {
                run.appeared.push(a);
            }
        }
        let written: Vec<Transfer> = found.iter().chain(&changed).cloned().collect();
        let (live_from, removed_from) = self.window_from(height);
        window.apply(&written, live_from, removed_from);
        self.stale.extend(written.iter().map(|t| (t.wallet_id.clone(), t.coin.clone())));
        run.found.extend(found);
        run.counts.extend(counts);
        run.written.extend(written);
        run.heads.push(fetched.block.head.clone());
        Ok(())
    }

    /// Those of `candidates` that had not appeared on chain before.
    async fn first_appearances(&self, candidates: Vec<Appearance>) -> Result<Vec<Appearance>, WatchError> {
        if candidates.is_empty() {
            return Ok(candidates);
        }
        let addresses: Vec<String> = candidates.iter().map(|a| a.address.clone()).collect();
        let known = self.svc.store.appeared(self.chain.as_str(), &addresses).await?;
        Ok(candidates.into_iter().filter(|a| !known.contains(&a.address)).collect())
    }
}

/// What a run of blocks read together changes, in block order.
#[derive(Default)]
struct Run {
    heads: Vec<BlockHead>,
    /// The blocks' own transfers.
    found: Vec<Transfer>,
    /// Live transfers with the confirmations each block gave them.
    counts: Vec<(Transfer, u64)>,
    /// Transfers found or whose state changed, block by block: a transfer may be in it twice,
    /// the later wins.
    written: Vec<Transfer>,
    /// Watched addresses the blocks show on chain, each once, perhaps for the first time.
    appeared: Vec<Appearance>,
    /// `lowFee` events the blocks raised.
    alerts: Vec<alerts::Alert>,
    /// Wallets with a balance alert whose fee address the blocks touched.
    fee_touched: std::collections::BTreeSet<WalletId>,
    /// Transfers the blocks include that were pending: their `unconfirmed` was already told.
    quiet: std::collections::BTreeSet<String>,
}

/// One watcher per configured chain, each with its own node client.
pub fn spawn_all(svc: &Chains, stop: watch::Receiver<bool>) -> Vec<tokio::task::JoinHandle<()>> {
    let mut handles = Vec::new();
    for (coin, config) in &svc.config.chains {
        let Ok(chain) = coin.parse::<Coin>() else { continue };
        let timeout = Duration::from_secs(config.rpc_timeout);
        let pool_cap = usize::try_from(config.pool_max_bytes).unwrap_or(usize::MAX);
        let node = match super::node::EthNode::new(&config.rpc_url, timeout, pool_cap) {
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
