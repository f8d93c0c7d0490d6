//! Webhook routes (spec §4.4 to §4.10) and the operator's views. Each handler extracts typed
//! values, calls one function of `crate::webhooks`, and shapes §2.5, §2.6 or §2.7.

use std::collections::BTreeMap;

use axum::{extract::State, http::StatusCode, Json};
use serde::{Deserialize, Serialize};
use serde_json::Value;
use utoipa::{IntoParams, ToSchema};

use crate::{
    http::{
        auth::Auth,
        error::ApiResult,
        extract::{ApiJson, ApiPath, ApiQuery},
        ErrorResponse,
    },
    model::webhook::{Webhook, WebhookLevel},
    notifications,
    paging::{Page, PageRequest},
    types::{AnyId, Coin, EnterpriseId, UserId, WalletId, WebhookId},
    webhooks::{
        self,
        registration::{self, Level, NewWebhook, Removal},
        simulate,
    },
    AppState,
};

/// Request body of §4.4, §4.6 and §4.8.
#[derive(Debug, Deserialize, ToSchema, Serialize)]
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

impl From<CreateWebhookRequest> for NewWebhook {
    fn from(r: CreateWebhookRequest) -> Self {
        NewWebhook {
            webhook_type: r.webhook_type,
            url: r.url,
            label: r.label,
            listen_to_failure_states: r.listen_to_failure_states,
            custom_http_headers: r.custom_http_headers,
            tx_request_states: r.tx_request_states,
            tx_request_transaction_states: r.tx_request_transaction_states,
            num_confirmations: r.num_confirmations,
            allow_blocked_hosts: r.allow_blocked_hosts,
        }
    }
}

/// A webhook (§2.5), with the fields of its level.
#[derive(Debug, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct WebhookResponse {
    pub id: WebhookId,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub label: Option<String>,
    /// ISO 8601.
    pub created: String,
    /// `wallet` or `enterprise`; absent on block webhooks.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub scope: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub wallet_id: Option<WalletId>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub enterprise_id: Option<EnterpriseId>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub user_id: Option<UserId>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub coin: Option<Coin>,
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
        let (scope, wallet_id, enterprise_id, user_id, coin, num_confirmations) = match &w.level {
            WebhookLevel::Wallet { coin, wallet_id, num_confirmations, .. } => (
                Some("wallet".into()),
                Some(wallet_id.clone()),
                None,
                None,
                Some(coin.clone()),
                Some(*num_confirmations),
            ),
            WebhookLevel::Enterprise { enterprise_id } => {
                (Some("enterprise".into()), None, Some(enterprise_id.clone()), None, None, None)
            }
            WebhookLevel::Block { coin, num_confirmations, .. } => {
                (None, None, None, Some(w.user_id.clone()), Some(coin.clone()), Some(*num_confirmations))
            }
        };
        WebhookResponse {
            id: w.id.clone(),
            label: w.label.clone(),
            created: crate::clock::iso(w.created_at),
            scope,
            wallet_id,
            enterprise_id,
            user_id,
            coin,
            webhook_type: w.webhook_type.clone(),
            url: w.url.clone(),
            version: webhooks::VERSION,
            num_confirmations,
            state: w.state.as_str().to_string(),
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

impl From<Page<Webhook>> for WebhookList {
    fn from(p: Page<Webhook>) -> Self {
        WebhookList {
            webhooks: p.items.iter().map(WebhookResponse::from).collect(),
            next_batch_prev_id: p.next_batch_prev_id,
        }
    }
}

/// Paging of list routes: `limit` (1..=500, default 100) and `prevId` (the last id seen).
#[derive(Debug, Deserialize, IntoParams)]
#[serde(rename_all = "camelCase")]
#[into_params(parameter_in = Query)]
pub struct Paging {
    #[param(minimum = 1, maximum = 500)]
    pub limit: Option<u32>,
    pub prev_id: Option<AnyId>,
}

impl Paging {
    pub fn checked(self) -> crate::error::Result<PageRequest> {
        PageRequest::new(self.limit, self.prev_id)
    }
}

/// Paging of a notification list, with an optional state.
#[derive(Debug, Deserialize, IntoParams)]
#[serde(rename_all = "camelCase")]
#[into_params(parameter_in = Query)]
pub struct NotificationPaging {
    #[param(minimum = 1, maximum = 500)]
    pub limit: Option<u32>,
    pub prev_id: Option<AnyId>,
    /// `new`, `pending`, `processed` or `failed`.
    #[param(pattern = "^(new|pending|processed|failed)$")]
    pub state: Option<String>,
}

/// Body of the removal routes: `{id}` or `{type, url}`.
#[derive(Debug, Deserialize, ToSchema, Serialize)]
pub struct RemoveWebhookRequest {
    pub id: Option<WebhookId>,
    #[serde(rename = "type")]
    pub webhook_type: Option<String>,
    pub url: Option<String>,
}

/// `{removed: n}`.
#[derive(Debug, Serialize, ToSchema)]
pub struct Removed {
    pub removed: u64,
}

impl RemoveWebhookRequest {
    fn removal(self) -> crate::error::Result<Removal> {
        Removal::parse(self.id, self.webhook_type, self.url)
    }
}

/// `{webhookNotifications: [...]}` (§4.5, §4.7, §4.9).
#[derive(Debug, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct SimulateResponse {
    /// Notifications (§2.6) with `simulation: true`, `state: "new"`, and `payload`.
    #[schema(value_type = Vec<Object>)]
    pub webhook_notifications: Vec<Value>,
}

