//! The transfers a block holds for watched wallets: native ETH from its successful
//! transactions, tokens from the configured contracts' `Transfer` logs. Pure: everything read
//! from the node comes in the [`Fetched`] block.

use std::collections::BTreeMap;

use alloy_primitives::{Address, I256, U256};

use super::{
    book::AddressBook,
    fetch::Fetched,
    node::{NodeBlock, NodeTx},
};
use crate::{
    model::chain::{Appearance, BlockHead, Transfer, TransferEntry, TransferState, PENDING_HEIGHT},
    types::{checksummed_eth_address, Coin, WalletId},
};

/// What finding a block's transfers needs.
pub struct Finder<'a> {
    pub chain: &'a Coin,
    pub book: &'a AddressBook,
    /// Token contracts and their coins.
    pub tokens: &'a BTreeMap<Address, Coin>,
}

impl Finder<'_> {
    /// Every transfer of the block, at one confirmation and `unconfirmed`.
    pub fn transfers(&self, fetched: &Fetched) -> Vec<Transfer> {
        let mut out = self.native(fetched);
        out.extend(self.tokens(fetched));
        out
    }

    /// Native ETH that the pool's transactions (`txs`) would move from or to a watched address,
    /// seen at `seen` (Unix seconds): at [`PENDING_HEIGHT`], with no block, no confirmation and
    /// no fee yet (known once mined). Token transfers are found at inclusion, from their logs.
    pub fn pending(&self, txs: Vec<NodeTx>, seen: i64) -> Vec<Transfer> {
        let watched = |tx: &NodeTx| {
            self.book.owner(&tx.from).is_some()
                || tx.to.as_ref().is_some_and(|a| self.book.owner(a).is_some())
        };
        let txs: Vec<NodeTx> = txs.into_iter().filter(watched).collect();
        let fetched = Fetched {
            outcomes: txs.iter().map(|t| (t.hash, Some((true, U256::ZERO)))).collect(),
            block: NodeBlock {
                head: BlockHead { height: PENDING_HEIGHT, hash: String::new(), parent_hash: String::new() },
                time: seen,
                base_fee: None,
                txs,
            },
            logs: Vec::new(),
        };
        let mut out = self.native(&fetched);
        for t in &mut out {
            t.confirmations = 0;
        }
        out
    }

    /// Native ETH moved by the block's successful transactions from or to a watched address.
    fn native(&self, fetched: &Fetched) -> Vec<Transfer> {
        let block = &fetched.block;
        let mut out: BTreeMap<String, Transfer> = BTreeMap::new();
        for tx in &block.txs {
            let from = self.book.owner(&tx.from);
            let to = tx.to.as_ref().and_then(|a| self.book.owner(a));
            if from.is_none() && to.is_none() {
                continue;
            }
            // A failed transaction moves no value; its fee alone is not a transfer here.
            let Some(Some((true, fee))) = fetched.outcomes.get(&tx.hash).copied() else { continue };
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
                    address: checksummed_eth_address(address),
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
        out.into_values().map(total).collect()
    }

    /// Token amounts moved by `Transfer` logs of the configured contracts.
    fn tokens(&self, fetched: &Fetched) -> Vec<Transfer> {
        let block = &fetched.block;
        let mut out: BTreeMap<String, Transfer> = BTreeMap::new();
        for log in &fetched.logs {
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
                    address: checksummed_eth_address(&address),
                    value: value.to_string(),
                });
            }
        }
        out.into_values().map(total).collect()
    }

    /// The watched addresses the block shows on chain, each once: the contracts its successful
    /// transactions create, and the entries of its transfers (`found`).
    pub fn appearances(&self, fetched: &Fetched, found: &[Transfer]) -> Vec<Appearance> {
        let block = &fetched.block;
        let mut out: Vec<Appearance> = Vec::new();
        let mut add = |address: String, wallet: &WalletId, txid: String| {
            if !out.iter().any(|a| a.address == address) {
                let base = crate::types::parse_eth_address(&address).is_ok_and(|a| self.book.is_base(&a));
                out.push(Appearance {
                    address,
                    base,
                    wallet_id: wallet.clone(),
                    height: block.head.height,
                    block_hash: block.head.hash.clone(),
                    txid,
                });
            }
        };
        for tx in block.txs.iter().filter(|tx| tx.to.is_none()) {
            let created = tx.from.create(tx.nonce);
            let Some(wallet) = self.book.owner(&created) else { continue };
            if let Some(Some((true, _))) = fetched.outcomes.get(&tx.hash) {
                add(checksummed_eth_address(&created), wallet, tx.hash.to_string());
            }
        }
        for t in found {
            for e in &t.entries {
                add(e.address.clone(), &t.wallet_id, t.txid.clone());
            }
        }
        out
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
            sender: checksummed_eth_address(&sender),
            nonce,
        }
    }
}

/// A decimal amount; 0 when it is not one (amounts the watcher wrote itself always are).
pub fn parse_u(s: &str) -> U256 {
    s.parse().unwrap_or(U256::ZERO)
}

/// Sets a transfer's value to the sum of its entries.
fn total(mut t: Transfer) -> Transfer {
    let sum = t.entries.iter().fold(I256::ZERO, |acc, e| acc + e.value.parse::<I256>().unwrap_or(I256::ZERO));
    t.value = sum.to_string();
    t
}
