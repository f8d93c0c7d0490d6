//! Extractors that turn a request into checked values or a §7 error: JSON bodies, typed path
//! and query parameters, and the client address.

use crate::error::ErrorName;
use std::net::{IpAddr, SocketAddr};

use axum::{
    body::Bytes,
    extract::{ConnectInfo, FromRequest, FromRequestParts, OptionalFromRequest, Request},
    http::{header, request::Parts, StatusCode},
};
use serde::{de::DeserializeOwned, Serialize};
use serde_json::{json, Value};

use super::error::ApiError;
use crate::{
    error::{check_json, parse_json, Error, JsonProblem},
    AppState,
};

/// A JSON request body, an object. Missing or wrong Content-Type: 415 `UnsupportedMediaType`;
/// over 1 MiB: 413 `PayloadTooLarge`; not JSON: 400 `MalformedJson`; not an object: 400
/// `InvalidRequestBody`; a field of the wrong type: 400
/// `InvalidField` with `context.field` the path of the field (also for a NUL character in a
/// field `T` reads).
pub struct ApiJson<T>(pub T);

impl<T: DeserializeOwned + Serialize, S: Send + Sync> FromRequest<S> for ApiJson<T> {
    type Rejection = ApiError;

    async fn from_request(req: Request, state: &S) -> Result<Self, ApiError> {
        let bytes = json_bytes(req, state).await?;
        // A check that builds nothing (syntax, repeated keys), then one typed pass (docs/decisions.md#performance).
        check(&bytes)?;
        // Every body of this API is an object; serde would read a struct from an array too.
        if bytes.iter().find(|b| !b.is_ascii_whitespace()) != Some(&b'{') {
            return Err(Error::Invalid {
                name: ErrorName::InvalidRequestBody,
                message: "the request body must be a JSON object".into(),
                context: json!({}),
            }
            .into());
        }
        Ok(ApiJson(parse_json(&bytes)?))
    }
}

/// An optional JSON body: `None` when the request has no body (no `Content-Type` and no
/// bytes), else [`ApiJson`]'s checks.
impl<T: DeserializeOwned + Serialize, S: Send + Sync> OptionalFromRequest<S> for ApiJson<T> {
    type Rejection = ApiError;

    async fn from_request(req: Request, state: &S) -> Result<Option<Self>, ApiError> {
        let empty = !req.headers().contains_key(header::CONTENT_TYPE)
            && req.headers().get(header::CONTENT_LENGTH).is_none_or(|l| l.as_bytes() == b"0");
        if empty {
            return Ok(None);
        }
        <ApiJson<T> as FromRequest<S>>::from_request(req, state).await.map(Some)
    }
}

/// A JSON body kept as a value, for domain functions that parse it themselves (and check NUL
/// characters in the fields they read): the checks of [`ApiJson`] otherwise.
pub struct JsonBody(pub Value);

impl<S: Send + Sync> FromRequest<S> for JsonBody {
    type Rejection = ApiError;

    async fn from_request(req: Request, state: &S) -> Result<Self, ApiError> {
        Ok(JsonBody(json_value(req, state).await?))
    }
}

/// Reads the body as a JSON value, with the checks of [`ApiJson`] but the NUL check, which is
/// the job of [`crate::error::parse_value`] on the type the value is read into.
pub async fn json_value<S: Send + Sync>(req: Request, state: &S) -> Result<Value, ApiError> {
    let bytes = json_bytes(req, state).await?;
    check(&bytes)?;
    Ok(serde_json::from_slice::<Value>(&bytes).map_err(malformed)?)
}

/// [`check_json`]: 400 `MalformedJson`, or 400 `InvalidField` naming a repeated key.
fn check(bytes: &[u8]) -> Result<(), Error> {
    check_json(bytes).map_err(|p| match p {
        JsonProblem::Malformed(e) => malformed(e),
        JsonProblem::Invalid(e) => e,
    })
}

/// 400 `MalformedJson`, with where the text stops being JSON.
fn malformed(e: serde_json::Error) -> Error {
    Error::Invalid {
        name: ErrorName::MalformedJson,
        message: format!("request body is not valid JSON: {e}"),
        context: json!({ "line": e.line(), "column": e.column() }),
    }
}

/// The body of a request whose Content-Type is JSON, at most the body limit.
async fn json_bytes<S: Send + Sync>(req: Request, state: &S) -> Result<Bytes, ApiError> {
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
        return Err(ApiError::UnsupportedMediaType);
    }
    Bytes::from_request(req, state).await.map_err(|rej| {
        if rej.status() == StatusCode::PAYLOAD_TOO_LARGE {
            ApiError::PayloadTooLarge
        } else {
            Error::Invalid { name: ErrorName::BadRequest, message: rej.body_text(), context: json!({}) }
                .into()
        }
    })
}

/// The address of the client: the socket peer, or, when the peer is a configured trusted proxy,
/// the right-most address of `X-Forwarded-For` that is not itself a trusted proxy.
#[derive(Debug, Clone, Copy)]
pub struct ClientIp(pub IpAddr);

impl FromRequestParts<AppState> for ClientIp {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &AppState) -> Result<Self, ApiError> {
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
    let hops: Vec<&str> = parts
        .headers
        .get_all("x-forwarded-for")
        .iter()
        .map(|v| v.to_str().unwrap_or("unreadable"))
        .flat_map(|v| v.split(','))
        .collect();
    walk_forwarded(peer, &hops, trusted)
}

