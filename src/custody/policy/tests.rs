//! Judging rule changes: tightening or loosening.
use super::*;

const A: &str = "0x3C44CdDdB6a900fa2b585dd299e03d12FA4293BC";
const B: &str = "0x90F79bf6EB2c4f870365E785982E1f101E93b906";

fn rule(v: Value) -> Rule {
    parse(&v).unwrap().0
}

#[test]
fn a_whitelist_loosens_only_by_adding_and_an_action_change_is_judged_loosening() {
    let two = rule(
        json!({ "id": "w", "type": "coinAddressWhitelist", "condition": { "addresses": [A, B] }, "action": { "type": "deny" } }),
    );
    let one = rule(
        json!({ "id": "w", "type": "coinAddressWhitelist", "condition": { "addresses": [A] }, "action": { "type": "deny" } }),
    );
    assert_eq!(one.loosens(&two), None);
    assert!(two.loosens(&one).unwrap().contains("adds"));
    let all = rule(json!({ "id": "w", "type": "allTx", "condition": {}, "action": { "type": "deny" } }));
    assert!(all.loosens(&one).is_some());
}

#[test]
fn rules_are_written_into_a_record_whose_admin_or_policy_is_not_an_object() {
    let all = rule(json!({ "id": "a", "type": "allTx", "condition": {}, "action": { "type": "deny" } }));
    for mut record in [json!({}), json!({ "admin": "x" }), json!({ "admin": { "policy": 7, "other": 1 } })] {
        crate::custody::policy::edit::set_rules(&mut record, std::slice::from_ref(&all));
        assert_eq!(rules_of(&record), vec![all.clone()], "{record}");
    }
    let mut kept = json!({ "admin": { "other": 1 } });
    crate::custody::policy::edit::set_rules(&mut kept, &[]);
    assert_eq!(kept, json!({ "admin": { "other": 1, "policy": { "rules": [] } } }));
}

#[test]
fn a_velocity_limit_loosens_by_a_higher_amount_a_shorter_window_or_a_lesser_action() {
    let v = |amount: &str, window: u64, action: &str| {
        rule(
            json!({ "id": "v", "type": "velocityLimit", "condition": { "amountString": amount, "timeWindow": window }, "action": { "type": action } }),
        )
    };
    let base = v("100", 3600, "getApproval");
    assert_eq!(v("50", 3600, "getApproval").loosens(&base), None);
    assert_eq!(v("100", 7200, "getApproval").loosens(&base), None);
    assert_eq!(v("100", 3600, "deny").loosens(&base), None);
    assert!(v("101", 3600, "getApproval").loosens(&base).unwrap().contains("raises"));
    assert!(v("100", 60, "getApproval").loosens(&base).unwrap().contains("shortens"));
    assert!(base.loosens(&v("100", 3600, "getFinalApproval")).unwrap().contains("action"));
    assert_eq!(rule(base.to_json()), base);
}

#[test]
fn a_lock_date_loosens_only_when_cleared_or_put_off() {
    let at = |d: Option<&str>| {
        let mut v = json!({ "id": "a", "type": "allTx", "condition": {}, "action": { "type": "deny" } });
        if let Some(d) = d {
            v["lockDate"] = json!(d);
        }
        rule(v)
    };
    let locked = at(Some("2027-01-01T00:00:00Z"));
    assert_eq!(rule(locked.to_json()), locked);
    assert_eq!(at(Some("2026-06-01T00:00:00Z")).loosens(&locked), None);
    assert_eq!(locked.loosens(&at(None)), None);
    assert!(at(None).loosens(&locked).unwrap().contains("lockDate"));
    assert!(at(Some("2028-01-01T00:00:00Z")).loosens(&locked).unwrap().contains("lockDate"));
    assert!(locked.locked(locked.lock_date.unwrap()) && !locked.locked(0));
    assert!(parse(&json!({ "id": "a", "type": "allTx", "condition": {}, "action": { "type": "deny" }, "lockDate": "soon" })).is_err());
}

