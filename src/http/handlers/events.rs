//! Event ingestion: `POST /api/v2/internal/events` (service admins), the HTTP face of
//! [`crate::webhooks::events::ingest`].

use axum::{extract::State, Json};

use crate::{
    http::{auth::Auth, error::ApiResult, extract::JsonBody, ErrorResponse},
    webhooks::events::{self, EventRequest, EventResult},
    AppState,
};

/// Fans an event out to every matching active webhook (service admins only). Idempotent on
/// `eventId`.
#[utoipa::path(post, path = "/api/v2/internal/events", tag = "webhooks",
    security(("bearer" = [])), request_body = EventRequest,
    responses((status = 200, body = EventResult),
        (status = 400, description = "A bad path, query or body value", body = ErrorResponse),
        (status = 403, description = "The token or role does not permit this", body = ErrorResponse),
        (status = 404, description = "No such resource, or not visible", body = ErrorResponse)))]
pub async fn ingest_event(
    State(state): State<AppState>,
    Auth(auth): Auth,
    JsonBody(body): JsonBody,
) -> ApiResult<Json<EventResult>> {
    Ok(Json(events::ingest_as(&state.webhooks, &auth, body).await?))
}
