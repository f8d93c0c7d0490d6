//! Webhook pages (docs/decisions.md#the-operator-console): the list of all three levels with filters, and one webhook's
//! settings (custom header names, never values), its latest notifications and its actions:
//! send a test, unblock, remove, rotate the enterprise secret (shown once), recover.

use axum::{
    extract::{Path, Query, State},
    http::StatusCode,
    response::{IntoResponse, Redirect, Response},
};
use maud::{html, Markup};
use serde::Deserialize;

use super::layout::{OneTime, Shown};
use super::{datetime_local, error_response, html, layout, listed, opt, FieldError, Form, NoFields, Session};
use crate::{
    error::Error,
    model::webhook::{LevelKind, Webhook, WebhookLevel, WebhookState},
    paging::PageRequest,
    store::{NotificationSearch, WebhookSearch},
    types::{AnyId, Coin, EnterpriseId, NotificationId, WebhookId},
    webhooks::{registration, search, secret},
    AppState,
};

/// Webhooks listed per page.
pub const PAGE: u32 = 50;
/// Notifications shown on a webhook's page (the log has the rest).
pub const RECENT_NOTIFICATIONS: u32 = 20;

/// The list's filters, as the query string gives them.
#[derive(Debug, Default, Deserialize)]
pub struct ListQuery {
    pub level: Option<String>,
    pub coin: Option<String>,
    #[serde(rename = "type")]
    pub webhook_type: Option<String>,
    pub state: Option<String>,
    pub enterprise: Option<String>,
    pub after: Option<String>,
}

fn parse_level(v: Option<&str>) -> Result<Option<LevelKind>, Error> {
    match v.map(str::trim).filter(|v| !v.is_empty()) {
        None => Ok(None),
        Some("wallet") => Ok(Some(LevelKind::Wallet)),
        Some("block") => Ok(Some(LevelKind::Block)),
        Some("enterprise") => Ok(Some(LevelKind::Enterprise)),
        Some(_) => Err(Error::invalid_field("level", "must be wallet, block or enterprise")),
    }
}

fn parse_state(v: Option<&str>) -> Result<Option<WebhookState>, Error> {
    match v.map(str::trim).filter(|v| !v.is_empty()) {
        None => Ok(None),
        Some(s) => WebhookState::parse(s)
            .map(Some)
            .ok_or_else(|| Error::invalid_field("state", "must be active or suspended")),
    }
}

fn search_of(q: &ListQuery) -> Result<(WebhookSearch, PageRequest), Error> {
    let search = WebhookSearch {
        level: parse_level(q.level.as_deref())?,
        coin: opt::<Coin>("coin", q.coin.as_deref())?,
        webhook_type: q.webhook_type.as_deref().map(str::trim).filter(|t| !t.is_empty()).map(str::to_string),
        state: parse_state(q.state.as_deref())?,
        enterprise_id: opt::<EnterpriseId>("enterprise", q.enterprise.as_deref())?,
    };
    let after = opt::<AnyId>("after", q.after.as_deref())?;
    Ok((search, PageRequest::bounded(Some(PAGE), after, PAGE, PAGE)?))
}

/// The level of a webhook as the console names it, with its coin.
fn level_text(w: &Webhook) -> String {
    match &w.level {
        WebhookLevel::Wallet { coin, .. } => format!("wallet · {coin}"),
        WebhookLevel::Block { coin, .. } => format!("block · {coin}"),
        WebhookLevel::Enterprise { .. } => "enterprise".into(),
    }
}

fn filters(q: &ListQuery, error: Option<&FieldError>) -> Markup {
    html! {
        form.filters method="get" action="/console/webhooks" {
            label { "Level" (layout::select("level", &[("wallet", "wallet"), ("block", "block"), ("enterprise", "enterprise")], q.level.as_deref())) }
            label { "Coin" input name="coin" id="coin" value=(q.coin.as_deref().unwrap_or("")) size="8"; (layout::field_error(error, "coin")) }
            label { "Type" input name="type" id="type" value=(q.webhook_type.as_deref().unwrap_or("")) size="14"; }
            label { "State" (layout::select("state", &[("active", "active"), ("suspended", "suspended")], q.state.as_deref())) }
            label { "Enterprise id" input name="enterprise" id="enterprise" value=(q.enterprise.as_deref().unwrap_or("")) size="34"; (layout::field_error(error, "enterprise")) }
            button type="submit" { "Filter" }
        }
        (layout::form_error(error, &["coin", "enterprise"]))
    }
}

