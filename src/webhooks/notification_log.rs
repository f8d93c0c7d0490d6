//! The operator's views of a webhook: its notifications, their attempts, and a resend.
//!
//! Layer rule: no web-framework types and nothing of the HTTP layer (docs/architecture.md).

use super::access::webhook_access;
use crate::error::ErrorName;
use crate::{
    error::{Error, Result},
    identity::bearer::Principal,
    model::{
        notification::{Attempt, Notification, NotificationState},
        webhook::{Webhook, WebhookState},
    },
    paging::{Page, PageRequest},
    types::{NotificationId, WebhookId},
    webhooks::Webhooks,
};

/// A webhook's notifications, optionally in one `state`, paged by id; with, for a suspended
/// webhook, how many it holds until it is unblocked (docs/decisions.md#faults-and-floods).
pub async fn notifications(
    svc: &Webhooks,
    auth: &Principal,
    webhook_id: &WebhookId,
    notification_state: Option<&str>,
    page: &PageRequest,
) -> Result<(Webhook, Page<Notification>, Option<u64>)> {
    let w = webhook_access(svc, auth, webhook_id).await?;
    let notification_state = parse_state(notification_state)?;
    let rows =
        svc.store.list_notifications(&w.id, notification_state, page.prev_id.as_ref(), page.fetch()).await?;
    let held = match w.state {
        WebhookState::Suspended => Some(svc.store.undelivered_count(&w.id).await?),
        WebhookState::Active => None,
    };
    Ok((w, page.page(rows, |n| &n.id), held))
}

fn parse_state(state: Option<&str>) -> Result<Option<NotificationState>> {
    state
        .map(|s| {
            NotificationState::parse(s)
                .ok_or_else(|| Error::invalid_field("state", "must be new, pending, processed or failed"))
        })
        .transpose()
}

/// The notifications of the caller's block webhooks of `coin`, optionally in one state, merged
/// by id and paged like any
/// list: BitGo's `GET /api/v2/{coin}/webhooks/notifications` (docs/decisions.md#signed-requests). The caller has at
/// most `webhooks.max_per_user` such webhooks, so the merge is bounded.
pub async fn coin_notifications(
    svc: &Webhooks,
    auth: &Principal,
    coin: &crate::types::Coin,
    notification_state: Option<&str>,
    page: &PageRequest,
) -> Result<Page<(Webhook, Notification)>> {
    let notification_state = parse_state(notification_state)?;
    let all = PageRequest::new(Some(crate::paging::MAX_LIMIT), None)?;
    let hooks =
        super::registration::list(svc, auth, super::registration::Level::Block { coin }, &all).await?;
    let mut rows = Vec::new();
    for w in hooks.items {
        let mine = svc
            .store
            .list_notifications(&w.id, notification_state, page.prev_id.as_ref(), page.fetch())
            .await?;
        rows.extend(mine.into_iter().map(|n| (w.clone(), n)));
    }
    rows.sort_by(|a, b| a.1.id.cmp(&b.1.id));
    rows.truncate(page.fetch() as usize);
    Ok(page.page(rows, |(_, n)| &n.id))
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
    svc.operations.check(&w.id).await?;
    let n = svc
        .store
        .resend_notification(&w.id, notification_id, svc.store.clock().now_ms())
        .await?
        .ok_or_else(|| Error::not_found(ErrorName::NotificationNotFound))?;
    svc.dispatch.wake();
    Ok((n, w))
}
