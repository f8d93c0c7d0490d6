//! A §6 event, one typed value from its source to the fan-out (docs/architecture.md, "From a
//! block to the receiver"). The chain watcher makes typed events whose ids it derives from
//! chain identity ([`crate::model::chain::chain_event_id`]); an upstream system's event
//! (`POST /api/v2/internal/events`, `custodian event emit`) is parsed once into
//! [`Event::Posted`], its known fields checked by type and the others kept. The fan-out
//! (`super::events`) takes an [`Event`] and nothing else.
//!
//! Layer rule: no web-framework types and nothing of the HTTP layer (docs/architecture.md).

use serde::Serialize;
use serde_json::{json, Map, Value};

use super::{invalid_type, BLOCK_TYPES, ENTERPRISE_TYPES, WALLET_TYPES};
use crate::{
    error::{parse_value, Error, Result},
    model::chain::chain_event_id,
    types::{Coin, EnterpriseId, WalletId},
};

/// A §6 event.
#[derive(Debug, Clone)]
pub enum Event {
    /// A transfer entered a state, or reached the confirmations a webhook waits for.
    Transfer(TransferEvent),
    /// A transaction touching a wallet was included in a block.
    Transaction(TransactionEvent),
    /// A block reached a block webhook's `numConfirmations`.
    Block(BlockEvent),
    /// A wallet's address showed on chain for the first time.
    AddressConfirmation(AppearanceEvent),
    /// A wallet's base address showed on chain for the first time (block webhooks).
    WalletConfirmation(AppearanceEvent),
    /// The chain's average base fee fell below a wallet's threshold.
    LowFee(LowFeeEvent),
    /// A wallet's fee address fell below its threshold.
    LowFeeAddressBalance(LowFeeBalanceEvent),
    /// A pending approval was made or answered (a withdrawal's).
    PendingApproval(PendingApprovalEvent),
    /// A withdrawal's txRequest changed state (`txRequest`), or its transaction did
    /// (`txRequestTransaction`).
    TxRequest(TxRequestEvent),
    TxRequestTransaction(TxRequestEvent),
    /// A withdrawal's approval expired (`transactionExpire`).
    TransactionExpire(TxRequestEvent),
    /// A wallet was frozen or unfrozen (`admin`).
    Admin(AdminEvent),
    /// A wallet's USD circuit breaker tripped or reset (`circuitBreaker`).
    CircuitBreaker(CircuitBreakerEvent),
    /// An upstream system's event, of any §6 type.
    Posted(PostedEvent),
}

/// `pendingapproval`: a pending approval (of a withdrawal, or of a loosening policy change) was
/// made or answered
/// (docs/withdrawals.md#events).
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct PendingApprovalEvent {
    pub coin: Coin,
    /// The wallet's approval; absent for a change to an enterprise's rules, which goes to the
    /// enterprise's `pendingapproval` webhooks (docs/policy.md#enterprise-rules).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub wallet_id: Option<WalletId>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub enterprise_id: Option<EnterpriseId>,
    pub pending_approval_id: String,
    /// `transactionRequest` or `policyRuleRequest`.
    pub pending_approval_type: &'static str,
    /// `pending`, `approved` or `rejected`.
    pub state: &'static str,
    /// The withdrawal it decides (a `transactionRequest`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tx_request_id: Option<String>,
    /// Answers given so far: the approval's version, for its id.
    #[serde(skip)]
    pub answers: usize,
}

/// `admin`: a wallet was frozen (withdrawals refused until `expires`) or unfrozen.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct AdminEvent {
    pub coin: Coin,
    pub wallet_id: WalletId,
    /// `freeze` or `unfreeze`.
    pub action: &'static str,
    /// `{time, expires}` (ISO 8601) of a freeze; absent for an unfreeze.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub freeze: Option<Value>,
    /// When it happened, Unix ms, for its id.
    #[serde(skip)]
    pub at_ms: i64,
}

