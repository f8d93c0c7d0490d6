//! The chain room (docs/chains.md): Custodian follows Ethereum nodes itself. A watcher per
//! configured chain reads blocks, finds the transfers of watched wallet addresses, follows
//! their states through confirmations and reorgs, keeps balances, and emits the §6 events
//! through the one ingestion path the API uses (`webhooks::events`).
//!
//! Layer rule: no web-framework types and nothing of the HTTP layer (docs/architecture.md).

pub mod ahead;
pub mod alerts;
pub mod announce;
mod balances;
pub mod book;
pub mod fetch;
pub mod follow;
pub mod found;
pub mod node;
pub mod pool;
pub mod spawn;
pub mod speed;
pub mod utxo;
pub mod views;
pub mod watcher;
pub mod window;

pub use views::{views, wallet_view, ChainView, WalletView};

use std::sync::Arc;

use serde_json::{json, Value};

use crate::{
    config::Config,
    error::{Error, ErrorName, Result},
    identity::{bearer::Principal, scopes::Action},
    model::{
        audit::AuditType,
        chain::{ChainStatus, FeeAlerts, Transfer, WalletAddress},
        wallet::WalletRow,
    },
    store::{DynStore, TransferFilter},
    types::{Coin, WalletId},
    wallets::Wallets,
    webhooks::Webhooks,
};

/// What the chain functions use.
#[derive(Clone)]
pub struct Chains {
    pub store: DynStore,
    pub config: Arc<Config>,
    pub wallets: Wallets,
    pub webhooks: Webhooks,
    pub metrics: Arc<crate::metrics::Metrics>,
}

/// Most addresses or transfers in one page.
pub const MAX_PAGE: u32 = 500;

/// The chain coin of a coin: `hteth` for `hteth` and `hteth:usdc`.
pub fn chain_of(coin: &Coin) -> Result<Coin> {
    coin.as_str()
        .split(':')
        .next()
        .unwrap_or_default()
        .parse()
        .map_err(|_| Error::invalid_field("coin", "not a coin"))
}

/// Adds a watched address to wallet `wallet_id` (its chain is the wallet's coin): an Ethereum
/// address, or a UTXO coin's address of its network ([`utxo::wallets::import_address`]). `auth`
/// is `None` for the operator's CLI; a token needs the service-admin permission. Errors:
/// `Forbidden`, `WalletNotFound`, `InvalidField` (`address`: not an address of the coin),
/// `WalletNotWatched` (409: a coin that is neither), `AddressInUse` (409) when another wallet
/// of the chain watches it, `AddressLimitReached` (a UTXO wallet's cap).
pub async fn add_address(
    svc: &Chains,
    auth: Option<&Principal>,
    wallet_id: &WalletId,
    text: &str,
    label: Option<String>,
) -> Result<WalletAddress> {
    if let Some(auth) = auth {
        auth.require(svc.wallets.policy, Action::ServiceAdmin)?;
    }
    if label.as_ref().is_some_and(|l| l.chars().count() > 250) {
        return Err(Error::invalid_field("label", "at most 250 characters"));
    }
    let found = svc.store.wallets_by_ids(std::slice::from_ref(wallet_id), false).await?.pop();
    let coin = found.ok_or_else(|| Error::not_found(ErrorName::WalletNotFound))?.coin;
    if utxo::params::Family::of(&coin).is_some() {
        return utxo::wallets::import_address(svc, auth, wallet_id, &coin, text, label).await;
    }
    let address = crate::types::parse_eth_address(text).map_err(|e| Error::invalid_field("address", e))?;
    let wallet = watched_wallet(svc, wallet_id, "address").await?;
    let added = WalletAddress {
        chain: wallet.coin.clone(),
        address: crate::types::checksummed_eth_address(&address),
        wallet_id: wallet_id.clone(),
        label,
        created_at: svc.store.clock().now(),
        scripts: None,
        position: None,
    };
    let entry = audited(auth, AuditType::WalletAddressAdded, wallet_id, json!({ "address": added.address }));
    match svc.store.add_address(&added, &[entry]).await? {
        Ok(()) => Ok(added),
        Err(owner) if &owner == wallet_id => Ok(added),
        Err(_) => Err(Error::Conflict {
            name: ErrorName::AddressInUse,
            message: "another wallet of this chain already watches that address".into(),
        }),
    }
}

