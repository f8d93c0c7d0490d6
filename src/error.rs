//! The domain error: what a rule of the service can refuse or fail with, independent of HTTP.
//! `http/error.rs` maps each variant to a status and the spec's §7 body; the CLI prints the
//! message and exits non-zero. `name` values are the stable codes listed in docs/errors.md.
//!
//! Layer rule: no web-framework types and nothing of the HTTP layer (docs/architecture.md).

use serde::{de::DeserializeOwned, Serialize};
use serde_json::{json, Value};

/// Result with the service's domain [`Error`].
pub type Result<T, E = Error> = std::result::Result<T, E>;

crate::types::text_enum!(
    /// Every `name` of a §7 error body, in one place (docs/errors.md gives each one's status and
    /// context). Stable: clients match on them.
    pub enum ErrorName("not an error name") {
        MalformedJson = "MalformedJson",
        InvalidRequestBody = "InvalidRequestBody",
        MissingField = "MissingField",
        InvalidField = "InvalidField",
        ExceedsCreatingToken = "ExceedsCreatingToken",
        TooManyIds = "TooManyIds",
        InvalidWebhookType = "InvalidWebhookType",
        WebhookLimitReached = "WebhookLimitReached",
        NoWebhookSecret = "NoWebhookSecret",
        BadRequest = "BadRequest",
        AuthenticationRequired = "AuthenticationRequired",
        InvalidToken = "InvalidToken",
        TokenExpired = "TokenExpired",
        IpNotAllowed = "IpNotAllowed",
        InvalidSignature = "InvalidSignature",
        StaleRequest = "StaleRequest",
        RequestReplayed = "RequestReplayed",
        InvalidCredentials = "InvalidCredentials",
        InvalidOtp = "InvalidOtp",
        InsufficientScope = "InsufficientScope",
        NotFound = "NotFound",
        WalletNotFound = "WalletNotFound",
        WebhookNotFound = "WebhookNotFound",
        EnterpriseNotFound = "EnterpriseNotFound",
        NotificationNotFound = "NotificationNotFound",
        TokenNotFound = "TokenNotFound",
        TemplateNotFound = "TemplateNotFound",
        UserNotFound = "UserNotFound",
        MethodNotAllowed = "MethodNotAllowed",
        AlreadyExists = "AlreadyExists",
        AddressInUse = "AddressInUse",
        WalletNotWatched = "WalletNotWatched",
        TokenNotExtensible = "TokenNotExtensible",
        PayloadTooLarge = "PayloadTooLarge",
        UnsupportedMediaType = "UnsupportedMediaType",
        RequestTimeout = "RequestTimeout",
        TooManyRequests = "TooManyRequests",
        TooManyOtpAttempts = "TooManyOtpAttempts",
        InternalError = "InternalError",
        ServiceUnavailable = "ServiceUnavailable",
        ServerBusy = "ServerBusy",
        NeedsUnlock = "NeedsUnlock",
        InsufficientBalance = "InsufficientBalance",
        WalletFrozen = "WalletFrozen",
        WalletNotCustodial = "WalletNotCustodial",
        SpendingLimitExceeded = "SpendingLimitExceeded",
        TooManyWithdrawals = "TooManyWithdrawals",
        ApprovalNotPending = "ApprovalNotPending",
        ApprovalNotAllowed = "ApprovalNotAllowed",
        ApprovalNotFound = "ApprovalNotFound",
        TxRequestNotFound = "TxRequestNotFound",
        PolicyDenied = "PolicyDenied",
        PolicyRuleNotFound = "PolicyRuleNotFound",
        TooManyRuleChanges = "TooManyRuleChanges",
        PolicyRuleLocked = "PolicyRuleLocked",
        SsoNotConfigured = "SsoNotConfigured",
        SsoFailed = "SsoFailed",
        SsoNotLinked = "SsoNotLinked",
        SsoNoRole = "SsoNoRole",
        SsoRequired = "SsoRequired",
        KeychainLimitReached = "KeychainLimitReached",
        AddressLimitReached = "AddressLimitReached",
    }
);

