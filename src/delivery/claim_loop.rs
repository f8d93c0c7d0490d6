//! The claim loop: claims due notifications with a lease while slots are free, accepts the
//! ones ingestion hands over, and writes outcomes in batches (the completion loop), making
//! waiting retries due again when a receiver answers (the release loop).

use super::*;

impl Engine {
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
                let full = me.claim_round(&permits, &tx, poll).await;
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

    /// Claims as many due notifications as slots are free, and starts or parks each; true when
    /// the claim filled every free slot (claim again at once).
    pub(super) async fn claim_round(
        self: &Arc<Self>,
        permits: &Arc<Semaphore>,
        tx: &mpsc::Sender<Outcome>,
        poll: Duration,
    ) -> bool {
        let free = self.claimable(permits);
        if free == 0 {
            return false;
        }
        let skip = self.saturated();
        if !self.worth_claiming(&skip, poll) {
            return false;
        }
        let mut full = false;
        let now = self.deps.store.clock().now_ms();
        let started = Instant::now();
        let claim = self.deps.store.claim_due(now, now + self.lease_ms, free as u32, &skip).await;
        self.deps.metrics.claims.inc();
        self.deps.metrics.claim_seconds.inc_by(started.elapsed().as_secs_f64());
        match claim {
            Ok(batch) => {
                full = batch.len() == free;
                self.note_claim(skip, full);
                self.deps.metrics.claimed.inc_by(batch.len() as u64);
                if !batch.is_empty() {
                    self.claimed.fetch_add(batch.len() as u64, std::sync::atomic::Ordering::SeqCst);
                    self.claimed_wake.notify_waiters();
                }
                let mut deferred = Vec::new();
                for c in batch {
                    // Ingestion may have taken slots since (`handoff`): never wait
                    // for one here, where handed notifications would wait too.
                    let permit = permits.clone().try_acquire_owned().ok();
                    match permit {
                        Some(permit) if self.take_slot(&c.webhook) => {
                            self.clone().start(c, permit, tx.clone());
                        }
                        _ => {
                            if let Some(c) = self.park(c, self.deps.config.delivery.concurrency) {
                                deferred.push(c.notification.id);
                            }
                        }
                    }
                }
                if !deferred.is_empty() {
                    // Wait for a wake-up rather than claiming the same backlog again.
                    full = false;
                    self.give_back(&deferred).await;
                }
            }
            Err(e) => {
                tracing::error!(error = %e, "claiming notifications failed");
                tokio::time::sleep(Duration::from_secs(1)).await;
            }
        }
        full
    }

    /// Delivers `c` holding `permit`, then, with the same permit, whatever waiting notification
    /// can take a slot, until none can.
    pub(super) fn start(
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
    /// for the database must not hold up fresh events (docs/decisions.md#performance-as-the-data-grows: a healthy tenant's latency
    /// while another's backlog drains). When `stop` fires (the engine detached from
    /// ingestion), closes the inbox and returns the ids of what was still in it, to give back.
    pub(super) async fn accept_loop(
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
    pub(super) async fn accept(self: &Arc<Self>, (c, permit): handoff::Handed, tx: &mpsc::Sender<Outcome>) {
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
    pub(super) async fn start_waiting(
        self: &Arc<Self>,
        permits: &Arc<Semaphore>,
        tx: &mpsc::Sender<Outcome>,
    ) {
        while let Ok(permit) = permits.clone().try_acquire_owned() {
            let Some(c) = self.next_waiting().await else { return };
            self.clone().start(c, permit, tx.clone());
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
    pub(super) async fn complete_loop(
        self: Arc<Self>,
        mut rx: mpsc::Receiver<Outcome>,
        recovered: mpsc::UnboundedSender<WebhookId>,
    ) {
        use std::sync::atomic::Ordering::SeqCst;
        let cfg = &self.deps.config.delivery;
        let rule: Arc<dyn crate::store::SuspendPolicy> = Arc::new(suspension::SuspendRule::of(cfg));
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
            // Shared with the writer; copied back only when the write failed, to be tried again.
            let shared: Arc<[Outcome]> = std::mem::take(&mut batch).into();
            let now = self.deps.store.clock().now_ms();
            match self.deps.store.complete(shared.clone(), now, rule.clone()).await {
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
                    backoff = RECORD_BACKOFF_MIN;
                }
                Err(e) => {
                    batch = shared.to_vec();
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
    /// at a time, soonest scheduled first (docs/decisions.md#performance-as-the-data-grows: recovery goes first), and wakes the
    /// claim. The next batch follows once this engine has claimed half as many, or after a
    /// poll interval: the receiver takes only its share of slots anyway, and released rows
    /// waiting unclaimed are what a claim skipping that saturated webhook walks past. One
    /// statement over a backlog of 50,000 held the outbox's writes for a quarter of a second,
    /// and every tenant's ingestion with them. Stops at shutdown; what is left is due at its
    /// scheduled time.
    pub(super) async fn release_loop(
        self: Arc<Self>,
        mut recovered: mpsc::UnboundedReceiver<WebhookId>,
        shutdown: watch::Receiver<bool>,
    ) {
        use std::sync::atomic::Ordering::SeqCst;
        let poll = Duration::from_millis(self.deps.config.delivery.poll_interval_ms);
        while let Some(id) = recovered.recv().await {
            while !*shutdown.borrow() {
                match self
                    .deps
                    .store
                    .release_retries(&id, self.deps.store.clock().now_ms(), RELEASE_BATCH)
                    .await
                {
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
}
