//! The engine's slots: how many deliveries run per webhook and per tenant
//! (`delivery.per_webhook_concurrency`, `delivery.per_tenant_concurrency`), and the claimed
//! notifications that wait in memory for a slot of their own.

use std::collections::HashMap;

use tokio::{sync::Semaphore, time::Instant};

use super::*;

/// Deliveries in flight, counted per webhook and per tenant.
#[derive(Default, Clone)]
pub(super) struct InFlight {
    webhooks: HashMap<WebhookId, usize>,
    tenants: HashMap<Tenant, usize>,
}

/// Whose share of the slots a webhook's deliveries take: its enterprise, else its owner (a
/// block webhook bound to no enterprise).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub(super) enum Tenant {
    Enterprise(EnterpriseId),
    User(UserId),
}

impl Tenant {
    pub(super) fn of(w: &crate::model::webhook::Webhook) -> Self {
        match w.level.enterprise_id() {
            Some(e) => Tenant::Enterprise(e.clone()),
            None => Tenant::User(w.user_id.clone()),
        }
    }
}

impl InFlight {
    /// Takes a slot for one delivery to `w` unless its tenant holds `per_tenant` or its webhook
    /// `per_webhook` ([`Engine::take_slot`]).
    fn take_slot(
        &mut self,
        w: &crate::model::webhook::Webhook,
        per_tenant: usize,
        per_webhook: usize,
    ) -> bool {
        let tenant = Tenant::of(w);
        if !take(&mut self.tenants, &tenant, per_tenant) {
            return false;
        }
        if !take(&mut self.webhooks, &w.id, per_webhook) {
            give_back(&mut self.tenants, &tenant);
            return false;
        }
        true
    }
}

/// Takes one slot of `key` in `map` unless it holds `cap`.
pub(super) fn take<K: Eq + std::hash::Hash + Clone>(
    map: &mut HashMap<K, usize>,
    key: &K,
    cap: usize,
) -> bool {
    let n = map.entry(key.clone()).or_insert(0);
    if *n >= cap {
        return false;
    }
    *n += 1;
    true
}

pub(super) fn give_back<K: Eq + std::hash::Hash>(map: &mut HashMap<K, usize>, key: &K) {
    if let Some(n) = map.get_mut(key) {
        *n = n.saturating_sub(1);
        if *n == 0 {
            map.remove(key);
        }
    }
}

impl Engine {
    /// Keeps `c` waiting for a slot unless `cap` already wait; then hands it back.
    pub(super) fn park(&self, c: Claimed, cap: usize) -> Option<Claimed> {
        let Ok(mut w) = self.waiting.lock() else { return Some(c) };
        if w.len() >= cap {
            return Some(c);
        }
        w.push_back((c, Instant::now()));
        None
    }

    /// Whether a claim skipping `skip` could find anything now ([`dry`]).
    pub(super) fn worth_claiming(&self, skip: &Saturated, poll: Duration) -> bool {
        let fresh = self.deps.handoff.take_fresh();
        self.dry.lock().map(|mut d| d.worth(skip, fresh, poll, Instant::now())).unwrap_or(true)
    }

    /// Notes a claim that came back `full` or short ([`dry`]).
    pub(super) fn note_claim(&self, skip: Saturated, full: bool) {
        if let Ok(mut d) = self.dry.lock() {
            d.note(skip, full, Instant::now());
        }
    }

    /// How many notifications to claim now: the free permits less the waiting ones that could
    /// start now, at most [`CLAIM_BATCH`]; none while outcomes wait to be recorded
    /// ([`Engine::complete_loop`]).
    pub(super) fn claimable(&self, permits: &Semaphore) -> usize {
        if self.unrecorded.load(std::sync::atomic::Ordering::SeqCst) {
            return 0;
        }
        permits.available_permits().saturating_sub(self.waiting_startable()).min(CLAIM_BATCH)
    }

