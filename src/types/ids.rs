//! Identifiers: the 32-hex ids of spec §2 (`^[0-9a-f]{32}$`) and coin symbols (§1).

use super::*;

/// Pattern of every id (spec §2).
pub const ID_PATTERN: &str = "^[0-9a-f]{32}$";
/// Pattern of a coin symbol or token ticker (spec §1; see [`Coin`]).
pub const COIN_PATTERN: &str = "^[a-z0-9][a-z0-9:_-]{0,39}$";

checked_string!(
    /// A wallet id (spec §2.1 `id`).
    WalletId, 32, is_id, ID_PATTERN, "a 32-hex wallet id"
);
checked_string!(
    /// An enterprise id.
    EnterpriseId, 32, is_id, ID_PATTERN, "a 32-hex enterprise id"
);
checked_string!(
    /// A user id (spec §2.3 `id`).
    UserId, 32, is_id, ID_PATTERN, "a 32-hex user id"
);
checked_string!(
    /// A webhook id (spec §2.5 `id`).
    WebhookId, 32, is_id, ID_PATTERN, "a 32-hex webhook id"
);
checked_string!(
    /// A notification id (spec §2.6 `id`).
    NotificationId, 32, is_id, ID_PATTERN, "a 32-hex notification id"
);
checked_string!(
    /// The public id of an access token (spec §2.4 `id`, §2.2 `token_id`).
    TokenId, 32, is_id, ID_PATTERN, "a 32-hex access token id"
);
checked_string!(
    /// A key Custodian holds for a custodial wallet (`GET /api/v2/{coin}/key/{id}`).
    KeyId, 32, is_id, ID_PATTERN, "a 32-hex key id"
);
checked_string!(
    /// A withdrawal: BitGo's `txRequestId`.
    TxRequestId, 32, is_id, ID_PATTERN, "a 32-hex txRequestId"
);
checked_string!(
    /// A pending approval (BitGo's `pendingApprovals` id).
    ApprovalId, 32, is_id, ID_PATTERN, "a 32-hex pending approval id"
);
checked_string!(
    /// Any 32-hex id (templates, paging cursors).
    AnyId, 32, is_id, ID_PATTERN, "a 32-hex id"
);
checked_string!(
    /// A coin symbol or token ticker (spec §1: lower case), 1 to 40 characters of
    /// `a-z 0-9 : _ -` starting with a letter or digit: `btc`, `teth`, `ofcbtc`, `eth:usdc`.
    Coin, 40, is_coin, COIN_PATTERN, "a lower-case coin symbol"
);

/// New ids of the id types, from `crate::ids` (always 32 lowercase hex).
macro_rules! generated_id {
    ($($name:ident),*) => {$(
        impl $name {
            /// A new random id (`ids::new_id`).
            pub fn new_random() -> Self {
                $name(crate::ids::new_inline_id())
            }

            /// The same id as a paging cursor.
            pub fn to_cursor(&self) -> AnyId {
                AnyId(self.0)
            }
        }
    )*};
}

generated_id!(
    WalletId,
    EnterpriseId,
    UserId,
    WebhookId,
    NotificationId,
    TokenId,
    AnyId,
    KeyId,
    TxRequestId,
    ApprovalId
);

impl NotificationId {
    /// A new id that sorts by creation time (`ids::new_sequential_id`).
    pub fn new_sequential() -> Self {
        NotificationId(crate::ids::new_sequential_id())
    }
}

/// True when `s` matches `^[0-9a-f]{32}$` (spec §2).
pub fn is_id(s: &str) -> bool {
    s.len() == 32 && s.bytes().all(|c| c.is_ascii_digit() || (b'a'..=b'f').contains(&c))
}

/// True for a coin symbol (see [`Coin`]).
pub fn is_coin(s: &str) -> bool {
    let b = s.as_bytes();
    !b.is_empty()
        && b.len() <= 40
        && b[0].is_ascii_alphanumeric()
        && b.iter().all(|c| c.is_ascii_digit() || c.is_ascii_lowercase() || matches!(c, b':' | b'_' | b'-'))
}
