//! Wallet addresses, BitGo's way (BitGoJS utxo-lib `bitgo/wallet`): a 2-of-3 multisig of the
//! wallet's three keychains, in the order user, backup, BitGo, each derived from its xpub at
//! `0/0/{chain}/{index}`. The chain code says the script type and whether it is a receive
//! (even) or change (odd) address. Keys, scripts and hashes are rust-bitcoin's; only the
//! network's version bytes and bech32 prefix are Custodian's ([`super::params`]).

use std::str::FromStr;

use bitcoin::{
    bech32::{self, Hrp},
    bip32::{ChildNumber, Xpub},
    blockdata::{opcodes::all::OP_CHECKMULTISIG, script::Builder},
    hashes::Hash,
    secp256k1::Secp256k1,
    PublicKey, ScriptBuf,
};

use super::params::AddressParams;

/// The script type of a chain code (BitGoJS `scriptTypeForChain`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ScriptType {
    /// Chains 0 and 1: the multisig in P2SH.
    P2sh,
    /// Chains 10 and 11: the multisig in P2WSH nested in P2SH.
    P2shP2wsh,
    /// Chains 20 and 21: the multisig in native P2WSH (bech32).
    P2wsh,
}

impl ScriptType {
    /// BitGo's name: `p2sh`, `p2shP2wsh`, `p2wsh`.
    pub fn as_str(self) -> &'static str {
        match self {
            ScriptType::P2sh => "p2sh",
            ScriptType::P2shP2wsh => "p2shP2wsh",
            ScriptType::P2wsh => "p2wsh",
        }
    }
}

/// A BitGo chain code: 0/1 (p2sh), 10/11 (p2shP2wsh), 20/21 (p2wsh); even receives, odd is
/// change. Taproot's 30/31 and 40/41 are not derived here.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub struct ChainCode(u32);

impl ChainCode {
    /// Errors: a message naming the codes allowed.
    pub fn new(code: u32) -> Result<ChainCode, String> {
        match code {
            0 | 1 | 10 | 11 | 20 | 21 => Ok(ChainCode(code)),
            _ => {
                Err(format!("{code} is not a chain code: 0, 1 (p2sh), 10, 11 (p2shP2wsh), 20 or 21 (p2wsh)"))
            }
        }
    }

    pub fn get(self) -> u32 {
        self.0
    }

    pub fn script_type(self) -> ScriptType {
        match self.0 / 10 {
            0 => ScriptType::P2sh,
            1 => ScriptType::P2shP2wsh,
            _ => ScriptType::P2wsh,
        }
    }

    /// An odd code: the wallet's own change.
    pub fn is_change(self) -> bool {
        self.0 % 2 == 1
    }
}

/// Parses one base58 extended public key (`xpub…` or `tpub…`, BIP 32). Errors: why not.
pub fn parse_xpub(text: &str) -> Result<Xpub, String> {
    Xpub::from_str(text.trim()).map_err(|e| format!("not an extended public key: {e}"))
}

/// A wallet's three keychains' xpubs, in the order user, backup, BitGo.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WalletKeys([Xpub; 3]);

impl WalletKeys {
    /// Parses three base58 extended public keys (`xpub…` or `tpub…`). Errors: which one is not
    /// one.
    pub fn parse(pubs: [&str; 3]) -> Result<WalletKeys, String> {
        let one = |i: usize| {
            Xpub::from_str(pubs[i].trim()).map_err(|e| {
                format!(
                    "keychain {} ({}) is not an extended public key: {e}",
                    i + 1,
                    ["user", "backup", "BitGo"][i]
                )
            })
        };
        Ok(WalletKeys([one(0)?, one(1)?, one(2)?]))
    }
}

/// An address made from a wallet's keys: the address and the scripts that spend from it
/// (hex), as BitGo lists them in `coinSpecific`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Derived {
    pub address: String,
    pub chain: ChainCode,
    pub index: u32,
    /// The output script (scriptPubKey), hex: what a watcher matches outputs against.
    pub output_script: String,
    /// P2SH's redeem script, hex (p2sh and p2shP2wsh).
    pub redeem_script: Option<String>,
    /// The witness script, hex (p2shP2wsh and p2wsh).
    pub witness_script: Option<String>,
}

/// The output script (hex) that pays `text`, an address written with `params`: base58check
/// P2PKH or P2SH with the network's version byte, or a segwit address (BIP 173/350) with its
/// bech32 prefix. Errors: why it is not one of this network's addresses.
pub fn output_script_of(text: &str, params: AddressParams) -> Result<String, String> {
    let text = text.trim();
    if text.len() > 100 {
        return Err("too long for an address".into());
    }
    if let Ok((hrp, version, program)) = bech32::segwit::decode(text) {
        if !hrp.as_str().eq_ignore_ascii_case(params.hrp) {
            return Err(format!(
                "a segwit address of another network ({}, not {})",
                hrp.as_str(),
                params.hrp
            ));
        }
        let version = bitcoin::WitnessVersion::try_from(version).map_err(|e| e.to_string())?;
        let program = bitcoin::WitnessProgram::new(version, &program).map_err(|e| e.to_string())?;
        return Ok(hex::encode(ScriptBuf::new_witness_program(&program).as_bytes()));
    }
    let payload =
        bitcoin::base58::decode_check(text).map_err(|_| "not a base58check or bech32 address".to_string())?;
    let (version, hash) = payload.split_first().ok_or("an empty address")?;
    let hash: [u8; 20] = hash.try_into().map_err(|_| "not a 20-byte hash".to_string())?;
    let script = match *version {
        v if v == params.p2pkh => ScriptBuf::new_p2pkh(&bitcoin::PubkeyHash::from_byte_array(hash)),
        v if v == params.p2sh => ScriptBuf::new_p2sh(&bitcoin::ScriptHash::from_byte_array(hash)),
        v => return Err(format!("version byte {v:#04x} is not this network's")),
    };
    Ok(hex::encode(script.as_bytes()))
}

