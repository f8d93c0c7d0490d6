//! The outbox's notifications (spec §2.6, §6): built from ingested events, from simulations,
//! and from access token creation, each with the exact payload text that will be POSTed. A
//! leaf below the capabilities: identity (token creation) and webhooks (events, simulation)
//! both build notifications here, and it depends only on the store's records.
//!
//! Layer rule: no web-framework types and nothing of the HTTP layer (docs/architecture.md).

use serde_json::{json, Map, Value};

pub mod dispatch;
pub mod headers;
pub mod secret_cache;
pub mod signing;

use crate::{
    ids,
    model::{
        notification::{Notification, NotificationState},
        webhook::{LevelKind, Webhook, WebhookFilter, WebhookLevel, WebhookState},
    },
    types::{NotificationId, WalletId},
};

/// Notification `version` (§2.6, §9).
pub const VERSION: u32 = 2;

pub use crate::model::notification::{idempotency_key, EventPayload};

/// A random 64-hex hash for placeholder transactions.
fn placeholder_hash() -> String {
    format!("{}{}", ids::new_id(), ids::new_id())
}

/// A new notification for `webhook`, due now.
pub fn new_notification(
    webhook: &Webhook,
    payload: &Value,
    hash: Option<String>,
    idempotency_key: Option<String>,
    event_id: Option<String>,
    simulation: bool,
    meta: Value,
) -> Notification {
    let text = payload.to_string().into();
    with_payload_text(webhook, text, hash, idempotency_key, event_id, simulation, meta)
}

/// [`new_notification`] with its payload's text made already (an event's, shared by every
/// webhook it reaches).
fn with_payload_text(
    webhook: &Webhook,
    payload: std::sync::Arc<str>,
    hash: Option<String>,
    idempotency_key: Option<String>,
    event_id: Option<String>,
    simulation: bool,
    meta: Value,
) -> Notification {
    let now = crate::clock::wall_now_ms();
    Notification {
        id: NotificationId::new_sequential(),
        webhook_id: webhook.id.clone(),
        event_id,
        notification_type: webhook.webhook_type.clone(),
        state: NotificationState::New,
        simulation,
        retries: 0,
        payload,
        hash,
        idempotency_key,
        meta,
        next_attempt_at_ms: now,
        lease_until_ms: 0,
        created_at_ms: now,
        updated_at_ms: now,
    }
}

/// The §2.6 level-specific fields stored with a wallet notification.
/// Only what the webhook's level does not give ([`notification_json`] adds that).
fn wallet_meta(organization: Option<&str>, transfer: Option<&str>) -> Value {
    let mut m = json!({});
    if let Some(o) = organization {
        m["organization"] = json!(o);
    }
    if let Some(t) = transfer {
        m["transfer"] = json!(t);
    }
    m
}

/// A simulated wallet notification (§4.5). `event` is an ingested event naming the transfer,
/// when there is one; otherwise the payload is placeholder data marked `"placeholder": true`,
/// in the shape of BitGo's notification of the webhook's type (docs/webhooks.md): a transfer
/// has `walletType` (the wallet's `type`), base-unit amounts, `initiator` and `receiver`.
pub fn simulate_wallet(
    webhook: &Webhook,
    wallet: &WalletFacts<'_>,
    (transfer_id, pending_approval_id): (Option<&str>, Option<&str>),
    event: Option<Value>,
) -> Notification {
    let organization = wallet.organization;
    let facts = wallet;
    let wallet = webhook.level.wallet_id().map(WalletId::to_string).unwrap_or_default();
    let mut payload = match event {
        Some(Value::Object(mut e)) => {
            e.remove("eventId");
            e.insert("type".into(), json!(webhook.webhook_type));
            e.insert("wallet".into(), json!(wallet));
            Value::Object(e)
        }
        _ => placeholder_payload(webhook, &wallet, facts, (transfer_id, pending_approval_id)),
    };
    payload["simulation"] = json!(true);
    let hash =
        payload.get("hash").and_then(Value::as_str).map(str::to_string).unwrap_or_else(placeholder_hash);
    let transfer = payload.get("transfer").and_then(Value::as_str).map(str::to_string);
    let meta = wallet_meta(organization, transfer.as_deref());
    new_notification(webhook, &payload, Some(hash), Some(ids::new_id()), None, true, meta)
}

/// What a simulated wallet notification takes from the wallet's record.
#[derive(Debug, Clone, Copy, Default)]
pub struct WalletFacts<'a> {
    pub organization: Option<&'a str>,
    /// The record's `type` (hot, cold, custodial...).
    pub wallet_type: Option<&'a str>,
    pub label: Option<&'a str>,
    pub enterprise: Option<&'a str>,
}

