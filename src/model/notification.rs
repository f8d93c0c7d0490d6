//! What a notification is (spec §2.6): its delivery state, the exact payload text that is
//! POSTed, and the rules for its `hash` and its `Idempotency-Key`; and one delivery attempt.

use serde_json::{json, Map, Value};

use crate::types::{NotificationId, WebhookId};

/// The payload of an event's notification (spec §6): the event without its `eventId`, with
/// `wallet` set to its `walletId` when it has one.
pub fn event_payload(event: &Map<String, Value>) -> Map<String, Value> {
    let mut payload = event.clone();
    payload.remove("eventId");
    if let Some(w) = event.get("walletId") {
        payload.insert("wallet".into(), w.clone());
    }
    payload
}

/// What every notification of one event POSTs, serialised once and shared
/// ([`event_payload`]), and the `meta` a wallet webhook's
/// notification of it carries.
#[derive(Debug, Clone)]
pub struct EventPayload {
    pub text: std::sync::Arc<str>,
    pub wallet_meta: Value,
}

impl EventPayload {
    pub fn of(event: &Map<String, Value>) -> Self {
        let payload = event_payload(event);
        let wallet_meta = event_meta(&payload);
        EventPayload { text: Value::Object(payload).to_string().into(), wallet_meta }
    }
}

/// The `meta` of a wallet webhook's notification of an event: the transfer it names.
pub fn event_meta(payload: &Map<String, Value>) -> Value {
    match payload.get("transferId").and_then(Value::as_str) {
        Some(t) => json!({ "transfer": t }),
        None => json!({}),
    }
}

/// Where a notification is in its delivery (spec §2.6 `state`; docs/webhooks.md).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NotificationState {
    /// Queued, never attempted.
    New,
    /// Leased by a worker, or waiting for a retry.
    Pending,
    /// Delivered.
    Processed,
    /// Failed for the last time.
    Failed,
}

impl NotificationState {
    /// Every state, in delivery order.
    pub const ALL: [NotificationState; 4] = [
        NotificationState::New,
        NotificationState::Pending,
        NotificationState::Processed,
        NotificationState::Failed,
    ];

    /// The spec's spelling, as stored.
    pub fn as_str(self) -> &'static str {
        match self {
            NotificationState::New => "new",
            NotificationState::Pending => "pending",
            NotificationState::Processed => "processed",
            NotificationState::Failed => "failed",
        }
    }

    /// The state spelt `s`, if any.
    pub fn parse(s: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|st| st.as_str() == s)
    }
}

/// A notification in the outbox (spec §2.6). Times are Unix milliseconds.
#[derive(Debug, Clone)]
pub struct Notification {
    pub id: NotificationId,
    pub webhook_id: WebhookId,
    pub event_id: Option<String>,
    pub notification_type: String,
    pub state: NotificationState,
    pub simulation: bool,
    pub retries: i64,
    /// The exact JSON text that is POSTed.
    /// The exact text POSTed; shared by an event's notifications and every attempt.
    pub payload: std::sync::Arc<str>,
    /// The §2.6 `hash` when it is not the payload's own ([`Notification::hash`]); only such a
    /// hash is stored (docs/decisions.md#performance-as-the-data-grows).
    pub hash: Option<String>,
    /// The idempotency key when it is not the one made of the webhook and the event
    /// ([`Notification::idempotency_key`]): block keys, token keys, random simulation keys.
    /// Only such a key is stored, and only such keys are unique per webhook (an event's id is
    /// unique already, and its notifications are written with it).
    pub idempotency_key: Option<String>,
    /// The §2.6 fields that are neither the webhook's level nor the payload (transfer,
    /// organization, accessToken); the level's are added from the webhook when shown.
    pub meta: Value,
    pub next_attempt_at_ms: i64,
    /// Until when a worker holds it (0: nobody). Written with the notification when it is
    /// handed straight to this process's engine (docs/decisions.md#performance).
    pub lease_until_ms: i64,
    pub created_at_ms: i64,
    pub updated_at_ms: i64,
}

impl Notification {
    /// The §2.6 `hash`: the one given, else the payload's `hash` or `blockId`, else the
    /// SHA-256 (hex) of the payload text.
    pub fn hash(&self) -> String {
        if let Some(h) = &self.hash {
            return h.clone();
        }
        let own = serde_json::from_str::<Value>(&self.payload).ok().and_then(|p| {
            p.get("hash").or_else(|| p.get("blockId")).and_then(Value::as_str).map(str::to_string)
        });
        own.unwrap_or_else(|| crate::digest::sha256_hex(self.payload.as_bytes()))
    }

    /// The `Idempotency-Key` sent with every attempt: the one given, else
    /// [`idempotency_key`] of the webhook and `event:{event id}`.
    pub fn idempotency_key(&self) -> String {
        match (&self.idempotency_key, &self.event_id) {
            (Some(k), _) => k.clone(),
            (None, Some(e)) => idempotency_key(&self.webhook_id, &format!("event:{e}")),
            (None, None) => idempotency_key(&self.webhook_id, self.id.as_str()),
        }
    }
}

/// A deterministic idempotency key for a webhook and a source (`event:{id}`, `block:{id}`, a
/// token id): SHA-256 (hex) of `{webhook id}:{source}`.
pub fn idempotency_key(webhook_id: &WebhookId, source: &str) -> String {
    crate::digest::sha256_hex(format!("{webhook_id}:{source}").as_bytes())
}

/// One delivery attempt. Times in Unix milliseconds.
#[derive(Debug, Clone)]
pub struct Attempt {
    pub notification_id: NotificationId,
    pub webhook_id: WebhookId,
    pub started_at_ms: i64,
    pub duration_ms: i64,
    pub status_code: Option<u16>,
    pub success: bool,
    /// The first 20 KB of the response body.
    pub response_body: Option<String>,
    pub error: Option<String>,
}
