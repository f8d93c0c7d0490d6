//! Retention (docs/decisions.md#webhook-abuse-and-the-api-rate-limit, docs/decisions.md#performance-as-the-data-grows): delivery attempts (each keeps up to 20 KB of response
//! body), finished notifications and ingested events older than `delivery.retention_days` are
//! deleted by the worker in small batches, so that a busy receiver cannot grow the database
//! without bound and no single delete holds the write lock for long.

use std::{sync::Arc, time::Duration};

use tokio::{sync::watch, task::JoinHandle};

use crate::{config::Config, store::DynStore};

/// Rows deleted per statement.
const BATCH: u32 = 500;
/// Statements per table and round; what is left waits for the next round.
const MAX_BATCHES: usize = 200;
/// Pause between statements, so that deliveries' writes get the database in between.
const PAUSE: Duration = Duration::from_millis(20);

/// Rows deleted by one round.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Pruned {
    pub attempts: u64,
    pub notifications: u64,
    pub events: u64,
}

/// Deletes what is older than `retention_days` before `now_ms`, at most
/// `MAX_BATCHES * BATCH` rows of each table. Errors: the store's.
#[tracing::instrument(level = "debug", skip_all)]
pub async fn prune_once(store: &DynStore, config: &Config, now_ms: i64) -> crate::store::StoreResult<Pruned> {
    // Validated finite and not negative; `as` saturates past i64's range.
    let keep_ms = (config.delivery.retention_days * 86_400_000.0) as i64;
    let before = now_ms.saturating_sub(keep_ms);
    Ok(Pruned {
        attempts: in_batches(|| store.prune_attempts(before, BATCH)).await?,
        notifications: in_batches(|| store.prune_notifications(before, BATCH)).await?,
        // Ingested events, kept to answer a repeated event id with its first result.
        events: in_batches(|| store.prune_events(before.div_euclid(1000), BATCH)).await?,
    })
}

/// Runs `step` (one delete of at most [`BATCH`] rows) until it deletes less than a batch, at
/// most [`MAX_BATCHES`] times, pausing in between; returns the rows deleted.
async fn in_batches<F, Fut>(mut step: F) -> crate::store::StoreResult<u64>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = crate::store::StoreResult<u64>>,
{
    let mut total = 0;
    for _ in 0..MAX_BATCHES {
        let n = step().await?;
        total += n;
        if n < u64::from(BATCH) {
            break;
        }
        tokio::time::sleep(PAUSE).await;
    }
    Ok(total)
}

/// Vacuums the outbox every `postgres.vacuum_interval` seconds until `shutdown`, on a backend
/// that needs it (PostgreSQL); returns at once elsewhere or when the interval is 0.
pub fn spawn_vacuum(
    store: DynStore,
    config: Arc<Config>,
    mut shutdown: watch::Receiver<bool>,
) -> JoinHandle<()> {
    tokio::spawn(async move {
        if config.postgres.vacuum_interval == 0 {
            return;
        }
        let every = Duration::from_secs(config.postgres.vacuum_interval);
        while !*shutdown.borrow() {
            tokio::select! {
                _ = tokio::time::sleep(every) => {}
                _ = shutdown.changed() => return,
            }
            match store.vacuum_outbox().await {
                Ok(true) => tracing::debug!("vacuumed the outbox"),
                Ok(false) => return,
                Err(e) => tracing::warn!(error = %e, "vacuuming the outbox failed; trying again later"),
            }
        }
    })
}

/// Prunes at start and every `delivery.prune_interval_ms` until `shutdown`; does nothing when
/// `delivery.retention_days` is 0 (keep for ever).
pub fn spawn(store: DynStore, config: Arc<Config>, mut shutdown: watch::Receiver<bool>) -> JoinHandle<()> {
    tokio::spawn(async move {
        if config.delivery.retention_days == 0.0 {
            return;
        }
        let every = Duration::from_millis(config.delivery.prune_interval_ms);
        while !*shutdown.borrow() {
            match prune_once(&store, &config, store.clock().now_ms()).await {
                Ok(p) if p != Pruned::default() => tracing::info!(
                    attempts = p.attempts,
                    notifications = p.notifications,
                    events = p.events,
                    "pruned delivery history past its retention"
                ),
                Ok(_) => {}
                Err(e) => tracing::error!(error = %e, "pruning delivery history failed"),
            }
            tokio::select! {
                _ = tokio::time::sleep(every) => {}
                _ = shutdown.changed() => {}
            }
        }
    })
}