/// The address of `keys` at `chain` and `index` (below 2^31: never hardened), written with
/// `params`. Errors: an index out of range.
pub fn derive(
    keys: &WalletKeys,
    chain: ChainCode,
    index: u32,
    params: AddressParams,
) -> Result<Derived, String> {
    let secp = Secp256k1::verification_only();
    let at = |n: u32| ChildNumber::from_normal_idx(n).map_err(|_| format!("index {n} is at or above 2^31"));
    let path = [at(0)?, at(0)?, at(chain.get())?, at(index)?];
    let mut multisig = Builder::new().push_int(2);
    for xpub in &keys.0 {
        let child = xpub.derive_pub(&secp, &path).map_err(|e| format!("cannot derive {index}: {e}"))?;
        multisig = multisig.push_key(&PublicKey::new(child.public_key));
    }
    let multisig = multisig.push_int(3).push_opcode(OP_CHECKMULTISIG).into_script();
    let p2sh = |redeem: &ScriptBuf| {
        let hash = redeem.script_hash();
        let mut payload = vec![params.p2sh];
        payload.extend_from_slice(hash.as_byte_array());
        (bitcoin::base58::encode_check(&payload), ScriptBuf::new_p2sh(&hash))
    };
    let (address, output, redeem, witness) = match chain.script_type() {
        ScriptType::P2sh => {
            let (address, output) = p2sh(&multisig);
            (address, output, Some(multisig), None)
        }
        ScriptType::P2shP2wsh => {
            let nested = ScriptBuf::new_p2wsh(&multisig.wscript_hash());
            let (address, output) = p2sh(&nested);
            (address, output, Some(nested), Some(multisig))
        }
        ScriptType::P2wsh => {
            let hash = multisig.wscript_hash();
            let hrp = Hrp::parse(params.hrp).map_err(|e| format!("bech32 prefix {}: {e}", params.hrp))?;
            let address =
                bech32::segwit::encode_v0(hrp, hash.as_byte_array()).map_err(|e| format!("bech32: {e}"))?;
            (address, ScriptBuf::new_p2wsh(&hash), None, Some(multisig))
        }
    };
    Ok(Derived {
        address,
        chain,
        index,
        output_script: hex::encode(output.as_bytes()),
        redeem_script: redeem.map(|s| hex::encode(s.as_bytes())),
        witness_script: witness.map(|s| hex::encode(s.as_bytes())),
    })
}

/// The address `script` (an output script, hex) pays, written with `params`: P2PKH, P2SH or a
/// segwit program (BIP 173/350). `None` for another script (a bare multisig, `OP_RETURN`).
pub fn address_of_script(script: &str, params: AddressParams) -> Option<String> {
    let bytes = hex::decode(script).ok()?;
    let script = bitcoin::Script::from_bytes(&bytes);
    let base58 = |version: u8, hash: &[u8]| {
        let mut payload = vec![version];
        payload.extend_from_slice(hash);
        bitcoin::base58::encode_check(&payload)
    };
    if script.is_p2pkh() {
        return Some(base58(params.p2pkh, &bytes[3..23]));
    }
    if script.is_p2sh() {
        return Some(base58(params.p2sh, &bytes[2..22]));
    }
    let version = script.witness_version()?;
    let program = bitcoin::WitnessProgram::new(version, &bytes[2..]).ok()?;
    let hrp = Hrp::parse(params.hrp).ok()?;
    bech32::segwit::encode(hrp, version.into(), program.program().as_bytes()).ok()
}

#[cfg(test)]
mod script_address_tests {
    use super::*;
    use crate::chain::utxo::params::{Family, Network};

    /// Every address kind goes to its script and back.
    #[test]
    fn an_output_script_gives_back_the_address_that_pays_it() {
        let params = Family::Litecoin.params(Network::Testnet);
        let keys = WalletKeys::parse([
            "xpub661MyMwAqRbcFtXgS5sYJABqqG9YLmC4Q1Rdap9gSE8NqtwybGhePY2gZ29ESFjqJoCu1Rupje8YtGqsefD265TMg7usUDFdp6W1EGMcet8",
            "xpub661MyMwAqRbcGczjuMoRm6dXaLDEhW1u34gKenbeYqAix21mdUKJyuyu5F1rzYGVxyL6tmgBUAEPrEz92mBXjByMRiJdba9wpnN37RLLAXa",
            "xpub661MyMwAqRbcFW31YEwpkMuc5THy2PSt5bDMsktWQcFF8syAmRUapSCGu8ED9W6oDMSgv6Zz8idoc4a6mr8BDzTJY47LJhkJ8UB7WEGuduB",
        ])
        .expect("three xpubs");
        for code in [0, 1, 10, 11, 20, 21] {
            let d = derive(&keys, ChainCode::new(code).unwrap(), 7, params).unwrap();
            assert_eq!(address_of_script(&d.output_script, params).as_deref(), Some(d.address.as_str()));
            assert_eq!(output_script_of(&d.address, params).unwrap(), d.output_script);
        }
        let p2pkh = "76a914000102030405060708090a0b0c0d0e0f1011121388ac";
        let text = address_of_script(p2pkh, params).unwrap();
        assert_eq!(output_script_of(&text, params).unwrap(), p2pkh);
        assert_eq!(address_of_script("6a0568656c6c6f", params), None, "OP_RETURN pays no address");
        assert_eq!(address_of_script("zz", params), None);
    }
}
