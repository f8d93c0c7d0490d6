//! Keys Custodian holds (docs/withdrawals.md#keys): a [`KeyStore`] makes secp256k1 keys and
//! signs 32-byte digests with them; the private key never leaves it. [`sign`] turns what a
//! backend gives (r and s, perhaps a high s, no recovery id: PKCS#11's `CKM_ECDSA`) into an
//! Ethereum signature that is checked against the key's public key before anyone uses it.

pub mod pkcs11;
pub mod sealed;

use alloy_primitives::{Address, Signature, B256, U256};
use async_trait::async_trait;

use crate::model::custody::KeyRecord;
use crate::types::KeyId;

/// What a key backend can fail with. The text never holds key material.
#[derive(Debug, thiserror::Error)]
pub enum KeyError {
    /// The backend failed (the HSM refused, the sealed key does not open).
    #[error("key store: {0}")]
    Backend(String),
    /// Every attempt gave a signature that does not verify against the key's public key
    /// (SoftHSMv2's issue #901 describes such signatures); nothing was used.
    #[error("key store: no signature verified after {0} attempts")]
    Unverified(u32),
}

/// A key just made: its SEC1 uncompressed public key (65 bytes) and the backend's handle to
/// find it again (never the private key in the clear).
pub struct NewKey {
    pub public_key: Vec<u8>,
    pub handle: Vec<u8>,
}

/// A place that holds secp256k1 keys: `sealed` (embedded, under the master key) or `pkcs11`
/// (an HSM). Implementations never return, log or serialise a private key.
#[async_trait]
pub trait KeyStore: Send + Sync {
    /// `keys.backend`'s name for it.
    fn backend(&self) -> &'static str;
    /// Makes a key to be known as `id`.
    async fn generate(&self, id: &KeyId) -> Result<NewKey, KeyError>;
    /// ECDSA over `digest` (no hashing), as 32-byte r then 32-byte s. The s may be high.
    async fn sign_digest(&self, key: &KeyRecord, digest: &B256) -> Result<[u8; 64], KeyError>;
    /// [`Self::sign_digest`], with the y parity of the signature's R when the backend knows it
    /// (`sealed` does; an HSM does not): a hint that orders the recovery, never trusted.
    async fn sign_digest_with_parity(
        &self,
        key: &KeyRecord,
        digest: &B256,
    ) -> Result<([u8; 64], Option<bool>), KeyError> {
        Ok((self.sign_digest(key, digest).await?, None))
    }
}

/// Signatures tried before giving up on a key that signs wrongly.
pub const SIGN_ATTEMPTS: u32 = 3;

/// The address of a SEC1 uncompressed public key (65 bytes, `04 || x || y`).
pub fn address_of(public_key: &[u8]) -> Result<Address, KeyError> {
    match public_key {
        [4, rest @ ..] if rest.len() == 64 => Ok(Address::from_raw_public_key(rest)),
        _ => Err(KeyError::Backend("a public key is 65 bytes starting with 04".into())),
    }
}

/// Signs `digest` with `key` in `keys`: s made low (EIP-2), v found by recovery, and the
/// signature's recovered address checked to be the key's. A signature that does not verify
/// is made again, at most [`SIGN_ATTEMPTS`] times in all; `unverified` is called for each
/// one refused. Errors: the backend's, or [`KeyError::Unverified`].
pub async fn sign(
    keys: &dyn KeyStore,
    key: &KeyRecord,
    digest: &B256,
    mut unverified: impl FnMut(),
) -> Result<Signature, KeyError> {
    for _ in 0..SIGN_ATTEMPTS {
        let (rs, parity) = keys.sign_digest_with_parity(key, digest).await?;
        // Recovery is the costly part: off the async workers, so a batch's use every core.
        let (d, address) = (*digest, key.address);
        let checked = tokio::task::spawn_blocking(move || verified(&rs, &d, &address, parity))
            .await
            .map_err(|e| KeyError::Backend(format!("the signature check stopped: {e}")))?;
        match checked {
            Some(sig) => return Ok(sig),
            None => unverified(),
        }
    }
    Err(KeyError::Unverified(SIGN_ATTEMPTS))
}

