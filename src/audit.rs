//! The audit log (issue 10 §5): who did what, as an append-only hash chain. Entries are built
//! here and written by the store in the transaction of the change they record; nothing secret
//! (passwords, OTPs, tokens, webhook secrets, header values) ever goes into `data`. Readers see
//! their own entries, an enterprise admin the enterprise's, a service admin all
//! ([`list`]); [`verify`] walks the chain. Entry types are listed in docs/audit.md.
//!
//! Layer rule: no web-framework types and nothing of the HTTP layer (docs/architecture.md).

use std::{collections::HashMap, sync::Mutex};

use serde_json::{json, Value};

use crate::{
    error::Result,
    identity::{auth::Principal, scopes::Action},
    ids,
    paging::{Page, PageRequest},
    store::{chain_hash, AuditEntry, AuditFilter, ChainedEntry, DynStore, GENESIS},
    AppState,
};

/// A new entry of `entry_type` at now, with no subject yet.
pub fn entry(entry_type: &str) -> AuditEntry {
    AuditEntry {
        id: ids::new_id(),
        date_ms: ids::now_ms(),
        entry_type: entry_type.to_string(),
        user_id: None,
        enterprise_id: None,
        wallet_id: None,
        ip: None,
        token_id: None,
        request_id: None,
        data: json!({}),
    }
}

/// A new entry of `entry_type` done by `auth`: its user, token, address and request.
pub fn by(auth: &Principal, entry_type: &str) -> AuditEntry {
    AuditEntry {
        user_id: Some(auth.user.id.clone()),
        ip: Some(auth.client_ip.to_string()),
        token_id: Some(auth.token.id.clone()),
        request_id: auth.request_id.clone(),
        ..entry(entry_type)
    }
}

/// Builder steps for the optional subjects and details.
pub trait EntryExt {
    fn enterprise(self, id: Option<&str>) -> Self;
    fn wallet(self, id: Option<&str>) -> Self;
    fn data(self, data: Value) -> Self;
    /// The address an unauthenticated action came from, and the user it concerns.
    fn ip_and_user(self, ip: std::net::IpAddr, user_id: &str) -> Self;
}

impl EntryExt for AuditEntry {
    fn enterprise(self, id: Option<&str>) -> Self {
        AuditEntry { enterprise_id: id.map(str::to_string), ..self }
    }
    fn wallet(self, id: Option<&str>) -> Self {
        AuditEntry { wallet_id: id.map(str::to_string), ..self }
    }
    fn data(self, data: Value) -> Self {
        AuditEntry { data, ..self }
    }
    fn ip_and_user(self, ip: std::net::IpAddr, user_id: &str) -> Self {
        AuditEntry { ip: Some(ip.to_string()), user_id: Some(user_id.to_string()), ..self }
    }
}

/// Appends entries that record no other change (a failed login, a refused OTP). A failure to
/// write is logged, not returned: the caller's answer does not depend on it.
pub async fn record(state: &AppState, entries: &[AuditEntry]) {
    if let Err(e) = state.store.append_audit(entries).await {
        tracing::error!(error = %e, "writing audit entries failed");
    }
}

/// Throttling is recorded once per subject and minute per process, not per refused attempt: a
/// flood must not turn into a flood of audit writes.
#[derive(Debug, Default)]
pub struct ThrottleNotes(Mutex<HashMap<String, i64>>);

/// Most subjects remembered by [`ThrottleNotes`].
const MAX_THROTTLE_NOTES: usize = 10_000;

impl ThrottleNotes {
    /// Whether a throttling of `subject` at `now` (Unix seconds) should be recorded.
    pub fn first_in_minute(&self, subject: &str, now: i64) -> bool {
        let mut map = self.0.lock().unwrap_or_else(|p| p.into_inner());
        if map.get(subject).is_some_and(|t| now - t < 60) {
            return false;
        }
        if map.len() >= MAX_THROTTLE_NOTES {
            map.retain(|_, t| now - *t < 60);
            if map.len() >= MAX_THROTTLE_NOTES {
                return false;
            }
        }
        map.insert(subject.to_string(), now);
        true
    }
}

/// Entries `auth` may see that match `filter` (its `visible_to` is set here), newest first. Needs `auditlogs_view_all` or a login
/// session (docs/scopes.md). A user sees entries about themselves, an enterprise admin those
/// of the enterprise, a service admin every entry. Errors: `InsufficientScope`.
pub async fn list(
    state: &AppState,
    auth: &Principal,
    filter: AuditFilter,
    page: &PageRequest,
) -> Result<Page<ChainedEntry>> {
    auth.require(state.policy(), Action::ViewAuditLog)?;
    let visible_to = if auth.token.admin {
        None
    } else {
        let memberships = state.store.memberships(&auth.user.id).await?;
        let admin_of = memberships.into_iter().filter(|m| m.is_admin).map(|m| m.enterprise.id).collect();
        Some((auth.user.id.clone(), admin_of))
    };
    let filter = AuditFilter { visible_to, ..filter };
    let rows = state.store.list_audit(&filter, page.prev_id.as_deref(), page.fetch()).await?;
    Ok(page.page(rows, |c| &c.entry.id))
}

/// What [`verify`] found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Verified {
    /// Every link holds; this many entries.
    Ok(u64),
    /// The first entry whose stored hash is not the hash of its content and predecessor.
    Broken { seq: i64, id: String, entries_before: u64 },
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
