//! `ssoRequired` (docs/sso.md#sso-required): an enterprise that requires single sign-on holds its
//! members to it, and its break-glass owners and service admins keep their passwords and
//! passkeys, audited on each use.

use serde_json::json;

use super::{sso_settings, Identity};
use crate::{
    audit::EntryExt,
    error::{Error, ErrorName, Result},
    model::{audit::AuditType, token::GrantType},
};

/// Refuses a password or passkey sign-in (`grant`) of `user` when an enterprise they belong to
/// requires single sign-on (`ssoRequired`), unless they are a service admin or one of its
/// break-glass owners: then the sign-in goes on, audited as `login.break_glass`. A refusal is
/// audited as `login.failed` (`reason: "sso_required"`). Errors: `SsoRequired` (403).
pub async fn check_required(
    svc: &Identity,
    user: &crate::store::User,
    memberships: &[crate::store::Membership],
    grant: GrantType,
    ip: std::net::IpAddr,
) -> Result<()> {
    let mut waived = Vec::new();
    for m in memberships {
        let Some(row) = svc.store.sso_setting(&m.enterprise.id).await? else { continue };
        let setting = sso_settings::settings_of(&row)?;
        if !setting.sso_required {
            continue;
        }
        if user.service_admin || setting.break_glass.iter().any(|u| u == user.id.as_str()) {
            waived.push(m.enterprise.id.as_str().to_string());
            continue;
        }
        let mut entry = crate::audit::entry(AuditType::LoginFailed)
            .data(json!({ "email": user.email, "reason": "sso_required", "grantType": grant.as_str() }));
        (entry.user_id, entry.ip, entry.enterprise_id) =
            (Some(user.id.clone()), Some(ip.to_string()), Some(m.enterprise.id.clone()));
        crate::audit::record(&svc.store, &[entry]).await;
        return Err(Error::Forbidden {
            name: ErrorName::SsoRequired,
            message: format!(
                "{} requires single sign-on: sign in through its identity provider (/console/sso)",
                m.enterprise.name
            ),
            context: json!({ "enterpriseId": m.enterprise.id.as_str() }),
        });
    }
    if !waived.is_empty() {
        let mut entry = crate::audit::entry(AuditType::LoginBreakGlass)
            .data(json!({ "enterprises": waived, "grantType": grant.as_str() }));
        (entry.user_id, entry.ip) = (Some(user.id.clone()), Some(ip.to_string()));
        crate::audit::record(&svc.store, &[entry]).await;
    }
    Ok(())
}

/// What a single sign-on session shows of its provider (the session view's `ssoProvider` and
/// `oauth.oauthRequired`): the provider (`okta`, `msEntra`, `oidc`) of the first enterprise
/// `user` is linked through that still has one, and whether it requires single sign-on.
pub async fn provider_of(svc: &Identity, user: &crate::types::UserId) -> Result<Option<(String, bool)>> {
    for e in svc.store.sso_enterprises_of(user).await? {
        if let Some(row) = svc.store.sso_setting(&e).await? {
            let required = sso_settings::settings_of(&row)?.sso_required;
            return Ok(Some((row.provider, required)));
        }
    }
    Ok(None)
}
