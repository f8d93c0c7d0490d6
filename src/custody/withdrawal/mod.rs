//! Starting a withdrawal (BitGo's `POST /api/v2/{coin}/wallet/{id}/tx/initiate` and `POST
//! /api/v2/wallet/{id}/txrequests`): who may, what is refused, and the one object both routes
//! make: a [`Withdrawal`] with its pending [`Approval`].

pub mod machine;

use alloy_primitives::U256;
use serde_json::{json, Value};

use super::Custody;
use crate::{
    audit::EntryExt,
    error::{Error, ErrorName, Result},
    identity::{bearer::Principal, scopes::WalletPermission},
    model::{
        audit::AuditType,
        custody::{Approval, ApprovalState, Recipient, TxRequestState, Withdrawal},
    },
    store::{Created, WithdrawalFilter},
    types::{parse_eth_address, ApprovalId, Coin, KeyId, SecondFactor, TxRequestId, WalletId},
};

/// Gas of a plain ETH transfer: what each withdrawal's fee reserve assumes at initiation.
pub const TRANSFER_GAS: u64 = 21_000;
/// Recipients of one withdrawal: an Ethereum transaction pays one address
/// (docs/decisions.md#withdrawals).
pub const MAX_RECIPIENTS: usize = 1;
/// Longest `comment`, characters.
pub const MAX_COMMENT: usize = 256;
/// Longest idempotency key (`sequenceId`, `idempotencyKey`), characters.
pub const MAX_IDEMPOTENCY_KEY: usize = 128;

/// One payee as a client sent it: `amount` is base units as digits (or a JSON integer).
#[derive(Debug, Clone)]
pub struct RecipientRequest {
    pub address: String,
    pub amount: Value,
    pub token_name: Option<String>,
}

/// A withdrawal as a client asked for it.
#[derive(Debug, Clone, Default)]
pub struct WithdrawalRequest {
    pub recipients: Vec<RecipientRequest>,
    pub comment: Option<String>,
    /// A TOTP code or passkey assertion; checked when given.
    pub otp: Option<String>,
    /// `sequenceId` or `idempotencyKey`: the same key twice gives one withdrawal.
    pub idempotency_key: Option<String>,
}

/// A withdrawal and its approval.
#[derive(Debug, Clone)]
pub struct Started {
    pub withdrawal: Withdrawal,
    pub approval: Approval,
    /// False when the idempotency key named an earlier withdrawal, which is answered.
    pub created: bool,
}

/// Starts a withdrawal from custodial wallet `wallet_id` of `coin`. Needs `wallet_spend` (or
/// its `_enterprise`/`_all` form), spend rights on the wallet, and either a spending limit of
/// the token for the coin that covers the amount or an unlocked session (§4.3). Every refusal
/// after authentication is audited (`withdrawal.refused`). Errors: `WalletNotFound`,
/// `InsufficientScope`, `NeedsUnlock` (401), `SpendingLimitExceeded`, `InvalidField`,
/// `WalletNotCustodial`, `WalletFrozen`, `InsufficientBalance`, `TooManyWithdrawals`,
/// `InvalidOtp`.
pub async fn initiate(
    svc: &Custody,
    auth: &Principal,
    coin: &Coin,
    wallet_id: &WalletId,
    req: &WithdrawalRequest,
) -> Result<Started> {
    let result = start(svc, auth, coin, wallet_id, req).await;
    if let Err(e) = &result {
        if !matches!(e, Error::Internal(_) | Error::Unavailable(_) | Error::Busy { .. }) {
            let entry = auth
                .audit(AuditType::WithdrawalRefused)
                .wallet(Some(wallet_id))
                .data(json!({ "reason": e.to_string() }));
            crate::audit::record(&svc.store, &[entry]).await;
        }
    }
    result
}

