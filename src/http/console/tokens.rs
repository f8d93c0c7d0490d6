//! The signed-in user's access tokens (docs/decisions.md#the-operator-console): list, revoke, and create with an OTP, the
//! new value shown once.

use axum::{
    extract::{Path, Query, State},
    response::Response,
};
use maud::html;
use serde::Deserialize;
use serde_json::{json, Value};

use super::layout::{OneTime, Shown};
use super::{error_response, html, layout, opt, Form, NoFields, Session};
use crate::{
    identity::{sessions, tokens},
    model::token::{SortOrder, TokenKind},
    paging::PageRequest,
    types::{AnyId, TokenId},
    AppState,
};

/// Tokens listed per page.
pub const PAGE: u32 = 50;

/// The page's paging.
#[derive(Debug, Default, Deserialize)]
pub struct TokensQuery {
    pub after: Option<String>,
}

async fn tokens_page(
    state: &AppState,
    session: &Session,
    after: Option<&str>,
    shown: Shown,
    form: &CreateForm,
) -> Response {
    let listed = match opt::<AnyId>("after", after)
        .and_then(|a| PageRequest::bounded(Some(PAGE), a, PAGE, PAGE))
    {
        Ok(page) => sessions::list_tokens(&state.identity, &session.auth, &page, SortOrder::Descending).await,
        Err(e) => Err(e),
    };
    let listed = match listed {
        Ok(l) => l,
        Err(e) => return error_response(e.into(), Some(session)),
    };
    let error = shown.error();
    let status = shown.status();
    let fields = ["label", "scope", "duration", "ipRestrict", "otp"];
    let body = html! {
        @if error.is_none() { (layout::shown(&shown)) }
        div.table-wrap { table #tokens {
            thead { tr { th { "Label" } th { "Kind" } th { "Scopes" } th { "ipRestrict" } th { "Created" } th { "Expires" } th { "Last used" } th {} } }
            tbody { @for t in &listed.items {
                tr data-token-id=(t.id) {
                    td { (t.label.as_deref().unwrap_or("")) @if t.id == session.auth.token.id { " " span.badge.wait { "this session" } } }
                    td { (match t.kind { TokenKind::Session => "session", TokenKind::Reset2fa => "2FA reset", TokenKind::Access => "access token" }) }
                    td.mono { (t.scopes.iter().map(|g| g.to_scope_string()).collect::<Vec<_>>().join(" ")) }
                    td.mono { @match &t.ip_restrict { Some(list) => (list.iter().map(|c| c.to_string()).collect::<Vec<_>>().join(", ")), None => span.muted { "any address" } } }
                    td { (layout::time_s(t.created_at)) }
                    td { (layout::time_s(t.expires_at)) }
                    td { @match t.last_used_at { Some(at) => (layout::time_s(at)), None => span.muted { "never" } } }
                    td { (layout::action_button(session, &format!("/console/tokens/{}/revoke", t.id), "Revoke", "danger",
                        Some("Revoke this token? Requests with it are refused from now on."))) }
                }
            } }
        } }
        (layout::pager("/console/tokens", "after", listed.next_batch_prev_id.as_deref()))
        section.panel {
            h2 { "Create an access token" }
            (layout::form_error(error, &fields))
            form.stack method="post" action="/console/tokens" {
                (layout::csrf(session))
                label { "Label" input name="label" id="label" value=(form.label) maxlength="100"; }
                (layout::field_error(error, "label"))
                label { "Scopes (space-separated, e.g. wallet_view_all openid)" input name="scope" id="scope" value=(form.scope) required; }
                (layout::field_error(error, "scope"))
                label { "Duration, seconds (empty: 10 years, at most this session's)" input name="duration" id="duration" value=(form.duration) inputmode="numeric"; }
                (layout::field_error(error, "duration"))
                label { "ipRestrict: addresses or CIDR blocks, comma-separated" input name="ipRestrict" id="ipRestrict" value=(form.ip_restrict); }
                (layout::field_error(error, "ipRestrict"))
                label { "One-time code" input name="otp" id="token-otp" inputmode="numeric" autocomplete="one-time-code" required; }
                button.secondary type="button" data-passkey-otp="token-otp" { "Use a passkey instead" }
                (layout::field_error(error, "otp"))
                button type="submit" { "Create token" }
            }
        }
    };
    html(status, layout::page(Some(session), "Access tokens", "/console/tokens", body))
}

/// `GET /console/tokens`.
pub async fn page(State(state): State<AppState>, session: Session, Query(q): Query<TokensQuery>) -> Response {
    tokens_page(&state, &session, q.after.as_deref(), Shown::Nothing, &CreateForm::default()).await
}

/// The create form's fields, as typed.
#[derive(Debug, Default, Deserialize)]
pub struct CreateForm {
    #[serde(default)]
    pub label: String,
    #[serde(default)]
    pub scope: String,
    #[serde(default)]
    pub duration: String,
    #[serde(default, rename = "ipRestrict")]
    pub ip_restrict: String,
    #[serde(default)]
    pub otp: String,
}

impl CreateForm {
    /// The §4.3 request body these fields make; the API's own checks then apply.
    fn body(&self) -> Value {
        let mut body = json!({
            "scope": self.scope.split([' ', ',']).filter(|s| !s.is_empty()).collect::<Vec<_>>(),
            "otp": self.otp.trim(),
        });
        if !self.label.trim().is_empty() {
            body["label"] = json!(self.label.trim());
        }
        if !self.duration.trim().is_empty() {
            body["duration"] = match self.duration.trim().parse::<u64>() {
                Ok(n) => json!(n),
                Err(_) => json!(self.duration.trim()),
            };
        }
        let ips: Vec<&str> =
            self.ip_restrict.split([',', ' ']).map(str::trim).filter(|s| !s.is_empty()).collect();
        if !ips.is_empty() {
            body["ipRestrict"] = json!(ips);
        }
        body
    }
}

/// `POST /console/tokens`: creates a token (OTP required) and shows its value once.
pub async fn create(State(state): State<AppState>, form: Form<CreateForm>) -> Response {
    let session = &form.session;
    let created = tokens::create_access_token(&state.identity, &session.auth, form.fields.body()).await;
    let shown = Shown::of(created, |c| {
        Shown::OneTime(OneTime {
            id: "new-token",
            lead: "Copy your access token now.".into(),
            warning: "You won't be able to see it again: Custodian keeps only its hash.",
            value: c.value,
            note: None,
        })
    });
    let shown = match shown {
        Ok(s) => s,
        Err(e) => return error_response(e, Some(session)),
    };
    let keep = match shown {
        Shown::Error(_) => CreateForm { otp: String::new(), ..form.fields },
        _ => CreateForm::default(),
    };
    tokens_page(&state, session, None, shown, &keep).await
}

/// `POST /console/tokens/{id}/revoke`.
pub async fn revoke(State(state): State<AppState>, Path(id): Path<String>, form: Form<NoFields>) -> Response {
    let session = &form.session;
    let result = match id.parse::<TokenId>() {
        Ok(id) => sessions::revoke_token(&state.identity, &session.auth, &id).await,
        Err(_) => Err(crate::error::Error::not_found(crate::error::ErrorName::TokenNotFound)),
    };
    let shown = Shown::of(result, |t| {
        Shown::Notice(format!("Token {} revoked.", t.label.as_deref().unwrap_or(t.id.as_str())))
    });
    let shown = match shown {
        Ok(s) => s,
        Err(e) => return error_response(e, Some(session)),
    };
    tokens_page(&state, session, None, shown, &CreateForm::default()).await
}
