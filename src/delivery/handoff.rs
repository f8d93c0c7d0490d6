//! Handing fresh notifications straight to this process's engine (issue 12 §5).
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

use tokio::sync::{mpsc, OwnedSemaphorePermit, Semaphore};

use crate::store::{Claimed, Notification, NotificationState, Webhook};

/// A notification given to the engine with the delivery slot it was written under.
pub(super) type Handed = (Claimed, OwnedSemaphorePermit);

/// This process's link to its engine; see the module documentation.
#[derive(Default)]
pub struct Handoff {
    engine: Mutex<Option<Attached>>,
}

struct Attached {
    permits: Arc<Semaphore>,
    lease_ms: i64,
    /// Bounded by the slots: every item holds one.
    queue: mpsc::UnboundedSender<Handed>,
}

/// Delivery slots taken for notifications about to be written: `until_ms` is the lease to
/// write them with (Unix ms). Dropping it frees the slots.
pub struct Leases {
    permits: Vec<OwnedSemaphorePermit>,
    /// The lease's end, Unix milliseconds.
    pub until_ms: i64,
}

impl Leases {
    /// How many slots are held.
    pub fn len(&self) -> usize {
        self.permits.len()
    }

    /// Whether none is held.
    pub fn is_empty(&self) -> bool {
        self.permits.is_empty()
    }
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

    /// Called by the engine when it stops: nothing more is handed to it.
    pub(super) fn detach(&self) {
        if let Ok(mut e) = self.engine.lock() {
            *e = None;
        }
    }

    /// Up to `n` delivery slots free now, leased from `now_ms`; none without an engine.
    fn reserve(&self, n: usize, now_ms: i64) -> Leases {
        let mut leases = Leases { permits: Vec::new(), until_ms: 0 };
        let Ok(e) = self.engine.lock() else { return leases };
        let Some(a) = e.as_ref() else { return leases };
        leases.until_ms = now_ms + a.lease_ms;
        while leases.permits.len() < n {
            match a.permits.clone().try_acquire_owned() {
                Ok(p) => leases.permits.push(p),
                Err(_) => break,
            }
        }
        leases
    }

    /// Leases the first of `notifications` (each to the webhook beside it in `hooks`) for the
    /// free slots: marks them `pending` until the lease's end, as a claim would, and returns
    /// the slots with what to hand over once they are written.
    pub fn lease(
        &self,
        notifications: &mut [Notification],
        hooks: &[&Webhook],
        now_ms: i64,
    ) -> (Leases, Vec<Claimed>) {
        let leases = self.reserve(notifications.len(), now_ms);
        let handed = notifications
            .iter_mut()
            .zip(hooks)
            .take(leases.len())
            .map(|(n, w)| {
                n.state = NotificationState::Pending;
                n.lease_until_ms = leases.until_ms;
                Claimed { notification: n.clone(), webhook: (*w).clone() }
            })
            .collect();
        (leases, handed)
    }

    /// Gives the engine `claimed`, written under `leases` (one slot each, in order). Those the
    /// engine can no longer take (it stopped meanwhile) are returned, to be given back to the
    /// outbox rather than wait for their lease to end.
    pub fn hand_over(&self, leases: Leases, claimed: Vec<Claimed>) -> Vec<Claimed> {
        let queue = self.engine.lock().ok().and_then(|e| e.as_ref().map(|a| a.queue.clone()));
        let mut refused = Vec::new();
        for (c, permit) in claimed.into_iter().zip(leases.permits) {
            match &queue {
                Some(q) => {
                    if let Err(mpsc::error::SendError((c, _))) = q.send((c, permit)) {
                        refused.push(c);
                    }
                }
                None => refused.push(c),
            }
        }
        refused
    }
}
