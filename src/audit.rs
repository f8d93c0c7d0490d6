//! The audit log (docs/decisions.md#token-and-session-lifecycle): who did what, as an append-only hash chain. Entries are built
//! here and written by the store in the transaction of the change they record; nothing secret
//! (passwords, OTPs, tokens, webhook secrets, header values) ever goes into `data`. Readers see
//! their own entries, an enterprise admin the enterprise's, a service admin all
//! (`identity::audit_log`, where the scope policy is); [`verify`] walks the chain. Entries done
//! by a caller take its user, token, address and request from `identity::bearer::Principal::audit`. Entry types are listed in docs/audit.md.
//!
//! Layer rule: no web-framework types and nothing of the HTTP layer (docs/architecture.md).

use serde_json::{json, Value};

use crate::{
    error::Result,
    model::audit::{chain_hash, AuditEntry, AuditType, GENESIS},
    store::DynStore,
    types::{AnyId, EnterpriseId, UserId, WalletId},
};

/// A new entry of `entry_type` at now, with no subject yet.
pub fn entry(entry_type: AuditType) -> AuditEntry {
    AuditEntry {
        id: AnyId::new_random(),
        date_ms: crate::clock::wall_now_ms(),
        entry_type,
        user_id: None,
        enterprise_id: None,
        wallet_id: None,
        ip: None,
        token_id: None,
        request_id: None,
        data: json!({}),
    }
}

/// Builder steps for the optional subjects and details.
pub trait EntryExt {
    fn enterprise(self, id: Option<&EnterpriseId>) -> Self;
    fn wallet(self, id: Option<&WalletId>) -> Self;
    fn data(self, data: Value) -> Self;
    /// The address an unauthenticated action came from, and the user it concerns.
    fn ip_and_user(self, ip: std::net::IpAddr, user_id: &UserId) -> Self;
}

impl EntryExt for AuditEntry {
    fn enterprise(self, id: Option<&EnterpriseId>) -> Self {
        AuditEntry { enterprise_id: id.cloned(), ..self }
    }
    fn wallet(self, id: Option<&WalletId>) -> Self {
        AuditEntry { wallet_id: id.cloned(), ..self }
    }
    fn data(self, data: Value) -> Self {
        AuditEntry { data, ..self }
    }
    fn ip_and_user(self, ip: std::net::IpAddr, user_id: &UserId) -> Self {
        AuditEntry { ip: Some(ip.to_string()), user_id: Some(user_id.clone()), ..self }
    }
}

/// Appends entries that record no other change (a failed login, a refused OTP). A failure to
/// write is logged, not returned: the caller's answer does not depend on it.
pub async fn record(store: &DynStore, entries: &[AuditEntry]) {
    if let Err(e) = store.append_audit(entries).await {
        tracing::error!(error = %e, "writing audit entries failed");
    }
}

/// What [`verify`] found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Verified {
    /// Every link holds; this many entries.
    Ok(u64),
    /// The first entry whose stored hash is not the hash of its content and predecessor.
    Broken { seq: i64, id: AnyId, entries_before: u64 },
}

/// Entries read per query while verifying.
const VERIFY_BATCH: u32 = 1000;

/// Walks the whole chain, recomputing each hash from the previous one and the entry's content.
/// `progress` is called with the entries checked so far after each batch.
pub async fn verify(store: &DynStore, mut progress: impl FnMut(u64)) -> Result<Verified> {
    let (mut prev, mut seq, mut n) = (GENESIS.to_string(), 0i64, 0u64);
    loop {
        let batch = store.audit_chain(seq, VERIFY_BATCH).await?;
        if batch.is_empty() {
            return Ok(Verified::Ok(n));
        }
        for c in batch {
            if chain_hash(&prev, &c.entry) != c.hash {
                return Ok(Verified::Broken { seq: c.seq, id: c.entry.id, entries_before: n });
            }
            prev = c.hash;
            seq = c.seq;
            n += 1;
        }
        progress(n);
    }
}
