//! A signer round's withdrawals, signed and sent as a batch (docs/withdrawals.md#signing-and-broadcast):
//! each step is stored for the whole batch in one transaction before the next begins, so the
//! order that keeps money moving once holds for every withdrawal (its nonce stored before it is
//! signed, its signed bytes before they are sent) while the store takes one write per step, not
//! one per withdrawal. The node's and the key store's waits overlap, at most
//! `withdrawals.signer_concurrency` at once.

use std::collections::BTreeMap;

use alloy_primitives::{Address, U256};
use futures_util::{stream, StreamExt};
use serde_json::json;

use crate::custody::{
    events::{self, Announcement},
    memo::{InFlight, Memo},
    node::{SendNode, SendRefusal},
    policy::{ActionType, Rule},
    progress::{fail, move_all, Change},
    transaction::{build, sign_tx, RoundError},
    withdrawal::machine::{self, Command, State},
    Custody,
};
use crate::{
    audit::EntryExt,
    model::{
        audit::{AuditEntry, AuditType},
        custody::{Attempt, KeyRecord, TxRequestState, Withdrawal},
    },
    store::{Batched, Signed},
    types::{Coin, TxRequestId},
};

/// Logs what went wrong with one withdrawal; it is tried again next round.
pub(super) fn alone(coin: &Coin, id: &TxRequestId, done: Result<(), RoundError>) {
    if let Err(e) = done {
        tracing::warn!(coin = %coin, txRequestId = %id, error = %e, "a withdrawal's step failed; trying again next round");
    }
}

/// A withdrawal ready for its nonce: its key, payee and gas.
struct Ready {
    w: Withdrawal,
    key: KeyRecord,
    to: Address,
    gas: u64,
}

/// A withdrawal signed, not yet stored.
struct Made {
    signed: Withdrawal,
    attempt: Attempt,
    reserve: U256,
    entry: AuditEntry,
    announce: Announcement,
}

/// Signs `ws` (all `pendingDelivery`) and stores them `signed`: how many were stored.
pub(super) async fn sign_all(
    svc: &Custody,
    (coin, chain_id): (&Coin, u64),
    node: &dyn SendNode,
    memo: &Memo,
    ws: Vec<Withdrawal>,
) -> Result<usize, RoundError> {
    let limit = usize::try_from(svc.config.withdrawals.signer_concurrency).unwrap_or(1);
    let started = tokio::time::Instant::now();
    let in_flight = InFlight::default();
    // The node's gas estimate comes before a nonce: a call that would revert fails here and
    // takes none, so it leaves no gap.
    let ready: Vec<Ready> = stream::iter(ws)
        .map(|w| {
            let in_flight = &in_flight;
            async move {
                let _slot = in_flight.enter();
                let id = w.id.clone();
                match ready(svc, node, memo, w).await {
                    Ok(r) => r,
                    Err(e) => {
                        alone(coin, &id, Err(e));
                        None
                    }
                }
            }
        })
        .buffer_unordered(limit)
        .filter_map(|r| async move { r })
        .collect()
        .await;
    if in_flight.peak() > 0 {
        svc.metrics.custody.concurrency_peak.set(i64::try_from(in_flight.peak()).unwrap_or(i64::MAX));
    }
    let ready = funded(svc, coin, ready).await?;
    if ready.is_empty() {
        return Ok(0);
    }
    let wanted: Vec<(&TxRequestId, Address, u64)> = ready
        .iter()
        .filter(|r| r.w.nonce.is_none())
        .map(|r| (&r.w.id, r.w.from, memo.node_next(&r.w.from)))
        .collect();
    let checked = started.elapsed();
    let mut reserved = svc.store.reserve_nonces(coin.as_str(), &wanted).await?.into_iter();
    let nonces = started.elapsed();
    let mut nonced = Vec::with_capacity(ready.len());
    for r in ready {
        let nonce = match r.w.nonce {
            Some(n) => n,
            None => reserved
                .next()
                .ok_or_else(|| crate::error::Error::Internal(anyhow::anyhow!("a nonce is missing")))?,
        };
        nonced.push((r, nonce));
    }
    let made: Vec<Made> = stream::iter(nonced)
        .map(|(r, nonce)| async move {
            let id = r.w.id.clone();
            match make(svc, chain_id, node, memo, r, nonce).await {
                Ok(m) => Some(m),
                Err(e) => {
                    alone(coin, &id, Err(e));
                    None
                }
            }
        })
        .buffer_unordered(limit)
        .filter_map(|m| async move { m })
        .collect()
        .await;
    let (n, signing) = (made.len(), started.elapsed());
    let stored = store(svc, made).await;
    let ms = millis;
    tracing::debug!(coin = %coin, n, checked_ms = ms(checked), nonces_ms = ms(nonces), signed_ms = ms(signing),
        stored_ms = ms(started.elapsed()), "signed a batch");
    stored
}

