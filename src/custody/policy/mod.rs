//! Wallet policy rules (docs/policy.md), BitGo's `admin.policy.rules[]`: what a rule says and
//! how a change to one is judged (tightening or loosening). Pure: evaluation is
//! [`eval`], storage and routes [`rules`].

use alloy_primitives::{Address, U256};
use serde_json::{json, Map, Value};

pub mod changes;
pub mod edit;
pub mod enterprise;
pub mod eval;
pub mod hooks;
pub mod rules;

use crate::{
    error::{Error, Result},
    types::{parse_eth_address, Coin, UserId},
};

/// Rules one wallet may hold.
pub const MAX_RULES: usize = 50;
/// Addresses one whitelist rule may hold.
pub const MAX_WHITELIST: usize = 1_000;
/// Users one rule's action may name.
pub const MAX_USER_IDS: usize = 50;
/// The longest rule id, characters.
pub const MAX_RULE_ID: usize = 64;
/// The longest velocity window, seconds (31 days; BitGo's limit).
pub const MAX_TIME_WINDOW: u64 = 2_678_400;

crate::types::text_enum!(
    /// A rule's `type`.
    pub enum RuleType("a rule type: coinAddressWhitelist, allTx, velocityLimit or webhook") {
        CoinAddressWhitelist = "coinAddressWhitelist",
        AllTx = "allTx",
        VelocityLimit = "velocityLimit",
        Webhook = "webhook",
    }
);

crate::types::text_enum!(
    /// A rule's `action.type`: what happens when it fires. Declared from the least strict to the
    /// most, so a change to a lesser action loosens.
    pub enum ActionType("an action type: getApproval, getFinalApproval or deny") {
        GetApproval = "getApproval",
        GetFinalApproval = "getFinalApproval",
        Deny = "deny",
    }
);

/// A `velocityLimit` condition: at most `amount` base units of `coin` withdrawn from the
/// wallet in any `window` seconds, this withdrawal included.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Velocity {
    pub amount: U256,
    /// Seconds, 1 to [`MAX_TIME_WINDOW`].
    pub window: u64,
    /// The coin counted (the wallet's, or one of its chain's tokens); `None`: the wallet's.
    pub coin: Option<Coin>,
}

/// What a rule looks at.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Condition {
    /// Fires for a payee not on the list.
    Whitelist(Vec<Address>),
    /// Fires for every withdrawal.
    AllTx,
    /// Fires when the window's withdrawals and this one add up past the amount.
    Velocity(Velocity),
    /// Fires unless the URL answers `200` to the proposed withdrawal in time.
    Webhook(String),
}

/// One rule, checked.
#[derive(Debug, Clone, PartialEq)]
pub struct Rule {
    /// 1 to [`MAX_RULE_ID`] characters of letters, digits, `-`, `_`, `.`.
    pub id: String,
    pub condition: Condition,
    pub action: ActionType,
    /// Who may give the approval a `getApproval` / `getFinalApproval` rule asks for; empty:
    /// any wallet admin but the initiator.
    pub user_ids: Vec<UserId>,
    /// BitGo's `lockDate` (Unix seconds): from then on only a service admin may ask to loosen
    /// the rule (docs/policy.md#lockdate).
    pub lock_date: Option<i64>,
}

/// A rule change as asked: `condition.add` / `condition.remove` change a whitelist in place.
#[derive(Debug)]
pub enum WhitelistEdit {
    Replace,
    Add(Address),
    Remove(Address),
}

impl Rule {
    pub fn kind(&self) -> RuleType {
        match self.condition {
            Condition::Whitelist(_) => RuleType::CoinAddressWhitelist,
            Condition::AllTx => RuleType::AllTx,
            Condition::Velocity(_) => RuleType::VelocityLimit,
            Condition::Webhook(_) => RuleType::Webhook,
        }
    }

    /// The velocity condition, when it is one.
    pub fn velocity(&self) -> Option<&Velocity> {
        match &self.condition {
            Condition::Velocity(v) => Some(v),
            _ => None,
        }
    }

