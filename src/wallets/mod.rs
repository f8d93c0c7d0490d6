//! Wallets: the §2.1 record, who may see a wallet, the internal bulk lookup (§4.1), balance
//! updates and import. The HTTP shapes are in `http/handlers/wallets.rs`.
//!
//! Layer rule: no web-framework types and nothing of the HTTP layer (docs/architecture.md).

use crate::error::ErrorName;
use crate::model::audit::AuditType;
use std::{
    collections::{HashMap, HashSet},
    sync::Arc,
};

use serde_json::{json, Value};

use crate::{
    config::Config,
    error::{Error, Result},
    identity::{
        bearer::Principal,
        scopes::{Action, Policy, WalletPermission},
    },
    store::DynStore,
    types::{BaseUnits, Coin, EnterpriseId, UserId, WalletId},
};

pub mod import;

/// The handles the wallet functions use (docs/decisions.md#architecture); cheap to clone.
#[derive(Clone)]
pub struct Wallets {
    pub store: DynStore,
    pub config: Arc<Config>,
    pub policy: Policy,
}

use crate::model::wallet::{Balances, WalletRow, BALANCE_FIELDS};

/// Who may see which wallet, for one principal: the one visibility rule of the lookup and
/// the webhook routes (docs/scopes.md). A user sees a wallet listed in its `users` or one of
/// an enterprise the user administers; a service-admin token waives this membership rule, but
/// never its scopes or permitted lists (docs/decisions.md#brute-force-limits).
pub struct Visibility {
    user_id: UserId,
    admin_of: HashSet<EnterpriseId>,
    service_admin: bool,
}

impl Visibility {
    /// Loads the principal's enterprise memberships (skipped for service-admin tokens, for
    /// which membership is waived).
    pub async fn load(svc: &Wallets, auth: &Principal) -> Result<Self> {
        let admin_of = if auth.token.admin {
            HashSet::new()
        } else {
            svc.store
                .memberships(&auth.user.id)
                .await?
                .into_iter()
                .filter(|m| m.is_admin)
                .map(|m| m.enterprise.id)
                .collect()
        };
        Ok(Visibility { user_id: auth.user.id.clone(), admin_of, service_admin: auth.token.admin })
    }

    /// Whether the user (regardless of the token's scopes) may see `row`.
    pub fn user_may_see(&self, row: &WalletRow) -> bool {
        self.service_admin
            || row.user_ids.contains(&self.user_id)
            || row.enterprise.as_ref().is_some_and(|e| self.admin_of.contains(e))
    }

    /// Whether the principal's token may view `row` (§4.1 lookup rule).
    pub fn can_view(&self, svc: &Wallets, auth: &Principal, row: &WalletRow) -> bool {
        svc.policy.can_view_wallet(&auth.token, self.user_may_see(row), &row.id, row.enterprise.as_ref())
    }
}

/// The wallet `wallet_id` of `coin`, when the principal may see it and the token covers
/// `permission` on it. Unknown or invisible: `WalletNotFound`; visible but not permitted:
/// `Forbidden`. Service-admin tokens skip the membership check, not the scopes.
pub async fn wallet_access(
    svc: &Wallets,
    auth: &Principal,
    coin: &Coin,
    wallet_id: &WalletId,
    permission: WalletPermission,
) -> Result<WalletRow> {
    let row = svc
        .store
        .wallets_by_ids(std::slice::from_ref(wallet_id), false)
        .await?
        .pop()
        .filter(|w| &w.coin == coin)
        .ok_or_else(|| Error::not_found(ErrorName::WalletNotFound))?;
    if !Visibility::load(svc, auth).await?.user_may_see(&row) {
        return Err(Error::not_found(ErrorName::WalletNotFound));
    }
    auth.require(
        svc.policy,
        Action::Wallet { permission, wallet_id: &row.id, enterprise: row.enterprise.as_ref() },
    )?;
    Ok(row)
}

/// The enterprise a new wallet goes to, when the principal may create wallets in it: its token
/// has `wallet_create` for it, and the user administers it (or is a service admin). `None` is
/// the operator's CLI. Errors: `EnterpriseNotFound`, `InsufficientScope`.
pub async fn require_creator(
    svc: &Wallets,
    auth: Option<&Principal>,
    enterprise: &crate::types::EnterpriseId,
) -> Result<crate::store::Enterprise> {
    let not_found =
        || Error::NotFound { name: ErrorName::EnterpriseNotFound, message: "no such enterprise".into() };
    let enterprise = svc.store.enterprise_by_id(enterprise).await?.ok_or_else(not_found)?;
    if let Some(auth) = auth {
        auth.require(svc.policy, Action::CreateWallet { enterprise_id: &enterprise.id })?;
        let ms = svc.store.memberships(&auth.user.id).await?;
        let admin = ms.iter().any(|m| m.is_admin && m.enterprise.id == enterprise.id);
        if !admin && !auth.token.admin {
            return Err(Error::Forbidden {
                name: ErrorName::InsufficientScope,
                message: "only an admin of the enterprise may create its wallets".into(),
                context: serde_json::json!({ "requiredRole": "enterprise admin" }),
            });
        }
    }
    Ok(enterprise)
}

