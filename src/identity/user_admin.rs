//! An operator's commands on users and tokens (docs/decisions.md#token-and-session-lifecycle), run from the CLI: deactivate and
//! activate a user, reset their OTP, remove their passkeys, set their password, revoke tokens in an emergency, and
//! list a user's tokens. Each leaves an audit entry, written with the change.
//!
//! Layer rule: no web-framework types and nothing of the HTTP layer (docs/architecture.md).

use crate::error::ErrorName;
use crate::model::audit::AuditType;
use serde_json::json;

use super::{bearer::Principal, password, totp, users::CreatedUser};
use crate::{
    audit::{self, EntryExt},
    error::{Error, Result},
    master_key::MasterKey,
    model::{
        audit::AuditEntry,
        token::{SortOrder, TokenRecord},
    },
    store::{DynStore, User, UserChange},
    types::{Cidr, Email, TokenId},
};

/// Most tokens an operator's list or revocation goes through at once.
pub const MAX_TOKENS: u32 = 10_000;

async fn user(store: &DynStore, email: &str) -> Result<User> {
    let address = Email::parse(email).map_err(|e| Error::invalid_field("email", e))?;
    store.user_by_email(&address).await?.ok_or_else(|| Error::NotFound {
        name: ErrorName::UserNotFound,
        message: format!("no user with email {}", email.trim()),
    })
}

/// Who changes a user: the operator at the CLI, or a service admin in the console (docs/decisions.md#the-operator-console
/// §7), whose address, token and request the entry keeps.
#[derive(Debug, Clone, Copy, Default)]
pub enum By<'a> {
    #[default]
    Operator,
    Admin(&'a Principal),
}

/// An entry of `entry_type` about `user`, done `by` an operator or a service admin.
fn about(user: &User, entry_type: AuditType, by: By<'_>) -> AuditEntry {
    match by {
        By::Operator => AuditEntry {
            user_id: Some(user.id.clone()),
            ..audit::entry(entry_type).data(json!({ "by": "operator" }))
        },
        By::Admin(admin) => AuditEntry {
            user_id: Some(user.id.clone()),
            ..admin.audit(entry_type).data(json!({ "by": "console", "adminId": admin.user.id }))
        },
    }
}

/// Refuses the user's logins and revokes every live token of theirs; returns the user and how
/// many tokens were revoked. Errors: `UserNotFound`.
pub async fn deactivate(store: &DynStore, email: &str, by: By<'_>) -> Result<(User, u64)> {
    let u = user(store, email).await?;
    let entry = about(&u, AuditType::UserDeactivated, by);
    let revoked = store.update_user(&u.id, UserChange::Active(false), store.clock().now(), &[entry]).await?;
    Ok((u, revoked))
}

/// Lets a deactivated user log in again (their old tokens stay revoked). Errors: `UserNotFound`.
pub async fn activate(store: &DynStore, email: &str, by: By<'_>) -> Result<User> {
    let u = user(store, email).await?;
    store
        .update_user(
            &u.id,
            UserChange::Active(true),
            store.clock().now(),
            &[about(&u, AuditType::UserActivated, by)],
        )
        .await?;
    Ok(u)
}

/// Gives the user a new TOTP seed (RFC 6238): codes of the old one stop working at once.
/// Returns the new seed and otpauth URI, shown once. Errors: `UserNotFound`.
pub async fn reset_otp(store: &DynStore, key: &MasterKey, email: &str, by: By<'_>) -> Result<CreatedUser> {
    let u = user(store, email).await?;
    let seed = totp::new_seed();
    let sealed = key.seal(&totp::seed_aad(&u.id), &seed)?;
    store
        .update_user(
            &u.id,
            UserChange::TotpSecret(sealed),
            store.clock().now(),
            &[about(&u, AuditType::UserOtpReset, by)],
        )
        .await?;
    Ok(CreatedUser {
        totp_secret: totp::seed_base32(&seed),
        otpauth_uri: totp::otpauth_uri(&seed, &u.email)?,
        id: u.id,
        email: u.email,
    })
}

/// Removes every passkey of the user (a lost or stolen authenticator); their password and
/// TOTP still sign them in. Returns the user and how many passkeys were removed. Audited as
/// `user.passkeys_removed_by_admin`. Errors: `UserNotFound`.
pub async fn remove_passkeys(store: &DynStore, email: &str, by: By<'_>) -> Result<(User, u64)> {
    let u = user(store, email).await?;
    let count = store.passkeys(&u.id).await?.len();
    let mut entry = about(&u, AuditType::UserPasskeysRemovedByAdmin, by);
    if let Some(data) = entry.data.as_object_mut() {
        data.insert("email".into(), json!(u.email));
        data.insert("removed".into(), json!(count));
    }
    let removed = store.remove_passkeys(&u.id, &[entry]).await?;
    Ok((u, removed))
}

/// Sets the user's password (at least [`password::MIN_PASSWORD_LEN`] characters). Errors:
/// `UserNotFound`, `InvalidField` naming `password`.
pub async fn set_password(store: &DynStore, email: &str, plain: &str) -> Result<User> {
    if plain.chars().count() < password::MIN_PASSWORD_LEN {
        return Err(Error::invalid_field(
            "password",
            format!("the password must have at least {} characters", password::MIN_PASSWORD_LEN),
        ));
    }
    let u = user(store, email).await?;
    let (pw, address) = (plain.to_string(), u.email.to_string());
    let phc = tokio::task::spawn_blocking(move || password::hash_for_storage(&address, &pw))
        .await
        .map_err(anyhow::Error::from)??;
    store
        .update_user(
            &u.id,
            UserChange::Password(phc),
            store.clock().now(),
            &[about(&u, AuditType::UserPasswordSet, By::Operator)],
        )
        .await?;
    Ok(u)
}

