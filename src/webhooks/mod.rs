//! Webhooks (spec §4.4 to §4.10, §2.5 to §2.7, §6, §8): registration at wallet, block and
//! enterprise level, listing and removal, simulation, secrets and verification, event
//! ingestion, and the operator's views of notifications and attempts.

use std::collections::BTreeMap;

use axum::{
    extract::{Path, Query, State},
    http::StatusCode,
    Json,
};
use serde::{Deserialize, Serialize};
use serde_json::{json, Value};
use utoipa::{IntoParams, ToSchema};

use crate::{
    config::Environment,
    http::{
        error::{Error, Result},
        extract::ApiJson,
        ErrorResponse,
    },
    identity::{
        auth::Auth,
        scopes::{Action, WalletPermission},
    },
    ids,
    store::{Enterprise, Notification, Webhook, WebhookFilter},
    wallets::model::WalletRow,
    AppState,
};

pub mod notify;
pub mod secrets;

/// Wallet webhook types (§6.1).
pub const WALLET_TYPES: &[&str] = &[
    "address_confirmation",
    "admin",
    "circuitBreaker",
    "lowFee",
    "lowFeeAddressBalance",
    "pendingapproval",
    "transaction",
    "transactionExpire",
    "transactionRemoved",
    "transaction_finality_on_l1",
    "transfer",
    "txRequest",
    "txRequestTransaction",
];
/// Block webhook types (§6.2).
pub const BLOCK_TYPES: &[&str] = &["block", "wallet_confirmation"];
/// Enterprise webhook types (§6.3).
pub const ENTERPRISE_TYPES: &[&str] = &["accessToken", "bankAccount"];
/// Webhooks of one type per wallet, per enterprise, and per user and coin (§8).
pub const MAX_WEBHOOKS_PER_TYPE: u32 = 10;
/// Longest callback URL, characters.
pub const MAX_URL_LEN: usize = 2048;
/// Webhook record `version` (§2.5).
pub const VERSION: u32 = 2;
/// Header names a webhook's `customHttpHeaders` may not set: the delivery engine sets them.
pub const RESERVED_HEADERS: &[&str] = &[
    "host",
    "content-length",
    "content-type",
    "transfer-encoding",
    "connection",
    "x-signature-sha256",
    "idempotency-key",
    "webhook-id",
    "webhook-timestamp",
    "webhook-signature",
];

/// Request body of §4.4, §4.6 and §4.8.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct CreateWebhookRequest {
    /// A type of the level's §6 table.
    #[serde(rename = "type")]
    pub webhook_type: String,
    /// Absolute http(s) URL, at most 2048 characters; https only in production.
    pub url: String,
    pub label: Option<String>,
    pub listen_to_failure_states: Option<bool>,
    /// Extra headers sent with each notification.
    pub custom_http_headers: Option<BTreeMap<String, String>>,
    pub tx_request_states: Option<Vec<String>>,
    pub tx_request_transaction_states: Option<Vec<String>>,
    /// Block webhooks: confirmations before notifying, >= 0.
    #[schema(value_type = Option<u64>)]
    pub num_confirmations: Option<Value>,
    /// Deliver even to non-routable addresses; service admins only.
    pub allow_blocked_hosts: Option<bool>,
}

/// A webhook (§2.5), with the fields of its level.
#[derive(Debug, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct WebhookResponse {
    pub id: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub label: Option<String>,
    /// ISO 8601.
    pub created: String,
    /// `wallet` or `enterprise`; absent on block webhooks.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub scope: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub wallet_id: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub enterprise_id: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub user_id: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub coin: Option<String>,
    #[serde(rename = "type")]
    pub webhook_type: String,
    pub url: String,
    /// Always 2.
    pub version: u32,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub num_confirmations: Option<i64>,
    /// `active` or `suspended`.
    pub state: String,
    pub successive_failed_attempts: i64,
    pub listen_to_failure_states: bool,
    pub tx_request_states: Vec<String>,
    pub tx_request_transaction_states: Vec<String>,
}

impl From<&Webhook> for WebhookResponse {
    fn from(w: &Webhook) -> Self {
        let (scope, wallet_id, enterprise_id, user_id, coin, num_confirmations) = match w.scope.as_str() {
            "wallet" => (Some("wallet".into()), w.wallet_id.clone(), None, None, w.coin.clone(), None),
            "enterprise" => (Some("enterprise".into()), None, w.enterprise_id.clone(), None, None, None),
            _ => (None, None, None, Some(w.user_id.clone()), w.coin.clone(), w.num_confirmations),
        };
        WebhookResponse {
            id: w.id.clone(),
            label: w.label.clone(),
            created: ids::iso(w.created_at),
            scope,
            wallet_id,
            enterprise_id,
            user_id,
            coin,
            webhook_type: w.webhook_type.clone(),
            url: w.url.clone(),
            version: VERSION,
            num_confirmations,
            state: w.state.clone(),
            successive_failed_attempts: w.successive_failed_attempts,
            listen_to_failure_states: w.listen_to_failure_states,
            tx_request_states: w.tx_request_states.clone(),
            tx_request_transaction_states: w.tx_request_transaction_states.clone(),
        }
    }
}

/// `{webhooks: [...]}`, with `nextBatchPrevId` when there are more.
#[derive(Debug, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct WebhookList {
    pub webhooks: Vec<WebhookResponse>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub next_batch_prev_id: Option<String>,
}

/// Paging of list routes: `limit` (1..=500, default 100) and `prevId` (the last id seen).
#[derive(Debug, Deserialize, IntoParams)]
#[serde(rename_all = "camelCase")]
#[into_params(parameter_in = Query)]
pub struct Paging {
    pub limit: Option<u32>,
    pub prev_id: Option<String>,
    /// Notification lists only: `new`, `pending`, `processed` or `failed`.
    pub state: Option<String>,
}

