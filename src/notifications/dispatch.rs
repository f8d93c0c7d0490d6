//! What the domain needs from delivery, as a port the domain owns (docs/decisions.md#architecture): fresh
//! notifications may be leased to this process's engine before they are written, handed over
//! once they are committed, and the engine woken for those left to a claim. `delivery::handoff`
//! implements it and `lib.rs` wires it in; nothing here knows how delivery schedules.
//!
//! Layer rule: no web-framework types and nothing of the HTTP layer (docs/architecture.md).

use crate::{
    model::{notification::Notification, webhook::Webhook},
    types::NotificationId,
};

/// The delivery side as ingestion, simulation and token creation see it.
pub trait Dispatch: Send + Sync {
    /// Leases the first of `notifications` (each to the webhook beside it in `hooks`) for
    /// immediate delivery by this process, marking them `pending` until the lease's end (Unix
    /// ms) exactly as a claim would. None are leased when no engine runs here or none is free.
    fn reserve(
        &self,
        notifications: &mut [Notification],
        hooks: &[&std::sync::Arc<Webhook>],
        now_ms: i64,
    ) -> Box<dyn Reserved>;

    /// Notifications were written for whichever worker claims them: wake it.
    fn wake(&self);
}

/// Notifications leased by [`Dispatch::reserve`], with the delivery slots they hold. Dropping
/// it before [`Reserved::hand_over`] frees the slots (the write failed).
pub trait Reserved: Send {
    /// How many notifications are leased.
    fn len(&self) -> usize;

    /// Whether none is.
    fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// After the commit: gives delivery the leased notifications that were written (all but
    /// those whose ids are in `skipped`). Returns the ids it could not take (it stopped
    /// meanwhile), to be given back to the outbox rather than wait for their lease to end.
    fn hand_over(self: Box<Self>, skipped: &[NotificationId]) -> Vec<NotificationId>;
}
