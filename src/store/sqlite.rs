//! The embedded SQLite backend: WAL mode, a busy timeout, migrations from migrations/sqlite,
//! and SQLite's spelling of the statements that differ ([`Dialect`]).

use std::{future::Future, str::FromStr, time::Duration};

use anyhow::Context;
use sqlx::{
    sqlite::{SqliteConnectOptions, SqliteJournalMode, SqlitePoolOptions, SqliteSynchronous},
    Pool, Sqlite, Transaction,
};

use super::{group_commit, read_cache, Dialect, SqlStore};

/// A SQLite database file shared by a connection pool.
pub type SqliteStore = SqlStore<Sqlite>;

static MIGRATOR: sqlx::migrate::Migrator = sqlx::migrate!("migrations/sqlite");

/// Bytes of the database file each connection reads through a memory map (SQLite's
/// `mmap_size`); beyond it, reads copy pages as before.
const MMAP_SIZE: u64 = 1 << 30;

impl SqlStore<Sqlite> {
    /// Opens `sqlite://PATH`, creating the file and its folder, applies migrations, and starts
    /// the hot-path helpers ([`SqlStore::start`]).
    pub async fn open(url: &str, config: &crate::config::Config) -> anyhow::Result<Self> {
        let path = crate::config::sqlite_path(url);
        create_private(&path)?;
        let opts = SqliteConnectOptions::from_str(url)
            .with_context(|| format!("invalid SQLite URL {url:?}"))?
            .create_if_missing(true)
            .journal_mode(SqliteJournalMode::Wal)
            .synchronous(SqliteSynchronous::Normal)
            .busy_timeout(Duration::from_secs(config.sqlite_busy_timeout))
            .foreign_keys(true)
            // Reads map the file instead of copying each page through read(2) into every
            // connection's own small page cache: a 1,000-wallet lookup touches over a
            // thousand pages (docs/decisions.md#performance-as-the-data-grows). Address space, not memory: the pages are the
            // kernel's page cache, shared by the connections.
            .pragma("mmap_size", MMAP_SIZE.to_string())
            // A statement journal or a sort that outgrows its cache spills into memory, not
            // into a temporary file made and unlinked (about 50 a second under load).
            .pragma("temp_store", "memory");
        let pool = SqlitePoolOptions::new()
            .max_connections(8)
            // A connection to a local file does not go stale, and the check before each use
            // is a round trip to the connection's thread (docs/decisions.md#performance).
            .test_before_acquire(false)
            .connect_with(opts)
            .await
            .with_context(|| format!("cannot open SQLite database {path}"))?;
        MIGRATOR.run(&pool).await.context("applying migrations")?;
        let steps = (
            group_commit::write_owned::<Sqlite>,
            read_cache::read_version::<Sqlite>,
            super::replay::insert_batch::<Sqlite>,
        );
        Ok(Self::start(pool, config, steps))
    }
}

