//! The lifecycle of tokens and sessions (docs/decisions.md#token-and-session-lifecycle): a user lists and revokes their
//! tokens; the calling token reports its session, is unlocked with an OTP and locked again,
//! extended when extensible, and logged out. Token templates are an operator's (service
//! admin) tool. Paths and shapes follow BitGo's Platform API.
//!
//! Layer rule: no web-framework types and nothing of the HTTP layer (docs/architecture.md).

use crate::error::ErrorName;
use crate::model::audit::AuditType;
use serde_json::{json, Value};

use crate::{
    audit::EntryExt,
    error::{Error, Result},
    identity::{bearer::Principal, otp::verify_otp, scopes::Action, Identity},
    model::token::{SortOrder, TokenKind, TokenRecord, TokenTemplate, Unlock},
    paging::{Page, PageRequest},
    types::{AnyId, OtpCode, SecondFactor, TokenId},
};

/// `limit` of a token list when none is given, and its largest value.
pub const DEFAULT_TOKEN_LIMIT: u32 = 25;
pub const MAX_TOKEN_LIMIT: u32 = 200;
/// Unlock duration when none is given, and its bounds, seconds (docs/decisions.md#token-and-session-lifecycle).
pub const DEFAULT_UNLOCK_SECS: u64 = 600;
pub const MAX_UNLOCK_SECS: u64 = 3600;

fn token_not_found() -> Error {
    Error::not_found(ErrorName::TokenNotFound)
}

/// The caller's tokens that are neither revoked nor expired, by creation time in `order`
/// (never their secrets: only hashes are stored). Needs `user_manage`.
pub async fn list_tokens(
    svc: &Identity,
    auth: &Principal,
    page: &PageRequest,
    order: SortOrder,
) -> Result<Page<TokenRecord>> {
    auth.require(svc.policy, Action::ManageOwnTokens)?;
    let rows = svc
        .store
        .list_tokens(&auth.user.id, svc.store.clock().now(), page.prev_id.as_ref(), order, page.fetch())
        .await?;
    Ok(page.page(rows, |t| &t.id))
}

/// Revokes one of the caller's tokens (the calling one included) and returns it as stored
/// after: `expires` is now. Takes effect on the next request on every process (tokens are
/// read from the database on each request). Errors: `TokenNotFound` (no such token of this
/// user, or already revoked), `InsufficientScope`.
pub async fn revoke_token(svc: &Identity, auth: &Principal, token_id: &TokenId) -> Result<TokenRecord> {
    auth.require(svc.policy, Action::ManageOwnTokens)?;
    let token = svc.store.token_by_id(token_id).await?.filter(|t| t.user_id == auth.user.id);
    let token = token.ok_or_else(token_not_found)?;
    let entry = auth
        .audit(AuditType::TokenRevoked)
        .enterprise(token.enterprise.as_ref())
        .data(json!({ "id": token.id }));
    let now = svc.store.clock().now();
    if !svc.store.revoke_token(&token.id, now, &[entry]).await? {
        return Err(token_not_found());
    }
    // What the store's revocation wrote (`store::tokens::REVOKE`), without reading it back.
    Ok(TokenRecord { revoked_at: Some(now), expires_at: token.expires_at.min(now), ..token })
}

/// Ends the calling token (logout). Any token may end itself.
pub async fn logout(svc: &Identity, auth: &Principal) -> Result<()> {
    svc.store.revoke_token(&auth.token.id, svc.store.clock().now(), &[auth.audit(AuditType::Logout)]).await?;
    Ok(())
}

/// Unlocks the calling session for `duration` seconds (1..=[`MAX_UNLOCK_SECS`], default
/// [`DEFAULT_UNLOCK_SECS`], never past the token's expiry) after checking `otp`, which counts
/// toward the OTP failure limit. Errors: `InvalidField` (`duration`, `otp`), `InvalidOtp`,
/// `TooManyOtpAttempts`, `InsufficientScope` for a 2FA-reset token.
pub async fn unlock(
    svc: &Identity,
    auth: &Principal,
    otp: &str,
    duration: Option<u64>,
) -> Result<TokenRecord> {
    auth.require(svc.policy, Action::CreateAccessToken)?;
    let duration = duration.unwrap_or(DEFAULT_UNLOCK_SECS);
    if !(1..=MAX_UNLOCK_SECS).contains(&duration) {
        return Err(Error::invalid_field("duration", format!("seconds, from 1 to {MAX_UNLOCK_SECS}")));
    }
    let code = SecondFactor::parse(otp).ok_or_else(|| {
        Error::invalid_field("otp", format!("exactly {} digits, or a passkey assertion", OtpCode::DIGITS))
    })?;
    if !verify_otp(svc, &auth.user, &code, auth.client_ip).await? {
        return Err(Error::LoginFailed {
            name: ErrorName::InvalidOtp,
            message: "a valid one-time password is required".into(),
            needs_otp: true,
        });
    }
    let now = svc.store.clock().now();
    let expires = (now + i64::try_from(duration).unwrap_or(0)).min(auth.token.expires_at);
    let unlock = Unlock { time: now, expires };
    let entry = auth.audit(AuditType::SessionUnlocked).data(json!({ "expires": crate::clock::iso(expires) }));
    svc.store.set_unlock(&auth.token.id, Some(unlock), &[entry]).await?;
    Ok(TokenRecord { unlock: Some(unlock), ..(*auth.token).clone() })
}

