//! What an access token is (spec §2.4): its kind, which bounds what it may do, its grants and
//! restrictions, its unlock; and token templates. The secret itself is never kept: only its
//! SHA-256, and for HMAC authentication its value sealed under the master key.

use serde_json::Value;

use crate::{
    grant::Grant,
    types::{AnyId, BaseUnits, Cidr, EnterpriseId, TokenId, UserId, WalletId},
};

/// What a token was issued by, which bounds what it may do (docs/scopes.md).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TokenKind {
    /// From login with password + OTP.
    Session,
    /// From login with `forReset2FA`: may only read the profile.
    Reset2fa,
    /// From POST /api/v2/user/accesstoken.
    Access,
}

impl TokenKind {
    pub fn as_str(self) -> &'static str {
        match self {
            TokenKind::Session => "session",
            TokenKind::Reset2fa => "reset2fa",
            TokenKind::Access => "access",
        }
    }

    /// Unknown kinds read as the narrowest one.
    pub fn parse(s: &str) -> Self {
        match s {
            "session" => TokenKind::Session,
            "access" => TokenKind::Access,
            _ => TokenKind::Reset2fa,
        }
    }
}

/// How the session a token belongs to was granted: the login result's `grant_type` (spec §2.2).
/// An access token carries its creating session's.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum GrantType {
    /// Password and one-time password.
    #[default]
    Password,
    /// A WebAuthn assertion (a passkey), in place of password and one-time password.
    Passkey,
    /// An OAuth 2.0 authorization code (RFC 6749 §4.1).
    AuthorizationCode,
    /// An OAuth 2.0 refresh token (RFC 6749 §6).
    RefreshToken,
    /// Single sign-on through the enterprise's identity provider (docs/sso.md).
    Oauth,
}

impl GrantType {
    /// The §2.2 value.
    pub fn as_str(self) -> &'static str {
        match self {
            GrantType::Password => "password",
            GrantType::Passkey => "passkey",
            GrantType::AuthorizationCode => "authorization_code",
            GrantType::RefreshToken => "refresh_token",
            GrantType::Oauth => "oauth",
        }
    }

    /// Unknown values (none are written) read as `password`.
    pub fn parse(s: &str) -> Self {
        match s {
            "passkey" => GrantType::Passkey,
            "authorization_code" => GrantType::AuthorizationCode,
            "refresh_token" => GrantType::RefreshToken,
            "oauth" => GrantType::Oauth,
            _ => GrantType::Password,
        }
    }
}

/// An access token (spec §2.4). The secret itself is never stored: only its SHA-256.
#[derive(Debug, Clone)]
pub struct TokenRecord {
    /// Public id, 32 hex.
    pub id: TokenId,
    /// Hex SHA-256 of the secret token value.
    pub token_hash: String,
    pub user_id: UserId,
    pub kind: TokenKind,
    pub label: Option<String>,
    /// Parsed scope values (§4.3), stored as their text forms.
    pub scopes: Vec<Grant>,
    /// Unix seconds.
    pub created_at: i64,
    /// Unix seconds.
    pub expires_at: i64,
    /// Unix seconds.
    pub revoked_at: Option<i64>,
    /// Address of the client that requested it.
    pub ip: Option<String>,
    /// Addresses and blocks it may be used from; `None` means unrestricted.
    pub ip_restrict: Option<Vec<Cidr>>,
    pub enterprise: Option<EnterpriseId>,
    pub is_extensible: bool,
    /// Carries the service-admin permission.
    pub admin: bool,
    /// `{coin: {txValueLimit, maxLimit?, allErc20TokensLimit?}}`.
    pub spending_limits: Option<Value>,
    pub permitted_wallets: Option<Vec<WalletId>>,
    pub permitted_enterprises: Option<Vec<EnterpriseId>>,
    pub origin: String,
    pub parent_id: Option<TokenId>,
    /// Unix seconds; written at most once a minute ([`TOUCH_EVERY_SECS`]).
    pub last_used_at: Option<i64>,
    /// The session's unlock, when it has one (it may have expired).
    pub unlock: Option<Unlock>,
    /// The token's value sealed under the master key (aad `token:<id>`), the key of HMAC
    /// authentication (docs/decisions.md#signed-requests); `None` for tokens made before it was kept.
    pub sealed_value: Option<Vec<u8>>,
    /// The P2PKH address of the key that must sign an extension of this session (BitGoJS's
    /// `extensionAddress`, docs/decisions.md#bitgos-paths-and-password-form).
    pub extension_address: Option<String>,
    /// `unlock.txValueLimit` (§2.4), base units: from a top-level `txValueLimit` at creation.
    pub tx_value_limit: Option<BaseUnits>,
    /// How its session was granted (§2.2 `grant_type`).
    pub grant_type: GrantType,
    /// The BIP32 path (`m/999999/a/b`) its value was handed over under, ECDH-encrypted
    /// (`identity::issuance`); `None` when it was handed over in the clear. A session handed
    /// over this way gets the tokens it creates the same way.
    pub derivation_path: Option<String>,
    /// The OAuth grant it was issued under (`model::oauth::OAuthGrant`); revoking the grant
    /// revokes it.
    pub oauth_grant: Option<AnyId>,
}

/// How stale `lastUsedAt` may get before a request writes it again, seconds: the hot path
/// gains at most one write a minute per token (docs/decisions.md#token-and-session-lifecycle).
pub const TOUCH_EVERY_SECS: i64 = 60;

/// An unlock of a session (docs/decisions.md#token-and-session-lifecycle), Unix seconds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Unlock {
    pub time: i64,
    pub expires: i64,
}

/// Which way a token list runs, by creation time.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SortOrder {
    Ascending,
    Descending,
}

/// An access token template (docs/decisions.md#identity): default field values for token creation.
#[derive(Debug, Clone)]
pub struct TokenTemplate {
    pub id: AnyId,
    /// A JSON object with the request fields of §4.3 it supplies.
    pub fields: Value,
    /// Unix seconds.
    pub created_at: i64,
}
