//! Keys: those the service holds for itself (`server_keys`), sealed by the caller under the
//! master key (the store sees only their sealed text), and users' ECDH keychains
//! (`ecdh_keychains`: an xpub and the xprv as the client encrypted it).

use async_trait::async_trait;
use custodian_macros::sql_bounds;
use sqlx::FromRow;

use super::{sql::Dialect, sql_store::SqlStore, StoreResult};
use crate::model::{audit::AuditEntry, keychain::EcdhKeychain};
use crate::types::UserId;

#[async_trait]
pub trait KeyStore: Send + Sync {
    /// The sealed key named `name`, if one was made.
    async fn server_key(&self, name: &str) -> StoreResult<Option<String>>;
    /// Stores `sealed` as the key `name` unless one exists (another process made it first);
    /// returns the key that is stored now.
    async fn keep_server_key(&self, name: &str, sealed: &str, now: i64) -> StoreResult<String>;
    /// Keeps a user's keychain (a repeat of the same xpub is kept once), with `audit`.
    async fn add_ecdh_keychain(&self, k: &EcdhKeychain, audit: &[AuditEntry]) -> StoreResult<()>;
    /// Makes the user's keychain `xpub` their ECDH keychain, with `audit`; `false` when the
    /// user has no keychain with that xpub (nothing changes).
    async fn choose_ecdh_keychain(
        &self,
        user: &UserId,
        xpub: &str,
        audit: &[AuditEntry],
    ) -> StoreResult<bool>;
    /// The user's ECDH keychain, if one is chosen.
    async fn ecdh_keychain(&self, user: &UserId) -> StoreResult<Option<EcdhKeychain>>;
}

#[sql_bounds]
#[async_trait]
impl<DB> KeyStore for SqlStore<DB>
where
    for<'r> (String,): FromRow<'r, DB::Row>,
    for<'r> (String, String, i64): FromRow<'r, DB::Row>,
{
    async fn server_key(&self, name: &str) -> StoreResult<Option<String>> {
        let row: Option<(String,)> = sqlx::query_as("SELECT sealed FROM server_keys WHERE name = $1")
            .bind(name)
            .fetch_optional(&self.pool)
            .await?;
        Ok(row.map(|(s,)| s))
    }

    async fn keep_server_key(&self, name: &str, sealed: &str, now: i64) -> StoreResult<String> {
        let mut tx = self.begin_write().await?;
        sqlx::query(
            "INSERT INTO server_keys (name, sealed, created_at) VALUES ($1, $2, $3) ON CONFLICT (name) DO NOTHING",
        )
        .bind(name)
        .bind(sealed)
        .bind(now)
        .execute(&mut *tx)
        .await?;
        let (kept,): (String,) = sqlx::query_as("SELECT sealed FROM server_keys WHERE name = $1")
            .bind(name)
            .fetch_one(&mut *tx)
            .await?;
        tx.commit().await?;
        Ok(kept)
    }

    async fn add_ecdh_keychain(&self, k: &EcdhKeychain, audit: &[AuditEntry]) -> StoreResult<()> {
        let mut tx = self.begin_write().await?;
        sqlx::query(
            "INSERT INTO ecdh_keychains (user_id, xpub, encrypted_xprv, created_at) VALUES ($1, $2, $3, $4) \
             ON CONFLICT (user_id, xpub) DO NOTHING",
        )
        .bind(k.user_id.as_str())
        .bind(k.xpub.as_str())
        .bind(k.encrypted_xprv.as_str())
        .bind(k.created_at)
        .execute(&mut *tx)
        .await?;
        super::audit::append_tx::<DB>(&mut tx, audit).await?;
        tx.commit().await?;
        Ok(())
    }

    async fn choose_ecdh_keychain(
        &self,
        user: &UserId,
        xpub: &str,
        audit: &[AuditEntry],
    ) -> StoreResult<bool> {
        let mut tx = self.begin_write().await?;
        let found = sqlx::query("UPDATE ecdh_keychains SET chosen = (xpub = $2) WHERE user_id = $1")
            .bind(user.as_str())
            .bind(xpub)
            .execute(&mut *tx)
            .await?;
        let chosen: Option<(String,)> =
            sqlx::query_as("SELECT xpub FROM ecdh_keychains WHERE user_id = $1 AND xpub = $2")
                .bind(user.as_str())
                .bind(xpub)
                .fetch_optional(&mut *tx)
                .await?;
        if DB::rows_affected(&found) == 0 || chosen.is_none() {
            return Ok(false);
        }
        super::audit::append_tx::<DB>(&mut tx, audit).await?;
        tx.commit().await?;
        Ok(true)
    }

    async fn ecdh_keychain(&self, user: &UserId) -> StoreResult<Option<EcdhKeychain>> {
        let row: Option<(String, String, i64)> = sqlx::query_as(
            "SELECT xpub, encrypted_xprv, created_at FROM ecdh_keychains WHERE user_id = $1 AND chosen",
        )
        .bind(user.as_str())
        .fetch_optional(&self.pool)
        .await?;
        Ok(row.map(|(xpub, encrypted_xprv, created_at)| EcdhKeychain {
            user_id: user.clone(),
            xpub,
            encrypted_xprv,
            created_at,
        }))
    }
}
