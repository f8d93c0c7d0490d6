//! The `pkcs11` key backend: keys made inside an HSM through PKCS#11 (the `cryptoki` crate),
//! never extractable (`CKA_EXTRACTABLE` false, `CKA_SENSITIVE` true), on secp256k1
//! (OID 1.3.132.0.10), signing digests with `CKM_ECDSA` and good for nothing else: every other
//! use (decrypt, unwrap, derive, sign-recover; encrypt, wrap on the public part) is false, and
//! the private key can be neither modified nor copied, since tokens such as SoftHSM2 default
//! some of them to true. The HSM gives r and s without a
//! recovery id and may give a high s: `custody::keys::sign` normalises, recovers and checks
//! every signature, and makes it again when it does not verify (SoftHSMv2's issue #901).
//!
//! PKCS#11 calls block, so each runs on the blocking pool, one at a time on the one logged-in
//! session (a bound on what the HSM is asked at once).

use std::sync::{Arc, Mutex};

use alloy_primitives::B256;
use async_trait::async_trait;
use cryptoki::{
    context::{CInitializeArgs, Pkcs11},
    mechanism::Mechanism,
    object::{Attribute, AttributeType, ObjectClass, ObjectHandle},
    session::{Session, UserType},
    types::AuthPin,
};

use crate::custody::keys::{KeyError, KeyStore, NewKey};
use crate::{model::custody::KeyRecord, types::KeyId};

/// DER of the secp256k1 curve's OID (1.3.132.0.10), `CKA_EC_PARAMS`.
const SECP256K1: &[u8] = &[0x06, 0x05, 0x2b, 0x81, 0x04, 0x00, 0x0a];

/// Keys in a PKCS#11 token, reached through one logged-in session.
pub struct HsmKeys {
    session: Arc<Mutex<Session>>,
}

/// The process's one PKCS#11 context: a module is initialized once per process (a second
/// `C_Initialize` is refused) and finalized never, since every key store shares it.
static CONTEXT: Mutex<Option<(std::path::PathBuf, Pkcs11)>> = Mutex::new(None);

/// The process's PKCS#11 context of `module` (a shared library path), loaded and initialized at
/// the first call and shared after: what a key store uses, and what a check of a token's objects
/// (tests/api/hsm.rs) opens its own session with. Errors: `Backend` when the module does not
/// load or initialize, or another module is loaded already.
pub fn context(module: &std::path::Path) -> Result<Pkcs11, KeyError> {
    let mut held = CONTEXT.lock().map_err(|_| KeyError::Backend("the PKCS#11 context is poisoned".into()))?;
    if let Some((path, context)) = held.as_ref() {
        if path != module {
            return Err(KeyError::Backend(format!(
                "this process uses the PKCS#11 module {} already; one module per process",
                path.display()
            )));
        }
        return Ok(context.clone());
    }
    let context =
        Pkcs11::new(module).map_err(|e| backend(format!("cannot load {}: {e}", module.display())))?;
    context.initialize(CInitializeArgs::OsThreads).map_err(backend)?;
    *held = Some((module.to_path_buf(), context.clone()));
    Ok(context)
}

fn backend(e: impl std::fmt::Display) -> KeyError {
    KeyError::Backend(crate::text::clip(e.to_string(), 256))
}

impl HsmKeys {
    /// Loads the module at `module`, finds the token labelled `token`, and logs in with
    /// `pin`. Errors: one line naming what failed (never the PIN).
    pub fn open(module: &std::path::Path, token: &str, pin: &str) -> Result<Self, KeyError> {
        let context = context(module)?;
        let slot = context
            .get_slots_with_token()
            .map_err(backend)?
            .into_iter()
            .find(|s| context.get_token_info(*s).is_ok_and(|t| t.label().trim_end() == token))
            .ok_or_else(|| {
                KeyError::Backend(format!("no token labelled `{token}` in {}", module.display()))
            })?;
        let session = context.open_rw_session(slot).map_err(backend)?;
        // Login is per application: another key store of this process may have logged in.
        match session.login(UserType::User, Some(&AuthPin::new(pin.into()))) {
            Ok(())
            | Err(cryptoki::error::Error::Pkcs11(cryptoki::error::RvError::UserAlreadyLoggedIn, _)) => {}
            Err(e) => return Err(backend(format!("login to `{token}`: {e}"))),
        }
        Ok(HsmKeys { session: Arc::new(Mutex::new(session)) })
    }

