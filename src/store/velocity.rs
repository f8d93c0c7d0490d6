//! The velocity ledger (docs/policy.md#velocity-under-the-wallets-lock): each withdrawal of a
//! (wallet, coin moved) carries its place (`vseq`), a time that never goes back along it
//! (`vtime`), and the running sum of every amount up to it (`cum_total`, decimal, 512 bits so
//! it never wraps). A window's sum is then the latest running sum less the last one before the
//! window, less what the window lost to rejections: a few index reads however many withdrawals
//! the window holds. Withdrawals stored before the ledger (no `cum_total`) make their wallet's
//! sums the exact scan of every row instead.

use alloy_primitives::{U256, U512};
use custodian_macros::sql_bounds;
use sqlx::FromRow;

use super::{
    custody_rows::recipients_total,
    sql::{parse_stored, Dialect},
    StoreError, StoreResult,
};
use crate::types::{TxRequestId, WalletId};

/// The states whose withdrawals never moved money and never will: not counted. The final states
/// of `TxRequestState` (a test keeps the two the same).
pub(super) const UNCOUNTED: &str = "('rejected', 'canceled', 'failed')";

/// One place in a (wallet, coin) ledger.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(super) struct Place {
    pub vseq: i64,
    pub vtime: i64,
    pub cum: U512,
}

impl Place {
    /// The place after this one, of a withdrawal of `amount` created at `created_at`.
    pub(super) fn next(self, amount: U256, created_at: i64) -> Place {
        Place {
            vseq: self.vseq + 1,
            vtime: self.vtime.max(created_at),
            cum: self.cum.saturating_add(U512::from(amount)),
        }
    }
}

#[derive(FromRow)]
pub(super) struct PlaceRow {
    vseq: i64,
    vtime: i64,
    cum_total: String,
}

impl PlaceRow {
    fn place(&self) -> StoreResult<Place> {
        Ok(Place { vseq: self.vseq, vtime: self.vtime, cum: parse_stored(&self.cum_total, "running total")? })
    }
}

#[derive(FromRow)]
pub(super) struct WordSums {
    w0: i64,
    w1: i64,
    w2: i64,
    w3: i64,
    w4: i64,
    w5: i64,
    w6: i64,
    w7: i64,
}

impl WordSums {
    fn total(&self) -> StoreResult<U512> {
        let sums = [self.w0, self.w1, self.w2, self.w3, self.w4, self.w5, self.w6, self.w7];
        sums.iter().enumerate().try_fold(U512::ZERO, |a, (i, s)| {
            let s =
                u64::try_from(*s).map_err(|_| StoreError::malformed("amount word sum", &s.to_string()))?;
            Ok(a.saturating_add(U512::from(s) << (32 * i)))
        })
    }
}

/// A total in 32-bit words, least significant first (`amount_w0` to `amount_w7`).
pub(super) fn words(amount: U256) -> [i64; 8] {
    let mut out = [0i64; 8];
    for (i, limb) in amount.as_limbs().iter().enumerate() {
        out[2 * i] = i64::from(*limb as u32);
        out[2 * i + 1] = i64::from((*limb >> 32) as u32);
    }
    out
}

/// The latest place of `wallet`'s ledger of `coin`; `None` when it has none.
#[sql_bounds]
pub(super) async fn latest<DB>(
    conn: &mut DB::Connection,
    wallet: &WalletId,
    coin: &str,
) -> StoreResult<Option<Place>>
where
    for<'r> PlaceRow: FromRow<'r, DB::Row>,
{
    let row: Option<PlaceRow> = sqlx::query_as(
        "SELECT vseq, vtime, cum_total FROM withdrawals WHERE wallet_id = $1 AND vcoin = $2 \
         AND cum_total IS NOT NULL ORDER BY vtime DESC, vseq DESC LIMIT 1",
    )
    .bind(wallet.as_str())
    .bind(coin)
    .fetch_optional(&mut *conn)
    .await?;
    row.as_ref().map(PlaceRow::place).transpose()
}

