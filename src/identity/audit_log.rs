//! Reading the audit log (`GET /api/v2/auditlog`): the scope check and who sees which entries.
//! The chain itself is `crate::audit`.
//!
//! Layer rule: no web-framework types and nothing of the HTTP layer (docs/architecture.md).

use std::collections::HashMap;

use super::{bearer::Principal, scopes::Action, Identity};
use crate::{
    error::Result,
    model::audit::ChainedEntry,
    paging::{Page, PageRequest},
    store::AuditFilter,
    types::UserId,
};

/// Entries `auth` may see that match `filter` (its `visible_to` is set here), newest first. Needs `auditlogs_view_all` or a login
/// session (docs/scopes.md). A user sees entries about themselves, an enterprise admin those
/// of the enterprise, a service admin every entry. Errors: `InsufficientScope`.
pub async fn list(
    svc: &Identity,
    auth: &Principal,
    filter: AuditFilter,
    page: &PageRequest,
) -> Result<Page<ChainedEntry>> {
    auth.require(svc.policy, Action::ViewAuditLog)?;
    let visible_to = if auth.token.admin {
        None
    } else {
        let memberships = svc.store.memberships(&auth.user.id).await?;
        let admin_of = memberships.into_iter().filter(|m| m.is_admin).map(|m| m.enterprise.id).collect();
        Some((auth.user.id.clone(), admin_of))
    };
    let filter = AuditFilter { visible_to, ..filter };
    let rows = svc.store.list_audit(&filter, page.prev_id.as_ref(), page.fetch()).await?;
    Ok(page.page(rows, |c| &c.entry.id))
}

/// The emails of the users the entries of `page` name, for showing them to a person (the
/// console); a user that no longer exists is left out. At most one cached read per user.
pub async fn user_emails(svc: &Identity, page: &[ChainedEntry]) -> Result<HashMap<UserId, String>> {
    let mut emails = HashMap::new();
    for id in page.iter().filter_map(|c| c.entry.user_id.as_ref()) {
        if !emails.contains_key(id) {
            if let Some(user) = svc.store.user_by_id(id).await? {
                emails.insert(id.clone(), user.email.clone());
            }
        }
    }
    Ok(emails)
}

/// Walks the whole chain for a service admin (the console's "verify chain", docs/decisions.md#the-operator-console):
/// `Ok(n)` or the first broken entry. Errors: `Forbidden` without the service-admin permission.
pub async fn verify(svc: &Identity, auth: &Principal) -> Result<crate::audit::Verified> {
    auth.require(svc.policy, super::scopes::Action::ServiceAdmin)?;
    crate::audit::verify(&svc.store, |_| {}).await
}
