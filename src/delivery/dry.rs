//! What the last short claim proved (docs/decisions.md#performance-as-the-data-grows: the backlog drain).
//!
//! A claim that comes back with fewer notifications than it asked for, skipping the webhooks
//! and tenants at their share (`Saturated`), shows that nothing else was due at that moment.
//! Until notifications are made due for a claim ([`Fresh`]) or a poll interval passes
//! (retries coming due, leases running out, other processes), a claim skipping at least as
//! much can only find nothing: claims since then only took rows. Without this, while a
//! saturated tenant's backlog drained, every wake-up (each batch of outcomes) walked that whole
//! backlog in the claimable index to find nothing, holding the outbox's writes meanwhile.

use std::time::Duration;

use tokio::time::Instant;

use super::handoff::Fresh;
use crate::store::Saturated;

/// The last short claim: whom it skipped, and when. See the module documentation.
#[derive(Debug, Default)]
pub(super) struct DryClaims(Option<(Saturated, Instant)>);

impl DryClaims {
    /// Whether a claim skipping `skip` at `now` could find anything, given what was made due
    /// since the last call (`fresh`) and the engine's poll interval.
    pub(super) fn worth(&mut self, skip: &Saturated, fresh: Fresh, poll: Duration, now: Instant) -> bool {
        match fresh {
            Fresh::Nothing => {}
            // Only these webhooks' rows are new: the memo still holds for everyone else.
            Fresh::Of(ws) => {
                if let Some((last, _)) = self.0.as_mut() {
                    for w in ws {
                        if !last.webhooks.contains(&w) {
                            last.webhooks.push(w);
                        }
                    }
                }
            }
            Fresh::Anyone => self.0 = None,
        }
        match &self.0 {
            Some((last, at)) => now.duration_since(*at) >= poll || !last.within(skip),
            None => true,
        }
    }

    /// Notes a claim at `now` skipping `skip` that came back `full` or short. A full claim
    /// changes nothing: it only took rows, so what an earlier short claim showed stays true.
    pub(super) fn note(&mut self, skip: Saturated, full: bool, now: Instant) {
        if !full {
            self.0 = Some((skip, now));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::types::WebhookId;

    fn hook(n: u8) -> WebhookId {
        format!("{n:032x}").parse().expect("a webhook id")
    }

    fn skipping(hooks: &[u8]) -> Saturated {
        Saturated { webhooks: hooks.iter().map(|n| hook(*n)).collect(), ..Saturated::default() }
    }

    const POLL: Duration = Duration::from_millis(250);

    #[test]
    fn a_short_claim_stops_claims_that_skip_as_much_until_something_changes() {
        let t0 = Instant::now();
        let mut dry = DryClaims::default();
        assert!(dry.worth(&skipping(&[1]), Fresh::Nothing, POLL, t0), "nothing known yet");
        dry.note(skipping(&[1]), false, t0);
        let soon = t0 + Duration::from_millis(10);
        assert!(!dry.worth(&skipping(&[1]), Fresh::Nothing, POLL, soon), "the same skip finds nothing");
        assert!(!dry.worth(&skipping(&[1, 2]), Fresh::Nothing, POLL, soon), "nor skipping more");
        assert!(dry.worth(&skipping(&[]), Fresh::Nothing, POLL, soon), "skipping less may find 1's rows");
        assert!(dry.worth(&skipping(&[1]), Fresh::Nothing, POLL, t0 + POLL), "a poll interval later");
        // A full claim only took rows: the memo stands.
        dry.note(skipping(&[]), true, soon);
        assert!(!dry.worth(&skipping(&[1]), Fresh::Nothing, POLL, soon));
        // Anyone's rows made due: claim.
        assert!(dry.worth(&skipping(&[1]), Fresh::Anyone, POLL, soon));
        assert!(dry.worth(&skipping(&[1]), Fresh::Nothing, POLL, soon), "the memo is gone");
    }

    #[test]
    fn rows_made_due_for_one_webhook_matter_only_to_claims_that_do_not_skip_it() {
        let t0 = Instant::now();
        let mut dry = DryClaims::default();
        dry.note(skipping(&[]), false, t0);
        let soon = t0 + Duration::from_millis(10);
        assert!(!dry.worth(&skipping(&[1]), Fresh::Of(vec![hook(1)]), POLL, soon), "1 is skipped anyway");
        assert!(!dry.worth(&skipping(&[1]), Fresh::Nothing, POLL, soon));
        // Once 1 is no longer skipped its released rows must be claimed, though nothing is
        // fresh any more.
        assert!(dry.worth(&skipping(&[]), Fresh::Nothing, POLL, soon));
        assert!(dry.worth(&skipping(&[2]), Fresh::Of(vec![hook(1)]), POLL, soon));
    }
}
