//! What custody stores: keys Custodian holds, withdrawals (BitGo's txRequests) and their
//! pending approvals (docs/withdrawals.md). Amounts are base units; times Unix seconds.

use alloy_primitives::{Address, B256, U256};

use crate::types::{ApprovalId, Coin, EnterpriseId, KeyId, TokenId, TxRequestId, UserId, WalletId};

/// A key of a custodial wallet. The private part never leaves its backend: `handle` is what
/// the backend needs to find it again (the sealed scalar for `sealed`, the object id in the
/// token for `pkcs11`).
#[derive(Clone)]
pub struct KeyRecord {
    pub id: KeyId,
    /// The custodial wallet it was made for.
    pub wallet_id: WalletId,
    /// `sealed` or `pkcs11` (`keys.backend`).
    pub backend: String,
    /// SEC1 uncompressed public key, 65 bytes.
    pub public_key: Vec<u8>,
    pub address: Address,
    pub handle: Vec<u8>,
    pub created_at: i64,
}

impl std::fmt::Debug for KeyRecord {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("KeyRecord").field("id", &self.id).field("address", &self.address).finish()
    }
}

macro_rules! string_enum {
    ($(#[$m:meta])* $name:ident { $($variant:ident = $text:literal),* $(,)? }) => {
        $(#[$m])*
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
        pub enum $name { $($variant),* }

        impl $name {
            /// Every value, in declaration order.
            pub const ALL: &'static [$name] = &[$($name::$variant),*];

            /// The stored and wire spelling.
            pub fn as_str(self) -> &'static str {
                match self { $($name::$variant => $text),* }
            }

            /// The value spelled `text`.
            pub fn parse(text: &str) -> Option<Self> {
                match text { $($text => Some($name::$variant),)* _ => None }
            }
        }
    };
}

string_enum!(
    /// A txRequest's state (BitGo's names): waiting for people, then for the signer, then sent.
    /// `delivered` means broadcast; the transfer it became carries the confirmations.
    TxRequestState {
        PendingApproval = "pendingApproval",
        PendingDelivery = "pendingDelivery",
        Signed = "signed",
        Delivered = "delivered",
        Rejected = "rejected",
        Canceled = "canceled",
        Failed = "failed",
    }
);

impl TxRequestState {
    /// Whether nothing more happens to it.
    pub fn is_final(self) -> bool {
        matches!(self, TxRequestState::Rejected | TxRequestState::Canceled | TxRequestState::Failed)
    }
}

string_enum!(
    /// A pending approval's state (BitGo's).
    ApprovalState { Pending = "pending", Approved = "approved", Rejected = "rejected", Canceled = "canceled" }
);

/// An ERC-20 token a withdrawal sends.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Token {
    /// `<chain>:<ticker>`, as configured (`chains.<coin>.tokens`).
    pub coin: Coin,
    pub contract: Address,
}

/// One payee of a withdrawal.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Recipient {
    pub address: Address,
    /// Base units of the coin (wei for ETH).
    pub amount: U256,
}

/// A withdrawal from a custodial wallet: one object behind `/tx/initiate` and `/txrequests`.
#[derive(Debug, Clone)]
pub struct Withdrawal {
    pub id: TxRequestId,
    pub wallet_id: WalletId,
    pub coin: Coin,
    pub enterprise: Option<EnterpriseId>,
    pub creator: UserId,
    /// `sequenceId` or `idempotencyKey`: one withdrawal per key and wallet.
    pub idempotency_key: String,
    pub state: TxRequestState,
    /// Bumped on every change (BitGo's `version`).
    pub version: i64,
    pub recipients: Vec<Recipient>,
    /// The token it sends (an ERC-20 `transfer` call), or `None` for the chain's coin.
    pub token: Option<Token>,
    pub comment: Option<String>,
    /// The custodial wallet's key and address, which signs and pays.
    pub key_id: KeyId,
    pub from: Address,
    pub approval_id: ApprovalId,
    /// The address's nonce, reserved (stored) before signing.
    pub nonce: Option<u64>,
    pub tx_hash: Option<B256>,
    /// The signed transaction (EIP-2718 bytes), stored before it is broadcast.
    pub signed_tx: Option<Vec<u8>>,
    /// Gas limit × max fee per gas the signed transaction may spend, wei (reserved from the
    /// balance while it is in flight).
    pub fee_reserve: U256,
    /// Why it failed, for people (never a node's raw text beyond 256 bytes).
    pub error: Option<String>,
    /// The block that mined its transaction, as the signer last saw.
    pub mined_block: Option<u64>,
    /// The access token that started it (a session's unlock counts what it made).
    pub token_id: Option<TokenId>,
    /// Its value in US dollars when it was made; `None` when its coin has no price source
    /// (docs/policy.md#circuit-breaker).
    pub usd: Option<UsdValue>,
    pub created_at: i64,
    pub updated_at: i64,
}

/// A withdrawal's value in US dollars, fixed when it is made.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UsdValue {
    /// Whole cents, rounded down, at most [`UsdValue::MAX_CENTS`].
    pub cents: i64,
    /// The price it was valued at: US dollars per whole coin, decimal (`"3000.25"`).
    pub rate: String,
}

impl UsdValue {
    /// The most one withdrawal is valued at: a trillion dollars, in cents. More cannot matter
    /// (the breaker's limit is at most that), and the 24-hour sums stay within 64 bits.
    pub const MAX_CENTS: i64 = 100_000_000_000_000;

    /// Dollars, for the API's `usd` (BitGo's number).
    pub fn dollars(&self) -> f64 {
        // Cents up to 10^14 are exact in an f64.
        self.cents as f64 / 100.0
    }
}

