//! What a new withdrawal is judged by under its wallet's lock (docs/policy.md#velocity): the
//! in-flight cap, the balances, and the policy rules with their velocity sums. The store reads
//! them and writes the withdrawal in one transaction, so two withdrawals at once, from any
//! processes, cannot both slip under a limit.

use alloy_primitives::U256;
use serde_json::Value;

use super::{
    breaker::{self, Valued},
    policy::eval::{self, Proposal, Verdict, Window},
    policy::hooks::Asked,
    policy::Rule,
    Custody,
};
use crate::{
    error::{Error, ErrorName, Result},
    model::{
        audit::AuditEntry,
        custody::{Approval, TxRequestState, Withdrawal},
        wallet::WalletRow,
    },
    store::{Created, EventWrite, Refusal, Reservation, Spending, SumWindow},
    types::{Coin, TxRequestId, WalletId},
};

/// The withdrawal as the rules see it: the coin it moves and its decimals (no webhook answers
/// yet).
pub fn proposal<'a>(svc: &Custody, w: &'a Withdrawal, wallet_coin: &'a Coin) -> Proposal<'a> {
    let coin = w.token.as_ref().map_or(wallet_coin, |t| &t.coin);
    Proposal {
        coin,
        wallet_coin,
        recipients: &w.recipients,
        total: w.total(),
        decimals: super::tokens::decimals(&svc.config, wallet_coin, coin),
        hooks: None,
    }
}

/// What the `webhook` rules are told of withdrawal `w` at `stage`.
pub fn asked<'a>(w: &'a Withdrawal, stage: &'static str, approvals_required: Option<u32>) -> Asked<'a> {
    Asked {
        stage,
        wallet: &w.wallet_id,
        coin: w.token.as_ref().map_or(&w.coin, |t| &t.coin),
        enterprise: w.enterprise.as_ref(),
        tx_request_id: Some(&w.id),
        initiator: &w.creator,
        recipients: &w.recipients,
        total: w.total(),
        approvals_required,
    }
}

fn sum_windows(windows: &[Window], now: i64) -> Vec<SumWindow> {
    windows
        .iter()
        .map(|w| SumWindow {
            coin: w.coin.clone(),
            since: now.saturating_sub(i64::try_from(w.seconds).unwrap_or(i64::MAX)),
        })
        .collect()
}

/// Looks up a window's sum among `sums` (in `windows`' order).
fn spent_in<'a>(windows: &'a [Window], sums: &'a [U256]) -> impl Fn(&Window) -> U256 + 'a {
    move |w| windows.iter().position(|x| x == w).and_then(|i| sums.get(i).copied()).unwrap_or(U256::ZERO)
}

/// What `rules` make of `p` with the wallet's velocity sums as they are now, locking nothing
/// (the dry run, and the check before signing); the `webhook` rules' URLs are told `asked`.
/// With `upto`, the sums count only the wallet's withdrawals stored before that one.
pub async fn verdict_now(
    svc: &Custody,
    wallet: &WalletId,
    rules: &[Rule],
    p: &Proposal<'_>,
    asked: &Asked<'_>,
    upto: Option<&TxRequestId>,
) -> Result<Verdict> {
    let answers = super::policy::hooks::ask(svc, rules, asked).await;
    let p = Proposal { hooks: Some(&answers), ..*p };
    let windows = eval::windows(rules, p.wallet_coin);
    let sums = if windows.is_empty() {
        Vec::new()
    } else {
        svc.store.velocity_sums(wallet, &sum_windows(&windows, svc.store.clock().now()), upto).await?
    };
    let verdict = eval::evaluate(rules, &p, &spent_in(&windows, &sums));
    Ok(verdict)
}

