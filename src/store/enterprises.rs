//! Enterprises (customer organisations) and their members.

use crate::types::{Coin, EnterpriseId, UserId};
use async_trait::async_trait;
use custodian_macros::sql_bounds;
use sqlx::FromRow;

use super::sql::{unique_violation, Dialect};
use super::sql_store::SqlStore;
use super::StoreResult;

/// An enterprise (a customer organisation).
#[derive(Debug, Clone, FromRow)]
pub struct Enterprise {
    pub id: EnterpriseId,
    pub name: String,
    /// Unix seconds.
    pub created_at: i64,
}

/// A user's membership of an enterprise.
#[derive(Debug, Clone)]
pub struct Membership {
    pub enterprise: Enterprise,
    pub is_admin: bool,
}

/// Enterprises and memberships.
#[async_trait]
pub trait EnterpriseStore: Send + Sync {
    /// Fails with [`super::StoreError::Conflict`] when the id is taken. `audit` is written
    /// with it.
    async fn insert_enterprise(
        &self,
        e: &Enterprise,
        audit: &[crate::model::audit::AuditEntry],
    ) -> StoreResult<()>;
    async fn enterprise_by_id(&self, id: &EnterpriseId) -> StoreResult<Option<Enterprise>>;
    /// Adds the user to the enterprise, or updates the admin flag when already a member.
    /// `audit` is written with it.
    async fn upsert_membership(
        &self,
        enterprise_id: &EnterpriseId,
        user_id: &UserId,
        is_admin: bool,
        audit: &[crate::model::audit::AuditEntry],
    ) -> StoreResult<()>;
    /// The user's enterprises, by name then id.
    async fn memberships(&self, user_id: &UserId) -> StoreResult<Vec<Membership>>;
    /// An enterprise's policy rules for `coin`, as stored (a JSON array); `None` when it has
    /// none.
    async fn enterprise_rules(&self, enterprise: &EnterpriseId, coin: &Coin) -> StoreResult<Option<String>>;
    /// Writes an enterprise's rules for `coin` if they are still `before` (`None`: none yet),
    /// with `audit`; `false` when they changed meanwhile (nothing written).
    async fn set_enterprise_rules(
        &self,
        enterprise: &EnterpriseId,
        coin: &Coin,
        before: Option<&str>,
        rules: &str,
        audit: &[crate::model::audit::AuditEntry],
    ) -> StoreResult<bool>;
    /// Enterprises by id after `after_id`, at most `limit` (the console's list).
    async fn list_enterprises(&self, after_id: Option<&str>, limit: u32) -> StoreResult<Vec<Enterprise>>;
    /// An enterprise's members by email, at most `limit`.
    async fn members(&self, enterprise_id: &EnterpriseId, limit: u32) -> StoreResult<Vec<Member>>;
}

/// A member of an enterprise, as the console lists them.
#[derive(Debug, Clone, FromRow)]
pub struct Member {
    pub user_id: UserId,
    pub email: String,
    pub is_admin: bool,
    pub is_active: bool,
}

#[derive(FromRow)]
struct MembershipRow {
    #[sqlx(flatten)]
    enterprise: Enterprise,
    is_admin: bool,
}

