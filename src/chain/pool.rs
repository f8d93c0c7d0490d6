//! The node's pending pool (`txpool_content`), read once per round at the head: a transfer is
//! `unconfirmed` from the moment the pool shows it, before its block, and a pending transfer
//! that another transaction of the same sender and nonce displaces is `replaced` when that one
//! is mined ([`super::window::Window::advance`]).
//!
//! A pending transfer that the pool no longer shows and no block holds for `reorg_depth` blocks
//! was dropped: it becomes `removed`.

use std::{
    collections::{HashMap, HashSet},
    time::{Duration, Instant},
};

use super::{
    found::Finder,
    node::{ChainNode, NodeError, PoolAnswer},
    window::Window,
};
use crate::model::chain::{Transfer, TransferState};

/// How long a node that refused `txpool_content` is left alone before being asked again.
pub const POOL_RETRY: Duration = Duration::from_secs(600);

/// Most pending transfers tracked per chain: beyond it, new ones are found at inclusion.
pub const MAX_PENDING: usize = 10_000;

/// What one round read of the pool.
#[derive(Default)]
pub struct Changes {
    /// Transfers new to the pool and pending ones dropped from it.
    pub transfers: Vec<Transfer>,
    /// New transfers left for a later round by `max_new`.
    pub deferred: u64,
    /// The answer was over `pool_max_bytes` and dropped unread.
    pub too_large: bool,
}

/// What the watcher remembers of the pool between rounds.
#[derive(Default)]
pub struct Pool {
    /// Each pending transfer's id and the head at which the pool last showed it.
    seen: HashMap<String, u64>,
    /// While set, the node is not asked (it does not expose its pool).
    retry_at: Option<Instant>,
}

impl Pool {
    /// What the pool changes at `head`: transfers new to it (`unconfirmed`, at
    /// `PENDING_HEIGHT`; at most `max_new`), and pending ones gone from it for more than
    /// `dropped_after` blocks (`removed`). Empty when the node does not expose its pool, or
    /// when its answer was too large (then nothing is taken for gone either).
    pub async fn changes(
        &mut self,
        node: &dyn ChainNode,
        finder: &Finder<'_>,
        window: &Window,
        (head, dropped_after, max_new): (u64, u64, usize),
    ) -> Result<Changes, NodeError> {
        if self.retry_at.is_some_and(|at| Instant::now() < at) {
            return Ok(Changes::default());
        }
        let txs = match node.pending().await? {
            PoolAnswer::Txs(txs) => txs,
            PoolAnswer::TooLarge => {
                // Pending transfers are not seen this round; counting it as a sighting keeps
                // a huge pool from making them look dropped.
                for t in window.pending() {
                    self.seen.insert(t.id.clone(), head);
                }
                return Ok(Changes { too_large: true, ..Default::default() });
            }
            PoolAnswer::Refused => {
                if self.retry_at.is_none() {
                    tracing::info!(
                        chain = finder.chain.as_str(),
                        "the node does not expose its pending pool (txpool_content): transfers are unconfirmed from their block"
                    );
                }
                self.retry_at = Some(Instant::now() + POOL_RETRY);
                return Ok(Changes::default());
            }
        };
        self.retry_at = None;
        let shown = finder.pending(txs, crate::clock::wall_now());
        for t in &shown {
            self.seen.insert(t.id.clone(), head);
        }
        let room = MAX_PENDING.saturating_sub(window.pending().len()).min(max_new);
        let new: Vec<Transfer> = shown.into_iter().filter(|t| !window.holds(&t.id)).collect();
        let deferred = u64::try_from(new.len().saturating_sub(room)).unwrap_or(u64::MAX);
        let mut out: Vec<Transfer> = new.into_iter().take(room).collect();
        for t in window.pending() {
            let last = *self.seen.entry(t.id.clone()).or_insert(head);
            if head.saturating_sub(last) > dropped_after {
                let mut t = t.clone();
                t.state = TransferState::Removed;
                out.push(t);
            }
        }
        Ok(Changes { transfers: out, deferred, too_large: false })
    }

    /// Once `changes` (what [`Pool::changes`] gave) are stored, forgets all but what stays
    /// pending. Not called when the write failed, so a dropped transfer is dropped again in the
    /// next round rather than after another `dropped_after` blocks.
    pub fn settle(&mut self, window: &Window, changes: &[Transfer]) {
        let dropped: HashSet<&str> =
            changes.iter().filter(|t| t.state == TransferState::Removed).map(|t| t.id.as_str()).collect();
        let pending: HashSet<&str> = window
            .pending()
            .iter()
            .chain(changes)
            .map(|t| t.id.as_str())
            .filter(|id| !dropped.contains(id))
            .collect();
        self.seen.retain(|id, _| pending.contains(id.as_str()));
    }
}
