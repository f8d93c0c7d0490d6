//! The API reference, written from the OpenAPI document so it cannot drift from the routes:
//! docs/api.md (`custodian openapi --markdown`, checked against the code by a test) and the page
//! `GET /docs`; and the front page `GET /`, which points to it, the console and the document.
//! One walk over the document ([`Reference::of`]) serves both forms.

use axum::{
    http::header,
    response::{IntoResponse, Response},
};
use maud::{html, Markup};
use serde_json::Value;

/// The interface's section numbers, which comments and docs cite as `§4.3`, and where each
/// section's subject is in this reference or in the docs: an operation (`METHOD path`), a
/// schema, or a page of docs/.
pub const SECTIONS: &[(&str, &str, &str)] = &[
    ("§1", "What the service does; coins are lower-case symbols", "Coin"),
    ("§2.1", "Wallet, an element of the lookup's `wallets`", "WalletLookupResponse"),
    ("§2.2", "Login result", "LoginResponse"),
    ("§2.3", "User, the login result's `user`", "LoginResponse"),
    ("§2.4", "Access token", "AccessTokenResponse"),
    ("§2.5", "Webhook", "WebhookResponse"),
    ("§2.6", "Webhook notification", "SimulateResponse"),
    ("§2.7", "Verification result", "VerifyResponse"),
    ("§3", "States and transitions", "webhooks.md"),
    ("§4.1", "Internal get wallets", "POST /api/v2/internal/wallet"),
    ("§4.2", "Internal login", "POST /api/v2/internal/user/login"),
    ("§4.3", "Create access token, and the scope values", "POST /api/v2/user/accesstoken"),
    ("§4.4", "Add wallet webhook", "POST /api/v2/{coin}/wallet/{walletId}/webhooks"),
    (
        "§4.5",
        "Simulate wallet webhook",
        "POST /api/v2/{coin}/wallet/{walletId}/webhooks/{webhookId}/simulate",
    ),
    ("§4.6", "Add block webhook", "POST /api/v2/{coin}/webhooks"),
    ("§4.7", "Simulate block webhook", "POST /api/v2/{coin}/webhooks/{webhookId}/simulate"),
    ("§4.8", "Create enterprise webhook", "POST /api/v2/enterprise/{enterpriseId}/webhooks"),
    (
        "§4.9",
        "Simulate enterprise webhook",
        "POST /api/v2/enterprise/{enterpriseId}/webhook/{webhookId}/simulate",
    ),
    ("§4.10", "Verify webhook notification", "POST /api/v2/webhook/{webhookId}/verify"),
    ("§5", "Authentication: bearer tokens, scopes, IP restriction", "scopes.md"),
    ("§6", "Events and notification shapes", "webhooks.md"),
    ("§7", "Errors: the body `{name, error, context, requestId}`", "errors.md"),
    ("§8", "Limits", "security.md"),
    ("§9", "Versioning: `/api/v2`, notification `version` 2", "webhooks.md"),
];

/// Where a section's subject is, as a Markdown link.
fn section_link(target: &str) -> String {
    if target.ends_with(".md") {
        format!("[{target}]({target})")
    } else if let Some((method, path)) = target.split_once(' ') {
        format!("[`{target}`](#{})", md_anchor(&format!("`{method} {path}`")))
    } else {
        link(target)
    }
}

/// GitHub's anchor for a heading: lower case, spaces to hyphens, other punctuation dropped.
fn md_anchor(heading: &str) -> String {
    heading
        .to_lowercase()
        .chars()
        .filter_map(|c| match c {
            ' ' => Some('-'),
            c if c.is_alphanumeric() || c == '-' || c == '_' => Some(c),
            _ => None,
        })
        .collect()
}

/// One operation: method, path and what the document says of it.
struct Operation {
    method: String,
    path: String,
    summary: String,
    /// `bearer` (with BitGo's HMAC forms), or none.
    authenticated: bool,
    params: Vec<Field>,
    body: Option<String>,
    /// (status, description, body type)
    responses: Vec<(String, String, Option<String>)>,
}

/// A parameter or a schema property.
struct Field {
    name: String,
    /// `path`, `query` or `header` for a parameter; empty for a property.
    location: String,
    kind: String,
    required: bool,
    description: String,
}

/// A named schema of `components.schemas`.
struct Schema {
    name: String,
    description: String,
    fields: Vec<Field>,
}

/// The operations grouped by tag, and the schemas, in a stable order.
pub struct Reference {
    title: String,
    intro: String,
    groups: Vec<(String, Vec<Operation>)>,
    schemas: Vec<Schema>,
}

fn text(v: &Value, key: &str) -> String {
    v.get(key).and_then(Value::as_str).unwrap_or_default().trim().to_string()
}

