//! Pending approvals (BitGo's `pendingApprovals`): listing them, and the answers of the people
//! who approve. A withdrawal needs `approvalsRequired` approvals from wallet admins other than
//! its initiator, each with a fresh OTP or passkey assertion; one rejection rejects it; the
//! initiator may cancel their own. A change to an enterprise's rules (`scope: "enterprise"`,
//! no wallet) is seen by the enterprise's members and answered by its admins.

pub mod shown;

use serde_json::{json, Value};

use super::{
    withdrawal::{
        is_wallet_admin,
        machine::{self, Command, Refused, State},
    },
    Custody,
};
use crate::{
    audit::EntryExt,
    error::{Error, ErrorName, Result},
    identity::{
        bearer::Principal,
        scopes::{Action, WalletPermission},
    },
    model::{
        audit::AuditType,
        custody::{Approval, ApprovalState, ApprovalSubject, Resolver, TxRequestState},
        wallet::WalletRow,
    },
    store::ApprovalFilter,
    types::{ApprovalId, Coin, EnterpriseId, WalletId},
    wallets::Visibility,
};

/// Most approvals in one page.
pub const MAX_PAGE: u32 = 500;
/// Approvals scanned to answer a list without a wallet (the newest), of which those the caller
/// may see are kept.
pub const MAX_SCAN: u32 = 2_000;

/// What a list asks for.
#[derive(Debug, Clone, Default)]
pub struct ListQuery {
    /// Only approvals of this coin (the `/{coin}/pendingapprovals` form).
    pub coin: Option<Coin>,
    pub wallet: Option<WalletId>,
    pub enterprise: Option<EnterpriseId>,
    pub state: Option<ApprovalState>,
    /// 1 to [`MAX_PAGE`]; default 100.
    pub limit: Option<u32>,
}

/// Approvals the caller may see (of wallets they see), newest first. Errors: `WalletNotFound`
/// for a wallet they may not see, `InvalidField` (`limit`).
pub async fn list(svc: &Custody, auth: &Principal, q: &ListQuery) -> Result<Vec<Approval>> {
    let limit = q.limit.unwrap_or(100);
    if !(1..=MAX_PAGE).contains(&limit) {
        return Err(Error::invalid_field("limit", format!("from 1 to {MAX_PAGE}")));
    }
    let mut filter = ApprovalFilter {
        enterprise: q.enterprise.clone(),
        state: q.state,
        limit: MAX_SCAN,
        ..Default::default()
    };
    if let Some(wallet) = &q.wallet {
        let row = visible_wallet(svc, auth, wallet).await?;
        if q.coin.as_ref().is_some_and(|c| c != &row.coin) {
            return Ok(Vec::new());
        }
        filter.wallets = Some(vec![row.id]);
        filter.limit = limit;
    }
    let found = svc.store.approvals(&filter).await?;
    let ids: Vec<WalletId> = found
        .iter()
        .filter_map(|a| a.wallet_id.clone())
        .collect::<std::collections::HashSet<_>>()
        .into_iter()
        .collect();
    let rows = svc.store.wallets_by_ids(&ids, true).await?;
    let seen = Visibility::load(&svc.wallets, auth).await?;
    let visible: std::collections::HashSet<WalletId> =
        rows.iter().filter(|r| seen.can_view(&svc.wallets, auth, r)).map(|r| r.id.clone()).collect();
    let enterprises = Enterprises::load(svc, auth, found.iter().any(|a| a.wallet_id.is_none())).await?;
    Ok(found
        .into_iter()
        .filter(|a| match &a.wallet_id {
            Some(w) => visible.contains(w),
            None => q.wallet.is_none() && enterprises.sees(svc, auth, a.enterprise.as_ref()),
        })
        .filter(|a| q.coin.as_ref().is_none_or(|c| c == &a.coin))
        .take(usize::try_from(limit).unwrap_or(usize::MAX))
        .collect())
}

