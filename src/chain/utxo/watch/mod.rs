//! One UTXO chain's watcher (docs/chains.md#utxo-chains): the same room as Ethereum's
//! (`chain::watcher`): one lease per chain, a checkpoint per block written with its effects
//! and events, backfill in bounded batches, reorgs found by the parent hash and walked back
//! to the common ancestor, a halt past `reorg_depth`. What differs is the model: a
//! transaction's effect on a wallet is its outputs to it less its inputs that spend the
//! wallet's outputs, from Custodian's own set of those outputs ([`super::effect`]).

use std::collections::{BTreeSet, HashMap};
use std::sync::Arc;
use std::time::Duration;

use futures_util::StreamExt;
use tokio::sync::watch;

mod blocks;
mod fees;
mod mempool;
mod set;

use super::book::ScriptBook;
use super::effect::KnownOutput;
use super::node::{OutPoint, UtxoBlock, UtxoNode};
use super::params::{AddressParams, Family};
use crate::chain::ahead::Ahead;
use crate::chain::follow::{Follower, WatchError};
use crate::chain::node::NodeError;
use crate::chain::watcher::BOOK_CHECK;
use crate::chain::{announce::Batch, speed::Speed, window::Window, Chains};
use crate::config::{ChainConfig, Network};
use crate::model::chain::{Appearance, BlockHead, Transfer, PENDING_HEIGHT};
use crate::store::{BlockWrite, NodeReport, UtxoChanges};
use crate::types::{Coin, WalletId};
use mempool::Pool;

pub struct UtxoWatcher {
    pub(super) chain: Coin,
    pub(super) config: ChainConfig,
    network: Network,
    pub(super) params: AddressParams,
    pub(super) node: Arc<UtxoNode>,
    pub(super) svc: Chains,
    holder: String,
    pub(super) book: ScriptBook,
    /// The watched wallets' outputs not spent in a block, by outpoint; `None`: read it from the
    /// store (at start, and after a failed write or a reorg).
    pub(super) unspent: Option<HashMap<OutPoint, KnownOutput>>,
    /// The node's mempool as last read.
    pub(super) pool: Pool,
    /// Wallets whose balances the next write computes again (after a reorg).
    pub(super) due: BTreeSet<WalletId>,
    /// The node's last fee estimate, base units per 1000 virtual bytes (`lowFee`).
    pub(super) fee_rate: Option<u64>,
    speed: Speed,
}

impl UtxoWatcher {
    /// A watcher of `chain` (its `config` validated: `family = "utxo"`, a network set).
    pub fn new(chain: Coin, config: ChainConfig, node: Arc<UtxoNode>, svc: Chains) -> Option<Self> {
        let network = config.network?;
        let params = Family::of(&chain)?.params(network);
        Some(Self {
            chain,
            config,
            network,
            params,
            node,
            svc,
            holder: crate::ids::new_id(),
            book: ScriptBook::default(),
            unspent: None,
            pool: Pool::default(),
            due: BTreeSet::new(),
            fee_rate: None,
            speed: Speed::default(),
        })
    }

    pub async fn run(self, stop: watch::Receiver<bool>) {
        crate::chain::watcher::follow(self, stop).await
    }

    pub(super) fn labels(&self) -> crate::metrics::ChainLabels {
        crate::metrics::ChainLabels { coin: self.chain.as_str().to_string() }
    }

    /// The transfers a block at `height` can still change begin: live ones, removed ones.
    pub(super) fn window_from(&self, height: u64) -> (u64, u64) {
        let c = &self.config;
        (height.saturating_sub(c.confirmations.max(c.reorg_depth)), height.saturating_sub(c.reorg_depth))
    }

    /// The set of outputs, read from the store when not held.
    async fn load_unspent(&mut self) -> Result<&set::Set, WatchError> {
        if self.unspent.is_some() {
            return Ok(self.unspent.get_or_insert_with(HashMap::new));
        }
        let rows = self.svc.store.chain_unspents(self.chain.as_str()).await?;
        let map = rows
            .into_iter()
            .map(|u| {
                let owner =
                    super::effect::Owner { wallet: u.wallet_id, address: u.address, position: u.position };
                (
                    OutPoint { txid: u.txid, vout: u.vout },
                    KnownOutput {
                        owner,
                        value: u.value,
                        height: u.height,
                        spent_by: u.spent.filter(|(_, at)| *at == PENDING_HEIGHT).map(|(by, _)| by),
                    },
                )
            })
            .collect();
        Ok(self.unspent.insert(map))
    }

