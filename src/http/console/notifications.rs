//! The notification log (docs/decisions.md#the-operator-console): a search bounded in time and count, each notification's
//! payload and attempt timeline, resend, and recover (with a confirmation stating the count).

use axum::{
    extract::{Path, Query, State},
    http::StatusCode,
    response::Response,
};
use maud::html;
use serde::Deserialize;

use super::{
    datetime_local, datetime_ms, error_response, html, layout,
    layout::Shown,
    listed, opt,
    webhooks::{notification_table, webhook_id, webhook_page},
    FieldError, Form, NoFields, Session,
};
use crate::{
    error::Error,
    model::notification::NotificationState,
    paging::PageRequest,
    store::NotificationSearch,
    types::{AnyId, NotificationId, WalletId, WebhookId},
    webhooks::{notification_log, search},
    AppState,
};

/// Notifications listed per page.
pub const PAGE: u32 = 50;
/// Characters of a receiver's response body shown per attempt.
pub const BODY_SHOWN: usize = 2000;

const DAY_MS: i64 = 86_400_000;

/// The log's filters, as the query string gives them.
#[derive(Debug, Default, Deserialize)]
pub struct SearchQuery {
    pub state: Option<String>,
    #[serde(rename = "type")]
    pub notification_type: Option<String>,
    pub webhook: Option<String>,
    pub wallet: Option<String>,
    pub transfer: Option<String>,
    /// `24h` (default), `7d`, `30d` or `custom` (then `from` and `to`).
    pub range: Option<String>,
    pub from: Option<String>,
    pub to: Option<String>,
    pub before: Option<String>,
}

fn search_of(q: &SearchQuery, now: i64) -> Result<(NotificationSearch, PageRequest), Error> {
    let (from_ms, to_ms) = match q.range.as_deref().unwrap_or("24h") {
        "24h" | "" => (now - DAY_MS, now + 60_000),
        "7d" => (now - 7 * DAY_MS, now + 60_000),
        "30d" => (now - 30 * DAY_MS, now + 60_000),
        "custom" => (
            datetime_ms("from", q.from.as_deref().unwrap_or(""))?,
            datetime_ms("to", q.to.as_deref().unwrap_or(""))?,
        ),
        _ => return Err(Error::invalid_field("range", "must be 24h, 7d, 30d or custom")),
    };
    let state = match q.state.as_deref().map(str::trim).filter(|s| !s.is_empty()) {
        None => None,
        Some(s) => Some(
            NotificationState::parse(s)
                .ok_or_else(|| Error::invalid_field("state", "must be new, pending, processed or failed"))?,
        ),
    };
    let transfer = q.transfer.as_deref().map(str::trim).filter(|t| !t.is_empty());
    if transfer.is_some_and(|t| t.len() > 128) {
        return Err(Error::invalid_field("transfer", "at most 128 characters"));
    }
    let search = NotificationSearch {
        state,
        notification_type: q
            .notification_type
            .as_deref()
            .map(str::trim)
            .filter(|t| !t.is_empty())
            .map(str::to_string),
        webhook_id: opt::<WebhookId>("webhook", q.webhook.as_deref())?,
        wallet_id: opt::<WalletId>("wallet", q.wallet.as_deref())?,
        transfer_id: transfer.map(str::to_string),
        from_ms,
        to_ms,
    };
    let before = opt::<AnyId>("before", q.before.as_deref())?;
    Ok((search, PageRequest::bounded(Some(PAGE), before, PAGE, PAGE)?))
}

