//! The console's page shell and the small pieces every page uses: navigation, state badges,
//! times, field errors, paging links and CSRF-carrying forms. maud escapes every value it
//! renders, so labels, URLs, header names, payloads and response bodies show as text.

use axum::http::StatusCode;
use maud::{html, Markup, DOCTYPE};

use super::{FieldError, Session};

/// The navigation entries: path, label, service admins only.
const NAV: &[(&str, &str, bool)] = &[
    ("/console/overview", "Overview", false),
    ("/console/webhooks", "Webhooks", false),
    ("/console/notifications", "Notifications", false),
    ("/console/approvals", "Approvals", false),
    ("/console/tokens", "Access tokens", false),
    ("/console/audit", "Audit log", false),
    ("/console/security", "Security", false),
    ("/console/admin/users", "Users", true),
    ("/console/admin/enterprises", "Enterprises", true),
    ("/console/admin/applications", "Applications", true),
    ("/console/chains", "Chains", true),
];

/// A whole page: head, navigation (when signed in) with `active` marked, and `body`.
pub fn page(session: Option<&Session>, title: &str, active: &str, body: Markup) -> Markup {
    shell(session, &format!("{title} · Custodian console"), title, active, body)
}

/// A page outside the console (the front page, the API reference), in the same style.
pub fn public_page(title: &str, body: Markup) -> Markup {
    shell(None, &format!("{title} · Custodian"), title, "", body)
}

fn shell(session: Option<&Session>, head_title: &str, title: &str, active: &str, body: Markup) -> Markup {
    html! {
        (DOCTYPE)
        html lang="en" {
            head {
                meta charset="utf-8";
                meta name="viewport" content="width=device-width, initial-scale=1";
                title { (head_title) }
                link rel="icon" href="/favicon.svg" type="image/svg+xml";
                link rel="stylesheet" href="/console/assets/console.css";
                script src="/console/assets/console.js" defer {}
            }
            body {
                header.top {
                    a.brand href="/console/overview" { "Custodian" }
                    @if let Some(s) = session {
                        nav {
                            @for (path, label, admin_only) in NAV {
                                @if !admin_only || s.is_service_admin() {
                                    a href=(path) class=@if *path == active { "active" } { (label) }
                                }
                            }
                        }
                        div.who {
                            span.email { (s.auth.user.email) }
                            form method="post" action="/console/logout" {
                                (csrf(s))
                                button.link type="submit" { "Sign out" }
                            }
                        }
                    }
                }
                main {
                    h1 { (title) }
                    (body)
                }
            }
        }
    }
}

/// The page of an error: its status, §7 `name` and message.
pub fn error_page(session: Option<&Session>, status: StatusCode, name: &str, message: &str) -> Markup {
    page(
        session,
        status.canonical_reason().unwrap_or("Error"),
        "",
        html! {
            div.alert.error role="alert" {
                strong { (name) } ": " (message)
            }
            p { a href="/console/overview" { "Back to the overview" } }
        },
    )
}

/// The hidden CSRF field of a form.
pub fn csrf(session: &Session) -> Markup {
    html! { input type="hidden" name="csrf" value=(session.csrf); }
}

/// A one-button form posting to `action`, with the CSRF field; `confirm` asks first.
pub fn action_button(
    session: &Session,
    action: &str,
    label: &str,
    class: &str,
    confirm: Option<&str>,
) -> Markup {
    html! {
        form.inline method="post" action=(action) data-confirm=[confirm] {
            (csrf(session))
            button class=(class) type="submit" { (label) }
        }
    }
}

/// The error shown beside `field`, when `error` is about it.
pub fn field_error(error: Option<&FieldError>, field: &str) -> Markup {
    html! {
        @if let Some(e) = error.filter(|e| e.field == field) {
            span.field-error role="alert" data-field=(field) { (e.name) ": " (e.message) }
        }
    }
}

/// A banner for an error that names no field on the form.
pub fn form_error(error: Option<&FieldError>, fields: &[&str]) -> Markup {
    html! {
        @if let Some(e) = error.filter(|e| !fields.contains(&e.field.as_str())) {
            div.alert.error role="alert" { strong { (e.name) } ": " (e.message) }
        }
    }
}

/// A notice (success) banner.
pub fn notice(text: &str) -> Markup {
    html! { div.alert.ok role="status" { (text) } }
}

/// A state as a coloured badge with its text.
pub fn badge(state: &str) -> Markup {
    let class = match state {
        "processed" | "active" | "delivered" | "ok" | "confirmed" | "approved" => "badge good",
        "failed" | "suspended" | "revoked" | "inactive" | "halted" | "removed" | "replaced" | "rejected"
        | "canceled" => "badge bad",
        "pending" | "new" | "unconfirmed" | "pendingApproval" | "pendingDelivery" | "signed" => "badge wait",
        _ => "badge",
    };
    html! { span class=(class) { (state) } }
}

