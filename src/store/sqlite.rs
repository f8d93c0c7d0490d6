//! The embedded SQLite backend: WAL mode, a busy timeout, migrations from migrations/sqlite.

use std::{str::FromStr, time::Duration};

use anyhow::Context;
use async_trait::async_trait;
use serde_json::Value;
use sqlx::{
    sqlite::{SqliteConnectOptions, SqliteJournalMode, SqlitePoolOptions, SqliteRow, SqliteSynchronous},
    Row, SqlitePool,
};

use super::*;

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

/// The file path of a `sqlite://PATH[?query]` URL.
pub fn sqlite_path(url: &str) -> String {
    let rest = url.trim_start_matches("sqlite:").trim_start_matches("//");
    rest.split('?').next().unwrap_or_default().to_string()
}

fn json_list(v: Option<String>) -> StoreResult<Option<Vec<String>>> {
    v.map(|s| serde_json::from_str(&s).context("stored JSON list")).transpose().map_err(StoreError::Other)
}

fn to_json<T: serde::Serialize>(v: &Option<T>) -> Option<String> {
    v.as_ref().and_then(|v| serde_json::to_string(v).ok())
}

fn unique_violation(e: sqlx::Error, what: &str) -> StoreError {
    match &e {
        sqlx::Error::Database(db) if db.is_unique_violation() => StoreError::Conflict(what.into()),
        _ => e.into(),
    }
}

fn user_from_row(r: &SqliteRow) -> StoreResult<User> {
    Ok(User {
        id: r.try_get("id")?,
        email: r.try_get("email")?,
        name_first: r.try_get("name_first")?,
        name_last: r.try_get("name_last")?,
        password_hash: r.try_get("password_hash")?,
        totp_secret_enc: r.try_get("totp_secret_enc")?,
        totp_last_step: r.try_get("totp_last_step")?,
        service_admin: r.try_get("service_admin")?,
        is_active: r.try_get("is_active")?,
        timezone: r.try_get("timezone")?,
        locale: r.try_get("locale")?,
        allowed_coins: json_list(Some(r.try_get("allowed_coins")?))?.unwrap_or_default(),
        created_at: r.try_get("created_at")?,
        password_updated_at: r.try_get("password_updated_at")?,
        last_login: r.try_get("last_login")?,
    })
}

fn token_from_row(r: &SqliteRow) -> StoreResult<TokenRecord> {
    let limits: Option<String> = r.try_get("spending_limits")?;
    Ok(TokenRecord {
        id: r.try_get("id")?,
        token_hash: r.try_get("token_hash")?,
        user_id: r.try_get("user_id")?,
        kind: TokenKind::parse(r.try_get::<&str, _>("kind")?),
        label: r.try_get("label")?,
        scopes: json_list(Some(r.try_get("scopes")?))?.unwrap_or_default(),
        created_at: r.try_get("created_at")?,
        expires_at: r.try_get("expires_at")?,
        revoked_at: r.try_get("revoked_at")?,
        ip: r.try_get("ip")?,
        ip_restrict: json_list(r.try_get("ip_restrict")?)?,
        enterprise: r.try_get("enterprise")?,
        is_extensible: r.try_get("is_extensible")?,
        admin: r.try_get("admin")?,
        spending_limits: limits
            .map(|s| serde_json::from_str::<Value>(&s))
            .transpose()
            .map_err(|e| StoreError::Other(e.into()))?,
        permitted_wallets: json_list(r.try_get("permitted_wallets")?)?,
        permitted_enterprises: json_list(r.try_get("permitted_enterprises")?)?,
        origin: r.try_get("origin")?,
        parent_id: r.try_get("parent_id")?,
    })
}

/// One record of [`SqliteStore::wallets_by_ids`]'s packed answer.
fn unpack_wallet(packed: &str) -> StoreResult<WalletRow> {
    let mut f = packed.splitn(12, '\u{1f}');
    let mut next =
        || f.next().ok_or_else(|| StoreError::Other(anyhow::anyhow!("malformed packed wallet row")));
    let opt = |s: &str| (!s.is_empty()).then(|| s.to_string());
    let id = next()?.to_string();
    let coin = next()?.to_string();
    let enterprise = opt(next()?);
    let deleted = next()? != "0";
    let user_ids = next()?.split(',').filter(|s| !s.is_empty()).map(str::to_string).collect();
    let balances = Balances {
        balance: opt(next()?),
        confirmed: opt(next()?),
        spendable: opt(next()?),
        staking: opt(next()?),
        reward: opt(next()?),
        withdraw_hold_usd: opt(next()?),
    };
    let record = next()?.to_string();
    Ok(WalletRow { id, coin, enterprise, deleted, user_ids, record, balances })
}

