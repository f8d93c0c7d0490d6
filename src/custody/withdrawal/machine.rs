//! A withdrawal's states and the one function that moves it between them
//! (docs/withdrawals.md#states). Pure: no store, no node, and no clock but the `now` it is
//! given, so every transition is tested on its own (the tests beside it).
//!
//! Each state carries only what is true of it: a nonce once reserved, a transaction hash once
//! signed, a block once seen mined. [`step`] decides every change; the store writes what it
//! decides guarded by the version the decision read (compare-and-swap), so two deciders at once
//! change a withdrawal once and the other is told to read it again.
//!
//! Two rules live here because money depends on them:
//! - an approval's expiry is a property of the state at `now`: an answer at or after
//!   `expireDate` is refused wherever it comes from, whether or not a sweep closed it yet;
//! - no single answer of a node decides that money did not move: a refused send fails only once
//!   the node, asked again, neither knows nor mined the transaction ([`Command::Refused`]), and a
//!   reverted receipt fails only when read again at the chain's confirmation depth
//!   ([`Command::Settle`]).

use alloy_primitives::B256;

use crate::model::custody::{TxRequestState, Withdrawal};

/// A withdrawal's state with what that state carries.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum State {
    /// Waiting for approvers until `expires_at` (Unix seconds, the approval's `expireDate`).
    PendingApproval { expires_at: i64 },
    /// Approved at `since` (Unix seconds); `nonce` once reserved, which is before signing.
    PendingDelivery { since: i64, nonce: Option<u64> },
    /// Signed at `nonce`, the signed bytes stored.
    Signed { nonce: u64, tx_hash: B256 },
    /// The node took it; `mined` is the block the signer last saw it in.
    Delivered { nonce: u64, tx_hash: B256, mined: Option<u64> },
    /// An approver rejected it.
    Rejected,
    /// Its initiator withdrew it, its approval expired, or it missed its delivery deadline.
    Canceled,
    /// Failed; `nonce` when it had taken one, which the signer then fills
    /// (docs/withdrawals.md#nonce-gaps). Final, but for one way back: its own transaction found
    /// mined in place of the fill ([`Command::FoundMined`]).
    Failed { nonce: Option<u64> },
}

impl State {
    /// The state of stored withdrawal `w`, whose approval expires at `approval_expires_at` (only
    /// read while it waits for approvers; `None`: unknown, so already expired). `None` when the
    /// record lacks what its state carries (a signed one without a nonce): nothing applies.
    pub fn of(w: &Withdrawal, approval_expires_at: Option<i64>) -> Option<State> {
        Some(match w.state {
            TxRequestState::PendingApproval => {
                State::PendingApproval { expires_at: approval_expires_at.unwrap_or(i64::MIN) }
            }
            TxRequestState::PendingDelivery => State::PendingDelivery { since: w.updated_at, nonce: w.nonce },
            TxRequestState::Signed => State::Signed { nonce: w.nonce?, tx_hash: w.tx_hash? },
            TxRequestState::Delivered => {
                State::Delivered { nonce: w.nonce?, tx_hash: w.tx_hash?, mined: w.mined_block }
            }
            TxRequestState::Rejected => State::Rejected,
            TxRequestState::Canceled => State::Canceled,
            TxRequestState::Failed => State::Failed { nonce: w.nonce },
        })
    }

    /// Its txRequest `state` (BitGo's name).
    pub fn name(self) -> TxRequestState {
        match self {
            State::PendingApproval { .. } => TxRequestState::PendingApproval,
            State::PendingDelivery { .. } => TxRequestState::PendingDelivery,
            State::Signed { .. } => TxRequestState::Signed,
            State::Delivered { .. } => TxRequestState::Delivered,
            State::Rejected => TxRequestState::Rejected,
            State::Canceled => TxRequestState::Canceled,
            State::Failed { .. } => TxRequestState::Failed,
        }
    }
}

/// Something that happens to a withdrawal.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Command {
    /// An approver's approval; `last` when it completes what the wallet and its rules ask.
    Approve { last: bool },
    /// An approver's rejection.
    Reject,
    /// Its initiator withdraws it.
    Cancel,
    /// The sweep of approvals past their time.
    Expire,
    /// Approved but not signed within `deadline` seconds (`withdrawals.delivery_deadline`).
    MissDeadline { deadline: i64 },
    /// Its address's next nonce, stored on it before it is signed.
    Reserve { nonce: u64 },
    /// Its signed bytes stored.
    Sign { tx_hash: B256 },
    /// The node took it, or had it already.
    Sent,
    /// The node refused it, and asked again (`eth_getTransactionByHash`, the receipt) neither
    /// knows nor mined it.
    Refused,
    /// Held back for good before it was sent: its key is gone, the policy now denies it, the
    /// node says the call would revert.
    Fail,
    /// A receipt of one of its transactions, in `block`.
    Mined { block: u64 },
    /// The block it was seen in was reorged away.
    Dropped,
    /// Signed again at its nonce with higher fees: stuck or held queued once sent, or refused
    /// as underpriced before.
    Replace { tx_hash: B256 },
    /// A failed withdrawal's own transaction `tx_hash` found mined in `block` after all (its
    /// nonce's fill was not mined): the node's refusal was wrong, it paid, and is followed
    /// again.
    FoundMined { tx_hash: B256, block: u64 },
    /// Its receipt read again with its block `depth` blocks deep (1: the head), the chain asking
    /// `confirmations`: `paid` when it succeeded (status 1; for a token, its `Transfer` logged).
    Settle { paid: bool, depth: u64, confirmations: u64 },
}

