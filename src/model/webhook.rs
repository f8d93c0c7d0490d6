//! What a webhook is (spec §2.5): its level with the level's fields, its state, and which
//! webhooks a list, a removal or §8's per-type limit covers.

use std::collections::BTreeMap;

use crate::types::{Coin, EnterpriseId, UserId, WalletId, WebhookId};

/// A webhook (spec §2.5).
#[derive(Debug, Clone)]
pub struct Webhook {
    pub id: WebhookId,
    pub level: WebhookLevel,
    /// The creator; the owner of a block webhook.
    pub user_id: UserId,
    pub webhook_type: String,
    pub url: String,
    pub label: Option<String>,
    pub state: WebhookState,
    pub successive_failed_attempts: i64,
    pub failed_attempts_total: i64,
    pub listen_to_failure_states: bool,
    pub tx_request_states: Vec<String>,
    pub tx_request_transaction_states: Vec<String>,
    /// `customHttpHeaders`, values sealed (`notifications::headers`).
    pub custom_headers: BTreeMap<String, String>,
    pub allow_blocked_hosts: bool,
    /// Unix seconds.
    pub created_at: i64,
}

/// Whether a webhook is delivered to (spec §2.5 `state`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WebhookState {
    Active,
    /// Stopped after repeated failures until unblocked.
    Suspended,
}

impl WebhookState {
    /// The spec's spelling, as stored.
    pub fn as_str(self) -> &'static str {
        match self {
            WebhookState::Active => "active",
            WebhookState::Suspended => "suspended",
        }
    }

    /// The state spelt `s`, if any.
    pub fn parse(s: &str) -> Option<Self> {
        match s {
            "active" => Some(WebhookState::Active),
            "suspended" => Some(WebhookState::Suspended),
            _ => None,
        }
    }
}

/// Where a webhook lives (spec §2.5), with the fields of its level. `enterprise_id` is the
/// enterprise whose secret signs its notifications (docs/webhooks.md).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum WebhookLevel {
    /// §4.4: one wallet's events; signed by the wallet's enterprise, if any. With
    /// `num_confirmations` above 0, a chain transfer is told once, at that many confirmations
    /// (docs/chains.md); 0 tells each state it enters.
    Wallet { coin: Coin, wallet_id: WalletId, enterprise_id: Option<EnterpriseId>, num_confirmations: i64 },
    /// §4.6: a user's webhook for a coin's blocks, once a block has `num_confirmations`.
    Block { coin: Coin, num_confirmations: i64, enterprise_id: Option<EnterpriseId> },
    /// §4.8: one enterprise's events.
    Enterprise { enterprise_id: EnterpriseId },
}

/// A webhook level without its fields: what a filter or a stored row's `scope` names.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum LevelKind {
    #[default]
    Wallet,
    Block,
    Enterprise,
}

impl LevelKind {
    /// `wallet`, `block` or `enterprise`: the spec's name (§2.5 `scope`), as stored.
    pub fn as_str(self) -> &'static str {
        match self {
            LevelKind::Wallet => "wallet",
            LevelKind::Block => "block",
            LevelKind::Enterprise => "enterprise",
        }
    }
}

impl WebhookLevel {
    /// The level without its fields.
    pub fn kind(&self) -> LevelKind {
        match self {
            WebhookLevel::Wallet { .. } => LevelKind::Wallet,
            WebhookLevel::Block { .. } => LevelKind::Block,
            WebhookLevel::Enterprise { .. } => LevelKind::Enterprise,
        }
    }

    /// `wallet`, `block` or `enterprise`: the spec's name, as stored.
    pub fn name(&self) -> &'static str {
        self.kind().as_str()
    }

    pub fn coin(&self) -> Option<&Coin> {
        match self {
            WebhookLevel::Wallet { coin, .. } | WebhookLevel::Block { coin, .. } => Some(coin),
            WebhookLevel::Enterprise { .. } => None,
        }
    }

    pub fn wallet_id(&self) -> Option<&WalletId> {
        match self {
            WebhookLevel::Wallet { wallet_id, .. } => Some(wallet_id),
            _ => None,
        }
    }

    /// The enterprise whose secret signs the webhook's notifications.
    pub fn enterprise_id(&self) -> Option<&EnterpriseId> {
        match self {
            WebhookLevel::Wallet { enterprise_id, .. } | WebhookLevel::Block { enterprise_id, .. } => {
                enterprise_id.as_ref()
            }
            WebhookLevel::Enterprise { enterprise_id } => Some(enterprise_id),
        }
    }

    pub fn num_confirmations(&self) -> Option<i64> {
        match self {
            WebhookLevel::Block { num_confirmations, .. }
            | WebhookLevel::Wallet { num_confirmations, .. } => Some(*num_confirmations),
            WebhookLevel::Enterprise { .. } => None,
        }
    }
}

/// Which webhooks a list or removal applies to.
#[derive(Debug, Clone, Default)]
pub struct WebhookFilter {
    pub scope: LevelKind,
    pub wallet_id: Option<WalletId>,
    pub enterprise_id: Option<EnterpriseId>,
    pub user_id: Option<UserId>,
    pub coin: Option<Coin>,
    pub webhook_type: Option<String>,
    /// Only webhooks in this state.
    pub state: Option<WebhookState>,
}

impl WebhookFilter {
    /// The webhooks of `w`'s type at its level, which §8's per-type limit counts.
    pub fn limit_for(w: &Webhook) -> Self {
        let scope = w.level.kind();
        let filter = match &w.level {
            WebhookLevel::Wallet { wallet_id, .. } => {
                WebhookFilter { scope, wallet_id: Some(wallet_id.clone()), ..Default::default() }
            }
            WebhookLevel::Enterprise { enterprise_id } => {
                WebhookFilter { scope, enterprise_id: Some(enterprise_id.clone()), ..Default::default() }
            }
            WebhookLevel::Block { coin, .. } => WebhookFilter {
                scope,
                user_id: Some(w.user_id.clone()),
                coin: Some(coin.clone()),
                ..Default::default()
            },
        };
        WebhookFilter { webhook_type: Some(w.webhook_type.clone()), ..filter }
    }
}
