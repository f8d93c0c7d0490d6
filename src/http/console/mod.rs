//! The operator console (docs/decisions.md#the-operator-console): server-rendered HTML pages at `/console`, with their CSS and
//! one small script embedded in the binary, no third-party origin. Every page reads and acts
//! through the same domain functions as the API, as the signed-in user.
//!
//! - **Session.** Signing in is the API's login (password, TOTP, throttles, audit); the session
//!   token lives in the `custodian_console` cookie (`HttpOnly`, `SameSite=Strict`, `Path=/console`,
//!   `Secure` when the peer is a trusted proxy, i.e. behind TLS termination) for the session's
//!   lifetime. Signing out revokes the token.
//! - **CSRF.** Every form that changes something carries `csrf`, HMAC-SHA256 of a fixed label
//!   keyed with the session token (so it needs no storage and dies with the session), compared
//!   in constant time; a POST whose `Origin` is not this host, or whose `Sec-Fetch-Site` is
//!   `cross-site` or `same-site`, is refused before that.
//! - **Headers.** A strict `Content-Security-Policy` (scripts and styles only from this
//!   origin), `X-Frame-Options: DENY`, `Referrer-Policy: same-origin` (with `no-referrer` browsers send `Origin: null` on form posts), `nosniff`, and
//!   `Cache-Control: no-store` on pages.
//! - **Errors.** A domain error is shown as its §7 `name` and message, beside the field it
//!   names, with the API's status code; nothing a client sends gives a 5xx page.

use axum::{
    body::Bytes,
    extract::{FromRequest, FromRequestParts, Request},
    http::{header, request::Parts, HeaderMap, HeaderValue, Method, StatusCode},
    middleware::{self, Next},
    response::{IntoResponse, Redirect, Response},
    routing::{get, post},
    Router,
};
use maud::Markup;
use serde::de::DeserializeOwned;
use serde::Deserialize;

use super::{error::ApiError, extract::ClientIp};
use crate::{error::Error, identity::bearer::Principal, AppState};

mod admin;
mod applications;
mod assets;
mod audit;
mod chains;
mod chart;
pub(super) mod layout;
mod notifications;
mod oauth;
mod overview;
mod policy;
mod security;
mod signin;
mod sso;
mod sso_setting;
mod tokens;
mod wallets;
mod webhooks;
mod withdrawals;

/// The session cookie's name.
pub const COOKIE: &str = "custodian_console";
/// Largest form body the console reads, bytes.
pub const MAX_FORM_BYTES: usize = 64 * 1024;
/// What the CSP allows: this origin's script and style, inline SVG, requests to this origin
/// (the passkey ceremonies' options), nothing framed or posted elsewhere.
pub const CSP: &str =
    "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; connect-src 'self'; \
    form-action 'self'; frame-ancestors 'none'; base-uri 'none'";