/// Body of the simulate routes: the id the notification is built from.
#[derive(Debug, Default, Deserialize, ToSchema, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct SimulateRequest {
    pub transfer_id: Option<String>,
    /// For a pendingapproval webhook (BitGoJS's `simulateWebhook({pendingApprovalId})`).
    pub pending_approval_id: Option<String>,
    pub block_id: Option<String>,
    pub access_token_id: Option<String>,
}

fn simulated(n: &crate::model::notification::Notification, w: &Webhook) -> Json<SimulateResponse> {
    Json(SimulateResponse { webhook_notifications: vec![notifications::notification_json(n, w)] })
}

// ----- wallet webhooks -----

/// Adds a wallet webhook (§4.4). Needs wallet_manage on the wallet, in any form.
#[utoipa::path(post, path = "/api/v2/{coin}/wallet/{walletId}/webhooks", tag = "webhooks",
    security(("bearer" = [])), request_body = CreateWebhookRequest,
    params(("coin" = Coin, Path), ("walletId" = WalletId, Path)),
    responses((status = 200, body = WebhookResponse),
        (status = 400, description = "A bad path, query or body value", body = ErrorResponse),
        (status = 403, description = "The token or role does not permit this", body = ErrorResponse),
        (status = 404, description = "No such resource, or not visible", body = ErrorResponse)))]
pub async fn create_wallet_webhook(
    State(state): State<AppState>,
    Auth(auth): Auth,
    ApiPath((coin, wallet_id)): ApiPath<(Coin, WalletId)>,
    ApiJson(req): ApiJson<CreateWebhookRequest>,
) -> ApiResult<Json<WebhookResponse>> {
    let level = Level::Wallet { coin: &coin, wallet_id: &wallet_id };
    let w = registration::create(&state.webhooks, &auth, level, req.into()).await?;
    Ok(Json(WebhookResponse::from(&w)))
}

/// Lists a wallet's webhooks.
#[utoipa::path(get, path = "/api/v2/{coin}/wallet/{walletId}/webhooks", tag = "webhooks",
    security(("bearer" = [])), params(("coin" = Coin, Path), ("walletId" = WalletId, Path), Paging),
    responses((status = 200, body = WebhookList),
        (status = 400, description = "A bad path, query or body value", body = ErrorResponse),
        (status = 403, description = "The token or role does not permit this", body = ErrorResponse),
        (status = 404, description = "No such resource, or not visible", body = ErrorResponse),))]
