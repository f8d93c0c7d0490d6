//! Request ids and the uniform error body. The id comes from the client's `request-id` header
//! when that is [`acceptable`], or is generated (32 hex characters); it is echoed in the
//! response header and, for every response with status >= 400, in the body's `requestId`
//! (spec §7).

use crate::error::ErrorName;
use axum::{
    body::Body,
    http::{header, HeaderName, HeaderValue, StatusCode},
    response::{IntoResponse, Response},
};
use serde_json::{json, Value};

use super::error::ErrorBody;

/// Name of the request id header, in requests and responses.
pub static REQUEST_ID: HeaderName = HeaderName::from_static("request-id");

/// Longest client-chosen request id, bytes (docs/decisions.md#faults-and-floods); a longer one is replaced.
pub const MAX_REQUEST_ID_LEN: usize = 128;

/// Whether a client's `request-id` may be used as the request's id: 1 to
/// [`MAX_REQUEST_ID_LEN`] characters of `A-Z a-z 0-9 . _ : -`. Anything else (a 64 KB header,
/// spaces, quotes, control characters) is never echoed or logged; a generated id is used.
pub fn acceptable(v: &HeaderValue) -> bool {
    let b = v.as_bytes();
    !b.is_empty()
        && b.len() <= MAX_REQUEST_ID_LEN
        && b.iter().all(|c| c.is_ascii_alphanumeric() || matches!(c, b'.' | b'_' | b':' | b'-'))
}

/// Marks a console response whose error status must keep its HTML body (the edge otherwise
/// replaces the body of a 4xx/5xx with the §7 JSON).
#[derive(Clone, Copy)]
pub struct HtmlBody;

/// Fills `requestId` (the request's `request_id` header) into an error body, and gives every
/// other 4xx/5xx (unknown route, wrong method, body too large, ...) the §7 shape. Other
/// responses pass unchanged.
pub fn with_error_body(res: Response, request_id: &HeaderValue) -> Response {
    let status = res.status();
    if status.as_u16() < 400 || res.extensions().get::<HtmlBody>().is_some() {
        return res;
    }
    let request_id = String::from_utf8_lossy(request_id.as_bytes()).into_owned();
    let body = match res.extensions().get::<ErrorBody>() {
        Some(b) => b.clone(),
        None => default_body(status),
    };
    let mut map = body.0;
    map.insert("requestId".into(), json!(request_id));
    let (mut parts, _) = res.into_parts();
    parts.headers.remove(header::CONTENT_LENGTH);
    parts.headers.insert(header::CONTENT_TYPE, HeaderValue::from_static("application/json"));
    let bytes = serde_json::to_vec(&Value::Object(map)).unwrap_or_default();
    Response::from_parts(parts, Body::from(bytes)).into_response()
}

fn default_body(status: StatusCode) -> ErrorBody {
    let (name, message) = match status {
        StatusCode::NOT_FOUND => (ErrorName::NotFound, "no such route"),
        StatusCode::METHOD_NOT_ALLOWED => (ErrorName::MethodNotAllowed, "method not allowed on this route"),
        StatusCode::PAYLOAD_TOO_LARGE => (ErrorName::PayloadTooLarge, "request body exceeds 1 MiB"),
        StatusCode::UNSUPPORTED_MEDIA_TYPE => {
            (ErrorName::UnsupportedMediaType, "Content-Type must be application/json")
        }
        StatusCode::REQUEST_TIMEOUT => (ErrorName::RequestTimeout, "request timed out"),
        s if s.is_client_error() => (ErrorName::BadRequest, "bad request"),
        _ => (ErrorName::InternalError, "internal error"),
    };
    ErrorBody::new(name, message, json!({}))
}