/// The enterprises whose own approvals the caller sees: those they are a member of, with a
/// token that may view them (`enterprise_view_all`); every one for a service admin.
struct Enterprises(Vec<crate::store::Membership>);

impl Enterprises {
    async fn load(svc: &Custody, auth: &Principal, needed: bool) -> Result<Self> {
        match needed && !auth.user.service_admin {
            true => Ok(Enterprises(svc.store.memberships(&auth.user.id).await?)),
            false => Ok(Enterprises(Vec::new())),
        }
    }

    fn sees(&self, svc: &Custody, auth: &Principal, e: Option<&EnterpriseId>) -> bool {
        let Some(e) = e else { return false };
        let member = auth.user.service_admin || self.0.iter().any(|m| &m.enterprise.id == e);
        member && auth.require(svc.wallets.policy, Action::ViewEnterprise { enterprise_id: e }).is_ok()
    }

    /// Whether the caller is an admin of `e`.
    fn admin_of(&self, e: &EnterpriseId) -> bool {
        self.0.iter().any(|m| m.is_admin && &m.enterprise.id == e)
    }
}

/// Each of `approvals` with its withdrawal, in one read (the lists' records carry the
/// withdrawal's recipients).
pub async fn with_withdrawals(
    svc: &Custody,
    approvals: Vec<Approval>,
) -> Result<Vec<(Approval, Option<crate::model::custody::Withdrawal>)>> {
    if approvals.is_empty() {
        return Ok(Vec::new());
    }
    let ids: Vec<crate::types::TxRequestId> =
        approvals.iter().filter_map(|a| a.tx_request_id().cloned()).collect();
    let filter = crate::store::WithdrawalFilter {
        limit: u32::try_from(ids.len()).unwrap_or(u32::MAX),
        ids: Some(ids),
        ..Default::default()
    };
    let mut found: std::collections::HashMap<_, _> =
        svc.store.withdrawals(&filter).await?.into_iter().map(|w| (w.id.clone(), w)).collect();
    Ok(approvals
        .into_iter()
        .map(|a| {
            let w = a.tx_request_id().and_then(|id| found.remove(id));
            (a, w)
        })
        .collect())
}

async fn visible_wallet(svc: &Custody, auth: &Principal, wallet: &WalletId) -> Result<WalletRow> {
    let row = svc.store.wallets_by_ids(std::slice::from_ref(wallet), true).await?.pop();
    let row = row.ok_or_else(|| Error::not_found(ErrorName::WalletNotFound))?;
    crate::wallets::wallet_access(&svc.wallets, auth, &row.coin, &row.id, WalletPermission::View).await
}

/// One approval the caller may see (of `coin`, when given). Errors: `ApprovalNotFound`.
pub async fn get(svc: &Custody, auth: &Principal, coin: Option<&Coin>, id: &ApprovalId) -> Result<Approval> {
    let not_found =
        || Error::NotFound { name: ErrorName::ApprovalNotFound, message: "no such pending approval".into() };
    let a = svc.store.approval(id).await?.ok_or_else(not_found)?;
    if coin.is_some_and(|c| c != &a.coin) {
        return Err(not_found());
    }
    match &a.wallet_id {
        Some(w) => {
            visible_wallet(svc, auth, w).await.map_err(|_| not_found())?;
        }
        None => {
            let enterprises = Enterprises::load(svc, auth, true).await?;
            if !enterprises.sees(svc, auth, a.enterprise.as_ref()) {
                return Err(not_found());
            }
        }
    }
    Ok(a)
}

/// An answer to a pending approval.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Answer {
    Approved,
    Rejected,
}

