//! What the chain watcher keeps (docs/chains.md): a wallet's watched addresses, the block
//! headers kept for reorg detection, a chain's checkpoint, and transfers with BitGo's states.

use crate::types::{BaseUnits, Coin, WalletId};

/// A watched address of a wallet: on Ethereum EIP-55 checksummed, `0x` and 40 hex digits; on a
/// UTXO chain base58 or bech32, derived from the wallet's keys.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WalletAddress {
    /// The chain coin (`hteth`), also for token transfers.
    pub chain: Coin,
    pub address: String,
    pub wallet_id: WalletId,
    pub label: Option<String>,
    /// Unix seconds.
    pub created_at: i64,
    /// A UTXO chain's address: the scripts that pay it and spend from it (`None` on Ethereum).
    pub scripts: Option<Scripts>,
    /// A derived address's place among the wallet's; `None` for an imported one.
    pub position: Option<Position>,
}

/// The scripts of a UTXO address, hex (BitGo's `coinSpecific`): the output script that pays it,
/// and for a multisig one the redeem and witness scripts that spend from it
/// (docs/chains.md#utxo-chains).
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Scripts {
    pub output_script: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub redeem_script: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub witness_script: Option<String>,
}

/// A derived address's BitGo `chain` (code) and `index`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Position {
    pub chain: u32,
    pub index: u32,
}

/// The first appearance of a watched address on chain: the block and transaction in which it
/// first sent or received, or in which its contract was created.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Appearance {
    /// EIP-55 checksummed.
    pub address: String,
    /// Whether it is the wallet's base address (`coinSpecific.baseAddress`): the wallet itself
    /// appears with it.
    pub base: bool,
    pub wallet_id: WalletId,
    pub height: u64,
    pub block_hash: String,
    pub txid: String,
}

/// A wallet's fee alerts (docs/chains.md, "Events"); `None` is off.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct FeeAlerts {
    /// `lowFee` when the average base fee of the last 10 blocks falls below this, wei.
    pub low_fee: Option<BaseUnits>,
    /// `lowFeeAddressBalance` when the fee address's balance falls below this, wei.
    pub low_fee_address_balance: Option<BaseUnits>,
}

/// A block header kept for reorg detection; hashes are `0x` and 64 hex digits.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BlockHead {
    pub height: u64,
    pub hash: String,
    pub parent_hash: String,
}

/// A chain's progress as stored.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ChainStatus {
    pub chain: String,
    /// The last block processed (the checkpoint) and its hash.
    pub height: Option<u64>,
    pub hash: Option<String>,
    /// The node's head when last asked.
    pub node_head: Option<u64>,
    /// Why the watcher stopped (a reorg deeper than `reorg_depth`); `None` while it runs.
    pub halted: Option<String>,
    /// Depth and time (Unix seconds) of the last reorg seen.
    pub last_reorg_depth: Option<u64>,
    pub last_reorg_at: Option<i64>,
    /// Who holds the watch (a process id) and until when, Unix milliseconds.
    pub lease_holder: Option<String>,
    pub lease_until: Option<i64>,
    /// Blocks processed per second over the watcher's last few seconds.
    pub blocks_per_second: Option<f64>,
    /// Why the watcher's last round failed (the node away, a `chain_id` that is not the
    /// node's); `None` once a round succeeds.
    pub error: Option<String>,
}

impl ChainStatus {
    /// Blocks the checkpoint is behind the node's head.
    pub fn lag(&self) -> u64 {
        match (self.node_head, self.height) {
            (Some(head), Some(at)) => head.saturating_sub(at),
            (Some(head), None) => head,
            _ => 0,
        }
    }
}

/// The `height` of a transfer seen in the node's pending pool, not yet in a block (BitGo's
/// convention for an unconfirmed transaction); its `block_hash` is empty.
pub const PENDING_HEIGHT: u64 = 999_999_999;

/// BitGo's transfer states.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum TransferState {
    /// Seen in the node's pending pool, or in a block with fewer than the chain's
    /// `confirmations`.
    Unconfirmed,
    /// In a block with at least `confirmations`.
    Confirmed,
    /// Its block was orphaned by a reorg and the new branch does not hold it, or it left the
    /// pending pool unmined.
    Removed,
    /// Another transaction of the same sender and nonce was mined instead.
    Replaced,
}

