//! What an approver sees is what moves: a withdrawal's amount in its coin's units beside the
//! base units, the initiator and the approvers by name and email, the wallet by label, and each
//! payee this wallet never paid before flagged. The console's Approvals page and a withdrawal's
//! timeline show it, and the `pendingapproval` record's `info.transactionRequest` carries it
//! beside BitGo's base-unit fields (added, never replacing them).

use std::collections::HashMap;

use alloy_primitives::Address;
use serde_json::{json, Value};

use super::super::{policy::eval::units, tokens, Custody};
use crate::{
    error::Result,
    model::custody::{Approval, TxRequestState, Withdrawal},
    store::WithdrawalFilter,
    types::{Coin, UserId, WalletId},
};

/// A wallet's paid withdrawals read to tell a first-time payee, the newest first: a payee paid
/// only before them counts as new.
pub const PAYEE_SCAN: u32 = 500;

/// A person as an approver sees them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Person {
    pub id: UserId,
    /// First and last name; empty when the account has none.
    pub name: String,
    pub email: String,
}

impl Person {
    /// `Ada Lovelace <ada@example.com>`, or the email alone.
    pub fn label(&self) -> String {
        match self.name.is_empty() {
            true => self.email.clone(),
            false => format!("{} <{}>", self.name, self.email),
        }
    }

    fn json(&self) -> Value {
        json!({ "id": self.id.as_str(), "name": self.name, "email": self.email })
    }
}

/// What an approver sees of one withdrawal.
#[derive(Debug, Clone)]
pub struct Shown {
    /// Whole units of `coin`, trailing zeros dropped (`0.9`).
    pub amount: String,
    /// Base units (`900000000000000000`).
    pub base_units: String,
    /// The coin it moves: its token's, or the wallet's.
    pub coin: Coin,
    pub initiator: Person,
    /// Those who answered, in order, with their answer.
    pub answered: Vec<(Person, String)>,
    /// The wallet's `label`, when it has one.
    pub wallet_label: Option<String>,
    /// Payees no earlier withdrawal of this wallet paid (sent, and not failed).
    pub first_time_payees: Vec<Address>,
}

impl Shown {
    /// The fields added to a `pendingapproval` record's `info.transactionRequest`.
    pub fn add_to(&self, request: &mut Value) {
        request["requestedAmountUnits"] = json!(self.amount);
        request["coin"] = json!(self.coin.as_str());
        request["initiator"] = self.initiator.json();
        request["approvers"] = json!(self
            .answered
            .iter()
            .map(|(p, answer)| {
                let mut v = p.json();
                v["resolutionType"] = json!(answer);
                v
            })
            .collect::<Vec<_>>());
        request["walletLabel"] = json!(self.wallet_label);
        request["firstTimePayees"] =
            json!(self.first_time_payees.iter().map(|a| a.to_checksum(None)).collect::<Vec<_>>());
    }
}

/// What an approver sees of each of `items` (an approval with its withdrawal, when it decides
/// one), in one pass: each person, wallet and payee history read once.
pub async fn shown_all(
    svc: &Custody,
    items: &[(Approval, Option<Withdrawal>)],
) -> Result<Vec<Option<Shown>>> {
    let mut people: HashMap<UserId, Person> = HashMap::new();
    for (a, _) in items {
        for id in std::iter::once(&a.creator).chain(a.resolvers.iter().map(|r| &r.user)) {
            if !people.contains_key(id) {
                let person = person(svc, id).await?;
                people.insert(id.clone(), person);
            }
        }
    }
    let mut wallets: Vec<WalletId> =
        items.iter().filter_map(|(_, w)| w.as_ref().map(|w| w.wallet_id.clone())).collect();
    wallets.sort();
    wallets.dedup();
    let rows = svc.store.wallets_by_ids(&wallets, true).await?;
    let mut paid: HashMap<WalletId, Vec<Paid>> = HashMap::new();
    for wallet in &wallets {
        paid.insert(wallet.clone(), payees(svc, wallet).await?);
    }
    let mut out = Vec::with_capacity(items.len());
    for (a, w) in items {
        let Some(w) = w else {
            out.push(None);
            continue;
        };
        let label = rows.iter().find(|r| r.id == w.wallet_id).and_then(|r| {
            let record: Value = serde_json::from_str(r.record.as_str()).ok()?;
            record.get("label").and_then(Value::as_str).map(str::to_string)
        });
        let before = paid.get(&w.wallet_id).map(Vec::as_slice).unwrap_or_default();
        let first_time_payees = w
            .recipients
            .iter()
            .map(|r| r.address)
            .filter(|to| !before.iter().any(|p| &p.to == to && p.at <= w.created_at && p.id != w.id))
            .collect();
        let coin = w.token.as_ref().map_or(&w.coin, |t| &t.coin).clone();
        let decimals = tokens::decimals(&svc.config, &w.coin, &coin);
        let known = |id: &UserId| people.get(id).cloned().unwrap_or_else(|| unknown(id));
        out.push(Some(Shown {
            amount: units(w.total(), decimals),
            base_units: w.total().to_string(),
            coin,
            initiator: known(&a.creator),
            answered: a.resolvers.iter().map(|r| (known(&r.user), r.resolution.clone())).collect(),
            wallet_label: label,
            first_time_payees,
        }));
    }
    Ok(out)
}

fn unknown(id: &UserId) -> Person {
    Person { id: id.clone(), name: String::new(), email: String::new() }
}

async fn person(svc: &Custody, id: &UserId) -> Result<Person> {
    Ok(match svc.store.user_by_id(id).await? {
        Some(u) => Person {
            id: id.clone(),
            name: format!("{} {}", u.name_first, u.name_last).trim().to_string(),
            email: u.email.clone(),
        },
        None => unknown(id),
    })
}

/// A payment a sent withdrawal made.
struct Paid {
    to: Address,
    /// When the withdrawal was asked for, Unix seconds.
    at: i64,
    id: crate::types::TxRequestId,
}

/// Each address `wallet`'s sent withdrawals paid: the newest [`PAYEE_SCAN`] of them.
async fn payees(svc: &Custody, wallet: &WalletId) -> Result<Vec<Paid>> {
    let filter = WithdrawalFilter {
        wallet: Some(wallet.clone()),
        states: Some(vec![TxRequestState::Delivered]),
        newest_first: true,
        limit: PAYEE_SCAN,
        ..Default::default()
    };
    let found = svc.store.withdrawals(&filter).await?;
    Ok(found
        .iter()
        .flat_map(|w| w.recipients.iter().map(|r| Paid { to: r.address, at: w.created_at, id: w.id.clone() }))
        .collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_person_reads_as_name_and_email() {
        let id: UserId = format!("{:032x}", 7).parse().unwrap();
        let ada = Person { id: id.clone(), name: "Ada Lovelace".into(), email: "ada@example.com".into() };
        assert_eq!(ada.label(), "Ada Lovelace <ada@example.com>");
        assert_eq!(Person { name: String::new(), ..ada }.label(), "ada@example.com");
    }
}
