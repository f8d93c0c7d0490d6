//! Multisig wallets of UTXO coins, BitGo's way (docs/chains.md#utxo-chains): keychains are
//! extended public keys a user adds (`POST /api/v2/{coin}/key`, BitGoJS `keychains().add`); a
//! wallet names three of them, user, backup and BitGo (`POST /api/v2/{coin}/wallet/add`); its
//! addresses are derived from them ([`super::address`]), one chain code and index at a time
//! (`POST /api/v2/{coin}/wallet/{id}/address`). Custodian holds no private key of these.

use serde_json::{json, Value};

use super::address::{derive, ChainCode, Derived, WalletKeys};
use super::params::{AddressParams, Family};
use crate::{
    audit::EntryExt,
    chain::Chains,
    error::{Error, ErrorName, Result},
    grant::WalletPermission,
    identity::{bearer::Principal, scopes::Action},
    model::{
        audit::AuditType,
        chain::{Position, Scripts, WalletAddress},
        wallet::WalletRow,
    },
    store::{KeychainRow, UtxoAdded},
    types::{Coin, EnterpriseId, KeyId, WalletId},
};

/// Who a keychain stands for in the wallet, BitGo's `source`.
pub const SOURCES: [&str; 3] = ["user", "backup", "bitgo"];

/// The UTXO family of `coin`. Errors: `InvalidField` (`coin`).
fn family(coin: &Coin) -> Result<Family> {
    Family::of(coin).ok_or_else(|| {
        Error::invalid_field("coin", format!("{} is not a UTXO coin (btc, tbtc, ltc, tltc)", coin.as_str()))
    })
}

/// How `coin`'s addresses are written: on the network its ticker names (`t…` is testnet; a
/// configured node's network will decide once UTXO chains are configured).
pub fn address_params(coin: &Coin) -> Result<AddressParams> {
    Ok(family(coin)?.params(Family::default_network(coin)))
}