    /// The rule as BitGo shows it in `admin.policy.rules`.
    pub fn to_json(&self) -> Value {
        let condition = match &self.condition {
            Condition::Whitelist(addresses) => {
                json!({ "addresses": addresses.iter().map(|a| a.to_checksum(None)).collect::<Vec<_>>() })
            }
            Condition::AllTx => json!({}),
            Condition::Velocity(v) => {
                let mut c = json!({ "amountString": v.amount.to_string(), "timeWindow": v.window, "excludeTags": [] });
                if let Some(coin) = &v.coin {
                    c["coin"] = json!(coin.as_str());
                }
                c
            }
            Condition::Webhook(url) => json!({ "url": url }),
        };
        let mut action = Map::new();
        action.insert("type".into(), json!(self.action.as_str()));
        if !self.user_ids.is_empty() {
            action.insert(
                "userIds".into(),
                json!(self.user_ids.iter().map(UserId::as_str).collect::<Vec<_>>()),
            );
        }
        let mut rule =
            json!({ "id": self.id, "type": self.kind().as_str(), "condition": condition, "action": action });
        if let Some(at) = self.lock_date {
            rule["lockDate"] = json!(crate::clock::iso(at));
        }
        rule
    }

    /// Whether the rule is locked at `now` (its `lockDate` passed).
    pub fn locked(&self, now: i64) -> bool {
        self.lock_date.is_some_and(|at| at <= now)
    }

    /// Why `self` is looser than `old` (the same id), in words; `None` when it is as tight or
    /// tighter: fewer whitelisted addresses, a lower limit or a longer window, a stricter
    /// action (getApproval, getFinalApproval, deny in that order), the same or fewer approvers.
    pub fn loosens(&self, old: &Rule) -> Option<String> {
        let id = &old.id;
        if self.kind() != old.kind() {
            return Some(format!("rule {id} changes type from {}", old.kind().as_str()));
        }
        if let Some(was) = old.lock_date {
            if self.lock_date.is_none_or(|at| at > was) {
                return Some(format!("rule {id} clears or puts off its lockDate"));
            }
        }
        if self.action < old.action {
            return Some(format!(
                "rule {id} changes its action from {} to {}",
                old.action.as_str(),
                self.action.as_str()
            ));
        }
        match (&self.condition, &old.condition) {
            (Condition::Whitelist(new), Condition::Whitelist(was)) => {
                if let Some(a) = new.iter().find(|a| !was.contains(a)) {
                    return Some(format!("rule {id} adds {} to its whitelist", a.to_checksum(None)));
                }
            }
            (Condition::Velocity(new), Condition::Velocity(was)) => {
                if new.amount > was.amount {
                    return Some(format!("rule {id} raises its limit from {} to {}", was.amount, new.amount));
                }
                if new.window < was.window {
                    return Some(format!(
                        "rule {id} shortens its window from {} s to {} s",
                        was.window, new.window
                    ));
                }
                if new.coin != was.coin {
                    return Some(format!("rule {id} changes the coin it counts"));
                }
            }
            (Condition::Webhook(new), Condition::Webhook(was)) if new != was => {
                return Some(format!("rule {id} changes the URL it asks"));
            }
            _ => {}
        }
        // A fired approval rule is met by one of its users (none named: any wallet admin), so
        // any user the old rule did not name can now give what it asked, whatever the action
        // (getApproval [bob] to getFinalApproval [carol] lets Carol approve without Bob). A
        // `deny` asks no one.
        let widened = self.action != ActionType::Deny
            && !old.user_ids.is_empty()
            && (self.user_ids.is_empty() || self.user_ids.iter().any(|u| !old.user_ids.contains(u)));
        if widened {
            return Some(format!("rule {id} widens who may approve"));
        }
        // A user a final-approval rule names may not approve before the others; one it no
        // longer names may, so the people left can move money with fewer others than before.
        let released = old.action == ActionType::GetFinalApproval
            && self.action != ActionType::Deny
            && old.user_ids.iter().any(|u| !self.user_ids.contains(u));
        released.then(|| format!("rule {id} lets a user it named as final approver approve early"))
    }

    /// How a change of `self` (the rule in force) to `new` (the same id) is judged at `now`:
    /// `Some(why)` when it must be approved as a loosening ([`Rule::loosens`]), or when `self`
    /// is locked (its `lockDate` passed) and `new` differs at all: a locked rule does not change
    /// at once, tighter or not (docs/policy.md#lockdate). `None`: it applies at once.
    pub fn judge_change(&self, new: &Rule, now: i64) -> Option<String> {
        if self.locked(now) && new != self {
            return Some(format!("rule {} is locked: any change to it is approved first", self.id));
        }
        new.loosens(self)
    }
}

