//! Custody's rows as stored, and their conversion into `model::custody` records. Amounts are
//! decimal text; keys, public keys and signed transactions hex.

use sqlx::FromRow;

use crate::model::custody::{
    Approval, ApprovalState, ApprovalSubject, KeyRecord, Recipient, Resolver, Token, TxRequestState,
    UsdValue, Withdrawal,
};
use crate::store::Recorded;
use crate::store::{
    sql::{json_value, parse_stored, to_json},
    StoreError, StoreResult,
};
use crate::types::{Coin, EnterpriseId, TokenId, TxRequestId, UserId, WalletId};
use alloy_primitives::U256;

pub(in crate::store) const KEY_COLUMNS: &str =
    "id, wallet_id, backend, public_key, address, handle, created_at";

pub(in crate::store) const WITHDRAWAL_COLUMNS: &str =
    "id, wallet_id, coin, enterprise, creator, idempotency_key, state, version, \
     recipients, token_coin, token_contract, comment, key_id, from_address, approval_id, nonce, tx_hash, signed_tx, fee_reserve, error, \
     mined_block, created_at, updated_at, token_id, usd_cents, usd_rate";

pub(in crate::store) const APPROVAL_COLUMNS: &str =
    "id, wallet_id, coin, enterprise, creator, state, approvals_required, resolvers, tx_request_id, created_at, expires_at, policy, \
     approval_type, info";

#[derive(FromRow)]
pub(in crate::store) struct KeyRow {
    id: String,
    wallet_id: String,
    backend: String,
    public_key: String,
    address: String,
    handle: String,
    created_at: i64,
}

impl KeyRow {
    pub(in crate::store) fn into_record(self) -> StoreResult<KeyRecord> {
        let hex_of = |s: &str, what| hex::decode(s).map_err(|_| StoreError::malformed(what, s));
        Ok(KeyRecord {
            id: parse_stored(&self.id, "key id")?,
            wallet_id: parse_stored(&self.wallet_id, "wallet id")?,
            public_key: hex_of(&self.public_key, "public key")?,
            address: parse_stored(&self.address, "key address")?,
            handle: hex_of(&self.handle, "key handle")?,
            backend: self.backend,
            created_at: self.created_at,
        })
    }
}

#[derive(FromRow)]
pub(in crate::store) struct WithdrawalRow {
    id: String,
    wallet_id: String,
    coin: String,
    enterprise: Option<String>,
    creator: String,
    idempotency_key: String,
    state: String,
    version: i64,
    recipients: String,
    token_coin: Option<String>,
    token_contract: Option<String>,
    comment: Option<String>,
    key_id: String,
    from_address: String,
    approval_id: String,
    nonce: Option<i64>,
    tx_hash: Option<String>,
    signed_tx: Option<String>,
    fee_reserve: String,
    error: Option<String>,
    mined_block: Option<i64>,
    created_at: i64,
    updated_at: i64,
    token_id: Option<String>,
    usd_cents: Option<i64>,
    usd_rate: Option<String>,
}

/// A recipient as stored: `{address, amount}` with the amount in decimal base units.
#[derive(serde::Serialize, serde::Deserialize)]
struct StoredRecipient {
    address: String,
    amount: String,
}

pub(in crate::store) fn recipients_json(rs: &[Recipient]) -> StoreResult<String> {
    let stored: Vec<StoredRecipient> = rs
        .iter()
        .map(|r| StoredRecipient { address: r.address.to_checksum(None), amount: r.amount.to_string() })
        .collect();
    to_json(&stored)
}

/// The sum of the amounts of recipients stored as `json`.
pub(in crate::store) fn recipients_total(json: &str) -> StoreResult<U256> {
    let stored: Vec<StoredRecipient> = json_value(json)?;
    stored.iter().try_fold(U256::ZERO, |a, r| {
        Ok(a.saturating_add(parse_stored::<U256>(&r.amount, "recipient amount")?))
    })
}

