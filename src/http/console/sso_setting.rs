//! An enterprise's identity provider, set by its admins in the console (docs/sso.md#the-provider):
//! the same `identity::sso_settings` calls as `PUT`, `GET` and `DELETE
//! /api/v2/enterprise/{id}/oauthSetting`, so the same checks and audit entries apply. The
//! client secret is asked for on each save and never shown.

use axum::{
    extract::{Path, State},
    http::HeaderMap,
    response::Response,
};
use maud::html;
use serde::Deserialize;
use serde_json::{json, Map, Value};

use super::layout::Shown;
use super::{error_response, html, layout, Form, NoFields, Session};
use crate::{
    error::{Error, ErrorName},
    identity::sso_settings,
    types::EnterpriseId,
    AppState,
};

/// The form's fields, as typed. Lists are space- or comma-separated; `groupRoles` is one
/// `value=role` per line.
#[derive(Debug, Default, Deserialize)]
pub struct SettingForm {
    #[serde(default, rename = "oauthProvider")]
    pub oauth_provider: String,
    #[serde(default, rename = "oktaDomain")]
    pub okta_domain: String,
    #[serde(default, rename = "tenantId")]
    pub tenant_id: String,
    #[serde(default)]
    pub issuer: String,
    #[serde(default, rename = "clientId")]
    pub client_id: String,
    #[serde(default, rename = "clientSecret")]
    pub client_secret: String,
    #[serde(default)]
    pub scopes: String,
    #[serde(default, rename = "groupsClaim")]
    pub groups_claim: String,
    #[serde(default, rename = "groupRoles")]
    pub group_roles: String,
    /// Checkboxes: present (`on`) when ticked.
    #[serde(default)]
    pub provisioning: Option<String>,
    #[serde(default, rename = "ssoRequired")]
    pub sso_required: Option<String>,
    #[serde(default, rename = "breakGlass")]
    pub break_glass: String,
}

fn words(s: &str) -> Vec<&str> {
    s.split([' ', ',', '\n', '\r']).filter(|w| !w.is_empty()).collect()
}

impl SettingForm {
    /// The fields of a stored setting ([`sso_settings::view`]), the secret left empty.
    fn of_view(v: &Value) -> SettingForm {
        let text = |k: &str| v[k].as_str().unwrap_or_default().to_string();
        let list = |k: &str| {
            v[k].as_array().map(|a| a.iter().filter_map(Value::as_str).collect::<Vec<_>>().join(" "))
        };
        let roles = v["groupRoles"].as_object().map(|m| {
            m.iter().map(|(k, r)| format!("{k}={}", r.as_str().unwrap_or_default())).collect::<Vec<_>>()
        });
        SettingForm {
            oauth_provider: text("oauthProvider"),
            okta_domain: text("oktaDomain"),
            tenant_id: text("tenantId"),
            issuer: if v["oauthProvider"] == "oidc" { text("issuer") } else { String::new() },
            client_id: text("clientId"),
            client_secret: String::new(),
            scopes: list("scopes").unwrap_or_default(),
            groups_claim: text("groupsClaim"),
            group_roles: roles.unwrap_or_default().join("\n"),
            provisioning: (v["provisioning"] == true).then(|| "on".into()),
            sso_required: (v["ssoRequired"] == true).then(|| "on".into()),
            break_glass: list("breakGlass").unwrap_or_default(),
        }
    }

    /// The `oauthSetting` body these fields make; the API's own checks then apply. Errors:
    /// `InvalidField` (`groupRoles`) for a line that is not `value=role`.
    fn body(&self) -> crate::error::Result<Value> {
        let mut body = json!({
            "oauthProvider": self.oauth_provider.trim(),
            "clientId": self.client_id.trim(),
            "scopes": words(&self.scopes),
            "groupRoles": {},
            "provisioning": self.provisioning.is_some(),
            "ssoRequired": self.sso_required.is_some(),
            "breakGlass": words(&self.break_glass),
        });
        for (k, v) in
            [("oktaDomain", &self.okta_domain), ("tenantId", &self.tenant_id), ("issuer", &self.issuer)]
        {
            if !v.trim().is_empty() {
                body[k] = json!(v.trim());
            }
        }
        if !self.client_secret.is_empty() {
            body["clientSecret"] = json!(self.client_secret);
        }
        if !self.groups_claim.trim().is_empty() {
            body["groupsClaim"] = json!(self.groups_claim.trim());
        }
        let mut roles = Map::new();
        for line in self.group_roles.lines().map(str::trim).filter(|l| !l.is_empty()) {
            let (value, role) = line
                .split_once('=')
                .ok_or_else(|| Error::invalid_field("groupRoles", format!("`{line}` is not value=role")))?;
            roles.insert(value.trim().to_string(), json!(role.trim()));
        }
        body["groupRoles"] = Value::Object(roles);
        Ok(body)
    }
}

