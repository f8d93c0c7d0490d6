//! The scope policy (spec §4.3 table, §5.4): the one place that decides whether a token may do
//! something. Handlers ask [`Policy`]; they never compare scope strings themselves.
//! The rules are written out in docs/scopes.md.

use std::collections::BTreeSet;

pub use crate::grant::{Grant, Scope, WalletPermission};
use crate::{
    config::Environment,
    model::token::{TokenKind, TokenRecord},
    types::{EnterpriseId, WalletId},
};

/// Scopes held by a login session (spec §4.2): what a person signed in with password and OTP
/// may do. `all` is added in the test environment only (§4.3: "all actions in the test
/// environment").
pub const SESSION_SCOPES: &[Scope] = &[
    Scope::Openid,
    Scope::Profile,
    Scope::UserManage,
    Scope::CryptoCompare,
    Scope::EnterpriseViewAll,
    Scope::EnterpriseManageAll,
    Scope::AuditlogsViewAll,
    Scope::PendingApprovalUpdate,
    Scope::TradeView,
    Scope::TradeTrade,
    Scope::WalletCreate,
    Scope::WalletViewAll,
    Scope::WalletManageAll,
    Scope::WalletSpendAll,
    Scope::WalletApproveAll,
    Scope::WalletFreezeAll,
    Scope::WalletEditAll,
    Scope::WalletStakeAll,
];

/// Scopes of a token from a `forReset2FA` login: reading the profile only.
pub const RESET_2FA_SCOPES: &[Scope] = &[Scope::Openid, Scope::Profile];

/// The scopes a new login session gets in `env`.
pub fn session_scopes(env: Environment) -> Vec<Grant> {
    let mut v: Vec<Grant> = SESSION_SCOPES.iter().map(|s| Grant::plain(*s)).collect();
    if env == Environment::Test {
        v.insert(0, Grant::plain(Scope::All));
    }
    v
}