impl Paging {
    fn checked(&self) -> Result<(u32, Option<&str>)> {
        let limit = self.limit.unwrap_or(100);
        if !(1..=500).contains(&limit) {
            return Err(Error::invalid_field("limit", "must be from 1 to 500"));
        }
        if let Some(p) = &self.prev_id {
            if !ids::is_id(p) {
                return Err(Error::invalid_field("prevId", "must be a 32-hex id"));
            }
        }
        Ok((limit, self.prev_id.as_deref()))
    }
}

/// Body of the removal routes: `{id}` or `{type, url}`.
#[derive(Debug, Deserialize, ToSchema)]
pub struct RemoveWebhookRequest {
    pub id: Option<String>,
    #[serde(rename = "type")]
    pub webhook_type: Option<String>,
    pub url: Option<String>,
}

/// `{removed: n}`.
#[derive(Debug, Serialize, ToSchema)]
pub struct Removed {
    pub removed: u64,
}

fn not_found(what: &'static str) -> Error {
    Error::NotFound { name: what, message: "not found, or not accessible with this token".into() }
}

fn check_coin(coin: &str) -> Result<()> {
    if ids::is_coin(coin) {
        Ok(())
    } else {
        Err(Error::invalid_field("coin", "must be a lower-case coin symbol"))
    }
}

fn check_id(field: &str, id: &str) -> Result<()> {
    if ids::is_id(id) {
        Ok(())
    } else {
        Err(Error::invalid_field(field, "must be a 32-hex id"))
    }
}

/// Checks a callback URL: absolute http(s) with a host, at most [`MAX_URL_LEN`] characters,
/// https only in production.
pub fn check_url(url: &str, env: Environment) -> Result<()> {
    if url.len() > MAX_URL_LEN {
        return Err(Error::invalid_field("url", format!("at most {MAX_URL_LEN} characters")));
    }
    let parsed =
        url::Url::parse(url).map_err(|e| Error::invalid_field("url", format!("not an absolute URL: {e}")))?;
    match parsed.scheme() {
        "https" => {}
        "http" if env == Environment::Test => {}
        "http" => return Err(Error::invalid_field("url", "the production environment requires https")),
        _ => return Err(Error::invalid_field("url", "must be an http or https URL")),
    }
    if parsed.host_str().is_none_or(str::is_empty) {
        return Err(Error::invalid_field("url", "must have a host"));
    }
    Ok(())
}

/// Checks `customHttpHeaders`: valid names and values, none reserved, at most 20.
pub fn check_headers(headers: &BTreeMap<String, String>) -> Result<()> {
    if headers.len() > 20 {
        return Err(Error::invalid_field("customHttpHeaders", "at most 20 headers"));
    }
    for (k, v) in headers {
        let field = format!("customHttpHeaders.{k}");
        let name = axum::http::HeaderName::from_bytes(k.as_bytes())
            .map_err(|_| Error::invalid_field(&field, "not a valid header name"))?;
        if RESERVED_HEADERS.contains(&name.as_str()) {
            return Err(Error::invalid_field(
                &field,
                "this header is set by the service and cannot be overridden",
            ));
        }
        axum::http::HeaderValue::from_str(v)
            .map_err(|_| Error::invalid_field(&field, "not a valid header value"))?;
    }
    Ok(())
}

fn invalid_type(level: &str, allowed: &[&str]) -> Error {
    Error::BadRequest {
        name: "InvalidWebhookType",
        message: format!("not a {level} webhook type; allowed: {}", allowed.join(", ")),
        context: json!({ "field": "type", "allowed": allowed }),
    }
}

/// Builds a webhook record from a checked request.
fn build(
    req: CreateWebhookRequest,
    scope: &str,
    allowed: &[&str],
    auth: &Auth,
    env: Environment,
) -> Result<Webhook> {
    if !allowed.contains(&req.webhook_type.as_str()) {
        return Err(invalid_type(scope, allowed));
    }
    check_url(&req.url, env)?;
    let headers = req.custom_http_headers.unwrap_or_default();
    check_headers(&headers)?;
    if req.label.as_ref().is_some_and(|l| l.chars().count() > 250) {
        return Err(Error::invalid_field("label", "at most 250 characters"));
    }
    let allow_blocked_hosts = req.allow_blocked_hosts.unwrap_or(false);
    if allow_blocked_hosts && !auth.token.admin {
        return Err(Error::forbidden("only a service admin may set allowBlockedHosts", "service admin"));
    }
    let num_confirmations = match (scope, &req.num_confirmations) {
        ("block", None | Some(Value::Null)) => Some(0),
        ("block", Some(v)) => Some(
            v.as_u64()
                .and_then(|n| i64::try_from(n).ok())
                .ok_or_else(|| Error::invalid_field("numConfirmations", "must be a whole number >= 0"))?,
        ),
        _ => None,
    };
    Ok(Webhook {
        id: ids::new_id(),
        scope: scope.into(),
        wallet_id: None,
        enterprise_id: None,
        user_id: auth.user.id.clone(),
        coin: None,
        webhook_type: req.webhook_type,
        url: req.url,
        label: req.label,
        num_confirmations,
        state: "active".into(),
        successive_failed_attempts: 0,
        failed_attempts_total: 0,
        listen_to_failure_states: req.listen_to_failure_states.unwrap_or(false),
        tx_request_states: req.tx_request_states.unwrap_or_default(),
        tx_request_transaction_states: req.tx_request_transaction_states.unwrap_or_default(),
        custom_headers: headers,
        allow_blocked_hosts,
        created_at: ids::now(),
    })
}

