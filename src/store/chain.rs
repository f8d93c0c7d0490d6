//! What the chain watcher keeps (`model::chain`): watched addresses, block headers, checkpoints,
//! leases, transfers. The rules (states, reorgs) are `chain`'s.

use async_trait::async_trait;
use custodian_macros::sql_bounds;
use sqlx::FromRow;

pub use super::chain_reads::TokenBalanceRow;
use super::chain_rows::{h, rows, ChainStateRow, TransferRow, TRANSFER_COLUMNS};
pub use super::chain_write::BlockWrite;
use super::utxo::AddressRow;
use super::{sql::parse_stored, sql::Dialect, sql_store::SqlStore, EventWrite, Recorded, StoreResult};
use crate::model::audit::AuditEntry;
use crate::model::chain::{BlockHead, ChainStatus, FeeAlerts, Transfer, TransferState, WalletAddress};
use crate::types::{BaseUnits, Coin, WalletId};

/// Which of a wallet's transfers a list shows.
#[derive(Debug, Default, Clone)]
pub struct TransferFilter {
    pub state: Option<TransferState>,
    /// `send` or `receive`.
    pub kind: Option<&'static str>,
    pub txid: Option<String>,
}

/// What a watcher reports of its chain: each `None` leaves the stored value as it is.
#[derive(Debug, Default)]
pub struct NodeReport<'a> {
    /// The node's head.
    pub head: Option<u64>,
    /// Why the watcher stops; only `custodian chain resync` clears a halt.
    pub halted: Option<&'a str>,
    pub blocks_per_second: Option<f64>,
    /// `Some(None)` clears the last error (a round succeeded).
    pub error: Option<Option<&'a str>>,
}

