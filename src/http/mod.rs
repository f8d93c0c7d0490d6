//! The HTTP layer: router assembly (routes with their OpenAPI descriptions, request ids, the
//! 1 MiB body limit, the uniform error body), extractors, the error mapping, and the handlers
//! of each capability in [`handlers`]. Only this module (with `metrics.rs` and the crate root)
//! knows axum; it calls the domain (`identity`, `wallets`, `webhooks`), never the reverse.

use axum::{
    extract::{DefaultBodyLimit, State},
    http::StatusCode,
    middleware,
    response::{IntoResponse, Response},
    routing::get,
    Json, Router,
};
use serde::Serialize;
use serde_json::Value;
use utoipa::{
    openapi::security::{ApiKey, ApiKeyValue, Http, HttpAuthScheme, SecurityScheme},
    Modify, OpenApi, ToSchema,
};
use utoipa_axum::{router::OpenApiRouter, routes};

use self::handlers::{
    approvals, audit, chain, custody, events, identity, keychains, login, passkeys, policy, sessions, sso,
    utxo, wallets, webhook_admin, webhooks,
};
use crate::{error::Error, AppState};

pub mod auth;
mod bitgo;
pub mod connections;
pub mod console;
mod edge;
pub mod error;
pub mod extract;
pub mod handlers;
pub mod hmac_edge;
pub mod metrics;
pub mod oauth;
mod openapi;
mod reference;
pub mod request_id;

pub use reference::markdown as reference_markdown;

/// Largest request body accepted, bytes (docs/decisions.md#identity).
pub const MAX_BODY_BYTES: usize = 1024 * 1024;

/// The error body of spec §7.
#[derive(Debug, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct ErrorResponse {
    /// Stable PascalCase code (docs/errors.md).
    pub name: String,
    /// Human-readable message.
    pub error: String,
    /// Properties specific to `name`, e.g. `field`.
    #[schema(value_type = Object)]
    pub context: Value,
    /// Equals the `request-id` response header.
    pub request_id: String,
}

#[derive(OpenApi)]
#[openapi(
    info(title = "Custodian", description = "Wallet-custody service API: wallet lookup, login with TOTP, scoped access tokens, webhooks."),
    modifiers(&BearerAuth),
    components(schemas(
        ErrorResponse,
        crate::types::WalletId,
        crate::types::EnterpriseId,
        crate::types::WebhookId,
        crate::types::TokenId,
        crate::types::NotificationId,
        crate::types::AnyId,
        crate::types::KeyId,
        crate::types::TxRequestId,
        crate::types::ApprovalId,
        crate::types::Coin
    ))
)]
struct ApiDoc;

struct BearerAuth;

impl Modify for BearerAuth {
    fn modify(&self, openapi: &mut utoipa::openapi::OpenApi) {
        if let Some(c) = openapi.components.as_mut() {
            c.add_security_scheme("bearer", SecurityScheme::Http(Http::new(HttpAuthScheme::Bearer)));
            // BitGo's signed requests (docs/decisions.md#signed-requests), accepted on every route that takes a
            // bearer token: documented here rather than listed per operation.
            c.add_security_scheme(
                "bitgoHmac",
                SecurityScheme::ApiKey(ApiKey::Header(ApiKeyValue::with_description(
                    "HMAC",
                    "BitGo auth v2/v3: `Authorization: Bearer <hex SHA-256 of the token>`, `Auth-Timestamp` (Unix ms, \
                     within 5 minutes back and 1 ahead), `BitGo-Auth-Version` (`2.0` or `3.0`) and `HMAC`: hex \
                     HMAC-SHA256 keyed with the token of `{ts}|{path?query}|{body}` (v2) or \
                     `{METHOD}|{ts}|3.0|{path?query}|{body}` (v3). A request is accepted once (401 RequestReplayed). \
                     The response carries `timestamp` and `hmac` over `{ts}|{path}|{status}|{body}` (v2) or \
                     `{METHOD}|{ts}|{path}|{status}|{body}` (v3).",
                ))),
            );
            c.add_security_scheme(
                "bitgoHmacV4",
                SecurityScheme::ApiKey(ApiKey::Header(ApiKeyValue::with_description(
                    "X-Signature",
                    "BitGo auth v4: `Authorization: Bearer <token_id>`, `X-Request-Timestamp` (Unix s), \
                     `X-Content-SHA256` (hex SHA-256 of the body), `X-Auth-Request-Id` and `X-Signature`: hex \
                     HMAC-SHA256 keyed with the token of `{ts}\\n{METHOD}\\n{path?query}\\n{bodyHash}\\n{authRequestId}\\n`. \
                     The response carries the same four headers, signed over \
                     `{ts}\\n{METHOD}\\n{path?query}\\n{status}\\n{bodyHash}\\n{authRequestId}\\n`.",
                ))),
            );
        }
    }
}

