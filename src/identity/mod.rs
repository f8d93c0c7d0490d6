//! Users, passwords, TOTP, login, access tokens, scopes and the auth extractor.
//!
//! Layer rule: no web-framework types and nothing of the HTTP layer (docs/architecture.md).

use std::sync::Arc;

use crate::{config::Config, master_key::MasterKey, notifications::dispatch::Dispatch, store::DynStore};

pub mod audit_log;
pub mod bearer;
pub mod ecdh;
pub mod extension;
pub mod hmac_auth;
pub mod issuance;
pub mod keychains;
pub mod login;
pub mod otp;
pub mod passkey_login;
pub mod passkeys;
pub mod password;
pub mod rate_limit;
pub mod scopes;
pub mod sessions;
pub mod sso;
mod sso_client;
pub mod sso_required;
pub mod sso_settings;
pub mod throttle;
pub mod token_request;
pub mod tokens;
pub mod totp;
pub mod user_admin;
pub mod users;
pub mod webauthn;

/// The handles identity's functions use (docs/decisions.md#architecture), built once when the application starts
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
    /// Each user's OTP checks, one after another.
    pub otp_locks: Arc<otp::OtpLocks>,
    /// Wakes delivery for the accessToken notifications a new token writes.
    pub dispatch: Arc<dyn Dispatch>,
    /// Signed reads this process has seen (the replay guard of reads, docs/decisions.md#signed-requests).
    pub replay: Arc<hmac_auth::ReplayMemory>,
    /// The WebAuthn relying party (`passkeys.*`).
    pub webauthn: Arc<webauthn_rs::Webauthn>,
    /// The service's ECDH key ([`ecdh::server_key`]), once read.
    pub server_ecdh: Arc<tokio::sync::OnceCell<bitcoin::bip32::Xpriv>>,
    /// Calls to enterprises' identity providers (`sso.*`).
    pub sso: Arc<sso::Providers>,
}
