//! The §6 events the chain watcher emits, fanned out by the one ingestion path the API uses
//! (`webhooks::events::prepare_routed`) and stored by the watcher in the transaction that
//! stores what they tell, with ids derived from what they say so that a replay after a crash
//! is the same event (docs/chains.md, "Events").

use std::collections::BTreeMap;

use futures_util::FutureExt;

use super::Chains;
use crate::{
    error::Error,
    model::{
        chain::{Appearance, BlockHead, Transfer, TransferState},
        webhook::{LevelKind, WebhookFilter},
    },
    types::{Coin, WalletId},
    webhooks::{
        event::{AppearanceEvent, BlockEvent, Event, TransactionEvent, TransferEvent},
        events::{prepare_routed, Prepared},
    },
};

/// The `numConfirmations` a wallet webhook waits for (0: every state).
fn wanted(w: &crate::model::webhook::Webhook) -> u64 {
    w.level.num_confirmations().and_then(|n| u64::try_from(n).ok()).unwrap_or(0)
}

/// A `transfer` event for `t` entering its state. `unconfirmed` and `confirmed` go to the
/// wallet's webhooks without `numConfirmations`; `removed` and `replaced` also to those whose
/// number the transfer had reached, which were told of it. The id is derived from what the
/// event says, so a replay is the same event.
pub async fn transfer(svc: &Chains, t: &Transfer) -> Result<Option<Prepared>, Error> {
    let reached = t.confirmations;
    let told = |w: &crate::model::webhook::Webhook| match t.state {
        TransferState::Removed | TransferState::Replaced => wanted(w) <= reached,
        _ => wanted(w) == 0,
    };
    send(svc, t, t.state.as_str(), t.confirmations, told).await
}

/// A `transfer` event for `t`, `unconfirmed` again after a reorg took it out of block
/// `after` (a UTXO transaction back in the mempool): an id of its own, so the receivers that
/// heard of its `removed` hear of it again.
pub async fn transfer_again(svc: &Chains, t: &Transfer, after: &str) -> Result<Option<Prepared>, Error> {
    send(svc, t, &format!("unconfirmed-after-{after}"), t.confirmations, |w| wanted(w) == 0).await
}

/// A `transfer` event for `t` at `n` confirmations, to the wallet's webhooks that wait for
/// exactly `n` (BitGo's `numConfirmations`): each hears of a transfer once.
pub async fn reached(svc: &Chains, t: &Transfer, n: u64) -> Result<Option<Prepared>, Error> {
    send(svc, t, &format!("c{n}"), n, |w| wanted(w) == n).await
}

async fn send(
    svc: &Chains,
    t: &Transfer,
    what: &str,
    confirmations: u64,
    keep: impl Fn(&crate::model::webhook::Webhook) -> bool,
) -> Result<Option<Prepared>, Error> {
    // A send may be a withdrawal of the service's own (docs/withdrawals.md#events).
    let tx_request_id = match t.kind() {
        "send" => svc.store.tx_request_of(&t.txid.to_lowercase()).await?.map(|id| id.as_str().to_string()),
        _ => None,
    };
    let event = Event::Transfer(TransferEvent {
        coin: t.coin.clone(),
        wallet_id: t.wallet_id.clone(),
        transfer_id: t.id.clone(),
        hash: t.txid.clone(),
        state: t.state.as_str(),
        transfer_type: t.kind(),
        value_string: t.value.clone(),
        base_value_string: t.base_value(),
        fee_string: t.fee.clone(),
        height: t.height,
        confirmations,
        tx_request_id,
        told: what.to_string(),
        block_hash: t.block_hash.clone(),
    });
    prepare_routed(&svc.webhooks, &event, keep).await
}

/// A `transaction` event: a transaction touching the wallet was included in a block (once per
/// transaction, wallet and block), to the wallet's `transaction` webhooks. `t` is one of the
/// transaction's transfers for the wallet.
pub async fn transaction(svc: &Chains, t: &Transfer) -> Result<Option<Prepared>, Error> {
    let event = Event::Transaction(TransactionEvent {
        coin: t.chain.clone(),
        wallet_id: t.wallet_id.clone(),
        hash: t.txid.clone(),
        transfer: t.id.clone(),
        height: t.height,
        block_hash: t.block_hash.clone(),
    });
    prepare_routed(&svc.webhooks, &event, |_| true).await
}

