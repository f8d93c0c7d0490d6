//! Event fan-out: an event from an upstream system (`POST /api/v2/internal/events`, or
//! `custodian event emit`) becomes one notification per matching active webhook, written in
//! the same transaction as the event (the outbox); access token creation does the same for
//! accessToken webhooks.
//!
//! Layer rule: no web-framework types and nothing of the HTTP layer (docs/architecture.md).

use serde::Serialize;
use serde_json::Value;
use std::sync::Arc;
use utoipa::ToSchema;

use super::event::{Event, Route};
use crate::audit::EntryExt;
use crate::{
    error::Result,
    identity::{bearer::Principal, scopes::Action},
    model::{
        audit::AuditType,
        notification::Notification,
        webhook::{LevelKind, Webhook, WebhookFilter, WebhookState},
    },
    notifications::{self, dispatch::Reserved},
    store::{EventWrite, Recorded},
    types::{NotificationId, WebhookId},
    webhooks::Webhooks,
};

/// Fans an event out for a principal holding the service-admin permission. Idempotent on
/// `eventId`.
pub async fn ingest_as(svc: &Webhooks, auth: &Principal, body: Value) -> Result<EventResult> {
    auth.require(svc.policy, Action::ServiceAdmin)?;
    ingest(svc, body).await
}

pub use super::event::EventRequest;

/// What an event fanned out to.
#[derive(Debug, Default, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct EventResult {
    pub event_id: String,
    /// Notifications queued.
    pub notifications: u64,
    /// Webhooks notified.
    pub webhooks: Vec<WebhookId>,
}

/// The event's text as stored: kept only when it names a transfer (read back to answer
/// `GET .../transfer/{id}`, and as the payload of its notifications), without the `eventId`
/// its row holds already (docs/decisions.md#performance-as-the-data-grows).
fn stored_body(event: std::borrow::Cow<'_, serde_json::Map<String, Value>>, kept: bool) -> String {
    if !kept {
        return String::new();
    }
    let mut event = event.into_owned();
    event.remove("eventId");
    Value::Object(event).to_string()
}

/// Checks an upstream system's event ([`Event::posted`]) and records it with its
/// notifications in one transaction (the outbox). Errors name the field; an unknown `type`
/// is `InvalidWebhookType`.
pub async fn ingest(svc: &Webhooks, body: Value) -> Result<EventResult> {
    let event = Event::posted(body)?;
    Ok(fan_out(svc, &event, |_| true, true).await?.unwrap_or_default())
}

/// An event the service itself saw (the chain watcher), fanned out like [`ingest`]'s to the
/// routed webhooks that `keep` keeps, but not stored: the caller stores [`Prepared::event`] in
/// the transaction that stores what the event tells (`store::BlockWrite::events`), so that a
/// crash keeps both or neither, then calls [`Handoff::committed`]. `None` when no webhook is
/// routed to, since most blocks concern none.
pub async fn prepare_routed(
    svc: &Webhooks,
    event: &Event,
    keep: impl Fn(&Webhook) -> bool,
) -> Result<Option<Prepared>> {
    prepare(svc, event, keep, false).await
}

/// An event fanned out, to be stored by the caller: its row and notifications (`event`), and
/// what to do once they are committed (`handoff`).
pub struct Prepared {
    pub event: EventWrite,
    pub handoff: Handoff,
}

/// Notifications of a [`Prepared`] event leased to this process's engine, waiting for the
/// commit. Dropped without [`Handoff::committed`] (the write failed), the leases are freed.
pub struct Handoff {
    leased: Box<dyn Reserved>,
    unleased: bool,
}

impl Handoff {
    /// After the commit: hands the engine what the event wrote when it was stored now (a
    /// repeat of a stored event id wrote nothing: its leases are freed).
    pub async fn committed(self, svc: &Webhooks, recorded: &Recorded) {
        if let Recorded::Now { skipped } = recorded {
            hand_to_engine(svc, self.leased, skipped, self.unleased).await;
        }
    }
}

async fn fan_out(
    svc: &Webhooks,
    event: &Event,
    keep: impl Fn(&Webhook) -> bool,
    record_unrouted: bool,
) -> Result<Option<EventResult>> {
    let Some(Prepared { event, handoff }) = prepare(svc, event, keep, record_unrouted).await? else {
        return Ok(None);
    };
    let result = EventResult {
        event_id: event.event_id.clone(),
        notifications: event.notifications.len() as u64,
        webhooks: event.webhooks.clone(),
    };
    let recorded = svc.store.record_event(event).await?;
    handoff.committed(svc, &recorded).await;
    Ok(Some(match recorded {
        // Each webhook notified got one notification.
        Recorded::Before(webhooks) => {
            EventResult { event_id: result.event_id, notifications: webhooks.len() as u64, webhooks }
        }
        Recorded::Now { .. } => result,
    }))
}