#[sql_bounds]
#[async_trait]
impl<DB> EnterpriseStore for SqlStore<DB>
where
    for<'r> Enterprise: FromRow<'r, DB::Row>,
    for<'r> MembershipRow: FromRow<'r, DB::Row>,
    for<'r> Member: FromRow<'r, DB::Row>,
    for<'r> (String,): FromRow<'r, DB::Row>,
{
    #[tracing::instrument(level = "debug", skip_all)]
    async fn insert_enterprise(
        &self,
        e: &Enterprise,
        audit: &[crate::model::audit::AuditEntry],
    ) -> StoreResult<()> {
        let mut tx = self.begin_write().await?;
        sqlx::query("INSERT INTO enterprises (id, name, created_at) VALUES ($1, $2, $3)")
            .bind(e.id.as_str())
            .bind(e.name.as_str())
            .bind(e.created_at)
            .execute(&mut *tx)
            .await
            .map_err(|e| unique_violation(e, "an enterprise with this id"))?;
        super::audit::append_tx::<DB>(&mut tx, audit).await?;
        tx.commit().await?;
        Ok(())
    }

    #[tracing::instrument(level = "debug", skip_all)]
    async fn enterprise_by_id(&self, id: &EnterpriseId) -> StoreResult<Option<Enterprise>> {
        Ok(sqlx::query_as("SELECT id, name, created_at FROM enterprises WHERE id = $1")
            .bind(id)
            .fetch_optional(&self.pool)
            .await?)
    }

    #[tracing::instrument(level = "debug", skip_all)]
    async fn upsert_membership(
        &self,
        enterprise_id: &EnterpriseId,
        user_id: &UserId,
        is_admin: bool,
        audit: &[crate::model::audit::AuditEntry],
    ) -> StoreResult<()> {
        let mut tx = self.begin_write().await?;
        sqlx::query(
            "INSERT INTO enterprise_users (enterprise_id, user_id, is_admin) VALUES ($1, $2, $3) \
             ON CONFLICT (enterprise_id, user_id) DO UPDATE SET is_admin = excluded.is_admin",
        )
        .bind(enterprise_id)
        .bind(user_id)
        .bind(is_admin)
        .execute(&mut *tx)
        .await?;
        super::audit::append_tx::<DB>(&mut tx, audit).await?;
        tx.commit().await?;
        self.cache.clear();
        Ok(())
    }

    #[tracing::instrument(level = "debug", skip_all)]
    async fn enterprise_rules(&self, enterprise: &EnterpriseId, coin: &Coin) -> StoreResult<Option<String>> {
        let row: Option<(String,)> =
            sqlx::query_as("SELECT rules FROM enterprise_policies WHERE enterprise_id = $1 AND coin = $2")
                .bind(enterprise.as_str())
                .bind(coin.as_str())
                .fetch_optional(&self.pool)
                .await?;
        Ok(row.map(|(r,)| r))
    }

    async fn set_enterprise_rules(
        &self,
        enterprise: &EnterpriseId,
        coin: &Coin,
        before: Option<&str>,
        rules: &str,
        audit: &[crate::model::audit::AuditEntry],
    ) -> StoreResult<bool> {
        let mut tx = self.begin_write().await?;
        let now = self.clock.now();
        let done = match before {
            None => sqlx::query(
                "INSERT INTO enterprise_policies (enterprise_id, coin, rules, updated_at) VALUES ($1, $2, $3, $4)",
            )
            .bind(enterprise.as_str())
            .bind(coin.as_str())
            .bind(rules)
            .bind(now)
            .execute(&mut *tx)
            .await
            .map(|r| DB::rows_affected(&r)),
            Some(before) => swap_rules_tx::<DB>(&mut tx, enterprise, coin, before, rules, now).await,
        };
        match done {
            Ok(1) => {}
            Ok(_) => return Ok(false),
            Err(e) => {
                return match unique_violation(e, "rules") {
                    super::StoreError::Conflict(_) => Ok(false),
                    other => Err(other),
                }
            }
        }
        super::audit::append_tx::<DB>(&mut tx, audit).await?;
        tx.commit().await?;
        Ok(true)
    }

    async fn memberships(&self, user_id: &UserId) -> StoreResult<Vec<Membership>> {
        if let Some(m) = self.cache.memberships(user_id) {
            return Ok(m);
        }
        let at = self.cache.generation();
        let rows: Vec<MembershipRow> = sqlx::query_as(
            "SELECT e.id, e.name, e.created_at, m.is_admin FROM enterprise_users m \
             JOIN enterprises e ON e.id = m.enterprise_id WHERE m.user_id = $1 ORDER BY e.name, e.id",
        )
        .bind(user_id)
        .fetch_all(&self.pool)
        .await?;
        let list: Vec<Membership> =
            rows.into_iter().map(|r| Membership { enterprise: r.enterprise, is_admin: r.is_admin }).collect();
        self.cache.put_memberships(at, user_id, &list);
        Ok(list)
    }

    #[tracing::instrument(level = "debug", skip_all)]
    async fn list_enterprises(&self, after_id: Option<&str>, limit: u32) -> StoreResult<Vec<Enterprise>> {
        Ok(sqlx::query_as("SELECT id, name, created_at FROM enterprises WHERE id > $1 ORDER BY id LIMIT $2")
            .bind(after_id.unwrap_or(""))
            .bind(i64::from(limit))
            .fetch_all(&self.pool)
            .await?)
    }

    #[tracing::instrument(level = "debug", skip_all)]
    async fn members(&self, enterprise_id: &EnterpriseId, limit: u32) -> StoreResult<Vec<Member>> {
        Ok(sqlx::query_as(
            "SELECT u.id AS user_id, u.email, m.is_admin, u.is_active FROM enterprise_users m \
             JOIN users u ON u.id = m.user_id WHERE m.enterprise_id = $1 ORDER BY u.email LIMIT $2",
        )
        .bind(enterprise_id)
        .bind(i64::from(limit))
        .fetch_all(&self.pool)
        .await?)
    }
}

/// Replaces `enterprise`'s rules for `coin` inside `tx` when they are still `before`: the rows
/// changed (0 when they changed meanwhile).
#[sql_bounds]
pub(super) async fn swap_rules_tx<DB>(
    tx: &mut DB::Connection,
    enterprise: &EnterpriseId,
    coin: &Coin,
    before: &str,
    rules: &str,
    now: i64,
) -> Result<u64, sqlx::Error> {
    sqlx::query(
        "UPDATE enterprise_policies SET rules = $3, updated_at = $5 WHERE enterprise_id = $1 AND coin = $2 \
         AND rules = $4",
    )
    .bind(enterprise.as_str())
    .bind(coin.as_str())
    .bind(rules)
    .bind(before)
    .bind(now)
    .execute(&mut *tx)
    .await
    .map(|r| DB::rows_affected(&r))
}
