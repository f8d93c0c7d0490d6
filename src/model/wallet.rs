//! The wallet record of spec §2.1: what a stored wallet is, its balances, field-by-field
//! validation, and its rendering as a lookup element.
//!
//! A record is stored as its JSON text (every §2.1 field but the balances, numbers and nested
//! objects exactly as given) plus the columns the lookup filters on, and the balances as
//! lossless decimal strings in base units.

use serde_json::{Map, Value};

use crate::types::{AnyId, BaseUnits, Coin, EnterpriseId, SharedText, UserId, WalletId};

/// Allowed `type` values (§2.1).
pub const WALLET_TYPES: &[&str] =
    &["backing", "cold", "custodial", "custodialPaired", "hot", "advanced", "trading"];
/// Allowed `subType` values (§2.1).
pub const WALLET_SUBTYPES: &[&str] = &[
    "distributedCustody",
    "pairedCustodial",
    "custodialHot",
    "custodialCold",
    "lightningCustody",
    "lightningSelfCustody",
    "onPrem",
];
/// Allowed `multisigType` values (§2.1).
pub const MULTISIG_TYPES: &[&str] = &["onchain", "tss"];
/// Allowed `multisigTypeVersion` values (§2.1).
pub const MULTISIG_TYPE_VERSIONS: &[&str] = &["MPCv2"];

/// Balances in base units (USD cents for the withdraw hold).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Balances {
    pub balance: Option<BaseUnits>,
    pub confirmed: Option<BaseUnits>,
    pub spendable: Option<BaseUnits>,
    pub staking: Option<BaseUnits>,
    pub reward: Option<BaseUnits>,
    pub withdraw_hold_usd: Option<BaseUnits>,
}

/// A validated wallet, ready to store.
#[derive(Debug, Clone)]
pub struct WalletRow {
    pub id: WalletId,
    pub coin: Coin,
    pub enterprise: Option<EnterpriseId>,
    pub deleted: bool,
    /// Ids from `users[].user`: the users who may see the wallet.
    pub user_ids: Vec<UserId>,
    /// The §2.1 record without balances, as JSON object text (a lookup's rows share the
    /// stored answer's text).
    pub record: SharedText,
    pub balances: Balances,
}

#[derive(Debug, Clone, Copy)]
enum Kind {
    Bool,
    BoolOrNull,
    /// A JSON integer >= the bound.
    IntegerAtLeast(i64),
    Str,
    NonEmptyStr,
    Id,
    Coin,
    DateTime,
    Object,
    ObjectArray,
    StringArray,
    OneOf(&'static [&'static str]),
}

/// Every non-balance field of §2.1: name, kind, required.
const FIELDS: &[(&str, Kind, bool)] = &[
    ("allowBackupKeySigning", Kind::Bool, true),
    ("approvalsRequired", Kind::IntegerAtLeast(1), true),
    ("coin", Kind::Coin, true),
    ("coinSpecific", Kind::Object, true),
    ("deleted", Kind::Bool, true),
    ("disableTransactionNotifications", Kind::Bool, true),
    ("hasLargeNumberOfAddresses", Kind::BoolOrNull, true),
    ("id", Kind::Id, true),
    ("isCold", Kind::Bool, true),
    ("label", Kind::Str, true),
    ("startDate", Kind::DateTime, true),
    ("admin", Kind::Object, false),
    ("billingEnterprise", Kind::Str, false),
    ("buildDefaults", Kind::Object, false),
    ("clientFlags", Kind::ObjectArray, false),
    ("config", Kind::Object, false),
    ("custodialWalletId", Kind::Id, false),
    ("customChangeKeySignatures", Kind::Object, false),
    ("customerWalletId", Kind::Str, false),
    ("enterprise", Kind::Id, false),
    ("evmKeyRingReferenceWalletId", Kind::Id, false),
    ("isParent", Kind::Bool, false),
    ("enabledChildChains", Kind::StringArray, false),
    ("archivedChildChains", Kind::StringArray, false),
    ("organization", Kind::Str, false),
    ("serviceOrg", Kind::Str, false),
    ("freeze", Kind::Object, false),
    ("instantProvider", Kind::NonEmptyStr, false),
    ("keys", Kind::StringArray, false),
    ("keySignatures", Kind::Object, false),
    ("m", Kind::IntegerAtLeast(1), false),
    ("n", Kind::IntegerAtLeast(1), false),
    ("migratedFrom", Kind::Str, false),
    ("multisigType", Kind::OneOf(MULTISIG_TYPES), false),
    ("multisigTypeVersion", Kind::OneOf(MULTISIG_TYPE_VERSIONS), false),
    ("recoverable", Kind::Bool, false),
    ("tags", Kind::StringArray, false),
    ("type", Kind::OneOf(WALLET_TYPES), false),
    ("subType", Kind::OneOf(WALLET_SUBTYPES), false),
    ("offchain", Kind::Object, false),
    ("users", Kind::ObjectArray, false),
    ("walletFlags", Kind::ObjectArray, false),
    ("receiveAddress", Kind::Object, false),
    ("userKeySigningRequired", Kind::Bool, false),
];

