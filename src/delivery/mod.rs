//! The delivery engine (issue 4 §B): claims due notifications from the outbox with a lease,
//! POSTs each one's exact payload with its signatures, and records every attempt with what
//! follows it (delivered, retry at a time, failed, webhook suspended). Notifications that
//! ingestion in this process wrote already leased arrive without a claim ([`handoff`]).
//!
//! Claims are leased: a worker that dies mid-delivery loses its claims when the lease ends and
//! another worker (or the restarted process) delivers them again, so every notification is
//! delivered at least once and twice only after a crash.

use std::{collections::HashMap, sync::Arc, time::Duration};

use reqwest::{header, Client, Url};
use tokio::{
    sync::{mpsc, watch, Semaphore},
    task::JoinHandle,
    time::Instant,
};

use crate::{
    config::Config,
    ids,
    metrics::Metrics,
    outbox::{headers, secrets::SecretCache, signing},
    secrets::MasterKey,
    store::{Attempt, Claimed, Completion, DynStore, Outcome, Saturated},
    types::{EnterpriseId, NotificationId, UserId, WebhookId},
};

pub mod dry;
pub mod handoff;
pub mod prune;
pub mod retry;
pub mod ssrf;
pub mod suspension;

/// Notifications claimed per query.
const CLAIM_BATCH: usize = 256;
/// Outcomes written per transaction.
const COMPLETE_BATCH: usize = 512;
/// Waiting retries made due per statement when a receiver answers again.
const RELEASE_BATCH: u32 = 512;
/// First and longest wait before writing refused outcomes again.
const RECORD_BACKOFF_MIN: Duration = Duration::from_millis(100);
const RECORD_BACKOFF_MAX: Duration = Duration::from_secs(2);
/// How long shutdown keeps trying to write outcomes the database refuses.
const RECORD_AT_SHUTDOWN: Duration = Duration::from_secs(5);
/// Response body kept per attempt, bytes (issue 4: the first 20 KB).
pub const RESPONSE_BODY_LIMIT: usize = 20 * 1024;
/// Response body kept for a successful attempt, bytes: enough to see what the receiver said,
/// without keeping a large body for every delivery (issue 23 §3). Failures keep
/// [`RESPONSE_BODY_LIMIT`].
pub const SUCCESS_BODY_LIMIT: usize = 256;
/// How long a claim outlives twice the attempt timeout, milliseconds: time to connect and to
/// write the outcome. A crashed worker's claims come back after this.
const LEASE_MARGIN_MS: i64 = 5_000;

/// How long a notification claimed over its webhook's or tenant's share, and not kept waiting
/// in memory, waits, ms: none. It is due again at once, and the next claim skips it while the
/// share is full (`Saturated`), so it goes out as soon as a slot of its own frees.
const DEFER_MS: i64 = 0;

/// The handles the engine uses (issue 19 §3), wired in `lib.rs`.
#[derive(Clone)]
pub struct Deps {
    pub store: DynStore,
    pub config: Arc<Config>,
    /// Opens custom header values and webhook secrets.
    pub key: Arc<MasterKey>,
    pub metrics: Arc<Metrics>,
    /// Decrypted webhook secrets, briefly cached.
    pub secrets: Arc<SecretCache>,
    /// Fresh notifications from this process's ingestion, and the engine's wake-up.
    pub handoff: Arc<handoff::Handoff>,
}

