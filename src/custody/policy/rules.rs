//! A wallet's policy rules, written (docs/policy.md): BitGo's `POST`, `PUT` and `DELETE
//! /api/v2/{coin}/wallet/{walletId}/policy/rule`, kept in the wallet record's
//! `admin.policy.rules`. A change that tightens (a new rule, a whitelist address taken away, a
//! lower limit, fewer approvers) applies at once; one that loosens becomes a pending approval
//! that other wallet admins resolve (`policy::changes`). Every change is audited with the rule
//! before and after.

use serde_json::{json, Value};

pub use policy::edit::RuleChange;

use crate::custody::{
    policy::changes::Owner,
    policy::edit::{apply_edit, check_condition},
    policy::{self, Rule, MAX_RULES},
    withdrawal::is_wallet_admin,
    Custody,
};
use crate::{
    audit::EntryExt,
    error::{Error, ErrorName, Result},
    identity::{bearer::Principal, scopes::WalletPermission},
    model::{audit::AuditType, wallet::WalletRow},
    types::{Coin, WalletId},
};

/// What a rule change did.
#[derive(Debug)]
pub enum Changed {
    /// Applied: the wallet after.
    Applied(Box<WalletRow>),
    /// A loosening, waiting for other admins: its pending approval (`policyRuleRequest`).
    Pending(Box<crate::model::custody::Approval>),
}

/// Changes wallet `wallet_id`'s rules as `what` says with `body` (`{id, type, condition,
/// action}`): the wallet after, or for a loosening the pending approval it waits on. Needs a
/// `wallet_manage` form and a wallet admin. Errors: `WalletNotFound`, `InsufficientScope`,
/// `ApprovalNotAllowed` (not a wallet admin), `MissingField`, `InvalidField`, `AlreadyExists`
/// (the id, or [`MAX_RULES`] reached), `PolicyRuleNotFound`, `TooManyRuleChanges` (409: the
/// wallet has `policy::changes::MAX_PENDING` loosenings waiting), `Conflict` when the wallet
/// changed meanwhile.
pub async fn change(
    svc: &Custody,
    auth: &Principal,
    coin: &Coin,
    wallet_id: &WalletId,
    body: &Value,
    what: RuleChange,
) -> Result<Changed> {
    let row =
        crate::wallets::wallet_access(&svc.wallets, auth, coin, wallet_id, WalletPermission::Manage).await?;
    let mut record: Value = serde_json::from_str(row.record.as_str())
        .map_err(|e| Error::Internal(anyhow::anyhow!("stored wallet record: {e}")))?;
    if !auth.user.service_admin && !is_wallet_admin(svc, &auth.user.id, &row, &record).await? {
        return Err(Error::Forbidden {
            name: ErrorName::ApprovalNotAllowed,
            message: "only an admin of the wallet (or a service admin) may change its policy".into(),
            context: json!({}),
        });
    }
    let mut rules = policy::rules_of(&record);
    let (before, after) = match what {
        RuleChange::Remove => {
            let id = body.get("id").and_then(Value::as_str).ok_or_else(|| Error::missing_field("id"))?;
            let at = policy::edit::position(&rules, id)?;
            let why = format!("removing rule {id}");
            let pending =
                policy::changes::request(svc, auth, Owner::Wallet(&row), &rules[at], None, why).await?;
            return Ok(Changed::Pending(Box::new(pending)));
        }
        RuleChange::Create => {
            let (rule, _) = policy::parse(body)?;
            check_rule(svc, &row, &record, &rule).await?;
            if rules.iter().any(|r| r.id == rule.id) {
                return Err(conflict(format!("the wallet has a rule {} already; PUT changes it", rule.id)));
            }
            if rules.len() >= MAX_RULES {
                return Err(conflict(format!("a wallet holds at most {MAX_RULES} rules")));
            }
            rules.push(rule.clone());
            (None, rule)
        }
        RuleChange::Update => {
            let (mut rule, edit) = policy::parse(body)?;
            check_rule(svc, &row, &record, &rule).await?;
            let at = policy::edit::position(&rules, &rule.id)?;
            let old = rules[at].clone();
            apply_edit(&mut rule, &old, edit);
            // A PUT that does not mention `lockDate` keeps it (`null` clears it: a loosening).
            if body.get("lockDate").is_none() {
                rule.lock_date = old.lock_date;
            }
            if let Some(why) = old.judge_change(&rule, svc.store.clock().now()) {
                let pending =
                    policy::changes::request(svc, auth, Owner::Wallet(&row), &old, Some(&rule), why).await?;
                return Ok(Changed::Pending(Box::new(pending)));
            }
            rules[at] = rule.clone();
            (Some(old), rule)
        }
    };
    policy::edit::set_rules(&mut record, &rules);
    let (kind, id) = (
        if before.is_some() { AuditType::PolicyRuleUpdated } else { AuditType::PolicyRuleCreated },
        &after.id,
    );
    let entry = auth.audit(kind).wallet(Some(wallet_id)).data(
        json!({ "ruleId": id, "before": before.as_ref().map(Rule::to_json), "after": after.to_json() }),
    );
    let text = record.to_string();
    let written = svc.store.set_wallet_record(&row.id, row.record.as_str(), &text, &[entry], &[]).await?;
    if written.is_none() {
        return Err(conflict("the wallet changed meanwhile; try again".into()));
    }
    let fresh = svc.store.wallets_by_ids(std::slice::from_ref(wallet_id), true).await?.pop();
    fresh
        .map(|row| Changed::Applied(Box::new(row)))
        .ok_or_else(|| Error::not_found(ErrorName::WalletNotFound))
}

