//! Evaluating a wallet's policy rules (docs/policy.md#evaluation), and what the approvals a
//! fired rule asks for need. Pure: the sums a velocity rule reads come from the store.
//!
//! Every rule is evaluated (no first match). A `deny` refuses; every fired `getApproval` rule's
//! approvers must be among those who approve; a fired `getFinalApproval` rule's approval comes
//! after all the others.

use alloy_primitives::U256;
use serde_json::json;

use super::{ActionType, Condition, Rule};
use crate::{
    error::{Error, ErrorName},
    model::custody::{ApprovalPolicy, Recipient, RuleApproval, RuleResult},
    types::{Coin, UserId},
};

/// What `webhook` rules' URLs answered, by rule id: `None` when the URL passed the withdrawal,
/// else why the rule fires (`custody::policy::hooks`).
pub type Answers = std::collections::HashMap<String, Option<String>>;

/// A withdrawal as the rules see it.
#[derive(Debug, Clone, Copy)]
pub struct Proposal<'a> {
    /// The coin it moves: its token's, or the wallet's.
    pub coin: &'a Coin,
    /// The wallet's coin, which a velocity rule naming none counts.
    pub wallet_coin: &'a Coin,
    pub recipients: &'a [Recipient],
    /// Base units of `coin`.
    pub total: U256,
    /// Decimals of `coin`, for the reasons' words.
    pub decimals: u8,
    /// What the `webhook` rules' URLs answered; a rule not among them fires (fail closed).
    pub hooks: Option<&'a Answers>,
}

/// A velocity window to sum: base units of `coin` withdrawn from the wallet in the last
/// `seconds`, by withdrawals not rejected, canceled or failed.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Window {
    pub coin: Coin,
    pub seconds: u64,
}

/// The distinct windows `rules`' velocity conditions read.
pub fn windows(rules: &[Rule], wallet_coin: &Coin) -> Vec<Window> {
    let mut out: Vec<Window> = Vec::new();
    for v in rules.iter().filter_map(Rule::velocity) {
        let w = Window { coin: v.coin.clone().unwrap_or_else(|| wallet_coin.clone()), seconds: v.window };
        if !out.contains(&w) {
            out.push(w);
        }
    }
    out
}

/// What the rules make of a withdrawal.
#[derive(Debug, Default)]
pub struct Verdict {
    pub results: Vec<RuleResult>,
    pub reasons: Vec<String>,
    /// The first fired `deny`'s reason.
    pub denied: Option<String>,
    /// The approvals fired approval rules ask for.
    pub approvals: Vec<RuleApproval>,
}

impl Verdict {
    /// The §7 refusal when a `deny` fired: `PolicyDenied` (403), naming the rule.
    pub fn refusal(&self) -> Option<Error> {
        let reason = self.denied.as_ref()?;
        Some(Error::Forbidden {
            name: ErrorName::PolicyDenied,
            message: format!("denied by policy: {reason}"),
            context: json!({ "singleRunResults": self.results, "reasons": self.reasons }),
        })
    }

    /// What the approval keeps.
    pub fn into_policy(self) -> ApprovalPolicy {
        ApprovalPolicy {
            single_run_results: self.results,
            reasons: self.reasons,
            rule_approvals: self.approvals,
        }
    }
}

/// Evaluates every rule for withdrawal `p`; `spent(window)` is what the wallet withdrew in the
/// window before `p`.
pub fn evaluate(rules: &[Rule], p: &Proposal<'_>, spent: &dyn Fn(&Window) -> U256) -> Verdict {
    let mut verdict = Verdict::default();
    for rule in rules {
        let fired = fires(rule, p, spent);
        verdict.results.push(RuleResult { rule_id: rule.id.clone(), triggered: fired.is_some() });
        let Some(reason) = fired else { continue };
        match rule.action {
            ActionType::Deny => {
                verdict.denied.get_or_insert_with(|| reason.clone());
            }
            ActionType::GetApproval | ActionType::GetFinalApproval => verdict.approvals.push(RuleApproval {
                rule_id: rule.id.clone(),
                user_ids: rule.user_ids.clone(),
                last: rule.action == ActionType::GetFinalApproval,
                service_admin: false,
            }),
        }
        verdict.reasons.push(reason);
    }
    verdict
}

