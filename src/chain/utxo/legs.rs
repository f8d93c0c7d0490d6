//! A UTXO transaction's transfer for one wallet, in BitGo's shape (docs/chains.md#utxo-chains):
//! `entries` by address (a send's outputs marked `isChange` when they return to the wallet),
//! every `input` and `output` with its `txid:vout` id, and a send's fee.

use std::collections::{BTreeMap, HashMap};

use super::address::address_of_script;
use super::effect::{Owner, WalletEffect};
use super::node::UtxoTx;
use super::params::AddressParams;
use crate::model::chain::{Transfer, TransferEntry, TransferState, UtxoLeg, UtxoLegs, PENDING_HEIGHT};
use crate::types::Coin;

/// Where a transaction is: a block's height, hash and time, or the mempool
/// ([`PENDING_HEIGHT`], no hash, when first seen).
#[derive(Debug, Clone)]
pub struct Placement {
    pub height: u64,
    pub block_hash: String,
    /// Unix seconds.
    pub date: i64,
}

/// The transfer `e` (a wallet's part in `tx`) is, in state `Unconfirmed` at `at`, with
/// `watched` the chain's output scripts.
pub fn transfer_of(
    chain: &Coin,
    tx: &UtxoTx,
    e: &WalletEffect,
    watched: &HashMap<String, Owner>,
    params: AddressParams,
    at: &Placement,
) -> Transfer {
    let in_block = (at.height != PENDING_HEIGHT).then_some(at.height);
    let (inputs, outputs) = legs_of(tx, e, watched, params, in_block);
    let sending = !e.spent.is_empty();
    let entries = entries_of(e, &outputs);
    // The fee is known when every input is the wallet's: what they held less what was paid out.
    let all_ours = tx.inputs.iter().all(|i| i.prev.is_some()) && e.spent.len() == tx.inputs.len();
    let fee = match sending && all_ours {
        true => {
            let paid: u128 = tx.outputs.iter().map(|o| u128::from(o.value)).sum();
            let held: u128 = e.spent.iter().map(|l| u128::from(l.value)).sum();
            held.saturating_sub(paid).to_string()
        }
        false => "0".into(),
    };
    Transfer {
        id: Transfer::id_for(chain.as_str(), &tx.txid, &e.wallet),
        wallet_id: e.wallet.clone(),
        coin: chain.clone(),
        chain: chain.clone(),
        txid: tx.txid.clone(),
        height: at.height,
        block_hash: at.block_hash.clone(),
        state: TransferState::Unconfirmed,
        value: e.net().to_string(),
        fee,
        entries,
        date: at.date,
        confirmations: u64::from(in_block.is_some()),
        sender: String::new(),
        nonce: 0,
        utxo: Some(UtxoLegs { inputs, outputs, rbf: tx.signals_rbf() }),
    }
}

/// Every input and output of `tx` as wallet `e.wallet` sees it (BitGo's `inputs[]` and
/// `outputs[]`); `in_block` is the transaction's block height.
fn legs_of(
    tx: &UtxoTx,
    e: &WalletEffect,
    watched: &HashMap<String, Owner>,
    params: AddressParams,
    in_block: Option<u64>,
) -> (Vec<UtxoLeg>, Vec<UtxoLeg>) {
    let own = |script: &str| watched.get(script).filter(|o| o.wallet == e.wallet);
    let inputs: Vec<UtxoLeg> = tx
        .inputs
        .iter()
        .filter_map(|i| i.prev.as_ref())
        .map(|prev| {
            let leg = e.spent.iter().find(|l| &l.outpoint == prev);
            UtxoLeg {
                id: format!("{}:{}", prev.txid, prev.vout),
                address: leg.map(|l| l.address.clone()),
                value: leg.map(|l| l.value),
                block_height: leg.and_then(|l| l.height).filter(|h| *h != PENDING_HEIGHT),
                wallet: leg.map(|_| e.wallet.clone()),
                chain: leg.and_then(|l| l.position).map(|p| p.chain),
                index: leg.and_then(|l| l.position).map(|p| p.index),
            }
        })
        .collect();
    let outputs: Vec<UtxoLeg> = tx
        .outputs
        .iter()
        .map(|o| {
            let owner = own(&o.script);
            UtxoLeg {
                id: format!("{}:{}", tx.txid, o.n),
                address: owner.map(|w| w.address.clone()).or_else(|| address_of_script(&o.script, params)),
                value: Some(o.value),
                block_height: in_block,
                wallet: owner.map(|_| e.wallet.clone()),
                chain: owner.and_then(|w| w.position).map(|p| p.chain),
                index: owner.and_then(|w| w.position).map(|p| p.index),
            }
        })
        .collect();
    (inputs, outputs)
}

/// BitGo's `entries`: a receive's outputs to the wallet by address; a send's net by address,
/// the wallet's own (its change) marked `isChange`.
fn entries_of(e: &WalletEffect, outputs: &[UtxoLeg]) -> Vec<TransferEntry> {
    let sending = !e.spent.is_empty();
    let mut by_address: BTreeMap<String, (i128, bool)> = BTreeMap::new();
    if sending {
        for l in &e.spent {
            by_address.entry(l.address.clone()).or_insert((0, true)).0 -= i128::from(l.value);
        }
        for o in outputs {
            let (Some(address), Some(value)) = (&o.address, o.value) else { continue };
            let entry = by_address.entry(address.clone()).or_insert((0, o.wallet.is_some()));
            entry.0 += i128::from(value);
        }
    } else {
        for l in &e.received {
            by_address.entry(l.address.clone()).or_insert((0, true)).0 += i128::from(l.value);
        }
    }
    by_address
        .into_iter()
        .map(|(address, (value, ours))| TransferEntry {
            address,
            value: value.to_string(),
            is_change: sending.then_some(ours && value > 0),
        })
        .collect()
}
