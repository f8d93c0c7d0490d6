//! One-time passwords: RFC 6238 TOTP (SHA-1, 6 digits, 30-second steps, as authenticator apps
//! expect), accepted one step either side, each step at most once per user.

use anyhow::anyhow;
use subtle::ConstantTimeEq;
use totp_rs::{Algorithm, Secret, TOTP};

use crate::{config::Environment, master_key::MasterKey, store::User, types::OtpCode};

/// Step length, seconds (RFC 6238 default).
pub const STEP: u64 = 30;
/// Code length, digits.
pub const DIGITS: usize = OtpCode::DIGITS;
/// Seed length, bytes (160 bits, RFC 4226 §4 recommendation).
pub const SEED_LEN: usize = 20;
/// The fixed code the test environment also accepts (never in production).
pub const TEST_OTP: &str = "000000";

/// The issuer shown in authenticator apps.
pub const ISSUER: &str = "Custodian";

fn totp(seed: Vec<u8>, account: &str) -> anyhow::Result<TOTP> {
    TOTP::new(Algorithm::SHA1, DIGITS, 1, STEP, seed, Some(ISSUER.into()), account.into())
        .map_err(|e| anyhow!("TOTP: {e}"))
}

/// A new random seed.
pub fn new_seed() -> Vec<u8> {
    let mut seed = vec![0u8; SEED_LEN];
    rand::RngCore::fill_bytes(&mut rand::rngs::OsRng, &mut seed);
    seed
}

/// The seed in base32 (no padding), as typed into an authenticator app.
pub fn seed_base32(seed: &[u8]) -> String {
    Secret::Raw(seed.to_vec()).to_encoded().to_string()
}

/// The `otpauth://totp/...` URI for QR codes.
pub fn otpauth_uri(seed: &[u8], email: &str) -> anyhow::Result<String> {
    Ok(totp(seed.to_vec(), email)?.get_url())
}

/// The code for Unix time `at` (seconds).
pub fn code_at(seed: &[u8], at: u64) -> anyhow::Result<String> {
    Ok(totp(seed.to_vec(), "user")?.generate(at))
}

/// Associated data binding a user's sealed seed to that user.
pub fn seed_aad(user_id: &crate::types::UserId) -> String {
    format!("totp:{user_id}")
}

/// Outcome of checking a code.
#[derive(Debug, PartialEq, Eq)]
pub enum OtpCheck {
    /// Valid; `Some(step)` must still be claimed against replay, `None` is the test code.
    Valid(Option<i64>),
    Invalid,
}

/// Checks `code` for `user` at Unix time `now`. Does not record the step: the caller claims it
/// with [`crate::store::Store::advance_totp_step`] so that the check-and-set is atomic.
pub fn check(
    key: &MasterKey,
    env: Environment,
    user: &User,
    code: &OtpCode,
    now: i64,
) -> anyhow::Result<OtpCheck> {
    let code = code.as_str();
    if env == Environment::Test && code == TEST_OTP {
        return Ok(OtpCheck::Valid(None));
    }
    let seed = key.open(&seed_aad(&user.id), &user.totp_secret_enc)?;
    let step_now = now.div_euclid(STEP as i64);
    // Newest step first, so a code valid for two steps (impossible in practice) claims the later.
    for step in [step_now + 1, step_now, step_now - 1] {
        let at = u64::try_from(step * STEP as i64).unwrap_or(0);
        let expected = code_at(&seed, at)?;
        if bool::from(expected.as_bytes().ct_eq(code.as_bytes())) {
            return Ok(OtpCheck::Valid(Some(step)));
        }
    }
    Ok(OtpCheck::Invalid)
}
