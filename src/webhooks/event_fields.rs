//! The known fields of each event type (docs/decisions.md#real-wallet-records), following the notifications BitGo sends:
//! an event's known fields are checked by kind (ids, base-unit amounts, states from a list)
//! with a 400 naming the field; any other field passes through to the payload unchanged. The
//! per-type shapes are written out in docs/webhooks.md.
//!
//! Layer rule: no web-framework types and nothing of the HTTP layer (docs/architecture.md).

use serde_json::{Map, Value};

use super::{TX_REQUEST_STATES, TX_REQUEST_TRANSACTION_STATES};
use crate::error::{Error, Result};

/// States of a transfer (BitGo's transfer states).
pub const TRANSFER_STATES: &[&str] = &[
    "initialized",
    "pendingApproval",
    "rejected",
    "signed",
    "unconfirmed",
    "confirmed",
    "removed",
    "failed",
    "replaced",
];
/// `transferType` values.
pub const TRANSFER_TYPES: &[&str] = &["send", "receive"];
/// States of a pending approval (BitGo's pending approval states).
pub const PENDING_APPROVAL_STATES: &[&str] = &[
    "pending",
    "awaitingSignature",
    "pendingBitGoAdminApproval",
    "pendingIdVerification",
    "pendingCustodianApproval",
    "pendingFinalApproval",
    "approved",
    "processing",
    "rejected",
];

/// How a known field is checked.
#[derive(Debug, Clone, Copy)]
pub enum Kind {
    /// A BitGo object id: 24 or 32 lower-case hex characters.
    ObjectId,
    /// A non-empty string of at most 200 characters.
    Text,
    /// A whole number >= 0 (a JSON integer).
    WholeNumber,
    /// An amount in base units, as a JSON integer or a string of digits; `signed` allows a
    /// leading minus (a transfer's value is negative for sends).
    BaseUnits {
        signed: bool,
    },
    /// One of the listed strings.
    OneOf(&'static [&'static str]),
    /// An array of strings.
    Strings,
    /// A string or an array of strings.
    TextOrStrings,
    Bool,
}

use Kind::*;

const TRANSFER: &[(&str, Kind)] = &[
    ("transfer", ObjectId),
    ("hash", Text),
    ("state", OneOf(TRANSFER_STATES)),
    ("transferType", OneOf(TRANSFER_TYPES)),
    ("walletType", OneOf(crate::model::wallet::WALLET_TYPES)),
    ("baseValue", BaseUnits { signed: true }),
    ("baseValueString", BaseUnits { signed: true }),
    ("value", BaseUnits { signed: true }),
    ("valueString", BaseUnits { signed: true }),
    ("feeString", BaseUnits { signed: false }),
    ("initiator", TextOrStrings),
    ("receiver", Text),
];
const PENDING_APPROVAL: &[(&str, Kind)] = &[
    ("pendingApprovalId", ObjectId),
    ("pendingApprovalType", Text),
    ("state", OneOf(PENDING_APPROVAL_STATES)),
    ("walletLabel", Text),
    ("simulation", Bool),
];
const TX_REQUEST: &[(&str, Kind)] = &[
    ("txRequestId", Text),
    ("txRequestVersion", WholeNumber),
    ("webhookType", Text),
    ("sequenceIds", Strings),
    ("organizationId", ObjectId),
    ("oldState", OneOf(TX_REQUEST_STATES)),
    ("newState", OneOf(TX_REQUEST_STATES)),
];
const TX_REQUEST_TRANSACTION: &[(&str, Kind)] = &[
    ("txRequestId", Text),
    ("txRequestVersion", WholeNumber),
    ("webhookType", Text),
    ("sequenceIds", Strings),
    ("organizationId", ObjectId),
    ("oldState", OneOf(TX_REQUEST_TRANSACTION_STATES)),
    ("newState", OneOf(TX_REQUEST_TRANSACTION_STATES)),
];
const BLOCK: &[(&str, Kind)] = &[("blockId", Text), ("hash", Text), ("height", WholeNumber)];
const ADDRESS: &[(&str, Kind)] = &[("address", Text), ("hash", Text)];
const TRANSACTION: &[(&str, Kind)] = &[("hash", Text), ("transfer", ObjectId)];
const ACCESS_TOKEN: &[(&str, Kind)] = &[("accessTokenId", ObjectId), ("label", Text)];
const BANK_ACCOUNT: &[(&str, Kind)] = &[("bankAccountId", ObjectId)];

/// The known fields of events of `event_type`, beyond the routing ones (`eventId`, `type`,
/// `walletId`, `coin`, `enterpriseId`, `transferId`, `confirmations`) that ingestion checks.
pub fn known_fields(event_type: &str) -> &'static [(&'static str, Kind)] {
    match event_type {
        "transfer" => TRANSFER,
        "pendingapproval" => PENDING_APPROVAL,
        "txRequest" => TX_REQUEST,
        "txRequestTransaction" => TX_REQUEST_TRANSACTION,
        "block" => BLOCK,
        "address_confirmation" => ADDRESS,
        "transaction" | "transactionExpire" | "transactionRemoved" | "transaction_finality_on_l1" => {
            TRANSACTION
        }
        "accessToken" => ACCESS_TOKEN,
        "bankAccount" => BANK_ACCOUNT,
        _ => &[],
    }
}

