//! The signed-in user's sign-in factors (docs/decisions.md#passkeys): their TOTP device and
//! passkeys, adding a passkey with the browser's WebAuthn prompt, and removing one. Adding and
//! removing need a fresh code or passkey assertion, as through the API. The WebAuthn calls are
//! made by console.js (no inline script), which fetches the ceremony's options from the two
//! JSON routes here.

use axum::{
    extract::{Path, State},
    response::{IntoResponse, Response},
    Json,
};
use maud::html;
use serde::Deserialize;

use super::layout::Shown;
use super::{error_response, html, layout, Form, NoFields, Session};
use crate::{
    http::error::ApiError, identity::passkeys, model::passkey::PasskeyRecord, types::AnyId, AppState,
};

/// The caller's enterprises: (id, name, has an identity provider, caller is an admin).
async fn sso_enterprises(
    state: &AppState,
    session: &Session,
) -> crate::error::Result<Vec<(String, String, bool, bool)>> {
    let mut out = Vec::new();
    for m in state.store.memberships(&session.auth.user.id).await? {
        let set = state.store.sso_setting(&m.enterprise.id).await?.is_some();
        out.push((m.enterprise.id.as_str().to_string(), m.enterprise.name, set, m.is_admin));
    }
    Ok(out)
}

async fn security_page(state: &AppState, session: &Session, shown: Shown) -> Response {
    let listed = match passkeys::list(&state.identity, &session.auth).await {
        Ok(l) => l,
        Err(e) => return error_response(e.into(), Some(session)),
    };
    let apps = match crate::oauth::revoke::my_grants(&state.store, &session.auth).await {
        Ok(a) => a,
        Err(e) => return error_response(e.into(), Some(session)),
    };
    let sso = match sso_enterprises(state, session).await {
        Ok(s) => s,
        Err(e) => return error_response(e.into(), Some(session)),
    };
    let error = shown.error();
    let body = html! {
        @if error.is_none() { (layout::shown(&shown)) }
        section.panel {
            h2 { "Applications" }
            p.muted { "Applications you allowed to act for you (OAuth). Revoking one stops its tokens at once." }
            @if apps.is_empty() { p #no-applications { "No application has access." } }
            @else { div.table-wrap { table #applications {
                thead { tr { th { "Application" } th { "Scopes" } th { "Allowed" } th { "Last used" } th {} } }
                tbody { @for (g, c) in &apps {
                    tr data-grant-id=(g.id) {
                        td { (c.as_ref().map_or("(removed)", |c| c.name.as_str())) }
                        td.mono { (g.scopes.join(" ")) }
                        td { (layout::time_s(g.created_at)) }
                        td { @match g.last_used_at { Some(at) => (layout::time_s(at)), None => span.muted { "never" } } }
                        td { (layout::action_button(session, &format!("/console/security/applications/{}/revoke", g.id), "Revoke", "danger",
                            Some("Revoke this application's access? Its tokens stop at once."))) }
                    }
                } }
            } } }
        }
        (sso_panels(session, &sso))
        section.panel {
            h2 { "Authenticator app" }
            p { "A TOTP device (RFC 6238) gives the six-digit codes of every sign-in; an operator resets it with "
                code { "custodian user reset-otp" } "." }
        }
        section.panel {
            h2 { "Passkeys" }
            p.muted { "A passkey signs you in without a password or code, and stands for a code wherever one is asked." }
            @if listed.is_empty() { p #no-passkeys { "No passkey yet." } }
            @else { div.table-wrap { table #passkeys {
                thead { tr { th { "Label" } th { "Added" } th { "Last used" } th { "Remove (current code or passkey)" } } }
                tbody { @for p in &listed { (row(session, p)) } }
            } } }
        }
        section.panel {
            h2 { "Add a passkey" }
            (layout::form_error(error, &["label", "otp"]))
            form.stack #passkey-add method="post" action="/console/security/passkeys" data-passkey-register="/console/security/passkeys/options" {
                (layout::csrf(session))
                input type="hidden" name="credential" id="passkey-credential";
                label { "Label" input name="label" id="passkey-label" maxlength="100" placeholder="Passkey"; }
                (layout::field_error(error, "label"))
                label { "Current one-time code" input name="otp" id="passkey-otp" inputmode="numeric" autocomplete="one-time-code" required; }
                (layout::field_error(error, "otp"))
                button type="submit" { "Add a passkey" }
            }
        }
    };
    html(shown.status(), layout::page(Some(session), "Security", "/console/security", body))
}

/// The single sign-on panels: linking to each of the caller's enterprises' providers, and the
/// provider pages of the enterprises the caller administers.
fn sso_panels(session: &Session, sso: &[(String, String, bool, bool)]) -> maud::Markup {
    html! {
        @if sso.iter().any(|(_, _, set, _)| *set) {
            section.panel #sso-link-panel {
                h2 { "Single sign-on" }
                p.muted { "Link your account to your enterprise's identity provider by signing in there once; then you sign in through it. An administrator's account is linked only this way." }
                @for (id, name, _, _) in sso.iter().filter(|s| s.2) {
                    form.inline method="post" action="/console/sso/link" {
                        input type="hidden" name="csrf" value=(session.csrf);
                        input type="hidden" name="enterprise" value=(id);
                        button.secondary type="submit" { "Link to " (name) "'s identity provider" }
                    }
                }
            }
        }
        @if sso.iter().any(|(_, _, _, admin)| *admin) {
            section.panel #sso-settings-panel {
                h2 { "Your enterprises' identity providers" }
                p.muted { "As an administrator you set the identity provider its members sign in through." }
                ul { @for (id, name, set, _) in sso.iter().filter(|s| s.3) {
                    li { a href={ "/console/enterprises/" (id) "/sso" } data-enterprise=(id) { (name) } " "
                        @if *set { span.badge.good { "set" } } @else { span.muted { "none" } } }
                } }
            }
        }
    }
}