/// A schema's type in a few words: a named schema, `array of X`, or the type with its pattern.
fn kind_of(schema: &Value) -> String {
    if let Some(r) = schema.get("$ref").and_then(Value::as_str) {
        return r.rsplit('/').next().unwrap_or(r).to_string();
    }
    for key in ["oneOf", "anyOf", "allOf"] {
        if let Some(list) = schema.get(key).and_then(Value::as_array) {
            let parts: Vec<String> = list.iter().map(kind_of).filter(|k| k != "null").collect();
            return parts.join(" or ");
        }
    }
    let ty = match schema.get("type") {
        Some(Value::Array(types)) => {
            types.iter().filter_map(Value::as_str).filter(|t| *t != "null").collect::<Vec<_>>().join(" or ")
        }
        Some(Value::String(t)) => t.clone(),
        _ => "any".into(),
    };
    if ty == "array" {
        return format!("array of {}", schema.get("items").map(kind_of).unwrap_or_else(|| "any".into()));
    }
    match schema.get("pattern").and_then(Value::as_str) {
        Some(p) => format!("{ty} `{p}`"),
        None => ty,
    }
}

fn body_kind(content: Option<&Value>) -> Option<String> {
    let content = content?.as_object()?;
    let (media, v) = content.iter().next()?;
    Some(v.get("schema").map(kind_of).unwrap_or_else(|| media.clone()))
}

/// One operation of the document, with its first tag.
fn operation(path: &str, method: &str, op: &Value) -> (String, Operation) {
    let tag = op.get("tags").and_then(|t| t.get(0)).and_then(Value::as_str).unwrap_or("other").to_string();
    let params = op
        .get("parameters")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .map(|p| Field {
            name: text(p, "name"),
            location: text(p, "in"),
            kind: p.get("schema").map(kind_of).unwrap_or_default(),
            required: p.get("required").and_then(Value::as_bool).unwrap_or(false),
            description: text(p, "description"),
        })
        .collect();
    let responses = op
        .get("responses")
        .and_then(Value::as_object)
        .into_iter()
        .flatten()
        .map(|(status, r)| (status.clone(), text(r, "description"), body_kind(r.get("content"))))
        .collect();
    let operation = Operation {
        method: method.to_ascii_uppercase(),
        path: path.to_string(),
        summary: [text(op, "summary"), text(op, "description")]
            .into_iter()
            .filter(|s| !s.is_empty())
            .collect::<Vec<_>>()
            .join("\n\n"),
        authenticated: op.get("security").and_then(Value::as_array).is_some_and(|s| !s.is_empty()),
        params,
        body: op.get("requestBody").and_then(|b| body_kind(b.get("content"))),
        responses,
    };
    (tag, operation)
}

impl Reference {
    /// Reads the (refined) OpenAPI document.
    pub fn of(doc: &Value) -> Self {
        let mut groups: Vec<(String, Vec<Operation>)> = Vec::new();
        let paths = doc.get("paths").and_then(Value::as_object).cloned().unwrap_or_default();
        for (path, item) in &paths {
            for (method, op) in item.as_object().into_iter().flatten() {
                let (tag, operation) = operation(path, method, op);
                match groups.iter_mut().find(|(t, _)| *t == tag) {
                    Some((_, ops)) => ops.push(operation),
                    None => groups.push((tag, vec![operation])),
                }
            }
        }
        groups.sort_by(|a, b| a.0.cmp(&b.0));
        let schemas = doc
            .pointer("/components/schemas")
            .and_then(Value::as_object)
            .into_iter()
            .flatten()
            .map(|(name, s)| {
                let required: Vec<&str> = s
                    .get("required")
                    .and_then(Value::as_array)
                    .into_iter()
                    .flatten()
                    .filter_map(Value::as_str)
                    .collect();
                let fields = s
                    .get("properties")
                    .and_then(Value::as_object)
                    .into_iter()
                    .flatten()
                    .map(|(field, p)| Field {
                        name: field.clone(),
                        location: String::new(),
                        kind: kind_of(p),
                        required: required.contains(&field.as_str()),
                        description: text(p, "description"),
                    })
                    .collect();
                Schema { name: name.clone(), description: text(s, "description"), fields }
            })
            .collect();
        Reference {
            title: doc.pointer("/info/title").and_then(Value::as_str).unwrap_or("API").to_string(),
            intro: doc.pointer("/info/description").and_then(Value::as_str).unwrap_or_default().to_string(),
            groups,
            schemas,
        }
    }

