//! Single sign-on (docs/sso.md): enterprises' identity providers (`enterprise_sso`), the people
//! linked to users (`sso_identities`), and sign-ins waiting at a provider (`sso_logins`), each
//! taken (deleted and returned) in one statement so that a `state` is used once across every
//! process.

use async_trait::async_trait;
use custodian_macros::sql_bounds;
use sqlx::FromRow;

use super::{sql::Dialect, sql_store::SqlStore, StoreResult};
use crate::model::audit::AuditEntry;
use crate::types::{EnterpriseId, UserId};

/// An enterprise's identity provider as stored.
#[derive(Debug, Clone, FromRow)]
pub struct SsoSettingRow {
    pub enterprise_id: EnterpriseId,
    /// `okta`, `msEntra` or `oidc`.
    pub provider: String,
    pub issuer: String,
    pub client_id: String,
    /// Sealed under the master key, hex.
    pub client_secret: String,
    /// JSON: the provider's own fields and the role mapping.
    pub settings: String,
    pub updated_at: i64,
}

/// A sign-in gone to a provider.
#[derive(Debug, Clone, FromRow)]
pub struct SsoLoginRow {
    /// SHA-256 of its `state`, hex.
    pub state_hash: String,
    pub enterprise_id: EnterpriseId,
    /// SHA-256 of the browser's cookie, hex.
    pub browser_hash: String,
    pub nonce: String,
    /// The PKCE verifier, sealed, hex.
    pub verifier: String,
    /// Where the console goes after.
    pub next: String,
    /// The user of the signed-in session linking their account, when it is such a sign-in.
    pub link_user: Option<UserId>,
    /// Unix seconds.
    pub expires_at: i64,
}

#[async_trait]
pub trait SsoStore: Send + Sync {
    async fn sso_setting(&self, enterprise: &EnterpriseId) -> StoreResult<Option<SsoSettingRow>>;
    /// Stores (or replaces) an enterprise's provider, with `audit`.
    async fn set_sso_setting(&self, row: &SsoSettingRow, audit: &[AuditEntry]) -> StoreResult<()>;
    /// Removes it with `audit`; false when there was none.
    async fn delete_sso_setting(&self, enterprise: &EnterpriseId, audit: &[AuditEntry]) -> StoreResult<bool>;
    /// The user and enterprise a person at a provider is linked to.
    async fn sso_identity(&self, issuer: &str, subject: &str) -> StoreResult<Option<(UserId, EnterpriseId)>>;
    /// The enterprises through whose providers `user` is linked (at most 100).
    async fn sso_enterprises_of(&self, user: &UserId) -> StoreResult<Vec<EnterpriseId>>;
    /// Links (`issuer`, `subject`) to `user` with `audit`; false when it is linked already.
    async fn link_sso_identity(
        &self,
        issuer: &str,
        subject: &str,
        user: &UserId,
        enterprise: &EnterpriseId,
        now: i64,
        audit: &[AuditEntry],
    ) -> StoreResult<bool>;
    /// Keeps a sign-in unless `max` wait already (those expired at `now` are dropped first);
    /// false when full.
    async fn keep_sso_login(&self, row: &SsoLoginRow, max: u32, now: i64) -> StoreResult<bool>;
    /// Takes the sign-in of `state_hash`: deleted and returned, once.
    async fn take_sso_login(&self, state_hash: &str) -> StoreResult<Option<SsoLoginRow>>;
}

const LOGIN_COLUMNS: &str =
    "state_hash, enterprise_id, browser_hash, nonce, verifier, next, link_user, expires_at";
const SETTING_COLUMNS: &str =
    "enterprise_id, provider, issuer, client_id, client_secret, settings, updated_at";

