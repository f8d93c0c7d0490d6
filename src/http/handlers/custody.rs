//! Custody routes (docs/withdrawals.md): custodial wallets and their keys, withdrawals
//! (`/tx/initiate`, `/txrequests`) and pending approvals, in BitGo's paths and shapes.

use axum::{
    extract::State,
    http::header,
    response::{IntoResponse, Response},
    Json,
};
use serde::{Deserialize, Serialize};
use serde_json::Value;
use utoipa::{IntoParams, ToSchema};

use crate::{
    custody::{
        history, views,
        wallets::NewCustodialWallet,
        withdrawal::{self, RecipientRequest, WithdrawalRequest},
    },
    error::Error,
    http::{
        auth::Auth,
        error::ApiResult,
        extract::{ApiJson, ApiPath, ApiQuery},
        ErrorResponse,
    },
    model::wallet::{self as model, Expand},
    types::{Coin, EnterpriseId, KeyId, TxRequestId, WalletId},
    AppState,
};

/// Body of `POST /api/v2/{coin}/wallet/add` (BitGoJS `wallets().add`). On an Ethereum coin,
/// `type: "custodial"`: Custodian makes and holds the key. On a UTXO coin, a 2-of-3 multisig
/// wallet of three keychains the caller added (`keys`: user, backup, BitGo), `type` `cold`
/// (default) or `hot`; Custodian holds none of its keys.
#[derive(Debug, Deserialize, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct AddWalletRequest {
    /// 1 to 250 characters.
    #[schema(min_length = 1, max_length = 250)]
    pub label: String,
    /// The enterprise that owns it; the caller must administer it.
    pub enterprise: EnterpriseId,
    /// `custodial` (Ethereum coins), `cold` or `hot` (UTXO coins).
    #[schema(pattern = "^(custodial|cold|hot)$")]
    pub r#type: Option<String>,
    /// Approvals each withdrawal needs (1 to 10; default 1).
    #[schema(minimum = 1, maximum = 10)]
    pub approvals_required: Option<u32>,
    /// UTXO coins: three keychain ids (`POST /api/v2/{coin}/key`), user, backup, BitGo.
    #[schema(max_items = 3)]
    pub keys: Option<Vec<String>>,
    /// UTXO coins: 2 when given.
    #[schema(minimum = 2, maximum = 2)]
    pub m: Option<u32>,
    /// UTXO coins: 3 when given.
    #[schema(minimum = 3, maximum = 3)]
    pub n: Option<u32>,
}

/// Creates a wallet: a custodial one whose key Custodian makes and holds (Ethereum), or a
/// multisig one of the caller's keychains (UTXO coins). The chain watcher follows its
/// addresses from its next round.
#[utoipa::path(post, path = "/api/v2/{coin}/wallet/add", tag = "custody", security(("bearer" = [])),
    params(("coin" = Coin, Path, description = "A configured Ethereum chain (hteth, eth), or a UTXO coin (btc, tbtc, ltc, tltc)")),
    request_body = AddWalletRequest,
    responses(
        (status = 200, description = "The wallet (§2.1)", body = Object),
        (status = 400, description = "A bad field, or a coin no chain is configured for", body = ErrorResponse),
        (status = 403, description = "No wallet_create, or not an admin of the enterprise", body = ErrorResponse),
        (status = 404, description = "No such enterprise", body = ErrorResponse),
    ))]
pub async fn add_wallet(
    State(state): State<AppState>,
    Auth(auth): Auth,
    ApiPath(coin): ApiPath<Coin>,
    ApiJson(req): ApiJson<AddWalletRequest>,
) -> ApiResult<Response> {
    let row = if crate::chain::utxo::params::Family::of(&coin).is_some() {
        let new = crate::chain::utxo::wallets::NewMultisigWallet {
            coin,
            label: req.label,
            enterprise: req.enterprise,
            keys: req.keys.unwrap_or_default(),
            m: req.m,
            n: req.n,
            r#type: req.r#type,
        };
        crate::chain::utxo::wallets::create_wallet(&state.chains, &auth, &new).await?
    } else {
        if req.r#type.as_deref() != Some("custodial") {
            let why = "only custodial wallets are made here for this coin; others are imported";
            return Err(Error::invalid_field("type", why).into());
        }
        let new = NewCustodialWallet {
            coin,
            label: req.label,
            enterprise: req.enterprise,
            approvals_required: req.approvals_required.unwrap_or(1),
        };
        crate::custody::wallets::create(&state.custody, Some(&auth), &new).await?
    };
    let mut body = String::new();
    model::render(&row, Expand { balance: true, staking: false, all_tokens: false }, &mut body);
    Ok(([(header::CONTENT_TYPE, "application/json")], body).into_response())
}