/// Ends the calling session's unlock, if any.
pub async fn lock(svc: &Identity, auth: &Principal) -> Result<TokenRecord> {
    svc.store.set_unlock(&auth.token.id, None, &[auth.audit(AuditType::SessionLocked)]).await?;
    Ok(TokenRecord { unlock: None, ..(*auth.token).clone() })
}

/// BitGoJS's proof for extending a session made with an `extensionAddress`: the `timestamp`
/// (Unix ms) and `signature` (hex) headers.
#[derive(Debug, Clone, Copy)]
pub struct ExtensionProof<'a> {
    pub timestamp: &'a str,
    pub signature: &'a str,
}

/// Extends the calling token to `duration` seconds from now, at most `login.session_max_ttl`
/// after its creation. A session made with an `extensionAddress` must bring `proof`: that
/// key's Bitcoin signed message of `{timestamp}|{token}|{duration}`, with the timestamp inside
/// the signed-request window ([`super::extension`]). Errors: `TokenNotExtensible` (409: the
/// token's state, not the request, is the problem) for a token created without `extensible`,
/// `InvalidField` for a duration that is not positive, `InvalidSignature` / `StaleRequest`
/// (401) for a missing, wrong or old proof.
pub async fn extend(
    svc: &Identity,
    auth: &Principal,
    duration: u64,
    proof: Option<ExtensionProof<'_>>,
) -> Result<TokenRecord> {
    let t = &auth.token;
    if !t.is_extensible || t.kind != TokenKind::Session {
        return Err(Error::Conflict {
            name: ErrorName::TokenNotExtensible,
            message: "this token was not created extensible".into(),
        });
    }
    if duration == 0 {
        return Err(Error::invalid_field("duration", "seconds, at least 1"));
    }
    if let Some(address) = &t.extension_address {
        check_extension_proof(svc, t, address, duration, proof)?;
    }
    let max = t.created_at.saturating_add(i64::try_from(svc.config.login.session_max_ttl).unwrap_or(0));
    let wanted = svc.store.clock().now().saturating_add(i64::try_from(duration).unwrap_or(i64::MAX));
    let expires_at = wanted.min(max).max(t.expires_at);
    let entry =
        auth.audit(AuditType::TokenExtended).data(json!({ "expires": crate::clock::iso(expires_at) }));
    svc.store.set_token_expiry(&t.id, expires_at, &[entry]).await?;
    Ok(TokenRecord { expires_at, ..(**t).clone() })
}

fn check_extension_proof(
    svc: &Identity,
    t: &TokenRecord,
    address: &str,
    duration: u64,
    proof: Option<ExtensionProof<'_>>,
) -> Result<()> {
    let refused = |name, message: &str| Error::Unauthenticated { name, message: message.into() };
    let proof = proof.ok_or_else(|| {
        refused(
            ErrorName::InvalidSignature,
            "extending this session needs the timestamp and signature headers",
        )
    })?;
    let ts: i64 = proof.timestamp.parse().map_err(|_| {
        refused(ErrorName::InvalidSignature, "the timestamp header must be Unix milliseconds")
    })?;
    if !super::hmac_auth::within_window(svc, ts) {
        return Err(refused(
            ErrorName::StaleRequest,
            "the extension's timestamp is outside the accepted window",
        ));
    }
    let sealed = t.sealed_value.as_deref().ok_or_else(|| {
        refused(ErrorName::InvalidSignature, "this session cannot prove an extension: log in again")
    })?;
    let value = svc.key.open(&super::bearer::token_aad(&t.id), sealed)?;
    let value = String::from_utf8(value).map_err(|e| Error::Internal(e.into()))?;
    if !super::extension::signed_by(address, proof.timestamp, &value, duration, proof.signature) {
        return Err(refused(
            ErrorName::InvalidSignature,
            "the extension is not signed by the session's extension key",
        ));
    }
    Ok(())
}

/// Token templates over HTTP (docs/decisions.md#token-and-session-lifecycle): service admins only, as the CLI is the operator's.
pub mod templates {
    use super::*;

    /// Creates a template from request fields (see `identity::tokens::create_template`).
    pub async fn create(svc: &Identity, auth: &Principal, fields: Value) -> Result<TokenTemplate> {
        auth.require(svc.policy, Action::ServiceAdmin)?;
        crate::identity::tokens::create_template(&svc.store, fields).await
    }

    /// Templates by id.
    pub async fn list(svc: &Identity, auth: &Principal, page: &PageRequest) -> Result<Page<TokenTemplate>> {
        auth.require(svc.policy, Action::ServiceAdmin)?;
        let rows = svc.store.list_templates(page.prev_id.as_ref(), page.fetch()).await?;
        Ok(page.page(rows, |t| &t.id))
    }

    /// One template. Errors: `TemplateNotFound`.
    pub async fn get(svc: &Identity, auth: &Principal, id: &AnyId) -> Result<TokenTemplate> {
        auth.require(svc.policy, Action::ServiceAdmin)?;
        svc.store.template_by_id(id).await?.ok_or_else(|| Error::not_found(ErrorName::TemplateNotFound))
    }

    /// Removes a template; returns it as it was. Errors: `TemplateNotFound`.
    pub async fn delete(svc: &Identity, auth: &Principal, id: &AnyId) -> Result<TokenTemplate> {
        let t = get(svc, auth, id).await?;
        if !svc.store.delete_template(id).await? {
            return Err(Error::not_found(ErrorName::TemplateNotFound));
        }
        Ok(t)
    }
}