fn row(session: &Session, p: &PasskeyRecord) -> maud::Markup {
    let otp_id = format!("remove-otp-{}", p.id);
    html! {
        tr data-passkey-id=(p.id) {
            td { (p.label) }
            td { (layout::time_s(p.created_at)) }
            td { @match p.last_used_at { Some(at) => (layout::time_s(at)), None => span.muted { "never" } } }
            td {
                form.inline method="post" action={ "/console/security/passkeys/" (p.id) "/remove" }
                    data-confirm="Remove this passkey? It will no longer sign you in." {
                    (layout::csrf(session))
                    input name="otp" id=(otp_id) inputmode="numeric" autocomplete="one-time-code" placeholder="code" required;
                    button.secondary type="button" data-passkey-otp=(otp_id) { "Use a passkey" }
                    button.danger type="submit" { "Remove" }
                }
            }
        }
    }
}

/// `GET /console/security`.
pub async fn page(State(state): State<AppState>, session: Session) -> Response {
    security_page(&state, &session, Shown::Nothing).await
}

fn json_or_error(result: crate::error::Result<serde_json::Value>) -> Response {
    match result {
        Ok(v) => Json(v).into_response(),
        Err(e) => {
            let e = ApiError::from(e);
            (e.status(), Json(e.body().0)).into_response()
        }
    }
}

/// `POST /console/security/passkeys/options`: creation options for console.js, as JSON.
pub async fn register_options(State(state): State<AppState>, form: Form<NoFields>) -> Response {
    json_or_error(passkeys::registration_options(&state.identity, &form.session.auth).await)
}

/// `POST /console/security/passkeys/assert`: request options for an assertion that stands for
/// a code (the tokens page, removal), as JSON.
pub async fn assertion_options(State(state): State<AppState>, form: Form<NoFields>) -> Response {
    json_or_error(passkeys::assertion_options(&state.identity, &form.session.auth).await)
}

/// The add form's fields.
#[derive(Debug, Default, Deserialize)]
pub struct AddForm {
    #[serde(default)]
    pub label: String,
    #[serde(default)]
    pub otp: String,
    #[serde(default)]
    pub credential: String,
}

/// `POST /console/security/passkeys`: adds the credential console.js made.
pub async fn add(State(state): State<AppState>, form: Form<AddForm>) -> Response {
    let Form { session, fields } = form;
    if fields.credential.trim().is_empty() {
        let e = crate::error::Error::invalid_field(
            "label",
            "the browser made no passkey (is WebAuthn available here?)",
        );
        return finish(&state, &session, Err(e), "").await;
    }
    let result = passkeys::add(
        &state.identity,
        &session.auth,
        &fields.credential,
        Some(fields.label.as_str()),
        Some(fields.otp.as_str()),
    )
    .await;
    finish(&state, &session, result.map(|p| p.label), "Passkey added: ").await
}

/// The remove form's field.
#[derive(Debug, Default, Deserialize)]
pub struct RemoveForm {
    #[serde(default)]
    pub otp: String,
}

/// `POST /console/security/passkeys/{id}/remove`.
pub async fn remove(
    State(state): State<AppState>,
    Path(id): Path<String>,
    form: Form<RemoveForm>,
) -> Response {
    let Form { session, fields } = form;
    let id = match id.parse::<AnyId>() {
        Ok(id) => id,
        Err(e) => return error_response(crate::error::Error::invalid_field("id", e).into(), Some(&session)),
    };
    let result = passkeys::remove(&state.identity, &session.auth, &id, Some(fields.otp.as_str())).await;
    finish(&state, &session, result.map(|()| String::new()), "Passkey removed").await
}

async fn finish(
    state: &AppState,
    session: &Session,
    result: crate::error::Result<String>,
    done: &str,
) -> Response {
    match Shown::of(result, |what| Shown::Notice(format!("{done}{what}"))) {
        Ok(shown) => security_page(state, session, shown).await,
        Err(e) => error_response(e, Some(session)),
    }
}

/// `POST /console/security/applications/{id}/revoke`: ends an application's access.
pub async fn revoke_application(
    State(state): State<AppState>,
    Path(id): Path<String>,
    form: Form<NoFields>,
) -> Response {
    let session = form.session;
    let id = match id.parse::<AnyId>() {
        Ok(id) => id,
        Err(e) => return error_response(crate::error::Error::invalid_field("id", e).into(), Some(&session)),
    };
    let result = crate::oauth::revoke::revoke_mine(&state.store, &session.auth, &id).await;
    finish(&state, &session, result.map(|()| String::new()), "Application access revoked").await
}
