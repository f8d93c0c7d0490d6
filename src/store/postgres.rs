//! The PostgreSQL backend (also for PostgreSQL-compatible distributed SQL engines): a pool with a
//! configurable size, statement timeout and TLS mode, migrations from migrations/postgres, and
//! PostgreSQL's spelling of the statements that differ ([`Dialect`]), among them delivery claims
//! with `FOR UPDATE SKIP LOCKED` so that many processes share the outbox.

use std::{future::Future, str::FromStr, time::Duration};

use anyhow::Context;
use sqlx::{
    postgres::{PgConnectOptions, PgConnection, PgPoolOptions, PgSslMode},
    Connection, Pool, Postgres, Transaction,
};

use super::{group_commit, read_cache, Dialect, SqlStore};
use crate::config::Config;

/// A PostgreSQL database shared by a connection pool.
pub type PostgresStore = SqlStore<Postgres>;

static MIGRATOR: sqlx::migrate::Migrator = sqlx::migrate!("migrations/postgres");

impl SqlStore<Postgres> {
    /// Connects to `postgres://...` with `config.postgres`'s pool settings, applies migrations
    /// (under sqlx's advisory lock, so processes starting together do not race), and starts
    /// the hot-path helpers ([`SqlStore::start`]).
    pub async fn open(url: &str, config: &Config) -> anyhow::Result<Self> {
        let cfg = &config.postgres;
        let mut opts = PgConnectOptions::from_str(url).context("invalid PostgreSQL URL")?;
        if let Some(mode) = &cfg.sslmode {
            opts = opts.ssl_mode(
                PgSslMode::from_str(mode).map_err(|_| anyhow::anyhow!("invalid sslmode {mode:?}"))?,
            );
        }
        // Migrations may rebuild an index over a large table: no statement timeout for them.
        let mut migrating =
            PgConnection::connect_with(&opts).await.context("cannot connect to PostgreSQL")?;
        MIGRATOR.run(&mut migrating).await.context("applying migrations")?;
        let _ = migrating.close().await;
        opts = opts.options([("statement_timeout", format!("{}s", cfg.statement_timeout))]);
        let pool = PgPoolOptions::new()
            .max_connections(cfg.max_connections)
            .acquire_timeout(Duration::from_millis(cfg.acquire_timeout_ms))
            .connect_with(opts)
            .await
            .context("cannot connect to PostgreSQL")?;
        let steps = (
            group_commit::write_owned::<Postgres>,
            read_cache::read_version::<Postgres>,
            super::replay::insert_batch::<Postgres>,
        );
        Ok(Self::start(pool, config, steps))
    }
}

impl Dialect for Postgres {
    const RELAXED_COMMIT: Option<&'static str> = Some("SET LOCAL synchronous_commit = off");

    const VACUUM_OUTBOX: Option<&'static str> = Some("VACUUM (ANALYZE) notifications");

    const EXISTING_WALLET_IDS: &'static str =
        "SELECT id FROM wallets WHERE id IN (SELECT json_array_elements_text(CAST($1 AS json)))";

    const WALLETS_PACKED: &'static str = "SELECT string_agg(id || chr(31) || coin || chr(31) \
        || COALESCE(enterprise, '') || chr(31) || CASE WHEN deleted THEN '1' ELSE '0' END || chr(31) \
        || user_ids || chr(31) || COALESCE(balance, '') || chr(31) || COALESCE(confirmed_balance, '') \
        || chr(31) || COALESCE(spendable_balance, '') || chr(31) || COALESCE(staking_balance, '') \
        || chr(31) || COALESCE(reward_balance, '') || chr(31) || COALESCE(withdraw_hold_usd, '') \
        || chr(31) || record, chr(30)) \
        FROM wallets WHERE id IN (SELECT json_array_elements_text(CAST($1 AS json))) AND ($2 OR NOT deleted)";