/// Unix milliseconds as `2026-11-23 12:34:56Z`.
pub fn time_ms(ms: i64) -> Markup {
    let iso = crate::clock::iso_ms(ms);
    let shown = iso.get(..19).map(|s| s.replace('T', " ") + "Z").unwrap_or_else(|| iso.clone());
    html! { time datetime=(iso) { (shown) } }
}

/// Unix seconds, as [`time_ms`].
pub fn time_s(s: i64) -> Markup {
    time_ms(s.saturating_mul(1000))
}

/// `text` cut to `max` characters, marked when cut.
pub fn truncated(text: &str, max: usize) -> Markup {
    let cut: String = text.chars().take(max).collect();
    html! {
        (cut)
        @if text.chars().count() > max { span.muted { " … (" (text.chars().count()) " characters in all)" } }
    }
}

/// A "next page" link when `next` is set: `base` with `param=next` added.
pub fn pager(base: &str, param: &str, next: Option<&str>) -> Markup {
    html! {
        @if let Some(n) = next {
            @let sep = if base.contains('?') { "&" } else { "?" };
            p.pager { a href={ (base) (sep) (param) "=" (n) } { "Next page →" } }
        }
    }
}

/// JSON text pretty-printed when it parses, else as given.
pub fn pretty_json(text: &str) -> Markup {
    let pretty = serde_json::from_str::<serde_json::Value>(text)
        .ok()
        .and_then(|v| serde_json::to_string_pretty(&v).ok())
        .unwrap_or_else(|| text.to_string());
    html! { pre.payload { (pretty) } }
}

/// A query string of the non-empty `pairs`, URL-encoded.
pub fn query(pairs: &[(&str, Option<&str>)]) -> String {
    let kept: Vec<(&str, &str)> =
        pairs.iter().filter_map(|(k, v)| v.filter(|v| !v.is_empty()).map(|v| (*k, v))).collect();
    serde_urlencoded::to_string(kept).unwrap_or_default()
}

/// A `<select>` of `options` (value, label) with `current` selected and an "any" first.
pub fn select(name: &str, options: &[(&str, &str)], current: Option<&str>) -> Markup {
    html! {
        select name=(name) id=(name) {
            option value="" { "any" }
            @for (value, label) in options {
                option value=(value) selected[current == Some(*value)] { (label) }
            }
        }
    }
}

/// A value shown this once (a new secret, token or OTP seed), with a Copy button: `id` names
/// the `<code>` (and `{id}-box` the banner).
#[derive(Debug, Clone)]
pub struct OneTime {
    pub id: &'static str,
    /// The banner's first, bold sentence.
    pub lead: String,
    /// Why it is shown once and what to do.
    pub warning: &'static str,
    pub value: String,
    /// A second form of the value (an otpauth URI), shown small.
    pub note: Option<String>,
}

/// What a page shows on top after an action.
#[derive(Debug, Clone)]
pub enum Shown {
    Nothing,
    Notice(String),
    Error(FieldError),
    OneTime(OneTime),
}

impl Shown {
    /// The result of an action: `Ok` as shown by `done`, a form error beside its field, or, for
    /// an error not about the form, the error to give an error page.
    pub fn of<T>(
        result: Result<T, crate::error::Error>,
        done: impl FnOnce(T) -> Shown,
    ) -> Result<Shown, crate::http::error::ApiError> {
        match result {
            Ok(v) => Ok(done(v)),
            Err(e) => FieldError::of(e).map(Shown::Error),
        }
    }

    /// The status of the page showing it.
    pub fn status(&self) -> StatusCode {
        match self {
            Shown::Error(e) => e.status,
            _ => StatusCode::OK,
        }
    }

    /// The form error, if that is what it is.
    pub fn error(&self) -> Option<&FieldError> {
        match self {
            Shown::Error(e) => Some(e),
            _ => None,
        }
    }
}

/// The banner of `shown`.
pub fn shown(shown: &Shown) -> Markup {
    html! {
        @match shown {
            Shown::Nothing => {},
            Shown::Notice(t) => (notice(t)),
            Shown::Error(e) => div.alert.error role="alert" { strong { (e.name) } ": " (e.message) },
            Shown::OneTime(o) => div.alert.warn id={ (o.id) "-box" } role="status" {
                p { strong { (o.lead) } " " (o.warning) }
                code.secret id=(o.id) { (o.value) } " "
                button.secondary type="button" data-copy=(o.id) { "Copy" }
                @if let Some(n) = &o.note { p.mono.muted { (n) } }
            },
        }
    }
}
