//! Time as the service reads it. [`Clock`] is the real clock, which a test moves forward to
//! reach an expiry (a code's, an unlock's, a lease's, a retry's, a retention's) without
//! sleeping. Each process has one, held by its store handle (`store::Store::clock`), so the
//! domain and the store read the same time; nothing else reads the system clock but
//! [`wall_now_ms`], for what peers check against their own clocks.

use std::sync::{
    atomic::{AtomicI64, Ordering},
    Arc,
};

/// The real clock plus an offset that only tests set ([`Clock::advance`]). Cheap to clone:
/// clones share the offset.
#[derive(Debug, Clone, Default)]
pub struct Clock {
    offset_ms: Arc<AtomicI64>,
}

impl Clock {
    /// Unix seconds.
    pub fn now(&self) -> i64 {
        self.now_ms().div_euclid(1000)
    }

    /// Unix milliseconds.
    pub fn now_ms(&self) -> i64 {
        wall_now_ms().saturating_add(self.offset_ms.load(Ordering::Relaxed))
    }

    /// Moves this clock (and its clones) forward by `by`: for tests, which reach an expiry so
    /// instead of sleeping. The system clock is untouched.
    pub fn advance(&self, by: std::time::Duration) {
        let ms = i64::try_from(by.as_millis()).unwrap_or(i64::MAX);
        self.offset_ms.fetch_add(ms, Ordering::Relaxed);
    }
}

/// The system clock, Unix milliseconds: only for times a peer checks against its own clock
/// (a signed response's or notification's timestamp, a sequential id's prefix) and records
/// whose time no test moves (an audit entry's date).
pub fn wall_now_ms() -> i64 {
    chrono::Utc::now().timestamp_millis()
}

/// [`wall_now_ms`] in Unix seconds.
pub fn wall_now() -> i64 {
    wall_now_ms().div_euclid(1000)
}

/// Unix seconds of an RFC 3339 time (`2026-01-02T03:04:05Z`), `None` when it is not one.
pub fn parse_iso(text: &str) -> Option<i64> {
    chrono::DateTime::parse_from_rfc3339(text).ok().map(|t| t.timestamp())
}

/// Unix seconds as an ISO 8601 / RFC 3339 UTC string (`2026-01-02T03:04:05.000Z`).
pub fn iso(ts: i64) -> String {
    chrono::DateTime::from_timestamp(ts, 0)
        .unwrap_or_default()
        .to_rfc3339_opts(chrono::SecondsFormat::Millis, true)
}

/// Unix milliseconds as an ISO 8601 / RFC 3339 UTC string.
pub fn iso_ms(ms: i64) -> String {
    chrono::DateTime::from_timestamp_millis(ms)
        .unwrap_or_default()
        .to_rfc3339_opts(chrono::SecondsFormat::Millis, true)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_clock_moves_forward_with_its_clones_and_the_wall_does_not() {
        let clock = Clock::default();
        let other = clock.clone();
        let before = clock.now();
        clock.advance(std::time::Duration::from_secs(3600));
        assert!(other.now() >= before + 3600);
        assert!(wall_now() < before + 3600);
        assert_eq!(iso(0), "1970-01-01T00:00:00.000Z");
    }
}