/// The engine of one process.
pub struct Engine {
    deps: Deps,
    /// Deliveries in flight per webhook id and per tenant.
    in_flight: std::sync::Mutex<InFlight>,
    guard: Arc<ssrf::Guard>,
    /// Connects only through the SSRF guard.
    guarded: Client,
    /// For webhooks with `allowBlockedHosts` (set by a service admin).
    open: Client,
    /// Claimed notifications waiting for a slot of their webhook or tenant, with when they were
    /// claimed (issue 12 §5): a delivery that finishes starts the next of them, instead of
    /// each being written back and claimed again. At most `delivery.concurrency`; one older
    /// than half its lease is given back rather than started, so no lease runs out meanwhile.
    waiting: std::sync::Mutex<std::collections::VecDeque<(Claimed, Instant)>>,
    /// How long a claim is leased, milliseconds.
    lease_ms: i64,
    /// Outcomes of finished deliveries wait to be written (the database is away): claims
    /// pause meanwhile, so that a notification whose lease ran out is not delivered again
    /// before its outcome is recorded (issue 21 §2).
    unrecorded: std::sync::atomic::AtomicBool,
    /// What the last short claim showed ([`dry`]).
    dry: std::sync::Mutex<dry::DryClaims>,
    /// Notifications this engine has claimed, and a wake-up after each claim that took some:
    /// [`Engine::release_loop`] paces itself by them.
    claimed: std::sync::atomic::AtomicU64,
    claimed_wake: tokio::sync::Notify,
}

fn client(
    concurrency: usize,
    timeout: Duration,
    resolver: Option<Arc<ssrf::GuardedResolver>>,
) -> reqwest::Result<Client> {
    let mut b = Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .user_agent(concat!("Custodian-Webhooks/", env!("CARGO_PKG_VERSION")))
        .pool_max_idle_per_host(concurrency)
        .connect_timeout(timeout)
        .no_proxy();
    if let Some(r) = resolver {
        b = b.dns_resolver(r);
    }
    b.build()
}

/// The error and its causes on one line.
fn error_chain(e: &dyn std::error::Error) -> String {
    let mut s = e.to_string();
    let mut src = e.source();
    while let Some(x) = src {
        let t = x.to_string();
        if !s.contains(&t) {
            s.push_str(": ");
            s.push_str(&t);
        }
        src = x.source();
    }
    s
}

/// Deliveries in flight, counted per webhook and per tenant.
#[derive(Default)]
struct InFlight {
    webhooks: HashMap<WebhookId, usize>,
    tenants: HashMap<Tenant, usize>,
}

/// Whose share of the slots a webhook's deliveries take: its enterprise, else its owner (a
/// block webhook bound to no enterprise).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
enum Tenant {
    Enterprise(EnterpriseId),
    User(UserId),
}

impl Tenant {
    fn of(w: &crate::store::Webhook) -> Self {
        match w.level.enterprise_id() {
            Some(e) => Tenant::Enterprise(e.clone()),
            None => Tenant::User(w.user_id.clone()),
        }
    }
}

/// Takes one slot of `key` in `map` unless it holds `cap`.
fn take<K: Eq + std::hash::Hash + Clone>(map: &mut HashMap<K, usize>, key: &K, cap: usize) -> bool {
    let n = map.entry(key.clone()).or_insert(0);
    if *n >= cap {
        return false;
    }
    *n += 1;
    true
}

fn give_back<K: Eq + std::hash::Hash>(map: &mut HashMap<K, usize>, key: &K) {
    if let Some(n) = map.get_mut(key) {
        *n = n.saturating_sub(1);
        if *n == 0 {
            map.remove(key);
        }
    }
}

/// What an attempt got back.
struct Response {
    status: u16,
    body: String,
    retry_after: Option<Duration>,
}

impl Engine {
    /// Builds the HTTP clients from `delivery.*` settings.
    pub fn new(deps: Deps) -> anyhow::Result<Self> {
        let cfg = &deps.config.delivery;
        let guard = Arc::new(ssrf::Guard { allowed: cfg.allowed_cidrs.clone() });
        let timeout = Duration::from_secs(cfg.timeout);
        let resolver = Arc::new(ssrf::GuardedResolver { guard: guard.clone() });
        Ok(Self {
            guarded: client(cfg.concurrency, timeout, Some(resolver))?,
            open: client(cfg.concurrency, timeout, None)?,
            guard,
            lease_ms: i64::try_from(cfg.timeout).unwrap_or(10) * 2000 + LEASE_MARGIN_MS,
            deps,
            in_flight: Default::default(),
            waiting: Default::default(),
            unrecorded: Default::default(),
            dry: Default::default(),
            claimed: Default::default(),
            claimed_wake: Default::default(),
        })
    }

