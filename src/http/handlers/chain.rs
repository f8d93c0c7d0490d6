//! Chain routes (docs/chains.md): a wallet's addresses and transfers as BitGo serves them, and
//! the service admin's address registration.

use axum::{extract::State, Json};
use serde::{Deserialize, Serialize};
use serde_json::{json, Value};
use utoipa::{IntoParams, ToSchema};

use crate::{
    chain,
    error::Error,
    http::{
        auth::Auth,
        error::ApiResult,
        extract::{ApiJson, ApiPath, ApiQuery},
        ErrorResponse,
    },
    model::chain::TransferState,
    paging::PageRequest,
    store::TransferFilter,
    types::{AnyId, Coin, WalletId},
    AppState,
};

/// Paging of a wallet's addresses.
#[derive(Debug, Deserialize, IntoParams)]
#[serde(rename_all = "camelCase")]
#[into_params(parameter_in = Query)]
pub struct AddressParams {
    #[param(minimum = 1, maximum = 500)]
    pub limit: Option<u32>,
    /// The last address of the previous page (`nextBatchPrevId`).
    #[param(pattern = "^[0-9A-Za-z]{1,100}$")]
    pub prev_id: Option<String>,
}

/// A page cursor as the address it names. An Ethereum address in any case is compared as its
/// checksummed form; a UTXO coin's is compared as given.
fn prev_address(coin: &Coin, prev: &str) -> Result<String, Error> {
    if chain::utxo::params::Family::of(coin).is_some() {
        let ok = !prev.is_empty() && prev.len() <= 100 && prev.chars().all(|c| c.is_ascii_alphanumeric());
        return ok.then(|| prev.to_string()).ok_or_else(|| Error::invalid_field("prevId", "not an address"));
    }
    crate::types::parse_eth_address(&prev.to_ascii_lowercase())
        .map(|a| crate::types::checksummed_eth_address(&a))
        .map_err(|e| Error::invalid_field("prevId", e))
}

/// A wallet's addresses: those its record names (`coinSpecific.baseAddress`,
/// `receiveAddress.address`) and those added or derived, by address. A derived one carries
/// `chain`, `index`, `addressType` and `coinSpecific` (`outputScript`, `redeemScript`,
/// `witnessScript`).
#[utoipa::path(get, path = "/api/v2/{coin}/wallet/{walletId}/addresses", tag = "wallets",
    security(("bearer" = [])),
    params(("coin" = Coin, Path, description = "Coin ticker"), ("walletId" = WalletId, Path, description = "Wallet id, 32 hex"), AddressParams),
    responses(
        (status = 200, description = "`{coin, addresses, count, nextBatchPrevId?}`", body = Object),
        (status = 400, description = "A bad path or query value", body = ErrorResponse),
        (status = 404, description = "No such wallet, or not visible", body = ErrorResponse),
    ))]
pub async fn list_addresses(
    State(state): State<AppState>,
    Auth(auth): Auth,
    ApiPath((coin, wallet_id)): ApiPath<(Coin, WalletId)>,
    ApiQuery(p): ApiQuery<AddressParams>,
) -> ApiResult<Json<Value>> {
    let page = PageRequest::new(p.limit, None)?;
    let after = p.prev_id.as_deref().map(|prev| prev_address(&coin, prev)).transpose()?;
    let found =
        chain::list_addresses(&state.chains, &auth, &coin, &wallet_id, after.as_deref(), page.fetch())
            .await?;
    let page = page.page(found, |a| a.address.as_str());
    let addresses: Vec<Value> = page.items.iter().map(|a| chain::address_json(a, &coin)).collect();
    let mut body = json!({ "coin": coin.as_str(), "count": addresses.len(), "addresses": addresses });
    if let Some(next) = page.next_batch_prev_id {
        body["nextBatchPrevId"] = json!(next);
    }
    Ok(Json(body))
}

/// An address to watch.
#[derive(Debug, Deserialize, Serialize, ToSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct AddAddressRequest {
    /// Ethereum: `0x` and 40 hex digits, mixed case a valid EIP-55 checksum. A UTXO coin: an
    /// address of its network (base58check P2PKH or P2SH, or bech32).
    #[schema(pattern = "^[0-9A-Za-z]{1,100}$")]
    pub address: String,
    #[schema(max_length = 250)]
    pub label: Option<String>,
}

