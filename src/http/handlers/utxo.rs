//! Multisig wallets of UTXO coins (docs/chains.md#utxo-chains): BitGo's keychain and address
//! routes. Wallets are made by `POST /api/v2/{coin}/wallet/add` (`custody::add_wallet`).

use axum::{extract::State, Json};
use serde::{Deserialize, Serialize};
use serde_json::Value;
use utoipa::{IntoParams, ToSchema};

use crate::{
    chain::utxo::wallets,
    http::{
        auth::Auth,
        error::ApiResult,
        extract::{ApiJson, ApiPath, ApiQuery},
        ErrorResponse,
    },
    types::{Coin, WalletId},
    AppState,
};

/// Body of `POST /api/v2/{coin}/key` (BitGoJS `keychains().add`). Other fields the SDK sends
/// (`encryptedPrv`, `type`) are not kept: Custodian keeps public keys only.
#[derive(Debug, Deserialize, Serialize, ToSchema)]
pub struct AddKeychainRequest {
    /// A base58 extended public key (`xpub…` or `tpub…`, BIP 32).
    #[schema(max_length = 200)]
    pub r#pub: Option<String>,
    /// `user` (default), `backup` or `bitgo`.
    #[schema(pattern = "^(user|backup|bitgo)$")]
    pub source: Option<String>,
}

/// Adds a keychain (an extended public key) for the caller's multisig wallets of a UTXO coin:
/// `{id, pub, source, type: "independent"}`. A wallet then names three of them.
#[utoipa::path(post, path = "/api/v2/{coin}/key", tag = "utxo", security(("bearer" = [])),
    params(("coin" = Coin, Path, description = "A UTXO coin: btc, tbtc, ltc, tltc")),
    request_body = AddKeychainRequest,
    responses(
        (status = 200, description = "The keychain", body = Object),
        (status = 400, description = "No or a bad `pub`, a bad `source`, not a UTXO coin, or `KeychainLimitReached`", body = ErrorResponse),
        (status = 403, description = "No user_manage", body = ErrorResponse),
    ))]
pub async fn add_keychain(
    State(state): State<AppState>,
    Auth(auth): Auth,
    ApiPath(coin): ApiPath<Coin>,
    ApiJson(req): ApiJson<AddKeychainRequest>,
) -> ApiResult<Json<Value>> {
    let added =
        wallets::add_keychain(&state.chains, &auth, &coin, req.r#pub.as_deref(), req.source.as_deref());
    Ok(Json(added.await?))
}

/// Body of `POST /api/v2/{coin}/wallet/{walletId}/address` (BitGoJS `wallet.createAddress`).
#[derive(Debug, Deserialize, Serialize, ToSchema)]
pub struct CreateAddressRequest {
    /// BitGo's chain code: 0/1 p2sh, 10/11 p2shP2wsh, 20/21 p2wsh (odd: change). Default 0.
    #[schema(maximum = 21)]
    pub chain: Option<u32>,
    #[schema(max_length = 250)]
    pub label: Option<String>,
}

/// Derives the wallet's next address of `chain` from its three keychains (BitGo's 2-of-3
/// multisig at `0/0/{chain}/{index}`), watched from the next block.
#[utoipa::path(post, path = "/api/v2/{coin}/wallet/{walletId}/address", tag = "utxo", security(("bearer" = [])),
    params(("coin" = Coin, Path, description = "A UTXO coin: btc, tbtc, ltc, tltc"), ("walletId" = WalletId, Path, description = "Wallet id, 32 hex")),
    request_body = CreateAddressRequest,
    responses(
        (status = 200, description = "`{id, address, chain, index, coin, wallet, label, addressType, coinSpecific}`", body = Object),
        (status = 400, description = "A bad chain code or label, not a UTXO coin, or `AddressLimitReached`", body = ErrorResponse),
        (status = 403, description = "No wallet_manage", body = ErrorResponse),
        (status = 404, description = "No such wallet, or not visible", body = ErrorResponse),
        (status = 409, description = "The wallet's keys are not keychains added here (`WalletNotWatched`)", body = ErrorResponse),
    ))]
