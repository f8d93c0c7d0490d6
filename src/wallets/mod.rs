//! Wallets: the §2.1 record, who may see a wallet, the internal bulk lookup (§4.1), balance
//! updates and import. The HTTP shapes are in `http/handlers/wallets.rs`.
//!
//! Layer rule: no web-framework types and nothing of the HTTP layer (docs/architecture.md).

use std::collections::{HashMap, HashSet};

use serde_json::{json, Value};

use crate::{
    error::{Error, Result},
    identity::{
        auth::Principal,
        scopes::{Action, WalletPermission},
    },
    ids,
    types::BaseUnits,
    AppState,
};

pub mod import;
pub mod model;

use model::{Balances, WalletRow, BALANCE_FIELDS};

/// Who may see which wallet, for one principal: the one visibility rule of the lookup and
/// the webhook routes (docs/scopes.md). A user sees a wallet listed in its `users` or one of
/// an enterprise the user administers; a service-admin token waives this membership rule, but
/// never its scopes or permitted lists (issue 9 §5).
pub struct Visibility {
    user_id: String,
    admin_of: HashSet<String>,
    service_admin: bool,
}

impl Visibility {
    /// Loads the principal's enterprise memberships (skipped for service-admin tokens, for
    /// which membership is waived).
    pub async fn load(state: &AppState, auth: &Principal) -> Result<Self> {
        let admin_of = if auth.token.admin {
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
        Ok(Visibility { user_id: auth.user.id.clone(), admin_of, service_admin: auth.token.admin })
    }

    /// Whether the user (regardless of the token's scopes) may see `row`.
    pub fn user_may_see(&self, row: &WalletRow) -> bool {
        self.service_admin
            || row.user_ids.contains(&self.user_id)
            || row.enterprise.as_ref().is_some_and(|e| self.admin_of.contains(e))
    }

    /// Whether the principal's token may view `row` (§4.1 lookup rule).
    pub fn can_view(&self, state: &AppState, auth: &Principal, row: &WalletRow) -> bool {
        state.policy().can_view_wallet(
            &auth.token,
            self.user_may_see(row),
            &row.id,
            row.enterprise.as_deref(),
        )
    }
}

/// The wallet `wallet_id` of `coin`, when the principal may see it and the token covers
/// `permission` on it. Unknown or invisible: `WalletNotFound`; visible but not permitted:
/// `Forbidden`. Service-admin tokens skip the membership check, not the scopes.
pub async fn wallet_access(
    state: &AppState,
    auth: &Principal,
    coin: &str,
    wallet_id: &str,
    permission: WalletPermission,
) -> Result<WalletRow> {
    let row = state
        .store
        .wallets_by_ids(&[wallet_id.to_string()], false)
        .await?
        .pop()
        .filter(|w| w.coin == coin)
        .ok_or_else(|| Error::not_found("WalletNotFound"))?;
    if !Visibility::load(state, auth).await?.user_may_see(&row) {
        return Err(Error::not_found("WalletNotFound"));
    }
    auth.require(
        state.policy(),
        Action::Wallet { permission, wallet_id: &row.id, enterprise: row.enterprise.as_deref() },
    )?;
    Ok(row)
}

/// The wallets with the given ids that the principal may see, in request order; duplicates
/// collapse. An id the token may not see is left out exactly like one that does not exist.
/// Errors: `InvalidField` (`ids` empty, `ids[i]` not 32 hex, with `context.index`),
/// `TooManyIds` (over `max_lookup_ids` distinct ids).
pub async fn lookup(
    state: &AppState,
    auth: &Principal,
    ids: &[String],
    include_deleted: bool,
) -> Result<Vec<WalletRow>> {
    let max = state.config.max_lookup_ids;
    if ids.is_empty() {
        return Err(Error::invalid_field("ids", "must list at least one wallet id"));
    }
    let mut seen = HashSet::with_capacity(ids.len());
    let mut wanted = Vec::with_capacity(ids.len());
    for (i, id) in ids.iter().enumerate() {
        if !ids::is_id(id) {
            return Err(Error::Invalid {
                name: "InvalidField",
                message: format!("ids[{i}] is not a 32-hex wallet id"),
                context: json!({ "field": format!("ids[{i}]"), "index": i }),
            });
        }
        if seen.insert(id.as_str()) {
            wanted.push(id.clone());
        }
    }
    if wanted.len() > max {
        return Err(Error::Invalid {
            name: "TooManyIds",
            message: format!("at most {max} distinct ids per request, got {}", wanted.len()),
            context: json!({ "field": "ids", "index": max, "max": max }),
        });
    }
    let rows = state.store.wallets_by_ids(&wanted, include_deleted).await?;
    let visibility = Visibility::load(state, auth).await?;
    let mut by_id: HashMap<String, WalletRow> = rows
        .into_iter()
        .filter(|row| visibility.can_view(state, auth, row))
        .map(|row| (row.id.clone(), row))
        .collect();
    Ok(wanted.iter().filter_map(|id| by_id.remove(id)).collect())
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
            *b.get_mut(i) = Some(BaseUnits::from_json(v).map(BaseUnits::into_string).ok_or_else(|| {
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
/// needs the service-admin permission. Errors: `Forbidden`, `InvalidField`, `WalletNotFound`.
pub async fn set_balances(
    state: &AppState,
    auth: Option<&Principal>,
    wallet_id: &str,
    body: &Value,
) -> Result<WalletRow> {
    if let Some(auth) = auth {
        auth.require(state.policy(), Action::ServiceAdmin)?;
    }
    if !ids::is_id(wallet_id) {
        return Err(Error::invalid_field("walletId", "must be a 32-hex wallet id"));
    }
    let balances = parse_balances(body)?;
    let entry = match auth {
        Some(auth) => crate::audit::by(auth, "wallet.balance_set"),
        None => crate::audit::EntryExt::data(
            crate::audit::entry("wallet.balance_set"),
            serde_json::json!({ "by": "operator" }),
        ),
    };
    let entry = crate::audit::EntryExt::wallet(entry, Some(wallet_id));
    state
        .store
        .update_wallet_balances(wallet_id, &balances, &[entry])
        .await?
        .ok_or_else(|| Error::NotFound { name: "WalletNotFound", message: "no such wallet".into() })
}
