//! Passkeys (W3C WebAuthn Level 3, with webauthn-rs): registration, listing, removal, and the
//! challenge of an assertion that stands for an OTP. The ceremonies' common parts are in
//! [`super::webauthn`]; sign-in with a passkey is in [`super::passkey_login`].
//!
//! BitGo's shapes: a passkey is an OTP device of type `webauthn`; `GET
//! /api/v2/user/otp/webauthn/register` gives creation options, `PUT /api/v2/user/otp` adds one
//! (`otp` is the credential's JSON), `GET /api/v2/user/otp/webauthn/auth` gives a signed-in
//! user a challenge whose assertion is accepted wherever an OTP is
//! (docs/decisions.md#passkeys). User verification is always required. Each challenge is kept
//! in the store (every process can finish it), answered once, and expires
//! (`passkeys.challenge_ttl`).
//!
//! Layer rule: no web-framework types and nothing of the HTTP layer (docs/architecture.md).

use base64::{engine::general_purpose::URL_SAFE_NO_PAD as B64URL, Engine};
use serde_json::{json, Value};
use webauthn_rs::prelude::{Passkey, PasskeyRegistration, RegisterPublicKeyCredential};

use super::{
    bearer::Principal,
    otp::verify_otp,
    scopes::Action,
    webauthn::{answered_challenge, internal, keep, normalized, parsed_passkeys, user_handle},
    Identity,
};
use crate::{
    audit::EntryExt,
    error::{Error, ErrorName, Result},
    ids,
    model::{
        audit::AuditType,
        passkey::{ChallengePurpose, PasskeyRecord},
    },
    store::PasskeyAdded,
    types::{AnyId, SecondFactor},
};

/// The longest label, characters.
pub const MAX_LABEL: usize = 100;

/// Creation options for a new passkey of the caller (`{publicKey}`, WebAuthn's
/// `PublicKeyCredentialCreationOptions` as JSON). Their existing passkeys are excluded; a
/// discoverable credential is preferred, so that sign-in needs no email. Errors:
/// `InsufficientScope` (`user_manage`), `Busy`.
pub async fn registration_options(svc: &Identity, auth: &Principal) -> Result<Value> {
    auth.require(svc.policy, Action::ManageOwnTokens)?;
    let user = &auth.user;
    let existing = svc.store.passkeys(&user.id).await?;
    let exclude = existing.iter().filter_map(|p| B64URL.decode(&p.credential_id).ok()).collect::<Vec<_>>();
    let (options, state) = svc
        .webauthn
        .start_passkey_registration(
            user_handle(&user.id),
            user.email.as_str(),
            user.email.as_str(),
            Some(exclude),
        )
        .map_err(internal)?;
    let mut options = serde_json::to_value(options).map_err(internal)?;
    options["publicKey"]["authenticatorSelection"]["residentKey"] = json!("preferred");
    keep(svc, &options, ChallengePurpose::Register, Some(user.id.clone()), auth.client_ip, &state).await?;
    Ok(options)
}

fn refused(message: &str) -> Error {
    Error::invalid_field("otp", message.to_string())
}

/// The caller's `fresh` factor (a TOTP code or a passkey assertion), required to add or remove
/// a passkey: a stolen session alone cannot. Errors: `LoginFailed` (`InvalidOtp`), `Throttled`.
pub(crate) async fn require_fresh_factor(
    svc: &Identity,
    auth: &Principal,
    fresh: Option<&str>,
) -> Result<()> {
    let factor = fresh.and_then(SecondFactor::parse);
    let ok = match &factor {
        Some(f) => verify_otp(svc, &auth.user, f, auth.client_ip).await?,
        None => {
            // A change tried with the session alone: recorded, as a wrong code is.
            let entry = auth.audit(AuditType::OtpFailed).data(json!({ "reason": "no fresh factor" }));
            crate::audit::record(&svc.store, &[entry]).await;
            false
        }
    };
    if !ok {
        return Err(Error::LoginFailed {
            name: ErrorName::InvalidOtp,
            message: "a fresh one-time password or passkey assertion (verificationOtp) is required".into(),
            needs_otp: true,
        });
    }
    Ok(())
}