/// The addresses a wallet's record names: `coinSpecific.baseAddress` and
/// `receiveAddress.address`; malformed ones are left out.
pub fn record_addresses(record: &Value) -> Vec<alloy_primitives::Address> {
    let mut out: Vec<_> = ["/coinSpecific/baseAddress", "/receiveAddress/address"]
        .into_iter()
        .filter_map(|p| record_address(record, p))
        .collect();
    out.dedup();
    out
}

/// Sets a wallet's fee alerts (`lowFee`, `lowFeeAddressBalance` thresholds, wei; on a UTXO
/// chain `lowFee` is base units per 1000 virtual bytes and there is no fee address; `None` is
/// off), audited as `wallet.fee_alerts_set`. Errors: `Forbidden` (not a service admin),
/// `WalletNotFound`, `WalletNotWatched` (409: a coin the watcher does not read),
/// `InvalidField` (`lowFeeAddressBalance` for a UTXO wallet).
pub async fn set_fee_alerts(
    svc: &Chains,
    auth: Option<&Principal>,
    wallet_id: &WalletId,
    alerts: FeeAlerts,
) -> Result<FeeAlerts> {
    if let Some(auth) = auth {
        auth.require(svc.wallets.policy, Action::ServiceAdmin)?;
    }
    let wallet = watched_wallet(svc, wallet_id, "walletId").await?;
    if utxo::params::Family::of(&wallet.coin).is_some() && alerts.low_fee_address_balance.is_some() {
        return Err(Error::invalid_field("lowFeeAddressBalance", "a UTXO wallet has no fee address"));
    }
    let text = |b: &Option<crate::types::BaseUnits>| b.as_ref().map(|b| b.as_str().to_string());
    let data = json!({ "lowFee": text(&alerts.low_fee), "lowFeeAddressBalance": text(&alerts.low_fee_address_balance) });
    let entry = audited(auth, AuditType::WalletFeeAlertsSet, wallet_id, data);
    svc.store.set_fee_alerts(wallet_id, &alerts, &[entry]).await?;
    Ok(alerts)
}

/// The `tokens` object of a wallet of a watched chain: for each token coin read so far, its
/// `balanceString`, `confirmedBalanceString` and `spendableBalanceString` (base units, from
/// `balanceOf`). `None` when the wallet's chain has no tokens configured, none was read, or
/// the imported record has a `tokens` field of its own (it is served as imported).
pub async fn token_balances(svc: &Chains, wallet: &WalletRow) -> Result<Option<Value>> {
    if svc.config.chains.get(wallet.coin.as_str()).is_none_or(|c| c.tokens.is_empty()) {
        return Ok(None);
    }
    let record = serde_json::from_str::<serde_json::Map<String, Value>>(wallet.record.as_str());
    if record.is_ok_and(|r| r.contains_key("tokens")) {
        return Ok(None);
    }
    let rows = svc.store.token_balances(&wallet.id).await?;
    if rows.is_empty() {
        return Ok(None);
    }
    let tokens = rows.into_iter().map(|(coin, balance, confirmed, spendable)| {
        let b = json!({ "balanceString": balance, "confirmedBalanceString": confirmed, "spendableBalanceString": spendable });
        (coin, b)
    });
    Ok(Some(Value::Object(tokens.collect())))
}

/// The wallet `wallet_id`, of a coin the watcher reads. Errors: `WalletNotFound`,
/// `WalletNotWatched` (409, the message naming `field`) for another coin.
async fn watched_wallet(svc: &Chains, wallet_id: &WalletId, field: &str) -> Result<WalletRow> {
    let wallet = svc
        .store
        .wallets_by_ids(std::slice::from_ref(wallet_id), false)
        .await?
        .pop()
        .ok_or_else(|| Error::not_found(ErrorName::WalletNotFound))?;
    let coin = wallet.coin.as_str();
    let utxo_read = svc.config.chains.get(coin).is_some_and(|c| c.is_utxo());
    if !crate::config::WATCHABLE_COINS.contains(&coin) && !utxo_read {
        // The request is well formed; the wallet it names is of a coin no watcher reads.
        let message = format!(
            "{field}: wallet coin {} is not an Ethereum coin nor a configured UTXO chain",
            wallet.coin.as_str()
        );
        return Err(Error::Conflict { name: ErrorName::WalletNotWatched, message });
    }
    Ok(wallet)
}