async fn start(
    svc: &Custody,
    auth: &Principal,
    coin: &Coin,
    wallet_id: &WalletId,
    req: &WithdrawalRequest,
) -> Result<Started> {
    // A token route (`/api/v2/hteth:usdc/...`) spends from the chain's wallet.
    let chain = crate::chain::chain_of(coin)?;
    let wallet =
        crate::wallets::wallet_access(&svc.wallets, auth, &chain, wallet_id, WalletPermission::Spend).await?;
    let record: Value = serde_json::from_str(wallet.record.as_str()).unwrap_or_default();
    let key_id = custodial_key(&record)?;
    let now = svc.store.clock().now();
    refuse_frozen(&record, now)?;
    require_spender(&record, auth)?;
    let Parsed { recipients, total, comment, idempotency_key } = parse_request(req)?;
    let names: Vec<Option<&str>> = req.recipients.iter().map(|r| r.token_name.as_deref()).collect();
    let token = super::tokens::resolve(&svc.config, &chain, coin, &names)?;
    let session = fresh_token(svc, auth).await?;
    check_limits(&session, token.as_ref().map_or(&chain, |t| &t.coin), &total, now)?;
    let unlock = unlock_cap(&session, now);
    if let Some(otp) = &req.otp {
        check_otp(svc, auth, otp).await?;
    }
    let from = crate::chain::record_address(&record, "/coinSpecific/baseAddress").ok_or_else(|| {
        Error::Internal(anyhow::anyhow!("custodial wallet {wallet_id} has no base address"))
    })?;
    let parsed = Parsed { recipients, total, comment, idempotency_key };
    let mut withdrawal = new_withdrawal(svc, auth, &wallet, (chain, token), (key_id, from), parsed, now);
    let approval_id = withdrawal.approval_id.clone();
    // A repeat of an idempotency key answers the first withdrawal before any balance check.
    if let Some(existing) = repeat(svc, &withdrawal).await? {
        return Ok(existing);
    }
    let valued = super::breaker::value(svc, &withdrawal).await;
    withdrawal.usd = valued.usd.clone();
    let approval = new_approval(approval_id, &withdrawal, super::policy::approvals_required(&record), svc);
    let entry = initiated(auth, &withdrawal);
    let mut events = vec![super::events::approval_event(&approval)];
    events.extend(super::events::tx_request_events(&withdrawal, None));
    let announce = super::events::Announcement::prepare(&svc.webhooks, &events).await?;
    let writes = announce.writes();
    let created = super::reserve::create(
        svc,
        &wallet,
        &record,
        &withdrawal,
        &valued,
        unlock.as_ref(),
        approval,
        &[entry],
        &writes,
    )
    .await?;
    match created {
        Created::New(recorded, approval) => {
            announce.committed(&svc.webhooks, &recorded).await;
            Ok(Started { withdrawal, approval: *approval, created: true })
        }
        Created::Existing(first) => answer_first(svc, *first).await,
        Created::Refused(_) => Err(Error::Internal(anyhow::anyhow!("a refusal came back unread"))),
    }
}

/// A new withdrawal from `wallet` of `chain` (`token`'s, when it sends one), signed by
/// `key` at its address, as `parsed` asks, waiting for approval.
fn new_withdrawal(
    svc: &Custody,
    auth: &Principal,
    wallet: &crate::model::wallet::WalletRow,
    (chain, token): (Coin, Option<crate::model::custody::Token>),
    (key_id, from): (KeyId, alloy_primitives::Address),
    parsed: Parsed,
    now: i64,
) -> Withdrawal {
    let gas = if token.is_some() { super::tokens::TOKEN_TRANSFER_GAS } else { TRANSFER_GAS };
    Withdrawal {
        id: TxRequestId::new_random(),
        wallet_id: wallet.id.clone(),
        coin: chain,
        enterprise: wallet.enterprise.clone(),
        creator: auth.user.id.clone(),
        idempotency_key: parsed.idempotency_key,
        state: TxRequestState::PendingApproval,
        version: 1,
        recipients: parsed.recipients,
        token,
        comment: parsed.comment,
        key_id,
        from,
        approval_id: ApprovalId::new_random(),
        nonce: None,
        tx_hash: None,
        signed_tx: None,
        fee_reserve: U256::from(gas) * U256::from(svc.config.withdrawals.max_fee_per_gas),
        error: None,
        mined_block: None,
        token_id: Some(auth.token.id.clone()),
        usd: None,
        created_at: now,
        updated_at: now,
    }
}