/// A velocity rule counts the wallet's coin or a token configured for its chain; the users an
/// approval rule names are admins of the wallet (no one else may answer its approvals).
async fn check_rule(svc: &Custody, row: &WalletRow, record: &Value, rule: &Rule) -> Result<()> {
    check_condition(svc, &row.coin, rule)?;
    for user in &rule.user_ids {
        if !is_wallet_admin(svc, user, row, record).await? {
            return Err(Error::invalid_field(
                "action.userIds",
                format!("{user} is not an admin of the wallet"),
            ));
        }
    }
    Ok(())
}

fn conflict(message: String) -> Error {
    Error::Conflict { name: ErrorName::AlreadyExists, message }
}

/// The dry run (`POST /api/v2/{coin}/wallet/{walletId}/policy/evaluate`): what the wallet's
/// rules make of a withdrawal paying `recipients`, reserving and storing nothing. Needs the
/// wallet visible with a `wallet_view` form. Answers `{outcome: "denied" | "pendingApproval",
/// singleRunResults, reasons, approvalsRequired, ruleApprovals, usd}` with the circuit
/// breaker's hold among them (`usd`: the withdrawal's value, null when its coin is not priced);
/// velocity limits and the breaker read the wallet's withdrawals as they are now. Errors: `WalletNotFound`,
/// `InsufficientScope`, `MissingField`, `InvalidField` (a recipient).
pub async fn dry_run(
    svc: &Custody,
    auth: &Principal,
    coin: &Coin,
    wallet_id: &WalletId,
    recipients: &[crate::custody::withdrawal::RecipientRequest],
) -> Result<Value> {
    let row =
        crate::wallets::wallet_access(&svc.wallets, auth, coin, wallet_id, WalletPermission::View).await?;
    let record: Value = serde_json::from_str(row.record.as_str())
        .map_err(|e| Error::Internal(anyhow::anyhow!("stored wallet record: {e}")))?;
    let recipients = crate::custody::withdrawal::parse_recipients(recipients)?;
    let total = recipients.iter().fold(alloy_primitives::U256::ZERO, |a, r| a.saturating_add(r.amount));
    let p = policy::eval::Proposal {
        coin,
        wallet_coin: &row.coin,
        recipients: &recipients,
        total,
        decimals: crate::custody::tokens::decimals(&svc.config, &row.coin, coin),
        hooks: None,
    };
    let required = policy::approvals_required(&record);
    let asked = crate::custody::policy::hooks::Asked {
        stage: "dryRun",
        wallet: &row.id,
        coin,
        enterprise: row.enterprise.as_ref(),
        tx_request_id: None,
        initiator: &auth.user.id,
        recipients: &recipients,
        total,
        approvals_required: Some(required),
    };
    let verdict = crate::custody::reserve::verdict_now(
        svc,
        &row.id,
        &crate::custody::policy::enterprise::all_rules(svc, &row, &record).await?,
        &p,
        &asked,
        None,
    )
    .await?;
    let outcome = if verdict.denied.is_some() { "denied" } else { "pendingApproval" };
    let mut policy = verdict.into_policy();
    let valued = crate::custody::breaker::value_of(svc, &row.coin, coin, total).await;
    crate::custody::breaker::judge_now(svc, &row.id, &valued, &mut policy).await?;
    Ok(json!({
        "outcome": outcome,
        "singleRunResults": policy.single_run_results,
        "reasons": policy.reasons,
        "approvalsRequired": policy.approvals_required(required),
        "ruleApprovals": policy.rule_approvals,
        "usd": valued.usd.as_ref().map(|u| u.dollars()),
    }))
}

/// Audit entries of a wallet's policy history the console shows, at most.
pub const HISTORY: usize = 50;
/// The wallet's latest audit entries scanned for them.
const HISTORY_SCAN: u32 = 500;

/// Wallet `wallet_id`'s policy history, newest first: its `policy.*` audit entries among its
/// latest [`HISTORY_SCAN`], at most [`HISTORY`]. Needs the wallet visible with a `wallet_view`
/// form. Errors: `WalletNotFound`, `InsufficientScope`.
pub async fn history(
    svc: &Custody,
    auth: &Principal,
    coin: &Coin,
    wallet_id: &WalletId,
) -> Result<Vec<crate::model::audit::AuditEntry>> {
    crate::wallets::wallet_access(&svc.wallets, auth, coin, wallet_id, WalletPermission::View).await?;
    let filter = crate::store::AuditFilter { wallet_id: Some(wallet_id.clone()), ..Default::default() };
    let found = svc.store.list_audit(&filter, None, HISTORY_SCAN).await?;
    Ok(found
        .into_iter()
        .map(|c| c.entry)
        .filter(|e| e.entry_type.as_str().starts_with("policy."))
        .take(HISTORY)
        .collect())
}
