//! Identifiers: 32 lowercase hex characters (spec §2), from the OS CSPRNG.

use rand::{rngs::OsRng, RngCore};

/// A new random id of 32 lowercase hex characters (128 bits).
pub fn new_id() -> String {
    let mut b = [0u8; 16];
    OsRng.fill_bytes(&mut b);
    hex::encode(b)
}

/// True when `s` matches `^[0-9a-f]{32}$` (spec §2).
pub fn is_id(s: &str) -> bool {
    s.len() == 32 && s.bytes().all(|c| c.is_ascii_digit() || (b'a'..=b'f').contains(&c))
}

/// Current time as Unix seconds.
pub fn now() -> i64 {
    chrono::Utc::now().timestamp()
}

/// Unix seconds as an ISO 8601 / RFC 3339 UTC string (`2026-01-02T03:04:05.000Z`).
pub fn iso(ts: i64) -> String {
    chrono::DateTime::from_timestamp(ts, 0)
        .unwrap_or_default()
        .to_rfc3339_opts(chrono::SecondsFormat::Millis, true)
}

/// True for a coin symbol or token ticker (spec §1: lower case): 1 to 40 characters of
/// `a-z 0-9 : _ -`, starting with a letter or digit (e.g. `btc`, `teth`, `ofcbtc`, `eth:usdc`).
pub fn is_coin(s: &str) -> bool {
    let b = s.as_bytes();
    !b.is_empty()
        && b.len() <= 40
        && b[0].is_ascii_alphanumeric()
        && b.iter().all(|c| c.is_ascii_digit() || c.is_ascii_lowercase() || matches!(c, b':' | b'_' | b'-'))
}

/// True for a non-negative integer in base units written as decimal digits.
pub fn is_base_units(s: &str) -> bool {
    !s.is_empty() && s.len() <= 100 && s.bytes().all(|c| c.is_ascii_digit())
}

/// Current time as Unix milliseconds.
pub fn now_ms() -> i64 {
    chrono::Utc::now().timestamp_millis()
}

/// Unix milliseconds as an ISO 8601 / RFC 3339 UTC string.
pub fn iso_ms(ms: i64) -> String {
    chrono::DateTime::from_timestamp_millis(ms)
        .unwrap_or_default()
        .to_rfc3339_opts(chrono::SecondsFormat::Millis, true)
}