/// `{"status": "ok"}` when the database answers, with `chains` when the service watches any
/// (docs/chains.md): a halted chain is named there, and the service stays in rotation.
#[derive(Debug, Serialize, ToSchema)]
pub struct Health {
    pub status: String,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub chains: Vec<ChainHealth>,
}

/// One watched chain in `/health`.
#[derive(Debug, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct ChainHealth {
    /// The chain coin (`hteth`).
    pub coin: String,
    /// The last block processed.
    pub height: Option<u64>,
    /// The node's head when last asked.
    pub node_head: Option<u64>,
    /// Blocks the checkpoint is behind the node's head.
    pub lag: u64,
    /// Why the chain's watcher stopped (a reorg deeper than `reorg_depth`); absent while it runs.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub halted: Option<String>,
    /// Blocks processed per second over the watcher's last 5 seconds or so.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub blocks_per_second: Option<f64>,
    /// Why the watcher's last round failed (the node away, a `chain_id` that is not the
    /// node's); absent once a round succeeds. Never names the node's URL.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

/// Longest `/health` waits for the database before answering 503 (docs/decisions.md#connections-and-database-outages).
pub const HEALTH_TIMEOUT: std::time::Duration = std::time::Duration::from_millis(800);

/// 200 when the database answers within 800 ms (`HEALTH_TIMEOUT`), 503 otherwise.
#[utoipa::path(get, path = "/health", tag = "operations",
    responses(
        (status = 200, description = "Healthy", body = Health),
        (status = 503, description = "The database does not answer", body = ErrorResponse),
    ))]
async fn health(State(state): State<AppState>) -> error::ApiResult<Json<Health>> {
    // The cause goes to the log, not to whoever asks: it can name hosts and users.
    let answered = match tokio::time::timeout(HEALTH_TIMEOUT, state.store.ping()).await {
        Ok(r) => r.map_err(|e| e.to_string()),
        Err(_) => Err(format!("no answer within {HEALTH_TIMEOUT:?}")),
    };
    answered.map_err(|cause| {
        tracing::error!(error = %cause, "health check: the database does not answer");
        Error::Unavailable("database unavailable".into())
    })?;
    // The chains section is best effort within the same bound: the database just answered.
    let chains = match tokio::time::timeout(HEALTH_TIMEOUT, crate::chain::status(&state.chains)).await {
        Ok(Ok(all)) => all
            .into_iter()
            .map(|s| ChainHealth {
                lag: s.lag(),
                coin: s.chain,
                height: s.height,
                node_head: s.node_head,
                halted: s.halted,
                blocks_per_second: s.blocks_per_second,
                error: s.error,
            })
            .collect(),
        _ => Vec::new(),
    };
    Ok(Json(Health { status: "ok".into(), chains }))
}

