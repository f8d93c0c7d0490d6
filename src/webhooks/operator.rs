//! The operator's views of a webhook: its notifications, their attempts, and a resend.
//!
//! Layer rule: no web-framework types and nothing of the HTTP layer (docs/architecture.md).

use super::access::webhook_access;
use crate::error::ErrorName;
use crate::{
    error::{Error, Result},
    identity::auth::Principal,
    ids,
    paging::{Page, PageRequest},
    store::{Attempt, Notification, NotificationState, Webhook, WebhookState},
    types::{NotificationId, WebhookId},
    webhooks::Webhooks,
};

/// A webhook's notifications, optionally in one `state`, paged by id; with, for a suspended
/// webhook, how many it holds until it is unblocked (issue 21 §3).
pub async fn notifications(
    svc: &Webhooks,
    auth: &Principal,
    webhook_id: &WebhookId,
    notification_state: Option<&str>,
    page: &PageRequest,
) -> Result<(Webhook, Page<Notification>, Option<u64>)> {
    let w = webhook_access(svc, auth, webhook_id).await?;
    let notification_state = notification_state
        .map(|s| {
            NotificationState::parse(s)
                .ok_or_else(|| Error::invalid_field("state", "must be new, pending, processed or failed"))
        })
        .transpose()?;
    let rows =
        svc.store.list_notifications(&w.id, notification_state, page.prev_id.as_ref(), page.fetch()).await?;
    let held = match w.state {
        WebhookState::Suspended => Some(svc.store.undelivered_count(&w.id).await?),
        WebhookState::Active => None,
    };
    Ok((w, page.page(rows, |n| &n.id), held))
}

/// Every delivery attempt of a notification, oldest first.
pub async fn attempts(
    svc: &Webhooks,
    auth: &Principal,
    webhook_id: &WebhookId,
    notification_id: &NotificationId,
) -> Result<Vec<Attempt>> {
    let w = webhook_access(svc, auth, webhook_id).await?;
    let n = svc
        .store
        .notification_by_id(&w.id, notification_id)
        .await?
        .ok_or_else(|| Error::not_found(ErrorName::NotificationNotFound))?;
    Ok(svc.store.attempts(&n.id).await?)
}

/// Queues a notification for delivery again, now, with its retries reset.
pub async fn resend(
    svc: &Webhooks,
    auth: &Principal,
    webhook_id: &WebhookId,
    notification_id: &NotificationId,
) -> Result<(Notification, Webhook)> {
    let w = webhook_access(svc, auth, webhook_id).await?;
    svc.operations.check(&w.id)?;
    let n = svc
        .store
        .resend_notification(&w.id, notification_id, ids::now_ms())
        .await?
        .ok_or_else(|| Error::not_found(ErrorName::NotificationNotFound))?;
    svc.dispatch.wake();
    Ok((n, w))
}