/// Why a command changes nothing.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum Refused {
    /// It does not apply in this state (an answer to a withdrawal already signed, a send of
    /// one never signed).
    #[error("a withdrawal that is {} cannot take this", .0.as_str())]
    NotFrom(TxRequestState),
    /// Its approval expired at `0` (Unix seconds): no answer counts any more.
    #[error("its approval expired")]
    Expired(i64),
    /// Not yet: the approval's time, the delivery deadline or the confirmation depth has not
    /// come, or nothing shows it did not pay.
    #[error("not yet")]
    NotYet,
    /// It holds a nonce: it is signed next and cannot be canceled unsigned.
    #[error("it holds a nonce")]
    HoldsNonce,
    /// A signature needs a nonce stored first.
    #[error("it has no nonce stored")]
    NoNonce,
}

/// What `command` makes of a withdrawal in `state` at `now` (Unix seconds): its next state (the
/// same one for an approval that is not the last, a receipt, a replacement), or why nothing
/// changes.
pub fn step(state: State, command: Command, now: i64) -> Result<State, Refused> {
    use Command as C;
    use State as S;
    match (state, command) {
        (S::PendingApproval { expires_at }, C::Approve { .. } | C::Reject) if now >= expires_at => {
            Err(Refused::Expired(expires_at))
        }
        (S::PendingApproval { .. }, C::Approve { last: true }) => {
            Ok(S::PendingDelivery { since: now, nonce: None })
        }
        (s @ S::PendingApproval { .. }, C::Approve { last: false }) => Ok(s),
        (S::PendingApproval { .. }, C::Reject) => Ok(S::Rejected),
        (S::PendingApproval { .. }, C::Cancel) => Ok(S::Canceled),
        (S::PendingApproval { expires_at }, C::Expire) if now >= expires_at => Ok(S::Canceled),
        (S::PendingApproval { .. }, C::Expire) => Err(Refused::NotYet),

        (S::PendingDelivery { nonce: Some(_), .. }, C::MissDeadline { .. }) => Err(Refused::HoldsNonce),
        (S::PendingDelivery { since, .. }, C::MissDeadline { deadline })
            if now.saturating_sub(since) >= deadline =>
        {
            Ok(S::Canceled)
        }
        (S::PendingDelivery { .. }, C::MissDeadline { .. }) => Err(Refused::NotYet),
        (S::PendingDelivery { since, nonce: None }, C::Reserve { nonce }) => {
            Ok(S::PendingDelivery { since, nonce: Some(nonce) })
        }
        (s @ S::PendingDelivery { nonce: Some(held), .. }, C::Reserve { nonce }) if held == nonce => Ok(s),
        (S::PendingDelivery { nonce: Some(_), .. }, C::Reserve { .. }) => Err(Refused::HoldsNonce),
        (S::PendingDelivery { nonce: Some(nonce), .. }, C::Sign { tx_hash }) => {
            Ok(S::Signed { nonce, tx_hash })
        }
        (S::PendingDelivery { nonce: None, .. }, C::Sign { .. }) => Err(Refused::NoNonce),
        (S::PendingDelivery { nonce, .. }, C::Fail) => Ok(S::Failed { nonce }),

        (S::Signed { nonce, tx_hash }, C::Sent) => Ok(S::Delivered { nonce, tx_hash, mined: None }),
        (S::Signed { nonce, .. }, C::Refused) => Ok(S::Failed { nonce: Some(nonce) }),
        (S::Signed { nonce, .. }, C::Replace { tx_hash }) => Ok(S::Signed { nonce, tx_hash }),

        (S::Delivered { nonce, tx_hash, .. }, C::Mined { block }) => {
            Ok(S::Delivered { nonce, tx_hash, mined: Some(block) })
        }
        (S::Delivered { nonce, tx_hash, .. }, C::Dropped) => Ok(S::Delivered { nonce, tx_hash, mined: None }),
        (S::Delivered { nonce, mined: None, .. }, C::Replace { tx_hash }) => {
            Ok(S::Delivered { nonce, tx_hash, mined: None })
        }
        (S::Delivered { nonce, mined: Some(_), .. }, C::Settle { paid: false, depth, confirmations })
            if depth >= confirmations =>
        {
            Ok(S::Failed { nonce: Some(nonce) })
        }
        (S::Delivered { .. }, C::Settle { .. }) => Err(Refused::NotYet),

        (S::Failed { nonce: Some(nonce) }, C::FoundMined { tx_hash, block }) => {
            Ok(S::Delivered { nonce, tx_hash, mined: Some(block) })
        }

        (s, _) => Err(Refused::NotFrom(s.name())),
    }
}

#[cfg(test)]
#[path = "machine_tests.rs"]
mod tests;
