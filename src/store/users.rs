//! Users (spec §2.3): the record and its storage.

use crate::types::{Email, UserId};
use custodian_macros::sql_bounds;
use std::sync::Arc;

use async_trait::async_trait;
use sqlx::FromRow;

use super::sql::{json_list, to_json, unique_violation, Dialect};
use super::sql_store::SqlStore;
use super::StoreResult;

/// A user (spec §2.3). The TOTP seed is only held encrypted ([`crate::master_key::MasterKey`]).
#[derive(Debug, Clone)]
pub struct User {
    pub id: UserId,
    /// Lower-cased; unique.
    pub email: String,
    pub name_first: String,
    pub name_last: String,
    /// PHC string of an argon2id hash.
    pub password_hash: String,
    /// Nonce || ciphertext of the raw TOTP seed.
    pub totp_secret_enc: Vec<u8>,
    /// Last RFC 6238 time step accepted, against replay.
    pub totp_last_step: Option<i64>,
    /// A service employee holding the service-admin permission.
    pub service_admin: bool,
    pub is_active: bool,
    pub timezone: String,
    pub locale: String,
    /// Coin symbols; empty means no restriction.
    pub allowed_coins: Vec<String>,
    /// Unix seconds.
    pub created_at: i64,
    /// Unix seconds.
    pub password_updated_at: i64,
    /// Unix seconds.
    pub last_login: Option<i64>,
}

/// Users by id and by email, and their TOTP replay counter.
#[async_trait]
pub trait UserStore: Send + Sync {
    /// Fails with [`super::StoreError::Conflict`] when the email is taken. `audit` is written
    /// with it.
    async fn insert_user(&self, user: &User, audit: &[crate::model::audit::AuditEntry]) -> StoreResult<()>;
    /// Applies an operator's change to a user at `now` (Unix seconds), with its audit entries.
    /// Deactivating also revokes every live token of the user; returns how many.
    async fn update_user(
        &self,
        user_id: &UserId,
        change: UserChange,
        now: i64,
        audit: &[crate::model::audit::AuditEntry],
    ) -> StoreResult<u64>;
    /// Shared with the read cache: no copy of the record per request.
    async fn user_by_id(&self, id: &UserId) -> StoreResult<Option<Arc<User>>>;
    /// `email` must already be lower-cased.
    async fn user_by_email(&self, email: &Email) -> StoreResult<Option<User>>;
    /// Records `step` as the user's last accepted TOTP step if it is newer than the stored one.
    /// Returns false when it is not (a replayed or older code).
    async fn advance_totp_step(&self, user_id: &UserId, step: i64) -> StoreResult<bool>;
    /// `at` in Unix seconds.
    /// Records a successful login at `at` (Unix seconds), with its audit entries.
    async fn set_last_login(
        &self,
        user_id: &UserId,
        at: i64,
        audit: &[crate::model::audit::AuditEntry],
    ) -> StoreResult<()>;
    /// Users by email after `after_email`, at most `limit` (the console's user list).
    async fn list_users(&self, after_email: Option<&str>, limit: u32) -> StoreResult<Vec<User>>;
}

/// An operator's change to a user (docs/decisions.md#token-and-session-lifecycle).
#[derive(Debug, Clone)]
pub enum UserChange {
    /// `false` refuses logins and revokes every token; `true` undoes the refusal.
    Active(bool),
    /// A new sealed TOTP seed; the replay counter starts again.
    TotpSecret(Vec<u8>),
    /// A new argon2id PHC string.
    Password(String),
}

#[derive(FromRow)]
struct UserRow {
    id: UserId,
    email: String,
    name_first: String,
    name_last: String,
    password_hash: String,
    totp_secret_enc: Vec<u8>,
    totp_last_step: Option<i64>,
    service_admin: bool,
    is_active: bool,
    timezone: String,
    locale: String,
    allowed_coins: String,
    created_at: i64,
    password_updated_at: i64,
    last_login: Option<i64>,
}

impl UserRow {
    fn into_user(self) -> StoreResult<User> {
        Ok(User {
            id: self.id,
            email: self.email,
            name_first: self.name_first,
            name_last: self.name_last,
            password_hash: self.password_hash,
            totp_secret_enc: self.totp_secret_enc,
            totp_last_step: self.totp_last_step,
            service_admin: self.service_admin,
            is_active: self.is_active,
            timezone: self.timezone,
            locale: self.locale,
            allowed_coins: json_list(&self.allowed_coins)?,
            created_at: self.created_at,
            password_updated_at: self.password_updated_at,
            last_login: self.last_login,
        })
    }
}

const USER_COLUMNS: &str = "id, email, name_first, name_last, password_hash, totp_secret_enc, \
    totp_last_step, service_admin, is_active, timezone, locale, allowed_coins, created_at, \
    password_updated_at, last_login";