/// Invented data in the shape of BitGo's notification of the webhook's type (docs/webhooks.md),
/// marked `placeholder: true`.
fn placeholder_payload(
    webhook: &Webhook,
    wallet: &str,
    facts: &WalletFacts<'_>,
    (transfer_id, pending_approval_id): (Option<&str>, Option<&str>),
) -> Value {
    let t = webhook.webhook_type.as_str();
    let mut p = match t {
        "pendingapproval" => json!({
            "pendingApprovalType": "transactionRequest",
            "pendingApprovalId": pending_approval_id.map_or_else(ids::new_id, str::to_string),
            "walletId": wallet, "walletLabel": facts.label, "state": "pending",
        }),
        "txRequest" | "txRequestTransaction" => {
            let (old, new) = if t == "txRequest" {
                ("initialized", "pendingApproval")
            } else {
                ("pendingSignature", "signed")
            };
            json!({
                "enterpriseId": facts.enterprise, "organizationId": facts.organization, "walletId": wallet,
                "txRequestId": ids::new_id(), "txRequestVersion": 1, "webhookType": t, "sequenceIds": [],
                "oldState": old, "newState": new,
            })
        }
        _ => {
            json!({ "wallet": wallet, "coin": webhook.level.coin(), "hash": placeholder_hash(), "state": "confirmed" })
        }
    };
    p["type"] = json!(t);
    p["placeholder"] = json!(true);
    if t == "transfer" {
        p["transfer"] = json!(transfer_id.map(str::to_string).unwrap_or_else(ids::new_id));
        p["transferType"] = json!("receive");
        p["walletType"] = json!(facts.wallet_type);
        for k in ["baseValue", "value"] {
            p[k] = json!(0);
        }
        for k in ["baseValueString", "valueString", "feeString"] {
            p[k] = json!("0");
        }
        p["initiator"] = json!([]);
        p["receiver"] = json!("placeholder-address");
    }
    p
}

/// A simulated block notification (§4.7).
pub fn simulate_block(webhook: &Webhook, block_id: Option<&str>) -> Notification {
    let hash = block_id.map(str::to_string).unwrap_or_else(placeholder_hash);
    let mut payload = json!({ "type": webhook.webhook_type, "coin": webhook.level.coin(), "hash": hash, "simulation": true });
    if block_id.is_none() {
        payload["placeholder"] = json!(true);
    }
    new_notification(webhook, &payload, Some(hash), Some(ids::new_id()), None, true, json!({}))
}

/// The payload of an `accessToken` enterprise notification (§6.3).
pub fn access_token_payload(
    webhook: &Webhook,
    token: Option<&crate::model::token::TokenRecord>,
    token_id: &str,
) -> Value {
    match token {
        Some(t) => json!({
            "type": "accessToken",
            "enterpriseId": webhook.level.enterprise_id(),
            "accessTokenId": t.id,
            "label": t.label,
            "user": t.user_id,
            "scope": t.scopes,
            "created": crate::clock::iso(t.created_at),
            "expires": crate::clock::iso(t.expires_at),
        }),
        None => json!({
            "type": "accessToken",
            "enterpriseId": webhook.level.enterprise_id(),
            "accessTokenId": token_id,
            "placeholder": true,
        }),
    }
}

/// An enterprise notification with `payload`; `source` makes its idempotency key.
pub fn enterprise_notification(
    webhook: &Webhook,
    payload: Value,
    simulation: bool,
    source: Option<&str>,
) -> Notification {
    // Its hash is the payload's SHA-256: derived, not stored.
    let key = source.map(|s| idempotency_key(&webhook.id, s)).unwrap_or_else(ids::new_id);
    let access_token = payload.get("accessTokenId").cloned().unwrap_or(Value::Null);
    let meta = json!({ "accessToken": access_token });
    new_notification(webhook, &payload, None, Some(key), None, simulation, meta)
}

/// A simulated enterprise notification (§4.9).
pub fn simulate_enterprise(
    webhook: &Webhook,
    token: Option<&crate::model::token::TokenRecord>,
    token_id: Option<&str>,
) -> Notification {
    let enterprise = webhook.level.enterprise_id();
    let mut payload = match webhook.webhook_type.as_str() {
        "accessToken" => access_token_payload(webhook, token, token_id.unwrap_or("")),
        "pendingapproval" => json!({
            "type": "pendingapproval", "enterpriseId": enterprise, "pendingApprovalType": "policyRuleRequest",
            "pendingApprovalId": ids::new_id(), "state": "pending",
        }),
        _ => {
            json!({ "type": webhook.webhook_type, "enterpriseId": enterprise, "bankAccountId": ids::new_id(), "placeholder": true })
        }
    };
    payload["simulation"] = json!(true);
    enterprise_notification(webhook, payload, true, None)
}