/// `GET /console/webhooks`.
pub async fn list(State(state): State<AppState>, session: Session, Query(q): Query<ListQuery>) -> Response {
    let found = match search_of(&q) {
        Ok((search, page)) => search::search_webhooks(&state.webhooks, &session.auth, &search, &page).await,
        Err(e) => Err(e),
    };
    let (rows, next, error) = match listed(found) {
        Ok(l) => l,
        Err(e) => return error_response(e, Some(&session)),
    };
    let base = format!(
        "/console/webhooks?{}",
        layout::query(&[
            ("level", q.level.as_deref()),
            ("coin", q.coin.as_deref()),
            ("type", q.webhook_type.as_deref()),
            ("state", q.state.as_deref()),
            ("enterprise", q.enterprise.as_deref()),
        ])
    );
    let body = html! {
        (filters(&q, error.as_ref()))
        @if rows.is_empty() && error.is_none() {
            p.muted { "No webhook matches." }
        } @else if !rows.is_empty() {
            div.table-wrap { table #webhooks {
                thead { tr { th { "Label" } th { "Level" } th { "Type" } th { "URL" } th { "State" } th { "Failed in a row" } th { "Last delivered" } th { "Last failed" } } }
                tbody { @for (w, last) in &rows {
                    tr {
                        td { a href={ "/console/webhooks/" (w.id) } { (w.label.as_deref().unwrap_or("(no label)")) } }
                        td { (level_text(w)) }
                        td { (w.webhook_type) }
                        td.mono { (w.url) }
                        td { (layout::badge(w.state.as_str())) }
                        td.num { (w.successive_failed_attempts) }
                        td { @match last.delivered_ms { Some(t) => (layout::time_ms(t)), None => span.muted { "never" } } }
                        td { @match last.failed_ms { Some(t) => (layout::time_ms(t)), None => span.muted { "never" } } }
                    }
                } }
            } }
        }
        (layout::pager(&base, "after", next.as_deref()))
    };
    let status = error.as_ref().map(|e| e.status).unwrap_or(StatusCode::OK);
    html(status, layout::page(Some(&session), "Webhooks", "/console/webhooks", body))
}

