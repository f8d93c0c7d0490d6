//! Every transition of the withdrawal state machine on its own: no database, no node, the clock
//! a number.

use alloy_primitives::B256;

use super::{step, Command as C, Refused, State as S};
use crate::model::custody::TxRequestState;

const NOW: i64 = 1_000_000;
const HASH: B256 = B256::repeat_byte(0xab);
const OTHER: B256 = B256::repeat_byte(0xcd);

fn waiting() -> S {
    S::PendingApproval { expires_at: NOW + 60 }
}

fn approved(nonce: Option<u64>) -> S {
    S::PendingDelivery { since: NOW - 10, nonce }
}

fn signed() -> S {
    S::Signed { nonce: 7, tx_hash: HASH }
}

fn delivered(mined: Option<u64>) -> S {
    S::Delivered { nonce: 7, tx_hash: HASH, mined }
}

/// Every command, with representative data.
fn every_command() -> Vec<C> {
    vec![
        C::Approve { last: true },
        C::Approve { last: false },
        C::Reject,
        C::Cancel,
        C::Expire,
        C::MissDeadline { deadline: 5 },
        C::Reserve { nonce: 7 },
        C::Sign { tx_hash: HASH },
        C::Sent,
        C::Refused,
        C::Fail,
        C::Mined { block: 9 },
        C::Dropped,
        C::Replace { tx_hash: OTHER },
        C::Settle { paid: false, depth: 12, confirmations: 12 },
        C::Settle { paid: true, depth: 12, confirmations: 12 },
        C::FoundMined { tx_hash: HASH, block: 9 },
    ]
}

/// Every state, with representative data.
fn every_state() -> Vec<S> {
    vec![
        waiting(),
        S::PendingApproval { expires_at: NOW },
        approved(None),
        approved(Some(7)),
        signed(),
        delivered(None),
        delivered(Some(9)),
        S::Rejected,
        S::Canceled,
        S::Failed { nonce: None },
        S::Failed { nonce: Some(7) },
    ]
}

#[test]
fn the_last_approval_hands_it_to_the_signer() {
    assert_eq!(
        step(waiting(), C::Approve { last: true }, NOW),
        Ok(S::PendingDelivery { since: NOW, nonce: None })
    );
}

#[test]
fn an_approval_that_is_not_the_last_leaves_it_waiting() {
    assert_eq!(step(waiting(), C::Approve { last: false }, NOW), Ok(waiting()));
}

#[test]
fn an_approval_at_the_moment_of_expiry_is_refused() {
    let at = NOW + 60;
    assert_eq!(step(waiting(), C::Approve { last: true }, at), Err(Refused::Expired(at)));
    assert_eq!(
        step(waiting(), C::Approve { last: true }, at - 1).map(S::name),
        Ok(TxRequestState::PendingDelivery)
    );
}

#[test]
fn an_approval_long_after_expiry_is_refused_even_unswept() {
    assert_eq!(step(waiting(), C::Approve { last: false }, NOW + 3_600), Err(Refused::Expired(NOW + 60)));
}

#[test]
fn a_rejection_rejects() {
    assert_eq!(step(waiting(), C::Reject, NOW), Ok(S::Rejected));
}

#[test]
fn a_rejection_after_expiry_is_refused() {
    assert_eq!(step(waiting(), C::Reject, NOW + 60), Err(Refused::Expired(NOW + 60)));
}

#[test]
fn the_initiator_may_cancel_while_it_waits() {
    assert_eq!(step(waiting(), C::Cancel, NOW), Ok(S::Canceled));
}

#[test]
fn the_sweep_expires_only_at_or_after_expire_date() {
    assert_eq!(step(waiting(), C::Expire, NOW + 59), Err(Refused::NotYet));
    assert_eq!(step(waiting(), C::Expire, NOW + 60), Ok(S::Canceled));
}

#[test]
fn a_withdrawal_of_unknown_expiry_counts_as_expired() {
    let unknown = S::PendingApproval { expires_at: i64::MIN };
    assert!(matches!(step(unknown, C::Approve { last: true }, NOW), Err(Refused::Expired(_))));
    assert_eq!(step(unknown, C::Expire, NOW), Ok(S::Canceled));
}

#[test]
fn approving_an_approved_withdrawal_is_refused() {
    assert_eq!(
        step(approved(None), C::Approve { last: true }, NOW),
        Err(Refused::NotFrom(TxRequestState::PendingDelivery))
    );
}

