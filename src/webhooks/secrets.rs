//! Enterprise webhook secrets: created or rotated by enterprise admins, sealed with the master
//! key, with the previous secret valid for [`GRACE_SECS`] after a rotation; and the check of a
//! received notification against them (§4.10, §5.7).
//!
//! Layer rule: no web-framework types and nothing of the HTTP layer (docs/architecture.md).

use std::{
    collections::HashMap,
    sync::Mutex,
    time::{Duration, Instant},
};

use super::{
    access::{enterprise_access, webhook_access},
    signing,
};
use crate::{
    error::{Error, Result},
    identity::auth::Principal,
    ids,
    store::Rotation,
    AppState,
};

/// How long the previous secret stays valid after a rotation, seconds (issue 4: 24 hours).
pub const GRACE_SECS: i64 = 24 * 3600;
/// Shortest time between rotations, seconds (issue 4: 5 minutes).
pub const MIN_ROTATION_INTERVAL: i64 = 300;
/// How long the delivery engine reuses a loaded secret.
const CACHE_TTL: Duration = Duration::from_secs(5);

/// The secrets usable now for one enterprise.
#[derive(Clone)]
pub struct EnterpriseSecrets {
    pub current: String,
    /// Present only within the grace period after a rotation.
    pub previous: Option<String>,
}

/// Associated data binding a sealed secret to its enterprise.
pub fn secret_aad(enterprise_id: &str) -> String {
    format!("webhook-secret:{enterprise_id}")
}

/// Loads and decrypts the enterprise's secrets; `None` when it has none.
pub async fn load(state: &AppState, enterprise_id: &str) -> anyhow::Result<Option<EnterpriseSecrets>> {
    let Some(s) = state.store.webhook_secret(enterprise_id).await? else { return Ok(None) };
    let aad = secret_aad(enterprise_id);
    let open = |b: &[u8]| -> anyhow::Result<String> { Ok(String::from_utf8(state.key.open(&aad, b)?)?) };
    let previous = match &s.previous_enc {
        Some(p) if ids::now() < s.rotated_at + GRACE_SECS => Some(open(p)?),
        _ => None,
    };
    Ok(Some(EnterpriseSecrets { current: open(&s.current_enc)?, previous }))
}

/// A short-lived cache of decrypted secrets for the delivery engine.
#[derive(Default)]
pub struct SecretCache {
    map: Mutex<HashMap<String, (Instant, Option<EnterpriseSecrets>)>>,
}

impl SecretCache {
    /// The secrets of `enterprise_id`, loaded at most [`CACHE_TTL`] ago.
    pub async fn get(
        &self,
        state: &AppState,
        enterprise_id: &str,
    ) -> anyhow::Result<Option<EnterpriseSecrets>> {
        if let Ok(map) = self.map.lock() {
            if let Some((at, v)) = map.get(enterprise_id) {
                if at.elapsed() < CACHE_TTL {
                    return Ok(v.clone());
                }
            }
        }
        let v = load(state, enterprise_id).await?;
        if let Ok(mut map) = self.map.lock() {
            map.insert(enterprise_id.to_string(), (Instant::now(), v.clone()));
        }
        Ok(v)
    }

    /// Forgets an enterprise's entry (after a rotation in this process).
    pub fn invalidate(&self, enterprise_id: &str) {
        if let Ok(mut map) = self.map.lock() {
            map.remove(enterprise_id);
        }
    }
}

/// Creates or rotates the enterprise's webhook secret (enterprise admins); returns the new
/// secret, shown once. Errors: access, `Throttled` within [`MIN_ROTATION_INTERVAL`] of the
/// last rotation.
pub async fn rotate(state: &AppState, auth: &Principal, enterprise_id: &str) -> Result<String> {
    let e = enterprise_access(state, auth, enterprise_id).await?;
    let secret = signing::new_secret();
    let sealed = state.key.seal(&secret_aad(&e.id), secret.as_bytes())?;
    let entry =
        crate::audit::EntryExt::enterprise(crate::audit::by(auth, "webhook_secret.rotated"), Some(&e.id));
    match state
        .store
        .rotate_webhook_secret(&e.id, &sealed, ids::now(), MIN_ROTATION_INTERVAL, &[entry])
        .await?
    {
        Rotation::Done => {
            state.secrets.invalidate(&e.id);
            Ok(secret)
        }
        Rotation::TooSoon(wait) => Err(Error::Throttled {
            name: "TooManyRequests",
            message: "the webhook secret may be rotated at most once per 5 minutes".into(),
            retry_after_secs: u64::try_from(wait).unwrap_or(1).max(1),
        }),
    }
}

/// Whether `signature` (hex HMAC-SHA256, BitGo's `X-Signature-SHA256`) signs `payload` under
/// the current secret of the webhook's enterprise, or the previous one within its grace.
/// Errors: access, `NoWebhookSecret`.
pub async fn verify(
    state: &AppState,
    auth: &Principal,
    webhook_id: &str,
    signature: &str,
    payload: &str,
) -> Result<bool> {
    let w = webhook_access(state, auth, webhook_id).await?;
    let no_secret = || Error::Invalid {
        name: "NoWebhookSecret",
        message:
            "the webhook's enterprise has no webhook secret: create one with POST /api/v2/webhook/secret"
                .into(),
        context: serde_json::json!({ "enterpriseId": w.level.enterprise_id() }),
    };
    let eid = w.level.enterprise_id().ok_or_else(no_secret)?;
    let s = load(state, eid).await?.ok_or_else(no_secret)?;
    let body = payload.as_bytes();
    Ok(signing::verify_bitgo(&s.current, body, signature)
        | s.previous.as_ref().is_some_and(|p| signing::verify_bitgo(p, body, signature)))
}