/// The page of one webhook, with `shown` on top.
pub async fn webhook_page(state: &AppState, session: &Session, id: &WebhookId, shown: Shown) -> Response {
    let w = match crate::webhooks::access::webhook_access(&state.webhooks, &session.auth, id).await {
        Ok(w) => w,
        Err(e) => return error_response(e.into(), Some(session)),
    };
    let now = state.store.clock().now_ms();
    let search = NotificationSearch {
        webhook_id: Some(w.id.clone()),
        from_ms: now - search::MAX_SEARCH_DAYS * 86_400_000 + 60_000,
        to_ms: now + 60_000,
        ..Default::default()
    };
    let page =
        PageRequest::bounded(Some(RECENT_NOTIFICATIONS), None, RECENT_NOTIFICATIONS, RECENT_NOTIFICATIONS);
    let recent = match page {
        Ok(p) => search::search_notifications(&state.webhooks, &session.auth, &search, &p).await,
        Err(e) => Err(e),
    };
    let recent = match recent {
        Ok(p) => p.items,
        Err(e) => return error_response(e.into(), Some(session)),
    };
    let base = format!("/console/webhooks/{}", w.id);
    let status = shown.status();
    let body = html! {
        (layout::shown(&shown))
        section.panel {
            dl.facts {
                dt { "Id" } dd.mono { (w.id) }
                dt { "Label" } dd { (w.label.as_deref().unwrap_or("(no label)")) }
                dt { "Level" } dd { (level_text(&w)) }
                @if let Some(wallet) = w.level.wallet_id() { dt { "Wallet" } dd.mono { a href={ "/console/wallets/" (wallet) } { (wallet) } } }
                @if let Some(e) = w.level.enterprise_id() { dt { "Enterprise" } dd.mono { (e) } }
                dt { "Type" } dd { (w.webhook_type) }
                dt { "URL" } dd.mono #webhook-url { (w.url) }
                dt { "State" } dd { (layout::badge(w.state.as_str())) }
                dt { "Failed in a row" } dd { (w.successive_failed_attempts) " (" (w.failed_attempts_total) " since the last unblock)" }
                dt { "Custom headers" } dd #custom-headers {
                    @if w.custom_headers.is_empty() { span.muted { "none" } }
                    @for name in w.custom_headers.keys() { code { (name) } " " }
                    @if !w.custom_headers.is_empty() { span.muted { "(values are sealed and never shown)" } }
                }
                @if !w.tx_request_states.is_empty() { dt { "txRequestStates" } dd { (w.tx_request_states.join(", ")) } }
                dt { "Created" } dd { (layout::time_s(w.created_at)) }
            }
        }
        div.actions {
            (layout::action_button(session, &format!("{base}/test"), "Send test", "", None))
            @if w.state == WebhookState::Suspended {
                (layout::action_button(session, &format!("{base}/unblock"), "Unblock", "", None))
            }
            @if w.level.enterprise_id().is_some() {
                (layout::action_button(session, &format!("{base}/secret"), "Rotate enterprise secret", "secondary",
                    Some("Rotate the enterprise's webhook secret? Receivers must switch to the new one within 24 hours.")))
            }
            (layout::action_button(session, &format!("{base}/remove"), "Remove webhook", "danger",
                Some("Remove this webhook? Its notifications are deleted with it.")))
        }
        section.panel {
            h2 { "Recover failed notifications" }
            form.filters method="get" action={ (base) "/recover" } {
                label { "Failed since (UTC)" input type="datetime-local" name="since" id="since" value=(datetime_local(now - 86_400_000)); }
                button.secondary type="submit" { "Count and confirm…" }
            }
            p.muted { "Redelivers every notification created since then that failed for good, at most " (search::MAX_RECOVER_DAYS) " days back." }
        }
        h2 { "Latest notifications" }
        (notification_table(&recent, false))
        p { a href={ "/console/notifications?webhook=" (w.id) } { "All notifications of this webhook →" } }
    };
    let title = format!("Webhook {}", w.label.as_deref().unwrap_or(w.id.as_str()));
    html(status, layout::page(Some(session), &title, "/console/webhooks", body))
}

/// A table of notifications, each linking to its page.
/// With `with_webhook`, each row also names its webhook (the notification log spans them all).
pub fn notification_table(rows: &[crate::model::notification::Notification], with_webhook: bool) -> Markup {
    html! {
        @if rows.is_empty() {
            p.muted { "No notification." }
        } @else {
            div.table-wrap { table.notifications {
                thead { tr {
                    th { "Created" } @if with_webhook { th { "Webhook" } } th { "Type" } th { "State" } th { "Retries" }
                    th { "Transfer" } th { "Simulation" } th {}
                } }
                tbody { @for n in rows {
                    tr {
                        td { (layout::time_ms(n.created_at_ms)) }
                        @if with_webhook {
                            td.mono { a href={ "/console/webhooks/" (n.webhook_id) } title=(n.webhook_id) { (n.webhook_id[..8]) "…" } }
                        }
                        td { (n.notification_type) }
                        td { (layout::badge(n.state.as_str())) }
                        td.num { (n.retries) }
                        td.mono { (n.meta.get("transfer").and_then(|t| t.as_str()).unwrap_or("")) }
                        td { @if n.simulation { "yes" } }
                        td { a href={ "/console/webhooks/" (n.webhook_id) "/notifications/" (n.id) } { "Details" } }
                    }
                } }
            } }
        }
    }
}

/// What a webhook's page reports after an action that redirected to it (post, redirect, get:
/// reloading the page shows it again rather than repeating the action).
#[derive(Debug, Deserialize)]
pub struct Done {
    /// `test` (with `notification`) or `unblocked`; anything else shows nothing.
    pub done: Option<String>,
    pub notification: Option<String>,
}

impl Done {
    fn shown(&self) -> Shown {
        let notification = self.notification.as_deref().and_then(|n| n.parse::<NotificationId>().ok());
        match (self.done.as_deref(), notification) {
            (Some("test"), Some(n)) => Shown::Notice(format!("Test notification {n} queued.")),
            (Some("unblocked"), _) => {
                Shown::Notice("Unblocked: its held notifications are being delivered.".into())
            }
            _ => Shown::Nothing,
        }
    }
}