/// The audit entry of a change to `wallet` by `auth`, or by the operator (the CLI).
fn audited(
    auth: Option<&Principal>,
    ty: AuditType,
    wallet: &WalletId,
    data: Value,
) -> crate::model::audit::AuditEntry {
    let entry = match auth {
        Some(auth) => auth.audit(ty),
        None => crate::audit::EntryExt::data(crate::audit::entry(ty), json!({ "by": "operator" })),
    };
    let entry = crate::audit::EntryExt::wallet(entry, Some(wallet));
    crate::audit::EntryExt::data(entry, data)
}

/// A wallet record's address at `pointer` (`/coinSpecific/baseAddress`,
/// `/coinSpecific/feeAddress`), when it is one.
pub fn record_address(record: &Value, pointer: &str) -> Option<alloy_primitives::Address> {
    crate::types::parse_eth_address(record.pointer(pointer)?.as_str()?).ok()
}

/// A wallet the principal may see, of the chain coin of `coin`.
async fn visible_wallet(
    svc: &Chains,
    auth: &Principal,
    coin: &Coin,
    wallet_id: &WalletId,
) -> Result<WalletRow> {
    crate::wallets::get_wallet(&svc.wallets, auth, &chain_of(coin)?, wallet_id).await
}

/// A wallet's addresses (BitGo's `GET /api/v2/{coin}/wallet/{id}/addresses`): those its record
/// names and those added, by address, after `after`, at most `limit` (1 to [`MAX_PAGE`]).
/// Errors: as `wallets::get_wallet`.
pub async fn list_addresses(
    svc: &Chains,
    auth: &Principal,
    coin: &Coin,
    wallet_id: &WalletId,
    after: Option<&str>,
    limit: u32,
) -> Result<Vec<WalletAddress>> {
    let wallet = visible_wallet(svc, auth, coin, wallet_id).await?;
    let mut found = svc.store.wallet_addresses(wallet_id, after, limit).await?;
    let record = serde_json::from_str::<Value>(wallet.record.as_str()).unwrap_or_default();
    if utxo::params::Family::of(&wallet.coin).is_some() {
        if let Some(a) = utxo::wallets::record_address(&wallet, &record)? {
            if after.is_none_or(|after| a.address.as_str() > after)
                && !found.iter().any(|f| f.address == a.address)
            {
                found.push(a);
            }
        }
        found.sort_by(|a, b| a.address.cmp(&b.address));
        found.truncate(limit as usize);
        return Ok(found);
    }
    for a in record_addresses(&record).iter().map(crate::types::checksummed_eth_address) {
        if after.is_none_or(|after| a.as_str() > after) && !found.iter().any(|f| f.address == a) {
            found.push(WalletAddress {
                chain: wallet.coin.clone(),
                address: a,
                wallet_id: wallet_id.clone(),
                label: None,
                created_at: 0,
                scripts: None,
                position: None,
            });
        }
    }
    found.sort_by(|a, b| a.address.cmp(&b.address));
    found.truncate(limit as usize);
    Ok(found)
}

/// BitGo's address record: `{id, address, coin, wallet, label, chain, index}`, and for a
/// derived address its `addressType` and `coinSpecific` (`outputScript`, `redeemScript`,
/// `witnessScript`, hex).
pub fn address_json(a: &WalletAddress, coin: &Coin) -> Value {
    let mut v = json!({
        "id": crate::digest::sha256_hex(format!("{}|{}", a.chain.as_str(), a.address).as_bytes())[..32],
        "address": a.address,
        "coin": coin.as_str(),
        "wallet": a.wallet_id.as_str(),
        "label": a.label.clone().unwrap_or_default(),
        "chain": 0,
        "index": 0,
    });
    if let Some(p) = &a.position {
        let kind = utxo::address::ChainCode::new(p.chain).map(|c| c.script_type().as_str());
        v["chain"] = json!(p.chain);
        v["index"] = json!(p.index);
        v["addressType"] = json!(kind.unwrap_or_default());
    }
    if let Some(s) = &a.scripts {
        v["coinSpecific"] = serde_json::to_value(s).unwrap_or_default();
    }
    v
}

/// A wallet's chain transfers of `coin`, newest first. Errors: as `wallets::get_wallet`.
pub async fn list_transfers(
    svc: &Chains,
    auth: &Principal,
    coin: &Coin,
    wallet_id: &WalletId,
    filter: &TransferFilter,
    after: Option<&str>,
    limit: u32,
) -> Result<Vec<Transfer>> {
    visible_wallet(svc, auth, coin, wallet_id).await?;
    Ok(svc.store.wallet_transfers(wallet_id, coin.as_str(), filter, after, limit).await?)
}

