//! Access tokens (spec §2.4) and token templates: records and storage.

use crate::types::{EnterpriseId, TokenId, UserId};
use custodian_macros::sql_bounds;
use std::sync::Arc;

use async_trait::async_trait;
use sqlx::{FromRow, Type};

use super::audit::append_tx;

use super::outbox::rows::insert_notifications_tx;
use super::sql::{
    json_list, json_list_opt, json_value, parse_stored, to_json, to_json_opt, unique_violation, Dialect,
};
use super::sql_store::SqlStore;
use super::{StoreError, StoreResult};
use crate::model::audit::AuditEntry;
use crate::model::notification::Notification;
use crate::model::token::{
    GrantType, SortOrder, TokenKind, TokenRecord, TokenTemplate, Unlock, TOUCH_EVERY_SECS,
};
use crate::types::AnyId;
use crate::{grant::Grant, types::Cidr};

/// Revokes tokens at `$1` (Unix seconds), BitGo's way: `revoked_at` set and `expires_at`
/// brought to `$1` at the latest. A WHERE clause follows.
pub(super) const REVOKE: &str = "UPDATE access_tokens SET revoked_at = $1, \
    expires_at = CASE WHEN expires_at > $1 THEN $1 ELSE expires_at END";

/// Inserts token `t` inside the caller's transaction (a token request, an OAuth exchange).
/// Errors: `Conflict` when the id is taken.
#[sql_bounds]
pub(super) async fn insert_token_row<DB>(tx: &mut DB::Connection, t: &TokenRecord) -> StoreResult<()>
where
    Vec<u8>: Type<DB>,
{
    let sql = format!(
        "INSERT INTO access_tokens ({TOKEN_COLUMNS}) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, \
             $10, $11, $12, $13, $14, $15, $16, $17, $18, $19, $20, $21, $22, $23, $24, $25)"
    );
    sqlx::query(&sql)
        .bind(t.id.as_str())
        .bind(t.token_hash.as_str())
        .bind(t.user_id.as_str())
        .bind(t.kind.as_str())
        .bind(t.label.as_deref())
        .bind(to_json(&t.scopes.iter().map(Grant::to_scope_string).collect::<Vec<_>>())?)
        .bind(t.created_at)
        .bind(t.expires_at)
        .bind(t.revoked_at)
        .bind(t.ip.as_deref())
        .bind(to_json_opt(&t.ip_restrict)?)
        .bind(t.enterprise.as_deref())
        .bind(t.is_extensible)
        .bind(t.admin)
        .bind(to_json_opt(&t.spending_limits)?)
        .bind(to_json_opt(&t.permitted_wallets)?)
        .bind(to_json_opt(&t.permitted_enterprises)?)
        .bind(t.origin.as_str())
        .bind(t.parent_id.as_deref())
        .bind(t.sealed_value.clone())
        .bind(t.extension_address.as_deref())
        .bind(t.tx_value_limit.as_ref().map(|v| v.as_str()))
        .bind(t.grant_type.as_str())
        .bind(t.derivation_path.as_deref())
        .bind(t.oauth_grant.as_ref().map(|g| g.as_str()))
        .execute(&mut *tx)
        .await
        .map_err(|e| unique_violation(e, "a token with this id"))?;
    Ok(())
}