/// What a token is being asked to do.
#[derive(Debug, Clone, Copy)]
pub enum Action<'a> {
    /// Read the token's own user profile (GET /api/v2/user/me).
    ViewProfile,
    /// Create another access token.
    CreateAccessToken,
    /// List or revoke the user's own tokens, or change their settings and keychains:
    /// `user_manage` (`all` in test), never a 2FA-reset
    /// token (docs/decisions.md#token-and-session-lifecycle).
    ManageOwnTokens,
    /// Create, list, remove or simulate the user's own block webhooks: `wallet_manage_all` or
    /// `wallet_manage_enterprise` (`all` in test), never a 2FA-reset token (docs/decisions.md).
    ManageBlockWebhooks,
    /// Read the audit log: `auditlogs_view_all` (`all` in test), or a login session itself
    /// (docs/decisions.md#token-and-session-lifecycle).
    ViewAuditLog,
    /// A wallet permission on one wallet.
    Wallet { permission: WalletPermission, wallet_id: &'a WalletId, enterprise: Option<&'a EnterpriseId> },
    /// View an enterprise.
    ViewEnterprise { enterprise_id: &'a EnterpriseId },
    /// Manage an enterprise (users, settings, webhooks).
    ManageEnterprise { enterprise_id: &'a EnterpriseId },
    /// Create a wallet in an enterprise: `wallet_create` (`all` in test), within the token's
    /// `permittedEnterprises`.
    CreateWallet { enterprise_id: &'a EnterpriseId },
    /// Answer a pending approval: `pending_approval_update` (`all` in test).
    UpdatePendingApproval,
    /// An operator-only action (service-admin permission).
    ServiceAdmin,
}

/// Decides what a token may do, in the deployment's environment.
#[derive(Debug, Clone, Copy)]
pub struct Policy {
    pub environment: Environment,
}

/// Why a token may not do something: the scope that would have allowed it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Denied {
    pub required: String,
}

impl Policy {
    /// Whether `token` holds scope `name` without a wallet context.
    fn has(&self, token: &TokenRecord, name: Scope) -> bool {
        token.scopes.iter().any(|g| g.wallet.is_none() && g.name == name)
    }

    /// Whether `token` holds scope `name` for wallet `wallet_id` (`name:walletId`).
    fn has_for_wallet(&self, token: &TokenRecord, name: Scope, wallet_id: &WalletId) -> bool {
        token.scopes.iter().any(|g| g.name == name && g.wallet.as_ref() == Some(wallet_id))
    }

    fn has_all(&self, token: &TokenRecord) -> bool {
        self.environment == Environment::Test && self.has(token, Scope::All)
    }

    /// Whether `token` may perform `action`. Membership of the user in the wallet or enterprise
    /// is checked by the caller against the store; this decides the token's side only.
    pub fn check(&self, token: &TokenRecord, action: Action<'_>) -> Result<(), Denied> {
        let deny = |required: &str| Err(Denied { required: required.to_string() });
        match action {
            Action::ViewProfile => {
                if self.has_all(token) || self.has(token, Scope::Profile) {
                    Ok(())
                } else {
                    deny("profile")
                }
            }
            Action::CreateAccessToken | Action::ManageBlockWebhooks if token.kind == TokenKind::Reset2fa => {
                deny("a session that is not limited to 2FA reset")
            }
            Action::CreateAccessToken => Ok(()),
            Action::ViewAuditLog => {
                if token.kind == TokenKind::Session
                    || self.has_all(token)
                    || self.has(token, Scope::AuditlogsViewAll)
                {
                    Ok(())
                } else {
                    deny("auditlogs_view_all or a login session")
                }
            }
            Action::ManageOwnTokens if token.kind == TokenKind::Reset2fa => {
                deny("a session that is not limited to 2FA reset")
            }
            Action::ManageOwnTokens => {
                if self.has_all(token) || self.has(token, Scope::UserManage) {
                    Ok(())
                } else {
                    deny("user_manage")
                }
            }
            Action::ManageBlockWebhooks => {
                if self.has_all(token)
                    || self.has(token, Scope::WalletManageAll)
                    || self.has(token, Scope::WalletManageEnterprise)
                {
                    Ok(())
                } else {
                    deny("wallet_manage_all or wallet_manage_enterprise")
                }
            }
            Action::ServiceAdmin => {
                if token.admin {
                    Ok(())
                } else {
                    deny("service admin")
                }
            }
            Action::ViewEnterprise { enterprise_id } => {
                self.check_enterprise(token, Scope::EnterpriseViewAll, enterprise_id)
            }
            Action::UpdatePendingApproval => {
                if self.has_all(token) || self.has(token, Scope::PendingApprovalUpdate) {
                    Ok(())
                } else {
                    deny("pending_approval_update")
                }
            }
            Action::CreateWallet { enterprise_id } => {
                self.check_enterprise(token, Scope::WalletCreate, enterprise_id)
            }
            Action::ManageEnterprise { enterprise_id } => {
                self.check_enterprise(token, Scope::EnterpriseManageAll, enterprise_id)
            }
            Action::Wallet { permission, wallet_id, enterprise } => {
                self.check_wallet(token, permission, wallet_id, enterprise)
            }
        }
    }

    /// An enterprise action needing scope `needed` (`enterprise_manage_all` also grants the
    /// view), within the token's `permittedEnterprises`.
    fn check_enterprise(
        &self,
        token: &TokenRecord,
        needed: Scope,
        enterprise_id: &EnterpriseId,
    ) -> Result<(), Denied> {
        let deny = |required: &str| Err(Denied { required: required.to_string() });
        let scoped = self.has_all(token)
            || self.has(token, needed)
            || (needed == Scope::EnterpriseViewAll && self.has(token, Scope::EnterpriseManageAll));
        if !scoped {
            return deny(needed.as_str());
        }
        if let Some(permitted) = &token.permitted_enterprises {
            if !permitted.iter().any(|e| e == enterprise_id) {
                return deny("permittedEnterprises including this enterprise");
            }
        }
        Ok(())
    }

    /// A wallet action: the wallet scope of `permission`, within the token's `permittedWallets`
    /// and `permittedEnterprises`.
    fn check_wallet(
        &self,
        token: &TokenRecord,
        permission: WalletPermission,
        wallet_id: &WalletId,
        enterprise: Option<&EnterpriseId>,
    ) -> Result<(), Denied> {
        let deny = |required: &str| Err(Denied { required: required.to_string() });
        if !self.wallet_scope_covers(token, permission, wallet_id, enterprise) {
            return deny(&format!("{}:{wallet_id}", permission.plain().as_str()));
        }
        if let Some(permitted) = &token.permitted_wallets {
            if !permitted.iter().any(|w| w == wallet_id) {
                return deny("permittedWallets including this wallet");
            }
        }
        if let Some(permitted) = &token.permitted_enterprises {
            let inside = enterprise.is_some_and(|e| permitted.iter().any(|p| p == e));
            if !inside {
                return deny("permittedEnterprises including this wallet's enterprise");
            }
        }
        Ok(())
    }

    /// Whether `token` may see wallet `wallet_id` in the internal lookup (§4.1; docs/scopes.md):
    /// the user must be allowed to see it (`user_may_see`: listed in its `users`, an admin of
    /// its enterprise, or a service admin, for whom membership is waived) and the token's view
    /// scopes, `permittedWallets` and `permittedEnterprises` must cover it (for service admins
    /// too: docs/decisions.md#brute-force-limits).
    pub fn can_view_wallet(
        &self,
        token: &TokenRecord,
        user_may_see: bool,
        wallet_id: &WalletId,
        enterprise: Option<&EnterpriseId>,
    ) -> bool {
        user_may_see
            && self
                .check(token, Action::Wallet { permission: WalletPermission::View, wallet_id, enterprise })
                .is_ok()
    }

    fn wallet_scope_covers(
        &self,
        token: &TokenRecord,
        permission: WalletPermission,
        wallet_id: &WalletId,
        enterprise: Option<&EnterpriseId>,
    ) -> bool {
        let base = permission.plain();
        if self.has_all(token) || self.has(token, permission.all()) {
            return true;
        }
        if self.has_for_wallet(token, base, wallet_id) {
            return true;
        }
        // The _enterprise form covers the wallets of the token's own enterprise.
        if permission.enterprise().is_some_and(|e| self.has(token, e))
            && enterprise.is_some()
            && token.enterprise.as_ref() == enterprise
        {
            return true;
        }
        // The plain form takes its wallet context from permittedWallets (docs/scopes.md).
        self.has(token, base)
            && token.permitted_wallets.as_ref().is_some_and(|p| p.iter().any(|w| w == wallet_id))
    }

    /// Whether a token holding `parent` may issue a token holding `child` (the child cannot
    /// exceed its parent; docs/scopes.md). `same_enterprise` says the child's `enterprise` equals
    /// the parent's.
    pub fn grant_covers(&self, parent: &[Grant], child: &Grant, same_enterprise: bool) -> bool {
        let has = |name: Scope, wallet: Option<&WalletId>| {
            parent.iter().any(|g| g.name == name && g.wallet.as_ref() == wallet)
        };
        if self.environment == Environment::Test && has(Scope::All, None) {
            return true;
        }
        if WalletPermission::of(child.name).is_some_and(|family| has(family.all(), None)) {
            return true;
        }
        // An _enterprise form means "the token's enterprise": it carries over only to a child
        // bound to the same enterprise.
        if child.name.is_enterprise_form() && !same_enterprise {
            return false;
        }
        has(child.name, child.wallet.as_ref())
    }
}

/// Parses and de-duplicates scope values, keeping first-seen order.
pub fn parse_scopes(values: &[String]) -> Result<Vec<Grant>, (usize, String)> {
    let mut seen = BTreeSet::new();
    let mut out = Vec::new();
    for (i, v) in values.iter().enumerate() {
        let g = Grant::parse(v).map_err(|e| (i, e))?;
        if seen.insert(g.clone()) {
            out.push(g);
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn token(scopes: &[&str]) -> TokenRecord {
        TokenRecord {
            id: "0".repeat(32).parse().expect("id"),
            token_hash: String::new(),
            user_id: "1".repeat(32).parse().expect("id"),
            kind: TokenKind::Access,
            label: None,
            scopes: scopes.iter().map(|s| Grant::parse(s).expect("a valid scope")).collect(),
            created_at: 0,
            expires_at: i64::MAX,
            revoked_at: None,
            ip: None,
            ip_restrict: None,
            enterprise: Some("e".repeat(32).parse().expect("id")),
            is_extensible: false,
            admin: false,
            spending_limits: None,
            permitted_wallets: None,
            permitted_enterprises: None,
            origin: "test".into(),
            parent_id: None,
            last_used_at: None,
            unlock: None,
            sealed_value: None,
            extension_address: None,
            tx_value_limit: None,
            grant_type: Default::default(),
            derivation_path: None,
            oauth_grant: None,
        }
    }

    const W: &str = "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa";
    const E: &str = "eeeeeeeeeeeeeeeeeeeeeeeeeeeeeeee";
    const OTHER_E: &str = "ffffffffffffffffffffffffffffffff";

    fn view(p: &Policy, t: &TokenRecord, enterprise: &str) -> bool {
        let (wallet_id, enterprise): (WalletId, EnterpriseId) =
            (W.parse().expect("id"), enterprise.parse().expect("id"));
        p.check(
            t,
            Action::Wallet {
                permission: WalletPermission::View,
                wallet_id: &wallet_id,
                enterprise: Some(&enterprise),
            },
        )
        .is_ok()
    }

    #[test]
    fn wallet_forms_cover_as_documented() {
        let p = Policy { environment: Environment::Production };
        assert!(view(&p, &token(&["wallet_view_all"]), OTHER_E));
        assert!(view(&p, &token(&[&format!("wallet_view:{W}")]), OTHER_E));
        assert!(view(&p, &token(&["wallet_view_enterprise"]), E));
        assert!(!view(&p, &token(&["wallet_view_enterprise"]), OTHER_E));
        assert!(!view(&p, &token(&["wallet_view"]), E), "plain form needs permittedWallets");
        let mut t = token(&["wallet_view"]);
        t.permitted_wallets = Some(vec![W.parse().expect("id")]);
        assert!(view(&p, &t, E));
        assert!(!view(&p, &token(&["wallet_spend_all"]), E), "another family grants nothing");
        assert!(!view(&p, &token(&["all"]), E), "all is for the test environment only");
        assert!(view(&Policy { environment: Environment::Test }, &token(&["all"]), E));
    }

    #[test]
    fn permitted_lists_narrow_every_form() {
        let p = Policy { environment: Environment::Production };
        let mut t = token(&["wallet_view_all"]);
        t.permitted_wallets = Some(vec!["b".repeat(32).parse().expect("id")]);
        assert!(!view(&p, &t, E));
        let mut t = token(&["wallet_view_all"]);
        t.permitted_enterprises = Some(vec![OTHER_E.parse().expect("id")]);
        assert!(!view(&p, &t, E));
        assert!(view(&p, &t, OTHER_E));
    }

    #[test]
    fn scope_parsing_rejects_unknown_and_bad_context() {
        assert!(Grant::parse("wallet_view_all").is_ok());
        assert!(Grant::parse(&format!("wallet_spend:{W}")).is_ok());
        assert!(Grant::parse("wallet_fly").is_err());
        assert!(Grant::parse(&format!("wallet_view_all:{W}")).is_err());
        assert!(Grant::parse("wallet_view:XYZ").is_err());
        let dup = vec!["profile".to_string(), "profile".to_string()];
        assert_eq!(parse_scopes(&dup).map(|v| v.len()), Ok(1));
    }

    #[test]
    fn child_grants_within_parent() {
        let p = Policy { environment: Environment::Production };
        let parent =
            parse_scopes(&["wallet_view_all".into(), "wallet_spend_enterprise".into()]).unwrap_or_default();
        let g = |s: &str| Grant::parse(s).unwrap_or(Grant { name: Scope::All, wallet: None });
        assert!(p.grant_covers(&parent, &g(&format!("wallet_view:{W}")), false));
        assert!(p.grant_covers(&parent, &g("wallet_view_enterprise"), false));
        assert!(p.grant_covers(&parent, &g("wallet_spend_enterprise"), true));
        assert!(!p.grant_covers(&parent, &g("wallet_spend_all"), true));
        assert!(!p.grant_covers(&parent, &g("profile"), true));
    }
}
