//! Signed requests at the edge (docs/decisions.md#signed-requests): a request carrying BitGo's HMAC headers has its
//! body read (within the body limit) and its signature checked by
//! [`crate::identity::hmac_auth::authenticate_signed`] before any handler runs; the principal is
//! handed to the [`super::auth::Auth`] extractor, and the final response (error bodies
//! included) is signed with the same token.

use axum::{
    body::{to_bytes, Body},
    extract::{FromRequestParts, Request},
    http::{request::Parts, HeaderName, HeaderValue, Method},
    response::{IntoResponse, Response},
};

use super::{error::ApiError, extract::ClientIp, MAX_BODY_BYTES};
use crate::{
    identity::{
        bearer::Principal,
        hmac_auth::{authenticate_signed, AuthVersion, ResponseSigner, SignedRequest},
    },
    AppState,
};

static HMAC: HeaderName = HeaderName::from_static("hmac");
static AUTH_TIMESTAMP: HeaderName = HeaderName::from_static("auth-timestamp");
static AUTH_VERSION: HeaderName = HeaderName::from_static("bitgo-auth-version");
static V4_SIGNATURE: HeaderName = HeaderName::from_static("x-signature");
static V4_TIMESTAMP: HeaderName = HeaderName::from_static("x-request-timestamp");
static V4_CONTENT: HeaderName = HeaderName::from_static("x-content-sha256");
static V4_REQUEST_ID: HeaderName = HeaderName::from_static("x-auth-request-id");

/// The caller of a verified signed request, for [`super::auth::Auth`].
#[derive(Clone)]
pub struct Verified(pub Principal);

/// How a client can take a new token: `version` is its `BitGo-Auth-Version` (BitGoJS sends it on
/// every request, signed or not), which says it can open an ECDH-encrypted token
/// (`identity::issuance`) and check an answer signed with that token.
#[derive(Debug, Clone)]
pub struct Handover {
    pub version: Option<AuthVersion>,
    method: String,
    path: String,
}

impl Handover {
    /// The signer of the answer that hands `token` over to this client.
    pub fn signer(&self, token: &str) -> Option<ResponseSigner> {
        ResponseSigner::for_new_token(token, self.version?, &self.method, &self.path)
    }
}

impl<S: Send + Sync> FromRequestParts<S> for Handover {
    type Rejection = std::convert::Infallible;

    async fn from_request_parts(parts: &mut Parts, _: &S) -> Result<Self, Self::Rejection> {
        let version =
            parts.headers.get(&AUTH_VERSION).and_then(|v| v.to_str().ok()).and_then(AuthVersion::parse);
        let path = parts.uri.path_and_query().map_or("/", |p| p.as_str()).to_string();
        Ok(Handover { version, method: parts.method.as_str().to_string(), path })
    }
}

/// Whether `req` claims to be signed: it carries an `HMAC` (v2, v3) or `X-Signature` (v4)
/// header. (BitGoJS sends `BitGo-Auth-Version` on every request, signed or not.)
pub fn is_signed(req: &Request) -> bool {
    req.headers().contains_key(&HMAC) || req.headers().contains_key(&V4_SIGNATURE)
}

/// Checks a signed request: on success the request (body restored) carries [`Verified`], with
/// the signer of its response; otherwise the error response (401, or 413 for a body over the
/// limit).
pub async fn verify(state: &AppState, req: Request) -> Result<(Request, ResponseSigner), Response> {
    let (mut parts, body) = req.into_parts();
    let body = to_bytes(body, MAX_BODY_BYTES).await.map_err(|_| ApiError::PayloadTooLarge.into_response())?;
    let ClientIp(ip) =
        ClientIp::from_request_parts(&mut parts, state).await.map_err(IntoResponse::into_response)?;
    let text = |name: &HeaderName| parts.headers.get(name).and_then(|v| v.to_str().ok());
    let v4 = parts.headers.contains_key(&V4_SIGNATURE);
    let signed = SignedRequest {
        version: if v4 { Some("4.0") } else { text(&AUTH_VERSION) },
        timestamp: text(if v4 { &V4_TIMESTAMP } else { &AUTH_TIMESTAMP }),
        hmac: text(if v4 { &V4_SIGNATURE } else { &HMAC }),
        content_sha256: text(&V4_CONTENT),
        auth_request_id: text(&V4_REQUEST_ID),
        authorization: text(&axum::http::header::AUTHORIZATION),
        method: parts.method.as_str(),
        path: parts.uri.path_and_query().map_or("/", |p| p.as_str()),
        body: &body,
        changes_state: !matches!(parts.method, Method::GET | Method::HEAD | Method::OPTIONS),
    };
    match authenticate_signed(&state.identity, &signed, ip).await {
        Ok((principal, signer)) => {
            parts.extensions.insert(Verified(principal));
            Ok((Request::from_parts(parts, Body::from(body)), signer))
        }
        Err(e) => Err(ApiError::from(e).into_response()),
    }
}

/// Adds the signature headers over the final status and body ([`ResponseSigner::sign`]).
pub async fn sign(res: Response, signer: &ResponseSigner) -> Response {
    let (mut parts, body) = res.into_parts();
    // Our own responses: complete and bounded by what the handlers build.
    let body = to_bytes(body, usize::MAX).await.unwrap_or_default();
    for (name, value) in signer.sign(parts.status.as_u16(), &body) {
        if let Ok(v) = HeaderValue::from_str(&value) {
            parts.headers.insert(HeaderName::from_static(name), v);
        }
    }
    Response::from_parts(parts, Body::from(body))
}
