//! Passkeys and the WebAuthn ceremonies awaiting an answer (`passkeys`,
//! `webauthn_challenges`). A challenge is taken (deleted and returned) in one statement, so it
//! is answered once across every process.

use async_trait::async_trait;
use custodian_macros::sql_bounds;
use sqlx::FromRow;

use super::{sql::Dialect, sql_store::SqlStore, StoreResult};
use crate::model::{
    audit::AuditEntry,
    passkey::{ChallengePurpose, PasskeyRecord, PendingChallenge},
};
use crate::types::{AnyId, UserId};

/// What keeping a challenge came to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ChallengeKept {
    Kept,
    /// `max` challenges wait already, across clients.
    Full,
    /// This client holds `max_per_client` already.
    ClientFull,
}

/// What adding a passkey came to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PasskeyAdded {
    Added,
    /// The user has `max` passkeys already.
    Full,
    /// Another passkey (of anyone) has this credential id.
    Duplicate,
}

#[async_trait]
pub trait PasskeyStore: Send + Sync {
    /// The user's passkeys, oldest first.
    async fn passkeys(&self, user: &UserId) -> StoreResult<Vec<PasskeyRecord>>;
    /// Keeps `p` unless the user has `max` already or its credential id is taken, with `audit`.
    async fn add_passkey(
        &self,
        p: &PasskeyRecord,
        max: usize,
        audit: &[AuditEntry],
    ) -> StoreResult<PasskeyAdded>;
    /// Stores a passkey's credential as it is after a use (its counter), and when (Unix s).
    async fn record_passkey_use(&self, id: &AnyId, credential: &str, now: i64) -> StoreResult<()>;
    /// Removes the user's passkey `id`, with `audit`; `false` when they have none so named.
    async fn remove_passkey(&self, user: &UserId, id: &AnyId, audit: &[AuditEntry]) -> StoreResult<bool>;
    /// Removes all the user's passkeys, with `audit`; how many there were.
    async fn remove_passkeys(&self, user: &UserId, audit: &[AuditEntry]) -> StoreResult<u64>;
    /// Keeps a challenge, after dropping expired ones, unless `max` unexpired challenges wait
    /// already or its client holds `max_per_client`.
    async fn keep_challenge(
        &self,
        c: &PendingChallenge,
        max: usize,
        max_per_client: usize,
        now: i64,
    ) -> StoreResult<ChallengeKept>;
    /// Takes (removes and returns) the challenge, if it is kept and has not expired at `now`.
    async fn take_challenge(&self, challenge: &str, now: i64) -> StoreResult<Option<PendingChallenge>>;
}

type PasskeyRow = (String, String, String, String, String, i64, Option<i64>);

fn passkey(row: PasskeyRow) -> StoreResult<PasskeyRecord> {
    let (id, user_id, credential_id, label, credential, created_at, last_used_at) = row;
    let parse = |what: &str, e: &str| super::StoreError::Other(anyhow::anyhow!("stored passkey {what}: {e}"));
    Ok(PasskeyRecord {
        id: id.parse().map_err(|e| parse("id", e))?,
        user_id: user_id.parse().map_err(|e| parse("user", e))?,
        credential_id,
        label,
        credential,
        created_at,
        last_used_at,
    })
}

const PASSKEY_COLUMNS: &str = "id, user_id, credential_id, label, credential, created_at, last_used_at";