/// Records the caller's `answer` to approval `id` (BitGo's `PUT .../pendingapprovals/{id}`
/// `{state, otp}`). Approving needs a wallet admin other than the initiator, who has not
/// answered yet, with `otp` (a fresh TOTP code or passkey assertion), and the token's
/// `wallet_approve` form or `pending_approval_update`. Rejecting needs the same rights, or is
/// the initiator cancelling their own (no OTP). The approvals the wallet's fired policy rules
/// ask for count too: a named approver among them, a final approval last (docs/policy.md). The
/// last approval hands the withdrawal to the signer. Errors: `ApprovalNotFound`, `ApprovalNotPending` (409), `ApprovalNotAllowed` (403),
/// `InsufficientScope`, `InvalidOtp`, `Conflict` when another answer landed first (retry).
pub async fn resolve(
    svc: &Custody,
    auth: &Principal,
    coin: Option<&Coin>,
    id: &ApprovalId,
    answer: Answer,
    otp: Option<&str>,
) -> Result<Approval> {
    let a = get(svc, auth, coin, id).await?;
    if a.state != ApprovalState::Pending {
        return Err(not_pending(format!("the approval is {} already", a.state.as_str())));
    }
    // An answer at or after `expireDate` is refused, swept or not: checked first, and again
    // with the instant that is written, after the OTP check (which may wait its turn).
    let late = |now: i64| now >= a.expires_at && !(answer == Answer::Rejected && a.creator == auth.user.id);
    if late(svc.store.clock().now()) {
        return Err(expired(&a));
    }
    let (cancel, completes) = may_answer(svc, auth, &a, answer).await?;
    if answer == Answer::Approved {
        crate::identity::passkeys::require_fresh_factor(&svc.identity, auth, otp).await?;
    }
    let now = svc.store.clock().now();
    if late(now) {
        return Err(expired(&a));
    }
    let mut next = a.clone();
    next.resolvers.push(Resolver {
        user: auth.user.id.clone(),
        resolution: match answer {
            Answer::Approved => "approved",
            Answer::Rejected => "rejected",
        }
        .into(),
        date: crate::clock::iso(now),
    });
    let approvals = next.resolvers.iter().filter(|r| r.resolution == "approved").count();
    let (state, withdrawal, audit_type) = outcome(&a, answer, cancel, completes);
    next.state = state;
    let mut entries = vec![auth.audit(audit_type).wallet(a.wallet_id.as_ref()).data(json!({
        "pendingApprovalId": a.id.as_str(), "txRequestId": a.tx_request_id().map(|t| t.as_str()),
        "ruleId": match &a.subject { ApprovalSubject::PolicyRule(r) => Some(&r.rule_id), _ => None },
        "approvals": approvals, "approvalsRequired": a.approvals_required, "state": state.as_str(),
    }))];
    if a.wallet_id.is_none() {
        entries[0].enterprise_id = a.enterprise.clone();
    }
    // The last approval of a rule change applies it, in the same transaction.
    let swap = match (&a.subject, state) {
        (ApprovalSubject::PolicyRule(r), ApprovalState::Approved) => {
            Some(super::policy::changes::apply_request(svc, auth, &a, r).await?)
        }
        _ => None,
    };
    if let Some(s) = &swap {
        entries.push(s.audit.clone());
    }
    let moved = match (withdrawal, a.tx_request_id()) {
        (Some(command), Some(id)) => moved_by(svc, &a, id, command, now).await?,
        _ => None,
    };
    let announce = announced(svc, &next, moved.as_ref()).await?;
    let record = swap.as_ref().and_then(|s| s.swap(&a));
    let to = moved.as_ref().map(|(w, _)| (w.state, w.version - 1));
    let written = svc
        .store
        .resolve_approval(&next, a.resolvers.len(), to, record, now, &entries, &announce.writes())
        .await?;
    let Some(recorded) = written else {
        return Err(not_pending(
            "another answer to this approval, or a change to the wallet, landed first; read it again".into(),
        ));
    };
    announce.committed(&svc.webhooks, &recorded).await;
    if moved.is_some_and(|(w, _)| w.state == TxRequestState::PendingDelivery) {
        svc.wake_signers();
    }
    Ok(next)
}

