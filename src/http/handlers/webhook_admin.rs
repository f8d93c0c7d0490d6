//! Webhook secrets, signature verification, unblocking, and the operator's views of
//! notifications and attempts (spec §2.6, §2.7). Handlers call `crate::webhooks::{secret,
//! registration, notification_log}`.

use axum::{extract::State, Json};
use serde::{Deserialize, Serialize};
use serde_json::Value;
use utoipa::ToSchema;

use crate::{
    http::{
        auth::Auth,
        error::ApiResult,
        extract::{ApiJson, ApiPath, ApiQuery},
        ErrorResponse,
    },
    notifications,
    paging::PageRequest,
    types::{Coin, EnterpriseId, NotificationId, WebhookId},
    webhooks::{notification_log, registration, secret},
    AppState,
};

use super::webhooks::{NotificationPaging, WebhookResponse};

// ----- secrets and verification -----

/// Body of POST /api/v2/webhook/secret.
#[derive(Debug, Deserialize, ToSchema, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct CreateSecretRequest {
    pub enterprise_id: EnterpriseId,
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
    responses((status = 200, body = SecretResponse),
        (status = 400, description = "A bad path, query or body value", body = ErrorResponse),
        (status = 403, description = "The token or role does not permit this", body = ErrorResponse),
        (status = 404, description = "No such resource, or not visible", body = ErrorResponse),
        (status = 429, description = "Rotated less than 5 minutes ago", body = ErrorResponse)))]
pub async fn create_secret(
    State(state): State<AppState>,
    Auth(auth): Auth,
    ApiJson(req): ApiJson<CreateSecretRequest>,
) -> ApiResult<Json<SecretResponse>> {
    let secret = secret::rotate(&state.webhooks, &auth, &req.enterprise_id).await?;
    Ok(Json(SecretResponse { secret }))
}

/// Body of §4.10.
#[derive(Debug, Deserialize, ToSchema, Serialize)]
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
    pub webhook_id: WebhookId,
    pub is_valid: bool,
}

/// Verifies a received notification against the webhook's enterprise secret (§4.10).
#[utoipa::path(post, path = "/api/v2/webhook/{webhookId}/verify", tag = "webhooks",
    security(("bearer" = [])), request_body = VerifyRequest, params(("webhookId" = WebhookId, Path)),
    responses((status = 200, body = VerifyResponse),
        (status = 400, description = "A bad path, query or body value", body = ErrorResponse),
        (status = 403, description = "The token or role does not permit this", body = ErrorResponse),
        (status = 404, description = "No such resource, or not visible", body = ErrorResponse)))]
pub async fn verify(
    State(state): State<AppState>,
    Auth(auth): Auth,
    ApiPath(webhook_id): ApiPath<WebhookId>,
    ApiJson(req): ApiJson<VerifyRequest>,
) -> ApiResult<Json<VerifyResponse>> {
    let is_valid =
        secret::verify(&state.webhooks, &auth, &webhook_id, &req.signature, &req.notification_payload)
            .await?;
    Ok(Json(VerifyResponse { webhook_id, is_valid }))
}

/// Makes a suspended webhook active again and clears its failure counters.
#[utoipa::path(post, path = "/api/v2/webhook/{webhookId}/unblock", tag = "webhooks",
    security(("bearer" = [])), params(("webhookId" = WebhookId, Path)),
    responses((status = 200, body = WebhookResponse),
        (status = 400, description = "A bad path, query or body value", body = ErrorResponse),
        (status = 403, description = "The token or role does not permit this", body = ErrorResponse),
        (status = 404, description = "No such resource, or not visible", body = ErrorResponse),
        (status = 429, description = "Too many simulate, resend or unblock calls for this webhook (webhooks.operations_per_minute)", body = ErrorResponse),))]
pub async fn unblock(
    State(state): State<AppState>,
    Auth(auth): Auth,
    ApiPath(webhook_id): ApiPath<WebhookId>,
) -> ApiResult<Json<WebhookResponse>> {
    let w = registration::unblock(&state.webhooks, &auth, &webhook_id).await?;
    Ok(Json(WebhookResponse::from(&w)))
}

// ----- operator views -----

/// `{notifications: [...]}` (§2.6 with `state` and `payload`).
#[derive(Debug, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct NotificationList {
    #[schema(value_type = Vec<Object>)]
    pub notifications: Vec<Value>,
    /// Only for a suspended webhook: notifications it holds until it is unblocked.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub held: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub next_batch_prev_id: Option<String>,
}

/// A webhook's notifications, optionally by state, paged by id.
#[utoipa::path(get, path = "/api/v2/webhook/{webhookId}/notifications", tag = "webhooks",
    security(("bearer" = [])), params(("webhookId" = WebhookId, Path), NotificationPaging),
    responses((status = 200, body = NotificationList),
        (status = 400, description = "A bad path, query or body value", body = ErrorResponse),
        (status = 403, description = "The token or role does not permit this", body = ErrorResponse),
        (status = 404, description = "No such resource, or not visible", body = ErrorResponse),))]
pub async fn list_notifications(
    State(state): State<AppState>,
    Auth(auth): Auth,
    ApiPath(webhook_id): ApiPath<WebhookId>,
    ApiQuery(paging): ApiQuery<NotificationPaging>,
) -> ApiResult<Json<NotificationList>> {
    let page = PageRequest::new(paging.limit, paging.prev_id)?;
    let (w, p, held) =
        notification_log::notifications(&state.webhooks, &auth, &webhook_id, paging.state.as_deref(), &page)
            .await?;
    Ok(Json(NotificationList {
        notifications: p.items.iter().map(|n| notifications::notification_json(n, &w)).collect(),
        held,
        next_batch_prev_id: p.next_batch_prev_id,
    }))
}