/// Adds a watched address to a wallet of an Ethereum or UTXO coin (service admins). The chain
/// watcher picks it up at its next round.
#[utoipa::path(post, path = "/api/v2/internal/wallet/{walletId}/addresses", tag = "wallets",
    security(("bearer" = [])),
    params(("walletId" = WalletId, Path, description = "Wallet id, 32 hex")),
    request_body = AddAddressRequest,
    responses(
        (status = 200, description = "The address, checksummed", body = Object),
        (status = 400, description = "Not an address of the wallet's coin, or `AddressLimitReached`", body = ErrorResponse),
        (status = 403, description = "Not a service admin", body = ErrorResponse),
        (status = 404, description = "No such wallet", body = ErrorResponse),
        (status = 409, description = "Another wallet watches the address (AddressInUse), or the wallet is of a coin no watcher reads (WalletNotWatched)", body = ErrorResponse),
    ))]
pub async fn add_address(
    State(state): State<AppState>,
    Auth(auth): Auth,
    ApiPath(wallet_id): ApiPath<WalletId>,
    ApiJson(req): ApiJson<AddAddressRequest>,
) -> ApiResult<Json<Value>> {
    let added = chain::add_address(&state.chains, Some(&auth), &wallet_id, &req.address, req.label).await?;
    let coin = added.chain.clone();
    Ok(Json(chain::address_json(&added, &coin)))
}

/// A wallet's fee alert thresholds (docs/chains.md, "Events"): wei as decimal digits (or a
/// JSON integer); absent or null turns that alert off.
#[derive(Debug, Deserialize, Serialize, ToSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct FeeAlertsRequest {
    /// `lowFee` when the average base fee of the last 10 blocks falls below this.
    #[schema(value_type = Option<String>, pattern = "^[0-9]{1,100}$")]
    pub low_fee: Option<Value>,
    /// `lowFeeAddressBalance` when the balance of the record's `coinSpecific.feeAddress` falls
    /// below this.
    #[schema(value_type = Option<String>, pattern = "^[0-9]{1,100}$")]
    pub low_fee_address_balance: Option<Value>,
}

/// Sets a wallet's fee alerts (service admins), as `custodian wallet fee-alerts` does; both
/// thresholds at once, audited as `wallet.fee_alerts_set`. The watcher reads them every round.
#[utoipa::path(put, path = "/api/v2/internal/wallet/{walletId}/feeAlerts", tag = "wallets",
    security(("bearer" = [])),
    params(("walletId" = WalletId, Path, description = "Wallet id, 32 hex")),
    request_body = FeeAlertsRequest,
    responses(
        (status = 200, description = "`{walletId, lowFee, lowFeeAddressBalance}` as set (null: off)", body = Object),
        (status = 400, description = "Not an amount", body = ErrorResponse),
        (status = 403, description = "Not a service admin", body = ErrorResponse),
        (status = 404, description = "No such wallet", body = ErrorResponse),
        (status = 409, description = "The wallet is not of an Ethereum coin (WalletNotWatched)", body = ErrorResponse),
    ))]
pub async fn set_fee_alerts(
    State(state): State<AppState>,
    Auth(auth): Auth,
    ApiPath(wallet_id): ApiPath<WalletId>,
    ApiJson(req): ApiJson<FeeAlertsRequest>,
) -> ApiResult<Json<Value>> {
    let amount = |field: &str, v: Option<Value>| match v {
        None | Some(Value::Null) => Ok(None),
        Some(v) => crate::types::BaseUnits::from_json(&v)
            .map(Some)
            .ok_or_else(|| Error::invalid_field(field, "must be wei as decimal digits")),
    };
    let alerts = crate::model::chain::FeeAlerts {
        low_fee: amount("lowFee", req.low_fee)?,
        low_fee_address_balance: amount("lowFeeAddressBalance", req.low_fee_address_balance)?,
    };
    let set = chain::set_fee_alerts(&state.chains, Some(&auth), &wallet_id, alerts).await?;
    let text = |b: &Option<crate::types::BaseUnits>| b.as_ref().map(|b| b.as_str().to_string());
    Ok(Json(json!({
        "walletId": wallet_id.as_str(),
        "lowFee": text(&set.low_fee),
        "lowFeeAddressBalance": text(&set.low_fee_address_balance),
    })))
}