/// For each `(coin, since)` of `windows`: base units of `coin` withdrawn from `wallet` since
/// `since` (Unix seconds), not rejected, canceled or failed; with `upto` only those stored
/// before that withdrawal. Exact. Per window one index seek; per coin the top of its ledger
/// and what its windows lost to rejections, once; a wallet with legacy rows is scanned.
///
/// Also the top of each coin's ledger read on the way (the latest place, without `upto`): the
/// place a new withdrawal of that coin follows, so creating one reads it once. No tops for a
/// wallet that is scanned.
#[sql_bounds]
pub(super) async fn sums_and_tops<DB>(
    conn: &mut DB::Connection,
    wallet: &WalletId,
    windows: &[(&str, i64)],
    upto: Option<&TxRequestId>,
) -> StoreResult<(Vec<U256>, Vec<(String, Option<Place>)>)>
where
    for<'r> PlaceRow: FromRow<'r, DB::Row>,
    for<'r> LostRow: FromRow<'r, DB::Row>,
    for<'r> (String,): FromRow<'r, DB::Row>,
    for<'r> (i64, i64, String, String): FromRow<'r, DB::Row>,
    for<'r> (i64, i64, i64, String): FromRow<'r, DB::Row>,
{
    if windows.is_empty() {
        return Ok((Vec::new(), Vec::new()));
    }
    // The windows' starting places, and whether the wallet has rows from before the ledger,
    // in one statement.
    let Some(befores) = befores::<DB>(conn, wallet, windows).await? else {
        let mut out = Vec::with_capacity(windows.len());
        for (coin, since) in windows {
            out.push(scan::<DB>(conn, wallet, coin, *since, upto).await?);
        }
        return Ok((out, Vec::new()));
    };
    // Per coin: the top of the window (the latest place, or the one just before `upto`) and the
    // rejected, canceled or failed withdrawals since its earliest window.
    let mut coins: Vec<CoinLedger<'_>> = Vec::new();
    for (coin, since) in windows {
        match coins.iter_mut().find(|c| c.0 == *coin) {
            Some(c) => c.2 = c.2.min(*since),
            None => coins.push((coin, None, *since, Vec::new())),
        }
    }
    for (coin, top, earliest, lost) in &mut coins {
        let (place, bound) = top_of::<DB>(conn, wallet, coin, upto).await?;
        *top = place;
        let rows: Vec<LostRow> = sqlx::query_as(&format!(
            "SELECT vtime, {} FROM withdrawals WHERE wallet_id = $1 AND vcoin = $2 AND vtime >= $3 AND vseq < $4 \
             AND state IN {UNCOUNTED}",
            (0..8).map(|i| format!("amount_w{i} AS w{i}")).collect::<Vec<_>>().join(", ")
        ))
        .bind(wallet.as_str())
        .bind(*coin)
        .bind(*earliest)
        .bind(bound)
        .fetch_all(&mut *conn)
        .await?;
        *lost = rows.iter().map(|r| Ok((r.vtime, r.words.total()?))).collect::<StoreResult<_>>()?;
    }
    let mut out = Vec::with_capacity(windows.len());
    for ((coin, since), before) in windows.iter().zip(befores) {
        let Some((_, Some(top), _, lost)) = coins.iter().find(|c| c.0 == *coin) else {
            out.push(U256::ZERO);
            continue;
        };
        if before.vseq >= top.vseq {
            out.push(U256::ZERO);
            continue;
        }
        let lost = lost.iter().filter(|(t, _)| t >= since).fold(U512::ZERO, |a, (_, w)| a.saturating_add(*w));
        out.push(capped(top.cum.saturating_sub(before.cum).saturating_sub(lost)));
    }
    let tops = coins.into_iter().map(|(coin, top, _, _)| (coin.to_string(), top)).collect();
    Ok((out, tops))
}

/// For each window, the last place of its coin's ledger before its start (the start of the
/// ledger when there is none): one statement of one index seek per window, with one more row
/// (key -1) when the wallet has a withdrawal stored before the ledger: then `None`.
#[sql_bounds]
async fn befores<DB>(
    conn: &mut DB::Connection,
    wallet: &WalletId,
    windows: &[(&str, i64)],
) -> StoreResult<Option<Vec<Place>>>
where
    for<'r> (i64, i64, i64, String): FromRow<'r, DB::Row>,
{
    let legacy = "SELECT * FROM (SELECT CAST(-1 AS BIGINT) AS k, CAST(0 AS BIGINT) AS vseq, CAST(0 AS BIGINT) AS vtime, \
                  id AS cum_total FROM withdrawals WHERE wallet_id = $1 AND cum_total IS NULL LIMIT 1) AS legacy";
    // Numbers of the store's own (window indexes, placeholders), not a client's text.
    let parts: Vec<String> = std::iter::once(legacy.to_string()).chain((0..windows.len())
        .map(|i| {
            format!(
                "SELECT * FROM (SELECT CAST({i} AS BIGINT) AS k, vseq, vtime, cum_total FROM withdrawals WHERE wallet_id = $1 \
                 AND vcoin = ${} AND vtime < ${} ORDER BY vtime DESC, vseq DESC LIMIT 1) AS b{i}",
                2 * i + 2,
                2 * i + 3
            )
        }))
        .collect();
    let sql = parts.join(" UNION ALL ");
    let mut q = sqlx::query_as::<DB, (i64, i64, i64, String)>(&sql).bind(wallet.as_str());
    for (coin, since) in windows {
        q = q.bind(*coin).bind(*since);
    }
    let mut out = vec![Place::default(); windows.len()];
    for (k, vseq, vtime, cum) in q.fetch_all(&mut *conn).await? {
        if k < 0 {
            return Ok(None);
        }
        if let Some(slot) = usize::try_from(k).ok().and_then(|k| out.get_mut(k)) {
            *slot = Place { vseq, vtime, cum: parse_stored(&cum, "running total")? };
        }
    }
    Ok(Some(out))
}