/// The wallet `wallet_id` of whatever coin, when the principal may view it (routes without a
/// coin in their path, such as `/api/v2/wallet/{id}/txrequests`). Errors as [`wallet_access`].
pub async fn wallet_row(svc: &Wallets, auth: &Principal, wallet_id: &WalletId) -> Result<WalletRow> {
    let row = svc.store.wallets_by_ids(std::slice::from_ref(wallet_id), false).await?.pop();
    let row = row.ok_or_else(|| Error::not_found(ErrorName::WalletNotFound))?;
    wallet_access(svc, auth, &row.coin, wallet_id, WalletPermission::View).await
}

/// One wallet of `coin`, under the lookup's rule: `WalletNotFound` when it does not exist, is of
/// another coin, is deleted, or may not be seen (BitGo's `GET /api/v2/{coin}/wallet/{id}`,
/// docs/decisions.md#signed-requests).
pub async fn get_wallet(
    svc: &Wallets,
    auth: &Principal,
    coin: &Coin,
    wallet_id: &WalletId,
) -> Result<WalletRow> {
    lookup(svc, auth, std::slice::from_ref(wallet_id), false)
        .await?
        .into_iter()
        .find(|w| &w.coin == coin)
        .ok_or_else(|| Error::not_found(ErrorName::WalletNotFound))
}

/// The transfer `transfer_id` of a wallet the principal may see, as its latest ingested event
/// reported it: that event's fields, with BitGo's `id`, `coin`, `wallet` and `txid` (from
/// `hash`). Errors: `WalletNotFound` as [`get_wallet`]; `NotFound` when no event of that wallet
/// names the transfer.
pub async fn get_transfer(
    svc: &Wallets,
    auth: &Principal,
    coin: &Coin,
    wallet_id: &WalletId,
    transfer_id: &str,
) -> Result<serde_json::Map<String, serde_json::Value>> {
    let wallet = get_wallet(svc, auth, coin, wallet_id).await?;
    let not_found =
        || Error::NotFound { name: ErrorName::NotFound, message: "no such transfer on this wallet".into() };
    let body = svc.store.event_by_transfer(transfer_id).await?.ok_or_else(not_found)?;
    let serde_json::Value::Object(mut event) =
        serde_json::from_str(&body).map_err(|e| Error::Internal(anyhow::anyhow!("stored event: {e}")))?
    else {
        return Err(not_found());
    };
    if event.get("walletId").and_then(|v| v.as_str()) != Some(wallet.id.as_str()) {
        return Err(not_found());
    }
    for key in ["eventId", "transferId", "walletId"] {
        event.remove(key);
    }
    // The event's type, not BitGo's transfer type (send or receive).
    if event.get("type").and_then(|v| v.as_str()) == Some("transfer") {
        event.remove("type");
    }
    event.insert("id".into(), json!(transfer_id));
    event.insert("coin".into(), json!(wallet.coin.as_str()));
    event.insert("wallet".into(), json!(wallet.id.as_str()));
    if let Some(hash) = event.get("hash").cloned() {
        event.insert("txid".into(), hash);
    }
    Ok(event)
}

/// The wallets with the given ids that the principal may see, in request order; duplicates
/// collapse. An id the token may not see is left out exactly like one that does not exist.
/// The ids arrive typed: a malformed one is refused at the edge, where the request is parsed
/// (`InvalidField` naming `ids[i]`, with `context.index`). Errors: `InvalidField` (`ids` empty),
/// `TooManyIds` (over `max_lookup_ids` distinct ids).
pub async fn lookup(
    svc: &Wallets,
    auth: &Principal,
    ids: &[WalletId],
    include_deleted: bool,
) -> Result<Vec<WalletRow>> {
    let max = svc.config.max_lookup_ids;
    if ids.is_empty() {
        return Err(Error::invalid_field("ids", "must list at least one wallet id"));
    }
    let mut seen = HashSet::with_capacity(ids.len());
    let mut wanted = Vec::with_capacity(ids.len());
    for id in ids {
        if seen.insert(id) {
            wanted.push(id.clone());
        }
    }
    if wanted.len() > max {
        return Err(Error::Invalid {
            name: ErrorName::TooManyIds,
            message: format!("at most {max} distinct ids per request, got {}", wanted.len()),
            context: json!({ "field": "ids", "index": max, "max": max }),
        });
    }
    let rows = svc.store.wallets_by_ids(&wanted, include_deleted).await?;
    let visibility = Visibility::load(svc, auth).await?;
    let visible = rows.into_iter().filter(|row| visibility.can_view(svc, auth, row)).collect();
    Ok(in_request_order(&wanted, visible))
}

