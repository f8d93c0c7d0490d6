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
    model::chain::{Appearance, BlockHead, FeeAlerts, Transfer, TransferState},
    store::{BlockWrite, NodeReport},
    types::{Coin, WalletId},
};

pub use super::follow::CHAIN_ID_EVERY;

/// While catching up, the least time between two checks of whether the watched address set
/// changed (at the head it is checked every round).
pub const BOOK_CHECK: Duration = Duration::from_secs(1);

/// What can stop a round: the node, the store, or the domain.
mod run_write;

pub use super::follow::{follow, Follower, WatchError};

#[async_trait::async_trait]
impl Follower for Watcher {
    fn parts(&self) -> (&Coin, &Chains, &ChainConfig) {
        (&self.chain, &self.svc, &self.config)
    }

    async fn check_node(&mut self) -> Result<(), WatchError> {
        self.check_chain_id().await
    }

    async fn round(&mut self, catching_up: bool) -> Result<bool, WatchError> {
        self.catching_up = catching_up;
        Watcher::round(self).await
    }

    fn failed(&mut self) {
        // What was due may have been taken by a write that failed: read it again.
        self.stale_loaded = false;
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

    /// Runs until `stop` turns true ([`follow`]).
    pub async fn run(self, stop: watch::Receiver<bool>) {
        follow(self, stop).await
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
            utxo: None,
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
            return super::follow::halt(&self.svc, &self.chain, self.config.reorg_depth, height, head).await;
        };
        let depth = height - ancestor.height;
        let removed = crate::chain::follow::rewind(&self.svc, &self.chain, &ancestor, depth).await?;
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
        let conflict = Window::same_nonce(&fetched.block);
        let (changed, counts) = window.advance(height, &found, confirmed_at, conflict);
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
        super::follow::first_appearances(&self.svc, &self.chain, candidates).await
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