/// Whether `rule` fires for `p`, and why in words.
fn fires(rule: &Rule, p: &Proposal<'_>, spent: &dyn Fn(&Window) -> U256) -> Option<String> {
    let id = &rule.id;
    match &rule.condition {
        Condition::AllTx => Some(format!("rule {id} (allTx) applies to every withdrawal")),
        Condition::Whitelist(list) => p
            .recipients
            .iter()
            .find(|r| !list.contains(&r.address))
            .map(|r| format!("rule {id}: {} is not on the whitelist", r.address.to_checksum(None))),
        Condition::Velocity(v) => {
            let coin = v.coin.as_ref().unwrap_or(p.wallet_coin);
            if coin != p.coin {
                return None;
            }
            let total = spent(&Window { coin: coin.clone(), seconds: v.window }).saturating_add(p.total);
            (total > v.amount).then(|| {
                format!(
                    "velocity limit {id}: {} {coin} in the last {} would exceed {} {coin}",
                    units(total, p.decimals),
                    span(v.window),
                    units(v.amount, p.decimals)
                )
            })
        }
        Condition::Webhook(_) => match p.hooks.and_then(|h| h.get(id)) {
            Some(answer) => answer.clone(),
            None => Some(format!("rule {id}: its policy webhook was not asked")),
        },
    }
}

/// `amount` base units in whole units with `decimals` places, trailing zeros dropped.
pub fn units(amount: U256, decimals: u8) -> String {
    let digits = amount.to_string();
    let d = usize::from(decimals);
    if d == 0 {
        return digits;
    }
    let padded = format!("{digits:0>width$}", width = d + 1);
    let (whole, frac) = padded.split_at(padded.len() - d);
    let frac = frac.trim_end_matches('0');
    if frac.is_empty() {
        whole.to_string()
    } else {
        format!("{whole}.{frac}")
    }
}

/// A window in words: `24 h`, `7 d`, `10 min`, `90 s`.
fn span(seconds: u64) -> String {
    match seconds {
        s if s % 86_400 == 0 && s > 86_400 => format!("{} d", s / 86_400),
        s if s % 3_600 == 0 => format!("{} h", s / 3_600),
        s if s % 60 == 0 => format!("{} min", s / 60),
        s => format!("{s} s"),
    }
}

/// Whether the approvals given so far (`approved`, in order) meet what the wallet
/// (`required`) and the fired non-final rules ask: enough of them, and one of each such rule's
/// users among them.
fn others_met(required: u32, policy: &ApprovalPolicy, approved: &[&UserId]) -> bool {
    approved.len() >= usize::try_from(required).unwrap_or(usize::MAX)
        && policy
            .rule_approvals
            .iter()
            .filter(|r| !r.last && !r.user_ids.is_empty())
            .all(|r| approved.iter().any(|u| r.user_ids.contains(u)))
}