    /// One round: renew the lease, read up to `batch_blocks` blocks, then the mempool at the
    /// head. `Ok(true)`: more blocks are waiting.
    async fn watch_round(&mut self, catching_up: bool) -> Result<bool, WatchError> {
        let store = self.svc.store.clone();
        let chain = self.chain.as_str().to_string();
        let now = store.clock().now_ms();
        let lease_ms = i64::try_from(self.config.lease_ms).unwrap_or(15_000);
        if !store.take_chain_lease(&chain, &self.holder, now, now + lease_ms).await? {
            return Ok(false);
        }
        let status = store.chain_status(&chain).await?.unwrap_or_default();
        let head = self.node.block_count().await?;
        let report = NodeReport {
            head: Some(head),
            blocks_per_second: self.speed.measure(status.height),
            error: Some(None),
            ..Default::default()
        };
        store.set_chain_node(&chain, &report).await?;
        let lag = head.saturating_sub(status.height.unwrap_or(head));
        self.svc.metrics.chain.lag.get_or_create(&self.labels()).set(i64::try_from(lag).unwrap_or(i64::MAX));
        if status.halted.is_some() {
            return Ok(false);
        }
        let every = if catching_up { BOOK_CHECK } else { Duration::ZERO };
        self.book.refresh(&store, &self.chain, every).await?;
        self.load_unspent().await?;
        let next = match status.height {
            Some(h) => h + 1,
            None => self.config.start_block.unwrap_or(head),
        };
        let mut tip = status.height.zip(status.hash);
        // `invalidateblock`, or a shorter heavier branch: the checkpoint's block is no longer
        // the node's, though no block above it says so yet.
        if let Some((height, hash)) = &tip {
            if self.hash_at(*height, head).await?.as_ref() != Some(hash) {
                self.reorg(*height, head).await?;
                return Ok(true);
            }
        }
        let end = head.min(next.saturating_add(self.config.batch_blocks - 1));
        let (live_from, removed_from) = self.window_from(next);
        let mut window = Window::load(&store, &chain, live_from, removed_from).await?;
        let read_ahead = usize::try_from(self.config.read_ahead).unwrap_or(1);
        // Blocks already read are taken together (up to `read_ahead`) and written as one run,
        // while the next ones are read.
        let mut blocks = self.read_ahead(next, end, read_ahead);
        let mut expected = next;
        loop {
            let chunk = blocks.next_run(read_ahead).await;
            if chunk.is_empty() {
                break;
            }
            let mut run = blocks::UtxoRun::default();
            for block in chunk {
                let block: UtxoBlock = block?;
                if block.height != expected {
                    let why =
                        format!("getblock: asked for block {expected}, the node answered {}", block.height);
                    return Err(NodeError::new(why).into());
                }
                expected += 1;
                if tip
                    .as_ref()
                    .is_some_and(|(h, hash)| *h + 1 == block.height && block.parent.as_ref() != Some(hash))
                {
                    self.write(run, head).await?;
                    self.reorg(block.height - 1, head).await?;
                    return Ok(true);
                }
                self.find(&block, &mut window, &mut run)?;
                tip = Some((block.height, block.hash.clone()));
            }
            self.write(run, head).await?;
        }
        if end >= head && self.config.pending_pool {
            if let Some((height, hash)) = tip {
                self.mempool(&mut window, height, &hash).await?;
            }
        }
        Ok(end < head)
    }

    /// Blocks `next..=end` read in a task of their own: the hashes of `read_ahead` blocks in
    /// one batch, then the blocks, `read_ahead` at once. The first error ends the reading.
    fn read_ahead(&self, next: u64, end: u64, read_ahead: usize) -> Ahead<Result<UtxoBlock, NodeError>> {
        let (node, hashes_of) = (self.node.clone(), self.node.clone());
        let heights: Vec<u64> = (next..=end).collect();
        let batches: Vec<Vec<u64>> = heights.chunks(read_ahead).map(<[u64]>::to_vec).collect();
        let reads = futures_util::stream::iter(batches)
            .then(move |batch| {
                let node = hashes_of.clone();
                async move { node.block_hashes(&batch).await }
            })
            .flat_map(|hashes| {
                let each: Vec<Result<String, NodeError>> = match hashes {
                    Ok(hashes) => hashes.into_iter().map(Ok).collect(),
                    Err(e) => vec![Err(e)],
                };
                futures_util::stream::iter(each)
            })
            .map(move |hash| {
                let node = node.clone();
                async move { node.block(&hash?).await }
            })
            .buffered(read_ahead);
        Ahead::spawn(reads, read_ahead, Result::is_err)
    }