/// `approvalsRequired` of a wallet record (§2.1: at least 1): the approvals its withdrawals and
/// its loosenings need.
pub fn approvals_required(record: &Value) -> u32 {
    record
        .get("approvalsRequired")
        .and_then(Value::as_u64)
        .and_then(|n| u32::try_from(n).ok())
        .unwrap_or(1)
        .max(1)
}

/// The rules stored in a wallet record's `admin.policy.rules` (each was checked when written;
/// one that no longer parses is skipped, which can only loosen, so it is logged).
pub fn rules_of(record: &Value) -> Vec<Rule> {
    let Some(list) = record.pointer("/admin/policy/rules").and_then(Value::as_array) else {
        return Vec::new();
    };
    parsed(list)
}

/// The rules of an enterprise's stored list for a coin (a JSON array, as written; `None`: no
/// rules yet), as [`rules_of`] reads a wallet's.
pub fn rules_of_list(text: Option<&str>) -> Vec<Rule> {
    let list: Vec<Value> = text.and_then(|t| serde_json::from_str(t).ok()).unwrap_or_default();
    parsed(&list)
}

fn parsed(list: &[Value]) -> Vec<Rule> {
    list.iter()
        .filter_map(|v| match parse_checked(v, Checks::Stored) {
            Ok((rule, _)) => Some(rule),
            Err(e) => {
                tracing::error!(error = %e, "a stored policy rule does not parse; it is not applied");
                None
            }
        })
        .collect()
}

/// How much a rule's text is checked: in full as a client sends it, or as this service stored
/// it (each whitelist address's EIP-55 checksum was checked when written; hashing a thousand
/// of them again at every withdrawal is what a wallet's policy costs most).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Checks {
    Sent,
    Stored,
}

/// Parses a rule as `POST`/`PUT .../policy/rule` sends it (`{id, type, condition, action}`).
/// Errors: `MissingField`, `InvalidField` naming the field.
pub fn parse(v: &Value) -> Result<(Rule, WhitelistEdit)> {
    parse_checked(v, Checks::Sent)
}

fn parse_checked(v: &Value, checks: Checks) -> Result<(Rule, WhitelistEdit)> {
    let id = v.get("id").and_then(Value::as_str).ok_or_else(|| Error::missing_field("id"))?;
    let id_ok = (1..=MAX_RULE_ID).contains(&id.chars().count())
        && id.chars().all(|c| c.is_ascii_alphanumeric() || "-_.".contains(c));
    if !id_ok || id.starts_with("enterprise.") {
        return Err(Error::invalid_field(
            "id",
            format!("1 to {MAX_RULE_ID} letters, digits, '-', '_' or '.', not starting with `enterprise.`"),
        ));
    }
    let lock_date = match v.get("lockDate") {
        None | Some(Value::Null) => None,
        Some(d) => Some(d.as_str().and_then(crate::clock::parse_iso).ok_or_else(|| {
            Error::invalid_field("lockDate", "an ISO 8601 date and time (2027-01-01T00:00:00Z)")
        })?),
    };
    let text = v.get("type").and_then(Value::as_str).ok_or_else(|| Error::missing_field("type"))?;
    let kind: RuleType = text.parse().map_err(|e: &str| Error::invalid_field("type", e))?;
    let condition =
        v.get("condition").and_then(Value::as_object).ok_or_else(|| Error::missing_field("condition"))?;
    let (condition, edit) = match kind {
        RuleType::AllTx => (Condition::AllTx, WhitelistEdit::Replace),
        RuleType::CoinAddressWhitelist => {
            let (addresses, edit) = whitelist(condition, checks)?;
            (Condition::Whitelist(addresses), edit)
        }
        RuleType::VelocityLimit => (Condition::Velocity(velocity(condition)?), WhitelistEdit::Replace),
        RuleType::Webhook => {
            let url = match condition.get("url") {
                None => return Err(Error::missing_field("condition.url")),
                Some(u) => {
                    u.as_str().ok_or_else(|| Error::invalid_field("condition.url", "an http(s) URL"))?
                }
            };
            if url.len() > crate::webhooks::callback_url::MAX_URL_LEN {
                return Err(Error::invalid_field("condition.url", "at most 2048 characters"));
            }
            (Condition::Webhook(url.to_string()), WhitelistEdit::Replace)
        }
    };
    let action = v.get("action").and_then(Value::as_object).ok_or_else(|| Error::missing_field("action"))?;
    let text =
        action.get("type").and_then(Value::as_str).ok_or_else(|| Error::missing_field("action.type"))?;
    let action_type: ActionType = text.parse().map_err(|e: &str| Error::invalid_field("action.type", e))?;
    let user_ids = match action.get("userIds") {
        None | Some(Value::Null) => Vec::new(),
        Some(Value::Array(ids)) if ids.len() <= MAX_USER_IDS => ids
            .iter()
            .map(|u| u.as_str().and_then(|s| s.parse::<UserId>().ok()))
            .collect::<Option<Vec<_>>>()
            .ok_or_else(|| Error::invalid_field("action.userIds", "user ids (32 hex)"))?,
        Some(_) => {
            return Err(Error::invalid_field("action.userIds", format!("at most {MAX_USER_IDS} user ids")))
        }
    };
    if action_type == ActionType::Deny && !user_ids.is_empty() {
        return Err(Error::invalid_field("action.userIds", "a deny has no approvers"));
    }
    Ok((Rule { id: id.to_string(), condition, action: action_type, user_ids, lock_date }, edit))
}