/// Addresses, headers, checkpoints and transfers.
#[async_trait]
pub trait ChainStore: Send + Sync {
    /// Watches `a`; `Err(owner)` when the chain already watches the address for a wallet
    /// (`owner`, possibly `a.wallet_id` itself). `audit` is written with it.
    async fn add_address(&self, a: &WalletAddress, audit: &[AuditEntry])
        -> StoreResult<Result<(), WalletId>>;
    /// A wallet's added addresses by address after `after`, at most `limit`.
    async fn wallet_addresses(
        &self,
        wallet: &WalletId,
        after: Option<&str>,
        limit: u32,
    ) -> StoreResult<Vec<WalletAddress>>;
    /// Every added address of a chain, with its wallet.
    async fn chain_addresses(&self, chain: &str) -> StoreResult<Vec<(String, WalletId)>>;
    /// The records (JSON text) of the chain coin's wallets that are not deleted.
    async fn chain_wallet_records(&self, chain: &str) -> StoreResult<Vec<(WalletId, String)>>;
    /// Changes whenever the chain's address set may have: (added addresses, wallets, latest
    /// wallet change).
    async fn address_fingerprint(&self, chain: &str) -> StoreResult<(i64, i64, i64)>;
    async fn chain_status(&self, chain: &str) -> StoreResult<Option<ChainStatus>>;
    /// Takes or renews the watch of `chain` for `holder` until `until_ms` when it is free,
    /// expired at `now_ms`, or already `holder`'s. Whether `holder` holds it.
    async fn take_chain_lease(
        &self,
        chain: &str,
        holder: &str,
        now_ms: i64,
        until_ms: i64,
    ) -> StoreResult<bool>;
    /// Records what a watcher saw of the node; halts the chain with `halted` when given (only a
    /// resync clears a halt: a round that read the halt before it must not write it back).
    async fn set_chain_node(&self, chain: &str, report: &NodeReport<'_>) -> StoreResult<()>;
    /// The kept headers at `from` and above, by height.
    async fn chain_heads(&self, chain: &str, from: u64) -> StoreResult<Vec<BlockHead>>;
    /// Writes consecutive blocks' effects and their events and moves the checkpoint to the
    /// last, in one transaction; what each event got ([`Recorded`], in the order given).
    async fn record_blocks(&self, w: BlockWrite<'_>) -> StoreResult<Vec<Recorded>>;
    /// Sets a wallet's fee alerts, with `audit`.
    async fn set_fee_alerts(
        &self,
        wallet: &WalletId,
        alerts: &FeeAlerts,
        audit: &[AuditEntry],
    ) -> StoreResult<()>;
    /// The fee alerts of the chain's wallets that have one on.
    async fn fee_alerts(&self, chain: &str) -> StoreResult<Vec<(WalletId, FeeAlerts)>>;
    /// Those of `addresses` (EIP-55) that have appeared on chain already.
    async fn appeared(&self, chain: &str, addresses: &[String]) -> StoreResult<Vec<String>>;
    /// A wallet's token balances, by token coin.
    async fn token_balances(&self, wallet: &WalletId) -> StoreResult<Vec<TokenBalanceRow>>;
    /// A reorg back to `ancestor` (`depth` blocks below the old tip): live transfers above it
    /// become `removed`, with the confirmations they had reached; headers above it are
    /// dropped, the checkpoint moves to it; `events` (their `removed` events) are stored in
    /// the same transaction. What each event got.
    async fn rewind_chain(
        &self,
        chain: &str,
        ancestor: &BlockHead,
        depth: u64,
        now: i64,
        events: &[EventWrite],
    ) -> StoreResult<Vec<Recorded>>;
    /// Restarts a chain at `height` (the next block read is `height`): clears its headers,
    /// checkpoint and halt. `audit` is written with it.
    async fn resync_chain(&self, chain: &str, height: u64, audit: &[AuditEntry]) -> StoreResult<()>;
    /// Live (unconfirmed or confirmed) transfers of a chain at `min_height` and above, and those
    /// in the pending pool (at `PENDING_HEIGHT`, no block hash).
    async fn live_transfers(&self, chain: &str, min_height: u64) -> StoreResult<Vec<Transfer>>;
    /// Removed transfers of a chain's blocks at `min_height` and above: a later block may
    /// replace them.
    async fn removed_transfers(&self, chain: &str, min_height: u64) -> StoreResult<Vec<Transfer>>;
    /// Unconfirmed sends of a wallet in coin `coin`, for its spendable balance.
    async fn unconfirmed_sends(&self, wallet: &WalletId, coin: &str) -> StoreResult<Vec<Transfer>>;
    /// A wallet's transfers of `coin`, newest first, after transfer `after`, at most `limit`.
    async fn wallet_transfers(
        &self,
        wallet: &WalletId,
        coin: &str,
        filter: &TransferFilter,
        after: Option<&str>,
        limit: u32,
    ) -> StoreResult<Vec<Transfer>>;
    async fn transfer_by_id(&self, wallet: &WalletId, id: &str) -> StoreResult<Option<Transfer>>;
    /// A chain's latest transfers, newest first, at most `limit` (the console).
    async fn recent_transfers(&self, chain: &str, limit: u32) -> StoreResult<Vec<Transfer>>;
    /// The wallets (and coins) whose balances a backfill left due ([`BlockWrite::stale`]).
    async fn stale_balances(&self, chain: &str) -> StoreResult<Vec<(WalletId, Coin)>>;
}

#[sql_bounds]
#[async_trait]
impl<DB> ChainStore for SqlStore<DB>
where
    for<'r> AddressRow: FromRow<'r, DB::Row>,
    for<'r> TransferRow: FromRow<'r, DB::Row>,
    for<'r> (String, String, Option<String>, i64): FromRow<'r, DB::Row>,
    for<'r> (String, String): FromRow<'r, DB::Row>,
    for<'r> (i64, String, String): FromRow<'r, DB::Row>,
    for<'r> (i64, i64, i64): FromRow<'r, DB::Row>,
    for<'r> ChainStateRow: FromRow<'r, DB::Row>,
    for<'r> (String,): FromRow<'r, DB::Row>,
    for<'r> (String, Option<String>, Option<String>): FromRow<'r, DB::Row>,
    for<'r> TokenBalanceRow: FromRow<'r, DB::Row>,
{
    async fn add_address(
        &self,
        a: &WalletAddress,
        audit: &[AuditEntry],
    ) -> StoreResult<Result<(), WalletId>> {
        let mut tx = self.begin_write().await?;
        let owner: Option<String> =
            sqlx::query_scalar("SELECT wallet_id FROM wallet_addresses WHERE chain = $1 AND address = $2")
                .bind(a.chain.as_str())
                .bind(a.address.as_str())
                .fetch_optional(&mut *tx)
                .await?;
        if let Some(owner) = owner {
            return Ok(Err(parse_stored(&owner, "address wallet")?));
        }
        sqlx::query(
            "INSERT INTO wallet_addresses (chain, address, wallet_id, label, created_at) VALUES ($1, $2, $3, $4, $5)",
        )
        .bind(a.chain.as_str())
        .bind(a.address.as_str())
        .bind(a.wallet_id.as_str())
        .bind(a.label.as_deref())
        .bind(a.created_at)
        .execute(&mut *tx)
        .await?;
        super::audit::append_tx::<DB>(&mut tx, audit).await?;
        tx.commit().await?;
        Ok(Ok(()))
    }

    async fn wallet_addresses(
        &self,
        wallet: &WalletId,
        after: Option<&str>,
        limit: u32,
    ) -> StoreResult<Vec<WalletAddress>> {
        let found: Vec<AddressRow> = sqlx::query_as(
            "SELECT chain, address, label, created_at, chain_code, address_index, coin_specific \
             FROM wallet_addresses WHERE wallet_id = $1 AND address > $2 ORDER BY address LIMIT $3",
        )
        .bind(wallet.as_str())
        .bind(after.unwrap_or(""))
        .bind(i64::from(limit))
        .fetch_all(&self.pool)
        .await?;
        found.into_iter().map(|r| r.into_address(wallet)).collect()
    }

    async fn chain_addresses(&self, chain: &str) -> StoreResult<Vec<(String, WalletId)>> {
        let found: Vec<(String, String)> =
            sqlx::query_as("SELECT address, wallet_id FROM wallet_addresses WHERE chain = $1")
                .bind(chain)
                .fetch_all(&self.pool)
                .await?;
        found.into_iter().map(|(a, w)| Ok((a, parse_stored(&w, "address wallet")?))).collect()
    }

    async fn chain_wallet_records(&self, chain: &str) -> StoreResult<Vec<(WalletId, String)>> {
        let found: Vec<(String, String)> =
            sqlx::query_as("SELECT id, record FROM wallets WHERE coin = $1 AND deleted = $2")
                .bind(chain)
                .bind(false)
                .fetch_all(&self.pool)
                .await?;
        found.into_iter().map(|(w, r)| Ok((parse_stored(&w, "wallet id")?, r))).collect()
    }

    async fn address_fingerprint(&self, chain: &str) -> StoreResult<(i64, i64, i64)> {
        Ok(sqlx::query_as(
            "SELECT (SELECT COUNT(*) FROM wallet_addresses WHERE chain = $1), \
             COUNT(*), COALESCE(MAX(updated_at), 0) FROM wallets WHERE coin = $1",
        )
        .bind(chain)
        .fetch_one(&self.pool)
        .await?)
    }

    async fn chain_status(&self, chain: &str) -> StoreResult<Option<ChainStatus>> {
        let row: Option<ChainStateRow> = sqlx::query_as(
            "SELECT chain, height, hash, node_head, halted, last_reorg_depth, last_reorg_at, lease_holder, \
             lease_until_ms, blocks_per_s_milli, last_error FROM chain_state WHERE chain = $1",
        )
        .bind(chain)
        .fetch_optional(&self.pool)
        .await?;
        Ok(row.map(ChainStateRow::into_status))
    }

    async fn take_chain_lease(
        &self,
        chain: &str,
        holder: &str,
        now_ms: i64,
        until_ms: i64,
    ) -> StoreResult<bool> {
        let mut tx = self.begin_write().await?;
        sqlx::query("INSERT INTO chain_state (chain) VALUES ($1) ON CONFLICT (chain) DO NOTHING")
            .bind(chain)
            .execute(&mut *tx)
            .await?;
        let taken = sqlx::query(
            "UPDATE chain_state SET lease_holder = $2, lease_until_ms = $3 WHERE chain = $1 \
             AND (lease_holder IS NULL OR lease_holder = $2 OR lease_until_ms < $4)",
        )
        .bind(chain)
        .bind(holder)
        .bind(until_ms)
        .bind(now_ms)
        .execute(&mut *tx)
        .await?;
        tx.commit().await?;
        Ok(DB::rows_affected(&taken) == 1)
    }

    async fn set_chain_node(&self, chain: &str, report: &NodeReport<'_>) -> StoreResult<()> {
        // An upsert: a watcher may fail (and say why) before its first lease made the row.
        sqlx::query(
            "INSERT INTO chain_state (chain, node_head, halted, blocks_per_s_milli, last_error) \
             VALUES ($1, $2, $3, $4, $6) ON CONFLICT (chain) DO UPDATE SET \
             node_head = COALESCE($2, chain_state.node_head), halted = COALESCE($3, chain_state.halted), \
             blocks_per_s_milli = COALESCE($4, chain_state.blocks_per_s_milli), \
             last_error = CASE WHEN $5 THEN $6 ELSE chain_state.last_error END",
        )
        .bind(chain)
        .bind(report.head.map(h))
        .bind(report.halted)
        .bind(report.blocks_per_second.map(|r| (r * 1000.0).round() as i64))
        .bind(report.error.is_some())
        .bind(report.error.flatten())
        .execute(&self.pool)
        .await?;
        Ok(())
    }

    async fn chain_heads(&self, chain: &str, from: u64) -> StoreResult<Vec<BlockHead>> {
        let found: Vec<(i64, String, String)> = sqlx::query_as(
            "SELECT height, hash, parent_hash FROM chain_heads WHERE chain = $1 AND height >= $2 ORDER BY height",
        )
        .bind(chain)
        .bind(h(from))
        .fetch_all(&self.pool)
        .await?;
        Ok(found
            .into_iter()
            .map(|(height, hash, parent_hash)| BlockHead {
                height: u64::try_from(height).unwrap_or(0),
                hash,
                parent_hash,
            })
            .collect())
    }

    async fn record_blocks(&self, w: BlockWrite<'_>) -> StoreResult<Vec<Recorded>> {
        let mut tx = self.begin_write().await?;
        let recorded = super::chain_write::blocks::<DB>(&mut tx, &w).await?;
        tx.commit().await?;
        Ok(recorded)
    }

    async fn set_fee_alerts(
        &self,
        wallet: &WalletId,
        alerts: &FeeAlerts,
        audit: &[AuditEntry],
    ) -> StoreResult<()> {
        let mut tx = self.begin_write().await?;
        sqlx::query(
            "INSERT INTO wallet_fee_alerts (wallet_id, low_fee, low_fee_address_balance, updated_at) \
             VALUES ($1, $2, $3, $4) ON CONFLICT (wallet_id) DO UPDATE SET low_fee = excluded.low_fee, \
             low_fee_address_balance = excluded.low_fee_address_balance, updated_at = excluded.updated_at",
        )
        .bind(wallet.as_str())
        .bind(alerts.low_fee.as_ref().map(BaseUnits::as_str))
        .bind(alerts.low_fee_address_balance.as_ref().map(BaseUnits::as_str))
        .bind(self.clock.now())
        .execute(&mut *tx)
        .await?;
        super::audit::append_tx::<DB>(&mut tx, audit).await?;
        tx.commit().await?;
        Ok(())
    }

    async fn fee_alerts(&self, chain: &str) -> StoreResult<Vec<(WalletId, FeeAlerts)>> {
        let found: Vec<(String, Option<String>, Option<String>)> = sqlx::query_as(
            "SELECT a.wallet_id, a.low_fee, a.low_fee_address_balance FROM wallet_fee_alerts a \
             WHERE (a.low_fee IS NOT NULL OR a.low_fee_address_balance IS NOT NULL) AND EXISTS \
             (SELECT 1 FROM wallets w WHERE w.id = a.wallet_id AND w.coin = $1 AND w.deleted = $2)",
        )
        .bind(chain)
        .bind(false)
        .fetch_all(&self.pool)
        .await?;
        let units = |v: Option<String>| v.and_then(|v| BaseUnits::parse(&v));
        let alerts = |f, b| FeeAlerts { low_fee: units(f), low_fee_address_balance: units(b) };
        found.into_iter().map(|(w, f, b)| Ok((parse_stored(&w, "wallet id")?, alerts(f, b)))).collect()
    }

    async fn appeared(&self, chain: &str, addresses: &[String]) -> StoreResult<Vec<String>> {
        super::chain_reads::appeared::<DB>(&mut *self.pool.acquire().await?, chain, addresses).await
    }

    async fn token_balances(&self, wallet: &WalletId) -> StoreResult<Vec<TokenBalanceRow>> {
        super::chain_reads::token_balances::<DB>(&mut *self.pool.acquire().await?, wallet).await
    }

    async fn rewind_chain(
        &self,
        chain: &str,
        ancestor: &BlockHead,
        depth: u64,
        now: i64,
        events: &[EventWrite],
    ) -> StoreResult<Vec<Recorded>> {
        let mut tx = self.begin_write().await?;
        super::chain_write::rewind::<DB>(&mut tx, chain, ancestor, depth, now).await?;
        let events: Vec<&EventWrite> = events.iter().collect();
        let recorded = super::group_commit::events_tx::<DB>(&mut tx, &events).await?;
        tx.commit().await?;
        Ok(recorded)
    }

    async fn resync_chain(&self, chain: &str, height: u64, audit: &[AuditEntry]) -> StoreResult<()> {
        let mut tx = self.begin_write().await?;
        sqlx::query("DELETE FROM chain_heads WHERE chain = $1").bind(chain).execute(&mut *tx).await?;
        sqlx::query("INSERT INTO chain_state (chain) VALUES ($1) ON CONFLICT (chain) DO NOTHING")
            .bind(chain)
            .execute(&mut *tx)
            .await?;
        // The checkpoint is the block before `height`, with no hash: nothing to compare.
        sqlx::query("UPDATE chain_state SET height = $2, hash = NULL, halted = NULL WHERE chain = $1")
            .bind(chain)
            .bind(height.checked_sub(1).map(h))
            .execute(&mut *tx)
            .await?;
        super::audit::append_tx::<DB>(&mut tx, audit).await?;
        tx.commit().await?;
        Ok(())
    }

    async fn live_transfers(&self, chain: &str, min_height: u64) -> StoreResult<Vec<Transfer>> {
        let found: Vec<TransferRow> = sqlx::query_as(&format!(
            "SELECT {TRANSFER_COLUMNS} FROM transfers WHERE chain = $1 AND height >= $2 \
             AND state IN ('unconfirmed', 'confirmed') ORDER BY height"
        ))
        .bind(chain)
        .bind(h(min_height))
        .fetch_all(&self.pool)
        .await?;
        rows(found)
    }

    async fn removed_transfers(&self, chain: &str, min_height: u64) -> StoreResult<Vec<Transfer>> {
        let found: Vec<TransferRow> = sqlx::query_as(&format!(
            "SELECT {TRANSFER_COLUMNS} FROM transfers WHERE chain = $1 AND height >= $2 AND state = 'removed' \
             AND block_hash <> ''"
        ))
        .bind(chain)
        .bind(h(min_height))
        .fetch_all(&self.pool)
        .await?;
        rows(found)
    }

    async fn unconfirmed_sends(&self, wallet: &WalletId, coin: &str) -> StoreResult<Vec<Transfer>> {
        let found: Vec<TransferRow> = sqlx::query_as(&format!(
            "SELECT {TRANSFER_COLUMNS} FROM transfers WHERE wallet_id = $1 AND coin = $2 \
             AND state = 'unconfirmed' AND value LIKE '-%'"
        ))
        .bind(wallet.as_str())
        .bind(coin)
        .fetch_all(&self.pool)
        .await?;
        rows(found)
    }

    async fn wallet_transfers(
        &self,
        wallet: &WalletId,
        coin: &str,
        filter: &TransferFilter,
        after: Option<&str>,
        limit: u32,
    ) -> StoreResult<Vec<Transfer>> {
        let mut sql = format!("SELECT {TRANSFER_COLUMNS} FROM transfers WHERE wallet_id = $1 AND coin = $2");
        sql.push_str(" AND ($3 = '' OR state = $3) AND ($4 = '' OR txid = $4)");
        sql.push_str(match filter.kind {
            Some("send") => " AND value LIKE '-%'",
            Some(_) => " AND value NOT LIKE '-%'",
            None => "",
        });
        // Newest block first; the cursor is the last transfer of the previous page.
        sql.push_str(
            " AND ($5 = '' OR height < (SELECT height FROM transfers WHERE id = $5) \
             OR (height = (SELECT height FROM transfers WHERE id = $5) AND id < $5)) \
             ORDER BY height DESC, id DESC LIMIT $6",
        );
        let found: Vec<TransferRow> = sqlx::query_as(&sql)
            .bind(wallet.as_str())
            .bind(coin)
            .bind(filter.state.map(TransferState::as_str).unwrap_or(""))
            .bind(filter.txid.as_deref().unwrap_or(""))
            .bind(after.unwrap_or(""))
            .bind(i64::from(limit))
            .fetch_all(&self.pool)
            .await?;
        rows(found)
    }

    async fn transfer_by_id(&self, wallet: &WalletId, id: &str) -> StoreResult<Option<Transfer>> {
        let found: Option<TransferRow> = sqlx::query_as(&format!(
            "SELECT {TRANSFER_COLUMNS} FROM transfers WHERE id = $1 AND wallet_id = $2"
        ))
        .bind(id)
        .bind(wallet.as_str())
        .fetch_optional(&self.pool)
        .await?;
        found.map(TransferRow::into_transfer).transpose()
    }

    async fn recent_transfers(&self, chain: &str, limit: u32) -> StoreResult<Vec<Transfer>> {
        let found: Vec<TransferRow> = sqlx::query_as(&format!(
            "SELECT {TRANSFER_COLUMNS} FROM transfers WHERE chain = $1 ORDER BY height DESC, id LIMIT $2"
        ))
        .bind(chain)
        .bind(i64::from(limit))
        .fetch_all(&self.pool)
        .await?;
        rows(found)
    }

    async fn stale_balances(&self, chain: &str) -> StoreResult<Vec<(WalletId, Coin)>> {
        let rows: Vec<(String, String)> =
            sqlx::query_as("SELECT wallet_id, coin FROM chain_stale_balances WHERE chain = $1")
                .bind(chain)
                .fetch_all(&self.pool)
                .await?;
        rows.into_iter()
            .map(|(w, c)| Ok((parse_stored(&w, "stale wallet")?, parse_stored(&c, "stale coin")?)))
            .collect()
    }
}
