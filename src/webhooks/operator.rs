//! The operator's views of a webhook: its notifications, their attempts, and a resend.
//!
//! Layer rule: no web-framework types and nothing of the HTTP layer (docs/architecture.md).

use super::access::webhook_access;
use crate::{
    error::{Error, Result},
    identity::auth::Principal,
    ids,
    paging::{Page, PageRequest},
    store::{Attempt, Notification, NotificationState, Webhook},
    AppState,
};

/// A webhook's notifications, optionally in one `state`, paged by id.
pub async fn notifications(
    state: &AppState,
    auth: &Principal,
    webhook_id: &str,
    notification_state: Option<&str>,
    page: &PageRequest,
) -> Result<(Webhook, Page<Notification>)> {
    let w = webhook_access(state, auth, webhook_id).await?;
    let notification_state = notification_state
        .map(|s| {
            NotificationState::parse(s)
                .ok_or_else(|| Error::invalid_field("state", "must be new, pending, processed or failed"))
        })
        .transpose()?;
    let rows = state
        .store
        .list_notifications(&w.id, notification_state, page.prev_id.as_deref(), page.fetch())
        .await?;
    Ok((w, page.page(rows, |n| &n.id)))
}

/// Every delivery attempt of a notification, oldest first.
pub async fn attempts(
    state: &AppState,
    auth: &Principal,
    webhook_id: &str,
    notification_id: &str,
) -> Result<Vec<Attempt>> {
    let w = webhook_access(state, auth, webhook_id).await?;
    let n = state
        .store
        .notification_by_id(&w.id, notification_id)
        .await?
        .ok_or_else(|| Error::not_found("NotificationNotFound"))?;
    Ok(state.store.attempts(&n.id).await?)
}

/// Queues a notification for delivery again, now, with its retries reset.
pub async fn resend(
    state: &AppState,
    auth: &Principal,
    webhook_id: &str,
    notification_id: &str,
) -> Result<(Notification, Webhook)> {
    let w = webhook_access(state, auth, webhook_id).await?;
    state.webhook_ops.check(&w.id)?;
    let n = state
        .store
        .resend_notification(&w.id, notification_id, ids::now_ms())
        .await?
        .ok_or_else(|| Error::not_found("NotificationNotFound"))?;
    state.wake.notify_one();
    Ok((n, w))
}