#[test]
fn bad_rules_name_their_field() {
    let e = parse(&json!({ "id": "h", "type": "webhook", "condition": {}, "action": { "type": "deny" } }));
    assert!(e.unwrap_err().to_string().contains("condition.url"));
    let e = parse(&json!({ "id": "h", "type": "fancy", "condition": {}, "action": { "type": "deny" } }));
    assert!(e.unwrap_err().to_string().contains("a rule type"));
    let e = parse(
        &json!({ "id": "v", "type": "velocityLimit", "condition": { "amountString": "1" }, "action": { "type": "deny" } }),
    );
    assert!(e.unwrap_err().to_string().contains("condition.timeWindow"));
    let e = parse(
        &json!({ "id": "v", "type": "velocityLimit", "condition": { "amountString": "1", "timeWindow": 2_678_401 }, "action": { "type": "deny" } }),
    );
    assert!(e.unwrap_err().to_string().contains("2678400"));
    let e = parse(&json!({ "id": "a b", "type": "allTx", "condition": {}, "action": { "type": "deny" } }));
    assert!(matches!(e, Err(Error::Invalid { .. })));
    let e = parse(
        &json!({ "id": "w", "type": "coinAddressWhitelist", "condition": { "addresses": ["0x12"] }, "action": { "type": "deny" } }),
    );
    assert!(e.unwrap_err().to_string().contains("Ethereum address"));
}

fn user(n: u8) -> UserId {
    format!("{n:032x}").parse().unwrap()
}

fn address(n: u8) -> Address {
    Address::repeat_byte(n)
}

/// Every rule of a small world: 3 payees, 3 approvers, two limits and two windows.
fn every_rule() -> Vec<Rule> {
    let mut conditions = vec![Condition::AllTx];
    for list in [vec![], vec![address(1)], vec![address(2)], vec![address(1), address(2)]] {
        conditions.push(Condition::Whitelist(list));
    }
    for amount in [50u64, 100] {
        for window in [60, 3600] {
            conditions.push(Condition::Velocity(Velocity { amount: U256::from(amount), window, coin: None }));
        }
    }
    let approvers: [&[u8]; 4] = [&[], &[1], &[2], &[1, 2]];
    let mut out = Vec::new();
    for condition in &conditions {
        for action in [ActionType::GetApproval, ActionType::GetFinalApproval, ActionType::Deny] {
            // A deny names no approvers (`parse` refuses them).
            let users_of: &[&[u8]] = if action == ActionType::Deny { &approvers[..1] } else { &approvers };
            for users in users_of {
                out.push(Rule {
                    id: "r".into(),
                    condition: condition.clone(),
                    action,
                    user_ids: users.iter().map(|n| user(*n)).collect(),
                    lock_date: None,
                });
            }
        }
    }
    out
}

/// Whether a withdrawal paying `to` `total` (30 already sent in a minute's window, 60 in an
/// hour's) is let through by `rule` and approved by `by`, in that order, with one approval
/// required: no deny fires, no approver is turned away, and the last one completes it.
fn passes(rule: &Rule, to: Address, total: u64, by: &[UserId]) -> bool {
    let coin: Coin = "hteth".parse().unwrap();
    let recipients = [crate::model::custody::Recipient { address: to, amount: U256::from(total) }];
    let p = eval::Proposal {
        coin: &coin,
        wallet_coin: &coin,
        recipients: &recipients,
        total: U256::from(total),
        decimals: 18,
        hooks: None,
    };
    let spent = |w: &eval::Window| U256::from(if w.seconds <= 60 { 30u64 } else { 60 });
    let verdict = eval::evaluate(std::slice::from_ref(rule), &p, &spent);
    if verdict.denied.is_some() {
        return false;
    }
    let policy = verdict.into_policy();
    let mut approved: Vec<&UserId> = Vec::new();
    for u in by {
        match eval::approve(1, &policy, &approved, u, &|_| false) {
            Ok(true) => return true,
            Ok(false) => approved.push(u),
            Err(_) => return false,
        }
    }
    false
}

