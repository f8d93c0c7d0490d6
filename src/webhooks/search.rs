//! What the operator console reads and does across webhooks (docs/decisions.md#the-operator-console): the overview's counts,
//! the webhook list of all three levels, the notification log, and the recovery of a webhook's
//! failed notifications (also `POST /api/v2/webhook/{id}/recover`). Every read is limited to the
//! caller's [`Tenancy`]: a service admin sees every webhook (within the token's
//! `permittedEnterprises`), anyone else the webhooks of the enterprises they administer and
//! may manage with this token, and their own block webhooks. A single webhook is still opened
//! through [`super::access::webhook_access`], the API's own rule.
//!
//! Layer rule: no web-framework types and nothing of the HTTP layer (docs/architecture.md).

use serde_json::json;

use crate::audit::EntryExt;

use super::{
    access::webhook_access,
    registration::{Level, Removal},
    Webhooks,
};
use crate::{
    error::{Error, Result},
    identity::{bearer::Principal, scopes::Action},
    model::{
        audit::AuditType,
        notification::Notification,
        webhook::{Webhook, WebhookLevel, WebhookState},
    },
    paging::{Page, PageRequest},
    store::{
        HourCount, LastAttempts, NotificationSearch, QueueCounts, RecentFailure, Tenancy, WebhookSearch,
    },
    types::WebhookId,
};

/// Longest time range of a notification search, days: the walk it bounds stays short.
pub const MAX_SEARCH_DAYS: i64 = 31;
/// Furthest back a recover reaches, days (Svix's limit for its "recover since").
pub const MAX_RECOVER_DAYS: i64 = 14;
/// Attempts whose durations give the overview's p50 and p95: the latest ones of the day.
pub const LATENCY_SAMPLE: u32 = 10_000;
/// Failures the overview lists.
pub const RECENT_FAILURES: u32 = 10;
/// Suspended webhooks the overview lists.
pub const SUSPENDED_LISTED: u32 = 20;

const DAY_MS: i64 = 86_400_000;
const HOUR_MS: i64 = 3_600_000;

/// The caller's tenancy. A service-admin token sees everything, or only its
/// `permittedEnterprises` when it has them; otherwise the enterprises the user administers
/// that the token may manage, and the user's own block webhooks.
pub async fn tenancy(svc: &Webhooks, auth: &Principal) -> Result<Tenancy> {
    if auth.token.admin {
        return Ok(match &auth.token.permitted_enterprises {
            None => Tenancy::All,
            Some(list) => Tenancy::Of { user_id: auth.user.id.clone(), enterprises: list.clone() },
        });
    }
    let enterprises = svc
        .store
        .memberships(&auth.user.id)
        .await?
        .into_iter()
        .filter(|m| m.is_admin)
        .map(|m| m.enterprise.id)
        .filter(|id| auth.require(svc.policy, Action::ManageEnterprise { enterprise_id: id }).is_ok())
        .collect();
    Ok(Tenancy::Of { user_id: auth.user.id.clone(), enterprises })
}

/// The console's first page: the last 24 hours of attempts by hour, the success rate and
/// attempt latency, the queue, suspended webhooks and the latest failures.
#[derive(Debug, Clone)]
pub struct Overview {
    /// 24 entries, oldest first, the current hour last; hours without attempts are zero.
    pub hours: Vec<HourCount>,
    pub delivered: i64,
    pub failed: i64,
    /// Attempt duration percentiles, milliseconds, over `latency_sample` attempts (the latest
    /// of the day, at most [`LATENCY_SAMPLE`]); `None` without attempts.
    pub p50_ms: Option<i64>,
    pub p95_ms: Option<i64>,
    pub latency_sample: usize,
    pub queue: QueueCounts,
    /// At most [`SUSPENDED_LISTED`].
    pub suspended: Vec<Webhook>,
    /// At most [`RECENT_FAILURES`], newest first.
    pub failures: Vec<RecentFailure>,
}

impl Overview {
    /// Delivered ÷ all attempts, 0..=1; `None` without attempts.
    pub fn success_rate(&self) -> Option<f64> {
        let all = self.delivered + self.failed;
        (all > 0).then(|| self.delivered as f64 / all as f64)
    }
}

/// The `q`-quantile (0..=1) of sorted `values`, nearest rank.
fn quantile(sorted: &[i64], q: f64) -> Option<i64> {
    let last = sorted.len().checked_sub(1)?;
    let rank = ((sorted.len() as f64 * q).ceil() as usize).saturating_sub(1).min(last);
    sorted.get(rank).copied()
}