async fn insert(state: &AppState, w: Webhook) -> Result<Json<WebhookResponse>> {
    if !state.store.insert_webhook(&w, MAX_WEBHOOKS_PER_TYPE).await? {
        return Err(Error::BadRequest {
            name: "WebhookLimitReached",
            message: format!("at most {MAX_WEBHOOKS_PER_TYPE} webhooks of type {} here (§8)", w.webhook_type),
            context: json!({ "field": "type", "max": MAX_WEBHOOKS_PER_TYPE }),
        });
    }
    Ok(Json(WebhookResponse::from(&w)))
}

/// The wallet, when the caller's user may see it and the token covers `permission` on it.
/// Invisible or unknown: 404; visible but not permitted: 403.
pub async fn wallet_access(
    state: &AppState,
    auth: &Auth,
    coin: &str,
    wallet_id: &str,
    permission: WalletPermission,
) -> Result<WalletRow> {
    check_coin(coin)?;
    check_id("walletId", wallet_id)?;
    let row = state
        .store
        .wallets_by_ids(&[wallet_id.to_string()], false)
        .await?
        .pop()
        .filter(|w| w.coin == coin)
        .ok_or_else(|| not_found("WalletNotFound"))?;
    if !auth.token.admin {
        let admin_of = state.store.memberships(&auth.user.id).await?;
        let may_see = row.user_ids.contains(&auth.user.id)
            || admin_of.iter().any(|m| m.is_admin && Some(&m.enterprise.id) == row.enterprise.as_ref());
        if !may_see {
            return Err(not_found("WalletNotFound"));
        }
        auth.require(
            state.policy(),
            Action::Wallet { permission, wallet_id: &row.id, enterprise: row.enterprise.as_deref() },
        )?;
    }
    Ok(row)
}

/// The enterprise, when the caller is its admin (or a service admin) and the token may manage
/// it. Unknown or not a member: 404; member without admin or scope: 403.
pub async fn enterprise_access(state: &AppState, auth: &Auth, enterprise_id: &str) -> Result<Enterprise> {
    check_id("enterpriseId", enterprise_id)?;
    let enterprise =
        state.store.enterprise_by_id(enterprise_id).await?.ok_or_else(|| not_found("EnterpriseNotFound"))?;
    if auth.token.admin {
        return Ok(enterprise);
    }
    let membership = state
        .store
        .memberships(&auth.user.id)
        .await?
        .into_iter()
        .find(|m| m.enterprise.id == enterprise_id)
        .ok_or_else(|| not_found("EnterpriseNotFound"))?;
    if !membership.is_admin {
        return Err(Error::forbidden("only an admin of the enterprise may do this", "enterprise admin"));
    }
    auth.require(state.policy(), Action::ManageEnterprise { enterprise_id })?;
    Ok(enterprise)
}

/// A webhook the caller may manage: the same access as creating it. Otherwise 404.
pub async fn webhook_access(state: &AppState, auth: &Auth, webhook_id: &str) -> Result<Webhook> {
    check_id("webhookId", webhook_id)?;
    let w = state.store.webhook_by_id(webhook_id).await?.ok_or_else(|| not_found("WebhookNotFound"))?;
    let hide = |e: Error| match e {
        Error::NotFound { .. } => not_found("WebhookNotFound"),
        other => other,
    };
    match w.scope.as_str() {
        "wallet" => {
            let (coin, wallet) =
                (w.coin.clone().unwrap_or_default(), w.wallet_id.clone().unwrap_or_default());
            wallet_access(state, auth, &coin, &wallet, WalletPermission::Manage).await.map_err(hide)?;
        }
        "enterprise" => {
            enterprise_access(state, auth, w.enterprise_id.as_deref().unwrap_or_default())
                .await
                .map_err(hide)?;
        }
        _ if auth.token.admin || w.user_id == auth.user.id => {}
        _ => return Err(not_found("WebhookNotFound")),
    }
    Ok(w)
}

/// The enterprise whose secret signs a block webhook: the token's, else the user's first
/// (docs/webhooks.md).
async fn block_enterprise(state: &AppState, auth: &Auth) -> Result<Option<String>> {
    if let Some(e) = &auth.token.enterprise {
        return Ok(Some(e.clone()));
    }
    Ok(state.store.memberships(&auth.user.id).await?.into_iter().next().map(|m| m.enterprise.id))
}

// ----- wallet webhooks -----

/// Adds a wallet webhook (§4.4). Needs wallet_manage on the wallet, in any form.
#[utoipa::path(post, path = "/api/v2/{coin}/wallet/{walletId}/webhooks", tag = "webhooks",
    security(("bearer" = [])), request_body = CreateWebhookRequest,
    params(("coin" = String, Path), ("walletId" = String, Path)),
    responses((status = 200, body = WebhookResponse), (status = 400, body = ErrorResponse),
        (status = 403, body = ErrorResponse), (status = 404, body = ErrorResponse)))]
pub async fn create_wallet_webhook(
    State(state): State<AppState>,
    auth: Auth,
    Path((coin, wallet_id)): Path<(String, String)>,
    ApiJson(req): ApiJson<CreateWebhookRequest>,
) -> Result<Json<WebhookResponse>> {
    let wallet = wallet_access(&state, &auth, &coin, &wallet_id, WalletPermission::Manage).await?;
    let mut w = build(req, "wallet", WALLET_TYPES, &auth, state.config.environment)?;
    w.wallet_id = Some(wallet.id);
    w.enterprise_id = wallet.enterprise;
    w.coin = Some(coin);
    insert(&state, w).await
}

/// Lists a wallet's webhooks.
#[utoipa::path(get, path = "/api/v2/{coin}/wallet/{walletId}/webhooks", tag = "webhooks",
    security(("bearer" = [])), params(("coin" = String, Path), ("walletId" = String, Path), Paging),
    responses((status = 200, body = WebhookList), (status = 404, body = ErrorResponse)))]