    async fn with_session<T: Send + 'static>(
        &self,
        f: impl FnOnce(&Session) -> Result<T, KeyError> + Send + 'static,
    ) -> Result<T, KeyError> {
        let session = self.session.clone();
        tokio::task::spawn_blocking(move || {
            let guard =
                session.lock().map_err(|_| KeyError::Backend("the HSM session is poisoned".into()))?;
            f(&guard)
        })
        .await
        .map_err(backend)?
    }
}

/// The private key whose `CKA_ID` is `id`.
fn private_key(session: &Session, id: &[u8]) -> Result<ObjectHandle, KeyError> {
    let found = session
        .find_objects(&[Attribute::Class(ObjectClass::PRIVATE_KEY), Attribute::Id(id.to_vec())])
        .map_err(backend)?;
    found.into_iter().next().ok_or_else(|| KeyError::Backend("the key is not in the token".into()))
}

/// The SEC1 point of a `CKA_EC_POINT` value: a DER OCTET STRING around it (PKCS#11 §2.3.3),
/// or the bare point from modules that leave the wrapper out.
fn ec_point(value: &[u8]) -> Result<Vec<u8>, KeyError> {
    match value {
        [0x04, 65, point @ ..] if point.len() == 65 => Ok(point.to_vec()),
        [0x04, rest @ ..] if rest.len() == 64 => Ok(value.to_vec()),
        _ => Err(KeyError::Backend("the token's public key is not an uncompressed secp256k1 point".into())),
    }
}

#[async_trait]
impl KeyStore for HsmKeys {
    fn backend(&self) -> &'static str {
        "pkcs11"
    }

    async fn generate(&self, id: &KeyId) -> Result<NewKey, KeyError> {
        let handle = id.as_str().as_bytes().to_vec();
        let label = format!("custodian {}", id.as_str());
        self.with_session(move |session| {
            // Verifying and signing only: each other use said false, not left to the
            // token's defaults (SoftHSM2 makes a private key good for decrypt and unwrap).
            let public = [
                Attribute::Token(true),
                Attribute::EcParams(SECP256K1.to_vec()),
                Attribute::Verify(true),
                Attribute::VerifyRecover(false),
                Attribute::Encrypt(false),
                Attribute::Wrap(false),
                Attribute::Derive(false),
                Attribute::Id(handle.clone()),
                Attribute::Label(label.clone().into_bytes()),
            ];
            let private = [
                Attribute::Token(true),
                Attribute::Private(true),
                Attribute::Sensitive(true),
                Attribute::Extractable(false),
                Attribute::Sign(true),
                Attribute::SignRecover(false),
                Attribute::Decrypt(false),
                Attribute::Unwrap(false),
                Attribute::Derive(false),
                Attribute::Modifiable(false),
                Attribute::Copyable(false),
                Attribute::Id(handle.clone()),
                Attribute::Label(label.into_bytes()),
            ];
            let (public_key, _) =
                session.generate_key_pair(&Mechanism::EccKeyPairGen, &public, &private).map_err(backend)?;
            let attributes =
                session.get_attributes(public_key, &[AttributeType::EcPoint]).map_err(backend)?;
            let point = attributes
                .into_iter()
                .find_map(|a| match a {
                    Attribute::EcPoint(p) => Some(p),
                    _ => None,
                })
                .ok_or_else(|| KeyError::Backend("the token gave no public point".into()))?;
            Ok(NewKey { public_key: ec_point(&point)?, handle })
        })
        .await
    }

    async fn sign_digest(&self, key: &KeyRecord, digest: &B256) -> Result<[u8; 64], KeyError> {
        let (id, digest) = (key.handle.clone(), digest.to_vec());
        self.with_session(move |session| {
            let private = private_key(session, &id)?;
            let sig = session.sign(&Mechanism::Ecdsa, private, &digest).map_err(backend)?;
            <[u8; 64]>::try_from(sig.as_slice())
                .map_err(|_| KeyError::Backend(format!("the token gave a signature of {} bytes", sig.len())))
        })
        .await
    }
}