fn count_row(r: &SqliteRow) -> StoreResult<(u32, Option<i64>)> {
    let n: i64 = r.try_get(0)?;
    Ok((u32::try_from(n).unwrap_or(u32::MAX), r.try_get(1)?))
}

#[async_trait]
impl Store for SqliteStore {
    async fn ping(&self) -> StoreResult<()> {
        sqlx::query("SELECT 1").execute(&self.pool).await?;
        Ok(())
    }

    async fn close(&self) {
        self.pool.close().await;
    }

    async fn insert_user(&self, u: &User) -> StoreResult<()> {
        sqlx::query(
            "INSERT INTO users (id, email, name_first, name_last, password_hash, totp_secret_enc, \
             totp_last_step, service_admin, is_active, timezone, locale, allowed_coins, created_at, \
             password_updated_at, last_login) VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?,?,?)",
        )
        .bind(&u.id)
        .bind(&u.email)
        .bind(&u.name_first)
        .bind(&u.name_last)
        .bind(&u.password_hash)
        .bind(&u.totp_secret_enc)
        .bind(u.totp_last_step)
        .bind(u.service_admin)
        .bind(u.is_active)
        .bind(&u.timezone)
        .bind(&u.locale)
        .bind(serde_json::to_string(&u.allowed_coins).unwrap_or_else(|_| "[]".into()))
        .bind(u.created_at)
        .bind(u.password_updated_at)
        .bind(u.last_login)
        .execute(&self.pool)
        .await
        .map_err(|e| unique_violation(e, "a user with this email"))?;
        Ok(())
    }

    async fn user_by_id(&self, id: &str) -> StoreResult<Option<User>> {
        let row = sqlx::query("SELECT * FROM users WHERE id = ?").bind(id).fetch_optional(&self.pool).await?;
        row.as_ref().map(user_from_row).transpose()
    }

    async fn user_by_email(&self, email: &str) -> StoreResult<Option<User>> {
        let row =
            sqlx::query("SELECT * FROM users WHERE email = ?").bind(email).fetch_optional(&self.pool).await?;
        row.as_ref().map(user_from_row).transpose()
    }

    async fn advance_totp_step(&self, user_id: &str, step: i64) -> StoreResult<bool> {
        let res = sqlx::query(
            "UPDATE users SET totp_last_step = ? WHERE id = ? \
             AND (totp_last_step IS NULL OR totp_last_step < ?)",
        )
        .bind(step)
        .bind(user_id)
        .bind(step)
        .execute(&self.pool)
        .await?;
        Ok(res.rows_affected() == 1)
    }

    async fn set_last_login(&self, user_id: &str, at: i64) -> StoreResult<()> {
        sqlx::query("UPDATE users SET last_login = ? WHERE id = ?")
            .bind(at)
            .bind(user_id)
            .execute(&self.pool)
            .await?;
        Ok(())
    }

    async fn insert_enterprise(&self, e: &Enterprise) -> StoreResult<()> {
        sqlx::query("INSERT INTO enterprises (id, name, created_at) VALUES (?,?,?)")
            .bind(&e.id)
            .bind(&e.name)
            .bind(e.created_at)
            .execute(&self.pool)
            .await
            .map_err(|e| unique_violation(e, "an enterprise with this id"))?;
        Ok(())
    }

    async fn enterprise_by_id(&self, id: &str) -> StoreResult<Option<Enterprise>> {
        let row = sqlx::query("SELECT id, name, created_at FROM enterprises WHERE id = ?")
            .bind(id)
            .fetch_optional(&self.pool)
            .await?;
        Ok(match row {
            Some(r) => Some(Enterprise {
                id: r.try_get("id")?,
                name: r.try_get("name")?,
                created_at: r.try_get("created_at")?,
            }),
            None => None,
        })
    }

    async fn upsert_membership(&self, enterprise_id: &str, user_id: &str, is_admin: bool) -> StoreResult<()> {
        sqlx::query(
            "INSERT INTO enterprise_users (enterprise_id, user_id, is_admin) VALUES (?,?,?) \
             ON CONFLICT (enterprise_id, user_id) DO UPDATE SET is_admin = excluded.is_admin",
        )
        .bind(enterprise_id)
        .bind(user_id)
        .bind(is_admin)
        .execute(&self.pool)
        .await?;
        Ok(())
    }

    async fn memberships(&self, user_id: &str) -> StoreResult<Vec<Membership>> {
        let rows = sqlx::query(
            "SELECT e.id, e.name, e.created_at, m.is_admin FROM enterprise_users m \
             JOIN enterprises e ON e.id = m.enterprise_id WHERE m.user_id = ? ORDER BY e.name, e.id",
        )
        .bind(user_id)
        .fetch_all(&self.pool)
        .await?;
        rows.iter()
            .map(|r| {
                Ok(Membership {
                    enterprise: Enterprise {
                        id: r.try_get("id")?,
                        name: r.try_get("name")?,
                        created_at: r.try_get("created_at")?,
                    },
                    is_admin: r.try_get("is_admin")?,
                })
            })
            .collect()
    }

