//! The `sealed` key backend (the default): keys made with RustCrypto's `k256`, their scalars
//! sealed under the master key (aad `custody-key:<id>`) and zeroized after each use.

use std::sync::Arc;

use alloy_primitives::B256;
use async_trait::async_trait;
use k256::{
    ecdsa::{
        hazmat::{bits2field, SignPrimitive},
        RecoveryId, Signature, SigningKey,
    },
    NonZeroScalar, Secp256k1,
};
use zeroize::Zeroizing;

use crate::custody::keys::{KeyError, KeyStore, NewKey};
use crate::{master_key::MasterKey, model::custody::KeyRecord, types::KeyId};

/// Keys sealed under the master key, kept in the database.
pub struct SealedKeys {
    pub key: Arc<MasterKey>,
}

fn aad(id: &str) -> String {
    format!("custody-key:{id}")
}

#[async_trait]
impl KeyStore for SealedKeys {
    fn backend(&self) -> &'static str {
        "sealed"
    }

    async fn generate(&self, id: &KeyId) -> Result<NewKey, KeyError> {
        let signing = SigningKey::random(&mut rand::rngs::OsRng);
        let public_key = signing.verifying_key().to_encoded_point(false).as_bytes().to_vec();
        let scalar = Zeroizing::new(signing.to_bytes());
        let handle = self
            .key
            .seal(&aad(id.as_str()), scalar.as_slice())
            .map_err(|e| KeyError::Backend(e.to_string()))?;
        Ok(NewKey { public_key, handle })
    }

    async fn sign_digest(&self, key: &KeyRecord, digest: &B256) -> Result<[u8; 64], KeyError> {
        Ok(self.sign_digest_with_parity(key, digest).await?.0)
    }

    async fn sign_digest_with_parity(
        &self,
        key: &KeyRecord,
        digest: &B256,
    ) -> Result<([u8; 64], Option<bool>), KeyError> {
        let (master, id, handle, digest) = (self.key.clone(), key.id.clone(), key.handle.clone(), *digest);
        // Opening and signing are CPU work: off the async workers.
        tokio::task::spawn_blocking(move || sign_sealed(&master, &id, &handle, &digest))
            .await
            .map_err(|e| KeyError::Backend(format!("signing stopped: {e}")))?
    }
}

/// Opens the key sealed in `handle` and signs `digest`: r || s (s low), and R's y parity.
fn sign_sealed(
    master: &MasterKey,
    id: &KeyId,
    handle: &[u8],
    digest: &B256,
) -> Result<([u8; 64], Option<bool>), KeyError> {
    let scalar =
        Zeroizing::new(master.open(&aad(id.as_str()), handle).map_err(|e| KeyError::Backend(e.to_string()))?);
    // The scalar itself signs (RFC 6979, as `SigningKey::sign_prehash_recoverable` does), s made
    // low by k256: a `SigningKey` would first compute the public key, a curve multiplication
    // per signature that nothing here uses.
    let secret = Zeroizing::new(
        NonZeroScalar::try_from(scalar.as_slice())
            .map_err(|_| KeyError::Backend("a sealed key is not a scalar".into()))?,
    );
    let z = bits2field::<Secp256k1>(digest.as_slice()).map_err(|e| KeyError::Backend(e.to_string()))?;
    let (sig, recid): (Signature, Option<RecoveryId>) = secret
        .try_sign_prehashed_rfc6979::<sha2::Sha256>(&z, &[])
        .map_err(|e| KeyError::Backend(e.to_string()))?;
    let mut out = [0u8; 64];
    out.copy_from_slice(&sig.to_bytes());
    Ok((out, recid.map(|r| r.is_y_odd())))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::custody::keys::{address_of, sign};

    #[tokio::test]
    async fn a_sealed_key_signs_for_its_address_and_opens_only_under_its_own_id() {
        let keys = SealedKeys { key: Arc::new(MasterKey::from_hex(&"ab".repeat(32)).unwrap()) };
        let id = KeyId::new_random();
        let made = keys.generate(&id).await.unwrap();
        let mut record = KeyRecord {
            id: id.clone(),
            wallet_id: crate::types::WalletId::new_random(),
            backend: "sealed".into(),
            address: address_of(&made.public_key).unwrap(),
            public_key: made.public_key,
            handle: made.handle,
            created_at: 0,
        };
        // The handle is not the scalar: nonce, ciphertext and tag.
        assert_eq!(record.handle.len(), 24 + 32 + 16);
        let digest = B256::repeat_byte(1);
        let sig = sign(&keys, &record, &digest, || panic!("a sealed key signs right")).await.unwrap();
        assert_eq!(sig.recover_address_from_prehash(&digest).unwrap(), record.address);
        // The same sealed bytes under another id do not open.
        record.id = KeyId::new_random();
        assert!(keys.sign_digest(&record, &digest).await.is_err());
    }
}
