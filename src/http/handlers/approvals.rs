//! Pending-approval routes (docs/withdrawals.md#approvals), in BitGo's paths and shapes: the
//! lists, one approval, and the answers of the people who approve.

use axum::{extract::State, Json};
use serde::{Deserialize, Serialize};
use serde_json::Value;
use utoipa::{IntoParams, ToSchema};

use crate::{
    custody::{
        approvals::{self, Answer},
        views,
    },
    error::Error,
    http::{
        auth::Auth,
        error::ApiResult,
        extract::{ApiJson, ApiPath, ApiQuery},
        ErrorResponse,
    },
    model::custody::ApprovalState,
    types::{ApprovalId, Coin, EnterpriseId, WalletId},
    AppState,
};

/// Query of the pending-approval lists.
#[derive(Debug, Deserialize, IntoParams)]
#[serde(rename_all = "camelCase")]
#[into_params(parameter_in = Query)]
pub struct ApprovalQuery {
    pub wallet_id: Option<WalletId>,
    pub enterprise: Option<EnterpriseId>,
    /// `pending`, `approved` or `rejected`.
    #[param(pattern = "^(pending|approved|rejected|canceled)$")]
    pub state: Option<String>,
    /// 1 to 500; default 100.
    #[param(minimum = 1, maximum = 500)]
    pub limit: Option<u32>,
}

impl ApprovalQuery {
    fn into_list(self, coin: Option<Coin>) -> Result<approvals::ListQuery, Error> {
        let state =
            match self.state.as_deref() {
                None => None,
                Some(s) => Some(ApprovalState::parse(s).ok_or_else(|| {
                    Error::invalid_field("state", "pending, approved, rejected or canceled")
                })?),
            };
        Ok(approvals::ListQuery {
            coin,
            wallet: self.wallet_id,
            enterprise: self.enterprise,
            state,
            limit: self.limit,
        })
    }
}

async fn approval_list(
    state: &AppState,
    auth: &crate::identity::bearer::Principal,
    q: approvals::ListQuery,
) -> ApiResult<Json<Value>> {
    let found = approvals::list(&state.custody, auth, &q).await?;
    let found = approvals::with_withdrawals(&state.custody, found).await?;
    let shown = approvals::shown::shown_all(&state.custody, &found).await?;
    let out: Vec<Value> =
        found.iter().zip(&shown).map(|((a, w), s)| views::approval(a, w.as_ref(), s.as_ref())).collect();
    Ok(Json(serde_json::json!({ "pendingApprovals": out })))
}

/// Pending approvals of a coin's wallets the caller sees (BitGoJS `pendingApprovals().list()`).
#[utoipa::path(get, path = "/api/v2/{coin}/pendingapprovals", tag = "custody", security(("bearer" = [])),
    params(("coin" = Coin, Path, description = "Coin ticker"), ApprovalQuery),
    responses(
        (status = 200, description = "`{pendingApprovals: [...]}`, newest first", body = Object),
        (status = 400, description = "A bad query value", body = ErrorResponse),
        (status = 404, description = "No such wallet, or not visible", body = ErrorResponse),
    ))]
pub async fn list_coin_approvals(
    State(state): State<AppState>,
    Auth(auth): Auth,
    ApiPath(coin): ApiPath<Coin>,
    ApiQuery(q): ApiQuery<ApprovalQuery>,
) -> ApiResult<Json<Value>> {
    let q = q.into_list(Some(coin))?;
    approval_list(&state, &auth, q).await
}

/// Pending approvals of every wallet the caller sees.
#[utoipa::path(get, path = "/api/v2/pendingapprovals", tag = "custody", security(("bearer" = [])),
    params(ApprovalQuery),
    responses(
        (status = 200, description = "`{pendingApprovals: [...]}`, newest first", body = Object),
        (status = 400, description = "A bad query value", body = ErrorResponse),
        (status = 404, description = "No such wallet, or not visible", body = ErrorResponse),
    ))]
pub async fn list_approvals(
    State(state): State<AppState>,
    Auth(auth): Auth,
    ApiQuery(q): ApiQuery<ApprovalQuery>,
) -> ApiResult<Json<Value>> {
    let q = q.into_list(None)?;
    approval_list(&state, &auth, q).await
}

async fn approval_view(state: &AppState, a: &crate::model::custody::Approval) -> ApiResult<Json<Value>> {
    let found = approvals::with_withdrawals(&state.custody, vec![a.clone()]).await?;
    let shown = approvals::shown::shown_all(&state.custody, &found).await?.pop().flatten();
    let w = found.into_iter().next().and_then(|(_, w)| w);
    Ok(Json(views::approval(a, w.as_ref(), shown.as_ref())))
}

