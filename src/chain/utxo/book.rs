//! The output scripts a UTXO watcher matches (docs/chains.md#utxo-chains): every address of the
//! chain's wallets, derived or imported, and each wallet record's `receiveAddress`. Read again
//! when the chain's address set changes (its fingerprint), at most once per `every`.

use std::collections::HashMap;

use super::effect::Owner;
use crate::store::{DynStore, StoreResult};
use crate::types::Coin;

#[derive(Default)]
pub struct ScriptBook {
    /// By output script (hex).
    scripts: HashMap<String, Owner>,
    fingerprint: Option<(i64, i64, i64)>,
    checked: Option<std::time::Instant>,
}

impl ScriptBook {
    /// The watched output scripts and their owners.
    pub fn scripts(&self) -> &HashMap<String, Owner> {
        &self.scripts
    }

    /// Reads the set again if it changed; whether it did.
    pub async fn refresh(
        &mut self,
        store: &DynStore,
        chain: &Coin,
        every: std::time::Duration,
    ) -> StoreResult<bool> {
        if self.checked.is_some_and(|at| at.elapsed() < every) {
            return Ok(false);
        }
        self.checked = Some(std::time::Instant::now());
        let fingerprint = store.address_fingerprint(chain.as_str()).await?;
        if self.fingerprint == Some(fingerprint) {
            return Ok(false);
        }
        let mut scripts = HashMap::new();
        for (wallet, record) in store.chain_wallet_records(chain.as_str()).await? {
            let Ok(v) = serde_json::from_str::<serde_json::Value>(&record) else { continue };
            let Ok(Some(a)) = super::wallets::record_address_of(chain, &wallet, &v) else { continue };
            if let Some(s) = a.scripts {
                scripts.insert(s.output_script, Owner { wallet, address: a.address, position: a.position });
            }
        }
        // An added address wins over a record's.
        for b in store.utxo_book(chain.as_str()).await? {
            let Ok(a) = b.row.into_address(&b.wallet_id) else { continue };
            if let Some(s) = a.scripts {
                let owner = Owner { wallet: b.wallet_id, address: a.address, position: a.position };
                scripts.insert(s.output_script, owner);
            }
        }
        self.scripts = scripts;
        self.fingerprint = Some(fingerprint);
        Ok(true)
    }
}