fn enterprise_of(id: &str) -> crate::error::Result<EnterpriseId> {
    id.parse().map_err(|_| Error::not_found(ErrorName::EnterpriseNotFound))
}

/// `GET /console/enterprises/{id}/sso`.
pub async fn page(
    State(state): State<AppState>,
    headers: HeaderMap,
    session: Session,
    Path(id): Path<String>,
) -> Response {
    let e = match enterprise_of(&id) {
        Ok(e) => e,
        Err(err) => return error_response(err.into(), Some(&session)),
    };
    let at = Page { state: &state, session: &session, e: &e, headers: &headers };
    render(at, Shown::Nothing, None).await
}

/// `POST /console/enterprises/{id}/sso`: saves the provider, or shows what is wrong beside its
/// field.
pub async fn save(
    State(state): State<AppState>,
    headers: HeaderMap,
    Path(id): Path<String>,
    form: Form<SettingForm>,
) -> Response {
    let Form { session, fields } = form;
    let e = match enterprise_of(&id) {
        Ok(e) => e,
        Err(err) => return error_response(err.into(), Some(&session)),
    };
    let saved = match fields.body() {
        Ok(body) => sso_settings::set(&state.identity, &session.auth, &e, &body).await,
        Err(err) => Err(err),
    };
    let saved = saved.map(|_| ());
    let shown = match Shown::of(saved, |()| {
        Shown::Notice("Saved. Members sign in with “Sign in with SSO” on the sign-in page.".into())
    }) {
        Ok(s) => s,
        Err(err) => return error_response(err, Some(&session)),
    };
    let keep = match shown {
        Shown::Error(_) => Some(SettingForm { client_secret: String::new(), ..fields }),
        _ => None,
    };
    render(Page { state: &state, session: &session, e: &e, headers: &headers }, shown, keep).await
}

/// `POST /console/enterprises/{id}/sso/remove`.
pub async fn remove(
    State(state): State<AppState>,
    headers: HeaderMap,
    Path(id): Path<String>,
    form: Form<NoFields>,
) -> Response {
    let session = form.session;
    let e = match enterprise_of(&id) {
        Ok(e) => e,
        Err(err) => return error_response(err.into(), Some(&session)),
    };
    if let Err(err) = sso_settings::remove(&state.identity, &session.auth, &e).await {
        return error_response(err.into(), Some(&session));
    }
    let shown = Shown::Notice("Removed: members sign in with their password or passkey again.".into());
    render(Page { state: &state, session: &session, e: &e, headers: &headers }, shown, None).await
}

/// What every render of the page needs.
#[derive(Clone, Copy)]
struct Page<'a> {
    state: &'a AppState,
    session: &'a Session,
    e: &'a EnterpriseId,
    headers: &'a HeaderMap,
}