/// `block` events: the block that reaches a block webhook's `numConfirmations` with this one
/// (0 counts as 1: the block itself), to the webhooks with exactly that number, so a block
/// orphaned before then is never announced. `before` are the blocks just below `block` not yet
/// stored (read in the same run).
pub async fn blocks(
    svc: &Chains,
    chain: &Coin,
    reorg_depth: u64,
    block: &BlockHead,
    before: &[BlockHead],
) -> Result<Vec<Prepared>, Error> {
    let filter = WebhookFilter {
        scope: LevelKind::Block,
        coin: Some(chain.clone()),
        webhook_type: Some("block".into()),
        state: None,
        ..Default::default()
    };
    let hooks = svc.store.routing_webhooks(&filter).await?;
    let mut depths: Vec<u64> = hooks
        .iter()
        .filter_map(|w| w.level.num_confirmations())
        .map(|n| u64::try_from(n.max(1)).unwrap_or(1))
        .collect();
    depths.sort_unstable();
    depths.dedup();
    let mut out = Vec::new();
    for n in depths {
        if n > reorg_depth || n > block.height + 1 {
            continue;
        }
        let height = block.height + 1 - n;
        let hash = if n == 1 {
            block.hash.clone()
        } else if let Some(h) = before.iter().find(|h| h.height == height) {
            h.hash.clone()
        } else {
            match svc.store.chain_heads(chain.as_str(), height).await?.first() {
                Some(h) if h.height == height => h.hash.clone(),
                _ => continue,
            }
        };
        let event =
            Event::Block(BlockEvent { coin: chain.clone(), block_id: hash, height, confirmations: n });
        let keep = move |w: &crate::model::webhook::Webhook| {
            w.level.num_confirmations().map(|c| u64::try_from(c.max(1)).unwrap_or(1)) == Some(n)
        };
        out.extend(prepare_routed(&svc.webhooks, &event, keep).await?);
    }
    Ok(out)
}

/// For each address that appeared on chain for the first time: `address_confirmation` to its
/// wallet's webhooks, and, when it is the wallet's base address, `wallet_confirmation` to the
/// coin's block webhooks of that type. The ids carry the block hash: a reorg that takes the
/// block away forgets the appearance, and the new branch announces it again.
pub fn appearances(chain: &Coin, appeared: &[Appearance]) -> Vec<Event> {
    let mut events = Vec::new();
    for a in appeared {
        let appearance = AppearanceEvent {
            coin: chain.clone(),
            wallet_id: a.wallet_id.clone(),
            address: a.address.clone(),
            hash: a.txid.clone(),
            height: a.height,
            block_hash: a.block_hash.clone(),
        };
        events.push(Event::AddressConfirmation(appearance.clone()));
        if a.base {
            events.push(Event::WalletConfirmation(appearance));
        }
    }
    events
}

/// Complete events (appearances, fee alerts), fanned out at once.
pub async fn all(svc: &Chains, events: Vec<Event>) -> Result<Vec<Prepared>, Error> {
    let sends = events.iter().map(|e| prepare_routed(&svc.webhooks, e, |_| true));
    Ok(futures_util::future::try_join_all(sends).await?.into_iter().flatten().collect())
}

/// The transfer events of blocks, fanned out at once. `entered` are transfers that entered a
/// state (found or changed), `found` the blocks' own, `counts` live transfers with the
/// confirmations they have now.
pub async fn block_transfers(
    svc: &Chains,
    entered: &[Transfer],
    found: &[Transfer],
    counts: &[(Transfer, u64)],
) -> Result<Vec<Prepared>, Error> {
    let mut waiting: BTreeMap<WalletId, Vec<u64>> = BTreeMap::new();
    for (t, _) in counts {
        if !waiting.contains_key(&t.wallet_id) {
            let wanted = waited_counts(svc, &t.wallet_id).await?;
            waiting.insert(t.wallet_id.clone(), wanted);
        }
    }
    let states = entered.iter().map(|t| transfer(svc, t).boxed());
    let reached = counts
        .iter()
        .filter(|(t, c)| waiting.get(&t.wallet_id).is_some_and(|w| w.contains(c)))
        .map(|(t, c)| reached(svc, t, *c).boxed());
    // One `transaction` event per transaction and wallet the block holds.
    let mut seen = std::collections::BTreeSet::new();
    let included = found
        .iter()
        .filter(|t| seen.insert((t.txid.clone(), t.wallet_id.clone())))
        .map(|t| transaction(svc, t).boxed());
    let all = futures_util::future::try_join_all(states.chain(reached).chain(included)).await?;
    Ok(all.into_iter().flatten().collect())
}

/// The `numConfirmations` (above 0) the wallet's transfer webhooks wait for.
async fn waited_counts(svc: &Chains, wallet: &WalletId) -> Result<Vec<u64>, Error> {
    let filter = crate::model::webhook::WebhookFilter {
        scope: crate::model::webhook::LevelKind::Wallet,
        wallet_id: Some(wallet.clone()),
        webhook_type: Some("transfer".into()),
        state: None,
        ..Default::default()
    };
    let hooks = svc.store.routing_webhooks(&filter).await?;
    Ok(hooks
        .iter()
        .filter_map(|w| w.level.num_confirmations().and_then(|n| u64::try_from(n).ok()))
        .filter(|n| *n > 0)
        .collect())
}

/// Events fanned out for one write: the rows that write stores and what to do after its commit.
#[derive(Default)]
pub struct Batch {
    pub events: Vec<crate::store::EventWrite>,
    handoffs: Vec<crate::webhooks::events::Handoff>,
}

impl Batch {
    pub fn extend(&mut self, prepared: impl IntoIterator<Item = Prepared>) {
        for p in prepared {
            self.events.push(p.event);
            self.handoffs.push(p.handoff);
        }
    }

    /// After the write that stored [`Batch::events`] committed, with what each got (in order).
    pub async fn committed(self, svc: &Chains, recorded: &[crate::store::Recorded]) {
        for (handoff, recorded) in self.handoffs.into_iter().zip(recorded) {
            handoff.committed(&svc.webhooks, recorded).await;
        }
    }
}