/// BitGo's keychain: `{id, pub, source, type: "independent"}`.
pub fn keychain_view(k: &KeychainRow) -> Value {
    json!({ "id": k.id.as_str(), "pub": k.r#pub, "source": k.source, "type": "independent", "coin": k.coin.as_str() })
}

/// Adds a keychain of `coin` for the caller: `pub` an extended public key (`xpub…`/`tpub…`),
/// `source` one of [`SOURCES`] (default `user`). Audited as `keychain.added`. Needs
/// `user_manage`. Errors: `InvalidField` (`coin`, `pub`, `source`), `MissingField` (`pub`:
/// Custodian makes no key for these wallets), `KeychainLimitReached` past
/// `utxo.max_keychains_per_user`.
pub async fn add_keychain(
    svc: &Chains,
    auth: &Principal,
    coin: &Coin,
    public: Option<&str>,
    source: Option<&str>,
) -> Result<Value> {
    auth.require(svc.wallets.policy, Action::ManageOwnTokens)?;
    family(coin)?;
    let public = public.map(str::trim).ok_or_else(|| Error::Invalid {
        name: ErrorName::MissingField,
        message: "pub is required: Custodian keeps the extended public keys of UTXO wallets and makes none"
            .into(),
        context: json!({ "field": "pub" }),
    })?;
    super::address::parse_xpub(public).map_err(|e| Error::invalid_field("pub", e))?;
    let source = source.unwrap_or("user");
    if !SOURCES.contains(&source) {
        return Err(Error::invalid_field("source", "user, backup or bitgo"));
    }
    let row = KeychainRow {
        id: KeyId::new_random(),
        coin: coin.clone(),
        r#pub: public.to_string(),
        source: source.to_string(),
        user_id: auth.user.id.clone(),
        wallet_id: None,
        created_at: svc.store.clock().now(),
    };
    let entry = auth.audit(AuditType::KeychainAdded).data(json!({ "keychainId": row.id.as_str(),
        "coin": coin.as_str(), "source": source, "pub": row.r#pub }));
    let max = svc.config.utxo.max_keychains_per_user;
    if !svc.store.add_keychain(&row, max, &[entry]).await? {
        return Err(Error::Invalid {
            name: ErrorName::KeychainLimitReached,
            message: format!("a user may add at most {max} keychains (utxo.max_keychains_per_user)"),
            context: json!({ "max": max }),
        });
    }
    Ok(keychain_view(&row))
}

/// Keychain `id` of `coin`, when the caller added it, may see the wallet that names it, or is
/// a service admin. `None` when it is not there for them.
pub async fn find_keychain(svc: &Chains, auth: &Principal, coin: &Coin, id: &KeyId) -> Result<Option<Value>> {
    let Some(k) = svc.store.keychain(id).await?.filter(|k| &k.coin == coin) else { return Ok(None) };
    let visible = k.user_id == auth.user.id
        || auth.token.admin
        || match &k.wallet_id {
            Some(w) => crate::wallets::wallet_access(&svc.wallets, auth, coin, w, WalletPermission::View)
                .await
                .is_ok(),
            None => false,
        };
    Ok(visible.then(|| keychain_view(&k)))
}

/// What a new multisig wallet needs (BitGoJS `wallets().add({label, m, n, keys, enterprise})`).
#[derive(Debug, Clone)]
pub struct NewMultisigWallet {
    pub coin: Coin,
    pub label: String,
    pub enterprise: EnterpriseId,
    /// Keychain ids in the order user, backup, BitGo.
    pub keys: Vec<String>,
    pub m: Option<u32>,
    pub n: Option<u32>,
    /// `cold` (the default: Custodian holds none of its keys) or `hot`.
    pub r#type: Option<String>,
}

/// The three keychains of a wallet's record (`keys`), as keys to derive from. Errors:
/// `WalletNotWatched` (409) for a wallet whose `keys` are not three keychains added here (an
/// imported record naming BitGo's keychains, say): its addresses cannot be derived.
async fn wallet_keys(svc: &Chains, record: &Value) -> Result<WalletKeys> {
    let not_ours = || Error::Conflict {
        name: ErrorName::WalletNotWatched,
        message: "the wallet's keys are not three keychains added here: its addresses cannot be derived"
            .into(),
    };
    let ids: Vec<&str> =
        record["keys"].as_array().map(|k| k.iter().filter_map(Value::as_str).collect()).unwrap_or_default();
    if ids.len() != 3 {
        return Err(not_ours());
    }
    let mut pubs = Vec::with_capacity(3);
    for id in &ids {
        let id: KeyId = id.parse().map_err(|_| not_ours())?;
        pubs.push(svc.store.keychain(&id).await?.ok_or_else(not_ours)?.r#pub);
    }
    WalletKeys::parse([&pubs[0], &pubs[1], &pubs[2]]).map_err(|_| not_ours())
}

/// The address of `keys` at `chain`/`index` as a watched address of `wallet`.
fn watched(d: &Derived, wallet: &WalletId, coin: &Coin, label: Option<String>, now: i64) -> WalletAddress {
    WalletAddress {
        chain: coin.clone(),
        address: d.address.clone(),
        wallet_id: wallet.clone(),
        label,
        created_at: now,
        scripts: Some(Scripts {
            output_script: d.output_script.clone(),
            redeem_script: d.redeem_script.clone(),
            witness_script: d.witness_script.clone(),
        }),
        position: Some(Position { chain: d.chain.get(), index: d.index }),
    }
}

/// Makes a multisig wallet of `new.keys`, which must be three keychains of the coin the caller
/// added and no wallet names yet; the caller becomes its admin. Its first receive address
/// (chain 0, index 0) is derived with it. Audited as `wallet.created`. Errors: `InvalidField`
/// (`coin`, `label`, `keys`, `m`, `n`, `type`), and as [`crate::wallets::require_creator`].
pub async fn create_wallet(svc: &Chains, auth: &Principal, new: &NewMultisigWallet) -> Result<WalletRow> {
    let params = address_params(&new.coin)?;
    let label = new.label.trim();
    if label.is_empty() || label.chars().count() > 250 {
        return Err(Error::invalid_field("label", "1 to 250 characters"));
    }
    if new.m.is_some_and(|m| m != 2) || new.n.is_some_and(|n| n != 3) {
        return Err(Error::invalid_field("m", "UTXO wallets here are 2-of-3: m 2, n 3"));
    }
    let kind = new.r#type.as_deref().unwrap_or("cold");
    if !["cold", "hot"].contains(&kind) {
        return Err(Error::invalid_field(
            "type",
            "cold or hot for a wallet of keychains; custodial is Ethereum's",
        ));
    }
    let ids: Vec<KeyId> = new
        .keys
        .iter()
        .map(|k| k.parse())
        .collect::<std::result::Result<_, _>>()
        .map_err(|_| Error::invalid_field("keys", "keychain ids"))?;
    if ids.len() != 3 || ids[0] == ids[1] || ids[1] == ids[2] || ids[0] == ids[2] {
        return Err(Error::invalid_field("keys", "three distinct keychain ids: user, backup, BitGo"));
    }
    let enterprise = crate::wallets::require_creator(&svc.wallets, Some(auth), &new.enterprise).await?;
    let mut pubs = Vec::with_capacity(3);
    for id in &ids {
        match svc.store.keychain(id).await? {
            Some(k) if k.user_id == auth.user.id && k.coin == new.coin && k.wallet_id.is_none() => {
                pubs.push(k.r#pub)
            }
            _ => {
                return Err(Error::invalid_field(
                    "keys",
                    format!("{} is not a keychain of yours of this coin that no wallet names", id.as_str()),
                ))
            }
        }
    }
    let keys =
        WalletKeys::parse([&pubs[0], &pubs[1], &pubs[2]]).map_err(|e| Error::invalid_field("keys", e))?;
    let first = derive(&keys, ChainCode::new(0).map_err(|e| Error::Internal(anyhow::anyhow!(e)))?, 0, params)
        .map_err(|e| Error::invalid_field("keys", e))?;
    let id = WalletId::new_random();
    let now = svc.store.clock().now();
    let record = json!({
        "id": id.as_str(), "coin": new.coin.as_str(), "label": label, "enterprise": enterprise.id.as_str(),
        "type": kind, "m": 2, "n": 3, "keys": new.keys, "approvalsRequired": 1, "allowBackupKeySigning": false,
        "coinSpecific": {}, "deleted": false, "disableTransactionNotifications": false,
        "hasLargeNumberOfAddresses": false, "isCold": kind == "cold", "startDate": crate::clock::iso(now),
        "receiveAddress": crate::chain::address_json(&watched(&first, &id, &new.coin, None, now), &new.coin),
        "users": [{ "user": auth.user.id.as_str(), "permissions": ["admin", "spend", "view"] }],
    });
    let row = crate::model::wallet::validate(&record, false).map_err(|errors| {
        let first = errors.into_iter().next();
        Error::Internal(anyhow::anyhow!(
            "a multisig wallet record does not validate: {:?}",
            first.map(|e| e.reason)
        ))
    })?;
    let entry = auth.audit(AuditType::WalletCreated).wallet(Some(&id)).data(json!({ "coin": new.coin.as_str(),
        "type": kind, "keys": new.keys, "enterprise": enterprise.id.as_str(), "receiveAddress": first.address }));
    let address = watched(&first, &id, &new.coin, None, now);
    if !svc.store.create_multisig_wallet(&row, &ids, &auth.user.id, &address, &[entry]).await? {
        return Err(Error::invalid_field("keys", "a keychain was taken by another wallet meanwhile"));
    }
    Ok(row)
}

/// Adds `text`, an address of `coin`'s network, to wallet `wallet_id` as an imported address
/// (no chain code or index), with the output script that pays it. Audited as
/// `wallet.address_added`. Errors: `InvalidField` (`address`), `AddressInUse` (409: another
/// wallet's), `AddressLimitReached` past `utxo.max_addresses_per_wallet`. Adding one the wallet
/// has is not an error.
pub async fn import_address(
    svc: &Chains,
    auth: Option<&Principal>,
    wallet_id: &WalletId,
    coin: &Coin,
    text: &str,
    label: Option<String>,
) -> Result<WalletAddress> {
    let params = address_params(coin)?;
    let output_script =
        super::address::output_script_of(text, params).map_err(|e| Error::invalid_field("address", e))?;
    // bech32 is case-insensitive and written in lower case; base58 is kept as given.
    let text = text.trim();
    let address = if text.to_ascii_lowercase().starts_with(&format!("{}1", params.hrp)) {
        text.to_ascii_lowercase()
    } else {
        text.to_string()
    };
    let a = WalletAddress {
        chain: coin.clone(),
        address,
        wallet_id: wallet_id.clone(),
        label,
        created_at: svc.store.clock().now(),
        scripts: Some(Scripts { output_script, redeem_script: None, witness_script: None }),
        position: None,
    };
    let entry = match auth {
        Some(auth) => auth.audit(AuditType::WalletAddressAdded),
        None => crate::audit::entry(AuditType::WalletAddressAdded).data(json!({ "by": "operator" })),
    }
    .wallet(Some(wallet_id))
    .data(json!({ "address": a.address }));
    let max = svc.config.utxo.max_addresses_per_wallet;
    match svc.store.add_utxo_address(&a, max, &[entry]).await? {
        UtxoAdded::Added => Ok(a),
        UtxoAdded::Full => Err(limit_reached(max)),
        UtxoAdded::Taken => match svc.store.address_owner(coin.as_str(), &a.address).await? {
            Some(owner) if &owner == wallet_id => Ok(a),
            _ => Err(Error::Conflict {
                name: ErrorName::AddressInUse,
                message: "another wallet of this chain already watches that address".into(),
            }),
        },
    }
}

/// The address a UTXO wallet's record names (`receiveAddress.address`), when it is one of its
/// coin's network, with its output script and, if the record says, its chain and index.
pub fn record_address(wallet: &WalletRow, record: &Value) -> Result<Option<WalletAddress>> {
    record_address_of(&wallet.coin, &wallet.id, record)
}

/// [`record_address`] of wallet `wallet_id` of `coin`.
pub fn record_address_of(coin: &Coin, wallet_id: &WalletId, record: &Value) -> Result<Option<WalletAddress>> {
    let Some(text) = record.pointer("/receiveAddress/address").and_then(Value::as_str) else {
        return Ok(None);
    };
    let Ok(output_script) = super::address::output_script_of(text, address_params(coin)?) else {
        return Ok(None);
    };
    let at = |k: &str| {
        record
            .pointer(&format!("/receiveAddress/{k}"))
            .and_then(Value::as_u64)
            .and_then(|n| u32::try_from(n).ok())
    };
    Ok(Some(WalletAddress {
        chain: coin.clone(),
        address: text.to_string(),
        wallet_id: wallet_id.clone(),
        label: None,
        created_at: 0,
        scripts: Some(Scripts { output_script, redeem_script: None, witness_script: None }),
        position: at("chain").zip(at("index")).map(|(chain, index)| Position { chain, index }),
    }))
}

fn limit_reached(max: u32) -> Error {
    Error::Invalid {
        name: ErrorName::AddressLimitReached,
        message: format!("a wallet may hold at most {max} addresses (utxo.max_addresses_per_wallet)"),
        context: json!({ "max": max }),
    }
}

/// Tries at deriving the next index when concurrent requests take it first.
const INDEX_TRIES: usize = 5;

/// Derives wallet `wallet_id`'s next address of `chain` (BitGo's `POST
/// /api/v2/{coin}/wallet/{id}/address`), watched from the next block. Needs `wallet_manage`.
/// Audited as `wallet.address_added`. Errors: as `wallets::wallet_access`, `InvalidField`
/// (`chain`, `label`, `coin`), `WalletNotWatched` (409: a wallet not of keychains added here),
/// `AddressLimitReached` past `utxo.max_addresses_per_wallet`, `Busy` when other requests kept
/// taking the index.
pub async fn create_address(
    svc: &Chains,
    auth: &Principal,
    coin: &Coin,
    wallet_id: &WalletId,
    chain: u32,
    label: Option<String>,
) -> Result<WalletAddress> {
    let params = address_params(coin)?;
    let chain = ChainCode::new(chain).map_err(|e| Error::invalid_field("chain", e))?;
    if label.as_ref().is_some_and(|l| l.chars().count() > 250) {
        return Err(Error::invalid_field("label", "at most 250 characters"));
    }
    let wallet =
        crate::wallets::wallet_access(&svc.wallets, auth, coin, wallet_id, WalletPermission::Manage).await?;
    let record: Value = serde_json::from_str(wallet.record.as_str()).unwrap_or_default();
    let keys = wallet_keys(svc, &record).await?;
    let max = svc.config.utxo.max_addresses_per_wallet;
    for _ in 0..INDEX_TRIES {
        let index = svc.store.next_address_index(wallet_id, chain.get()).await?;
        let d = derive(&keys, chain, index, params).map_err(|e| Error::invalid_field("chain", e))?;
        let a = watched(&d, wallet_id, coin, label.clone(), svc.store.clock().now());
        let entry = auth.audit(AuditType::WalletAddressAdded).wallet(Some(wallet_id)).data(json!({
            "address": a.address, "chain": chain.get(), "index": index }));
        match svc.store.add_utxo_address(&a, max, &[entry]).await? {
            UtxoAdded::Added => return Ok(a),
            UtxoAdded::Taken => continue,
            UtxoAdded::Full => {
                return Err(Error::Invalid {
                    name: ErrorName::AddressLimitReached,
                    message: format!(
                        "a wallet may derive at most {max} addresses (utxo.max_addresses_per_wallet)"
                    ),
                    context: json!({ "max": max }),
                })
            }
        }
    }
    Err(Error::Busy {
        message: "other requests are deriving this wallet's addresses; try again".into(),
        retry_after_secs: 1,
    })
}
