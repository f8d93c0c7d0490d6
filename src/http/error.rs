//! The one error type of the service and its mapping to the spec's error body (§7):
//! `{name, error, context, requestId}`. `requestId` is filled in by [`super::request_id`]'s
//! layer, which sees every response, so each handler only says what went wrong.

use axum::{
    http::{header, HeaderValue, StatusCode},
    response::{IntoResponse, Response},
};
use serde_json::{json, Map, Value};

/// Result with the service's [`Error`].
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// Everything a request can fail with. Each variant has a fixed status; `name` values are the
/// stable codes listed in docs/errors.md.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// 400: the request is malformed or a field is invalid. `context` names the field.
    #[error("{message}")]
    BadRequest { name: &'static str, message: String, context: Value },
    /// 401 with `x-auth-required: true`: no usable credentials.
    #[error("{message}")]
    Unauthenticated { name: &'static str, message: String },
    /// 401 from login: wrong password, unknown user, or a missing/wrong OTP (`needs_otp`).
    #[error("{message}")]
    LoginFailed { name: &'static str, message: String, needs_otp: bool },
    /// 403: authenticated, but the token's scopes do not permit the action.
    #[error("{message}")]
    Forbidden { name: &'static str, message: String, context: Value },
    /// 404: no such resource (or one the caller may not know exists).
    #[error("{message}")]
    NotFound { name: &'static str, message: String },
    /// 413: the body is over the 1 MiB limit.
    #[error("request body exceeds 1 MiB")]
    PayloadTooLarge,
    /// 415: the body is not declared as JSON.
    #[error("Content-Type must be application/json")]
    UnsupportedMediaType,
    /// 409: the resource already exists.
    #[error("{message}")]
    Conflict { name: &'static str, message: String },
    /// 429 with `Retry-After` (seconds).
    #[error("{message}")]
    TooManyRequests { message: String, retry_after: u64 },
    /// 503: a dependency (the database) does not answer.
    #[error("{0}")]
    Unavailable(String),
    /// 500: a bug or an environment failure. Details are logged, never sent.
    #[error(transparent)]
    Internal(#[from] anyhow::Error),
}

impl Error {
    /// A 400 naming the offending field: `context = {"field": field}`.
    pub fn invalid_field(field: impl Into<String>, message: impl Into<String>) -> Self {
        Error::BadRequest {
            name: "InvalidField",
            message: message.into(),
            context: json!({ "field": field.into() }),
        }
    }

    /// A 400 for a required field that is absent.
    pub fn missing_field(field: &str) -> Self {
        Error::BadRequest {
            name: "MissingField",
            message: format!("{field} is required"),
            context: json!({ "field": field }),
        }
    }

    /// A 403 naming the scope that would have allowed the action.
    pub fn forbidden(message: impl Into<String>, required: &str) -> Self {
        Error::Forbidden {
            name: "InsufficientScope",
            message: message.into(),
            context: json!({ "requiredScope": required }),
        }
    }

    pub fn status(&self) -> StatusCode {
        match self {
            Error::BadRequest { .. } => StatusCode::BAD_REQUEST,
            Error::Unauthenticated { .. } | Error::LoginFailed { .. } => StatusCode::UNAUTHORIZED,
            Error::Forbidden { .. } => StatusCode::FORBIDDEN,
            Error::NotFound { .. } => StatusCode::NOT_FOUND,
            Error::Conflict { .. } => StatusCode::CONFLICT,
            Error::PayloadTooLarge => StatusCode::PAYLOAD_TOO_LARGE,
            Error::UnsupportedMediaType => StatusCode::UNSUPPORTED_MEDIA_TYPE,
            Error::TooManyRequests { .. } => StatusCode::TOO_MANY_REQUESTS,
            Error::Unavailable(_) => StatusCode::SERVICE_UNAVAILABLE,
            Error::Internal(_) => StatusCode::INTERNAL_SERVER_ERROR,
        }
    }
}

impl From<crate::store::StoreError> for Error {
    fn from(e: crate::store::StoreError) -> Self {
        match e {
            crate::store::StoreError::Conflict(what) => {
                Error::Conflict { name: "AlreadyExists", message: format!("{what} already exists") }
            }
            crate::store::StoreError::Other(e) => Error::Internal(e),
        }
    }
}

/// The body of an error response before `requestId` is known; carried as a response extension.
#[derive(Debug, Clone)]
pub struct ErrorBody(pub Map<String, Value>);

impl ErrorBody {
    /// Builds the §7 fields; extra top-level fields (such as `needsOTP`) go in `extra`.
    pub fn new(name: &str, error: &str, context: Value) -> Self {
        let mut m = Map::new();
        m.insert("name".into(), json!(name));
        m.insert("error".into(), json!(error));
        m.insert("context".into(), if context.is_object() { context } else { json!({}) });
        ErrorBody(m)
    }
}

impl IntoResponse for Error {
    fn into_response(self) -> Response {
        let status = self.status();
        let body = match &self {
            Error::BadRequest { name, message, context } | Error::Forbidden { name, message, context } => {
                ErrorBody::new(name, message, context.clone())
            }
            Error::Unauthenticated { name, message }
            | Error::NotFound { name, message }
            | Error::Conflict { name, message } => ErrorBody::new(name, message, json!({})),
            Error::LoginFailed { name, message, needs_otp } => {
                let mut b = ErrorBody::new(name, message, json!({ "needsOTP": needs_otp }));
                if *needs_otp {
                    b.0.insert("needsOTP".into(), json!(true));
                }
                b
            }
            Error::TooManyRequests { message, retry_after } => {
                ErrorBody::new("TooManyRequests", message, json!({ "retryAfter": retry_after }))
            }
            Error::PayloadTooLarge => ErrorBody::new("PayloadTooLarge", &self.to_string(), json!({})),
            Error::UnsupportedMediaType => {
                ErrorBody::new("UnsupportedMediaType", &self.to_string(), json!({ "header": "Content-Type" }))
            }
            Error::Unavailable(message) => ErrorBody::new("ServiceUnavailable", message, json!({})),
            Error::Internal(e) => {
                tracing::error!(error = %format!("{e:#}"), "internal error");
                ErrorBody::new("InternalError", "internal error", json!({}))
            }
        };
        let mut res = (status, axum::Json(Value::Object(body.0.clone()))).into_response();
        match &self {
            Error::Unauthenticated { .. } => {
                res.headers_mut().insert("x-auth-required", HeaderValue::from_static("true"));
            }
            Error::TooManyRequests { retry_after, .. } => {
                res.headers_mut().insert(header::RETRY_AFTER, HeaderValue::from(*retry_after));
            }
            _ => {}
        }
        res.extensions_mut().insert(body);
        res
    }
}
