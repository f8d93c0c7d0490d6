//! The PostgreSQL backend (also for PostgreSQL-compatible distributed SQL engines): a pool with a
//! configurable size, statement timeout and TLS mode, migrations from migrations/postgres, and
//! delivery claims with `FOR UPDATE SKIP LOCKED` so that many processes share the outbox.

use std::{str::FromStr, time::Duration};

use anyhow::Context;
use serde_json::Value;
use sqlx::{
    postgres::{PgConnectOptions, PgPoolOptions, PgSslMode},
    PgPool, Row,
};

use super::{sql::*, *};
use crate::config::PostgresConfig;

/// A PostgreSQL database shared by a connection pool.
pub struct PostgresStore {
    pool: PgPool,
}

static MIGRATOR: sqlx::migrate::Migrator = sqlx::migrate!("migrations/postgres");

impl PostgresStore {
    /// Connects to `postgres://...` with `cfg`'s pool settings and applies migrations (under
    /// sqlx's advisory lock, so processes starting together do not race).
    pub async fn open(url: &str, cfg: &PostgresConfig) -> anyhow::Result<Self> {
        let mut opts = PgConnectOptions::from_str(url).context("invalid PostgreSQL URL")?;
        if let Some(mode) = &cfg.sslmode {
            opts = opts.ssl_mode(
                PgSslMode::from_str(mode).map_err(|_| anyhow::anyhow!("invalid sslmode {mode:?}"))?,
            );
        }
        opts = opts.options([("statement_timeout", format!("{}s", cfg.statement_timeout))]);
        let pool = PgPoolOptions::new()
            .max_connections(cfg.max_connections)
            .acquire_timeout(Duration::from_secs(10))
            .connect_with(opts)
            .await
            .context("cannot connect to PostgreSQL")?;
        MIGRATOR.run(&pool).await.context("applying migrations")?;
        Ok(Self { pool })
    }

    const RELAXED_COMMIT: &'static str = "SET LOCAL synchronous_commit = off";

    /// Adapts a shared statement: `$n` placeholders and PostgreSQL's spellings of the few
    /// SQLite-isms the shared SQL uses.
    fn q(sql: &str) -> String {
        let sql = sql
            .replace("SELECT value FROM json_each(?)", "SELECT json_array_elements_text(CAST(? AS json))")
            .replace("group_concat(", "string_agg(")
            .replace("char(31)", "chr(31)")
            .replace("char(30)", "chr(30)")
            // The claim: lock due rows with SKIP LOCKED, and update them through the primary key
            // (an IN over the subquery makes the planner scan the whole table).
            .replace(
                "WHERE id IN (SELECT n.id FROM notifications n",
                "WHERE id = ANY(ARRAY(SELECT n.id FROM notifications n",
            )
            .replace("/*SKIP_LOCKED*/)", "FOR UPDATE OF n SKIP LOCKED))");
        let mut out = String::with_capacity(sql.len() + 16);
        let mut n = 0;
        let mut in_string = false;
        for c in sql.chars() {
            match c {
                '\'' => {
                    in_string = !in_string;
                    out.push(c);
                }
                '?' if !in_string => {
                    n += 1;
                    out.push('$');
                    out.push_str(&n.to_string());
                }
                _ => out.push(c),
            }
        }
        out
    }

    async fn write_tx(&self) -> Result<sqlx::Transaction<'static, sqlx::Postgres>, sqlx::Error> {
        self.pool.begin().await
    }
}

sql_store!(PostgresStore, sqlx::Postgres);

#[cfg(test)]
mod tests {
    use super::PostgresStore;

    #[test]
    fn statements_are_adapted() {
        assert_eq!(
            PostgresStore::q("SELECT a FROM t WHERE b = ? AND c IN (SELECT value FROM json_each(?)) AND d = '?'"),
            "SELECT a FROM t WHERE b = $1 AND c IN (SELECT json_array_elements_text(CAST($2 AS json))) AND d = '?'"
        );
    }
}
