//! Signing in and out (docs/decisions.md#the-operator-console): the API's own login (`identity::login`: password, TOTP,
//! throttles, hashing bounds, audit) with the session token kept in an `HttpOnly` cookie.

use axum::{
    body::Bytes,
    extract::{ConnectInfo, State},
    http::{header, HeaderValue, StatusCode},
    response::{IntoResponse, Redirect, Response},
};
use maud::html;
use serde::Deserialize;
use std::net::SocketAddr;

use super::{html, layout, parse_form, FieldError, Form, COOKIE};
use crate::{
    http::extract::ClientIp,
    identity::{login, passkey_login, sessions},
    AppState,
};

/// The sign-in form's fields.
#[derive(Debug, Default, Deserialize)]
pub struct SignIn {
    #[serde(default)]
    pub email: String,
    #[serde(default)]
    pub password: String,
    #[serde(default)]
    pub otp: String,
    /// Where to go once signed in: a console path (the OAuth consent page sends users here).
    #[serde(default)]
    pub next: String,
}

/// `next`, if it is a path of the console: never another site (no open redirect).
pub(super) fn safe_next(next: &str) -> Option<&str> {
    let ok = next.starts_with("/console/")
        && !next.contains("//")
        && !next.contains('\\')
        && next.chars().all(|c| !c.is_control());
    ok.then_some(next)
}

/// The sign-in page's query.
#[derive(Debug, Default, Deserialize)]
pub struct NextQuery {
    #[serde(default)]
    pub next: String,
}

fn form_page(status: StatusCode, email: &str, error: Option<&FieldError>, next: &str) -> Response {
    let next = safe_next(next).unwrap_or("");
    let body = html! {
        div.login.panel {
            p.muted { "Sign in with your email, password and the current code of your authenticator app." }
            (layout::form_error(error, &["email", "password", "otp", "passkey"]))
            form.stack method="post" action="/console/login" {
                input type="hidden" name="next" value=(next);
                label { "Email" input type="email" name="email" id="email" value=(email) autocomplete="username" required; }
                (layout::field_error(error, "email"))
                label { "Password" input type="password" name="password" id="password" autocomplete="current-password" required; }
                (layout::field_error(error, "password"))
                label { "One-time code" input type="text" name="otp" id="otp" inputmode="numeric" autocomplete="one-time-code" pattern="[0-9]{6}" maxlength="6" required; }
                (layout::field_error(error, "otp"))
                button type="submit" { "Sign in" }
            }
            // console.js asks /api/auth/v1/passkey/challenge (with the email above, if any),
            // has the browser sign it, and posts the answer here.
            form.stack #passkey-signin method="post" action="/console/login/passkey" data-passkey-signin="/api/auth/v1/passkey/challenge" {
                input type="hidden" name="passkey" id="passkey-assertion";
                input type="hidden" name="userId" id="passkey-user";
                input type="hidden" name="next" value=(next);
                button.secondary type="submit" { "Sign in with a passkey" }
            }
            p { a #sso-link href={ "/console/sso" @if !next.is_empty() { "?next=" (next) } } { "Sign in with your identity provider (SSO)" } }
        }
    };
    html(status, layout::page(None, "Sign in", "", body))
}

/// `GET /console/login`, with an optional `next` console path.
pub async fn form(axum::extract::Query(q): axum::extract::Query<NextQuery>) -> Response {
    form_page(StatusCode::OK, "", None, &q.next)
}

/// `POST /console/login`: signs in and sets the session cookie, or shows the form again with
/// the login's error (wrong credentials and wrong codes alike say so without telling which).
pub async fn submit(
    State(state): State<AppState>,
    ClientIp(ip): ClientIp,
    ConnectInfo(peer): ConnectInfo<SocketAddr>,
    body: Bytes,
) -> Response {
    let fields: SignIn = match parse_form(&body) {
        Ok(f) => f,
        Err(e) => return failed(e, "", ""),
    };
    let credentials = login::Credentials {
        email: fields.email.clone(),
        password: fields.password,
        otp: Some(fields.otp),
        ..Default::default()
    };
    match login::login(&state.identity, credentials, ip).await {
        Ok(session) => signed_in(&state, peer, &session, &fields.next),
        Err(e) => failed(e, &fields.email, &fields.next),
    }
}

/// The session cookie set, and on to the overview.
fn signed_in(state: &AppState, peer: SocketAddr, session: &login::Session, next: &str) -> Response {
    let mut res = Redirect::to(safe_next(next).unwrap_or("/console/overview")).into_response();
    set_session_cookie(&mut res, state, peer, session);
    res
}

/// Sets the session cookie of `session` on `res`.
pub(super) fn set_session_cookie(
    res: &mut Response,
    state: &AppState,
    peer: SocketAddr,
    session: &login::Session,
) {
    // Behind a trusted proxy the browser reached us over TLS (docs/decisions.md).
    let secure = state.config.trusted_proxies.iter().any(|p| p.contains(&peer.ip()));
    let cookie = format!(
        "{COOKIE}={}; Path=/console; HttpOnly; SameSite=Strict; Max-Age={}{}",
        session.value,
        session.ttl_secs.max(0),
        if secure { "; Secure" } else { "" }
    );
    if let Ok(v) = HeaderValue::from_str(&cookie) {
        res.headers_mut().append(header::SET_COOKIE, v);
    }
}

/// The passkey sign-in form's fields, filled by console.js.
#[derive(Debug, Default, Deserialize)]
pub struct PasskeySignIn {
    #[serde(default)]
    pub passkey: String,
    #[serde(default, rename = "userId")]
    pub user_id: String,
    #[serde(default)]
    pub next: String,
}

/// `POST /console/login/passkey`: signs in with the passkey assertion console.js made
/// (`identity::passkey_login`), or shows the form again with the error.
pub async fn passkey(
    State(state): State<AppState>,
    ClientIp(ip): ClientIp,
    ConnectInfo(peer): ConnectInfo<SocketAddr>,
    body: Bytes,
) -> Response {
    let fields: PasskeySignIn = match parse_form(&body) {
        Ok(f) => f,
        Err(e) => return failed(e, "", ""),
    };
    if fields.passkey.is_empty() {
        let e = crate::error::Error::invalid_field(
            "passkey",
            "the browser gave no passkey (is WebAuthn available here?)",
        );
        return failed(e, "", &fields.next);
    }
    match passkey_login::login(&state.identity, &fields.passkey, &fields.user_id, ip).await {
        Ok(session) => signed_in(&state, peer, &session, &fields.next),
        Err(e) => failed(e, "", &fields.next),
    }
}

fn failed(e: crate::error::Error, email: &str, next: &str) -> Response {
    let error = FieldError::from_api(&e.into());
    form_page(error.status, email, Some(&error), next)
}

/// `POST /console/logout`: revokes the session's token and clears the cookie.
pub async fn logout(State(state): State<AppState>, form: Form<super::NoFields>) -> Response {
    if let Err(e) = sessions::logout(&state.identity, &form.session.auth).await {
        return super::error_response(e.into(), Some(&form.session));
    }
    let mut res = Redirect::to("/console/login").into_response();
    let clear = format!("{COOKIE}=; Path=/console; HttpOnly; SameSite=Strict; Max-Age=0");
    if let Ok(v) = HeaderValue::from_str(&clear) {
        res.headers_mut().insert(header::SET_COOKIE, v);
    }
    res
}
