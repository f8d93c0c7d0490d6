//! The mapping of errors to HTTP: status + the spec's error body (§7)
//! `{name, error, context, requestId}`. `requestId` is filled in by [`super::request_id`]'s
//! layer, which sees every response, so a handler only says what went wrong.

use crate::error::ErrorName;
use axum::{
    http::{header, HeaderValue, StatusCode},
    response::{IntoResponse, Response},
};
use serde_json::{json, Map, Value};

use crate::error::Error;

/// Result of a handler.
pub type ApiResult<T> = std::result::Result<T, ApiError>;

/// What a request can fail with: a domain error, or one of the two failures only HTTP has.
#[derive(Debug, thiserror::Error)]
pub enum ApiError {
    #[error(transparent)]
    Domain(#[from] Error),
    /// 413: the body is over the 1 MiB limit.
    #[error("request body exceeds 1 MiB")]
    PayloadTooLarge,
    /// 415: the body is not declared as JSON.
    #[error("Content-Type must be application/json")]
    UnsupportedMediaType,
}

/// `Retry-After` of a 503 `ServiceUnavailable` (the database is away), seconds: the pool
/// reconnects on the next request, so a client may try again soon.
pub const UNAVAILABLE_RETRY_AFTER_SECS: u64 = 1;

impl ApiError {
    /// The status of each failure.
    pub fn status(&self) -> StatusCode {
        match self {
            ApiError::PayloadTooLarge => StatusCode::PAYLOAD_TOO_LARGE,
            ApiError::UnsupportedMediaType => StatusCode::UNSUPPORTED_MEDIA_TYPE,
            ApiError::Domain(e) => match e {
                Error::Invalid { .. } => StatusCode::BAD_REQUEST,
                Error::Unauthenticated { .. } | Error::LoginFailed { .. } | Error::NeedsUnlock { .. } => {
                    StatusCode::UNAUTHORIZED
                }
                Error::Forbidden { .. } => StatusCode::FORBIDDEN,
                Error::NotFound { .. } => StatusCode::NOT_FOUND,
                Error::Conflict { .. } => StatusCode::CONFLICT,
                Error::Throttled { .. } => StatusCode::TOO_MANY_REQUESTS,
                Error::Unavailable(_) | Error::Busy { .. } => StatusCode::SERVICE_UNAVAILABLE,
                Error::Internal(_) => StatusCode::INTERNAL_SERVER_ERROR,
            },
        }
    }

    /// The §7 body's `name`, `error` and `context` (the console shows them beside a field).
    pub fn body(&self) -> ErrorBody {
        let e = match self {
            ApiError::PayloadTooLarge => {
                return ErrorBody::new(ErrorName::PayloadTooLarge, &self.to_string(), json!({}))
            }
            ApiError::UnsupportedMediaType => {
                return ErrorBody::new(
                    ErrorName::UnsupportedMediaType,
                    &self.to_string(),
                    json!({ "header": "Content-Type" }),
                )
            }
            ApiError::Domain(e) => e,
        };
        match e {
            Error::Invalid { name, message, context } | Error::Forbidden { name, message, context } => {
                ErrorBody::new(*name, message, context.clone())
            }
            Error::Unauthenticated { name, message }
            | Error::NotFound { name, message }
            | Error::Conflict { name, message } => ErrorBody::new(*name, message, json!({})),
            Error::LoginFailed { name, message, needs_otp } => {
                let mut b = ErrorBody::new(*name, message, json!({ "needsOTP": needs_otp }));
                if *needs_otp {
                    b.0.insert("needsOTP".into(), json!(true));
                }
                b
            }
            Error::NeedsUnlock { message } => {
                let mut b = ErrorBody::new(ErrorName::NeedsUnlock, message, json!({ "needsUnlock": true }));
                b.0.insert("needsUnlock".into(), json!(true));
                b
            }
            Error::Throttled { name, message, retry_after_secs } => {
                ErrorBody::new(*name, message, json!({ "retryAfter": retry_after_secs }))
            }
            Error::Busy { message, retry_after_secs } => {
                ErrorBody::new(ErrorName::ServerBusy, message, json!({ "retryAfter": retry_after_secs }))
            }
            Error::Unavailable(message) => ErrorBody::new(
                ErrorName::ServiceUnavailable,
                message,
                json!({ "retryAfter": UNAVAILABLE_RETRY_AFTER_SECS }),
            ),
            Error::Internal(e) => {
                tracing::error!(error = %format!("{e:#}"), "internal error");
                ErrorBody::new(ErrorName::InternalError, "internal error", json!({}))
            }
        }
    }
}

/// The body of an error response before `requestId` is known; carried as a response extension.
#[derive(Debug, Clone)]
pub struct ErrorBody(pub Map<String, Value>);

impl ErrorBody {
    /// Builds the §7 fields; extra top-level fields (such as `needsOTP`) go in `extra`.
    pub fn new(name: ErrorName, error: &str, context: Value) -> Self {
        let mut m = Map::new();
        m.insert("name".into(), json!(name.as_str()));
        m.insert("error".into(), json!(visible(error)));
        let context = match context {
            Value::Object(fields) => Value::Object(
                fields
                    .into_iter()
                    .map(|(k, v)| match v {
                        Value::String(s) => (visible(&k).into_owned(), json!(visible(&s))),
                        v => (visible(&k).into_owned(), v),
                    })
                    .collect(),
            ),
            _ => json!({}),
        };
        m.insert("context".into(), context);
        ErrorBody(m)
    }
}

/// `text` with each control character (U+0000, line breaks, …) written as its escape
/// `\u{..}`: messages echo what a client sent, and a raw NUL or newline would reach a terminal
/// or a log line that a reader takes for the service's own.
fn visible(text: &str) -> std::borrow::Cow<'_, str> {
    if !text.chars().any(char::is_control) {
        return text.into();
    }
    text.chars()
        .map(|c| if c.is_control() { c.escape_unicode().to_string() } else { c.to_string() })
        .collect::<String>()
        .into()
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let status = self.status();
        let body = self.body();
        let mut res = (status, axum::Json(Value::Object(body.0.clone()))).into_response();
        match &self {
            ApiError::Domain(Error::Unauthenticated { .. }) => {
                res.headers_mut().insert("x-auth-required", HeaderValue::from_static("true"));
            }
            ApiError::Domain(
                Error::Throttled { retry_after_secs, .. } | Error::Busy { retry_after_secs, .. },
            ) => {
                res.headers_mut().insert(header::RETRY_AFTER, HeaderValue::from(*retry_after_secs));
            }
            ApiError::Domain(Error::Unavailable(_)) => {
                res.headers_mut()
                    .insert(header::RETRY_AFTER, HeaderValue::from(UNAVAILABLE_RETRY_AFTER_SECS));
            }
            _ => {}
        }
        res.extensions_mut().insert(body);
        res
    }
}