/// The notification an ingested event makes for `webhook`: the event's fields (less
/// `eventId`) plus `wallet` for wallet events. Block events are keyed per block so that a
/// block notifies each webhook once however many confirmation events arrive.
pub fn from_event(
    webhook: &Webhook,
    event_id: &str,
    event: &Map<String, Value>,
    payload: &EventPayload,
) -> Notification {
    // The hash (the event's `hash` or `blockId`, else the payload's SHA-256) and the key of an
    // event notification are derived when read (docs/decisions.md#performance-as-the-data-grows: lean storage); a block key is not.
    let key = match (&webhook.level, event.get("blockId").and_then(Value::as_str)) {
        (WebhookLevel::Block { .. }, Some(block)) if webhook.webhook_type == "block" => {
            Some(idempotency_key(&webhook.id, &format!("block:{block}")))
        }
        _ => None,
    };
    let meta = match &webhook.level {
        // The rule the store derives a lean row's meta with.
        WebhookLevel::Wallet { .. } => payload.wallet_meta.clone(),
        WebhookLevel::Enterprise { .. } | WebhookLevel::Block { .. } => json!({}),
    };
    let text = payload.text.clone();
    with_payload_text(webhook, text, None, key, Some(event_id.to_string()), false, meta)
}

/// The §2.6 representation of a notification of `webhook`, with its `payload`.
pub fn notification_json(n: &Notification, webhook: &Webhook) -> Value {
    let mut m = json!({
        "id": n.id,
        "url": webhook.url,
        "hash": n.hash(),
        "simulation": n.simulation,
        "retries": n.retries,
        "webhook": n.webhook_id,
        "updatedAt": crate::clock::iso_ms(n.updated_at_ms),
        "version": VERSION,
        "state": n.state.as_str(),
        "payload": n.payload,
    });
    // The level's fields, then the stored ones (older rows stored them too, and repeat them).
    match &webhook.level {
        WebhookLevel::Wallet { coin, wallet_id, enterprise_id, .. } => {
            m["wallet"] = json!(wallet_id);
            m["coin"] = json!(coin);
            if let Some(e) = enterprise_id {
                m["enterprise"] = json!(e);
            }
        }
        WebhookLevel::Enterprise { enterprise_id } => m["enterprise"] = json!(enterprise_id),
        WebhookLevel::Block { coin, .. } => m["coin"] = json!(coin),
    }
    if let Value::Object(meta) = &n.meta {
        for (k, v) in meta {
            if !v.is_null() {
                m[k.as_str()] = v.clone();
            }
        }
    }
    match &webhook.level {
        WebhookLevel::Wallet { .. } => {
            m["type"] = json!(n.notification_type);
            m["idempotencyKey"] = json!(n.idempotency_key());
        }
        WebhookLevel::Block { .. } => m["type"] = json!(n.notification_type),
        WebhookLevel::Enterprise { .. } => m["allowBlockedHosts"] = json!(webhook.allow_blocked_hosts),
    }
    m
}

/// The accessToken notifications (§6.3) for a token created with `enterprise`: one per
/// accessToken webhook of that enterprise, active or suspended (held until it is unblocked,
/// while it holds fewer than `max_held`: docs/decisions.md#faults-and-floods). Written with the token (the outbox).
pub async fn access_token_notifications(
    store: &crate::store::DynStore,
    token: &crate::model::token::TokenRecord,
    max_held: u64,
) -> crate::store::StoreResult<Vec<Notification>> {
    let Some(e) = &token.enterprise else { return Ok(Vec::new()) };
    let filter = WebhookFilter {
        scope: LevelKind::Enterprise,
        enterprise_id: Some(e.clone()),
        webhook_type: Some("accessToken".into()),
        ..Default::default()
    };
    let mut hooks = store.list_webhooks(&filter, None, 500).await?;
    let mut kept = Vec::with_capacity(hooks.len());
    for w in hooks.drain(..) {
        if w.state == WebhookState::Active || store.undelivered_count(&w.id).await? < max_held {
            kept.push(w);
        }
    }
    Ok(kept
        .iter()
        .map(|w| {
            let payload = access_token_payload(w, Some(token), &token.id);
            enterprise_notification(w, payload, false, Some(&format!("accessToken:{}", token.id)))
        })
        .collect())
}