fn is_hex_id(s: &str) -> bool {
    (s.len() == 24 || s.len() == 32) && s.bytes().all(|c| c.is_ascii_digit() || (b'a'..=b'f').contains(&c))
}

fn base_units(v: &Value, signed: bool) -> bool {
    let text = match v {
        // JSON Schema counts 3.0 an integer: a whole float is accepted as one.
        // Numbers keep every digit (serde_json's arbitrary precision): an integer of any size is
        // its digits, as it will be delivered.
        Value::Number(n) => match (n.to_string(), n.as_f64()) {
            (t, _) if t.strip_prefix('-').unwrap_or(&t).bytes().all(|b| b.is_ascii_digit()) => t,
            (_, Some(f)) if f.is_finite() && f.fract() == 0.0 && f.abs() < 1e15 => format!("{f:.0}"),
            _ => return false,
        },
        Value::String(s) => s.clone(),
        _ => return false,
    };
    let digits = if signed { text.strip_prefix('-').unwrap_or(&text) } else { &text };
    !digits.is_empty() && digits.len() <= 100 && digits.bytes().all(|b| b.is_ascii_digit())
}

fn text(v: &Value) -> bool {
    v.as_str().is_some_and(|s| !s.is_empty() && s.chars().count() <= 200)
}

/// Why `v` is not of `kind`, if it is not.
fn problem(kind: Kind, v: &Value) -> Option<String> {
    let ok = match kind {
        ObjectId => v.as_str().is_some_and(is_hex_id),
        Text => text(v),
        WholeNumber => crate::types::whole_number(v).is_some(),
        BaseUnits { signed } => base_units(v, signed),
        OneOf(list) => v.as_str().is_some_and(|s| list.contains(&s)),
        Strings => v.as_array().is_some_and(|a| a.len() <= 1000 && a.iter().all(text)),
        TextOrStrings => text(v) || v.as_array().is_some_and(|a| a.len() <= 1000 && a.iter().all(text)),
        Bool => v.is_boolean(),
    };
    (!ok).then(|| match kind {
        ObjectId => "a BitGo id: 24 or 32 lower-case hex characters".into(),
        Text => "a string of 1 to 200 characters".into(),
        WholeNumber => "a whole number".into(),
        BaseUnits { signed: true } => {
            "an amount in base units: an integer, or a string of digits with an optional minus".into()
        }
        BaseUnits { signed: false } => {
            "an amount in base units: an integer >= 0, or a string of digits".into()
        }
        OneOf(list) => format!("one of: {}", list.join(", ")),
        Strings => "an array of strings (1 to 200 characters each)".into(),
        TextOrStrings => "a string, or an array of strings".into(),
        Bool => "a boolean".into(),
    })
}

/// Checks the known fields `event` carries for its type; absent ones and unknown ones pass.
/// Errors: `InvalidField` naming the first field at fault.
pub fn check(event_type: &str, event: &Map<String, Value>) -> Result<()> {
    for (name, kind) in known_fields(event_type) {
        if let Some(v) = event.get(*name).filter(|v| !v.is_null()) {
            if let Some(reason) = problem(*kind, v) {
                return Err(Error::invalid_field(*name, reason));
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn field(t: &str, e: Value) -> Option<String> {
        let Value::Object(m) = e else { return None };
        check(t, &m).err().map(|e| match e {
            Error::Invalid { context, .. } => context["field"].as_str().unwrap_or_default().to_string(),
            other => format!("{other:?}"),
        })
    }

    #[test]
    fn known_fields_are_checked_and_others_pass() {
        let ok = json!({ "transfer": "5f0c5e1a2b3c4d5e6f708192", "state": "confirmed", "valueString": "-1500",
            "feeString": "12", "baseValue": 1500, "initiator": ["a@b.co"], "anything": { "else": 1 } });
        assert_eq!(field("transfer", ok), None);
        assert_eq!(field("transfer", json!({ "state": "done" })).as_deref(), Some("state"));
        assert_eq!(field("transfer", json!({ "feeString": "-1" })).as_deref(), Some("feeString"));
        assert_eq!(field("transfer", json!({ "valueString": "1.5" })).as_deref(), Some("valueString"));
        assert_eq!(field("transfer", json!({ "transfer": "xyz" })).as_deref(), Some("transfer"));
        assert_eq!(field("txRequest", json!({ "newState": "delivered", "oldState": "signed" })), None);
        assert_eq!(field("txRequest", json!({ "newState": "held" })).as_deref(), Some("newState"));
        assert_eq!(field("txRequestTransaction", json!({ "newState": "held" })), None);
        assert_eq!(
            field("pendingapproval", json!({ "state": "approved", "simulation": "no" })).as_deref(),
            Some("simulation")
        );
        assert_eq!(field("lowFee", json!({ "state": "whatever" })), None, "no known fields");
    }
}
