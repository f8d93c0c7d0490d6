//! Users, passwords, TOTP, login, access tokens, scopes and the auth extractor.
//!
//! Layer rule: no web-framework types and nothing of the HTTP layer (docs/architecture.md).

use std::sync::Arc;

use crate::{config::Config, outbox::dispatch::Dispatch, secrets::MasterKey, store::DynStore};

pub mod audit_log;
pub mod auth;
pub mod extension;
pub mod login;
pub mod operator;
pub mod otp;
pub mod password;
pub mod rate_limit;
pub mod scopes;
pub mod sessions;
pub mod signed;
pub mod throttle;
pub mod tokens;
pub mod totp;
pub mod users;

/// The handles identity's functions use (issue 19 §3), built once when the application starts
/// and cheap to clone.
#[derive(Clone)]
pub struct Identity {
    pub store: DynStore,
    pub config: Arc<Config>,
    /// Opens sealed OTP seeds.
    pub key: Arc<MasterKey>,
    pub policy: scopes::Policy,
    /// Bounds password hashing (`login.max_concurrent_hashes` and friends).
    pub hashing: Arc<password::HashLimiter>,
    /// Clients over the per-client login limit, refused without a database query.
    pub refused_clients: Arc<throttle::RefusedClients>,
    /// Throttlings already recorded in the audit log this minute.
    pub throttle_notes: Arc<throttle::ThrottleNotes>,
    /// Wakes delivery for the accessToken notifications a new token writes.
    pub dispatch: Arc<dyn Dispatch>,
    /// Signed reads this process has seen (the replay guard of reads, issue 20 §1).
    pub replay: Arc<signed::ReplayMemory>,
}