/// Those of `ready` the money there still pays, checked again before a nonce is taken
/// (`reserve::still_funded`): one it no longer pays would take a nonce the node then refuses, a
/// gap behind which the wallet stalls. The others wait unsigned, counted and logged.
async fn funded(svc: &Custody, coin: &Coin, ready: Vec<Ready>) -> Result<Vec<Ready>, RoundError> {
    let fresh: Vec<&Withdrawal> = ready.iter().filter(|r| r.w.nonce.is_none()).map(|r| &r.w).collect();
    let funded = crate::custody::reserve::still_funded(svc, &fresh).await?;
    let short: Vec<TxRequestId> =
        fresh.iter().zip(&funded).filter(|(_, ok)| !**ok).map(|(w, _)| w.id.clone()).collect();
    for id in &short {
        svc.metrics.custody.held_for_funds.inc();
        tracing::warn!(coin = %coin, txRequestId = %id, "the wallet's confirmed balance no longer pays this withdrawal; it waits unsigned");
    }
    Ok(ready.into_iter().filter(|r| !short.contains(&r.w.id)).collect())
}

/// `d` in whole milliseconds, for the signer's debug timings.
pub(super) fn millis(d: std::time::Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}

/// Checks `w` can be signed now and asks the node for its gas; `None` when it waits (frozen)
/// or failed for good (no key, would revert).
async fn ready(
    svc: &Custody,
    node: &dyn SendNode,
    memo: &Memo,
    w: Withdrawal,
) -> Result<Option<Ready>, RoundError> {
    let Some(key) = memo.key(&w.key_id) else {
        fail(svc, &w, Command::Fail, "the wallet's key is gone from the key store").await?;
        return Ok(None);
    };
    let Some(to) = w.recipients.first().map(|r| r.address) else { return Ok(None) };
    // A wallet frozen after the approval holds its withdrawals until the freeze ends.
    if memo.frozen(&w.wallet_id) {
        return Ok(None);
    }
    // The rules again, as they are now: a whitelist may have lost the payee since the approval.
    // Only the deny rules: the approvals the others asked for were given. A velocity sum counts
    // the withdrawals made before this one, as at its initiation.
    if w.nonce.is_none() {
        let denies: Vec<Rule> =
            memo.rules(&w.wallet_id).iter().filter(|r| r.action == ActionType::Deny).cloned().collect();
        let p = crate::custody::reserve::proposal(svc, &w, &w.coin);
        let asked = crate::custody::reserve::asked(&w, "signing", None);
        let upto = Some(&w.id);
        let verdict =
            crate::custody::reserve::verdict_now(svc, &w.wallet_id, &denies, &p, &asked, upto).await?;
        if let Some(reason) = verdict.denied {
            fail(svc, &w, Command::Fail, &format!("denied by policy: {reason}")).await?;
            return Ok(None);
        }
    }
    let gas = match memo.gas(node, &w, to).await {
        Ok(gas) => gas,
        // One holding a nonce fails too: its nonce is then filled, so it strands nothing.
        Err(e) if e.to_string().to_ascii_lowercase().contains("revert") => {
            fail(svc, &w, Command::Fail, "the node says the transaction would revert").await?;
            return Ok(None);
        }
        Err(e) => return Err(e.into()),
    };
    Ok(Some(Ready { w, key, to, gas }))
}

