//! Where a webhook lives (spec §2.5): its level with the level's fields, as stored in a
//! webhook's `scope`, `coin`, `wallet_id`, `enterprise_id` and `num_confirmations` columns.

use crate::types::{Coin, EnterpriseId, WalletId};

/// Where a webhook lives (spec §2.5), with the fields of its level. `enterprise_id` is the
/// enterprise whose secret signs its notifications (docs/webhooks.md).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum WebhookLevel {
    /// §4.4: one wallet's events; signed by the wallet's enterprise, if any.
    Wallet { coin: Coin, wallet_id: WalletId, enterprise_id: Option<EnterpriseId> },
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
            WebhookLevel::Block { num_confirmations, .. } => Some(*num_confirmations),
            _ => None,
        }
    }

    /// Rebuilds a level from its stored columns.
    pub(super) fn from_columns(
        scope: &str,
        coin: Option<Coin>,
        wallet_id: Option<WalletId>,
        enterprise_id: Option<EnterpriseId>,
        num_confirmations: Option<i64>,
    ) -> Option<Self> {
        Some(match scope {
            "wallet" => WebhookLevel::Wallet { coin: coin?, wallet_id: wallet_id?, enterprise_id },
            "block" => WebhookLevel::Block {
                coin: coin?,
                num_confirmations: num_confirmations.unwrap_or(0),
                enterprise_id,
            },
            "enterprise" => WebhookLevel::Enterprise { enterprise_id: enterprise_id? },
            _ => return None,
        })
    }
}