/// `circuitBreaker`: more than `withdrawals.circuit_breaker_usd` was withdrawn from a wallet in
/// 24 hours (`tripped`: its new withdrawals need a service admin's final approval), or it fell
/// back to at most that (`reset`) (§6.1; docs/policy.md#circuit-breaker).
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct CircuitBreakerEvent {
    pub coin: Coin,
    pub wallet_id: WalletId,
    /// `tripped` or `reset`.
    pub state: &'static str,
    /// US dollars withdrawn in the last 24 hours, when it changed.
    pub usd: f64,
    /// The limit, US dollars.
    pub limit_usd: u64,
    /// When it happened, Unix ms, for its id.
    #[serde(skip)]
    pub at_ms: i64,
}

/// `txRequest`, `txRequestTransaction` and `transactionExpire`: a withdrawal's change, from
/// `oldState` to `newState` (txRequest states, or its transaction's).
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct TxRequestEvent {
    pub coin: Coin,
    pub wallet_id: WalletId,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub enterprise_id: Option<EnterpriseId>,
    pub tx_request_id: String,
    /// The txRequest's version after the change.
    pub tx_request_version: i64,
    pub webhook_type: &'static str,
    /// The withdrawal's idempotency key.
    pub sequence_ids: Vec<String>,
    pub old_state: &'static str,
    pub new_state: &'static str,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tx_hash: Option<String>,
}

/// Whose webhooks an event goes to (§6.1 wallet, §6.2 block, §6.3 enterprise).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Route {
    Wallet(WalletId),
    Block(Coin),
    Enterprise(EnterpriseId),
}

/// `transfer`: a transfer of the chain watcher's (docs/chains.md#events).
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct TransferEvent {
    /// The token's coin for a token transfer, else the chain's.
    pub coin: Coin,
    pub wallet_id: WalletId,
    pub transfer_id: String,
    /// The transaction id.
    pub hash: String,
    pub state: &'static str,
    /// `send` or `receive`.
    pub transfer_type: &'static str,
    /// Signed base units; a send's includes the fee the wallet paid.
    pub value_string: String,
    /// Signed base units without that fee (BitGo: "value excluding network fees").
    pub base_value_string: String,
    /// Base units of the chain's coin.
    pub fee_string: String,
    pub height: u64,
    pub confirmations: u64,
    /// The withdrawal (txRequest) a send from a custodial wallet is, when it is one.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tx_request_id: Option<String>,
    /// What the event tells, for its id: the state, or `c<N>` for N confirmations reached.
    #[serde(skip)]
    pub told: String,
    #[serde(skip)]
    pub block_hash: String,
}

/// `transaction`: once per transaction and wallet, at its inclusion.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct TransactionEvent {
    /// The chain's coin.
    pub coin: Coin,
    pub wallet_id: WalletId,
    pub hash: String,
    /// One of the transaction's transfers for the wallet.
    pub transfer: String,
    pub height: u64,
    #[serde(skip)]
    pub block_hash: String,
}

/// `block`: a block at `confirmations`.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct BlockEvent {
    pub coin: Coin,
    /// The block's hash.
    pub block_id: String,
    pub height: u64,
    pub confirmations: u64,
}

/// `address_confirmation` and `wallet_confirmation`: an address's first showing on chain.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct AppearanceEvent {
    pub coin: Coin,
    pub wallet_id: WalletId,
    /// EIP-55.
    pub address: String,
    /// The transaction it showed in.
    pub hash: String,
    pub height: u64,
    #[serde(skip)]
    pub block_hash: String,
}

/// `lowFee`.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct LowFeeEvent {
    pub coin: Coin,
    pub wallet_id: WalletId,
    pub height: u64,
    /// Wei.
    pub average_base_fee: String,
    /// Wei.
    pub threshold: String,
    #[serde(skip)]
    pub block_hash: String,
}

