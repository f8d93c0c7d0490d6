//! Signing in through an enterprise's identity provider (docs/sso.md#in-the-console): a form
//! that takes an email or an enterprise id, a page that sends the browser to the provider, and
//! the callback that finishes the sign-in (`identity::sso`). Both hops are pages that move on
//! by themselves rather than redirects: the console's CSP (`form-action 'self'`) would stop a
//! form redirected to another site, and a `SameSite=Strict` session cookie set on the
//! provider's redirect would not be sent on the next request of that same chain.

use axum::{
    body::Bytes,
    extract::{ConnectInfo, Query, State},
    http::{header, HeaderMap, HeaderValue, StatusCode},
    response::Response,
};
use maud::html;
use serde::Deserialize;
use std::net::SocketAddr;

use super::{html, layout, parse_form, signin, FieldError, Form};
use crate::{http::extract::ClientIp, identity::sso, AppState};

/// The cookie binding a sign-in's return to the browser that started it.
const BROWSER_COOKIE: &str = "custodian_sso";

/// The form's fields.
#[derive(Debug, Default, Deserialize)]
pub struct Start {
    /// An email, or an enterprise id.
    #[serde(default)]
    pub who: String,
    #[serde(default)]
    pub next: String,
}

/// The callback URL providers send the browser back to, under this service's address.
pub(super) fn redirect_uri(state: &AppState, headers: &HeaderMap) -> String {
    format!("{}/console/sso/callback", crate::http::oauth::issuer(state, headers))
}

fn form_page(status: StatusCode, who: &str, error: Option<&FieldError>, next: &str) -> Response {
    let next = signin::safe_next(next).unwrap_or("");
    let body = html! {
        div.login.panel #sso {
            p.muted { "Sign in with your company's identity provider. Give your email, or your enterprise's id." }
            (layout::form_error(error, &["who", "email"]))
            form.stack method="post" action="/console/sso" {
                input type="hidden" name="next" value=(next);
                label { "Email or enterprise id" input type="text" name="who" id="who" value=(who) autocomplete="username" required; }
                (layout::field_error(error, "who"))
                button type="submit" { "Continue to your identity provider" }
            }
            p { a href="/console/login" { "Sign in with a password or passkey instead" } }
        }
    };
    html(status, layout::page(None, "Sign in with SSO", "", body))
}

/// `GET /console/sso`.
pub async fn form(Query(q): Query<signin::NextQuery>) -> Response {
    form_page(StatusCode::OK, "", None, &q.next)
}