#[test]
fn an_approved_withdrawal_past_its_deadline_is_canceled() {
    assert_eq!(step(approved(None), C::MissDeadline { deadline: 10 }, NOW), Ok(S::Canceled));
    assert_eq!(step(approved(None), C::MissDeadline { deadline: 11 }, NOW), Err(Refused::NotYet));
}

#[test]
fn a_withdrawal_holding_a_nonce_is_never_canceled_for_its_deadline() {
    assert_eq!(step(approved(Some(3)), C::MissDeadline { deadline: 1 }, NOW), Err(Refused::HoldsNonce));
}

#[test]
fn a_nonce_is_reserved_once() {
    assert_eq!(step(approved(None), C::Reserve { nonce: 3 }, NOW), Ok(approved(Some(3))));
    assert_eq!(step(approved(Some(3)), C::Reserve { nonce: 3 }, NOW), Ok(approved(Some(3))));
    assert_eq!(step(approved(Some(3)), C::Reserve { nonce: 4 }, NOW), Err(Refused::HoldsNonce));
}

#[test]
fn signing_needs_a_stored_nonce() {
    assert_eq!(step(approved(None), C::Sign { tx_hash: HASH }, NOW), Err(Refused::NoNonce));
    assert_eq!(step(approved(Some(7)), C::Sign { tx_hash: HASH }, NOW), Ok(signed()));
}

#[test]
fn a_signed_withdrawal_refused_as_underpriced_is_signed_again_at_its_nonce() {
    assert_eq!(
        step(signed(), C::Replace { tx_hash: OTHER }, NOW),
        Ok(S::Signed { nonce: 7, tx_hash: OTHER })
    );
}

#[test]
fn a_withdrawal_is_signed_once() {
    assert_eq!(
        step(signed(), C::Sign { tx_hash: OTHER }, NOW),
        Err(Refused::NotFrom(TxRequestState::Signed))
    );
}

#[test]
fn failing_before_a_nonce_leaves_no_gap_to_fill() {
    assert_eq!(step(approved(None), C::Fail, NOW), Ok(S::Failed { nonce: None }));
}

#[test]
fn failing_with_a_nonce_keeps_it_for_the_gap_filler() {
    assert_eq!(step(approved(Some(4)), C::Fail, NOW), Ok(S::Failed { nonce: Some(4) }));
}

#[test]
fn a_send_the_node_took_is_delivered() {
    assert_eq!(step(signed(), C::Sent, NOW), Ok(delivered(None)));
}

#[test]
fn a_send_refused_and_unknown_to_the_node_fails_with_its_nonce() {
    assert_eq!(step(signed(), C::Refused, NOW), Ok(S::Failed { nonce: Some(7) }));
}

#[test]
fn an_unsigned_withdrawal_cannot_be_sent() {
    assert_eq!(step(approved(Some(7)), C::Sent, NOW), Err(Refused::NotFrom(TxRequestState::PendingDelivery)));
}

#[test]
fn a_receipt_records_its_block() {
    assert_eq!(step(delivered(None), C::Mined { block: 9 }, NOW), Ok(delivered(Some(9))));
}

#[test]
fn a_receipt_in_another_block_after_a_reorg_moves_it() {
    assert_eq!(step(delivered(Some(9)), C::Mined { block: 11 }, NOW), Ok(delivered(Some(11))));
}

#[test]
fn a_reorg_takes_the_block_away_and_it_is_followed_again() {
    assert_eq!(step(delivered(Some(9)), C::Dropped, NOW), Ok(delivered(None)));
}

#[test]
fn a_stuck_transaction_is_replaced_at_its_nonce() {
    assert_eq!(
        step(delivered(None), C::Replace { tx_hash: OTHER }, NOW),
        Ok(S::Delivered { nonce: 7, tx_hash: OTHER, mined: None })
    );
}

#[test]
fn a_mined_transaction_is_never_replaced() {
    assert_eq!(
        step(delivered(Some(9)), C::Replace { tx_hash: OTHER }, NOW),
        Err(Refused::NotFrom(TxRequestState::Delivered))
    );
}

#[test]
fn a_reverted_receipt_fails_only_at_the_confirmation_depth() {
    let settle = |depth| C::Settle { paid: false, depth, confirmations: 12 };
    assert_eq!(step(delivered(Some(9)), settle(11), NOW), Err(Refused::NotYet));
    assert_eq!(step(delivered(Some(9)), settle(12), NOW), Ok(S::Failed { nonce: Some(7) }));
}

