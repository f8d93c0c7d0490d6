//! The cryptography of BitGo's ECDH token issuance (`super::issuance` hands tokens over with it), and the
//! service's own ECDH key: the password envelope BitGoJS decrypts (`sdk-api/src/encrypt.ts`, version 1: the
//! SJCL JSON of PBKDF2-HMAC-SHA256 and AES-CCM), and the secret both sides derive from an ECDH
//! keychain (`deriveTokenIssuanceEcdhSecret` in `sdk-api/src/bitgoAPI.ts`).
//!
//! The secret is the compressed secp256k1 point `their public key × our private key`, both
//! keys derived at the same BIP32 path, as 66 hex characters with no hashing: that text is the
//! envelope's password. The client computes it with its xprv and the server's xpub; the
//! server with its xprv and the client's xpub, and gets the same point.

use aes::{Aes128, Aes256};
use base64::{engine::general_purpose::STANDARD as B64, Engine};
use bitcoin::{
    bip32::{DerivationPath, Xpriv, Xpub},
    secp256k1::{Scalar, Secp256k1},
};
use ccm::{
    aead::{generic_array::GenericArray, Aead, KeyInit, Payload},
    consts::{U13, U8},
    Ccm,
};
use rand::RngCore;
use serde::{Deserialize, Serialize};

/// PBKDF2 rounds of the envelopes Custodian makes: those of BitGoJS's own `encrypt`.
pub const ITERATIONS: u32 = 10_000;
/// Most PBKDF2 rounds an envelope to open may ask for: opening is work the caller pays for.
pub const MAX_ITERATIONS: u32 = 1_000_000;

/// Why an envelope does not open.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum EnvelopeError {
    #[error("not a version 1 (SJCL) envelope: {0}")]
    Malformed(&'static str),
    #[error("the password does not open the envelope")]
    WrongPassword,
}

/// Why a secret cannot be derived.
#[derive(Debug, thiserror::Error)]
#[error("ECDH: {0}")]
pub struct EcdhError(String);

/// BitGo's version 1 envelope: SJCL's JSON (base64 fields; `ks` and `ts` in bits).
#[derive(Debug, Serialize, Deserialize)]
struct Envelope {
    iv: String,
    v: u32,
    iter: u32,
    ks: u32,
    ts: u32,
    mode: String,
    adata: String,
    cipher: String,
    salt: String,
    ct: String,
}

/// AES-CCM with SJCL's choices for messages under 64 KiB: an 8-byte tag and a 13-byte nonce
/// (the first 13 bytes of the 16-byte `iv`, since the length takes 2 bytes).
type Ccm128 = Ccm<Aes128, U8, U13>;
type Ccm256 = Ccm<Aes256, U8, U13>;

fn key(password: &str, salt: &[u8], iter: u32, bytes: usize) -> Vec<u8> {
    let mut key = vec![0u8; bytes];
    pbkdf2::pbkdf2_hmac::<sha2::Sha256>(password.as_bytes(), salt, iter, &mut key);
    key
}

/// PBKDF2 rounds of a token sealed under an ECDH secret: BitGo's own (its fixture's 1,000). The
/// secret is a random curve point, so stretching it adds nothing.
pub const TOKEN_ITERATIONS: u32 = 1_000;

/// Seals `plaintext` under `password` as BitGoJS's `encrypt` does (version 1: 256-bit key,
/// 10,000 rounds, random 8-byte salt and 16-byte iv, 64-bit tag): the JSON text.
pub fn seal(password: &str, plaintext: &str) -> String {
    seal_with(password, plaintext, ITERATIONS)
}

/// [`seal`] with `iterations` PBKDF2 rounds.
pub fn seal_with(password: &str, plaintext: &str, iterations: u32) -> String {
    let (mut salt, mut iv) = ([0u8; 8], [0u8; 16]);
    rand::rngs::OsRng.fill_bytes(&mut salt);
    rand::rngs::OsRng.fill_bytes(&mut iv);
    let cipher = Ccm256::new(GenericArray::from_slice(&key(password, &salt, iterations, 32)));
    let payload = Payload { msg: plaintext.as_bytes(), aad: b"" };
    // Encryption fails only for a message too long for the nonce's length field (64 KiB).
    let ct = cipher.encrypt(GenericArray::from_slice(&iv[..13]), payload).unwrap_or_default();
    let envelope = Envelope {
        iv: B64.encode(iv),
        v: 1,
        iter: iterations,
        ks: 256,
        ts: 64,
        mode: "ccm".into(),
        adata: String::new(),
        cipher: "aes".into(),
        salt: B64.encode(salt),
        ct: B64.encode(ct),
    };
    serde_json::to_string(&envelope).unwrap_or_default()
}