/// The user's live tokens, oldest first (at most [`MAX_TOKENS`]). Errors: `UserNotFound`.
pub async fn tokens(store: &DynStore, email: &str) -> Result<Vec<TokenRecord>> {
    let u = user(store, email).await?;
    Ok(store.list_tokens(&u.id, store.clock().now(), None, SortOrder::Ascending, MAX_TOKENS).await?)
}

/// Which tokens an emergency revocation names.
#[derive(Debug, Clone)]
pub enum Revocation {
    /// One token by id.
    Id(TokenId),
    /// Every live token of a user, or only those created from addresses in a block.
    User { email: String, created_from: Option<Cidr> },
}

/// Revokes the tokens `which` names; returns how many. Errors: `UserNotFound`,
/// `TokenNotFound` (an unknown or already revoked id).
pub async fn revoke(store: &DynStore, which: Revocation) -> Result<u64> {
    let now = store.clock().now();
    let (owner, targets) = match which {
        Revocation::Id(id) => {
            let t = store.token_by_id(&id).await?.filter(|t| t.revoked_at.is_none());
            let t = t.ok_or_else(|| Error::not_found(ErrorName::TokenNotFound))?;
            (t.user_id.clone(), vec![t])
        }
        Revocation::User { email, created_from } => {
            let u = user(store, &email).await?;
            let live = store.list_tokens(&u.id, now, None, SortOrder::Ascending, MAX_TOKENS).await?;
            let inside = |t: &TokenRecord| match (&created_from, t.ip.as_deref().and_then(|i| i.parse().ok()))
            {
                (None, _) => true,
                (Some(block), Some(ip)) => block.contains_ip(&ip),
                (Some(_), None) => false,
            };
            (u.id, live.into_iter().filter(inside).collect())
        }
    };
    let mut n = 0;
    for t in targets {
        let entry = audit::entry(AuditType::TokenRevoked).data(json!({ "id": t.id, "by": "operator" }));
        let entry = AuditEntry { user_id: Some(owner.clone()), enterprise_id: t.enterprise.clone(), ..entry };
        n += u64::from(store.revoke_token(&t.id, now, &[entry]).await?);
    }
    Ok(n)
}

/// The console's service-admin pages (docs/decisions.md#the-operator-console): the same operator commands, refused to
/// anyone whose token lacks the service-admin permission (`Forbidden`), and the lists they
/// act on.
pub mod admin {
    use super::{By, CreatedUser};
    use crate::{
        error::Result,
        identity::{bearer::Principal, scopes::Action, Identity},
        store::{Enterprise, Member, User},
    };

    /// Most rows of one page of users or enterprises, and members listed per enterprise.
    pub const PAGE: u32 = 100;

    fn require(svc: &Identity, auth: &Principal) -> Result<()> {
        auth.require(svc.policy, Action::ServiceAdmin)
    }

    /// Users by email after `after_email`, at most [`PAGE`] (+1 to tell whether more follow).
    pub async fn users(svc: &Identity, auth: &Principal, after_email: Option<&str>) -> Result<Vec<User>> {
        require(svc, auth)?;
        Ok(svc.store.list_users(after_email, PAGE + 1).await?)
    }

    /// Enterprises by id after `after_id` with up to [`PAGE`] members each, at most [`PAGE`]
    /// (+1 to tell whether more follow).
    pub async fn enterprises(
        svc: &Identity,
        auth: &Principal,
        after_id: Option<&str>,
    ) -> Result<Vec<(Enterprise, Vec<Member>)>> {
        require(svc, auth)?;
        let list = svc.store.list_enterprises(after_id, PAGE + 1).await?;
        let mut out = Vec::with_capacity(list.len());
        for e in list {
            let members = svc.store.members(&e.id, PAGE).await?;
            out.push((e, members));
        }
        Ok(out)
    }

    /// [`super::deactivate`] by a service admin; returns how many tokens were revoked.
    pub async fn deactivate(svc: &Identity, auth: &Principal, email: &str) -> Result<u64> {
        require(svc, auth)?;
        Ok(super::deactivate(&svc.store, email, By::Admin(auth)).await?.1)
    }

    /// [`super::activate`] by a service admin.
    pub async fn activate(svc: &Identity, auth: &Principal, email: &str) -> Result<User> {
        require(svc, auth)?;
        super::activate(&svc.store, email, By::Admin(auth)).await
    }

    /// [`super::remove_passkeys`] by a service admin; returns how many were removed.
    pub async fn remove_passkeys(svc: &Identity, auth: &Principal, email: &str) -> Result<u64> {
        require(svc, auth)?;
        Ok(super::remove_passkeys(&svc.store, email, By::Admin(auth)).await?.1)
    }

    /// [`super::reset_otp`] by a service admin: the new seed, shown once.
    pub async fn reset_otp(svc: &Identity, auth: &Principal, email: &str) -> Result<CreatedUser> {
        require(svc, auth)?;
        super::reset_otp(&svc.store, &svc.key, email, By::Admin(auth)).await
    }
}
