//! WebAuthn ceremonies' common parts (W3C WebAuthn Level 3, with webauthn-rs): the relying
//! party, user handles, challenges kept in the store until answered (once, before
//! `passkeys.challenge_ttl`), and the check of an assertion, which stands for an OTP
//! ([`verify_assertion`], used by `super::otp`) or signs in (`super::passkey_login`).
//! Registration and removal are in `super::passkeys`.
//!
//! Layer rule: no web-framework types and nothing of the HTTP layer (docs/architecture.md).

use base64::{engine::general_purpose::URL_SAFE_NO_PAD as B64URL, Engine};
use serde_json::{json, Value};
use webauthn_rs::prelude::{
    DiscoverableAuthentication, Passkey, PasskeyAuthentication, PublicKeyCredential, Url, Uuid, Webauthn,
    WebauthnBuilder, WebauthnError,
};

use super::Identity;
use crate::{
    audit::{self, EntryExt},
    config::PasskeysConfig,
    error::{Error, Result},
    model::{
        audit::AuditType,
        passkey::{ChallengePurpose, PasskeyRecord, PendingChallenge},
    },
    store::{ChallengeKept, User},
    types::UserId,
};

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

pub(super) fn internal(e: impl std::fmt::Display) -> Error {
    Error::Internal(anyhow::anyhow!("passkeys: {e}"))
}

/// Keeps a ceremony's state until its answer, asked for from `ip`. Errors: `Throttled`
/// (`TooManyRequests`) when that client holds `passkeys.max_pending_per_client` already,
/// `Busy` when `passkeys.max_pending_challenges` wait across clients.
pub async fn keep(
    svc: &Identity,
    options: &Value,
    purpose: ChallengePurpose,
    user_id: Option<UserId>,
    ip: std::net::IpAddr,
    state: &impl serde::Serialize,
) -> Result<()> {
    let challenge = options["publicKey"]["challenge"].as_str().ok_or_else(|| internal("no challenge"))?;
    let now = svc.store.clock().now();
    let pending = PendingChallenge {
        challenge: challenge.to_string(),
        purpose,
        user_id,
        state: serde_json::to_string(state).map_err(internal)?,
        expires_at: now + i64::try_from(svc.config.passkeys.challenge_ttl).unwrap_or(300),
        client: super::throttle::client_key(ip),
    };
    let cfg = &svc.config.passkeys;
    match svc
        .store
        .keep_challenge(&pending, cfg.max_pending_challenges, cfg.max_pending_per_client, now)
        .await?
    {
        ChallengeKept::Kept => Ok(()),
        ChallengeKept::ClientFull => Err(Error::Throttled {
            name: crate::error::ErrorName::TooManyRequests,
            message: "this client has too many passkey challenges waiting; answer one or wait".into(),
            retry_after_secs: cfg.challenge_ttl,
        }),
        ChallengeKept::Full => Err(Error::Busy {
            message: "too many passkey ceremonies are waiting for an answer; try again shortly".into(),
            retry_after_secs: 5,
        }),
    }
}

/// A client's credential JSON made as webauthn-rs reads it: base64url without padding in the
/// binary fields (some clients send standard base64), `rawId` from `id`, `type`.
pub fn normalized(json: &str) -> Option<Value> {
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

/// A credential's `clientDataJSON`, decoded.
fn client_data(credential: &Value) -> Option<Value> {
    let client_data = B64URL.decode(credential["response"]["clientDataJSON"].as_str()?).ok()?;
    serde_json::from_slice(&client_data).ok()
}

/// The challenge a credential answers, from its `clientDataJSON`.
pub fn answered_challenge(credential: &Value) -> Option<String> {
    client_data(credential)?["challenge"].as_str().map(str::to_string)
}

pub fn parsed_passkeys(records: &[PasskeyRecord]) -> Vec<(&PasskeyRecord, Passkey)> {
    records.iter().filter_map(|r| Some((r, serde_json::from_str(&r.credential).ok()?))).collect()
}

/// Why an assertion was not accepted.
#[derive(Debug, PartialEq, Eq)]
pub enum Refusal {
    /// Malformed, answering no live challenge for this user, or failing verification.
    Invalid,
    /// The signature counter did not grow: a cloned authenticator, or a replayed answer.
    CounterRegressed,
}

/// Checks an assertion (`value`, normalized) of `user`'s against a challenge taken for it, and
/// records the passkey's use. A sign-in challenge (`Login`) is discoverable; a `Verify` one
/// names the user's passkeys.
pub async fn check_assertion(
    svc: &Identity,
    user: &User,
    value: Value,
    pending: PendingChallenge,
) -> Result<std::result::Result<(), Refusal>> {
    // webauthn-rs checks `crossOrigin` at registration only: an assertion made in a frame of
    // another origin (WebAuthn L3 §7.2 step 11) is refused here too.
    let cross_origin = client_data(&value).is_some_and(|d| d["crossOrigin"].as_bool() == Some(true));
    if pending.user_id.as_ref().is_some_and(|u| *u != user.id)
        || pending.purpose == ChallengePurpose::Register
        || cross_origin
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
            svc.store.record_passkey_use(&record.id, &kept, svc.store.clock().now()).await?;
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
pub async fn verify_assertion(svc: &Identity, user: &User, assertion: &str) -> Result<bool> {
    let Some(value) = normalized(assertion) else { return Ok(false) };
    let Some(challenge) = answered_challenge(&value) else { return Ok(false) };
    let Some(pending) = svc.store.take_challenge(&challenge, svc.store.clock().now()).await? else {
        return Ok(false);
    };
    Ok(check_assertion(svc, user, value, pending).await?.is_ok())
}
