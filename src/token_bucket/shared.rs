//! Token buckets in the database, shared by every process (PostgreSQL;
//! docs/decisions.md#limits-shared-across-processes).
//!
//! A process reserves up to [`batch`] tokens of a key's bucket in one statement and spends
//! them itself, so most requests cost no round trip. The next batch is reserved in the
//! background once half of one is spent; one reservation at a time runs for a key, and
//! requests that find no token wait for its tokens. Tokens of a key unused for [`HOLD`] go back
//! to the bucket, and a bucket found empty is not asked again until its next token is due.
//!
//! Every request let through spent a token taken from the shared bucket, so the processes
//! together never exceed the configured rate over time. What a process holds unspent (at most
//! one and a half batches per key) can add to one burst; a batch is at most a fiftieth of the
//! limit, so that is within 3% of the limit per process.

use std::{
    collections::HashMap,
    num::NonZeroU32,
    sync::{Arc, Mutex, Weak},
    time::{Duration, Instant},
};

use prometheus_client::metrics::counter::Counter;

use super::{Limited, RateState};
use crate::{
    metrics::Metrics,
    store::{BucketShape, DynStore, Reserved, StoreError},
};

/// How long a process keeps tokens it reserved but did not spend before giving them back.
pub const HOLD: Duration = Duration::from_secs(1);
/// How often unspent tokens are looked for.
const TICK: Duration = Duration::from_millis(250);
/// Every this many ticks, buckets idle for a whole period are removed (they are full).
const FORGET_EVERY: u32 = 240;
/// Most keys whose tokens one process holds; past it, each request reserves one token.
const MAX_HELD_KEYS: usize = 100_000;

/// Tokens reserved at a time: a fiftieth of the limit, from 1 to 100.
pub fn batch(limit: u32) -> u32 {
    (limit / 50).clamp(1, 100)
}

struct Held {
    /// Reserved and not spent.
    tokens: u32,
    /// The shared bucket's tokens after the last reservation.
    left: f64,
    /// When a token was last taken or reserved: tokens idle for [`HOLD`] go back.
    used_at: Instant,
    /// Until when the shared bucket was found empty: refused here without asking again.
    empty_until: Option<Instant>,
    /// Held while one request reserves for this key, so that concurrent requests wait for its
    /// tokens instead of each reserving a batch.
    refill: Arc<tokio::sync::Mutex<()>>,
}

/// What this process's holdings say about one request.
enum Holding {
    /// A held token, and the key's refill lock when fewer than half a batch are left and no
    /// reservation runs: the caller reserves the next batch in the background with it.
    Token(RateState, Option<tokio::sync::OwnedMutexGuard<()>>),
    Empty(Limited),
    /// None: too many keys held; reserve one token without holding any.
    Reserve(Option<Arc<tokio::sync::Mutex<()>>>),
}

struct Inner {
    prefix: &'static str,
    store: DynStore,
    shape: BucketShape,
    limit: u32,
    batch: u32,
    held: Mutex<HashMap<String, Held>>,
    reservations: Counter,
    refunded: Counter,
}

/// One limiter's shared buckets, named `<prefix>:<key>` in the database.
pub struct SharedBuckets(Arc<Inner>);

impl SharedBuckets {
    /// `limit` per `period_secs` for each key. Starts the task that gives back unspent tokens;
    /// it ends when this is dropped.
    pub fn new(
        prefix: &'static str,
        limit: NonZeroU32,
        period_secs: u64,
        store: DynStore,
        metrics: Arc<Metrics>,
    ) -> Self {
        let capacity = f64::from(limit.get());
        let labels = crate::metrics::LimiterOnly { limiter: prefix };
        let inner = Arc::new(Inner {
            prefix,
            store,
            shape: BucketShape { capacity, per_second: capacity / period_secs.max(1) as f64 },
            limit: limit.get(),
            batch: batch(limit.get()),
            held: Mutex::default(),
            reservations: metrics.limiters.reservations.get_or_create(&labels).clone(),
            refunded: metrics.limiters.refunded.get_or_create(&labels).clone(),
        });
        tokio::spawn(give_back(Arc::downgrade(&inner), period_secs.max(1) as f64));
        Self(inner)
    }

    /// Takes one token of `key`: one this process holds, else a reservation (one at a time
    /// per key). Returns `Err(Limited)` inside when the shared bucket is empty. Errors: the
    /// store's, when the database cannot be reached.
    pub async fn take(&self, key: &str) -> Result<Result<RateState, Limited>, StoreError> {
        let inner = &self.0;
        let refill = match inner.held(key) {
            Holding::Token(state, prefetch) => {
                if let Some(turn) = prefetch {
                    tokio::spawn(prefetch_batch(inner.clone(), key.to_string(), turn));
                }
                return Ok(Ok(state));
            }
            Holding::Empty(limited) => return Ok(Err(limited)),
            Holding::Reserve(refill) => refill,
        };
        let _turn = match &refill {
            Some(lock) => {
                let turn = lock.lock().await;
                // The request before this one may have reserved enough for both.
                match inner.held(key) {
                    // Holding the turn already: no prefetch can be had here.
                    Holding::Token(state, _) => return Ok(Ok(state)),
                    Holding::Empty(limited) => return Ok(Err(limited)),
                    Holding::Reserve(_) => Some(turn),
                }
            }
            None => None,
        };
        let want = if refill.is_some() { inner.batch } else { 1 };
        inner.reservations.inc();
        let got = inner.store.reserve_tokens(&format!("{}:{key}", inner.prefix), inner.shape, want).await?;
        // This request spends one of what was granted; the rest is held for the key.
        let spare = got.granted.saturating_sub(1);
        if let Some(refill) = &refill {
            inner.keep(key, refill, Reserved { granted: spare, left: got.left });
        }
        if got.granted == 0 {
            let retry_after_secs = inner.until_next(got.left).as_secs_f64().ceil().max(1.0) as u64;
            return Ok(Err(Limited::Empty { state: inner.state(got.left, 0), retry_after_secs }));
        }
        Ok(Ok(inner.state(got.left, spare)))
    }
}