/// `GET /console/notifications`.
pub async fn search(
    State(state): State<AppState>,
    session: Session,
    Query(q): Query<SearchQuery>,
) -> Response {
    let now = state.store.clock().now_ms();
    let found = match search_of(&q, now) {
        Ok((search, page)) => {
            search::search_notifications(&state.webhooks, &session.auth, &search, &page).await
        }
        Err(e) => Err(e),
    };
    let (rows, next, error) = match listed(found) {
        Ok(l) => l,
        Err(e) => return error_response(e, Some(&session)),
    };
    let error = error.as_ref();
    let range = q.range.as_deref().unwrap_or("24h");
    let text = |v: &Option<String>| v.clone().unwrap_or_default();
    let base = format!(
        "/console/notifications?{}",
        layout::query(&[
            ("state", q.state.as_deref()),
            ("type", q.notification_type.as_deref()),
            ("webhook", q.webhook.as_deref()),
            ("wallet", q.wallet.as_deref()),
            ("transfer", q.transfer.as_deref()),
            ("range", q.range.as_deref()),
            ("from", q.from.as_deref()),
            ("to", q.to.as_deref()),
        ])
    );
    let fields = ["state", "webhook", "wallet", "transfer", "range", "from", "to"];
    let body = html! {
        form.filters method="get" action="/console/notifications" {
            label { "State" (layout::select("state", &[("new", "new"), ("pending", "pending"), ("processed", "processed"), ("failed", "failed")], q.state.as_deref())) }
            label { "Type" input name="type" id="type" value=(text(&q.notification_type)) size="14"; }
            label { "Webhook id" input name="webhook" id="webhook" value=(text(&q.webhook)) size="34"; (layout::field_error(error, "webhook")) }
            label { "Wallet id" input name="wallet" id="wallet" value=(text(&q.wallet)) size="34"; (layout::field_error(error, "wallet")) }
            label { "Transfer id" input name="transfer" id="transfer" value=(text(&q.transfer)) size="24"; (layout::field_error(error, "transfer")) }
            label { "Range" select name="range" id="range" {
                @for (v, l) in [("24h", "last 24 hours"), ("7d", "last 7 days"), ("30d", "last 30 days"), ("custom", "custom (from, to)")] {
                    option value=(v) selected[range == v] { (l) }
                }
            } (layout::field_error(error, "range")) }
            label { "From (UTC)" input type="datetime-local" name="from" id="from" value=(text(&q.from)); (layout::field_error(error, "from")) }
            label { "To (UTC)" input type="datetime-local" name="to" id="to" value=(text(&q.to)); (layout::field_error(error, "to")) }
            button type="submit" { "Search" }
        }
        (layout::form_error(error, &fields))
        p.muted { "Newest first, " (PAGE) " per page; a custom range spans at most " (search::MAX_SEARCH_DAYS) " days." }
        @if error.is_none() {
            div #results {
                (notification_table(&rows, true))
            }
        }
        (layout::pager(&base, "before", next.as_deref()))
    };
    let status = error.map(|e| e.status).unwrap_or(StatusCode::OK);
    html(status, layout::page(Some(&session), "Notifications", "/console/notifications", body))
}

/// The page of one notification, with `shown` on top.
async fn notification_page(
    state: &AppState,
    session: &Session,
    (wid, nid): (&WebhookId, &NotificationId),
    shown: Shown,
) -> Response {
    let (w, n, attempts) = match search::notification_detail(&state.webhooks, &session.auth, wid, nid).await {
        Ok(d) => d,
        Err(e) => return error_response(e.into(), Some(session)),
    };
    let status = shown.status();
    let base = format!("/console/webhooks/{}/notifications/{}", w.id, n.id);
    let body = html! {
        (layout::shown(&shown))
        section.panel {
            dl.facts {
                dt { "Id" } dd.mono { (n.id) }
                dt { "Webhook" } dd { a href={ "/console/webhooks/" (w.id) } { (w.label.as_deref().unwrap_or(w.id.as_str())) } " " span.mono.muted { (w.url) } }
                dt { "Type" } dd { (n.notification_type) }
                dt { "State" } dd #notification-state { (layout::badge(n.state.as_str())) }
                dt { "Retries" } dd { (n.retries) }
                dt { "Created" } dd { (layout::time_ms(n.created_at_ms)) }
                dt { "Next attempt" } dd { (layout::time_ms(n.next_attempt_at_ms)) }
                @if let Some(e) = &n.event_id { dt { "Event id" } dd.mono { (e) } }
                dt { "Idempotency key" } dd.mono { (n.idempotency_key()) }
                @if n.simulation { dt { "Simulation" } dd { "yes" } }
            }
        }
        div.actions { (layout::action_button(session, &format!("{base}/resend"), "Resend now", "", None)) }
        h2 { "Payload" }
        (layout::pretty_json(&n.payload))
        h2 { "Attempts" }
        @if attempts.is_empty() {
            p.muted { "Not attempted yet." }
        } @else {
            ol.timeline #attempts {
                @for a in &attempts {
                    li class=(if a.success { "ok" } else { "fail" }) {
                        div {
                            (layout::badge(if a.success { "delivered" } else { "failed" })) " "
                            (layout::time_ms(a.started_at_ms)) " · "
                            span.mono { (w.url) } " · "
                            "status " strong { @match a.status_code { Some(c) => (c), None => "none" } } " · "
                            (a.duration_ms) " ms"
                        }
                        @if let Some(err) = &a.error { div.field-error { (err) } }
                        @if let Some(b) = &a.response_body {
                            div.muted { "Receiver's response body:" }
                            pre.payload.response { (layout::truncated(b, BODY_SHOWN)) }
                        }
                    }
                }
            }
        }
    };
    html(
        status,
        layout::page(
            Some(session),
            &format!("Notification {}", n.notification_type),
            "/console/notifications",
            body,
        ),
    )
}