/// Balance fields (§2.1): the string field, and the numeric twin when there is one.
pub const BALANCE_FIELDS: &[(&str, Option<&str>)] = &[
    ("balanceString", Some("balance")),
    ("confirmedBalanceString", Some("confirmedBalance")),
    ("spendableBalanceString", Some("spendableBalance")),
    ("stakingBalanceString", None),
    ("rewardBalanceString", None),
    ("withdrawHoldAmountUsdString", None),
];

impl Balances {
    /// The balance for the `i`th entry of [`BALANCE_FIELDS`].
    pub fn get_mut(&mut self, i: usize) -> &mut Option<BaseUnits> {
        match i {
            0 => &mut self.balance,
            1 => &mut self.confirmed,
            2 => &mut self.spendable,
            3 => &mut self.staking,
            4 => &mut self.reward,
            _ => &mut self.withdraw_hold_usd,
        }
    }

    /// The balance for the `i`th entry of [`BALANCE_FIELDS`].
    pub fn get(&self, i: usize) -> Option<&str> {
        match i {
            0 => self.balance.as_ref(),
            1 => self.confirmed.as_ref(),
            2 => self.spendable.as_ref(),
            3 => self.staking.as_ref(),
            4 => self.reward.as_ref(),
            _ => self.withdraw_hold_usd.as_ref(),
        }
        .map(BaseUnits::as_str)
    }

    /// Fills the fields set in `other` (a partial update).
    pub fn merge(&mut self, other: &Balances) {
        for i in 0..BALANCE_FIELDS.len() {
            if let Some(v) = other.get(i) {
                *self.get_mut(i) = v.parse().ok();
            }
        }
    }
}

/// True for an ofc (trading-account) coin: `ofc` or an `ofc`-prefixed ticker.
pub fn is_ofc(coin: &str) -> bool {
    coin.starts_with("ofc")
}

fn check(kind: Kind, v: &Value) -> Result<(), String> {
    let ok = match kind {
        Kind::Bool => v.is_boolean(),
        Kind::BoolOrNull => v.is_boolean() || v.is_null(),
        Kind::IntegerAtLeast(min) => {
            return match v.as_i64() {
                Some(n) if n >= min => Ok(()),
                _ => Err(format!("must be an integer of at least {min}")),
            }
        }
        Kind::Str => v.is_string(),
        Kind::NonEmptyStr => v.as_str().is_some_and(|s| !s.is_empty()),
        Kind::Id => {
            return if v.as_str().is_some_and(|s| s.parse::<AnyId>().is_ok()) {
                Ok(())
            } else {
                Err("must be 32 lowercase hex characters".into())
            }
        }
        Kind::Coin => {
            return if v.as_str().is_some_and(|s| s.parse::<Coin>().is_ok()) {
                Ok(())
            } else {
                Err("must be a lower-case coin symbol".into())
            }
        }
        Kind::DateTime => {
            return if v.as_str().is_some_and(|s| chrono::DateTime::parse_from_rfc3339(s).is_ok()) {
                Ok(())
            } else {
                Err("must be an ISO 8601 date-time with offset, e.g. 2024-01-31T12:00:00.000Z".into())
            }
        }
        Kind::Object => v.is_object(),
        Kind::ObjectArray => v.as_array().is_some_and(|a| a.iter().all(Value::is_object)),
        Kind::StringArray => v.as_array().is_some_and(|a| a.iter().all(Value::is_string)),
        Kind::OneOf(allowed) => {
            return if v.as_str().is_some_and(|s| allowed.contains(&s)) {
                Ok(())
            } else {
                Err(format!("must be one of {}", allowed.join(", ")))
            }
        }
    };
    if ok {
        Ok(())
    } else {
        Err(match kind {
            Kind::Bool => "must be a boolean",
            Kind::BoolOrNull => "must be a boolean or null",
            Kind::Str => "must be a string",
            Kind::NonEmptyStr => "must be a non-empty string",
            Kind::Object => "must be an object",
            Kind::ObjectArray => "must be an array of objects",
            _ => "must be an array of strings",
        }
        .into())
    }
}