#[sql_bounds]
#[async_trait]
impl<DB> SsoStore for SqlStore<DB>
where
    for<'r> SsoSettingRow: FromRow<'r, DB::Row>,
    for<'r> SsoLoginRow: FromRow<'r, DB::Row>,
    for<'r> (String, String): FromRow<'r, DB::Row>,
    for<'r> (i64,): FromRow<'r, DB::Row>,
    for<'r> (String,): FromRow<'r, DB::Row>,
{
    async fn sso_setting(&self, enterprise: &EnterpriseId) -> StoreResult<Option<SsoSettingRow>> {
        let sql = format!("SELECT {SETTING_COLUMNS} FROM enterprise_sso WHERE enterprise_id = $1");
        Ok(sqlx::query_as(&sql).bind(enterprise.as_str()).fetch_optional(&self.pool).await?)
    }

    async fn set_sso_setting(&self, r: &SsoSettingRow, audit: &[AuditEntry]) -> StoreResult<()> {
        let mut tx = self.begin_write().await?;
        sqlx::query("DELETE FROM enterprise_sso WHERE enterprise_id = $1")
            .bind(r.enterprise_id.as_str())
            .execute(&mut *tx)
            .await?;
        sqlx::query(&format!(
            "INSERT INTO enterprise_sso ({SETTING_COLUMNS}) VALUES ($1, $2, $3, $4, $5, $6, $7)"
        ))
        .bind(r.enterprise_id.as_str())
        .bind(r.provider.as_str())
        .bind(r.issuer.as_str())
        .bind(r.client_id.as_str())
        .bind(r.client_secret.as_str())
        .bind(r.settings.as_str())
        .bind(r.updated_at)
        .execute(&mut *tx)
        .await?;
        super::audit::append_tx::<DB>(&mut tx, audit).await?;
        tx.commit().await?;
        Ok(())
    }

    async fn delete_sso_setting(&self, enterprise: &EnterpriseId, audit: &[AuditEntry]) -> StoreResult<bool> {
        let mut tx = self.begin_write().await?;
        let done = sqlx::query("DELETE FROM enterprise_sso WHERE enterprise_id = $1")
            .bind(enterprise.as_str())
            .execute(&mut *tx)
            .await?;
        if DB::rows_affected(&done) == 0 {
            return Ok(false);
        }
        super::audit::append_tx::<DB>(&mut tx, audit).await?;
        tx.commit().await?;
        Ok(true)
    }

    async fn sso_identity(&self, issuer: &str, subject: &str) -> StoreResult<Option<(UserId, EnterpriseId)>> {
        let row: Option<(String, String)> = sqlx::query_as(
            "SELECT user_id, enterprise_id FROM sso_identities WHERE issuer = $1 AND subject = $2",
        )
        .bind(issuer)
        .bind(subject)
        .fetch_optional(&self.pool)
        .await?;
        Ok(row.and_then(|(u, e)| Some((u.parse().ok()?, e.parse().ok()?))))
    }

    async fn sso_enterprises_of(&self, user: &UserId) -> StoreResult<Vec<EnterpriseId>> {
        let rows: Vec<(String,)> = sqlx::query_as(
            "SELECT enterprise_id FROM sso_identities WHERE user_id = $1 ORDER BY created_at LIMIT 100",
        )
        .bind(user.as_str())
        .fetch_all(&self.pool)
        .await?;
        Ok(rows.into_iter().filter_map(|(e,)| e.parse().ok()).collect())
    }

    async fn link_sso_identity(
        &self,
        issuer: &str,
        subject: &str,
        user: &UserId,
        enterprise: &EnterpriseId,
        now: i64,
        audit: &[AuditEntry],
    ) -> StoreResult<bool> {
        let mut tx = self.begin_write().await?;
        let done = sqlx::query(
            "INSERT INTO sso_identities (issuer, subject, user_id, enterprise_id, created_at) \
             VALUES ($1, $2, $3, $4, $5) ON CONFLICT DO NOTHING",
        )
        .bind(issuer)
        .bind(subject)
        .bind(user.as_str())
        .bind(enterprise.as_str())
        .bind(now)
        .execute(&mut *tx)
        .await?;
        if DB::rows_affected(&done) == 0 {
            return Ok(false);
        }
        super::audit::append_tx::<DB>(&mut tx, audit).await?;
        tx.commit().await?;
        Ok(true)
    }

    async fn keep_sso_login(&self, r: &SsoLoginRow, max: u32, now: i64) -> StoreResult<bool> {
        let mut tx = self.begin_write().await?;
        sqlx::query("DELETE FROM sso_logins WHERE expires_at <= $1").bind(now).execute(&mut *tx).await?;
        let (waiting,): (i64,) =
            sqlx::query_as("SELECT COUNT(*) FROM sso_logins").fetch_one(&mut *tx).await?;
        if waiting >= i64::from(max) {
            tx.commit().await?;
            return Ok(false);
        }
        sqlx::query(&format!(
            "INSERT INTO sso_logins ({LOGIN_COLUMNS}) VALUES ($1, $2, $3, $4, $5, $6, $7, $8)"
        ))
        .bind(r.state_hash.as_str())
        .bind(r.enterprise_id.as_str())
        .bind(r.browser_hash.as_str())
        .bind(r.nonce.as_str())
        .bind(r.verifier.as_str())
        .bind(r.next.as_str())
        .bind(r.link_user.as_ref().map(UserId::as_str))
        .bind(r.expires_at)
        .execute(&mut *tx)
        .await?;
        tx.commit().await?;
        Ok(true)
    }

    async fn take_sso_login(&self, state_hash: &str) -> StoreResult<Option<SsoLoginRow>> {
        let mut tx = self.begin_write().await?;
        let row: Option<SsoLoginRow> = sqlx::query_as(&format!(
            "DELETE FROM sso_logins WHERE state_hash = $1 RETURNING {LOGIN_COLUMNS}"
        ))
        .bind(state_hash)
        .fetch_optional(&mut *tx)
        .await?;
        tx.commit().await?;
        Ok(row)
    }
}