    /// Locks the due rows with `SKIP LOCKED` so concurrent processes lease disjoint sets, and
    /// updates them through the primary key (an `IN` over the subquery makes the planner scan
    /// the whole table).
    const CLAIM_DUE_ALL: &'static str = "UPDATE notifications SET state = 'pending', lease_until = $1, \
        updated_at = $2 WHERE id = ANY(ARRAY(SELECT n.id FROM notifications n \
        JOIN webhooks w ON w.id = n.webhook_id WHERE n.state IN ('new', 'pending') \
        AND n.next_attempt_at <= $2 AND n.lease_until < $2 AND w.state = 'active' \
        ORDER BY n.next_attempt_at LIMIT $3 FOR UPDATE OF n SKIP LOCKED)) RETURNING *";

    const CLAIM_DUE_SKIPPING: &'static str = "UPDATE notifications SET state = 'pending', lease_until = $1, \
        updated_at = $2 WHERE id = ANY(ARRAY(SELECT n.id FROM notifications n \
        JOIN webhooks w ON w.id = n.webhook_id WHERE n.state IN ('new', 'pending') \
        AND n.next_attempt_at <= $2 AND n.lease_until < $2 AND w.state = 'active' \
        AND w.id NOT IN (SELECT json_array_elements_text(CAST($4 AS json))) \
        AND COALESCE(w.enterprise_id, '') NOT IN (SELECT json_array_elements_text(CAST($5 AS json))) \
        AND (w.enterprise_id IS NOT NULL OR w.user_id NOT IN (SELECT json_array_elements_text(CAST($6 AS json)))) \
        ORDER BY n.next_attempt_at LIMIT $3 FOR UPDATE OF n SKIP LOCKED)) RETURNING *";

    const RELEASE_RETRIES: &'static str = "UPDATE notifications SET next_attempt_at = $1 \
        WHERE id = ANY(ARRAY(SELECT id FROM notifications \
        WHERE state IN ('new', 'pending') AND next_attempt_at > $1 AND webhook_id = $2 \
        AND state = 'pending' AND lease_until <= $1 ORDER BY next_attempt_at LIMIT $3))";

    const WEBHOOKS_BY_IDS: &'static str =
        "SELECT * FROM webhooks WHERE id IN (SELECT json_array_elements_text(CAST($1 AS json)))";

    const DEFER: &'static str = "UPDATE notifications SET next_attempt_at = $1, lease_until = 0 \
        WHERE id IN (SELECT json_array_elements_text(CAST($2 AS json)))";

    const FINISH: &'static str = "UPDATE notifications SET state = $1, retries = retries + $2, \
        lease_until = 0, updated_at = $3 WHERE id IN (SELECT json_array_elements_text(CAST($4 AS json)))";

    /// A transaction-scoped advisory lock: concurrent inserts would otherwise all pass the counts.
    const SHARES_RATE_BUCKETS: bool = true;

    const SERIALIZE_WEBHOOK_INSERTS: Option<&'static str> = Some("SELECT pg_advisory_xact_lock(7421001)");

    const LOCK_WALLET: &'static str = "SELECT id FROM wallets WHERE id = $1 FOR UPDATE";
    const LOCK_TOKEN: &'static str = "SELECT id FROM access_tokens WHERE id = $1 FOR UPDATE";
    const LOCK_AUDIT_HEAD: &'static str = "SELECT hash FROM audit_head WHERE id = 1 FOR UPDATE";

    fn json_text_elements(param: usize) -> String {
        format!("SELECT json_array_elements_text(CAST(${param} AS json))")
    }

    fn json_text_field(column: &str, key: &str) -> String {
        format!("(CAST({column} AS json) ->> '{key}')")
    }

    fn rows_affected(r: &Self::QueryResult) -> u64 {
        r.rows_affected()
    }

    /// Row locks let PostgreSQL's writers proceed side by side.
    const SERIALIZE_WRITES: bool = false;

    /// None: a connection kept aside would miss the pool's checks after a server restart.
    const READ_LANE: usize = 0;

    fn begin_write(
        pool: &Pool<Self>,
    ) -> impl Future<Output = sqlx::Result<Transaction<'static, Self>>> + Send {
        pool.begin()
    }

    fn begin_write_on(
        conn: &mut Self::Connection,
    ) -> impl Future<Output = sqlx::Result<Transaction<'_, Self>>> + Send {
        sqlx::Connection::begin(conn)
    }
}
