//! Enterprise webhook secrets: created or rotated by enterprise admins, sealed with the master
//! key, with the previous secret valid for `notifications::secret_cache::GRACE_SECS` after a rotation; and
//! the check of a received notification against them (§4.10, §5.7).
//!
//! Layer rule: no web-framework types and nothing of the HTTP layer (docs/architecture.md).

use super::access::{enterprise_access, webhook_access};
use crate::error::ErrorName;
use crate::model::audit::AuditType;
use crate::{
    error::{Error, Result},
    identity::bearer::Principal,
    notifications::{
        secret_cache::{load, secret_aad},
        signing,
    },
    store::Rotation,
    types::{EnterpriseId, WebhookId},
    webhooks::Webhooks,
};

/// Shortest time between rotations, seconds (docs/decisions.md#webhooks: 5 minutes).
pub const MIN_ROTATION_INTERVAL: i64 = 300;

/// Creates or rotates the enterprise's webhook secret (enterprise admins); returns the new
/// secret, shown once. Errors: access, `Throttled` within [`MIN_ROTATION_INTERVAL`] of the
/// last rotation.
pub async fn rotate(svc: &Webhooks, auth: &Principal, enterprise_id: &EnterpriseId) -> Result<String> {
    let e = enterprise_access(svc, auth, enterprise_id).await?;
    let secret = signing::new_secret();
    let sealed = svc.key.seal(&secret_aad(&e.id), secret.as_bytes())?;
    let entry = crate::audit::EntryExt::enterprise(auth.audit(AuditType::WebhookSecretRotated), Some(&e.id));
    match svc
        .store
        .rotate_webhook_secret(&e.id, &sealed, svc.store.clock().now(), MIN_ROTATION_INTERVAL, &[entry])
        .await?
    {
        Rotation::Done => {
            svc.secrets.invalidate(&e.id);
            Ok(secret)
        }
        Rotation::TooSoon(wait) => Err(Error::Throttled {
            name: ErrorName::TooManyRequests,
            message: "the webhook secret may be rotated at most once per 5 minutes".into(),
            retry_after_secs: u64::try_from(wait).unwrap_or(1).max(1),
        }),
    }
}

/// Whether `signature` (hex HMAC-SHA256, BitGo's `X-Signature-SHA256`) signs `payload` under
/// the current secret of the webhook's enterprise, or the previous one within its grace.
/// Counted against the webhook's operation limit (`webhooks.operations_per_minute`) before
/// anything is checked. Errors: access, `Throttled` (429), `NoWebhookSecret`.
pub async fn verify(
    svc: &Webhooks,
    auth: &Principal,
    webhook_id: &WebhookId,
    signature: &str,
    payload: &str,
) -> Result<bool> {
    let w = webhook_access(svc, auth, webhook_id).await?;
    // Counted like simulate, resend and unblock (docs/decisions.md#faults-and-floods): guesses are bounded per webhook.
    svc.operations.check(&w.id).await?;
    let no_secret = || Error::Invalid {
        name: ErrorName::NoWebhookSecret,
        message:
            "the webhook's enterprise has no webhook secret: create one with POST /api/v2/webhook/secret"
                .into(),
        context: serde_json::json!({ "enterpriseId": w.level.enterprise_id() }),
    };
    let eid = w.level.enterprise_id().ok_or_else(no_secret)?;
    let s = load(&svc.store, &svc.key, eid).await?.ok_or_else(no_secret)?;
    let body = payload.as_bytes();
    Ok(signing::verify_bitgo(&s.current, body, signature)
        | s.previous.as_ref().is_some_and(|p| signing::verify_bitgo(p, body, signature)))
}