/// Opens a version 1 envelope with `password`. Errors: `Malformed` (not SJCL JSON, a mode or
/// size this does not take, more than [`MAX_ITERATIONS`]), `WrongPassword` (the tag does not
/// match).
pub fn open(password: &str, envelope: &str) -> Result<String, EnvelopeError> {
    let e: Envelope = serde_json::from_str(envelope).map_err(|_| EnvelopeError::Malformed("JSON"))?;
    if e.v != 1 || e.mode != "ccm" || e.cipher != "aes" || e.ts != 64 {
        return Err(EnvelopeError::Malformed("only AES-CCM with a 64-bit tag"));
    }
    if e.iter == 0 || e.iter > MAX_ITERATIONS {
        return Err(EnvelopeError::Malformed("iter"));
    }
    let b64 = |s: &str| B64.decode(s).map_err(|_| EnvelopeError::Malformed("base64"));
    let (iv, salt, ct, adata) = (b64(&e.iv)?, b64(&e.salt)?, b64(&e.ct)?, b64(&e.adata)?);
    if iv.len() < 13 || ct.len() < 8 || ct.len() > 0xffff {
        return Err(EnvelopeError::Malformed("iv or ct length"));
    }
    let nonce = GenericArray::from_slice(&iv[..13]);
    let payload = Payload { msg: &ct, aad: &adata };
    let plain =
        match e.ks {
            128 => Ccm128::new(GenericArray::from_slice(&key(password, &salt, e.iter, 16)))
                .decrypt(nonce, payload),
            256 => Ccm256::new(GenericArray::from_slice(&key(password, &salt, e.iter, 32)))
                .decrypt(nonce, payload),
            _ => return Err(EnvelopeError::Malformed("ks")),
        }
        .map_err(|_| EnvelopeError::WrongPassword)?;
    String::from_utf8(plain).map_err(|_| EnvelopeError::Malformed("UTF-8"))
}

/// The token-issuance secret: `their` public key and `ours` private key, both derived at
/// `path` (non-hardened steps for `their`), multiplied; the compressed point as lowercase hex.
/// Errors: a path `their` cannot follow (hardened), or a degenerate product.
pub fn shared_secret(ours: &Xpriv, their: &Xpub, path: &DerivationPath) -> Result<String, EcdhError> {
    let secp = Secp256k1::new();
    let own = ours.derive_priv(&secp, path).map_err(|e| EcdhError(e.to_string()))?;
    let other = their.derive_pub(&secp, path).map_err(|e| EcdhError(e.to_string()))?;
    let point = other
        .public_key
        .mul_tweak(&secp, &Scalar::from(own.private_key))
        .map_err(|e| EcdhError(e.to_string()))?;
    Ok(hex::encode(point.serialize()))
}

/// A fresh derivation path for one token: `m/999999/a/b` with random non-hardened `a` and `b`
/// (31 bits each), the shape BitGo issues.
pub fn fresh_path() -> DerivationPath {
    let mut b = [0u8; 8];
    rand::rngs::OsRng.fill_bytes(&mut b);
    let step = |x: [u8; 4]| u32::from_be_bytes(x) & 0x7fff_ffff;
    let (a, c) = (step([b[0], b[1], b[2], b[3]]), step([b[4], b[5], b[6], b[7]]));
    // Each step is below 2^31, so the path always parses.
    format!("m/999999/{a}/{c}").parse().unwrap_or_default()
}

/// The name of the service's ECDH key in `server_keys`, and the associated data it is sealed
/// with under the master key.
const SERVER_KEY: &str = "ecdh";

/// The service's ECDH key (BIP32, mainnet version bytes as BitGoJS expects of `serverXpub`),
/// made from 32 random bytes the first time it is needed and kept sealed under the master key
/// (`server_keys`); a process that loses the race to make it uses the one stored.
/// Errors: the store's, or a stored key the master key does not open.
pub async fn server_key(
    store: &crate::store::DynStore,
    key: &crate::master_key::MasterKey,
) -> anyhow::Result<Xpriv> {
    let sealed = match store.server_key(SERVER_KEY).await? {
        Some(s) => s,
        None => {
            let mut seed = [0u8; 32];
            rand::rngs::OsRng.fill_bytes(&mut seed);
            let made = Xpriv::new_master(bitcoin::NetworkKind::Main, &seed)?;
            let sealed = hex::encode(key.seal(SERVER_KEY, made.to_string().as_bytes())?);
            store.keep_server_key(SERVER_KEY, &sealed, store.clock().now()).await?
        }
    };
    let plain = key.open(SERVER_KEY, &hex::decode(&sealed)?)?;
    Ok(std::str::from_utf8(&plain)?.parse()?)
}

/// The xpub of [`server_key`]: BitGoJS's `serverXpub` option.
pub async fn server_xpub(
    store: &crate::store::DynStore,
    key: &crate::master_key::MasterKey,
) -> anyhow::Result<Xpub> {
    Ok(Xpub::from_priv(&Secp256k1::new(), &server_key(store, key).await?))
}

