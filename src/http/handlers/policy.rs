//! Wallet policy rules (docs/policy.md), BitGo's paths: `POST`, `PUT` and `DELETE
//! /api/v2/{coin}/wallet/{walletId}/policy/rule`, each answering the wallet as `GET` shows it.

use axum::{
    extract::State,
    http::header,
    response::{IntoResponse, Response},
    Json,
};
use serde::{Deserialize, Serialize};
use serde_json::Value;
use utoipa::ToSchema;

use crate::{
    custody::{
        policy::{
            enterprise as policy_enterprise,
            rules::{self as policy_rules, Changed, RuleChange},
        },
        withdrawal::RecipientRequest,
    },
    http::handlers::custody::InitiateRecipient,
    http::{
        auth::Auth,
        error::ApiResult,
        extract::{ApiJson, ApiPath},
        ErrorResponse,
    },
    model::wallet::{self as model, Expand},
    types::{Coin, EnterpriseId, WalletId},
    AppState,
};

/// A rule's action (docs/policy.md).
#[derive(Debug, Deserialize, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct RuleAction {
    /// `deny`: a withdrawal the rule fires for is refused. `getApproval`: it needs an approval
    /// by one of `userIds`. `getFinalApproval`: it needs one more approval, by one of `userIds`,
    /// after all the others.
    #[serde(rename = "type")]
    #[schema(pattern = "^(deny|getApproval|getFinalApproval)$")]
    pub kind: String,
    /// User ids (32 hex), admins of the wallet: who may give the approval the rule asks for;
    /// absent: any wallet admin but the initiator. None for `deny`.
    #[schema(max_items = 50)]
    pub user_ids: Option<Vec<String>>,
}

/// Body of `POST` / `PUT .../policy/rule` (BitGoJS `createPolicyRule`, `setPolicyRule`).
#[derive(Debug, Deserialize, Serialize, ToSchema)]
pub struct RuleRequest {
    /// 1 to 64 letters, digits, `-`, `_` or `.`.
    #[schema(pattern = "^[A-Za-z0-9._-]{1,64}$")]
    pub id: String,
    /// `coinAddressWhitelist`, `allTx`, `velocityLimit` or `webhook`.
    #[serde(rename = "type")]
    #[schema(pattern = "^(coinAddressWhitelist|allTx|velocityLimit|webhook)$")]
    pub kind: String,
    /// `coinAddressWhitelist`: `{addresses: [...]}` (at most 1,000; EIP-55 checked), or for
    /// `PUT` `{add: address}` / `{remove: address}`. `allTx`: `{}`. `velocityLimit`:
    /// `{amountString (base units, digits), timeWindow (seconds, 1 to 2,678,400), coin? (the
    /// wallet's or a token of its chain; default the wallet's), excludeTags? (empty)}`.
    /// `webhook`: `{url}` (http(s), at most 2,048 characters).
    pub condition: Value,
    pub action: RuleAction,
    /// ISO 8601: after it, only a service admin may ask to loosen the rule (docs/policy.md).
    /// A `PUT` without it keeps the rule's; `null` clears it (a loosening).
    #[serde(rename = "lockDate")]
    pub lock_date: Option<String>,
}

/// Body of `DELETE .../policy/rule` (BitGoJS `removePolicyRule`).
#[derive(Debug, Deserialize, Serialize, ToSchema)]
pub struct RemoveRuleRequest {
    #[schema(pattern = "^[A-Za-z0-9._-]{1,64}$")]
    pub id: String,
}

/// The wallet after a change, or the pending approval a loosening waits on.
fn answer(changed: Changed) -> Response {
    match changed {
        Changed::Applied(row) => {
            let mut body = String::new();
            model::render(&row, Expand::default(), &mut body);
            ([(header::CONTENT_TYPE, "application/json")], body).into_response()
        }
        Changed::Pending(a) => Json(crate::custody::views::approval(&a, None, None)).into_response(),
    }
}

