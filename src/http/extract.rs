//! Extractors that turn a request into checked values or a §7 error: JSON bodies and the
//! client address.

use std::net::{IpAddr, SocketAddr};

use axum::{
    body::Bytes,
    extract::{ConnectInfo, FromRequest, FromRequestParts, Request},
    http::{header, request::Parts, StatusCode},
};
use serde::de::DeserializeOwned;
use serde_json::{json, Value};

use super::error::Error;
use crate::AppState;

/// A JSON request body. Missing or wrong Content-Type: 415 `UnsupportedMediaType`; over 1 MiB:
/// 413 `PayloadTooLarge`; not JSON: 400 `MalformedJson`; a field of the wrong type: 400
/// `InvalidField` with `context.field` the path of the field.
pub struct ApiJson<T>(pub T);

impl<T: DeserializeOwned, S: Send + Sync> FromRequest<S> for ApiJson<T> {
    type Rejection = Error;

    async fn from_request(req: Request, state: &S) -> Result<Self, Error> {
        let value = json_value(req, state).await?;
        parse_value(value).map(ApiJson)
    }
}

/// Reads the body as a JSON value, with the checks of [`ApiJson`].
pub async fn json_value<S: Send + Sync>(req: Request, state: &S) -> Result<Value, Error> {
    let is_json = req
        .headers()
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.split(';').next())
        .map(|v| {
            let v = v.trim().to_ascii_lowercase();
            v == "application/json" || (v.starts_with("application/") && v.ends_with("+json"))
        })
        .unwrap_or(false);
    if !is_json {
        return Err(Error::UnsupportedMediaType);
    }
    let bytes = Bytes::from_request(req, state).await.map_err(|rej| {
        if rej.status() == StatusCode::PAYLOAD_TOO_LARGE {
            Error::PayloadTooLarge
        } else {
            Error::BadRequest { name: "BadRequest", message: rej.body_text(), context: json!({}) }
        }
    })?;
    let value = serde_json::from_slice::<Value>(&bytes).map_err(|e| Error::BadRequest {
        name: "MalformedJson",
        message: format!("request body is not valid JSON: {e}"),
        context: json!({ "line": e.line(), "column": e.column() }),
    })?;
    match nul_path(&value, String::new()) {
        Some(field) => Err(Error::invalid_field(field, "strings may not contain the NUL character (U+0000)")),
        None => Ok(value),
    }
}

/// The path of the first string (or key) holding U+0000, which no database text column
/// accepts everywhere; refused at the edge rather than failing in the store.
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

/// Deserializes a JSON value into `T`, naming the offending field on failure.
pub fn parse_value<T: DeserializeOwned>(value: Value) -> Result<T, Error> {
    // Through text, not `from_value`: serde_json loses the digits of integers beyond 64 bits
    // when deserializing from a `Value`, and base-unit amounts must stay exact.
    let text = serde_json::to_vec(&value).map_err(|e| Error::Internal(e.into()))?;
    let mut de = serde_json::Deserializer::from_slice(&text);
    serde_path_to_error::deserialize::<_, T>(&mut de).map_err(|e| {
        let path = e.path().to_string();
        let inner = e.into_inner().to_string();
        let field = match (missing_field_name(&inner), path.as_str()) {
            (Some(name), ".") => name,
            (Some(name), parent) => format!("{parent}.{name}"),
            (None, _) => path,
        };
        Error::BadRequest {
            name: if inner.starts_with("missing field") { "MissingField" } else { "InvalidField" },
            message: if field.is_empty() { inner } else { format!("{field}: {inner}") },
            context: json!({ "field": field }),
        }
    })
}

fn missing_field_name(msg: &str) -> Option<String> {
    let rest = msg.strip_prefix("missing field `")?;
    Some(rest.split('`').next()?.to_string())
}

/// The address of the client: the socket peer, or, when the peer is a configured trusted proxy,
/// the right-most address of `X-Forwarded-For` that is not itself a trusted proxy.
#[derive(Debug, Clone, Copy)]
pub struct ClientIp(pub IpAddr);

impl FromRequestParts<AppState> for ClientIp {
    type Rejection = Error;

    async fn from_request_parts(parts: &mut Parts, state: &AppState) -> Result<Self, Error> {
        let peer = parts
            .extensions
            .get::<ConnectInfo<SocketAddr>>()
            .map(|c| c.0.ip())
            .ok_or_else(|| Error::Internal(anyhow::anyhow!("no peer address on the connection")))?;
        Ok(ClientIp(client_ip(peer, parts, &state.config.trusted_proxies)))
    }
}

fn canonical(ip: IpAddr) -> IpAddr {
    match ip {
        IpAddr::V6(v6) => v6.to_ipv4_mapped().map(IpAddr::V4).unwrap_or(ip),
        v4 => v4,
    }
}

fn client_ip(peer: IpAddr, parts: &Parts, trusted: &[ipnet::IpNet]) -> IpAddr {
    let peer = canonical(peer);
    let is_trusted = |ip: &IpAddr| trusted.iter().any(|n| n.contains(ip));
    if !is_trusted(&peer) {
        return peer;
    }
    let forwarded: Vec<IpAddr> = parts
        .headers
        .get_all("x-forwarded-for")
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .filter_map(|s| s.trim().parse::<IpAddr>().ok())
        .map(canonical)
        .collect();
    forwarded.into_iter().rev().find(|ip| !is_trusted(ip)).unwrap_or(peer)
}