/// The signature `rs` of `digest` with a low s and the parity that recovers `address`, if any;
/// `parity`, when given, is tried first.
pub fn verified(rs: &[u8; 64], digest: &B256, address: &Address, parity: Option<bool>) -> Option<Signature> {
    let r = U256::from_be_slice(&rs[..32]);
    let s = U256::from_be_slice(&rs[32..]);
    let sig = Signature::new(r, s, false).normalize_s().unwrap_or(Signature::new(r, s, false));
    let first = parity.unwrap_or(false);
    [first, !first]
        .into_iter()
        .map(|parity| sig.with_parity(parity))
        .find(|candidate| candidate.recover_address_from_prehash(digest).is_ok_and(|a| &a == address))
}

#[cfg(test)]
mod tests {
    use super::*;
    use k256::ecdsa::{signature::hazmat::PrehashSigner, SigningKey};

    fn key() -> (SigningKey, Address) {
        let k = SigningKey::from_slice(&[7u8; 32]).unwrap();
        let public = k.verifying_key().to_encoded_point(false);
        (k.clone(), address_of(public.as_bytes()).unwrap())
    }

    fn rs_of(k: &SigningKey, digest: &B256) -> [u8; 64] {
        let sig: k256::ecdsa::Signature = k.sign_prehash(digest.as_slice()).unwrap();
        let mut out = [0u8; 64];
        out.copy_from_slice(&sig.to_bytes());
        out
    }

    #[test]
    fn a_signature_verifies_only_against_its_own_key_and_a_high_s_is_made_low() {
        let (k, address) = key();
        let digest = B256::repeat_byte(0x42);
        let rs = rs_of(&k, &digest);
        let sig = verified(&rs, &digest, &address, None).expect("its own key");
        assert_eq!(sig.recover_address_from_prehash(&digest).unwrap(), address);
        // Another key's address: refused.
        let other = address_of(
            SigningKey::from_slice(&[8u8; 32]).unwrap().verifying_key().to_encoded_point(false).as_bytes(),
        )
        .unwrap();
        assert!(verified(&rs, &digest, &other, None).is_none());
        // Another digest: refused.
        assert!(verified(&rs, &B256::repeat_byte(0x43), &address, Some(true)).is_none());
        // The same signature with s = n - s (what PKCS#11 may give): accepted, and low again.
        let n = U256::from_str_radix("fffffffffffffffffffffffffffffffebaaedce6af48a03bbfd25e8cd0364141", 16)
            .unwrap();
        let s = U256::from_be_slice(&rs[32..]);
        let mut high = rs;
        high[32..].copy_from_slice(&(n - s).to_be_bytes::<32>());
        let fixed = verified(&high, &digest, &address, Some(false)).expect("a high s is normalised");
        assert_eq!(fixed.s(), sig.s());
        assert!(fixed.s() <= n / U256::from(2));
    }

    #[test]
    fn public_keys_are_65_bytes_starting_with_04() {
        assert!(address_of(&[4u8; 64]).is_err());
        assert!(address_of(&[2u8; 33]).is_err());
    }

    struct Broken;

    #[async_trait]
    impl KeyStore for Broken {
        fn backend(&self) -> &'static str {
            "broken"
        }
        async fn generate(&self, _id: &KeyId) -> Result<NewKey, KeyError> {
            Err(KeyError::Backend("no".into()))
        }
        async fn sign_digest(&self, _key: &KeyRecord, _digest: &B256) -> Result<[u8; 64], KeyError> {
            // A signature of another key: it never verifies.
            Ok(rs_of(&SigningKey::from_slice(&[9u8; 32]).unwrap(), &B256::ZERO))
        }
    }

    #[tokio::test]
    async fn a_key_store_that_signs_wrongly_is_asked_three_times_then_refused() {
        let (_, address) = key();
        let record = KeyRecord {
            id: KeyId::new_random(),
            wallet_id: crate::types::WalletId::new_random(),
            backend: "broken".into(),
            public_key: Vec::new(),
            address,
            handle: Vec::new(),
            created_at: 0,
        };
        let mut refused = 0;
        let e = sign(&Broken, &record, &B256::ZERO, || refused += 1).await.unwrap_err();
        assert!(matches!(e, KeyError::Unverified(3)), "{e}");
        assert_eq!(refused, 3);
    }
}