/// The page: the provider as stored (or none) and the form, filled with `typed` when a save
/// failed, else with the stored setting.
async fn render(at: Page<'_>, shown: Shown, typed: Option<SettingForm>) -> Response {
    let Page { state, session, e, headers } = at;
    let stored = match sso_settings::get(&state.identity, &session.auth, e).await {
        Ok(v) => Some(v),
        Err(Error::NotFound { name: ErrorName::SsoNotConfigured, .. }) => None,
        Err(err) => return error_response(err.into(), Some(session)),
    };
    let form = typed.unwrap_or_else(|| match &stored {
        Some(v) => SettingForm::of_view(v),
        None => SettingForm {
            oauth_provider: "oidc".into(),
            scopes: "email profile".into(),
            ..Default::default()
        },
    });
    let error = shown.error();
    let action = format!("/console/enterprises/{}/sso", e.as_str());
    let fields = ["oauthProvider", "oktaDomain", "tenantId", "issuer", "clientId", "clientSecret", "scopes"];
    let more = ["groupsClaim", "groupRoles", "breakGlass", ""];
    let providers =
        [("oidc", "OpenID Connect (issuer)"), ("okta", "Okta"), ("msEntra", "Microsoft Entra ID")];
    let body = html! {
        @if error.is_none() { (layout::shown(&shown)) }
        section.panel #sso-current {
            @match &stored {
                Some(v) => {
                    p { "Members sign in through " strong { (v["oauthProvider"].as_str().unwrap_or_default()) }
                        " at " code { (v["issuer"].as_str().unwrap_or_default()) } ", set "
                        (v["updatedAt"].as_str().unwrap_or_default()) "." }
                    (layout::action_button(session, &format!("{action}/remove"), "Remove the identity provider", "danger",
                        Some("Remove the identity provider? Members sign in with their password or passkey again.")))
                }
                None => p #sso-none { "No identity provider yet: members sign in with a password or passkey." },
            }
        }
        section.panel {
            h2 { "Identity provider" }
            p.muted { "Register this redirect URI at the provider: " code #redirect-uri { (super::sso::redirect_uri(state, headers)) }
                ". The client secret is sealed and never shown again; give it on each save." }
            (layout::form_error(error, &fields))
            (layout::form_error(error, &more))
            form.stack #sso-setting method="post" action=(action) {
                (layout::csrf(session))
                label { "Provider"
                    select name="oauthProvider" id="oauthProvider" {
                        @for (value, label) in providers {
                            option value=(value) selected[form.oauth_provider == value] { (label) }
                        }
                    }
                }
                (layout::field_error(error, "oauthProvider"))
                label { "Issuer URL (OpenID Connect)" input name="issuer" id="issuer" value=(form.issuer) placeholder="https://id.example.com"; }
                (layout::field_error(error, "issuer"))
                label { "Okta domain (Okta)" input name="oktaDomain" id="oktaDomain" value=(form.okta_domain) placeholder="acme.okta.com"; }
                (layout::field_error(error, "oktaDomain"))
                label { "Tenant id (Microsoft Entra ID)" input name="tenantId" id="tenantId" value=(form.tenant_id); }
                (layout::field_error(error, "tenantId"))
                label { "Client id" input name="clientId" id="clientId" value=(form.client_id) required; }
                (layout::field_error(error, "clientId"))
                label { "Client secret" input type="password" name="clientSecret" id="clientSecret" autocomplete="off" required; }
                (layout::field_error(error, "clientSecret"))
                label { "Scopes beside openid" input name="scopes" id="scopes" value=(form.scopes); }
                (layout::field_error(error, "scopes"))
                label { "Groups claim (empty: no role mapping)" input name="groupsClaim" id="groupsClaim" value=(form.groups_claim) placeholder="groups"; }
                (layout::field_error(error, "groupsClaim"))
                label { "Group roles, one value=role a line (admin or member); a person with none is refused"
                    textarea name="groupRoles" id="groupRoles" rows="3" { (form.group_roles) } }
                (layout::field_error(error, "groupRoles"))
                label.check { input type="checkbox" name="provisioning" id="provisioning" checked[form.provisioning.is_some()];
                    " Make an account at a first sign-in with a verified email no account has" }
                label.check { input type="checkbox" name="ssoRequired" id="ssoRequired" checked[form.sso_required.is_some()];
                    " SSO required: members may not sign in with a password or passkey" }
                label { "Break-glass owners who keep their password (user ids)" input name="breakGlass" id="breakGlass" value=(form.break_glass); }
                (layout::field_error(error, "breakGlass"))
                button type="submit" { "Save the identity provider" }
            }
        }
    };
    html(shown.status(), layout::page(Some(session), "Single sign-on", "/console/security", body))
}