/// The routes and the OpenAPI document describing them, built together so they cannot drift.
// Long: every API route in one list, read top to bottom.
pub fn routes() -> (Router<AppState>, utoipa::openapi::OpenApi) {
    let (router, mut doc) = OpenApiRouter::with_openapi(ApiDoc::openapi())
        .routes(routes!(health))
        .routes(routes!(metrics::render))
        .routes(routes!(openapi_document))
        .routes(routes!(login::login))
        .routes(routes!(login::session_login))
        .routes(routes!(identity::create_access_token, sessions::list_tokens))
        .routes(routes!(sessions::revoke_token))
        .routes(routes!(sessions::session))
        .routes(routes!(keychains::user_settings, keychains::update_settings))
        .routes(routes!(keychains::add_keychain))
        .routes(routes!(passkeys::register_options))
        .routes(routes!(passkeys::add_device))
        .routes(routes!(passkeys::remove_device))
        .routes(routes!(passkeys::assertion_options))
        .routes(routes!(passkeys::sign_in_challenge))
        .routes(routes!(sessions::unlock))
        .routes(routes!(sessions::lock))
        .routes(routes!(sessions::extend_token))
        .routes(routes!(sessions::logout, sessions::logout_post))
        .routes(routes!(sessions::create_template, sessions::list_templates))
        .routes(routes!(sessions::get_template, sessions::delete_template))
        .routes(routes!(identity::me))
        .routes(routes!(wallets::lookup))
        .routes(routes!(wallets::set_balance))
        .routes(routes!(wallets::get_wallet))
        .routes(routes!(wallets::get_transfer))
        .routes(routes!(chain::list_transfers))
        .routes(routes!(chain::list_addresses))
        .routes(routes!(chain::add_address))
        .routes(routes!(chain::set_fee_alerts))
        .routes(routes!(custody::add_wallet))
        .routes(routes!(custody::get_key))
        .routes(routes!(utxo::add_keychain))
        .routes(routes!(utxo::create_address))
        .routes(routes!(utxo::list_unspents))
        .routes(routes!(custody::initiate))
        .routes(routes!(custody::freeze))
        .routes(routes!(policy::create_rule, policy::update_rule, policy::remove_rule))
        .routes(routes!(policy::evaluate))
        .routes(routes!(
            policy::create_enterprise_rule,
            policy::update_enterprise_rule,
            policy::remove_enterprise_rule,
            policy::list_enterprise_rules
        ))
        .routes(routes!(sso::set_oauth_setting, sso::get_oauth_setting, sso::remove_oauth_setting))
        .routes(routes!(custody::create_tx_request, custody::list_tx_requests))
        .routes(routes!(approvals::list_coin_approvals))
        .routes(routes!(approvals::list_approvals))
        .routes(routes!(approvals::get_coin_approval, approvals::resolve_coin_approval))
        .routes(routes!(approvals::get_approval, approvals::resolve_approval))
        .routes(routes!(
            webhooks::create_wallet_webhook,
            webhooks::list_wallet_webhooks,
            webhooks::remove_wallet_webhooks
        ))
        .routes(routes!(webhooks::simulate_wallet_webhook))
        .routes(routes!(
            webhooks::create_block_webhook,
            webhooks::list_block_webhooks,
            webhooks::remove_block_webhooks
        ))
        .routes(routes!(webhooks::simulate_block_webhook))
        .routes(routes!(webhooks::create_enterprise_webhook, webhooks::list_enterprise_webhooks))
        .routes(routes!(webhooks::remove_enterprise_webhook))
        .routes(routes!(webhooks::simulate_enterprise_webhook))
        .routes(routes!(webhook_admin::create_secret))
        .routes(routes!(webhook_admin::verify))
        .routes(routes!(webhook_admin::unblock))
        .routes(routes!(webhook_admin::list_notifications))
        .routes(routes!(webhook_admin::list_coin_notifications))
        .routes(routes!(webhook_admin::list_attempts))
        .routes(routes!(webhook_admin::resend))
        .routes(routes!(webhook_admin::recover))
        .routes(routes!(events::ingest_event))
        .routes(routes!(audit::list))
        .routes(routes!(bitgo::ping))
        .routes(routes!(bitgo::client_constants))
        .routes(routes!(oauth::token))
        .routes(routes!(oauth::revoke))
        .routes(routes!(oauth::introspect))
        .routes(routes!(oauth::discovery))
        .routes(routes!(oauth::jwks))
        .routes(routes!(oauth::userinfo))
        .split_for_parts();
    let router = bitgo::add(router, &mut doc);
    (router, doc)
}

/// The OpenAPI 3.1 document of every route.
#[utoipa::path(get, path = "/openapi.json", tag = "operations",
    responses((status = 200, description = "This document", content_type = "application/json", body = Object)))]
async fn openapi_document() -> Response {
    static DOC: std::sync::OnceLock<String> = std::sync::OnceLock::new();
    let doc = DOC.get_or_init(openapi_json).clone();
    ([(axum::http::header::CONTENT_TYPE, "application/json")], doc).into_response()
}

/// The OpenAPI 3.1 document as pretty JSON (what `GET /openapi.json` serves and the repository
/// commits as openapi.json).
pub fn openapi_json() -> String {
    serde_json::to_string_pretty(&openapi_value()).unwrap_or_default()
}

/// The OpenAPI document as served, refined with the rules the derive cannot state.
fn openapi_value() -> Value {
    let (_, doc) = routes();
    let mut doc = serde_json::to_value(&doc).unwrap_or_default();
    openapi::refine(&mut doc);
    doc
}

/// The whole HTTP application for `state`.
pub fn app(state: AppState) -> Router {
    app_for(state, true)
}

/// The HTTP application: every route with `api`, else only /health and /metrics (a worker).
pub fn app_for(state: AppState, api: bool) -> Router {
    let router = if api {
        routes()
            .0
            .merge(console::router())
            .route("/oauth/authorize", get(oauth::authorize))
            .route("/", get(reference::front))
            .route("/docs", get(reference::page))
            .route("/favicon.svg", get(reference::favicon))
            .route("/favicon.ico", get(reference::favicon))
    } else {
        Router::new()
            .route("/health", get(health))
            .route("/metrics", get(metrics::render))
            .route("/openapi.json", get(openapi_document))
    };
    router
        .fallback(|| async { StatusCode::NOT_FOUND.into_response() })
        .layer(DefaultBodyLimit::max(MAX_BODY_BYTES))
        .layer(middleware::from_fn_with_state(edge::Edge::new(state.clone()), edge::edge))
        .with_state(state)
}
