//! The `Auth` extractor: reads `Authorization` and the client address, and asks
//! [`crate::identity::auth::authenticate`] for the caller's [`Principal`].

use axum::{
    extract::FromRequestParts,
    http::{header::AUTHORIZATION, request::Parts},
};

use super::{error::ApiError, extract::ClientIp};
use crate::{identity::auth::Principal, AppState};

/// An authenticated caller (spec §5); a failure is 401 with `x-auth-required: true`.
pub struct Auth(pub Principal);

impl FromRequestParts<AppState> for Auth {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &AppState) -> Result<Self, ApiError> {
        let ClientIp(ip) = ClientIp::from_request_parts(parts, state).await?;
        let header = parts.headers.get(AUTHORIZATION).and_then(|v| v.to_str().ok());
        Ok(Auth(crate::identity::auth::authenticate(state, header, ip).await?))
    }
}