impl TransferState {
    pub const ALL: [TransferState; 4] = [Self::Unconfirmed, Self::Confirmed, Self::Removed, Self::Replaced];

    pub fn as_str(self) -> &'static str {
        match self {
            Self::Unconfirmed => "unconfirmed",
            Self::Confirmed => "confirmed",
            Self::Removed => "removed",
            Self::Replaced => "replaced",
        }
    }

    pub fn parse(s: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|t| t.as_str() == s)
    }
}

/// One address's part in a transfer: base units, negative for what left it.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct TransferEntry {
    pub address: String,
    /// Signed base units as decimal digits (`-1000000000000000000`).
    pub value: String,
    /// A UTXO send's output back to the wallet itself (BitGo's `isChange`); `None` elsewhere.
    #[serde(rename = "isChange", default, skip_serializing_if = "Option::is_none")]
    pub is_change: Option<bool>,
}

/// One input or output of a UTXO transaction (BitGo's transfer `inputs[]` and `outputs[]`):
/// `id` is `txid:vout`. Address and value are known for every output, and for the inputs that
/// spend a watched wallet's outputs (a node's blocks do not give the others').
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct UtxoLeg {
    pub id: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub address: Option<String>,
    /// Base units.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub value: Option<u64>,
    /// The block of the output (`None`: not known, or in the mempool).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub block_height: Option<u64>,
    /// The watched wallet it is of, with its derived position.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub wallet: Option<WalletId>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub chain: Option<u32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub index: Option<u32>,
}

/// A UTXO transfer's transaction: its inputs and outputs, and whether it signals
/// replace-by-fee (BIP 125), which decides whether it was announced `unconfirmed` (§6).
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct UtxoLegs {
    pub inputs: Vec<UtxoLeg>,
    pub outputs: Vec<UtxoLeg>,
    #[serde(default)]
    pub rbf: bool,
}

/// An output of a watched UTXO wallet, as Custodian keeps it (BitGo's unspent).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Unspent {
    pub chain: Coin,
    pub txid: String,
    pub vout: u32,
    pub wallet_id: WalletId,
    pub address: String,
    /// Base units.
    pub value: u64,
    /// [`PENDING_HEIGHT`] while only in the mempool.
    pub height: u64,
    /// Empty while only in the mempool.
    pub block_hash: String,
    /// Unix seconds: the block's time, or when it was first seen in the mempool.
    pub date: i64,
    pub position: Option<Position>,
    /// The transaction that spends it and its height ([`PENDING_HEIGHT`] in the mempool).
    pub spent: Option<(String, u64)>,
}

/// A transfer into or out of one wallet: one transaction's effect on the wallet for one coin.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Transfer {
    /// 32 hex, derived from (coin, txid, wallet), so a re-included transaction keeps its id.
    pub id: String,
    pub wallet_id: WalletId,
    /// The chain coin or the token coin (`hteth:usdc`).
    pub coin: Coin,
    /// The chain coin.
    pub chain: Coin,
    /// `0x` and 64 hex digits.
    pub txid: String,
    pub height: u64,
    pub block_hash: String,
    pub state: TransferState,
    /// Signed base units as decimal digits: positive for a receive, negative for a send.
    pub value: String,
    /// Fee paid by the wallet in the chain coin's base units (sends of the chain coin only).
    pub fee: String,
    pub entries: Vec<TransferEntry>,
    /// The block's time, Unix seconds.
    pub date: i64,
    /// The most confirmations this transfer reached on the branch that holds it.
    pub confirmations: u64,
    /// The sender and nonce of the transaction, to tell a replacement (`replaced`).
    pub sender: String,
    pub nonce: u64,
    /// A UTXO chain's transaction: its inputs and outputs (`None` on Ethereum).
    pub utxo: Option<UtxoLegs>,
}

