//! Wallets: the §2.1 record, the internal bulk lookup (§4.1), balance updates and import.

use std::collections::{HashMap, HashSet};

use axum::{
    extract::{rejection::QueryRejection, Path, Query, Request, State},
    http::header,
    response::{IntoResponse, Response},
};
use serde::Deserialize;
use serde_json::{json, Value};
use utoipa::{IntoParams, ToSchema};

use crate::{
    http::{
        error::{Error, Result},
        extract::{json_value, parse_value, ApiJson},
        ErrorResponse,
    },
    identity::{auth::Auth, scopes::Action},
    ids, AppState,
};

pub mod import;
pub mod model;

use model::{Balances, Expand, WalletRow, BALANCE_FIELDS};

/// Request body of §4.1.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct WalletLookupRequest {
    /// Wallet ids (32 hex), 1 to `max_lookup_ids` (default 1000); duplicates are collapsed.
    pub ids: Vec<String>,
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
    /// Adds withdrawHoldAmountUsdString to ofc wallets.
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

fn flag(name: &str, v: &Option<String>) -> Result<bool> {
    match v.as_deref() {
        None | Some("false") | Some("0") => Ok(false),
        Some("true") | Some("1") | Some("") => Ok(true),
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
fn wallets_json<'a>(rows: impl Iterator<Item = &'a WalletRow>, expand: Expand) -> Response {
    let mut body = String::from("{\"wallets\":[");
    for (i, row) in rows.enumerate() {
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
        (status = 401, description = "Not authenticated", body = ErrorResponse),
    ))]
pub async fn lookup(
    State(state): State<AppState>,
    auth: Auth,
    query: std::result::Result<Query<LookupQuery>, QueryRejection>,
    ApiJson(req): ApiJson<WalletLookupRequest>,
) -> Result<Response> {
    let Query(query) = query.map_err(|e| Error::invalid_field("query", e.body_text()))?;
    let expand = query.expand()?;
    let max = state.config.max_lookup_ids;
    if req.ids.is_empty() {
        return Err(Error::invalid_field("ids", "must list at least one wallet id"));
    }
    let mut seen = HashSet::with_capacity(req.ids.len());
    let mut ids = Vec::with_capacity(req.ids.len());
    for (i, id) in req.ids.iter().enumerate() {
        if !ids::is_id(id) {
            return Err(Error::BadRequest {
                name: "InvalidField",
                message: format!("ids[{i}] is not a 32-hex wallet id"),
                context: json!({ "field": format!("ids[{i}]"), "index": i }),
            });
        }
        if seen.insert(id.as_str()) {
            ids.push(id.clone());
        }
    }
    if ids.len() > max {
        return Err(Error::BadRequest {
            name: "TooManyIds",
            message: format!("at most {max} distinct ids per request, got {}", ids.len()),
            context: json!({ "field": "ids", "index": max, "max": max }),
        });
    }
    let rows = state.store.wallets_by_ids(&ids, req.include_deleted.unwrap_or(false)).await?;
    let admin_of: HashSet<String> = if auth.token.admin {
        HashSet::new()
    } else {
        state
            .store
            .memberships(&auth.user.id)
            .await?
            .into_iter()
            .filter(|m| m.is_admin)
            .map(|m| m.enterprise.id)
            .collect()
    };
    let policy = state.policy();
    let mut by_id: HashMap<&str, &WalletRow> = HashMap::with_capacity(rows.len());
    for row in &rows {
        let user_may_see = row.user_ids.contains(&auth.user.id)
            || row.enterprise.as_ref().is_some_and(|e| admin_of.contains(e));
        if policy.can_view_wallet(&auth.token, user_may_see, &row.id, row.enterprise.as_deref()) {
            by_id.insert(row.id.as_str(), row);
        }
    }
    Ok(wallets_json(ids.iter().filter_map(|id| by_id.get(id.as_str()).copied()), expand))
}

/// Body of the balance update: any of the §2.1 balance strings, in base units (USD cents for
/// the withdraw hold).
#[derive(Debug, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct SetBalanceRequest {
    #[schema(value_type = Option<String>)]
    pub balance_string: Option<Value>,
    #[schema(value_type = Option<String>)]
    pub confirmed_balance_string: Option<Value>,
    #[schema(value_type = Option<String>)]
    pub spendable_balance_string: Option<Value>,
    #[schema(value_type = Option<String>)]
    pub staking_balance_string: Option<Value>,
    #[schema(value_type = Option<String>)]
    pub reward_balance_string: Option<Value>,
    #[schema(value_type = Option<String>)]
    pub withdraw_hold_amount_usd_string: Option<Value>,
}

/// Checks a balance update; at least one field, each a base-unit integer.
pub fn parse_balances(body: &Value) -> Result<Balances> {
    let Some(map) = body.as_object() else {
        return Err(Error::invalid_field("", "the body must be a JSON object"));
    };
    if let Some(k) = map.keys().find(|k| !BALANCE_FIELDS.iter().any(|(s, _)| s == k)) {
        return Err(Error::invalid_field(k, "not a balance field"));
    }
    let mut b = Balances::default();
    for (i, (field, _)) in BALANCE_FIELDS.iter().enumerate() {
        if let Some(v) = map.get(*field) {
            *b.get_mut(i) = Some(model::base_units(v).ok_or_else(|| {
                Error::invalid_field(*field, "must be a non-negative integer in base units")
            })?);
        }
    }
    if b == Balances::default() {
        return Err(Error::invalid_field("balanceString", "give at least one balance field"));
    }
    Ok(b)
}

/// Sets a wallet's balances (service admins only): the hook for event ingestion. Returns the
/// wallet with every balance field.
#[utoipa::path(post, path = "/api/v2/internal/wallet/{walletId}/balance", tag = "wallets",
    security(("bearer" = [])),
    params(("walletId" = String, Path, description = "Wallet id, 32 hex")),
    request_body = SetBalanceRequest,
    responses(
        (status = 200, description = "The wallet with all balances", body = Object),
        (status = 400, description = "Bad balance", body = ErrorResponse),
        (status = 403, description = "Not a service admin", body = ErrorResponse),
        (status = 404, description = "No such wallet", body = ErrorResponse),
    ))]
pub async fn set_balance(
    State(state): State<AppState>,
    auth: Auth,
    Path(wallet_id): Path<String>,
    req: Request,
) -> Result<Response> {
    auth.require(state.policy(), Action::ServiceAdmin)?;
    if !ids::is_id(&wallet_id) {
        return Err(Error::invalid_field("walletId", "must be a 32-hex wallet id"));
    }
    let body = json_value(req, &state).await?;
    let _: SetBalanceRequest = parse_value(body.clone())?;
    let balances = parse_balances(&body)?;
    let row = state
        .store
        .update_wallet_balances(&wallet_id, &balances)
        .await?
        .ok_or_else(|| Error::NotFound { name: "WalletNotFound", message: "no such wallet".into() })?;
    let all = Expand { balance: true, staking: true, all_tokens: true };
    let mut body = String::new();
    model::render(&row, all, &mut body);
    Ok(([(header::CONTENT_TYPE, "application/json")], body).into_response())
}
