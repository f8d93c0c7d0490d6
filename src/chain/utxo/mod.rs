//! UTXO chains (docs/chains.md#utxo-chains): Bitcoin and its family (Litecoin first, as Debian
//! ships its node). Addresses are derived BitGo's way ([`address`]); network parameters are
//! [`params`].
//!
//! Layer rule: no web-framework types and nothing of the HTTP layer (docs/architecture.md).

pub mod address;
pub mod params;
pub mod wallets;
