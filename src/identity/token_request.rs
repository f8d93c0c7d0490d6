//! The access token request of spec §4.3, parsed and checked field by field: scopes, lists
//! capped before they are read, spending limits in base units. Parsed here, not in `http/`,
//! because templates store the same fields and are merged into the body before parsing.
//!
//! Layer rule: no web-framework types and nothing of the HTTP layer (docs/architecture.md).

use std::collections::BTreeSet;

use serde::{Deserialize, Serialize};
use serde_json::{json, Map, Value};
use utoipa::ToSchema;

use super::scopes::{parse_scopes, Grant};
use crate::{
    error::{Error, Result},
    types::{AnyId, BaseUnits, Cidr, Coin, EnterpriseId, SecondFactor, WalletId},
};

/// Longest token lifetime and the default `duration`: 10 years, in seconds.
pub const MAX_DURATION: u64 = 315_360_000;

/// Request body of §4.3; every value is checked field by field.
#[derive(Debug, Default, Deserialize, ToSchema, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct CreateAccessTokenRequest {
    /// A list of scope values (or one value as a string).
    #[schema(value_type = Option<Vec<String>>)]
    pub scope: Option<ScopeInput>,
    /// Seconds, 1..=315360000; default 315360000, capped by the creating token's expiry.
    #[schema(value_type = Option<u64>)]
    pub duration: Option<Value>,
    pub label: Option<String>,
    pub otp: Option<String>,
    pub admin: Option<bool>,
    /// IP addresses or CIDR blocks; required in production.
    #[serde(default, deserialize_with = "nullable")]
    #[schema(value_type = Option<Vec<String>>)]
    pub ip_restrict: Option<Option<Vec<String>>>,
    pub enterprise: Option<EnterpriseId>,
    pub spending_limits: Option<Vec<SpendingLimitRequest>>,
    #[schema(pattern = "^[0-9a-f]{32}$")]
    pub access_token_template_id: Option<AnyId>,
    pub permitted_enterprises: Option<Vec<EnterpriseId>>,
    pub permitted_wallets: Option<Vec<WalletId>>,
    /// BitGo's top-level limit, a whole number of base units: the token's
    /// `unlock.txValueLimit` (§2.4). At most the creating token's.
    #[schema(value_type = Option<u64>)]
    pub tx_value_limit: Option<Value>,
}

/// `scope` as a list or a single string.
#[derive(Debug, Deserialize, Serialize)]
#[serde(untagged)]
pub enum ScopeInput {
    Many(Vec<String>),
    One(String),
}

/// Distinguishes an absent field (`None`) from an explicit `null` (`Some(None)`).
pub(super) fn nullable<'de, D, T>(d: D) -> std::result::Result<Option<Option<T>>, D::Error>
where
    D: serde::Deserializer<'de>,
    T: Deserialize<'de>,
{
    Option::<T>::deserialize(d).map(Some)
}

/// An element of `spendingLimits`.
#[derive(Debug, Deserialize, ToSchema, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct SpendingLimitRequest {
    pub coin: Coin,
    pub max_limit: Option<bool>,
    /// Base units: a digit string or a JSON integer, kept lossless.
    #[schema(value_type = String)]
    pub tx_value_limit: Value,
    pub all_erc20_tokens_limit: Option<AllErc20TokensLimit>,
}

/// `allErc20TokensLimit` of a spending limit.
#[derive(Debug, Deserialize, ToSchema, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct AllErc20TokensLimit {
    pub enabled: bool,
    pub max_limit: bool,
    #[schema(value_type = Option<String>)]
    pub tx_value_limit: Option<Value>,
}

pub(super) fn scope_values(s: &ScopeInput) -> Vec<String> {
    match s {
        ScopeInput::Many(v) => v.clone(),
        ScopeInput::One(s) => vec![s.clone()],
    }
}

/// A validated request, ready to become a token.
pub(super) struct Validated {
    pub(super) label: String,
    pub(super) otp: SecondFactor,
    pub(super) grants: Vec<Grant>,
    pub(super) duration: Option<u64>,
    pub(super) admin: bool,
    pub(super) ip_restrict: Option<Vec<Cidr>>,
    pub(super) enterprise: Option<EnterpriseId>,
    pub(super) spending_limits: Option<Value>,
    pub(super) permitted_wallets: Option<Vec<WalletId>>,
    pub(super) permitted_enterprises: Option<Vec<EnterpriseId>>,
    pub(super) tx_value_limit: Option<BaseUnits>,
}

/// Largest lists a token request may carry (docs/decisions.md#brute-force-limits); longer ones are a 400 naming the field.
pub const MAX_SCOPES: usize = 64;
pub const MAX_IP_RESTRICT: usize = 100;
pub const MAX_PERMITTED: usize = 1000;
pub const MAX_SPENDING_LIMITS: usize = 100;

/// Refuses a list longer than `max` before any of it is examined.
pub(super) fn cap(field: &str, len: usize, max: usize) -> Result<()> {
    if len > max {
        return Err(Error::invalid_field(field, format!("at most {max} entries")));
    }
    Ok(())
}