    /// The block at `height` is no longer the node's: walk back to the common ancestor within
    /// `reorg_depth`, mark what the orphaned blocks recorded `removed` (and say so), undo their
    /// outputs and spends, and let the next round read the new branch and the mempool, where
    /// their transactions may be again. Deeper than `reorg_depth`: halt until resynced.
    async fn reorg(&mut self, height: u64, head: u64) -> Result<(), WatchError> {
        let store = self.svc.store.clone();
        let chain = self.chain.as_str();
        let kept = store.chain_heads(chain, height.saturating_sub(self.config.reorg_depth)).await?;
        let mut ancestor = None;
        for stored in kept.iter().rev() {
            if self.hash_at(stored.height, head).await?.as_ref() == Some(&stored.hash) {
                ancestor = Some(stored.clone());
                break;
            }
        }
        let Some(ancestor) = ancestor.filter(|a| height - a.height < self.config.reorg_depth) else {
            return crate::chain::follow::halt(&self.svc, &self.chain, self.config.reorg_depth, height, head)
                .await;
        };
        let depth = height - ancestor.height;
        let removed = crate::chain::follow::rewind(&self.svc, &self.chain, &ancestor, depth).await?;
        self.due.extend(removed.into_iter().map(|t| t.wallet_id));
        // The set and the mempool are read again: what the orphaned blocks held may be back in it.
        self.unspent = None;
        self.pool.clear();
        Ok(())
    }

    /// The hash of the node's block at `height`; `None` above its head `head`.
    async fn hash_at(&self, height: u64, head: u64) -> Result<Option<String>, WatchError> {
        match height > head {
            true => Ok(None),
            false => Ok(Some(self.node.block_hash(height).await?)),
        }
    }
}

#[async_trait::async_trait]
impl Follower for UtxoWatcher {
    fn parts(&self) -> (&Coin, &Chains, &ChainConfig) {
        (&self.chain, &self.svc, &self.config)
    }

    /// Reading stops while the node is on another network than `network`.
    async fn check_node(&mut self) -> Result<(), WatchError> {
        let info = self.node.chain_info().await?;
        if info.network() != Some(self.network) {
            self.svc.metrics.chain.wrong_chain.get_or_create(&self.labels()).inc();
            let why = format!(
                "getblockchaininfo: the node is on chain {:?}, not chains.{}.network {:?}; not reading from it",
                info.chain,
                self.chain.as_str(),
                self.network
            );
            return Err(NodeError::new(why).into());
        }
        Ok(())
    }

    async fn round(&mut self, catching_up: bool) -> Result<bool, WatchError> {
        self.watch_round(catching_up).await
    }

    fn failed(&mut self) {
        self.unspent = None;
        self.pool.clear();
    }
}

impl UtxoWatcher {
    /// Writes what blocks (`heads`, lowest first) or a look at the mempool (no heads) changed:
    /// `transfers`, first appearances, `changes` to the set with the balances of the wallets
    /// they touch (and those a reorg left due) as of block `tip`, and `batch`'s events, in one
    /// transaction; then hands the events on.
    async fn record(
        &mut self,
        heads: &[BlockHead],
        transfers: &[Transfer],
        appeared: &[Appearance],
        mut changes: UtxoChanges,
        tip: u64,
        batch: Batch,
    ) -> Result<(), WatchError> {
        let mut touched = self.due.clone();
        touched.extend(transfers.iter().map(|t| t.wallet_id.clone()));
        let confirmations = self.config.confirmations;
        changes.balances = set::balances(self.load_unspent().await?, &touched, tip, confirmations);
        let write = BlockWrite {
            chain: self.chain.as_str(),
            heads,
            transfers,
            appeared,
            keep_from: tip.saturating_sub(self.config.reorg_depth),
            balances: &[],
            token_balances: &[],
            stale: &[],
            balances_read: false,
            utxo: Some(&changes),
            events: &batch.events,
        };
        let recorded = self.svc.store.record_blocks(write).await?;
        batch.committed(&self.svc, &recorded).await;
        self.due.clear();
        Ok(())
    }
}

/// A watcher for a UTXO chain's configuration, or why not (logged by the caller).
pub fn spawn(
    svc: &Chains,
    chain: Coin,
    config: &ChainConfig,
    stop: watch::Receiver<bool>,
) -> Result<tokio::task::JoinHandle<()>, String> {
    use super::node::Credentials;
    let auth = match (&config.rpc_cookie_file, &config.rpc_user, &config.rpc_password) {
        (Some(path), _, _) => Credentials::Cookie(path.clone()),
        (None, Some(user), Some(password)) => {
            Credentials::Password { user: user.clone(), password: password.0.clone() }
        }
        (None, Some(_), None) => return Err("rpc_user is set but rpc_password is not".into()),
        (None, None, _) => Credentials::None,
    };
    let timeout = Duration::from_secs(config.rpc_timeout);
    let cap = usize::try_from(config.pool_max_bytes).unwrap_or(usize::MAX);
    let node = UtxoNode::new(&config.rpc_url, auth, timeout, cap).map_err(|e| e.to_string())?;
    let watcher = UtxoWatcher::new(chain, config.clone(), Arc::new(node), svc.clone())
        .ok_or("chains.<coin>.network is not set")?;
    Ok(tokio::spawn(watcher.run(stop)))
}
