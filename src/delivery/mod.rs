//! The delivery engine (docs/decisions.md#webhooks): claims due notifications from the outbox with a lease,
//! POSTs each one's exact payload with its signatures, and records every attempt with what
//! follows it (delivered, retry at a time, failed, webhook suspended). Notifications that
//! ingestion in this process wrote already leased arrive without a claim ([`handoff`]).
//!
//! Claims are leased: a worker that dies mid-delivery loses its claims when the lease ends and
//! another worker (or the restarted process) delivers them again, so every notification is
//! delivered at least once and twice only after a crash.

use std::{sync::Arc, time::Duration};

use reqwest::{header, Client, Url};
use tokio::{
    sync::{mpsc, watch, Semaphore},
    task::JoinHandle,
    time::Instant,
};

use crate::{
    config::Config,
    master_key::MasterKey,
    metrics::Metrics,
    model::notification::Attempt,
    notifications::{headers, secret_cache::SecretCache, signing},
    store::{Claimed, Completion, DynStore, Outcome, Saturated},
    types::{EnterpriseId, NotificationId, UserId, WebhookId},
};

mod claim_loop;
pub mod dry;
pub mod handoff;
pub mod prune;
pub mod retry;
mod sender;
use sender::client;
use slots::InFlight;
mod slots;
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
/// Response body kept per attempt, bytes (docs/decisions.md#webhooks: the first 20 KB).
pub const RESPONSE_BODY_LIMIT: usize = 20 * 1024;
/// Response body kept for a successful attempt, bytes: enough to see what the receiver said,
/// without keeping a large body for every delivery (docs/decisions.md#performance-as-the-data-grows). Failures keep
/// [`RESPONSE_BODY_LIMIT`].
pub const SUCCESS_BODY_LIMIT: usize = 256;
/// How long a claim outlives twice the attempt timeout, milliseconds: time to connect and to
/// write the outcome. A crashed worker's claims come back after this.
const LEASE_MARGIN_MS: i64 = 5_000;

/// How long a notification claimed over its webhook's or tenant's share, and not kept waiting
/// in memory, waits, ms: none. It is due again at once, and the next claim skips it while the
/// share is full (`Saturated`), so it goes out as soon as a slot of its own frees.
const DEFER_MS: i64 = 0;

/// The handles the engine uses (docs/decisions.md#architecture), wired in `lib.rs`.
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
    /// claimed (docs/decisions.md#performance): a delivery that finishes starts the next of them, instead of
    /// each being written back and claimed again. At most `delivery.concurrency`; one older
    /// than half its lease is given back rather than started, so no lease runs out meanwhile.
    waiting: std::sync::Mutex<std::collections::VecDeque<(Claimed, Instant)>>,
    /// How long a claim is leased, milliseconds.
    lease_ms: i64,
    /// Outcomes of finished deliveries wait to be written (the database is away): claims
    /// pause meanwhile, so that a notification whose lease ran out is not delivered again
    /// before its outcome is recorded (docs/decisions.md#connections-and-database-outages).
    unrecorded: std::sync::atomic::AtomicBool,
    /// What the last short claim showed ([`dry`]).
    dry: std::sync::Mutex<dry::DryClaims>,
    /// Notifications this engine has claimed, and a wake-up after each claim that took some:
    /// [`Engine::release_loop`] paces itself by them.
    claimed: std::sync::atomic::AtomicU64,
    claimed_wake: tokio::sync::Notify,
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
}