/// The overview at `now_ms` for the caller's tenancy.
pub async fn overview(svc: &Webhooks, auth: &Principal, now_ms: i64) -> Result<Overview> {
    let tenancy = tenancy(svc, auth).await?;
    let first_hour = now_ms / HOUR_MS - 23;
    let since = first_hour * HOUR_MS;
    let counted = svc.store.attempts_by_hour(&tenancy, since).await?;
    let hours: Vec<HourCount> = (first_hour..=first_hour + 23)
        .map(|hour| {
            counted.iter().find(|c| c.hour == hour).copied().unwrap_or(HourCount {
                hour,
                delivered: 0,
                failed: 0,
            })
        })
        .collect();
    let mut durations = svc.store.attempt_durations(&tenancy, since, LATENCY_SAMPLE).await?;
    durations.sort_unstable();
    let search = WebhookSearch { state: Some(WebhookState::Suspended), ..Default::default() };
    Ok(Overview {
        delivered: hours.iter().map(|h| h.delivered).sum(),
        failed: hours.iter().map(|h| h.failed).sum(),
        hours,
        p50_ms: quantile(&durations, 0.5),
        p95_ms: quantile(&durations, 0.95),
        latency_sample: durations.len(),
        queue: svc.store.queue_counts(&tenancy, now_ms).await?,
        suspended: svc.store.search_webhooks(&tenancy, &search, None, SUSPENDED_LISTED).await?,
        failures: svc.store.recent_failures(&tenancy, now_ms - DAY_MS, RECENT_FAILURES).await?,
    })
}

/// Webhooks of all three levels in the caller's tenancy matching `search`, paged by id, each
/// with when it was last delivered to and last failed.
pub async fn search_webhooks(
    svc: &Webhooks,
    auth: &Principal,
    search: &WebhookSearch,
    page: &PageRequest,
) -> Result<Page<(Webhook, LastAttempts)>> {
    let tenancy = tenancy(svc, auth).await?;
    let rows = svc.store.search_webhooks(&tenancy, search, page.prev_id.as_ref(), page.fetch()).await?;
    let ids: Vec<WebhookId> = rows.iter().map(|w| w.id.clone()).collect();
    let last = svc.store.last_attempts(&ids).await?;
    let rows = rows.into_iter().zip(last).collect();
    Ok(page.page(rows, |(w, _)| &w.id))
}

/// Notifications in the caller's tenancy matching `search`, newest first; `page.prev_id` is
/// the last (oldest) id of the previous page. Errors: `InvalidField` naming `from` or `to` when
/// the range is empty or longer than [`MAX_SEARCH_DAYS`].
pub async fn search_notifications(
    svc: &Webhooks,
    auth: &Principal,
    search: &NotificationSearch,
    page: &PageRequest,
) -> Result<Page<Notification>> {
    if search.to_ms <= search.from_ms {
        return Err(Error::invalid_field("to", "must be after from"));
    }
    if search.to_ms - search.from_ms > MAX_SEARCH_DAYS * DAY_MS {
        return Err(Error::invalid_field(
            "from",
            format!("the range may span at most {MAX_SEARCH_DAYS} days"),
        ));
    }
    let tenancy = tenancy(svc, auth).await?;
    let rows = svc.store.search_notifications(&tenancy, search, page.prev_id.as_ref(), page.fetch()).await?;
    Ok(page.page(rows, |n| &n.id))
}

/// Checks a recover's start: not in the future, at most [`MAX_RECOVER_DAYS`] back.
fn check_since(since_ms: i64, now_ms: i64) -> Result<()> {
    if since_ms > now_ms {
        return Err(Error::invalid_field("since", "must not be in the future"));
    }
    if now_ms - since_ms > MAX_RECOVER_DAYS * DAY_MS {
        return Err(Error::invalid_field("since", format!("at most {MAX_RECOVER_DAYS} days ago")));
    }
    Ok(())
}

/// How many failed notifications a recover of `webhook_id` since `since_ms` (Unix ms) would
/// queue again, counting at most `webhooks.recover_max`: what the console's confirmation
/// states. Errors: as [`recover`], without the rate limit.
pub async fn recover_count(
    svc: &Webhooks,
    auth: &Principal,
    webhook_id: &WebhookId,
    since_ms: i64,
) -> Result<u64> {
    check_since(since_ms, svc.store.clock().now_ms())?;
    let w = webhook_access(svc, auth, webhook_id).await?;
    Ok(svc.store.failed_since(&w.id, since_ms, svc.config.webhooks.recover_max).await?)
}

