//! Password hashing with argon2id (OWASP minimum: m = 19 MiB, t = 2, p = 1), run on a blocking
//! thread so a login never stalls the async workers, and bounded by [`HashLimiter`] so that no
//! login flood can hold more than `login.max_concurrent_hashes` x 19 MiB (issue 9 §1).

use std::{
    collections::HashMap,
    sync::{
        atomic::{AtomicI64, Ordering},
        Arc, Mutex, OnceLock,
    },
    time::Duration,
};

use tokio::sync::Semaphore;

use crate::{
    config::LoginConfig,
    error::{Error, Result},
};

use anyhow::anyhow;
use argon2::{
    password_hash::{rand_core::OsRng, PasswordHash, PasswordHasher, PasswordVerifier, SaltString},
    Algorithm, Argon2, Params, Version,
};

/// Minimum password length, characters (issue 2 §3).
pub const MIN_PASSWORD_LEN: usize = 12;

fn argon2() -> Argon2<'static> {
    // 19 MiB in KiB, 2 passes, 1 lane: valid constants.
    let params = Params::new(19 * 1024, 2, 1, None).unwrap_or_default();
    Argon2::new(Algorithm::Argon2id, Version::V0x13, params)
}

/// Hashes `password` to a PHC string.
pub fn hash(password: &str) -> anyhow::Result<String> {
    let salt = SaltString::generate(&mut OsRng);
    argon2()
        .hash_password(password.as_bytes(), &salt)
        .map(|h| h.to_string())
        .map_err(|e| anyhow!("hashing password: {e}"))
}

/// A hash of a random password, verified for unknown users so that they take as long as a
/// wrong password does.
fn dummy_hash() -> &'static str {
    static DUMMY: OnceLock<String> = OnceLock::new();
    DUMMY.get_or_init(|| hash(&crate::ids::new_id()).unwrap_or_default())
}

/// Verifies `password` against `phc` (or against a dummy hash when `phc` is `None`) on the
/// calling thread. False for a mismatch, an unknown user or an unreadable hash.
fn verify_now(password: &str, phc: Option<&str>) -> bool {
    let known = phc.is_some();
    let phc = phc.unwrap_or_else(|| dummy_hash());
    let ok = PasswordHash::new(phc)
        .map(|h| argon2().verify_password(password.as_bytes(), &h).is_ok())
        .unwrap_or(false);
    ok && known
}

/// Bounds password hashing (issue 9 §1): at most `max_concurrent_hashes` hashes run, at most
/// `hash_queue` more wait, each for at most `hash_wait_ms`, and one client holds at most
/// `max_hashes_per_client` of these places. Memory under any login load is therefore bounded
/// by `max_concurrent_hashes` x 19 MiB.
pub struct HashLimiter {
    slots: Arc<Semaphore>,
    places: Arc<Semaphore>,
    per_client: Mutex<HashMap<String, usize>>,
    max_per_client: usize,
    wait: Duration,
    running: Arc<AtomicI64>,
    peak: Arc<AtomicI64>,
}

/// A client's place in the limiter, given back on drop.
struct ClientPlace<'a> {
    limiter: &'a HashLimiter,
    client: String,
}

impl Drop for ClientPlace<'_> {
    fn drop(&mut self) {
        let mut map = self.limiter.per_client.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(n) = map.get_mut(&self.client) {
            *n -= 1;
            if *n == 0 {
                map.remove(&self.client);
            }
        }
    }
}

impl HashLimiter {
    /// A limiter with `cfg`'s `max_concurrent_hashes`, `hash_queue`, `hash_wait_ms` and
    /// `max_hashes_per_client` (each at least 1, the queue at least 0).
    pub fn new(cfg: &LoginConfig) -> Self {
        let slots = cfg.max_concurrent_hashes.max(1);
        Self {
            slots: Arc::new(Semaphore::new(slots)),
            places: Arc::new(Semaphore::new(slots + cfg.hash_queue)),
            per_client: Mutex::default(),
            max_per_client: cfg.max_hashes_per_client.max(1),
            wait: Duration::from_millis(cfg.hash_wait_ms),
            running: Arc::default(),
            peak: Arc::default(),
        }
    }

    /// Hashes running now.
    pub fn running(&self) -> i64 {
        self.running.load(Ordering::Relaxed)
    }

    /// The most hashes that ever ran at once in this process.
    pub fn peak(&self) -> i64 {
        self.peak.load(Ordering::Relaxed)
    }

    fn busy() -> Error {
        Error::Busy {
            message: "the server is busy with other logins; try again shortly".into(),
            retry_after_secs: 1,
        }
    }

    /// Verifies `password` against `phc` (a dummy hash when `None`, so unknown users take as
    /// long) for `client` (an IPv4 address or IPv6 /64). Errors: `Throttled` when the client
    /// already holds its share, `Busy` when the queue is full or the wait runs out.
    pub async fn verify(&self, client: &str, password: String, phc: Option<String>) -> Result<bool> {
        let _place = {
            let mut map = self.per_client.lock().unwrap_or_else(|p| p.into_inner());
            let n = map.entry(client.to_string()).or_insert(0);
            if *n >= self.max_per_client {
                return Err(Error::Throttled {
                    name: "TooManyRequests",
                    message: "too many logins in progress from this address".into(),
                    retry_after_secs: 1,
                });
            }
            *n += 1;
            ClientPlace { limiter: self, client: client.to_string() }
        };
        let place = self.places.clone().try_acquire_owned().map_err(|_| Self::busy())?;
        let slot = tokio::time::timeout(self.wait, self.slots.clone().acquire_owned())
            .await
            .map_err(|_| Self::busy())?
            .map_err(|_| Self::busy())?;
        let (running, peak) = (self.running.clone(), self.peak.clone());
        // The permits move into the blocking task: a client that disconnects mid-hash still
        // holds its slot until the hash is done, so the bound holds for the hashes themselves.
        tokio::task::spawn_blocking(move || {
            let now = running.fetch_add(1, Ordering::Relaxed) + 1;
            peak.fetch_max(now, Ordering::Relaxed);
            let ok = verify_now(&password, phc.as_deref());
            running.fetch_sub(1, Ordering::Relaxed);
            drop((slot, place));
            ok
        })
        .await
        .map_err(|e| Error::Internal(anyhow!("password hashing task: {e}")))
    }
}

/// Warms the dummy hash so the first unknown-user login is not slower than later ones.
pub fn warm_up() {
    let _ = dummy_hash();
}
