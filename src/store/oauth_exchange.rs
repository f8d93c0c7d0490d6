//! One OAuth token exchange's writes ([`super::oauth::OAuthStore::exchange_oauth`]), inside the
//! caller's transaction: the grant's row first (the lock order `store/oauth.rs` states), the
//! code or refresh token used once, the new refresh token and access token, their audit.

use custodian_macros::sql_bounds;
use sqlx::FromRow;

use super::{audit::append_tx, sql::Dialect, StoreError, StoreResult};
use crate::model::audit::AuditEntry;
use crate::types::AnyId;

/// What using a code or a refresh token came to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Redeemed<T> {
    /// First use: what it was issued with.
    Fresh(T),
    /// Used before: the grant it belongs to, to be revoked.
    Reused(AnyId),
    /// Unknown or expired.
    Invalid,
}

/// What an exchange uses: an authorization code or a refresh token, by its SHA-256.
#[derive(Debug, Clone, Copy)]
pub enum Redeem<'a> {
    Code(&'a str),
    RefreshToken(&'a str),
}

/// One token exchange's writes ([`OAuthStore::exchange_oauth`]).
#[derive(Debug)]
pub struct Exchange<'a> {
    pub redeem: Redeem<'a>,
    /// The grant the code or refresh token belongs to (as read before).
    pub grant: &'a AnyId,
    /// Unix seconds.
    pub now: i64,
    /// The new refresh token's SHA-256, and when it expires (Unix seconds).
    pub refresh_hash: &'a str,
    pub refresh_expires_at: i64,
    pub token: &'a crate::model::token::TokenRecord,
    pub audit: &'a [AuditEntry],
}

/// Writes exchange `e` in `tx`; nothing when the grant is revoked (`Invalid`) or the code or
/// refresh token is unknown, expired (`Invalid`) or used (`Reused`): the caller commits only
/// `Fresh`.
#[sql_bounds]
pub(super) async fn exchange<DB>(tx: &mut DB::Connection, e: &Exchange<'_>) -> StoreResult<Redeemed<()>>
where
    for<'r> (String,): FromRow<'r, DB::Row>,
    for<'r> (String, Option<i64>): FromRow<'r, DB::Row>,
    Vec<u8>: sqlx::Type<DB>,
{
    // The grant's row first (see the module's lock order).
    let live = sqlx::query("UPDATE oauth_grants SET last_used_at = $2 WHERE id = $1 AND revoked_at IS NULL")
        .bind(e.grant.as_str())
        .bind(e.now)
        .execute(&mut *tx)
        .await?;
    if DB::rows_affected(&live) != 1 {
        return Ok(Redeemed::Invalid);
    }
    let (table, column, hash) = match e.redeem {
        Redeem::Code(hash) => ("oauth_codes", "code_hash", hash),
        Redeem::RefreshToken(hash) => ("oauth_refresh_tokens", "token_hash", hash),
    };
    let used = sqlx::query(&format!(
        "UPDATE {table} SET used_at = $2 WHERE {column} = $1 AND grant_id = $3 AND used_at IS NULL \
         AND expires_at > $2"
    ))
    .bind(hash)
    .bind(e.now)
    .bind(e.grant.as_str())
    .execute(&mut *tx)
    .await?;
    if DB::rows_affected(&used) != 1 {
        let row: Option<(String, Option<i64>)> =
            sqlx::query_as(&format!("SELECT grant_id, used_at FROM {table} WHERE {column} = $1"))
                .bind(hash)
                .fetch_optional(&mut *tx)
                .await?;
        return Ok(match row {
            Some((grant, Some(_))) => {
                Redeemed::Reused(grant.parse().map_err(|e: &str| StoreError::malformed("grant id", e))?)
            }
            _ => Redeemed::Invalid,
        });
    }
    sqlx::query(
        "INSERT INTO oauth_refresh_tokens (token_hash, grant_id, created_at, expires_at) VALUES ($1, $2, $3, $4)",
    )
    .bind(e.refresh_hash)
    .bind(e.grant.as_str())
    .bind(e.now)
    .bind(e.refresh_expires_at)
    .execute(&mut *tx)
    .await?;
    super::tokens::insert_token_row::<DB>(tx, e.token).await?;
    append_tx::<DB>(tx, e.audit).await?;
    Ok(Redeemed::Fresh(()))
}
