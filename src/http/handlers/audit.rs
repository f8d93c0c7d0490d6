//! `GET /api/v2/auditlog` (docs/decisions.md#token-and-session-lifecycle, BitGo's path): the audit entries the caller may see.

use axum::{extract::State, Json};
use serde::{Deserialize, Serialize};
use serde_json::Value;
use utoipa::{IntoParams, ToSchema};

use crate::{
    error::Error,
    http::{auth::Auth, error::ApiResult, extract::ApiQuery, ErrorResponse},
    identity,
    model::audit::{AuditType, ChainedEntry},
    paging::PageRequest,
    store::AuditFilter,
    types::{AnyId, EnterpriseId, TokenId, UserId, WalletId},
    AppState,
};

/// Filters and paging of the audit log.
#[derive(Debug, Deserialize, IntoParams)]
#[serde(rename_all = "camelCase")]
#[into_params(parameter_in = Query)]
pub struct AuditParams {
    /// An entry type, e.g. `login.failed` (docs/audit.md).
    #[serde(rename = "type")]
    #[param(rename = "type")]
    pub entry_type: Option<AuditType>,
    pub user_id: Option<UserId>,
    pub enterprise_id: Option<EnterpriseId>,
    pub wallet_id: Option<WalletId>,
    /// ISO 8601 date-time, inclusive.
    #[param(format = DateTime)]
    pub date_gte: Option<String>,
    /// ISO 8601 date-time, exclusive.
    #[param(format = DateTime)]
    pub date_lt: Option<String>,
    #[param(minimum = 1, maximum = 500)]
    pub limit: Option<u32>,
    /// The last entry id of the previous page.
    pub prev_id: Option<AnyId>,
}

/// One audit entry.
#[derive(Debug, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct AuditEntryView {
    pub id: AnyId,
    /// ISO 8601.
    pub date: String,
    #[serde(rename = "type")]
    pub entry_type: AuditType,
    pub user_id: Option<UserId>,
    pub enterprise_id: Option<EnterpriseId>,
    pub wallet_id: Option<WalletId>,
    pub ip: Option<String>,
    pub token_id: Option<TokenId>,
    pub request_id: Option<String>,
    #[schema(value_type = Object)]
    pub data: Value,
    /// Hex SHA-256 over the previous entry's hash and this entry's canonical JSON.
    pub hash: String,
}

impl From<ChainedEntry> for AuditEntryView {
    fn from(c: ChainedEntry) -> Self {
        let e = c.entry;
        AuditEntryView {
            id: e.id,
            date: crate::clock::iso_ms(e.date_ms),
            entry_type: e.entry_type,
            user_id: e.user_id,
            enterprise_id: e.enterprise_id,
            wallet_id: e.wallet_id,
            ip: e.ip,
            token_id: e.token_id,
            request_id: e.request_id,
            data: e.data,
            hash: c.hash,
        }
    }
}

/// `{auditLogs, nextBatchPrevId}`, newest first.
#[derive(Debug, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct AuditList {
    pub audit_logs: Vec<AuditEntryView>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub next_batch_prev_id: Option<String>,
}

/// An ISO 8601 date-time as Unix milliseconds. Errors: `InvalidField` naming `field`.
fn millis(field: &str, v: Option<String>) -> Result<Option<i64>, Error> {
    v.map(|s| {
        chrono::DateTime::parse_from_rfc3339(&s)
            .map(|d| d.timestamp_millis())
            .map_err(|_| Error::invalid_field(field, "an ISO 8601 date-time"))
    })
    .transpose()
}

/// The audit entries the caller may see: their own, their enterprises' as an admin, all as a
/// service admin. Needs `auditlogs_view_all` or a login session.
#[utoipa::path(get, path = "/api/v2/auditlog", tag = "identity", security(("bearer" = [])),
    params(AuditParams),
    responses((status = 200, body = AuditList),
        (status = 400, description = "A bad query value", body = ErrorResponse),
        (status = 403, description = "Neither auditlogs_view_all nor a login session", body = ErrorResponse),))]
pub async fn list(
    State(state): State<AppState>,
    Auth(auth): Auth,
    ApiQuery(p): ApiQuery<AuditParams>,
) -> ApiResult<Json<AuditList>> {
    let page = PageRequest::new(p.limit, p.prev_id)?;
    let q = AuditFilter {
        entry_type: p.entry_type,
        user_id: p.user_id,
        enterprise_id: p.enterprise_id,
        wallet_id: p.wallet_id,
        date_gte_ms: millis("dateGte", p.date_gte)?,
        date_lt_ms: millis("dateLt", p.date_lt)?,
        visible_to: None,
    };
    let page = identity::audit_log::list(&state.identity, &auth, q, &page).await?;
    Ok(Json(AuditList {
        audit_logs: page.items.into_iter().map(Into::into).collect(),
        next_batch_prev_id: page.next_batch_prev_id,
    }))
}