/// One `X-Forwarded-For` hop: an address, `ip:port`, `[v6]` or `[v6]:port`.
fn parse_hop(hop: &str) -> Option<IpAddr> {
    let hop = hop.trim();
    hop.parse::<IpAddr>()
        .ok()
        .or_else(|| hop.parse::<SocketAddr>().ok().map(|s| s.ip()))
        .or_else(|| hop.strip_prefix('[')?.strip_suffix(']')?.parse().ok())
        .map(canonical)
}

/// Walks `X-Forwarded-For` from the right (docs/decisions.md#brute-force-limits): each trusted hop hands over to the one
/// before it; the first untrusted hop is the client. A hop that does not parse stops the walk
/// (what lies left of it is not vouched for) and the last trusted address is the client, as is
/// the left-most when every hop is trusted.
fn walk_forwarded(peer: IpAddr, hops: &[&str], trusted: &[ipnet::IpNet]) -> IpAddr {
    let is_trusted = |ip: &IpAddr| trusted.iter().any(|n| n.contains(ip));
    let mut last = canonical(peer);
    if !is_trusted(&last) {
        return last;
    }
    for hop in hops.iter().rev() {
        let Some(ip) = parse_hop(hop) else { return last };
        if !is_trusted(&ip) {
            return ip;
        }
        last = ip;
    }
    last
}

/// Path parameters parsed into typed values ([`crate::types`]): a value that breaks its type's
/// rule is a 400 `InvalidField` naming the parameter, before the handler runs.
pub struct ApiPath<T>(pub T);

impl<T: DeserializeOwned + Send, S: Send + Sync> FromRequestParts<S> for ApiPath<T> {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Self, ApiError> {
        use axum::extract::path::ErrorKind;
        match axum::extract::Path::<T>::from_request_parts(parts, state).await {
            Ok(axum::extract::Path(v)) => Ok(ApiPath(v)),
            Err(axum::extract::rejection::PathRejection::FailedToDeserializePathParams(e)) => {
                Err(match e.into_kind() {
                    ErrorKind::DeserializeError { key, message, .. } => {
                        Error::invalid_field(key.clone(), format!("{key}: {message}"))
                    }
                    ErrorKind::ParseErrorAtKey { key, expected_type, .. } => {
                        Error::invalid_field(key.clone(), format!("{key}: must be {expected_type}"))
                    }
                    ErrorKind::InvalidUtf8InPathParam { key } => {
                        Error::invalid_field(key.clone(), format!("{key}: not valid UTF-8"))
                    }
                    other => Error::invalid_field("path", other.to_string()),
                }
                .into())
            }
            Err(other) => Err(Error::invalid_field("path", other.body_text()).into()),
        }
    }
}

/// Query parameters; a value of the wrong type is a 400 `InvalidField` naming the parameter.
pub struct ApiQuery<T>(pub T);

impl<T: DeserializeOwned + Send, S: Send + Sync> FromRequestParts<S> for ApiQuery<T> {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, _state: &S) -> Result<Self, ApiError> {
        let query = parts.uri.query().unwrap_or_default();
        let de = serde_urlencoded::Deserializer::new(url::form_urlencoded::parse(query.as_bytes()));
        serde_path_to_error::deserialize::<_, T>(de).map(ApiQuery).map_err(|e| {
            let field = e.path().to_string();
            let field = if field == "." { "query".to_string() } else { field };
            Error::invalid_field(&field, format!("{field}: {}", e.into_inner())).into()
        })
    }
}

#[cfg(test)]
mod forwarded_tests {
    use super::*;

    fn walk(peer: &str, xff: &str) -> String {
        let trusted: Vec<ipnet::IpNet> = vec!["10.0.0.0/8".parse().unwrap(), "fd00::/8".parse().unwrap()];
        let hops: Vec<&str> = if xff.is_empty() { Vec::new() } else { xff.split(',').collect() };
        walk_forwarded(peer.parse().unwrap(), &hops, &trusted).to_string()
    }

    #[test]
    fn an_untrusted_peer_is_the_client_whatever_it_claims() {
        assert_eq!(walk("203.0.113.9", "198.51.100.1"), "203.0.113.9");
    }

    #[test]
    fn the_right_most_untrusted_hop_is_the_client() {
        assert_eq!(walk("10.0.0.1", "1.1.1.1, 198.51.100.7, 10.0.0.2"), "198.51.100.7");
        assert_eq!(walk("10.0.0.1", ""), "10.0.0.1");
        assert_eq!(walk("10.0.0.1", "10.0.0.3, 10.0.0.2"), "10.0.0.3");
    }

    #[test]
    fn port_forms_are_understood() {
        assert_eq!(walk("10.0.0.1", "198.51.100.7:4711"), "198.51.100.7");
        assert_eq!(walk("10.0.0.1", "[2001:db8::7]:443"), "2001:db8::7");
        assert_eq!(walk("10.0.0.1", "[2001:db8::8]"), "2001:db8::8");
        assert_eq!(walk("10.0.0.1", "::ffff:198.51.100.9"), "198.51.100.9");
    }

    #[test]
    fn an_unparseable_hop_stops_the_walk_at_the_last_trusted_address() {
        assert_eq!(walk("10.0.0.1", "198.51.100.7, garbage"), "10.0.0.1");
        assert_eq!(walk("10.0.0.1", "198.51.100.7, unknown, 10.0.0.2"), "10.0.0.2");
    }
}
