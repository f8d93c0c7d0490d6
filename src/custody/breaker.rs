//! The USD circuit breaker (§6.1 `circuitBreaker`; docs/policy.md#circuit-breaker). Each
//! withdrawal is valued in US dollars when it is made (`custody::prices`). When the wallet's
//! withdrawals of the last 24 hours, this one included, come to more than
//! `withdrawals.circuit_breaker_usd`, or its coin's price source gives no price, the withdrawal
//! needs a service admin's final approval. The wallet's `circuitBreaker` webhooks are told once
//! when the total first goes above the limit (tripped), and once when it falls back (reset).

use serde_json::json;

use super::{
    events::Announcement,
    prices::{self, Priced},
    Custody,
};
use crate::{
    audit::EntryExt,
    error::Result,
    model::{
        audit::AuditType,
        custody::{ApprovalPolicy, RuleApproval, RuleResult, UsdValue, Withdrawal},
    },
    types::{Coin, WalletId},
    webhooks::event::{CircuitBreakerEvent, Event},
};

/// The id the breaker goes by among an approval's rule results.
pub const RULE_ID: &str = "circuitBreaker";
/// The breaker's window, seconds.
pub const WINDOW: i64 = 24 * 3600;
/// Tripped breakers one signer round looks at.
const SWEEP: u32 = 100;

/// A new withdrawal as the breaker sees it: its value, or why its coin has no price now.
#[derive(Debug, Clone, Default)]
pub struct Valued {
    pub usd: Option<UsdValue>,
    /// A price source that gives no price (stale, failing): the breaker holds.
    pub unavailable: Option<String>,
}

/// Values withdrawal `w` at its coin's price now.
pub async fn value(svc: &Custody, w: &Withdrawal) -> Valued {
    value_of(svc, &w.coin, w.token.as_ref().map_or(&w.coin, |t| &t.coin), w.total()).await
}

/// Values `total` base units of `coin` (a wallet of `chain`'s) at its price now.
pub async fn value_of(svc: &Custody, chain: &Coin, coin: &Coin, total: alloy_primitives::U256) -> Valued {
    match prices::price(svc, coin).await {
        Priced::NoSource => Valued::default(),
        Priced::Price(p) => Valued {
            usd: Some(p.value(total, super::tokens::decimals(&svc.config, chain, coin))),
            unavailable: None,
        },
        Priced::Unavailable(why) => Valued { usd: None, unavailable: Some(why) },
    }
}

/// What the breaker makes of a withdrawal valued `v` of `wallet` now, outside any lock (the
/// dry run): the hold it adds to `policy`, if any.
pub async fn judge_now(
    svc: &Custody,
    wallet: &WalletId,
    v: &Valued,
    policy: &mut ApprovalPolicy,
) -> Result<()> {
    let sent = match v.usd {
        Some(_) => svc.store.usd_sent(wallet, since(svc.store.clock().now())).await?,
        None => 0,
    };
    if let Some(why) = holds(limit_cents(svc), sent, v) {
        add_hold(policy, why);
    }
    Ok(())
}

/// The limit in cents.
pub fn limit_cents(svc: &Custody) -> i64 {
    i64::try_from(svc.config.withdrawals.circuit_breaker_usd).unwrap_or(i64::MAX).saturating_mul(100)
}

/// Dollars and cents in words: `$20,000,000.00`.
pub fn dollars(cents: i64) -> String {
    let whole = (cents / 100).to_string();
    let mut grouped = String::new();
    for (i, c) in whole.chars().enumerate() {
        if i > 0 && (whole.len() - i) % 3 == 0 {
            grouped.push(',');
        }
        grouped.push(c);
    }
    format!("${grouped}.{:02}", cents % 100)
}

/// Why the breaker holds a withdrawal valued `v` of a wallet that sent `sent` cents in the
/// window before it (`limit` cents); `None` when it passes.
pub fn holds(limit: i64, sent: i64, v: &Valued) -> Option<String> {
    if let Some(why) = &v.unavailable {
        return Some(format!("circuit breaker: no current USD price ({why}); a service admin approves"));
    }
    let total = sent.saturating_add(v.usd.as_ref()?.cents);
    (total > limit).then(|| {
        format!(
            "circuit breaker: {} withdrawn in the last 24 h would exceed {}; a service admin approves",
            dollars(total),
            dollars(limit)
        )
    })
}