/// The id of an event the chain watcher makes, in one place: `chain:<coin>:` and the parts
/// that say what it is about (docs/chains.md#events). Derived from what the event says, so a
/// block read again after a crash makes the same ids and the outbox stores nothing twice.
/// `coin` is the coin the event names: a token's for its transfers, the chain's for the rest.
pub fn chain_event_id(coin: &Coin, parts: &[&str]) -> String {
    let mut id = format!("chain:{}", coin.as_str());
    for p in parts {
        id.push(':');
        id.push_str(p);
    }
    id
}

impl Transfer {
    /// `send` or `receive`, as BitGo's `type`.
    pub fn kind(&self) -> &'static str {
        if self.value.starts_with('-') {
            "send"
        } else {
            "receive"
        }
    }

    /// BitGo's `baseValue` ("value excluding network fees"): [`base_value`] of its `value` and
    /// `fee`.
    pub fn base_value(&self) -> String {
        base_value(&self.value, &self.fee)
    }

    /// The deterministic id of a transaction's transfer for a wallet and coin.
    pub fn id_for(coin: &str, txid: &str, wallet: &WalletId) -> String {
        let mut id = crate::digest::sha256_hex(format!("{coin}|{txid}|{}", wallet.as_str()).as_bytes());
        id.truncate(32);
        id
    }
}

/// A transfer's value without the fee the wallet paid (BitGo's `baseValue`: "value excluding
/// network fees"), signed base units as decimal digits. `value` (signed digits) is what the
/// wallet's balance moved, so a send's includes its fee (`-(amount + fee)`) and this is
/// `value + fee` (`-amount`); `fee` (digits) is 0 but on the chain coin's sends, so a receive
/// or a token transfer keeps its value. Amounts that are not digits (never the watcher's own)
/// give `value` back.
pub fn base_value(value: &str, fee: &str) -> String {
    use alloy_primitives::U256;
    let (negative, digits) = match value.strip_prefix('-') {
        Some(digits) => (true, digits),
        None => (false, value),
    };
    let (Ok(fee), Ok(magnitude)) = (fee.parse::<U256>(), digits.parse::<U256>()) else {
        return value.to_string();
    };
    if fee.is_zero() {
        return value.to_string();
    }
    if !negative {
        return magnitude.checked_add(fee).map_or_else(|| value.to_string(), |v| v.to_string());
    }
    match magnitude.checked_sub(fee) {
        Some(left) if left.is_zero() => "0".into(),
        Some(left) => format!("-{left}"),
        None => (fee - magnitude).to_string(),
    }
}

#[cfg(test)]
mod base_value_tests {
    use super::base_value;

    #[test]
    fn a_sends_base_value_leaves_its_fee_out_and_a_receives_is_its_value() {
        assert_eq!(base_value("-1021000", "21000"), "-1000000", "a send of 1,000,000 paying 21,000");
        assert_eq!(base_value("-21000", "21000"), "0", "a fee alone (a token send's ETH leg)");
        assert_eq!(base_value("-5", "0"), "-5", "a token send, or a send still in the pool");
        assert_eq!(base_value("7", "0"), "7", "a receive");
        assert_eq!(base_value("-100", "150"), "50", "a send to itself that received more than it paid");
        assert_eq!(base_value("100", "5"), "105");
        let big = "115792089237316195423570985008687907853269984665640564039457584007913129639935";
        let less = "115792089237316195423570985008687907853269984665640564039457584007913129639934";
        assert_eq!(base_value(&format!("-{big}"), "1"), format!("-{less}"));
        assert_eq!(base_value(big, "1"), big, "past 2^256: left as it is");
        assert_eq!(base_value("x", "1"), "x");
        assert_eq!(base_value("-5", "y"), "-5");
    }
}

#[cfg(test)]
mod event_id_tests {
    use super::*;

    /// The ids stay what they were before they were made in one place: a replay after an
    /// upgrade finds the events it stored.
    #[test]
    fn chain_event_ids_keep_their_form() {
        let coin: Coin = "hteth".parse().unwrap();
        assert_eq!(
            chain_event_id(&coin, &["0xab", "w1", "confirmed", "0xh"]),
            "chain:hteth:0xab:w1:confirmed:0xh"
        );
        assert_eq!(chain_event_id(&coin, &["block", "0xh", "3"]), "chain:hteth:block:0xh:3");
    }
}