/// The approval by `user`, after `approved` (in order): `Ok(true)` when it completes the
/// approval, `Ok(false)` when more are needed, `Err(why)` when `user` may not give the next one
/// (only a final approval is missing, and none of the rules that ask for it names them).
/// `service_admin(u)`: whether `u` is a service admin, who alone gives a `serviceAdmin` rule's
/// approval.
pub fn approve(
    required: u32,
    policy: &ApprovalPolicy,
    approved: &[&UserId],
    user: &UserId,
    service_admin: &dyn Fn(&UserId) -> bool,
) -> std::result::Result<bool, String> {
    let finals: Vec<&RuleApproval> = policy.rule_approvals.iter().filter(|r| r.last).collect();
    let mut after: Vec<&UserId> = approved.to_vec();
    after.push(user);
    if finals.is_empty() {
        return Ok(others_met(required, policy, &after));
    }
    // The approvals after the point where the others were met are the final ones.
    let Some(met_at) = (0..=approved.len()).find(|&k| others_met(required, policy, &approved[..k])) else {
        // A final approver answering early would use up their one answer: the final one waits,
        // unless a non-final rule still needs them.
        let named = |r: &RuleApproval| r.user_ids.contains(user) || (r.service_admin && service_admin(user));
        let needed_now = policy
            .rule_approvals
            .iter()
            .any(|r| !r.last && named(r) && !approved.iter().any(|u| r.user_ids.contains(u)));
        if finals.iter().any(|r| named(r)) && !needed_now {
            return Err("your approval is the final one: it comes after the others".into());
        }
        return Ok(false);
    };
    let given = &approved[met_at..];
    let satisfied = |r: &RuleApproval, by: &[&UserId]| {
        by.iter().any(|u| match r.service_admin {
            true => service_admin(u),
            false => r.user_ids.is_empty() || r.user_ids.contains(u),
        })
    };
    let open: Vec<&&RuleApproval> = finals.iter().filter(|r| !satisfied(r, given)).collect();
    if !open.iter().any(|r| satisfied(r, &[user])) {
        let ids: Vec<&str> = open.iter().map(|r| r.rule_id.as_str()).collect();
        let whom = match open.iter().any(|r| r.service_admin) {
            true => "a service admin",
            false => "the users the rule names",
        };
        return Err(format!("the final approval (rule {}) is for {whom}", ids.join(", ")));
    }
    Ok(finals.iter().all(|r| satisfied(r, &after[met_at..])))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `super::approve` where nobody is a service admin.
    fn approve(
        required: u32,
        policy: &ApprovalPolicy,
        approved: &[&UserId],
        user: &UserId,
    ) -> std::result::Result<bool, String> {
        super::approve(required, policy, approved, user, &|_| false)
    }

    #[test]
    fn a_service_admin_approval_comes_last_and_only_from_a_service_admin() {
        let breaker = RuleApproval { service_admin: true, ..ask("circuitBreaker", &[], true) };
        let policy = ApprovalPolicy { rule_approvals: vec![breaker], ..Default::default() };
        let admin = |u: &UserId| u == &user(7);
        assert_eq!(super::approve(1, &policy, &[], &user(1), &admin), Ok(false));
        assert!(super::approve(1, &policy, &[&user(1)], &user(2), &admin).is_err(), "not a service admin");
        assert!(super::approve(1, &policy, &[], &user(7), &admin).is_err(), "the service admin comes last");
        assert_eq!(super::approve(1, &policy, &[&user(1)], &user(7), &admin), Ok(true));
    }

    fn user(n: u8) -> UserId {
        format!("{n:032x}").parse().unwrap()
    }

    fn ask(rule: &str, users: &[u8], last: bool) -> RuleApproval {
        RuleApproval {
            rule_id: rule.into(),
            user_ids: users.iter().map(|n| user(*n)).collect(),
            last,
            service_admin: false,
        }
    }

    #[test]
    fn units_and_spans_read_as_people_write_them() {
        assert_eq!(units(U256::from(12_500_000_000_000_000_000u128), 18), "12.5");
        assert_eq!(units(U256::from(10u64).pow(U256::from(19u64)), 18), "10");
        assert_eq!(units(U256::from(5u64), 18), "0.000000000000000005");
        assert_eq!(units(U256::from(7u64), 0), "7");
        assert_eq!(span(86_400), "24 h");
        assert_eq!(span(604_800), "7 d");
        assert_eq!(span(600), "10 min");
        assert_eq!(span(90), "90 s");
    }

    #[test]
    fn a_rule_s_named_approver_must_be_among_those_who_approve() {
        let policy = ApprovalPolicy { rule_approvals: vec![ask("v", &[9], false)], ..Default::default() };
        assert_eq!(approve(1, &policy, &[], &user(1)), Ok(false));
        assert_eq!(approve(1, &policy, &[&user(1)], &user(9)), Ok(true));
        assert_eq!(approve(2, &policy, &[], &user(9)), Ok(false));
        assert_eq!(approve(1, &ApprovalPolicy::default(), &[], &user(1)), Ok(true));
    }

    #[test]
    fn a_final_approval_comes_last_and_only_from_its_users() {
        let policy = ApprovalPolicy { rule_approvals: vec![ask("f", &[9], true)], ..Default::default() };
        // The final user waits for the others; then only a user the rule names may give it.
        assert!(approve(1, &policy, &[], &user(9)).is_err());
        assert_eq!(approve(1, &policy, &[], &user(1)), Ok(false));
        assert!(approve(1, &policy, &[&user(1)], &user(2)).is_err());
        assert_eq!(approve(1, &policy, &[&user(1)], &user(9)), Ok(true));
        // Named by a getApproval rule too, they answer as its approver first.
        let both = ApprovalPolicy {
            rule_approvals: vec![ask("g", &[9], false), ask("f", &[9], true)],
            ..Default::default()
        };
        assert_eq!(approve(1, &both, &[], &user(9)), Ok(false));
        let anyone = ApprovalPolicy { rule_approvals: vec![ask("f", &[], true)], ..Default::default() };
        assert_eq!(approve(1, &anyone, &[&user(1)], &user(2)), Ok(true));
        assert_eq!(approve(1, &anyone, &[], &user(1)), Ok(false));
    }
}