impl WithdrawalRow {
    pub(in crate::store) fn into_withdrawal(self) -> StoreResult<Withdrawal> {
        let stored: Vec<StoredRecipient> = json_value(&self.recipients)?;
        let recipients = stored
            .iter()
            .map(|r| {
                Ok(Recipient {
                    address: parse_stored(&r.address, "recipient address")?,
                    amount: parse_stored(&r.amount, "recipient amount")?,
                })
            })
            .collect::<StoreResult<_>>()?;
        let state = TxRequestState::parse(&self.state)
            .ok_or_else(|| StoreError::malformed("txRequest state", &self.state))?;
        let signed_tx = match &self.signed_tx {
            Some(s) => Some(hex::decode(s).map_err(|_| StoreError::malformed("signed transaction", s))?),
            None => None,
        };
        Ok(Withdrawal {
            id: parse_stored(&self.id, "txRequest id")?,
            wallet_id: parse_stored(&self.wallet_id, "wallet id")?,
            coin: parse_stored(&self.coin, "coin")?,
            enterprise: self.enterprise.as_deref().map(|e| parse_stored(e, "enterprise id")).transpose()?,
            creator: parse_stored(&self.creator, "user id")?,
            idempotency_key: self.idempotency_key,
            state,
            version: self.version,
            recipients,
            token: match (self.token_coin.as_deref(), self.token_contract.as_deref()) {
                (Some(coin), Some(contract)) => Some(Token {
                    coin: parse_stored(coin, "token coin")?,
                    contract: parse_stored(contract, "token contract")?,
                }),
                _ => None,
            },
            comment: self.comment,
            key_id: parse_stored(&self.key_id, "key id")?,
            from: parse_stored(&self.from_address, "address")?,
            approval_id: parse_stored(&self.approval_id, "approval id")?,
            nonce: self.nonce.map(|n| u64::try_from(n).unwrap_or_default()),
            tx_hash: self.tx_hash.as_deref().map(|h| parse_stored(h, "transaction hash")).transpose()?,
            signed_tx,
            fee_reserve: parse_stored(&self.fee_reserve, "fee reserve")?,
            error: self.error,
            mined_block: self.mined_block.and_then(|b| u64::try_from(b).ok()),
            token_id: self.token_id.as_deref().and_then(|t| t.parse().ok()),
            usd: match (self.usd_cents, self.usd_rate) {
                (Some(cents), Some(rate)) => Some(UsdValue { cents, rate }),
                _ => None,
            },
            created_at: self.created_at,
            updated_at: self.updated_at,
        })
    }
}

#[derive(FromRow)]
pub(in crate::store) struct ApprovalRow {
    id: String,
    wallet_id: Option<String>,
    coin: String,
    enterprise: Option<String>,
    creator: String,
    state: String,
    approvals_required: i64,
    resolvers: String,
    tx_request_id: Option<String>,
    created_at: i64,
    expires_at: i64,
    policy: Option<String>,
    approval_type: String,
    info: Option<String>,
}

impl ApprovalRow {
    /// The stored answers, as stored (a write that guards on them compares this text).
    pub(in crate::store) fn resolvers_text(&self) -> &str {
        &self.resolvers
    }

    pub(in crate::store) fn into_approval(self) -> StoreResult<Approval> {
        let resolvers: Vec<Resolver> = json_value(&self.resolvers)?;
        if self.wallet_id.is_none() && self.enterprise.is_none() {
            return Err(StoreError::malformed("pending approval of no wallet or enterprise", &self.id));
        }
        Ok(Approval {
            id: parse_stored(&self.id, "approval id")?,
            wallet_id: self.wallet_id.as_deref().map(|w| parse_stored(w, "wallet id")).transpose()?,
            coin: parse_stored::<Coin>(&self.coin, "coin")?,
            enterprise: self.enterprise.as_deref().map(|e| parse_stored(e, "enterprise id")).transpose()?,
            creator: parse_stored::<UserId>(&self.creator, "user id")?,
            state: ApprovalState::parse(&self.state)
                .ok_or_else(|| StoreError::malformed("approval state", &self.state))?,
            approvals_required: u32::try_from(self.approvals_required).unwrap_or(1),
            resolvers,
            subject: match (self.approval_type.as_str(), &self.tx_request_id, &self.info) {
                ("transactionRequest", Some(id), _) => {
                    ApprovalSubject::Withdrawal(parse_stored(id, "txRequest id")?)
                }
                ("policyRuleRequest", _, Some(info)) => ApprovalSubject::PolicyRule(json_value(info)?),
                _ => return Err(StoreError::malformed("pending approval", &self.id)),
            },
            created_at: self.created_at,
            expires_at: self.expires_at,
            policy: match &self.policy {
                Some(p) => json_value(p)?,
                None => Default::default(),
            },
        })
    }
}

