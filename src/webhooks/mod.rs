//! Webhooks (spec §4.4 to §4.10, §2.5 to §2.7, §6, §8): registration at wallet, block and
//! enterprise level ([`registration`]), who may manage them ([`access`]), simulation
//! ([`simulate`]), secrets and verification ([`secrets`]), event fan-out ([`events`]), the
//! operator's views ([`operator`]); notifications, their signatures and custom headers are built by [`crate::notifications`]. The HTTP shapes are
//! in `http/handlers/webhooks.rs`.
//!
//! Layer rule: no web-framework types and nothing of the HTTP layer (docs/architecture.md).

use crate::error::ErrorName;
use std::sync::Arc;

use serde_json::json;

use crate::{
    config::Config,
    error::{Error, Result},
    identity::scopes::Policy,
    master_key::MasterKey,
    notifications::dispatch::Dispatch,
    store::DynStore,
    wallets::Wallets,
};

pub mod access;
pub mod callback_url;
pub mod event;
pub mod event_fields;
pub mod events;
pub mod limits;
pub mod notification_log;
pub mod registration;
pub mod search;
pub mod secret;
pub mod simulate;

/// The handles the webhook functions use (docs/decisions.md#architecture); cheap to clone.
#[derive(Clone)]
pub struct Webhooks {
    pub store: DynStore,
    pub config: Arc<Config>,
    /// Seals webhook secrets and custom header values.
    pub key: Arc<MasterKey>,
    pub policy: Policy,
    /// Bounds simulate, resend and unblock per webhook (`webhooks.operations_per_minute`).
    pub operations: Arc<limits::OperationLimiter>,
    /// Decrypted webhook secrets, briefly cached.
    pub secrets: Arc<crate::notifications::secret_cache::SecretCache>,
    /// Who may see a wallet (wallet-level webhooks).
    pub wallets: Wallets,
    /// Leases fresh notifications to delivery and wakes it.
    pub dispatch: Arc<dyn Dispatch>,
    /// Counts notifications refused for a suspended webhook at its cap.
    pub metrics: Arc<crate::metrics::Metrics>,
    /// Refusals already recorded in the audit log this minute.
    pub refusal_notes: Arc<crate::identity::throttle::ThrottleNotes>,
    /// Suspended webhooks' held counts, briefly remembered.
    pub held: Arc<limits::HeldCounts>,
}

pub use crate::notifications::headers::{
    check_headers, MAX_CUSTOM_HEADERS, MAX_HEADER_VALUE_BYTES, RESERVED_HEADERS,
};
pub use callback_url::{check_url, MAX_URL_LEN};

/// Wallet webhook types (§6.1).
pub const WALLET_TYPES: &[&str] = &[
    "address_confirmation",
    "admin",
    "circuitBreaker",
    "lowFee",
    "lowFeeAddressBalance",
    "pendingapproval",
    "transaction",
    "transactionExpire",
    "transactionRemoved",
    "transaction_finality_on_l1",
    "transfer",
    "txRequest",
    "txRequestTransaction",
];
/// Block webhook types (§6.2).
pub const BLOCK_TYPES: &[&str] = &["block", "wallet_confirmation"];
/// Enterprise webhook types (§6.3), and `pendingapproval` for changes to the enterprise's policy
/// rules (docs/policy.md#enterprise-rules).
pub const ENTERPRISE_TYPES: &[&str] = &["accessToken", "bankAccount", "pendingapproval"];
/// Webhooks of one type per wallet, per enterprise, and per user and coin (§8).
pub const MAX_WEBHOOKS_PER_TYPE: u32 = 10;
/// The most confirmations a block webhook may wait for.
pub const MAX_NUM_CONFIRMATIONS: u64 = 1_000_000;
/// Webhook record `version` (§2.5).
pub const VERSION: u32 = 2;
/// Most entries of `txRequestStates` / `txRequestTransactionStates`.
pub const MAX_TX_REQUEST_STATES: usize = 20;
/// The states a `txRequestStates` entry may name: BitGo's transaction request states
/// (docs/webhooks.md).
pub const TX_REQUEST_STATES: &[&str] = &[
    "initialized",
    "pendingApproval",
    "pendingUserSignature",
    "pendingUserCommitment",
    "pendingUserRShare",
    "pendingUserGShare",
    "readyToSend",
    "signed",
    "pendingDelivery",
    "delivered",
    "canceled",
    "rejected",
    "failed",
];
/// The states a `txRequestTransactionStates` entry may name: BitGo's states of a transaction
/// within a transaction request (docs/webhooks.md).
pub const TX_REQUEST_TRANSACTION_STATES: &[&str] = &[
    "initialized",
    "pendingSignature",
    "signed",
    "held",
    "pendingDelivery",
    "delivered",
    "invalidSignature",
    "rejected",
    "failed",
];

/// Checks a list of txRequest states: at most [`MAX_TX_REQUEST_STATES`] names, each one of
/// `allowed` ([`TX_REQUEST_STATES`] or [`TX_REQUEST_TRANSACTION_STATES`]); duplicates are
/// dropped. Errors: `InvalidField` naming the entry.
pub fn check_states(field: &str, allowed: &[&str], states: Option<Vec<String>>) -> Result<Vec<String>> {
    let states = states.unwrap_or_default();
    if states.len() > MAX_TX_REQUEST_STATES {
        return Err(Error::invalid_field(field, format!("at most {MAX_TX_REQUEST_STATES} states")));
    }
    let mut out: Vec<String> = Vec::with_capacity(states.len());
    for (i, s) in states.into_iter().enumerate() {
        if !allowed.contains(&s.as_str()) {
            return Err(Error::invalid_field(
                format!("{field}[{i}]"),
                format!("not a known state; one of: {}", allowed.join(", ")),
            ));
        }
        if !out.contains(&s) {
            out.push(s);
        }
    }
    Ok(out)
}

/// `InvalidWebhookType`: `level` has no such type; `allowed` lists the level's types.
pub fn invalid_type(level: &str, allowed: &[&str]) -> Error {
    Error::Invalid {
        name: ErrorName::InvalidWebhookType,
        message: format!("not a {level} webhook type; allowed: {}", allowed.join(", ")),
        context: json!({ "field": "type", "allowed": allowed }),
    }
}
