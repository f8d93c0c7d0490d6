//! SHA-256 and HMAC-SHA256 as the service uses them everywhere: token hashes, idempotency keys,
//! webhook signatures, BitGo's password form and signed requests. One place, so every MAC
//! comparison is the constant-time one.

use hmac::{Hmac, Mac};
use sha2::{Digest, Sha256};

/// Lowercase hex SHA-256 of `bytes`.
pub fn sha256_hex(bytes: &[u8]) -> String {
    hex::encode(Sha256::digest(bytes))
}

fn keyed(key: &[u8], parts: &[&[u8]]) -> Hmac<Sha256> {
    // HMAC takes a key of any length (RFC 2104): this cannot fail.
    let mut mac = <Hmac<Sha256> as Mac>::new_from_slice(key).unwrap_or_else(|_| unreachable!());
    for p in parts {
        mac.update(p);
    }
    mac
}

/// HMAC-SHA256 of the concatenated `parts`, keyed with `key`.
pub fn hmac_sha256(key: &[u8], parts: &[&[u8]]) -> [u8; 32] {
    keyed(key, parts).finalize().into_bytes().into()
}

/// [`hmac_sha256`] in lowercase hex.
pub fn hmac_sha256_hex(key: &[u8], parts: &[&[u8]]) -> String {
    hex::encode(hmac_sha256(key, parts))
}

/// Whether `expected` is the HMAC-SHA256 of `parts` under `key`, compared in constant time.
pub fn hmac_sha256_verify(key: &[u8], parts: &[&[u8]], expected: &[u8]) -> bool {
    keyed(key, parts).verify_slice(expected).is_ok()
}