    /// The waiting notifications whose webhook and tenant have a slot free now: each needs a
    /// permit of its own. One waiting for its share needs none, since the delivery of that
    /// share that ends next starts it with its own permit ([`Engine::start`]). Counting those
    /// too let one tenant's hanging receivers, with as many of its notifications waiting as
    /// permits free, stop every other tenant's claims.
    pub(super) fn waiting_startable(&self) -> usize {
        let Ok(w) = self.waiting.lock() else { return 0 };
        let Ok(m) = self.in_flight.lock() else { return w.len() };
        let cfg = &self.deps.config.delivery;
        // The slots as they would be if each startable one took its own, oldest first.
        let mut taken = m.clone();
        drop(m);
        w.iter()
            .filter(|(c, _)| {
                taken.take_slot(&c.webhook, cfg.per_tenant_concurrency, cfg.per_webhook_concurrency)
            })
            .count()
    }

    /// Removes and returns the waiting notifications `pick` accepts, oldest first.
    pub(super) fn take_waiting(&self, mut pick: impl FnMut(&(Claimed, Instant)) -> bool) -> Vec<Claimed> {
        let Ok(mut w) = self.waiting.lock() else { return Vec::new() };
        let (taken, kept): (Vec<_>, Vec<_>) = w.drain(..).partition(|x| pick(x));
        w.extend(kept);
        taken.into_iter().map(|(c, _)| c).collect()
    }

    /// The oldest waiting notification that can take a slot now (its slot taken); those older
    /// than half their lease are given back instead.
    pub(super) async fn next_waiting(&self) -> Option<Claimed> {
        let half_lease = Duration::from_millis(u64::try_from(self.lease_ms / 2).unwrap_or(0));
        let stale: Vec<NotificationId> = self
            .take_waiting(|(_, at)| at.elapsed() > half_lease)
            .into_iter()
            .map(|c| c.notification.id)
            .collect();
        self.give_back(&stale).await;
        let mut found = false;
        let next = self.take_waiting(|(c, _)| {
            !found && self.take_slot(&c.webhook) && {
                found = true;
                true
            }
        });
        next.into_iter().next()
    }

    /// Makes claimed notifications due again at once, unattempted.
    #[tracing::instrument(level = "debug", skip_all, fields(count = ids.len()))]
    pub(super) async fn give_back(&self, ids: &[NotificationId]) {
        if ids.is_empty() {
            return;
        }
        if let Err(e) = self.deps.store.defer(ids, self.deps.store.clock().now_ms() + DEFER_MS).await {
            tracing::error!(error = %e, "giving back notifications failed; their leases will end");
        }
        // Due again for the next claim; not a wake-up, which would claim what was just
        // given back for want of a slot.
        self.deps.handoff.note_fresh();
    }

    /// Takes a slot for one delivery to `w`, unless its webhook has `per_webhook_concurrency`
    /// or its tenant `per_tenant_concurrency` in flight: hanging receivers of one tenant then
    /// hold at most that share, and the other slots stay free for everyone else.
    pub(super) fn take_slot(&self, w: &crate::model::webhook::Webhook) -> bool {
        let cfg = &self.deps.config.delivery;
        let Ok(mut m) = self.in_flight.lock() else { return true };
        m.take_slot(w, cfg.per_tenant_concurrency, cfg.per_webhook_concurrency)
    }

    /// The webhooks and tenants now at their caps, whose notifications the next claim leaves.
    pub(super) fn saturated(&self) -> Saturated {
        let cfg = &self.deps.config.delivery;
        let Ok(m) = self.in_flight.lock() else { return Saturated::default() };
        let mut skip = Saturated::default();
        for (id, n) in &m.webhooks {
            if *n >= cfg.per_webhook_concurrency {
                skip.webhooks.push(id.clone());
            }
        }
        for (t, n) in &m.tenants {
            match t {
                _ if *n < cfg.per_tenant_concurrency => {}
                Tenant::Enterprise(e) => skip.enterprises.push(e.clone()),
                Tenant::User(u) => skip.users.push(u.clone()),
            }
        }
        skip
    }

    pub(super) fn release_slot(&self, w: &crate::model::webhook::Webhook) {
        if let Ok(mut m) = self.in_flight.lock() {
            give_back(&mut m.webhooks, &w.id);
            give_back(&mut m.tenants, &Tenant::of(w));
        }
    }
}
