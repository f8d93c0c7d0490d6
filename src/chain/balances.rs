//! A watched wallet's balances, read from the node (docs/chains.md, "Balances").

use std::collections::{BTreeMap, BTreeSet};

use alloy_primitives::{Address, U256};

use super::{
    found::parse_u,
    watcher::{WatchError, Watcher},
};
use crate::{
    error::Error,
    model::{
        chain::{Transfer, TransferState},
        wallet::Balances,
    },
    types::{Coin, WalletId},
};

/// Balances of the chain coin by wallet, and token balances by wallet and token.
pub type Split = (Vec<(WalletId, Balances)>, Vec<(WalletId, Coin, Balances)>);

impl Watcher {
    /// Balances from the node, summed over each wallet's addresses, for each (wallet, coin):
    /// `eth_getBalance` for the chain coin, `balanceOf` for a token. `balanceString` at `height`,
    /// `confirmedBalanceString` at `confirmations` depth, `spendableBalanceString` the confirmed
    /// one less unconfirmed sends (the stored ones, as `changes` leave them).
    pub(super) async fn balances(
        &self,
        pairs: &[(WalletId, Coin)],
        height: u64,
        changes: &[Transfer],
    ) -> Result<Vec<(WalletId, Coin, Balances)>, WatchError> {
        let confirmed_height = (height + 1).saturating_sub(self.config.confirmations);
        let mut out = Vec::with_capacity(pairs.len());
        for (w, coin) in pairs {
            let contract = self.tokens.iter().find(|(_, c)| *c == coin).map(|(a, _)| *a);
            if coin != &self.chain && contract.is_none() {
                continue;
            }
            let read = |a: Address, at: u64| async move {
                match contract {
                    Some(token) => self.node.token_balance(token, a, Some(at)).await,
                    None => self.node.balance(a, Some(at)).await,
                }
            };
            let (mut latest, mut confirmed) = (U256::ZERO, U256::ZERO);
            // A node's balances could sum past 2^256-1: an error, not a wrapped amount.
            let overflow = || Error::Internal(anyhow::anyhow!("the balances of wallet {w} sum past 2^256-1"));
            for a in self.book.of_wallet(w) {
                latest = latest.checked_add(read(*a, height).await?).ok_or_else(overflow)?;
                confirmed = confirmed.checked_add(read(*a, confirmed_height).await?).ok_or_else(overflow)?;
            }
            let stored = self.svc.store.unconfirmed_sends(w, coin.as_str()).await?;
            let now = changes.iter().filter(|t| &t.wallet_id == w && &t.coin == coin);
            let sends = stored
                .iter()
                .filter(|t| !changes.iter().any(|c| c.id == t.id))
                .chain(now.filter(|t| t.state == TransferState::Unconfirmed && t.value.starts_with('-')));
            let pending =
                sends.fold(U256::ZERO, |sum, t| sum.saturating_add(parse_u(t.value.trim_start_matches('-'))));
            let spendable = confirmed.saturating_sub(pending);
            let balances = Balances {
                balance: Some(units(latest)?),
                confirmed: Some(units(confirmed)?),
                spendable: Some(units(spendable)?),
                ..Default::default()
            };
            out.push((w.clone(), coin.clone(), balances));
        }
        Ok(out)
    }

    /// What a run writes of balances at `height`: near the head, every wallet due read, with
    /// the newest state of each transfer the run `written`; far from it, none, and the wallets
    /// the run touched, to keep as due.
    pub(super) async fn run_balances(
        &mut self,
        written: &[Transfer],
        height: u64,
        near_head: bool,
    ) -> Result<(Split, Vec<(WalletId, Coin)>), WatchError> {
        if !near_head {
            let due: BTreeSet<(WalletId, Coin)> =
                written.iter().map(|t| (t.wallet_id.clone(), t.coin.clone())).collect();
            return Ok((Split::default(), due.into_iter().collect()));
        }
        let mut newest: BTreeMap<&str, &Transfer> = BTreeMap::new();
        for t in written {
            newest.insert(&t.id, t);
        }
        let newest: Vec<Transfer> = newest.into_values().cloned().collect();
        let touched: Vec<(WalletId, Coin)> = std::mem::take(&mut self.stale).into_iter().collect();
        Ok((self.split_balances(&touched, height, &newest).await?, Vec::new()))
    }

    /// [`Self::balances`], the chain coin's apart from the tokens'.
    pub(super) async fn split_balances(
        &self,
        pairs: &[(WalletId, Coin)],
        height: u64,
        changes: &[Transfer],
    ) -> Result<Split, WatchError> {
        let all = self.balances(pairs, height, changes).await?;
        let (coin, tokens): (Vec<_>, Vec<_>) = all.into_iter().partition(|(_, c, _)| c == &self.chain);
        Ok((coin.into_iter().map(|(w, _, b)| (w, b)).collect(), tokens))
    }
}

fn units(n: U256) -> Result<crate::types::BaseUnits, WatchError> {
    n.to_string().parse().map_err(|e| Error::Internal(anyhow::anyhow!("a balance: {e:?}")).into())
}
