//! A user's ECDH keychain (BitGoJS's `ensureEcdhKeychain`): the key the SDK derives the secret
//! of token issuance with on its side (`identity::ecdh`).

use crate::types::UserId;

/// The xpub (`xpub…`, base58) and the xprv as the client encrypted it under the user's
/// password (BitGo's envelope, opaque here: the server never sees the xprv in the clear).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EcdhKeychain {
    pub user_id: UserId,
    pub xpub: String,
    pub encrypted_xprv: String,
    /// Unix seconds.
    pub created_at: i64,
}
