//! The transfers a block holds for watched wallets: native ETH from its successful
//! transactions, tokens from the configured contracts' `Transfer` logs. Pure: everything read
//! from the node comes in the [`Fetched`] block.

use std::collections::BTreeMap;

use alloy_primitives::{Address, U256};

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

/// An amount a block moves that 256 bits cannot hold (a sum of a hostile token's logs): the
/// block fails rather than record a wrong amount.
#[derive(Debug, thiserror::Error)]
#[error("transaction {0} moves more than 2^256-1 base units")]
pub struct Overflow(pub String);

impl Finder<'_> {
    /// Every transfer of the block, at one confirmation and `unconfirmed`.
    pub fn transfers(&self, fetched: &Fetched) -> Result<Vec<Transfer>, Overflow> {
        let mut out = self.native(fetched)?;
        out.extend(self.tokens(fetched)?);
        Ok(out)
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
            outcomes: txs.iter().map(|t| (t.hash, (true, U256::ZERO))).collect(),
            block: NodeBlock {
                head: BlockHead { height: PENDING_HEIGHT, hash: String::new(), parent_hash: String::new() },
                time: seen,
                base_fee: None,
                logs_bloom: Default::default(),
                txs,
            },
            logs: Vec::new(),
        };
        // A pending transaction moves one value and no fee yet: it cannot overflow.
        let mut out = self.native(&fetched).unwrap_or_default();
        for t in &mut out {
            t.confirmations = 0;
        }
        out
    }

    /// Native ETH moved by the block's successful transactions from or to a watched address.
    fn native(&self, fetched: &Fetched) -> Result<Vec<Transfer>, Overflow> {
        let block = &fetched.block;
        let mut out: BTreeMap<String, (Transfer, Signed)> = BTreeMap::new();
        for tx in &block.txs {
            let from = self.book.owner(&tx.from);
            let to = tx.to.as_ref().and_then(|a| self.book.owner(a));
            if from.is_none() && to.is_none() {
                continue;
            }
            // A failed transaction moves no value; its fee alone is not a transfer here.
            let Some((true, fee)) = fetched.outcomes.get(&tx.hash).copied() else { continue };
            if tx.value.is_zero() && from.is_none() {
                continue;
            }
            let txid = tx.hash.to_string();
            let overflow = || Overflow(txid.clone());
            let mut add = |wallet: &WalletId, address: &Address, value: Signed, fee: U256| {
                let (t, sum) =
                    out.entry(Transfer::id_for(self.chain.as_str(), &txid, wallet)).or_insert_with(|| {
                        (
                            self.new_transfer(wallet, self.chain.clone(), &txid, block, tx.from, tx.nonce),
                            Signed::ZERO,
                        )
                    });
                t.entries.push(TransferEntry {
                    address: checksummed_eth_address(address),
                    value: value.to_string(),
                    is_change: None,
                });
                *sum = sum.checked_add(value).ok_or_else(overflow)?;
                t.fee = parse_u(&t.fee).checked_add(fee).ok_or_else(overflow)?.to_string();
                Ok::<_, Overflow>(())
            };
            if let Some(w) = from {
                let spent = tx.value.checked_add(fee).ok_or_else(overflow)?;
                add(w, &tx.from, Signed::send(spent), fee)?;
            }
            if let (Some(w), Some(a)) = (to, tx.to.as_ref()) {
                add(w, a, Signed::receive(tx.value), U256::ZERO)?;
            }
        }
        Ok(out.into_values().map(with_total).collect())
    }

    /// Token amounts moved by `Transfer` logs of the configured contracts.
    fn tokens(&self, fetched: &Fetched) -> Result<Vec<Transfer>, Overflow> {
        let block = &fetched.block;
        let mut out: BTreeMap<String, (Transfer, Signed)> = BTreeMap::new();
        for log in &fetched.logs {
            let Some(coin) = self.tokens.get(&log.contract) else { continue };
            let txid = log.txid.to_string();
            let sender = block.txs.iter().find(|t| t.hash == log.txid).map(|t| (t.from, t.nonce));
            let (sender, nonce) = sender.unwrap_or((log.from, 0));
            for (address, value) in
                [(log.from, Signed::send(log.value)), (log.to, Signed::receive(log.value))]
            {
                let Some(w) = self.book.owner(&address) else { continue };
                let (t, sum) = out.entry(Transfer::id_for(coin.as_str(), &txid, w)).or_insert_with(|| {
                    (self.new_transfer(w, coin.clone(), &txid, block, sender, nonce), Signed::ZERO)
                });
                t.entries.push(TransferEntry {
                    address: checksummed_eth_address(&address),
                    value: value.to_string(),
                    is_change: None,
                });
                *sum = sum.checked_add(value).ok_or_else(|| Overflow(txid.clone()))?;
            }
        }
        Ok(out.into_values().map(with_total).collect())
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
            if let Some((true, _)) = fetched.outcomes.get(&tx.hash) {
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
            utxo: None,
        }
    }
}

