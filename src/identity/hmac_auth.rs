//! HMAC request authentication and response signing: BitGo's auth versions 2 and 3, as the
//! official SDK (`@bitgo/sdk-hmac`) speaks them (docs/decisions.md#signed-requests). The client sends
//! `Authorization: Bearer <hex SHA-256 of its token>`, `Auth-Timestamp` (Unix ms), `HMAC` (hex
//! HMAC-SHA256 keyed with the token itself) and `BitGo-Auth-Version` (`2.0` or `3.0`). The
//! subjects, where `path` is the request's path with `?query` when it has one:
//!
//! - request, v2: `{ts}|{path}|{body}`; v3: `{METHOD}|{ts}|3.0|{path}|{body}`;
//! - response, v2: `{ts}|{path}|{status}|{body}`; v3: `{METHOD}|{ts}|{path}|{status}|{body}`,
//!   sent as the `hmac` and `timestamp` headers.
//!
//! Version 4 (`@bitgo/sdk-hmac`'s `hmacv4`): `Authorization: Bearer <token id>` (the login's
//! `token_id`), `X-Request-Timestamp` (Unix seconds), `X-Content-SHA256` (hex SHA-256 of the raw
//! body), `X-Auth-Request-Id` (the client's id for the request) and `X-Signature` (hex HMAC,
//! keyed with the token, of `{ts}\n{METHOD}\n{path}\n{bodyHash}\n{authRequestId}\n`). The
//! response carries the same four headers, signed over
//! `{ts}\n{METHOD}\n{path}\n{status}\n{bodyHash}\n{authRequestId}\n`.
//!
//! Beyond BitGo: a timestamp outside the window is refused, and so is a request seen before
//! (the replay guard), by every process sharing the database: each MAC is recorded there, the
//! reads of v3 behind a bounded memory of the process that saw them. A v4 request's
//! `X-Auth-Request-Id` is single-use per token within the window, on every process. Every
//! comparison of a MAC is constant-time (`digest::hmac_sha256_verify`).

use std::{collections::HashMap, net::IpAddr, sync::Mutex};

use super::{
    bearer::{principal_of_token, token_aad, Principal},
    Identity,
};
use crate::{
    digest::{hmac_sha256_hex, hmac_sha256_verify, sha256_hex},
    error::{Error, ErrorName, Result},
};

/// BitGo's auth version of a signed request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AuthVersion {
    V2,
    V3,
    V4,
}

impl AuthVersion {
    /// `2.0` or `3.0` (also `2` and `3`), as in `BitGo-Auth-Version`.
    pub fn parse(s: &str) -> Option<Self> {
        match s.trim() {
            "2" | "2.0" => Some(AuthVersion::V2),
            "3" | "3.0" => Some(AuthVersion::V3),
            "4" | "4.0" => Some(AuthVersion::V4),
            _ => None,
        }
    }
}

/// A request's signature as sent, and what it covers.
#[derive(Debug)]
pub struct SignedRequest<'a> {
    /// `BitGo-Auth-Version`.
    pub version: Option<&'a str>,
    /// `Auth-Timestamp`, Unix milliseconds.
    pub timestamp: Option<&'a str>,
    /// `HMAC`, hex.
    pub hmac: Option<&'a str>,
    /// `Authorization`: `Bearer <hex SHA-256 of the token>`.
    pub authorization: Option<&'a str>,
    /// Upper case, as sent.
    pub method: &'a str,
    /// The path, with `?query` when there is one, as sent.
    pub path: &'a str,
    /// The raw body.
    pub body: &'a [u8],
    /// Whether the request may change state (anything but GET, HEAD and OPTIONS): its replay
    /// guard is the database's, shared by every process.
    pub changes_state: bool,
    /// v4: `X-Content-SHA256`, hex.
    pub content_sha256: Option<&'a str>,
    /// v4: `X-Auth-Request-Id`, 1 to 128 characters of `A-Z a-z 0-9 . _ : -`.
    pub auth_request_id: Option<&'a str>,
}

