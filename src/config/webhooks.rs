//! Webhook registration and operation limits: `[webhooks]`.

use serde::{Deserialize, Serialize};

use super::de_string_list;

/// Webhook operation limits (docs/decisions.md#webhook-abuse-and-the-api-rate-limit).
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct WebhooksConfig {
    /// Simulate, resend and unblock calls allowed per webhook and minute, per process.
    pub operations_per_minute: u32,
    /// Block webhooks one user may hold, all coins together.
    pub max_per_user: u32,
    /// Webhooks of every level signed by one enterprise (its wallets', its own, and block
    /// webhooks bound to it).
    pub max_per_enterprise: u32,
    /// Notifications kept for one suspended webhook until it is unblocked; beyond, new ones are
    /// refused (audited, counted) rather than stored (docs/decisions.md#faults-and-floods).
    pub max_held: u64,
    /// Most failed notifications one recover queues again (docs/decisions.md#the-operator-console); a larger backlog
    /// takes several recovers.
    pub recover_max: u32,
    /// Coin symbols a block webhook may name (a TOML array or one comma-separated string).
    #[serde(deserialize_with = "de_string_list")]
    pub coins: Vec<String>,
}

/// Coins a block webhook may name by default: the coins of examples/wallets.json and BitGo's
/// common main and test network symbols.
pub const DEFAULT_BLOCK_WEBHOOK_COINS: &[&str] = &[
    "ada",
    "algo",
    "apt",
    "arbeth",
    "atom",
    "avaxc",
    "avaxp",
    "baseeth",
    "bch",
    "bld",
    "bsc",
    "bsv",
    "btc",
    "btg",
    "celo",
    "coreum",
    "dash",
    "doge",
    "dot",
    "eos",
    "eth",
    "hash",
    "hbar",
    "hteth",
    "injective",
    "ltc",
    "near",
    "ofc",
    "opeth",
    "osmo",
    "polygon",
    "sei",
    "sol",
    "stx",
    "sui",
    "tada",
    "talgo",
    "tapt",
    "tarbeth",
    "tatom",
    "tavaxc",
    "tavaxp",
    "tbaseeth",
    "tbch",
    "tbld",
    "tbsc",
    "tbsv",
    "tbtc",
    "tbtc4",
    "tbtcsig",
    "tcelo",
    "tcoreum",
    "tdash",
    "tdoge",
    "tdot",
    "teos",
    "teth",
    "thash",
    "thbar",
    "tia",
    "tinjective",
    "tltc",
    "tnear",
    "ton",
    "topeth",
    "tosmo",
    "tpolygon",
    "trx",
    "tsei",
    "tsol",
    "tstx",
    "tsui",
    "ttia",
    "tton",
    "ttrx",
    "txlm",
    "txrp",
    "txtz",
    "tzec",
    "xlm",
    "xrp",
    "xtz",
    "zec",
];

impl Default for WebhooksConfig {
    fn default() -> Self {
        Self {
            operations_per_minute: 10,
            max_per_user: 100,
            max_per_enterprise: 1_000,
            max_held: 10_000,
            recover_max: 10_000,
            coins: DEFAULT_BLOCK_WEBHOOK_COINS.iter().map(|c| c.to_string()).collect(),
        }
    }
}