/// A `WHERE` clause of text parameters built from a filter: each condition numbers its own
/// placeholders from `next`, and [`Where::bind`] binds them in the same order.
#[derive(Default)]
pub(in crate::store) struct Where {
    conditions: Vec<String>,
    params: Vec<String>,
    /// The first placeholder's number (0 and 1 both mean `$1`).
    next: usize,
}

impl Where {
    fn placeholder(&mut self, value: String) -> String {
        self.params.push(value);
        format!("${}", self.next.max(1) + self.params.len() - 1)
    }

    /// `column = value`, when there is a value.
    pub(in crate::store) fn eq(&mut self, column: &str, value: Option<String>) {
        if let Some(v) = value {
            let p = self.placeholder(v);
            self.conditions.push(format!("{column} = {p}"));
        }
    }

    /// `column IN (values)`, when there is a list; an empty list matches nothing.
    pub(in crate::store) fn any(&mut self, column: &str, values: Option<Vec<String>>) {
        let Some(values) = values else { return };
        if values.is_empty() {
            self.conditions.push("1 = 0".into());
            return;
        }
        let ps: Vec<String> = values.into_iter().map(|v| self.placeholder(v)).collect();
        self.conditions.push(format!("{column} IN ({})", ps.join(", ")));
    }

    /// A condition of the store's own, with no client text in it.
    pub(in crate::store) fn raw(&mut self, condition: &str) {
        self.conditions.push(condition.to_string());
    }

    pub(in crate::store) fn sql(&self) -> String {
        match self.conditions.is_empty() {
            true => "1 = 1".into(),
            false => self.conditions.join(" AND "),
        }
    }

    pub(in crate::store) fn bind<'q, DB: sqlx::Database, O>(
        &'q self,
        mut q: sqlx::query::QueryAs<'q, DB, O, <DB as sqlx::Database>::Arguments<'q>>,
    ) -> sqlx::query::QueryAs<'q, DB, O, <DB as sqlx::Database>::Arguments<'q>>
    where
        &'q str: sqlx::Encode<'q, DB> + sqlx::Type<DB>,
    {
        for p in &self.params {
            q = q.bind(p.as_str());
        }
        q
    }
}

/// Rules swapped in the transaction of a rule change's last approval: only if they are still
/// `before`, else the answer is not written.
#[derive(Debug, Clone, Copy)]
pub enum RecordSwap<'a> {
    /// A wallet's record (its `admin.policy.rules`).
    Wallet { wallet: &'a WalletId, before: &'a str, after: &'a str },
    /// An enterprise's rules for a coin (a JSON list).
    EnterpriseRules { enterprise: &'a EnterpriseId, coin: &'a Coin, before: &'a str, after: &'a str },
}

/// Why a judge refused a withdrawal: the domain's error, carried through the store unread.
pub type Refusal = Box<dyn std::error::Error + Send + Sync>;

/// What storing a new withdrawal did.
#[derive(Debug)]
pub enum Created {
    /// Stored, with its events and its approval as the judge made it.
    New(Vec<Recorded>, Box<Approval>),
    /// The judge refused it under the wallet's lock; nothing written.
    Refused(Refusal),
    /// The wallet had a withdrawal with this idempotency key: that one, nothing written.
    Existing(Box<Withdrawal>),
}

/// A signed withdrawal to store: its hash, the EIP-2718 bytes, and the gas it may spend (wei).
#[derive(Debug)]
pub struct Signed<'a> {
    pub id: &'a TxRequestId,
    /// The version the signer read it at (`pendingDelivery` with its nonce): written only if
    /// it is still that one.
    pub version: i64,
    /// The first attempt: its hash, bytes and fees.
    pub attempt: &'a crate::model::custody::Attempt,
    pub fee_reserve: &'a U256,
}

