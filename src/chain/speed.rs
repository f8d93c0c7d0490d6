//! How fast a watcher goes: blocks processed per second, stored with the chain's status for
//! `/health`, `custodian chain status` and the console's Chains page.

use std::time::{Duration, Instant};

/// Blocks processed per second, for `/health` and the console: measured between two rounds at
/// least [`Speed::EVERY`] apart.
#[derive(Default)]
pub struct Speed {
    /// When and at which checkpoint it was last measured.
    from: Option<(Instant, u64)>,
}

impl Speed {
    pub const EVERY: Duration = Duration::from_secs(5);

    /// Blocks per second since the last measure, when [`Self::EVERY`] has passed; the
    /// checkpoint is at `height` now.
    pub fn measure(&mut self, height: Option<u64>) -> Option<f64> {
        let height = height?;
        let now = Instant::now();
        let Some((since, from)) = self.from else {
            self.from = Some((now, height));
            return None;
        };
        let secs = now.duration_since(since).as_secs_f64();
        if secs < Self::EVERY.as_secs_f64() {
            return None;
        }
        self.from = Some((now, height));
        Some(height.saturating_sub(from) as f64 / secs)
    }
}
