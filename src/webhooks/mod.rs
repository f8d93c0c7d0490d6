//! Webhooks (spec §4.4 to §4.10, §2.5 to §2.7, §6, §8): registration at wallet, block and
//! enterprise level ([`registration`]), who may manage them ([`access`]), simulation
//! ([`simulate`]), secrets and verification ([`secrets`]), event fan-out ([`events`]), the
//! operator's views ([`operator`]) and signatures ([`signing`]); notifications are built by [`crate::outbox`]. The HTTP shapes are
//! in `http/handlers/webhooks.rs`.
//!
//! Layer rule: no web-framework types and nothing of the HTTP layer (docs/architecture.md).

use std::collections::BTreeMap;

use reqwest::header::{HeaderName, HeaderValue};
use serde_json::json;

use crate::{
    config::Environment,
    error::{Error, Result},
};

pub mod access;
pub mod events;
pub mod limits;
pub mod operator;
pub mod registration;
pub mod secrets;
pub mod signing;
pub mod simulate;

/// Wallet webhook types (§6.1).
pub const WALLET_TYPES: &[&str] = &[
    "address_confirmation",
    "admin",
    "circuitBreaker",
    "lowFee",
    "lowFeeAddressBalance",
    "pendingapproval",
    "transaction",
    "transactionExpire",
    "transactionRemoved",
    "transaction_finality_on_l1",
    "transfer",
    "txRequest",
    "txRequestTransaction",
];
/// Block webhook types (§6.2).
pub const BLOCK_TYPES: &[&str] = &["block", "wallet_confirmation"];
/// Enterprise webhook types (§6.3).
pub const ENTERPRISE_TYPES: &[&str] = &["accessToken", "bankAccount"];
/// Webhooks of one type per wallet, per enterprise, and per user and coin (§8).
pub const MAX_WEBHOOKS_PER_TYPE: u32 = 10;
/// Longest callback URL, characters.
pub const MAX_URL_LEN: usize = 2048;
/// The most confirmations a block webhook may wait for.
pub const MAX_NUM_CONFIRMATIONS: u64 = 1_000_000;
/// Webhook record `version` (§2.5).
pub const VERSION: u32 = 2;
/// Header names a webhook's `customHttpHeaders` may not set: the delivery engine sets them.
pub const RESERVED_HEADERS: &[&str] = &[
    "host",
    "content-length",
    "content-type",
    "transfer-encoding",
    "connection",
    "x-signature-sha256",
    "idempotency-key",
    "webhook-id",
    "webhook-timestamp",
    "webhook-signature",
];

/// Checks a callback URL: absolute http(s) with a host, at most [`MAX_URL_LEN`] characters,
/// https only in production.
pub fn check_url(url: &str, env: Environment) -> Result<()> {
    if url.len() > MAX_URL_LEN {
        return Err(Error::invalid_field("url", format!("at most {MAX_URL_LEN} characters")));
    }
    let parsed =
        url::Url::parse(url).map_err(|e| Error::invalid_field("url", format!("not an absolute URL: {e}")))?;
    match parsed.scheme() {
        "https" => {}
        "http" if env == Environment::Test => {}
        "http" => return Err(Error::invalid_field("url", "the production environment requires https")),
        _ => return Err(Error::invalid_field("url", "must be an http or https URL")),
    }
    if parsed.host_str().is_none_or(str::is_empty) {
        return Err(Error::invalid_field("url", "must have a host"));
    }
    Ok(())
}

/// Most `customHttpHeaders`, and the longest value in bytes (issue 9 §8).
pub const MAX_CUSTOM_HEADERS: usize = 20;
pub const MAX_HEADER_VALUE_BYTES: usize = 1024;
/// Most entries of `txRequestStates` / `txRequestTransactionStates`, and the longest one.
pub const MAX_TX_REQUEST_STATES: usize = 20;
pub const MAX_STATE_LEN: usize = 64;

/// Checks `customHttpHeaders`: valid names and values, none reserved, at most
/// [`MAX_CUSTOM_HEADERS`], values at most [`MAX_HEADER_VALUE_BYTES`].
pub fn check_headers(headers: &BTreeMap<String, String>) -> Result<()> {
    if headers.len() > MAX_CUSTOM_HEADERS {
        return Err(Error::invalid_field(
            "customHttpHeaders",
            format!("at most {MAX_CUSTOM_HEADERS} headers"),
        ));
    }
    for (k, v) in headers {
        let field = format!("customHttpHeaders.{k}");
        if v.len() > MAX_HEADER_VALUE_BYTES {
            return Err(Error::invalid_field(&field, format!("at most {MAX_HEADER_VALUE_BYTES} bytes")));
        }
        let name = HeaderName::from_bytes(k.as_bytes())
            .map_err(|_| Error::invalid_field(&field, "not a valid header name"))?;
        if RESERVED_HEADERS.contains(&name.as_str()) {
            return Err(Error::invalid_field(
                &field,
                "this header is set by the service and cannot be overridden",
            ));
        }
        HeaderValue::from_str(v).map_err(|_| Error::invalid_field(&field, "not a valid header value"))?;
    }
    Ok(())
}

/// Checks a list of txRequest states: at most [`MAX_TX_REQUEST_STATES`] names of letters, each
/// at most [`MAX_STATE_LEN`] long; duplicates are dropped.
pub fn check_states(field: &str, states: Option<Vec<String>>) -> Result<Vec<String>> {
    let states = states.unwrap_or_default();
    if states.len() > MAX_TX_REQUEST_STATES {
        return Err(Error::invalid_field(field, format!("at most {MAX_TX_REQUEST_STATES} states")));
    }
    let mut out: Vec<String> = Vec::new();
    for (i, s) in states.into_iter().enumerate() {
        if s.is_empty() || s.len() > MAX_STATE_LEN || !s.bytes().all(|b| b.is_ascii_alphabetic()) {
            return Err(Error::invalid_field(
                format!("{field}[{i}]"),
                format!("a state name: 1 to {MAX_STATE_LEN} letters"),
            ));
        }
        if !out.contains(&s) {
            out.push(s);
        }
    }
    Ok(out)
}

/// `InvalidWebhookType`: `level` has no such type; `allowed` lists the level's types.
pub fn invalid_type(level: &str, allowed: &[&str]) -> Error {
    Error::Invalid {
        name: "InvalidWebhookType",
        message: format!("not a {level} webhook type; allowed: {}", allowed.join(", ")),
        context: json!({ "field": "type", "allowed": allowed }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn production_requires_https_callbacks() {
        assert!(check_url("http://example.com/h", Environment::Test).is_ok());
        assert!(check_url("http://example.com/h", Environment::Production).is_err());
        assert!(check_url("https://example.com/h", Environment::Production).is_ok());
        assert!(check_url("https://", Environment::Test).is_err());
        assert!(check_url("mailto:a@b.co", Environment::Test).is_err());
    }

    #[test]
    fn reserved_and_malformed_headers_are_refused() {
        let h = |k: &str, v: &str| BTreeMap::from([(k.to_string(), v.to_string())]);
        assert!(check_headers(&h("X-Api-Key", "abc")).is_ok());
        for reserved in
            ["Host", "content-length", "Webhook-Signature", "X-Signature-SHA256", "Idempotency-Key"]
        {
            assert!(check_headers(&h(reserved, "x")).is_err(), "{reserved}");
        }
        assert!(check_headers(&h("bad name", "x")).is_err());
        assert!(check_headers(&h("X-Ok", "a\r\nInjected: 1")).is_err());
    }
}