/// A decimal amount; 0 when it is not one (amounts the watcher wrote itself always are).
pub fn parse_u(s: &str) -> U256 {
    s.parse().unwrap_or(U256::ZERO)
}

/// A transfer with its value, the sum of its entries.
fn with_total((mut t, sum): (Transfer, Signed)) -> Transfer {
    t.value = sum.to_string();
    t
}

/// A signed amount in base units, exact for every value a transfer can carry: a 256-bit
/// magnitude and a direction (a two's-complement 256-bit integer would clamp 2^255 and above).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Signed {
    negative: bool,
    magnitude: U256,
}

impl Signed {
    pub const ZERO: Signed = Signed { negative: false, magnitude: U256::ZERO };

    pub fn receive(magnitude: U256) -> Self {
        Signed { negative: false, magnitude }
    }

    pub fn send(magnitude: U256) -> Self {
        Signed { negative: !magnitude.is_zero(), magnitude }
    }

    /// The sum; `None` when its magnitude exceeds 2^256-1.
    pub fn checked_add(self, other: Signed) -> Option<Signed> {
        if self.negative == other.negative {
            let magnitude = self.magnitude.checked_add(other.magnitude)?;
            return Some(Signed { negative: self.negative && !magnitude.is_zero(), magnitude });
        }
        let (big, small) = if self.magnitude >= other.magnitude { (self, other) } else { (other, self) };
        let magnitude = big.magnitude - small.magnitude;
        Some(Signed { negative: big.negative && !magnitude.is_zero(), magnitude })
    }
}

impl std::fmt::Display for Signed {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if self.negative {
            f.write_str("-")?;
        }
        write!(f, "{}", self.magnitude)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn signed_sums_are_exact_above_2_pow_255_and_refuse_to_wrap() {
        let big: U256 = U256::from(1u8) << 255;
        let five: U256 = U256::from(5u8);
        let x = Signed::receive(big + five);
        assert_eq!(x.to_string(), (big + five).to_string());
        assert_eq!(Signed::send(big + five).to_string(), format!("-{}", big + five));
        let half = Signed::receive((U256::from(1u8) << 254) + U256::from(1u8));
        let sum = half.checked_add(half).unwrap();
        assert_eq!(sum.to_string(), (big + U256::from(2u8)).to_string(), "no wrap to negative");
        assert_eq!(x.checked_add(Signed::send(big + five)).unwrap(), Signed::ZERO);
        assert_eq!(
            Signed::send(five).checked_add(Signed::receive(U256::from(2u8))).unwrap().to_string(),
            "-3"
        );
        assert!(x.checked_add(x).is_none(), "2^256+10 does not fit");
        assert_eq!(Signed::send(U256::ZERO).to_string(), "0");
    }
}