/// A key's public part (BitGo's keychain read): `{id, pub, ethAddress, source, type}` for a key
/// Custodian holds, `{id, pub, source, type}` for a multisig wallet's keychain.
#[utoipa::path(get, path = "/api/v2/{coin}/key/{id}", tag = "custody", security(("bearer" = [])),
    params(("coin" = Coin, Path, description = "Coin ticker"), ("id" = KeyId, Path, description = "Key id, 32 hex")),
    responses(
        (status = 200, description = "The key's public part", body = Object),
        (status = 400, description = "A bad path value", body = ErrorResponse),
        (status = 404, description = "No such key, or its wallet is not visible", body = ErrorResponse),
    ))]
pub async fn get_key(
    State(state): State<AppState>,
    Auth(auth): Auth,
    ApiPath((coin, id)): ApiPath<(Coin, KeyId)>,
) -> ApiResult<Json<Value>> {
    // A multisig wallet's keychain, else a key Custodian holds.
    if let Some(k) = crate::chain::utxo::wallets::find_keychain(&state.chains, &auth, &coin, &id).await? {
        return Ok(Json(k));
    }
    Ok(Json(crate::custody::wallets::key_view(&state.custody, &auth, &coin, &id).await?))
}

/// Body of a freeze.
#[derive(Debug, Deserialize, Serialize, ToSchema)]
pub struct FreezeRequest {
    /// Seconds, 1 to a year; 3600 when absent.
    #[schema(minimum = 1, maximum = 31536000)]
    pub duration: Option<u64>,
}

/// Freezes a wallet (BitGoJS `wallet.freeze({duration})`): withdrawals are refused until it
/// ends, and the wallet's `admin` webhooks are told. Answers `{time, expires}`.
#[utoipa::path(post, path = "/api/v2/{coin}/wallet/{walletId}/freeze", tag = "custody", security(("bearer" = [])),
    params(("coin" = Coin, Path, description = "Coin ticker"), ("walletId" = WalletId, Path, description = "Wallet id, 32 hex")),
    request_body = FreezeRequest,
    responses(
        (status = 200, description = "`{time, expires}` (ISO 8601)", body = Object),
        (status = 400, description = "A bad duration", body = ErrorResponse),
        (status = 403, description = "No wallet_freeze", body = ErrorResponse),
        (status = 404, description = "No such wallet, or not visible", body = ErrorResponse),
        (status = 409, description = "The wallet changed meanwhile; try again", body = ErrorResponse),
    ))]
pub async fn freeze(
    State(state): State<AppState>,
    Auth(auth): Auth,
    ApiPath((coin, wallet_id)): ApiPath<(Coin, WalletId)>,
    ApiJson(req): ApiJson<FreezeRequest>,
) -> ApiResult<Json<Value>> {
    Ok(Json(crate::custody::freeze::freeze(&state.custody, &auth, &coin, &wallet_id, req.duration).await?))
}

/// One payee of `/tx/initiate`.
#[derive(Debug, Deserialize, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct InitiateRecipient {
    /// `0x` and 40 hex digits, not the zero address; mixed case must be a valid EIP-55
    /// checksum.
    #[schema(pattern = "^0x[0-9a-fA-F]{40}$")]
    pub address: String,
    /// Base units (wei), digits or a JSON integer, above 0.
    #[schema(value_type = String, pattern = "^[0-9]{1,78}$")]
    pub amount: Value,
    /// A token configured for the chain (`hteth:usdc`): an ERC-20 withdrawal.
    pub token_name: Option<String>,
}

impl From<InitiateRecipient> for RecipientRequest {
    fn from(r: InitiateRecipient) -> Self {
        RecipientRequest { address: r.address, amount: r.amount, token_name: r.token_name }
    }
}

/// Body of `POST /api/v2/{coin}/wallet/{walletId}/tx/initiate` (BitGoJS `sendMany` on a
/// custodial wallet).
#[derive(Debug, Deserialize, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct InitiateRequest {
    /// Exactly one (an Ethereum transaction pays one address).
    #[schema(min_items = 1, max_items = 1)]
    pub recipients: Vec<InitiateRecipient>,
    /// At most 256 characters.
    #[schema(max_length = 256)]
    pub comment: Option<String>,
    /// A TOTP code or passkey assertion, checked when given.
    pub otp: Option<String>,
    /// An idempotency key: the same one twice gives one withdrawal (1 to 128 characters).
    #[schema(min_length = 1, max_length = 128)]
    pub sequence_id: Option<String>,
}