/// The events of an answer: `pendingapproval` for `next`, and the withdrawal's change when it
/// `moved` (from the state given).
async fn announced(
    svc: &Custody,
    next: &Approval,
    moved: Option<&(crate::model::custody::Withdrawal, TxRequestState)>,
) -> Result<super::events::Announcement> {
    let mut events = vec![super::events::approval_event(next)];
    if let Some((moved, from)) = moved {
        events.extend(super::events::tx_request_events(moved, Some(*from)));
    }
    super::events::Announcement::prepare(&svc.webhooks, &events).await
}

/// 409 `ApprovalNotPending` with `message`.
fn not_pending(message: String) -> Error {
    Error::Conflict { name: ErrorName::ApprovalNotPending, message }
}

/// 409 `ApprovalNotPending`: `a` expired (its `expireDate` passed), whether or not the signer's
/// sweep has closed it yet.
fn expired(a: &Approval) -> Error {
    not_pending(format!("the approval expired at {}", crate::clock::iso(a.expires_at)))
}

/// Withdrawal `id` as `command` leaves it (the machine decides, at `now`), with the state it
/// was in; `None` when it stays as it is. Errors: `ApprovalNotPending` when the withdrawal no
/// longer takes answers (expired, or moved on).
async fn moved_by(
    svc: &Custody,
    a: &Approval,
    id: &crate::types::TxRequestId,
    command: Command,
    now: i64,
) -> Result<Option<(crate::model::custody::Withdrawal, TxRequestState)>> {
    let Some(w) = svc.store.withdrawal(id).await? else { return Ok(None) };
    let state = State::of(&w, Some(a.expires_at))
        .ok_or_else(|| Error::Internal(anyhow::anyhow!("withdrawal {id} is malformed")))?;
    let next = match machine::step(state, command, now) {
        Ok(next) => next,
        Err(Refused::Expired(_)) => return Err(expired(a)),
        Err(why) => return Err(not_pending(format!("the withdrawal cannot take this answer: {why}"))),
    };
    if next.name() == w.state {
        return Ok(None);
    }
    let from = w.state;
    Ok(Some((
        crate::model::custody::Withdrawal {
            state: next.name(),
            version: w.version + 1,
            updated_at: now,
            ..w
        },
        from,
    )))
}

/// What an answer does: the approval's state, what happens to its withdrawal, the audit type.
fn outcome(
    a: &Approval,
    answer: Answer,
    cancel: bool,
    completes: bool,
) -> (ApprovalState, Option<Command>, AuditType) {
    let state = match answer {
        Answer::Rejected => ApprovalState::Rejected,
        Answer::Approved if completes => ApprovalState::Approved,
        Answer::Approved => ApprovalState::Pending,
    };
    if let ApprovalSubject::PolicyRule(_) = a.subject {
        let kind = match answer {
            Answer::Approved => AuditType::PolicyChangeApproved,
            Answer::Rejected => AuditType::PolicyChangeRejected,
        };
        return (state, None, kind);
    }
    match answer {
        Answer::Rejected if cancel => (state, Some(Command::Cancel), AuditType::WithdrawalCanceled),
        Answer::Rejected => (state, Some(Command::Reject), AuditType::WithdrawalRejected),
        Answer::Approved => {
            (state, Some(Command::Approve { last: completes }), AuditType::WithdrawalApproved)
        }
    }
}

