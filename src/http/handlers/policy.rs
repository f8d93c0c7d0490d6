//! Wallet policy rules (docs/policy.md), BitGo's paths: `POST`, `PUT` and `DELETE
//! /api/v2/{coin}/wallet/{walletId}/policy/rule`, each answering the wallet as `GET` shows it.

use axum::{
    extract::State,
    http::header,
    response::{IntoResponse, Response},
};
use serde_json::Value;

use crate::{
    custody::policy_rules::{self, RuleChange},
    http::{
        auth::Auth,
        error::ApiResult,
        extract::{ApiJson, ApiPath},
        ErrorResponse,
    },
    model::wallet::{self as model, Expand, WalletRow},
    types::{Coin, WalletId},
    AppState,
};

fn wallet(row: &WalletRow) -> Response {
    let mut body = String::new();
    model::render(row, Expand::default(), &mut body);
    ([(header::CONTENT_TYPE, "application/json")], body).into_response()
}

/// Adds a policy rule (BitGoJS `wallet.createPolicyRule`): `{id, type, condition, action}`, with
/// `type` `coinAddressWhitelist` (`condition.addresses`, or `condition.add`) or `allTx`, and
/// `action.type` `deny`. A new rule applies at once. Answers the wallet, its rules in
/// `admin.policy.rules`.
#[utoipa::path(post, path = "/api/v2/{coin}/wallet/{walletId}/policy/rule", tag = "policy", security(("bearer" = [])),
    params(("coin" = Coin, Path, description = "Coin ticker"), ("walletId" = WalletId, Path, description = "Wallet id, 32 hex")),
    request_body = Object,
    responses(
        (status = 200, description = "The wallet", body = Object),
        (status = 400, description = "A bad rule (`MissingField`, `InvalidField` naming the field)", body = ErrorResponse),
        (status = 403, description = "No wallet_manage, or not an admin of the wallet", body = ErrorResponse),
        (status = 404, description = "No such wallet, or not visible", body = ErrorResponse),
        (status = 409, description = "A rule with this id exists, the wallet holds 50, or it changed meanwhile", body = ErrorResponse),
    ))]
pub async fn create_rule(
    State(state): State<AppState>,
    Auth(auth): Auth,
    ApiPath((coin, wallet_id)): ApiPath<(Coin, WalletId)>,
    ApiJson(body): ApiJson<Value>,
) -> ApiResult<Response> {
    let row =
        policy_rules::change(&state.custody, &auth, &coin, &wallet_id, &body, RuleChange::Create).await?;
    Ok(wallet(&row))
}

/// Changes a policy rule (BitGoJS `wallet.setPolicyRule`), the same body as adding one;
/// `condition.add` / `condition.remove` change a whitelist in place. A change that tightens
/// applies at once; one that loosens (an address added, a changed type or action, more
/// approvers) is refused with `PolicyChangeNeedsApproval`. Answers the wallet.
#[utoipa::path(put, path = "/api/v2/{coin}/wallet/{walletId}/policy/rule", tag = "policy", security(("bearer" = [])),
    params(("coin" = Coin, Path, description = "Coin ticker"), ("walletId" = WalletId, Path, description = "Wallet id, 32 hex")),
    request_body = Object,
    responses(
        (status = 200, description = "The wallet", body = Object),
        (status = 400, description = "A bad rule", body = ErrorResponse),
        (status = 403, description = "No wallet_manage, not an admin of the wallet, or a loosening (`PolicyChangeNeedsApproval`)", body = ErrorResponse),
        (status = 404, description = "No such wallet or rule (`PolicyRuleNotFound`)", body = ErrorResponse),
        (status = 409, description = "The wallet changed meanwhile", body = ErrorResponse),
    ))]
pub async fn update_rule(
    State(state): State<AppState>,
    Auth(auth): Auth,
    ApiPath((coin, wallet_id)): ApiPath<(Coin, WalletId)>,
    ApiJson(body): ApiJson<Value>,
) -> ApiResult<Response> {
    let row =
        policy_rules::change(&state.custody, &auth, &coin, &wallet_id, &body, RuleChange::Update).await?;
    Ok(wallet(&row))
}

/// Removes a policy rule (BitGoJS `wallet.removePolicyRule({id})`). Removing loosens the
/// policy: refused with `PolicyChangeNeedsApproval` until rule changes can be approved.
#[utoipa::path(delete, path = "/api/v2/{coin}/wallet/{walletId}/policy/rule", tag = "policy", security(("bearer" = [])),
    params(("coin" = Coin, Path, description = "Coin ticker"), ("walletId" = WalletId, Path, description = "Wallet id, 32 hex")),
    request_body = Object,
    responses(
        (status = 200, description = "The wallet", body = Object),
        (status = 400, description = "No `id`", body = ErrorResponse),
        (status = 403, description = "No wallet_manage, not an admin of the wallet, or a loosening (`PolicyChangeNeedsApproval`)", body = ErrorResponse),
        (status = 404, description = "No such wallet or rule (`PolicyRuleNotFound`)", body = ErrorResponse),
    ))]
pub async fn remove_rule(
    State(state): State<AppState>,
    Auth(auth): Auth,
    ApiPath((coin, wallet_id)): ApiPath<(Coin, WalletId)>,
    ApiJson(body): ApiJson<Value>,
) -> ApiResult<Response> {
    let row =
        policy_rules::change(&state.custody, &auth, &coin, &wallet_id, &body, RuleChange::Remove).await?;
    Ok(wallet(&row))
}
