//! How events are found by the transfer they name (migration 0019): a leaf the group-commit writer
//! (`group_commit/`), the event reads (`events.rs`) and the console's search share.

use super::sql::Dialect;

/// The 64-bit key events are found by for a transfer id: the first 8 bytes of its SHA-256
/// (migration 0019). A key's match is confirmed against the body ([`transfer_match`]).
pub(in crate::store) fn transfer_key(transfer_id: &str) -> i64 {
    use sha2::Digest;
    let d = sha2::Sha256::digest(transfer_id.as_bytes());
    let mut b = [0u8; 8];
    b.copy_from_slice(&d[..8]);
    i64::from_be_bytes(b)
}

/// SQL matching events of a transfer, given the placeholders of its key and its id: by the key
/// confirmed against the body, or by the id's text in rows written before the key.
pub(in crate::store) fn transfer_match<DB: Dialect>(key: &str, id: &str) -> String {
    // The CASE keeps the body of another event (often '') from being read as JSON, whatever
    // order the engine takes the conditions in; the key's equality outside it finds the index.
    format!(
        "((transfer_key = {key} AND CASE WHEN transfer_key = {key} THEN {} = {id} ELSE FALSE END) \
         OR transfer_id = {id})",
        DB::json_text_field("body", "transferId")
    )
}
