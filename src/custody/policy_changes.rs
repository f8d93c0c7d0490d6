//! Loosening a wallet's policy (docs/policy.md#loosening): a change that loosens the rules is
//! never applied by the admin who asks. It becomes a pending approval of type
//! `policyRuleRequest` that other wallet admins answer like a withdrawal's (the wallet's
//! `approvalsRequired` of them, each with a fresh OTP); the last approval applies it, in the
//! same store transaction, to the rules as they are then.

use serde_json::{json, Value};

use super::{
    policy::{self, Rule},
    Custody,
};
use crate::{
    audit::EntryExt,
    error::{Error, ErrorName, Result},
    identity::bearer::Principal,
    model::{
        audit::{AuditEntry, AuditType},
        custody::{Approval, ApprovalPolicy, ApprovalState, ApprovalSubject, PolicyRuleRequest},
        wallet::WalletRow,
    },
    store::ApprovalFilter,
    types::ApprovalId,
};

/// Loosenings one wallet may have waiting at once.
pub const MAX_PENDING: u32 = 20;

/// Asks for a loosening of wallet `row`'s rule `before`: to `update`, or its removal (`None`).
/// `why` says how it loosens. Audited as `policy.change_requested`; tells `pendingapproval`.
/// Errors: `PolicyRuleLocked` (403) when the rule's `lockDate` passed and the caller is not a
/// service admin; `TooManyRuleChanges` (409) when [`MAX_PENDING`] wait already.
pub async fn request(
    svc: &Custody,
    auth: &Principal,
    row: &WalletRow,
    before: &Rule,
    update: Option<&Rule>,
    why: String,
) -> Result<Approval> {
    let now = svc.store.clock().now();
    if before.locked(now) && !auth.user.service_admin {
        return Err(Error::Forbidden {
            name: ErrorName::PolicyRuleLocked,
            message: format!(
                "rule {} is locked since {}: only a service admin may ask to loosen it",
                before.id,
                crate::clock::iso(before.lock_date.unwrap_or(now))
            ),
            context: json!({ "rule": before.to_json() }),
        });
    }
    let waiting = ApprovalFilter {
        wallets: Some(vec![row.id.clone()]),
        state: Some(ApprovalState::Pending),
        approval_type: Some("policyRuleRequest"),
        limit: MAX_PENDING,
        ..Default::default()
    };
    if svc.store.approvals(&waiting).await?.len() >= usize::try_from(MAX_PENDING).unwrap_or(usize::MAX) {
        return Err(Error::Conflict {
            name: ErrorName::TooManyRuleChanges,
            message: format!("the wallet has {MAX_PENDING} policy changes waiting for approval"),
        });
    }
    let record: Value = serde_json::from_str(row.record.as_str()).unwrap_or_default();
    let ttl = i64::try_from(svc.config.withdrawals.approval_ttl).unwrap_or(i64::MAX);
    let change = PolicyRuleRequest {
        action: if update.is_some() { "update" } else { "remove" }.into(),
        rule_id: before.id.clone(),
        update: update.map(Rule::to_json),
        before: before.to_json(),
        reason: why,
    };
    let approval = Approval {
        id: ApprovalId::new_random(),
        wallet_id: row.id.clone(),
        coin: row.coin.clone(),
        enterprise: row.enterprise.clone(),
        creator: auth.user.id.clone(),
        state: ApprovalState::Pending,
        approvals_required: super::withdrawals::approvals_required(&record),
        resolvers: Vec::new(),
        subject: ApprovalSubject::PolicyRule(change.clone()),
        created_at: now,
        expires_at: now.saturating_add(ttl),
        policy: ApprovalPolicy::default(),
    };
    let entry = auth.audit(AuditType::PolicyChangeRequested).wallet(Some(&row.id)).data(json!({
        "pendingApprovalId": approval.id.as_str(), "action": change.action, "ruleId": change.rule_id,
        "before": change.before, "update": change.update, "reason": change.reason,
    }));
    let events = [super::events::approval_event(&approval)];
    let announce = super::events::Announcement::prepare(&svc.webhooks, &events).await?;
    let recorded = svc.store.create_approval(&approval, &[entry], &announce.writes()).await?;
    announce.committed(&svc.webhooks, &recorded).await;
    Ok(approval)
}

/// A rule change made ready to apply: the wallet's record now and after, and its audit entry.
#[derive(Debug)]
pub struct Applied {
    pub before: String,
    pub after: String,
    pub audit: AuditEntry,
}

/// Applies change `r` of approval `a` to its wallet's rules as they are now, by the caller
/// giving the last approval: for the store to write with the approval. Errors:
/// `PolicyRuleNotFound` (409 here: the rule changed or was removed since), `WalletNotFound`.
pub async fn apply_request(
    svc: &Custody,
    auth: &Principal,
    a: &Approval,
    r: &PolicyRuleRequest,
) -> Result<Applied> {
    let row = svc.store.wallets_by_ids(std::slice::from_ref(&a.wallet_id), true).await?.pop();
    let row = row.ok_or_else(|| Error::not_found(ErrorName::WalletNotFound))?;
    let mut record: Value = serde_json::from_str(row.record.as_str())
        .map_err(|e| Error::Internal(anyhow::anyhow!("stored wallet record: {e}")))?;
    let mut rules = policy::rules_of(&record);
    let gone = || Error::Conflict {
        name: ErrorName::PolicyRuleNotFound,
        message: format!("rule {} changed or went since this change was asked for; reject it", r.rule_id),
    };
    let at = policy::position(&rules, &r.rule_id).map_err(|_| gone())?;
    // Approvers approved a change from `before`: a rule changed since (tightened, say) is not
    // overwritten.
    let now = rules[at].to_json();
    if now != r.before {
        return Err(gone());
    }
    let kind = match &r.update {
        Some(update) => {
            let (rule, _) = policy::parse(update)?;
            rules[at] = rule;
            AuditType::PolicyRuleUpdated
        }
        None => {
            rules.remove(at);
            AuditType::PolicyRuleRemoved
        }
    };
    policy::set_rules(&mut record, &rules);
    let audit = auth.audit(kind).wallet(Some(&a.wallet_id)).data(json!({
        "ruleId": r.rule_id, "before": now, "after": r.update, "pendingApprovalId": a.id.as_str(),
    }));
    Ok(Applied { before: row.record.as_str().to_string(), after: record.to_string(), audit })
}
