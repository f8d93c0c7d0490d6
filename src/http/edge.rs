//! The one middleware every request passes (docs/decisions.md#performance: one boxed future and one service
//! clone per request where seven tower layers each took their own). In order:
//!
//! 1. the request id: the client's `request-id` header when `request_id::acceptable` (at most
//!    128 safe characters), else 32 generated hex characters, set on the request (for handlers
//!    and logs) and echoed on the response;
//! 2. the request's tracing span (method, path, request id);
//! 3. the in-flight limit (`max_in_flight_requests`): past it, 503 `ServerBusy` at once rather
//!    than a queue that only hides the overload until the timeout (docs/decisions.md#brute-force-limits);
//! 4. the timeout (`request_timeout` seconds): 408 `RequestTimeout` (docs/decisions.md#brute-force-limits);
//! 5. a signed request (BitGo's HMAC headers): its signature checked before the handler
//!    ([`super::hmac_edge`]), inside the timeout;
//! 6. on the way out: the route's metrics, the `RateLimit-*` headers of an authenticated
//!    request, the §7 error body with its `requestId`, and, last, the signature of the
//!    response to a verified signed request.

use std::{sync::Arc, time::Duration};

use axum::{
    extract::{Request, State},
    http::{HeaderValue, StatusCode},
    middleware::Next,
    response::{IntoResponse, Response},
};
use tokio::{sync::Semaphore, time::Instant};
use tracing::Instrument;

use super::{
    auth::{add_rate_limit_headers, RateSlot},
    error::ApiError,
    hmac_edge,
    request_id::{acceptable, with_error_body, REQUEST_ID},
};
use crate::{error::Error, AppState};

/// What [`edge`] needs: the application, the in-flight slots of this process and the timeout.
#[derive(Clone)]
pub struct Edge {
    state: AppState,
    in_flight: Arc<Semaphore>,
    timeout: Duration,
}

impl Edge {
    /// From `max_in_flight_requests` and `request_timeout` (seconds).
    pub fn new(state: AppState) -> Self {
        let in_flight = Arc::new(Semaphore::new(state.config.max_in_flight_requests));
        let timeout = Duration::from_secs(state.config.request_timeout);
        Edge { state, in_flight, timeout }
    }
}

/// See the module documentation.
pub async fn edge(State(edge): State<Edge>, mut req: Request, next: Next) -> Response {
    let start = Instant::now();
    let request_id = match req.headers().get(&REQUEST_ID).filter(|v| acceptable(v)) {
        Some(v) => v.clone(),
        None => {
            let v = HeaderValue::from_maybe_shared(axum::body::Bytes::from(crate::ids::new_id()))
                .unwrap_or(HeaderValue::from_static(""));
            req.headers_mut().insert(REQUEST_ID.clone(), v.clone());
            v
        }
    };
    let span = tracing::info_span!("request", method = %req.method(), path = %req.uri().path(),
        request_id = %String::from_utf8_lossy(request_id.as_bytes()));
    let (method, route) = super::metrics::request_labels(&req);
    let slot = RateSlot::default();
    req.extensions_mut().insert(slot.clone());
    let (mut res, signer) = match edge.in_flight.clone().try_acquire_owned() {
        Ok(permit) => {
            let run = async {
                if !hmac_edge::is_signed(&req) {
                    return (next.run(req).await, None);
                }
                match hmac_edge::verify(&edge.state, req).await {
                    Ok((req, signer)) => (next.run(req).await, Some(signer)),
                    Err(refused) => (refused, None),
                }
            };
            let handled = tokio::time::timeout(edge.timeout, run).instrument(span.clone()).await;
            drop(permit);
            handled.unwrap_or_else(|_| (StatusCode::REQUEST_TIMEOUT.into_response(), None))
        }
        Err(_) => (
            ApiError::from(Error::Busy {
                message: "the server is handling too many requests; try again shortly".into(),
                retry_after_secs: 1,
            })
            .into_response(),
            None,
        ),
    };
    add_rate_limit_headers(&mut res, &slot);
    let status = res.status();
    let seconds = start.elapsed().as_secs_f64();
    edge.state.metrics.request(method, route, status.as_u16(), seconds);
    if status.is_server_error() {
        span.in_scope(|| tracing::error!(status = status.as_u16(), seconds, "request failed"));
    }
    let mut res = with_error_body(res, &request_id);
    res.headers_mut().entry(REQUEST_ID.clone()).or_insert(request_id);
    match signer {
        Some(signer) => hmac_edge::sign(res, &signer).await,
        None => res,
    }
}