/// Starts a withdrawal from a custodial wallet: answers the pending approval it made (BitGo's
/// shape). Needs `wallet_spend`, spend rights, and a spending limit covering the amount or an
/// unlocked session.
#[utoipa::path(post, path = "/api/v2/{coin}/wallet/{walletId}/tx/initiate", tag = "custody", security(("bearer" = [])),
    params(("coin" = Coin, Path, description = "Coin ticker"), ("walletId" = WalletId, Path, description = "Wallet id, 32 hex")),
    request_body = InitiateRequest,
    responses(
        (status = 200, description = "The pending approval", body = Object),
        (status = 400, description = "A bad field, not custodial, frozen, or not enough funds", body = ErrorResponse),
        (status = 401, description = "Not authenticated, a wrong OTP, or the session must be unlocked (needsUnlock)", body = ErrorResponse),
        (status = 403, description = "No wallet_spend or spend rights, or a policy rule denies it (`PolicyDenied`)", body = ErrorResponse),
        (status = 404, description = "No such wallet, or not visible", body = ErrorResponse),
        (status = 409, description = "Too many withdrawals in flight", body = ErrorResponse),
    ))]
pub async fn initiate(
    State(state): State<AppState>,
    Auth(auth): Auth,
    ApiPath((coin, wallet_id)): ApiPath<(Coin, WalletId)>,
    ApiJson(req): ApiJson<InitiateRequest>,
) -> ApiResult<Json<Value>> {
    let request = WithdrawalRequest {
        recipients: req.recipients.into_iter().map(RecipientRequest::from).collect(),
        comment: req.comment,
        otp: req.otp,
        idempotency_key: req.sequence_id,
    };
    let started = withdrawal::initiate(&state.custody, &auth, &coin, &wallet_id, &request).await?;
    let pair = [(started.approval, Some(started.withdrawal))];
    let shown = crate::custody::approvals::shown::shown_all(&state.custody, &pair).await?.pop().flatten();
    let [(approval, withdrawal)] = pair;
    Ok(Json(views::approval(&approval, withdrawal.as_ref(), shown.as_ref())))
}

/// `{address: {address}}` of a txRequest recipient.
#[derive(Debug, Deserialize, Serialize, ToSchema)]
pub struct IntentAddress {
    /// `0x` and 40 hex digits, not the zero address; mixed case must be a valid EIP-55
    /// checksum.
    #[schema(pattern = "^0x[0-9a-fA-F]{40}$")]
    pub address: String,
}

/// `{value, symbol}` of a txRequest recipient.
#[derive(Debug, Deserialize, Serialize, ToSchema)]
pub struct IntentAmount {
    /// Base units of `symbol`'s coin, digits or a JSON integer, above 0.
    #[schema(value_type = String, pattern = "^[0-9]{1,78}$")]
    pub value: Value,
    /// What is paid: the wallet's coin (`hteth`, the default) or a token configured for its
    /// chain (`hteth:usdc`), the same for every recipient; anything else is 400 `InvalidField`.
    pub symbol: Option<String>,
}

/// One payee of a payment intent.
#[derive(Debug, Deserialize, Serialize, ToSchema)]
pub struct IntentRecipient {
    pub address: IntentAddress,
    pub amount: IntentAmount,
}

/// A payment intent.
#[derive(Debug, Deserialize, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct Intent {
    /// `payment`.
    #[schema(pattern = "^payment$")]
    pub intent_type: String,
    #[schema(min_items = 1, max_items = 1)]
    pub recipients: Vec<IntentRecipient>,
    #[schema(max_length = 256)]
    pub comment: Option<String>,
    /// An idempotency key, as BitGo's examples put it in the intent.
    #[schema(min_length = 1, max_length = 128)]
    pub sequence_id: Option<String>,
}

/// Body of `POST /api/v2/wallet/{walletId}/txrequests`.
#[derive(Debug, Deserialize, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct TxRequestBody {
    pub intent: Intent,
    /// The same key twice gives one withdrawal (1 to 128 characters).
    #[schema(min_length = 1, max_length = 128)]
    pub idempotency_key: Option<String>,
    /// `full` (the only one answered).
    pub api_version: Option<String>,
    pub otp: Option<String>,
}