/// Signs the response to a verified request with the request's token.
pub struct ResponseSigner {
    key: Vec<u8>,
    version: AuthVersion,
    method: String,
    path: String,
    /// v4 only.
    auth_request_id: String,
}

impl std::fmt::Debug for ResponseSigner {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("ResponseSigner(..)")
    }
}

impl ResponseSigner {
    /// The signer of an answer that hands over the new token `token` ECDH-encrypted to a
    /// client that sent `version` (v2 or v3; `None` for v4, whose signature needs a request
    /// id the client has not sent): the client checks it with the token it opened.
    pub fn for_new_token(token: &str, version: AuthVersion, method: &str, path: &str) -> Option<Self> {
        (version != AuthVersion::V4).then(|| ResponseSigner {
            key: token.as_bytes().to_vec(),
            version,
            method: method.to_string(),
            path: path.to_string(),
            auth_request_id: String::new(),
        })
    }

    /// The headers that sign a response with `status` and `body`: `timestamp` (Unix ms, now)
    /// and `hmac` for v2 and v3; `X-Request-Timestamp` (Unix s), `X-Content-SHA256`,
    /// `X-Auth-Request-Id` and `X-Signature` for v4.
    pub fn sign(&self, status: u16, body: &[u8]) -> Vec<(&'static str, String)> {
        let (method, path) = (&self.method, &self.path);
        match self.version {
            AuthVersion::V2 | AuthVersion::V3 => {
                let ts = crate::clock::wall_now_ms().to_string();
                let prefix = match self.version {
                    AuthVersion::V3 => format!("{method}|{ts}|{path}|{status}|"),
                    _ => format!("{ts}|{path}|{status}|"),
                };
                vec![("timestamp", ts), ("hmac", hmac_sha256_hex(&self.key, &[prefix.as_bytes(), body]))]
            }
            AuthVersion::V4 => {
                let ts = crate::clock::wall_now().to_string();
                let body_hash = sha256_hex(body);
                let id = &self.auth_request_id;
                let preimage = format!("{ts}\n{method}\n{path}\n{status}\n{body_hash}\n{id}\n");
                let signature = hmac_sha256_hex(&self.key, &[preimage.as_bytes()]);
                vec![
                    ("x-request-timestamp", ts),
                    ("x-content-sha256", body_hash),
                    ("x-auth-request-id", id.clone()),
                    ("x-signature", signature),
                ]
            }
        }
    }
}

/// Signed reads seen by this process, by MAC, until their timestamps leave the window.
#[derive(Debug)]
pub struct ReplayMemory {
    seen: Mutex<HashMap<[u8; 32], i64>>,
    capacity: usize,
}

impl ReplayMemory {
    /// Remembers at most `capacity` reads (`tokens.hmac_read_replay_capacity`).
    pub fn new(capacity: usize) -> Self {
        Self { seen: Mutex::default(), capacity }
    }

    /// Records `mac` until `expires_ms`. `Ok(false)`: seen before. `Err`: full of reads still
    /// in the window.
    fn first_sight(&self, mac: [u8; 32], now_ms: i64, expires_ms: i64) -> Result<bool> {
        let mut seen = self.seen.lock().unwrap_or_else(|e| e.into_inner());
        if seen.get(&mac).is_some_and(|&until| until >= now_ms) {
            return Ok(false);
        }
        if seen.len() >= self.capacity {
            seen.retain(|_, until| *until >= now_ms);
            if seen.len() >= self.capacity {
                return Err(Error::Busy {
                    message: "too many signed reads in the replay window; try again shortly".into(),
                    retry_after_secs: 1,
                });
            }
        }
        seen.insert(mac, expires_ms);
        Ok(true)
    }
}

fn refused(name: ErrorName, message: &str) -> Error {
    Error::Unauthenticated { name, message: message.into() }
}

/// The signature headers of a request, checked for shape.
struct Parsed<'a> {
    version: AuthVersion,
    /// As sent: the subject signs this text.
    ts_text: &'a str,
    ts_ms: i64,
    given: [u8; 32],
    /// Lower case: the token hash (v2, v3) or the token id (v4).
    bearer: String,
    /// v4 only (`X-Auth-Request-Id`, and the body's hash `X-Content-SHA256` was checked
    /// against); empty otherwise.
    auth_request_id: String,
    body_hash: String,
}

