//! The scope vocabulary of spec §4.3 and the parsed form of one scope value, shared by the
//! store (tokens keep their grants parsed) and the scope policy (`identity::scopes`).

/// Every scope value of the §4.3 table.
pub const SCOPES: &[&str] = &[
    "all",
    "crypto_compare",
    "enterprise_manage_all",
    "enterprise_view_all",
    "metamask_institutional",
    "openid",
    "openid_enterprises",
    "pending_approval_update",
    "portfolio_view",
    "profile",
    "user_manage",
    "auditlogs_view_all",
    "settlement_network_read",
    "settlement_network_write",
    "trade_trade",
    "trade_view",
    "trade_fix",
    "wallet_approve",
    "wallet_approve_all",
    "wallet_approve_enterprise",
    "wallet_create",
    "wallet_edit",
    "wallet_edit_all",
    "wallet_edit_enterprise",
    "wallet_freeze",
    "wallet_freeze_all",
    "wallet_manage",
    "wallet_manage_all",
    "wallet_manage_enterprise",
    "wallet_spend",
    "wallet_spend_all",
    "wallet_spend_enterprise",
    "wallet_stake",
    "wallet_stake_all",
    "wallet_view",
    "wallet_view_all",
    "wallet_view_enterprise",
    "third_party_user_lookup",
    "private_verify_email",
    "scim",
];

/// Scopes that the §4.3 table marks "needs wallet context": they may take the form
/// `<scope>:<walletId>`.
pub const WALLET_CONTEXT_SCOPES: &[&str] = &[
    "wallet_approve",
    "wallet_edit",
    "wallet_freeze",
    "wallet_manage",
    "wallet_spend",
    "wallet_stake",
    "wallet_view",
];

/// A checked scope value: `name` is from [`SCOPES`]; `wallet` is the `:<walletId>` context.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct Grant {
    pub name: String,
    pub wallet: Option<String>,
}

impl Grant {
    /// Parses a scope value. Errors say why, for the 400's message.
    pub fn parse(s: &str) -> Result<Grant, String> {
        if let Some((name, wallet)) = s.split_once(':') {
            if !WALLET_CONTEXT_SCOPES.contains(&name) {
                return Err(format!("scope {name:?} does not take a wallet context"));
            }
            if !crate::ids::is_id(wallet) {
                return Err(format!("wallet context {wallet:?} is not a 32-hex wallet id"));
            }
            return Ok(Grant { name: name.into(), wallet: Some(wallet.into()) });
        }
        if !SCOPES.contains(&s) {
            return Err(format!("{s:?} is not an allowed scope value"));
        }
        Ok(Grant { name: s.into(), wallet: None })
    }

    /// A scope without wallet context, from the vocabulary's own constants.
    pub fn plain(name: &str) -> Grant {
        Grant { name: name.into(), wallet: None }
    }

    /// The canonical text form.
    pub fn to_scope_string(&self) -> String {
        match &self.wallet {
            Some(w) => format!("{}:{w}", self.name),
            None => self.name.clone(),
        }
    }
}

/// A grant is written as its scope value (`wallet_view`, `wallet_spend:<walletId>`).
impl serde::Serialize for Grant {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&self.to_scope_string())
    }
}