/// Adds a policy rule (BitGoJS `wallet.createPolicyRule`): `{id, type, condition, action}`, with
/// `type` `coinAddressWhitelist` (`condition.addresses`, or `condition.add`), `allTx` or
/// `velocityLimit`, and `action.type` `deny`, `getApproval` or `getFinalApproval`. A new rule
/// applies at once. Answers the wallet, its rules in `admin.policy.rules`.
#[utoipa::path(post, path = "/api/v2/{coin}/wallet/{walletId}/policy/rule", tag = "policy", security(("bearer" = [])),
    params(("coin" = Coin, Path, description = "Coin ticker"), ("walletId" = WalletId, Path, description = "Wallet id, 32 hex")),
    request_body = RuleRequest,
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
    Ok(answer(row))
}

/// Changes a policy rule (BitGoJS `wallet.setPolicyRule`), the same body as adding one;
/// `condition.add` / `condition.remove` change a whitelist in place. A change that tightens
/// applies at once and answers the wallet. One that loosens (an address added, a higher limit
/// or shorter window, a changed type, a lesser action, more approvers) is not applied: it
/// answers a pending approval of type `policyRuleRequest` (`state: "pending"`) that other
/// wallet admins answer through `PUT /api/v2/{coin}/pendingapprovals/{id}`; the last approval
/// applies it.
#[utoipa::path(put, path = "/api/v2/{coin}/wallet/{walletId}/policy/rule", tag = "policy", security(("bearer" = [])),
    params(("coin" = Coin, Path, description = "Coin ticker"), ("walletId" = WalletId, Path, description = "Wallet id, 32 hex")),
    request_body = RuleRequest,
    responses(
        (status = 200, description = "The wallet (a tightening), or the pending approval a loosening waits on", body = Object),
        (status = 400, description = "A bad rule", body = ErrorResponse),
        (status = 403, description = "No wallet_manage, or not an admin of the wallet", body = ErrorResponse),
        (status = 404, description = "No such wallet or rule (`PolicyRuleNotFound`)", body = ErrorResponse),
        (status = 409, description = "The wallet changed meanwhile, or 20 loosenings wait already (`TooManyRuleChanges`)", body = ErrorResponse),
    ))]
pub async fn update_rule(
    State(state): State<AppState>,
    Auth(auth): Auth,
    ApiPath((coin, wallet_id)): ApiPath<(Coin, WalletId)>,
    ApiJson(body): ApiJson<Value>,
) -> ApiResult<Response> {
    let row =
        policy_rules::change(&state.custody, &auth, &coin, &wallet_id, &body, RuleChange::Update).await?;
    Ok(answer(row))
}

/// Removes a policy rule (BitGoJS `wallet.removePolicyRule({id})`). Removing loosens the
/// policy, so it is not applied at once: answers a pending approval of type
/// `policyRuleRequest` that other wallet admins answer; the last approval removes the rule.
#[utoipa::path(delete, path = "/api/v2/{coin}/wallet/{walletId}/policy/rule", tag = "policy", security(("bearer" = [])),
    params(("coin" = Coin, Path, description = "Coin ticker"), ("walletId" = WalletId, Path, description = "Wallet id, 32 hex")),
    request_body = RemoveRuleRequest,
    responses(
        (status = 200, description = "The pending approval the removal waits on", body = Object),
        (status = 400, description = "No `id`", body = ErrorResponse),
        (status = 403, description = "No wallet_manage, or not an admin of the wallet", body = ErrorResponse),
        (status = 404, description = "No such wallet or rule (`PolicyRuleNotFound`)", body = ErrorResponse),
        (status = 409, description = "20 loosenings wait already (`TooManyRuleChanges`)", body = ErrorResponse),
    ))]
pub async fn remove_rule(
    State(state): State<AppState>,
    Auth(auth): Auth,
    ApiPath((coin, wallet_id)): ApiPath<(Coin, WalletId)>,
    ApiJson(body): ApiJson<Value>,
) -> ApiResult<Response> {
    let row =
        policy_rules::change(&state.custody, &auth, &coin, &wallet_id, &body, RuleChange::Remove).await?;
    Ok(answer(row))
}

/// Body of the dry run: the recipients a withdrawal would pay, as `/tx/initiate` takes them.
#[derive(Debug, Deserialize, Serialize, ToSchema)]
pub struct EvaluateRequest {
    /// Exactly one (an Ethereum transaction pays one address).
    #[schema(min_items = 1, max_items = 1)]
    pub recipients: Vec<InitiateRecipient>,
}

