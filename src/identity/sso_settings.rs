//! An enterprise's identity provider (docs/sso.md#the-provider), BitGo's `oauthSetting` shapes
//! on Custodian's own route `PUT`, `GET` and `DELETE /api/v2/enterprise/{enterpriseId}/oauthSetting`:
//! `{oauthProvider: "okta", oktaDomain, clientId, clientSecret}`, `{oauthProvider: "msEntra",
//! tenantId, clientId, clientSecret}` or `{oauthProvider: "oidc", issuer, clientId,
//! clientSecret}`, with `scopes`, `groupsClaim` and `groupRoles` beside. The client secret is
//! sealed under the master key and never shown again.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use serde_json::{json, Value};

use super::{bearer::Principal, scopes::Action, Identity};
use crate::audit::EntryExt;
use crate::{
    config::Environment,
    error::{Error, ErrorName, Result},
    model::audit::AuditType,
    store::SsoSettingRow,
    types::{EnterpriseId, UserId},
};

/// Longest issuer, client id or secret, characters.
pub const MAX_FIELD: usize = 2048;
/// Most scopes, and most `groupRoles` entries.
pub const MAX_ENTRIES: usize = 50;

/// What an enterprise admin sends, and (less the secret) what `GET` shows.
#[derive(Debug, Clone, Default, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct OAuthSetting {
    /// `okta`, `msEntra` or `oidc`.
    pub oauth_provider: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub okta_domain: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tenant_id: Option<String>,
    /// The issuer URL of an `oidc` provider (discovery at `/.well-known/openid-configuration`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub issuer: Option<String>,
    pub client_id: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub client_secret: Option<String>,
    /// Scopes asked for beside `openid`; default `email`, `profile`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub scopes: Vec<String>,
    /// The userinfo claim whose values map to roles (`groups`, say); absent: no mapping, and the
    /// roles are the memberships as they are.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub groups_claim: Option<String>,
    /// A claim value to `admin` or `member`. A person with none of them is refused.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub group_roles: BTreeMap<String, String>,
    /// Just-in-time provisioning: a first sign-in with a verified email that no account has
    /// makes an account, a member of this enterprise only (docs/sso.md#linking). Off by default.
    #[serde(default)]
    pub provisioning: bool,
    /// Members may sign in only through the provider: not with a password or passkey, through
    /// the API or the console (docs/sso.md#sso-required).
    #[serde(default)]
    pub sso_required: bool,
    /// User ids (32 hex) of members who keep their password and passkeys when `ssoRequired`
    /// (break-glass owners, audited on each use); service admins always keep theirs.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schema(max_items = 10)]
    pub break_glass: Vec<String>,
}

/// Most break-glass owners of an enterprise.
pub const MAX_BREAK_GLASS: usize = 10;

impl OAuthSetting {
    /// The issuer URL the provider's fields give. Errors: `InvalidField` naming the field.
    fn issuer(&self, env: Environment) -> Result<String> {
        let dns = |field: &str, v: &Option<String>| -> Result<String> {
            let v = v.as_deref().ok_or_else(|| Error::missing_field(field))?;
            let ok = !v.is_empty()
                && v.len() <= 253
                && v.split('.').all(|l| {
                    !l.is_empty() && l.len() <= 63 && l.chars().all(|c| c.is_ascii_alphanumeric() || c == '-')
                });
            ok.then(|| v.to_ascii_lowercase())
                .ok_or_else(|| Error::invalid_field(field, "a DNS name (letters, digits, dots and hyphens)"))
        };
        match self.oauth_provider.as_str() {
            "okta" => Ok(format!("https://{}", dns("oktaDomain", &self.okta_domain)?)),
            "msEntra" => {
                Ok(format!("https://login.microsoftonline.com/{}/v2.0", dns("tenantId", &self.tenant_id)?))
            }
            "oidc" => {
                let text = self.issuer.as_deref().ok_or_else(|| Error::missing_field("issuer"))?;
                check_issuer(text, env)?;
                Ok(text.trim_end_matches('/').to_string())
            }
            _ => Err(Error::invalid_field("oauthProvider", "okta, msEntra or oidc")),
        }
    }