/// The list caps of a token request, checked before anything in the lists is examined; a
/// template's fields are held to the same (`tokens::create_template`).
pub(super) fn caps(req: &CreateAccessTokenRequest) -> Result<()> {
    if let Some(ScopeInput::Many(list)) = &req.scope {
        cap("scope", list.len(), MAX_SCOPES)?;
    }
    if let Some(Some(list)) = &req.ip_restrict {
        cap("ipRestrict", list.len(), MAX_IP_RESTRICT)?;
    }
    if let Some(list) = &req.spending_limits {
        cap("spendingLimits", list.len(), MAX_SPENDING_LIMITS)?;
    }
    let permitted = [
        ("permittedWallets", req.permitted_wallets.as_ref().map(Vec::len)),
        ("permittedEnterprises", req.permitted_enterprises.as_ref().map(Vec::len)),
    ];
    for (field, len) in permitted {
        cap(field, len.unwrap_or(0), MAX_PERMITTED)?;
    }
    Ok(())
}

/// A list of ids (parsed by serde, so each is well formed; capped by [`caps`]), duplicates
/// dropped.
pub(super) fn id_list<T: Ord + Clone>(v: Option<Vec<T>>) -> Option<Vec<T>> {
    let v = v?;
    let mut seen = BTreeSet::new();
    Some(v.into_iter().filter(|id| seen.insert(id.clone())).collect())
}

pub(super) fn base_units(field: &str, v: &Value) -> Result<String> {
    BaseUnits::from_json(v)
        .map(BaseUnits::into_string)
        .ok_or_else(|| Error::invalid_field(field, BaseUnits::EXPECTED))
}

/// `spendingLimits` as stored: `{coin: {txValueLimit, maxLimit?, allErc20TokensLimit?}}` with
/// base-unit strings; `None` for an empty list. Errors name the element's field.
pub(super) fn spending_limits(list: Vec<SpendingLimitRequest>) -> Result<Option<Value>> {
    let mut out = Map::new();
    for (i, l) in list.into_iter().enumerate() {
        let at = |f: &str| format!("spendingLimits[{i}].{f}");
        if out.contains_key(l.coin.as_str()) {
            return Err(Error::invalid_field(at("coin"), "a coin may have only one spending limit"));
        }
        let mut entry = Map::new();
        entry.insert("txValueLimit".into(), json!(base_units(&at("txValueLimit"), &l.tx_value_limit)?));
        if let Some(m) = l.max_limit {
            entry.insert("maxLimit".into(), json!(m));
        }
        if let Some(a) = l.all_erc20_tokens_limit {
            let mut e = json!({ "enabled": a.enabled, "maxLimit": a.max_limit });
            if let Some(v) = &a.tx_value_limit {
                e["txValueLimit"] = json!(base_units(&at("allErc20TokensLimit.txValueLimit"), v)?);
            }
            entry.insert("allErc20TokensLimit".into(), e);
        }
        out.insert(l.coin.into_string(), Value::Object(entry));
    }
    Ok((!out.is_empty()).then_some(Value::Object(out)))
}

pub(super) fn validate(req: CreateAccessTokenRequest) -> Result<Validated> {
    caps(&req)?;
    let label = req.label.map(|l| l.trim().to_string()).unwrap_or_default();
    if label.is_empty() {
        return Err(Error::missing_field("label"));
    }
    if label.chars().count() > 256 {
        return Err(Error::invalid_field("label", "at most 256 characters"));
    }
    let otp = req.otp.as_deref().map(str::trim).filter(|o| !o.is_empty());
    let Some(otp) = otp else { return Err(Error::missing_field("otp")) };
    let otp = SecondFactor::parse(otp)
        .ok_or_else(|| Error::invalid_field("otp", "exactly 6 digits, or a passkey assertion"))?;
    let grants = match &req.scope {
        Some(s) => {
            parse_scopes(&scope_values(s)).map_err(|(i, e)| Error::invalid_field(format!("scope[{i}]"), e))?
        }
        None => Vec::new(),
    };
    let duration = match &req.duration {
        None | Some(Value::Null) => None,
        Some(v) => match crate::types::whole_number(v) {
            Some(d) if (1..=MAX_DURATION).contains(&d) => Some(d),
            _ => {
                return Err(Error::invalid_field(
                    "duration",
                    format!("must be a whole number of seconds from 1 to {MAX_DURATION}"),
                ))
            }
        },
    };
    let ip_restrict = match req.ip_restrict.flatten() {
        None => None,
        Some(list) => {
            let (mut out, mut seen) = (Vec::new(), BTreeSet::new());
            for (i, s) in list.iter().enumerate() {
                let c = Cidr::parse(s).map_err(|e| Error::invalid_field(format!("ipRestrict[{i}]"), e))?;
                if seen.insert(c) {
                    out.push(c);
                }
            }
            (!out.is_empty()).then_some(out)
        }
    };
    let spending_limits = req.spending_limits.map(spending_limits).transpose()?.flatten();
    let tx_value_limit = req
        .tx_value_limit
        .map(|v| {
            BaseUnits::from_json(&v).ok_or_else(|| {
                Error::invalid_field("txValueLimit", "a whole number of base units, at least 0")
            })
        })
        .transpose()?;
    Ok(Validated {
        tx_value_limit,
        label,
        otp,
        grants,
        duration,
        admin: req.admin.unwrap_or(false),
        ip_restrict,
        enterprise: req.enterprise,
        spending_limits,
        permitted_wallets: id_list(req.permitted_wallets),
        permitted_enterprises: id_list(req.permitted_enterprises),
    })
}
