//! Enterprise policy rules (docs/policy.md#enterprise-rules), Custodian's own routes
//! `POST`, `PUT`, `DELETE` and `GET /api/v2/{coin}/enterprise/{enterpriseId}/policy/rule`: the
//! same rules as a wallet's, applying to every wallet of the enterprise and coin, each judged
//! on its own (a velocity limit counts each wallet's withdrawals). In a wallet's evaluation
//! they follow its own rules, their ids prefixed [`PREFIX`].

use serde_json::{json, Value};

use super::{
    policy::{self, Rule, MAX_RULES},
    policy_edit::{apply_edit, check_condition, RuleChange},
    Custody,
};
use crate::{
    audit::EntryExt,
    error::{Error, ErrorName, Result},
    identity::{bearer::Principal, scopes::Action},
    model::audit::AuditType,
    types::{Coin, EnterpriseId},
};

/// How an enterprise rule's id reads among a wallet's rules: `enterprise.<id>`.
pub const PREFIX: &str = "enterprise.";

/// The rules stored for `enterprise` and `coin` (ids as written).
async fn stored(
    svc: &Custody,
    enterprise: &EnterpriseId,
    coin: &Coin,
) -> Result<(Option<String>, Vec<Rule>)> {
    let text = svc.store.enterprise_rules(enterprise, coin).await?;
    let value: Value = text.as_deref().and_then(|t| serde_json::from_str(t).ok()).unwrap_or_default();
    let rules = policy::rules_of(&json!({ "admin": { "policy": { "rules": value } } }));
    Ok((text, rules))
}

/// The rules of the wallet's enterprise for its coin, ids prefixed [`PREFIX`]: what the wallet's
/// evaluation adds to its own. None for a wallet of no enterprise.
pub async fn rules_for(svc: &Custody, enterprise: Option<&EnterpriseId>, coin: &Coin) -> Result<Vec<Rule>> {
    let Some(e) = enterprise else { return Ok(Vec::new()) };
    let (_, rules) = stored(svc, e, coin).await?;
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
    Ok(stored(svc, enterprise, coin).await?.1.iter().map(Rule::to_json).collect())
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

/// Changes `enterprise`'s rules for `coin` as `what` says (the body as for a wallet's rules):
/// the rules after. A tightening applies at once; a loosening is refused
/// (`PolicyChangeNeedsApproval`, 403): an enterprise's loosenings cannot be approved yet.
/// Needs an `enterprise_manage_all` form and an enterprise admin. Errors as for a wallet's
/// rules, and `EnterpriseNotFound`.
pub async fn change(
    svc: &Custody,
    auth: &Principal,
    coin: &Coin,
    enterprise: &EnterpriseId,
    body: &Value,
    what: RuleChange,
) -> Result<Vec<Value>> {
    auth.require(svc.wallets.policy, Action::ManageEnterprise { enterprise_id: enterprise })?;
    member(svc, auth, enterprise, true).await?;
    super::spendable_coin(&svc.config, coin)?;
    let (text, mut rules) = stored(svc, enterprise, coin).await?;
    let (before, after) = match what {
        RuleChange::Remove => {
            let id = body.get("id").and_then(Value::as_str).ok_or_else(|| Error::missing_field("id"))?;
            let at = policy::position(&rules, id)?;
            return Err(needs_approval(format!("removing rule {id}"), &rules[at]));
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
            let at = policy::position(&rules, &rule.id)?;
            let old = rules[at].clone();
            apply_edit(&mut rule, &old, edit);
            if body.get("lockDate").is_none() {
                rule.lock_date = old.lock_date;
            }
            if let Some(why) = rule.loosens(&old) {
                return Err(needs_approval(why, &old));
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
    Ok(list)
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

fn needs_approval(why: String, rule: &Rule) -> Error {
    Error::Forbidden {
        name: ErrorName::PolicyChangeNeedsApproval,
        message: format!(
            "{why} loosens the enterprise's policy, which needs other admins' approval; this version takes \
             such approvals for wallet rules only (docs/policy.md#enterprise-rules)"
        ),
        context: json!({ "rule": rule.to_json() }),
    }
}