/// The audit entry of a new withdrawal.
fn initiated(auth: &Principal, w: &Withdrawal) -> crate::model::audit::AuditEntry {
    auth.audit(AuditType::WithdrawalInitiated).wallet(Some(&w.wallet_id)).data(json!({
        "txRequestId": w.id.as_str(), "pendingApprovalId": w.approval_id.as_str(),
        "total": w.total().to_string(), "recipients": w.recipients.iter().map(|r| r.address.to_checksum(None)).collect::<Vec<_>>(),
        "usd": w.usd.as_ref().map(|u| u.dollars()),
    }))
}

/// What a request says, checked.
struct Parsed {
    recipients: Vec<Recipient>,
    total: U256,
    comment: Option<String>,
    idempotency_key: String,
}

fn parse_request(req: &WithdrawalRequest) -> Result<Parsed> {
    let recipients = parse_recipients(&req.recipients)?;
    let total = recipients.iter().try_fold(U256::ZERO, |a, r| a.checked_add(r.amount));
    let total = total.ok_or_else(|| Error::invalid_field("recipients", "the amounts add up past 2^256"))?;
    let comment = match req.comment.as_deref().map(str::trim) {
        Some(c) if c.chars().count() > MAX_COMMENT => {
            return Err(Error::invalid_field("comment", format!("at most {MAX_COMMENT} characters")))
        }
        Some(c) if !c.is_empty() => Some(c.to_string()),
        _ => None,
    };
    let idempotency_key = match &req.idempotency_key {
        Some(k) if k.is_empty() || k.chars().count() > MAX_IDEMPOTENCY_KEY => {
            return Err(Error::invalid_field("sequenceId", format!("1 to {MAX_IDEMPOTENCY_KEY} characters")))
        }
        Some(k) => k.clone(),
        None => TxRequestId::new_random().as_str().to_string(),
    };
    Ok(Parsed { recipients, total, comment, idempotency_key })
}

async fn check_otp(svc: &Custody, auth: &Principal, otp: &str) -> Result<()> {
    let code = SecondFactor::parse(otp)
        .ok_or_else(|| Error::invalid_field("otp", "a 6-digit code or a passkey assertion"))?;
    if !crate::identity::otp::verify_otp(&svc.identity, &auth.user, &code, auth.client_ip).await? {
        return Err(Error::LoginFailed {
            name: ErrorName::InvalidOtp,
            message: "a valid one-time password is required".into(),
            needs_otp: true,
        });
    }
    Ok(())
}

/// The pending approval of a new withdrawal `w`, needing `required` approvals.
fn new_approval(id: ApprovalId, w: &Withdrawal, required: u32, svc: &Custody) -> Approval {
    let ttl = i64::try_from(svc.config.withdrawals.approval_ttl).unwrap_or(i64::MAX);
    Approval {
        id,
        wallet_id: Some(w.wallet_id.clone()),
        coin: w.coin.clone(),
        enterprise: w.enterprise.clone(),
        creator: w.creator.clone(),
        state: ApprovalState::Pending,
        approvals_required: required,
        resolvers: Vec::new(),
        subject: crate::model::custody::ApprovalSubject::Withdrawal(w.id.clone()),
        created_at: w.created_at,
        expires_at: w.created_at.saturating_add(ttl),
        policy: Default::default(),
    }
}

async fn repeat(svc: &Custody, w: &Withdrawal) -> Result<Option<Started>> {
    let filter = WithdrawalFilter {
        wallet: Some(w.wallet_id.clone()),
        key: Some(w.idempotency_key.clone()),
        limit: 1,
        ..Default::default()
    };
    match svc.store.withdrawals(&filter).await?.pop() {
        Some(first) => Ok(Some(answer_first(svc, first).await?)),
        None => Ok(None),
    }
}