/// The console's routes, under `/console`.
pub fn router() -> Router<AppState> {
    Router::new()
        .route("/console", get(|| async { Redirect::to("/console/overview") }))
        .route("/console/", get(|| async { Redirect::to("/console/overview") }))
        .route("/console/assets/{name}", get(assets::serve))
        .route("/console/login", get(signin::form).post(signin::submit))
        .route("/console/login/passkey", post(signin::passkey))
        .route("/console/sso", get(sso::form).post(sso::start))
        .route("/console/sso/callback", get(sso::callback))
        .route("/console/sso/link", post(sso::link))
        .route("/console/enterprises/{id}/sso", get(sso_setting::page).post(sso_setting::save))
        .route("/console/enterprises/{id}/sso/remove", post(sso_setting::remove))
        .route("/console/oauth/authorize", get(oauth::page).post(oauth::decide))
        .route("/console/security", get(security::page))
        .route("/console/security/passkeys", post(security::add))
        .route("/console/security/passkeys/options", post(security::register_options))
        .route("/console/security/passkeys/assert", post(security::assertion_options))
        .route("/console/security/passkeys/{id}/remove", post(security::remove))
        .route("/console/security/applications/{id}/revoke", post(security::revoke_application))
        .route("/console/logout", post(signin::logout))
        .route("/console/overview", get(overview::page))
        .route("/console/webhooks", get(webhooks::list))
        .route("/console/webhooks/{id}", get(webhooks::detail))
        .route("/console/webhooks/{id}/test", post(webhooks::send_test))
        .route("/console/webhooks/{id}/unblock", post(webhooks::unblock))
        .route("/console/webhooks/{id}/remove", post(webhooks::remove))
        .route("/console/webhooks/{id}/secret", post(webhooks::rotate_secret))
        .route(
            "/console/webhooks/{id}/recover",
            get(notifications::recover_confirm).post(notifications::recover),
        )
        .route("/console/webhooks/{id}/notifications/{nid}", get(notifications::detail))
        .route("/console/webhooks/{id}/notifications/{nid}/resend", post(notifications::resend))
        .route("/console/notifications", get(notifications::search))
        .route("/console/tokens", get(tokens::page).post(tokens::create))
        .route("/console/tokens/{id}/revoke", post(tokens::revoke))
        .route("/console/audit", get(audit::page))
        .route("/console/audit/verify", post(audit::verify))
        .route("/console/admin/users", get(admin::users))
        .route("/console/admin/users/{action}", post(admin::user_action))
        .route("/console/admin/enterprises", get(admin::enterprises))
        .route("/console/admin/applications", get(applications::page).post(applications::create))
        .route("/console/admin/applications/{id}/{action}", post(applications::action))
        .route("/console/chains", get(chains::page))
        .route("/console/wallets/{id}", get(wallets::page))
        .route("/console/wallets/{id}/withdraw", post(withdrawals::withdraw))
        .route("/console/wallets/{id}/policy", get(policy::page))
        .route("/console/wallets/{id}/policy/evaluate", post(policy::evaluate))
        .route("/console/approvals", get(withdrawals::page))
        .route("/console/approvals/{id}/approve", post(withdrawals::approve))
        .route("/console/approvals/{id}/reject", post(withdrawals::reject))
        .route("/console/withdrawals/{id}", get(withdrawals::timeline))
        .layer(middleware::from_fn(guard))
}

/// Refuses cross-origin writes and sets the security headers on every console response.
async fn guard(req: Request, next: Next) -> Response {
    let write = !matches!(*req.method(), Method::GET | Method::HEAD);
    let is_asset = req.uri().path().starts_with("/console/assets/");
    let mut res = if write && !same_origin(req.headers()) {
        page_error(
            StatusCode::FORBIDDEN,
            "CrossOriginRequest",
            "this form was sent from another site; open the console and try again",
            None,
        )
    } else {
        next.run(req).await
    };
    // The OAuth consent page's form leads to the client's redirect URI (CSP form-action
    // applies to a form's redirects too).
    let csp = match res.extensions().get::<FormTarget>() {
        Some(FormTarget(origin)) => {
            HeaderValue::from_str(&CSP.replace("form-action 'self'", &format!("form-action 'self' {origin}")))
                .unwrap_or(HeaderValue::from_static(CSP))
        }
        None => HeaderValue::from_static(CSP),
    };
    let h = res.headers_mut();
    h.insert(header::CONTENT_SECURITY_POLICY, csp);
    h.insert(header::X_FRAME_OPTIONS, HeaderValue::from_static("DENY"));
    h.insert(header::REFERRER_POLICY, HeaderValue::from_static("same-origin"));
    h.insert(header::X_CONTENT_TYPE_OPTIONS, HeaderValue::from_static("nosniff"));
    if !is_asset {
        h.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    }
    res
}

/// Whether a write comes from this console: `Sec-Fetch-Site`, when sent, is `same-origin` or
/// `none`; `Origin`, when sent, names the `Host` the request was sent to.
fn same_origin(headers: &HeaderMap) -> bool {
    let text = |name| headers.get(name).and_then(|v: &HeaderValue| v.to_str().ok());
    if let Some(site) = text(header::HeaderName::from_static("sec-fetch-site")) {
        if !matches!(site, "same-origin" | "none") {
            return false;
        }
    }
    match (text(header::ORIGIN), text(header::HOST)) {
        (None, _) => true,
        (Some(origin), Some(host)) => {
            origin.strip_prefix("http://").or_else(|| origin.strip_prefix("https://")) == Some(host)
        }
        (Some(_), None) => false,
    }
}

/// An origin (`scheme://host[:port]`) a page's form may lead to besides this one: the OAuth
/// client's redirect URI on the consent page.
#[derive(Debug, Clone)]
pub struct FormTarget(pub String);