/// Waits until the SQLite database at `url` can be written, at most `bound`: a write lock held
/// by another process (a busy server) is waited out, trying every 200 ms, and `on_wait` is
/// called once when the first try finds it held. Nothing to wait for when the file does not
/// exist yet. Errors: still locked after `bound`; the file cannot be opened.
pub async fn wait_for_write_lock(url: &str, bound: Duration, on_wait: impl FnOnce()) -> anyhow::Result<()> {
    use sqlx::{ConnectOptions, Connection};
    let path = crate::config::sqlite_path(url);
    if !std::path::Path::new(&path).exists() {
        return Ok(());
    }
    let opts = SqliteConnectOptions::from_str(url)?.busy_timeout(Duration::ZERO);
    let mut conn = opts.connect().await.with_context(|| format!("cannot open SQLite database {path}"))?;
    let deadline = tokio::time::Instant::now() + bound;
    let mut on_wait = Some(on_wait);
    loop {
        match sqlx::query("BEGIN IMMEDIATE").execute(&mut conn).await {
            Ok(_) => {
                sqlx::query("ROLLBACK").execute(&mut conn).await?;
                break;
            }
            Err(sqlx::Error::Database(e)) if e.code().as_deref() == Some("5") => {
                if let Some(f) = on_wait.take() {
                    f();
                }
                anyhow::ensure!(
                    tokio::time::Instant::now() < deadline,
                    "the database {path} stayed locked by another process for {} s (cli_lock_wait)",
                    bound.as_secs()
                );
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
            Err(e) => return Err(e.into()),
        }
    }
    conn.close().await?;
    Ok(())
}

impl Dialect for Sqlite {
    fn row_params(_first: usize, n: usize) -> String {
        vec!["?"; n].join(", ")
    }

    /// WAL with synchronous=NORMAL already commits without a flush.
    const RELAXED_COMMIT: Option<&'static str> = None;

    const VACUUM_OUTBOX: Option<&'static str> = None;

    const EXISTING_WALLET_IDS: &'static str =
        "SELECT id FROM wallets WHERE id IN (SELECT value FROM json_each($1))";

    /// One primary-key search per requested id, in request order: `json_each` drives the join
    /// (an `IN` over it built a temporary B-tree of the ids first). `concat` sizes each packed
    /// record once, where a chain of `||` copied the growing prefix at every step; not
    /// `concat_ws`, as this SQLite's drops the separator before an empty value (docs/decisions.md#performance-as-the-data-grows).
    const WALLETS_PACKED: &'static str = "SELECT group_concat(concat(w.id, char(31), w.coin, char(31), \
        w.enterprise, char(31), CASE WHEN w.deleted THEN '1' ELSE '0' END, char(31), w.user_ids, \
        char(31), w.balance, char(31), w.confirmed_balance, char(31), w.spendable_balance, char(31), \
        w.staking_balance, char(31), w.reward_balance, char(31), w.withdraw_hold_usd, char(31), \
        w.record), char(30)) \
        FROM json_each($1) AS j CROSS JOIN wallets AS w ON w.id = j.value WHERE ($2 OR NOT w.deleted)";

    /// One writer at a time: the subquery and update are one atomic statement.
    const CLAIM_DUE_ALL: &'static str = "UPDATE notifications SET state = 'pending', lease_until = $1, \
        updated_at = $2 WHERE id IN (SELECT n.id FROM notifications n JOIN webhooks w ON w.id = n.webhook_id \
        WHERE n.state IN ('new', 'pending') AND n.next_attempt_at <= $2 AND n.lease_until < $2 \
        AND w.state = 'active' \
        ORDER BY n.next_attempt_at LIMIT $3) RETURNING *";

    const CLAIM_DUE_SKIPPING: &'static str = "UPDATE notifications SET state = 'pending', lease_until = $1, \
        updated_at = $2 WHERE id IN (SELECT n.id FROM notifications n JOIN webhooks w ON w.id = n.webhook_id \
        WHERE n.state IN ('new', 'pending') AND n.next_attempt_at <= $2 AND n.lease_until < $2 \
        AND w.state = 'active' \
        AND w.id NOT IN (SELECT value FROM json_each($4)) \
        AND COALESCE(w.enterprise_id, '') NOT IN (SELECT value FROM json_each($5)) \
        AND (w.enterprise_id IS NOT NULL OR w.user_id NOT IN (SELECT value FROM json_each($6))) \
        ORDER BY n.next_attempt_at LIMIT $3) RETURNING *";

    /// Without `INDEXED BY` the planner walks all of the webhook's notifications, delivered
    /// ones too, and sorts them.
    const RELEASE_RETRIES: &'static str = "UPDATE notifications SET next_attempt_at = $1 WHERE id IN \
        (SELECT id FROM notifications INDEXED BY notifications_claimable \
        WHERE state IN ('new', 'pending') AND next_attempt_at > $1 AND webhook_id = $2 \
        AND state = 'pending' AND lease_until <= $1 ORDER BY next_attempt_at LIMIT $3)";

    const WEBHOOKS_BY_IDS: &'static str =
        "SELECT * FROM webhooks WHERE id IN (SELECT value FROM json_each($1))";

    const DEFER: &'static str = "UPDATE notifications SET next_attempt_at = $1, lease_until = 0 \
        WHERE id IN (SELECT value FROM json_each($2))";

    const FINISH: &'static str = "UPDATE notifications SET state = $1, retries = retries + $2, \
        lease_until = 0, updated_at = $3 WHERE id IN (SELECT value FROM json_each($4))";

    /// One writer at a time already (`BEGIN IMMEDIATE`).
    const SHARES_RATE_BUCKETS: bool = false;

    const SERIALIZE_WEBHOOK_INSERTS: Option<&'static str> = None;

    /// One writer at a time already (`BEGIN IMMEDIATE`): a read is enough.
    const LOCK_WALLET: &'static str = "SELECT id FROM wallets WHERE id = $1";
    const LOCK_TOKEN: &'static str = "SELECT id FROM access_tokens WHERE id = $1";
    const LOCK_AUDIT_HEAD: &'static str = "SELECT hash FROM audit_head WHERE id = 1";

    fn json_text_elements(param: usize) -> String {
        format!("SELECT value FROM json_each(${param})")
    }

    fn json_text_field(column: &str, key: &str) -> String {
        format!("json_extract({column}, '$.{key}')")
    }

    fn rows_affected(r: &Self::QueryResult) -> u64 {
        r.rows_affected()
    }

    const SERIALIZE_WRITES: bool = true;

    /// Half the pool (8): a connection to a local file does not go stale while it waits.
    const READ_LANE: usize = 4;

    /// `BEGIN IMMEDIATE` takes the write lock at once: a deferred transaction that reads first
    /// fails with SQLITE_BUSY instead of waiting when another writer got in between.
    fn begin_write(
        pool: &Pool<Self>,
    ) -> impl Future<Output = sqlx::Result<Transaction<'static, Self>>> + Send {
        pool.begin_with("BEGIN IMMEDIATE")
    }

    fn begin_write_on(
        conn: &mut Self::Connection,
    ) -> impl Future<Output = sqlx::Result<Transaction<'_, Self>>> + Send {
        sqlx::Connection::begin_with(conn, "BEGIN IMMEDIATE")
    }
}

/// Creates the database file (0600) and its folder (0700) when missing, so that only the
/// service's user can read them; existing ones keep their modes. SQLite gives its `-wal` and
/// `-shm` files the database file's mode.
fn create_private(path: &str) -> anyhow::Result<()> {
    let path = std::path::Path::new(path);
    if path.as_os_str().is_empty() || path == std::path::Path::new(":memory:") {
        return Ok(());
    }
    if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty() && !d.exists()) {
        crate::private_fs::create_private_dir(dir)
            .with_context(|| format!("cannot create database folder {}", dir.display()))?;
    }
    if !path.exists() {
        let mut opts = std::fs::OpenOptions::new();
        opts.write(true).create(true).truncate(false);
        #[cfg(unix)]
        {
            use std::os::unix::fs::OpenOptionsExt;
            opts.mode(0o600);
        }
        opts.open(path).with_context(|| format!("cannot create database file {}", path.display()))?;
    }
    Ok(())
}