async fn answer_first(svc: &Custody, first: Withdrawal) -> Result<Started> {
    let approval = svc
        .store
        .approval(&first.approval_id)
        .await?
        .ok_or_else(|| Error::Internal(anyhow::anyhow!("withdrawal {} has no approval", first.id)))?;
    Ok(Started { withdrawal: first, approval, created: false })
}

/// The wallet's key, when it is a custodial wallet Custodian holds the key of.
fn custodial_key(record: &Value) -> Result<KeyId> {
    let not_custodial = || Error::Invalid {
        name: ErrorName::WalletNotCustodial,
        message: "withdrawals are made from custodial wallets whose key this service holds".into(),
        context: json!({ "field": "walletId" }),
    };
    if record.get("type").and_then(Value::as_str) != Some("custodial") {
        return Err(not_custodial());
    }
    record
        .pointer("/keys/0")
        .and_then(Value::as_str)
        .and_then(|k| k.parse::<KeyId>().ok())
        .ok_or_else(not_custodial)
}

/// Whether a wallet's record says it is frozen at `now` (`freeze.expires` in the future).
fn is_frozen(record: &Value, now: i64) -> bool {
    let expires = record.pointer("/freeze/expires").and_then(Value::as_str).and_then(crate::clock::parse_iso);
    expires.is_some_and(|e| e > now)
}

/// Whether wallet `id` is frozen now, and its policy rules with its enterprise's (the signer
/// checks both again).
pub async fn gate(svc: &Custody, id: &WalletId) -> Result<(bool, Vec<super::policy::Rule>)> {
    let Some(row) = svc.store.wallets_by_ids(std::slice::from_ref(id), true).await?.pop() else {
        return Ok((false, Vec::new()));
    };
    let record: Value = serde_json::from_str(row.record.as_str()).unwrap_or_default();
    Ok((
        is_frozen(&record, svc.store.clock().now()),
        super::policy::enterprise::all_rules(svc, &row, &record).await?,
    ))
}

/// A wallet whose `freeze.expires` is in the future refuses withdrawals (§6.1 `admin`).
fn refuse_frozen(record: &Value, now: i64) -> Result<()> {
    if is_frozen(record, now) {
        return Err(Error::Invalid {
            name: ErrorName::WalletFrozen,
            message: "the wallet is frozen".into(),
            context: json!({ "field": "walletId" }),
        });
    }
    Ok(())
}

/// The caller must be listed on the wallet with `spend` or `admin`.
fn require_spender(record: &Value, auth: &Principal) -> Result<()> {
    if has_permission(record, auth.user.id.as_str(), &["spend", "admin"]) {
        return Ok(());
    }
    Err(Error::Forbidden {
        name: ErrorName::InsufficientScope,
        message: "spending needs spend permission on the wallet".into(),
        context: json!({ "requiredPermission": "spend" }),
    })
}

/// Whether `user` is listed in the record's `users` with one of `permissions`.
pub fn has_permission(record: &Value, user: &str, permissions: &[&str]) -> bool {
    record.get("users").and_then(Value::as_array).is_some_and(|users| {
        users.iter().any(|u| {
            u.get("user").and_then(Value::as_str) == Some(user)
                && u.get("permissions")
                    .and_then(Value::as_array)
                    .is_some_and(|ps| ps.iter().any(|p| p.as_str().is_some_and(|p| permissions.contains(&p))))
        })
    })
}

pub(super) fn parse_recipients(reqs: &[RecipientRequest]) -> Result<Vec<Recipient>> {
    if reqs.is_empty() {
        return Err(Error::missing_field("recipients"));
    }
    if reqs.len() > MAX_RECIPIENTS {
        return Err(Error::invalid_field(
            "recipients",
            format!("at most {MAX_RECIPIENTS}: an Ethereum transaction pays one address"),
        ));
    }
    reqs.iter()
        .enumerate()
        .map(|(i, r)| {
            let address = parse_eth_address(&r.address)
                .map_err(|e| Error::invalid_field(format!("recipients[{i}].address"), e))?;
            // Nobody holds the zero address's key: what is sent there is burnt.
            if address.is_zero() {
                return Err(Error::invalid_field(
                    format!("recipients[{i}].address"),
                    "the zero address: nobody can spend what is sent to it",
                ));
            }
            let amount = parse_amount(&r.amount).ok_or_else(|| {
                Error::invalid_field(
                    format!("recipients[{i}].amount"),
                    "a whole number of base units above 0, below 2^256",
                )
            })?;
            Ok(Recipient { address, amount })
        })
        .collect()
}

