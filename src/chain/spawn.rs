//! Starting the chain watchers: one per configured chain, of its family (docs/chains.md).

use std::{sync::Arc, time::Duration};

use tokio::sync::watch;

use super::{
    node::{ChainNode, EthNode},
    watcher::Watcher,
    Chains,
};
use crate::types::Coin;

/// One watcher per configured chain, each with its own node client.
pub fn spawn_all(svc: &Chains, stop: watch::Receiver<bool>) -> Vec<tokio::task::JoinHandle<()>> {
    let mut handles = Vec::new();
    for (coin, config) in &svc.config.chains {
        let Ok(chain) = coin.parse::<Coin>() else { continue };
        if config.is_utxo() {
            match super::utxo::watch::spawn(svc, chain, config, stop.clone()) {
                Ok(handle) => handles.push(handle),
                Err(e) => tracing::error!(chain = coin.as_str(), error = %e, "chain watcher not started"),
            }
            continue;
        }
        let timeout = Duration::from_secs(config.rpc_timeout);
        let pool_cap = usize::try_from(config.pool_max_bytes).unwrap_or(usize::MAX);
        let node = match EthNode::new(&config.rpc_url, timeout, pool_cap) {
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
