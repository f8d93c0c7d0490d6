//! Sign-in with a passkey (`grant_type: "passkey"`): a challenge from
//! `POST /api/auth/v1/passkey/challenge`, answered through `POST /api/auth/v1/session` with
//! `{passkey, userId}` as BitGoJS's `authenticateWithPasskey` sends it. A passkey verifies its
//! user, so it stands for password and OTP. The login throttles count passkey attempts as they
//! count passwords (`super::throttle`), keyed by the user the handle names.
//!
//! Layer rule: no web-framework types and nothing of the HTTP layer (docs/architecture.md).

use std::net::IpAddr;

use base64::{engine::general_purpose::URL_SAFE_NO_PAD as B64URL, Engine};
use serde_json::{json, Value};

use super::{
    login::{issue_session, Session, SessionOptions},
    throttle,
    webauthn::{answered_challenge, check_assertion, keep, normalized, user_of_handle, Refusal},
    Identity,
};
use crate::{
    audit::{self, EntryExt},
    error::{Error, ErrorName, Result},
    model::{audit::AuditType, passkey::ChallengePurpose, token::GrantType},
    types::Email,
};

/// Request options (`{publicKey}`) for signing in with a passkey. No credential is listed
/// (discoverable credentials), so the answer is the same whether `email` names a user or not;
/// when it names one, only their passkeys can answer it. Errors: `Invalid` (`email`),
/// `Throttled` (this client's waiting challenges), `Busy`.
pub async fn challenge(svc: &Identity, email: Option<&str>, ip: IpAddr) -> Result<Value> {
    let user = match email.map(str::trim).filter(|e| !e.is_empty()) {
        Some(e) => {
            let email = Email::parse(e).map_err(|why| Error::invalid_field("email", why))?;
            svc.store.user_by_email(&email).await?.filter(|u| u.is_active).map(|u| u.id)
        }
        None => None,
    };
    let (options, state) = svc
        .webauthn
        .start_discoverable_authentication()
        .map_err(|e| Error::Internal(anyhow::anyhow!("passkeys: {e}")))?;
    // Only the request options: conditional mediation (autofill) is the page's choice.
    let options = json!({ "publicKey": options.public_key });
    keep(svc, &options, ChallengePurpose::Login, user, ip, &state).await?;
    Ok(options)
}

fn refused() -> Error {
    Error::LoginFailed {
        name: ErrorName::InvalidCredentials,
        message: "the passkey was not accepted".into(),
        needs_otp: false,
    }
}

/// Signs in with `passkey` (the JSON of `navigator.credentials.get()`'s credential) of the
/// user `user_handle` names (its `response.userHandle`, base64url of the user's id). Errors:
/// `Invalid` (`userId` is not a user handle), `Throttled`, `LoginFailed` (`InvalidCredentials`:
/// an unknown user, an assertion that answers no live sign-in challenge, fails verification,
/// names another user or a counter that did not grow, audited).
pub async fn login(svc: &Identity, passkey: &str, user_handle: &str, ip: IpAddr) -> Result<Session> {
    let handle = B64URL
        .decode(user_handle.trim().trim_end_matches('=').replace('+', "-").replace('/', "_"))
        .ok()
        .and_then(|h| user_of_handle(&h))
        .ok_or_else(|| {
            Error::invalid_field("userId", "must be the credential's userHandle (base64url, 16 bytes)")
        })?;
    let user = svc.store.user_by_id(&handle).await?.filter(|u| u.is_active);
    let key = user.as_ref().map_or_else(|| format!("passkey:{handle}"), |u| u.email.to_string());
    let client = throttle::client_key(ip);
    let now = svc.store.clock().now();
    let attempt = throttle::begin_login(svc, &key, &client, now).await?;
    let value = normalized(passkey).filter(|v| same_handle(v, user_handle));
    let pending = match value.as_ref().and_then(answered_challenge) {
        Some(challenge) => svc.store.take_challenge(&challenge, now).await?,
        None => None,
    };
    let outcome = match (user.as_ref(), value, pending) {
        (Some(user), Some(value), Some(p)) if p.purpose == ChallengePurpose::Login => {
            check_assertion(svc, user, value, p).await?
        }
        _ => Err(Refusal::Invalid),
    };
    if let Err(why) = outcome {
        let reason =
            if why == Refusal::CounterRegressed { "passkey_counter_regressed" } else { "invalid_passkey" };
        let mut entry = audit::entry(AuditType::LoginFailed).data(json!({ "email": key, "reason": reason }));
        entry.ip = Some(ip.to_string());
        entry.user_id = user.as_ref().map(|u| u.id.clone());
        audit::record(&svc.store, &[entry]).await;
        return Err(refused());
    }
    let Some(user) = user else { return Err(refused()) };
    attempt.forget(svc).await?;
    throttle::login_succeeded(svc, &key, &client, now).await?;
    svc.store.set_last_login(&user.id, now, &[]).await?;
    // BitGoJS's passkey login takes `access_token` only: no ECDH handover without a password.
    let options = SessionOptions { grant_type: GrantType::Passkey, ..SessionOptions::default() };
    issue_session(svc, (*user).clone(), ip, now, options).await
}

/// Whether the assertion's own `userHandle` is the one sent beside it.
fn same_handle(value: &Value, sent: &str) -> bool {
    let norm = |s: &str| s.trim().trim_end_matches('=').replace('+', "-").replace('/', "_");
    value["response"]["userHandle"].as_str().is_some_and(|h| norm(h) == norm(sent))
}
