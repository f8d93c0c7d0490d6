//! OAuth 2.0 clients, grants, authorization codes and refresh tokens (`oauth_*`). A code and a
//! refresh token are used in one statement that only succeeds once, so across every process
//! each is used once; a second use is reported, for the grant to be revoked (RFC 6749 §4.1.2,
//! §10.4). Using one, issuing the new tokens and auditing it are one transaction
//! ([`OAuthStore::exchange_oauth`]): a failure leaves the old one usable.
//!
//! Lock order: an exchange and a revocation both write the grant's row first, so a token
//! issued in the same instant as a revocation is either refused (the grant is revoked) or
//! revoked with the others (the revocation waits for the exchange to commit).

use async_trait::async_trait;
use custodian_macros::sql_bounds;
use sqlx::FromRow;

use super::{
    audit::append_tx,
    sql::{json_list, to_json, Dialect},
    sql_store::SqlStore,
    tokens::REVOKE,
    StoreError, StoreResult,
};
use crate::model::{
    audit::AuditEntry,
    oauth::{AuthorizationCode, OAuthClient, OAuthGrant, OidcKey},
};
use crate::types::{AnyId, UserId};

pub use super::oauth_exchange::{Exchange, Redeem, Redeemed};

#[async_trait]
pub trait OAuthStore: Send + Sync {
    /// Keeps a new client, with `audit`.
    async fn add_oauth_client(&self, c: &OAuthClient, audit: &[AuditEntry]) -> StoreResult<()>;
    async fn oauth_client(&self, id: &AnyId) -> StoreResult<Option<OAuthClient>>;
    /// Clients by creation, at most `limit`.
    async fn oauth_clients(&self, limit: u32) -> StoreResult<Vec<OAuthClient>>;
    /// Disables (or enables) a client, with `audit`; disabling revokes its grants at `now`.
    /// `false` when there is no such client.
    async fn set_oauth_client_disabled(
        &self,
        id: &AnyId,
        disabled: bool,
        now: i64,
        audit: &[AuditEntry],
    ) -> StoreResult<bool>;
    /// Sets whether a client may leave PKCE out, with `audit`; `false` when there is no such
    /// client.
    async fn set_oauth_client_pkce(
        &self,
        id: &AnyId,
        optional: bool,
        audit: &[AuditEntry],
    ) -> StoreResult<bool>;
    /// Replaces a client's secret hash, with `audit`; `false` when there is no such client.
    async fn set_oauth_client_secret(
        &self,
        id: &AnyId,
        secret_hash: &str,
        audit: &[AuditEntry],
    ) -> StoreResult<bool>;
    /// Deletes a client and revokes its grants at `now`, with `audit`; `false` when there is
    /// no such client.
    async fn delete_oauth_client(&self, id: &AnyId, now: i64, audit: &[AuditEntry]) -> StoreResult<bool>;
    /// Keeps a grant and its authorization code, with `audit`.
    async fn add_oauth_grant(
        &self,
        g: &OAuthGrant,
        code: &AuthorizationCode,
        audit: &[AuditEntry],
    ) -> StoreResult<()>;
    async fn oauth_grant(&self, id: &AnyId) -> StoreResult<Option<OAuthGrant>>;
    /// The user's grants not revoked, newest first, at most `limit`.
    async fn oauth_grants(&self, user: &UserId, limit: u32) -> StoreResult<Vec<OAuthGrant>>;
    /// The code with SHA-256 `code_hash`, used or not (nothing is written: the exchange uses
    /// it, [`OAuthStore::exchange_oauth`]).
    async fn oauth_code(&self, code_hash: &str) -> StoreResult<Option<AuthorizationCode>>;
    /// The grant of the refresh token with SHA-256 `token_hash`, used or not.
    async fn refresh_token_grant(&self, token_hash: &str) -> StoreResult<Option<AnyId>>;
    /// One token exchange (RFC 6749 §4.1.3, §6) in one transaction: the code or refresh token
    /// used at `now`, the new refresh token kept, the access token stored with its audit
    /// entries. `Fresh(())` when issued; `Reused` (used before: the grant to revoke) and
    /// `Invalid` (unknown, expired, or its grant revoked) write nothing.
    async fn exchange_oauth(&self, e: Exchange<'_>) -> StoreResult<Redeemed<()>>;
    /// Every id_token signing key, oldest first.
    async fn oidc_keys(&self) -> StoreResult<Vec<OidcKey>>;
    /// Keeps a new signing key; the keys of its algorithm not yet retired are retired at its
    /// `created_at` when `retire` (a rotation), with `audit`.
    async fn add_oidc_key(&self, k: &OidcKey, retire: bool, audit: &[AuditEntry]) -> StoreResult<()>;
    /// Revokes the grant at `now`: its access tokens and refresh tokens end, with `audit`.
    /// `false` when it was revoked already or does not exist.
    async fn revoke_oauth_grant(&self, id: &AnyId, now: i64, audit: &[AuditEntry]) -> StoreResult<bool>;
}

type ClientRow = (String, String, Option<String>, String, String, bool, i64, String, bool);
type GrantRow = (String, String, String, String, i64, Option<i64>, Option<i64>, String, i64);
type KeyRow = (String, String, String, String, i64, Option<i64>);
type CodeRow = (String, String, Option<String>, Option<String>, Option<String>, i64, i64, Option<i64>);

fn bad(what: &str, e: &str) -> StoreError {
    StoreError::Other(anyhow::anyhow!("stored {what}: {e}"))
}

fn client(
    (id, name, secret_hash, redirect_uris, scopes, disabled, created_at, id_token_alg, pkce_optional): ClientRow,
) -> StoreResult<OAuthClient> {
    Ok(OAuthClient {
        id: id.parse().map_err(|e| bad("client id", e))?,
        name,
        secret_hash,
        redirect_uris: json_list(&redirect_uris)?,
        scopes: json_list(&scopes)?,
        disabled,
        created_at,
        id_token_alg,
        pkce_optional,
    })
}

fn grant(
    (id, user_id, client_id, scopes, created_at, last_used_at, revoked_at, amr, auth_time): GrantRow,
) -> StoreResult<OAuthGrant> {
    Ok(OAuthGrant {
        id: id.parse().map_err(|e| bad("grant id", e))?,
        user_id: user_id.parse().map_err(|e| bad("grant user", e))?,
        client_id: client_id.parse().map_err(|e| bad("grant client", e))?,
        scopes: json_list(&scopes)?,
        created_at,
        last_used_at,
        revoked_at,
        amr: json_list(&amr)?,
        auth_time,
    })
}

fn code(r: CodeRow) -> StoreResult<AuthorizationCode> {
    let (code_hash, grant_id, redirect_uri, code_challenge, nonce, auth_time, expires_at, used_at) = r;
    Ok(AuthorizationCode {
        code_hash,
        grant_id: grant_id.parse().map_err(|e| bad("code grant", e))?,
        redirect_uri,
        code_challenge,
        nonce,
        auth_time,
        expires_at,
        used_at,
    })
}

const CLIENT_COLUMNS: &str =
    "id, name, secret_hash, redirect_uris, scopes, disabled, created_at, id_token_alg, pkce_optional";
const GRANT_COLUMNS: &str =
    "id, user_id, client_id, scopes, created_at, last_used_at, revoked_at, amr, auth_time";
const CODE_COLUMNS: &str =
    "code_hash, grant_id, redirect_uri, code_challenge, nonce, auth_time, expires_at, used_at";

/// Revokes at `now` the live grants whose `column` (`id` or `client_id`) is `key`, then every
/// access token and refresh token of a revoked grant of theirs; how many grants.
#[sql_bounds]
async fn revoke_grants<DB>(tx: &mut DB::Connection, column: &str, key: &AnyId, now: i64) -> StoreResult<u64> {
    // The grants' rows first (the module's lock order): an exchange of one of them in flight
    // commits before the tokens below are read, so its token is among them.
    let done = sqlx::query(&format!(
        "UPDATE oauth_grants SET revoked_at = $1 WHERE {column} = $2 AND revoked_at IS NULL"
    ))
    .bind(now)
    .bind(key.as_str())
    .execute(&mut *tx)
    .await?;
    let revoked = format!("SELECT id FROM oauth_grants WHERE {column} = $2 AND revoked_at IS NOT NULL");
    for sql in [
        format!("{REVOKE} WHERE oauth_grant_id IN ({revoked}) AND revoked_at IS NULL"),
        format!(
            "UPDATE oauth_refresh_tokens SET used_at = $1 WHERE grant_id IN ({revoked}) AND used_at IS NULL"
        ),
    ] {
        sqlx::query(&sql).bind(now).bind(key.as_str()).execute(&mut *tx).await?;
    }
    Ok(DB::rows_affected(&done))
}

/// Sets the boolean `column` (`disabled`, `pkce_optional`) of client `id` inside `tx`; whether
/// there is such a client.
#[sql_bounds]
async fn set_client_flag<DB>(
    tx: &mut DB::Connection,
    column: &str,
    id: &AnyId,
    value: bool,
) -> StoreResult<bool> {
    let done = sqlx::query(&format!("UPDATE oauth_clients SET {column} = $2 WHERE id = $1"))
        .bind(id.as_str())
        .bind(value)
        .execute(&mut *tx)
        .await?;
    Ok(DB::rows_affected(&done) > 0)
}

#[sql_bounds]
#[async_trait]
impl<DB> OAuthStore for SqlStore<DB>
where
    for<'r> (String,): FromRow<'r, DB::Row>,
    for<'r> ClientRow: FromRow<'r, DB::Row>,
    for<'r> GrantRow: FromRow<'r, DB::Row>,
    for<'r> CodeRow: FromRow<'r, DB::Row>,
    for<'r> KeyRow: FromRow<'r, DB::Row>,
    for<'r> (String, Option<i64>): FromRow<'r, DB::Row>,
    Vec<u8>: sqlx::Type<DB>,
{
    async fn add_oauth_client(&self, c: &OAuthClient, audit: &[AuditEntry]) -> StoreResult<()> {
        let mut tx = self.begin_write().await?;
        sqlx::query(&format!(
            "INSERT INTO oauth_clients ({CLIENT_COLUMNS}) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9)"
        ))
        .bind(c.id.as_str())
        .bind(c.name.as_str())
        .bind(c.secret_hash.as_deref())
        .bind(to_json(&c.redirect_uris)?)
        .bind(to_json(&c.scopes)?)
        .bind(c.disabled)
        .bind(c.created_at)
        .bind(c.id_token_alg.as_str())
        .bind(c.pkce_optional)
        .execute(&mut *tx)
        .await?;
        append_tx::<DB>(&mut tx, audit).await?;
        tx.commit().await?;
        Ok(())
    }

    async fn oauth_client(&self, id: &AnyId) -> StoreResult<Option<OAuthClient>> {
        let sql = format!("SELECT {CLIENT_COLUMNS} FROM oauth_clients WHERE id = $1");
        let row: Option<ClientRow> =
            sqlx::query_as(&sql).bind(id.as_str()).fetch_optional(&self.pool).await?;
        row.map(client).transpose()
    }

    async fn oauth_clients(&self, limit: u32) -> StoreResult<Vec<OAuthClient>> {
        let sql = format!("SELECT {CLIENT_COLUMNS} FROM oauth_clients ORDER BY created_at, id LIMIT $1");
        let rows: Vec<ClientRow> = sqlx::query_as(&sql).bind(i64::from(limit)).fetch_all(&self.pool).await?;
        rows.into_iter().map(client).collect()
    }

    async fn set_oauth_client_pkce(
        &self,
        id: &AnyId,
        optional: bool,
        audit: &[AuditEntry],
    ) -> StoreResult<bool> {
        let mut tx = self.begin_write().await?;
        if !set_client_flag::<DB>(&mut tx, "pkce_optional", id, optional).await? {
            return Ok(false);
        }
        append_tx::<DB>(&mut tx, audit).await?;
        tx.commit().await?;
        Ok(true)
    }

    async fn set_oauth_client_disabled(
        &self,
        id: &AnyId,
        disabled: bool,
        now: i64,
        audit: &[AuditEntry],
    ) -> StoreResult<bool> {
        let mut tx = self.begin_write().await?;
        if !set_client_flag::<DB>(&mut tx, "disabled", id, disabled).await? {
            return Ok(false);
        }
        if disabled {
            revoke_grants::<DB>(&mut tx, "client_id", id, now).await?;
        }
        append_tx::<DB>(&mut tx, audit).await?;
        tx.commit().await?;
        self.cache.clear();
        Ok(true)
    }

    async fn set_oauth_client_secret(
        &self,
        id: &AnyId,
        secret_hash: &str,
        audit: &[AuditEntry],
    ) -> StoreResult<bool> {
        let mut tx = self.begin_write().await?;
        let done = sqlx::query(
            "UPDATE oauth_clients SET secret_hash = $2 WHERE id = $1 AND secret_hash IS NOT NULL",
        )
        .bind(id.as_str())
        .bind(secret_hash)
        .execute(&mut *tx)
        .await?;
        if DB::rows_affected(&done) == 0 {
            return Ok(false);
        }
        append_tx::<DB>(&mut tx, audit).await?;
        tx.commit().await?;
        Ok(true)
    }

    async fn delete_oauth_client(&self, id: &AnyId, now: i64, audit: &[AuditEntry]) -> StoreResult<bool> {
        let mut tx = self.begin_write().await?;
        revoke_grants::<DB>(&mut tx, "client_id", id, now).await?;
        let done = sqlx::query("DELETE FROM oauth_clients WHERE id = $1")
            .bind(id.as_str())
            .execute(&mut *tx)
            .await?;
        if DB::rows_affected(&done) == 0 {
            return Ok(false);
        }
        append_tx::<DB>(&mut tx, audit).await?;
        tx.commit().await?;
        self.cache.clear();
        Ok(true)
    }

    async fn add_oauth_grant(
        &self,
        g: &OAuthGrant,
        c: &AuthorizationCode,
        audit: &[AuditEntry],
    ) -> StoreResult<()> {
        let mut tx = self.begin_write().await?;
        sqlx::query(&format!(
            "INSERT INTO oauth_grants ({GRANT_COLUMNS}) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9)"
        ))
        .bind(g.id.as_str())
        .bind(g.user_id.as_str())
        .bind(g.client_id.as_str())
        .bind(to_json(&g.scopes)?)
        .bind(g.created_at)
        .bind(g.last_used_at)
        .bind(g.revoked_at)
        .bind(to_json(&g.amr)?)
        .bind(g.auth_time)
        .execute(&mut *tx)
        .await?;
        sqlx::query(&format!(
            "INSERT INTO oauth_codes ({CODE_COLUMNS}) VALUES ($1, $2, $3, $4, $5, $6, $7, $8)"
        ))
        .bind(c.code_hash.as_str())
        .bind(c.grant_id.as_str())
        .bind(c.redirect_uri.as_deref())
        .bind(c.code_challenge.as_deref())
        .bind(c.nonce.as_deref())
        .bind(c.auth_time)
        .bind(c.expires_at)
        .bind(c.used_at)
        .execute(&mut *tx)
        .await?;
        append_tx::<DB>(&mut tx, audit).await?;
        tx.commit().await?;
        Ok(())
    }

    async fn oauth_grant(&self, id: &AnyId) -> StoreResult<Option<OAuthGrant>> {
        let sql = format!("SELECT {GRANT_COLUMNS} FROM oauth_grants WHERE id = $1");
        let row: Option<GrantRow> = sqlx::query_as(&sql).bind(id.as_str()).fetch_optional(&self.pool).await?;
        row.map(grant).transpose()
    }

    async fn oauth_grants(&self, user: &UserId, limit: u32) -> StoreResult<Vec<OAuthGrant>> {
        let sql = format!(
            "SELECT {GRANT_COLUMNS} FROM oauth_grants WHERE user_id = $1 AND revoked_at IS NULL \
             ORDER BY created_at DESC, id DESC LIMIT $2"
        );
        let rows: Vec<GrantRow> =
            sqlx::query_as(&sql).bind(user.as_str()).bind(i64::from(limit)).fetch_all(&self.pool).await?;
        rows.into_iter().map(grant).collect()
    }

    async fn oauth_code(&self, code_hash: &str) -> StoreResult<Option<AuthorizationCode>> {
        let row: Option<CodeRow> =
            sqlx::query_as(&format!("SELECT {CODE_COLUMNS} FROM oauth_codes WHERE code_hash = $1"))
                .bind(code_hash)
                .fetch_optional(&self.pool)
                .await?;
        row.map(code).transpose()
    }

    async fn refresh_token_grant(&self, token_hash: &str) -> StoreResult<Option<AnyId>> {
        let row: Option<(String,)> =
            sqlx::query_as("SELECT grant_id FROM oauth_refresh_tokens WHERE token_hash = $1")
                .bind(token_hash)
                .fetch_optional(&self.pool)
                .await?;
        row.map(|(g,)| g.parse().map_err(|e| bad("refresh token grant", e))).transpose()
    }

    async fn exchange_oauth(&self, e: Exchange<'_>) -> StoreResult<Redeemed<()>> {
        let mut tx = self.begin_write().await?;
        let done = super::oauth_exchange::exchange::<DB>(&mut tx, &e).await?;
        if done == Redeemed::Fresh(()) {
            tx.commit().await?;
        }
        Ok(done)
    }

    async fn oidc_keys(&self) -> StoreResult<Vec<OidcKey>> {
        let rows: Vec<KeyRow> = sqlx::query_as(
            "SELECT kid, alg, sealed, public_jwk, created_at, retired_at FROM oidc_keys ORDER BY created_at, kid",
        )
        .fetch_all(&self.pool)
        .await?;
        Ok(rows
            .into_iter()
            .map(|(kid, alg, sealed, public_jwk, created_at, retired_at)| OidcKey {
                kid,
                alg,
                sealed,
                public_jwk,
                created_at,
                retired_at,
            })
            .collect())
    }

    async fn add_oidc_key(&self, k: &OidcKey, retire: bool, audit: &[AuditEntry]) -> StoreResult<()> {
        let mut tx = self.begin_write().await?;
        if retire {
            sqlx::query("UPDATE oidc_keys SET retired_at = $1 WHERE alg = $2 AND retired_at IS NULL")
                .bind(k.created_at)
                .bind(k.alg.as_str())
                .execute(&mut *tx)
                .await?;
        }
        sqlx::query(
            "INSERT INTO oidc_keys (kid, alg, sealed, public_jwk, created_at, retired_at) VALUES ($1, $2, $3, $4, $5, $6)",
        )
        .bind(k.kid.as_str())
        .bind(k.alg.as_str())
        .bind(k.sealed.as_str())
        .bind(k.public_jwk.as_str())
        .bind(k.created_at)
        .bind(k.retired_at)
        .execute(&mut *tx)
        .await?;
        append_tx::<DB>(&mut tx, audit).await?;
        tx.commit().await?;
        Ok(())
    }

    async fn revoke_oauth_grant(&self, id: &AnyId, now: i64, audit: &[AuditEntry]) -> StoreResult<bool> {
        let mut tx = self.begin_write().await?;
        if revoke_grants::<DB>(&mut tx, "id", id, now).await? == 0 {
            return Ok(false);
        }
        append_tx::<DB>(&mut tx, audit).await?;
        tx.commit().await?;
        self.cache.clear();
        Ok(true)
    }
}
