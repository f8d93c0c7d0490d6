//! HMAC request authentication and response signing: BitGo's auth versions 2 and 3, as the
//! official SDK (`@bitgo/sdk-hmac`) speaks them (issue 20 §1). The client sends
//! `Authorization: Bearer <hex SHA-256 of its token>`, `Auth-Timestamp` (Unix ms), `HMAC` (hex
//! HMAC-SHA256 keyed with the token itself) and `BitGo-Auth-Version` (`2.0` or `3.0`). The
//! subjects, where `path` is the request's path with `?query` when it has one:
//!
//! - request, v2: `{ts}|{path}|{body}`; v3: `{METHOD}|{ts}|3.0|{path}|{body}`;
//! - response, v2: `{ts}|{path}|{status}|{body}`; v3: `{METHOD}|{ts}|{path}|{status}|{body}`,
//!   sent as the `hmac` and `timestamp` headers.
//!
//! Beyond BitGo: a timestamp outside the window is refused, and so is a request seen before
//! (the replay guard): for requests that change state in the database, so on every process
//! sharing it; for reads, in the memory of the process that saw it. Every comparison of a MAC
//! is constant-time (`hmac`'s `verify_slice`).

use std::{collections::HashMap, net::IpAddr, sync::Mutex};

use hmac::{Hmac, Mac};
use sha2::Sha256;

use super::{
    auth::{principal_of_token, token_aad, Principal},
    Identity,
};
use crate::{
    error::{Error, ErrorName, Result},
    ids,
};

/// BitGo's auth version of a signed request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AuthVersion {
    V2,
    V3,
}

impl AuthVersion {
    /// `2.0` or `3.0` (also `2` and `3`), as in `BitGo-Auth-Version`.
    pub fn parse(s: &str) -> Option<Self> {
        match s.trim() {
            "2" | "2.0" => Some(AuthVersion::V2),
            "3" | "3.0" => Some(AuthVersion::V3),
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
}

/// Signs the response to a verified request with the request's token.
pub struct ResponseSigner {
    key: Vec<u8>,
    version: AuthVersion,
    method: String,
    path: String,
}

impl std::fmt::Debug for ResponseSigner {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("ResponseSigner(..)")
    }
}

impl ResponseSigner {
    /// The `timestamp` (Unix ms, now) and `hmac` (hex) headers of a response with `status` and
    /// `body`.
    pub fn sign(&self, status: u16, body: &[u8]) -> (String, String) {
        let ts = ids::now_ms().to_string();
        let prefix = match self.version {
            AuthVersion::V2 => format!("{ts}|{}|{status}|", self.path),
            AuthVersion::V3 => format!("{}|{ts}|{}|{status}|", self.method, self.path),
        };
        (ts, hex::encode(mac(&self.key, &prefix, body).finalize().into_bytes()))
    }
}

fn mac(key: &[u8], prefix: &str, body: &[u8]) -> Hmac<Sha256> {
    // HMAC takes a key of any length.
    let mut m = <Hmac<Sha256> as Mac>::new_from_slice(key).unwrap_or_else(|_| unreachable!());
    m.update(prefix.as_bytes());
    m.update(body);
    m
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
    let missing = |what: &str| refused(ErrorName::AuthenticationRequired, what);
    let version = req
        .version
        .and_then(AuthVersion::parse)
        .ok_or_else(|| missing("BitGo-Auth-Version must be 2.0 or 3.0 on a signed request"))?;
    let ts_text = req
        .timestamp
        .filter(|t| !t.is_empty() && t.len() <= 16 && t.bytes().all(|c| c.is_ascii_digit()))
        .ok_or_else(|| missing("Auth-Timestamp must be Unix milliseconds"))?;
    let ts: i64 = ts_text.parse().map_err(|_| missing("Auth-Timestamp must be Unix milliseconds"))?;
    let given: [u8; 32] = req
        .hmac
        .filter(|h| h.len() == 64)
        .and_then(|h| hex::decode(h).ok())
        .and_then(|b| b.try_into().ok())
        .ok_or_else(|| refused(ErrorName::InvalidSignature, "HMAC must be 64 hex characters"))?;
    let token_hash = req
        .authorization
        .and_then(|h| h.split_once(' '))
        .filter(|(scheme, _)| scheme.eq_ignore_ascii_case("bearer"))
        .map(|(_, v)| v.trim().to_ascii_lowercase())
        .filter(|v| v.len() == 64 && v.bytes().all(|c| c.is_ascii_hexdigit()))
        .ok_or_else(|| missing("a signed request needs Authorization: Bearer <hex SHA-256 of the token>"))?;
    let cfg = &svc.config.tokens;
    let now = ids::now_ms();
    let back = i64::try_from(cfg.hmac_window_back).unwrap_or(300).saturating_mul(1000);
    let ahead = i64::try_from(cfg.hmac_window_ahead).unwrap_or(60).saturating_mul(1000);
    if ts < now - back || ts > now + ahead {
        return Err(refused(ErrorName::StaleRequest, "Auth-Timestamp is outside the accepted window"));
    }
    let unknown = || refused(ErrorName::InvalidToken, "unknown or revoked access token");
    let token =
        svc.store.token_by_hash(&token_hash).await?.filter(|t| t.revoked_at.is_none()).ok_or_else(unknown)?;
    let sealed = token.sealed_value.as_deref().ok_or_else(|| {
        refused(
            ErrorName::InvalidToken,
            "this token was made before requests could be signed with it: send it as a Bearer token",
        )
    })?;
    let key = svc.key.open(&token_aad(&token.id), sealed)?;
    let prefix = match version {
        AuthVersion::V2 => format!("{ts_text}|{}|", req.path),
        AuthVersion::V3 => format!("{}|{ts_text}|3.0|{}|", req.method, req.path),
    };
    mac(&key, &prefix, req.body)
        .verify_slice(&given)
        .map_err(|_| refused(ErrorName::InvalidSignature, "the request's HMAC does not match"))?;
    let expires = ts + back;
    let first = if req.changes_state {
        svc.store.record_signed_request(&hex::encode(given), now, expires).await?
    } else {
        svc.replay.first_sight(given, now, expires)?
    };
    if !first {
        return Err(refused(ErrorName::RequestReplayed, "this signed request was already received"));
    }
    let principal = principal_of_token(svc, token, client_ip).await?;
    let signer = ResponseSigner { key, version, method: req.method.to_string(), path: req.path.to_string() };
    Ok((principal, signer))
}