    /// docs/api.md.
    pub fn markdown(&self) -> String {
        let one_line = |s: &str| s.replace('\n', " ").replace('|', "\\|");
        let mut out = format!(
            "# {} API reference\n\n{}\n\nGenerated from `openapi.json` by `custodian openapi --markdown`; \
             a running server shows the same at `/docs`. Authenticated operations take \
             `Authorization: Bearer <token>` or BitGo's signed forms (auth v2, v3, v4; \
             [bitgojs.md](bitgojs.md)). Every error answer has the body `{{name, error, context, \
             requestId}}` ([errors.md](errors.md)).\n",
            self.title, self.intro
        );
        out.push_str("\n## Section numbers\n\nComments and docs cite the interface by section (`§4.3`); each is here:\n\n");
        out.push_str("| section | subject | where |\n|---|---|---|\n");
        for (section, subject, target) in SECTIONS {
            out.push_str(&format!("| {section} | {subject} | {} |\n", section_link(target)));
        }
        for (tag, ops) in &self.groups {
            out.push_str(&format!("\n## {tag}\n"));
            for op in ops {
                out.push_str(&format!("\n### `{} {}`\n\n", op.method, op.path));
                if !op.summary.is_empty() {
                    out.push_str(&format!("{}\n\n", op.summary));
                }
                out.push_str(if op.authenticated { "Authenticated.\n" } else { "No authentication.\n" });
                if !op.params.is_empty() {
                    out.push_str(
                        "\n| parameter | in | type | required | description |\n|---|---|---|---|---|\n",
                    );
                    for p in &op.params {
                        out.push_str(&format!(
                            "| `{}` | {} | {} | {} | {} |\n",
                            p.name,
                            p.location,
                            one_line(&p.kind),
                            if p.required { "yes" } else { "no" },
                            one_line(&p.description)
                        ));
                    }
                }
                if let Some(body) = &op.body {
                    out.push_str(&format!("\nRequest body: {}.\n", link(body)));
                }
                out.push_str("\n| status | meaning | body |\n|---|---|---|\n");
                for (status, description, body) in &op.responses {
                    out.push_str(&format!(
                        "| {status} | {} | {} |\n",
                        one_line(description),
                        body.as_deref().map(link).unwrap_or_default()
                    ));
                }
            }
        }
        out.push_str("\n## Schemas\n");
        for s in &self.schemas {
            out.push_str(&format!("\n### {}\n\n", s.name));
            if !s.description.is_empty() {
                out.push_str(&format!("{}\n\n", s.description));
            }
            if !s.fields.is_empty() {
                out.push_str("| field | type | required | description |\n|---|---|---|---|\n");
                for f in &s.fields {
                    out.push_str(&format!(
                        "| `{}` | {} | {} | {} |\n",
                        f.name,
                        one_line(&f.kind),
                        if f.required { "yes" } else { "no" },
                        one_line(&f.description)
                    ));
                }
            }
        }
        out
    }

    /// The page `GET /docs`.
    pub fn html(&self) -> Markup {
        html! {
            p { (self.intro) }
            p {
                "Authenticated operations take " code { "Authorization: Bearer <token>" }
                " or BitGo's signed forms. Every error answer has the body "
                code { "{name, error, context, requestId}" } ". The machine-readable document: "
                a href="/openapi.json" { "/openapi.json" } "."
            }
            h2 { "Section numbers" }
            p { "Comments and docs cite the interface by section (" code { "§4.3" } "); each is here:" }
            table {
                tr { th { "section" } th { "subject" } th { "where" } }
                @for (section, subject, target) in SECTIONS {
                    tr {
                        td { (section) }
                        td { (subject.replace('`', "")) }
                        td {
                            @if let Some((method, path)) = target.split_once(' ') {
                                a href={ "#" (anchor(method, path)) } { code { (target) } }
                            } @else if target.ends_with(".md") {
                                (target)
                            } @else {
                                a href={ "#schema-" (target) } { code { (target) } }
                            }
                        }
                    }
                }
            }
            nav.toc {
                @for (tag, ops) in &self.groups {
                    h2 { (tag) }
                    ul { @for op in ops { li { a href={ "#" (anchor(&op.method, &op.path)) } { code { (op.method) " " (op.path) } } } } }
                }
            }
            @for (tag, ops) in &self.groups {
                h2 { (tag) }
                @for op in ops {
                    section.operation id=(anchor(&op.method, &op.path)) {
                        h3 { code { (op.method) " " (op.path) } }
                        @for para in op.summary.split("\n\n") { p { (para) } }
                        p.muted { @if op.authenticated { "Authenticated." } @else { "No authentication." } }
                        @if !op.params.is_empty() {
                            table {
                                tr { th { "parameter" } th { "in" } th { "type" } th { "required" } th { "description" } }
                                @for p in &op.params {
                                    tr { td { code { (p.name) } } td { (p.location) } td { (p.kind) } td { @if p.required { "yes" } @else { "no" } } td { (p.description) } }
                                }
                            }
                        }
                        @if let Some(body) = &op.body { p { "Request body: " a href={ "#schema-" (body) } { (body) } } }
                        table {
                            tr { th { "status" } th { "meaning" } th { "body" } }
                            @for (status, description, body) in &op.responses {
                                tr { td { (status) } td { (description) } td { @if let Some(b) = body { (b) } } }
                            }
                        }
                    }
                }
            }
            h2 { "Schemas" }
            @for s in &self.schemas {
                section.schema id={ "schema-" (s.name) } {
                    h3 { (s.name) }
                    @if !s.description.is_empty() { p { (s.description) } }
                    @if !s.fields.is_empty() {
                        table {
                            tr { th { "field" } th { "type" } th { "required" } th { "description" } }
                            @for f in &s.fields {
                                tr { td { code { (f.name) } } td { (f.kind) } td { @if f.required { "yes" } @else { "no" } } td { (f.description) } }
                            }
                        }
                    }
                }
            }
        }
    }
}

