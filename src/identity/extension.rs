//! The proof BitGoJS gives to extend a session (docs/decisions.md#bitgos-paths-and-password-form). At an extensible login the SDK
//! makes a key pair and sends the key's Bitcoin P2PKH address (`extensionAddress`); to extend,
//! it signs `{timestamp ms}|{token}|{duration}` as a Bitcoin signed message (the prefix
//! "\x18Bitcoin Signed Message:\n", double SHA-256, a 65-byte recoverable signature) and sends
//! it in the `timestamp` and `signature` (hex) headers. The check is the `bitcoin` crate's
//! `MessageSignature::is_signed_by_address`.

use std::{str::FromStr, sync::OnceLock};

use bitcoin::{
    secp256k1::{Secp256k1, VerifyOnly},
    sign_message::{signed_msg_hash, MessageSignature},
    Address, AddressType,
};

use crate::error::{Error, Result};

fn secp() -> &'static Secp256k1<VerifyOnly> {
    static CTX: OnceLock<Secp256k1<VerifyOnly>> = OnceLock::new();
    CTX.get_or_init(Secp256k1::verification_only)
}

/// Checks an `extensionAddress`: a P2PKH address (mainnet or testnet, which the SDK's network
/// decides), at most 64 characters. Errors: `InvalidField` naming `extensionAddress`.
pub fn parse_address(text: &str) -> Result<String> {
    let bad = || Error::invalid_field("extensionAddress", "must be a Bitcoin P2PKH address");
    if text.len() > 64 {
        return Err(bad());
    }
    let address = Address::from_str(text).map_err(|_| bad())?.assume_checked();
    if address.address_type() != Some(AddressType::P2pkh) {
        return Err(bad());
    }
    Ok(text.to_string())
}

/// Whether `signature_hex` (65 bytes) is `address`'s Bitcoin signed message of
/// `{timestamp}|{token}|{duration}`. False for anything malformed.
pub fn signed_by(address: &str, timestamp: &str, token: &str, duration: u64, signature_hex: &str) -> bool {
    let Ok(address) = Address::from_str(address).map(|a| a.assume_checked()) else { return false };
    let Some(signature) = hex::decode(signature_hex).ok().and_then(|b| MessageSignature::from_slice(&b).ok())
    else {
        return false;
    };
    let message = format!("{timestamp}|{token}|{duration}");
    signature.is_signed_by_address(secp(), &address, signed_msg_hash(&message)).unwrap_or(false)
}

#[cfg(test)]
mod tests {
    use super::*;
    use bitcoin::{
        hashes::Hash, secp256k1::SecretKey, sign_message::MessageSignature, Network, PrivateKey, PublicKey,
    };

    /// A signature made as BitGoJS makes it (`bitcoinMessage.sign`, compressed key) verifies; a
    /// changed message or another key does not.
    #[test]
    fn a_bitcoin_signed_message_is_checked_against_its_address() {
        let full = Secp256k1::new();
        let key = SecretKey::from_slice(&[7u8; 32]).expect("key");
        let public = PublicKey::from_private_key(&full, &PrivateKey::new(key, Network::Testnet));
        let address = Address::p2pkh(public, Network::Testnet).to_string();
        assert_eq!(parse_address(&address).expect("valid"), address);
        let message = "1700000000000|v2xabc|3600";
        let hash = signed_msg_hash(message);
        let digest = bitcoin::secp256k1::Message::from_digest(hash.to_byte_array());
        let signature = MessageSignature::new(full.sign_ecdsa_recoverable(&digest, &key), true);
        let hex = hex::encode(signature.serialize());
        assert!(signed_by(&address, "1700000000000", "v2xabc", 3600, &hex));
        assert!(!signed_by(&address, "1700000000000", "v2xabc", 3601, &hex), "another duration");
        let other = Address::p2pkh(
            PublicKey::from_private_key(
                &full,
                &PrivateKey::new(SecretKey::from_slice(&[8u8; 32]).expect("key"), Network::Testnet),
            ),
            Network::Testnet,
        )
        .to_string();
        assert!(!signed_by(&other, "1700000000000", "v2xabc", 3600, &hex), "another key");
        assert!(!signed_by(&address, "1700000000000", "v2xabc", 3600, "zz"), "not hex");
        assert!(parse_address("tb1qw508d6qejxtdg4y5r3zarvary0c5xw7kxpjzsx").is_err(), "not P2PKH");
    }
}
