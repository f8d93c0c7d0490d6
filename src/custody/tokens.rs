//! Token (ERC-20) withdrawals: which configured token a request names, and whether the wallet
//! holds enough of it (docs/withdrawals.md#tokens). The transaction is the token contract's
//! `transfer(to, amount)`, paid for in the chain's coin.

use alloy_primitives::{Address, Bytes, U256};
use alloy_sol_types::SolCall;

use super::Custody;
use crate::{
    config::Config,
    error::{Error, ErrorName, Result},
    model::custody::{Token, Withdrawal},
    types::{parse_eth_address, Coin, WalletId},
};

/// Gas held back for a token withdrawal at initiation (its estimate is made at signing).
pub const TOKEN_TRANSFER_GAS: u64 = 100_000;

alloy_sol_types::sol! {
    function transfer(address to, uint256 amount) external returns (bool);
}

/// The token a withdrawal sends: the route's coin when it is a token (`/api/v2/hteth:usdc/...`)
/// or the recipients' `tokenName`s (`names`, in their order), which must agree; `None` for the
/// chain's coin. Errors: `InvalidField` for a token this chain does not configure
/// (`chains.<coin>.tokens`), or recipients naming different tokens.
pub fn resolve(config: &Config, chain: &Coin, route: &Coin, names: &[Option<&str>]) -> Result<Option<Token>> {
    let mut named: Option<&str> = (route != chain).then_some(route.as_str());
    for (i, name) in names.iter().enumerate() {
        match (named, *name) {
            (_, None) => {}
            (None, Some(t)) => named = Some(t),
            (Some(a), Some(b)) if a == b => {}
            (Some(_), Some(_)) => {
                return Err(Error::invalid_field(
                    format!("recipients[{i}].tokenName"),
                    "one token per withdrawal",
                ))
            }
        }
    }
    let Some(name) = named else { return Ok(None) };
    let unknown =
        || Error::invalid_field("tokenName", format!("{name} is not a token configured for {chain}"));
    let configured = config.chains.get(chain.as_str()).and_then(|c| c.tokens.iter().find(|t| t.coin == name));
    let t = configured.ok_or_else(unknown)?;
    Ok(Some(Token {
        coin: t.coin.parse().map_err(|_| unknown())?,
        contract: parse_eth_address(&t.contract).map_err(|_| unknown())?,
    }))
}

/// The coin a txRequest's payment intent pays in, from its recipients' `amount.symbol`
/// (`symbols`, in their order; ASCII case ignored): `chain` (the wallet's coin) when none is
/// given or each is `chain`, else a token configured for the chain (`chains.<coin>.tokens`)
/// that every recipient names. Errors: `InvalidField`
/// (`intent.recipients[i].amount.symbol`) for any other symbol (another coin, an unknown token,
/// another chain's) or a symbol unlike an earlier recipient's (an absent one standing for
/// `chain`); audited as `withdrawal.refused`, as every refused withdrawal is.
pub async fn intent_coin(
    svc: &Custody,
    auth: &crate::identity::bearer::Principal,
    wallet_id: &WalletId,
    chain: &Coin,
    symbols: &[Option<&str>],
) -> Result<Coin> {
    let result = coin_of_symbols(&svc.config, chain, symbols);
    if let Err(e) = &result {
        use crate::audit::EntryExt;
        let entry = auth
            .audit(crate::model::audit::AuditType::WithdrawalRefused)
            .wallet(Some(wallet_id))
            .data(serde_json::json!({ "reason": e.to_string() }));
        crate::audit::record(&svc.store, &[entry]).await;
    }
    result
}

