//! UTXO chains (docs/chains.md#utxo-chains): Bitcoin and its family (Litecoin first, as Debian
//! ships its node). Addresses are derived BitGo's way ([`address`]); network parameters are
//! [`params`]; a node is read through [`node`], and a transaction's effect on the watched
//! wallets is [`effect`].
//!
//! Layer rule: no web-framework types and nothing of the HTTP layer (docs/architecture.md).

pub mod address;
pub mod book;
pub mod effect;
pub mod legs;
pub mod node;
pub mod params;
pub mod unspents;
pub mod wallets;
pub mod watch;
