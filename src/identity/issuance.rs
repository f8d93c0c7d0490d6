//! ECDH token issuance (BitGo's, spec §2.2 `encryptedToken`, `derivationPath`,
//! `encryptedECDHXprv`): a new token is handed over sealed under the secret the service and the
//! user's ECDH keychain share at a fresh path, so the clear token never crosses the wire. The
//! client opens its keychain's xprv with its password, derives the secret with the service's
//! xpub (BitGoJS's `serverXpub`), and opens the token (`handleTokenIssuanceAsync`).
//!
//! It is used when the client can take it: a login or token creation from BitGoJS (which sends
//! `BitGo-Auth-Version` and no `forceV1Auth`) of a user with an `ecdhKeychain`; a token
//! created by a session that was itself handed over so, through a signed request
//! (docs/decisions.md#ecdh-token-issuance).

use bitcoin::bip32::{DerivationPath, Xpriv, Xpub};

use super::{bearer::Principal, ecdh, Identity};
use crate::{
    error::{Error, Result},
    model::{keychain::EcdhKeychain, token::TokenRecord},
};

/// A token handed over ECDH-encrypted: the three fields of §2.2.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EncryptedToken {
    /// The token, in BitGo's version 1 envelope, under the shared secret.
    pub encrypted_token: String,
    /// `m/999999/a/b`: where both keys were derived.
    pub derivation_path: String,
    /// The keychain's xprv as the client encrypted it under its password.
    pub encrypted_ecdh_xprv: String,
}

/// A fresh path for a token to be handed over under ([`ecdh::fresh_path`]), with its text.
pub fn fresh_path() -> (DerivationPath, String) {
    let path = ecdh::fresh_path();
    let text = ecdh::path_text(&path);
    (path, text)
}

/// The service's ECDH key, read (and made, the first time) once per process.
async fn server_key(svc: &Identity) -> Result<Xpriv> {
    let key = svc
        .server_ecdh
        .get_or_try_init(|| ecdh::server_key(&svc.store, &svc.key))
        .await
        .map_err(Error::Internal)?;
    Ok(*key)
}

/// Seals the token `value` for `keychain` at `path`. The sealing (1,000 PBKDF2 rounds and
/// three BIP32 steps) runs off the async workers. Errors: `Internal` (the service key cannot
/// be read, or the stored xpub does not parse).
pub async fn encrypt(
    svc: &Identity,
    keychain: &EcdhKeychain,
    path: (DerivationPath, String),
    value: &str,
) -> Result<EncryptedToken> {
    let server = server_key(svc).await?;
    let theirs: Xpub =
        keychain.xpub.parse().map_err(|e| Error::Internal(anyhow::anyhow!("stored ECDH xpub: {e}")))?;
    let value = value.to_string();
    let (path, derivation_path) = path;
    let sealed = tokio::task::spawn_blocking(move || {
        ecdh::shared_secret(&server, &theirs, &path)
            .map(|secret| ecdh::seal_with(&secret, &value, ecdh::TOKEN_ITERATIONS))
    })
    .await
    .map_err(|e| Error::Internal(e.into()))?
    .map_err(|e| Error::Internal(e.into()))?;
    Ok(EncryptedToken {
        encrypted_token: sealed,
        derivation_path,
        encrypted_ecdh_xprv: keychain.encrypted_xprv.clone(),
    })
}

/// Hands a token `auth` creates over the way `auth`'s session was: ECDH-encrypted when the
/// request was signed with a session handed over so (the client holds the keychain's xprv)
/// and the user still has a keychain; then `record` is marked with its path. `None`: in the
/// clear. Errors: those of [`encrypt`], and the store's.
pub async fn for_created_token(
    svc: &Identity,
    auth: &Principal,
    record: &mut TokenRecord,
    value: &str,
) -> Result<Option<EncryptedToken>> {
    if !auth.signed || auth.token.derivation_path.is_none() {
        return Ok(None);
    }
    let Some(keychain) = svc.store.ecdh_keychain(&auth.user.id).await? else {
        return Ok(None);
    };
    let path = fresh_path();
    record.derivation_path = Some(path.1.clone());
    encrypt(svc, &keychain, path, value).await.map(Some)
}