impl Withdrawal {
    /// The sum of the recipients' amounts (checked at initiation never to overflow).
    pub fn total(&self) -> U256 {
        self.recipients.iter().fold(U256::ZERO, |a, r| a.saturating_add(r.amount))
    }
}

/// One person's answer to a pending approval.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Resolver {
    pub user: UserId,
    /// `approved` or `rejected`.
    #[serde(rename = "resolutionType")]
    pub resolution: String,
    /// ISO 8601.
    pub date: String,
}

/// A pending approval (BitGo's shape is built by `custody::views`).
#[derive(Debug, Clone)]
pub struct Approval {
    pub id: ApprovalId,
    /// The wallet it belongs to; `None` for a change to an enterprise's rules, which belongs to
    /// `enterprise` (BitGo's `scope: "enterprise"`).
    pub wallet_id: Option<WalletId>,
    pub coin: Coin,
    pub enterprise: Option<EnterpriseId>,
    pub creator: UserId,
    pub state: ApprovalState,
    pub approvals_required: u32,
    pub resolvers: Vec<Resolver>,
    /// What it decides.
    pub subject: ApprovalSubject,
    pub created_at: i64,
    /// When an approval not given expires (`withdrawals.approval_ttl`).
    pub expires_at: i64,
    /// What the wallet's policy rules made of the withdrawal at initiation.
    pub policy: ApprovalPolicy,
}

impl Approval {
    /// The withdrawal it decides, when it decides one.
    pub fn tx_request_id(&self) -> Option<&TxRequestId> {
        match &self.subject {
            ApprovalSubject::Withdrawal(id) => Some(id),
            ApprovalSubject::PolicyRule(_) => None,
        }
    }

    /// BitGo's `scope`: `wallet`, or `enterprise` for a change to an enterprise's rules.
    pub fn scope(&self) -> &'static str {
        if self.wallet_id.is_some() {
            "wallet"
        } else {
            "enterprise"
        }
    }

    /// BitGo's `type` of it: `transactionRequest` or `policyRuleRequest`.
    pub fn kind(&self) -> &'static str {
        match &self.subject {
            ApprovalSubject::Withdrawal(_) => "transactionRequest",
            ApprovalSubject::PolicyRule(_) => "policyRuleRequest",
        }
    }
}

/// What a pending approval decides.
#[derive(Debug, Clone, PartialEq)]
pub enum ApprovalSubject {
    /// A withdrawal (`transactionRequest`).
    Withdrawal(TxRequestId),
    /// A change to a wallet's or an enterprise's policy rules that loosens them
    /// (`policyRuleRequest`, docs/policy.md#loosening).
    PolicyRule(PolicyRuleRequest),
}

/// A loosening rule change waiting for other admins: BitGo's `info.policyRuleRequest`.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct PolicyRuleRequest {
    /// `update` or `remove`.
    pub action: String,
    #[serde(rename = "ruleId")]
    pub rule_id: String,
    /// The rule after the change, as `admin.policy.rules` shows it; absent for `remove`.
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub update: Option<serde_json::Value>,
    /// The rule when the change was asked for.
    pub before: serde_json::Value,
    /// Why the change loosens the policy, in words.
    pub reason: String,
}

/// What the policy rules made of a withdrawal at initiation, kept on its approval and shown as
/// its `singleRunResults`, `reasons` and `ruleApprovals` (docs/policy.md#evaluation).
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct ApprovalPolicy {
    /// Every rule evaluated and whether it fired (BitGo's field).
    #[serde(rename = "singleRunResults", default)]
    pub single_run_results: Vec<RuleResult>,
    /// Why each fired rule fired, in words.
    #[serde(default)]
    pub reasons: Vec<String>,
    /// The approvals the fired `getApproval` and `getFinalApproval` rules ask for, on top of
    /// the wallet's `approvalsRequired`.
    #[serde(rename = "ruleApprovals", default)]
    pub rule_approvals: Vec<RuleApproval>,
}

impl ApprovalPolicy {
    /// Whether a fired `getFinalApproval` rule asks for a last approval.
    pub fn has_final(&self) -> bool {
        self.rule_approvals.iter().any(|r| r.last)
    }

    /// The fewest approvals that can complete an approval whose wallet asks for `base`: one more
    /// when a final approval is asked for (what `approvalsRequired` shows).
    pub fn approvals_required(&self, base: u32) -> u32 {
        base.saturating_add(u32::from(self.has_final()))
    }
}

/// One rule's result: `{ruleId, triggered}`.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct RuleResult {
    #[serde(rename = "ruleId")]
    pub rule_id: String,
    pub triggered: bool,
}

/// An approval a fired rule asks for: by one of `userIds` (any wallet admin but the initiator
/// when empty); `final`: given after every other approval (`getFinalApproval`).
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct RuleApproval {
    #[serde(rename = "ruleId")]
    pub rule_id: String,
    #[serde(rename = "userIds", default)]
    pub user_ids: Vec<UserId>,
    #[serde(rename = "final", default)]
    pub last: bool,
    /// Only a service admin may give it (the circuit breaker's: docs/policy.md#circuit-breaker).
    #[serde(rename = "serviceAdmin", default, skip_serializing_if = "std::ops::Not::not")]
    pub service_admin: bool,
}

/// One transaction signed for a withdrawal (the first, or a replacement at the same nonce).
#[derive(Debug, Clone)]
pub struct Attempt {
    /// 0 for the first.
    pub attempt: i64,
    pub hash: B256,
    pub signed_tx: Vec<u8>,
    /// Wei per gas.
    pub max_fee_per_gas: u128,
    pub priority_fee_per_gas: u128,
    pub created_at: i64,
}