/// A withdrawal's move to `to` (decided by `custody::withdrawal::machine` from the withdrawal
/// at `version`), with `error` for people when it failed and the `nonce` it keeps or clears.
#[derive(Debug, Clone, Copy)]
pub struct Move<'a> {
    pub id: &'a TxRequestId,
    /// The version the move was decided from: written only if the withdrawal is still at it
    /// (compare-and-swap), so two deciders at once change it once.
    pub version: i64,
    pub to: TxRequestState,
    pub error: Option<&'a str>,
}

/// One withdrawal's change in a batch written in one transaction, with its audit entries and
/// its events (`custody::signer`'s rounds).
pub struct Batched<'a, T> {
    pub change: T,
    pub audit: Vec<crate::model::audit::AuditEntry>,
    pub events: Vec<&'a crate::store::EventWrite>,
}

/// The subject columns of approval `a`: (`approval_type`, `tx_request_id`, `info`).
pub(in crate::store) fn subject_columns(
    a: &Approval,
) -> StoreResult<(&'static str, Option<&str>, Option<String>)> {
    Ok(match &a.subject {
        ApprovalSubject::Withdrawal(id) => (a.kind(), Some(id.as_str()), None),
        ApprovalSubject::PolicyRule(r) => (a.kind(), None, Some(to_json(r)?)),
    })
}

/// Which withdrawals to list (oldest first unless `newest_first`).
#[derive(Debug, Clone, Default)]
pub struct WithdrawalFilter {
    pub wallet: Option<WalletId>,
    pub coin: Option<Coin>,
    /// The idempotency key (with `wallet`).
    pub key: Option<String>,
    /// Only those whose transaction the signer has not seen mined.
    pub unmined: bool,
    /// Only those whose send the chain watcher has not recorded `confirmed` (`settled` unset):
    /// what the wallet's confirmed balance does not hold yet.
    pub unsettled: bool,
    /// Only those the signer saw mined at this block or later.
    pub mined_from: Option<u64>,
    pub ids: Option<Vec<TxRequestId>>,
    pub states: Option<Vec<TxRequestState>>,
    /// Only those the token started (`token_id`), created at or after `created_from` (Unix s).
    pub token: Option<TokenId>,
    pub created_from: Option<i64>,
    /// Newest first (the lists people read); otherwise oldest first (the signer's order).
    pub newest_first: bool,
    /// The latest mined first (the reorg check: a reorg takes the latest blocks).
    pub latest_mined_first: bool,
    /// The lowest nonce first (sending: a node never gets a nonce ahead of a gap).
    pub nonce_first: bool,
    pub limit: u32,
}

/// The statement listing withdrawals as `f` asks, and its parameters.
pub(in crate::store) fn select_withdrawals(f: &WithdrawalFilter) -> (String, Where) {
    let mut w = Where::default();
    w.eq("wallet_id", f.wallet.as_ref().map(|v| v.as_str().to_string()));
    w.eq("coin", f.coin.as_ref().map(|v| v.as_str().to_string()));
    w.eq("idempotency_key", f.key.clone());
    if f.unmined {
        w.raw("mined_block IS NULL");
    }
    if f.unsettled {
        w.raw("settled = 0");
    }
    if let Some(from) = f.mined_from {
        // A number of the store's own, not a client's text.
        w.raw(&format!("mined_block >= {from}"));
    }
    w.any("id", f.ids.as_ref().map(|ids| ids.iter().map(|i| i.as_str().to_string()).collect()));
    w.any("state", f.states.as_ref().map(|s| s.iter().map(|s| s.as_str().to_string()).collect()));
    w.eq("token_id", f.token.as_ref().map(|t| t.as_str().to_string()));
    if let Some(from) = f.created_from {
        // A number of the store's own, not a client's text.
        w.raw(&format!("created_at >= {from}"));
    }
    let order = match (f.latest_mined_first, f.newest_first, f.nonce_first) {
        (true, _, _) => "mined_block DESC, created_at DESC, id DESC",
        (false, true, _) => "created_at DESC, id DESC",
        (false, false, true) => "nonce, created_at, id",
        (false, false, false) => "created_at, id",
    };
    let sql = format!(
        "SELECT {WITHDRAWAL_COLUMNS} FROM withdrawals WHERE {} ORDER BY {order} LIMIT {}",
        w.sql(),
        f.limit
    );
    (sql, w)
}