/// Adds the passkey `credential` (the JSON of `navigator.credentials.create()`'s result,
/// answering [`registration_options`]) as `label`, after the caller's fresh factor
/// (`fresh`). Audited as `user.passkey_added`. Errors: `InsufficientScope`, `LoginFailed`
/// (`InvalidOtp`: no or a wrong fresh factor), `InvalidField` (`otp`: not a credential, or not
/// an answer to a live registration challenge of the caller's; `label`), `Conflict` (the
/// credential is registered already, or `passkeys.max_per_user` reached).
pub async fn add(
    svc: &Identity,
    auth: &Principal,
    credential: &str,
    label: Option<&str>,
    fresh: Option<&str>,
) -> Result<PasskeyRecord> {
    auth.require(svc.policy, Action::ManageOwnTokens)?;
    let label = label.map(str::trim).filter(|l| !l.is_empty()).unwrap_or("Passkey");
    if label.chars().count() > MAX_LABEL {
        return Err(Error::invalid_field("label", format!("at most {MAX_LABEL} characters")));
    }
    require_fresh_factor(svc, auth, fresh).await?;
    let value =
        normalized(credential).ok_or_else(|| refused("must be the JSON of a new WebAuthn credential"))?;
    let challenge = answered_challenge(&value).ok_or_else(|| refused("no challenge in clientDataJSON"))?;
    let pending = svc.store.take_challenge(&challenge, svc.store.clock().now()).await?;
    let pending = pending
        .filter(|p| p.purpose == ChallengePurpose::Register && p.user_id.as_ref() == Some(&auth.user.id))
        .ok_or_else(|| refused("answers no live registration challenge of yours"))?;
    let state: PasskeyRegistration = serde_json::from_str(&pending.state).map_err(internal)?;
    let reg: RegisterPublicKeyCredential = serde_json::from_value(value)
        .map_err(|_| refused("must be the JSON of a new WebAuthn credential"))?;
    let passkey = svc
        .webauthn
        .finish_passkey_registration(&reg, &state)
        .map_err(|e| refused(&format!("the credential does not verify: {e}")))?;
    let record = PasskeyRecord {
        id: ids::new_id().parse().map_err(internal)?,
        user_id: auth.user.id.clone(),
        credential_id: B64URL.encode(passkey.cred_id()),
        label: label.to_string(),
        credential: serde_json::to_string(&passkey).map_err(internal)?,
        created_at: svc.store.clock().now(),
        last_used_at: None,
    };
    let entry = auth
        .audit(AuditType::UserPasskeyAdded)
        .data(json!({ "id": record.id, "label": record.label, "credentialId": record.credential_id }));
    match svc.store.add_passkey(&record, svc.config.passkeys.max_per_user, &[entry]).await? {
        PasskeyAdded::Added => Ok(record),
        PasskeyAdded::Duplicate => Err(conflict("this credential is registered already")),
        PasskeyAdded::Full => Err(conflict(&format!(
            "at most {} passkeys per user (passkeys.max_per_user)",
            svc.config.passkeys.max_per_user
        ))),
    }
}

fn conflict(message: &str) -> Error {
    Error::Conflict { name: ErrorName::AlreadyExists, message: message.to_string() }
}

/// Removes the caller's passkey `id` after their fresh factor. Audited as
/// `user.passkey_removed`. Errors: `InsufficientScope`, `NotFound` (no passkey of theirs has
/// that id: said before the factor is asked for, as the caller may list their passkeys anyway),
/// `LoginFailed` (`InvalidOtp`).
pub async fn remove(svc: &Identity, auth: &Principal, id: &AnyId, fresh: Option<&str>) -> Result<()> {
    auth.require(svc.policy, Action::ManageOwnTokens)?;
    let not_found =
        || Error::NotFound { name: ErrorName::NotFound, message: "no passkey of yours has this id".into() };
    if !svc.store.passkeys(&auth.user.id).await?.iter().any(|p| p.id == *id) {
        return Err(not_found());
    }
    require_fresh_factor(svc, auth, fresh).await?;
    let entry = auth.audit(AuditType::UserPasskeyRemoved).data(json!({ "id": id }));
    if !svc.store.remove_passkey(&auth.user.id, id, &[entry]).await? {
        return Err(not_found());
    }
    Ok(())
}

/// The caller's passkeys. Errors: `InsufficientScope` (`profile`).
pub async fn list(svc: &Identity, auth: &Principal) -> Result<Vec<PasskeyRecord>> {
    auth.require(svc.policy, Action::ViewProfile)?;
    Ok(svc.store.passkeys(&auth.user.id).await?)
}

/// Request options (`{publicKey}`) for an assertion by one of the caller's passkeys, which
/// then stands for an OTP. Errors: `InsufficientScope` (`profile`), `NotFound` (no passkey),
/// `Busy`.
pub async fn assertion_options(svc: &Identity, auth: &Principal) -> Result<Value> {
    auth.require(svc.policy, Action::ViewProfile)?;
    let records = svc.store.passkeys(&auth.user.id).await?;
    let passkeys = parsed_passkeys(&records);
    if passkeys.is_empty() {
        return Err(Error::NotFound { name: ErrorName::NotFound, message: "you have no passkey".into() });
    }
    let creds: Vec<Passkey> = passkeys.into_iter().map(|(_, p)| p).collect();
    let (options, state) = svc.webauthn.start_passkey_authentication(&creds).map_err(internal)?;
    let options = serde_json::to_value(options).map_err(internal)?;
    keep(svc, &options, ChallengePurpose::Verify, Some(auth.user.id.clone()), auth.client_ip, &state).await?;
    Ok(options)
}
