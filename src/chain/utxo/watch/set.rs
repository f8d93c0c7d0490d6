//! The watcher's set of its wallets' outputs (docs/chains.md#utxo-chains), kept in memory
//! beside the store's `utxos` table and changed the same way: what a transaction's effect does
//! to it, what a mempool transaction leaving does, and the balances it gives. Balances come
//! from memory so that a write costs what its blocks change, not what a wallet holds.

use std::collections::{BTreeMap, BTreeSet, HashMap};

use super::super::effect::{KnownOutput, Owner, WalletEffect};
use super::super::legs::Placement;
use super::super::node::OutPoint;
use crate::model::chain::{Unspent, PENDING_HEIGHT};
use crate::store::{Spend, UtxoBalance, UtxoChanges};
use crate::types::{Coin, WalletId};

/// The watched wallets' outputs not spent in a block, by outpoint.
pub(super) type Set = HashMap<OutPoint, KnownOutput>;

/// Takes in `e` (transaction `txid`'s effect on a wallet, at `at`): its spends and its new
/// outputs, in `changes` and in the set. An output spent in the mempool stays in the set,
/// marked: a block may still spend it, by that transaction or another.
pub(super) fn take_effect(
    unspent: &mut Set,
    changes: &mut UtxoChanges,
    chain: &Coin,
    txid: &str,
    e: WalletEffect,
    at: &Placement,
) {
    for leg in &e.spent {
        if at.height == PENDING_HEIGHT {
            if let Some(k) = unspent.get_mut(&leg.outpoint) {
                k.spent_by = Some(txid.to_string());
            }
        } else {
            unspent.remove(&leg.outpoint);
        }
        let (spent, vout) = (leg.outpoint.txid.clone(), leg.outpoint.vout);
        changes.spends.push(Spend { txid: spent, vout, by: txid.to_string(), height: at.height });
    }
    for leg in e.received {
        changes.outputs.push(Unspent {
            chain: chain.clone(),
            txid: leg.outpoint.txid.clone(),
            vout: leg.outpoint.vout,
            wallet_id: e.wallet.clone(),
            address: leg.address.clone(),
            value: leg.value,
            height: at.height,
            block_hash: at.block_hash.clone(),
            date: at.date,
            position: leg.position,
            spent: None,
        });
        // Now in a block, it keeps the mempool spend it had (as the store's row does).
        let owner = Owner { wallet: e.wallet.clone(), address: leg.address, position: leg.position };
        let known = KnownOutput { owner, value: leg.value, height: at.height, spent_by: None };
        unspent.entry(leg.outpoint).and_modify(|k| k.height = at.height).or_insert(known);
    }
}

/// Mempool transaction `txid` left unmined: its outputs go, its spends are undone (as
/// `UtxoChanges::dropped` does in the store).
pub(super) fn drop_pending(unspent: &mut Set, txid: &str) {
    unspent.retain(|o, k| !(o.txid == txid && k.height == PENDING_HEIGHT));
    for k in unspent.values_mut().filter(|k| k.spent_by.as_deref() == Some(txid)) {
        k.spent_by = None;
    }
}

/// The balances of `wallets` (base units) as of block `tip`: an output is confirmed once
/// `confirmations` blocks, its own counted, are at or below `tip`. One pass over the set.
pub(super) fn balances(
    unspent: &Set,
    wallets: &BTreeSet<WalletId>,
    tip: u64,
    confirmations: u64,
) -> Vec<(WalletId, UtxoBalance)> {
    let mut out: BTreeMap<&WalletId, UtxoBalance> =
        wallets.iter().map(|w| (w, UtxoBalance::default())).collect();
    if out.is_empty() {
        return Vec::new();
    }
    for k in unspent.values() {
        let Some(b) = out.get_mut(&k.owner.wallet) else { continue };
        let unspent = k.spent_by.is_none();
        let confirmed =
            k.height != PENDING_HEIGHT && k.height.saturating_add(confirmations) <= tip.saturating_add(1);
        if unspent {
            b.balance = b.balance.saturating_add(k.value);
        }
        if confirmed {
            b.confirmed = b.confirmed.saturating_add(k.value);
            if unspent {
                b.spendable = b.spendable.saturating_add(k.value);
            }
        }
    }
    out.into_iter().map(|(w, b)| (w.clone(), b)).collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::chain::utxo::effect::Leg;

    fn leg(txid: &str, value: u64) -> Leg {
        let outpoint = OutPoint { txid: txid.into(), vout: 0 };
        Leg { outpoint, address: "Qaddr".into(), value, position: None, height: None }
    }

    fn at(height: u64) -> Placement {
        Placement { height, block_hash: String::new(), date: 0 }
    }

    /// A receive, a child spending it in the mempool, the parent mined, the child dropped:
    /// the balances follow the store's rules at each step (confirmed at 2 confirmations).
    #[test]
    fn balances_follow_mempool_spends_blocks_and_drops() {
        let wallet: WalletId = "a".repeat(32).parse().unwrap();
        let chain: Coin = "tltc".parse().unwrap();
        let wallets = BTreeSet::from([wallet.clone()]);
        let (mut set, mut changes) = (Set::new(), UtxoChanges::default());
        let effect = |received, spent| WalletEffect { wallet: wallet.clone(), received, spent };
        let get = |set: &Set, tip| {
            let b = balances(set, &wallets, tip, 2)[0].1;
            (b.balance, b.confirmed, b.spendable)
        };
        take_effect(
            &mut set,
            &mut changes,
            &chain,
            "p",
            effect(vec![leg("p", 5)], vec![]),
            &at(PENDING_HEIGHT),
        );
        assert_eq!(get(&set, 100), (5, 0, 0));
        take_effect(
            &mut set,
            &mut changes,
            &chain,
            "c",
            effect(vec![], vec![leg("p", 5)]),
            &at(PENDING_HEIGHT),
        );
        assert_eq!(get(&set, 100), (0, 0, 0));
        // The parent is mined at 101; the child still spends its output.
        take_effect(&mut set, &mut changes, &chain, "p", effect(vec![leg("p", 5)], vec![]), &at(101));
        assert_eq!(get(&set, 101), (0, 0, 0));
        assert_eq!(get(&set, 102), (0, 5, 0));
        drop_pending(&mut set, "c");
        assert_eq!(get(&set, 102), (5, 5, 5));
        // Spent in a block: gone from the set.
        take_effect(&mut set, &mut changes, &chain, "d", effect(vec![], vec![leg("p", 5)]), &at(103));
        assert_eq!(get(&set, 103), (0, 0, 0));
        assert_eq!(changes.spends.len(), 2);
    }
}