    /// Checks every field; `secret` is the `clientSecret` sent.
    fn check(&self, secret: &str) -> Result<()> {
        let long = |field: &str, v: &str| match v.is_empty() || v.len() > MAX_FIELD {
            true => Err(Error::invalid_field(field, format!("1 to {MAX_FIELD} characters"))),
            false => Ok(()),
        };
        long("clientId", &self.client_id)?;
        long("clientSecret", secret)?;
        if self.scopes.len() > MAX_ENTRIES || self.group_roles.len() > MAX_ENTRIES {
            return Err(Error::invalid_field(
                "scopes",
                format!("at most {MAX_ENTRIES} scopes and groupRoles"),
            ));
        }
        let token =
            |s: &str| !s.is_empty() && s.len() <= 200 && s.chars().all(|c| c.is_ascii_graphic() && c != '"');
        if !self.scopes.iter().all(|s| token(s)) {
            return Err(Error::invalid_field("scopes", "each 1 to 200 printable characters"));
        }
        if self.groups_claim.as_deref().is_some_and(|c| !token(c)) {
            return Err(Error::invalid_field("groupsClaim", "1 to 200 printable characters"));
        }
        if self
            .group_roles
            .iter()
            .any(|(k, v)| k.is_empty() || k.len() > 200 || !matches!(v.as_str(), "admin" | "member"))
        {
            return Err(Error::invalid_field(
                "groupRoles",
                "each value `admin` or `member`, each key 1 to 200 characters",
            ));
        }
        if !self.group_roles.is_empty() && self.groups_claim.is_none() {
            return Err(Error::missing_field("groupsClaim"));
        }
        if self.break_glass.len() > MAX_BREAK_GLASS
            || self.break_glass.iter().any(|u| u.parse::<UserId>().is_err())
        {
            return Err(Error::invalid_field(
                "breakGlass",
                format!("at most {MAX_BREAK_GLASS} user ids (32 hex)"),
            ));
        }
        Ok(())
    }
}

/// An issuer URL: https (http too in the test environment), a host, no user, query or
/// fragment, at most [`MAX_FIELD`] characters.
fn check_issuer(text: &str, env: Environment) -> Result<()> {
    let bad = |why: &str| Error::invalid_field("issuer", why);
    if text.len() > MAX_FIELD {
        return Err(bad("at most 2048 characters"));
    }
    let url = url::Url::parse(text).map_err(|_| bad("an absolute URL"))?;
    let scheme_ok = url.scheme() == "https" || (url.scheme() == "http" && env != Environment::Production);
    if !scheme_ok || url.host_str().is_none() {
        return Err(bad("an https URL with a host (http too in the test environment)"));
    }
    if !url.username().is_empty()
        || url.password().is_some()
        || url.query().is_some()
        || url.fragment().is_some()
    {
        return Err(bad("no user, query or fragment"));
    }
    Ok(())
}

/// The stored provider as the enterprise's admins see it: no secret.
pub fn view(row: &SsoSettingRow) -> Result<Value> {
    let mut s: OAuthSetting = serde_json::from_str(&row.settings)
        .map_err(|e| Error::Internal(anyhow::anyhow!("stored oauthSetting: {e}")))?;
    s.client_secret = None;
    let mut v = serde_json::to_value(&s).map_err(|e| Error::Internal(e.into()))?;
    v["issuer"] = json!(row.issuer);
    v["enterpriseId"] = json!(row.enterprise_id.as_str());
    v["updatedAt"] = json!(crate::clock::iso(row.updated_at));
    Ok(v)
}

/// The stored setting's fields (less the secret), as [`OAuthSetting`].
pub fn settings_of(row: &SsoSettingRow) -> Result<OAuthSetting> {
    serde_json::from_str(&row.settings)
        .map_err(|e| Error::Internal(anyhow::anyhow!("stored oauthSetting: {e}")))
}

/// The client secret of `row`, opened.
pub fn secret_of(svc: &Identity, row: &SsoSettingRow) -> Result<String> {
    let sealed = hex::decode(&row.client_secret).map_err(|e| Error::Internal(e.into()))?;
    let plain = svc.key.open(&aad(&row.enterprise_id), &sealed)?;
    String::from_utf8(plain).map_err(|e| Error::Internal(e.into()))
}