/// The dry run (Custodian's own route): what the wallet's policy rules would make of a
/// withdrawal paying `recipients` now (velocity limits and the USD circuit breaker read the
/// wallet's withdrawals as they are), reserving and storing nothing. Answers `{outcome:
/// "denied" | "pendingApproval", singleRunResults: [{ruleId, triggered}], reasons,
/// approvalsRequired, ruleApprovals: [{ruleId, userIds, final, serviceAdmin?}], usd}` (`usd`:
/// the withdrawal's value in dollars, null when its coin has no price source).
#[utoipa::path(post, path = "/api/v2/{coin}/wallet/{walletId}/policy/evaluate", tag = "policy", security(("bearer" = [])),
    params(("coin" = Coin, Path, description = "Coin ticker"), ("walletId" = WalletId, Path, description = "Wallet id, 32 hex")),
    request_body = EvaluateRequest,
    responses(
        (status = 200, description = "What would happen and why", body = Object),
        (status = 400, description = "A bad recipient", body = ErrorResponse),
        (status = 403, description = "No wallet_view", body = ErrorResponse),
        (status = 404, description = "No such wallet, or not visible", body = ErrorResponse),
    ))]
pub async fn evaluate(
    State(state): State<AppState>,
    Auth(auth): Auth,
    ApiPath((coin, wallet_id)): ApiPath<(Coin, WalletId)>,
    ApiJson(req): ApiJson<EvaluateRequest>,
) -> ApiResult<Json<Value>> {
    let recipients: Vec<RecipientRequest> = req.recipients.into_iter().map(RecipientRequest::from).collect();
    Ok(Json(policy_rules::dry_run(&state.custody, &auth, &coin, &wallet_id, &recipients).await?))
}

/// An enterprise's rules for a coin: `{rules: [...]}`, each as a wallet's `admin.policy.rules`
/// shows one.
fn enterprise_rules(rules: Vec<Value>) -> Json<Value> {
    Json(serde_json::json!({ "rules": rules }))
}

/// The enterprise's rules after a change, or the pending approval a loosening waits on.
fn enterprise_answer(changed: policy_enterprise::Changed) -> Json<Value> {
    match changed {
        policy_enterprise::Changed::Applied(rules) => enterprise_rules(rules),
        policy_enterprise::Changed::Pending(a) => Json(crate::custody::views::approval(&a, None, None)),
    }
}

/// Adds an enterprise policy rule (Custodian's own route, docs/policy.md#enterprise-rules):
/// the same body as a wallet's; it applies to every wallet of the enterprise and coin, at once.
/// Answers the enterprise's rules for the coin.
#[utoipa::path(post, path = "/api/v2/{coin}/enterprise/{enterpriseId}/policy/rule", tag = "policy", security(("bearer" = [])),
    params(("coin" = Coin, Path, description = "Coin ticker"), ("enterpriseId" = EnterpriseId, Path, description = "Enterprise id, 32 hex")),
    request_body = RuleRequest,
    responses(
        (status = 200, description = "`{rules: [...]}`", body = Object),
        (status = 400, description = "A bad rule (`MissingField`, `InvalidField` naming the field)", body = ErrorResponse),
        (status = 403, description = "No enterprise_manage_all, or not an admin of the enterprise", body = ErrorResponse),
        (status = 404, description = "Not a member of the enterprise (`EnterpriseNotFound`)", body = ErrorResponse),
        (status = 409, description = "A rule with this id exists, 50 do, or they changed meanwhile", body = ErrorResponse),
    ))]
pub async fn create_enterprise_rule(
    State(state): State<AppState>,
    Auth(auth): Auth,
    ApiPath((coin, enterprise)): ApiPath<(Coin, EnterpriseId)>,
    ApiJson(body): ApiJson<Value>,
) -> ApiResult<Json<Value>> {
    let changed =
        policy_enterprise::change(&state.custody, &auth, &coin, &enterprise, &body, RuleChange::Create)
            .await?;
    Ok(enterprise_answer(changed))
}