/// Checks an event and builds its row and notifications (leasing the first to this process's
/// engine); `None` when no webhook is routed to and `record_unrouted` is false.
async fn prepare(
    svc: &Webhooks,
    event: &Event,
    keep: impl Fn(&Webhook) -> bool,
    record_unrouted: bool,
) -> Result<Option<Prepared>> {
    let (event_id, t) = (event.id(), event.kind());
    let filter = match event.route() {
        Route::Wallet(w) => {
            WebhookFilter { scope: LevelKind::Wallet, wallet_id: Some(w), ..Default::default() }
        }
        Route::Block(c) => WebhookFilter { scope: LevelKind::Block, coin: Some(c), ..Default::default() },
        Route::Enterprise(e) => {
            WebhookFilter { scope: LevelKind::Enterprise, enterprise_id: Some(e), ..Default::default() }
        }
    };
    // Suspended webhooks are routed to as well: their notifications are held until they are
    // unblocked, never dropped (docs/decisions.md#faults-and-floods).
    let filter = WebhookFilter { webhook_type: Some(t.into()), state: None, ..filter };
    let confirmations = i64::try_from(event.confirmations().unwrap_or(0)).unwrap_or(i64::MAX);
    let routed = svc.store.routing_webhooks(&filter).await?;
    let (mut hooks, suspended): (Vec<&Arc<Webhook>>, Vec<&Arc<Webhook>>) = routed
        .iter()
        .filter(|w| t != "block" || confirmations >= w.level.num_confirmations().unwrap_or(0))
        .filter(|w| keep(w))
        .partition(|w| w.state == WebhookState::Active);
    if !record_unrouted && hooks.is_empty() && suspended.is_empty() {
        return Ok(None);
    }
    let active = hooks.len();
    for w in suspended {
        if may_hold(svc, w, &event_id).await? {
            hooks.push(w);
        }
    }
    // Serialised once for every webhook and attempt.
    let map = event.body();
    let payload = notifications::EventPayload::of(&map);
    let mut notifications: Vec<Notification> =
        hooks.iter().map(|w| notifications::from_event(w, &event_id, &map, &payload)).collect();
    // Free slots of this process's engine take the first notifications straight from here,
    // written leased (docs/decisions.md#performance); only active webhooks' (they come first).
    let leased =
        svc.dispatch.reserve(&mut notifications[..active], &hooks[..active], svc.store.clock().now_ms());
    let unleased = notifications.len() > leased.len();
    let webhooks = hooks.iter().map(|w| w.id.clone()).collect();
    let kept = event.transfer_id().is_some();
    let transfer_id = event.transfer_id().map(str::to_string);
    let event = EventWrite {
        event_id,
        body: stored_body(map, kept),
        transfer_id,
        webhooks,
        notifications,
        payload: kept.then_some(payload),
    };
    Ok(Some(Prepared { event, handoff: Handoff { leased, unleased } }))
}

/// Whether suspended webhook `w` may hold one more notification: fewer than
/// `webhooks.max_held` undelivered (counted at most once a second: `limits::HeldCounts`).
/// Otherwise the notification is refused: counted, and recorded in the audit log once per
/// webhook and minute per process.
async fn may_hold(svc: &Webhooks, w: &Webhook, event_id: &str) -> Result<bool> {
    let held = match svc.held.get(&w.id) {
        Some(n) => n,
        None => {
            let n = svc.store.undelivered_count(&w.id).await?;
            svc.held.set(&w.id, n);
            n
        }
    };
    if held < svc.config.webhooks.max_held {
        svc.held.add_one(&w.id);
        return Ok(true);
    }
    svc.metrics.refused.inc();
    if svc.refusal_notes.first_in_minute(&w.id, svc.store.clock().now()) {
        let entry = crate::audit::entry(AuditType::NotificationsRefused)
            .enterprise(w.level.enterprise_id())
            .wallet(w.level.wallet_id())
            .data(serde_json::json!({ "id": w.id, "eventId": event_id, "held": held }));
        crate::audit::record(&svc.store, &[entry]).await;
    }
    Ok(false)
}

/// After the commit: gives the engine the leased notifications the outbox wrote (not those it
/// `skipped`), and wakes it for the others (`unleased`).
async fn hand_to_engine(
    svc: &Webhooks,
    leased: Box<dyn Reserved>,
    skipped: &[NotificationId],
    unleased: bool,
) {
    let refused = leased.hand_over(skipped);
    if !refused.is_empty() {
        // The engine stopped meanwhile: due again now, for whichever worker claims them. The
        // event is stored either way; if this fails, their leases end.
        if let Err(e) = svc.store.defer(&refused, svc.store.clock().now_ms()).await {
            tracing::warn!(error = %e, "giving back notifications the engine did not take failed");
        }
    }
    if unleased || !refused.is_empty() {
        svc.dispatch.wake();
    }
}