/// Builds `r` at `nonce` with the round's base fee and signs it in the key store (checked).
async fn make(
    svc: &Custody,
    chain_id: u64,
    node: &dyn SendNode,
    memo: &Memo,
    r: Ready,
    nonce: u64,
) -> Result<Made, RoundError> {
    let Ready { w, key, to, gas } = r;
    // The machine first: only an approved withdrawal holding `nonce` is signed.
    let reserved = State::of(&w, None)
        .ok_or(machine::Refused::NotFrom(w.state))
        .and_then(|s| machine::step(s, Command::Reserve { nonce }, svc.store.clock().now()))
        .map_err(|why| {
            crate::error::Error::Internal(anyhow::anyhow!("withdrawal {} cannot be signed: {why}", w.id))
        })?;
    let base = memo.base_fee(node).await?;
    let tx = build(svc, chain_id, base, &w, (nonce, gas), to, None);
    let (gas, max_fee, tip) = (tx.gas_limit, tx.max_fee_per_gas, tx.max_priority_fee_per_gas);
    let (raw, hash) = sign_tx(svc, &key, tx, w.from).await?;
    let reserve = U256::from(gas) * U256::from(max_fee);
    let entry = crate::audit::entry(AuditType::WithdrawalSigned).wallet(Some(&w.wallet_id)).data(json!({
        "txRequestId": w.id.as_str(), "txHash": hash.to_string(), "nonce": nonce, "keyId": key.id.as_str(),
    }));
    let now = svc.store.clock().now();
    let attempt = Attempt {
        attempt: 0,
        hash,
        signed_tx: raw.clone(),
        max_fee_per_gas: max_fee,
        priority_fee_per_gas: tip,
        created_at: now,
    };
    let state = machine::step(reserved, Command::Sign { tx_hash: hash }, now).map_err(|why| {
        crate::error::Error::Internal(anyhow::anyhow!("withdrawal {} cannot be signed: {why}", w.id))
    })?;
    let signed = Withdrawal {
        state: state.name(),
        version: w.version + 1,
        nonce: Some(nonce),
        tx_hash: Some(hash),
        signed_tx: Some(raw),
        fee_reserve: reserve,
        updated_at: now,
        ..w
    };
    let told = events::tx_request_events(&signed, Some(TxRequestState::PendingDelivery));
    let announce = Announcement::prepare(&svc.webhooks, &told).await?;
    Ok(Made { signed, attempt, reserve, entry, announce })
}

/// Stores every signed withdrawal in one transaction (each only from `pendingDelivery`).
async fn store(svc: &Custody, made: Vec<Made>) -> Result<usize, RoundError> {
    if made.is_empty() {
        return Ok(0);
    }
    let now = svc.store.clock().now();
    let items: Vec<Batched<'_, Signed<'_>>> = made
        .iter()
        .map(|m| Batched {
            change: Signed {
                id: &m.signed.id,
                version: m.signed.version - 1,
                attempt: &m.attempt,
                fee_reserve: &m.reserve,
            },
            audit: vec![m.entry.clone()],
            events: m.announce.writes(),
        })
        .collect();
    let written = svc.store.store_signed(&items, now).await?;
    drop(items);
    let mut stored = 0;
    for (m, w) in made.into_iter().zip(written) {
        if let Some(recorded) = w {
            m.announce.committed(&svc.webhooks, &recorded).await;
            svc.metrics.custody.signed.inc();
            stored += 1;
        }
    }
    Ok(stored)
}