/// Starts a withdrawal as a txRequest (BitGo's transaction request route); answers the
/// txRequest. The same rules as `/tx/initiate`.
#[utoipa::path(post, path = "/api/v2/wallet/{walletId}/txrequests", tag = "custody", security(("bearer" = [])),
    params(("walletId" = WalletId, Path, description = "Wallet id, 32 hex")),
    request_body = TxRequestBody,
    responses(
        (status = 200, description = "The txRequest", body = Object),
        (status = 400, description = "A bad field, not custodial, frozen, or not enough funds", body = ErrorResponse),
        (status = 401, description = "Not authenticated, or the session must be unlocked (needsUnlock)", body = ErrorResponse),
        (status = 403, description = "No wallet_spend or spend rights, or a policy rule denies it (`PolicyDenied`)", body = ErrorResponse),
        (status = 404, description = "No such wallet, or not visible", body = ErrorResponse),
        (status = 409, description = "Too many withdrawals in flight", body = ErrorResponse),
    ))]
pub async fn create_tx_request(
    State(state): State<AppState>,
    Auth(auth): Auth,
    ApiPath(wallet_id): ApiPath<WalletId>,
    ApiJson(req): ApiJson<TxRequestBody>,
) -> ApiResult<Json<Value>> {
    if req.intent.intent_type != "payment" {
        return Err(Error::invalid_field("intent.intentType", "only payment").into());
    }
    let wallet = crate::wallets::wallet_row(&state.wallets, &auth, &wallet_id).await?;
    // `amount.symbol` names what is paid: the wallet's coin, or a token of its chain, which
    // is then the coin the withdrawal is started for (as the token's own route does).
    let symbols: Vec<Option<&str>> =
        req.intent.recipients.iter().map(|r| r.amount.symbol.as_deref()).collect();
    let coin = crate::custody::tokens::intent_coin(&state.custody, &auth, &wallet_id, &wallet.coin, &symbols)
        .await?;
    let request = WithdrawalRequest {
        recipients: req
            .intent
            .recipients
            .into_iter()
            .map(|r| RecipientRequest {
                address: r.address.address,
                amount: r.amount.value,
                token_name: None,
            })
            .collect(),
        comment: req.intent.comment,
        otp: req.otp,
        idempotency_key: req.idempotency_key.or(req.intent.sequence_id),
    };
    let started = withdrawal::initiate(&state.custody, &auth, &coin, &wallet_id, &request).await?;
    let record = crate::custody::history::WithdrawalRecord {
        withdrawal: started.withdrawal,
        attempts: Vec::new(),
        fill: None,
    };
    Ok(Json(views::tx_request(&record)))
}

/// Query of the txRequest list.
#[derive(Debug, Deserialize, IntoParams)]
#[serde(rename_all = "camelCase")]
#[into_params(parameter_in = Query)]
pub struct TxRequestQuery {
    /// Comma-separated txRequest ids (32 hex), 1 to 100.
    #[param(pattern = "^[0-9a-f]{32}(,[0-9a-f]{32}){0,99}$")]
    pub tx_request_ids: Option<String>,
    /// 1 to 500; default 100.
    #[param(minimum = 1, maximum = 500)]
    pub limit: Option<u32>,
}

/// A wallet's txRequests, oldest first (`?txRequestIds=` narrows them).
#[utoipa::path(get, path = "/api/v2/wallet/{walletId}/txrequests", tag = "custody", security(("bearer" = [])),
    params(("walletId" = WalletId, Path, description = "Wallet id, 32 hex"), TxRequestQuery),
    responses(
        (status = 200, description = "`{txRequests: [...]}`", body = Object),
        (status = 400, description = "A bad query value", body = ErrorResponse),
        (status = 404, description = "No such wallet, or not visible", body = ErrorResponse),
    ))]
pub async fn list_tx_requests(
    State(state): State<AppState>,
    Auth(auth): Auth,
    ApiPath(wallet_id): ApiPath<WalletId>,
    ApiQuery(q): ApiQuery<TxRequestQuery>,
) -> ApiResult<Json<Value>> {
    let ids = match q.tx_request_ids.as_deref() {
        None => None,
        Some(text) => Some(
            text.split(',')
                .map(|s| {
                    s.trim()
                        .parse()
                        .map_err(|_| Error::invalid_field("txRequestIds", "32-hex ids, comma-separated"))
                })
                .collect::<Result<Vec<TxRequestId>, _>>()?,
        ),
    };
    let limit = q.limit.unwrap_or(100);
    let found = history::list(&state.custody, &auth, &wallet_id, ids, limit).await?;
    let out: Vec<Value> = found.iter().map(views::tx_request).collect();
    Ok(Json(serde_json::json!({ "txRequests": out })))
}
