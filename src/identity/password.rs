//! Password hashing with argon2id (OWASP minimum: m = 19 MiB, t = 2, p = 1), run on a blocking
//! thread so a login never stalls the async workers, and bounded by [`HashLimiter`] so that no
//! login flood can hold more than `login.max_concurrent_hashes` x 19 MiB (docs/decisions.md#brute-force-limits).
//!
//! Verification reuses its 19 MiB working memory: the allocator would otherwise keep freed
//! blocks of that size in per-thread heaps (glibc raises its mmap threshold after the first
//! free), and a login flood grew the process to 400 MiB while never running more than two
//! hashes at once.

use crate::error::ErrorName;
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
    password_hash::{rand_core::OsRng, PasswordHash, PasswordHasher, SaltString},
    Algorithm, Argon2, Block, Params, Version,
};
use subtle::ConstantTimeEq;

/// Minimum password length, characters (docs/decisions.md#identity).
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

/// Marks a stored hash of a password's BitGo form ([`bitgo_form`]); a stored hash without it
/// is argon2id of the plain password (users made before BitGo's password form was kept, docs/decisions.md#bitgos-paths-and-password-form), upgraded at the user's next
/// plain-password login.
pub const BITGO_FORM_MARK: &str = "bitgo-hmac:";

/// How a login presents its password.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum PasswordForm {
    /// The password itself (`POST /api/v2/internal/user/login`, the CLI).
    #[default]
    Plain,
    /// BitGo's form, as BitGoJS sends it to `POST /api/auth/v1/session` ([`bitgo_form`]).
    BitGo,
}

/// BitGo's form of a password: lowercase hex HMAC-SHA256 of the password keyed with the
/// lower-cased email, which BitGoJS sends instead of the password (`calculateHMAC(email,
/// password)`).
pub fn bitgo_form(email: &str, password: &str) -> String {
    crate::digest::hmac_sha256_hex(email.to_lowercase().as_bytes(), &[password.as_bytes()])
}

/// What to store for `plain`, the password of `email`: argon2id of its BitGo form, marked, so
/// that both the plain and the BitGo form can log in.
pub fn hash_for_storage(email: &str, plain: &str) -> anyhow::Result<String> {
    Ok(format!("{BITGO_FORM_MARK}{}", hash(&bitgo_form(email, plain))?))
}

/// What a login of `email` offering `offered` in `form` is checked with: the bytes to verify,
/// the PHC string to verify them against (`None`: the dummy hash, so it fails in the usual
/// time), and whether a success should upgrade a stored hash of the plain password. A BitGo
/// form cannot be checked against such a hash: that user logs in once with the plain password
/// (or has it set again) before the SDK can.
pub fn candidate(
    email: &str,
    offered: &str,
    form: PasswordForm,
    stored: Option<&str>,
) -> (String, Option<String>, bool) {
    match (stored, form) {
        (None, _) => (offered.to_string(), None, false),
        (Some(s), form) if s.starts_with(BITGO_FORM_MARK) => {
            let phc = s[BITGO_FORM_MARK.len()..].to_string();
            let given =
                if form == PasswordForm::Plain { bitgo_form(email, offered) } else { offered.to_string() };
            (given, Some(phc), false)
        }
        (Some(s), PasswordForm::Plain) => (offered.to_string(), Some(s.to_string()), true),
        (Some(_), PasswordForm::BitGo) => (offered.to_string(), None, false),
    }
}

/// A hash of a random password, verified for unknown users so that they take as long as a
/// wrong password does.
fn dummy_hash() -> &'static str {
    static DUMMY: OnceLock<String> = OnceLock::new();
    DUMMY.get_or_init(|| hash(&crate::ids::new_id()).unwrap_or_default())
}

/// Verifies `password` against `phc` (or against a dummy hash when `phc` is `None`) on the
/// calling thread, with `memory` as argon2's working blocks (grown to the hash's `m` as needed
/// and kept for the next call). False for a mismatch, an unknown user or an unreadable hash.
fn verify_now(password: &str, phc: Option<&str>, memory: &mut Vec<Block>) -> bool {
    let known = phc.is_some();
    let phc = phc.unwrap_or_else(|| dummy_hash());
    verify_with(password.as_bytes(), phc, memory) && known
}

/// The PHC verification of `password-hash` (algorithm, version and parameters from the string,
/// constant-time comparison), computed in `memory` instead of a fresh allocation.
fn verify_with(password: &[u8], phc: &str, memory: &mut Vec<Block>) -> bool {
    let Ok(h) = PasswordHash::new(phc) else { return false };
    let (Ok(algorithm), Ok(params)) = (Algorithm::try_from(h.algorithm), Params::try_from(&h)) else {
        return false;
    };
    let version = match h.version.map(Version::try_from).transpose() {
        Ok(v) => v.unwrap_or_default(),
        Err(_) => return false,
    };
    let (Some(salt), Some(expected)) = (h.salt, h.hash) else { return false };
    let mut salt_buf = [0u8; 64];
    let Ok(salt) = salt.decode_b64(&mut salt_buf) else { return false };
    memory.resize(params.block_count(), Block::default());
    let mut out = vec![0u8; expected.len()];
    let argon2 = Argon2::new(algorithm, version, params);
    argon2.hash_password_into_with_memory(password, salt, &mut out, &mut memory[..]).is_ok()
        && bool::from(out.as_slice().ct_eq(expected.as_bytes()))
}