    async fn insert_token(&self, t: &TokenRecord) -> StoreResult<()> {
        sqlx::query(
            "INSERT INTO access_tokens (id, token_hash, user_id, kind, label, scopes, created_at, \
             expires_at, revoked_at, ip, ip_restrict, enterprise, is_extensible, admin, \
             spending_limits, permitted_wallets, permitted_enterprises, origin, parent_id) \
             VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?)",
        )
        .bind(&t.id)
        .bind(&t.token_hash)
        .bind(&t.user_id)
        .bind(t.kind.as_str())
        .bind(&t.label)
        .bind(serde_json::to_string(&t.scopes).unwrap_or_else(|_| "[]".into()))
        .bind(t.created_at)
        .bind(t.expires_at)
        .bind(t.revoked_at)
        .bind(&t.ip)
        .bind(to_json(&t.ip_restrict))
        .bind(&t.enterprise)
        .bind(t.is_extensible)
        .bind(t.admin)
        .bind(to_json(&t.spending_limits))
        .bind(to_json(&t.permitted_wallets))
        .bind(to_json(&t.permitted_enterprises))
        .bind(&t.origin)
        .bind(&t.parent_id)
        .execute(&self.pool)
        .await
        .map_err(|e| unique_violation(e, "a token with this id"))?;
        Ok(())
    }

    async fn token_by_hash(&self, token_hash: &str) -> StoreResult<Option<TokenRecord>> {
        let row = sqlx::query("SELECT * FROM access_tokens WHERE token_hash = ?")
            .bind(token_hash)
            .fetch_optional(&self.pool)
            .await?;
        row.as_ref().map(token_from_row).transpose()
    }

    async fn insert_template(&self, t: &TokenTemplate) -> StoreResult<()> {
        sqlx::query("INSERT INTO token_templates (id, fields, created_at) VALUES (?,?,?)")
            .bind(&t.id)
            .bind(t.fields.to_string())
            .bind(t.created_at)
            .execute(&self.pool)
            .await
            .map_err(|e| unique_violation(e, "a template with this id"))?;
        Ok(())
    }

    async fn template_by_id(&self, id: &str) -> StoreResult<Option<TokenTemplate>> {
        let row = sqlx::query("SELECT id, fields, created_at FROM token_templates WHERE id = ?")
            .bind(id)
            .fetch_optional(&self.pool)
            .await?;
        Ok(match row {
            Some(r) => Some(TokenTemplate {
                id: r.try_get("id")?,
                fields: serde_json::from_str(r.try_get::<&str, _>("fields")?)
                    .map_err(|e| StoreError::Other(e.into()))?,
                created_at: r.try_get("created_at")?,
            }),
            None => None,
        })
    }

    async fn upsert_wallets(&self, rows: &[WalletRow]) -> StoreResult<(u64, u64)> {
        let mut tx = self.pool.begin().await?;
        let ids: Vec<&str> = rows.iter().map(|r| r.id.as_str()).collect();
        let existing: Vec<String> =
            sqlx::query_scalar("SELECT id FROM wallets WHERE id IN (SELECT value FROM json_each(?))")
                .bind(serde_json::to_string(&ids).map_err(|e| StoreError::Other(e.into()))?)
                .fetch_all(&mut *tx)
                .await?;
        let existing: std::collections::HashSet<String> = existing.into_iter().collect();
        let now = crate::ids::now();
        let (mut inserted, mut updated) = (0, 0);
        let mut seen = std::collections::HashSet::new();
        for w in rows {
            let b = &w.balances;
            sqlx::query(
                "INSERT INTO wallets (id, coin, enterprise, deleted, user_ids, record, balance, \
                 confirmed_balance, spendable_balance, staking_balance, reward_balance, \
                 withdraw_hold_usd, updated_at) VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?) \
                 ON CONFLICT (id) DO UPDATE SET coin = excluded.coin, enterprise = excluded.enterprise, \
                 deleted = excluded.deleted, user_ids = excluded.user_ids, record = excluded.record, \
                 balance = COALESCE(excluded.balance, wallets.balance), \
                 confirmed_balance = COALESCE(excluded.confirmed_balance, wallets.confirmed_balance), \
                 spendable_balance = COALESCE(excluded.spendable_balance, wallets.spendable_balance), \
                 staking_balance = COALESCE(excluded.staking_balance, wallets.staking_balance), \
                 reward_balance = COALESCE(excluded.reward_balance, wallets.reward_balance), \
                 withdraw_hold_usd = COALESCE(excluded.withdraw_hold_usd, wallets.withdraw_hold_usd), \
                 updated_at = excluded.updated_at",
            )
            .bind(&w.id)
            .bind(&w.coin)
            .bind(&w.enterprise)
            .bind(w.deleted)
            .bind(w.user_ids.join(","))
            .bind(&w.record)
            .bind(&b.balance)
            .bind(&b.confirmed)
            .bind(&b.spendable)
            .bind(&b.staking)
            .bind(&b.reward)
            .bind(&b.withdraw_hold_usd)
            .bind(now)
            .execute(&mut *tx)
            .await?;
            if existing.contains(&w.id) || !seen.insert(w.id.as_str()) {
                updated += 1;
            } else {
                inserted += 1;
            }
        }
        tx.commit().await?;
        Ok((inserted, updated))
    }

