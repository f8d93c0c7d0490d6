//! Users' ECDH keychains and the `ecdhKeychain` setting, as BitGoJS's
//! `authenticate({ensureEcdhKeychain: true})` makes them: it reads the settings, adds a keychain
//! (`source: "ecdh"`, an xpub and the xprv it encrypted under the user's password) and sets
//! its xpub as the user's `ecdhKeychain`. The server never sees the xprv in the clear.

use bitcoin::bip32::Xpub;
use serde_json::{json, Value};

use super::{bearer::Principal, scopes::Action, Identity};
use crate::{
    error::{Error, ErrorName, Result},
    model::{
        audit::AuditType,
        keychain::EcdhKeychain,
        token::{GrantType, TokenKind},
    },
};

/// Longest encrypted xprv kept, characters (BitGo's envelopes of an xprv are under 1 KB).
pub const MAX_ENCRYPTED_XPRV: usize = 8192;

/// The settings BitGo's `/user/settings` serves that Custodian keeps.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Settings {
    /// The xpub of the user's ECDH keychain, once set.
    pub ecdh_keychain: Option<String>,
}

/// The caller's settings. Errors: `InsufficientScope` (`profile`).
pub async fn settings(svc: &Identity, auth: &Principal) -> Result<Settings> {
    auth.require(svc.policy, Action::ViewProfile)?;
    Ok(Settings { ecdh_keychain: svc.store.ecdh_keychain(&auth.user.id).await?.map(|k| k.xpub) })
}

/// A change of what seals the user's future tokens needs a fresh second factor, so a stolen
/// bearer session cannot make every later login open with the thief's key: `otp` (a TOTP code
/// or a passkey assertion) in the request, a session its login made within
/// `login.fresh_factor_secs`, or an unlocked session. Errors: `LoginFailed` (`InvalidOtp`,
/// audited), `Throttled`.
async fn require_fresh(svc: &Identity, auth: &Principal, otp: Option<&str>) -> Result<()> {
    let (t, now) = (&auth.token, svc.store.clock().now());
    let window = i64::try_from(svc.config.login.fresh_factor_secs).unwrap_or(i64::MAX);
    let fresh_login = t.kind == TokenKind::Session
        && matches!(t.grant_type, GrantType::Password | GrantType::Passkey)
        && now.saturating_sub(t.created_at) < window;
    let unlocked = t.unlock.as_ref().is_some_and(|u| u.expires > now);
    if otp.is_none() && (fresh_login || unlocked) {
        return Ok(());
    }
    super::passkeys::require_fresh_factor(svc, auth, otp).await
}

/// Keeps a keychain of the caller's (`POST /api/v1/keychain`): only `source: "ecdh"`, a BIP32
/// xpub, and the xprv as the client encrypted it (a JSON envelope of BitGo's `encrypt`, at most
/// [`MAX_ENCRYPTED_XPRV`] characters), after a fresh factor ([`require_fresh`]). Audited as
/// `user.ecdh_keychain_added`. Errors: `InsufficientScope` (`user_manage`), `InvalidField`
/// (`source`, `xpub`, `encryptedXprv`), `LoginFailed` (`InvalidOtp`).
pub async fn add_keychain(
    svc: &Identity,
    auth: &Principal,
    source: &str,
    xpub: &str,
    encrypted_xprv: &str,
    otp: Option<&str>,
) -> Result<EcdhKeychain> {
    auth.require(svc.policy, Action::ManageOwnTokens)?;
    if source != "ecdh" {
        return Err(Error::invalid_field("source", "only ecdh keychains are kept (wallet keys are not)"));
    }
    let parsed: Xpub = xpub.parse().map_err(|_| Error::invalid_field("xpub", "must be a BIP32 xpub"))?;
    let envelope = serde_json::from_str::<serde_json::Map<String, Value>>(encrypted_xprv).ok();
    if encrypted_xprv.len() > MAX_ENCRYPTED_XPRV || !envelope.is_some_and(|e| e.contains_key("ct")) {
        return Err(Error::invalid_field("encryptedXprv", "must be the JSON envelope BitGo's encrypt makes"));
    }
    require_fresh(svc, auth, otp).await?;
    let keychain = EcdhKeychain {
        user_id: auth.user.id.clone(),
        xpub: parsed.to_string(),
        encrypted_xprv: encrypted_xprv.to_string(),
        created_at: svc.store.clock().now(),
    };
    let entry = crate::audit::EntryExt::data(
        auth.audit(AuditType::UserEcdhKeychainAdded),
        json!({ "xpub": keychain.xpub }),
    );
    svc.store.add_ecdh_keychain(&keychain, &[entry]).await?;
    Ok(keychain)
}

/// Sets the caller's `ecdhKeychain` to one of their keychains (`PUT /api/v2/user/settings`),
/// after a fresh factor ([`require_fresh`]). Audited as `user.ecdh_keychain_set`. Errors:
/// `InsufficientScope` (`user_manage`), `LoginFailed` (`InvalidOtp`), `NotFound` (404: not
/// the xpub of a keychain the caller added).
pub async fn set_ecdh_keychain(
    svc: &Identity,
    auth: &Principal,
    xpub: &str,
    otp: Option<&str>,
) -> Result<Settings> {
    auth.require(svc.policy, Action::ManageOwnTokens)?;
    require_fresh(svc, auth, otp).await?;
    let entry =
        crate::audit::EntryExt::data(auth.audit(AuditType::UserEcdhKeychainSet), json!({ "xpub": xpub }));
    if !svc.store.choose_ecdh_keychain(&auth.user.id, xpub, &[entry]).await? {
        // A well-formed reference to a keychain that does not exist, as any unknown id is.
        return Err(Error::NotFound {
            name: ErrorName::NotFound,
            message: "settings.ecdhKeychain: no keychain of this user has that xpub (POST /api/v1/keychain adds one)"
                .into(),
        });
    }
    Ok(Settings { ecdh_keychain: Some(xpub.to_string()) })
}