/// Tokens by id and by hash, and templates.
#[async_trait]
pub trait TokenStore: Send + Sync {
    /// Stores a token and, in the same transaction, the notifications it fires (outbox) and
    /// its audit entries.
    async fn insert_token(
        &self,
        t: &TokenRecord,
        notifications: &[Notification],
        audit: &[AuditEntry],
    ) -> StoreResult<()>;
    async fn token_by_id(&self, id: &TokenId) -> StoreResult<Option<TokenRecord>>;
    /// `token_hash`: hex SHA-256 of the secret.
    /// Shared with the read cache: no copy of the record per request.
    async fn token_by_hash(&self, token_hash: &str) -> StoreResult<Option<Arc<TokenRecord>>>;
    /// Fails with [`super::StoreError::Conflict`] when the id is taken.
    async fn insert_template(&self, t: &TokenTemplate) -> StoreResult<()>;
    async fn template_by_id(&self, id: &AnyId) -> StoreResult<Option<TokenTemplate>>;
    /// Templates with ids after `after_id`, by id, at most `limit`.
    async fn list_templates(&self, after_id: Option<&AnyId>, limit: u32) -> StoreResult<Vec<TokenTemplate>>;
    /// Removes a template; false when there was none.
    async fn delete_template(&self, id: &AnyId) -> StoreResult<bool>;
    /// `user_id`'s tokens neither revoked nor expired at `now`, by creation time (then id) in
    /// `order`, after the token `after_id` (when given), at most `limit`.
    async fn list_tokens(
        &self,
        user_id: &UserId,
        now: i64,
        after_id: Option<&AnyId>,
        order: SortOrder,
        limit: u32,
    ) -> StoreResult<Vec<TokenRecord>>;
    /// Revokes a token at `now`: `revoked_at` set and `expires_at` brought to `now` at the
    /// latest (BitGo's revocation). False when it was already revoked or does not exist.
    /// `audit` is written with it, when it revokes.
    async fn revoke_token(&self, id: &TokenId, now: i64, audit: &[AuditEntry]) -> StoreResult<bool>;
    /// Writes `last_used_at = now` unless it is less than [`TOUCH_EVERY_SECS`] old (the token
    /// `id` whose hash is `token_hash`, which keys the authentication cache).
    async fn touch_token(&self, id: &TokenId, token_hash: &str, now: i64) -> StoreResult<()>;
    /// Sets or clears a token's unlock, with its audit entries.
    async fn set_unlock(&self, id: &TokenId, unlock: Option<Unlock>, audit: &[AuditEntry])
        -> StoreResult<()>;
    /// Sets a token's expiry (extension), with its audit entries.
    async fn set_token_expiry(&self, id: &TokenId, expires_at: i64, audit: &[AuditEntry]) -> StoreResult<()>;
    /// Records the HMAC of a signed request that changes state, kept until `expires_at_ms`
    /// (Unix ms, when its timestamp leaves the window): false when it was recorded already, a
    /// replay (docs/decisions.md#signed-requests). Requests arriving together are recorded in one transaction
    /// ([`super::replay`]), which also removes up to twice as many expired rows, so the table
    /// holds about one window of requests.
    async fn record_signed_request(&self, hmac: &str, expires_at_ms: i64) -> StoreResult<bool>;
}

#[derive(FromRow)]
struct TokenRow {
    id: TokenId,
    token_hash: String,
    user_id: UserId,
    kind: String,
    label: Option<String>,
    scopes: String,
    created_at: i64,
    expires_at: i64,
    revoked_at: Option<i64>,
    ip: Option<String>,
    ip_restrict: Option<String>,
    enterprise: Option<EnterpriseId>,
    is_extensible: bool,
    admin: bool,
    spending_limits: Option<String>,
    permitted_wallets: Option<String>,
    permitted_enterprises: Option<String>,
    origin: String,
    parent_id: Option<TokenId>,
    last_used_at: Option<i64>,
    unlock_time: Option<i64>,
    unlock_expires: Option<i64>,
    sealed_value: Option<Vec<u8>>,
    extension_address: Option<String>,
    tx_value_limit: Option<String>,
    grant_type: String,
    derivation_path: Option<String>,
    oauth_grant_id: Option<AnyId>,
}

impl TokenRow {
    fn into_record(self) -> StoreResult<TokenRecord> {
        Ok(TokenRecord {
            id: self.id,
            token_hash: self.token_hash,
            user_id: self.user_id,
            kind: TokenKind::parse(&self.kind),
            label: self.label,
            scopes: json_list(&self.scopes)?
                .iter()
                .map(|s| {
                    Grant::parse(s)
                        .map_err(|e| StoreError::Other(anyhow::anyhow!("stored scope of token: {e}")))
                })
                .collect::<StoreResult<_>>()?,
            created_at: self.created_at,
            expires_at: self.expires_at,
            revoked_at: self.revoked_at,
            ip: self.ip,
            ip_restrict: json_list_opt(self.ip_restrict)?
                .map(|list| {
                    list.iter()
                        .map(|c| {
                            Cidr::parse(c)
                                .map_err(|e| StoreError::Other(anyhow::anyhow!("stored ipRestrict: {e}")))
                        })
                        .collect::<StoreResult<Vec<_>>>()
                })
                .transpose()?,
            enterprise: self.enterprise,
            is_extensible: self.is_extensible,
            admin: self.admin,
            spending_limits: self.spending_limits.as_deref().map(json_value).transpose()?,
            permitted_wallets: self.permitted_wallets.as_deref().map(json_value).transpose()?,
            permitted_enterprises: self.permitted_enterprises.as_deref().map(json_value).transpose()?,
            origin: self.origin,
            parent_id: self.parent_id,
            last_used_at: self.last_used_at,
            unlock: match (self.unlock_time, self.unlock_expires) {
                (Some(time), Some(expires)) => Some(Unlock { time, expires }),
                _ => None,
            },
            sealed_value: self.sealed_value,
            extension_address: self.extension_address,
            tx_value_limit: self
                .tx_value_limit
                .as_deref()
                .map(|v| parse_stored(v, "txValueLimit"))
                .transpose()?,
            grant_type: GrantType::parse(&self.grant_type),
            derivation_path: self.derivation_path,
            oauth_grant: self.oauth_grant_id,
        })
    }
}