pub async fn list_wallet_webhooks(
    State(state): State<AppState>,
    auth: Auth,
    Path((coin, wallet_id)): Path<(String, String)>,
    Query(paging): Query<Paging>,
) -> Result<Json<WebhookList>> {
    let wallet = wallet_access(&state, &auth, &coin, &wallet_id, WalletPermission::Manage).await?;
    let filter = WebhookFilter { scope: "wallet".into(), wallet_id: Some(wallet.id), ..Default::default() };
    list(&state, &filter, &paging).await
}

/// Removes wallet webhooks by `{id}` or `{type, url}`.
#[utoipa::path(delete, path = "/api/v2/{coin}/wallet/{walletId}/webhooks", tag = "webhooks",
    security(("bearer" = [])), params(("coin" = String, Path), ("walletId" = String, Path)),
    request_body = RemoveWebhookRequest, responses((status = 200, body = Removed), (status = 400, body = ErrorResponse)))]
pub async fn remove_wallet_webhooks(
    State(state): State<AppState>,
    auth: Auth,
    Path((coin, wallet_id)): Path<(String, String)>,
    ApiJson(req): ApiJson<RemoveWebhookRequest>,
) -> Result<Json<Removed>> {
    let wallet = wallet_access(&state, &auth, &coin, &wallet_id, WalletPermission::Manage).await?;
    let filter = WebhookFilter { scope: "wallet".into(), wallet_id: Some(wallet.id), ..Default::default() };
    remove(&state, &filter, req).await
}

// ----- block webhooks -----

/// Adds a block webhook (§4.6), owned by the calling user.
#[utoipa::path(post, path = "/api/v2/{coin}/webhooks", tag = "webhooks",
    security(("bearer" = [])), request_body = CreateWebhookRequest, params(("coin" = String, Path)),
    responses((status = 200, body = WebhookResponse), (status = 400, body = ErrorResponse)))]
pub async fn create_block_webhook(
    State(state): State<AppState>,
    auth: Auth,
    Path(coin): Path<String>,
    ApiJson(req): ApiJson<CreateWebhookRequest>,
) -> Result<Json<WebhookResponse>> {
    check_coin(&coin)?;
    auth.require(state.policy(), Action::ManageOwnWebhooks)?;
    let mut w = build(req, "block", BLOCK_TYPES, &auth, state.config.environment)?;
    w.coin = Some(coin);
    w.enterprise_id = block_enterprise(&state, &auth).await?;
    insert(&state, w).await
}

/// The caller's own block webhooks of `coin`; a 2FA-reset token may not manage them.
fn own_block_webhooks(state: &AppState, auth: &Auth, coin: String) -> Result<WebhookFilter> {
    check_coin(&coin)?;
    auth.require(state.policy(), Action::ManageOwnWebhooks)?;
    Ok(WebhookFilter {
        scope: "block".into(),
        user_id: Some(auth.user.id.clone()),
        coin: Some(coin),
        ..Default::default()
    })
}

/// Lists the caller's block webhooks for a coin.
#[utoipa::path(get, path = "/api/v2/{coin}/webhooks", tag = "webhooks",
    security(("bearer" = [])), params(("coin" = String, Path), Paging),
    responses((status = 200, body = WebhookList)))]
pub async fn list_block_webhooks(
    State(state): State<AppState>,
    auth: Auth,
    Path(coin): Path<String>,
    Query(paging): Query<Paging>,
) -> Result<Json<WebhookList>> {
    let filter = own_block_webhooks(&state, &auth, coin)?;
    list(&state, &filter, &paging).await
}

/// Removes the caller's block webhooks by `{id}` or `{type, url}`.
#[utoipa::path(delete, path = "/api/v2/{coin}/webhooks", tag = "webhooks",
    security(("bearer" = [])), params(("coin" = String, Path)), request_body = RemoveWebhookRequest,
    responses((status = 200, body = Removed)))]
pub async fn remove_block_webhooks(
    State(state): State<AppState>,
    auth: Auth,
    Path(coin): Path<String>,
    ApiJson(req): ApiJson<RemoveWebhookRequest>,
) -> Result<Json<Removed>> {
    let filter = own_block_webhooks(&state, &auth, coin)?;
    remove(&state, &filter, req).await
}

// ----- enterprise webhooks -----

/// Creates an enterprise webhook (§4.8). Enterprise admins only.
#[utoipa::path(post, path = "/api/v2/enterprise/{enterpriseId}/webhooks", tag = "webhooks",
    security(("bearer" = [])), request_body = CreateWebhookRequest, params(("enterpriseId" = String, Path)),
    responses((status = 200, body = WebhookResponse), (status = 400, body = ErrorResponse), (status = 403, body = ErrorResponse)))]
pub async fn create_enterprise_webhook(
    State(state): State<AppState>,
    auth: Auth,
    Path(enterprise_id): Path<String>,
    ApiJson(req): ApiJson<CreateWebhookRequest>,
) -> Result<Json<WebhookResponse>> {
    let e = enterprise_access(&state, &auth, &enterprise_id).await?;
    let mut w = build(req, "enterprise", ENTERPRISE_TYPES, &auth, state.config.environment)?;
    w.enterprise_id = Some(e.id);
    insert(&state, w).await
}

/// Lists an enterprise's webhooks.
#[utoipa::path(get, path = "/api/v2/enterprise/{enterpriseId}/webhooks", tag = "webhooks",
    security(("bearer" = [])), params(("enterpriseId" = String, Path), Paging),
    responses((status = 200, body = WebhookList)))]
pub async fn list_enterprise_webhooks(
    State(state): State<AppState>,
    auth: Auth,
    Path(enterprise_id): Path<String>,
    Query(paging): Query<Paging>,
) -> Result<Json<WebhookList>> {
    let e = enterprise_access(&state, &auth, &enterprise_id).await?;
    let filter =
        WebhookFilter { scope: "enterprise".into(), enterprise_id: Some(e.id), ..Default::default() };
    list(&state, &filter, &paging).await
}

