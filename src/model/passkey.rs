//! A user's passkey (a WebAuthn credential, W3C WebAuthn Level 3) and a ceremony awaiting its
//! answer. The credential is kept as webauthn-rs serializes it: its public key and signature
//! counter, nothing secret.

use crate::types::{AnyId, UserId};

/// A registered passkey.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PasskeyRecord {
    /// Public id, 32 hex (`DELETE /api/v1/user/otp/{id}`).
    pub id: AnyId,
    pub user_id: UserId,
    /// The credential id, base64url without padding, as authenticators return it.
    pub credential_id: String,
    pub label: String,
    /// webauthn-rs's `Passkey`, JSON.
    pub credential: String,
    /// Unix seconds.
    pub created_at: i64,
    /// Unix seconds.
    pub last_used_at: Option<i64>,
}

/// What a challenge was given for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ChallengePurpose {
    /// Adding a passkey (`GET /api/v2/user/otp/webauthn/register`).
    Register,
    /// Signing in without a session (`POST /api/auth/v1/passkey/challenge`).
    Login,
    /// A signed-in user's assertion, in place of an OTP (`GET /api/v2/user/otp/webauthn/auth`).
    Verify,
}

impl ChallengePurpose {
    pub fn as_str(self) -> &'static str {
        match self {
            ChallengePurpose::Register => "register",
            ChallengePurpose::Login => "login",
            ChallengePurpose::Verify => "verify",
        }
    }

    /// `None` for a value never written.
    pub fn parse(s: &str) -> Option<Self> {
        match s {
            "register" => Some(ChallengePurpose::Register),
            "login" => Some(ChallengePurpose::Login),
            "verify" => Some(ChallengePurpose::Verify),
            _ => None,
        }
    }
}

/// A ceremony begun: its challenge (base64url, as `clientDataJSON` carries it back), for whom,
/// and webauthn-rs's state of it (JSON).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PendingChallenge {
    pub challenge: String,
    pub purpose: ChallengePurpose,
    /// `None`: a sign-in challenge for whoever answers it.
    pub user_id: Option<UserId>,
    pub state: String,
    /// Unix seconds.
    pub expires_at: i64,
    /// Who asked for it: an IPv4 address or an IPv6 /64 (`identity::throttle::client_key`).
    pub client: String,
}
