//! A withdrawal's state changes the signer makes: each with its audit entry and its events,
//! written only from the state it was read in.

use serde_json::json;

use crate::custody::{
    events::{self, Announcement},
    transaction::RoundError,
    withdrawal::machine::{self, Command, Refused, State},
    Custody,
};
use crate::{
    audit::EntryExt,
    model::{
        audit::{AuditEntry, AuditType},
        custody::Withdrawal,
    },
    store::{Batched, Move},
};

/// One state change the signer makes: `command` applied to `w` (the machine decides its next
/// state, `error` for people), with `entry`; told as `txRequest`/`txRequestTransaction`, and
/// `transactionExpire` too when `expired`.
pub(super) struct Change<'a> {
    pub w: Withdrawal,
    pub command: Command,
    pub error: Option<&'a str>,
    pub entry: AuditEntry,
    pub expired: bool,
}

/// Writes `changes` in one store transaction, each only if its withdrawal is still at the
/// version it was read at, with their events: how many were written. A change the machine
/// refuses is left out (logged).
pub(super) async fn move_all(svc: &Custody, changes: Vec<Change<'_>>) -> Result<usize, RoundError> {
    if changes.is_empty() {
        return Ok(0);
    }
    let now = svc.store.clock().now();
    let mut prepared = Vec::with_capacity(changes.len());
    for c in changes {
        let decided = State::of(&c.w, None)
            .ok_or(Refused::NotFrom(c.w.state))
            .and_then(|s| machine::step(s, c.command, now));
        let to = match decided {
            Ok(to) if to.name() != c.w.state => to.name(),
            Ok(_) => continue,
            Err(why) => {
                tracing::debug!(txRequestId = %c.w.id, command = ?c.command, %why, "a withdrawal's change was not made");
                continue;
            }
        };
        let from = c.w.state;
        let version = c.w.version;
        let moved = Withdrawal { state: to, version: version + 1, updated_at: now, ..c.w };
        let mut told = events::tx_request_events(&moved, Some(from));
        if c.expired {
            told.push(events::expire_event(&moved, from));
        }
        let announce = Announcement::prepare(&svc.webhooks, &told).await?;
        prepared.push((moved, version, c.error, c.entry, announce));
    }
    let items: Vec<Batched<'_, Move<'_>>> = prepared
        .iter()
        .map(|(moved, version, error, entry, announce)| Batched {
            change: Move { id: &moved.id, version: *version, to: moved.state, error: *error },
            audit: vec![entry.clone()],
            events: announce.writes(),
        })
        .collect();
    let written = svc.store.move_withdrawals(&items, now).await?;
    drop(items);
    let mut count = 0;
    for ((.., announce), w) in prepared.into_iter().zip(written) {
        if let Some(recorded) = w {
            announce.committed(&svc.webhooks, &recorded).await;
            count += 1;
        }
    }
    Ok(count)
}

/// Applies `command` to `w` when it makes it `failed` (with `why`), audited as
/// `withdrawal.failed`: `Fail` before it is sent, `Refused` for a send the node does not have,
/// `Settle` for a reverted receipt at depth.
pub(super) async fn fail(
    svc: &Custody,
    w: &Withdrawal,
    command: Command,
    why: &str,
) -> Result<(), RoundError> {
    let entry = crate::audit::entry(AuditType::WithdrawalFailed)
        .wallet(Some(&w.wallet_id))
        .data(json!({ "txRequestId": w.id.as_str(), "reason": why, "nonce": w.nonce }));
    let change = Change { w: w.clone(), command, error: Some(why), entry, expired: false };
    move_all(svc, vec![change]).await.map(drop)
}

/// Cancels `w`, approved but not signed within `withdrawals.delivery_deadline`: `canceled`,
/// told as `txRequest` and `transactionExpire`, audited as `withdrawal.expired`.
pub(super) async fn expire_unsigned(svc: &Custody, w: &Withdrawal) -> Result<(), RoundError> {
    let why = "not signed within withdrawals.delivery_deadline";
    let entry = crate::audit::entry(AuditType::WithdrawalExpired)
        .wallet(Some(&w.wallet_id))
        .data(json!({ "txRequestId": w.id.as_str(), "reason": why }));
    let deadline = i64::try_from(svc.config.withdrawals.delivery_deadline).unwrap_or(i64::MAX);
    let command = Command::MissDeadline { deadline };
    let change = Change { w: w.clone(), command, error: Some(why), entry, expired: true };
    move_all(svc, vec![change]).await.map(drop)
}
