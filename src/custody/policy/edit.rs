//! What changing a policy rule shares between a wallet's rules (`policy::rules`) and an
//! enterprise's (`policy::enterprise`): the kinds of change, a whitelist edited in place, and the
//! checks of a condition that need the service's settings, finding a rule, and writing a
//! wallet's rules back into its record.

use crate::custody::{
    policy::{Condition, Rule, WhitelistEdit},
    Custody,
};
use crate::{
    error::{Error, ErrorName, Result},
    types::Coin,
};
use serde_json::{json, Value};

/// What a rule change does to the list.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RuleChange {
    /// `POST`: adds the rule in the body; at once (a new rule can only hold more back).
    Create,
    /// `PUT`: replaces rule `body.id`; `condition.add` / `condition.remove` change a whitelist
    /// in place. At once when it tightens; a loosening waits for other admins' approval.
    Update,
    /// `DELETE` `{id}`: a loosening, so it waits for other admins' approval.
    Remove,
}

/// A velocity rule counts `chain` or a token configured for it; a webhook rule's URL is one
/// notifications could be sent to (https in production, not a refused literal address).
pub fn check_condition(svc: &Custody, chain: &Coin, rule: &Rule) -> Result<()> {
    if let Some(coin) = rule.velocity().and_then(|v| v.coin.as_ref()) {
        let token = svc
            .config
            .chains
            .get(chain.as_str())
            .is_some_and(|c| c.tokens.iter().any(|t| t.coin == coin.as_str()));
        if coin != chain && !token {
            return Err(Error::invalid_field(
                "condition.coin",
                format!("{chain} or a token configured for it"),
            ));
        }
    }
    if let Condition::Webhook(url) = &rule.condition {
        let env = svc.config.environment;
        let as_condition = |e: Error| Error::invalid_field("condition.url", e.to_string());
        crate::webhooks::callback_url::check_url(url, env).map_err(as_condition)?;
        crate::webhooks::registration::refuse_blocked_literal(url, &svc.config.delivery.allowed_cidrs)
            .map_err(as_condition)?;
    }
    Ok(())
}

/// `condition.add` / `condition.remove` of a whitelist `PUT`: the list is `old`'s with the one
/// address added or taken away.
pub fn apply_edit(rule: &mut Rule, old: &Rule, edit: WhitelistEdit) {
    if let (Condition::Whitelist(list), Condition::Whitelist(was)) = (&mut rule.condition, &old.condition) {
        match edit {
            WhitelistEdit::Replace => {}
            WhitelistEdit::Add(a) => {
                *list = was.clone();
                if !list.contains(&a) {
                    list.push(a);
                }
            }
            WhitelistEdit::Remove(a) => *list = was.iter().copied().filter(|x| *x != a).collect(),
        }
    }
}

/// Where rule `id` is among `rules`. Errors: `PolicyRuleNotFound` (404).
pub fn position(rules: &[Rule], id: &str) -> Result<usize> {
    rules.iter().position(|r| r.id == id).ok_or_else(|| Error::NotFound {
        name: ErrorName::PolicyRuleNotFound,
        message: format!("there is no policy rule {id}"),
    })
}

/// Writes `rules` into wallet `record`'s `admin.policy.rules`. An `admin` or `admin.policy`
/// that is not an object (an imported record's) is replaced: indexing into one would panic.
pub fn set_rules(record: &mut Value, rules: &[Rule]) {
    // Indexing with a key is safe on an object (a missing key is made), so each level is made
    // one first.
    if !record.is_object() {
        *record = json!({});
    }
    if !record["admin"].is_object() {
        record["admin"] = json!({});
    }
    if !record["admin"]["policy"].is_object() {
        record["admin"]["policy"] = json!({});
    }
    record["admin"]["policy"]["rules"] = Value::Array(rules.iter().map(Rule::to_json).collect());
}
