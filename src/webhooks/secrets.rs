//! Enterprise webhook secrets: created or rotated by enterprise admins, sealed with the master
//! key, with the previous secret valid for [`GRACE_SECS`] after a rotation.

use std::{
    collections::HashMap,
    sync::Mutex,
    time::{Duration, Instant},
};

use crate::{ids, AppState};

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
