//! Passkeys (W3C WebAuthn Level 3, with webauthn-rs): registration, removal, the assertion that
//! stands for an OTP, and the ceremonies' challenges. Sign-in with a passkey is in
//! [`super::passkey_login`].
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
use webauthn_rs::prelude::{
    DiscoverableAuthentication, Passkey, PasskeyAuthentication, PasskeyRegistration, PublicKeyCredential,
    RegisterPublicKeyCredential, Url, Uuid, Webauthn, WebauthnBuilder, WebauthnError,
};

use super::{bearer::Principal, otp::verify_otp, scopes::Action, Identity};
use crate::{
    audit::{self, EntryExt},
    config::PasskeysConfig,
    error::{Error, ErrorName, Result},
    ids,
    model::{
        audit::AuditType,
        passkey::{ChallengePurpose, PasskeyRecord, PendingChallenge},
    },
    store::{PasskeyAdded, User},
    types::{AnyId, SecondFactor, UserId},
};

/// The longest label, characters.
pub const MAX_LABEL: usize = 100;

/// The relying party of `cfg`. Errors: an origin that is not a URL, or not `rp_id` or under it.
pub fn relying_party(cfg: &PasskeysConfig) -> anyhow::Result<Webauthn> {
    let parse = |o: &String| Url::parse(o).map_err(|e| anyhow::anyhow!("passkeys.origins: {o}: {e}"));
    let first = parse(&cfg.origins[0])?;
    let mut builder = WebauthnBuilder::new(&cfg.rp_id, &first)
        .map_err(|e| anyhow::anyhow!("passkeys.rp_id / origins: {e}"))?
        .rp_name(&cfg.rp_name)
        .allow_any_port(cfg.allow_any_port);
    for origin in &cfg.origins[1..] {
        builder = builder.append_allowed_origin(&parse(origin)?);
    }
    builder.build().map_err(|e| anyhow::anyhow!("passkeys: {e}"))
}

/// The WebAuthn user handle of a user: the 16 bytes of their id (docs/decisions.md#passkeys).
pub fn user_handle(id: &UserId) -> Uuid {
    let mut bytes = [0u8; 16];
    if let Ok(decoded) = hex::decode(id.as_str()) {
        let n = decoded.len().min(16);
        bytes[..n].copy_from_slice(&decoded[..n]);
    }
    Uuid::from_bytes(bytes)
}

/// The user id a user handle names, if it is 16 bytes.
pub fn user_of_handle(handle: &[u8]) -> Option<UserId> {
    (handle.len() == 16).then(|| hex::encode(handle)).and_then(|h| h.parse().ok())
}

fn internal(e: impl std::fmt::Display) -> Error {
    Error::Internal(anyhow::anyhow!("passkeys: {e}"))
}

/// Keeps a ceremony's state until its answer. Errors: `Busy` when `passkeys.max_pending_challenges`
/// wait already.
pub(super) async fn keep(
    svc: &Identity,
    options: &Value,
    purpose: ChallengePurpose,
    user_id: Option<UserId>,
    state: &impl serde::Serialize,
) -> Result<()> {
    let challenge = options["publicKey"]["challenge"].as_str().ok_or_else(|| internal("no challenge"))?;
    let now = ids::now();
    let pending = PendingChallenge {
        challenge: challenge.to_string(),
        purpose,
        user_id,
        state: serde_json::to_string(state).map_err(internal)?,
        expires_at: now + i64::try_from(svc.config.passkeys.challenge_ttl).unwrap_or(300),
    };
    if !svc.store.keep_challenge(&pending, svc.config.passkeys.max_pending_challenges, now).await? {
        return Err(Error::Busy {
            message: "too many passkey ceremonies are waiting for an answer; try again shortly".into(),
            retry_after_secs: 5,
        });
    }
    Ok(())
}

/// A client's credential JSON made as webauthn-rs reads it: base64url without padding in the
/// binary fields (some clients send standard base64), `rawId` from `id`, `type`.
pub(super) fn normalized(json: &str) -> Option<Value> {
    let mut v: Value = serde_json::from_str(json).ok()?;
    let fix = |s: &mut Value| {
        if let Some(t) = s.as_str() {
            *s = Value::String(t.trim_end_matches('=').replace('+', "-").replace('/', "_"));
        }
    };
    let obj = v.as_object_mut()?;
    if !obj.contains_key("rawId") {
        let id = obj.get("id")?.clone();
        obj.insert("rawId".into(), id);
    }
    obj.entry("type").or_insert_with(|| json!("public-key"));
    fix(obj.get_mut("rawId")?);
    let response = obj.get_mut("response")?.as_object_mut()?;
    for key in ["authenticatorData", "clientDataJSON", "signature", "userHandle", "attestationObject"] {
        if let Some(field) = response.get_mut(key) {
            fix(field);
        }
    }
    Some(v)
}

/// The challenge a credential answers, from its `clientDataJSON`.
pub(super) fn answered_challenge(credential: &Value) -> Option<String> {
    let client_data = B64URL.decode(credential["response"]["clientDataJSON"].as_str()?).ok()?;
    let parsed: Value = serde_json::from_slice(&client_data).ok()?;
    parsed["challenge"].as_str().map(str::to_string)
}

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
    keep(svc, &options, ChallengePurpose::Register, Some(user.id.clone()), &state).await?;
    Ok(options)
}

