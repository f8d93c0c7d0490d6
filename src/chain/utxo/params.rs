//! The address parameters of each UTXO network: base58 version bytes and the bech32 human
//! readable part. Bitcoin's are BIP 13/173's; Litecoin's are Litecoin Core's `chainparams.cpp`
//! (P2SH with its `SCRIPT_ADDRESS2` prefix, as Litecoin Core and BitGo's utxo-lib write them).

use crate::types::Coin;

pub use crate::config::Network;

/// How addresses of one coin on one network are written.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AddressParams {
    /// The base58check version byte of a P2PKH address.
    pub p2pkh: u8,
    /// The base58check version byte of a P2SH address.
    pub p2sh: u8,
    /// The bech32 human-readable part of a segwit address (BIP 173).
    pub hrp: &'static str,
}

/// The family a UTXO coin belongs to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Family {
    Bitcoin,
    Litecoin,
}

impl Family {
    /// The UTXO family of `coin` (`btc`, `tbtc`, `ltc`, `tltc`), or `None` for another coin.
    pub fn of(coin: &Coin) -> Option<Family> {
        match coin.as_str() {
            "btc" | "tbtc" => Some(Family::Bitcoin),
            "ltc" | "tltc" => Some(Family::Litecoin),
            _ => None,
        }
    }

    /// The network BitGo's ticker names: `t`-prefixed coins are testnet.
    pub fn default_network(coin: &Coin) -> Network {
        match coin.as_str().starts_with('t') {
            true => Network::Testnet,
            false => Network::Mainnet,
        }
    }

    /// Its address parameters on `network`.
    pub fn params(self, network: Network) -> AddressParams {
        match (self, network) {
            (Family::Bitcoin, Network::Mainnet) => AddressParams { p2pkh: 0x00, p2sh: 0x05, hrp: "bc" },
            (Family::Bitcoin, Network::Testnet) => AddressParams { p2pkh: 0x6f, p2sh: 0xc4, hrp: "tb" },
            (Family::Bitcoin, Network::Regtest) => AddressParams { p2pkh: 0x6f, p2sh: 0xc4, hrp: "bcrt" },
            (Family::Litecoin, Network::Mainnet) => AddressParams { p2pkh: 0x30, p2sh: 0x32, hrp: "ltc" },
            (Family::Litecoin, Network::Testnet) => AddressParams { p2pkh: 0x6f, p2sh: 0x3a, hrp: "tltc" },
            (Family::Litecoin, Network::Regtest) => AddressParams { p2pkh: 0x6f, p2sh: 0x3a, hrp: "rltc" },
        }
    }
}
