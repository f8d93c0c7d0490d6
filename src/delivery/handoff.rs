//! Handing fresh notifications straight to this process's engine (docs/decisions.md#performance).
//!
//! Ingestion takes free delivery slots of the engine *before* it writes an event, writes the
//! event's notifications already leased (state `pending`, `lease_until` set, exactly what a
//! claim would have written), and after the commit gives them to the engine in memory. The
//! engine then delivers them without claiming them from the outbox: one query and one rewrite
//! of each row fewer, and no wait for the engine's next poll.
//!
//! Nothing is lost on a crash: a handed notification is in the outbox, leased, and comes back
//! when its lease ends like any claimed one. Without an engine in this process (role `api`),
//! or with no slot free, nothing is reserved and notifications are written unleased, for a
//! claim as before.

use std::sync::{Arc, Mutex};

use tokio::sync::{mpsc, Notify, OwnedSemaphorePermit, Semaphore};

use crate::{
    model::{
        notification::{Notification, NotificationState},
        webhook::Webhook,
    },
    notifications::dispatch::{Dispatch, Reserved},
    store::Claimed,
    types::{NotificationId, WebhookId},
};

/// A notification given to the engine with the delivery slot it was written under.
pub(super) type Handed = (Claimed, OwnedSemaphorePermit);

/// This process's link to its engine, and the engine's wake-up; see the module documentation.
/// The domain sees it as [`Dispatch`].
#[derive(Default)]
pub struct Handoff {
    engine: Mutex<Option<Attached>>,
    /// Wakes the engine when notifications are written for a claim.
    pub(super) wake: Notify,
    /// Notifications made due for a claim since the engine last looked: a claim that found
    /// nothing before may find them now.
    fresh: Mutex<Fresh>,
}

/// Whose notifications were made due for a claim since the engine last looked.
#[derive(Debug, Default, PartialEq)]
pub(super) enum Fresh {
    #[default]
    Nothing,
    /// Only these webhooks' (at most [`FRESH_WEBHOOKS`]).
    Of(Vec<WebhookId>),
    Anyone,
}

/// Webhooks [`Fresh::Of`] names before it becomes [`Fresh::Anyone`].
const FRESH_WEBHOOKS: usize = 64;

struct Attached {
    permits: Arc<Semaphore>,
    lease_ms: i64,
    /// Bounded by the slots: every item holds one.
    queue: mpsc::UnboundedSender<Handed>,
}

/// Delivery slots taken for notifications about to be written, and those notifications as
/// the engine will get them. Dropping it frees the slots.
struct Leases {
    permits: Vec<OwnedSemaphorePermit>,
    claimed: Vec<Claimed>,
    /// The engine's inbox when the slots were taken.
    queue: Option<mpsc::UnboundedSender<Handed>>,
}

impl Handoff {
    /// Called by the engine when it starts: its slots, lease length (ms) and inbox.
    pub(super) fn attach(
        &self,
        permits: Arc<Semaphore>,
        lease_ms: i64,
        queue: mpsc::UnboundedSender<Handed>,
    ) {
        if let Ok(mut e) = self.engine.lock() {
            *e = Some(Attached { permits, lease_ms, queue });
        }
    }

    /// Records that notifications were made due for a claim, and wakes the engine.
    pub(super) fn mark_fresh(&self) {
        self.note_fresh();
        self.wake.notify_one();
    }

    /// Records that notifications were made due, for the engine's next look, without waking it.
    pub(super) fn note_fresh(&self) {
        if let Ok(mut f) = self.fresh.lock() {
            *f = Fresh::Anyone;
        }
    }

    /// Records that notifications of `webhook` only were made due, and wakes the engine.
    pub(super) fn mark_fresh_of(&self, webhook: &WebhookId) {
        if let Ok(mut f) = self.fresh.lock() {
            match &mut *f {
                Fresh::Nothing => *f = Fresh::Of(vec![webhook.clone()]),
                Fresh::Of(ws) if ws.contains(webhook) => {}
                Fresh::Of(ws) if ws.len() < FRESH_WEBHOOKS => ws.push(webhook.clone()),
                _ => *f = Fresh::Anyone,
            }
        }
        self.wake.notify_one();
    }

    /// What was made due since the last call.
    pub(super) fn take_fresh(&self) -> Fresh {
        self.fresh.lock().map(|mut f| std::mem::take(&mut *f)).unwrap_or(Fresh::Anyone)
    }

    /// Called by the engine when it stops: nothing more is handed to it.
    pub(super) fn detach(&self) {
        if let Ok(mut e) = self.engine.lock() {
            *e = None;
        }
    }
}

impl Dispatch for Handoff {
    fn reserve(
        &self,
        notifications: &mut [Notification],
        hooks: &[&Arc<Webhook>],
        now_ms: i64,
    ) -> Box<dyn Reserved> {
        let mut leases = Leases { permits: Vec::new(), claimed: Vec::new(), queue: None };
        let Ok(e) = self.engine.lock() else { return Box::new(leases) };
        let Some(a) = e.as_ref() else { return Box::new(leases) };
        let until_ms = now_ms + a.lease_ms;
        while leases.permits.len() < notifications.len() {
            match a.permits.clone().try_acquire_owned() {
                Ok(p) => leases.permits.push(p),
                Err(_) => break,
            }
        }
        leases.queue = Some(a.queue.clone());
        leases.claimed = notifications
            .iter_mut()
            .zip(hooks)
            .take(leases.permits.len())
            .map(|(n, w)| {
                n.state = NotificationState::Pending;
                n.lease_until_ms = until_ms;
                Claimed { notification: n.clone(), webhook: Arc::clone(w) }
            })
            .collect();
        Box::new(leases)
    }

    fn wake(&self) {
        self.mark_fresh();
    }
}

impl Reserved for Leases {
    fn len(&self) -> usize {
        self.claimed.len()
    }

    fn hand_over(self: Box<Self>, skipped: &[NotificationId]) -> Vec<NotificationId> {
        let Leases { permits, claimed, queue } = *self;
        let mut refused = Vec::new();
        for (c, permit) in claimed.into_iter().zip(permits) {
            if skipped.contains(&c.notification.id) {
                continue;
            }
            match &queue {
                Some(q) => {
                    if let Err(mpsc::error::SendError((c, _))) = q.send((c, permit)) {
                        refused.push(c.notification.id);
                    }
                }
                None => refused.push(c.notification.id),
            }
        }
        refused
    }
}