    async fn wallets_by_ids(&self, ids: &[String], include_deleted: bool) -> StoreResult<Vec<WalletRow>> {
        // One row for the whole answer: SQLite joins the fields with unit (0x1F) and record
        // (0x1E) separators. Per-row decoding was most of a 1000-id lookup's time; the
        // separators cannot occur inside the values (hex ids, digits, and serde_json's JSON
        // text, which escapes every control character).
        let sql = format!(
            "SELECT group_concat(id || char(31) || coin || char(31) || IFNULL(enterprise, '') || char(31) \
             || deleted || char(31) || user_ids || char(31) || IFNULL(balance, '') || char(31) \
             || IFNULL(confirmed_balance, '') || char(31) || IFNULL(spendable_balance, '') || char(31) \
             || IFNULL(staking_balance, '') || char(31) || IFNULL(reward_balance, '') || char(31) \
             || IFNULL(withdraw_hold_usd, '') || char(31) || record, char(30)) \
             FROM wallets WHERE id IN (SELECT value FROM json_each(?)){}",
            if include_deleted { "" } else { " AND deleted = 0" }
        );
        let packed: Option<String> = sqlx::query_scalar(&sql)
            .bind(serde_json::to_string(ids).map_err(|e| StoreError::Other(e.into()))?)
            .fetch_one(&self.pool)
            .await?;
        let Some(packed) = packed else { return Ok(Vec::new()) };
        packed.split('\u{1e}').map(unpack_wallet).collect()
    }

    async fn update_wallet_balances(&self, id: &str, b: &Balances) -> StoreResult<Option<WalletRow>> {
        let res = sqlx::query(
            "UPDATE wallets SET balance = COALESCE(?, balance), \
             confirmed_balance = COALESCE(?, confirmed_balance), \
             spendable_balance = COALESCE(?, spendable_balance), \
             staking_balance = COALESCE(?, staking_balance), reward_balance = COALESCE(?, reward_balance), \
             withdraw_hold_usd = COALESCE(?, withdraw_hold_usd), updated_at = ? WHERE id = ?",
        )
        .bind(&b.balance)
        .bind(&b.confirmed)
        .bind(&b.spendable)
        .bind(&b.staking)
        .bind(&b.reward)
        .bind(&b.withdraw_hold_usd)
        .bind(crate::ids::now())
        .bind(id)
        .execute(&self.pool)
        .await?;
        if res.rows_affected() == 0 {
            return Ok(None);
        }
        Ok(self.wallets_by_ids(&[id.to_string()], true).await?.pop())
    }

    async fn record_login_failure(&self, email: &str, ip: &str, at: i64) -> StoreResult<()> {
        sqlx::query("INSERT INTO login_failures (email, ip, at) VALUES (?,?,?)")
            .bind(email)
            .bind(ip)
            .bind(at)
            .execute(&self.pool)
            .await?;
        Ok(())
    }

    async fn login_failures_by_email(&self, email: &str, since: i64) -> StoreResult<(u32, Option<i64>)> {
        let r = sqlx::query("SELECT COUNT(*), MIN(at) FROM login_failures WHERE email = ? AND at > ?")
            .bind(email)
            .bind(since)
            .fetch_one(&self.pool)
            .await?;
        count_row(&r)
    }

    async fn login_failures_by_ip(&self, ip: &str, since: i64) -> StoreResult<(u32, Option<i64>)> {
        let r = sqlx::query("SELECT COUNT(*), MIN(at) FROM login_failures WHERE ip = ? AND at > ?")
            .bind(ip)
            .bind(since)
            .fetch_one(&self.pool)
            .await?;
        count_row(&r)
    }

    async fn clear_login_failures(&self, email: &str, before: i64) -> StoreResult<()> {
        sqlx::query("DELETE FROM login_failures WHERE email = ? OR at <= ?")
            .bind(email)
            .bind(before)
            .execute(&self.pool)
            .await?;
        Ok(())
    }
}