/// Filters and paging of a wallet's transfers.
#[derive(Debug, Deserialize, IntoParams)]
#[serde(rename_all = "camelCase")]
#[into_params(parameter_in = Query)]
pub struct TransferParams {
    #[param(minimum = 1, maximum = 500)]
    pub limit: Option<u32>,
    /// The last transfer id of the previous page (`nextBatchPrevId`).
    pub prev_id: Option<AnyId>,
    #[param(inline)]
    pub state: Option<StateParam>,
    #[serde(rename = "type")]
    #[param(rename = "type", inline)]
    pub kind: Option<KindParam>,
    /// A transaction hash, `0x` and 64 hex digits.
    #[param(pattern = "^0x[0-9a-f]{64}$")]
    pub tx_hash: Option<String>,
}

/// A transfer state to list.
#[derive(Debug, Clone, Copy, Deserialize, ToSchema)]
#[serde(rename_all = "lowercase")]
pub enum StateParam {
    Unconfirmed,
    Confirmed,
    Removed,
    Replaced,
}

/// A transfer type to list.
#[derive(Debug, Clone, Copy, Deserialize, ToSchema)]
#[serde(rename_all = "lowercase")]
pub enum KindParam {
    Send,
    Receive,
}

/// A wallet's transfers seen on chain, newest first (BitGo's `wallet.transfers()`).
#[utoipa::path(get, path = "/api/v2/{coin}/wallet/{walletId}/transfer", tag = "wallets",
    security(("bearer" = [])),
    params(("coin" = Coin, Path, description = "Coin ticker; a token coin lists that token's transfers"),
        ("walletId" = WalletId, Path, description = "Wallet id, 32 hex"), TransferParams),
    responses(
        (status = 200, description = "`{coin, transfers, nextBatchPrevId?}`", body = Object),
        (status = 400, description = "A bad path or query value", body = ErrorResponse),
        (status = 404, description = "No such wallet, or not visible", body = ErrorResponse),
    ))]
pub async fn list_transfers(
    State(state): State<AppState>,
    Auth(auth): Auth,
    ApiPath((coin, wallet_id)): ApiPath<(Coin, WalletId)>,
    ApiQuery(p): ApiQuery<TransferParams>,
) -> ApiResult<Json<Value>> {
    let page = PageRequest::new(p.limit, p.prev_id)?;
    let state_filter = p.state.map(|s| match s {
        StateParam::Unconfirmed => TransferState::Unconfirmed,
        StateParam::Confirmed => TransferState::Confirmed,
        StateParam::Removed => TransferState::Removed,
        StateParam::Replaced => TransferState::Replaced,
    });
    let kind = p.kind.map(|k| match k {
        KindParam::Send => "send",
        KindParam::Receive => "receive",
    });
    if let Some(h) = &p.tx_hash {
        if h.len() != 66 || !h.starts_with("0x") || !h[2..].bytes().all(|b| b.is_ascii_hexdigit()) {
            return Err(Error::invalid_field("txHash", "0x and 64 hex digits").into());
        }
    }
    let filter =
        TransferFilter { state: state_filter, kind, txid: p.tx_hash.map(|h| h.to_ascii_lowercase()) };
    let after = page.prev_id.as_ref().map(|id| id.as_str().to_string());
    let found = chain::list_transfers(
        &state.chains,
        &auth,
        &coin,
        &wallet_id,
        &filter,
        after.as_deref(),
        page.fetch(),
    )
    .await?;
    let page = page.page(found, |t| t.id.as_str());
    let transfers: Vec<Value> = page.items.iter().map(|t| chain::transfer_json(t, None)).collect();
    let mut body = json!({ "coin": coin.as_str(), "transfers": transfers });
    if let Some(next) = page.next_batch_prev_id {
        body["nextBatchPrevId"] = json!(next);
    }
    Ok(Json(body))
}