impl std::fmt::Display for ErrorName {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Everything a domain operation can fail with.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The input is malformed or a field is invalid. `context` names the field (`{field}`).
    #[error("{message}")]
    Invalid { name: ErrorName, message: String, context: Value },
    /// No usable credentials (missing, unknown, expired or revoked token; wrong address).
    #[error("{message}")]
    Unauthenticated { name: ErrorName, message: String },
    /// Login or OTP check failed: wrong password, unknown user, or a missing/wrong OTP
    /// (`needs_otp`).
    #[error("{message}")]
    LoginFailed { name: ErrorName, message: String, needs_otp: bool },
    /// The session must be unlocked first (§4.3: a token without a spending limit for the
    /// coin "must be unlocked regularly"): 401 with BitGo's `needsUnlock: true`.
    #[error("{message}")]
    NeedsUnlock { message: String },
    /// Authenticated, but the token's scopes or the user's role do not permit the action.
    #[error("{message}")]
    Forbidden { name: ErrorName, message: String, context: Value },
    /// No such resource (or one the caller may not know exists).
    #[error("{message}")]
    NotFound { name: ErrorName, message: String },
    /// The resource already exists.
    #[error("{message}")]
    Conflict { name: ErrorName, message: String },
    /// Too many attempts; try again after `retry_after_secs` seconds.
    #[error("{message}")]
    Throttled { name: ErrorName, message: String, retry_after_secs: u64 },
    /// The server is at a configured capacity limit; try again after `retry_after_secs`.
    #[error("{message}")]
    Busy { message: String, retry_after_secs: u64 },
    /// A dependency (the database) does not answer.
    #[error("{0}")]
    Unavailable(String),
    /// A bug or an environment failure. Details are logged, never shown to a client.
    #[error(transparent)]
    Internal(#[from] anyhow::Error),
}

impl Error {
    /// An invalid field: `context = {"field": field}`.
    pub fn invalid_field(field: impl Into<String>, message: impl Into<String>) -> Self {
        Error::Invalid {
            name: ErrorName::InvalidField,
            message: message.into(),
            context: json!({ "field": field.into() }),
        }
    }

    /// A required field that is absent.
    pub fn missing_field(field: &str) -> Self {
        Error::Invalid {
            name: ErrorName::MissingField,
            message: format!("{field} is required"),
            context: json!({ "field": field }),
        }
    }

    /// A denial naming the scope that would have allowed the action.
    pub fn forbidden(message: impl Into<String>, required: &str) -> Self {
        Error::Forbidden {
            name: ErrorName::InsufficientScope,
            message: message.into(),
            context: json!({ "requiredScope": required }),
        }
    }

    /// A resource that does not exist or that the caller may not see.
    pub fn not_found(name: ErrorName) -> Self {
        Error::NotFound { name, message: "not found, or not accessible with this token".into() }
    }
}

impl From<crate::store::StoreError> for Error {
    fn from(e: crate::store::StoreError) -> Self {
        match e {
            crate::store::StoreError::Conflict(what) => {
                Error::Conflict { name: ErrorName::AlreadyExists, message: format!("{what} already exists") }
            }
            crate::store::StoreError::Unavailable(cause) => {
                // Per request, so at debug: the engine and /health report an outage once.
                tracing::debug!(%cause, "database unavailable");
                Error::Unavailable("the database is unavailable; try again shortly".into())
            }
            crate::store::StoreError::Other(e) => Error::Internal(e),
        }
    }
}

/// Deserializes a JSON value into `T`, naming the offending field on failure (`MissingField`
/// or `InvalidField` with `context.field` the dotted path, e.g. `spendingLimits[0].coin`).
/// A string or key of `T` holding U+0000 is `InvalidField` too: no database text column
/// accepts it everywhere. Fields `T` does not read are ignored, NUL or not.
pub fn parse_value<T: DeserializeOwned + Serialize>(value: &Value) -> Result<T> {
    let text = serde_json::to_vec(value).map_err(|e| Error::Internal(e.into()))?;
    parse_json(&text)
}

/// [`parse_value`] from JSON text, in one pass: no intermediate value (docs/decisions.md#performance). `text`
/// must be one valid JSON document (the caller checks the syntax).
pub fn parse_json<T: DeserializeOwned + Serialize>(text: &[u8]) -> Result<T> {
    let parsed: T = parse_only(text)?;
    // JSON text can hold U+0000 only as the escape `\u0000` (RFC 8259 §7): without one
    // there is nothing to look for.
    if !text.windows(6).any(|w| w == br"\u0000") {
        return Ok(parsed);
    }
    let seen = serde_json::to_value(&parsed).map_err(|e| Error::Internal(e.into()))?;
    match nul_path(&seen, String::new()) {
        Some(field) => Err(Error::invalid_field(field, "strings may not contain the NUL character (U+0000)")),
        None => Ok(parsed),
    }
}

/// The path of the first string (or key) holding U+0000.
fn nul_path(v: &Value, at: String) -> Option<String> {
    match v {
        Value::String(s) if s.contains('\0') => Some(at),
        Value::Array(items) => items.iter().enumerate().find_map(|(i, x)| nul_path(x, format!("{at}[{i}]"))),
        Value::Object(map) => map.iter().find_map(|(k, x)| {
            let here = if at.is_empty() { k.clone() } else { format!("{at}.{k}") };
            if k.contains('\0') {
                Some(here)
            } else {
                nul_path(x, here)
            }
        }),
        _ => None,
    }
}

fn parse_only<T: DeserializeOwned>(text: &[u8]) -> Result<T> {
    // From text, not `from_value`: serde_json loses the digits of integers beyond 64 bits
    // when deserializing from a `Value`, and base-unit amounts must stay exact.
    // Without tracking the path first: tracking it costs on every value (4% of a 100-id
    // lookup's CPU), and only an error needs it, so a body that fails is read again with it.
    if let Ok(parsed) = serde_json::from_slice(text) {
        return Ok(parsed);
    }
    let mut de = serde_json::Deserializer::from_slice(text);
    serde_path_to_error::deserialize::<_, T>(&mut de).map_err(path_error)
}

/// A 400 naming the field a deserialization error points at (`ids[3]` also gives `index: 3`).
fn path_error(e: serde_path_to_error::Error<serde_json::Error>) -> Error {
    let path = e.path().to_string();
    let inner = e.into_inner().to_string();
    let field = match (named_field(&inner), path.as_str()) {
        (Some(name), ".") => name,
        (Some(name), parent) => format!("{parent}.{name}"),
        (None, _) => path,
    };
    let index =
        field.strip_suffix(']').and_then(|f| f.rsplit_once('[')).and_then(|(_, i)| i.parse::<u64>().ok());
    let context = match index {
        Some(i) => json!({ "field": field, "index": i }),
        None => json!({ "field": field }),
    };
    Error::Invalid {
        name: if inner.starts_with("missing field") {
            ErrorName::MissingField
        } else {
            ErrorName::InvalidField
        },
        message: if field.is_empty() { inner } else { format!("{field}: {inner}") },
        context,
    }
}

/// What [`check_json`] found wrong.
#[derive(Debug)]
pub enum JsonProblem {
    /// Not JSON at all.
    Malformed(serde_json::Error),
    /// JSON, but an object repeats a key: 400 `InvalidField` naming it.
    Invalid(Error),
}

/// One pass over JSON text that builds nothing (docs/decisions.md#performance): a syntax error is `Malformed`; an
/// object repeating a key anywhere is `Invalid`, naming it (docs/decisions.md#faults-and-floods). Every route refuses
/// repeated keys alike, where serde_json's `Value` and maps would keep the last copy and two
/// readers of one body could disagree on it.
pub fn check_json(text: &[u8]) -> std::result::Result<(), JsonProblem> {
    let mut de = serde_json::Deserializer::from_slice(text);
    match serde_path_to_error::deserialize::<_, UniqueKeys>(&mut de) {
        Ok(UniqueKeys) => de.end().map_err(JsonProblem::Malformed),
        Err(e) if e.inner().classify() == serde_json::error::Category::Data => {
            Err(JsonProblem::Invalid(path_error(e)))
        }
        Err(e) => Err(JsonProblem::Malformed(e.into_inner())),
    }
}

/// A JSON value read only to see that no object repeats a key.
struct UniqueKeys;

impl<'de> serde::Deserialize<'de> for UniqueKeys {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> std::result::Result<Self, D::Error> {
        d.deserialize_any(UniqueKeysVisitor)
    }
}

struct UniqueKeysVisitor;

impl<'de> serde::de::Visitor<'de> for UniqueKeysVisitor {
    type Value = UniqueKeys;

    fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("a JSON value")
    }

    fn visit_bool<E>(self, _: bool) -> std::result::Result<UniqueKeys, E> {
        Ok(UniqueKeys)
    }
    fn visit_i64<E>(self, _: i64) -> std::result::Result<UniqueKeys, E> {
        Ok(UniqueKeys)
    }
    fn visit_u64<E>(self, _: u64) -> std::result::Result<UniqueKeys, E> {
        Ok(UniqueKeys)
    }
    fn visit_f64<E>(self, _: f64) -> std::result::Result<UniqueKeys, E> {
        Ok(UniqueKeys)
    }
    fn visit_str<E>(self, _: &str) -> std::result::Result<UniqueKeys, E> {
        Ok(UniqueKeys)
    }
    fn visit_unit<E>(self) -> std::result::Result<UniqueKeys, E> {
        Ok(UniqueKeys)
    }

    fn visit_seq<A: serde::de::SeqAccess<'de>>(
        self,
        mut seq: A,
    ) -> std::result::Result<UniqueKeys, A::Error> {
        while seq.next_element::<UniqueKeys>()?.is_some() {}
        Ok(UniqueKeys)
    }

    fn visit_map<A: serde::de::MapAccess<'de>>(
        self,
        mut map: A,
    ) -> std::result::Result<UniqueKeys, A::Error> {
        // A set, not a scan: a 1 MiB object of distinct keys stays linear.
        let mut seen = std::collections::HashSet::new();
        while let Some(key) = map.next_key::<String>()? {
            if !seen.insert(key.clone()) {
                return Err(serde::de::Error::custom(format!("duplicate field `{key}`")));
            }
            map.next_value::<UniqueKeys>()?;
        }
        Ok(UniqueKeys)
    }
}

/// The field serde names in a missing or repeated field's message (those point at the object).
fn named_field(msg: &str) -> Option<String> {
    let rest = msg.strip_prefix("missing field `").or_else(|| msg.strip_prefix("duplicate field `"))?;
    Some(rest.split('`').next()?.to_string())
}

#[cfg(test)]
mod tests {
    use super::ErrorName;

    #[test]
    fn docs_list_every_error_name() {
        let doc = include_str!("../docs/errors.md");
        for name in ErrorName::ALL {
            assert!(doc.contains(&format!("| `{}` |", name.as_str())), "docs/errors.md lacks {name}");
        }
    }
}
