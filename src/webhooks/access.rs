//! Who may manage a webhook: the same access as creating it at its level. Unknown, or not
//! visible to the caller: `NotFound`; visible but not permitted: `Forbidden`.
//!
//! Layer rule: no web-framework types and nothing of the HTTP layer (docs/architecture.md).

use crate::error::ErrorName;
use crate::{
    error::{Error, Result},
    identity::{
        bearer::Principal,
        scopes::{Action, WalletPermission},
    },
    model::webhook::{Webhook, WebhookLevel},
    store::Enterprise,
    types::{EnterpriseId, WebhookId},
    wallets::wallet_access,
    webhooks::Webhooks,
};

/// The enterprise, when the caller is its admin (or a service admin: membership waived) and
/// the token's scopes and `permittedEnterprises` let it manage it. Unknown or not a member:
/// `EnterpriseNotFound`; member without admin or scope: `Forbidden`.
pub async fn enterprise_access(
    svc: &Webhooks,
    auth: &Principal,
    enterprise_id: &EnterpriseId,
) -> Result<Enterprise> {
    let enterprise = svc
        .store
        .enterprise_by_id(enterprise_id)
        .await?
        .ok_or_else(|| Error::not_found(ErrorName::EnterpriseNotFound))?;
    if !auth.token.admin {
        let membership = svc
            .store
            .memberships(&auth.user.id)
            .await?
            .into_iter()
            .find(|m| &m.enterprise.id == enterprise_id)
            .ok_or_else(|| Error::not_found(ErrorName::EnterpriseNotFound))?;
        if !membership.is_admin {
            return Err(Error::forbidden("only an admin of the enterprise may do this", "enterprise admin"));
        }
    }
    auth.require(svc.policy, Action::ManageEnterprise { enterprise_id })?;
    Ok(enterprise)
}

/// A webhook the caller may manage. Otherwise `WebhookNotFound` (also when the caller may not
/// see its wallet or enterprise) or `Forbidden`.
pub async fn webhook_access(svc: &Webhooks, auth: &Principal, webhook_id: &WebhookId) -> Result<Webhook> {
    let w = svc
        .store
        .webhook_by_id(webhook_id)
        .await?
        .ok_or_else(|| Error::not_found(ErrorName::WebhookNotFound))?;
    let hide = |e: Error| match e {
        Error::NotFound { .. } => Error::not_found(ErrorName::WebhookNotFound),
        other => other,
    };
    match &w.level {
        WebhookLevel::Wallet { coin, wallet_id, .. } => {
            wallet_access(&svc.wallets, auth, coin, wallet_id, WalletPermission::Manage)
                .await
                .map_err(hide)?;
        }
        WebhookLevel::Enterprise { enterprise_id } => {
            enterprise_access(svc, auth, enterprise_id).await.map_err(hide)?;
        }
        WebhookLevel::Block { enterprise_id, .. } if auth.token.admin || w.user_id == auth.user.id => {
            auth.require(svc.policy, Action::ManageBlockWebhooks)?;
            // A service admin managing another user's block webhook stays inside its
            // `permittedEnterprises` (docs/decisions.md#brute-force-limits).
            let outside = |permitted: &Vec<EnterpriseId>| {
                enterprise_id.as_ref().is_none_or(|e| !permitted.iter().any(|p| p == e))
            };
            if w.user_id != auth.user.id && auth.token.permitted_enterprises.as_ref().is_some_and(outside) {
                return Err(Error::not_found(ErrorName::WebhookNotFound));
            }
        }
        WebhookLevel::Block { .. } => return Err(Error::not_found(ErrorName::WebhookNotFound)),
    }
    Ok(w)
}
