//! `GET /console/overview` (docs/decisions.md#the-operator-console): the last 24 hours of attempts by hour, success rate
//! and latency, the queue, suspended webhooks and the latest failures with their reason.

use axum::{extract::State, http::StatusCode, response::Response};
use maud::html;

use super::{chart, error_response, html, layout, Session};
use crate::{webhooks::search, AppState};

/// Percent with one decimal, or a dash.
fn percent(rate: Option<f64>) -> String {
    rate.map(|r| format!("{:.1} %", r * 100.0)).unwrap_or_else(|| "–".into())
}

fn millis(v: Option<i64>) -> String {
    v.map(|ms| format!("{ms} ms")).unwrap_or_else(|| "–".into())
}

/// The overview page.
pub async fn page(State(state): State<AppState>, session: Session) -> Response {
    let o = match search::overview(&state.webhooks, &session.auth, state.store.clock().now_ms()).await {
        Ok(o) => o,
        Err(e) => return error_response(e.into(), Some(&session)),
    };
    let cards: [(&str, String, &str); 8] = [
        ("Delivered (24 h)", o.delivered.to_string(), "delivered"),
        ("Failed attempts (24 h)", o.failed.to_string(), "failed"),
        ("Success rate", percent(o.success_rate()), "success-rate"),
        ("Attempt latency p50", millis(o.p50_ms), "p50"),
        ("Attempt latency p95", millis(o.p95_ms), "p95"),
        ("Due now", o.queue.due.to_string(), "due"),
        ("In flight", o.queue.in_flight.to_string(), "in-flight"),
        ("Held by suspended webhooks", o.queue.held.to_string(), "held"),
    ];
    let body = html! {
        div.cards {
            @for (label, value, id) in &cards {
                div.card id=(format!("card-{id}")) { div.value { (value) } div.label { (label) } }
            }
        }
        section.panel {
            h2 { "Delivery attempts, last 24 hours" }
            (chart::hourly(&o.hours))
            p.muted { "Latency percentiles over the latest " (o.latency_sample) " attempts of the period." }
        }
        h2 { "Suspended webhooks" }
        @if o.suspended.is_empty() {
            p.muted { "None." }
        } @else {
            div.table-wrap { table {
                thead { tr { th { "Webhook" } th { "Type" } th { "URL" } th { "Failed in a row" } } }
                tbody { @for w in &o.suspended {
                    tr {
                        td { a href={ "/console/webhooks/" (w.id) } { (w.label.as_deref().unwrap_or(w.id.as_str())) } }
                        td { (w.webhook_type) }
                        td.mono { (w.url) }
                        td.num { (w.successive_failed_attempts) }
                    }
                } }
            } }
        }
        h2 { "Latest failures" }
        @if o.failures.is_empty() {
            p.muted { "No failed attempt in the last 24 hours." }
        } @else {
            div.table-wrap { table #failures {
                thead { tr { th { "When" } th { "Type" } th { "URL" } th { "Status" } th { "Reason" } th {} } }
                tbody { @for f in &o.failures {
                    tr {
                        td { (layout::time_ms(f.attempt.started_at_ms)) }
                        td { (f.notification_type) }
                        td.mono { (f.url) }
                        td.num { @match f.attempt.status_code { Some(c) => (c), None => "–" } }
                        td {
                            @if let Some(err) = &f.attempt.error { div { (err) } }
                            @if let Some(b) = &f.attempt.response_body { div.mono.muted { (layout::truncated(b, 200)) } }
                        }
                        td { a href={ "/console/webhooks/" (f.attempt.webhook_id) "/notifications/" (f.attempt.notification_id) } { "Details" } }
                    }
                } }
            } }
        }
    };
    html(StatusCode::OK, layout::page(Some(&session), "Overview", "/console/overview", body))
}