#[sql_bounds]
#[async_trait]
impl<DB> UserStore for SqlStore<DB>
where
    for<'r> UserRow: FromRow<'r, DB::Row>,
    for<'r> (String,): FromRow<'r, DB::Row>,
{
    #[tracing::instrument(level = "debug", skip_all)]
    async fn insert_user(&self, u: &User, audit: &[crate::model::audit::AuditEntry]) -> StoreResult<()> {
        let mut tx = self.begin_write().await?;
        let sql = format!(
            "INSERT INTO users ({USER_COLUMNS}) \
             VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15)"
        );
        sqlx::query(&sql)
            .bind(u.id.as_str())
            .bind(u.email.as_str())
            .bind(u.name_first.as_str())
            .bind(u.name_last.as_str())
            .bind(u.password_hash.as_str())
            .bind(u.totp_secret_enc.as_slice())
            .bind(u.totp_last_step)
            .bind(u.service_admin)
            .bind(u.is_active)
            .bind(u.timezone.as_str())
            .bind(u.locale.as_str())
            .bind(to_json(&u.allowed_coins)?)
            .bind(u.created_at)
            .bind(u.password_updated_at)
            .bind(u.last_login)
            .execute(&mut *tx)
            .await
            .map_err(|e| unique_violation(e, "a user with this email"))?;
        super::audit::append_tx::<DB>(&mut tx, audit).await?;
        tx.commit().await?;
        Ok(())
    }

    #[tracing::instrument(level = "debug", skip_all)]
    async fn update_user(
        &self,
        user_id: &UserId,
        change: UserChange,
        now: i64,
        audit: &[crate::model::audit::AuditEntry],
    ) -> StoreResult<u64> {
        let mut tx = self.begin_write().await?;
        let mut revoked = 0;
        match change {
            UserChange::Active(active) => {
                sqlx::query("UPDATE users SET is_active = $1 WHERE id = $2")
                    .bind(active)
                    .bind(user_id)
                    .execute(&mut *tx)
                    .await?;
                if !active {
                    let sql = format!("{} WHERE user_id = $2 AND revoked_at IS NULL", super::tokens::REVOKE);
                    let r = sqlx::query(&sql).bind(now).bind(user_id).execute(&mut *tx).await?;
                    revoked = DB::rows_affected(&r);
                }
            }
            UserChange::TotpSecret(enc) => {
                sqlx::query("UPDATE users SET totp_secret_enc = $1, totp_last_step = NULL WHERE id = $2")
                    .bind(enc.as_slice())
                    .bind(user_id)
                    .execute(&mut *tx)
                    .await?;
            }
            UserChange::Password(phc) => {
                sqlx::query("UPDATE users SET password_hash = $1, password_updated_at = $2 WHERE id = $3")
                    .bind(phc.as_str())
                    .bind(now)
                    .bind(user_id)
                    .execute(&mut *tx)
                    .await?;
            }
        }
        super::audit::append_tx::<DB>(&mut tx, audit).await?;
        tx.commit().await?;
        self.cache.clear();
        Ok(revoked)
    }

    #[tracing::instrument(level = "debug", skip_all)]
    async fn user_by_id(&self, id: &UserId) -> StoreResult<Option<Arc<User>>> {
        if let Some(u) = self.cache.user(id) {
            return Ok(Some(u));
        }
        let at = self.cache.generation();
        let sql = format!("SELECT {USER_COLUMNS} FROM users WHERE id = $1");
        let row: Option<UserRow> = sqlx::query_as(&sql).bind(id).fetch_optional(&self.pool).await?;
        let user = row.map(UserRow::into_user).transpose()?.map(Arc::new);
        if let Some(u) = &user {
            self.cache.put_user(at, u);
        }
        Ok(user)
    }

    #[tracing::instrument(level = "debug", skip_all)]
    async fn user_by_email(&self, email: &Email) -> StoreResult<Option<User>> {
        let sql = format!("SELECT {USER_COLUMNS} FROM users WHERE email = $1");
        let row: Option<UserRow> =
            sqlx::query_as(&sql).bind(email.as_str()).fetch_optional(&self.pool).await?;
        row.map(UserRow::into_user).transpose()
    }

    #[tracing::instrument(level = "debug", skip_all)]
    async fn advance_totp_step(&self, user_id: &UserId, step: i64) -> StoreResult<bool> {
        let _gate = self.write_gate().await;
        let res = sqlx::query(
            "UPDATE users SET totp_last_step = $1 \
             WHERE id = $2 AND (totp_last_step IS NULL OR totp_last_step < $1)",
        )
        .bind(step)
        .bind(user_id)
        .execute(&self.pool)
        .await?;
        let advanced = DB::rows_affected(&res) == 1;
        if advanced {
            self.cache.clear();
        }
        Ok(advanced)
    }

    #[tracing::instrument(level = "debug", skip_all)]
    async fn set_last_login(
        &self,
        user_id: &UserId,
        at: i64,
        audit: &[crate::model::audit::AuditEntry],
    ) -> StoreResult<()> {
        let mut tx = self.begin_write().await?;
        sqlx::query("UPDATE users SET last_login = $1 WHERE id = $2")
            .bind(at)
            .bind(user_id)
            .execute(&mut *tx)
            .await?;
        super::audit::append_tx::<DB>(&mut tx, audit).await?;
        tx.commit().await?;
        self.cache.clear();
        Ok(())
    }

    #[tracing::instrument(level = "debug", skip_all)]
    async fn list_users(&self, after_email: Option<&str>, limit: u32) -> StoreResult<Vec<User>> {
        let sql = format!("SELECT {USER_COLUMNS} FROM users WHERE email > $1 ORDER BY email LIMIT $2");
        let rows: Vec<UserRow> = sqlx::query_as(&sql)
            .bind(after_email.unwrap_or(""))
            .bind(i64::from(limit))
            .fetch_all(&self.pool)
            .await?;
        rows.into_iter().map(UserRow::into_user).collect()
    }
}