/// Bounds password hashing (docs/decisions.md#brute-force-limits): at most `max_concurrent_hashes` hashes run, at most
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
    /// Working memory of finished hashes, reused by the next: at most one set per slot.
    memory: Arc<Mutex<Vec<Vec<Block>>>>,
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
            memory: Arc::default(),
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

    /// Admits one login of `client` (an IPv4 address or IPv6 /64) to hashing: a place of the
    /// client's share and of the queue, taken at once without waiting. Taken before the
    /// attempt touches the database, so that a client's flood beyond its share costs no query.
    /// Errors: `Throttled` when the client already holds its share, `Busy` when the queue is
    /// full.
    pub fn admit(&self, client: &str) -> Result<Admission<'_>> {
        let place = {
            let mut map = self.per_client.lock().unwrap_or_else(|p| p.into_inner());
            let n = map.entry(client.to_string()).or_insert(0);
            if *n >= self.max_per_client {
                return Err(Error::Throttled {
                    name: ErrorName::TooManyRequests,
                    message: "too many logins in progress from this address".into(),
                    retry_after_secs: 1,
                });
            }
            *n += 1;
            ClientPlace { limiter: self, client: client.to_string() }
        };
        let queued = self.places.clone().try_acquire_owned().map_err(|_| Self::busy())?;
        Ok(Admission { limiter: self, _place: place, queued })
    }
}

/// A login admitted to password hashing ([`HashLimiter::admit`]).
pub struct Admission<'a> {
    limiter: &'a HashLimiter,
    _place: ClientPlace<'a>,
    queued: tokio::sync::OwnedSemaphorePermit,
}

impl Admission<'_> {
    /// Verifies `password` against `phc` (a dummy hash when `None`, so unknown users take as
    /// long), waiting at most `login.hash_wait_ms` for a hashing slot. Errors: `Busy` when the
    /// wait runs out.
    pub async fn verify(self, password: String, phc: Option<String>) -> Result<bool> {
        let l = self.limiter;
        let slot = tokio::time::timeout(l.wait, l.slots.clone().acquire_owned())
            .await
            .map_err(|_| HashLimiter::busy())?
            .map_err(|_| HashLimiter::busy())?;
        let (running, peak, pool) = (l.running.clone(), l.peak.clone(), l.memory.clone());
        let queued = self.queued;
        // The permits move into the blocking task: a client that disconnects mid-hash still
        // holds its slot until the hash is done, so the bound holds for the hashes themselves.
        tokio::task::spawn_blocking(move || {
            let now = running.fetch_add(1, Ordering::Relaxed) + 1;
            peak.fetch_max(now, Ordering::Relaxed);
            let mut memory = pool.lock().unwrap_or_else(|p| p.into_inner()).pop().unwrap_or_default();
            let ok = verify_now(&password, phc.as_deref(), &mut memory);
            pool.lock().unwrap_or_else(|p| p.into_inner()).push(memory);
            running.fetch_sub(1, Ordering::Relaxed);
            drop((slot, queued));
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

#[cfg(test)]
mod tests {
    use argon2::PasswordVerifier;

    use super::*;

    #[test]
    fn reused_memory_verifies_exactly_as_the_library_does() {
        let phc = hash("correct horse battery staple").expect("hash");
        let mut memory = Vec::new();
        assert!(verify_with(b"correct horse battery staple", &phc, &mut memory));
        assert_eq!(memory.len(), 19 * 1024, "19 MiB of 1 KiB blocks, kept for the next call");
        assert!(!verify_with(b"correct horse battery stapler", &phc, &mut memory));
        assert!(verify_with(b"correct horse battery staple", &phc, &mut memory), "after reuse");
        let parsed = PasswordHash::new(&phc).expect("phc");
        assert!(argon2().verify_password(b"correct horse battery staple", &parsed).is_ok());
        assert!(!verify_with(b"x", "not a phc string", &mut memory));
        assert!(!verify_now("correct horse battery staple", None, &mut memory), "unknown user");
    }

    /// BitGoJS's `calculateHMAC(lowerName, password)`, value computed with Node's crypto.
    #[test]
    fn bitgo_form_matches_the_sdk() {
        assert_eq!(
            bitgo_form("Alice@Example.com", "correct horse battery staple"),
            bitgo_form("alice@example.com", "correct horse battery staple"),
            "keyed with the lower-cased email"
        );
        assert_eq!(
            bitgo_form("alice@example.com", "correct horse battery staple"),
            "f4ce0d4c6124b30c0b29b08256defc282917a7e18f91f7a1f7f8273bc50f48ce"
        );
    }

    #[test]
    fn both_forms_verify_against_a_stored_form_and_only_plain_against_a_legacy_hash() {
        let (email, pw) = ("a@example.com", "correct horse battery staple");
        let stored = hash_for_storage(email, pw).expect("hash");
        let mut memory = Vec::new();
        for (offered, form) in
            [(pw.to_string(), PasswordForm::Plain), (bitgo_form(email, pw), PasswordForm::BitGo)]
        {
            let (given, phc, upgrade) = candidate(email, &offered, form, Some(&stored));
            assert!(verify_now(&given, phc.as_deref(), &mut memory), "{form:?}");
            assert!(!upgrade);
        }
        let legacy = hash(pw).expect("hash");
        let (given, phc, upgrade) = candidate(email, pw, PasswordForm::Plain, Some(&legacy));
        assert!(
            verify_now(&given, phc.as_deref(), &mut memory) && upgrade,
            "plain against legacy, then upgraded"
        );
        let (given, phc, _) = candidate(email, &bitgo_form(email, pw), PasswordForm::BitGo, Some(&legacy));
        assert!(
            !verify_now(&given, phc.as_deref(), &mut memory),
            "the form cannot be checked against a legacy hash"
        );
    }
}