/// Stores withdrawal `w` with `approval` (whose policy the judge fills in) if, under the
/// wallet's lock: no `deny` rule fires, the wallet has fewer than
/// `withdrawals.max_in_flight_per_wallet` withdrawals in flight, and it can pay `w` with its
/// fee reserve on top of them. The circuit breaker (`custody::breaker`) reads the wallet's
/// 24-hour USD total under the same lock, with `valued`, `w`'s value. Errors: `PolicyDenied` (403), `TooManyWithdrawals` (409),
/// `InsufficientBalance` (400).
// Long arguments: one withdrawal's parts, each its own.
#[allow(clippy::too_many_arguments)]
pub async fn create(
    svc: &Custody,
    wallet: &WalletRow,
    record: &Value,
    w: &Withdrawal,
    valued: &Valued,
    unlock: Option<&UnlockCap>,
    approval: Approval,
    audit: &[AuditEntry],
    events: &[&EventWrite],
) -> Result<Created> {
    let rules = super::policy::enterprise::all_rules(svc, wallet, record).await?;
    // The webhooks are asked before the wallet is locked: a slow URL must not hold it.
    let answers =
        super::policy::hooks::ask(svc, &rules, &asked(w, "initiation", Some(approval.approvals_required)))
            .await;
    let p = Proposal { hooks: Some(&answers), ..proposal(svc, w, &wallet.coin) };
    let windows = eval::windows(&rules, &wallet.coin);
    // The balance at the chain's confirmation depth, read under the wallet's lock after the
    // withdrawals it does not hold yet: a deposit not yet that deep, or one a reorg may still
    // take away, pays nothing.
    let cap = svc.config.withdrawals.max_in_flight_per_wallet;
    let limit = breaker::limit_cents(svc);
    let judge = |s: &Spending| -> std::result::Result<Approval, Refusal> {
        let verdict = eval::evaluate(&rules, &p, &spent_in(&windows, &s.sums));
        if let Some(refused) = verdict.refusal() {
            return Err(Box::new(refused));
        }
        let (balance, token_held) = (
            super::tokens::units(s.confirmed.as_deref()),
            super::tokens::units(s.token_confirmed.as_deref()),
        );
        check_funds(cap, balance, token_held, w, &s.flying).map_err(|e| Box::new(e) as Refusal)?;
        if let (Some(u), Some(sent)) = (unlock, s.unlock_sent) {
            u.check(sent, w.total()).map_err(|e| Box::new(e) as Refusal)?;
        }
        let mut policy = verdict.into_policy();
        if let Some(why) = breaker::holds(limit, s.usd_sent.unwrap_or(0), valued) {
            breaker::add_hold(&mut policy, why);
        }
        Ok(Approval { policy, ..approval.clone() })
    };
    let sums = sum_windows(&windows, w.created_at);
    let usd_since = valued.usd.as_ref().map(|_| breaker::since(w.created_at));
    let unlock_since = unlock.map(|u| (&u.token, u.since));
    let reserve =
        Reservation { in_flight: IN_FLIGHT, in_flight_limit: cap, windows: &sums, usd_since, unlock_since };
    match svc.store.create_withdrawal(w, &reserve, &judge, audit, events).await? {
        Created::Refused(r) => Err(match r.downcast::<Error>() {
            Ok(e) => *e,
            Err(other) => Error::Internal(anyhow::anyhow!("a withdrawal's judge: {other}")),
        }),
        Created::New(recorded, a) => {
            // After the commit (its events are handed over by the caller): a crash here leaves
            // the trip to the next held withdrawal of the wallet.
            if breaker::held(&a.policy) {
                breaker::trip_if_over(svc, &wallet.id, &wallet.coin).await?;
            }
            Ok(Created::New(recorded, a))
        }
        done => Ok(done),
    }
}

/// An unlocked session's `unlock.txValueLimit` (§2.4): what it may start in all, base units of
/// any coin, from its unlock's `time` (Unix seconds) until the unlock ends. BitGo's "unlocking
/// removes spending limits" lifts the per-coin `spendingLimits`, not this
/// (docs/decisions.md#unlock-txvaluelimit).
#[derive(Debug, Clone)]
pub struct UnlockCap {
    pub token: crate::types::TokenId,
    pub since: i64,
    pub limit: U256,
}

impl UnlockCap {
    /// Refuses `total` when what the session `sent` since its unlock and `total` pass the
    /// limit: 400 `SpendingLimitExceeded`.
    pub fn check(&self, sent: U256, total: U256) -> Result<()> {
        let after = sent.saturating_add(total);
        if after <= self.limit {
            return Ok(());
        }
        Err(Error::Invalid {
            name: ErrorName::SpendingLimitExceeded,
            message: format!(
                "this unlocked session started {sent} base units since its unlock; {total} more would pass its txValueLimit ({})",
                self.limit
            ),
            context: serde_json::json!({ "field": "amount", "txValue": sent.to_string(), "txValueLimit": self.limit.to_string() }),
        })
    }
}