/// Removes an enterprise webhook; 204.
#[utoipa::path(delete, path = "/api/v2/enterprise/{enterpriseId}/webhook/{webhookId}", tag = "webhooks",
    security(("bearer" = [])), params(("enterpriseId" = String, Path), ("webhookId" = String, Path)),
    responses((status = 204), (status = 404, body = ErrorResponse)))]
pub async fn remove_enterprise_webhook(
    State(state): State<AppState>,
    auth: Auth,
    Path((enterprise_id, webhook_id)): Path<(String, String)>,
) -> Result<StatusCode> {
    let e = enterprise_access(&state, &auth, &enterprise_id).await?;
    check_id("webhookId", &webhook_id)?;
    let filter =
        WebhookFilter { scope: "enterprise".into(), enterprise_id: Some(e.id), ..Default::default() };
    match state.store.delete_webhooks(&filter, Some(&webhook_id), None).await? {
        0 => Err(not_found("WebhookNotFound")),
        _ => Ok(StatusCode::NO_CONTENT),
    }
}

async fn list(state: &AppState, filter: &WebhookFilter, paging: &Paging) -> Result<Json<WebhookList>> {
    let (limit, prev) = paging.checked()?;
    let mut rows = state.store.list_webhooks(filter, prev, limit + 1).await?;
    let more = rows.len() > limit as usize;
    rows.truncate(limit as usize);
    Ok(Json(WebhookList {
        next_batch_prev_id: more.then(|| rows.last().map(|w| w.id.clone())).flatten(),
        webhooks: rows.iter().map(WebhookResponse::from).collect(),
    }))
}

async fn remove(
    state: &AppState,
    filter: &WebhookFilter,
    req: RemoveWebhookRequest,
) -> Result<Json<Removed>> {
    let removed = match (&req.id, &req.webhook_type, &req.url) {
        (Some(id), _, _) => {
            check_id("id", id)?;
            state.store.delete_webhooks(filter, Some(id), None).await?
        }
        (None, Some(t), Some(u)) => state.store.delete_webhooks(filter, None, Some((t, u))).await?,
        _ => return Err(Error::invalid_field("id", "give id, or type and url")),
    };
    Ok(Json(Removed { removed }))
}

// ----- simulate -----

/// `{webhookNotifications: [...]}` (§4.5, §4.7, §4.9).
#[derive(Debug, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct SimulateResponse {
    /// Notifications (§2.6) with `simulation: true`, `state: "new"`, and `payload`.
    #[schema(value_type = Vec<Object>)]
    pub webhook_notifications: Vec<Value>,
}

/// Body of the simulate routes: the id the notification is built from.
#[derive(Debug, Default, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct SimulateRequest {
    pub transfer_id: Option<String>,
    pub block_id: Option<String>,
    pub access_token_id: Option<String>,
}

async fn enqueue(state: &AppState, webhook: &Webhook, n: Notification) -> Result<Json<SimulateResponse>> {
    state.store.insert_notifications(std::slice::from_ref(&n)).await?;
    state.wake.notify_one();
    Ok(Json(SimulateResponse { webhook_notifications: vec![notify::notification_json(&n, webhook)] }))
}

/// Simulates a wallet webhook notification (§4.5) and queues it for delivery.
#[utoipa::path(post, path = "/api/v2/{coin}/wallet/{walletId}/webhooks/{webhookId}/simulate", tag = "webhooks",
    security(("bearer" = [])), request_body = SimulateRequest,
    params(("coin" = String, Path), ("walletId" = String, Path), ("webhookId" = String, Path)),
    responses((status = 200, body = SimulateResponse), (status = 404, body = ErrorResponse)))]
pub async fn simulate_wallet_webhook(
    State(state): State<AppState>,
    auth: Auth,
    Path((coin, wallet_id, webhook_id)): Path<(String, String, String)>,
    ApiJson(req): ApiJson<SimulateRequest>,
) -> Result<Json<SimulateResponse>> {
    let wallet = wallet_access(&state, &auth, &coin, &wallet_id, WalletPermission::Manage).await?;
    check_id("webhookId", &webhook_id)?;
    let w = state
        .store
        .webhook_by_id(&webhook_id)
        .await?
        .filter(|w| w.wallet_id.as_deref() == Some(wallet.id.as_str()))
        .ok_or_else(|| not_found("WebhookNotFound"))?;
    let transfer = req.transfer_id.as_deref().map(str::trim).filter(|t| !t.is_empty());
    // Only an event of this wallet may lend its data: another wallet's transfer stays unknown.
    let event = match transfer {
        Some(t) => state
            .store
            .event_by_transfer(t)
            .await?
            .and_then(|b| serde_json::from_str::<Value>(&b).ok())
            .filter(|e| e.get("walletId").and_then(Value::as_str) == Some(wallet.id.as_str())),
        None => None,
    };
    let organization: Option<String> = serde_json::from_str::<Value>(&wallet.record)
        .ok()
        .and_then(|r| r.get("organization").and_then(Value::as_str).map(str::to_string));
    let n = notify::simulate_wallet(&w, organization.as_deref(), transfer, event);
    enqueue(&state, &w, n).await
}

/// Simulates a block webhook notification (§4.7) and queues it for delivery.
#[utoipa::path(post, path = "/api/v2/{coin}/webhooks/{webhookId}/simulate", tag = "webhooks",
    security(("bearer" = [])), request_body = SimulateRequest,
    params(("coin" = String, Path), ("webhookId" = String, Path)),
    responses((status = 200, body = SimulateResponse), (status = 404, body = ErrorResponse)))]
pub async fn simulate_block_webhook(
    State(state): State<AppState>,
    auth: Auth,
    Path((coin, webhook_id)): Path<(String, String)>,
    ApiJson(req): ApiJson<SimulateRequest>,
) -> Result<Json<SimulateResponse>> {
    check_coin(&coin)?;
    let w = webhook_access(&state, &auth, &webhook_id).await?;
    if w.scope != "block" || w.coin.as_deref() != Some(coin.as_str()) {
        return Err(not_found("WebhookNotFound"));
    }
    let n = notify::simulate_block(&w, req.block_id.as_deref().map(str::trim).filter(|b| !b.is_empty()));
    enqueue(&state, &w, n).await
}