impl Inner {
    /// How long until the shared bucket, holding `left` tokens, has a whole one again.
    fn until_next(&self, left: f64) -> Duration {
        Duration::from_secs_f64(((1.0 - left) / self.shape.per_second).max(0.001))
    }

    /// Adds `got.granted` reserved tokens to what this process holds for `key` (its entry made
    /// again if it was given back meanwhile), and remembers the bucket's level; a bucket found
    /// empty (`left` under one token and nothing granted) is refused here until its next token.
    fn keep(&self, key: &str, refill: &Arc<tokio::sync::Mutex<()>>, got: Reserved) {
        let now = Instant::now();
        let mut held = self.held.lock().unwrap_or_else(|p| p.into_inner());
        let h = held.entry(key.to_string()).or_insert_with(|| Held {
            tokens: 0,
            left: 0.0,
            used_at: now,
            empty_until: None,
            refill: refill.clone(),
        });
        h.tokens += got.granted;
        h.left = got.left;
        h.used_at = now;
        h.empty_until = (got.granted == 0 && got.left < 1.0).then(|| now + self.until_next(got.left));
    }

    /// Takes a held token of `key`, or says the bucket is known empty, or that a reservation
    /// is needed (with the key's refill lock, made here).
    fn held(&self, key: &str) -> Holding {
        let now = Instant::now();
        let mut held = self.held.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(h) = held.get_mut(key) {
            if h.tokens > 0 {
                h.tokens -= 1;
                h.used_at = now;
                let low = h.tokens < self.batch / 2;
                let prefetch = if low { h.refill.clone().try_lock_owned().ok() } else { None };
                return Holding::Token(self.state(h.left, h.tokens), prefetch);
            }
            if let Some(until) = h.empty_until.filter(|until| *until > now) {
                let retry_after_secs = (until - now).as_secs_f64().ceil().max(1.0) as u64;
                return Holding::Empty(Limited::Empty { state: self.state(h.left, 0), retry_after_secs });
            }
            return Holding::Reserve(Some(h.refill.clone()));
        }
        if held.len() >= MAX_HELD_KEYS {
            return Holding::Reserve(None);
        }
        let refill = Arc::new(tokio::sync::Mutex::new(()));
        held.insert(
            key.to_string(),
            Held { tokens: 0, left: 0.0, used_at: now, empty_until: None, refill: refill.clone() },
        );
        Holding::Reserve(Some(refill))
    }

    fn state(&self, left: f64, held: u32) -> RateState {
        let remaining = (left.floor() as u32).saturating_add(held).min(self.limit);
        let missing = f64::from(self.limit - remaining);
        RateState {
            limit: self.limit,
            remaining,
            reset_secs: (missing / self.shape.per_second).ceil() as u64,
        }
    }

    /// Takes out the tokens held longer than [`HOLD`], by bucket name.
    fn due_refunds(&self) -> Vec<(String, u32)> {
        let mut held = self.held.lock().unwrap_or_else(|p| p.into_inner());
        let mut due = Vec::new();
        held.retain(|key, h| {
            if h.used_at.elapsed() < HOLD || h.empty_until.is_some_and(|until| until > Instant::now()) {
                return true;
            }
            if h.tokens > 0 {
                due.push((format!("{}:{key}", self.prefix), h.tokens));
            }
            false
        });
        due
    }
}

/// Reserves `key`'s next batch while its requests spend what is left, so that they rarely wait
/// for a round trip; `turn` keeps other reservations for the key out meanwhile. A failure is
/// left to the next request that finds no token.
async fn prefetch_batch(inner: Arc<Inner>, key: String, turn: tokio::sync::OwnedMutexGuard<()>) {
    inner.reservations.inc();
    let bucket = format!("{}:{key}", inner.prefix);
    match inner.store.reserve_tokens(&bucket, inner.shape, inner.batch).await {
        Ok(got) => inner.keep(&key, tokio::sync::OwnedMutexGuard::mutex(&turn), got),
        Err(e) => tracing::debug!(error = %e, "reserving rate-limit tokens ahead failed"),
    }
    drop(turn);
}

/// Gives back tokens held past [`HOLD`], and now and then removes buckets idle for a period.
async fn give_back(inner: Weak<Inner>, period_secs: f64) {
    let mut tick = tokio::time::interval(TICK);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut ticks = 0u32;
    loop {
        tick.tick().await;
        let Some(inner) = inner.upgrade() else { return };
        let due = inner.due_refunds();
        if !due.is_empty() {
            match inner.store.refund_tokens(inner.shape.capacity, &due).await {
                Ok(()) => {
                    inner.refunded.inc_by(due.iter().map(|(_, n)| u64::from(*n)).sum());
                }
                // Lost tokens only make the limit stricter for a moment.
                Err(e) => tracing::debug!(error = %e, "giving back rate-limit tokens failed"),
            }
        }
        ticks = ticks.wrapping_add(1);
        if ticks % FORGET_EVERY == 0 {
            if let Err(e) = inner.store.forget_idle_buckets(inner.prefix, period_secs).await {
                tracing::debug!(error = %e, "removing idle rate-limit buckets failed");
            }
        }
    }
}