/// Refuses a withdrawal the wallet cannot pay: its confirmed balance (the chain watcher's, at
/// the chain's confirmation depth; `token_held` of a token) less what `flying` (every
/// withdrawal that balance does not hold yet) will spend, each with its fee reserve; or one
/// past the cap of `cap` unmined withdrawals in flight.
fn check_funds(
    cap: u32,
    balance: U256,
    token_held: U256,
    w: &Withdrawal,
    flying: &[Withdrawal],
) -> Result<()> {
    let unmined = flying.iter().filter(|f| f.mined_block.is_none()).count();
    let cap_all = cap.saturating_add(crate::store::MAX_UNSETTLED_MINED);
    if unmined >= usize::try_from(cap).unwrap_or(usize::MAX)
        || flying.len() >= usize::try_from(cap_all).unwrap_or(usize::MAX)
    {
        return Err(Error::Conflict {
            name: ErrorName::TooManyWithdrawals,
            message: format!(
                "the wallet has {cap} withdrawals in flight (withdrawals.max_in_flight_per_wallet)"
            ),
        });
    }
    super::tokens::check_balance(token_held, w, flying)?;
    let spent = super::tokens::wei_spent;
    let held =
        flying.iter().fold(U256::ZERO, |a, f| a.saturating_add(spent(f)).saturating_add(f.fee_reserve));
    let needed = spent(w).saturating_add(w.fee_reserve).saturating_add(held);
    if needed > balance {
        return Err(Error::Invalid {
            name: ErrorName::InsufficientBalance,
            message: format!(
                "the wallet holds {balance}; this withdrawal with its fee reserve and those in flight need {needed}"
            ),
            context: serde_json::json!({ "field": "amount", "balance": balance.to_string(), "needed": needed.to_string() }),
        });
    }
    Ok(())
}

/// States of a withdrawal that will still spend from the wallet (until mined).
pub const IN_FLIGHT: &[TxRequestState] = &[
    TxRequestState::PendingApproval,
    TxRequestState::PendingDelivery,
    TxRequestState::Signed,
    TxRequestState::Delivered,
];

/// Which of `ws` (approved, about to take a nonce, in the order they would) the money really
/// there still pays: the wallet's confirmed balance (and token balance) as the watcher read it
/// last, less every withdrawal of the wallet holding a nonce that balance does not hold yet,
/// and less those of `ws` before it that pass. A deposit reorged away, or a payment the node
/// made that the watcher has not confirmed, can leave less than at admission; one that does
/// not fit waits unsigned (and its delivery deadline cancels it), so it never takes a nonce it
/// cannot use.
pub async fn still_funded(svc: &Custody, ws: &[&Withdrawal]) -> Result<Vec<bool>> {
    let mut wallets: Vec<WalletId> = ws.iter().map(|w| w.wallet_id.clone()).collect();
    wallets.sort();
    wallets.dedup();
    let mut ahead: std::collections::HashMap<WalletId, Vec<Withdrawal>> = Default::default();
    for wallet in &wallets {
        let filter = crate::store::WithdrawalFilter {
            wallet: Some(wallet.clone()),
            states: Some(vec![
                TxRequestState::PendingDelivery,
                TxRequestState::Signed,
                TxRequestState::Delivered,
            ]),
            unsettled: true,
            limit: svc
                .config
                .withdrawals
                .max_in_flight_per_wallet
                .saturating_add(crate::store::MAX_UNSETTLED_MINED),
            ..Default::default()
        };
        let held: Vec<Withdrawal> =
            svc.store.withdrawals(&filter).await?.into_iter().filter(|w| w.nonce.is_some()).collect();
        ahead.insert(wallet.clone(), held);
    }
    // The balances after what is ahead: a watcher write between the two reads can only count a
    // payment twice (it waits), never not at all.
    let rows = svc.store.wallets_by_ids(&wallets, true).await?;
    let mut out = Vec::with_capacity(ws.len());
    for w in ws {
        let row = rows.iter().find(|r| r.id == w.wallet_id);
        let balance =
            super::tokens::units(row.and_then(|r| r.balances.confirmed.as_ref()).map(|b| b.as_str()));
        let token_held = match &w.token {
            Some(t) => super::tokens::held(svc, &w.wallet_id, t).await?,
            None => U256::ZERO,
        };
        let before = ahead.entry(w.wallet_id.clone()).or_default();
        let fits = check_funds(u32::MAX, balance, token_held, w, before).is_ok();
        if fits {
            before.push((*w).clone());
        }
        out.push(fits);
    }
    Ok(out)
}