/// One pending approval (BitGoJS `pendingApprovals().get({id})`).
#[utoipa::path(get, path = "/api/v2/{coin}/pendingapprovals/{id}", tag = "custody", security(("bearer" = [])),
    params(("coin" = Coin, Path, description = "Coin ticker"), ("id" = ApprovalId, Path, description = "Approval id, 32 hex")),
    responses(
        (status = 200, description = "The pending approval", body = Object),
        (status = 400, description = "A bad path value", body = ErrorResponse),
        (status = 404, description = "No such approval, or not visible", body = ErrorResponse),
    ))]
pub async fn get_coin_approval(
    State(state): State<AppState>,
    Auth(auth): Auth,
    ApiPath((coin, id)): ApiPath<(Coin, ApprovalId)>,
) -> ApiResult<Json<Value>> {
    let a = approvals::get(&state.custody, &auth, Some(&coin), &id).await?;
    approval_view(&state, &a).await
}

/// One pending approval, of any coin.
#[utoipa::path(get, path = "/api/v2/pendingapprovals/{id}", tag = "custody", security(("bearer" = [])),
    params(("id" = ApprovalId, Path, description = "Approval id, 32 hex")),
    responses(
        (status = 200, description = "The pending approval", body = Object),
        (status = 400, description = "A bad path value", body = ErrorResponse),
        (status = 404, description = "No such approval, or not visible", body = ErrorResponse),
    ))]
pub async fn get_approval(
    State(state): State<AppState>,
    Auth(auth): Auth,
    ApiPath(id): ApiPath<ApprovalId>,
) -> ApiResult<Json<Value>> {
    let a = approvals::get(&state.custody, &auth, None, &id).await?;
    approval_view(&state, &a).await
}

/// An answer to a pending approval.
#[derive(Debug, Deserialize, Serialize, ToSchema)]
pub struct ResolveRequest {
    /// `approved` or `rejected`.
    #[schema(pattern = "^(approved|rejected)$")]
    pub state: String,
    /// A fresh TOTP code or passkey assertion; required to approve.
    pub otp: Option<String>,
}

async fn resolve(
    state: &AppState,
    auth: &crate::identity::bearer::Principal,
    coin: Option<&Coin>,
    id: &ApprovalId,
    req: ResolveRequest,
) -> ApiResult<Json<Value>> {
    let answer = match req.state.as_str() {
        "approved" => Answer::Approved,
        "rejected" => Answer::Rejected,
        _ => return Err(Error::invalid_field("state", "approved or rejected").into()),
    };
    let a = approvals::resolve(&state.custody, auth, coin, id, answer, req.otp.as_deref()).await?;
    approval_view(state, &a).await
}

/// Approves or rejects (BitGoJS `approve({otp})` / `reject()`). The last approval hands the
/// withdrawal to the signer.
#[utoipa::path(put, path = "/api/v2/{coin}/pendingapprovals/{id}", tag = "custody", security(("bearer" = [])),
    params(("coin" = Coin, Path, description = "Coin ticker"), ("id" = ApprovalId, Path, description = "Approval id, 32 hex")),
    request_body = ResolveRequest,
    responses(
        (status = 200, description = "The approval after the answer", body = Object),
        (status = 400, description = "A bad field", body = ErrorResponse),
        (status = 401, description = "Not authenticated, or a missing or wrong OTP", body = ErrorResponse),
        (status = 403, description = "Not an approver (the initiator, not a wallet admin, answered already) or no scope", body = ErrorResponse),
        (status = 404, description = "No such approval, or not visible", body = ErrorResponse),
        (status = 409, description = "Not pending any more", body = ErrorResponse),
    ))]
pub async fn resolve_coin_approval(
    State(state): State<AppState>,
    Auth(auth): Auth,
    ApiPath((coin, id)): ApiPath<(Coin, ApprovalId)>,
    ApiJson(req): ApiJson<ResolveRequest>,
) -> ApiResult<Json<Value>> {
    resolve(&state, &auth, Some(&coin), &id, req).await
}

/// Approves or rejects, for any coin.
#[utoipa::path(put, path = "/api/v2/pendingapprovals/{id}", tag = "custody", security(("bearer" = [])),
    params(("id" = ApprovalId, Path, description = "Approval id, 32 hex")),
    request_body = ResolveRequest,
    responses(
        (status = 200, description = "The approval after the answer", body = Object),
        (status = 400, description = "A bad field", body = ErrorResponse),
        (status = 401, description = "Not authenticated, or a missing or wrong OTP", body = ErrorResponse),
        (status = 403, description = "Not an approver or no scope", body = ErrorResponse),
        (status = 404, description = "No such approval, or not visible", body = ErrorResponse),
        (status = 409, description = "Not pending any more", body = ErrorResponse),
    ))]
pub async fn resolve_approval(
    State(state): State<AppState>,
    Auth(auth): Auth,
    ApiPath(id): ApiPath<ApprovalId>,
    ApiJson(req): ApiJson<ResolveRequest>,
) -> ApiResult<Json<Value>> {
    resolve(&state, &auth, None, &id, req).await
}
