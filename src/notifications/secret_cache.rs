//! Enterprise webhook secrets as delivery and verification read them: opened with the master
//! key, the previous one kept for a grace period after a rotation, and briefly cached for
//! delivery. Rotation is `webhooks::secret`.
//!
//! Layer rule: no web-framework types and nothing of the HTTP layer (docs/architecture.md).

use std::{
    collections::HashMap,
    sync::Mutex,
    time::{Duration, Instant},
};

use crate::{master_key::MasterKey, store::DynStore, types::EnterpriseId};

/// How long the previous secret stays valid after a rotation, seconds (docs/decisions.md#webhooks: 24 hours).
pub const GRACE_SECS: i64 = 24 * 3600;
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
pub fn secret_aad(enterprise_id: &EnterpriseId) -> String {
    format!("webhook-secret:{enterprise_id}")
}

/// Loads and decrypts the enterprise's secrets; `None` when it has none.
pub async fn load(
    store: &DynStore,
    key: &MasterKey,
    enterprise_id: &EnterpriseId,
) -> anyhow::Result<Option<EnterpriseSecrets>> {
    let Some(s) = store.webhook_secret(enterprise_id).await? else { return Ok(None) };
    let aad = secret_aad(enterprise_id);
    let open = |b: &[u8]| -> anyhow::Result<String> { Ok(String::from_utf8(key.open(&aad, b)?)?) };
    let previous = match &s.previous_enc {
        Some(p) if store.clock().now() < s.rotated_at + GRACE_SECS => Some(open(p)?),
        _ => None,
    };
    Ok(Some(EnterpriseSecrets { current: open(&s.current_enc)?, previous }))
}

/// A short-lived cache of decrypted secrets for the delivery engine.
#[derive(Default)]
pub struct SecretCache {
    map: Mutex<HashMap<EnterpriseId, (Instant, Option<EnterpriseSecrets>)>>,
}

impl SecretCache {
    /// The secrets of `enterprise_id`, loaded at most [`CACHE_TTL`] ago.
    pub async fn get(
        &self,
        store: &DynStore,
        key: &MasterKey,
        enterprise_id: &EnterpriseId,
    ) -> anyhow::Result<Option<EnterpriseSecrets>> {
        if let Ok(map) = self.map.lock() {
            if let Some((at, v)) = map.get(enterprise_id) {
                if at.elapsed() < CACHE_TTL {
                    return Ok(v.clone());
                }
            }
        }
        let v = load(store, key, enterprise_id).await?;
        if let Ok(mut map) = self.map.lock() {
            map.insert(enterprise_id.clone(), (Instant::now(), v.clone()));
        }
        Ok(v)
    }

    /// Forgets an enterprise's entry (after a rotation in this process).
    pub fn invalidate(&self, enterprise_id: &EnterpriseId) {
        if let Ok(mut map) = self.map.lock() {
            map.remove(enterprise_id);
        }
    }
}
