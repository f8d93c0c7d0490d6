//! Prometheus metrics: HTTP requests by route, deliveries by outcome, attempt latency, and
//! gauges read from the store at scrape time. Served by `http::metrics` (GET /metrics); this
//! module names no HTTP type, so the engine and the HTTP layer both count into it.

use prometheus_client::{
    encoding::{text::encode, EncodeLabelSet},
    metrics::{
        counter::Counter,
        family::Family,
        gauge::Gauge,
        histogram::{exponential_buckets, Histogram},
    },
    registry::Registry,
};

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct RouteLabels {
    pub method: &'static str,
    pub route: String,
    pub status: u16,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct RefusalLabels {
    /// `process` (`connections.max`) or `address` (`connections.max_per_address`).
    pub limit: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct OutcomeLabels {
    /// `delivered`, `retry`, `failed` or `refused`.
    pub outcome: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ChainLabels {
    /// The chain coin (`hteth`).
    pub coin: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct LimiterLabels {
    /// `api`, `api_admin` or `webhook_operations`.
    pub limiter: &'static str,
    /// `allowed`, `throttled`, `unavailable` (refused: the shared buckets could not be reached)
    /// or `fallback` (a read counted in this process's bucket meanwhile).
    pub outcome: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct LimiterOnly {
    pub limiter: &'static str,
}

/// The rate limiters' metrics (docs/decisions.md#limits-shared-across-processes).
#[derive(Default)]
pub struct LimiterMetrics {
    pub checks: Family<LimiterLabels, Counter>,
    /// Reservations from the shared buckets (one database statement each).
    pub reservations: Family<LimiterOnly, Counter>,
    /// Reserved tokens given back unspent.
    pub refunded: Family<LimiterOnly, Counter>,
}

impl LimiterMetrics {
    fn register(&self, registry: &mut Registry) {
        registry.register(
            "rate_limit_checks",
            "Requests counted by a rate limiter, by outcome",
            self.checks.clone(),
        );
        registry.register(
            "rate_limit_reservations",
            "Token reservations from the shared buckets (one database statement each)",
            self.reservations.clone(),
        );
        registry.register(
            "rate_limit_tokens_refunded",
            "Reserved tokens given back to the shared buckets unspent",
            self.refunded.clone(),
        );
    }
}

/// The chain watcher's metrics (docs/chains.md).
#[derive(Default)]
pub struct ChainMetrics {
    /// Blocks between the node's head and the checkpoint.
    pub lag: Family<ChainLabels, Gauge>,
    pub blocks: Family<ChainLabels, Counter>,
    /// Rounds that failed (node or database away, a garbled answer).
    pub errors: Family<ChainLabels, Counter>,
    /// Reorgs deeper than `reorg_depth`: the watcher stopped.
    pub deep_reorgs: Family<ChainLabels, Counter>,
    /// Pending-pool answers over `pool_max_bytes`, dropped unread.
    pub pool_dropped: Family<ChainLabels, Counter>,
    /// Transfers new to the pending pool left for a later round by `pool_max_new`.
    pub pool_deferred: Family<ChainLabels, Counter>,
    /// Times the node answered a chain id other than the configured one.
    pub wrong_chain: Family<ChainLabels, Counter>,
}

impl ChainMetrics {
    fn register(&self, registry: &mut Registry) {
        registry.register(
            "chain_head_lag_blocks",
            "Blocks the chain watcher is behind the node's head",
            self.lag.clone(),
        );
        registry.register("chain_blocks", "Blocks the chain watcher processed", self.blocks.clone());
        registry.register("chain_errors", "Chain watcher rounds that failed", self.errors.clone());
        registry.register(
            "chain_deep_reorgs",
            "Reorgs deeper than reorg_depth (the watcher stopped)",
            self.deep_reorgs.clone(),
        );
        registry.register(
            "chain_pool_dropped",
            "Pending-pool answers over pool_max_bytes, dropped unread",
            self.pool_dropped.clone(),
        );
        registry.register(
            "chain_pool_deferred",
            "Transfers new to the pending pool left for a later round (pool_max_new)",
            self.pool_deferred.clone(),
        );
        registry.register(
            "chain_wrong_chain",
            "Times the node answered a chain id other than the configured one",
            self.wrong_chain.clone(),
        );
    }
}

fn latency_histogram() -> Histogram {
    // 0.5 ms to ~16 s.
    Histogram::new(exponential_buckets(0.0005, 2.0, 16))
}

/// Every metric of the process.
pub struct Metrics {
    registry: Registry,
    pub http_requests: Family<RouteLabels, Counter>,
    pub http_latency: Family<RouteLabels, Histogram, fn() -> Histogram>,
    pub deliveries: Family<OutcomeLabels, Counter>,
    pub attempt_latency: Histogram,
    pub due: Gauge,
    pub in_flight: Gauge,
    pub suspended: Gauge,
    /// Notifications ingestion handed straight to this process's engine, and those the
    /// engine claimed from the outbox (docs/decisions.md#performance).
    pub handed: Counter,
    pub claimed: Counter,
    /// Claim queries the engine ran, and the seconds they took: what a backlog costs to
    /// look past (docs/decisions.md#performance-as-the-data-grows).
    pub claims: Counter,
    pub claim_seconds: Counter<f64, std::sync::atomic::AtomicU64>,
    /// Notifications kept for suspended webhooks, and those refused past `webhooks.max_held`
    /// (docs/decisions.md#faults-and-floods).
    pub held: Gauge,
    pub refused: Counter,
    /// Password hashes running now, and the most ever at once (docs/decisions.md#brute-force-limits).
    pub hashes_running: Gauge,
    pub hashes_peak: Gauge,
    /// Inbound connections open now, and those refused at a cap (docs/decisions.md#connections-and-database-outages).
    pub connections_open: Gauge,
    pub connections_refused: Family<RefusalLabels, Counter>,
    pub chain: ChainMetrics,
    pub limiters: LimiterMetrics,
    pub custody: CustodyMetrics,
}

/// The signer's counts (docs/withdrawals.md).
#[derive(Default)]
pub struct CustodyMetrics {
    /// Signatures a key store gave that did not verify against the key (never used).
    pub unverified: Counter,
    /// Withdrawals signed, and raw transactions sent (resends included).
    pub signed: Counter,
    pub broadcasts: Counter,
    /// Stuck transactions replaced with higher fees, and replacements the fee cap held back.
    pub replacements: Counter,
    pub at_fee_cap: Counter,
    /// First transactions the node held queued though they were next, replaced early
    /// (`withdrawals.queued_after`); each is in `replacements` too.
    pub held_queued: Counter,
    /// The signer's rounds that ran to the end.
    pub rounds: Counter,
    /// The most withdrawals one signer round had in flight at once (its last round that
    /// signed any), at most `withdrawals.signer_concurrency`.
    pub concurrency_peak: Gauge,
    /// Rounds skipped because the chain's signer lease is held elsewhere or could not be renewed.
    pub rounds_held_back: Counter,
    /// The widest nonce gap of a signing address at the last round (0: none).
    pub nonce_gap: Gauge,
    /// Signed withdrawals and nonce fills the node refused as underpriced, signed again over the
    /// base fee.
    pub repriced: Counter,
    /// Nonce gaps filled: zero-value transactions from a signing address to itself.
    pub nonce_fills: Counter,
    /// New withdrawals the signer held back before their nonce: the wallet's confirmed balance,
    /// less what is ahead of them, no longer pays them.
    pub held_for_funds: Counter,
}

impl CustodyMetrics {
    fn register(&self, registry: &mut Registry) {
        registry.register(
            "custody_signatures_unverified",
            "Signatures from the key store that did not verify against the key's public key (made again, never sent)",
            self.unverified.clone(),
        );
        registry.register("custody_withdrawals_signed", "Withdrawals signed", self.signed.clone());
        registry.register(
            "custody_broadcasts",
            "Raw transactions sent to the node, resends included",
            self.broadcasts.clone(),
        );
        registry.register("custody_signer_rounds", "Signer rounds that ran to the end", self.rounds.clone());
        registry.register(
            "custody_signer_concurrency_peak",
            "The most withdrawals the signer's last round that signed any had in flight at once",
            self.concurrency_peak.clone(),
        );
        registry.register(
            "custody_signer_rounds_held_back",
            "Signer rounds skipped because the chain's signer lease is held elsewhere or could not be renewed",
            self.rounds_held_back.clone(),
        );
        registry.register(
            "custody_nonce_gap",
            "Nonces reserved for an address but neither with the node nor on their way (the widest, last round)",
            self.nonce_gap.clone(),
        );
        registry.register(
            "custody_replacements",
            "Stuck withdrawals replaced at the same nonce with higher fees",
            self.replacements.clone(),
        );
        registry.register(
            "custody_replacements_at_fee_cap",
            "Replacements not made because withdrawals.max_fee_per_gas holds the fees below the node's bump",
            self.at_fee_cap.clone(),
        );
        registry.register(
            "custody_repriced",
            "Signed withdrawals and nonce fills the node refused as underpriced, signed again at their nonce over the next base fee",
            self.repriced.clone(),
        );
        registry.register(
            "custody_nonce_fills",
            "Nonce gaps filled with a zero-value transaction from the signing address to itself",
            self.nonce_fills.clone(),
        );
        registry.register(
            "custody_held_for_funds",
            "Approved withdrawals held before their nonce: the confirmed balance less what is ahead no longer pays them",
            self.held_for_funds.clone(),
        );
        registry.register(
            "custody_held_queued",
            "Withdrawals the node held queued though they were next, replaced after withdrawals.queued_after",
            self.held_queued.clone(),
        );
    }
}

impl Default for Metrics {
    // Long: one registration per metric, in the order of the struct, read top to bottom.
    fn default() -> Self {
        let mut registry = Registry::with_prefix("custodian");
        let http_requests = Family::<RouteLabels, Counter>::default();
        let http_latency =
            Family::<RouteLabels, Histogram, fn() -> Histogram>::new_with_constructor(latency_histogram);
        let deliveries = Family::<OutcomeLabels, Counter>::default();
        let attempt_latency = latency_histogram();
        let (due, in_flight, suspended) = (Gauge::default(), Gauge::default(), Gauge::default());
        registry.register("http_requests", "HTTP requests by route and status", http_requests.clone());
        registry.register("http_request_duration_seconds", "HTTP request latency", http_latency.clone());
        registry.register("webhook_deliveries", "Delivery attempts by outcome", deliveries.clone());
        registry.register(
            "webhook_attempt_duration_seconds",
            "Delivery attempt latency",
            attempt_latency.clone(),
        );
        registry.register("webhook_notifications_due", "Notifications due and not leased", due.clone());
        registry.register(
            "webhook_notifications_in_flight",
            "Notifications leased by a worker",
            in_flight.clone(),
        );
        registry.register("webhooks_suspended", "Webhooks suspended after failures", suspended.clone());
        let (handed, claimed) = (Counter::default(), Counter::default());
        registry.register(
            "webhook_notifications_handed",
            "Notifications handed by ingestion straight to this process's engine",
            handed.clone(),
        );
        registry.register(
            "webhook_notifications_claimed",
            "Notifications this process's engine claimed from the outbox",
            claimed.clone(),
        );
        let (claims, claim_seconds) =
            (Counter::default(), Counter::<f64, std::sync::atomic::AtomicU64>::default());
        registry.register("webhook_claims", "Claim queries this process's engine ran", claims.clone());
        registry.register(
            "webhook_claim_seconds",
            "Seconds this process's engine spent in claim queries",
            claim_seconds.clone(),
        );
        let (held, refused) = (Gauge::default(), Counter::default());
        registry.register(
            "webhook_notifications_held",
            "Notifications kept for suspended webhooks until they are unblocked",
            held.clone(),
        );
        registry.register(
            "webhook_notifications_refused",
            "Notifications refused because their suspended webhook already held webhooks.max_held",
            refused.clone(),
        );
        let (hashes_running, hashes_peak) = (Gauge::default(), Gauge::default());
        registry.register("login_hashes_running", "Password hashes running now", hashes_running.clone());
        registry.register(
            "login_hashes_peak",
            "Most password hashes ever running at once",
            hashes_peak.clone(),
        );
        let connections_open = Gauge::default();
        let connections_refused = Family::<RefusalLabels, Counter>::default();
        registry.register("http_connections_open", "Inbound connections open now", connections_open.clone());
        registry.register(
            "http_connections_refused",
            "Inbound connections refused at connections.max (process) or connections.max_per_address (address)",
            connections_refused.clone(),
        );
        let chain = ChainMetrics::default();
        chain.register(&mut registry);
        let limiters = LimiterMetrics::default();
        limiters.register(&mut registry);
        let custody = CustodyMetrics::default();
        custody.register(&mut registry);
        Self {
            custody,
            registry,
            chain,
            limiters,
            http_requests,
            http_latency,
            deliveries,
            attempt_latency,
            due,
            in_flight,
            suspended,
            handed,
            claimed,
            claims,
            claim_seconds,
            held,
            refused,
            hashes_running,
            hashes_peak,
            connections_open,
            connections_refused,
        }
    }
}

impl Metrics {
    /// Counts one delivery attempt.
    pub fn delivery(&self, outcome: &str, seconds: f64) {
        self.deliveries.get_or_create(&OutcomeLabels { outcome: outcome.into() }).inc();
        self.attempt_latency.observe(seconds);
    }
}

impl Metrics {
    /// The registry in the OpenMetrics text format.
    pub fn encode(&self) -> Result<String, std::fmt::Error> {
        let mut body = String::new();
        encode(&mut body, &self.registry)?;
        Ok(body)
    }

    /// Counts a request of `method` on `route` that answered `status` after `seconds`.
    pub fn request(&self, method: &'static str, route: String, status: u16, seconds: f64) {
        let labels = RouteLabels { method, route, status };
        self.http_requests.get_or_create(&labels).inc();
        self.http_latency.get_or_create(&labels).observe(seconds);
    }
}