#[derive(FromRow)]
struct TemplateRow {
    id: AnyId,
    fields: String,
    created_at: i64,
}

/// The columns a token is inserted with.
const TOKEN_COLUMNS: &str = "id, token_hash, user_id, kind, label, scopes, created_at, expires_at, \
    revoked_at, ip, ip_restrict, enterprise, is_extensible, admin, spending_limits, permitted_wallets, \
    permitted_enterprises, origin, parent_id, sealed_value, extension_address, tx_value_limit, grant_type, derivation_path, oauth_grant_id";
/// The columns a token is read with: those it is inserted with and those written later.
const TOKEN_READ_COLUMNS: &str = "id, token_hash, user_id, kind, label, scopes, created_at, expires_at, \
    revoked_at, ip, ip_restrict, enterprise, is_extensible, admin, spending_limits, permitted_wallets, \
    permitted_enterprises, origin, parent_id, last_used_at, unlock_time, unlock_expires, sealed_value, extension_address, tx_value_limit, grant_type, derivation_path, oauth_grant_id";

#[sql_bounds]
#[async_trait]
impl<DB> TokenStore for SqlStore<DB>
where
    Vec<u8>: Type<DB>,
    for<'r> TokenRow: FromRow<'r, DB::Row>,
    for<'r> TemplateRow: FromRow<'r, DB::Row>,
    for<'r> (String,): FromRow<'r, DB::Row>,
{
    #[tracing::instrument(level = "debug", skip_all)]
    async fn insert_token(
        &self,
        t: &TokenRecord,
        notifications: &[Notification],
        audit: &[AuditEntry],
    ) -> StoreResult<()> {
        let mut tx = self.begin_write().await?;
        insert_token_row::<DB>(&mut tx, t).await?;
        insert_notifications_tx::<DB, _>(&mut tx, notifications).await?;
        append_tx::<DB>(&mut tx, audit).await?;
        tx.commit().await?;
        Ok(())
    }

    #[tracing::instrument(level = "debug", skip_all)]
    async fn token_by_id(&self, id: &TokenId) -> StoreResult<Option<TokenRecord>> {
        let sql = format!("SELECT {TOKEN_READ_COLUMNS} FROM access_tokens WHERE id = $1");
        let row: Option<TokenRow> = sqlx::query_as(&sql).bind(id).fetch_optional(&self.pool).await?;
        row.map(TokenRow::into_record).transpose()
    }

    #[tracing::instrument(level = "debug", skip_all)]
    async fn token_by_hash(&self, token_hash: &str) -> StoreResult<Option<Arc<TokenRecord>>> {
        if let Some(t) = self.cache.token(token_hash) {
            return Ok(Some(t));
        }
        let at = self.cache.generation();
        let sql = format!("SELECT {TOKEN_READ_COLUMNS} FROM access_tokens WHERE token_hash = $1");
        let row: Option<TokenRow> = sqlx::query_as(&sql).bind(token_hash).fetch_optional(&self.pool).await?;
        let token = row.map(TokenRow::into_record).transpose()?.map(Arc::new);
        if let Some(t) = &token {
            self.cache.put_token(at, t);
        }
        Ok(token)
    }

    #[tracing::instrument(level = "debug", skip_all)]
    async fn insert_template(&self, t: &TokenTemplate) -> StoreResult<()> {
        sqlx::query("INSERT INTO token_templates (id, fields, created_at) VALUES ($1, $2, $3)")
            .bind(t.id.as_str())
            .bind(t.fields.to_string())
            .bind(t.created_at)
            .execute(&self.pool)
            .await
            .map_err(|e| unique_violation(e, "a template with this id"))?;
        Ok(())
    }

    #[tracing::instrument(level = "debug", skip_all)]
    async fn template_by_id(&self, id: &AnyId) -> StoreResult<Option<TokenTemplate>> {
        let row: Option<TemplateRow> =
            sqlx::query_as("SELECT id, fields, created_at FROM token_templates WHERE id = $1")
                .bind(id)
                .fetch_optional(&self.pool)
                .await?;
        row.map(|r| Ok(TokenTemplate { id: r.id, fields: json_value(&r.fields)?, created_at: r.created_at }))
            .transpose()
    }

    #[tracing::instrument(level = "debug", skip_all)]
    async fn list_templates(&self, after_id: Option<&AnyId>, limit: u32) -> StoreResult<Vec<TokenTemplate>> {
        let after_id = after_id.map(AnyId::as_str);
        let rows: Vec<TemplateRow> = sqlx::query_as(
            "SELECT id, fields, created_at FROM token_templates WHERE id > $1 ORDER BY id LIMIT $2",
        )
        .bind(after_id.unwrap_or(""))
        .bind(i64::from(limit))
        .fetch_all(&self.pool)
        .await?;
        rows.into_iter()
            .map(|r| Ok(TokenTemplate { id: r.id, fields: json_value(&r.fields)?, created_at: r.created_at }))
            .collect()
    }

    #[tracing::instrument(level = "debug", skip_all)]
    async fn delete_template(&self, id: &AnyId) -> StoreResult<bool> {
        let r = sqlx::query("DELETE FROM token_templates WHERE id = $1").bind(id).execute(&self.pool).await?;
        Ok(DB::rows_affected(&r) > 0)
    }

    #[tracing::instrument(level = "debug", skip_all)]
    async fn list_tokens(
        &self,
        user_id: &UserId,
        now: i64,
        after_id: Option<&AnyId>,
        order: SortOrder,
        limit: u32,
    ) -> StoreResult<Vec<TokenRecord>> {
        let after_id = after_id.map(AnyId::as_str);
        let (cmp, dir) = match order {
            SortOrder::Ascending => (">", "ASC"),
            SortOrder::Descending => ("<", "DESC"),
        };
        // The cursor is the previous page's last token: rows after its (created_at, id).
        let cursor = match after_id {
            Some(_) => format!(
                "AND (created_at, id) {cmp} (SELECT created_at, id FROM access_tokens \
                 WHERE id = $4 AND user_id = $1)"
            ),
            None => "AND $4 = $4".to_string(),
        };
        let sql = format!(
            "SELECT {TOKEN_READ_COLUMNS} FROM access_tokens WHERE user_id = $1 AND revoked_at IS NULL \
             AND expires_at > $2 {cursor} ORDER BY created_at {dir}, id {dir} LIMIT $3"
        );
        let rows: Vec<TokenRow> = sqlx::query_as(&sql)
            .bind(user_id)
            .bind(now)
            .bind(i64::from(limit))
            .bind(after_id.unwrap_or(""))
            .fetch_all(&self.pool)
            .await?;
        rows.into_iter().map(TokenRow::into_record).collect()
    }

    #[tracing::instrument(level = "debug", skip_all)]
    async fn revoke_token(&self, id: &TokenId, now: i64, audit: &[AuditEntry]) -> StoreResult<bool> {
        let mut tx = self.begin_write().await?;
        let r = sqlx::query(&format!("{REVOKE} WHERE id = $2 AND revoked_at IS NULL"))
            .bind(now)
            .bind(id)
            .execute(&mut *tx)
            .await?;
        let revoked = DB::rows_affected(&r) > 0;
        if revoked {
            append_tx::<DB>(&mut tx, audit).await?;
        }
        tx.commit().await?;
        if revoked {
            self.cache.clear();
        }
        Ok(revoked)
    }

    #[tracing::instrument(level = "debug", skip_all)]
    async fn record_signed_request(&self, hmac: &str, expires_at_ms: i64) -> StoreResult<bool> {
        self.replay.record(hmac, expires_at_ms).await
    }

    async fn touch_token(&self, id: &TokenId, token_hash: &str, now: i64) -> StoreResult<()> {
        let _gate = self.write_gate().await;
        sqlx::query(
            "UPDATE access_tokens SET last_used_at = $1 WHERE id = $2 \
             AND (last_used_at IS NULL OR last_used_at <= $3)",
        )
        .bind(now)
        .bind(id)
        .bind(now - TOUCH_EVERY_SECS)
        .execute(&self.pool)
        .await?;
        self.cache.touch_token(token_hash, now);
        Ok(())
    }

    #[tracing::instrument(level = "debug", skip_all)]
    async fn set_unlock(
        &self,
        id: &TokenId,
        unlock: Option<Unlock>,
        audit: &[AuditEntry],
    ) -> StoreResult<()> {
        let mut tx = self.begin_write().await?;
        sqlx::query("UPDATE access_tokens SET unlock_time = $1, unlock_expires = $2 WHERE id = $3")
            .bind(unlock.map(|u| u.time))
            .bind(unlock.map(|u| u.expires))
            .bind(id)
            .execute(&mut *tx)
            .await?;
        append_tx::<DB>(&mut tx, audit).await?;
        tx.commit().await?;
        self.cache.clear();
        Ok(())
    }

    #[tracing::instrument(level = "debug", skip_all)]
    async fn set_token_expiry(&self, id: &TokenId, expires_at: i64, audit: &[AuditEntry]) -> StoreResult<()> {
        let mut tx = self.begin_write().await?;
        sqlx::query("UPDATE access_tokens SET expires_at = $1 WHERE id = $2 AND revoked_at IS NULL")
            .bind(expires_at)
            .bind(id)
            .execute(&mut *tx)
            .await?;
        append_tx::<DB>(&mut tx, audit).await?;
        tx.commit().await?;
        self.cache.clear();
        Ok(())
    }
}