pub async fn list_wallet_webhooks(
    State(state): State<AppState>,
    Auth(auth): Auth,
    ApiPath((coin, wallet_id)): ApiPath<(Coin, WalletId)>,
    ApiQuery(paging): ApiQuery<Paging>,
) -> ApiResult<Json<WebhookList>> {
    let level = Level::Wallet { coin: &coin, wallet_id: &wallet_id };
    let page = paging.checked()?;
    Ok(Json(registration::list(&state.webhooks, &auth, level, &page).await?.into()))
}

/// Removes wallet webhooks by `{id}` or `{type, url}`.
#[utoipa::path(delete, path = "/api/v2/{coin}/wallet/{walletId}/webhooks", tag = "webhooks",
    security(("bearer" = [])), params(("coin" = Coin, Path), ("walletId" = WalletId, Path)),
    request_body = RemoveWebhookRequest, responses((status = 200, body = Removed),
        (status = 400, description = "A bad path, query or body value", body = ErrorResponse),
        (status = 403, description = "The token or role does not permit this", body = ErrorResponse),
        (status = 404, description = "No such resource, or not visible", body = ErrorResponse)))]
pub async fn remove_wallet_webhooks(
    State(state): State<AppState>,
    Auth(auth): Auth,
    ApiPath((coin, wallet_id)): ApiPath<(Coin, WalletId)>,
    ApiJson(req): ApiJson<RemoveWebhookRequest>,
) -> ApiResult<Json<Removed>> {
    let level = Level::Wallet { coin: &coin, wallet_id: &wallet_id };
    let removed = registration::remove(&state.webhooks, &auth, level, req.removal()?).await?;
    Ok(Json(Removed { removed }))
}

// ----- block webhooks -----

/// Adds a block webhook (§4.6), owned by the calling user.
#[utoipa::path(post, path = "/api/v2/{coin}/webhooks", tag = "webhooks",
    security(("bearer" = [])), request_body = CreateWebhookRequest, params(("coin" = Coin, Path)),
    responses((status = 200, body = WebhookResponse),
        (status = 400, description = "A bad path, query or body value", body = ErrorResponse),
        (status = 403, description = "The token or role does not permit this", body = ErrorResponse),
        (status = 404, description = "No such resource, or not visible", body = ErrorResponse)))]
pub async fn create_block_webhook(
    State(state): State<AppState>,
    Auth(auth): Auth,
    ApiPath(coin): ApiPath<Coin>,
    ApiJson(req): ApiJson<CreateWebhookRequest>,
) -> ApiResult<Json<WebhookResponse>> {
    let w = registration::create(&state.webhooks, &auth, Level::Block { coin: &coin }, req.into()).await?;
    Ok(Json(WebhookResponse::from(&w)))
}

/// Lists the caller's block webhooks for a coin.
#[utoipa::path(get, path = "/api/v2/{coin}/webhooks", tag = "webhooks",
    security(("bearer" = [])), params(("coin" = Coin, Path), Paging),
    responses((status = 200, body = WebhookList),
        (status = 400, description = "A bad path, query or body value", body = ErrorResponse),
        (status = 403, description = "The token or role does not permit this", body = ErrorResponse),
        (status = 404, description = "No such resource, or not visible", body = ErrorResponse),))]
pub async fn list_block_webhooks(
    State(state): State<AppState>,
    Auth(auth): Auth,
    ApiPath(coin): ApiPath<Coin>,
    ApiQuery(paging): ApiQuery<Paging>,
) -> ApiResult<Json<WebhookList>> {
    let page = paging.checked()?;
    Ok(Json(registration::list(&state.webhooks, &auth, Level::Block { coin: &coin }, &page).await?.into()))
}

/// Removes the caller's block webhooks by `{id}` or `{type, url}`.
#[utoipa::path(delete, path = "/api/v2/{coin}/webhooks", tag = "webhooks",
    security(("bearer" = [])), params(("coin" = Coin, Path)), request_body = RemoveWebhookRequest,
    responses((status = 200, body = Removed),
        (status = 400, description = "A bad path, query or body value", body = ErrorResponse),
        (status = 403, description = "The token or role does not permit this", body = ErrorResponse),
        (status = 404, description = "No such resource, or not visible", body = ErrorResponse)))]