/// Adds the breaker's hold (`reason`) to what an approval keeps: a final approval by a
/// service admin.
pub fn add_hold(policy: &mut ApprovalPolicy, reason: String) {
    policy.single_run_results.push(RuleResult { rule_id: RULE_ID.into(), triggered: true });
    policy.reasons.push(reason);
    policy.rule_approvals.push(RuleApproval {
        rule_id: RULE_ID.into(),
        user_ids: Vec::new(),
        last: true,
        service_admin: true,
    });
}

/// Whether the breaker held an approval's withdrawal.
pub fn held(policy: &ApprovalPolicy) -> bool {
    policy.rule_approvals.iter().any(|r| r.rule_id == RULE_ID && r.service_admin)
}

/// The start of the window ending at `now`.
pub fn since(now: i64) -> i64 {
    now.saturating_sub(WINDOW)
}

/// After a withdrawal the breaker held: trips the wallet's breaker if its 24-hour total is
/// above the limit and it is not tripped yet, telling its webhooks once.
pub async fn trip_if_over(svc: &Custody, wallet: &WalletId, coin: &Coin) -> Result<()> {
    let now = svc.store.clock().now();
    let sent = svc.store.usd_sent(wallet, since(now)).await?;
    if sent <= limit_cents(svc) {
        return Ok(());
    }
    // Already tripped: nothing to tell (the store would write nothing either).
    if svc.store.breaker(wallet).await?.is_some() {
        return Ok(());
    }
    change(svc, wallet, coin, sent, Some(now)).await
}

/// One signer round's look at `coin`'s tripped breakers: those whose wallets' 24-hour totals
/// fell back to the limit or below are reset, and their webhooks told.
pub async fn reset_due(svc: &Custody, coin: &Coin) -> Result<()> {
    let now = svc.store.clock().now();
    for t in svc.store.tripped(coin, SWEEP).await? {
        let sent = svc.store.usd_sent(&t.wallet, since(now)).await?;
        if sent <= limit_cents(svc) {
            change(svc, &t.wallet, coin, sent, None).await?;
        }
    }
    Ok(())
}

/// Trips (`tripped_at`: `Some(now)`) or resets the breaker of a wallet whose 24-hour total is
/// `cents`, audited and told, if it was not so.
async fn change(
    svc: &Custody,
    wallet: &WalletId,
    coin: &Coin,
    cents: i64,
    tripped_at: Option<i64>,
) -> Result<()> {
    let trip = tripped_at.map(|at| (at, cents));
    let state = if trip.is_some() { "tripped" } else { "reset" };
    let event = Event::CircuitBreaker(CircuitBreakerEvent {
        coin: coin.clone(),
        wallet_id: wallet.clone(),
        state,
        usd: UsdValue { cents, rate: String::new() }.dollars(),
        limit_usd: svc.config.withdrawals.circuit_breaker_usd,
        at_ms: svc.store.clock().now_ms(),
    });
    let kind = if trip.is_some() { AuditType::CircuitBreakerTripped } else { AuditType::CircuitBreakerReset };
    let entry = crate::audit::entry(kind).wallet(Some(wallet)).data(json!({
        "usd": dollars(cents), "limitUsd": svc.config.withdrawals.circuit_breaker_usd,
    }));
    let announce = Announcement::prepare(&svc.webhooks, &[event]).await?;
    if let Some(recorded) = svc.store.set_breaker(wallet, coin, trip, &[entry], &announce.writes()).await? {
        tracing::warn!(wallet = %wallet, %coin, state, usd = %dollars(cents), "circuit breaker");
        announce.committed(&svc.webhooks, &recorded).await;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dollars_read_as_people_write_them() {
        assert_eq!(dollars(2_000_000_000), "$20,000,000.00");
        assert_eq!(dollars(5), "$0.05");
        assert_eq!(dollars(123_456), "$1,234.56");
    }

    #[test]
    fn the_breaker_holds_above_its_limit_and_without_a_price() {
        let v = |cents| Valued { usd: Some(UsdValue { cents, rate: "1".into() }), unavailable: None };
        assert_eq!(holds(1_000, 400, &v(600)), None, "at the limit passes");
        assert!(holds(1_000, 400, &v(601)).is_some());
        assert_eq!(holds(1_000, 5_000, &Valued::default()), None, "an unpriced coin is not counted");
        let stale = Valued { usd: None, unavailable: Some("stale".into()) };
        assert!(holds(1_000, 0, &stale).unwrap().contains("stale"));
    }
}