    /// Runs until `shutdown` turns true, then lets in-flight deliveries finish.
    pub fn spawn(self, mut shutdown: watch::Receiver<bool>) -> JoinHandle<()> {
        let me = Arc::new(self);
        tokio::spawn(async move {
            let cfg = me.deps.config.delivery.clone();
            let (tx, rx) = mpsc::channel::<Outcome>(COMPLETE_BATCH * 4);
            let (recovered_tx, recovered) = mpsc::unbounded_channel();
            let completer = tokio::spawn(me.clone().complete_loop(rx, recovered_tx));
            let releaser = tokio::spawn(me.clone().release_loop(recovered, shutdown.clone()));
            let pruner = prune::spawn(me.deps.store.clone(), me.deps.config.clone(), shutdown.clone());
            let vacuum = prune::spawn_vacuum(me.deps.store.clone(), me.deps.config.clone(), shutdown.clone());
            let permits = Arc::new(Semaphore::new(cfg.concurrency));
            let (handed_tx, handed) = mpsc::unbounded_channel();
            me.deps.handoff.attach(permits.clone(), me.lease_ms, handed_tx);
            let (stop_accepting, stopped) = tokio::sync::oneshot::channel();
            let acceptor = tokio::spawn(me.clone().accept_loop(handed, tx.clone(), stopped));
            let poll = Duration::from_millis(cfg.poll_interval_ms);
            while !*shutdown.borrow() {
                me.start_waiting(&permits, &tx).await;
                let free = me.claimable(&permits);
                let mut full = false;
                let skip = if free > 0 { Some(me.saturated()) } else { None };
                if let Some(skip) = skip.filter(|s| me.worth_claiming(s, poll)) {
                    let now = ids::now_ms();
                    let started = Instant::now();
                    let claim = me.deps.store.claim_due(now, now + me.lease_ms, free as u32, &skip).await;
                    me.deps.metrics.claims.inc();
                    me.deps.metrics.claim_seconds.inc_by(started.elapsed().as_secs_f64());
                    match claim {
                        Ok(batch) => {
                            full = batch.len() == free;
                            me.note_claim(skip, full);
                            me.deps.metrics.claimed.inc_by(batch.len() as u64);
                            if !batch.is_empty() {
                                me.claimed.fetch_add(batch.len() as u64, std::sync::atomic::Ordering::SeqCst);
                                me.claimed_wake.notify_waiters();
                            }
                            let mut deferred = Vec::new();
                            for c in batch {
                                // Ingestion may have taken slots since (`handoff`): never wait
                                // for one here, where handed notifications would wait too.
                                let permit = permits.clone().try_acquire_owned().ok();
                                match permit {
                                    Some(permit) if me.take_slot(&c.webhook) => {
                                        me.clone().start(c, permit, tx.clone());
                                    }
                                    _ => {
                                        if let Some(c) = me.park(c, cfg.concurrency) {
                                            deferred.push(c.notification.id);
                                        }
                                    }
                                }
                            }
                            if !deferred.is_empty() {
                                // Wait for a wake-up rather than claiming the same backlog again.
                                full = false;
                                me.give_back(&deferred).await;
                            }
                        }
                        Err(e) => {
                            tracing::error!(error = %e, "claiming notifications failed");
                            tokio::time::sleep(Duration::from_secs(1)).await;
                        }
                    }
                }
                if full && permits.available_permits() > 0 {
                    continue;
                }
                tokio::select! {
                    _ = me.deps.handoff.wake.notified() => {}
                    _ = tokio::time::sleep(poll) => {}
                    _ = shutdown.changed() => {}
                }
            }
            me.deps.handoff.detach();
            let _ = stop_accepting.send(());
            let mut parked = acceptor.await.unwrap_or_default();
            parked.extend(me.take_waiting(|_| true).into_iter().map(|c| c.notification.id));
            me.give_back(&parked).await;
            let all = u32::try_from(cfg.concurrency).unwrap_or(u32::MAX);
            let _ =
                tokio::time::timeout(Duration::from_secs(cfg.timeout + 5), permits.acquire_many(all)).await;
            drop(tx);
            let _ = completer.await;
            let _ = releaser.await;
            let _ = pruner.await;
            let _ = vacuum.await;
        })
    }

