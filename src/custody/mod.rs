//! Custody (docs/withdrawals.md): keys Custodian holds, custodial wallets, withdrawals that
//! people approve, and the signer that sends them exactly once.
//!
//! The way of a withdrawal: [`withdrawal::initiate`] stores it with its pending approval
//! (`pendingApproval`); [`approvals::resolve`] records each answer, and the last approval moves
//! it to `pendingDelivery`; the [`signer`] reserves the address's nonce (stored), signs in the
//! [`keys::KeyStore`] and checks the signature, stores the signed bytes (`signed`), then
//! broadcasts them (`delivered`). The chain watcher sees the transfer like any other.
//!
//! Layer rule: no web-framework types and nothing of the HTTP layer (docs/architecture.md).

pub mod approvals;
pub mod breaker;
pub mod events;
pub mod freeze;
pub mod history;
pub mod keys;
pub mod policy;
pub mod prices;
pub mod reserve;
pub mod signer;

pub use keys::{pkcs11, sealed};
use signer::{batch, memo, progress};
pub use signer::{gaps, node, replace, transaction};
pub mod tokens;
pub mod views;
pub mod wallets;
pub mod withdrawal;

use std::sync::Arc;

use crate::{
    config::Config,
    error::{Error, ErrorName, Result},
    identity::Identity,
    metrics::Metrics,
    store::DynStore,
    types::Coin,
    wallets::Wallets,
};

/// The handles custody's functions use; cheap to clone.
#[derive(Clone)]
pub struct Custody {
    pub store: DynStore,
    pub config: Arc<Config>,
    pub wallets: Wallets,
    /// For the OTP each approval and withdrawal needs.
    pub identity: Identity,
    pub keys: Arc<dyn keys::KeyStore>,
    pub metrics: Arc<Metrics>,
    /// The fan-out of withdrawals' events (`custody::events`).
    pub webhooks: crate::webhooks::Webhooks,
    /// Wakes this process's signers when a withdrawal becomes ready to sign (its last
    /// approval): they start a round at once rather than at their next poll. Signers of other
    /// processes find it at their poll (`withdrawals.poll_interval_ms`).
    pub wake: Arc<tokio::sync::watch::Sender<u64>>,
    /// The client and slots of `webhook` policy rules' checks.
    pub policy_hooks: Arc<policy::hooks::PolicyHooks>,
    /// The nodes `[prices.<coin>]` feeds are read through.
    pub feeds: Arc<prices::Feeds>,
}

impl Custody {
    /// Tells this process's signers there is a withdrawal to sign.
    pub fn wake_signers(&self) {
        self.wake.send_modify(|n| *n = n.wrapping_add(1));
    }

    /// The configured key backend (`keys.backend`). Errors: one line naming what failed (a
    /// module that does not load, no such token, a refused PIN), never the PIN.
    pub fn key_store(
        config: &Config,
        master: Arc<crate::master_key::MasterKey>,
    ) -> anyhow::Result<Arc<dyn keys::KeyStore>> {
        let k = &config.keys;
        if k.backend != "pkcs11" {
            return Ok(Arc::new(sealed::SealedKeys { key: master }));
        }
        let (Some(module), Some(token)) = (&k.pkcs11_module, &k.pkcs11_token) else {
            anyhow::bail!("keys.backend = \"pkcs11\" needs keys.pkcs11_module and keys.pkcs11_token");
        };
        let pin = zeroize::Zeroizing::new(k.pkcs11_pin().map_err(anyhow::Error::msg)?);
        let hsm = pkcs11::HsmKeys::open(module, token, &pin)
            .map_err(|e| anyhow::anyhow!("keys.backend = \"pkcs11\": {e}"))?;
        Ok(Arc::new(hsm))
    }
}

/// Coins whose custodial wallets Custodian can hold and spend from: the Ethereum chains it
/// watches (their tokens come next; docs/withdrawals.md).
pub fn spendable_coin(config: &Config, coin: &Coin) -> Result<()> {
    if coin.as_str().contains(':') || config.chains.get(coin.as_str()).is_none_or(|c| c.is_utxo()) {
        return Err(Error::Invalid {
            name: ErrorName::InvalidField,
            message: format!(
                "{coin} is not a chain this service watches: custodial wallets are made for a configured Ethereum chain (docs/withdrawals.md)"
            ),
            context: serde_json::json!({ "field": "coin" }),
        });
    }
    Ok(())
}
