//! Wallet routes: the internal bulk lookup (§4.1) and the balance update. The response is
//! written from the stored JSON without re-parsing it ([`crate::model::wallet::render`]).

use axum::{
    extract::{Request, State},
    http::header,
    response::{IntoResponse, Response},
};
use serde::{Deserialize, Serialize};
use serde_json::Value;
use utoipa::{IntoParams, ToSchema};

use crate::{
    error::{Error, Result},
    http::{
        auth::Auth,
        error::ApiResult,
        extract::{json_value, ApiJson, ApiPath, ApiQuery},
        ErrorResponse,
    },
    model::wallet::{self as model, Expand, WalletRow},
    types::{Coin, WalletId},
    wallets, AppState,
};

/// Request body of §4.1.
#[derive(Debug, Deserialize, ToSchema, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct WalletLookupRequest {
    /// Wallet ids (32 hex), 1 to `max_lookup_ids` (default 1000); duplicates are collapsed.
    #[schema(min_items = 1)]
    pub ids: Vec<WalletId>,
    /// Also return deleted wallets. Default false.
    pub include_deleted: Option<bool>,
}

/// Query parameters of the lookup: each `true` or `false`.
#[derive(Debug, Deserialize, IntoParams)]
#[serde(rename_all = "camelCase")]
#[into_params(parameter_in = Query)]
pub struct LookupQuery {
    /// Adds balanceString, confirmedBalanceString, spendableBalanceString and their numbers.
    #[param(value_type = Option<bool>)]
    pub expand_balance: Option<String>,
    /// Adds stakingBalanceString and rewardBalanceString.
    #[param(value_type = Option<bool>)]
    pub include_staking_balances: Option<String>,
    /// Adds withdrawHoldAmountUsdString to ofc wallets and, on a single wallet of a watched
    /// chain, its token balances (`tokens`).
    #[param(value_type = Option<bool>)]
    pub all_tokens: Option<String>,
}

/// Response of §4.1: `{wallets: [Wallet]}` in request order.
#[derive(Debug, ToSchema)]
pub struct WalletLookupResponse {
    /// Wallet records (§2.1).
    #[allow(dead_code)]
    #[schema(value_type = Vec<Object>)]
    pub wallets: Vec<Value>,
}

/// The query flags of the wallet reads (`expandBalance`, `includeStakingBalances`,
/// `allTokens`), as the OpenAPI document states them (`http::openapi`).
pub const FLAGS: [&str; 3] = ["expandBalance", "includeStakingBalances", "allTokens"];
/// What a flag may say for true: BitGo's `true`, also `1`, and a bare `?flag`.
pub const FLAG_TRUE: &[&str] = &["true", "1", ""];
/// What a flag may say for false.
pub const FLAG_FALSE: &[&str] = &["false", "0"];

fn flag(name: &str, v: &Option<String>) -> Result<bool> {
    match v.as_deref() {
        None => Ok(false),
        Some(s) if FLAG_FALSE.contains(&s) => Ok(false),
        Some(s) if FLAG_TRUE.contains(&s) => Ok(true),
        Some(_) => Err(Error::invalid_field(name, "must be true or false")),
    }
}

impl LookupQuery {
    fn expand(&self) -> Result<Expand> {
        Ok(Expand {
            balance: flag("expandBalance", &self.expand_balance)?,
            staking: flag("includeStakingBalances", &self.include_staking_balances)?,
            all_tokens: flag("allTokens", &self.all_tokens)?,
        })
    }
}

/// Writes `{"wallets":[...]}` from stored rows without re-parsing them.
fn wallets_json(rows: &[WalletRow], expand: Expand) -> Response {
    // Sized once: the records plus room for each one's balance fields.
    let size = rows.iter().map(|r| r.record.len() + 320).sum::<usize>() + 16;
    let mut body = String::with_capacity(size);
    body.push_str("{\"wallets\":[");
    for (i, row) in rows.iter().enumerate() {
        if i > 0 {
            body.push(',');
        }
        model::render(row, expand, &mut body);
    }
    body.push_str("]}");
    ([(header::CONTENT_TYPE, "application/json")], body).into_response()
}

/// Returns the wallets with the given ids that the token may see, in request order. An id the
/// token may not see is left out exactly like one that does not exist.
#[utoipa::path(post, path = "/api/v2/internal/wallet", tag = "wallets",
    security(("bearer" = [])),
    params(LookupQuery),
    request_body = WalletLookupRequest,
    responses(
        (status = 200, description = "The visible wallets (§2.1), in request order", body = WalletLookupResponse),
        (status = 400, description = "Bad ids or parameters; context names the index", body = ErrorResponse),
    ))]
pub async fn lookup(
    State(state): State<AppState>,
    Auth(auth): Auth,
    ApiQuery(query): ApiQuery<LookupQuery>,
    ApiJson(req): ApiJson<WalletLookupRequest>,
) -> ApiResult<Response> {
    let expand = query.expand()?;
    let rows = wallets::lookup(&state.wallets, &auth, &req.ids, req.include_deleted.unwrap_or(false)).await?;
    Ok(wallets_json(&rows, expand))
}

