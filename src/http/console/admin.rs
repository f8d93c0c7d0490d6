//! Service admins only (docs/decisions.md#the-operator-console): users (deactivate, activate, reset OTP) and enterprises
//! with their members. The same operator commands as the CLI, audited with the admin's
//! address, token and request.

use axum::{
    extract::{Path, Query, State},
    http::StatusCode,
    response::Response,
};
use maud::html;
use serde::Deserialize;

use super::layout::{OneTime, Shown};
use super::{error_response, html, layout, Form, Session};
use crate::{identity::user_admin::admin, AppState};

/// Paging of either list.
#[derive(Debug, Default, Deserialize)]
pub struct AfterQuery {
    pub after: Option<String>,
}

async fn users_page(state: &AppState, session: &Session, after: Option<&str>, shown: Shown) -> Response {
    let mut users = match admin::users(&state.identity, &session.auth, after).await {
        Ok(u) => u,
        Err(e) => return error_response(e.into(), Some(session)),
    };
    let more = users.len() > admin::PAGE as usize;
    users.truncate(admin::PAGE as usize);
    let next = more.then(|| users.last().map(|u| u.email.clone())).flatten();
    let status = shown.status();
    let body = html! {
        (layout::shown(&shown))
        div.table-wrap { table #users {
            thead { tr { th { "Email" } th { "Name" } th { "State" } th { "Service admin" } th { "Last login" } th { "Actions" } } }
            tbody { @for u in &users {
                tr {
                    td { (u.email) }
                    td { (u.name_first) " " (u.name_last) }
                    td { (layout::badge(if u.is_active { "active" } else { "inactive" })) }
                    td { @if u.service_admin { "yes" } }
                    td { @match u.last_login { Some(t) => (layout::time_s(t)), None => span.muted { "never" } } }
                    td {
                        @for (action, label, class, confirm) in [
                            (if u.is_active { "deactivate" } else { "activate" }, if u.is_active { "Deactivate" } else { "Activate" },
                                if u.is_active { "danger" } else { "" },
                                if u.is_active { Some("Deactivate this user? Every token of theirs is revoked.") } else { None }),
                            ("reset-otp", "Reset OTP", "secondary", Some("Give this user a new OTP secret? Their authenticator stops working.")),
                            ("remove-passkeys", "Remove passkeys", "secondary", Some("Remove every passkey of this user? Password and code still sign them in.")),
                        ] {
                            form.inline method="post" action={ "/console/admin/users/" (action) } data-confirm=[confirm] {
                                (layout::csrf(session))
                                input type="hidden" name="email" value=(u.email);
                                button class=(class) type="submit" { (label) }
                            }
                            " "
                        }
                    }
                }
            } }
        } }
        @if let Some(n) = next {
            p.pager { a href={ "/console/admin/users?" (layout::query(&[("after", Some(n.as_str()))])) } { "Next page →" } }
        }
    };
    html(status, layout::page(Some(session), "Users", "/console/admin/users", body))
}

/// `GET /console/admin/users`.
pub async fn users(State(state): State<AppState>, session: Session, Query(q): Query<AfterQuery>) -> Response {
    users_page(&state, &session, q.after.as_deref(), Shown::Nothing).await
}

/// A user action's field.
#[derive(Debug, Deserialize)]
pub struct EmailForm {
    #[serde(default)]
    pub email: String,
}

/// `POST /console/admin/users/{action}`: `deactivate`, `activate`, `reset-otp` or
/// `remove-passkeys`.
pub async fn user_action(
    State(state): State<AppState>,
    Path(action): Path<String>,
    form: Form<EmailForm>,
) -> Response {
    let (session, email) = (&form.session, form.fields.email.as_str());
    let done = match action.as_str() {
        "deactivate" => admin::deactivate(&state.identity, &session.auth, email)
            .await
            .map(|n| Shown::Notice(format!("{email} deactivated; {n} token(s) revoked."))),
        "activate" => admin::activate(&state.identity, &session.auth, email)
            .await
            .map(|_| Shown::Notice(format!("{email} may sign in again."))),
        "remove-passkeys" => admin::remove_passkeys(&state.identity, &session.auth, email)
            .await
            .map(|n| Shown::Notice(format!("{n} passkey(s) of {email} removed."))),
        "reset-otp" => admin::reset_otp(&state.identity, &session.auth, email).await.map(|c| {
            Shown::OneTime(OneTime {
                id: "new-otp-secret",
                lead: format!("New OTP secret of {}.", c.email),
                warning:
                    "Give it to the user over a trusted channel; it is shown only once. Codes of the old \
                              secret no longer work.",
                value: c.totp_secret,
                note: Some(c.otpauth_uri),
            })
        }),
        _ => Err(crate::error::Error::not_found(crate::error::ErrorName::NotFound)),
    };
    match Shown::of(done, |s| s) {
        Ok(shown) => users_page(&state, session, None, shown).await,
        Err(e) => error_response(e, Some(session)),
    }
}

/// `GET /console/admin/enterprises`.
pub async fn enterprises(
    State(state): State<AppState>,
    session: Session,
    Query(q): Query<AfterQuery>,
) -> Response {
    let mut list = match admin::enterprises(&state.identity, &session.auth, q.after.as_deref()).await {
        Ok(l) => l,
        Err(e) => return error_response(e.into(), Some(&session)),
    };
    let more = list.len() > admin::PAGE as usize;
    list.truncate(admin::PAGE as usize);
    let next = more.then(|| list.last().map(|(e, _)| e.id.to_string())).flatten();
    let body = html! {
        @for (e, members) in &list {
            section.panel {
                h2 { (e.name) " " span.mono.muted { (e.id) } }
                @if members.is_empty() { p.muted { "No member." } }
                @else {
                    div.table-wrap { table {
                        thead { tr { th { "Member" } th { "Role" } th { "State" } } }
                        tbody { @for m in members {
                            tr {
                                td { (m.email) }
                                td { (if m.is_admin { "admin" } else { "member" }) }
                                td { (layout::badge(if m.is_active { "active" } else { "inactive" })) }
                            }
                        } }
                    } }
                }
            }
        }
        @if list.is_empty() { p.muted { "No enterprise yet." } }
        (layout::pager("/console/admin/enterprises", "after", next.as_deref()))
    };
    html(StatusCode::OK, layout::page(Some(&session), "Enterprises", "/console/admin/enterprises", body))
}