/// A validation failure: the field (empty for the record as a whole) and why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Invalid {
    pub field: String,
    pub reason: String,
}

fn invalid(field: &str, reason: impl Into<String>) -> Invalid {
    Invalid { field: field.into(), reason: reason.into() }
}

/// The §2.1 and §8 rules between fields: m-of-n by wallet kind (hot 2-of-3, ofc 1-of-1, never
/// m > n), trading wallets on ofc coins, and the EVM keyring's parent/child fields.
fn check_shape(map: &Map<String, Value>, coin: &str) -> Result<(), Invalid> {
    let get_str = |k: &str| map.get(k).and_then(Value::as_str);
    let get_int = |k: &str| map.get(k).and_then(Value::as_i64);
    let wallet_type = get_str("type");

    // m-of-n, §2.1 and §8: hot 2-of-3, ofc 1-of-1, custodial unspecified; never m > n.
    let (m, n) = (get_int("m"), get_int("n"));
    if let (Some(m), Some(n)) = (m, n) {
        if m > n {
            return Err(invalid("m", format!("m ({m}) cannot exceed n ({n})")));
        }
    }
    let expected = if is_ofc(coin) {
        Some((1, 1, "ofc wallets are 1-of-1"))
    } else if wallet_type == Some("hot") {
        Some((2, 3, "hot wallets are 2-of-3"))
    } else {
        None
    };
    if let Some((em, en, why)) = expected {
        if m.is_some_and(|m| m != em) {
            return Err(invalid("m", why));
        }
        if n.is_some_and(|n| n != en) {
            return Err(invalid("n", why));
        }
    }
    if wallet_type == Some("trading") && !is_ofc(coin) {
        return Err(invalid("coin", "trading wallets are trading accounts whose coin is ofc"));
    }
    // EVM keyring (§2.1): the reference id only on children, chain lists only on parents.
    let is_parent = map.get("isParent").and_then(Value::as_bool).unwrap_or(false);
    if is_parent && map.contains_key("evmKeyRingReferenceWalletId") {
        return Err(invalid("evmKeyRingReferenceWalletId", "only child wallets have a reference wallet"));
    }
    for f in ["enabledChildChains", "archivedChildChains"] {
        if !is_parent && map.contains_key(f) {
            return Err(invalid(f, "only parent wallets (isParent: true) have child chains"));
        }
    }
    if get_str("evmKeyRingReferenceWalletId") == get_str("id")
        && map.contains_key("evmKeyRingReferenceWalletId")
    {
        return Err(invalid("evmKeyRingReferenceWalletId", "a wallet cannot reference itself"));
    }
    Ok(())
}

/// The balances of a record, from each `...String` field or its numeric twin (which must agree).
fn record_balances(map: &Map<String, Value>) -> Result<Balances, Invalid> {
    let mut balances = Balances::default();
    for (i, (string_field, number_field)) in BALANCE_FIELDS.iter().enumerate() {
        let from_string =
            match map.get(*string_field) {
                Some(v) if v.is_string() => Some(BaseUnits::from_json(v).ok_or_else(|| {
                    invalid(string_field, "must be a non-negative integer as decimal digits")
                })?),
                Some(_) => return Err(invalid(string_field, "must be a string of decimal digits")),
                None => None,
            };
        let from_number = match number_field.and_then(|f| map.get(f).map(|v| (f, v))) {
            Some((f, v)) if v.is_number() => Some(
                BaseUnits::from_json(v)
                    .ok_or_else(|| invalid(f, "must be a non-negative integer in base units"))?,
            ),
            Some((f, _)) => return Err(invalid(f, "must be a number")),
            None => None,
        };
        if let (Some(s), Some(n)) = (&from_string, &from_number) {
            if s != n {
                return Err(invalid(string_field, "disagrees with its numeric twin"));
            }
        }
        *balances.get_mut(i) = from_string.or(from_number);
    }
    Ok(balances)
}

