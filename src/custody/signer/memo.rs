//! What one signer round reads once, before its withdrawals are signed side by side: their
//! keys, their wallets' freezes and policy rules, each address's pending nonce with the node and the next base
//! fee (asked once, by the first that needs it). And the count of steps in flight, whose peak is a metric.

use std::{
    collections::HashMap,
    sync::{
        atomic::{AtomicUsize, Ordering},
        Arc,
    },
};

use alloy_primitives::Address;

use crate::custody::{
    node::SendNode,
    policy::Rule,
    transaction::{gas_of, RoundError},
    withdrawal::TRANSFER_GAS,
    Custody,
};
use crate::{
    chain::node::NodeError,
    model::custody::{KeyRecord, Withdrawal},
    types::{KeyId, WalletId},
};

/// A round's reads, shared by its withdrawals.
#[derive(Default)]
pub(super) struct Memo {
    /// The node's next base fee, wei per gas: asked by the first withdrawal that holds its
    /// nonce (so a crash while asking leaves the nonce stored, as each step's order wants).
    base_fee: tokio::sync::OnceCell<u128>,
    /// Each address's pending nonce with the node, read at the round's start: the store's
    /// counter runs ahead of it once the round reserved one, and a reservation takes the larger.
    node_next: HashMap<Address, u64>,
    /// Each wallet's freeze and policy rules.
    gates: HashMap<WalletId, (bool, Vec<Rule>)>,
    keys: HashMap<KeyId, Option<KeyRecord>>,
    /// Whether each payee of a plain payment holds code, asked once a round.
    code: std::sync::Mutex<HashMap<Address, Arc<tokio::sync::OnceCell<bool>>>>,
}

/// How far past an address's mined count the node's pending count is believed when nonces are
/// reserved (its transactions waiting in the pool that the store does not know).
pub const MAX_POOL_AHEAD: u64 = 16;

impl Memo {
    /// Reads what signing `ws` needs, each thing once.
    pub(super) async fn read(
        svc: &Custody,
        node: &dyn SendNode,
        ws: &[Withdrawal],
    ) -> Result<Self, RoundError> {
        let mut memo = Memo::default();
        for w in ws {
            if !memo.keys.contains_key(&w.key_id) {
                let key = svc.store.custody_key(&w.key_id).await?;
                memo.keys.insert(w.key_id.clone(), key);
            }
            if !memo.gates.contains_key(&w.wallet_id) {
                let gate = crate::custody::withdrawal::gate(svc, &w.wallet_id).await?;
                memo.gates.insert(w.wallet_id.clone(), gate);
            }
            if w.nonce.is_none() && !memo.node_next.contains_key(&w.from) {
                // The pending count raises the store's counter (transactions the store does not
                // know, after a restore), but never more than MAX_POOL_AHEAD past the mined
                // count: one answer far too high would make every nonce between a gap to fill.
                let (pending, mined) = (node.pending_nonce(w.from).await?, node.latest_nonce(w.from).await?);
                memo.node_next.insert(w.from, pending.min(mined.saturating_add(MAX_POOL_AHEAD)));
            }
        }
        Ok(memo)
    }

    /// The key, `None` when the key store no longer has it.
    pub(super) fn key(&self, id: &KeyId) -> Option<KeyRecord> {
        self.keys.get(id).cloned().flatten()
    }

    pub(super) fn frozen(&self, wallet: &WalletId) -> bool {
        self.gates.get(wallet).is_none_or(|g| g.0)
    }

    /// The wallet's policy rules as they are now.
    pub(super) fn rules(&self, wallet: &WalletId) -> &[Rule] {
        self.gates.get(wallet).map_or(&[], |g| g.1.as_slice())
    }

    /// The node's pending nonce of `address` at the round's start (0 when not read: the store's
    /// counter then decides).
    pub(super) fn node_next(&self, address: &Address) -> u64 {
        self.node_next.get(address).copied().unwrap_or(0)
    }

    /// The gas of `w` to `to` ([`gas_of`]), without asking the node for an estimate when `w`
    /// is a plain payment to an address with no code: that costs exactly
    /// [`TRANSFER_GAS`] (the yellow paper's G_transaction; no call data, nothing executed).
    /// Whether `to` holds code is asked once a round per payee. The first 0xffff addresses
    /// (precompiles, which charge for the call even with no data) and an account delegated by
    /// EIP-7702 (its code is the delegation) are estimated as before.
    pub(super) async fn gas(
        &self,
        node: &dyn SendNode,
        w: &Withdrawal,
        to: Address,
    ) -> Result<u64, NodeError> {
        let low = to.as_slice()[..18].iter().all(|b| *b == 0);
        if w.token.is_none() && !low {
            let cell = match self.code.lock() {
                Ok(mut m) => m.entry(to).or_default().clone(),
                Err(_) => Arc::default(),
            };
            if !*cell.get_or_try_init(|| node.has_code(to)).await? {
                return Ok(TRANSFER_GAS);
            }
        }
        gas_of(node, w, to).await
    }

    pub(super) async fn base_fee(&self, node: &dyn SendNode) -> Result<u128, RoundError> {
        Ok(*self.base_fee.get_or_try_init(|| node.next_base_fee()).await?)
    }
}

/// Steps of a round in flight, and the most at once.
#[derive(Default)]
pub(super) struct InFlight {
    now: AtomicUsize,
    peak: AtomicUsize,
}

/// One step's place in [`InFlight`], given back on drop.
pub(super) struct Slot<'a>(&'a InFlight);

impl InFlight {
    pub(super) fn enter(&self) -> Slot<'_> {
        let now = self.now.fetch_add(1, Ordering::SeqCst) + 1;
        self.peak.fetch_max(now, Ordering::SeqCst);
        Slot(self)
    }

    pub(super) fn peak(&self) -> usize {
        self.peak.load(Ordering::SeqCst)
    }
}

impl Drop for Slot<'_> {
    fn drop(&mut self) {
        self.0.now.fetch_sub(1, Ordering::SeqCst);
    }
}
