//! `custodian wallet create --custodial`, `custodian withdrawal list | show`, `custodian keys
//! list`: the same domain functions as the API (docs/withdrawals.md).

use super::args::{KeysCommand, WithdrawalCommand};
use crate::{
    config::Config,
    custody::{history::WithdrawalRecord, views, wallets::NewCustodialWallet},
    model::custody::TxRequestState,
    store::WithdrawalFilter,
    types::{Coin, EnterpriseId},
    AppState,
};

/// `wallet create`: a custodial wallet with no users; the enterprise's admins approve its
/// withdrawals.
pub async fn create_wallet(
    config: Config,
    custodial: bool,
    new: NewCustodialWallet,
    json: bool,
) -> anyhow::Result<()> {
    if !custodial {
        anyhow::bail!("only custodial wallets are made here (--custodial); other wallets are imported (`custodian wallet import`)");
    }
    let state = AppState::new(config).await?;
    let row = crate::custody::wallets::create(&state.custody, None, &new).await?;
    if json {
        println!("{}", row.record.as_str());
    } else {
        let record: serde_json::Value = serde_json::from_str(row.record.as_str())?;
        println!(
            "Created custodial wallet {} on {} at {} (key {})",
            row.id,
            row.coin,
            record["coinSpecific"]["baseAddress"].as_str().unwrap_or("?"),
            record["keys"][0].as_str().unwrap_or("?")
        );
    }
    Ok(())
}

/// The arguments of `wallet create` as the domain takes them.
pub fn new_wallet(
    coin: Coin,
    enterprise: EnterpriseId,
    label: String,
    approvals_required: u32,
) -> NewCustodialWallet {
    NewCustodialWallet { coin, label, enterprise, approvals_required }
}

pub async fn withdrawal(config: Config, cmd: WithdrawalCommand) -> anyhow::Result<()> {
    let state = AppState::new(config).await?;
    match cmd {
        WithdrawalCommand::List { wallet, state: wanted, limit, json } => {
            if !(1..=1000).contains(&limit) {
                anyhow::bail!("--limit: from 1 to 1000");
            }
            let states = match wanted {
                None => None,
                Some(s) => Some(vec![TxRequestState::parse(&s).ok_or_else(|| {
                    anyhow::anyhow!("--state: one of pendingApproval, pendingDelivery, signed, delivered, rejected, canceled, failed")
                })?]),
            };
            let filter = WithdrawalFilter { wallet, states, limit, ..Default::default() };
            for w in state.store.withdrawals(&filter).await? {
                if json {
                    let record = WithdrawalRecord::read(&state.store, w).await?;
                    println!("{}", views::tx_request(&record));
                } else {
                    let hash = w.tx_hash.map(|h| h.to_string()).unwrap_or_else(|| "-".into());
                    println!(
                        "{} {} {} {} wei {} {}",
                        w.id,
                        w.wallet_id,
                        w.state.as_str(),
                        w.total(),
                        w.coin,
                        hash
                    );
                }
            }
            Ok(())
        }
        WithdrawalCommand::Show { id } => {
            let w =
                state.store.withdrawal(&id).await?.ok_or_else(|| anyhow::anyhow!("no withdrawal {id}"))?;
            let record = WithdrawalRecord::read(&state.store, w).await?;
            println!("{}", serde_json::to_string_pretty(&views::tx_request(&record))?);
            Ok(())
        }
    }
}

pub async fn keys(config: Config, cmd: KeysCommand) -> anyhow::Result<()> {
    let KeysCommand::List { limit } = cmd;
    if !(1..=10_000).contains(&limit) {
        anyhow::bail!("--limit: from 1 to 10000");
    }
    let store = crate::store::open(&config).await?;
    for k in store.custody_keys(None, limit).await? {
        println!("{} {} {} wallet {}", k.id, k.backend, k.address.to_checksum(None), k.wallet_id);
    }
    Ok(())
}

/// `wallet unfreeze`: ends a freeze early.
pub async fn unfreeze(config: Config, wallet: crate::types::WalletId) -> anyhow::Result<()> {
    let state = AppState::new(config).await?;
    crate::custody::freeze::unfreeze(&state.custody, &wallet).await?;
    println!("{wallet} is no longer frozen");
    Ok(())
}

/// `price set` and `price show`.
pub async fn price(config: Config, cmd: super::args::PriceCommand) -> anyhow::Result<()> {
    use crate::custody::prices::{self, Priced};
    let state = AppState::new(config).await?;
    match cmd {
        super::args::PriceCommand::Set { coin, usd } => {
            let set = prices::set(&state.custody, &coin, &usd).await?;
            println!("{coin} is priced at {} USD", set.text());
        }
        super::args::PriceCommand::Show { coin } => match prices::price(&state.custody, &coin).await {
            Priced::Price(p) => println!("{coin}: {} USD", p.text()),
            Priced::NoSource => println!("{coin}: no price source; its withdrawals are not valued"),
            Priced::Unavailable(why) => println!("{coin}: no price now: {why}"),
        },
    }
    Ok(())
}
