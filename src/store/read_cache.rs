//! The in-process read cache (docs/decisions.md#performance): token by hash, user by id, a user's memberships,
//! and the active webhooks an event routes to, so that an authenticated request and an event's
//! fan-out make no query on a hit.
//!
//! Correctness before speed:
//! - Every write of this process to tokens, users, memberships or webhooks clears the cache
//!   after its commit, so the process that made a change sees it at once.
//! - Every such write, by any process, also bumps `cache_version` in the same transaction
//!   (database triggers, migration 0009; a webhook's failure counters are not such a write). A task reads it every `cache.poll_interval_ms`
//!   and clears the cache when it moved.
//! - An entry is used only while the last successful read of the version started less than
//!   [`MAX_STALENESS`] ago; otherwise the cache is bypassed. So a change committed by another
//!   process takes effect there within 1 s, whatever the poller's luck.
//! - A load that raced with a clear is not kept: loads note the cache's generation before they
//!   query and insert only if it is unchanged.
//!
//! Expiry, unlock windows and IP restrictions are checked by the caller on every request, from
//! the record; the cache only saves the query. Each kind holds at most `cache.capacity`
//! entries (S3-FIFO eviction, by `quick_cache`).

use std::{
    sync::{
        atomic::{AtomicU64, Ordering},
        Arc, Mutex,
    },
    time::{Duration, Instant},
};

use quick_cache::sync::Cache;

use super::{Membership, User};

use crate::model::token::TokenRecord;

use crate::model::webhook::{Webhook, WebhookFilter};

/// Longest a cached entry may lag a change committed by another process (docs/decisions.md#performance).
pub const MAX_STALENESS: Duration = Duration::from_secs(1);

/// The cached records, and what decides whether they may be used.
pub struct ReadCache {
    /// `None` when `cache.capacity` is 0.
    maps: Option<Maps>,
    /// Bumped by every clear; guarded so that a clear and a checked insert do not interleave.
    generation: Mutex<u64>,
    /// Milliseconds since `epoch` at which the last successful version read started, plus 1
    /// (0: never).
    confirmed_ms: AtomicU64,
    epoch: Instant,
}

struct Maps {
    tokens: Cache<String, Arc<TokenRecord>>,
    users: Cache<String, Arc<User>>,
    memberships: Cache<String, Arc<Vec<Membership>>>,
    routes: Cache<String, Arc<Vec<Arc<Webhook>>>>,
}

/// The key of a routing filter: every field that selects webhooks.
pub fn route_key(f: &WebhookFilter) -> String {
    let parts = [
        f.wallet_id.as_deref(),
        f.enterprise_id.as_deref(),
        f.user_id.as_deref(),
        f.coin.as_deref(),
        f.webhook_type.as_deref(),
    ];
    let mut key = format!("{}|{:?}", f.scope.as_str(), f.state);
    for p in parts {
        key.push('|');
        key.push_str(p.unwrap_or("-"));
    }
    key
}

/// The cache's generation when a load began; pass it back to the matching `put_*`.
#[derive(Debug, Clone, Copy)]
pub struct Generation(u64);

impl ReadCache {
    /// A cache of up to `capacity` entries per kind; 0 turns it off.
    pub fn new(capacity: usize) -> Self {
        let maps = (capacity > 0).then(|| Maps {
            tokens: Cache::new(capacity),
            users: Cache::new(capacity),
            memberships: Cache::new(capacity),
            routes: Cache::new(capacity),
        });
        Self { maps, generation: Mutex::new(0), confirmed_ms: AtomicU64::new(0), epoch: Instant::now() }
    }

    /// The maps, when entries may be used now (see [`MAX_STALENESS`]).
    fn usable(&self) -> Option<&Maps> {
        let maps = self.maps.as_ref()?;
        let confirmed = self.confirmed_ms.load(Ordering::Acquire).checked_sub(1)?;
        let age = (self.epoch.elapsed().as_millis() as u64).saturating_sub(confirmed);
        (age < MAX_STALENESS.as_millis() as u64).then_some(maps)
    }

    pub fn token(&self, token_hash: &str) -> Option<Arc<TokenRecord>> {
        self.usable()?.tokens.get(token_hash)
    }

    pub fn user(&self, user_id: &str) -> Option<Arc<User>> {
        self.usable()?.users.get(user_id)
    }

    pub fn memberships(&self, user_id: &str) -> Option<Vec<Membership>> {
        self.usable()?.memberships.get(user_id).map(|m| (*m).clone())
    }

    pub fn routes(&self, key: &str) -> Option<Arc<Vec<Arc<Webhook>>>> {
        self.usable()?.routes.get(key)
    }

    /// Call before loading from the database.
    pub fn generation(&self) -> Generation {
        Generation(self.generation.lock().map(|g| *g).unwrap_or(u64::MAX))
    }

    /// Keeps `f`'s insert only if nothing was cleared since `at`.
    fn put(&self, at: Generation, f: impl FnOnce(&Maps)) {
        let Some(maps) = &self.maps else { return };
        if let Ok(g) = self.generation.lock() {
            if *g == at.0 {
                f(maps);
            }
        }
    }

    pub fn put_token(&self, at: Generation, t: &Arc<TokenRecord>) {
        self.put(at, |m| m.tokens.insert(t.token_hash.clone(), t.clone()));
    }

    pub fn put_user(&self, at: Generation, u: &Arc<User>) {
        self.put(at, |m| m.users.insert(u.id.to_string(), u.clone()));
    }

    pub fn put_memberships(&self, at: Generation, user_id: &str, list: &[Membership]) {
        self.put(at, |m| m.memberships.insert(user_id.to_string(), Arc::new(list.to_vec())));
    }