/// The signed-in user of a console request, with the CSRF token its forms carry.
pub struct Session {
    pub auth: Principal,
    pub csrf: String,
}

impl Session {
    /// Whether the session's token carries the service-admin permission (§7 pages).
    pub fn is_service_admin(&self) -> bool {
        self.auth.token.admin
    }
}

/// The CSRF token of the session whose token is `value`.
fn csrf_of(value: &str) -> String {
    crate::digest::hmac_sha256_hex(value.as_bytes(), &[b"custodian console csrf"])
}

/// The session token in the request's cookie, if any.
fn cookie_value(headers: &HeaderMap) -> Option<String> {
    headers
        .get_all(header::COOKIE)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(';'))
        .filter_map(|pair| pair.trim().split_once('='))
        .find(|(name, _)| *name == COOKIE)
        .map(|(_, value)| value.to_string())
}

/// What a console request without a valid session gets: a GET is sent to the sign-in page,
/// anything else refused.
pub enum NoSession {
    SignIn,
    Refused(Response),
}

impl IntoResponse for NoSession {
    fn into_response(self) -> Response {
        match self {
            NoSession::SignIn => Redirect::to("/console/login").into_response(),
            NoSession::Refused(r) => r,
        }
    }
}

impl FromRequestParts<AppState> for Session {
    type Rejection = NoSession;

    async fn from_request_parts(parts: &mut Parts, state: &AppState) -> Result<Self, NoSession> {
        let value = cookie_value(&parts.headers).ok_or(NoSession::SignIn)?;
        let ClientIp(ip) = ClientIp::from_request_parts(parts, state)
            .await
            .map_err(|e| NoSession::Refused(error_response(e, None)))?;
        let bearer = format!("Bearer {value}");
        let mut auth = match crate::identity::bearer::authenticate(&state.identity, Some(&bearer), ip).await {
            Ok(p) => p,
            Err(Error::Unauthenticated { .. }) => return Err(NoSession::SignIn),
            Err(e) => return Err(NoSession::Refused(error_response(e.into(), None))),
        };
        super::auth::admit(parts, state, &mut auth)
            .await
            .map_err(|e| NoSession::Refused(error_response(e, None)))?;
        Ok(Session { auth, csrf: csrf_of(&value) })
    }
}

/// A form that changes something: the session, the CSRF token checked, and the fields `T`
/// (URL-encoded, at most [`MAX_FORM_BYTES`]).
pub struct Form<T> {
    pub session: Session,
    pub fields: T,
}

#[derive(Deserialize)]
struct CsrfField {
    #[serde(default)]
    csrf: String,
}

impl<T: DeserializeOwned> FromRequest<AppState> for Form<T> {
    type Rejection = Response;

    async fn from_request(req: Request, state: &AppState) -> Result<Self, Response> {
        let (mut parts, body) = req.into_parts();
        let session =
            Session::from_request_parts(&mut parts, state).await.map_err(IntoResponse::into_response)?;
        let bytes = axum::body::to_bytes(body, MAX_FORM_BYTES).await.map_err(|_| {
            page_error(
                StatusCode::PAYLOAD_TOO_LARGE,
                "PayloadTooLarge",
                "the form is too large",
                Some(&session),
            )
        })?;
        let given: CsrfField =
            serde_urlencoded::from_bytes(&bytes).unwrap_or(CsrfField { csrf: String::new() });
        let matches: bool =
            subtle::ConstantTimeEq::ct_eq(given.csrf.as_bytes(), session.csrf.as_bytes()).into();
        if !matches {
            return Err(page_error(
                StatusCode::FORBIDDEN,
                "InvalidCsrfToken",
                "the form's CSRF token is missing or stale; reload the page and try again",
                Some(&session),
            ));
        }
        let fields = parse_form::<T>(&bytes).map_err(|e| error_response(e.into(), Some(&session)))?;
        Ok(Form { session, fields })
    }
}

/// Parses URL-encoded `bytes` into `T`; a bad value is `InvalidField`.
pub fn parse_form<T: DeserializeOwned>(bytes: &Bytes) -> Result<T, Error> {
    serde_urlencoded::from_bytes(bytes).map_err(|e| Error::invalid_field("", e.to_string()))
}

