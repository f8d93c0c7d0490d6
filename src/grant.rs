//! The scope vocabulary of spec §4.3 and the parsed form of one scope value, shared by the
//! store (tokens keep their grants parsed) and the scope policy (`identity::scopes`).

use crate::types::WalletId;

crate::types::text_enum!(
    /// A scope value of the §4.3 table: the whole vocabulary, one variant each.
    pub enum Scope("not an allowed scope value") {
        All = "all",
        CryptoCompare = "crypto_compare",
        EnterpriseManageAll = "enterprise_manage_all",
        EnterpriseViewAll = "enterprise_view_all",
        MetamaskInstitutional = "metamask_institutional",
        Openid = "openid",
        OpenidEnterprises = "openid_enterprises",
        PendingApprovalUpdate = "pending_approval_update",
        PortfolioView = "portfolio_view",
        Profile = "profile",
        UserManage = "user_manage",
        AuditlogsViewAll = "auditlogs_view_all",
        SettlementNetworkRead = "settlement_network_read",
        SettlementNetworkWrite = "settlement_network_write",
        TradeTrade = "trade_trade",
        TradeView = "trade_view",
        TradeFix = "trade_fix",
        WalletApprove = "wallet_approve",
        WalletApproveAll = "wallet_approve_all",
        WalletApproveEnterprise = "wallet_approve_enterprise",
        WalletCreate = "wallet_create",
        WalletEdit = "wallet_edit",
        WalletEditAll = "wallet_edit_all",
        WalletEditEnterprise = "wallet_edit_enterprise",
        WalletFreeze = "wallet_freeze",
        WalletFreezeAll = "wallet_freeze_all",
        WalletManage = "wallet_manage",
        WalletManageAll = "wallet_manage_all",
        WalletManageEnterprise = "wallet_manage_enterprise",
        WalletSpend = "wallet_spend",
        WalletSpendAll = "wallet_spend_all",
        WalletSpendEnterprise = "wallet_spend_enterprise",
        WalletStake = "wallet_stake",
        WalletStakeAll = "wallet_stake_all",
        WalletView = "wallet_view",
        WalletViewAll = "wallet_view_all",
        WalletViewEnterprise = "wallet_view_enterprise",
        ThirdPartyUserLookup = "third_party_user_lookup",
        PrivateVerifyEmail = "private_verify_email",
        Scim = "scim",
    }
);

/// The wallet permission families, each with its plain (wallet context), `_enterprise` and
/// `_all` forms (§4.3, §5.4).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WalletPermission {
    View,
    Manage,
    Spend,
    Approve,
    Freeze,
    Edit,
    Stake,
}

impl WalletPermission {
    /// Every family.
    pub const ALL: &'static [WalletPermission] = &[
        WalletPermission::View,
        WalletPermission::Manage,
        WalletPermission::Spend,
        WalletPermission::Approve,
        WalletPermission::Freeze,
        WalletPermission::Edit,
        WalletPermission::Stake,
    ];

    /// The plain scope, e.g. `wallet_view`: the one that takes a wallet context.
    pub fn plain(self) -> Scope {
        match self {
            WalletPermission::View => Scope::WalletView,
            WalletPermission::Manage => Scope::WalletManage,
            WalletPermission::Spend => Scope::WalletSpend,
            WalletPermission::Approve => Scope::WalletApprove,
            WalletPermission::Freeze => Scope::WalletFreeze,
            WalletPermission::Edit => Scope::WalletEdit,
            WalletPermission::Stake => Scope::WalletStake,
        }
    }

    /// The `_all` form: any wallet in any of the user's enterprises.
    pub fn all(self) -> Scope {
        match self {
            WalletPermission::View => Scope::WalletViewAll,
            WalletPermission::Manage => Scope::WalletManageAll,
            WalletPermission::Spend => Scope::WalletSpendAll,
            WalletPermission::Approve => Scope::WalletApproveAll,
            WalletPermission::Freeze => Scope::WalletFreezeAll,
            WalletPermission::Edit => Scope::WalletEditAll,
            WalletPermission::Stake => Scope::WalletStakeAll,
        }
    }

    /// The `_enterprise` form (the token's enterprise), where §4.3 lists one.
    pub fn enterprise(self) -> Option<Scope> {
        match self {
            WalletPermission::View => Some(Scope::WalletViewEnterprise),
            WalletPermission::Manage => Some(Scope::WalletManageEnterprise),
            WalletPermission::Spend => Some(Scope::WalletSpendEnterprise),
            WalletPermission::Approve => Some(Scope::WalletApproveEnterprise),
            WalletPermission::Edit => Some(Scope::WalletEditEnterprise),
            WalletPermission::Freeze | WalletPermission::Stake => None,
        }
    }

    /// The family `scope` is a form of, if any.
    pub fn of(scope: Scope) -> Option<WalletPermission> {
        WalletPermission::ALL
            .iter()
            .copied()
            .find(|p| p.plain() == scope || p.all() == scope || p.enterprise() == Some(scope))
    }
}