/// [`intent_coin`]'s rule, without the audit.
fn coin_of_symbols(config: &Config, chain: &Coin, symbols: &[Option<&str>]) -> Result<Coin> {
    let mut paid: Option<Coin> = None;
    for (i, symbol) in symbols.iter().enumerate() {
        let field = || format!("intent.recipients[{i}].amount.symbol");
        let coin = match symbol.map(str::to_ascii_lowercase) {
            None => chain.clone(),
            Some(s) if s == chain.as_str() => chain.clone(),
            Some(s) => {
                let configured =
                    config.chains.get(chain.as_str()).and_then(|c| c.tokens.iter().find(|t| t.coin == s));
                let unknown = || {
                    let shown = crate::text::clip(s.clone(), 64);
                    Error::invalid_field(
                        field(),
                        format!("`{shown}` is neither {chain} nor a token configured for {chain}"),
                    )
                };
                configured.ok_or_else(unknown)?.coin.parse().map_err(|_| unknown())?
            }
        };
        match &paid {
            Some(first) if first != &coin => {
                return Err(Error::invalid_field(
                    field(),
                    format!("{coin} differs from the first recipient's {first}: one coin per withdrawal"),
                ))
            }
            _ => paid = Some(coin),
        }
    }
    Ok(paid.unwrap_or_else(|| chain.clone()))
}

/// The wallet's balance of `token` at the chain's confirmation depth, as the chain watcher last
/// read it (base units; 0 when it has none).
pub async fn held(svc: &Custody, wallet: &WalletId, token: &Token) -> Result<U256> {
    let balances = svc.store.token_balances(wallet).await?;
    let found = balances.iter().find(|(coin, ..)| coin == token.coin.as_str());
    Ok(units(found.map(|(_, _, confirmed, _)| confirmed.as_str())))
}

/// Refuses a token withdrawal above `held` (the wallet's balance of the token) less the token
/// withdrawals in flight.
pub fn check_balance(held: U256, w: &Withdrawal, flying: &[Withdrawal]) -> Result<()> {
    let Some(token) = &w.token else { return Ok(()) };
    let pending = flying
        .iter()
        .filter(|f| f.token.as_ref() == Some(token))
        .fold(U256::ZERO, |a, f| a.saturating_add(f.total()));
    let needed = w.total().saturating_add(pending);
    if needed > held {
        return Err(Error::Invalid {
            name: ErrorName::InsufficientBalance,
            message: format!(
                "the wallet holds {held} {}; this withdrawal and those in flight need {needed}",
                token.coin
            ),
            context: serde_json::json!({ "field": "amount", "balance": held.to_string(), "needed": needed.to_string() }),
        });
    }
    Ok(())
}

/// Decimals of `coin` as `chains.<chain>.tokens` configures them; 18 for the chain's own coin.
pub fn decimals(config: &Config, chain: &Coin, coin: &Coin) -> u8 {
    let tokens = config.chains.get(chain.as_str()).map(|c| c.tokens.as_slice()).unwrap_or_default();
    tokens.iter().find(|t| t.coin == coin.as_str()).map_or(18, |t| t.decimals)
}

/// What a withdrawal's transaction calls: (to, value, input). A token withdrawal calls the
/// contract's `transfer` with no value; a coin withdrawal pays the recipient.
pub fn call_of(w: &Withdrawal, recipient: Address) -> (Address, U256, Bytes) {
    match &w.token {
        Some(t) => {
            let input = transferCall { to: recipient, amount: w.total() }.abi_encode();
            (t.contract, U256::ZERO, input.into())
        }
        None => (recipient, w.total(), Bytes::new()),
    }
}

/// Whether token withdrawal `w`'s receipt `m` logs its `Transfer` (its contract, from its
/// address, to its payee, its amount): paid, whatever the receipt's status says. Never for an
/// ETH withdrawal.
pub fn logged(w: &Withdrawal, m: &super::node::Mined) -> bool {
    let (Some(t), Some(r)) = (&w.token, w.recipients.first()) else { return false };
    m.transfers.iter().any(|&(contract, from, to, value)| {
        contract == t.contract && from == w.from && to == r.address && value == r.amount
    })
}

/// Wei a withdrawal itself moves out of the wallet (none for a token's).
pub fn wei_spent(w: &Withdrawal) -> U256 {
    if w.token.is_some() {
        U256::ZERO
    } else {
        w.total()
    }
}

/// A stored balance in base units; 0 when there is none (never read) or it does not parse.
pub(super) fn units(text: Option<&str>) -> U256 {
    text.and_then(|b| U256::from_str_radix(b, 10).ok()).unwrap_or(U256::ZERO)
}
