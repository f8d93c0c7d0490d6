//! The audit log (docs/decisions.md#token-and-session-lifecycle): an append-only hash chain. Entries are appended inside the
//! transaction of the change they record ([`append_tx`]); each one's `hash` is SHA-256 over the
//! previous entry's hash and the entry's canonical JSON ([`chain_hash`]). Appends lock the
//! chain head (`audit_head`, a row lock on PostgreSQL, the write lock on SQLite), so the chain
//! stays linear with several processes.

use async_trait::async_trait;
use custodian_macros::sql_bounds;

use sqlx::FromRow;

use super::sql::{json_value, parse_stored, to_json, Dialect};
use super::sql_store::SqlStore;
use super::StoreResult;
use crate::model::audit::{chain_hash, AuditEntry, AuditType, ChainedEntry};
use crate::types::AnyId;
use crate::types::{EnterpriseId, TokenId, UserId, WalletId};

/// Which entries a reader asks for, and which it may see.
#[derive(Debug, Clone, Default)]
pub struct AuditFilter {
    pub entry_type: Option<AuditType>,
    pub user_id: Option<UserId>,
    pub enterprise_id: Option<EnterpriseId>,
    pub wallet_id: Option<WalletId>,
    /// Unix milliseconds, inclusive.
    pub date_gte_ms: Option<i64>,
    /// Unix milliseconds, exclusive.
    pub date_lt_ms: Option<i64>,
    /// `None`: every entry (service admins); else only entries of this user, or of these
    /// enterprises.
    pub visible_to: Option<(UserId, Vec<EnterpriseId>)>,
}

/// The audit log.
#[async_trait]
pub trait AuditStore: Send + Sync {
    /// Appends entries in a transaction of their own (for events that change nothing else,
    /// such as a failed login).
    async fn append_audit(&self, entries: &[AuditEntry]) -> StoreResult<()>;
    /// Entries matching `filter`, newest first, older than the entry `before_id`, at most
    /// `limit`.
    async fn list_audit(
        &self,
        filter: &AuditFilter,
        before_id: Option<&AnyId>,
        limit: u32,
    ) -> StoreResult<Vec<ChainedEntry>>;
    /// Entries in chain order after `after_seq`, at most `limit`, with their stored hashes.
    async fn audit_chain(&self, after_seq: i64, limit: u32) -> StoreResult<Vec<ChainedEntry>>;
}

/// Appends `entries` to the chain inside `tx`, the transaction of the change they record.
#[sql_bounds]
pub(super) async fn append_tx<DB>(tx: &mut DB::Connection, entries: &[AuditEntry]) -> StoreResult<()>
where
    for<'r> (String,): FromRow<'r, DB::Row>,
{
    append_refs_tx::<DB>(tx, &entries.iter().collect::<Vec<_>>()).await
}

/// Audit entries per multi-row insert: 11 parameters each, under every engine's limit.
const AUDIT_ROWS_PER_STATEMENT: usize = 50;

/// [`append_tx`] of entries held elsewhere (a batch's, gathered from its items): the head
/// locked once, the entries inserted in multi-row statements, the head moved once.
#[sql_bounds]
pub(super) async fn append_refs_tx<DB>(tx: &mut DB::Connection, entries: &[&AuditEntry]) -> StoreResult<()>
where
    for<'r> (String,): FromRow<'r, DB::Row>,
{
    if entries.is_empty() {
        return Ok(());
    }
    let (mut prev,): (String,) = sqlx::query_as(DB::LOCK_AUDIT_HEAD).fetch_one(&mut *tx).await?;
    for chunk in entries.chunks(AUDIT_ROWS_PER_STATEMENT) {
        let values: Vec<String> =
            (0..chunk.len()).map(|i| format!("({})", DB::row_params(i * 11 + 1, 11))).collect();
        let sql = format!(
            "INSERT INTO audit_log (id, date, type, user_id, enterprise_id, wallet_id, ip, token_id, \
             request_id, data, hash) VALUES {}",
            values.join(", ")
        );
        let mut q = sqlx::query(&sql);
        for e in chunk {
            let hash = chain_hash(&prev, e);
            q = q.bind(e.id.as_str()).bind(e.date_ms).bind(e.entry_type.as_str()).bind(e.user_id.as_deref());
            q = q.bind(e.enterprise_id.as_deref()).bind(e.wallet_id.as_deref()).bind(e.ip.as_deref());
            q = q.bind(e.token_id.as_deref()).bind(e.request_id.as_deref()).bind(to_json(&e.data)?);
            q = q.bind(hash.clone());
            prev = hash;
        }
        q.execute(&mut *tx).await?;
    }
    sqlx::query("UPDATE audit_head SET hash = $1 WHERE id = 1").bind(prev).execute(&mut *tx).await?;
    Ok(())
}