    /// Delivers `c` holding `permit`, then, with the same permit, whatever waiting notification
    /// can take a slot, until none can.
    fn start(
        self: Arc<Self>,
        c: Claimed,
        permit: tokio::sync::OwnedSemaphorePermit,
        tx: mpsc::Sender<Outcome>,
    ) {
        tokio::spawn(async move {
            let mut next = Some(c);
            while let Some(c) = next {
                let webhook = c.webhook.clone();
                let outcome = self.deliver(c).await;
                self.release_slot(&webhook);
                let _ = tx.send(outcome).await;
                next = self.next_waiting().await;
            }
            drop(permit);
        });
    }

    /// Accepts handed notifications as they come, apart from the claim loop: a claim waiting
    /// for the database must not hold up fresh events (issue 23: a healthy tenant's latency
    /// while another's backlog drains). When `stop` fires (the engine detached from
    /// ingestion), closes the inbox and returns the ids of what was still in it, to give back.
    async fn accept_loop(
        self: Arc<Self>,
        mut handed: mpsc::UnboundedReceiver<handoff::Handed>,
        tx: mpsc::Sender<Outcome>,
        mut stop: tokio::sync::oneshot::Receiver<()>,
    ) -> Vec<NotificationId> {
        loop {
            tokio::select! {
                Some(h) = handed.recv() => self.accept(h, &tx).await,
                _ = &mut stop => break,
            }
        }
        // A hand-over racing the detach now fails, and its ingestion gives them back.
        handed.close();
        let mut left = Vec::new();
        while let Ok((c, _)) = handed.try_recv() {
            left.push(c.notification.id);
        }
        left
    }

    /// Starts a notification ingestion handed over with its slot ([`handoff`]), or keeps it
    /// waiting for its webhook's or tenant's share like a claimed one.
    async fn accept(self: &Arc<Self>, (c, permit): handoff::Handed, tx: &mpsc::Sender<Outcome>) {
        self.deps.metrics.handed.inc();
        if self.take_slot(&c.webhook) {
            self.clone().start(c, permit, tx.clone());
            return;
        }
        drop(permit);
        if let Some(c) = self.park(c, self.deps.config.delivery.concurrency) {
            self.give_back(&[c.notification.id]).await;
        }
    }

    /// Starts waiting notifications while permits and slots allow (one may have been parked
    /// just as the last delivery that could have started it finished).
    async fn start_waiting(self: &Arc<Self>, permits: &Arc<Semaphore>, tx: &mpsc::Sender<Outcome>) {
        while let Ok(permit) = permits.clone().try_acquire_owned() {
            let Some(c) = self.next_waiting().await else { return };
            self.clone().start(c, permit, tx.clone());
        }
    }

    /// Keeps `c` waiting for a slot unless `cap` already wait; then hands it back.
    fn park(&self, c: Claimed, cap: usize) -> Option<Claimed> {
        let Ok(mut w) = self.waiting.lock() else { return Some(c) };
        if w.len() >= cap {
            return Some(c);
        }
        w.push_back((c, Instant::now()));
        None
    }

    /// Whether a claim skipping `skip` could find anything now ([`dry`]).
    fn worth_claiming(&self, skip: &Saturated, poll: Duration) -> bool {
        let fresh = self.deps.handoff.take_fresh();
        self.dry.lock().map(|mut d| d.worth(skip, fresh, poll, Instant::now())).unwrap_or(true)
    }

    /// Notes a claim that came back `full` or short ([`dry`]).
    fn note_claim(&self, skip: Saturated, full: bool) {
        if let Ok(mut d) = self.dry.lock() {
            d.note(skip, full, Instant::now());
        }
    }

