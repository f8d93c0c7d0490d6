//! The OAuth consent page (RFC 6749 §4.1.1; `crate::oauth::authorize`): a signed-in user sees
//! which application asks, for which scopes (with what each permits) and what they reach, and
//! approves or denies. Someone not signed in is sent to the sign-in page, and back here after.
//! A consent given before for the same client and scopes is remembered.

use axum::{
    extract::{RawQuery, State},
    http::{header, HeaderValue, StatusCode},
    response::{IntoResponse, Response},
};
use maud::html;
use serde::Deserialize;

use super::{error_response, html, layout, page_error, Form, FormTarget, NoSession, Session};
use crate::{
    oauth::authorize::{self, AuthorizeRequest, Checked, Refused},
    AppState,
};

/// A 303 to `location`, which the page's CSP lets a form lead to.
fn go(location: &str) -> Response {
    let mut res = StatusCode::SEE_OTHER.into_response();
    if let Ok(v) = HeaderValue::from_str(location) {
        res.headers_mut().insert(header::LOCATION, v);
    }
    if let Ok(url) = url::Url::parse(location) {
        res.extensions_mut().insert(FormTarget(url.origin().ascii_serialization()));
    }
    res
}

fn refused(r: Refused, session: Option<&Session>) -> Response {
    match r {
        Refused::Here(message) => page_error(StatusCode::BAD_REQUEST, "InvalidRequest", &message, session),
        Refused::Back { redirect_uri, error, state } => go(&authorize::answer(
            &redirect_uri,
            &[("error", error.error), ("error_description", &error.description)],
            state.as_deref(),
        )),
    }
}

/// `GET /console/oauth/authorize` (where `/oauth/authorize` sends the browser).
pub async fn page(
    State(state): State<AppState>,
    session: Result<Session, NoSession>,
    RawQuery(query): RawQuery,
) -> Response {
    let query = query.unwrap_or_default();
    let Ok(session) = session else {
        let next = format!("/console/oauth/authorize?{query}");
        let to: String =
            url::form_urlencoded::Serializer::new(String::new()).append_pair("next", &next).finish();
        return go(&format!("/console/login?{to}"));
    };
    let req: AuthorizeRequest = match serde_urlencoded::from_str(&query) {
        Ok(r) => r,
        Err(e) => {
            return page_error(StatusCode::BAD_REQUEST, "InvalidRequest", &e.to_string(), Some(&session))
        }
    };
    let checked = match authorize::check(&state.store, &req).await {
        Ok(Ok(c)) => c,
        Ok(Err(r)) => return refused(r, Some(&session)),
        Err(e) => return error_response(e.into(), Some(&session)),
    };
    match authorize::remembered(&state.store, &session.auth, &checked).await {
        Ok(true) => return approve(&state, &session, &checked).await,
        Ok(false) => {}
        Err(e) => return error_response(e.into(), Some(&session)),
    }
    consent_page(&state, &session, &req, &checked).await
}

async fn approve(state: &AppState, session: &Session, checked: &Checked) -> Response {
    let identity = &state.identity;
    match authorize::approve(
        &state.store,
        identity.policy,
        state.config.oauth.code_ttl,
        &session.auth,
        checked,
    )
    .await
    {
        Ok(location) => go(&location),
        Err(e) => error_response(e.into(), Some(session)),
    }
}

async fn consent_page(
    state: &AppState,
    session: &Session,
    req: &AuthorizeRequest,
    checked: &Checked,
) -> Response {
    let memberships = state.store.memberships(&session.auth.user.id).await.unwrap_or_default();
    let hidden = [
        ("response_type", Some(req.response_type.as_str())),
        ("client_id", Some(req.client_id.as_str())),
        ("redirect_uri", req.redirect_uri.as_deref()),
        ("scope", req.scope.as_deref()),
        ("state", req.state.as_deref()),
        ("code_challenge", req.code_challenge.as_deref()),
        ("code_challenge_method", req.code_challenge_method.as_deref()),
        ("nonce", req.nonce.as_deref()),
    ];
    let host = url::Url::parse(&checked.redirect_uri).ok().and_then(|u| u.host_str().map(str::to_string));
    let body = html! {
        section.panel #consent {
            h2 { (checked.client.name) " asks for access to your account" }
            p { "It will act as " strong { (session.auth.user.email) } " with these permissions:" }
            ul #consent-scopes { @for (scope, text) in authorize::described(&checked.scopes) {
                li { code { (scope) } " — " (text) }
            } }
            p { "They reach what your account reaches: "
                @if memberships.is_empty() { "no enterprise." }
                @else { @for (i, m) in memberships.iter().enumerate() { @if i > 0 { ", " } (m.enterprise.name) } " and their wallets." } }
            p.muted { "You will be sent back to " code { (host.unwrap_or_default()) } ". You can revoke this access at any time." }
            form.inline method="post" action="/console/oauth/authorize" {
                (layout::csrf(session))
                @for (name, value) in hidden { @if let Some(v) = value { input type="hidden" name=(name) value=(v); } }
                button type="submit" name="decision" value="approve" { "Allow" }
                " "
                button.secondary type="submit" name="decision" value="deny" { "Deny" }
            }
        }
    };
    let mut res = html(StatusCode::OK, layout::page(Some(session), "Authorize an application", "", body));
    if let Ok(url) = url::Url::parse(&checked.redirect_uri) {
        res.extensions_mut().insert(FormTarget(url.origin().ascii_serialization()));
    }
    res
}

/// The consent form: the user's decision and the request it answers.
#[derive(Debug, Default, Deserialize)]
pub struct ConsentForm {
    #[serde(default)]
    pub decision: String,
    #[serde(flatten)]
    pub request: AuthorizeRequest,
}

/// `POST /console/oauth/authorize`: approve (a code for the client) or deny (`access_denied`).
pub async fn decide(State(state): State<AppState>, form: Form<ConsentForm>) -> Response {
    let Form { session, fields } = form;
    let checked = match authorize::check(&state.store, &fields.request).await {
        Ok(Ok(c)) => c,
        Ok(Err(r)) => return refused(r, Some(&session)),
        Err(e) => return error_response(e.into(), Some(&session)),
    };
    match fields.decision.as_str() {
        "approve" => approve(&state, &session, &checked).await,
        _ => go(&authorize::deny(&checked)),
    }
}
