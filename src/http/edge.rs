//! The one middleware every response passes on its way out (issue 12 §4: one boxed future and
//! one service clone per request where three layers took three): the route's metrics, the
//! `RateLimit-*` headers of an authenticated request, and the §7 error body with its
//! `requestId`.

use std::time::Instant;

use axum::{
    extract::{Request, State},
    middleware::Next,
    response::Response,
};

use super::{
    auth::{add_rate_limit_headers, RateSlot},
    request_id::{with_error_body, REQUEST_ID},
};
use crate::AppState;

/// See the module documentation.
pub async fn edge(State(state): State<AppState>, mut req: Request, next: Next) -> Response {
    // A header value clone shares its bytes; text is made only for an error body.
    let request_id = req.headers().get(&REQUEST_ID).cloned();
    let (method, route) = crate::metrics::request_labels(&req);
    let slot = RateSlot::default();
    req.extensions_mut().insert(slot.clone());
    let start = Instant::now();
    let mut res = next.run(req).await;
    add_rate_limit_headers(&mut res, &slot);
    state.metrics.request(method, route, res.status().as_u16(), start.elapsed().as_secs_f64());
    with_error_body(res, request_id)
}
