//! What a transaction does to the wallets Custodian watches, in the UTXO model
//! (docs/chains.md#utxo-chains): its outputs to a wallet's addresses, less its inputs that
//! spend the wallet's outputs. A node's blocks do not carry the values of the outputs their
//! inputs spend, so the spent side comes from Custodian's own set of the wallets' unspent
//! outputs, as in NBXplorer.

use std::collections::{BTreeMap, HashMap};

use super::node::{OutPoint, UtxoTx};
use crate::chain::node::NodeError;
use crate::model::chain::Position;
use crate::types::WalletId;

/// A watched output script's owner: the wallet and the address it is written as.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Owner {
    pub wallet: WalletId,
    pub address: String,
    /// A derived address's chain code and index.
    pub position: Option<Position>,
}

/// An unspent output of a watched wallet, as Custodian keeps it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KnownOutput {
    pub owner: Owner,
    /// Base units.
    pub value: u64,
    /// Its block's height; `PENDING_HEIGHT` while only in the mempool.
    pub height: u64,
    /// The mempool transaction spending it, if one does (a block's spend takes it out of the set).
    pub spent_by: Option<String>,
}

/// One output or input of a transaction as a wallet sees it: the outpoint, address and value.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Leg {
    pub outpoint: OutPoint,
    pub address: String,
    /// Base units.
    pub value: u64,
    pub position: Option<Position>,
    /// The spent output's block height (`None` for an output of the transaction itself).
    pub height: Option<u64>,
}

/// A transaction's effect on one wallet.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WalletEffect {
    pub wallet: WalletId,
    /// The transaction's outputs to the wallet.
    pub received: Vec<Leg>,
    /// The wallet's outputs it spends.
    pub spent: Vec<Leg>,
}

impl WalletEffect {
    /// Base units received, less those spent: positive for a receive, negative for a send.
    pub fn net(&self) -> i128 {
        let sum = |legs: &[Leg]| legs.iter().map(|l| i128::from(l.value)).sum::<i128>();
        sum(&self.received) - sum(&self.spent)
    }
}

/// The effects of `tx` on the wallets whose output scripts (hex) `watched` names, with
/// `unspent` the wallets' outputs it may spend. One per wallet touched, by wallet id. Errors:
/// a total past the coin's range (a node that lies), which fails the block.
pub fn effects(
    tx: &UtxoTx,
    watched: &HashMap<String, Owner>,
    unspent: &HashMap<OutPoint, KnownOutput>,
) -> Result<Vec<WalletEffect>, NodeError> {
    let mut by_wallet: BTreeMap<WalletId, WalletEffect> = BTreeMap::new();
    fn of<'a>(map: &'a mut BTreeMap<WalletId, WalletEffect>, w: &WalletId) -> &'a mut WalletEffect {
        map.entry(w.clone()).or_insert_with(|| WalletEffect {
            wallet: w.clone(),
            received: Vec::new(),
            spent: Vec::new(),
        })
    }
    for o in &tx.outputs {
        if let Some(owner) = watched.get(&o.script) {
            let outpoint = OutPoint { txid: tx.txid.clone(), vout: o.n };
            of(&mut by_wallet, &owner.wallet).received.push(Leg {
                outpoint,
                address: owner.address.clone(),
                value: o.value,
                position: owner.position,
                height: None,
            });
        }
    }
    for prev in tx.inputs.iter().filter_map(|i| i.prev.as_ref()) {
        if let Some(k) = unspent.get(prev) {
            let leg = Leg {
                outpoint: prev.clone(),
                address: k.owner.address.clone(),
                value: k.value,
                position: k.owner.position,
                height: Some(k.height),
            };
            of(&mut by_wallet, &k.owner.wallet).spent.push(leg);
        }
    }
    let effects: Vec<WalletEffect> = by_wallet.into_values().collect();
    for e in &effects {
        let total = |legs: &[Leg]| legs.iter().try_fold(0u64, |acc, l| acc.checked_add(l.value));
        if total(&e.received).is_none() || total(&e.spent).is_none() {
            return Err(NodeError::new(format!("transaction {}: a wallet's total overflows", tx.txid)));
        }
    }
    Ok(effects)
}
