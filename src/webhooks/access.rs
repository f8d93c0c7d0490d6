//! Who may manage a webhook: the same access as creating it at its level. Unknown, or not
//! visible to the caller: `NotFound`; visible but not permitted: `Forbidden`.
//!
//! Layer rule: no web-framework types and nothing of the HTTP layer (docs/architecture.md).

use crate::{
    error::{Error, Result},
    identity::{
        auth::Principal,
        scopes::{Action, WalletPermission},
    },
    store::{Enterprise, Webhook},
    wallets::wallet_access,
    AppState,
};

/// The enterprise, when the caller is its admin (or a service admin: membership waived) and
/// the token's scopes and `permittedEnterprises` let it manage it. Unknown or not a member:
/// `EnterpriseNotFound`; member without admin or scope: `Forbidden`.
pub async fn enterprise_access(
    state: &AppState,
    auth: &Principal,
    enterprise_id: &str,
) -> Result<Enterprise> {
    let enterprise = state
        .store
        .enterprise_by_id(enterprise_id)
        .await?
        .ok_or_else(|| Error::not_found("EnterpriseNotFound"))?;
    if !auth.token.admin {
        let membership = state
            .store
            .memberships(&auth.user.id)
            .await?
            .into_iter()
            .find(|m| m.enterprise.id == enterprise_id)
            .ok_or_else(|| Error::not_found("EnterpriseNotFound"))?;
        if !membership.is_admin {
            return Err(Error::forbidden("only an admin of the enterprise may do this", "enterprise admin"));
        }
    }
    auth.require(state.policy(), Action::ManageEnterprise { enterprise_id })?;
    Ok(enterprise)
}

/// A webhook the caller may manage. Otherwise `WebhookNotFound` (also when the caller may not
/// see its wallet or enterprise) or `Forbidden`.
pub async fn webhook_access(state: &AppState, auth: &Principal, webhook_id: &str) -> Result<Webhook> {
    let w =
        state.store.webhook_by_id(webhook_id).await?.ok_or_else(|| Error::not_found("WebhookNotFound"))?;
    let hide = |e: Error| match e {
        Error::NotFound { .. } => Error::not_found("WebhookNotFound"),
        other => other,
    };
    match w.scope.as_str() {
        "wallet" => {
            let (coin, wallet) =
                (w.coin.clone().unwrap_or_default(), w.wallet_id.clone().unwrap_or_default());
            wallet_access(state, auth, &coin, &wallet, WalletPermission::Manage).await.map_err(hide)?;
        }
        "enterprise" => {
            enterprise_access(state, auth, w.enterprise_id.as_deref().unwrap_or_default())
                .await
                .map_err(hide)?;
        }
        _ if auth.token.admin || w.user_id == auth.user.id => {}
        _ => return Err(Error::not_found("WebhookNotFound")),
    }
    Ok(w)
}
