//! The `Auth` extractor: reads `Authorization` and the client address, asks
//! [`crate::identity::bearer::authenticate`] for the caller's [`Principal`], and counts the
//! request against its user's rate limit ([`crate::identity::rate_limit`]); the edge
//! middleware ([`super::edge`]) then reports where the user stands in `RateLimit-*` headers.

use std::sync::{Arc, Mutex};

use axum::{
    extract::FromRequestParts,
    http::{header::AUTHORIZATION, request::Parts, HeaderName, HeaderValue, Method},
    response::Response,
};

use super::{error::ApiError, extract::ClientIp};
use crate::{identity::bearer::Principal, token_bucket::RateState, AppState};

/// An authenticated caller (spec §5); a failure is 401 with `x-auth-required: true`, a user
/// over its rate limit 429 `TooManyRequests`.
pub struct Auth(pub Principal);

/// Where the caller's rate limit stands, filled by [`Auth`] for [`add_rate_limit_headers`].
#[derive(Clone, Default)]
pub struct RateSlot(Arc<Mutex<Option<RateState>>>);

impl FromRequestParts<AppState> for Auth {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &AppState) -> Result<Self, ApiError> {
        let mut principal = match parts.extensions.remove::<super::hmac_edge::Verified>() {
            Some(super::hmac_edge::Verified(principal)) => principal,
            None => {
                let ClientIp(ip) = ClientIp::from_request_parts(parts, state).await?;
                let header = parts.headers.get(AUTHORIZATION).and_then(|v| v.to_str().ok());
                crate::identity::bearer::authenticate(&state.identity, header, ip).await?
            }
        };
        admit(parts, state, &mut principal).await?;
        Ok(Auth(principal))
    }
}

/// What every authenticated request goes through once its principal is known, whatever carried
/// the token (a bearer header, a signature, the console's cookie): the request id for the audit
/// log, and the user's rate limit, whose standing the edge reports in `RateLimit-*` headers.
pub async fn admit(parts: &Parts, state: &AppState, principal: &mut Principal) -> Result<(), ApiError> {
    principal.request_id =
        parts.headers.get(&super::request_id::REQUEST_ID).and_then(|v| v.to_str().ok()).map(str::to_string);
    let writes = !matches!(parts.method, Method::GET | Method::HEAD | Method::OPTIONS);
    let checked = state.rate_limit.check(&principal.user.id, principal.token.admin, writes).await;
    let (rate, result) = match checked {
        Ok(rate) => (rate, Ok(())),
        Err((error, rate)) => (rate, Err(error.into())),
    };
    if let (Some(slot), Some(rate)) = (parts.extensions.get::<RateSlot>(), rate) {
        if let Ok(mut s) = slot.0.lock() {
            *s = Some(rate);
        }
    }
    result
}

/// Adds `RateLimit-Limit`, `RateLimit-Remaining` and `RateLimit-Reset` (seconds) to the
/// response of an authenticated request, from the `slot` [`Auth`] filled (docs/decisions.md#webhook-abuse-and-the-api-rate-limit; the IETF
/// RateLimit header fields). Unauthenticated requests leave it empty: no headers.
pub fn add_rate_limit_headers(res: &mut Response, slot: &RateSlot) {
    let rate = slot.0.lock().ok().and_then(|s| *s);
    if let Some(rate) = rate {
        let h = res.headers_mut();
        for (name, value) in [
            ("ratelimit-limit", u64::from(rate.limit)),
            ("ratelimit-remaining", u64::from(rate.remaining)),
            ("ratelimit-reset", rate.reset_secs),
        ] {
            h.insert(HeaderName::from_static(name), HeaderValue::from(value));
        }
    }
}