/// An HTML page with `status`.
pub fn html(status: StatusCode, markup: Markup) -> Response {
    let mut res =
        (status, [(header::CONTENT_TYPE, "text/html; charset=utf-8")], markup.into_string()).into_response();
    res.extensions_mut().insert(crate::http::request_id::HtmlBody);
    res
}

/// An error page with the §7 `name` and message.
pub fn page_error(status: StatusCode, name: &str, message: &str, session: Option<&Session>) -> Response {
    html(status, layout::error_page(session, status, name, message))
}

/// The error page of `e`: its status, `name` and message. A 5xx says only that it failed.
pub fn error_response(e: ApiError, session: Option<&Session>) -> Response {
    let e = FieldError::from_api(&e);
    page_error(e.status, &e.name, &e.message, session)
}

/// A domain error as a form shows it: the field it names (if any) and its message.
#[derive(Debug, Clone, Default)]
pub struct FieldError {
    pub field: String,
    pub name: String,
    pub message: String,
    /// What the page showing it answers with.
    pub status: StatusCode,
}

impl FieldError {
    /// The field error of any API error.
    pub fn from_api(e: &ApiError) -> FieldError {
        let body = e.body();
        let text = |k: &str| body.0.get(k).and_then(|v| v.as_str()).unwrap_or_default().to_string();
        let field =
            body.0.get("context").and_then(|c| c.get("field")).and_then(|f| f.as_str()).unwrap_or_default();
        FieldError {
            field: field.to_string(),
            name: text("name"),
            message: text("error"),
            status: e.status(),
        }
    }

    /// The field error of `e`, or `e` itself when it is not about what the form sent (no such
    /// resource, or the server's own failure): those get an error page instead.
    pub fn of(e: Error) -> Result<FieldError, ApiError> {
        let e = ApiError::from(e);
        if e.status() == StatusCode::NOT_FOUND || e.status().is_server_error() {
            return Err(e);
        }
        Ok(Self::from_api(&e))
    }
}

/// A list page's rows, the next page's cursor, and the error of a bad filter.
pub type Listed<T> = (Vec<T>, Option<String>, Option<FieldError>);

/// What a list page shows of its query's result: the rows and the next page's cursor, or, for a
/// bad filter, no rows and the error to show beside its field. Other errors are returned for
/// an error page.
pub fn listed<T>(found: Result<crate::paging::Page<T>, Error>) -> Result<Listed<T>, ApiError> {
    match found {
        Ok(p) => Ok((p.items, p.next_batch_prev_id, None)),
        Err(e) => FieldError::of(e).map(|fe| (Vec::new(), None, Some(fe))),
    }
}

/// The fields of a form that sends only its CSRF token.
#[derive(Debug, Deserialize)]
pub struct NoFields {}

/// Parses an optional form or query value into `T`: blank is `None`, a bad value is
/// `InvalidField` naming `field`.
pub fn opt<T: std::str::FromStr>(field: &str, v: Option<&str>) -> Result<Option<T>, Error> {
    match v.map(str::trim).filter(|v| !v.is_empty()) {
        None => Ok(None),
        Some(v) => v
            .parse()
            .map(Some)
            .map_err(|_| Error::invalid_field(field, format!("{v:?} is not a valid {field}"))),
    }
}

/// A `datetime-local` value (`2026-11-23T10:30`, seconds optional) or an RFC 3339 date-time,
/// read as UTC, in Unix milliseconds. Errors: `InvalidField` naming `field`.
pub fn datetime_ms(field: &str, v: &str) -> Result<i64, Error> {
    let v = v.trim();
    if let Ok(d) = chrono::DateTime::parse_from_rfc3339(v) {
        return Ok(d.timestamp_millis());
    }
    ["%Y-%m-%dT%H:%M", "%Y-%m-%dT%H:%M:%S"]
        .iter()
        .find_map(|f| chrono::NaiveDateTime::parse_from_str(v, f).ok())
        .map(|d| d.and_utc().timestamp_millis())
        .ok_or_else(|| Error::invalid_field(field, "a date and time such as 2026-11-23T10:30 (UTC)"))
}

/// Unix milliseconds as a `datetime-local` value (UTC, minutes).
pub fn datetime_local(ms: i64) -> String {
    chrono::DateTime::from_timestamp_millis(ms)
        .map(|d| d.format("%Y-%m-%dT%H:%M").to_string())
        .unwrap_or_default()
}
