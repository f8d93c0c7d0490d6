//! Users and enterprises: creation, membership (used by the CLI), and the membership check.
//!
//! Layer rule: no web-framework types and nothing of the HTTP layer (docs/architecture.md).

use crate::error::ErrorName;
use crate::model::audit::AuditType;
use serde::Serialize;

use super::{bearer::Principal, password, scopes::Action, totp};
use crate::{
    error::{Error, Result},
    identity::Identity,
    model::audit::AuditEntry,
    store::{DynStore, Enterprise, Membership, User},
    types::{Email, EnterpriseId, UserId},
};

/// What creating a user returns: the TOTP seed is shown once, here.
#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct CreatedUser {
    pub id: UserId,
    pub email: String,
    /// Base32 TOTP seed (RFC 6238), for authenticator apps.
    pub totp_secret: String,
    pub otpauth_uri: String,
}

/// Creates a user with a new TOTP seed. `name` is "First Last" (split at the first space).
/// Errors: invalid email, password under [`password::MIN_PASSWORD_LEN`] characters, or an
/// existing user with that email.
pub async fn create_user(
    store: &DynStore,
    key: &crate::master_key::MasterKey,
    email: &str,
    name: Option<&str>,
    plain_password: &str,
    service_admin: bool,
) -> Result<CreatedUser> {
    create_user_by(store, key, email, name, plain_password, service_admin, "operator").await
}

/// [`create_user`], audited as made `by` (`operator`, or `sso` for single sign-on's
/// just-in-time provisioning).
pub async fn create_user_by(
    store: &DynStore,
    key: &crate::master_key::MasterKey,
    email: &str,
    name: Option<&str>,
    plain_password: &str,
    service_admin: bool,
    by: &str,
) -> Result<CreatedUser> {
    let email = Email::parse(email).ok().filter(Email::is_well_formed).ok_or_else(|| {
        Error::invalid_field("email", format!("{:?} is not a valid email address", email.trim()))
    })?;
    if plain_password.chars().count() < password::MIN_PASSWORD_LEN {
        return Err(Error::invalid_field(
            "password",
            format!("the password must have at least {} characters", password::MIN_PASSWORD_LEN),
        ));
    }
    let (pw, address) = (plain_password.to_string(), email.as_str().to_string());
    let password_hash = tokio::task::spawn_blocking(move || password::hash_for_storage(&address, &pw))
        .await
        .map_err(anyhow::Error::from)??;
    let id = UserId::new_random();
    let seed = totp::new_seed();
    let (first, last) = match name.map(str::trim) {
        Some(n) => match n.split_once(' ') {
            Some((f, l)) => (f.to_string(), l.trim().to_string()),
            None => (n.to_string(), String::new()),
        },
        None => (String::new(), String::new()),
    };
    let now = store.clock().now();
    let user = User {
        id: id.clone(),
        email: email.as_str().to_string(),
        name_first: first,
        name_last: last,
        password_hash,
        totp_secret_enc: key.seal(&totp::seed_aad(&id), &seed)?,
        totp_last_step: None,
        service_admin,
        is_active: true,
        timezone: "UTC".into(),
        locale: "en-US".into(),
        allowed_coins: Vec::new(),
        created_at: now,
        password_updated_at: now,
        last_login: None,
    };
    let entry = crate::audit::EntryExt::data(
        crate::audit::entry(AuditType::UserCreated),
        serde_json::json!({ "email": user.email, "serviceAdmin": service_admin, "by": by }),
    );
    store.insert_user(&user, &[AuditEntry { user_id: Some(user.id.clone()), ..entry }]).await?;
    Ok(CreatedUser {
        id,
        totp_secret: totp::seed_base32(&seed),
        otpauth_uri: totp::otpauth_uri(&seed, email.as_str())?,
        email: email.as_str().to_string(),
    })
}

/// Creates an enterprise named `name`, with the given id (32 hex) or a new one.
pub async fn create_enterprise(store: &DynStore, name: &str, id: Option<EnterpriseId>) -> Result<Enterprise> {
    let name = name.trim();
    if name.is_empty() {
        return Err(Error::invalid_field("name", "the enterprise name must not be empty"));
    }
    let id = id.unwrap_or_else(EnterpriseId::new_random);
    let e = Enterprise { id, name: name.into(), created_at: store.clock().now() };
    let entry = crate::audit::EntryExt::data(
        crate::audit::entry(AuditType::EnterpriseCreated),
        serde_json::json!({ "name": e.name, "by": "operator" }),
    );
    store.insert_enterprise(&e, &[AuditEntry { enterprise_id: Some(e.id.clone()), ..entry }]).await?;
    Ok(e)
}

/// Makes the user with `email` a member (or an admin, with `is_admin`) of the enterprise; an
/// existing member's admin flag is updated. Errors: `EnterpriseNotFound`, `UserNotFound`.
pub async fn add_member(
    store: &DynStore,
    enterprise_id: &EnterpriseId,
    email: &str,
    is_admin: bool,
) -> Result<(Enterprise, User)> {
    let enterprise = store.enterprise_by_id(enterprise_id).await?.ok_or_else(|| Error::NotFound {
        name: ErrorName::EnterpriseNotFound,
        message: format!("no enterprise with id {enterprise_id}"),
    })?;
    let address = Email::parse(email).map_err(|e| Error::invalid_field("email", e))?;
    let user = store.user_by_email(&address).await?.ok_or_else(|| Error::NotFound {
        name: ErrorName::UserNotFound,
        message: format!("no user with email {email}"),
    })?;
    let entry = crate::audit::EntryExt::data(
        crate::audit::entry(AuditType::EnterpriseMemberSet),
        serde_json::json!({ "isAdmin": is_admin, "by": "operator" }),
    );
    let entry =
        AuditEntry { user_id: Some(user.id.clone()), enterprise_id: Some(enterprise.id.clone()), ..entry };
    store.upsert_membership(&enterprise.id, &user.id, is_admin, &[entry]).await?;
    Ok((enterprise, user))
}

/// Checks that `user_id` belongs to enterprise `enterprise_id`; the 400 names `field`.
pub async fn require_membership(
    store: &DynStore,
    user_id: &UserId,
    enterprise_id: &EnterpriseId,
    field: &str,
) -> Result<Membership> {
    store
        .memberships(user_id)
        .await?
        .into_iter()
        .find(|m| &m.enterprise.id == enterprise_id)
        .ok_or_else(|| Error::invalid_field(field, "no such enterprise, or the user does not belong to it"))
}

/// The principal's own user with its memberships. Needs the `profile` scope (docs/scopes.md).
pub async fn profile(svc: &Identity, auth: &Principal) -> Result<(User, Vec<Membership>)> {
    auth.require(svc.policy, Action::ViewProfile)?;
    let memberships = svc.store.memberships(&auth.user.id).await?;
    Ok(((*auth.user).clone(), memberships))
}
