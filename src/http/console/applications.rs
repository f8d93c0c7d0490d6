//! Service admins' OAuth applications (docs/oauth.md): list, register (the secret shown once),
//! rotate a secret, disable or enable, delete. The same domain functions as
//! `custodian oauth-client`.

use axum::{
    extract::{Path, State},
    response::Response,
};
use maud::html;
use serde::Deserialize;

use super::layout::{OneTime, Shown};
use super::{error_response, html, layout, Form, Session};
use crate::{
    error::Error,
    identity::scopes::Action,
    oauth::clients::{self, NewClient},
    types::AnyId,
    AppState,
};

async fn applications_page(state: &AppState, session: &Session, shown: Shown) -> Response {
    if let Err(e) = session.auth.require(state.identity.policy, Action::ServiceAdmin) {
        return error_response(e.into(), Some(session));
    }
    let listed = match clients::list(&state.store).await {
        Ok(l) => l,
        Err(e) => return error_response(e.into(), Some(session)),
    };
    let error = shown.error();
    let body = html! {
        @if error.is_none() { (layout::shown(&shown)) }
        div.table-wrap { table #clients {
            thead { tr { th { "Application" } th { "client_id" } th { "Kind" } th { "Redirect URIs" } th { "Scopes" } th { "State" } th {} } }
            tbody { @for c in &listed {
                tr data-client-id=(c.id) {
                    td { (c.name) }
                    td.mono { (c.id) }
                    td { (if c.secret_hash.is_none() { "public" } else if c.pkce_optional { "confidential, PKCE optional" } else { "confidential" }) " · " (c.id_token_alg) }
                    td.mono { (c.redirect_uris.join(" ")) }
                    td.mono { (c.scopes.join(" ")) }
                    td { (layout::badge(if c.disabled { "disabled" } else { "active" })) }
                    td {
                        @if c.secret_hash.is_some() {
                            (layout::action_button(session, &format!("/console/admin/applications/{}/rotate", c.id), "Rotate secret", "secondary",
                                Some("Give this application a new secret? The old one stops at once.")))
                        }
                        @if c.disabled {
                            (layout::action_button(session, &format!("/console/admin/applications/{}/enable", c.id), "Enable", "", None))
                        } @else {
                            (layout::action_button(session, &format!("/console/admin/applications/{}/disable", c.id), "Disable", "danger",
                                Some("Disable this application? Every token it holds stops.")))
                        }
                        (layout::action_button(session, &format!("/console/admin/applications/{}/delete", c.id), "Delete", "danger",
                            Some("Delete this application? Every token it holds stops.")))
                    }
                }
            } }
        } }
        section.panel {
            h2 { "Register an application" }
            (layout::form_error(error, &["name", "redirectUri", "scope", "idTokenAlg"]))
            form.stack method="post" action="/console/admin/applications" {
                (layout::csrf(session))
                label { "Name" input name="name" id="app-name" maxlength="100" required; }
                label { "Redirect URIs (space-separated; https, or http on loopback)" input name="redirect_uris" id="app-redirects" required; }
                label { "Scopes it may ask for (space-separated)" input name="scopes" id="app-scopes" value="openid profile" required; }
                label { input type="checkbox" name="public" value="true"; " Public (no secret)" }
                label { input type="checkbox" name="pkce_optional" value="true"; " PKCE optional (confidential only: for BitGoJS's authenticateWithAuthCode)" }
                label { "id_token algorithm" select name="id_token_alg" { option value="ES256" { "ES256" } option value="RS256" { "RS256" } } }
                button type="submit" { "Register" }
            }
        }
    };
    html(shown.status(), layout::page(Some(session), "Applications", "/console/admin/applications", body))
}

/// `GET /console/admin/applications`.
pub async fn page(State(state): State<AppState>, session: Session) -> Response {
    applications_page(&state, &session, Shown::Nothing).await
}

/// The registration form.
#[derive(Debug, Default, Deserialize)]
pub struct NewForm {
    #[serde(default)]
    pub name: String,
    #[serde(default)]
    pub redirect_uris: String,
    #[serde(default)]
    pub scopes: String,
    #[serde(default)]
    pub public: Option<String>,
    #[serde(default)]
    pub pkce_optional: Option<String>,
    #[serde(default)]
    pub id_token_alg: String,
}

fn secret_shown(id: &str, secret: String) -> Shown {
    Shown::OneTime(OneTime {
        id: "new-client-secret",
        lead: format!("client_secret of {id}."),
        warning: "Give it to the application's owner over a trusted channel; it is shown only once.",
        value: secret,
        note: None,
    })
}

/// `POST /console/admin/applications`: registers an application.
pub async fn create(State(state): State<AppState>, form: Form<NewForm>) -> Response {
    let Form { session, fields } = form;
    if let Err(e) = session.auth.require(state.identity.policy, Action::ServiceAdmin) {
        return error_response(e.into(), Some(&session));
    }
    let words = |s: &str| s.split_whitespace().map(str::to_string).collect::<Vec<_>>();
    let new = NewClient {
        name: fields.name,
        redirect_uris: words(&fields.redirect_uris),
        scopes: words(&fields.scopes),
        public: fields.public.is_some(),
        id_token_alg: Some(fields.id_token_alg).filter(|a| !a.is_empty()),
        pkce_optional: fields.pkce_optional.is_some(),
    };
    let done = clients::create(&state.store, new).await.map(|(c, secret)| match secret {
        Some(s) => secret_shown(c.id.as_str(), s),
        None => Shown::Notice(format!("Registered {} (client_id {}): public, no secret.", c.name, c.id)),
    });
    finish(&state, &session, done).await
}

/// `POST /console/admin/applications/{id}/{action}`: `rotate`, `disable`, `enable`, `delete`.
pub async fn action(
    State(state): State<AppState>,
    Path((id, action)): Path<(String, String)>,
    form: Form<super::NoFields>,
) -> Response {
    let session = form.session;
    if let Err(e) = session.auth.require(state.identity.policy, Action::ServiceAdmin) {
        return error_response(e.into(), Some(&session));
    }
    let id = match id.parse::<AnyId>() {
        Ok(id) => id,
        Err(e) => return error_response(Error::invalid_field("id", e).into(), Some(&session)),
    };
    let store = &state.store;
    let done = match action.as_str() {
        "rotate" => clients::rotate_secret(store, &id).await.map(|s| secret_shown(id.as_str(), s)),
        "disable" => clients::set_disabled(store, &id, true)
            .await
            .map(|()| Shown::Notice("Disabled; its grants are revoked.".into())),
        "enable" => clients::set_disabled(store, &id, false).await.map(|()| Shown::Notice("Enabled.".into())),
        "delete" => clients::delete(store, &id)
            .await
            .map(|()| Shown::Notice("Deleted; its grants are revoked.".into())),
        _ => Err(Error::not_found(crate::error::ErrorName::NotFound)),
    };
    finish(&state, &session, done).await
}

async fn finish(state: &AppState, session: &Session, done: crate::error::Result<Shown>) -> Response {
    match Shown::of(done, |s| s) {
        Ok(shown) => applications_page(state, session, shown).await,
        Err(e) => error_response(e, Some(session)),
    }
}
