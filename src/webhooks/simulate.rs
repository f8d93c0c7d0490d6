//! Simulated notifications (spec §4.5, §4.7, §4.9): built like real ones, marked
//! `simulation: true`, and queued for delivery.
//!
//! Layer rule: no web-framework types and nothing of the HTTP layer (docs/architecture.md).

use serde_json::Value;

use super::access::{enterprise_access, webhook_access};
use crate::{
    error::{Error, Result},
    identity::{auth::Principal, scopes::WalletPermission},
    ids, outbox,
    store::{Notification, Webhook, WebhookLevel},
    wallets::wallet_access,
    AppState,
};

/// Queues a simulated notification, counted against the webhook's operation limit; returns it
/// with its webhook.
async fn enqueue(state: &AppState, webhook: Webhook, n: Notification) -> Result<(Notification, Webhook)> {
    state.webhook_ops.check(&webhook.id)?;
    state.store.insert_notifications(std::slice::from_ref(&n)).await?;
    state.wake.notify_one();
    Ok((n, webhook))
}

fn given(id: Option<&str>) -> Option<&str> {
    id.map(str::trim).filter(|t| !t.is_empty())
}

/// Simulates a wallet webhook notification (§4.5) for `transfer_id` (real or placeholder).
/// Only an event of this wallet may lend its data: another wallet's transfer stays unknown.
pub async fn wallet(
    state: &AppState,
    auth: &Principal,
    coin: &str,
    wallet_id: &str,
    webhook_id: &str,
    transfer_id: Option<&str>,
) -> Result<(Notification, Webhook)> {
    let wallet = wallet_access(state, auth, coin, wallet_id, WalletPermission::Manage).await?;
    let w = state
        .store
        .webhook_by_id(webhook_id)
        .await?
        .filter(|w| w.level.wallet_id() == Some(wallet.id.as_str()))
        .ok_or_else(|| Error::not_found("WebhookNotFound"))?;
    let transfer = given(transfer_id);
    let event = match transfer {
        Some(t) => state
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
    let facts = outbox::WalletFacts {
        organization: organization.as_deref(),
        wallet_type: wallet_type.as_deref(),
        label: label.as_deref(),
        enterprise: wallet.enterprise.as_deref(),
    };
    let n = outbox::simulate_wallet(&w, &facts, transfer, event);
    enqueue(state, w, n).await
}

/// Simulates a block webhook notification (§4.7) for `block_id` (real or placeholder).
pub async fn block(
    state: &AppState,
    auth: &Principal,
    coin: &str,
    webhook_id: &str,
    block_id: Option<&str>,
) -> Result<(Notification, Webhook)> {
    let w = webhook_access(state, auth, webhook_id).await?;
    if !matches!(&w.level, WebhookLevel::Block { coin: c, .. } if c.as_str() == coin) {
        return Err(Error::not_found("WebhookNotFound"));
    }
    let n = outbox::simulate_block(&w, given(block_id));
    enqueue(state, w, n).await
}

/// Simulates an enterprise webhook notification (§4.9) for `access_token_id`; a token of this
/// enterprise lends its data.
pub async fn enterprise(
    state: &AppState,
    auth: &Principal,
    enterprise_id: &str,
    webhook_id: &str,
    access_token_id: Option<&str>,
) -> Result<(Notification, Webhook)> {
    let e = enterprise_access(state, auth, enterprise_id).await?;
    let w = state
        .store
        .webhook_by_id(webhook_id)
        .await?
        .filter(|w| matches!(&w.level, WebhookLevel::Enterprise { enterprise_id } if *enterprise_id == e.id))
        .ok_or_else(|| Error::not_found("WebhookNotFound"))?;
    let token_id = given(access_token_id);
    let token = match token_id.filter(|t| ids::is_id(t)) {
        Some(t) => {
            state.store.token_by_id(t).await?.filter(|t| t.enterprise.as_deref() == Some(e.id.as_str()))
        }
        None => None,
    };
    let n = outbox::simulate_enterprise(&w, token.as_ref(), token_id);
    enqueue(state, w, n).await
}