pub async fn remove_block_webhooks(
    State(state): State<AppState>,
    Auth(auth): Auth,
    ApiPath(coin): ApiPath<Coin>,
    ApiJson(req): ApiJson<RemoveWebhookRequest>,
) -> ApiResult<Json<Removed>> {
    let removed =
        registration::remove(&state.webhooks, &auth, Level::Block { coin: &coin }, req.removal()?).await?;
    Ok(Json(Removed { removed }))
}

// ----- enterprise webhooks -----

/// Creates an enterprise webhook (§4.8). Enterprise admins only.
#[utoipa::path(post, path = "/api/v2/enterprise/{enterpriseId}/webhooks", tag = "webhooks",
    security(("bearer" = [])), request_body = CreateWebhookRequest, params(("enterpriseId" = EnterpriseId, Path)),
    responses((status = 200, body = WebhookResponse),
        (status = 400, description = "A bad path, query or body value", body = ErrorResponse),
        (status = 403, description = "The token or role does not permit this", body = ErrorResponse),
        (status = 404, description = "No such resource, or not visible", body = ErrorResponse)))]
pub async fn create_enterprise_webhook(
    State(state): State<AppState>,
    Auth(auth): Auth,
    ApiPath(enterprise_id): ApiPath<EnterpriseId>,
    ApiJson(req): ApiJson<CreateWebhookRequest>,
) -> ApiResult<Json<WebhookResponse>> {
    let level = Level::Enterprise { enterprise_id: &enterprise_id };
    let w = registration::create(&state.webhooks, &auth, level, req.into()).await?;
    Ok(Json(WebhookResponse::from(&w)))
}

/// Lists an enterprise's webhooks.
#[utoipa::path(get, path = "/api/v2/enterprise/{enterpriseId}/webhooks", tag = "webhooks",
    security(("bearer" = [])), params(("enterpriseId" = EnterpriseId, Path), Paging),
    responses((status = 200, body = WebhookList),
        (status = 400, description = "A bad path, query or body value", body = ErrorResponse),
        (status = 403, description = "The token or role does not permit this", body = ErrorResponse),
        (status = 404, description = "No such resource, or not visible", body = ErrorResponse),))]
pub async fn list_enterprise_webhooks(
    State(state): State<AppState>,
    Auth(auth): Auth,
    ApiPath(enterprise_id): ApiPath<EnterpriseId>,
    ApiQuery(paging): ApiQuery<Paging>,
) -> ApiResult<Json<WebhookList>> {
    let level = Level::Enterprise { enterprise_id: &enterprise_id };
    let page = paging.checked()?;
    Ok(Json(registration::list(&state.webhooks, &auth, level, &page).await?.into()))
}

/// Removes an enterprise webhook; 204.
#[utoipa::path(delete, path = "/api/v2/enterprise/{enterpriseId}/webhook/{webhookId}", tag = "webhooks",
    security(("bearer" = [])), params(("enterpriseId" = EnterpriseId, Path), ("webhookId" = WebhookId, Path)),
    responses((status = 204, description = "Removed"),
        (status = 400, description = "A bad path, query or body value", body = ErrorResponse),
        (status = 403, description = "The token or role does not permit this", body = ErrorResponse),
        (status = 404, description = "No such resource, or not visible", body = ErrorResponse),))]
pub async fn remove_enterprise_webhook(
    State(state): State<AppState>,
    Auth(auth): Auth,
    ApiPath((enterprise_id, webhook_id)): ApiPath<(EnterpriseId, WebhookId)>,
) -> ApiResult<StatusCode> {
    registration::remove_enterprise_webhook(&state.webhooks, &auth, &enterprise_id, &webhook_id).await?;
    Ok(StatusCode::NO_CONTENT)
}

// ----- simulate -----

