//! Simulated notifications (spec §4.5, §4.7, §4.9): built like real ones, marked
//! `simulation: true`, and queued for delivery.
//!
//! Layer rule: no web-framework types and nothing of the HTTP layer (docs/architecture.md).

use crate::error::ErrorName;
use serde_json::Value;

use super::access::{enterprise_access, webhook_access};
use crate::{
    error::{Error, Result},
    identity::{bearer::Principal, scopes::WalletPermission},
    model::{
        notification::Notification,
        webhook::{Webhook, WebhookLevel},
    },
    notifications,
    types::{Coin, EnterpriseId, TokenId, WalletId, WebhookId},
    wallets::wallet_access,
    webhooks::Webhooks,
};

/// Queues a simulated notification, counted against the webhook's operation limit; returns it
/// with its webhook.
async fn enqueue(svc: &Webhooks, webhook: Webhook, n: Notification) -> Result<(Notification, Webhook)> {
    svc.operations.check(&webhook.id).await?;
    svc.store.insert_notifications(std::slice::from_ref(&n)).await?;
    svc.dispatch.wake();
    Ok((n, webhook))
}

fn given(id: Option<&str>) -> Option<&str> {
    id.map(str::trim).filter(|t| !t.is_empty())
}

/// Simulates a wallet webhook notification (§4.5) for `transfer_id` (real or placeholder), or,
/// for a pendingapproval webhook, `pending_approval_id` (BitGoJS sends one or the other). Only
/// an event of this wallet may lend its data: another wallet's transfer stays unknown.
pub async fn wallet(
    svc: &Webhooks,
    auth: &Principal,
    (coin, wallet_id, webhook_id): (&Coin, &WalletId, &WebhookId),
    transfer_id: Option<&str>,
    pending_approval_id: Option<&str>,
) -> Result<(Notification, Webhook)> {
    if pending_approval_id.is_some_and(|p| p.len() > 128) {
        return Err(Error::invalid_field("pendingApprovalId", "at most 128 characters"));
    }
    let wallet = wallet_access(&svc.wallets, auth, coin, wallet_id, WalletPermission::Manage).await?;
    let w = svc
        .store
        .webhook_by_id(webhook_id)
        .await?
        .filter(|w| w.level.wallet_id() == Some(&wallet.id))
        .ok_or_else(|| Error::not_found(ErrorName::WebhookNotFound))?;
    let transfer = given(transfer_id);
    let event = match transfer {
        Some(t) => svc
            .store
            .event_by_transfer(t)
            .await?
            .and_then(|b| serde_json::from_str::<Value>(&b).ok())
            .filter(|e| e.get("walletId").and_then(Value::as_str) == Some(wallet.id.as_str())),
        None => None,
    };
    let record = serde_json::from_str::<Value>(&wallet.record).ok();
    let field = |k: &str| record.as_ref().and_then(|r| r.get(k)).and_then(Value::as_str).map(str::to_string);
    let (organization, wallet_type, label) = (field("organization"), field("type"), field("label"));
    let facts = notifications::WalletFacts {
        organization: organization.as_deref(),
        wallet_type: wallet_type.as_deref(),
        label: label.as_deref(),
        enterprise: wallet.enterprise.as_deref(),
    };
    let n = notifications::simulate_wallet(&w, &facts, (transfer, given(pending_approval_id)), event);
    enqueue(svc, w, n).await
}

/// Simulates a block webhook notification (§4.7) for `block_id` (real or placeholder).
pub async fn block(
    svc: &Webhooks,
    auth: &Principal,
    coin: &Coin,
    webhook_id: &WebhookId,
    block_id: Option<&str>,
) -> Result<(Notification, Webhook)> {
    let w = webhook_access(svc, auth, webhook_id).await?;
    if !matches!(&w.level, WebhookLevel::Block { coin: c, .. } if c == coin) {
        return Err(Error::not_found(ErrorName::WebhookNotFound));
    }
    let n = notifications::simulate_block(&w, given(block_id));
    enqueue(svc, w, n).await
}

/// Simulates an enterprise webhook notification (§4.9) for `access_token_id`; a token of this
/// enterprise lends its data.
pub async fn enterprise(
    svc: &Webhooks,
    auth: &Principal,
    enterprise_id: &EnterpriseId,
    webhook_id: &WebhookId,
    access_token_id: Option<&str>,
) -> Result<(Notification, Webhook)> {
    let e = enterprise_access(svc, auth, enterprise_id).await?;
    let w = svc
        .store
        .webhook_by_id(webhook_id)
        .await?
        .filter(|w| matches!(&w.level, WebhookLevel::Enterprise { enterprise_id } if *enterprise_id == e.id))
        .ok_or_else(|| Error::not_found(ErrorName::WebhookNotFound))?;
    let token_id = given(access_token_id);
    let token = match token_id.and_then(|t| t.parse::<TokenId>().ok()) {
        Some(t) => svc.store.token_by_id(&t).await?.filter(|t| t.enterprise.as_ref() == Some(&e.id)),
        None => None,
    };
    let n = notifications::simulate_enterprise(&w, token.as_ref(), token_id);
    enqueue(svc, w, n).await
}