/// Simulates an enterprise webhook notification (§4.9) and queues it for delivery.
#[utoipa::path(post, path = "/api/v2/enterprise/{enterpriseId}/webhook/{webhookId}/simulate", tag = "webhooks",
    security(("bearer" = [])), request_body = SimulateRequest,
    params(("enterpriseId" = String, Path), ("webhookId" = String, Path)),
    responses((status = 200, body = SimulateResponse), (status = 404, body = ErrorResponse)))]
pub async fn simulate_enterprise_webhook(
    State(state): State<AppState>,
    auth: Auth,
    Path((enterprise_id, webhook_id)): Path<(String, String)>,
    ApiJson(req): ApiJson<SimulateRequest>,
) -> Result<Json<SimulateResponse>> {
    let e = enterprise_access(&state, &auth, &enterprise_id).await?;
    check_id("webhookId", &webhook_id)?;
    let w = state
        .store
        .webhook_by_id(&webhook_id)
        .await?
        .filter(|w| w.scope == "enterprise" && w.enterprise_id.as_deref() == Some(e.id.as_str()))
        .ok_or_else(|| not_found("WebhookNotFound"))?;
    let token_id = req.access_token_id.as_deref().map(str::trim).filter(|t| !t.is_empty());
    let token = match token_id.filter(|t| ids::is_id(t)) {
        Some(t) => {
            state.store.token_by_id(t).await?.filter(|t| t.enterprise.as_deref() == Some(e.id.as_str()))
        }
        None => None,
    };
    let n = notify::simulate_enterprise(&w, token.as_ref(), token_id);
    enqueue(&state, &w, n).await
}

// ----- secrets and verification -----

/// Body of POST /api/v2/webhook/secret.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct CreateSecretRequest {
    pub enterprise_id: String,
}

/// The new secret, shown once.
#[derive(Debug, Serialize, ToSchema)]
pub struct SecretResponse {
    /// `whsec_` + base64 of 32 random bytes.
    pub secret: String,
}

/// Creates or rotates an enterprise's webhook secret (enterprise admins). At most once per 5
/// minutes; the previous secret stays valid for 24 hours.
#[utoipa::path(post, path = "/api/v2/webhook/secret", tag = "webhooks",
    security(("bearer" = [])), request_body = CreateSecretRequest,
    responses((status = 200, body = SecretResponse), (status = 403, body = ErrorResponse), (status = 429, body = ErrorResponse)))]
pub async fn create_secret(
    State(state): State<AppState>,
    auth: Auth,
    ApiJson(req): ApiJson<CreateSecretRequest>,
) -> Result<Json<SecretResponse>> {
    let e = enterprise_access(&state, &auth, &req.enterprise_id).await?;
    let secret = crate::delivery::signing::new_secret();
    let sealed = state.key.seal(&secrets::secret_aad(&e.id), secret.as_bytes())?;
    match state
        .store
        .rotate_webhook_secret(&e.id, &sealed, ids::now(), secrets::MIN_ROTATION_INTERVAL)
        .await?
    {
        crate::store::Rotation::Done => {
            state.secrets.invalidate(&e.id);
            Ok(Json(SecretResponse { secret }))
        }
        crate::store::Rotation::TooSoon(wait) => Err(Error::TooManyRequests {
            message: "the webhook secret may be rotated at most once per 5 minutes".into(),
            retry_after: u64::try_from(wait).unwrap_or(1).max(1),
        }),
    }
}

/// Body of §4.10.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct VerifyRequest {
    /// Hex HMAC-SHA256 of `notificationPayload` (the `X-Signature-SHA256` header received).
    pub signature: String,
    /// The received payload, exactly as received.
    pub notification_payload: String,
}

/// Verification result (§2.7).
#[derive(Debug, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct VerifyResponse {
    pub webhook_id: String,
    pub is_valid: bool,
}

/// Verifies a received notification against the webhook's enterprise secret (§4.10).
#[utoipa::path(post, path = "/api/v2/webhook/{webhookId}/verify", tag = "webhooks",
    security(("bearer" = [])), request_body = VerifyRequest, params(("webhookId" = String, Path)),
    responses((status = 200, body = VerifyResponse), (status = 400, body = ErrorResponse), (status = 404, body = ErrorResponse)))]
pub async fn verify(
    State(state): State<AppState>,
    auth: Auth,
    Path(webhook_id): Path<String>,
    ApiJson(req): ApiJson<VerifyRequest>,
) -> Result<Json<VerifyResponse>> {
    let w = webhook_access(&state, &auth, &webhook_id).await?;
    let no_secret = || Error::BadRequest {
        name: "NoWebhookSecret",
        message:
            "the webhook's enterprise has no webhook secret: create one with POST /api/v2/webhook/secret"
                .into(),
        context: json!({ "enterpriseId": w.enterprise_id }),
    };
    let eid = w.enterprise_id.as_deref().ok_or_else(no_secret)?;
    let s = secrets::load(&state, eid).await?.ok_or_else(no_secret)?;
    let body = req.notification_payload.as_bytes();
    let valid = crate::delivery::signing::verify_bitgo(&s.current, body, &req.signature)
        | s.previous
            .as_ref()
            .is_some_and(|p| crate::delivery::signing::verify_bitgo(p, body, &req.signature));
    Ok(Json(VerifyResponse { webhook_id: w.id, is_valid: valid }))
}