/// A body type as a link to its schema when it names one.
fn link(kind: &str) -> String {
    if kind.chars().all(|c| c.is_ascii_alphanumeric()) && kind.starts_with(|c: char| c.is_ascii_uppercase()) {
        format!("[`{kind}`](#{})", kind.to_ascii_lowercase())
    } else {
        kind.to_string()
    }
}

fn anchor(method: &str, path: &str) -> String {
    let mut a = method.to_ascii_lowercase();
    for c in path.chars() {
        a.push(if c.is_ascii_alphanumeric() { c } else { '-' });
    }
    a
}

/// docs/api.md as `custodian openapi --markdown` prints it.
pub fn markdown() -> String {
    Reference::of(&super::openapi_value()).markdown()
}

/// `GET /docs`: the API reference.
pub async fn page() -> Response {
    static PAGE: std::sync::OnceLock<String> = std::sync::OnceLock::new();
    let body = PAGE.get_or_init(|| {
        let reference = Reference::of(&super::openapi_value());
        super::console::layout::public_page("API reference", reference.html()).into_string()
    });
    html_response(body.clone())
}

/// `GET /`: where to go from here.
pub async fn front() -> Response {
    let body = super::console::layout::public_page(
        "Custodian",
        html! {
            p { "A wallet-custody service API: login with a one-time password, scoped access tokens, wallet lookup and signed webhooks." }
            ul {
                li { a href="/console" { "The operator console" } ": deliveries, webhooks, notifications, tokens and the audit log." }
                li { a href="/docs" { "The API reference" } ": every operation, its parameters, bodies and answers." }
                li { a href="/openapi.json" { "The OpenAPI 3.1 document" } ", for clients and tools." }
                li { a href="/health" { "Health" } " and " a href="/metrics" { "Prometheus metrics" } "." }
            }
        },
    );
    html_response(body.into_string())
}

/// The favicon: a small key in the console's colour, as SVG.
pub async fn favicon() -> Response {
    const SVG: &str = r##"<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 32 32"><rect width="32" height="32" rx="6" fill="#1f4e79"/><circle cx="12" cy="14" r="5" fill="none" stroke="#fff" stroke-width="3"/><path d="M16 17l9 9m-4-4l3-3" stroke="#fff" stroke-width="3" fill="none" stroke-linecap="round"/></svg>"##;
    ([(header::CONTENT_TYPE, "image/svg+xml"), (header::CACHE_CONTROL, "public, max-age=86400")], SVG)
        .into_response()
}

fn html_response(body: String) -> Response {
    let headers = [
        (header::CONTENT_TYPE, "text/html; charset=utf-8"),
        (header::CONTENT_SECURITY_POLICY, super::console::CSP),
    ];
    let mut res = (headers, body).into_response();
    res.extensions_mut().insert(super::request_id::HtmlBody);
    res
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_section_points_at_something_that_exists() {
        let doc = super::super::openapi_value();
        let reference = Reference::of(&doc);
        for (section, _, target) in SECTIONS {
            let found = if let Some(page) = target.strip_suffix(".md") {
                std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
                    .join("docs")
                    .join(format!("{page}.md"))
                    .is_file()
            } else if let Some((method, path)) = target.split_once(' ') {
                reference.groups.iter().flat_map(|(_, ops)| ops).any(|o| o.method == method && o.path == path)
            } else {
                reference.schemas.iter().any(|s| s.name == *target)
            };
            assert!(found, "{section} points at {target}, which does not exist");
        }
    }
}
