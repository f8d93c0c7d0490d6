//! New identifiers (32 lowercase hex characters, spec §2, from a CSPRNG) and times.

use rand::RngCore;

pub use crate::types::{is_coin, is_id};

/// A new random id of 32 lowercase hex characters (128 bits), from the thread's CSPRNG
/// (ChaCha, seeded and reseeded from the OS): no system call per id, which request ids and
/// notification ids would otherwise pay (issue 12 §4). Secrets use the OS CSPRNG directly.
pub fn new_id() -> String {
    let mut b = [0u8; 16];
    rand::thread_rng().fill_bytes(&mut b);
    hex::encode(b)
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