/// Base units as digits or a JSON integer, above 0.
fn parse_amount(v: &Value) -> Option<U256> {
    let text = match v {
        Value::String(s) => s.clone(),
        Value::Number(n) if n.is_u64() || n.as_str().bytes().all(|b| b.is_ascii_digit()) => n.to_string(),
        _ => return None,
    };
    if text.is_empty() || text.len() > 78 || !text.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    U256::from_str_radix(&text, 10).ok().filter(|a| !a.is_zero())
}

/// The caller's token as stored now, not as this process's read cache last saw it (up to a
/// second old): an unlock, a lock or a revocation made through another host counts at once.
async fn fresh_token(svc: &Custody, auth: &Principal) -> Result<crate::model::token::TokenRecord> {
    let fresh = svc.store.token_by_id(&auth.token.id).await?;
    fresh.filter(|t| t.revoked_at.is_none()).ok_or_else(|| Error::Unauthenticated {
        name: ErrorName::InvalidToken,
        message: "the access token was revoked".into(),
    })
}

/// §4.3: a token with a spending limit for the coin may send at most its `txValueLimit` per
/// transaction; one without must be unlocked. An unlocked session has no per-coin limits (BitGo:
/// "unlocking a token with spending limits removes all spending limits"); its own
/// `unlock.txValueLimit` still caps what it sends in all ([`super::reserve::UnlockCap`]).
fn check_limits(t: &crate::model::token::TokenRecord, coin: &Coin, total: &U256, now: i64) -> Result<()> {
    if t.unlock.as_ref().is_some_and(|u| u.expires > now) {
        return Ok(());
    }
    let limit =
        t.spending_limits.as_ref().and_then(|l| l.get(coin.as_str())).and_then(|l| l.get("txValueLimit"));
    let Some(limit) = limit else {
        return Err(Error::NeedsUnlock {
            message: format!("this token has no spending limit for {coin}: unlock the session (POST /api/v2/user/unlock) first"),
        });
    };
    let limit = limit.as_str().map(str::to_string).unwrap_or_else(|| limit.to_string());
    let limit = U256::from_str_radix(&limit, 10).unwrap_or(U256::ZERO);
    if total > &limit {
        return Err(Error::Invalid {
            name: ErrorName::SpendingLimitExceeded,
            message: format!("the amount is above this token's txValueLimit for {coin} ({limit})"),
            context: json!({ "field": "amount", "txValueLimit": limit.to_string() }),
        });
    }
    Ok(())
}

/// The unlocked session's `txValueLimit`, when it is unlocked at `now` and has one.
fn unlock_cap(t: &crate::model::token::TokenRecord, now: i64) -> Option<super::reserve::UnlockCap> {
    let unlock = t.unlock.filter(|u| u.expires > now)?;
    let limit = U256::from_str_radix(t.tx_value_limit.as_ref()?.as_str(), 10).ok()?;
    Some(super::reserve::UnlockCap { token: t.id.clone(), since: unlock.time, limit })
}

/// A wallet admin: listed on the wallet with `admin`, or an admin of its enterprise
/// (docs/decisions.md#withdrawals).
pub async fn is_wallet_admin(
    svc: &Custody,
    user: &crate::types::UserId,
    row: &crate::model::wallet::WalletRow,
    record: &Value,
) -> Result<bool> {
    if has_permission(record, user.as_str(), &["admin"]) {
        return Ok(true);
    }
    let Some(e) = &row.enterprise else { return Ok(false) };
    let memberships = svc.store.memberships(user).await?;
    Ok(memberships.iter().any(|m| m.is_admin && &m.enterprise.id == e))
}