pub async fn create_address(
    State(state): State<AppState>,
    Auth(auth): Auth,
    ApiPath((coin, wallet_id)): ApiPath<(Coin, WalletId)>,
    ApiJson(req): ApiJson<CreateAddressRequest>,
) -> ApiResult<Json<Value>> {
    let chain = req.chain.unwrap_or(0);
    let a = wallets::create_address(&state.chains, &auth, &coin, &wallet_id, chain, req.label).await?;
    Ok(Json(crate::chain::address_json(&a, &coin)))
}

/// Paging and filters of a wallet's unspents (BitGo's names).
#[derive(Debug, Deserialize, IntoParams)]
#[serde(rename_all = "camelCase")]
#[into_params(parameter_in = Query)]
pub struct UnspentParams {
    #[param(minimum = 1, maximum = 500)]
    pub limit: Option<u32>,
    /// The last unspent of the previous page (`nextBatchPrevId`, `txid:vout`).
    #[param(pattern = "^[0-9a-fA-F]{64}:[0-9]{1,10}$")]
    pub prev_id: Option<String>,
    /// Only outputs with at least this many confirmations; 0 (the default) includes the
    /// mempool's.
    #[param(maximum = 1000000)]
    pub min_confirms: Option<u64>,
    /// Only outputs of at least this value, base units.
    #[param(maximum = 10_000_000_000_000_000_u64)]
    pub min_value: Option<u64>,
}

/// A UTXO wallet's unspent outputs (BitGoJS `wallet.unspents()`), by outpoint:
/// `{coin, unspents: [{id, address, value, valueString, blockHeight, date, wallet, chain,
/// index}], count, nextBatchPrevId?}`. Outputs spent by a mempool transaction are left out.
#[utoipa::path(get, path = "/api/v2/{coin}/wallet/{walletId}/unspents", tag = "utxo", security(("bearer" = [])),
    params(("coin" = Coin, Path, description = "A UTXO coin: btc, tbtc, ltc, tltc"), ("walletId" = WalletId, Path, description = "Wallet id, 32 hex"), UnspentParams),
    responses(
        (status = 200, description = "`{coin, unspents, count, nextBatchPrevId?}`", body = Object),
        (status = 400, description = "A bad query value, or not a UTXO coin", body = ErrorResponse),
        (status = 404, description = "No such wallet, or not visible", body = ErrorResponse),
    ))]
pub async fn list_unspents(
    State(state): State<AppState>,
    Auth(auth): Auth,
    ApiPath((coin, wallet_id)): ApiPath<(Coin, WalletId)>,
    ApiQuery(p): ApiQuery<UnspentParams>,
) -> ApiResult<Json<Value>> {
    use crate::chain::utxo::unspents;
    let page = crate::paging::PageRequest::new(p.limit, None)?;
    let q = unspents::UnspentQuery {
        min_confirms: p.min_confirms.unwrap_or(0),
        min_value: p.min_value.unwrap_or(0),
        prev_id: p.prev_id,
        limit: page.fetch() - 1,
    };
    let found = unspents::list(&state.chains, &auth, &coin, &wallet_id, &q).await?;
    let ids: Vec<String> = found.iter().map(|u| format!("{}:{}", u.txid, u.vout)).collect();
    let page = page.page(found.iter().zip(&ids).collect(), |(_, id)| id.as_str());
    let list: Vec<Value> = page.items.iter().map(|(u, _)| unspents::unspent_json(u)).collect();
    let mut body = serde_json::json!({ "coin": coin.as_str(), "count": list.len(), "unspents": list });
    if let Some(next) = page.next_batch_prev_id {
        body["nextBatchPrevId"] = serde_json::json!(next);
    }
    Ok(Json(body))
}