/// `lowFeeAddressBalance`.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct LowFeeBalanceEvent {
    pub coin: Coin,
    pub wallet_id: WalletId,
    pub height: u64,
    /// The fee address, EIP-55.
    pub address: String,
    /// Wei.
    pub balance: String,
    /// Wei.
    pub threshold: String,
    #[serde(skip)]
    pub block_hash: String,
}

/// An upstream system's event: its id, type and route checked, its known fields checked by
/// type (`super::event_fields`), every field kept as sent.
#[derive(Debug, Clone)]
pub struct PostedEvent {
    id: String,
    kind: String,
    route: Route,
    transfer_id: Option<String>,
    confirmations: Option<u64>,
    fields: Map<String, Value>,
}

/// An event from an upstream system. Extra fields are kept and delivered in the payload.
#[derive(Debug, serde::Deserialize, utoipa::ToSchema, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct EventRequest {
    /// Unique per event; a repeat returns the first result and sends nothing.
    #[schema(min_length = 1, max_length = 200)]
    pub event_id: String,
    /// A webhook type of §6.
    #[serde(rename = "type")]
    pub event_type: String,
    pub coin: Option<Coin>,
    pub wallet_id: Option<WalletId>,
    pub enterprise_id: Option<EnterpriseId>,
    pub transfer_id: Option<String>,
    pub hash: Option<String>,
    pub block_id: Option<String>,
    #[serde(default, deserialize_with = "crate::types::de_whole_number_opt")]
    pub confirmations: Option<u64>,
    pub state: Option<String>,
}

impl Event {
    /// An upstream system's event (a JSON object). Errors name the field; an unknown `type`
    /// is `InvalidWebhookType`.
    pub fn posted(body: Value) -> Result<Event> {
        let ev: EventRequest = parse_value(&body)?;
        let Value::Object(fields) = body else {
            return Err(Error::invalid_field("", "an event must be a JSON object"));
        };
        if ev.event_id.is_empty() || ev.event_id.len() > 200 {
            return Err(Error::invalid_field("eventId", "must be 1 to 200 characters"));
        }
        let t = ev.event_type.as_str();
        // `pendingapproval` is both: an enterprise's when it names no wallet.
        let of_enterprise = ENTERPRISE_TYPES.contains(&t) && ev.wallet_id.is_none();
        let route = if WALLET_TYPES.contains(&t) && !of_enterprise {
            Route::Wallet(ev.wallet_id.ok_or_else(|| Error::missing_field("walletId"))?)
        } else if BLOCK_TYPES.contains(&t) {
            Route::Block(ev.coin.ok_or_else(|| Error::missing_field("coin"))?)
        } else if ENTERPRISE_TYPES.contains(&t) {
            Route::Enterprise(ev.enterprise_id.ok_or_else(|| Error::missing_field("enterpriseId"))?)
        } else {
            let all: Vec<&str> =
                WALLET_TYPES.iter().chain(BLOCK_TYPES).chain(ENTERPRISE_TYPES).copied().collect();
            return Err(invalid_type("known", &all));
        };
        super::event_fields::check(t, &fields)?;
        Ok(Event::Posted(PostedEvent {
            id: ev.event_id,
            kind: ev.event_type,
            route,
            transfer_id: ev.transfer_id,
            confirmations: ev.confirmations,
            fields,
        }))
    }

