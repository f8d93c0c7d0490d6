//! A UTXO wallet's unspent outputs (BitGo's `GET /api/v2/{coin}/wallet/{id}/unspents`, BitGoJS
//! `wallet.unspents()`), from the set the watcher keeps (docs/chains.md#utxo-chains).

use serde_json::{json, Value};

use crate::chain::Chains;
use crate::error::{Error, Result};
use crate::identity::bearer::Principal;
use crate::model::chain::{Unspent, PENDING_HEIGHT};
use crate::store::UnspentFilter;
use crate::types::{Coin, WalletId};

/// The most `minConfirms` a client may ask for.
pub const MAX_MIN_CONFIRMS: u64 = 1_000_000;

/// The most `minValue` a client may ask for, base units: above any coin's whole supply.
pub const MAX_MIN_VALUE: u64 = 10_000_000_000_000_000;

/// Which unspents a client asks for: BitGo's `minConfirms` (0: mempool ones too), `minValue`
/// (base units), `prevId` (`txid:vout`) and `limit` (1 to [`crate::chain::MAX_PAGE`]).
#[derive(Debug, Clone, Default)]
pub struct UnspentQuery {
    pub min_confirms: u64,
    pub min_value: u64,
    pub prev_id: Option<String>,
    pub limit: u32,
}

/// A `prevId` as the outpoint it names. Errors: `InvalidField` (`prevId`).
fn outpoint(text: &str) -> Result<(String, u32)> {
    let bad = || Error::invalid_field("prevId", "not txid:vout (64 hex digits, a colon, a number)");
    let (txid, vout) = text.split_once(':').ok_or_else(bad)?;
    if txid.len() != 64 || !txid.bytes().all(|b| b.is_ascii_hexdigit()) || vout.len() > 10 {
        return Err(bad());
    }
    // No output has an index past u32: a page after one is after every output of its txid.
    let vout: u64 = vout.parse().map_err(|_| bad())?;
    Ok((txid.to_ascii_lowercase(), u32::try_from(vout).unwrap_or(u32::MAX)))
}

/// The wallet's unspent outputs (not spent in a block nor in the mempool), by outpoint, at
/// most `q.limit + 1` (the caller pages). Errors: as `wallets::get_wallet`, `InvalidField`
/// (`prevId`, `minConfirms`, `minValue` past their bounds, `coin`: not a UTXO coin).
pub async fn list(
    svc: &Chains,
    auth: &Principal,
    coin: &Coin,
    wallet_id: &WalletId,
    q: &UnspentQuery,
) -> Result<Vec<Unspent>> {
    if super::params::Family::of(coin).is_none() {
        return Err(Error::invalid_field("coin", "unspents are kept for UTXO coins (btc, tbtc, ltc, tltc)"));
    }
    if q.min_confirms > MAX_MIN_CONFIRMS {
        return Err(Error::invalid_field("minConfirms", format!("at most {MAX_MIN_CONFIRMS}")));
    }
    if q.min_value > MAX_MIN_VALUE {
        return Err(Error::invalid_field("minValue", format!("at most {MAX_MIN_VALUE} base units")));
    }
    crate::wallets::get_wallet(&svc.wallets, auth, coin, wallet_id).await?;
    let after = q.prev_id.as_deref().map(outpoint).transpose()?;
    let max_height = match q.min_confirms {
        0 => None,
        n => {
            let tip = svc.store.chain_status(coin.as_str()).await?.and_then(|s| s.height).unwrap_or(0);
            Some((tip + 1).saturating_sub(n))
        }
    };
    let filter = UnspentFilter { max_height, min_value: q.min_value, after, limit: q.limit + 1 };
    Ok(svc.store.wallet_unspents(wallet_id, &filter).await?)
}

/// BitGo's unspent: `{id, address, value, valueString, blockHeight, date, wallet, chain,
/// index, coin}`; `blockHeight` 999999999 while in the mempool.
pub fn unspent_json(u: &Unspent) -> Value {
    let mut v = json!({
        "id": format!("{}:{}", u.txid, u.vout),
        "address": u.address,
        "value": u.value,
        "valueString": u.value.to_string(),
        "blockHeight": u.height.min(PENDING_HEIGHT),
        "date": crate::clock::iso(u.date),
        "wallet": u.wallet_id.as_str(),
        "coin": u.chain.as_str(),
    });
    if let Some(p) = u.position {
        v["chain"] = json!(p.chain);
        v["index"] = json!(p.index);
    }
    v
}