/// Changes an enterprise policy rule. One that tightens applies at once and answers the
/// enterprise's rules for the coin. One that loosens is not applied: it answers a pending
/// approval of type `policyRuleRequest` (`scope: "enterprise"`, `state: "pending"`) that other
/// admins of the enterprise answer through `PUT /api/v2/{coin}/pendingapprovals/{id}`; the
/// last approval applies it (docs/policy.md#enterprise-rules).
#[utoipa::path(put, path = "/api/v2/{coin}/enterprise/{enterpriseId}/policy/rule", tag = "policy", security(("bearer" = [])),
    params(("coin" = Coin, Path, description = "Coin ticker"), ("enterpriseId" = EnterpriseId, Path, description = "Enterprise id, 32 hex")),
    request_body = RuleRequest,
    responses(
        (status = 200, description = "`{rules: [...]}`, or the pending approval of a loosening", body = Object),
        (status = 400, description = "A bad rule", body = ErrorResponse),
        (status = 403, description = "No enterprise_manage_all, not an admin of the enterprise, or a locked rule loosened by other than a service admin (`PolicyRuleLocked`)", body = ErrorResponse),
        (status = 404, description = "No such rule (`PolicyRuleNotFound`), or not a member", body = ErrorResponse),
        (status = 409, description = "The rules changed meanwhile, or 20 loosenings wait (`TooManyRuleChanges`)", body = ErrorResponse),
    ))]
pub async fn update_enterprise_rule(
    State(state): State<AppState>,
    Auth(auth): Auth,
    ApiPath((coin, enterprise)): ApiPath<(Coin, EnterpriseId)>,
    ApiJson(body): ApiJson<Value>,
) -> ApiResult<Json<Value>> {
    let changed =
        policy_enterprise::change(&state.custody, &auth, &coin, &enterprise, &body, RuleChange::Update)
            .await?;
    Ok(enterprise_answer(changed))
}

/// Removes an enterprise policy rule: a loosening, so it answers a pending approval of type
/// `policyRuleRequest` (`scope: "enterprise"`) that other admins of the enterprise answer; the
/// last approval removes the rule (docs/policy.md#enterprise-rules).
#[utoipa::path(delete, path = "/api/v2/{coin}/enterprise/{enterpriseId}/policy/rule", tag = "policy", security(("bearer" = [])),
    params(("coin" = Coin, Path, description = "Coin ticker"), ("enterpriseId" = EnterpriseId, Path, description = "Enterprise id, 32 hex")),
    request_body = RemoveRuleRequest,
    responses(
        (status = 200, description = "The pending approval of the removal", body = Object),
        (status = 400, description = "No `id`", body = ErrorResponse),
        (status = 403, description = "No enterprise_manage_all, not an admin of the enterprise, or a locked rule (`PolicyRuleLocked`)", body = ErrorResponse),
        (status = 404, description = "No such rule (`PolicyRuleNotFound`), or not a member", body = ErrorResponse),
        (status = 409, description = "20 loosenings wait already (`TooManyRuleChanges`)", body = ErrorResponse),
    ))]
pub async fn remove_enterprise_rule(
    State(state): State<AppState>,
    Auth(auth): Auth,
    ApiPath((coin, enterprise)): ApiPath<(Coin, EnterpriseId)>,
    ApiJson(body): ApiJson<Value>,
) -> ApiResult<Json<Value>> {
    let changed =
        policy_enterprise::change(&state.custody, &auth, &coin, &enterprise, &body, RuleChange::Remove)
            .await?;
    Ok(enterprise_answer(changed))
}

/// An enterprise's policy rules for a coin: `{rules: [...]}`. Needs an `enterprise_view_all`
/// form and a membership.
#[utoipa::path(get, path = "/api/v2/{coin}/enterprise/{enterpriseId}/policy/rule", tag = "policy", security(("bearer" = [])),
    params(("coin" = Coin, Path, description = "Coin ticker"), ("enterpriseId" = EnterpriseId, Path, description = "Enterprise id, 32 hex")),
    responses(
        (status = 200, description = "`{rules: [...]}`", body = Object),
        (status = 403, description = "No enterprise_view_all", body = ErrorResponse),
        (status = 404, description = "Not a member of the enterprise (`EnterpriseNotFound`)", body = ErrorResponse),
    ))]
pub async fn list_enterprise_rules(
    State(state): State<AppState>,
    Auth(auth): Auth,
    ApiPath((coin, enterprise)): ApiPath<(Coin, EnterpriseId)>,
) -> ApiResult<Json<Value>> {
    Ok(enterprise_rules(policy_enterprise::list(&state.custody, &auth, &coin, &enterprise).await?))
}