fn ids_of(wid: &str, nid: &str) -> Result<(WebhookId, NotificationId), Error> {
    let wid = webhook_id(wid)?;
    let nid = nid
        .parse::<NotificationId>()
        .map_err(|_| Error::not_found(crate::error::ErrorName::NotificationNotFound))?;
    Ok((wid, nid))
}

/// `GET /console/webhooks/{id}/notifications/{nid}`.
pub async fn detail(
    State(state): State<AppState>,
    session: Session,
    Path((wid, nid)): Path<(String, String)>,
) -> Response {
    match ids_of(&wid, &nid) {
        Ok((wid, nid)) => notification_page(&state, &session, (&wid, &nid), Shown::Nothing).await,
        Err(e) => error_response(e.into(), Some(&session)),
    }
}

/// `POST /console/webhooks/{id}/notifications/{nid}/resend`.
pub async fn resend(
    State(state): State<AppState>,
    Path((wid, nid)): Path<(String, String)>,
    form: Form<NoFields>,
) -> Response {
    let (wid, nid) = match ids_of(&wid, &nid) {
        Ok(ids) => ids,
        Err(e) => return error_response(e.into(), Some(&form.session)),
    };
    let resent = notification_log::resend(&state.webhooks, &form.session.auth, &wid, &nid).await;
    match Shown::of(resent, |_| Shown::Notice("Queued for delivery now, with its retries reset.".into())) {
        Ok(shown) => notification_page(&state, &form.session, (&wid, &nid), shown).await,
        Err(e) => error_response(e, Some(&form.session)),
    }
}

/// The recover form's field.
#[derive(Debug, Deserialize)]
pub struct RecoverForm {
    #[serde(default)]
    pub since: String,
}

/// `GET /console/webhooks/{id}/recover?since=`: how many would be redelivered, and a button
/// that does it.
pub async fn recover_confirm(
    State(state): State<AppState>,
    session: Session,
    Path(id): Path<String>,
    Query(q): Query<RecoverForm>,
) -> Response {
    let id = match webhook_id(&id) {
        Ok(id) => id,
        Err(e) => return error_response(e.into(), Some(&session)),
    };
    let counted = match datetime_ms("since", &q.since) {
        Ok(since) => {
            search::recover_count(&state.webhooks, &session.auth, &id, since).await.map(|n| (since, n))
        }
        Err(e) => Err(e),
    };
    let (since, count) = match counted {
        Ok(c) => c,
        Err(e) => {
            return match FieldError::of(e) {
                Ok(fe) => webhook_page(&state, &session, &id, Shown::Error(fe)).await,
                Err(e) => error_response(e, Some(&session)),
            }
        }
    };
    let cap = state.config.webhooks.recover_max;
    let body = html! {
        section.panel #recover-confirm {
            @if count == 0 {
                p { "No notification of this webhook created since " (layout::time_ms(since)) " has failed. Nothing to recover." }
                p { a href={ "/console/webhooks/" (id) } { "Back to the webhook" } }
            } @else {
                p #recover-count {
                    strong { (count) @if u64::from(cap) == count { "+" } }
                    " failed notification" @if count != 1 { "s" } " created since " (layout::time_ms(since))
                    " will be queued for delivery again, now, with their retries reset."
                }
                @if u64::from(cap) == count { p.muted { "At most " (cap) " are recovered at once; recover again for the rest." } }
                form.inline method="post" action={ "/console/webhooks/" (id) "/recover" } {
                    (layout::csrf(&session))
                    input type="hidden" name="since" value=(datetime_local(since));
                    button type="submit" { "Recover " (count) }
                }
                " "
                a href={ "/console/webhooks/" (id) } { "Cancel" }
            }
        }
    };
    html(
        StatusCode::OK,
        layout::page(Some(&session), "Recover failed notifications", "/console/webhooks", body),
    )
}

/// `POST /console/webhooks/{id}/recover`: queues them, audited, and says how many.
pub async fn recover(
    State(state): State<AppState>,
    Path(id): Path<String>,
    form: Form<RecoverForm>,
) -> Response {
    let session = &form.session;
    let id = match webhook_id(&id) {
        Ok(id) => id,
        Err(e) => return error_response(e.into(), Some(session)),
    };
    let done = match datetime_ms("since", &form.fields.since) {
        Ok(since) => search::recover(&state.webhooks, &session.auth, &id, since).await,
        Err(e) => Err(e),
    };
    let shown = Shown::of(done, |(_, n)| {
        Shown::Notice(format!(
            "Recovered: {n} notification{} queued for delivery.",
            if n == 1 { "" } else { "s" }
        ))
    });
    match shown {
        Ok(shown) => webhook_page(&state, session, &id, shown).await,
        Err(e) => error_response(e, Some(session)),
    }
}