/// BitGo's `GET /api/v2/{coin}/webhooks/notifications` (docs/decisions.md#signed-requests): the notifications of the
/// caller's block webhooks of `coin`, merged by id, optionally in one `state`, paged by `prevId`
/// and `limit`.
#[utoipa::path(get, path = "/api/v2/{coin}/webhooks/notifications", tag = "webhooks",
    security(("bearer" = [])), params(("coin" = Coin, Path, description = "Coin ticker"), NotificationPaging),
    responses((status = 200, body = NotificationList),
        (status = 400, description = "A bad path or query value", body = ErrorResponse),
        (status = 403, description = "The token or role does not permit this", body = ErrorResponse),))]
pub async fn list_coin_notifications(
    State(state): State<AppState>,
    Auth(auth): Auth,
    ApiPath(coin): ApiPath<Coin>,
    ApiQuery(paging): ApiQuery<NotificationPaging>,
) -> ApiResult<Json<NotificationList>> {
    let page = PageRequest::new(paging.limit, paging.prev_id)?;
    let p =
        notification_log::coin_notifications(&state.webhooks, &auth, &coin, paging.state.as_deref(), &page)
            .await?;
    Ok(Json(NotificationList {
        notifications: p.items.iter().map(|(w, n)| notifications::notification_json(n, w)).collect(),
        held: None,
        next_batch_prev_id: p.next_batch_prev_id,
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
    security(("bearer" = [])), params(("webhookId" = WebhookId, Path), ("notificationId" = NotificationId, Path)),
    responses((status = 200, body = AttemptList),
        (status = 400, description = "A bad path, query or body value", body = ErrorResponse),
        (status = 403, description = "The token or role does not permit this", body = ErrorResponse),
        (status = 404, description = "No such resource, or not visible", body = ErrorResponse),))]
pub async fn list_attempts(
    State(state): State<AppState>,
    Auth(auth): Auth,
    ApiPath((webhook_id, notification_id)): ApiPath<(WebhookId, NotificationId)>,
) -> ApiResult<Json<AttemptList>> {
    let attempts = notification_log::attempts(&state.webhooks, &auth, &webhook_id, &notification_id).await?;
    Ok(Json(AttemptList {
        attempts: attempts
            .into_iter()
            .map(|a| AttemptResponse {
                started_at: crate::clock::iso_ms(a.started_at_ms),
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
    security(("bearer" = [])), params(("webhookId" = WebhookId, Path), ("notificationId" = NotificationId, Path)),
    responses((status = 200, body = Object),
        (status = 400, description = "A bad path, query or body value", body = ErrorResponse),
        (status = 403, description = "The token or role does not permit this", body = ErrorResponse),
        (status = 404, description = "No such resource, or not visible", body = ErrorResponse),
        (status = 429, description = "Too many simulate, resend or unblock calls for this webhook (webhooks.operations_per_minute)", body = ErrorResponse),))]
pub async fn resend(
    State(state): State<AppState>,
    Auth(auth): Auth,
    ApiPath((webhook_id, notification_id)): ApiPath<(WebhookId, NotificationId)>,
) -> ApiResult<Json<Value>> {
    let (n, w) = notification_log::resend(&state.webhooks, &auth, &webhook_id, &notification_id).await?;
    Ok(Json(notifications::notification_json(&n, &w)))
}

/// Body of POST /api/v2/webhook/{webhookId}/recover.
#[derive(Debug, Deserialize, ToSchema, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct RecoverRequest {
    /// ISO 8601 date-time: notifications created at or after it that failed for good are
    /// queued again. At most 14 days ago, not in the future.
    pub since: String,
}

/// How many failed notifications were queued again.
#[derive(Debug, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct RecoverResponse {
    pub webhook_id: WebhookId,
    /// At most `webhooks.recover_max` (10,000) per call; call again for more.
    pub count: u64,
}

/// Redelivers every failed notification of a webhook created since a time (docs/decisions.md#the-operator-console, as
/// Svix's "recover"): each is queued now with its retries reset, oldest first, at most
/// `webhooks.recover_max` per call. Audited as `webhook.recovered`; counts against
/// `webhooks.operations_per_minute`.
#[utoipa::path(post, path = "/api/v2/webhook/{webhookId}/recover", tag = "webhooks",
    security(("bearer" = [])), params(("webhookId" = WebhookId, Path)), request_body = RecoverRequest,
    responses((status = 200, body = RecoverResponse),
        (status = 400, description = "A bad path or body value; `since` more than 14 days back or in the future", body = ErrorResponse),
        (status = 403, description = "The token or role does not permit this", body = ErrorResponse),
        (status = 404, description = "No such resource, or not visible", body = ErrorResponse),
        (status = 429, description = "Too many simulate, resend, unblock or recover calls for this webhook (webhooks.operations_per_minute)", body = ErrorResponse),))]
pub async fn recover(
    State(state): State<AppState>,
    Auth(auth): Auth,
    ApiPath(webhook_id): ApiPath<WebhookId>,
    ApiJson(req): ApiJson<RecoverRequest>,
) -> ApiResult<Json<RecoverResponse>> {
    let since = chrono::DateTime::parse_from_rfc3339(req.since.trim())
        .map_err(|_| crate::error::Error::invalid_field("since", "an ISO 8601 date-time"))?
        .timestamp_millis();
    let (w, count) = crate::webhooks::search::recover(&state.webhooks, &auth, &webhook_id, since).await?;
    Ok(Json(RecoverResponse { webhook_id: w.id, count }))
}
