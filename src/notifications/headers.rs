//! A webhook's `customHttpHeaders` (docs/decisions.md#brute-force-limits): which may be set, how many and how long,
//! and their values sealed at rest with the master key, since they often carry a receiver's
//! credentials.
//!
//! Layer rule: no web-framework types and nothing of the HTTP layer (docs/architecture.md).

use std::collections::BTreeMap;

use base64::{engine::general_purpose::STANDARD, Engine as _};
use reqwest::header::{HeaderName, HeaderValue};

use crate::{
    error::{Error, Result},
    master_key::MasterKey,
    types::WebhookId,
};

/// Header names a webhook's `customHttpHeaders` may not set: the delivery engine sets them, or
/// they are hop-by-hop or framing headers (RFC 9110 §7.6.1, §6.4; docs/decisions.md#faults-and-floods) that would change
/// how the request is sent rather than what it says.
pub const RESERVED_HEADERS: &[&str] = &[
    "host",
    "content-length",
    "content-type",
    "content-encoding",
    "transfer-encoding",
    "connection",
    "keep-alive",
    "proxy-connection",
    "proxy-authenticate",
    "proxy-authorization",
    "te",
    "trailer",
    "trailers",
    "upgrade",
    "expect",
    "user-agent",
    "x-signature-sha256",
    "idempotency-key",
    "webhook-id",
    "webhook-timestamp",
    "webhook-signature",
];

/// Most `customHttpHeaders`, and the longest value in bytes (docs/decisions.md#brute-force-limits).
pub const MAX_CUSTOM_HEADERS: usize = 20;
pub const MAX_HEADER_VALUE_BYTES: usize = 1024;
/// Checks `customHttpHeaders`: valid names and values, none reserved, at most
/// [`MAX_CUSTOM_HEADERS`], values at most [`MAX_HEADER_VALUE_BYTES`].
pub fn check_headers(headers: &BTreeMap<String, String>) -> Result<()> {
    if headers.len() > MAX_CUSTOM_HEADERS {
        return Err(Error::invalid_field(
            "customHttpHeaders",
            format!("at most {MAX_CUSTOM_HEADERS} headers"),
        ));
    }
    // Header names are case-insensitive (RFC 9110 §5.1): `x-a` and `X-A` are one header.
    let mut names = std::collections::HashSet::with_capacity(headers.len());
    for (k, v) in headers {
        let field = format!("customHttpHeaders.{k}");
        if !names.insert(k.to_ascii_lowercase()) {
            return Err(Error::invalid_field(&field, "this header is given twice (names ignore case)"));
        }
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
        // Printable ASCII and tab only, as the OpenAPI pattern says (`^[\t\x20-\x7e]*$`).
        if !v.bytes().all(|c| c == b'\t' || (0x20..=0x7e).contains(&c)) {
            return Err(Error::invalid_field(&field, "printable ASCII characters only"));
        }
        HeaderValue::from_str(v).map_err(|_| Error::invalid_field(&field, "not a valid header value"))?;
    }
    Ok(())
}

/// Marks a sealed value: `sealed:v1:` then base64 of [`MasterKey::seal`]'s output.
const SEALED: &str = "sealed:v1:";

/// What binds a sealed value to its webhook and header name.
fn aad(webhook_id: &str, name: &str) -> String {
    format!("header:{webhook_id}:{}", name.to_ascii_lowercase())
}

/// Seals every value of `headers` for webhook `webhook_id`; names stay readable.
/// Errors: `Internal` when encryption fails.
pub fn seal(
    key: &MasterKey,
    webhook_id: &WebhookId,
    headers: BTreeMap<String, String>,
) -> Result<BTreeMap<String, String>> {
    headers
        .into_iter()
        .map(|(k, v)| {
            let sealed = key.seal(&aad(webhook_id, &k), v.as_bytes()).map_err(Error::Internal)?;
            Ok((k, format!("{SEALED}{}", STANDARD.encode(sealed))))
        })
        .collect()
}

/// The plain value of one stored header. Values stored before sealing existed (no prefix) are
/// returned as they are. Errors: a description (wrong key, tampering), never the value.
pub fn open(
    key: &MasterKey,
    webhook_id: &WebhookId,
    name: &str,
    stored: &str,
) -> std::result::Result<String, String> {
    let Some(b64) = stored.strip_prefix(SEALED) else { return Ok(stored.to_string()) };
    let sealed = STANDARD.decode(b64).map_err(|_| format!("custom header {name}: not valid base64"))?;
    let plain = key
        .open(&aad(webhook_id, name), &sealed)
        .map_err(|_| format!("custom header {name}: cannot be unsealed with this master key"))?;
    String::from_utf8(plain).map_err(|_| format!("custom header {name}: not UTF-8"))
}

#[cfg(test)]
mod tests {
    use super::*;

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

    #[test]
    fn sealed_values_open_only_for_their_webhook_and_name() {
        let key = MasterKey::from_hex(&"ab".repeat(32)).expect("key");
        let plain = BTreeMap::from([("X-Api-Key".to_string(), "s3cret".to_string())]);
        let (w1, w2): (WebhookId, WebhookId) = (crate::types::test_id("w1"), crate::types::test_id("w2"));
        let sealed = seal(&key, &w1, plain).expect("seal");
        let stored = &sealed["X-Api-Key"];
        assert!(stored.starts_with(SEALED) && !stored.contains("s3cret"));
        assert_eq!(open(&key, &w1, "X-Api-Key", stored).as_deref(), Ok("s3cret"));
        assert!(open(&key, &w2, "X-Api-Key", stored).is_err(), "bound to the webhook");
        assert!(open(&key, &w1, "X-Other", stored).is_err(), "bound to the name");
        assert_eq!(open(&key, &w1, "X-Old", "legacy").as_deref(), Ok("legacy"));
    }
}