/// Sends each `signed` withdrawal's stored bytes, then marks those the node took `delivered`
/// in one transaction: how many. Each address's go in JSON-RPC batches of up to
/// `withdrawals.send_batch`, in nonce order (one round trip each, and the node takes them in
/// order: sent side by side, a nonce could arrive ahead of its predecessor, which some pools do
/// not forward and anvil's can leave queued, docs/withdrawals.md#held-by-the-node), up to `withdrawals.signer_concurrency`
/// addresses at once. One the node does not take is sent again next round; the later ones of
/// its batch wait in the node's pool behind it, and its later batches wait for the next round.
/// "Insufficient funds" fails one; "underpriced" waits (the stuck-transaction handling bumps it
/// once sent); anything else is tried next round.
pub(super) async fn send_all(
    svc: &Custody,
    (coin, chain_id): (&Coin, u64),
    node: &dyn SendNode,
    ws: Vec<Withdrawal>,
) -> Result<usize, RoundError> {
    let limit = usize::try_from(svc.config.withdrawals.signer_concurrency).unwrap_or(1);
    let per_batch = usize::try_from(svc.config.withdrawals.send_batch).unwrap_or(1).max(1);
    let mut by_address: BTreeMap<Address, Vec<Withdrawal>> = BTreeMap::new();
    for w in ws.into_iter().filter(|w| w.signed_tx.is_some()) {
        by_address.entry(w.from).or_default().push(w);
    }
    let outcomes: Vec<(Withdrawal, Result<(), SendRefusal>)> = stream::iter(by_address.into_values())
        .map(|mut queue| async move {
            queue.sort_by_key(|w| w.nonce);
            let mut outcomes = Vec::with_capacity(queue.len());
            let mut queue = queue.into_iter().peekable();
            while queue.peek().is_some() {
                let chunk: Vec<Withdrawal> = queue.by_ref().take(per_batch).collect();
                let raws: Vec<&[u8]> = chunk.iter().filter_map(|w| w.signed_tx.as_deref()).collect();
                svc.metrics.custody.broadcasts.inc_by(raws.len() as u64);
                let sent = match raws.as_slice() {
                    [raw] => vec![node.send_raw(raw).await],
                    _ => node.send_raw_all(&raws).await,
                };
                let refused = sent.iter().any(|s| !matches!(s, Ok(_) | Err(SendRefusal::Known)));
                outcomes.extend(chunk.into_iter().zip(sent).map(|(w, sent)| (w, sent.map(|_| ()))));
                if refused {
                    break;
                }
            }
            outcomes
        })
        .buffer_unordered(limit)
        .flat_map(stream::iter)
        .collect()
        .await;
    let mut taken = Vec::new();
    for (w, sent) in outcomes {
        match sent {
            Ok(()) | Err(SendRefusal::Known) => taken.push(broadcast(w)),
            Err(SendRefusal::InsufficientFunds) => match node_has(svc, node, &w).await {
                // The refusal is one answer: the node, asked again, has the transaction.
                Ok(true) => taken.push(broadcast(w)),
                Ok(false) => {
                    let why = "the node refused it (insufficient funds for value and gas) and has not got it";
                    alone(coin, &w.id, fail(svc, &w, Command::Refused, why).await);
                }
                Err(e) => alone(coin, &w.id, Err(e)),
            },
            Err(SendRefusal::Underpriced) => {
                alone(coin, &w.id, crate::custody::replace::reprice(svc, chain_id, node, &w).await)
            }
            Err(SendRefusal::Other(e)) => alone(coin, &w.id, Err(e.into())),
        }
    }
    move_all(svc, taken).await
}

/// `w` taken by the node: `delivered`, audited as `withdrawal.broadcast`.
fn broadcast(w: Withdrawal) -> Change<'static> {
    let entry = crate::audit::entry(AuditType::WithdrawalBroadcast)
        .wallet(Some(&w.wallet_id))
        .data(json!({ "txRequestId": w.id.as_str(), "txHash": w.tx_hash.map(|h| h.to_string()) }));
    Change { w, command: Command::Sent, error: None, entry, expired: false }
}

/// Whether the node has one of `w`'s transactions after all (its current one or any it
/// replaced): it knows it (`eth_getTransactionByHash`, pool or chain) or has its receipt. A
/// refusal is final only when both say no of each.
async fn node_has(svc: &Custody, node: &dyn SendNode, w: &Withdrawal) -> Result<bool, RoundError> {
    for a in svc.store.withdrawal_attempts(&w.id).await? {
        if node.knows(a.hash).await? || node.mined(a.hash).await?.is_some() {
            return Ok(true);
        }
    }
    Ok(false)
}