    /// Its id: the caller's `eventId`, or derived from chain identity, in one place each.
    pub fn id(&self) -> String {
        match self {
            Event::Transfer(e) => {
                chain_event_id(&e.coin, &[&e.hash, e.wallet_id.as_str(), &e.told, &e.block_hash])
            }
            Event::Transaction(e) => {
                chain_event_id(&e.coin, &[&e.hash, e.wallet_id.as_str(), "transaction", &e.block_hash])
            }
            Event::Block(e) => chain_event_id(&e.coin, &["block", &e.block_id, &e.confirmations.to_string()]),
            Event::AddressConfirmation(e) => chain_event_id(&e.coin, &["address", &e.address, &e.block_hash]),
            Event::WalletConfirmation(e) => chain_event_id(&e.coin, &["wallet", &e.address, &e.block_hash]),
            Event::LowFee(e) => chain_event_id(&e.coin, &["lowFee", e.wallet_id.as_str(), &e.block_hash]),
            Event::LowFeeAddressBalance(e) => {
                chain_event_id(&e.coin, &["lowFeeAddressBalance", e.wallet_id.as_str(), &e.block_hash])
            }
            Event::PendingApproval(e) => {
                format!("custody:{}:{}:{}", e.pending_approval_id, e.answers, e.state)
            }
            Event::TxRequest(e) | Event::TxRequestTransaction(e) | Event::TransactionExpire(e) => {
                format!("custody:{}:{}:{}", e.tx_request_id, e.tx_request_version, self.kind())
            }
            Event::Admin(e) => format!("custody:{}:{}:{}", e.wallet_id, e.action, e.at_ms),
            Event::CircuitBreaker(e) => {
                format!("custody:{}:circuitBreaker:{}:{}", e.wallet_id, e.state, e.at_ms)
            }
            Event::Posted(e) => e.id.clone(),
        }
    }

    /// Its §6 type.
    pub fn kind(&self) -> &str {
        match self {
            Event::Transfer(_) => "transfer",
            Event::Transaction(_) => "transaction",
            Event::Block(_) => "block",
            Event::AddressConfirmation(_) => "address_confirmation",
            Event::WalletConfirmation(_) => "wallet_confirmation",
            Event::LowFee(_) => "lowFee",
            Event::LowFeeAddressBalance(_) => "lowFeeAddressBalance",
            Event::PendingApproval(_) => "pendingapproval",
            Event::TxRequest(_) => "txRequest",
            Event::TxRequestTransaction(_) => "txRequestTransaction",
            Event::TransactionExpire(_) => "transactionExpire",
            Event::Admin(_) => "admin",
            Event::CircuitBreaker(_) => "circuitBreaker",
            Event::Posted(e) => &e.kind,
        }
    }

    /// Whose webhooks it goes to.
    pub fn route(&self) -> Route {
        match self {
            Event::Transfer(TransferEvent { wallet_id, .. })
            | Event::Transaction(TransactionEvent { wallet_id, .. })
            | Event::AddressConfirmation(AppearanceEvent { wallet_id, .. })
            | Event::LowFee(LowFeeEvent { wallet_id, .. })
            | Event::LowFeeAddressBalance(LowFeeBalanceEvent { wallet_id, .. })
            | Event::TxRequest(TxRequestEvent { wallet_id, .. })
            | Event::TxRequestTransaction(TxRequestEvent { wallet_id, .. })
            | Event::TransactionExpire(TxRequestEvent { wallet_id, .. })
            | Event::Admin(AdminEvent { wallet_id, .. })
            | Event::CircuitBreaker(CircuitBreakerEvent { wallet_id, .. }) => {
                Route::Wallet(wallet_id.clone())
            }
            Event::PendingApproval(e) => match (&e.wallet_id, &e.enterprise_id) {
                (Some(w), _) => Route::Wallet(w.clone()),
                (None, Some(ent)) => Route::Enterprise(ent.clone()),
                // Not made: an approval has a wallet or an enterprise (the store refuses a row
                // of neither). No block webhook takes `pendingapproval`, so it would go nowhere.
                (None, None) => Route::Block(e.coin.clone()),
            },
            Event::Block(BlockEvent { coin, .. })
            | Event::WalletConfirmation(AppearanceEvent { coin, .. }) => Route::Block(coin.clone()),
            Event::Posted(e) => e.route.clone(),
        }
    }

    /// The transfer it names: its body is kept, to answer `GET .../transfer/{id}`.
    pub fn transfer_id(&self) -> Option<&str> {
        match self {
            Event::Transfer(e) => Some(&e.transfer_id),
            Event::Posted(e) => e.transfer_id.as_deref(),
            _ => None,
        }
    }

