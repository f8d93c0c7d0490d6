//! The SQL both backends share. Statements are written once, in the SQLite dialect with `?`
//! placeholders, and each backend's `q()` adapts them (PostgreSQL: `$n` placeholders and a few
//! function names). [`sql_store!`] implements [`super::Store`] for a backend type that provides:
//! `pool`, `fn q(&str) -> String`, `async fn write_tx(&self)` and `const RELAXED_COMMIT: &str`
//! (a statement that lets a transaction commit without waiting for the disk, or "").

use anyhow::Context;

use super::*;

pub(crate) fn json_list(v: Option<String>) -> StoreResult<Option<Vec<String>>> {
    v.map(|s| serde_json::from_str(&s).context("stored JSON list")).transpose().map_err(StoreError::Other)
}

pub(crate) fn to_json<T: serde::Serialize>(v: &Option<T>) -> Option<String> {
    v.as_ref().and_then(|v| serde_json::to_string(v).ok())
}

pub(crate) fn unique_violation(e: sqlx::Error, what: &str) -> StoreError {
    match &e {
        sqlx::Error::Database(db) if db.is_unique_violation() => StoreError::Conflict(what.into()),
        _ => e.into(),
    }
}

/// One record of [`SqliteStore::wallets_by_ids`]'s packed answer.
pub(crate) fn unpack_wallet(packed: &str) -> StoreResult<WalletRow> {
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

/// The WHERE clause (with binds, in order) selecting the webhooks of a filter.
pub(crate) fn filter_sql(f: &WebhookFilter) -> (String, Vec<String>) {
    let mut sql = String::from("scope = ?");
    let mut binds = vec![f.scope.clone()];
    for (col, v) in [
        ("wallet_id", &f.wallet_id),
        ("enterprise_id", &f.enterprise_id),
        ("user_id", &f.user_id),
        ("coin", &f.coin),
        ("type", &f.webhook_type),
        ("state", &f.state),
    ] {
        if let Some(v) = v {
            sql.push_str(&format!(" AND {col} = ?"));
            binds.push(v.clone());
        }
    }
    (sql, binds)
}

/// The filter that §8's per-type limit counts within for `w`'s level.
pub(crate) fn limit_filter(w: &Webhook) -> WebhookFilter {
    match w.scope.as_str() {
        "wallet" => {
            WebhookFilter { scope: w.scope.clone(), wallet_id: w.wallet_id.clone(), ..Default::default() }
        }
        "enterprise" => WebhookFilter {
            scope: w.scope.clone(),
            enterprise_id: w.enterprise_id.clone(),
            ..Default::default()
        },
        _ => WebhookFilter {
            scope: w.scope.clone(),
            user_id: Some(w.user_id.clone()),
            coin: w.coin.clone(),
            ..Default::default()
        },
    }
}

/// Implements [`super::Store`] for `$ty`, a store over a `sqlx::Pool<$db>`.
macro_rules! sql_store {
    ($ty:ty, $db:ty) => {
        impl $ty {
    fn user_from_row(r: &<$db as sqlx::Database>::Row) -> StoreResult<User> {
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

    fn token_from_row(r: &<$db as sqlx::Database>::Row) -> StoreResult<TokenRecord> {
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

    fn webhook_from_row(r: &<$db as sqlx::Database>::Row) -> StoreResult<Webhook> {
        let headers: &str = r.try_get("custom_headers")?;
        Ok(Webhook {
            id: r.try_get("id")?,
            scope: r.try_get("scope")?,
            wallet_id: r.try_get("wallet_id")?,
            enterprise_id: r.try_get("enterprise_id")?,
            user_id: r.try_get("user_id")?,
            coin: r.try_get("coin")?,
            webhook_type: r.try_get("type")?,
            url: r.try_get("url")?,
            label: r.try_get("label")?,
            num_confirmations: r.try_get("num_confirmations")?,
            state: r.try_get("state")?,
            successive_failed_attempts: r.try_get("successive_failed_attempts")?,
            failed_attempts_total: r.try_get("failed_attempts_total")?,
            listen_to_failure_states: r.try_get("listen_to_failure_states")?,
            tx_request_states: json_list(Some(r.try_get("tx_request_states")?))?.unwrap_or_default(),
            tx_request_transaction_states: json_list(Some(r.try_get("tx_request_transaction_states")?))?
                .unwrap_or_default(),
            custom_headers: serde_json::from_str(headers).map_err(|e| StoreError::Other(e.into()))?,
            allow_blocked_hosts: r.try_get("allow_blocked_hosts")?,
            created_at: r.try_get("created_at")?,
        })
    }

    fn notification_from_row(r: &<$db as sqlx::Database>::Row) -> StoreResult<Notification> {
        let meta: &str = r.try_get("meta")?;
        Ok(Notification {
            id: r.try_get("id")?,
            webhook_id: r.try_get("webhook_id")?,
            event_id: r.try_get("event_id")?,
            notification_type: r.try_get("type")?,
            state: r.try_get("state")?,
            simulation: r.try_get("simulation")?,
            retries: r.try_get("retries")?,
            payload: r.try_get("payload")?,
            hash: r.try_get("hash")?,
            idempotency_key: r.try_get("idempotency_key")?,
            meta: serde_json::from_str(meta).map_err(|e| StoreError::Other(e.into()))?,
            next_attempt_at: r.try_get("next_attempt_at")?,
            created_at: r.try_get("created_at")?,
            updated_at: r.try_get("updated_at")?,
        })
    }

    async fn insert_notifications_tx(
        tx: &mut sqlx::Transaction<'_, $db>,
        notifications: &[Notification],
    ) -> StoreResult<u64> {
        let mut n = 0;
        for x in notifications {
            let res = sqlx::query(&Self::q("INSERT INTO notifications (id, webhook_id, event_id, type, state, simulation, retries, \
                 payload, hash, idempotency_key, meta, next_attempt_at, lease_until, created_at, updated_at) \
                 VALUES (?,?,?,?,?,?,?,?,?,?,?,?,0,?,?) ON CONFLICT DO NOTHING"),
            )
            .bind(&x.id)
            .bind(&x.webhook_id)
            .bind(&x.event_id)
            .bind(&x.notification_type)
            .bind(&x.state)
            .bind(x.simulation)
            .bind(x.retries)
            .bind(&x.payload)
            .bind(&x.hash)
            .bind(&x.idempotency_key)
            .bind(x.meta.to_string())
            .bind(x.next_attempt_at)
            .bind(x.created_at)
            .bind(x.updated_at)
            .execute(&mut **tx)
            .await?;
            n += res.rows_affected();
        }
        Ok(n)
    }

    fn count_row(r: &<$db as sqlx::Database>::Row) -> StoreResult<(u32, Option<i64>)> {
        let n: i64 = r.try_get(0)?;
        Ok((u32::try_from(n).unwrap_or(u32::MAX), r.try_get(1)?))
    }


        }

        #[async_trait::async_trait]
        impl $crate::store::Store for $ty {
    async fn ping(&self) -> StoreResult<()> {
        sqlx::query(&Self::q("SELECT 1")).execute(&self.pool).await?;
        Ok(())
    }

    async fn close(&self) {
        self.pool.close().await;
    }

    async fn insert_user(&self, u: &User) -> StoreResult<()> {
        sqlx::query(&Self::q("INSERT INTO users (id, email, name_first, name_last, password_hash, totp_secret_enc, \
             totp_last_step, service_admin, is_active, timezone, locale, allowed_coins, created_at, \
             password_updated_at, last_login) VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?,?,?)"),
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
        let row = sqlx::query(&Self::q("SELECT * FROM users WHERE id = ?")).bind(id).fetch_optional(&self.pool).await?;
        row.as_ref().map(Self::user_from_row).transpose()
    }

    async fn user_by_email(&self, email: &str) -> StoreResult<Option<User>> {
        let row =
            sqlx::query(&Self::q("SELECT * FROM users WHERE email = ?")).bind(email).fetch_optional(&self.pool).await?;
        row.as_ref().map(Self::user_from_row).transpose()
    }

    async fn advance_totp_step(&self, user_id: &str, step: i64) -> StoreResult<bool> {
        let res = sqlx::query(&Self::q("UPDATE users SET totp_last_step = ? WHERE id = ? \
             AND (totp_last_step IS NULL OR totp_last_step < ?)"),
        )
        .bind(step)
        .bind(user_id)
        .bind(step)
        .execute(&self.pool)
        .await?;
        Ok(res.rows_affected() == 1)
    }

    async fn set_last_login(&self, user_id: &str, at: i64) -> StoreResult<()> {
        sqlx::query(&Self::q("UPDATE users SET last_login = ? WHERE id = ?"))
            .bind(at)
            .bind(user_id)
            .execute(&self.pool)
            .await?;
        Ok(())
    }

    async fn insert_enterprise(&self, e: &Enterprise) -> StoreResult<()> {
        sqlx::query(&Self::q("INSERT INTO enterprises (id, name, created_at) VALUES (?,?,?)"))
            .bind(&e.id)
            .bind(&e.name)
            .bind(e.created_at)
            .execute(&self.pool)
            .await
            .map_err(|e| unique_violation(e, "an enterprise with this id"))?;
        Ok(())
    }

    async fn enterprise_by_id(&self, id: &str) -> StoreResult<Option<Enterprise>> {
        let row = sqlx::query(&Self::q("SELECT id, name, created_at FROM enterprises WHERE id = ?"))
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
        sqlx::query(&Self::q("INSERT INTO enterprise_users (enterprise_id, user_id, is_admin) VALUES (?,?,?) \
             ON CONFLICT (enterprise_id, user_id) DO UPDATE SET is_admin = excluded.is_admin"),
        )
        .bind(enterprise_id)
        .bind(user_id)
        .bind(is_admin)
        .execute(&self.pool)
        .await?;
        Ok(())
    }

    async fn memberships(&self, user_id: &str) -> StoreResult<Vec<Membership>> {
        let rows = sqlx::query(&Self::q("SELECT e.id, e.name, e.created_at, m.is_admin FROM enterprise_users m \
             JOIN enterprises e ON e.id = m.enterprise_id WHERE m.user_id = ? ORDER BY e.name, e.id"),
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

    async fn insert_token(&self, t: &TokenRecord, notifications: &[Notification]) -> StoreResult<()> {
        let mut tx = self.write_tx().await?;
        sqlx::query(&Self::q("INSERT INTO access_tokens (id, token_hash, user_id, kind, label, scopes, created_at, \
             expires_at, revoked_at, ip, ip_restrict, enterprise, is_extensible, admin, \
             spending_limits, permitted_wallets, permitted_enterprises, origin, parent_id) \
             VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?)"),
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
        .execute(&mut *tx)
        .await
        .map_err(|e| unique_violation(e, "a token with this id"))?;
        Self::insert_notifications_tx(&mut tx, notifications).await?;
        tx.commit().await?;
        Ok(())
    }

    async fn token_by_id(&self, id: &str) -> StoreResult<Option<TokenRecord>> {
        let row = sqlx::query(&Self::q("SELECT * FROM access_tokens WHERE id = ?"))
            .bind(id)
            .fetch_optional(&self.pool)
            .await?;
        row.as_ref().map(Self::token_from_row).transpose()
    }

    async fn token_by_hash(&self, token_hash: &str) -> StoreResult<Option<TokenRecord>> {
        let row = sqlx::query(&Self::q("SELECT * FROM access_tokens WHERE token_hash = ?"))
            .bind(token_hash)
            .fetch_optional(&self.pool)
            .await?;
        row.as_ref().map(Self::token_from_row).transpose()
    }

    async fn insert_template(&self, t: &TokenTemplate) -> StoreResult<()> {
        sqlx::query(&Self::q("INSERT INTO token_templates (id, fields, created_at) VALUES (?,?,?)"))
            .bind(&t.id)
            .bind(t.fields.to_string())
            .bind(t.created_at)
            .execute(&self.pool)
            .await
            .map_err(|e| unique_violation(e, "a template with this id"))?;
        Ok(())
    }

    async fn template_by_id(&self, id: &str) -> StoreResult<Option<TokenTemplate>> {
        let row = sqlx::query(&Self::q("SELECT id, fields, created_at FROM token_templates WHERE id = ?"))
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
        let mut tx = self.write_tx().await?;
        let ids: Vec<&str> = rows.iter().map(|r| r.id.as_str()).collect();
        let existing: Vec<String> =
            sqlx::query_scalar(&Self::q("SELECT id FROM wallets WHERE id IN (SELECT value FROM json_each(?))"))
                .bind(serde_json::to_string(&ids).map_err(|e| StoreError::Other(e.into()))?)
                .fetch_all(&mut *tx)
                .await?;
        let existing: std::collections::HashSet<String> = existing.into_iter().collect();
        let now = crate::ids::now();
        let (mut inserted, mut updated) = (0, 0);
        let mut seen = std::collections::HashSet::new();
        for w in rows {
            let b = &w.balances;
            sqlx::query(&Self::q("INSERT INTO wallets (id, coin, enterprise, deleted, user_ids, record, balance, \
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
                 updated_at = excluded.updated_at"),
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
            "SELECT group_concat(id || char(31) || coin || char(31) || COALESCE(enterprise, '') || char(31) \
             || CASE WHEN deleted THEN '1' ELSE '0' END || char(31) || user_ids || char(31) || COALESCE(balance, '') || char(31) \
             || COALESCE(confirmed_balance, '') || char(31) || COALESCE(spendable_balance, '') || char(31) \
             || COALESCE(staking_balance, '') || char(31) || COALESCE(reward_balance, '') || char(31) \
             || COALESCE(withdraw_hold_usd, '') || char(31) || record, char(30)) \
             FROM wallets WHERE id IN (SELECT value FROM json_each(?)){}",
            if include_deleted { "" } else { " AND NOT deleted" }
        );
        let packed: Option<String> = sqlx::query_scalar(&Self::q(&sql))
            .bind(serde_json::to_string(ids).map_err(|e| StoreError::Other(e.into()))?)
            .fetch_one(&self.pool)
            .await?;
        let Some(packed) = packed else { return Ok(Vec::new()) };
        packed.split('\u{1e}').map(unpack_wallet).collect()
    }

    async fn update_wallet_balances(&self, id: &str, b: &Balances) -> StoreResult<Option<WalletRow>> {
        let res = sqlx::query(&Self::q("UPDATE wallets SET balance = COALESCE(?, balance), \
             confirmed_balance = COALESCE(?, confirmed_balance), \
             spendable_balance = COALESCE(?, spendable_balance), \
             staking_balance = COALESCE(?, staking_balance), reward_balance = COALESCE(?, reward_balance), \
             withdraw_hold_usd = COALESCE(?, withdraw_hold_usd), updated_at = ? WHERE id = ?"),
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

    async fn insert_webhook(&self, w: &Webhook, max_per_type: u32) -> StoreResult<bool> {
        let mut tx = self.write_tx().await?;
        let (where_sql, binds) = filter_sql(&limit_filter(w));
        let sql = format!("SELECT COUNT(*) FROM webhooks WHERE {where_sql} AND type = ?");
        let sql = Self::q(&sql);
        let mut q = sqlx::query_scalar::<_, i64>(&sql);
        for b in &binds {
            q = q.bind(b);
        }
        let count = q.bind(&w.webhook_type).fetch_one(&mut *tx).await?;
        if count >= i64::from(max_per_type) {
            return Ok(false);
        }
        sqlx::query(&Self::q("INSERT INTO webhooks (id, scope, wallet_id, enterprise_id, user_id, coin, type, url, label, \
             num_confirmations, state, listen_to_failure_states, tx_request_states, \
             tx_request_transaction_states, custom_headers, allow_blocked_hosts, created_at) \
             VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?)"),
        )
        .bind(&w.id)
        .bind(&w.scope)
        .bind(&w.wallet_id)
        .bind(&w.enterprise_id)
        .bind(&w.user_id)
        .bind(&w.coin)
        .bind(&w.webhook_type)
        .bind(&w.url)
        .bind(&w.label)
        .bind(w.num_confirmations)
        .bind(&w.state)
        .bind(w.listen_to_failure_states)
        .bind(serde_json::to_string(&w.tx_request_states).unwrap_or_else(|_| "[]".into()))
        .bind(serde_json::to_string(&w.tx_request_transaction_states).unwrap_or_else(|_| "[]".into()))
        .bind(serde_json::to_string(&w.custom_headers).unwrap_or_else(|_| "{}".into()))
        .bind(w.allow_blocked_hosts)
        .bind(w.created_at)
        .execute(&mut *tx)
        .await
        .map_err(|e| unique_violation(e, "a webhook with this id"))?;
        tx.commit().await?;
        Ok(true)
    }

    async fn webhook_by_id(&self, id: &str) -> StoreResult<Option<Webhook>> {
        let row =
            sqlx::query(&Self::q("SELECT * FROM webhooks WHERE id = ?")).bind(id).fetch_optional(&self.pool).await?;
        row.as_ref().map(Self::webhook_from_row).transpose()
    }

    async fn list_webhooks(
        &self,
        filter: &WebhookFilter,
        after_id: Option<&str>,
        limit: u32,
    ) -> StoreResult<Vec<Webhook>> {
        let (where_sql, binds) = filter_sql(filter);
        let sql = format!("SELECT * FROM webhooks WHERE {where_sql} AND id > ? ORDER BY id LIMIT ?");
        let sql = Self::q(&sql);
        let mut q = sqlx::query(&sql);
        for b in &binds {
            q = q.bind(b);
        }
        let rows = q.bind(after_id.unwrap_or("")).bind(i64::from(limit)).fetch_all(&self.pool).await?;
        rows.iter().map(Self::webhook_from_row).collect()
    }

    async fn delete_webhooks(
        &self,
        filter: &WebhookFilter,
        id: Option<&str>,
        type_url: Option<(&str, &str)>,
    ) -> StoreResult<u64> {
        let (mut where_sql, mut binds) = filter_sql(filter);
        if let Some(id) = id {
            where_sql.push_str(" AND id = ?");
            binds.push(id.to_string());
        }
        if let Some((t, u)) = type_url {
            where_sql.push_str(" AND type = ? AND url = ?");
            binds.push(t.to_string());
            binds.push(u.to_string());
        }
        let sql = format!("DELETE FROM webhooks WHERE {where_sql}");
        let sql = Self::q(&sql);
        let mut q = sqlx::query(&sql);
        for b in &binds {
            q = q.bind(b);
        }
        Ok(q.execute(&self.pool).await?.rows_affected())
    }

    async fn unblock_webhook(&self, id: &str, now_ms: i64) -> StoreResult<bool> {
        let res = sqlx::query(&Self::q("UPDATE webhooks SET state = 'active', successive_failed_attempts = 0, failed_attempts_total = 0, \
             counters_reset_at = ? WHERE id = ?"),
        )
        .bind(now_ms)
        .bind(id)
        .execute(&self.pool)
        .await?;
        Ok(res.rows_affected() == 1)
    }

    async fn webhook_secret(&self, enterprise_id: &str) -> StoreResult<Option<WebhookSecret>> {
        let row = sqlx::query(&Self::q("SELECT current_enc, previous_enc, rotated_at FROM webhook_secrets WHERE enterprise_id = ?"),
        )
        .bind(enterprise_id)
        .fetch_optional(&self.pool)
        .await?;
        Ok(match row {
            Some(r) => Some(WebhookSecret {
                current_enc: r.try_get("current_enc")?,
                previous_enc: r.try_get("previous_enc")?,
                rotated_at: r.try_get("rotated_at")?,
            }),
            None => None,
        })
    }

    async fn rotate_webhook_secret(
        &self,
        enterprise_id: &str,
        new_enc: &[u8],
        now: i64,
        min_interval: i64,
    ) -> StoreResult<Rotation> {
        let mut tx = self.write_tx().await?;
        let last: Option<i64> =
            sqlx::query_scalar(&Self::q("SELECT rotated_at FROM webhook_secrets WHERE enterprise_id = ?"))
                .bind(enterprise_id)
                .fetch_optional(&mut *tx)
                .await?;
        if let Some(last) = last {
            if now < last + min_interval {
                return Ok(Rotation::TooSoon(last + min_interval - now));
            }
        }
        sqlx::query(&Self::q("INSERT INTO webhook_secrets (enterprise_id, current_enc, previous_enc, rotated_at) VALUES (?,?,NULL,?) \
             ON CONFLICT (enterprise_id) DO UPDATE SET previous_enc = webhook_secrets.current_enc, \
             current_enc = excluded.current_enc, rotated_at = excluded.rotated_at"),
        )
        .bind(enterprise_id)
        .bind(new_enc)
        .bind(now)
        .execute(&mut *tx)
        .await?;
        tx.commit().await?;
        Ok(Rotation::Done)
    }

    async fn insert_notifications(&self, n: &[Notification]) -> StoreResult<u64> {
        let mut tx = self.write_tx().await?;
        let count = Self::insert_notifications_tx(&mut tx, n).await?;
        tx.commit().await?;
        Ok(count)
    }

    async fn record_event(
        &self,
        event_id: &str,
        body: &str,
        transfer_id: Option<&str>,
        result: &str,
        notifications: &[Notification],
    ) -> StoreResult<Option<String>> {
        let mut tx = self.write_tx().await?;
        let inserted = sqlx::query(&Self::q("INSERT INTO events (event_id, result, body, transfer_id, created_at) VALUES (?,?,?,?,?) \
             ON CONFLICT DO NOTHING"),
        )
        .bind(event_id)
        .bind(result)
        .bind(body)
        .bind(transfer_id)
        .bind(crate::ids::now())
        .execute(&mut *tx)
        .await?
        .rows_affected();
        if inserted == 0 {
            let stored: String = sqlx::query_scalar(&Self::q("SELECT result FROM events WHERE event_id = ?"))
                .bind(event_id)
                .fetch_one(&mut *tx)
                .await?;
            return Ok(Some(stored));
        }
        Self::insert_notifications_tx(&mut tx, notifications).await?;
        tx.commit().await?;
        Ok(None)
    }

    async fn event_by_transfer(&self, transfer_id: &str) -> StoreResult<Option<String>> {
        Ok(sqlx::query_scalar(&Self::q("SELECT body FROM events WHERE transfer_id = ? ORDER BY created_at DESC LIMIT 1"),
        )
        .bind(transfer_id)
        .fetch_optional(&self.pool)
        .await?)
    }

    async fn claim_due(&self, now_ms: i64, lease_until_ms: i64, limit: u32) -> StoreResult<Vec<Claimed>> {
        let rows = sqlx::query(&Self::q("UPDATE notifications SET state = 'pending', lease_until = ?, updated_at = ? WHERE id IN \
             (SELECT n.id FROM notifications n JOIN webhooks w ON w.id = n.webhook_id \
              WHERE n.state IN ('new', 'pending') AND n.next_attempt_at <= ? AND n.lease_until < ? \
              AND w.state = 'active' ORDER BY n.next_attempt_at LIMIT ? /*SKIP_LOCKED*/) RETURNING *"),
        )
        .bind(lease_until_ms)
        .bind(now_ms)
        .bind(now_ms)
        .bind(now_ms)
        .bind(i64::from(limit))
        .fetch_all(&self.pool)
        .await?;
        if rows.is_empty() {
            return Ok(Vec::new());
        }
        let notifications: Vec<Notification> =
            rows.iter().map(Self::notification_from_row).collect::<StoreResult<_>>()?;
        let mut ids: Vec<&str> = notifications.iter().map(|n| n.webhook_id.as_str()).collect();
        ids.sort_unstable();
        ids.dedup();
        let hooks = sqlx::query(&Self::q("SELECT * FROM webhooks WHERE id IN (SELECT value FROM json_each(?))"))
            .bind(serde_json::to_string(&ids).map_err(|e| StoreError::Other(e.into()))?)
            .fetch_all(&self.pool)
            .await?;
        let hooks: std::collections::HashMap<String, Webhook> = hooks
            .iter()
            .map(|r| Self::webhook_from_row(r).map(|w| (w.id.clone(), w)))
            .collect::<StoreResult<_>>()?;
        Ok(notifications
            .into_iter()
            .filter_map(|n| {
                hooks.get(&n.webhook_id).cloned().map(|webhook| Claimed { notification: n, webhook })
            })
            .collect())
    }

    async fn defer(&self, ids: &[String], at_ms: i64) -> StoreResult<()> {
        sqlx::query(&Self::q("UPDATE notifications SET next_attempt_at = ?, lease_until = 0 \
             WHERE id IN (SELECT value FROM json_each(?))"))
        .bind(at_ms)
        .bind(serde_json::to_string(ids).map_err(|e| StoreError::Other(e.into()))?)
        .execute(&self.pool)
        .await?;
        Ok(())
    }

    async fn complete(
        &self,
        outcomes: &[Outcome],
        now_ms: i64,
        rule: SuspendRule,
    ) -> StoreResult<Vec<String>> {
        let mut tx = self.write_tx().await?;
        // An outcome lost in a database crash only means a redelivery (at least once), so it
        // need not wait for a flush to disk (PostgreSQL: synchronous_commit off, this tx only).
        if !Self::RELAXED_COMMIT.is_empty() {
            sqlx::query(Self::RELAXED_COMMIT).execute(&mut *tx).await?;
        }
        // Attempts: multi-row inserts, skipping notifications removed meanwhile (with their webhook).
        for chunk in outcomes.chunks(500) {
            let values = vec!["(?,?,?,?,?,?,?,?)"; chunk.len()].join(",");
            let sql = Self::q(&format!(
                "INSERT INTO delivery_attempts (notification_id, webhook_id, started_at, duration_ms, status_code, \
                 success, response_body, error) SELECT column1, column2, column3, column4, column5, column6, \
                 column7, column8 FROM (VALUES {values}) AS v WHERE EXISTS \
                 (SELECT 1 FROM notifications n WHERE n.id = v.column1)"
            ));
            let mut q = sqlx::query(&sql);
            for o in chunk {
                let a = &o.attempt;
                q = q
                    .bind(&a.notification_id)
                    .bind(&a.webhook_id)
                    .bind(a.started_at)
                    .bind(a.duration_ms)
                    .bind(a.status_code.map(i64::from))
                    .bind(a.success)
                    .bind(&a.response_body)
                    .bind(&a.error);
            }
            q.execute(&mut *tx).await?;
        }
        // Notifications: one statement per final state; retries each have their own time.
        let (mut delivered, mut failed) = (Vec::new(), Vec::new());
        for o in outcomes {
            let id = o.attempt.notification_id.as_str();
            match o.completion {
                Completion::Delivered => delivered.push(id),
                Completion::Failed => failed.push(id),
                Completion::Retry(at) => {
                    sqlx::query(&Self::q("UPDATE notifications SET state = 'pending', retries = retries + 1, \
                         next_attempt_at = ?, lease_until = 0, updated_at = ? WHERE id = ?"))
                    .bind(at)
                    .bind(now_ms)
                    .bind(id)
                    .execute(&mut *tx)
                    .await?;
                }
            }
        }
        for (state, ids, retry_inc) in [("processed", delivered, 0i64), ("failed", failed, 1)] {
            if ids.is_empty() {
                continue;
            }
            sqlx::query(&Self::q("UPDATE notifications SET state = ?, retries = retries + ?, lease_until = 0, \
                 updated_at = ? WHERE id IN (SELECT value FROM json_each(?))"))
            .bind(state)
            .bind(retry_inc)
            .bind(now_ms)
            .bind(serde_json::to_string(&ids).map_err(|e| StoreError::Other(e.into()))?)
            .execute(&mut *tx)
            .await?;
        }
        // Webhook counters, one statement per webhook: failures after its last success in this
        // batch continue (or restart) the successive count.
        let mut counters: Vec<(&str, bool, i64, i64)> = Vec::new();
        for o in outcomes {
            let a = &o.attempt;
            let i = match counters.iter().position(|c| c.0 == a.webhook_id) {
                Some(i) => i,
                None => {
                    counters.push((&a.webhook_id, false, 0, 0));
                    counters.len() - 1
                }
            };
            let c = &mut counters[i];
            if a.success {
                c.1 = true;
                c.2 = 0;
            } else {
                c.2 += 1;
                c.3 += 1;
            }
        }
        let mut failing: Vec<&str> = Vec::new();
        for (id, reset, fails_after, fails) in &counters {
            sqlx::query(&Self::q("UPDATE webhooks SET successive_failed_attempts = CASE WHEN ? THEN ? \
                 ELSE successive_failed_attempts + ? END, failed_attempts_total = failed_attempts_total + ? WHERE id = ?"))
            .bind(*reset)
            .bind(*fails_after)
            .bind(*fails_after)
            .bind(*fails)
            .bind(*id)
            .execute(&mut *tx)
            .await?;
            if *fails > 0 {
                failing.push(id);
            }
        }
        let mut suspended = Vec::new();
        for id in failing {
            let row = sqlx::query(&Self::q("SELECT failed_attempts_total, counters_reset_at, state FROM webhooks WHERE id = ?"),
            )
            .bind(id)
            .fetch_optional(&mut *tx)
            .await?;
            let Some(row) = row else { continue };
            let total: i64 = row.try_get(0)?;
            let reset: i64 = row.try_get(1)?;
            let state: String = row.try_get(2)?;
            if state != "active" {
                continue;
            }
            let since = (now_ms - rule.window_ms).max(reset);
            let recent: i64 = sqlx::query_scalar(&Self::q("SELECT COUNT(*) FROM delivery_attempts WHERE webhook_id = ? AND NOT success AND started_at >= ?"),
            )
            .bind(id)
            .bind(since)
            .fetch_one(&mut *tx)
            .await?;
            if recent >= i64::from(rule.max_in_window) || total >= i64::from(rule.max_total) {
                sqlx::query(&Self::q("UPDATE webhooks SET state = 'suspended' WHERE id = ?"))
                    .bind(id)
                    .execute(&mut *tx)
                    .await?;
                suspended.push(id.to_string());
            }
        }
        tx.commit().await?;
        Ok(suspended)
    }

    async fn notification_by_id(&self, webhook_id: &str, id: &str) -> StoreResult<Option<Notification>> {
        let row = sqlx::query(&Self::q("SELECT * FROM notifications WHERE webhook_id = ? AND id = ?"))
            .bind(webhook_id)
            .bind(id)
            .fetch_optional(&self.pool)
            .await?;
        row.as_ref().map(Self::notification_from_row).transpose()
    }

    async fn list_notifications(
        &self,
        webhook_id: &str,
        state: Option<&str>,
        after_id: Option<&str>,
        limit: u32,
    ) -> StoreResult<Vec<Notification>> {
        let rows = sqlx::query(&Self::q("SELECT * FROM notifications WHERE webhook_id = ? AND (CAST(? AS TEXT) IS NULL OR state = ?) AND id > ? \
             ORDER BY id LIMIT ?"),
        )
        .bind(webhook_id)
        .bind(state)
        .bind(state)
        .bind(after_id.unwrap_or(""))
        .bind(i64::from(limit))
        .fetch_all(&self.pool)
        .await?;
        rows.iter().map(Self::notification_from_row).collect()
    }

    async fn attempts(&self, notification_id: &str) -> StoreResult<Vec<Attempt>> {
        let rows = sqlx::query(&Self::q("SELECT * FROM delivery_attempts WHERE notification_id = ? ORDER BY id"))
            .bind(notification_id)
            .fetch_all(&self.pool)
            .await?;
        rows.iter()
            .map(|r| {
                Ok(Attempt {
                    notification_id: r.try_get("notification_id")?,
                    webhook_id: r.try_get("webhook_id")?,
                    started_at: r.try_get("started_at")?,
                    duration_ms: r.try_get("duration_ms")?,
                    status_code: r
                        .try_get::<Option<i64>, _>("status_code")?
                        .and_then(|c| u16::try_from(c).ok()),
                    success: r.try_get("success")?,
                    response_body: r.try_get("response_body")?,
                    error: r.try_get("error")?,
                })
            })
            .collect()
    }

    async fn resend_notification(
        &self,
        webhook_id: &str,
        id: &str,
        now_ms: i64,
    ) -> StoreResult<Option<Notification>> {
        let res = sqlx::query(&Self::q("UPDATE notifications SET state = 'new', retries = 0, next_attempt_at = ?, lease_until = 0, updated_at = ? \
             WHERE webhook_id = ? AND id = ?"),
        )
        .bind(now_ms)
        .bind(now_ms)
        .bind(webhook_id)
        .bind(id)
        .execute(&self.pool)
        .await?;
        if res.rows_affected() == 0 {
            return Ok(None);
        }
        self.notification_by_id(webhook_id, id).await
    }

    async fn delivery_stats(&self, now_ms: i64) -> StoreResult<DeliveryStats> {
        let r = sqlx::query(&Self::q("SELECT (SELECT COUNT(*) FROM notifications WHERE state IN ('new', 'pending') AND next_attempt_at <= ? AND lease_until < ?), \
             (SELECT COUNT(*) FROM notifications WHERE state = 'pending' AND lease_until >= ?), \
             (SELECT COUNT(*) FROM webhooks WHERE state = 'suspended')"),
        )
        .bind(now_ms)
        .bind(now_ms)
        .bind(now_ms)
        .fetch_one(&self.pool)
        .await?;
        Ok(DeliveryStats { due: r.try_get(0)?, in_flight: r.try_get(1)?, suspended_webhooks: r.try_get(2)? })
    }

    async fn record_login_failure(&self, email: &str, ip: &str, at: i64) -> StoreResult<()> {
        sqlx::query(&Self::q("INSERT INTO login_failures (email, ip, at) VALUES (?,?,?)"))
            .bind(email)
            .bind(ip)
            .bind(at)
            .execute(&self.pool)
            .await?;
        Ok(())
    }

    async fn login_failures_by_email(&self, email: &str, since: i64) -> StoreResult<(u32, Option<i64>)> {
        let r = sqlx::query(&Self::q("SELECT COUNT(*), MIN(at) FROM login_failures WHERE email = ? AND at > ?"))
            .bind(email)
            .bind(since)
            .fetch_one(&self.pool)
            .await?;
        Self::count_row(&r)
    }

    async fn login_failures_by_ip(&self, ip: &str, since: i64) -> StoreResult<(u32, Option<i64>)> {
        let r = sqlx::query(&Self::q("SELECT COUNT(*), MIN(at) FROM login_failures WHERE ip = ? AND at > ?"))
            .bind(ip)
            .bind(since)
            .fetch_one(&self.pool)
            .await?;
        Self::count_row(&r)
    }

    async fn clear_login_failures(&self, email: &str, before: i64) -> StoreResult<()> {
        sqlx::query(&Self::q("DELETE FROM login_failures WHERE email = ? OR at <= ?"))
            .bind(email)
            .bind(before)
            .execute(&self.pool)
            .await?;
        Ok(())
    }
        }
    };
}

pub(crate) use sql_store;