/// Makes a suspended webhook active again and clears its failure counters.
#[utoipa::path(post, path = "/api/v2/webhook/{webhookId}/unblock", tag = "webhooks",
    security(("bearer" = [])), params(("webhookId" = String, Path)),
    responses((status = 200, body = WebhookResponse), (status = 404, body = ErrorResponse)))]
pub async fn unblock(
    State(state): State<AppState>,
    auth: Auth,
    Path(webhook_id): Path<String>,
) -> Result<Json<WebhookResponse>> {
    let w = webhook_access(&state, &auth, &webhook_id).await?;
    state.store.unblock_webhook(&w.id, ids::now_ms()).await?;
    state.wake.notify_one();
    let w = state.store.webhook_by_id(&w.id).await?.ok_or_else(|| not_found("WebhookNotFound"))?;
    Ok(Json(WebhookResponse::from(&w)))
}

// ----- operator views -----

/// `{notifications: [...]}` (§2.6 with `state` and `payload`).
#[derive(Debug, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct NotificationList {
    #[schema(value_type = Vec<Object>)]
    pub notifications: Vec<Value>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub next_batch_prev_id: Option<String>,
}

/// A webhook's notifications, optionally by state, paged by id.
#[utoipa::path(get, path = "/api/v2/webhook/{webhookId}/notifications", tag = "webhooks",
    security(("bearer" = [])), params(("webhookId" = String, Path), Paging),
    responses((status = 200, body = NotificationList), (status = 404, body = ErrorResponse)))]
pub async fn list_notifications(
    State(state): State<AppState>,
    auth: Auth,
    Path(webhook_id): Path<String>,
    Query(paging): Query<Paging>,
) -> Result<Json<NotificationList>> {
    let w = webhook_access(&state, &auth, &webhook_id).await?;
    let (limit, prev) = paging.checked()?;
    if let Some(s) = &paging.state {
        if !["new", "pending", "processed", "failed"].contains(&s.as_str()) {
            return Err(Error::invalid_field("state", "must be new, pending, processed or failed"));
        }
    }
    let mut rows = state.store.list_notifications(&w.id, paging.state.as_deref(), prev, limit + 1).await?;
    let more = rows.len() > limit as usize;
    rows.truncate(limit as usize);
    Ok(Json(NotificationList {
        next_batch_prev_id: more.then(|| rows.last().map(|n| n.id.clone())).flatten(),
        notifications: rows.iter().map(|n| notify::notification_json(n, &w)).collect(),
    }))
}

/// One recorded attempt.
#[derive(Debug, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct AttemptResponse {
    /// ISO 8601.
    pub started_at: String,
    pub duration_ms: i64,
    pub status_code: Option<u16>,
    pub success: bool,
    /// The first 20 KB of the response body.
    pub response_body: Option<String>,
    pub error: Option<String>,
}

/// `{attempts: [...]}`, oldest first.
#[derive(Debug, Serialize, ToSchema)]
pub struct AttemptList {
    pub attempts: Vec<AttemptResponse>,
}

/// Every delivery attempt of a notification.
#[utoipa::path(get, path = "/api/v2/webhook/{webhookId}/notifications/{notificationId}/attempts", tag = "webhooks",
    security(("bearer" = [])), params(("webhookId" = String, Path), ("notificationId" = String, Path)),
    responses((status = 200, body = AttemptList), (status = 404, body = ErrorResponse)))]
pub async fn list_attempts(
    State(state): State<AppState>,
    auth: Auth,
    Path((webhook_id, notification_id)): Path<(String, String)>,
) -> Result<Json<AttemptList>> {
    let w = webhook_access(&state, &auth, &webhook_id).await?;
    check_id("notificationId", &notification_id)?;
    let n = state
        .store
        .notification_by_id(&w.id, &notification_id)
        .await?
        .ok_or_else(|| not_found("NotificationNotFound"))?;
    let attempts = state.store.attempts(&n.id).await?;
    Ok(Json(AttemptList {
        attempts: attempts
            .into_iter()
            .map(|a| AttemptResponse {
                started_at: ids::iso_ms(a.started_at),
                duration_ms: a.duration_ms,
                status_code: a.status_code,
                success: a.success,
                response_body: a.response_body,
                error: a.error,
            })
            .collect(),
    }))
}

/// Queues a notification for delivery again, now, with its retries reset.
#[utoipa::path(post, path = "/api/v2/webhook/{webhookId}/notifications/{notificationId}/resend", tag = "webhooks",
    security(("bearer" = [])), params(("webhookId" = String, Path), ("notificationId" = String, Path)),
    responses((status = 200, body = Object), (status = 404, body = ErrorResponse)))]
pub async fn resend(
    State(state): State<AppState>,
    auth: Auth,
    Path((webhook_id, notification_id)): Path<(String, String)>,
) -> Result<Json<Value>> {
    let w = webhook_access(&state, &auth, &webhook_id).await?;
    check_id("notificationId", &notification_id)?;
    let n = state
        .store
        .resend_notification(&w.id, &notification_id, ids::now_ms())
        .await?
        .ok_or_else(|| not_found("NotificationNotFound"))?;
    state.wake.notify_one();
    Ok(Json(notify::notification_json(&n, &w)))
}

// ----- events -----

/// An event from an upstream system. Extra fields are kept and delivered in the payload.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct EventRequest {
    /// Unique per event; a repeat returns the first result and sends nothing.
    pub event_id: String,
    /// A webhook type of §6.
    #[serde(rename = "type")]
    pub event_type: String,
    pub coin: Option<String>,
    pub wallet_id: Option<String>,
    pub enterprise_id: Option<String>,
    pub transfer_id: Option<String>,
    pub hash: Option<String>,
    pub block_id: Option<String>,
    pub confirmations: Option<u64>,
    pub state: Option<String>,
}

/// What an event fanned out to.
#[derive(Debug, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct EventResult {
    pub event_id: String,
    /// Notifications queued.
    pub notifications: u64,
    /// Webhooks notified.
    pub webhooks: Vec<String>,
}