/// Whether the caller may give `answer` to `a`: (whether it is the initiator cancelling,
/// whether the approval completes it). The wallet's `approvalsRequired` and the approvals its
/// fired rules ask for decide the second (`policy::eval::approve`).
async fn may_answer(svc: &Custody, auth: &Principal, a: &Approval, answer: Answer) -> Result<(bool, bool)> {
    let me = auth.user.id.as_str();
    let cancel = answer == Answer::Rejected && a.creator == auth.user.id;
    let for_service_admin = a.policy.rule_approvals.iter().any(|r| r.service_admin);
    if !cancel {
        match (&a.wallet_id, &a.enterprise) {
            (Some(wallet), _) => {
                let row = visible_wallet(svc, auth, wallet).await?;
                let record: Value = serde_json::from_str(row.record.as_str()).unwrap_or_default();
                require_approver(svc, auth, &row, &record, for_service_admin).await?;
            }
            (None, Some(e)) => require_enterprise_approver(svc, auth, e).await?,
            (None, None) => return Err(not_allowed("this approval has no wallet or enterprise")),
        }
        if a.creator == auth.user.id {
            return Err(not_allowed("the initiator of a withdrawal or change may not approve it"));
        }
        if a.resolvers.iter().any(|r| r.user.as_str() == me) {
            return Err(not_allowed("you have answered this approval already"));
        }
    }
    let approved: Vec<&crate::types::UserId> =
        a.resolvers.iter().filter(|r| r.resolution == "approved").map(|r| &r.user).collect();
    let admins = match for_service_admin {
        true => service_admins(svc, approved.iter().copied().chain([&auth.user.id])).await?,
        false => Vec::new(),
    };
    let completes = match answer {
        Answer::Approved => {
            super::policy::eval::approve(a.approvals_required, &a.policy, &approved, &auth.user.id, &|u| {
                admins.contains(u)
            })
            .map_err(|why| not_allowed(&why))?
        }
        Answer::Rejected => false,
    };
    Ok((cancel, completes))
}

fn not_allowed(message: &str) -> Error {
    Error::Forbidden { name: ErrorName::ApprovalNotAllowed, message: message.into(), context: json!({}) }
}

/// Which of `users` are service admins now (an approval's answerers: a handful).
async fn service_admins<'a>(
    svc: &Custody,
    users: impl Iterator<Item = &'a crate::types::UserId>,
) -> Result<Vec<crate::types::UserId>> {
    let mut out = Vec::new();
    for u in users {
        if svc.store.user_by_id(u).await?.is_some_and(|found| found.service_admin) {
            out.push(u.clone());
        }
    }
    Ok(out)
}

/// An approver of a change to enterprise `e`'s rules is an admin of `e` whose token holds an
/// `enterprise_manage_all` form for it or `pending_approval_update`.
async fn require_enterprise_approver(svc: &Custody, auth: &Principal, e: &EnterpriseId) -> Result<()> {
    auth.require(svc.wallets.policy, Action::ManageEnterprise { enterprise_id: e })
        .or_else(|_| auth.require(svc.wallets.policy, Action::UpdatePendingApproval))?;
    if Enterprises(svc.store.memberships(&auth.user.id).await?).admin_of(e) {
        return Ok(());
    }
    Err(not_allowed("only an admin of the enterprise may answer its policy changes"))
}

/// An approver is a wallet admin (listed with `admin`, or an admin of the wallet's
/// enterprise: docs/decisions.md#withdrawals) whose token holds a `wallet_approve` form for the
/// wallet or `pending_approval_update`; or, for an approval that asks a service admin's
/// (`for_service_admin`: the circuit breaker's), a service admin's session.
async fn require_approver(
    svc: &Custody,
    auth: &Principal,
    row: &WalletRow,
    record: &Value,
    for_service_admin: bool,
) -> Result<()> {
    let scoped = auth
        .require(
            svc.wallets.policy,
            Action::Wallet {
                permission: WalletPermission::Approve,
                wallet_id: &row.id,
                enterprise: row.enterprise.as_ref(),
            },
        )
        .or_else(|_| auth.require(svc.wallets.policy, Action::UpdatePendingApproval));
    scoped?;
    if (for_service_admin && auth.token.admin) || is_wallet_admin(svc, &auth.user.id, row, record).await? {
        return Ok(());
    }
    Err(not_allowed("only an admin of the wallet may answer its approvals"))
}
