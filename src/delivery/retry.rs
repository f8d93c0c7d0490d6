//! The retry schedule (docs/decisions.md#webhooks): BitGo's delays (1, 5, 10, 30, 60, 120, 240 minutes by
//! default, `delivery.retry_schedule`), each with +-20% jitter; a `Retry-After` answer sets the
//! delay instead, clamped to 1x..2x the scheduled one.

use std::time::Duration;

use rand::Rng;

/// The delay before the next attempt after the failed attempt number `failed_before + 1`, or
/// `None` when the schedule is exhausted (the notification fails).
pub fn next_delay(schedule: &[u64], failed_before: usize, retry_after: Option<Duration>) -> Option<Duration> {
    let base = Duration::from_secs(*schedule.get(failed_before)?);
    Some(match retry_after {
        Some(r) => r.clamp(base, base * 2),
        None => base.mul_f64(rand::thread_rng().gen_range(0.8..=1.2)),
    })
}

/// Parses `Retry-After`: delay-seconds or an HTTP-date (RFC 9110 §10.2.3).
pub fn parse_retry_after(value: &str, now: chrono::DateTime<chrono::Utc>) -> Option<Duration> {
    let v = value.trim();
    if let Ok(secs) = v.parse::<u64>() {
        return Some(Duration::from_secs(secs));
    }
    let at = chrono::DateTime::parse_from_rfc2822(v).ok()?;
    Some((at.with_timezone(&chrono::Utc) - now).to_std().unwrap_or_default())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn schedule_jitter_and_retry_after() {
        let s = [60, 300];
        for _ in 0..100 {
            let d = next_delay(&s, 0, None).unwrap_or_default().as_secs_f64();
            assert!((48.0..=72.0).contains(&d), "{d}");
        }
        assert_eq!(next_delay(&s, 1, Some(Duration::from_secs(10))), Some(Duration::from_secs(300)));
        assert_eq!(next_delay(&s, 1, Some(Duration::from_secs(450))), Some(Duration::from_secs(450)));
        assert_eq!(next_delay(&s, 1, Some(Duration::from_secs(9999))), Some(Duration::from_secs(600)));
        assert_eq!(next_delay(&s, 2, None), None);
    }

    #[test]
    fn retry_after_forms() {
        let now = chrono::DateTime::parse_from_rfc3339("2015-10-21T07:28:00Z")
            .map(|d| d.to_utc())
            .unwrap_or_default();
        assert_eq!(parse_retry_after("120", now), Some(Duration::from_secs(120)));
        assert_eq!(parse_retry_after("Wed, 21 Oct 2015 07:28:30 GMT", now), Some(Duration::from_secs(30)));
        assert_eq!(parse_retry_after("soon", now), None);
    }
}
