//! Password hashing with argon2id (OWASP minimum: m = 19 MiB, t = 2, p = 1), run on a blocking
//! thread so a login never stalls the async workers.

use std::sync::OnceLock;

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

/// Verifies `password` against `phc` (or against a dummy hash when `phc` is `None`), off the
/// async threads. Returns false for a mismatch, an unknown user or an unreadable hash.
pub async fn verify(password: String, phc: Option<String>) -> bool {
    tokio::task::spawn_blocking(move || {
        let known = phc.is_some();
        let phc = phc.unwrap_or_else(|| dummy_hash().to_string());
        let ok = PasswordHash::new(&phc)
            .map(|h| argon2().verify_password(password.as_bytes(), &h).is_ok())
            .unwrap_or(false);
        ok && known
    })
    .await
    .unwrap_or(false)
}

/// Warms the dummy hash so the first unknown-user login is not slower than later ones.
pub fn warm_up() {
    let _ = dummy_hash();
}
