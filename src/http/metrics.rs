//! GET /metrics: the registry of `crate::metrics` as OpenMetrics text, and the route labels
//! the edge middleware counts requests under.

use crate::{error::Error, http::error::ApiError, AppState};
use axum::{
    extract::{MatchedPath, Request, State},
    http::{header, Method},
    response::{IntoResponse, Response},
};

/// The method and route labels of a request: standard methods only, so that a client's
/// invented ones cannot grow the label set; `unmatched` when no route matched.
pub fn request_labels(req: &Request) -> (&'static str, String) {
    let route = req
        .extensions()
        .get::<MatchedPath>()
        .map(|p| p.as_str().to_string())
        .unwrap_or_else(|| "unmatched".into());
    let method = match *req.method() {
        Method::GET => "GET",
        Method::POST => "POST",
        Method::PUT => "PUT",
        Method::DELETE => "DELETE",
        Method::PATCH => "PATCH",
        Method::HEAD => "HEAD",
        Method::OPTIONS => "OPTIONS",
        _ => "other",
    };
    (method, route)
}

/// Metrics in the Prometheus / OpenMetrics text format.
#[utoipa::path(get, path = "/metrics", tag = "operations",
    responses((status = 200, description = "OpenMetrics text", content_type = "application/openmetrics-text", body = String)))]
pub async fn render(State(state): State<AppState>) -> Response {
    if let Ok(stats) = state.store.delivery_stats(state.store.clock().now_ms()).await {
        state.metrics.due.set(stats.due);
        state.metrics.in_flight.set(stats.in_flight);
        state.metrics.suspended.set(stats.suspended_webhooks);
        state.metrics.held.set(stats.held);
    }
    state.metrics.hashes_running.set(state.identity.hashing.running());
    state.metrics.hashes_peak.set(state.identity.hashing.peak());
    let Ok(body) = state.metrics.encode() else {
        return ApiError::from(Error::Internal(anyhow::anyhow!("encoding metrics"))).into_response();
    };
    ([(header::CONTENT_TYPE, "application/openmetrics-text; version=1.0.0; charset=utf-8")], body)
        .into_response()
}