    /// How many notifications to claim now: the free permits less those waiting, at most
    /// [`CLAIM_BATCH`]; none while outcomes wait to be recorded ([`Engine::complete_loop`]).
    fn claimable(&self, permits: &Semaphore) -> usize {
        if self.unrecorded.load(std::sync::atomic::Ordering::SeqCst) {
            return 0;
        }
        permits.available_permits().saturating_sub(self.waiting_len()).min(CLAIM_BATCH)
    }

    fn waiting_len(&self) -> usize {
        self.waiting.lock().map(|w| w.len()).unwrap_or(0)
    }

    /// Removes and returns the waiting notifications `pick` accepts, oldest first.
    fn take_waiting(&self, mut pick: impl FnMut(&(Claimed, Instant)) -> bool) -> Vec<Claimed> {
        let Ok(mut w) = self.waiting.lock() else { return Vec::new() };
        let (taken, kept): (Vec<_>, Vec<_>) = w.drain(..).partition(|x| pick(x));
        w.extend(kept);
        taken.into_iter().map(|(c, _)| c).collect()
    }

    /// The oldest waiting notification that can take a slot now (its slot taken); those older
    /// than half their lease are given back instead.
    async fn next_waiting(&self) -> Option<Claimed> {
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
    async fn give_back(&self, ids: &[NotificationId]) {
        if ids.is_empty() {
            return;
        }
        if let Err(e) = self.deps.store.defer(ids, ids::now_ms() + DEFER_MS).await {
            tracing::error!(error = %e, "giving back notifications failed; their leases will end");
        }
        // Due again for the next claim; not a wake-up, which would claim what was just
        // given back for want of a slot.
        self.deps.handoff.note_fresh();
    }

    /// Takes a slot for one delivery to `w`, unless its webhook has `per_webhook_concurrency`
    /// or its tenant `per_tenant_concurrency` in flight: hanging receivers of one tenant then
    /// hold at most that share, and the other slots stay free for everyone else.
    fn take_slot(&self, w: &crate::store::Webhook) -> bool {
        let cfg = &self.deps.config.delivery;
        let Ok(mut m) = self.in_flight.lock() else { return true };
        let tenant = Tenant::of(w);
        if !take(&mut m.tenants, &tenant, cfg.per_tenant_concurrency) {
            return false;
        }
        if !take(&mut m.webhooks, &w.id, cfg.per_webhook_concurrency) {
            give_back(&mut m.tenants, &tenant);
            return false;
        }
        true
    }

    /// The webhooks and tenants now at their caps, whose notifications the next claim leaves.
    fn saturated(&self) -> Saturated {
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

    fn release_slot(&self, w: &crate::store::Webhook) {
        if let Ok(mut m) = self.in_flight.lock() {
            give_back(&mut m.webhooks, &w.id);
            give_back(&mut m.tenants, &Tenant::of(w));
        }
    }

    /// Writes outcomes in batches. A batch the database refuses is kept and written again,
    /// backing off up to [`RECORD_BACKOFF_MAX`], until it is recorded: so a delivery that
    /// finished during an outage is not delivered again once the database is back. At shutdown
    /// it tries for at most [`RECORD_AT_SHUTDOWN`]; then those leases run out and the
    /// notifications are delivered again, as after a crash.
    ///
    /// Sends the webhooks that answer again after failures to `recovered`
    /// ([`Engine::release_loop`]).
    async fn complete_loop(
        self: Arc<Self>,
        mut rx: mpsc::Receiver<Outcome>,
        recovered: mpsc::UnboundedSender<WebhookId>,
    ) {
        use std::sync::atomic::Ordering::SeqCst;
        let cfg = &self.deps.config.delivery;
        let rule = suspension::SuspendRule::of(cfg);
        let mut batch: Vec<Outcome> = Vec::new();
        let mut backoff = RECORD_BACKOFF_MIN;
        let mut closed_at: Option<Instant> = None;
        loop {
            if batch.is_empty() {
                match rx.recv().await {
                    Some(o) => batch.push(o),
                    None => break,
                }
            }
            while batch.len() < COMPLETE_BATCH {
                match rx.try_recv() {
                    Ok(o) => batch.push(o),
                    Err(mpsc::error::TryRecvError::Empty) => break,
                    Err(mpsc::error::TryRecvError::Disconnected) => {
                        closed_at.get_or_insert_with(Instant::now);
                        break;
                    }
                }
            }
            match self.deps.store.complete(&batch, ids::now_ms(), &rule).await {
                Ok(done) => {
                    for id in done.recovered {
                        let _ = recovered.send(id);
                    }
                    for id in done.suspended {
                        tracing::warn!(webhook = %id, "webhook suspended after repeated delivery failures");
                    }
                    if self.unrecorded.swap(false, SeqCst) {
                        tracing::info!("delivery outcomes recorded again");
                    }
                    batch.clear();
                    backoff = RECORD_BACKOFF_MIN;
                }
                Err(e) => {
                    if !self.unrecorded.swap(true, SeqCst) {
                        tracing::error!(error = %e, count = batch.len(), "recording delivery outcomes failed; keeping them to write again, and claiming nothing meanwhile");
                    }
                    if closed_at.is_some_and(|at| at.elapsed() > RECORD_AT_SHUTDOWN) {
                        tracing::error!(count = batch.len(), "shutting down with delivery outcomes unrecorded: their leases will end and they are delivered again");
                        break;
                    }
                    tokio::time::sleep(backoff).await;
                    backoff = (backoff * 2).min(RECORD_BACKOFF_MAX);
                }
            }
            self.deps.handoff.wake.notify_one();
        }
    }

    /// Makes the waiting retries of each webhook that answers again due now, [`RELEASE_BATCH`]
    /// at a time, soonest scheduled first (issue 23 §1: recovery goes first), and wakes the
    /// claim. The next batch follows once this engine has claimed half as many, or after a
    /// poll interval: the receiver takes only its share of slots anyway, and released rows
    /// waiting unclaimed are what a claim skipping that saturated webhook walks past. One
    /// statement over a backlog of 50,000 held the outbox's writes for a quarter of a second,
    /// and every tenant's ingestion with them. Stops at shutdown; what is left is due at its
    /// scheduled time.
    async fn release_loop(
        self: Arc<Self>,
        mut recovered: mpsc::UnboundedReceiver<WebhookId>,
        shutdown: watch::Receiver<bool>,
    ) {
        use std::sync::atomic::Ordering::SeqCst;
        let poll = Duration::from_millis(self.deps.config.delivery.poll_interval_ms);
        while let Some(id) = recovered.recv().await {
            while !*shutdown.borrow() {
                match self.deps.store.release_retries(&id, ids::now_ms(), RELEASE_BATCH).await {
                    Ok(n) => {
                        if n > 0 {
                            self.deps.handoff.mark_fresh_of(&id);
                        }
                        if n < u64::from(RELEASE_BATCH) {
                            break;
                        }
                        let target = self.claimed.load(SeqCst) + n / 2;
                        let deadline = Instant::now() + poll;
                        while self.claimed.load(SeqCst) < target {
                            let claimed = self.claimed_wake.notified();
                            if tokio::time::timeout_at(deadline, claimed).await.is_err() {
                                break;
                            }
                        }
                    }
                    Err(e) => {
                        tracing::warn!(error = %e, webhook = %id, "making waiting retries due failed; they go at their scheduled times");
                        break;
                    }
                }
            }
        }
    }

    /// One attempt at one notification.
    #[tracing::instrument(level = "debug", skip_all, fields(notification = %c.notification.id, webhook = %c.webhook.id))]
    async fn deliver(&self, c: Claimed) -> Outcome {
        let started_at = ids::now_ms();
        let t0 = Instant::now();
        let result = self.send(&c).await;
        let elapsed = t0.elapsed();
        let n = &c.notification;
        let (status_code, response_body, error, retry_after) = match result {
            Ok(r) => (Some(r.status), Some(r.body), None, r.retry_after),
            Err(e) => (None, None, Some(e), None),
        };
        let success = status_code.is_some_and(|s| (200..300).contains(&s));
        let response_body = response_body.map(|mut b| {
            if success && b.len() > SUCCESS_BODY_LIMIT {
                let mut end = SUCCESS_BODY_LIMIT;
                while !b.is_char_boundary(end) {
                    end -= 1;
                }
                b.truncate(end);
            }
            b
        });
        if let (Some(code), false) = (status_code, success) {
            tracing::info!(notification = %n.id, webhook = %c.webhook.id, status = code, "delivery refused by receiver");
        }
        let completion = if success {
            Completion::Delivered
        } else {
            let failed_before = usize::try_from(n.retries).unwrap_or(usize::MAX);
            match retry::next_delay(&self.deps.config.delivery.retry_schedule, failed_before, retry_after) {
                Some(d) => {
                    Completion::Retry(ids::now_ms() + i64::try_from(d.as_millis()).unwrap_or(i64::MAX / 2))
                }
                None => Completion::Failed,
            }
        };
        let outcome = match completion {
            Completion::Delivered => "delivered",
            Completion::Retry(_) => "retry",
            Completion::Failed => "failed",
        };
        self.deps.metrics.delivery(outcome, elapsed.as_secs_f64());
        Outcome {
            attempt: Attempt {
                notification_id: n.id.clone(),
                webhook_id: c.webhook.id.clone(),
                started_at_ms: started_at,
                duration_ms: i64::try_from(elapsed.as_millis()).unwrap_or(i64::MAX),
                status_code,
                success,
                response_body,
                error,
            },
            completion,
        }
    }

    async fn send(&self, c: &Claimed) -> Result<Response, String> {
        let (n, w) = (&c.notification, &c.webhook);
        let url = Url::parse(&w.url).map_err(|e| format!("invalid url: {e}"))?;
        let client = if w.allow_blocked_hosts {
            &self.open
        } else {
            ssrf::check_literal(&self.guard, &url).map_err(|e| e.to_string())?;
            &self.guarded
        };
        let timestamp = ids::now();
        let mut req = client
            .post(url)
            .timeout(Duration::from_secs(self.deps.config.delivery.timeout))
            .header(header::CONTENT_TYPE, "application/json")
            .header("idempotency-key", n.idempotency_key())
            .header("webhook-id", n.id.as_str())
            .header("webhook-timestamp", timestamp.to_string());
        if let Some(eid) = w.level.enterprise_id() {
            let secrets = self
                .deps
                .secrets
                .get(&self.deps.store, &self.deps.key, eid)
                .await
                .map_err(|e| format!("webhook secret: {e}"))?;
            if let Some(s) = secrets {
                let body = n.payload.as_bytes();
                req = req.header("x-signature-sha256", signing::bitgo_signature(&s.current, body));
                let mut sigs = vec![signing::standard_signature(&s.current, &n.id, timestamp, body)];
                if let Some(prev) = &s.previous {
                    sigs.push(signing::standard_signature(prev, &n.id, timestamp, body));
                }
                req = req.header("webhook-signature", sigs.join(" "));
            }
        }
        for (k, v) in &w.custom_headers {
            req = req.header(k.as_str(), headers::open(&self.deps.key, &w.id, k, v)?);
        }
        let mut res = req.body(n.payload.clone()).send().await.map_err(|e| error_chain(&e))?;
        let status = res.status().as_u16();
        let retry_after = res
            .headers()
            .get(header::RETRY_AFTER)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| retry::parse_retry_after(v, chrono::Utc::now()));
        let mut body = Vec::new();
        while body.len() < RESPONSE_BODY_LIMIT {
            match res.chunk().await {
                Ok(Some(chunk)) => {
                    let room = RESPONSE_BODY_LIMIT - body.len();
                    body.extend_from_slice(&chunk[..chunk.len().min(room)]);
                }
                _ => break,
            }
        }
        Ok(Response { status, body: String::from_utf8_lossy(&body).into_owned(), retry_after })
    }
}