fn aad(e: &EnterpriseId) -> String {
    format!("sso-client-secret:{}", e.as_str())
}

/// The caller is an admin of `e` (or a service admin) whose token may manage it. Errors:
/// `InsufficientScope`, `EnterpriseNotFound` (not a member), `Forbidden` (not an admin).
async fn require_admin(svc: &Identity, auth: &Principal, e: &EnterpriseId) -> Result<()> {
    auth.require(svc.policy, Action::ManageEnterprise { enterprise_id: e })?;
    if auth.user.service_admin {
        return Ok(());
    }
    let ms = svc.store.memberships(&auth.user.id).await?;
    match ms.iter().find(|m| &m.enterprise.id == e) {
        Some(m) if m.is_admin => Ok(()),
        Some(_) => Err(Error::Forbidden {
            name: ErrorName::InsufficientScope,
            message: "only an admin of the enterprise sets its identity provider".into(),
            context: json!({ "requiredRole": "enterprise admin" }),
        }),
        None => Err(Error::not_found(ErrorName::EnterpriseNotFound)),
    }
}

/// Sets enterprise `e`'s provider from `body` ([`OAuthSetting`], `clientSecret` required),
/// replacing one set before. Audited as `sso.setting_set` (without the secret). Answers
/// [`view`]. Errors: `MissingField`, `InvalidField`, and as [`require_admin`].
pub async fn set(svc: &Identity, auth: &Principal, e: &EnterpriseId, body: &Value) -> Result<Value> {
    require_admin(svc, auth, e).await?;
    let mut s: OAuthSetting = crate::error::parse_value(body)?;
    let issuer = s.issuer(svc.config.environment)?;
    let secret = s.client_secret.take().ok_or_else(|| Error::missing_field("clientSecret"))?;
    s.check(&secret)?;
    for owner in &s.break_glass {
        let id: UserId = owner.parse().map_err(|_| Error::invalid_field("breakGlass", "user ids"))?;
        let member = svc.store.memberships(&id).await?.iter().any(|m| &m.enterprise.id == e);
        if !member {
            return Err(Error::invalid_field(
                "breakGlass",
                format!("{owner} is not a member of the enterprise"),
            ));
        }
    }
    s.issuer = (s.oauth_provider == "oidc").then(|| issuer.clone());
    let sealed = svc.key.seal(&aad(e), secret.as_bytes())?;
    let row = SsoSettingRow {
        enterprise_id: e.clone(),
        provider: s.oauth_provider.clone(),
        issuer,
        client_id: s.client_id.clone(),
        client_secret: hex::encode(sealed),
        settings: serde_json::to_string(&s).map_err(|e| Error::Internal(e.into()))?,
        updated_at: svc.store.clock().now(),
    };
    let mut entry = auth.audit(AuditType::SsoSettingSet).data(serde_json::to_value(&s).unwrap_or_default());
    entry.enterprise_id = Some(e.clone());
    svc.store.set_sso_setting(&row, &[entry]).await?;
    view(&row)
}

/// Enterprise `e`'s provider ([`view`]). Errors: `SsoNotConfigured` (404), and as
/// [`require_admin`].
pub async fn get(svc: &Identity, auth: &Principal, e: &EnterpriseId) -> Result<Value> {
    require_admin(svc, auth, e).await?;
    let row = svc.store.sso_setting(e).await?.ok_or_else(|| Error::not_found(ErrorName::SsoNotConfigured))?;
    view(&row)
}

/// Removes enterprise `e`'s provider; audited as `sso.setting_removed`. Linked identities stay,
/// unused until a provider of the same issuer is set again. Errors: as [`get`].
pub async fn remove(svc: &Identity, auth: &Principal, e: &EnterpriseId) -> Result<()> {
    require_admin(svc, auth, e).await?;
    let mut entry = auth.audit(AuditType::SsoSettingRemoved);
    entry.enterprise_id = Some(e.clone());
    match svc.store.delete_sso_setting(e, &[entry]).await? {
        true => Ok(()),
        false => Err(Error::not_found(ErrorName::SsoNotConfigured)),
    }
}
