//! Event fan-out: an event from an upstream system (`POST /api/v2/internal/events`, or
//! `custodian event emit`) becomes one notification per matching active webhook, written in
//! the same transaction as the event (the outbox); access token creation does the same for
//! accessToken webhooks.
//!
//! Layer rule: no web-framework types and nothing of the HTTP layer (docs/architecture.md).

use serde::{Deserialize, Serialize};
use serde_json::Value;
use utoipa::ToSchema;

use super::{invalid_type, BLOCK_TYPES, ENTERPRISE_TYPES, WALLET_TYPES};
use crate::{
    delivery::handoff::Leases,
    error::{parse_value, Error, Result},
    identity::{auth::Principal, scopes::Action},
    ids, outbox,
    store::{group_commit::EventWrite, Claimed, Notification, Recorded, WebhookFilter, WebhookState},
    AppState,
};

fn check_id(field: &str, id: &str) -> Result<()> {
    if ids::is_id(id) {
        Ok(())
    } else {
        Err(Error::invalid_field(field, "must be a 32-hex id"))
    }
}

fn check_coin(coin: &str) -> Result<()> {
    if ids::is_coin(coin) {
        Ok(())
    } else {
        Err(Error::invalid_field("coin", "must be a lower-case coin symbol"))
    }
}

/// Fans an event out for a principal holding the service-admin permission. Idempotent on
/// `eventId`.
pub async fn ingest_as(state: &AppState, auth: &Principal, body: Value) -> Result<EventResult> {
    auth.require(state.policy(), Action::ServiceAdmin)?;
    ingest(state, body).await
}

/// An event from an upstream system. Extra fields are kept and delivered in the payload.
#[derive(Debug, Deserialize, ToSchema, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct EventRequest {
    /// Unique per event; a repeat returns the first result and sends nothing.
    #[schema(min_length = 1, max_length = 200)]
    pub event_id: String,
    /// A webhook type of §6.
    #[serde(rename = "type")]
    pub event_type: String,
    pub coin: Option<String>,
    pub wallet_id: Option<String>,
    pub enterprise_id: Option<String>,
    pub transfer_id: Option<String>,
    pub hash: Option<String>,
    pub block_id: Option<String>,
    #[serde(default, deserialize_with = "crate::types::de_whole_number_opt")]
    pub confirmations: Option<u64>,
    pub state: Option<String>,
}

/// What an event fanned out to.
#[derive(Debug, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct EventResult {
    pub event_id: String,
    /// Notifications queued.
    pub notifications: u64,
    /// Webhooks notified.
    pub webhooks: Vec<String>,
}

/// Checks an event and records it with its notifications in one transaction (the outbox).
/// Errors name the field; an unknown `type` is `InvalidWebhookType`.
pub async fn ingest(state: &AppState, body: Value) -> Result<EventResult> {
    let ev: EventRequest = parse_value(&body)?;
    let Value::Object(map) = body else {
        return Err(Error::invalid_field("", "an event must be a JSON object"));
    };
    if ev.event_id.is_empty() || ev.event_id.len() > 200 {
        return Err(Error::invalid_field("eventId", "must be 1 to 200 characters"));
    }
    let t = ev.event_type.as_str();
    let filter = if WALLET_TYPES.contains(&t) {
        let wallet = ev.wallet_id.clone().ok_or_else(|| Error::missing_field("walletId"))?;
        check_id("walletId", &wallet)?;
        WebhookFilter { scope: "wallet".into(), wallet_id: Some(wallet), ..Default::default() }
    } else if BLOCK_TYPES.contains(&t) {
        let coin = ev.coin.clone().ok_or_else(|| Error::missing_field("coin"))?;
        check_coin(&coin)?;
        WebhookFilter { scope: "block".into(), coin: Some(coin), ..Default::default() }
    } else if ENTERPRISE_TYPES.contains(&t) {
        let e = ev.enterprise_id.clone().ok_or_else(|| Error::missing_field("enterpriseId"))?;
        check_id("enterpriseId", &e)?;
        WebhookFilter { scope: "enterprise".into(), enterprise_id: Some(e), ..Default::default() }
    } else {
        let all: Vec<&str> =
            WALLET_TYPES.iter().chain(BLOCK_TYPES).chain(ENTERPRISE_TYPES).copied().collect();
        return Err(invalid_type("known", &all));
    };
    super::event_fields::check(t, &map)?;
    let filter = WebhookFilter { webhook_type: Some(t.into()), state: Some(WebhookState::Active), ..filter };
    let confirmations = i64::try_from(ev.confirmations.unwrap_or(0)).unwrap_or(i64::MAX);
    let routed = state.store.routing_webhooks(&filter).await?;
    let hooks: Vec<&crate::store::Webhook> = routed
        .iter()
        .filter(|w| t != "block" || confirmations >= w.level.num_confirmations().unwrap_or(0))
        .collect();
    let mut notifications: Vec<Notification> =
        hooks.iter().map(|w| outbox::from_event(w, &ev.event_id, &map)).collect();
    // Free slots of this process's engine take the first notifications straight from here,
    // written leased (issue 12 §5).
    let (leases, handed) = state.handoff.lease(&mut notifications, &hooks, ids::now_ms());
    let unleased = notifications.len() > handed.len();
    let result = EventResult {
        event_id: ev.event_id.clone(),
        notifications: notifications.len() as u64,
        webhooks: hooks.iter().map(|w| w.id.clone()).collect(),
    };
    let result_text = serde_json::to_string(&result).map_err(|e| Error::Internal(e.into()))?;
    let event = EventWrite {
        event_id: ev.event_id,
        body: Value::Object(map).to_string(),
        transfer_id: ev.transfer_id,
        result: result_text,
        notifications,
    };
    match state.store.record_event(event).await? {
        Recorded::Before(previous) => serde_json::from_str(&previous).map_err(|e| Error::Internal(e.into())),
        Recorded::Now { skipped } => {
            hand_to_engine(state, leases, handed, &skipped, unleased).await;
            Ok(result)
        }
    }
}

/// After the commit: gives the engine the leased notifications the outbox wrote (not those it
/// `skipped`), and wakes it for the others (`unleased`).
async fn hand_to_engine(
    state: &AppState,
    leases: Leases,
    handed: Vec<Claimed>,
    skipped: &[String],
    unleased: bool,
) {
    let handed: Vec<Claimed> = handed.into_iter().filter(|c| !skipped.contains(&c.notification.id)).collect();
    let refused: Vec<String> =
        state.handoff.hand_over(leases, handed).into_iter().map(|c| c.notification.id).collect();
    if !refused.is_empty() {
        // The engine stopped meanwhile: due again now, for whichever worker claims them. The
        // event is stored either way; if this fails, their leases end.
        if let Err(e) = state.store.defer(&refused, ids::now_ms()).await {
            tracing::warn!(error = %e, "giving back notifications the engine did not take failed");
        }
    }
    if unleased || !refused.is_empty() {
        state.wake.notify_one();
    }
}