/// `GET /console/webhooks/{id}`.
pub async fn detail(
    State(state): State<AppState>,
    session: Session,
    Path(id): Path<String>,
    Query(done): Query<Done>,
) -> Response {
    match id.parse::<WebhookId>() {
        Ok(id) => webhook_page(&state, &session, &id, done.shown()).await,
        Err(_) => {
            error_response(Error::not_found(crate::error::ErrorName::WebhookNotFound).into(), Some(&session))
        }
    }
}

/// The webhook id of a path; a malformed one is `WebhookNotFound`.
pub fn webhook_id(id: &str) -> Result<WebhookId, Error> {
    id.parse::<WebhookId>().map_err(|_| Error::not_found(crate::error::ErrorName::WebhookNotFound))
}

/// The webhook's page after an action that failed with `e`: a form error on the page, or an
/// error page for one not about the form. (A success redirects to the page instead.)
async fn failed(state: &AppState, session: &Session, id: &WebhookId, e: Error) -> Response {
    match FieldError::of(e) {
        Ok(fe) => webhook_page(state, session, id, Shown::Error(fe)).await,
        Err(e) => error_response(e, Some(session)),
    }
}

/// `POST /console/webhooks/{id}/test`.
pub async fn send_test(
    State(state): State<AppState>,
    Path(id): Path<String>,
    form: Form<NoFields>,
) -> Response {
    let id = match webhook_id(&id) {
        Ok(id) => id,
        Err(e) => return error_response(e.into(), Some(&form.session)),
    };
    match search::send_test(&state.webhooks, &form.session.auth, &id).await {
        Ok((n, _)) => {
            Redirect::to(&format!("/console/webhooks/{id}?done=test&notification={}", n.id)).into_response()
        }
        Err(e) => failed(&state, &form.session, &id, e).await,
    }
}

/// `POST /console/webhooks/{id}/unblock`.
pub async fn unblock(
    State(state): State<AppState>,
    Path(id): Path<String>,
    form: Form<NoFields>,
) -> Response {
    let id = match webhook_id(&id) {
        Ok(id) => id,
        Err(e) => return error_response(e.into(), Some(&form.session)),
    };
    match registration::unblock(&state.webhooks, &form.session.auth, &id).await {
        Ok(_) => Redirect::to(&format!("/console/webhooks/{id}?done=unblocked")).into_response(),
        Err(e) => failed(&state, &form.session, &id, e).await,
    }
}

/// `POST /console/webhooks/{id}/remove`: back to the list.
pub async fn remove(State(state): State<AppState>, Path(id): Path<String>, form: Form<NoFields>) -> Response {
    let id = match webhook_id(&id) {
        Ok(id) => id,
        Err(e) => return error_response(e.into(), Some(&form.session)),
    };
    match search::remove(&state.webhooks, &form.session.auth, &id).await {
        Ok(_) => Redirect::to("/console/webhooks").into_response(),
        Err(e) => failed(&state, &form.session, &id, e).await,
    }
}

/// `POST /console/webhooks/{id}/secret`: rotates the secret of the webhook's enterprise and
/// shows it once.
pub async fn rotate_secret(
    State(state): State<AppState>,
    Path(id): Path<String>,
    form: Form<NoFields>,
) -> Response {
    let id = match webhook_id(&id) {
        Ok(id) => id,
        Err(e) => return error_response(e.into(), Some(&form.session)),
    };
    let w = match crate::webhooks::access::webhook_access(&state.webhooks, &form.session.auth, &id).await {
        Ok(w) => w,
        Err(e) => return error_response(e.into(), Some(&form.session)),
    };
    let Some(enterprise) = w.level.enterprise_id() else {
        let e =
            Error::invalid_field("", "this webhook is bound to no enterprise, so it has no secret to rotate");
        return failed(&state, &form.session, &id, e).await;
    };
    match secret::rotate(&state.webhooks, &form.session.auth, enterprise).await {
        Ok(secret) => {
            let once = OneTime {
                id: "new-secret",
                lead: "The new webhook secret of this enterprise.".into(),
                warning:
                    "Copy it now: it is shown only once and cannot be retrieved later. The previous secret \
                          keeps signing for 24 hours.",
                value: secret,
                note: None,
            };
            webhook_page(&state, &form.session, &id, Shown::OneTime(once)).await
        }
        Err(e) => failed(&state, &form.session, &id, e).await,
    }
}
