//! BitGo's shapes of a pending approval and a txRequest (docs/withdrawals.md#shapes).

use serde_json::{json, Value};

use crate::model::custody::{Approval, ApprovalSubject, TxRequestState, Withdrawal};

fn recipients(w: &Withdrawal) -> Vec<Value> {
    w.recipients
        .iter()
        .map(|r| json!({ "address": r.address.to_checksum(None), "amount": r.amount.to_string() }))
        .collect()
}

/// A pending approval: `{id, coin, wallet, enterprise, creator, createDate, state, scope,
/// approvalsRequired, resolvers, singleRunResults, reasons, ruleApprovals, txRequestId, info:
/// {type: "transactionRequest", transactionRequest: {requestedAmount, sourceWallet, recipients,
/// buildParams, comment, usd, usdRate}}}` (`usd`: dollars when it was made, `usdRate`: dollars
/// per whole coin; only when its coin is priced); a loosening rule change has no `txRequestId` and `info: {type:
/// "policyRuleRequest", policyRuleRequest: {action, ruleId, update, before}}`. `approvalsRequired` counts the final approval a fired
/// `getFinalApproval` rule asks for (docs/policy.md).
pub fn approval(
    a: &Approval,
    w: Option<&Withdrawal>,
    shown: Option<&super::approvals::shown::Shown>,
) -> Value {
    let info = match &a.subject {
        ApprovalSubject::Withdrawal(_) => {
            let mut request = json!({ "sourceWallet": a.wallet_id.as_ref().map(|w| w.as_str()) });
            if let Some(w) = w {
                let recipients = recipients(w);
                request["requestedAmount"] = json!(w.total().to_string());
                request["recipients"] = json!(recipients);
                request["buildParams"] = json!({ "recipients": recipients });
                if let Some(c) = &w.comment {
                    request["comment"] = json!(c);
                }
                if let Some(u) = &w.usd {
                    request["usd"] = json!(u.dollars());
                    request["usdRate"] = json!(u.rate.parse::<f64>().ok());
                }
            }
            if let Some(s) = shown {
                s.add_to(&mut request);
            }
            json!({ "type": a.kind(), "transactionRequest": request })
        }
        ApprovalSubject::PolicyRule(r) => json!({ "type": a.kind(), "policyRuleRequest": r }),
    };
    let mut v = json!({
        "id": a.id.as_str(),
        "coin": a.coin.as_str(),
        "creator": a.creator.as_str(),
        "createDate": crate::clock::iso(a.created_at),
        "expireDate": crate::clock::iso(a.expires_at),
        "state": a.state.as_str(),
        "scope": a.scope(),
        "approvalsRequired": a.policy.approvals_required(a.approvals_required),
        "resolvers": a.resolvers,
        "singleRunResults": a.policy.single_run_results,
        "reasons": a.policy.reasons,
        "ruleApprovals": a.policy.rule_approvals,
        "info": info,
    });
    if let Some(id) = a.tx_request_id() {
        v["txRequestId"] = json!(id.as_str());
    }
    if let Some(w) = &a.wallet_id {
        v["wallet"] = json!(w.as_str());
    }
    if let Some(e) = &a.enterprise {
        v["enterprise"] = json!(e.as_str());
    }
    v
}

/// The state of a txRequest's one transaction (BitGo's transaction states).
fn transaction_state(s: TxRequestState) -> &'static str {
    match s {
        TxRequestState::PendingApproval => "initialized",
        TxRequestState::PendingDelivery => "pendingSignature",
        TxRequestState::Signed => "signed",
        TxRequestState::Delivered => "delivered",
        TxRequestState::Rejected => "rejected",
        TxRequestState::Canceled => "canceled",
        TxRequestState::Failed => "failed",
    }
}

/// A txRequest (`apiVersion: "full"`): `{txRequestId, version, latest, walletId, walletType,
/// enterpriseId, state, userId, intent, pendingApprovalId, transactions, createdDate,
/// updatedDate}`, with `usd` and `usdRate` when it was valued (docs/policy.md#circuit-breaker).
/// `attempts` are every transaction signed for it: those other than the current
/// one are listed as its `replacedTxHashes`.
pub fn tx_request(r: &super::history::WithdrawalRecord) -> Value {
    let (w, attempts) = (&r.withdrawal, &r.attempts);
    let recipients: Vec<Value> = w
        .recipients
        .iter()
        .map(|r| {
            json!({
                "address": { "address": r.address.to_checksum(None) },
                "amount": { "value": r.amount.to_string(), "symbol": w.token.as_ref().map_or(&w.coin, |t| &t.coin).as_str() },
            })
        })
        .collect();
    let mut tx = json!({ "state": transaction_state(w.state) });
    if let Some(n) = w.nonce {
        tx["nonce"] = json!(n);
    }
    if let Some(h) = &w.tx_hash {
        tx["txHash"] = json!(h.to_string());
    }
    if let Some(raw) = &w.signed_tx {
        tx["signedTx"] =
            json!({ "id": w.tx_hash.map(|h| h.to_string()), "tx": format!("0x{}", hex::encode(raw)) });
    }
    if let Some(b) = w.mined_block {
        tx["blockHeight"] = json!(b);
    }
    let replaced: Vec<String> =
        attempts.iter().filter(|a| Some(a.hash) != w.tx_hash).map(|a| a.hash.to_string()).collect();
    if !replaced.is_empty() {
        tx["replacedTxHashes"] = json!(replaced);
    }
    if let Some(f) = &r.fill {
        tx["nonceFill"] = json!({ "txHash": f.tx_hash.to_string(), "nonce": f.nonce });
    }
    let mut v = json!({
        "txRequestId": w.id.as_str(),
        "idempotencyKey": w.idempotency_key,
        "version": w.version,
        "latest": true,
        "walletId": w.wallet_id.as_str(),
        "walletType": "custodial",
        "coin": w.coin.as_str(),
        "state": w.state.as_str(),
        "userId": w.creator.as_str(),
        "intent": { "intentType": "payment", "recipients": recipients },
        "pendingApprovalId": w.approval_id.as_str(),
        "transactions": [tx],
        "apiVersion": "full",
        "createdDate": crate::clock::iso(w.created_at),
        "updatedDate": crate::clock::iso(w.updated_at),
    });
    if let Some(e) = &w.enterprise {
        v["enterpriseId"] = json!(e.as_str());
    }
    if let Some(c) = &w.comment {
        v["intent"]["comment"] = json!(c);
    }
    if let Some(e) = &w.error {
        v["error"] = json!(e);
    }
    if let Some(u) = &w.usd {
        v["usd"] = json!(u.dollars());
        v["usdRate"] = json!(u.rate.parse::<f64>().ok());
    }
    v
}