fn refused(message: &str) -> Error {
    Error::invalid_field("otp", message.to_string())
}

/// The caller's `fresh` factor (a TOTP code or a passkey assertion), required to add or remove
/// a passkey: a stolen session alone cannot. Errors: `LoginFailed` (`InvalidOtp`), `Throttled`.
async fn require_fresh_factor(svc: &Identity, auth: &Principal, fresh: Option<&str>) -> Result<()> {
    let factor = fresh.and_then(SecondFactor::parse);
    let ok = match &factor {
        Some(f) => verify_otp(svc, &auth.user, f, auth.client_ip).await?,
        None => false,
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
    let pending = svc.store.take_challenge(&challenge, ids::now()).await?;
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
        created_at: ids::now(),
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
/// `user.passkey_removed`. Errors: `InsufficientScope`, `LoginFailed` (`InvalidOtp`),
/// `NotFound` (no passkey of theirs has that id).
pub async fn remove(svc: &Identity, auth: &Principal, id: &AnyId, fresh: Option<&str>) -> Result<()> {
    auth.require(svc.policy, Action::ManageOwnTokens)?;
    require_fresh_factor(svc, auth, fresh).await?;
    let entry = auth.audit(AuditType::UserPasskeyRemoved).data(json!({ "id": id }));
    if !svc.store.remove_passkey(&auth.user.id, id, &[entry]).await? {
        return Err(Error::NotFound {
            name: ErrorName::NotFound,
            message: "no passkey of yours has this id".into(),
        });
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
    keep(svc, &options, ChallengePurpose::Verify, Some(auth.user.id.clone()), &state).await?;
    Ok(options)
}

pub(super) fn parsed_passkeys(records: &[PasskeyRecord]) -> Vec<(&PasskeyRecord, Passkey)> {
    records.iter().filter_map(|r| Some((r, serde_json::from_str(&r.credential).ok()?))).collect()
}

/// Why an assertion was not accepted.
#[derive(Debug, PartialEq, Eq)]
pub(super) enum Refusal {
    /// Malformed, answering no live challenge for this user, or failing verification.
    Invalid,
    /// The signature counter did not grow: a cloned authenticator, or a replayed answer.
    CounterRegressed,
}

/// Checks an assertion (`value`, normalized) of `user`'s against a challenge taken for it, and
/// records the passkey's use. A sign-in challenge (`Login`) is discoverable; a `Verify` one
/// names the user's passkeys.
pub(super) async fn check_assertion(
    svc: &Identity,
    user: &User,
    value: Value,
    pending: PendingChallenge,
) -> Result<std::result::Result<(), Refusal>> {
    if pending.user_id.as_ref().is_some_and(|u| *u != user.id)
        || pending.purpose == ChallengePurpose::Register
    {
        return Ok(Err(Refusal::Invalid));
    }
    let Ok(credential) = serde_json::from_value::<PublicKeyCredential>(value) else {
        return Ok(Err(Refusal::Invalid));
    };
    let records = svc.store.passkeys(&user.id).await?;
    let id = B64URL.encode(credential.get_credential_id());
    let Some((record, mut passkey)) =
        parsed_passkeys(&records).into_iter().find(|(r, _)| r.credential_id == id)
    else {
        return Ok(Err(Refusal::Invalid));
    };
    let result = match pending.purpose {
        ChallengePurpose::Login => serde_json::from_str::<DiscoverableAuthentication>(&pending.state)
            .map_err(internal)
            .map(|state| svc.webauthn.finish_discoverable_authentication_v2(&credential, state, &passkey))?,
        _ => serde_json::from_str::<PasskeyAuthentication>(&pending.state)
            .map_err(internal)
            .map(|state| svc.webauthn.finish_passkey_authentication(&credential, &state))?,
    };
    match result {
        Ok(done) if done.user_verified() => {
            passkey.update_credential(&done);
            let kept = serde_json::to_string(&passkey).map_err(internal)?;
            svc.store.record_passkey_use(&record.id, &kept, ids::now()).await?;
            Ok(Ok(()))
        }
        Err(WebauthnError::CredentialPossibleCompromise) => {
            let mut entry = audit::entry(AuditType::PasskeyCounterRegressed).data(json!({ "id": record.id }));
            entry.user_id = Some(user.id.clone());
            audit::record(&svc.store, &[entry]).await;
            Ok(Err(Refusal::CounterRegressed))
        }
        _ => Ok(Err(Refusal::Invalid)),
    }
}

/// Whether `assertion` (JSON) is a valid passkey assertion of `user`'s answering a live
/// challenge: the OTP check for [`SecondFactor::Passkey`] (`super::otp::verify_otp`).
pub(super) async fn verify_assertion(svc: &Identity, user: &User, assertion: &str) -> Result<bool> {
    let Some(value) = normalized(assertion) else { return Ok(false) };
    let Some(challenge) = answered_challenge(&value) else { return Ok(false) };
    let Some(pending) = svc.store.take_challenge(&challenge, ids::now()).await? else { return Ok(false) };
    Ok(check_assertion(svc, user, value, pending).await?.is_ok())
}
