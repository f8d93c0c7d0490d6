//! Custodial wallets (spec §2.1 `type: "custodial"`, "a cold wallet whose keys the service
//! owns"): a key made in the key store, and a wallet record whose base and receive address are
//! the key's address, which the chain watcher follows from its next round.

use serde_json::{json, Value};

use super::{keys, Custody};
use crate::{
    audit::EntryExt,
    error::{Error, ErrorName, Result},
    identity::{bearer::Principal, scopes::WalletPermission},
    model::{audit::AuditType, custody::KeyRecord, wallet::WalletRow},
    types::{Coin, EnterpriseId, KeyId, UserId, WalletId},
};

/// Most approvals a wallet may require (§2.1 `approvalsRequired`, at least 1).
pub const MAX_APPROVALS_REQUIRED: u32 = 10;

/// What a new custodial wallet needs.
#[derive(Debug, Clone)]
pub struct NewCustodialWallet {
    pub coin: Coin,
    /// 1 to 250 characters.
    pub label: String,
    pub enterprise: EnterpriseId,
    /// Approvals each withdrawal needs from wallet admins other than its initiator (1 to
    /// [`MAX_APPROVALS_REQUIRED`]; default 1).
    pub approvals_required: u32,
}

/// Makes a custodial wallet (BitGo's `POST /api/v2/{coin}/wallet/add` with `type:
/// "custodial"`; `custodian wallet create --custodial`). With `auth`, the caller needs
/// `wallet_create` and must administer the enterprise, and becomes the wallet's admin (with
/// spend and view); without (the CLI), the wallet has no users until the enterprise's admins
/// see it. Errors: `InvalidField` (coin, label, approvalsRequired), `InsufficientScope`,
/// `EnterpriseNotFound`.
pub async fn create(svc: &Custody, auth: Option<&Principal>, new: &NewCustodialWallet) -> Result<WalletRow> {
    super::spendable_coin(&svc.config, &new.coin)?;
    let label = new.label.trim();
    if label.is_empty() || label.chars().count() > 250 {
        return Err(Error::invalid_field("label", "1 to 250 characters"));
    }
    if !(1..=MAX_APPROVALS_REQUIRED).contains(&new.approvals_required) {
        return Err(Error::invalid_field("approvalsRequired", format!("from 1 to {MAX_APPROVALS_REQUIRED}")));
    }
    let enterprise = crate::wallets::require_creator(&svc.wallets, auth, &new.enterprise).await?;
    let users: Vec<UserId> = auth.map(|a| a.user.id.clone()).into_iter().collect();
    let id = WalletId::new_random();
    let key = make_key(svc, auth, &id).await?;
    let record = record(&id, new, label, &key, &users, svc.store.clock().now());
    let row = crate::model::wallet::validate(&record, false).map_err(|errors| {
        let first = errors.into_iter().next();
        Error::Internal(anyhow::anyhow!(
            "a custodial wallet record does not validate: {:?}",
            first.map(|e| e.reason)
        ))
    })?;
    let entry = match auth {
        Some(a) => a.audit(AuditType::WalletCreated),
        None => crate::audit::entry(AuditType::WalletCreated),
    }
    .wallet(Some(&id))
    .data(json!({ "coin": new.coin.as_str(), "type": "custodial", "keyId": key.id.as_str(),
        "address": key.address.to_checksum(None), "enterprise": enterprise.id.as_str() }));
    svc.store.upsert_wallets(std::slice::from_ref(&row), &[entry]).await?;
    Ok(row)
}

/// Makes a key in the key store and keeps its public part.
async fn make_key(svc: &Custody, auth: Option<&Principal>, wallet_id: &WalletId) -> Result<KeyRecord> {
    let id = KeyId::new_random();
    let made = svc.keys.generate(&id).await.map_err(|e| Error::Internal(e.into()))?;
    let address = keys::address_of(&made.public_key).map_err(|e| Error::Internal(e.into()))?;
    let key = KeyRecord {
        id,
        wallet_id: wallet_id.clone(),
        backend: svc.keys.backend().to_string(),
        public_key: made.public_key,
        address,
        handle: made.handle,
        created_at: svc.store.clock().now(),
    };
    let entry = match auth {
        Some(a) => a.audit(AuditType::CustodyKeyCreated),
        None => crate::audit::entry(AuditType::CustodyKeyCreated),
    }
    .data(json!({ "keyId": key.id.as_str(), "backend": key.backend, "address": address.to_checksum(None) }));
    svc.store.add_custody_key(&key, &[entry]).await?;
    Ok(key)
}

fn record(
    id: &WalletId,
    new: &NewCustodialWallet,
    label: &str,
    key: &KeyRecord,
    users: &[UserId],
    now: i64,
) -> Value {
    let address = key.address.to_checksum(None);
    let users: Vec<Value> = users
        .iter()
        .map(|u| json!({ "user": u.as_str(), "permissions": ["admin", "spend", "view"] }))
        .collect();
    json!({
        "id": id.as_str(),
        "coin": new.coin.as_str(),
        "label": label,
        "enterprise": new.enterprise.as_str(),
        "type": "custodial",
        "approvalsRequired": new.approvals_required,
        "allowBackupKeySigning": false,
        "coinSpecific": { "baseAddress": address },
        "deleted": false,
        "disableTransactionNotifications": false,
        "hasLargeNumberOfAddresses": false,
        "isCold": true,
        "startDate": crate::clock::iso(now),
        "keys": [key.id.as_str()],
        "receiveAddress": { "address": address, "coin": new.coin.as_str(), "wallet": id.as_str(), "chain": 0, "index": 0 },
        "users": users,
    })
}

/// The public part of a key (BitGo's keychain read, `GET /api/v2/{coin}/key/{id}`): `{id, pub,
/// ethAddress, source, type}`. Visible to a user who may see a wallet naming the key, or a
/// service admin. Errors: `NotFound`.
pub async fn key_view(svc: &Custody, auth: &Principal, coin: &Coin, id: &KeyId) -> Result<Value> {
    let not_found = || Error::NotFound { name: ErrorName::NotFound, message: "no such key".into() };
    let key = svc.store.custody_key(id).await?.ok_or_else(not_found)?;
    // Seen by whoever may see its wallet.
    crate::wallets::wallet_access(&svc.wallets, auth, coin, &key.wallet_id, WalletPermission::View)
        .await
        .map_err(|_| not_found())?;
    Ok(json!({
        "id": key.id.as_str(),
        "pub": format!("0x{}", hex::encode(&key.public_key)),
        "ethAddress": key.address.to_checksum(None).to_lowercase(),
        "source": "bitgo",
        "type": "independent",
        "isCustodial": true,
        "keyStore": key.backend,
    }))
}