/// A chain transfer of a wallet the principal may see; `None` when the watcher has none by
/// that id (the caller then looks at ingested events).
pub async fn get_transfer(
    svc: &Chains,
    auth: &Principal,
    coin: &Coin,
    wallet_id: &WalletId,
    id: &str,
) -> Result<Option<Transfer>> {
    visible_wallet(svc, auth, coin, wallet_id).await?;
    Ok(svc.store.transfer_by_id(wallet_id, id).await?.filter(|t| &t.coin == coin))
}

/// BitGo's transfer record: value and fee in base units, as numbers (when they fit 2^53) and
/// as strings; `value` includes the fee the wallet paid, `baseValue` does not
/// ([`crate::model::chain::base_value`]).
pub fn transfer_json(t: &Transfer, confirmations_now: Option<u64>) -> Value {
    let number = |s: &str| s.parse::<i64>().ok().filter(|n| n.unsigned_abs() < (1 << 53)).map(Value::from);
    let base = t.base_value();
    let mut v = json!({
        "id": t.id,
        "coin": t.coin.as_str(),
        "wallet": t.wallet_id.as_str(),
        "txid": t.txid,
        "height": t.height,
        "blockHash": t.block_hash,
        "date": crate::clock::iso(t.date),
        "confirmations": confirmations_now.unwrap_or(t.confirmations),
        "type": t.kind(),
        "value": number(&t.value),
        "valueString": t.value,
        "baseValue": number(&base),
        "baseValueString": base,
        "feeString": t.fee,
        "state": t.state.as_str(),
        "entries": t.entries.iter().map(|e| {
            let mut entry = json!({
                "address": e.address,
                "value": number(&e.value),
                "valueString": e.value,
            });
            // On a UTXO chain only the wallet's own addresses carry its id.
            if t.utxo.is_none() || e.is_change.is_none_or(|change| change) || e.value.starts_with('-') {
                entry["wallet"] = json!(t.wallet_id.as_str());
            }
            if let Some(change) = e.is_change {
                entry["isChange"] = json!(change);
            }
            entry
        }).collect::<Vec<_>>(),
    });
    if let Some(u) = &t.utxo {
        v["inputs"] = u.inputs.iter().map(utxo_leg_json).collect();
        v["outputs"] = u.outputs.iter().map(utxo_leg_json).collect();
    }
    v
}

/// A UTXO transfer's input or output as BitGo writes it: `id` (`txid:vout`), `address`,
/// `value` and `valueString` (base units), `blockHeight`, and for the wallet's own its
/// `wallet`, `chain` and `index`.
fn utxo_leg_json(l: &crate::model::chain::UtxoLeg) -> Value {
    let mut v = json!({ "id": l.id });
    if let Some(a) = &l.address {
        v["address"] = json!(a);
    }
    if let Some(value) = l.value {
        v["value"] = json!(value);
        v["valueString"] = json!(value.to_string());
    }
    if let Some(h) = l.block_height {
        v["blockHeight"] = json!(h);
    }
    if let Some(w) = &l.wallet {
        v["wallet"] = json!(w.as_str());
    }
    if let Some(c) = l.chain {
        v["chain"] = json!(c);
    }
    if let Some(i) = l.index {
        v["index"] = json!(i);
    }
    v
}

/// Every configured chain's status, with its settings' coin order.
pub async fn status(svc: &Chains) -> Result<Vec<ChainStatus>> {
    let mut out = Vec::new();
    for coin in svc.config.chains.keys() {
        let s = svc.store.chain_status(coin).await?;
        out.push(s.unwrap_or(ChainStatus { chain: coin.clone(), ..Default::default() }));
    }
    Ok(out)
}

/// Restarts the watch of `coin` at block `from`, clearing a halt (after a reorg deeper than
/// `reorg_depth`). Errors: `InvalidField` when `coin` is not a configured chain.
pub async fn resync(svc: &Chains, coin: &str, from: u64) -> Result<()> {
    if !svc.config.chains.contains_key(coin) {
        return Err(Error::invalid_field("coin", format!("{coin} is not a configured chain")));
    }
    let entry = crate::audit::EntryExt::data(
        crate::audit::entry(AuditType::ChainResync),
        json!({ "coin": coin, "from": from }),
    );
    svc.store.resync_chain(coin, from, &[entry]).await?;
    Ok(())
}