/// A path as BitGo writes it in `derivationPath`: `m/999999/a/b`.
pub fn path_text(path: &DerivationPath) -> String {
    let text = path.to_string();
    if text.starts_with("m/") || text == "m" {
        text
    } else {
        format!("m/{text}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// BitGoJS's fixture (`modules/bitgo/test/unit/bitgo.ts`, "should correctly handle
    /// authentication response"), with the test environment's server xpub.
    const ENCRYPTED_TOKEN: &str = r#"{"iv":"EqxVaGTLY4naAYkuBaTz0w==","v":1,"iter":1000,"ks":128,"ts":64,"mode":"ccm","adata":"","cipher":"aes","salt":"4S4dBYcgL4s=","ct":"FgBRJljb8iSYxnAjMi4Qotr7sTKbSmWnlfHZShMSi8YeeE3kiS8bpHNUwAPhY8tgouh3UsEwrJnY+54MvqFD7yd19pG1V4CVssr8"}"#;
    const ENCRYPTED_XPRV: &str = r#"{"iv":"QKHEF2GNcwOJwy6+pwANRA==","v":1,"iter":10000,"ks":256,"ts":64,"mode":"ccm","adata":"","cipher":"aes","salt":"W2sVFvXDlOw=","ct":"8BTCqS25X37kLzmzQdGenhXH6znn9qEmkszAeS8kLnRdqKSiUiC7bTAVgg/Np5yrV7F7Jyiq+MTpVT76EoUT+PMJzArv0gUQKC2JPB3JuVKeAAVWBQmhWfkEwRfyv4hq4WMxwZtocwBqThvd2pJm9HE51GX4/Wo="}"#;
    const XPRV: &str = "xprv9s21ZrQH143K3si1bKGp7KqgCQv39ttQ7aUwWzVdytgHd8HtDCHyEp14mxfhiT3qHTq4BaSrA7uUkG6AJTfPJBsRu63drvBqYuMZyTxepH7";
    const TEST_SERVER_XPUB: &str = "xpub661MyMwAqRbcErFqVXGiUFv9YeoPbhN72UiNCUdj9nj3T6M8h7iKNmbCYpMVWVZP7LA2ma3HWcPngz1gRTm4FPdtm9mHfrNvU93MCoszsGL";
    const TOKEN: &str = "v2x5b735fed2486593f8fea19113e5c717308f90a5fb00e740e46c7bfdcc078cfd0";

    #[test]
    fn bitgo_fixture_opens_to_its_token() {
        let xprv = open("test@bitgo.com", ENCRYPTED_XPRV).expect("the xprv envelope opens");
        assert_eq!(xprv, XPRV);
        let path: DerivationPath = "m/999999/104490948/173846667".parse().unwrap();
        let secret =
            shared_secret(&XPRV.parse().unwrap(), &TEST_SERVER_XPUB.parse().unwrap(), &path).unwrap();
        assert_eq!(secret.len(), 66);
        assert_eq!(open(&secret, ENCRYPTED_TOKEN).expect("the token envelope opens"), TOKEN);
        assert_eq!(open("wrong", ENCRYPTED_XPRV), Err(EnvelopeError::WrongPassword));
    }

    #[test]
    fn both_sides_derive_the_same_secret_and_a_sealed_token_opens() {
        let secp = Secp256k1::new();
        let server = Xpriv::new_master(bitcoin::NetworkKind::Main, &[7u8; 32]).unwrap();
        let client = Xpriv::new_master(bitcoin::NetworkKind::Main, &[9u8; 32]).unwrap();
        let path = fresh_path();
        assert!(path_text(&path).starts_with("m/999999/"), "{}", path_text(&path));
        let by_server = shared_secret(&server, &Xpub::from_priv(&secp, &client), &path).unwrap();
        let by_client = shared_secret(&client, &Xpub::from_priv(&secp, &server), &path).unwrap();
        assert_eq!(by_server, by_client);
        let sealed = seal(&by_server, TOKEN);
        assert_eq!(open(&by_client, &sealed).unwrap(), TOKEN);
        assert_eq!(open("another", &sealed), Err(EnvelopeError::WrongPassword));
        let fields: serde_json::Value = serde_json::from_str(&sealed).unwrap();
        assert_eq!(
            (fields["v"].as_u64(), fields["ks"].as_u64(), fields["iter"].as_u64()),
            (Some(1), Some(256), Some(10_000))
        );
    }

    #[test]
    fn hostile_envelopes_are_refused_without_the_work() {
        for bad in [
            "not json",
            r#"{"iv":"","v":2,"iter":1,"ks":128,"ts":64,"mode":"ccm","adata":"","cipher":"aes","salt":"","ct":""}"#,
            r#"{"iv":"EqxVaGTLY4naAYkuBaTz0w==","v":1,"iter":4000000000,"ks":128,"ts":64,"mode":"ccm","adata":"","cipher":"aes","salt":"4S4dBYcgL4s=","ct":"FgBR"}"#,
            r#"{"iv":"EqxVaGTLY4naAYkuBaTz0w==","v":1,"iter":1,"ks":192,"ts":64,"mode":"ccm","adata":"","cipher":"aes","salt":"4S4dBYcgL4s=","ct":"FgBRJljb8iSYxnAjMi4Q"}"#,
        ] {
            assert!(matches!(open("pw", bad), Err(EnvelopeError::Malformed(_))), "{bad}");
        }
    }
}
