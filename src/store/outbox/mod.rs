//! The outbox aggregate: notifications waiting for delivery (spec §2.6), their leases, and the
//! record of every delivery attempt. Writers add notifications in the transaction that causes
//! them. This file holds the records and the trait; `queries.rs` implements it, with the
//! writing of outcomes in `completion.rs`.

use crate::model::notification::{Attempt, Notification, NotificationState};
use async_trait::async_trait;
use std::sync::Arc;

use crate::model::webhook::Webhook;

use super::StoreResult;
use crate::types::AnyId;
use crate::types::{EnterpriseId, NotificationId, UserId, WebhookId};

pub(super) mod completion;
pub(super) mod queries;
pub(super) mod rows;
mod search;

pub use search::{
    HourCount, LastAttempts, NotificationSearch, QueueCounts, RecentFailure, SearchStore, Tenancy,
    WebhookSearch,
};

/// What follows an attempt.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Completion {
    Delivered,
    /// Failed; try again at this Unix millisecond.
    Retry(i64),
    /// Failed for the last time.
    Failed,
}

/// An attempt and what follows it, written together.
#[derive(Debug, Clone)]
pub struct Outcome {
    pub attempt: Attempt,
    pub completion: Completion,
}

/// A webhook's failed attempts as the suspension rule reads them, in the transaction that
/// records more.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FailureFacts {
    /// Failed attempts in the rule's window, counted from the webhook's last unblock at the
    /// earliest.
    pub in_window: i64,
    /// Failed attempts since the last unblock.
    pub total: i64,
}

/// Decides when failures suspend a webhook. A port: the rule is the delivery domain's
/// (`delivery::suspension`); the store only gathers the facts and applies the verdict in the
/// same transaction.
pub trait SuspendPolicy: Send + Sync {
    /// How far back failures count, milliseconds.
    fn window_ms(&self) -> i64;
    /// Whether a webhook with these failures is suspended.
    fn suspends(&self, facts: FailureFacts) -> bool;
}

/// A claimed notification and its webhook.
#[derive(Debug, Clone)]
pub struct Claimed {
    pub notification: Notification,
    /// Shared by the batch's notifications of one webhook: releasing a slot or handing a
    /// notification on copies no record.
    pub webhook: std::sync::Arc<Webhook>,
}

/// Gauges for /metrics.
#[derive(Debug, Clone, Copy, Default)]
pub struct DeliveryStats {
    /// Due and not leased, of active webhooks.
    pub due: i64,
    pub in_flight: i64,
    pub suspended_webhooks: i64,
    /// Waiting for their suspended webhook to be unblocked.
    pub held: i64,
}

/// Who is at their share of delivery slots in this process: the claim leaves their
/// notifications for later (docs/decisions.md#webhook-abuse-and-the-api-rate-limit).
#[derive(Debug, Clone, Default)]
pub struct Saturated {
    pub webhooks: Vec<WebhookId>,
    /// Tenants that are enterprises: every webhook bound to one.
    pub enterprises: Vec<EnterpriseId>,
    /// Tenants that are users: their webhooks bound to no enterprise.
    pub users: Vec<UserId>,
}

impl Saturated {
    /// Whether everyone this skips, `other` skips too: a claim skipping `other` can find
    /// nothing that one skipping `self` could not.
    pub fn within(&self, other: &Saturated) -> bool {
        self.webhooks.iter().all(|w| other.webhooks.contains(w))
            && self.enterprises.iter().all(|e| other.enterprises.contains(e))
            && self.users.iter().all(|u| other.users.contains(u))
    }
}

/// What writing a batch of outcomes changed beyond the notifications themselves.
#[derive(Debug, Default)]
pub struct Completed {
    /// Webhooks suspended by this batch's failures.
    pub suspended: Vec<WebhookId>,
    /// Webhooks that answered 2xx after failures: their notifications waiting for a retry
    /// are to be made due now ([`OutboxStore::release_retries`]).
    pub recovered: Vec<WebhookId>,
}

/// The outbox and its attempts.
#[async_trait]
pub trait OutboxStore: Send + Sync {
    /// Adds notifications to the outbox; one whose (webhook, idempotency key) exists is skipped.
    async fn insert_notifications(&self, n: &[Notification]) -> StoreResult<u64>;
    /// Leases up to `limit` due notifications of active webhooks until `lease_until_ms`, none
    /// of a webhook or tenant in `skip` (those at their share of delivery slots).
    async fn claim_due(
        &self,
        now_ms: i64,
        lease_until_ms: i64,
        limit: u32,
        skip: &Saturated,
    ) -> StoreResult<Vec<Claimed>>;
    /// Gives back claimed notifications unattempted, due again at `at_ms` (no attempt counted).
    async fn defer(&self, ids: &[NotificationId], at_ms: i64) -> StoreResult<()>;
    /// Writes attempts and their consequences in one transaction; returns the webhooks
    /// suspended and those that answer again after failures. Shared (`Arc`) because on SQLite
    /// the group-commit writer records them, in the transaction of the events it writes next.
    async fn complete(
        &self,
        outcomes: Arc<[Outcome]>,
        now_ms: i64,
        rule: Arc<dyn SuspendPolicy>,
    ) -> StoreResult<Completed>;
    /// Makes up to `limit` of `webhook`'s notifications waiting for a retry due at `now_ms`,
    /// soonest scheduled first; returns how many. A receiver that answers again gets its
    /// waiting retries at once, not at their scheduled times (docs/decisions.md#performance-as-the-data-grows); in batches, so a
    /// backlog of tens of thousands never holds the outbox's writes for long.
    async fn release_retries(&self, webhook: &WebhookId, now_ms: i64, limit: u32) -> StoreResult<u64>;
    async fn notification_by_id(
        &self,
        webhook_id: &WebhookId,
        id: &NotificationId,
    ) -> StoreResult<Option<Notification>>;
    /// A webhook's notifications (in `state` when given) with ids after `after_id`, by id.
    async fn list_notifications(
        &self,
        webhook_id: &WebhookId,
        state: Option<NotificationState>,
        after_id: Option<&AnyId>,
        limit: u32,
    ) -> StoreResult<Vec<Notification>>;
    /// A notification's attempts, oldest first.
    async fn attempts(&self, notification_id: &NotificationId) -> StoreResult<Vec<Attempt>>;
    /// Queues a notification again now, with retries reset; None when it does not exist.
    async fn resend_notification(
        &self,
        webhook_id: &WebhookId,
        id: &NotificationId,
        now_ms: i64,
    ) -> StoreResult<Option<Notification>>;
    async fn delivery_stats(&self, now_ms: i64) -> StoreResult<DeliveryStats>;
    /// Notifications of `webhook_id` not yet delivered or failed (held, while it is suspended).
    async fn undelivered_count(&self, webhook_id: &WebhookId) -> StoreResult<u64>;
    /// Deletes up to `limit` delivery attempts that started before `before_ms`; returns how many.
    async fn prune_attempts(&self, before_ms: i64, limit: u32) -> StoreResult<u64>;
    /// Deletes up to `limit` processed or failed notifications last changed before `before_ms`
    /// (their attempts with them); returns how many.
    async fn prune_notifications(&self, before_ms: i64, limit: u32) -> StoreResult<u64>;
    /// Clears dead row versions from the notifications table where the backend needs it
    /// (PostgreSQL's VACUUM); returns whether there was anything to run.
    async fn vacuum_outbox(&self) -> StoreResult<bool>;
}