/// Queues again every notification of `webhook_id` created since `since_ms` (Unix ms) that
/// failed for good, oldest first, at most `webhooks.recover_max` per call, with retries reset,
/// and records `webhook.recovered` with the count. Returns the webhook and how many. Errors:
/// `InvalidField` naming `since` (in the future, or more than [`MAX_RECOVER_DAYS`] back),
/// `WebhookNotFound`, `Forbidden`, `RateLimited` (`webhooks.operations_per_minute`).
pub async fn recover(
    svc: &Webhooks,
    auth: &Principal,
    webhook_id: &WebhookId,
    since_ms: i64,
) -> Result<(Webhook, u64)> {
    let now = svc.store.clock().now_ms();
    check_since(since_ms, now)?;
    let w = webhook_access(svc, auth, webhook_id).await?;
    svc.operations.check(&w.id).await?;
    let entry = auth
        .audit(AuditType::WebhookRecovered)
        .enterprise(w.level.enterprise_id())
        .data(json!({ "id": w.id, "since": crate::clock::iso_ms(since_ms) }));
    let n = svc.store.recover_failed(&w.id, since_ms, svc.config.webhooks.recover_max, now, entry).await?;
    if n > 0 {
        svc.dispatch.wake();
    }
    Ok((w, n))
}

/// One notification of a webhook the caller may manage, with its attempts, oldest first.
/// Errors: `WebhookNotFound`, `NotificationNotFound`, `Forbidden`.
pub async fn notification_detail(
    svc: &Webhooks,
    auth: &Principal,
    webhook_id: &WebhookId,
    notification_id: &crate::types::NotificationId,
) -> Result<(Webhook, Notification, Vec<crate::model::notification::Attempt>)> {
    let w = webhook_access(svc, auth, webhook_id).await?;
    let n = svc
        .store
        .notification_by_id(&w.id, notification_id)
        .await?
        .ok_or_else(|| Error::not_found(crate::error::ErrorName::NotificationNotFound))?;
    let attempts = svc.store.attempts(&n.id).await?;
    Ok((w, n, attempts))
}

/// Sends a test notification to any webhook the caller may manage, whatever its level (the
/// console's "Send test"): the level's simulate with no ids given. Errors: as the simulates.
pub async fn send_test(
    svc: &Webhooks,
    auth: &Principal,
    webhook_id: &WebhookId,
) -> Result<(Notification, Webhook)> {
    let w = webhook_access(svc, auth, webhook_id).await?;
    match &w.level {
        WebhookLevel::Wallet { coin, wallet_id, .. } => {
            super::simulate::wallet(svc, auth, (coin, wallet_id, &w.id), None, None).await
        }
        WebhookLevel::Block { coin, .. } => super::simulate::block(svc, auth, coin, &w.id, None).await,
        WebhookLevel::Enterprise { enterprise_id } => {
            super::simulate::enterprise(svc, auth, enterprise_id, &w.id, None).await
        }
    }
}

/// Removes any webhook the caller may manage, whatever its level. Errors: `WebhookNotFound`,
/// `Forbidden`.
pub async fn remove(svc: &Webhooks, auth: &Principal, webhook_id: &WebhookId) -> Result<Webhook> {
    let w = webhook_access(svc, auth, webhook_id).await?;
    let level = match &w.level {
        WebhookLevel::Wallet { coin, wallet_id, .. } => Level::Wallet { coin, wallet_id },
        WebhookLevel::Block { coin, .. } => Level::Block { coin },
        WebhookLevel::Enterprise { enterprise_id } => Level::Enterprise { enterprise_id },
    };
    match super::registration::remove(svc, auth, level, Removal::Id(w.id.clone())).await? {
        0 => Err(Error::not_found(crate::error::ErrorName::WebhookNotFound)),
        _ => Ok(w),
    }
}

#[cfg(test)]
mod tests {
    use super::quantile;

    #[test]
    fn quantiles_take_the_nearest_rank() {
        let v: Vec<i64> = (1..=100).collect();
        assert_eq!(quantile(&v, 0.5), Some(50));
        assert_eq!(quantile(&v, 0.95), Some(95));
        assert_eq!(quantile(&[7], 0.95), Some(7));
        assert_eq!(quantile(&[], 0.5), None);
    }
}