#[test]
fn a_paid_receipt_never_fails() {
    let settle = C::Settle { paid: true, depth: 1_000, confirmations: 12 };
    assert_eq!(step(delivered(Some(9)), settle, NOW), Err(Refused::NotYet));
}

#[test]
fn an_unmined_withdrawal_is_not_settled() {
    let settle = C::Settle { paid: false, depth: 1_000, confirmations: 12 };
    assert_eq!(step(delivered(None), settle, NOW), Err(Refused::NotYet));
}

#[test]
fn a_delivered_withdrawal_cannot_be_failed_by_the_signer_s_pre_send_checks() {
    assert_eq!(step(delivered(None), C::Fail, NOW), Err(Refused::NotFrom(TxRequestState::Delivered)));
}

#[test]
fn a_delivered_withdrawal_cannot_be_refused_into_failure() {
    assert_eq!(step(delivered(None), C::Refused, NOW), Err(Refused::NotFrom(TxRequestState::Delivered)));
}

#[test]
fn a_signed_withdrawal_cannot_be_canceled_or_expired() {
    for c in [C::Cancel, C::Expire, C::Reject, C::MissDeadline { deadline: 0 }] {
        assert_eq!(step(signed(), c, NOW), Err(Refused::NotFrom(TxRequestState::Signed)), "{c:?}");
    }
}

#[test]
fn final_states_take_nothing_but_a_failed_one_found_mined() {
    for s in [S::Rejected, S::Canceled, S::Failed { nonce: None }, S::Failed { nonce: Some(7) }] {
        for c in every_command() {
            if matches!((s, c), (S::Failed { nonce: Some(_) }, C::FoundMined { .. })) {
                continue;
            }
            assert_eq!(step(s, c, NOW), Err(Refused::NotFrom(s.name())), "{s:?} {c:?}");
        }
    }
}

#[test]
fn a_failed_withdrawal_whose_own_transaction_was_mined_after_all_is_delivered_again() {
    let found = C::FoundMined { tx_hash: OTHER, block: 12 };
    assert_eq!(
        step(S::Failed { nonce: Some(7) }, found, NOW),
        Ok(S::Delivered { nonce: 7, tx_hash: OTHER, mined: Some(12) })
    );
    assert_eq!(step(S::Failed { nonce: None }, found, NOW), Err(Refused::NotFrom(TxRequestState::Failed)));
}

/// Every (state, command) pair: a change is only ever to a state the diagram of
/// docs/withdrawals.md draws, and money never leaves a final state.
#[test]
fn every_pair_moves_only_along_the_diagram() {
    let diagram = diagram_edges();
    for s in every_state() {
        for c in every_command() {
            if let Ok(next) = step(s, c, NOW) {
                let (from, to) = (s.name(), next.name());
                assert!(
                    from == to || diagram.contains(&(from, to)),
                    "{s:?} --{c:?}--> {next:?} is not drawn"
                );
                assert!(!s.name().is_final() || matches!(c, C::FoundMined { .. }), "{s:?} is final");
            }
        }
    }
}

/// The diagram draws no edge the machine cannot take.
#[test]
fn every_edge_of_the_diagram_is_taken_by_some_command() {
    let taken: Vec<(TxRequestState, TxRequestState)> = every_state()
        .into_iter()
        .flat_map(|s| {
            every_command()
                .into_iter()
                .filter_map(move |c| step(s, c, NOW).ok().map(|n| (s.name(), n.name())))
        })
        .collect();
    for edge in diagram_edges() {
        assert!(taken.contains(&edge), "docs/withdrawals.md draws {edge:?}, which no command takes");
    }
}

/// The edges of the state diagram in docs/withdrawals.md (its `stateDiagram-v2` block), by
/// txRequest state.
fn diagram_edges() -> Vec<(TxRequestState, TxRequestState)> {
    let doc = include_str!("../../../docs/withdrawals.md");
    let block =
        doc.split("```mermaid\nstateDiagram-v2\n").nth(1).expect("docs/withdrawals.md has the state diagram");
    let block = block.split("```").next().unwrap_or_default();
    let edges: Vec<(TxRequestState, TxRequestState)> = block
        .lines()
        .filter_map(|line| {
            let (from, rest) = line.trim().split_once(" --> ")?;
            let to = rest.split(':').next()?.trim();
            Some((TxRequestState::parse(from.trim())?, TxRequestState::parse(to)?))
        })
        .collect();
    assert!(edges.len() >= 8, "the diagram has {} edges", edges.len());
    edges
}