/// Every order of approvals by 1 to 3 of three admins.
fn every_sequence() -> Vec<Vec<UserId>> {
    let mut out = Vec::new();
    let all = [user(1), user(2), user(3)];
    for a in &all {
        out.push(vec![a.clone()]);
        for b in all.iter().filter(|b| *b != a) {
            out.push(vec![a.clone(), b.clone()]);
            for c in all.iter().filter(|c| *c != a && *c != b) {
                out.push(vec![a.clone(), b.clone(), c.clone()]);
            }
        }
    }
    out
}

/// The judge against the evaluator, over every pair of rules of a small world: a change judged
/// a tightening lets no withdrawal through, with no sequence of approvers, that the rule in
/// force did not.
#[test]
fn a_change_judged_tightening_never_lets_through_what_the_old_rule_held() {
    let rules = every_rule();
    let sequences = every_sequence();
    let mut tightenings = 0;
    for old in &rules {
        for new in &rules {
            if old.judge_change(new, 0).is_some() {
                continue;
            }
            tightenings += 1;
            for to in [address(1), address(2), address(3)] {
                for total in [10, 30, 60] {
                    for by in &sequences {
                        assert!(
                            !passes(new, to, total, by) || passes(old, to, total, by),
                            "judged tightening, yet {new:?} lets through what {old:?} held: to {to}, {total}, approved by {by:?}"
                        );
                    }
                }
            }
        }
    }
    // The world is rich enough that many changes are tightenings (each rule to itself, at least).
    assert!(tightenings > rules.len() * 3, "{tightenings} tightenings of {} rules", rules.len());
}

#[test]
fn a_change_of_named_approvers_loosens_whatever_the_action() {
    let r = |action: &str, users: &[u8]| {
        let ids: Vec<String> = users.iter().map(|n| user(*n).as_str().to_string()).collect();
        rule(
            json!({ "id": "a", "type": "allTx", "condition": {}, "action": { "type": action, "userIds": ids } }),
        )
    };
    let bob = r("getApproval", &[1]);
    assert!(bob.judge_change(&r("getFinalApproval", &[2]), 0).unwrap().contains("widens"));
    assert!(bob.judge_change(&r("getApproval", &[1, 2]), 0).is_some());
    assert!(bob.judge_change(&r("getFinalApproval", &[]), 0).is_some());
    assert_eq!(bob.judge_change(&r("getFinalApproval", &[1]), 0), None);
    assert_eq!(bob.judge_change(&r("deny", &[]), 0), None);
    assert_eq!(r("getApproval", &[1, 2]).judge_change(&bob, 0), None);
    assert_eq!(r("getApproval", &[]).judge_change(&bob, 0), None);
    // A final approver waits for the others; one no longer named may answer early.
    let finals = r("getFinalApproval", &[1, 2]);
    assert!(finals.judge_change(&r("getFinalApproval", &[1]), 0).unwrap().contains("early"));
    assert_eq!(r("getFinalApproval", &[1]).judge_change(&r("getFinalApproval", &[1]), 0), None);
}

#[test]
fn a_locked_rule_does_not_change_at_once_even_tighter() {
    let mut locked = rule(
        json!({ "id": "v", "type": "velocityLimit", "condition": { "amountString": "100", "timeWindow": 3600 }, "action": { "type": "getApproval" } }),
    );
    locked.lock_date = Some(1_000);
    let tighter = Rule { action: ActionType::Deny, ..locked.clone() };
    // Before its lockDate a tightening applies at once; from then on nothing does.
    assert_eq!(locked.judge_change(&tighter, 999), None);
    assert!(locked.judge_change(&tighter, 1_000).unwrap().contains("locked"));
    assert_eq!(locked.judge_change(&locked.clone(), 5_000), None, "the same rule again changes nothing");
}