fn parse<'a>(req: &SignedRequest<'a>) -> Result<Parsed<'a>> {
    let missing = |what: &str| refused(ErrorName::AuthenticationRequired, what);
    let version = req
        .version
        .and_then(AuthVersion::parse)
        .ok_or_else(|| missing("BitGo-Auth-Version must be 2.0, 3.0 or 4.0 on a signed request"))?;
    let v4 = version == AuthVersion::V4;
    let ts_text = req
        .timestamp
        .filter(|t| !t.is_empty() && t.len() <= 16 && t.bytes().all(|c| c.is_ascii_digit()))
        .ok_or_else(|| {
            missing(if v4 {
                "X-Request-Timestamp must be Unix seconds"
            } else {
                "Auth-Timestamp must be Unix milliseconds"
            })
        })?;
    let ts: i64 = ts_text.parse().map_err(|_| missing("the timestamp must be a number"))?;
    let given: [u8; 32] = req
        .hmac
        .filter(|h| h.len() == 64)
        .and_then(|h| hex::decode(h).ok())
        .and_then(|b| b.try_into().ok())
        .ok_or_else(|| refused(ErrorName::InvalidSignature, "the signature must be 64 hex characters"))?;
    let bearer = req
        .authorization
        .and_then(|h| h.split_once(' '))
        .filter(|(scheme, _)| scheme.eq_ignore_ascii_case("bearer"))
        .map(|(_, v)| v.trim().to_ascii_lowercase())
        .filter(|v| v.len() == if v4 { 32 } else { 64 } && v.bytes().all(|c| c.is_ascii_hexdigit()))
        .ok_or_else(|| {
            missing(if v4 {
                "a v4 request needs Authorization: Bearer <token id>"
            } else {
                "a signed request needs Authorization: Bearer <hex SHA-256 of the token>"
            })
        })?;
    let (auth_request_id, body_hash) = if v4 { v4_request_id(req)? } else { Default::default() };
    let ts_ms = if v4 { ts.saturating_mul(1000) } else { ts };
    Ok(Parsed { version, ts_text, ts_ms, given, bearer, auth_request_id, body_hash })
}

/// v4's `X-Auth-Request-Id` and the body's hash, once `X-Content-SHA256` is found to be it.
fn v4_request_id(req: &SignedRequest<'_>) -> Result<(String, String)> {
    let id = req
        .auth_request_id
        .filter(|id| {
            !id.is_empty()
                && id.len() <= 128
                && id.bytes().all(|c| c.is_ascii_alphanumeric() || matches!(c, b'.' | b'_' | b':' | b'-'))
        })
        .ok_or_else(|| {
            refused(
                ErrorName::AuthenticationRequired,
                "X-Auth-Request-Id must be 1 to 128 characters of A-Z a-z 0-9 . _ : -",
            )
        })?;
    let body_hash = sha256_hex(req.body);
    if !req.content_sha256.is_some_and(|h| h.eq_ignore_ascii_case(&body_hash)) {
        return Err(refused(ErrorName::InvalidSignature, "X-Content-SHA256 is not the SHA-256 of the body"));
    }
    Ok((id.to_string(), body_hash))
}

fn window_back_ms(svc: &Identity) -> i64 {
    i64::try_from(svc.config.tokens.hmac_window_back).unwrap_or(300).saturating_mul(1000)
}

/// Whether `ts_ms` (Unix ms) lies within `tokens.hmac_window_back` before now and
/// `tokens.hmac_window_ahead` after: the window of signed requests and of extension proofs.
pub(super) fn within_window(svc: &Identity, ts_ms: i64) -> bool {
    let now = svc.store.clock().now_ms();
    let ahead = i64::try_from(svc.config.tokens.hmac_window_ahead).unwrap_or(60).saturating_mul(1000);
    ts_ms >= now - window_back_ms(svc) && ts_ms <= now + ahead
}