#[sql_bounds]
#[async_trait]
impl<DB> PasskeyStore for SqlStore<DB>
where
    for<'r> (i64,): FromRow<'r, DB::Row>,
    for<'r> (String,): FromRow<'r, DB::Row>,
    for<'r> PasskeyRow: FromRow<'r, DB::Row>,
    for<'r> (String, String, Option<String>, String, i64, String): FromRow<'r, DB::Row>,
{
    async fn passkeys(&self, user: &UserId) -> StoreResult<Vec<PasskeyRecord>> {
        let sql =
            format!("SELECT {PASSKEY_COLUMNS} FROM passkeys WHERE user_id = $1 ORDER BY created_at, id");
        let rows: Vec<PasskeyRow> = sqlx::query_as(&sql).bind(user.as_str()).fetch_all(&self.pool).await?;
        rows.into_iter().map(passkey).collect()
    }

    async fn add_passkey(
        &self,
        p: &PasskeyRecord,
        max: usize,
        audit: &[AuditEntry],
    ) -> StoreResult<PasskeyAdded> {
        let mut tx = self.begin_write().await?;
        let (count,): (i64,) = sqlx::query_as("SELECT COUNT(*) FROM passkeys WHERE user_id = $1")
            .bind(p.user_id.as_str())
            .fetch_one(&mut *tx)
            .await?;
        if usize::try_from(count).unwrap_or(usize::MAX) >= max {
            return Ok(PasskeyAdded::Full);
        }
        let sql = format!(
            "INSERT INTO passkeys ({PASSKEY_COLUMNS}) VALUES ($1, $2, $3, $4, $5, $6, $7) \
             ON CONFLICT (credential_id) DO NOTHING"
        );
        let done = sqlx::query(&sql)
            .bind(p.id.as_str())
            .bind(p.user_id.as_str())
            .bind(p.credential_id.as_str())
            .bind(p.label.as_str())
            .bind(p.credential.as_str())
            .bind(p.created_at)
            .bind(p.last_used_at)
            .execute(&mut *tx)
            .await?;
        if DB::rows_affected(&done) == 0 {
            return Ok(PasskeyAdded::Duplicate);
        }
        super::audit::append_tx::<DB>(&mut tx, audit).await?;
        tx.commit().await?;
        Ok(PasskeyAdded::Added)
    }

    async fn record_passkey_use(&self, id: &AnyId, credential: &str, now: i64) -> StoreResult<()> {
        let mut tx = self.begin_write().await?;
        sqlx::query("UPDATE passkeys SET credential = $2, last_used_at = $3 WHERE id = $1")
            .bind(id.as_str())
            .bind(credential)
            .bind(now)
            .execute(&mut *tx)
            .await?;
        tx.commit().await?;
        Ok(())
    }

    async fn remove_passkey(&self, user: &UserId, id: &AnyId, audit: &[AuditEntry]) -> StoreResult<bool> {
        let mut tx = self.begin_write().await?;
        let done = sqlx::query("DELETE FROM passkeys WHERE user_id = $1 AND id = $2")
            .bind(user.as_str())
            .bind(id.as_str())
            .execute(&mut *tx)
            .await?;
        if DB::rows_affected(&done) == 0 {
            return Ok(false);
        }
        super::audit::append_tx::<DB>(&mut tx, audit).await?;
        tx.commit().await?;
        Ok(true)
    }

    async fn remove_passkeys(&self, user: &UserId, audit: &[AuditEntry]) -> StoreResult<u64> {
        let mut tx = self.begin_write().await?;
        let done = sqlx::query("DELETE FROM passkeys WHERE user_id = $1")
            .bind(user.as_str())
            .execute(&mut *tx)
            .await?;
        super::audit::append_tx::<DB>(&mut tx, audit).await?;
        tx.commit().await?;
        Ok(DB::rows_affected(&done))
    }

    async fn keep_challenge(
        &self,
        c: &PendingChallenge,
        max: usize,
        max_per_client: usize,
        now: i64,
    ) -> StoreResult<ChallengeKept> {
        let mut tx = self.begin_write().await?;
        sqlx::query("DELETE FROM webauthn_challenges WHERE expires_at <= $1")
            .bind(now)
            .execute(&mut *tx)
            .await?;
        let (waiting,): (i64,) =
            sqlx::query_as("SELECT COUNT(*) FROM webauthn_challenges").fetch_one(&mut *tx).await?;
        let (mine,): (i64,) = sqlx::query_as("SELECT COUNT(*) FROM webauthn_challenges WHERE client = $1")
            .bind(c.client.as_str())
            .fetch_one(&mut *tx)
            .await?;
        let at = |n: i64, cap: usize| usize::try_from(n).unwrap_or(usize::MAX) >= cap;
        let refused = if at(mine, max_per_client) {
            Some(ChallengeKept::ClientFull)
        } else if at(waiting, max) {
            Some(ChallengeKept::Full)
        } else {
            None
        };
        if let Some(r) = refused {
            tx.commit().await?;
            return Ok(r);
        }
        sqlx::query(
            "INSERT INTO webauthn_challenges (challenge, purpose, user_id, state, expires_at, client) \
             VALUES ($1, $2, $3, $4, $5, $6)",
        )
        .bind(c.challenge.as_str())
        .bind(c.purpose.as_str())
        .bind(c.user_id.as_ref().map(|u| u.as_str()))
        .bind(c.state.as_str())
        .bind(c.expires_at)
        .bind(c.client.as_str())
        .execute(&mut *tx)
        .await?;
        tx.commit().await?;
        Ok(ChallengeKept::Kept)
    }

    async fn take_challenge(&self, challenge: &str, now: i64) -> StoreResult<Option<PendingChallenge>> {
        let mut tx = self.begin_write().await?;
        let row: Option<(String, String, Option<String>, String, i64, String)> = sqlx::query_as(
            "DELETE FROM webauthn_challenges WHERE challenge = $1 \
             RETURNING challenge, purpose, user_id, state, expires_at, client",
        )
        .bind(challenge)
        .fetch_optional(&mut *tx)
        .await?;
        tx.commit().await?;
        Ok(row.and_then(|(challenge, purpose, user_id, state, expires_at, client)| {
            Some(PendingChallenge {
                challenge,
                purpose: ChallengePurpose::parse(&purpose)?,
                user_id: match user_id {
                    Some(u) => Some(u.parse().ok()?),
                    None => None,
                },
                state,
                expires_at,
                client,
            })
            .filter(|c| c.expires_at > now)
        }))
    }
}
