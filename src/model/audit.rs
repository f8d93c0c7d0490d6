//! What an audit entry is (docs/audit.md): its type, its fields, and the hash chain's rule:
//! each entry's `hash` is SHA-256 over the previous entry's hash and the entry's canonical JSON
//! ([`chain_hash`]), so a changed or removed entry breaks every hash after it.

use serde_json::{json, Value};
use sha2::{Digest, Sha256};

use crate::types::{AnyId, EnterpriseId, TokenId, UserId, WalletId};

crate::types::text_enum!(
    /// What an audit entry records: every type in one place (docs/audit.md says when each is
    /// written and what its `data` holds).
    pub enum AuditType("not an audit entry type (docs/audit.md)") {
        LoginSucceeded = "login.succeeded",
        LoginFailed = "login.failed",
        LoginBreakGlass = "login.break_glass",
        LoginThrottled = "login.throttled",
        OtpFailed = "otp.failed",
        OtpThrottled = "otp.throttled",
        TokenCreated = "token.created",
        TokenRevoked = "token.revoked",
        TokenExtended = "token.extended",
        SessionUnlocked = "session.unlocked",
        SessionLocked = "session.locked",
        Logout = "logout",
        WebhookCreated = "webhook.created",
        WebhookRemoved = "webhook.removed",
        WebhookUnblocked = "webhook.unblocked",
        WebhookRecovered = "webhook.recovered",
        WebhookSecretRotated = "webhook_secret.rotated",
        NotificationsRefused = "webhook.notifications_refused",
        UserCreated = "user.created",
        UserDeactivated = "user.deactivated",
        UserActivated = "user.activated",
        UserOtpReset = "user.otp_reset",
        UserPasswordSet = "user.password_set",
        EnterpriseCreated = "enterprise.created",
        EnterpriseMemberSet = "enterprise.member_set",
        WalletImported = "wallet.imported",
        WalletIdentityChanged = "wallet.identity_changed",
        WalletBalanceSet = "wallet.balance_set",
        WalletAddressAdded = "wallet.address_added",
        KeychainAdded = "keychain.added",
        WalletFeeAlertsSet = "wallet.fee_alerts_set",
        UserEcdhKeychainAdded = "user.ecdh_keychain_added",
        UserEcdhKeychainSet = "user.ecdh_keychain_set",
        UserPasskeyAdded = "user.passkey_added",
        UserPasskeyRemoved = "user.passkey_removed",
        UserPasskeysRemovedByAdmin = "user.passkeys_removed_by_admin",
        PasskeyCounterRegressed = "passkey.counter_regressed",
        SsoSettingSet = "sso.setting_set",
        SsoSettingRemoved = "sso.setting_removed",
        SsoIdentityLinked = "sso.identity_linked",
        OAuthClientCreated = "oauth.client_created",
        OAuthClientDisabled = "oauth.client_disabled",
        OAuthClientPkceSet = "oauth.client_pkce_set",
        OAuthClientSecretRotated = "oauth.client_secret_rotated",
        OAuthClientDeleted = "oauth.client_deleted",
        OAuthConsented = "oauth.consented",
        OAuthTokenIssued = "oauth.token_issued",
        OAuthCodeReused = "oauth.code_reused",
        OAuthRefreshReused = "oauth.refresh_reused",
        OAuthGrantRevoked = "oauth.grant_revoked",
        OidcKeyAdded = "oidc.key_added",
        ChainReorgTooDeep = "chain.reorg_too_deep",
        ChainResync = "chain.resync",
        CustodyKeyCreated = "custody.key_created",
        WalletCreated = "wallet.created",
        WalletFrozen = "wallet.frozen",
        WalletUnfrozen = "wallet.unfrozen",
        CircuitBreakerTripped = "wallet.circuit_breaker_tripped",
        CircuitBreakerReset = "wallet.circuit_breaker_reset",
        PriceSet = "price.set",
        PolicyRuleCreated = "policy.rule_created",
        PolicyRuleUpdated = "policy.rule_updated",
        PolicyRuleRemoved = "policy.rule_removed",
        PolicyChangeRequested = "policy.change_requested",
        PolicyChangeApproved = "policy.change_approved",
        PolicyChangeRejected = "policy.change_rejected",
        PolicyChangeExpired = "policy.change_expired",
        WithdrawalInitiated = "withdrawal.initiated",
        WithdrawalRefused = "withdrawal.refused",
        WithdrawalApproved = "withdrawal.approved",
        WithdrawalRejected = "withdrawal.rejected",
        WithdrawalCanceled = "withdrawal.canceled",
        WithdrawalExpired = "withdrawal.expired",
        WithdrawalSigned = "withdrawal.signed",
        WithdrawalBroadcast = "withdrawal.broadcast",
        WithdrawalReplaced = "withdrawal.replaced",
        WithdrawalFailed = "withdrawal.failed",
        WithdrawalNonceFilled = "withdrawal.nonce_filled",
        WithdrawalFoundMined = "withdrawal.found_mined",
    }
);

/// One audit entry. Times are Unix milliseconds. `data` holds small non-secret details.
#[derive(Debug, Clone, PartialEq)]
pub struct AuditEntry {
    pub id: AnyId,
    pub date_ms: i64,
    /// What happened.
    pub entry_type: AuditType,
    pub user_id: Option<UserId>,
    pub enterprise_id: Option<EnterpriseId>,
    pub wallet_id: Option<WalletId>,
    pub ip: Option<String>,
    pub token_id: Option<TokenId>,
    pub request_id: Option<String>,
    pub data: Value,
}

/// A stored entry with its place in the chain.
#[derive(Debug, Clone)]
pub struct ChainedEntry {
    pub seq: i64,
    pub entry: AuditEntry,
    pub hash: String,
}

/// The canonical JSON of an entry: its fields under their API names, keys sorted (serde_json's
/// map is ordered), no white space.
pub fn canonical_json(e: &AuditEntry) -> String {
    json!({
        "id": e.id, "date": e.date_ms, "type": e.entry_type.as_str(), "userId": e.user_id,
        "enterpriseId": e.enterprise_id, "walletId": e.wallet_id, "ip": e.ip, "tokenId": e.token_id,
        "requestId": e.request_id, "data": e.data,
    })
    .to_string()
}

/// Hex SHA-256 over `prev` (the previous entry's hash, 64 hex zeros for the first) and the
/// entry's canonical JSON.
pub fn chain_hash(prev: &str, e: &AuditEntry) -> String {
    let mut h = Sha256::new();
    h.update(prev.as_bytes());
    h.update(canonical_json(e).as_bytes());
    hex::encode(h.finalize())
}

/// The hash before the first entry.
pub const GENESIS: &str = "0000000000000000000000000000000000000000000000000000000000000000";