/// `{amountString, timeWindow, coin?, excludeTags?}`.
fn velocity(condition: &Map<String, Value>) -> Result<Velocity> {
    let amount = match condition.get("amountString") {
        Some(Value::String(s)) if !s.is_empty() && s.len() <= 78 && s.bytes().all(|b| b.is_ascii_digit()) => {
            U256::from_str_radix(s, 10).ok()
        }
        None => return Err(Error::missing_field("condition.amountString")),
        _ => None,
    };
    let amount = amount.ok_or_else(|| {
        Error::invalid_field("condition.amountString", "a whole number of base units, as digits, below 2^256")
    })?;
    let window = match condition.get("timeWindow") {
        None => return Err(Error::missing_field("condition.timeWindow")),
        Some(w) => w.as_u64().filter(|w| (1..=MAX_TIME_WINDOW).contains(w)).ok_or_else(|| {
            Error::invalid_field("condition.timeWindow", format!("seconds, from 1 to {MAX_TIME_WINDOW}"))
        })?,
    };
    let coin = match condition.get("coin") {
        None | Some(Value::Null) => None,
        Some(c) => Some(
            c.as_str()
                .and_then(|c| c.parse::<Coin>().ok())
                .ok_or_else(|| Error::invalid_field("condition.coin", "a coin symbol"))?,
        ),
    };
    match condition.get("excludeTags") {
        None | Some(Value::Null) => {}
        Some(Value::Array(tags)) if tags.is_empty() => {}
        Some(_) => {
            return Err(Error::invalid_field(
                "condition.excludeTags",
                "address tags are not kept by this service: leave excludeTags empty",
            ))
        }
    }
    Ok(Velocity { amount, window, coin })
}

fn whitelist(condition: &Map<String, Value>, checks: Checks) -> Result<(Vec<Address>, WhitelistEdit)> {
    let address = |text: &str| match checks {
        Checks::Sent => parse_eth_address(text).ok(),
        Checks::Stored => text.parse::<Address>().ok(),
    };
    let one = |field: &str| -> Result<Option<Address>> {
        match condition.get(field) {
            None => Ok(None),
            Some(v) => v
                .as_str()
                .map(parse_eth_address)
                .and_then(std::result::Result::ok)
                .map(Some)
                .ok_or_else(|| Error::invalid_field(format!("condition.{field}"), "an Ethereum address")),
        }
    };
    if let Some(a) = one("add")? {
        return Ok((vec![a], WhitelistEdit::Add(a)));
    }
    if let Some(a) = one("remove")? {
        return Ok((Vec::new(), WhitelistEdit::Remove(a)));
    }
    let list = condition
        .get("addresses")
        .and_then(Value::as_array)
        .ok_or_else(|| Error::missing_field("condition.addresses"))?;
    if list.len() > MAX_WHITELIST {
        return Err(Error::invalid_field(
            "condition.addresses",
            format!("at most {MAX_WHITELIST} addresses"),
        ));
    }
    let mut addresses = Vec::with_capacity(list.len());
    let mut seen = std::collections::HashSet::with_capacity(list.len());
    for (i, v) in list.iter().enumerate() {
        let a = v.as_str().and_then(address).ok_or_else(|| {
            Error::invalid_field(format!("condition.addresses[{i}]"), "an Ethereum address")
        })?;
        if seen.insert(a) {
            addresses.push(a);
        }
    }
    Ok((addresses, WhitelistEdit::Replace))
}

#[cfg(test)]
mod tests;