impl Scope {
    /// Scopes that the §4.3 table marks "needs wallet context": they may take the form
    /// `<scope>:<walletId>`.
    pub fn takes_wallet_context(self) -> bool {
        WalletPermission::ALL.iter().any(|p| p.plain() == self)
    }

    /// An `_enterprise` form, which means "the token's enterprise".
    pub fn is_enterprise_form(self) -> bool {
        WalletPermission::ALL.iter().any(|p| p.enterprise() == Some(self))
    }
}

/// A checked scope value: `name` from the vocabulary; `wallet` the `:<walletId>` context.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct Grant {
    pub name: Scope,
    pub wallet: Option<WalletId>,
}

impl Grant {
    /// Parses a scope value. Errors say why, for the 400's message.
    pub fn parse(s: &str) -> Result<Grant, String> {
        if let Some((name, wallet)) = s.split_once(':') {
            let Some(scope) = name.parse::<Scope>().ok().filter(|s| s.takes_wallet_context()) else {
                return Err(format!("scope {name:?} does not take a wallet context"));
            };
            let wallet: WalletId =
                wallet.parse().map_err(|_| format!("wallet context {wallet:?} is not a 32-hex wallet id"))?;
            return Ok(Grant { name: scope, wallet: Some(wallet) });
        }
        match s.parse() {
            Ok(name) => Ok(Grant { name, wallet: None }),
            Err(_) => Err(format!("{s:?} is not an allowed scope value")),
        }
    }

    /// A scope without wallet context.
    pub fn plain(name: Scope) -> Grant {
        Grant { name, wallet: None }
    }

    /// The canonical text form.
    pub fn to_scope_string(&self) -> String {
        match &self.wallet {
            Some(w) => format!("{}:{w}", self.name.as_str()),
            None => self.name.as_str().to_string(),
        }
    }
}

/// A grant is written as its scope value (`wallet_view`, `wallet_spend:<walletId>`).
impl serde::Serialize for Grant {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&self.to_scope_string())
    }
}

impl Scope {
    /// What the scope permits, as §4.3's table says it (shown on the OAuth consent page).
    pub fn description(self) -> &'static str {
        use Scope::*;
        match self {
            All => "all actions in the test environment",
            CryptoCompare => "calls to a market-data API",
            EnterpriseManageAll => "manage users and settings of any enterprise you belong to",
            EnterpriseViewAll => "view any enterprise you belong to",
            MetamaskInstitutional => "use of wallets in a browser-extension integration (deprecated)",
            Openid => "verify your user id (OpenID Connect)",
            OpenidEnterprises => "verify your user id and list your enterprises (OpenID Connect)",
            PendingApprovalUpdate => "approve or reject pending actions needing approval",
            PortfolioView => "the portfolio API (deprecated)",
            Profile => "view your profile",
            UserManage => "manage your user: tokens, keychains, settings",
            AuditlogsViewAll => "view audit logs",
            SettlementNetworkRead => "view settlement-network data",
            SettlementNetworkWrite => "update settlement-network data",
            TradeTrade => "initiate trades",
            TradeView => "view trades",
            TradeFix => "access the trade FIX gateway",
            WalletApprove => "approve policies and transactions of one wallet you administer",
            WalletApproveAll => {
                "approve transactions of any wallet you administer in any of your enterprises"
            }
            WalletApproveEnterprise => "approve transactions of any wallet you administer in one enterprise",
            WalletCreate => "create wallets",
            WalletEdit => "edit comments on the transfers of one wallet",
            WalletEditAll => "edit comments on all transfers in your enterprises",
            WalletEditEnterprise => "edit comments on all transfers in one enterprise (deprecated)",
            WalletFreeze => "freeze one wallet",
            WalletFreezeAll => "freeze any wallet in any of your enterprises",
            WalletManage => "manage the settings of one wallet you administer",
            WalletManageAll => "manage the settings of any wallet you administer in any of your enterprises",
            WalletManageEnterprise => "manage the settings of any wallet you administer in one enterprise",
            WalletSpend => "initiate transactions from one wallet",
            WalletSpendAll => "initiate transactions from any wallet in any of your enterprises",
            WalletSpendEnterprise => "initiate transactions from any wallet in one enterprise",
            WalletStake => "initiate staking transactions from one wallet",
            WalletStakeAll => "initiate staking transactions from any wallet in any of your enterprises",
            WalletView => "view one wallet",
            WalletViewAll => "view any wallet in any of your enterprises",
            WalletViewEnterprise => "view any wallet in one enterprise",
            ThirdPartyUserLookup => "look up third-party users",
            PrivateVerifyEmail => "verify your email",
            Scim => "user provisioning (SCIM)",
        }
    }
}