    pub fn put_routes(&self, at: Generation, key: String, hooks: Arc<Vec<Arc<Webhook>>>) {
        self.put(at, |m| m.routes.insert(key, hooks));
    }

    /// Records a token's new `last_used_at` in its cached copy, if any (that write does not
    /// clear the cache: it changes nothing authentication decides on).
    pub fn touch_token(&self, token_hash: &str, at: i64) {
        let Some(maps) = &self.maps else { return };
        let at_gen = self.generation();
        if let Some(t) = maps.tokens.get(token_hash) {
            let mut t = (*t).clone();
            t.last_used_at = Some(at);
            self.put(at_gen, |m| m.tokens.insert(token_hash.to_string(), Arc::new(t)));
        }
    }

    /// Forgets everything; loads in flight are not kept.
    pub fn clear(&self) {
        let Some(maps) = &self.maps else { return };
        let mut g = match self.generation.lock() {
            Ok(g) => g,
            Err(poisoned) => poisoned.into_inner(),
        };
        *g = g.wrapping_add(1);
        maps.tokens.clear();
        maps.users.clear();
        maps.memberships.clear();
        maps.routes.clear();
    }

    /// Notes a successful read of the database's version that started at `started`.
    pub fn confirm(&self, started: Instant) {
        let ms = started.saturating_duration_since(self.epoch).as_millis() as u64;
        self.confirmed_ms.fetch_max(ms + 1, Ordering::AcqRel);
    }

    /// Entries per kind now (tokens, users, membership lists).
    #[cfg(test)]
    pub fn len(&self) -> (usize, usize, usize) {
        self.maps.as_ref().map_or((0, 0, 0), |m| (m.tokens.len(), m.users.len(), m.memberships.len()))
    }
}

/// `cache_version`'s value: bumped by triggers in every transaction that changes tokens, users
/// or memberships (migration 0009).
pub(super) async fn read_version<DB>(pool: sqlx::Pool<DB>) -> super::StoreResult<i64>
where
    DB: super::Dialect,
    for<'c> &'c sqlx::Pool<DB>: sqlx::Executor<'c, Database = DB>,
    for<'q> DB::Arguments<'q>: sqlx::IntoArguments<'q, DB>,
    for<'r> (i64,): sqlx::FromRow<'r, DB::Row>,
{
    let (v,): (i64,) =
        sqlx::query_as("SELECT version FROM cache_version WHERE id = 1").fetch_one(&pool).await?;
    Ok(v)
}

/// Reads the version every `interval` and clears `cache` when it moved or cannot be read.
/// Ends when the cache is dropped.
pub(super) async fn poll<F, Fut>(cache: std::sync::Weak<ReadCache>, interval: Duration, read_version: F)
where
    F: Fn() -> Fut,
    Fut: std::future::Future<Output = super::StoreResult<i64>>,
{
    let mut seen: Option<i64> = None;
    let mut tick = tokio::time::interval(interval);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tick.tick().await;
        let started = Instant::now();
        let version = read_version().await;
        let Some(cache) = cache.upgrade() else { return };
        match version {
            Ok(v) => {
                if seen != Some(v) {
                    cache.clear();
                    seen = Some(v);
                }
                cache.confirm(started);
            }
            Err(e) => {
                tracing::warn!(error = %e, "reading the authentication version failed; the cache is cleared");
                cache.clear();
                seen = None;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::types::test_id;

    fn user(id: &str) -> User {
        User {
            id: test_id(id),
            email: format!("{id}@example.com"),
            name_first: String::new(),
            name_last: String::new(),
            password_hash: String::new(),
            totp_secret_enc: Vec::new(),
            totp_last_step: None,
            service_admin: false,
            is_active: true,
            timezone: "UTC".into(),
            locale: "en-US".into(),
            allowed_coins: Vec::new(),
            created_at: 0,
            password_updated_at: 0,
            last_login: None,
        }
    }

    #[test]
    fn entries_are_used_only_while_the_version_was_read_within_a_second() {
        let cache = ReadCache::new(8);
        cache.put_user(cache.generation(), &Arc::new(user("u")));
        assert!(cache.user(&test_id::<crate::types::UserId>("u")).is_none(), "never confirmed: bypassed");
        cache.confirm(Instant::now());
        assert!(cache.user(&test_id::<crate::types::UserId>("u")).is_some());
        std::thread::sleep(MAX_STALENESS + Duration::from_millis(50));
        assert!(
            cache.user(&test_id::<crate::types::UserId>("u")).is_none(),
            "no read of the version for over a second: bypassed"
        );
    }

    #[test]
    fn a_load_that_raced_with_a_clear_is_not_kept() {
        let cache = ReadCache::new(8);
        cache.confirm(Instant::now());
        let before = cache.generation();
        cache.clear();
        cache.put_user(before, &Arc::new(user("u")));
        assert!(cache.user(&test_id::<crate::types::UserId>("u")).is_none());
        cache.put_user(cache.generation(), &Arc::new(user("u")));
        assert!(cache.user(&test_id::<crate::types::UserId>("u")).is_some());
    }

    #[test]
    fn each_kind_holds_at_most_its_capacity() {
        let cache = ReadCache::new(16);
        cache.confirm(Instant::now());
        for i in 0..1000 {
            cache.put_user(cache.generation(), &Arc::new(user(&format!("u{i}"))));
        }
        let (_, users, _) = cache.len();
        assert!(users > 0 && users <= 16, "{users} users kept with a capacity of 16");
        assert!(
            ReadCache::new(0).user(&test_id::<crate::types::UserId>("u")).is_none(),
            "capacity 0 turns the cache off"
        );
    }
}