/// Validates one §2.1 record and splits it into the stored form, reporting every violation at
/// once. Fields §2.1 does not list are kept verbatim (BitGo's records carry more, e.g.
/// `pendingApprovals`, `bitgoOrg`, `customTags`), unless `strict`, which refuses them so that
/// a typo cannot pass. The stored record's keys are sorted (docs/decisions.md).
pub fn validate(record: &Value, strict: bool) -> Result<WalletRow, Vec<Invalid>> {
    let Value::Object(map) = record else {
        return Err(vec![invalid("", "a wallet record must be a JSON object")]);
    };
    let is_balance = |k: &str| BALANCE_FIELDS.iter().any(|(s, n)| *s == k || *n == Some(k));
    let mut errors = Vec::new();
    if strict {
        for key in map.keys() {
            if !FIELDS.iter().any(|(n, _, _)| n == key) && !is_balance(key) {
                errors.push(invalid(key, "not a field of the wallet record (§2.1; --strict)"));
            }
        }
    }
    for (name, kind, required) in FIELDS {
        match map.get(*name) {
            None if *required => errors.push(invalid(name, "is required")),
            None => {}
            Some(v) => {
                if let Err(r) = check(*kind, v) {
                    errors.push(invalid(name, r));
                }
            }
        }
    }
    let coin = map.get("coin").and_then(Value::as_str).unwrap_or_default().to_string();
    if errors.is_empty() {
        if let Err(e) = check_shape(map, &coin) {
            errors.push(e);
        }
    }
    let balances = match record_balances(map) {
        Ok(b) => b,
        Err(e) => {
            errors.push(e);
            Balances::default()
        }
    };
    if !errors.is_empty() {
        return Err(errors);
    }

    let stored: Map<String, Value> =
        map.iter().filter(|(k, _)| !is_balance(k)).map(|(k, v)| (k.clone(), v.clone())).collect();
    let user_ids = map
        .get("users")
        .and_then(Value::as_array)
        .map(|a| {
            // Only ids of this service's users (32 hex) can grant visibility; others (another
            // system's ids) stay in the record but match no one.
            a.iter()
                .filter_map(|u| u.get("user").and_then(Value::as_str))
                .filter_map(|u| u.parse::<UserId>().ok())
                .collect()
        })
        .unwrap_or_default();
    // Checked above: each parses.
    let text = |field: &str| map.get(field).and_then(Value::as_str);
    let (Some(Ok(id)), Ok(coin)) = (text("id").map(str::parse::<WalletId>), coin.parse::<Coin>()) else {
        return Err(vec![invalid("id", "must be 32 lowercase hex characters, with a coin symbol")]);
    };
    let enterprise = match text("enterprise").map(str::parse::<EnterpriseId>) {
        None => None,
        Some(Ok(e)) => Some(e),
        Some(Err(_)) => return Err(vec![invalid("enterprise", "must be 32 lowercase hex characters")]),
    };
    Ok(WalletRow {
        id,
        coin,
        enterprise,
        deleted: map.get("deleted").and_then(Value::as_bool).unwrap_or(false),
        user_ids,
        record: Value::Object(stored).to_string().into(),
        balances,
    })
}

/// Which optional parts of a record a lookup asked for (query parameters of §2.1).
#[derive(Debug, Clone, Copy, Default)]
pub struct Expand {
    /// `expandBalance=true`: balance, confirmed and spendable, string and number.
    pub balance: bool,
    /// `includeStakingBalances=true`: staking and reward strings.
    pub staking: bool,
    /// `allTokens=true`: the withdraw hold, for ofc wallets only.
    pub all_tokens: bool,
}

/// Appends the requested balances to a stored record's JSON text, without re-parsing it.
/// Numeric twins are written as exact JSON integers of any size (docs/decisions.md).
pub fn render(row: &WalletRow, expand: Expand, out: &mut String) {
    let body = row.record.trim_end();
    let Some(open) = body.strip_suffix('}') else {
        out.push_str(body);
        return;
    };
    out.push_str(open);
    let mut first = open.trim_end() == "{";
    let mut push = |out: &mut String, key: &str, value: &str, quoted: bool| {
        if !first {
            out.push(',');
        }
        first = false;
        out.push('"');
        out.push_str(key);
        out.push_str("\":");
        if quoted {
            out.push('"');
        }
        out.push_str(value);
        if quoted {
            out.push('"');
        }
    };
    for (i, (string_field, number_field)) in BALANCE_FIELDS.iter().enumerate() {
        let wanted = match i {
            0..=2 => expand.balance,
            3 | 4 => expand.staking,
            _ => expand.all_tokens && is_ofc(&row.coin),
        };
        if !wanted {
            continue;
        }
        // Balances the operator never set are reported as zero when asked for.
        let v = row.balances.get(i).unwrap_or("0");
        push(out, string_field, v, true);
        if let Some(n) = number_field {
            push(out, n, v, false);
        }
    }
    out.push('}');
}

#[cfg(test)]
#[path = "wallet_tests.rs"]
mod tests;
