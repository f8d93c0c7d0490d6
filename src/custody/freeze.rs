//! Freezing a wallet (BitGo's `POST /api/v2/{coin}/wallet/{walletId}/freeze`): withdrawals are
//! refused until the freeze ends, and the wallet's `admin` webhooks are told. Unfreezing early
//! is for service admins (`custodian wallet unfreeze`), audited.

use serde_json::{json, Value};

use super::{events::Announcement, Custody};
use crate::{
    audit::EntryExt,
    error::{Error, ErrorName, Result},
    identity::{bearer::Principal, scopes::WalletPermission},
    model::audit::AuditType,
    types::{Coin, WalletId},
    webhooks::event::{AdminEvent, Event},
};

/// Default freeze, seconds (BitGo's).
pub const DEFAULT_FREEZE_SECS: u64 = 3600;
/// Longest freeze, seconds: a year.
pub const MAX_FREEZE_SECS: u64 = 365 * 24 * 3600;

/// Freezes wallet `wallet_id` of `coin` for `duration` seconds (default
/// [`DEFAULT_FREEZE_SECS`], 1 to [`MAX_FREEZE_SECS`]); a freeze never shortens one in force.
/// Needs a `wallet_freeze` form and the user listed on the wallet (any permission) or an admin
/// of its enterprise. Answers `{time, expires}`. Errors: `WalletNotFound`, `InsufficientScope`,
/// `InvalidField` (`duration`), `Conflict` when the record changed meanwhile (retry).
pub async fn freeze(
    svc: &Custody,
    auth: &Principal,
    coin: &Coin,
    wallet_id: &WalletId,
    duration: Option<u64>,
) -> Result<Value> {
    let duration = duration.unwrap_or(DEFAULT_FREEZE_SECS);
    if !(1..=MAX_FREEZE_SECS).contains(&duration) {
        return Err(Error::invalid_field("duration", format!("seconds, from 1 to {MAX_FREEZE_SECS}")));
    }
    let row =
        crate::wallets::wallet_access(&svc.wallets, auth, coin, wallet_id, WalletPermission::Freeze).await?;
    let now = svc.store.clock().now();
    let mut record: Value = serde_json::from_str(row.record.as_str())
        .map_err(|e| Error::Internal(anyhow::anyhow!("stored wallet record: {e}")))?;
    let held = record.pointer("/freeze/expires").and_then(Value::as_str).and_then(crate::clock::parse_iso);
    let expires = held.unwrap_or(0).max(now.saturating_add(i64::try_from(duration).unwrap_or(i64::MAX)));
    let freeze = json!({ "time": crate::clock::iso(now), "expires": crate::clock::iso(expires) });
    record["freeze"] = freeze.clone();
    let entry = auth.audit(AuditType::WalletFrozen).wallet(Some(wallet_id)).data(freeze.clone());
    set_record(svc, &row, &record, Some(freeze.clone()), entry).await?;
    Ok(freeze)
}

/// Ends a wallet's freeze (the operator: `custodian wallet unfreeze`), audited and told to its
/// `admin` webhooks. Errors: `WalletNotFound`, `Conflict` when it is not frozen.
pub async fn unfreeze(svc: &Custody, wallet_id: &WalletId) -> Result<()> {
    let row = svc.store.wallets_by_ids(std::slice::from_ref(wallet_id), false).await?.pop();
    let row = row.ok_or_else(|| Error::not_found(ErrorName::WalletNotFound))?;
    let mut record: Value = serde_json::from_str(row.record.as_str())
        .map_err(|e| Error::Internal(anyhow::anyhow!("stored wallet record: {e}")))?;
    let Some(obj) = record.as_object_mut().filter(|o| o.contains_key("freeze")) else {
        return Err(Error::Conflict {
            name: ErrorName::AlreadyExists,
            message: "the wallet is not frozen".into(),
        });
    };
    obj.remove("freeze");
    let entry = crate::audit::entry(AuditType::WalletUnfrozen).wallet(Some(wallet_id)).data(json!({}));
    set_record(svc, &row, &record, None, entry).await
}

async fn set_record(
    svc: &Custody,
    row: &crate::model::wallet::WalletRow,
    record: &Value,
    freeze: Option<Value>,
    entry: crate::model::audit::AuditEntry,
) -> Result<()> {
    let event = Event::Admin(AdminEvent {
        coin: row.coin.clone(),
        wallet_id: row.id.clone(),
        action: if freeze.is_some() { "freeze" } else { "unfreeze" },
        freeze,
        at_ms: svc.store.clock().now_ms(),
    });
    let announce = Announcement::prepare(&svc.webhooks, &[event]).await?;
    let text = record.to_string();
    let written = svc
        .store
        .set_wallet_record(&row.id, row.record.as_str(), &text, &[entry], &announce.writes())
        .await?;
    let Some(recorded) = written else {
        return Err(Error::Conflict {
            name: ErrorName::AlreadyExists,
            message: "the wallet changed meanwhile; try again".into(),
        });
    };
    announce.committed(&svc.webhooks, &recorded).await;
    Ok(())
}
