//! The embedded SQLite backend: WAL mode, a busy timeout, migrations from migrations/sqlite.

use std::{str::FromStr, time::Duration};

use anyhow::Context;
use serde_json::Value;
use sqlx::{
    sqlite::{SqliteConnectOptions, SqliteJournalMode, SqlitePoolOptions, SqliteSynchronous},
    Row, SqlitePool,
};

use super::{sql::*, *};

/// A SQLite database file shared by a connection pool.
pub struct SqliteStore {
    pool: SqlitePool,
}

static MIGRATOR: sqlx::migrate::Migrator = sqlx::migrate!("migrations/sqlite");

impl SqliteStore {
    /// Opens `sqlite://PATH`, creating the file and its folder, and applies migrations.
    pub async fn open(url: &str) -> anyhow::Result<Self> {
        let path = sqlite_path(url);
        if let Some(dir) = std::path::Path::new(&path).parent() {
            if !dir.as_os_str().is_empty() {
                std::fs::create_dir_all(dir)
                    .with_context(|| format!("cannot create database folder {}", dir.display()))?;
            }
        }
        let opts = SqliteConnectOptions::from_str(url)
            .with_context(|| format!("invalid SQLite URL {url:?}"))?
            .create_if_missing(true)
            .journal_mode(SqliteJournalMode::Wal)
            .synchronous(SqliteSynchronous::Normal)
            .busy_timeout(Duration::from_secs(5))
            .foreign_keys(true);
        let pool = SqlitePoolOptions::new()
            .max_connections(8)
            .connect_with(opts)
            .await
            .with_context(|| format!("cannot open SQLite database {path}"))?;
        MIGRATOR.run(&pool).await.context("applying migrations")?;
        Ok(Self { pool })
    }
}

impl SqliteStore {
    /// WAL with synchronous=NORMAL already commits without a flush.
    const RELAXED_COMMIT: &'static str = "";

    /// The shared statements are written in SQLite's dialect already.
    fn q(sql: &str) -> String {
        sql.to_string()
    }

    /// A transaction that takes the write lock at once (`BEGIN IMMEDIATE`): a deferred one that
    /// reads first fails with SQLITE_BUSY instead of waiting when another writer got in between.
    async fn write_tx(&self) -> Result<sqlx::Transaction<'static, sqlx::Sqlite>, sqlx::Error> {
        self.pool.begin_with("BEGIN IMMEDIATE").await
    }
}

/// The file path of a `sqlite://PATH[?query]` URL.
pub fn sqlite_path(url: &str) -> String {
    let rest = url.trim_start_matches("sqlite:").trim_start_matches("//");
    rest.split('?').next().unwrap_or_default().to_string()
}

sql_store!(SqliteStore, sqlx::Sqlite);