    /// The confirmations it says a block has (a block webhook's `numConfirmations` filter).
    pub fn confirmations(&self) -> Option<u64> {
        match self {
            Event::Block(e) => Some(e.confirmations),
            Event::Posted(e) => e.confirmations,
            _ => None,
        }
    }

    /// Its JSON fields, with `eventId` and `type`: what is stored and, without `eventId`,
    /// what its notifications carry. A transfer also names itself `transfer`, BitGo's name
    /// beside the watcher's. A posted event's fields are lent,
    /// not copied: most are never stored (only those naming a transfer are).
    pub fn body(&self) -> std::borrow::Cow<'_, Map<String, Value>> {
        let typed = match self {
            Event::Transfer(e) => serde_json::to_value(e),
            Event::Transaction(e) => serde_json::to_value(e),
            Event::Block(e) => serde_json::to_value(e),
            Event::AddressConfirmation(e) | Event::WalletConfirmation(e) => serde_json::to_value(e),
            Event::LowFee(e) => serde_json::to_value(e),
            Event::LowFeeAddressBalance(e) => serde_json::to_value(e),
            Event::PendingApproval(e) => serde_json::to_value(e),
            Event::TxRequest(e) | Event::TxRequestTransaction(e) | Event::TransactionExpire(e) => {
                serde_json::to_value(e)
            }
            Event::Admin(e) => serde_json::to_value(e),
            Event::CircuitBreaker(e) => serde_json::to_value(e),
            Event::Posted(e) => return std::borrow::Cow::Borrowed(&e.fields),
        };
        // Plain structs of strings and numbers always serialise.
        let mut body = match typed {
            Ok(Value::Object(m)) => m,
            _ => Map::new(),
        };
        if let Event::Transfer(e) = self {
            body.insert("transfer".into(), json!(e.transfer_id));
        }
        body.insert("eventId".into(), json!(self.id()));
        body.insert("type".into(), json!(self.kind()));
        std::borrow::Cow::Owned(body)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A typed transfer event has the body and id the watcher's events always had.
    #[test]
    fn a_transfer_event_keeps_its_body_and_id() {
        let e = Event::Transfer(TransferEvent {
            coin: "hteth".parse().unwrap(),
            wallet_id: crate::types::test_id("w1"),
            transfer_id: "t1".into(),
            hash: "0xab".into(),
            state: "confirmed",
            transfer_type: "receive",
            value_string: "5".into(),
            base_value_string: "5".into(),
            fee_string: "0".into(),
            height: 7,
            confirmations: 3,
            tx_request_id: None,
            told: "confirmed".into(),
            block_hash: "0xh".into(),
        });
        let w = crate::types::test_id::<WalletId>("w1");
        assert_eq!(e.id(), format!("chain:hteth:0xab:{w}:confirmed:0xh"));
        assert_eq!(e.route(), Route::Wallet(w.clone()));
        let want = json!({ "eventId": e.id(), "type": "transfer", "coin": "hteth", "walletId": w,
            "transferId": "t1", "transfer": "t1", "hash": "0xab", "state": "confirmed", "transferType": "receive",
            "valueString": "5", "baseValueString": "5", "feeString": "0", "height": 7, "confirmations": 3 });
        assert_eq!(Value::Object(e.body().into_owned()), want);
    }

    #[test]
    fn a_posted_event_is_checked_once() {
        let ok =
            Event::posted(json!({ "eventId": "e1", "type": "block", "coin": "btc", "confirmations": 2 }))
                .unwrap();
        assert_eq!((ok.id(), ok.kind(), ok.confirmations()), ("e1".to_string(), "block", Some(2)));
        assert!(Event::posted(json!({ "eventId": "e2", "type": "transfer" })).is_err(), "walletId missing");
        assert!(Event::posted(json!({ "eventId": "", "type": "block", "coin": "btc" })).is_err());
        assert!(Event::posted(json!({ "eventId": "e3", "type": "nope" })).is_err());
    }
}
