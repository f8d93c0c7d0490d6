//! Creating, listing, removing and unblocking webhooks at their three levels (spec §4.4, §4.6,
//! §4.8, §8): the level decides who may act and which webhooks a call sees.
//!
//! Layer rule: no web-framework types and nothing of the HTTP layer (docs/architecture.md).

use crate::error::ErrorName;
use crate::model::audit::AuditType;
use std::collections::BTreeMap;

use serde_json::{json, Value};

use crate::audit::EntryExt;

use super::{
    access::{enterprise_access, webhook_access},
    check_headers, check_url, invalid_type, BLOCK_TYPES, ENTERPRISE_TYPES, MAX_WEBHOOKS_PER_TYPE,
    WALLET_TYPES,
};
use crate::{
    error::{Error, Result},
    identity::{
        bearer::Principal,
        scopes::{Action, WalletPermission},
    },
    model::webhook::{LevelKind, Webhook, WebhookFilter, WebhookLevel, WebhookState},
    paging::{Page, PageRequest},
    store::{CapReached, WebhookCaps},
    types::{Coin, EnterpriseId, WalletId, WebhookId},
    wallets::wallet_access,
    webhooks::Webhooks,
};

/// Where a webhook lives, as named by the route.
#[derive(Debug, Clone, Copy)]
pub enum Level<'a> {
    /// A wallet's webhooks (§4.4); the caller needs wallet_manage on it.
    Wallet { coin: &'a Coin, wallet_id: &'a WalletId },
    /// The caller's own block webhooks of a coin (§4.6).
    Block { coin: &'a Coin },
    /// An enterprise's webhooks (§4.8); enterprise admins only.
    Enterprise { enterprise_id: &'a EnterpriseId },
}

/// A webhook to create: the fields of §4.4, §4.6 and §4.8 as given.
#[derive(Debug, Clone, Default)]
pub struct NewWebhook {
    /// A type of the level's §6 table.
    pub webhook_type: String,
    /// Absolute http(s) URL, at most 2048 characters; https only in production.
    pub url: String,
    pub label: Option<String>,
    pub listen_to_failure_states: Option<bool>,
    pub custom_http_headers: Option<BTreeMap<String, String>>,
    pub tx_request_states: Option<Vec<String>>,
    pub tx_request_transaction_states: Option<Vec<String>>,
    /// Block webhooks: confirmations before notifying, a whole number >= 0.
    pub num_confirmations: Option<Value>,
    /// Deliver even to non-routable addresses; service admins only.
    pub allow_blocked_hosts: Option<bool>,
}

/// Which webhooks a removal names: one id, or every one with a type and URL.
#[derive(Debug, Clone)]
pub enum Removal {
    Id(WebhookId),
    TypeAndUrl { webhook_type: String, url: String },
}

/// The filter of the webhooks at `level` that the caller may manage, after checking access.
async fn level_filter(svc: &Webhooks, auth: &Principal, level: Level<'_>) -> Result<WebhookFilter> {
    Ok(match level {
        Level::Wallet { coin, wallet_id } => {
            let wallet = wallet_access(&svc.wallets, auth, coin, wallet_id, WalletPermission::Manage).await?;
            WebhookFilter { scope: LevelKind::Wallet, wallet_id: Some(wallet.id), ..Default::default() }
        }
        Level::Block { coin } => {
            auth.require(svc.policy, Action::ManageBlockWebhooks)?;
            WebhookFilter {
                scope: LevelKind::Block,
                user_id: Some(auth.user.id.clone()),
                coin: Some(coin.clone()),
                ..Default::default()
            }
        }
        Level::Enterprise { enterprise_id } => {
            let e = enterprise_access(svc, auth, enterprise_id).await?;
            WebhookFilter { scope: LevelKind::Enterprise, enterprise_id: Some(e.id), ..Default::default() }
        }
    })
}

/// `numConfirmations` of a block or wallet webhook: a whole number up to
/// [`super::MAX_NUM_CONFIRMATIONS`], 0 when absent.
fn num_confirmations(v: &Option<Value>) -> Result<i64> {
    match v {
        None | Some(Value::Null) => Ok(0),
        Some(v) => crate::types::whole_number(v)
            .filter(|n| *n <= super::MAX_NUM_CONFIRMATIONS)
            .and_then(|n| i64::try_from(n).ok())
            .ok_or_else(|| {
                Error::invalid_field(
                    "numConfirmations",
                    format!("must be a whole number from 0 to {}", super::MAX_NUM_CONFIRMATIONS),
                )
            }),
    }
}

/// Builds a webhook record at `level` from a checked request; `allowed` are the level's types.
fn build(
    req: NewWebhook,
    level: WebhookLevel,
    allowed: &[&str],
    auth: &Principal,
    svc: &Webhooks,
) -> Result<Webhook> {
    if !allowed.contains(&req.webhook_type.as_str()) {
        return Err(invalid_type(level.name(), allowed));
    }
    check_url(&req.url, svc.config.environment)?;
    let headers = req.custom_http_headers.unwrap_or_default();
    check_headers(&headers)?;
    if req.label.as_ref().is_some_and(|l| l.chars().count() > 250) {
        return Err(Error::invalid_field("label", "at most 250 characters"));
    }
    let tx_request_states =
        super::check_states("txRequestStates", super::TX_REQUEST_STATES, req.tx_request_states)?;
    let tx_request_transaction_states = super::check_states(
        "txRequestTransactionStates",
        super::TX_REQUEST_TRANSACTION_STATES,
        req.tx_request_transaction_states,
    )?;
    let allow_blocked_hosts = req.allow_blocked_hosts.unwrap_or(false);
    if allow_blocked_hosts && !auth.token.admin {
        return Err(Error::forbidden("only a service admin may set allowBlockedHosts", "service admin"));
    }
    if !allow_blocked_hosts {
        refuse_blocked_literal(&req.url, &svc.config.delivery.allowed_cidrs)?;
    }
    let id = WebhookId::new_random();
    let custom_headers = crate::notifications::headers::seal(&svc.key, &id, headers)?;
    Ok(Webhook {
        id,
        level,
        user_id: auth.user.id.clone(),
        webhook_type: req.webhook_type,
        url: req.url,
        label: req.label,
        state: WebhookState::Active,
        successive_failed_attempts: 0,
        failed_attempts_total: 0,
        listen_to_failure_states: req.listen_to_failure_states.unwrap_or(false),
        tx_request_states,
        tx_request_transaction_states,
        custom_headers,
        allow_blocked_hosts,
        created_at: svc.store.clock().now(),
    })
}

/// A URL whose host is a literal address delivery would refuse (loopback, private, link-local,
/// metadata, in any spelling the URL standard accepts: `0x7f000001`, `[::1]`, ...) is a 400
/// naming `url` now rather than a failure at every delivery (docs/decisions.md#faults-and-floods). Names are still
/// checked when delivery resolves them (`delivery::ssrf`).
pub fn refuse_blocked_literal(url: &str, allowed: &[ipnet::IpNet]) -> Result<()> {
    let Ok(parsed) = url::Url::parse(url) else { return Ok(()) };
    let guard = crate::net::Guard { allowed: allowed.to_vec() };
    crate::net::check_literal(&guard, &parsed).map_err(|_| {
        Error::invalid_field("url", "the host is an address webhooks may not reach (not globally routable)")
    })
}

/// The enterprise whose secret signs a block webhook: the token's, else the user's first
/// (docs/webhooks.md).
async fn block_enterprise(svc: &Webhooks, auth: &Principal) -> Result<Option<EnterpriseId>> {
    if let Some(e) = &auth.token.enterprise {
        return Ok(Some(e.clone()));
    }
    Ok(svc.store.memberships(&auth.user.id).await?.into_iter().next().map(|m| m.enterprise.id))
}

/// Creates a webhook at `level`. Errors: access (`NotFound`, `Forbidden`), an invalid field
/// (a block webhook's `coin` must be in `webhooks.coins`), `InvalidWebhookType`,
/// `WebhookLimitReached` (§8: [`MAX_WEBHOOKS_PER_TYPE`] of a type; `webhooks.max_per_user`
/// block webhooks per user; `webhooks.max_per_enterprise` per enterprise).
pub async fn create(svc: &Webhooks, auth: &Principal, level: Level<'_>, req: NewWebhook) -> Result<Webhook> {
    let w = match level {
        Level::Wallet { coin, wallet_id } => {
            let wallet = wallet_access(&svc.wallets, auth, coin, wallet_id, WalletPermission::Manage).await?;
            let level = WebhookLevel::Wallet {
                coin: coin.clone(),
                wallet_id: wallet.id,
                enterprise_id: wallet.enterprise,
                num_confirmations: num_confirmations(&req.num_confirmations)?,
            };
            build(req, level, WALLET_TYPES, auth, svc)?
        }
        Level::Block { coin } => {
            auth.require(svc.policy, Action::ManageBlockWebhooks)?;
            if !svc.config.webhooks.coins.iter().any(|c| c == coin.as_str()) {
                return Err(Error::invalid_field("coin", "not a coin this service knows (webhooks.coins)"));
            }
            let level = WebhookLevel::Block {
                coin: coin.clone(),
                num_confirmations: num_confirmations(&req.num_confirmations)?,
                enterprise_id: block_enterprise(svc, auth).await?,
            };
            build(req, level, BLOCK_TYPES, auth, svc)?
        }
        Level::Enterprise { enterprise_id } => {
            let e = enterprise_access(svc, auth, enterprise_id).await?;
            build(req, WebhookLevel::Enterprise { enterprise_id: e.id }, ENTERPRISE_TYPES, auth, svc)?
        }
    };
    let cfg = &svc.config.webhooks;
    let caps = WebhookCaps {
        per_type: MAX_WEBHOOKS_PER_TYPE,
        block_per_user: cfg.max_per_user,
        per_enterprise: cfg.max_per_enterprise,
    };
    let entry = auth
        .audit(AuditType::WebhookCreated)
        .enterprise(w.level.enterprise_id())
        .wallet(w.level.wallet_id())
        .data(json!({
            "id": w.id, "level": w.level.name(), "type": w.webhook_type, "url": w.url,
            "allowBlockedHosts": w.allow_blocked_hosts,
        }));
    let (max, what) = match svc.store.insert_webhook(&w, caps, &[entry]).await? {
        Ok(()) => return Ok(w),
        Err(CapReached::PerType) => (caps.per_type, format!("webhooks of type {} here (§8)", w.webhook_type)),
        Err(CapReached::BlockPerUser) => {
            (caps.block_per_user, "block webhooks per user (webhooks.max_per_user)".into())
        }
        Err(CapReached::PerEnterprise) => {
            (caps.per_enterprise, "webhooks per enterprise (webhooks.max_per_enterprise)".into())
        }
    };
    Err(Error::Invalid {
        name: ErrorName::WebhookLimitReached,
        message: format!("at most {max} {what}"),
        context: json!({ "field": "type", "max": max }),
    })
}

/// The webhooks at `level`, by id.
pub async fn list(
    svc: &Webhooks,
    auth: &Principal,
    level: Level<'_>,
    page: &PageRequest,
) -> Result<Page<Webhook>> {
    let filter = level_filter(svc, auth, level).await?;
    let rows = svc.store.list_webhooks(&filter, page.prev_id.as_ref(), page.fetch()).await?;
    Ok(page.page(rows, |w| &w.id))
}

/// Removes the webhooks at `level` that `removal` names; returns how many.
pub async fn remove(svc: &Webhooks, auth: &Principal, level: Level<'_>, removal: Removal) -> Result<u64> {
    let filter = level_filter(svc, auth, level).await?;
    let entry = auth
        .audit(AuditType::WebhookRemoved)
        .enterprise(filter.enterprise_id.as_ref())
        .wallet(filter.wallet_id.as_ref());
    Ok(match &removal {
        Removal::Id(id) => {
            let entry = entry.data(json!({ "level": filter.scope.as_str(), "id": id }));
            svc.store.delete_webhooks(&filter, Some(id), None, &[entry]).await?
        }
        Removal::TypeAndUrl { webhook_type, url } => {
            let entry =
                entry.data(json!({ "level": filter.scope.as_str(), "type": webhook_type, "url": url }));
            svc.store.delete_webhooks(&filter, None, Some((webhook_type, url)), &[entry]).await?
        }
    })
}

/// Removes one webhook of an enterprise. Errors: access, `WebhookNotFound`.
pub async fn remove_enterprise_webhook(
    svc: &Webhooks,
    auth: &Principal,
    enterprise_id: &EnterpriseId,
    webhook_id: &WebhookId,
) -> Result<()> {
    match remove(svc, auth, Level::Enterprise { enterprise_id }, Removal::Id(webhook_id.clone())).await? {
        0 => Err(Error::not_found(ErrorName::WebhookNotFound)),
        _ => Ok(()),
    }
}

/// Makes a suspended webhook active again and clears its failure counters.
pub async fn unblock(svc: &Webhooks, auth: &Principal, webhook_id: &WebhookId) -> Result<Webhook> {
    let w = webhook_access(svc, auth, webhook_id).await?;
    svc.operations.check(&w.id).await?;
    let entry = auth
        .audit(AuditType::WebhookUnblocked)
        .enterprise(w.level.enterprise_id())
        .wallet(w.level.wallet_id())
        .data(json!({ "id": w.id }));
    svc.store.unblock_webhook(&w.id, svc.store.clock().now_ms(), &[entry]).await?;
    svc.dispatch.wake();
    svc.store.webhook_by_id(&w.id).await?.ok_or_else(|| Error::not_found(ErrorName::WebhookNotFound))
}

impl Removal {
    /// `{id}` or `{type, url}` of a removal body. Errors: `InvalidField` naming `id`.
    pub fn parse(
        id: Option<WebhookId>,
        webhook_type: Option<String>,
        url: Option<String>,
    ) -> Result<Removal> {
        match (id, webhook_type, url) {
            (Some(id), _, _) => Ok(Removal::Id(id)),
            (None, Some(webhook_type), Some(url)) => Ok(Removal::TypeAndUrl { webhook_type, url }),
            _ => Err(Error::invalid_field("id", "give id, or type and url")),
        }
    }
}