/// The principal of a signed request, and the signer of its response. Errors (all 401 with
/// `x-auth-required`): `AuthenticationRequired` (a header missing or malformed: version, a
/// timestamp that is not a number, a bearer that is not 64 hex characters), `InvalidSignature`
/// (a MAC that is not 64 hex characters or does not match), `StaleRequest` (timestamp outside
/// `tokens.hmac_window_back` / `_ahead`), `RequestReplayed`, and those of Bearer
/// authentication (`InvalidToken`, `TokenExpired`, `IpNotAllowed`). A token made before
/// tokens were sealed cannot sign: `InvalidToken`.
pub async fn authenticate_signed(
    svc: &Identity,
    req: &SignedRequest<'_>,
    client_ip: IpAddr,
) -> Result<(Principal, ResponseSigner)> {
    let Parsed { version, ts_text, ts_ms, given, bearer, auth_request_id, body_hash } = parse(req)?;
    if !within_window(svc, ts_ms) {
        return Err(refused(
            ErrorName::StaleRequest,
            "the request's timestamp is outside the accepted window",
        ));
    }
    let v4 = version == AuthVersion::V4;
    let unknown = || refused(ErrorName::InvalidToken, "unknown or revoked access token");
    let token = if v4 {
        let id: crate::types::TokenId = bearer.parse().map_err(|_| unknown())?;
        svc.store.token_by_id(&id).await?.map(std::sync::Arc::new)
    } else {
        svc.store.token_by_hash(&bearer).await?
    };
    let token = token.filter(|t| t.revoked_at.is_none()).ok_or_else(unknown)?;
    let sealed = token.sealed_value.as_deref().ok_or_else(|| {
        refused(
            ErrorName::InvalidToken,
            "this token was made before requests could be signed with it: send it as a Bearer token",
        )
    })?;
    let key = svc.key.open(&token_aad(&token.id), sealed)?;
    let (method, path) = (req.method, req.path);
    let (prefix, body): (String, &[u8]) = match version {
        AuthVersion::V2 => (format!("{ts_text}|{path}|"), req.body),
        AuthVersion::V3 => (format!("{method}|{ts_text}|3.0|{path}|"), req.body),
        AuthVersion::V4 => (format!("{ts_text}\n{method}\n{path}\n{body_hash}\n{auth_request_id}\n"), b""),
    };
    if !hmac_sha256_verify(&key, &[prefix.as_bytes(), body], &given) {
        return Err(refused(ErrorName::InvalidSignature, "the request's signature does not match"));
    }
    let expires = ts_ms + window_back_ms(svc);
    // Every MAC is recorded in the database's replay record, which every process checks. A
    // v2 MAC must be: v2 does not sign the method, so a read's would pass as a write's. A v3
    // or v4 read first meets this process's memory, which refuses a replay here without a
    // round trip and bounds what one process holds (`tokens.hmac_read_replay_capacity`).
    // v4 names each request: its `X-Auth-Request-Id` is single-use per token within the window,
    // on every process, so the id on another request is refused as the same request again is
    // (a replay of one signature carries its id). Recorded in place of the MAC.
    let seen: [u8; 32] = if v4 {
        <sha2::Sha256 as sha2::Digest>::digest(format!("v4|{}|{auth_request_id}", token.id.as_str())).into()
    } else {
        given
    };
    let local_first = req.changes_state
        || version == AuthVersion::V2
        || v4
        || svc.replay.first_sight(seen, svc.store.clock().now_ms(), expires)?;
    let first = local_first && svc.store.record_signed_request(&hex::encode(seen), expires).await?;
    if !first {
        let what = if v4 {
            "this X-Auth-Request-Id was already used with this token"
        } else {
            "this signed request was already received"
        };
        return Err(refused(ErrorName::RequestReplayed, what));
    }
    let principal = Principal { signed: true, ..principal_of_token(svc, token, client_ip).await? };
    let signer =
        ResponseSigner { key, version, method: method.to_string(), path: path.to_string(), auth_request_id };
    Ok((principal, signer))
}