/// Fans an event out to every matching active webhook (service admins only). Idempotent on
/// `eventId`.
#[utoipa::path(post, path = "/api/v2/internal/events", tag = "webhooks",
    security(("bearer" = [])), request_body = EventRequest,
    responses((status = 200, body = EventResult), (status = 400, body = ErrorResponse), (status = 403, body = ErrorResponse)))]
pub async fn ingest_event(
    State(state): State<AppState>,
    auth: Auth,
    ApiJson(body): ApiJson<Value>,
) -> Result<Json<EventResult>> {
    auth.require(state.policy(), Action::ServiceAdmin)?;
    ingest(&state, body).await.map(Json)
}

/// Checks an event and records it with its notifications in one transaction (the outbox).
pub async fn ingest(state: &AppState, body: Value) -> Result<EventResult> {
    let ev: EventRequest = crate::http::extract::parse_value(body.clone())?;
    let Value::Object(map) = body else {
        return Err(Error::invalid_field("", "an event must be a JSON object"));
    };
    if ev.event_id.is_empty() || ev.event_id.len() > 200 {
        return Err(Error::invalid_field("eventId", "must be 1 to 200 characters"));
    }
    let t = ev.event_type.as_str();
    let filter = if WALLET_TYPES.contains(&t) {
        let wallet = ev.wallet_id.clone().ok_or_else(|| Error::missing_field("walletId"))?;
        check_id("walletId", &wallet)?;
        WebhookFilter { scope: "wallet".into(), wallet_id: Some(wallet), ..Default::default() }
    } else if BLOCK_TYPES.contains(&t) {
        let coin = ev.coin.clone().ok_or_else(|| Error::missing_field("coin"))?;
        check_coin(&coin)?;
        WebhookFilter { scope: "block".into(), coin: Some(coin), ..Default::default() }
    } else if ENTERPRISE_TYPES.contains(&t) {
        let e = ev.enterprise_id.clone().ok_or_else(|| Error::missing_field("enterpriseId"))?;
        check_id("enterpriseId", &e)?;
        WebhookFilter { scope: "enterprise".into(), enterprise_id: Some(e), ..Default::default() }
    } else {
        let all: Vec<&str> =
            WALLET_TYPES.iter().chain(BLOCK_TYPES).chain(ENTERPRISE_TYPES).copied().collect();
        return Err(invalid_type("known", &all));
    };
    let filter = WebhookFilter { webhook_type: Some(t.into()), state: Some("active".into()), ..filter };
    let confirmations = i64::try_from(ev.confirmations.unwrap_or(0)).unwrap_or(i64::MAX);
    let mut hooks = Vec::new();
    let mut after: Option<String> = None;
    loop {
        let page = state.store.list_webhooks(&filter, after.as_deref(), 500).await?;
        let full = page.len() == 500;
        after = page.last().map(|w| w.id.clone());
        hooks.extend(
            page.into_iter().filter(|w| t != "block" || confirmations >= w.num_confirmations.unwrap_or(0)),
        );
        if !full {
            break;
        }
    }
    let notifications: Vec<Notification> =
        hooks.iter().map(|w| notify::from_event(w, &ev.event_id, &map)).collect();
    let result = EventResult {
        event_id: ev.event_id.clone(),
        notifications: notifications.len() as u64,
        webhooks: hooks.iter().map(|w| w.id.clone()).collect(),
    };
    let result_text = serde_json::to_string(&result).map_err(|e| Error::Internal(e.into()))?;
    let map_text = Value::Object(map.clone()).to_string();
    match state
        .store
        .record_event(&ev.event_id, &map_text, ev.transfer_id.as_deref(), &result_text, &notifications)
        .await?
    {
        Some(previous) => serde_json::from_str(&previous).map_err(|e| Error::Internal(e.into())),
        None => {
            state.wake.notify_one();
            Ok(result)
        }
    }
}

/// The accessToken notifications (§6.3) for a token created with `enterprise`: one per active
/// accessToken webhook of that enterprise. Written with the token (the outbox).
pub async fn access_token_notifications(
    state: &AppState,
    token: &crate::store::TokenRecord,
) -> Result<Vec<Notification>> {
    let Some(e) = &token.enterprise else { return Ok(Vec::new()) };
    let filter = WebhookFilter {
        scope: "enterprise".into(),
        enterprise_id: Some(e.clone()),
        webhook_type: Some("accessToken".into()),
        state: Some("active".into()),
        ..Default::default()
    };
    let hooks = state.store.list_webhooks(&filter, None, 500).await?;
    Ok(hooks
        .iter()
        .map(|w| {
            let payload = notify::access_token_payload(w, Some(token), &token.id);
            notify::enterprise_notification(w, payload, false, Some(&format!("accessToken:{}", token.id)))
        })
        .collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn production_requires_https_callbacks() {
        assert!(check_url("http://example.com/h", Environment::Test).is_ok());
        assert!(check_url("http://example.com/h", Environment::Production).is_err());
        assert!(check_url("https://example.com/h", Environment::Production).is_ok());
        assert!(check_url("https://", Environment::Test).is_err());
        assert!(check_url("mailto:a@b.co", Environment::Test).is_err());
    }

    #[test]
    fn reserved_and_malformed_headers_are_refused() {
        let h = |k: &str, v: &str| BTreeMap::from([(k.to_string(), v.to_string())]);
        assert!(check_headers(&h("X-Api-Key", "abc")).is_ok());
        for reserved in
            ["Host", "content-length", "Webhook-Signature", "X-Signature-SHA256", "Idempotency-Key"]
        {
            assert!(check_headers(&h(reserved, "x")).is_err(), "{reserved}");
        }
        assert!(check_headers(&h("bad name", "x")).is_err());
        assert!(check_headers(&h("X-Ok", "a\r\nInjected: 1")).is_err());
    }
}
