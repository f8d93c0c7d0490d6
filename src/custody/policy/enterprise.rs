//! Enterprise policy rules (docs/policy.md#enterprise-rules), Custodian's own routes
//! `POST`, `PUT`, `DELETE` and `GET /api/v2/{coin}/enterprise/{enterpriseId}/policy/rule`: the
//! same rules as a wallet's, applying to every wallet of the enterprise and coin, each judged
//! on its own (a velocity limit counts each wallet's withdrawals). In a wallet's evaluation
//! they follow its own rules, their ids prefixed [`PREFIX`]. A loosening waits for other admins
//! of the enterprise (`policy::changes`).

use serde_json::{json, Value};

use crate::custody::{
    policy::changes::Owner,
    policy::edit::{apply_edit, check_condition, RuleChange},
    policy::{self, Rule, MAX_RULES},
    Custody,
};
use crate::{
    audit::EntryExt,
    error::{Error, ErrorName, Result},
    identity::{bearer::Principal, scopes::Action},
    model::{audit::AuditType, custody::Approval},
    types::{Coin, EnterpriseId},
};

/// How an enterprise rule's id reads among a wallet's rules: `enterprise.<id>`.
pub const PREFIX: &str = "enterprise.";

/// The rules of the wallet's enterprise for its coin, ids prefixed [`PREFIX`]: what the wallet's
/// evaluation adds to its own. None for a wallet of no enterprise.
pub async fn rules_for(svc: &Custody, enterprise: Option<&EnterpriseId>, coin: &Coin) -> Result<Vec<Rule>> {
    let Some(e) = enterprise else { return Ok(Vec::new()) };
    let rules = policy::rules_of_list(svc.store.enterprise_rules(e, coin).await?.as_deref());
    Ok(rules.into_iter().map(|r| Rule { id: format!("{PREFIX}{}", r.id), ..r }).collect())
}

/// A wallet's policy rules and, after them, its enterprise's for its coin.
pub async fn all_rules(
    svc: &Custody,
    row: &crate::model::wallet::WalletRow,
    record: &Value,
) -> Result<Vec<Rule>> {
    let mut rules = policy::rules_of(record);
    rules.extend(rules_for(svc, row.enterprise.as_ref(), &row.coin).await?);
    Ok(rules)
}

/// The enterprise's rules for `coin`, as BitGo shapes a wallet's. Needs the enterprise visible
/// to the caller's token (`enterprise_view_all` form) and a membership. Errors:
/// `InsufficientScope`, `EnterpriseNotFound`.
pub async fn list(
    svc: &Custody,
    auth: &Principal,
    coin: &Coin,
    enterprise: &EnterpriseId,
) -> Result<Vec<Value>> {
    auth.require(svc.wallets.policy, Action::ViewEnterprise { enterprise_id: enterprise })?;
    member(svc, auth, enterprise, false).await?;
    let rules = policy::rules_of_list(svc.store.enterprise_rules(enterprise, coin).await?.as_deref());
    Ok(rules.iter().map(Rule::to_json).collect())
}

/// Whether the caller is a member (an admin when `admin`) of `enterprise`, or a service admin.
async fn member(svc: &Custody, auth: &Principal, enterprise: &EnterpriseId, admin: bool) -> Result<()> {
    if auth.user.service_admin {
        return Ok(());
    }
    let ms = svc.store.memberships(&auth.user.id).await?;
    match ms.iter().find(|m| &m.enterprise.id == enterprise) {
        Some(m) if m.is_admin || !admin => Ok(()),
        Some(_) => Err(Error::Forbidden {
            name: ErrorName::ApprovalNotAllowed,
            message: "only an admin of the enterprise (or a service admin) may change its policy".into(),
            context: json!({}),
        }),
        None => Err(Error::not_found(ErrorName::EnterpriseNotFound)),
    }
}

/// What a change to an enterprise's rules did.
#[derive(Debug)]
pub enum Changed {
    /// Applied: the rules after.
    Applied(Vec<Value>),
    /// A loosening, waiting for other admins of the enterprise: its pending approval
    /// (`policyRuleRequest`, `scope: "enterprise"`).
    Pending(Box<Approval>),
}