#[derive(FromRow)]
pub(super) struct AuditRow {
    seq: i64,
    id: AnyId,
    date: i64,
    #[sqlx(rename = "type")]
    entry_type: String,
    user_id: Option<UserId>,
    enterprise_id: Option<EnterpriseId>,
    wallet_id: Option<WalletId>,
    ip: Option<String>,
    token_id: Option<TokenId>,
    request_id: Option<String>,
    data: String,
    hash: String,
}

impl AuditRow {
    fn into_chained(self) -> StoreResult<ChainedEntry> {
        Ok(ChainedEntry {
            seq: self.seq,
            hash: self.hash,
            entry: AuditEntry {
                id: self.id,
                date_ms: self.date,
                entry_type: parse_stored(&self.entry_type, "audit entry type")?,
                user_id: self.user_id,
                enterprise_id: self.enterprise_id,
                wallet_id: self.wallet_id,
                ip: self.ip,
                token_id: self.token_id,
                request_id: self.request_id,
                data: json_value(&self.data)?,
            },
        })
    }
}

const AUDIT_COLUMNS: &str =
    "seq, id, date, type, user_id, enterprise_id, wallet_id, ip, token_id, request_id, data, hash";

#[sql_bounds]
#[async_trait]
impl<DB> AuditStore for SqlStore<DB>
where
    for<'r> (String,): FromRow<'r, DB::Row>,
    for<'r> AuditRow: FromRow<'r, DB::Row>,
{
    #[tracing::instrument(level = "debug", skip_all)]
    async fn append_audit(&self, entries: &[AuditEntry]) -> StoreResult<()> {
        let mut tx = self.begin_write().await?;
        append_tx::<DB>(&mut tx, entries).await?;
        tx.commit().await?;
        Ok(())
    }

    #[tracing::instrument(level = "debug", skip_all)]
    async fn list_audit(
        &self,
        filter: &AuditFilter,
        before_id: Option<&AnyId>,
        limit: u32,
    ) -> StoreResult<Vec<ChainedEntry>> {
        let before_id = before_id.map(AnyId::as_str);
        let (me, enterprises) = match &filter.visible_to {
            Some((me, es)) => (Some(me.as_str()), to_json(es)?),
            None => (None, "[]".to_string()),
        };
        let sql = format!(
            "SELECT {AUDIT_COLUMNS} FROM audit_log WHERE ($1 IS NULL OR type = $1) \
             AND ($2 IS NULL OR user_id = $2) AND ($3 IS NULL OR enterprise_id = $3) \
             AND ($4 IS NULL OR wallet_id = $4) AND ($5 IS NULL OR date >= $5) \
             AND ($6 IS NULL OR date < $6) \
             AND ($7 IS NULL OR user_id = $7 OR enterprise_id IN ({})) \
             AND ($8 IS NULL OR seq < (SELECT seq FROM audit_log WHERE id = $8)) \
             ORDER BY seq DESC LIMIT $9",
            DB::json_text_elements(10)
        );
        let rows: Vec<AuditRow> = sqlx::query_as(&sql)
            .bind(filter.entry_type.map(AuditType::as_str))
            .bind(filter.user_id.as_deref())
            .bind(filter.enterprise_id.as_deref())
            .bind(filter.wallet_id.as_deref())
            .bind(filter.date_gte_ms)
            .bind(filter.date_lt_ms)
            .bind(me)
            .bind(before_id)
            .bind(i64::from(limit))
            .bind(enterprises)
            .fetch_all(&self.pool)
            .await?;
        rows.into_iter().map(AuditRow::into_chained).collect()
    }

    #[tracing::instrument(level = "debug", skip_all)]
    async fn audit_chain(&self, after_seq: i64, limit: u32) -> StoreResult<Vec<ChainedEntry>> {
        let sql = format!("SELECT {AUDIT_COLUMNS} FROM audit_log WHERE seq > $1 ORDER BY seq LIMIT $2");
        let rows: Vec<AuditRow> =
            sqlx::query_as(&sql).bind(after_seq).bind(i64::from(limit)).fetch_all(&self.pool).await?;
        rows.into_iter().map(AuditRow::into_chained).collect()
    }
}

#[cfg(test)]
mod tests {
    use crate::model::audit::AuditType;

    #[test]
    fn docs_list_every_audit_type() {
        let doc = include_str!("../../docs/audit.md");
        for t in AuditType::ALL {
            assert!(doc.contains(&format!("`{}`", t.as_str())), "docs/audit.md lacks {}", t.as_str());
        }
    }
}