/// Simulates a wallet webhook notification (§4.5) and queues it for delivery.
#[utoipa::path(post, path = "/api/v2/{coin}/wallet/{walletId}/webhooks/{webhookId}/simulate", tag = "webhooks",
    security(("bearer" = [])), request_body = SimulateRequest,
    params(("coin" = Coin, Path), ("walletId" = WalletId, Path), ("webhookId" = WebhookId, Path)),
    responses((status = 200, body = SimulateResponse),
        (status = 400, description = "A bad path, query or body value", body = ErrorResponse),
        (status = 403, description = "The token or role does not permit this", body = ErrorResponse),
        (status = 404, description = "No such resource, or not visible", body = ErrorResponse),
        (status = 429, description = "Too many simulate, resend or unblock calls for this webhook (webhooks.operations_per_minute)", body = ErrorResponse)))]
pub async fn simulate_wallet_webhook(
    State(state): State<AppState>,
    Auth(auth): Auth,
    ApiPath((coin, wallet_id, webhook_id)): ApiPath<(Coin, WalletId, WebhookId)>,
    ApiJson(req): ApiJson<SimulateRequest>,
) -> ApiResult<Json<SimulateResponse>> {
    let ids = (&coin, &wallet_id, &webhook_id);
    let (transfer, approval) = (req.transfer_id.as_deref(), req.pending_approval_id.as_deref());
    let (n, w) = simulate::wallet(&state.webhooks, &auth, ids, transfer, approval).await?;
    Ok(simulated(&n, &w))
}

/// Simulates a block webhook notification (§4.7) and queues it for delivery.
#[utoipa::path(post, path = "/api/v2/{coin}/webhooks/{webhookId}/simulate", tag = "webhooks",
    security(("bearer" = [])), request_body = SimulateRequest,
    params(("coin" = Coin, Path), ("webhookId" = WebhookId, Path)),
    responses((status = 200, body = SimulateResponse),
        (status = 400, description = "A bad path, query or body value", body = ErrorResponse),
        (status = 403, description = "The token or role does not permit this", body = ErrorResponse),
        (status = 404, description = "No such resource, or not visible", body = ErrorResponse),
        (status = 429, description = "Too many simulate, resend or unblock calls for this webhook (webhooks.operations_per_minute)", body = ErrorResponse)))]
pub async fn simulate_block_webhook(
    State(state): State<AppState>,
    Auth(auth): Auth,
    ApiPath((coin, webhook_id)): ApiPath<(Coin, WebhookId)>,
    ApiJson(req): ApiJson<SimulateRequest>,
) -> ApiResult<Json<SimulateResponse>> {
    let (n, w) = simulate::block(&state.webhooks, &auth, &coin, &webhook_id, req.block_id.as_deref()).await?;
    Ok(simulated(&n, &w))
}

/// Simulates an enterprise webhook notification (§4.9) and queues it for delivery.
#[utoipa::path(post, path = "/api/v2/enterprise/{enterpriseId}/webhook/{webhookId}/simulate", tag = "webhooks",
    security(("bearer" = [])), request_body = SimulateRequest,
    params(("enterpriseId" = EnterpriseId, Path), ("webhookId" = WebhookId, Path)),
    responses((status = 200, body = SimulateResponse),
        (status = 400, description = "A bad path, query or body value", body = ErrorResponse),
        (status = 403, description = "The token or role does not permit this", body = ErrorResponse),
        (status = 404, description = "No such resource, or not visible", body = ErrorResponse),
        (status = 429, description = "Too many simulate, resend or unblock calls for this webhook (webhooks.operations_per_minute)", body = ErrorResponse)))]
pub async fn simulate_enterprise_webhook(
    State(state): State<AppState>,
    Auth(auth): Auth,
    ApiPath((enterprise_id, webhook_id)): ApiPath<(EnterpriseId, WebhookId)>,
    ApiJson(req): ApiJson<SimulateRequest>,
) -> ApiResult<Json<SimulateResponse>> {
    let (n, w) = simulate::enterprise(
        &state.webhooks,
        &auth,
        &enterprise_id,
        &webhook_id,
        req.access_token_id.as_deref(),
    )
    .await?;
    Ok(simulated(&n, &w))
}