/// Changes `enterprise`'s rules for `coin` as `what` says (the body as for a wallet's rules).
/// A tightening applies at once; a loosening (a removal, or an update that loosens) becomes a
/// pending approval that other admins of the enterprise answer
/// (`withdrawals.enterprise_policy_approvals` of them). Needs an `enterprise_manage_all` form
/// and an enterprise admin. Errors as for a wallet's rules (`PolicyRuleLocked`,
/// `TooManyRuleChanges` too), and `EnterpriseNotFound`.
pub async fn change(
    svc: &Custody,
    auth: &Principal,
    coin: &Coin,
    enterprise: &EnterpriseId,
    body: &Value,
    what: RuleChange,
) -> Result<Changed> {
    auth.require(svc.wallets.policy, Action::ManageEnterprise { enterprise_id: enterprise })?;
    member(svc, auth, enterprise, true).await?;
    crate::custody::spendable_coin(&svc.config, coin)?;
    let text = svc.store.enterprise_rules(enterprise, coin).await?;
    let mut rules = policy::rules_of_list(text.as_deref());
    let (before, after) = match what {
        RuleChange::Remove => {
            let id = body.get("id").and_then(Value::as_str).ok_or_else(|| Error::missing_field("id"))?;
            let at = policy::edit::position(&rules, id)?;
            let owner = Owner::Enterprise(enterprise, coin);
            let why = format!("removing rule {id}");
            let pending = policy::changes::request(svc, auth, owner, &rules[at], None, why).await?;
            return Ok(Changed::Pending(Box::new(pending)));
        }
        RuleChange::Create => {
            let (rule, _) = policy::parse(body)?;
            checked(svc, enterprise, coin, &rule).await?;
            if rules.iter().any(|r| r.id == rule.id) || rules.len() >= MAX_RULES {
                return Err(Error::Conflict {
                    name: ErrorName::AlreadyExists,
                    message: format!("the enterprise has a rule {} already, or {MAX_RULES} rules", rule.id),
                });
            }
            rules.push(rule.clone());
            (None, rule)
        }
        RuleChange::Update => {
            let (mut rule, edit) = policy::parse(body)?;
            checked(svc, enterprise, coin, &rule).await?;
            let at = policy::edit::position(&rules, &rule.id)?;
            let old = rules[at].clone();
            apply_edit(&mut rule, &old, edit);
            if body.get("lockDate").is_none() {
                rule.lock_date = old.lock_date;
            }
            if let Some(why) = old.judge_change(&rule, svc.store.clock().now()) {
                let owner = Owner::Enterprise(enterprise, coin);
                let pending = policy::changes::request(svc, auth, owner, &old, Some(&rule), why).await?;
                return Ok(Changed::Pending(Box::new(pending)));
            }
            rules[at] = rule.clone();
            (Some(old), rule)
        }
    };
    let kind = if before.is_some() { AuditType::PolicyRuleUpdated } else { AuditType::PolicyRuleCreated };
    let mut entry = auth.audit(kind).data(json!({
        "ruleId": after.id, "coin": coin.as_str(), "before": before.as_ref().map(Rule::to_json), "after": after.to_json(),
    }));
    entry.enterprise_id = Some(enterprise.clone());
    let list: Vec<Value> = rules.iter().map(Rule::to_json).collect();
    let written = Value::Array(list.clone()).to_string();
    if !svc.store.set_enterprise_rules(enterprise, coin, text.as_deref(), &written, &[entry]).await? {
        return Err(Error::Conflict {
            name: ErrorName::AlreadyExists,
            message: "the enterprise's rules changed meanwhile; try again".into(),
        });
    }
    Ok(Changed::Applied(list))
}

/// The condition checks of a wallet's rules; the users an approval rule names are admins of
/// the enterprise.
async fn checked(svc: &Custody, enterprise: &EnterpriseId, coin: &Coin, rule: &Rule) -> Result<()> {
    check_condition(svc, coin, rule)?;
    for user in &rule.user_ids {
        let ms = svc.store.memberships(user).await?;
        if !ms.iter().any(|m| m.is_admin && &m.enterprise.id == enterprise) {
            return Err(Error::invalid_field(
                "action.userIds",
                format!("{user} is not an admin of the enterprise"),
            ));
        }
    }
    Ok(())
}