/// A sum as base units: at most 2^256 - 1 (more than any limit can be).
fn capped(sum: U512) -> U256 {
    if sum > U512::from(U256::MAX) {
        return U256::MAX;
    }
    let l = sum.as_limbs();
    U256::from_limbs([l[0], l[1], l[2], l[3]])
}

/// The top of a window of `coin`: the ledger's latest place, or with `upto` the place just
/// before that withdrawal; and the `vseq` bound of what the window counts.
#[sql_bounds]
async fn top_of<DB>(
    conn: &mut DB::Connection,
    wallet: &WalletId,
    coin: &str,
    upto: Option<&TxRequestId>,
) -> StoreResult<(Option<Place>, i64)>
where
    for<'r> PlaceRow: FromRow<'r, DB::Row>,
    for<'r> (i64, i64, String, String): FromRow<'r, DB::Row>,
{
    let Some(id) = upto else { return Ok((latest::<DB>(conn, wallet, coin).await?, i64::MAX)) };
    let row: Option<(i64, i64, String, String)> = sqlx::query_as(
        "SELECT vseq, vtime, cum_total, recipients FROM withdrawals WHERE id = $1 AND vcoin = $2 \
         AND cum_total IS NOT NULL",
    )
    .bind(id.as_str())
    .bind(coin)
    .fetch_optional(&mut *conn)
    .await?;
    let Some((vseq, vtime, cum, recipients)) = row else { return Ok((None, i64::MAX)) };
    let cum: U512 = parse_stored(&cum, "running total")?;
    let own = U512::from(recipients_total(&recipients)?);
    Ok((Some(Place { vseq: vseq - 1, vtime, cum: cum.saturating_sub(own) }), vseq))
}

/// One coin's part of a sum: (coin, the top of its windows, its earliest window's start, its
/// lost withdrawals' times and totals).
type CoinLedger<'a> = (&'a str, Option<Place>, i64, Vec<(i64, U512)>);

/// A rejected, canceled or failed withdrawal's time and total.
#[derive(FromRow)]
pub(super) struct LostRow {
    vtime: i64,
    #[sqlx(flatten)]
    words: WordSums,
}

/// The exact scan of every row of the window, for a wallet with rows stored before the ledger.
#[sql_bounds]
async fn scan<DB>(
    conn: &mut DB::Connection,
    wallet: &WalletId,
    coin: &str,
    since: i64,
    upto: Option<&TxRequestId>,
) -> StoreResult<U256>
where
    for<'r> (String,): FromRow<'r, DB::Row>,
{
    // Bounded by the window; only wallets with rows older than the ledger come here.
    let rows: Vec<(String,)> = sqlx::query_as(&format!(
        "SELECT recipients FROM withdrawals WHERE wallet_id = $1 AND COALESCE(token_coin, coin) = $2 \
         AND created_at >= $3 AND state NOT IN {UNCOUNTED} AND id <> $4 AND (vseq IS NULL OR vseq < \
         COALESCE((SELECT vseq FROM withdrawals WHERE id = $4), 9223372036854775807))"
    ))
    .bind(wallet.as_str())
    .bind(coin)
    .bind(since)
    .bind(upto.map(TxRequestId::as_str).unwrap_or(""))
    .fetch_all(&mut *conn)
    .await?;
    rows.iter().try_fold(U256::ZERO, |a, (json,)| Ok(a.saturating_add(recipients_total(json)?)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_total_splits_into_words_that_sum_back_exactly() {
        for amount in [U256::ZERO, U256::from(u64::MAX), U256::MAX, U256::from(3_333_333u64) << 200] {
            let w = words(amount);
            let sums =
                WordSums { w0: w[0], w1: w[1], w2: w[2], w3: w[3], w4: w[4], w5: w[5], w6: w[6], w7: w[7] };
            assert_eq!(sums.total().unwrap(), U512::from(amount));
        }
        let two = WordSums { w0: 2 * i64::from(u32::MAX), w1: 0, w2: 0, w3: 0, w4: 0, w5: 0, w6: 0, w7: 0 };
        assert_eq!(two.total().unwrap(), U512::from(2 * u64::from(u32::MAX)));
    }

    #[test]
    fn a_place_never_goes_back_in_time_and_its_sum_never_wraps() {
        let a = Place::default().next(U256::MAX, 100);
        let b = a.next(U256::MAX, 90);
        assert_eq!((b.vseq, b.vtime), (2, 100));
        assert_eq!(b.cum, U512::from(U256::MAX) * U512::from(2u8));
    }

    #[test]
    fn the_uncounted_states_are_the_final_ones() {
        use crate::model::custody::TxRequestState;
        let listed: Vec<&str> = UNCOUNTED
            .trim_matches(|c| c == '(' || c == ')')
            .split(", ")
            .map(|s| s.trim_matches('\''))
            .collect();
        let finals: Vec<&str> =
            TxRequestState::ALL.iter().filter(|s| s.is_final()).map(|s| s.as_str()).collect();
        assert_eq!(listed, finals);
    }
}