/// A page that moves on to `to` at once (and offers a link, should it not).
fn onward(status: StatusCode, title: &str, to: &str) -> Response {
    let body = html! {
        (maud::PreEscaped(format!(r#"<meta http-equiv="refresh" content="0;url={}">"#, maud::html! { (to) }.into_string())))
        div.login.panel #onward {
            p { a #onward-link href=(to) { "Continue" } }
        }
    };
    html(status, layout::page(None, title, "", body))
}

/// The page after the first sign-in of an account provisioning just made: its TOTP seed, shown
/// this once, then on to `to`. It does not move on by itself: the person must add the key first.
fn new_account(to: &str, made: &crate::identity::users::CreatedUser) -> Response {
    let once = layout::OneTime {
        id: "totp-secret",
        lead: "Your account was made by your enterprise's identity provider.".into(),
        warning: "Add this key to your authenticator app now: it is not shown again, and its codes are needed to make access tokens or add a passkey.",
        value: made.totp_secret.clone(),
        note: Some(made.otpauth_uri.clone()),
    };
    let body = html! {
        (layout::shown(&layout::Shown::OneTime(once)))
        div.panel #onward {
            p { a #onward-link href=(to) { "Continue to the console" } }
        }
    };
    html(StatusCode::OK, layout::page(None, "Account made", "", body))
}

/// `POST /console/sso`: finds the provider and sends the browser there, with the cookie that
/// ties its return to this browser.
pub async fn start(
    State(state): State<AppState>,
    ClientIp(ip): ClientIp,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    let fields: Start = match parse_form(&body) {
        Ok(f) => f,
        Err(e) => return form_page(StatusCode::BAD_REQUEST, "", Some(&FieldError::from_api(&e.into())), ""),
    };
    let next = signin::safe_next(&fields.next).unwrap_or("/console/overview");
    match sso::start(&state.identity, &fields.who, next, &redirect_uri(&state, &headers), None, ip).await {
        Ok(started) => to_provider(&state, &started),
        Err(e) => {
            // A limit's page says when to try again, as the API's 429 does.
            let retry = match &e {
                crate::error::Error::Throttled { retry_after_secs, .. } => Some(*retry_after_secs),
                _ => None,
            };
            let error = FieldError::from_api(&e.into());
            let mut res = form_page(error.status, &fields.who, Some(&error), &fields.next);
            if let Some(secs) = retry {
                res.headers_mut().insert(header::RETRY_AFTER, HeaderValue::from(secs));
            }
            res
        }
    }
}

/// The page that sends the browser to the provider, with the cookie that ties its return to
/// this browser.
fn to_provider(state: &AppState, started: &sso::Started) -> Response {
    let mut res = onward(StatusCode::OK, "Signing in", &started.redirect);
    let cookie = format!(
        "{BROWSER_COOKIE}={}; Path=/console/sso; HttpOnly; SameSite=Lax; Max-Age={}",
        started.browser, state.config.sso.login_ttl
    );
    if let Ok(v) = HeaderValue::from_str(&cookie) {
        res.headers_mut().append(header::SET_COOKIE, v);
    }
    res
}

/// The link form's field: the enterprise whose provider to link the account to.
#[derive(Debug, Default, Deserialize)]
pub struct Link {
    #[serde(default)]
    pub enterprise: String,
}

/// `POST /console/sso/link` (the Security page): a signed-in member links their account to the
/// enterprise's provider, by signing in there; the way an administrator's account is linked
/// (docs/sso.md#linking).
pub async fn link(
    State(state): State<AppState>,
    ClientIp(ip): ClientIp,
    headers: HeaderMap,
    form: Form<Link>,
) -> Response {
    let uri = redirect_uri(&state, &headers);
    let auth = &form.session.auth;
    let e = &form.fields.enterprise;
    match sso::start(&state.identity, e, "/console/security", &uri, Some(auth), ip).await {
        Ok(started) => to_provider(&state, &started),
        Err(e) => super::error_response(e.into(), Some(&form.session)),
    }
}

/// The browser cookie [`start`] set, if the browser sent it.
fn browser_cookie(headers: &HeaderMap) -> Option<String> {
    headers
        .get_all(header::COOKIE)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(';'))
        .find_map(|c| {
            let (k, v) = c.trim().split_once('=')?;
            (k == BROWSER_COOKIE).then(|| v.to_string())
        })
}

/// `GET /console/sso/callback`: the provider's answer. Signed in, the session cookie is set
/// and the page moves on to the console; refused, the sign-in form says why.
pub async fn callback(
    State(state): State<AppState>,
    ClientIp(ip): ClientIp,
    ConnectInfo(peer): ConnectInfo<SocketAddr>,
    headers: HeaderMap,
    Query(cb): Query<sso::Callback>,
) -> Response {
    let browser = browser_cookie(&headers);
    let uri = redirect_uri(&state, &headers);
    match sso::finish(&state.identity, &cb, browser.as_deref(), &uri, ip).await {
        Ok(done) => {
            let to = signin::safe_next(&done.next).unwrap_or("/console/overview");
            let mut res = match &done.new_totp {
                Some(made) => new_account(to, made),
                None => onward(StatusCode::OK, "Signed in", to),
            };
            signin::set_session_cookie(&mut res, &state, peer, &done.session);
            let clear = format!("{BROWSER_COOKIE}=; Path=/console/sso; HttpOnly; SameSite=Lax; Max-Age=0");
            if let Ok(v) = HeaderValue::from_str(&clear) {
                res.headers_mut().append(header::SET_COOKIE, v);
            }
            res
        }
        Err(e) => {
            let error = FieldError::from_api(&e.into());
            form_page(error.status, "", Some(&error), "")
        }
    }
}
