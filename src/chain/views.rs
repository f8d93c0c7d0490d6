//! What the console shows of the chain room: each chain's progress (the Chains page) and one
//! wallet's addresses, balances and transfers (its wallet page).

use super::{list_addresses, status, Chains};
use crate::{
    error::{Error, ErrorName, Result},
    identity::{bearer::Principal, scopes::Action},
    model::{
        chain::{ChainStatus, Transfer, WalletAddress},
        wallet::WalletRow,
    },
    store::{TokenBalanceRow, TransferFilter},
    types::{Coin, WalletId},
};

/// What the console's Chains page shows of one chain.
#[derive(Debug)]
pub struct ChainView {
    pub status: ChainStatus,
    /// Addresses added to wallets (`add-address`), and the chain coin's wallets.
    pub added_addresses: i64,
    pub wallets: i64,
    pub confirmations: u64,
    pub reorg_depth: u64,
    /// The latest transfers, newest first (at most [`RECENT`]).
    pub recent: Vec<Transfer>,
}

/// Transfers the console shows per chain.
pub const RECENT: u32 = 20;

/// Every configured chain as the console shows it (service admins: chains span tenants).
/// Errors: `Forbidden`.
pub async fn views(svc: &Chains, auth: &Principal) -> Result<Vec<ChainView>> {
    auth.require(svc.wallets.policy, Action::ServiceAdmin)?;
    let mut out = Vec::new();
    for s in status(svc).await? {
        let (added_addresses, wallets, _) = svc.store.address_fingerprint(&s.chain).await?;
        let recent = svc.store.recent_transfers(&s.chain, RECENT).await?;
        let c = svc.config.chains.get(&s.chain).cloned().unwrap_or_default();
        out.push(ChainView {
            status: s,
            added_addresses,
            wallets,
            confirmations: c.confirmations,
            reorg_depth: c.reorg_depth,
            recent,
        });
    }
    Ok(out)
}

/// Addresses a wallet page shows (the API pages through the rest).
pub const WALLET_ADDRESSES: u32 = 100;
/// Transfers per wallet page.
pub const WALLET_TRANSFERS: u32 = 50;

/// What the console shows of one wallet.
#[derive(Debug)]
pub struct WalletView {
    pub wallet: WalletRow,
    /// The record's `label`.
    pub label: String,
    /// The coin whose transfers are listed, and those the wallet can list: its own and, when
    /// its chain is watched, the chain's configured tokens.
    pub coin: Coin,
    pub coins: Vec<Coin>,
    /// Whether the wallet's coin is a watched chain (else it has no addresses or transfers).
    pub watched: bool,
    /// Token balances read from the chain: (token coin, balance, confirmed, spendable).
    pub tokens: Vec<TokenBalanceRow>,
    /// The first [`WALLET_ADDRESSES`] addresses, and whether there are more.
    pub addresses: Vec<WalletAddress>,
    pub more_addresses: bool,
    /// A page of transfers of `coin`, newest block first, and the `prevId` of the next one.
    pub transfers: Vec<Transfer>,
    pub next: Option<String>,
}

/// The wallet `wallet_id` as its page shows it, with the transfers of `coin` (default: the
/// wallet's) that match `filter`, after transfer `after`. Errors: `WalletNotFound` (also for a
/// wallet the principal may not see), `InvalidField` (`coin`) for a coin the wallet does not
/// list.
pub async fn wallet_view(
    svc: &Chains,
    auth: &Principal,
    wallet_id: &WalletId,
    coin: Option<&Coin>,
    filter: &TransferFilter,
    after: Option<&str>,
) -> Result<WalletView> {
    let wallet = crate::wallets::lookup(&svc.wallets, auth, std::slice::from_ref(wallet_id), false)
        .await?
        .pop()
        .ok_or_else(|| Error::not_found(ErrorName::WalletNotFound))?;
    let record = serde_json::from_str::<serde_json::Value>(wallet.record.as_str()).unwrap_or_default();
    let label = record.get("label").and_then(|l| l.as_str()).unwrap_or_default().to_string();
    let config = svc.config.chains.get(wallet.coin.as_str());
    let mut coins = vec![wallet.coin.clone()];
    coins.extend(config.iter().flat_map(|c| &c.tokens).filter_map(|t| t.coin.parse::<Coin>().ok()));
    let coin = coin.cloned().unwrap_or_else(|| wallet.coin.clone());
    if !coins.contains(&coin) {
        return Err(Error::invalid_field("coin", "not a coin of this wallet"));
    }
    let mut view = WalletView {
        label,
        coin,
        coins,
        watched: config.is_some(),
        tokens: Vec::new(),
        addresses: Vec::new(),
        more_addresses: false,
        transfers: Vec::new(),
        next: None,
        wallet,
    };
    if !view.watched {
        return Ok(view);
    }
    view.tokens = svc.store.token_balances(wallet_id).await?;
    let chain = view.wallet.coin.clone();
    view.addresses = list_addresses(svc, auth, &chain, wallet_id, None, WALLET_ADDRESSES + 1).await?;
    view.more_addresses = view.addresses.len() > WALLET_ADDRESSES as usize;
    view.addresses.truncate(WALLET_ADDRESSES as usize);
    let mut page = svc
        .store
        .wallet_transfers(wallet_id, view.coin.as_str(), filter, after, WALLET_TRANSFERS + 1)
        .await?;
    if page.len() > WALLET_TRANSFERS as usize {
        page.truncate(WALLET_TRANSFERS as usize);
        view.next = page.last().map(|t| t.id.clone());
    }
    view.transfers = page;
    Ok(view)
}
