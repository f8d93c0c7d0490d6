//! Loosening a wallet's or an enterprise's policy (docs/policy.md#loosening): a change that
//! loosens the rules is never applied by the admin who asks. It becomes a pending approval of
//! type `policyRuleRequest` that other admins answer like a withdrawal's (a wallet's
//! `approvalsRequired` of its admins, or `withdrawals.enterprise_policy_approvals` of the
//! enterprise's, each with a fresh OTP); the last approval applies it, in the same store
//! transaction, to the rules as they are then.

use serde_json::{json, Value};

use crate::custody::{
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
    store::{ApprovalFilter, RecordSwap},
    types::{ApprovalId, Coin, EnterpriseId},
};

/// Loosenings one wallet, or one enterprise, may have waiting at once.
pub const MAX_PENDING: u32 = 20;

/// Whose rules a change loosens.
#[derive(Debug, Clone, Copy)]
pub enum Owner<'a> {
    /// A wallet's own rules.
    Wallet(&'a WalletRow),
    /// An enterprise's rules for a coin (docs/policy.md#enterprise-rules).
    Enterprise(&'a EnterpriseId, &'a Coin),
}

/// Asks for a loosening of `owner`'s rule `before`: to `update`, or its removal (`None`).
/// `why` says how it loosens. Audited as `policy.change_requested`; tells `pendingapproval`
/// (the wallet's webhooks, or the enterprise's). Errors: `PolicyRuleLocked` (403) when the
/// rule's `lockDate` passed and the caller is not a service admin; `TooManyRuleChanges` (409)
/// when [`MAX_PENDING`] wait already.
pub async fn request(
    svc: &Custody,
    auth: &Principal,
    owner: Owner<'_>,
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
    let mut waiting = ApprovalFilter {
        state: Some(ApprovalState::Pending),
        approval_type: Some("policyRuleRequest"),
        limit: MAX_PENDING,
        ..Default::default()
    };
    let (wallet_id, coin, enterprise, required) = match owner {
        Owner::Wallet(row) => {
            waiting.wallets = Some(vec![row.id.clone()]);
            let record: Value = serde_json::from_str(row.record.as_str()).unwrap_or_default();
            let required = policy::approvals_required(&record);
            (Some(row.id.clone()), row.coin.clone(), row.enterprise.clone(), required)
        }
        Owner::Enterprise(e, coin) => {
            (waiting.enterprise, waiting.enterprise_scope) = (Some(e.clone()), true);
            (None, coin.clone(), Some(e.clone()), svc.config.withdrawals.enterprise_policy_approvals)
        }
    };
    if svc.store.approvals(&waiting).await?.len() >= usize::try_from(MAX_PENDING).unwrap_or(usize::MAX) {
        return Err(Error::Conflict {
            name: ErrorName::TooManyRuleChanges,
            message: format!("{MAX_PENDING} policy changes wait for approval already"),
        });
    }
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
        wallet_id,
        coin,
        enterprise,
        creator: auth.user.id.clone(),
        state: ApprovalState::Pending,
        approvals_required: required,
        resolvers: Vec::new(),
        subject: ApprovalSubject::PolicyRule(change.clone()),
        created_at: now,
        expires_at: now.saturating_add(ttl),
        policy: ApprovalPolicy::default(),
    };
    let mut entry =
        auth.audit(AuditType::PolicyChangeRequested).wallet(approval.wallet_id.as_ref()).data(json!({
            "pendingApprovalId": approval.id.as_str(), "action": change.action, "ruleId": change.rule_id,
            "coin": approval.coin.as_str(), "before": change.before, "update": change.update, "reason": change.reason,
        }));
    if approval.wallet_id.is_none() {
        entry.enterprise_id = approval.enterprise.clone();
    }
    let events = [crate::custody::events::approval_event(&approval)];
    let announce = crate::custody::events::Announcement::prepare(&svc.webhooks, &events).await?;
    let recorded = svc.store.create_approval(&approval, &[entry], &announce.writes()).await?;
    announce.committed(&svc.webhooks, &recorded).await;
    Ok(approval)
}

/// A rule change made ready to apply: the rules now and after (a wallet's record, or an
/// enterprise's list), and its audit entry.
#[derive(Debug)]
pub struct Applied {
    pub before: String,
    pub after: String,
    pub audit: AuditEntry,
}

impl Applied {
    /// The store's swap of it, for approval `a` it came from.
    pub fn swap<'a>(&'a self, a: &'a Approval) -> Option<RecordSwap<'a>> {
        let (before, after) = (self.before.as_str(), self.after.as_str());
        match (&a.wallet_id, &a.enterprise) {
            (Some(wallet), _) => Some(RecordSwap::Wallet { wallet, before, after }),
            (None, Some(enterprise)) => {
                Some(RecordSwap::EnterpriseRules { enterprise, coin: &a.coin, before, after })
            }
            (None, None) => None,
        }
    }
}

/// Applies change `r` of approval `a` to its owner's rules as they are now, by the caller
/// giving the last approval: for the store to write with the approval. Errors:
/// `PolicyRuleNotFound` (409 here: the rule changed or was removed since), `WalletNotFound`.
pub async fn apply_request(
    svc: &Custody,
    auth: &Principal,
    a: &Approval,
    r: &PolicyRuleRequest,
) -> Result<Applied> {
    let (before, mut rules, record) = match (&a.wallet_id, &a.enterprise) {
        (Some(wallet), _) => {
            let row = svc.store.wallets_by_ids(std::slice::from_ref(wallet), true).await?.pop();
            let row = row.ok_or_else(|| Error::not_found(ErrorName::WalletNotFound))?;
            let record: Value = serde_json::from_str(row.record.as_str())
                .map_err(|e| Error::Internal(anyhow::anyhow!("stored wallet record: {e}")))?;
            (row.record.as_str().to_string(), policy::rules_of(&record), Some(record))
        }
        (None, Some(enterprise)) => {
            let text = svc.store.enterprise_rules(enterprise, &a.coin).await?.unwrap_or_default();
            let rules = policy::rules_of_list(Some(&text));
            (text, rules, None)
        }
        (None, None) => {
            return Err(Error::Internal(anyhow::anyhow!("an approval of no wallet or enterprise")))
        }
    };
    let gone = || Error::Conflict {
        name: ErrorName::PolicyRuleNotFound,
        message: format!("rule {} changed or went since this change was asked for; reject it", r.rule_id),
    };
    let at = policy::edit::position(&rules, &r.rule_id).map_err(|_| gone())?;
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
    let after = match record {
        Some(mut record) => {
            policy::edit::set_rules(&mut record, &rules);
            record.to_string()
        }
        None => Value::Array(rules.iter().map(Rule::to_json).collect()).to_string(),
    };
    let mut audit = auth.audit(kind).wallet(a.wallet_id.as_ref()).data(json!({
        "ruleId": r.rule_id, "coin": a.coin.as_str(), "before": now, "after": r.update,
        "pendingApprovalId": a.id.as_str(),
    }));
    if a.wallet_id.is_none() {
        audit.enterprise_id = a.enterprise.clone();
    }
    Ok(Applied { before, after, audit })
}
