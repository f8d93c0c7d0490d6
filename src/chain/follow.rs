//! What every chain watcher shares, of either family (docs/chains.md): the loop that drives a
//! round after another with backoff and the node's check, what stops a round, the halt past
//! `reorg_depth`, and which addresses appear on chain for the first time.

use std::time::Duration;

use serde_json::json;
use tokio::sync::watch;

use super::{node::NodeError, Chains};
use crate::{
    error::Error,
    model::{audit::AuditType, chain::Appearance},
    store::NodeReport,
    types::Coin,
};

/// The longest time between two checks of the node's chain (Ethereum's chain id, a UTXO
/// node's network).
pub const CHAIN_ID_EVERY: Duration = Duration::from_secs(60);

/// What can stop a round: the node, the store, or the domain.
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

/// What [`follow`] drives: one chain's watcher, of either family.
#[async_trait::async_trait]
pub trait Follower: Send {
    /// Its chain, the services, and the chain's settings.
    fn parts(&self) -> (&Coin, &Chains, &crate::config::ChainConfig);
    /// Checks that the node is on the configured chain (Ethereum's chain id, a UTXO node's
    /// network): reading stops while it is not.
    async fn check_node(&mut self) -> Result<(), WatchError>;
    /// One round; `Ok(true)` when more blocks wait.
    async fn round(&mut self, catching_up: bool) -> Result<bool, WatchError>;
    /// After a failed round: forget what the failed write may have left half-known.
    fn failed(&mut self);
}

/// Runs `f` until `stop` turns true. Node and database faults are logged (without the node's
/// URL), reported in `/health`, and retried with backoff from the poll interval up to 30 s.
pub async fn follow<F: Follower>(mut f: F, mut stop: watch::Receiver<bool>) {
    let poll = Duration::from_millis(f.parts().2.poll_interval_ms);
    let mut backoff = poll;
    let mut catching_up = false;
    // When the node was last found on the right chain: checked again after any error and at
    // least every CHAIN_ID_EVERY, so a node switched to another chain is stopped early.
    let mut node_ok: Option<tokio::time::Instant> = None;
    loop {
        if *stop.borrow() {
            return;
        }
        let outcome = async {
            if node_ok.is_none_or(|at| at.elapsed() >= CHAIN_ID_EVERY) {
                f.check_node().await?;
                node_ok = Some(tokio::time::Instant::now());
            }
            f.round(catching_up).await
        }
        .await;
        catching_up = matches!(outcome, Ok(true));
        let wait = match outcome {
            Ok(true) => Duration::ZERO,
            Ok(false) => {
                backoff = poll;
                poll
            }
            Err(e) => {
                node_ok = None;
                let (chain, svc, _) = f.parts();
                let (chain, svc) = (chain.as_str().to_string(), svc.clone());
                tracing::warn!(chain, error = %e, "chain watcher round failed; retrying");
                let labels = crate::metrics::ChainLabels { coin: chain.clone() };
                svc.metrics.chain.errors.get_or_create(&labels).inc();
                f.failed();
                // Best effort: the database may be what failed.
                let why = crate::text::clip(e.to_string(), super::node::NodeError::MAX_BYTES);
                let report = NodeReport { error: Some(Some(&why)), ..Default::default() };
                let _ = svc.store.set_chain_node(&chain, &report).await;
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

/// A reorg deeper than `reorg_depth` below block `height` (the node's head at `head`): the
/// chain stops, named in `/health`, counted and audited, until `custodian chain resync`.
pub async fn halt(
    svc: &Chains,
    chain: &Coin,
    reorg_depth: u64,
    height: u64,
    head: u64,
) -> Result<(), WatchError> {
    let coin = chain.as_str();
    let why = format!(
        "a reorg deeper than reorg_depth ({reorg_depth}) below block {height}; run `custodian chain resync --coin {coin} --from HEIGHT`"
    );
    tracing::error!(chain = coin, "{why}");
    let report = NodeReport { head: Some(head), halted: Some(&why), ..Default::default() };
    svc.store.set_chain_node(coin, &report).await?;
    let labels = crate::metrics::ChainLabels { coin: coin.to_string() };
    svc.metrics.chain.deep_reorgs.get_or_create(&labels).inc();
    let entry = crate::audit::EntryExt::data(
        crate::audit::entry(AuditType::ChainReorgTooDeep),
        json!({ "coin": coin, "height": height, "reorgDepth": reorg_depth }),
    );
    crate::audit::record(&svc.store, &[entry]).await;
    Ok(())
}

/// Those of `candidates` that had not appeared on `chain` before.
pub async fn first_appearances(
    svc: &Chains,
    chain: &Coin,
    candidates: Vec<Appearance>,
) -> Result<Vec<Appearance>, WatchError> {
    if candidates.is_empty() {
        return Ok(candidates);
    }
    let addresses: Vec<String> = candidates.iter().map(|a| a.address.clone()).collect();
    let known = svc.store.appeared(chain.as_str(), &addresses).await?;
    Ok(candidates.into_iter().filter(|a| !known.contains(&a.address)).collect())
}

/// Undoes the blocks above `ancestor` (a reorg `depth` blocks deep): the transfers they
/// recorded become `removed` with the confirmations they had reached, their events stored with
/// the rewind (the watcher holds the chain's lease, so nothing changes them meanwhile). The
/// removed transfers.
pub async fn rewind(
    svc: &Chains,
    chain: &Coin,
    ancestor: &crate::model::chain::BlockHead,
    depth: u64,
) -> Result<Vec<crate::model::chain::Transfer>, WatchError> {
    let store = &svc.store;
    tracing::info!(chain = chain.as_str(), depth, ancestor = ancestor.height, "reorg");
    let tip = ancestor.height + depth;
    let mut removed = store.live_transfers(chain.as_str(), ancestor.height + 1).await?;
    removed.retain(|t| !t.block_hash.is_empty());
    let mut batch = super::announce::Batch::default();
    for t in &mut removed {
        t.state = crate::model::chain::TransferState::Removed;
        t.confirmations = (tip + 1).saturating_sub(t.height);
        batch.extend(super::announce::transfer(svc, t).await?);
    }
    let now = store.clock().now();
    let recorded = store.rewind_chain(chain.as_str(), ancestor, depth, now, &batch.events).await?;
    batch.committed(svc, &recorded).await;
    Ok(removed)
}
