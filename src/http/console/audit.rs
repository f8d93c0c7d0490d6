//! The audit log (docs/decisions.md#the-operator-console): the entries the user may see, filtered by type, user, wallet
//! and date, paged; and, for service admins, "verify chain".

use axum::{
    extract::{Query, State},
    http::StatusCode,
    response::Response,
};
use maud::{html, Markup};
use serde::Deserialize;

use super::{datetime_ms, error_response, html, layout, listed, opt, Form, NoFields, Session};
use crate::{
    audit::Verified,
    error::Error,
    identity::audit_log,
    model::audit::AuditType,
    paging::PageRequest,
    store::AuditFilter,
    types::{AnyId, UserId, WalletId},
    AppState,
};

/// Entries listed per page.
pub const PAGE: u32 = 50;

/// The log's filters, as the query string gives them.
#[derive(Debug, Default, Deserialize)]
pub struct AuditQuery {
    #[serde(rename = "type")]
    pub entry_type: Option<String>,
    pub user: Option<String>,
    pub wallet: Option<String>,
    pub from: Option<String>,
    pub to: Option<String>,
    pub before: Option<String>,
}

fn filter_of(q: &AuditQuery) -> Result<(AuditFilter, PageRequest), Error> {
    let date = |field: &str, v: &Option<String>| {
        v.as_deref().map(str::trim).filter(|v| !v.is_empty()).map(|v| datetime_ms(field, v)).transpose()
    };
    let filter = AuditFilter {
        entry_type: opt::<AuditType>("type", q.entry_type.as_deref())?,
        user_id: opt::<UserId>("user", q.user.as_deref())?,
        wallet_id: opt::<WalletId>("wallet", q.wallet.as_deref())?,
        date_gte_ms: date("from", &q.from)?,
        date_lt_ms: date("to", &q.to)?,
        ..Default::default()
    };
    let before = opt::<AnyId>("before", q.before.as_deref())?;
    Ok((filter, PageRequest::bounded(Some(PAGE), before, PAGE, PAGE)?))
}

async fn audit_page(
    state: &AppState,
    session: &Session,
    q: &AuditQuery,
    verified: Option<Markup>,
) -> Response {
    let found = match filter_of(q) {
        Ok((filter, page)) => audit_log::list(&state.identity, &session.auth, filter, &page).await,
        Err(e) => Err(e),
    };
    let (rows, next, error) = match listed(found) {
        Ok(l) => l,
        Err(e) => return error_response(e, Some(session)),
    };
    let emails = match audit_log::user_emails(&state.identity, &rows).await {
        Ok(e) => e,
        Err(e) => return error_response(e.into(), Some(session)),
    };
    let error = error.as_ref();
    let text = |v: &Option<String>| v.clone().unwrap_or_default();
    let types: Vec<(&str, &str)> = AuditType::ALL.iter().map(|t| (t.as_str(), t.as_str())).collect();
    let base = format!(
        "/console/audit?{}",
        layout::query(&[
            ("type", q.entry_type.as_deref()),
            ("user", q.user.as_deref()),
            ("wallet", q.wallet.as_deref()),
            ("from", q.from.as_deref()),
            ("to", q.to.as_deref()),
        ])
    );
    let body = html! {
        @if let Some(v) = verified { (v) }
        @if session.is_service_admin() {
            div.actions { (layout::action_button(session, "/console/audit/verify", "Verify chain", "secondary", None)) }
        }
        form.filters method="get" action="/console/audit" {
            label { "Type" (layout::select("type", &types, q.entry_type.as_deref())) (layout::field_error(error, "type")) }
            label { "User id" input name="user" id="user" value=(text(&q.user)) size="34"; (layout::field_error(error, "user")) }
            label { "Wallet id" input name="wallet" id="wallet" value=(text(&q.wallet)) size="34"; (layout::field_error(error, "wallet")) }
            label { "From (UTC)" input type="datetime-local" name="from" id="from" value=(text(&q.from)); (layout::field_error(error, "from")) }
            label { "To (UTC)" input type="datetime-local" name="to" id="to" value=(text(&q.to)); (layout::field_error(error, "to")) }
            button type="submit" { "Filter" }
        }
        (layout::form_error(error, &["type", "user", "wallet", "from", "to"]))
        @if rows.is_empty() && error.is_none() { p.muted { "No entry matches." } }
        @if !rows.is_empty() {
            div.table-wrap { table #audit {
                thead { tr { th { "When" } th { "Type" } th { "User" } th { "Enterprise" } th { "Wallet" } th { "Address" } th { "Details" } } }
                tbody { @for c in &rows {
                    tr {
                        td { (layout::time_ms(c.entry.date_ms)) }
                        td { code { (c.entry.entry_type.as_str()) } }
                        td {
                            @if let Some(id) = &c.entry.user_id {
                                span title=(id) { (emails.get(id).map(String::as_str).unwrap_or(id.as_str())) }
                            }
                        }
                        td.mono { (c.entry.enterprise_id.as_deref().unwrap_or("")) }
                        td.mono { (c.entry.wallet_id.as_deref().unwrap_or("")) }
                        td.mono { (c.entry.ip.as_deref().unwrap_or("")) }
                        td.mono { (c.entry.data.to_string()) }
                    }
                } }
            } }
        }
        (layout::pager(&base, "before", next.as_deref()))
    };
    let status = error.map(|e| e.status).unwrap_or(StatusCode::OK);
    html(status, layout::page(Some(session), "Audit log", "/console/audit", body))
}

/// `GET /console/audit`.
pub async fn page(State(state): State<AppState>, session: Session, Query(q): Query<AuditQuery>) -> Response {
    audit_page(&state, &session, &q, None).await
}

/// `POST /console/audit/verify`: walks the chain and reports on top of the log.
pub async fn verify(State(state): State<AppState>, form: Form<NoFields>) -> Response {
    let session = &form.session;
    let report = match audit_log::verify(&state.identity, &session.auth).await {
        Ok(Verified::Ok(n)) => {
            html! { div.alert.ok #verify-result role="status" { "ok, " (n) " entries: every link of the chain holds." } }
        }
        Ok(Verified::Broken { seq, id, entries_before }) => html! {
            div.alert.error #verify-result role="alert" {
                "Broken at entry " code { (id) } " (sequence " (seq) "), after " (entries_before) " good entries."
            }
        },
        Err(e) => return error_response(e.into(), Some(session)),
    };
    audit_page(&state, session, &AuditQuery::default(), Some(report)).await
}