/// `rows` in the order of `wanted` (distinct ids). The store usually answers in that order
/// already, which one pass confirms; otherwise they are sorted through a map.
fn in_request_order(wanted: &[WalletId], rows: Vec<WalletRow>) -> Vec<WalletRow> {
    let mut next = 0;
    let ordered = rows.iter().all(|row| {
        while next < wanted.len() && wanted[next] != row.id {
            next += 1;
        }
        next += 1;
        next <= wanted.len()
    });
    if ordered {
        return rows;
    }
    let mut by_id: HashMap<WalletId, WalletRow> = rows.into_iter().map(|row| (row.id.clone(), row)).collect();
    wanted.iter().filter_map(|id| by_id.remove(id)).collect()
}

/// Checks a balance update: a JSON object of §2.1 balance strings (base units; USD cents for
/// the withdraw hold), at least one. Errors name the field.
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
            *b.get_mut(i) = Some(BaseUnits::from_json(v).ok_or_else(|| {
                Error::invalid_field(*field, "must be a non-negative integer in base units")
            })?);
        }
    }
    if b == Balances::default() {
        return Err(Error::invalid_field("balanceString", "give at least one balance field"));
    }
    Ok(b)
}

/// Sets the balances given in `body` (see [`parse_balances`]; others unchanged) of wallet
/// `wallet_id`: the hook for event ingestion. `auth` is `None` for the operator's CLI; a token
/// needs the service-admin permission. Errors: `Forbidden`, `InvalidField`, `WalletNotFound`,
/// `BadRequest` for a wallet of a watched chain (its balances come from the node).
pub async fn set_balances(
    svc: &Wallets,
    auth: Option<&Principal>,
    wallet_id: &WalletId,
    body: &Value,
) -> Result<WalletRow> {
    if let Some(auth) = auth {
        auth.require(svc.policy, Action::ServiceAdmin)?;
    }
    let balances = parse_balances(body)?;
    // Only a service that watches a chain needs the wallet's coin first.
    let watched = match svc.config.chains.is_empty() {
        true => Vec::new(),
        false => svc.store.wallets_by_ids(std::slice::from_ref(wallet_id), false).await?,
    };
    if let Some(w) = watched.iter().find(|w| svc.config.chains.contains_key(w.coin.as_str())) {
        return Err(Error::Invalid {
            name: ErrorName::BadRequest,
            message: format!(
                "the balances of {} wallets come from the chain watcher (chains.{} is configured); they cannot be set",
                w.coin.as_str(),
                w.coin.as_str()
            ),
            context: serde_json::json!({ "coin": w.coin.as_str() }),
        });
    }
    let entry = match auth {
        Some(auth) => auth.audit(AuditType::WalletBalanceSet),
        None => crate::audit::EntryExt::data(
            crate::audit::entry(AuditType::WalletBalanceSet),
            serde_json::json!({ "by": "operator" }),
        ),
    };
    let entry = crate::audit::EntryExt::wallet(entry, Some(wallet_id));
    svc.store
        .update_wallet_balances(wallet_id, &balances, &[entry])
        .await?
        .ok_or_else(|| Error::NotFound { name: ErrorName::WalletNotFound, message: "no such wallet".into() })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn id(n: u8) -> WalletId {
        format!("{n:032x}").parse().expect("a wallet id")
    }

    fn row(n: u8) -> WalletRow {
        WalletRow {
            id: id(n),
            coin: "tbtc".parse().expect("a coin"),
            enterprise: None,
            deleted: false,
            user_ids: Vec::new(),
            record: "{}".into(),
            balances: Balances::default(),
        }
    }

    fn ids(rows: &[WalletRow]) -> Vec<WalletId> {
        rows.iter().map(|r| r.id.clone()).collect()
    }

    #[test]
    fn rows_come_back_in_request_order_whatever_order_the_store_used() {
        let wanted = [id(3), id(1), id(2), id(4)];
        // In order, with gaps (unknown or invisible ids): kept as they are.
        assert_eq!(ids(&in_request_order(&wanted, vec![row(3), row(2)])), vec![id(3), id(2)]);
        // Out of order: sorted by the request.
        let got = in_request_order(&wanted, vec![row(4), row(1), row(3), row(2)]);
        assert_eq!(ids(&got), wanted.to_vec());
        assert_eq!(ids(&in_request_order(&wanted, vec![row(2), row(3)])), vec![id(3), id(2)]);
        assert!(in_request_order(&wanted, Vec::new()).is_empty());
    }
}