/// Body of the balance update: any of the §2.1 balance strings, in base units (USD cents for
/// the withdraw hold). At least one; no other fields.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct SetBalanceRequest {
    #[schema(value_type = String, required = false, pattern = "^[0-9]{1,100}$")]
    pub balance_string: Option<Value>,
    #[schema(value_type = String, required = false, pattern = "^[0-9]{1,100}$")]
    pub confirmed_balance_string: Option<Value>,
    #[schema(value_type = String, required = false, pattern = "^[0-9]{1,100}$")]
    pub spendable_balance_string: Option<Value>,
    #[schema(value_type = String, required = false, pattern = "^[0-9]{1,100}$")]
    pub staking_balance_string: Option<Value>,
    #[schema(value_type = String, required = false, pattern = "^[0-9]{1,100}$")]
    pub reward_balance_string: Option<Value>,
    #[schema(value_type = String, required = false, pattern = "^[0-9]{1,100}$")]
    pub withdraw_hold_amount_usd_string: Option<Value>,
}

/// Sets a wallet's balances (service admins only): the hook for event ingestion. Returns the
/// wallet with every balance field.
#[utoipa::path(post, path = "/api/v2/internal/wallet/{walletId}/balance", tag = "wallets",
    security(("bearer" = [])),
    params(("walletId" = WalletId, Path, description = "Wallet id, 32 hex")),
    request_body = SetBalanceRequest,
    responses(
        (status = 200, description = "The wallet with all balances", body = Object),
        (status = 400, description = "Bad balance", body = ErrorResponse),
        (status = 403, description = "Not a service admin", body = ErrorResponse),
        (status = 404, description = "No such wallet", body = ErrorResponse),
    ))]
pub async fn set_balance(
    State(state): State<AppState>,
    Auth(auth): Auth,
    ApiPath(wallet_id): ApiPath<WalletId>,
    req: Request,
) -> ApiResult<Response> {
    let body: Value = json_value(req, &state).await?;
    let row = wallets::set_balances(&state.wallets, Some(&auth), &wallet_id, &body).await?;
    let all = Expand { balance: true, staking: true, all_tokens: true };
    let mut body = String::new();
    model::render(&row, all, &mut body);
    Ok(([(header::CONTENT_TYPE, "application/json")], body).into_response())
}

/// One wallet (§2.1), rendered as the lookup renders it: BitGo's wallet read, which BitGoJS's
/// `coin.wallets().get({id})` calls (docs/decisions.md#signed-requests). A wallet the token may not see is 404 like
/// one that does not exist.
#[utoipa::path(get, path = "/api/v2/{coin}/wallet/{walletId}", tag = "wallets",
    security(("bearer" = [])),
    params(("coin" = Coin, Path, description = "Coin ticker"), ("walletId" = WalletId, Path, description = "Wallet id, 32 hex"), LookupQuery),
    responses(
        (status = 200, description = "The wallet (§2.1)", body = Object),
        (status = 400, description = "A bad path or query value", body = ErrorResponse),
        (status = 404, description = "No such wallet, or not visible", body = ErrorResponse),
    ))]
pub async fn get_wallet(
    State(state): State<AppState>,
    Auth(auth): Auth,
    ApiPath((coin, wallet_id)): ApiPath<(Coin, WalletId)>,
    ApiQuery(query): ApiQuery<LookupQuery>,
) -> ApiResult<Response> {
    let expand = query.expand()?;
    let row = wallets::get_wallet(&state.wallets, &auth, &coin, &wallet_id).await?;
    let mut body = String::new();
    model::render(&row, expand, &mut body);
    // With BitGo's `allTokens=true`, a watched chain's wallet also carries its token balances
    // (docs/chains.md, "Balances").
    let tokens = match expand.all_tokens {
        true => crate::chain::token_balances(&state.chains, &row).await?,
        false => None,
    };
    if let Some(tokens) = tokens {
        if body.ends_with('}') {
            body.pop();
            body.push_str(&format!(",\"tokens\":{tokens}}}"));
        }
    }
    Ok(([(header::CONTENT_TYPE, "application/json")], body).into_response())
}

/// A transfer of a wallet: the chain watcher's record when it saw one by that id (docs/chains.md),
/// else as its latest ingested event reported it: the event's fields with
/// `id`, `coin`, `wallet` and `txid` (docs/decisions.md#signed-requests; the spec tells receivers to fetch the
/// transfer before acting on a notification).
#[utoipa::path(get, path = "/api/v2/{coin}/wallet/{walletId}/transfer/{transferId}", tag = "wallets",
    security(("bearer" = [])),
    params(("coin" = Coin, Path, description = "Coin ticker"), ("walletId" = WalletId, Path, description = "Wallet id, 32 hex"),
        ("transferId" = String, Path, description = "Transfer id, 1 to 256 characters")),
    responses(
        (status = 200, description = "The transfer", body = Object),
        (status = 400, description = "A bad path value", body = ErrorResponse),
        (status = 404, description = "No such wallet or transfer, or not visible", body = ErrorResponse),
    ))]
pub async fn get_transfer(
    State(state): State<AppState>,
    Auth(auth): Auth,
    ApiPath((coin, wallet_id, transfer_id)): ApiPath<(Coin, WalletId, String)>,
) -> ApiResult<axum::Json<serde_json::Map<String, Value>>> {
    if transfer_id.is_empty() || transfer_id.len() > 256 {
        return Err(Error::invalid_field("transferId", "1 to 256 characters").into());
    }
    if let Some(t) = crate::chain::get_transfer(&state.chains, &auth, &coin, &wallet_id, &transfer_id).await?
    {
        if let Value::Object(map) = crate::chain::transfer_json(&t, None) {
            return Ok(axum::Json(map));
        }
    }
    Ok(axum::Json(wallets::get_transfer(&state.wallets, &auth, &coin, &wallet_id, &transfer_id).await?))
}
