//! The address book of one chain: every watched address with its wallet, matched in memory
//! (one hash lookup per transaction end, so a block costs the same for 10 or 100,000
//! addresses). Reloaded when the store's fingerprint of the address set changes.

use std::{
    collections::{HashMap, HashSet},
    sync::Arc,
};

use alloy_primitives::Address;

use crate::{store::DynStore, types::WalletId};

#[derive(Default)]
pub struct AddressBook {
    owners: Arc<HashMap<Address, WalletId>>,
    by_wallet: HashMap<WalletId, Vec<Address>>,
    /// The wallets' base addresses (`coinSpecific.baseAddress`).
    bases: HashSet<Address>,
    /// The wallets' fee addresses (`coinSpecific.feeAddress`), which pay their gas.
    fee_addresses: HashMap<WalletId, Address>,
    fingerprint: Option<(i64, i64, i64)>,
    /// When the fingerprint was last read.
    checked: Option<std::time::Instant>,
}

impl AddressBook {
    /// The wallet watching `a`.
    pub fn owner(&self, a: &Address) -> Option<&WalletId> {
        self.owners.get(a)
    }

    /// Every watched address with its wallet, shared (reading ahead matches against it).
    pub fn owners(&self) -> Arc<HashMap<Address, WalletId>> {
        self.owners.clone()
    }

    /// Whether `a` is a wallet's base address.
    pub fn is_base(&self, a: &Address) -> bool {
        self.bases.contains(a)
    }

    /// The fee address of `wallet`.
    pub fn fee_address(&self, wallet: &WalletId) -> Option<&Address> {
        self.fee_addresses.get(wallet)
    }

    pub fn len(&self) -> usize {
        self.owners.len()
    }

    pub fn is_empty(&self) -> bool {
        self.owners.is_empty()
    }

    /// Every address of `wallet`.
    pub fn of_wallet(&self, wallet: &WalletId) -> &[Address] {
        self.by_wallet.get(wallet).map(Vec::as_slice).unwrap_or_default()
    }

    /// Reloads from the store when the address set changed: the wallets' record addresses,
    /// then the added ones (an added address wins a tie). The set is asked about at most once
    /// per `every`: its fingerprint counts the chain's wallets, a cost that grows with them,
    /// and a backfill runs several rounds a second.
    pub async fn refresh(
        &mut self,
        store: &DynStore,
        chain: &str,
        every: std::time::Duration,
    ) -> crate::store::StoreResult<bool> {
        if self.checked.is_some_and(|at| at.elapsed() < every) {
            return Ok(false);
        }
        self.checked = Some(std::time::Instant::now());
        let fingerprint = store.address_fingerprint(chain).await?;
        if self.fingerprint == Some(fingerprint) {
            return Ok(false);
        }
        let mut owners = HashMap::new();
        let mut bases = HashSet::new();
        let mut fee_addresses = HashMap::new();
        for (wallet, record) in store.chain_wallet_records(chain).await? {
            // Parsed once: with 100,000 wallets this loop is the book's whole load.
            let Ok(v) = serde_json::from_str::<serde_json::Value>(&record) else { continue };
            bases.extend(super::record_address(&v, "/coinSpecific/baseAddress"));
            if let Some(fee) = super::record_address(&v, "/coinSpecific/feeAddress") {
                fee_addresses.insert(wallet.clone(), fee);
            }
            for a in super::record_addresses(&v) {
                owners.insert(a, wallet.clone());
            }
        }
        for (a, wallet) in store.chain_addresses(chain).await? {
            if let Ok(a) = crate::types::parse_eth_address(&a) {
                owners.insert(a, wallet);
            }
        }
        let mut by_wallet: HashMap<WalletId, Vec<Address>> = HashMap::new();
        for (a, w) in &owners {
            by_wallet.entry(w.clone()).or_default().push(*a);
        }
        self.owners = Arc::new(owners);
        self.by_wallet = by_wallet;
        self.bases = bases;
        self.fee_addresses = fee_addresses;
        self.fingerprint = Some(fingerprint);
        Ok(true)
    }
}
