//! Access tokens (spec §4.3, §2.4, §5): scoped tokens, templates, and the rule that a token
//! cannot create a token larger than itself (docs/scopes.md). The request is parsed here, not in
//! `http/`, because templates store the same fields and are merged into it before parsing.
//!
//! Layer rule: no web-framework types and nothing of the HTTP layer (docs/architecture.md).

use crate::error::ErrorName;
use crate::store::AuditType;
use std::{collections::BTreeSet, net::IpAddr};

use serde::{Deserialize, Serialize};
use serde_json::{json, Map, Value};
use utoipa::ToSchema;

use super::{
    auth::{new_token_value, Principal},
    otp::verify_otp,
    scopes::{parse_scopes, Action, Grant},
    users::require_membership,
};
use crate::{
    config::Environment,
    error::{parse_value, Error, Result},
    identity::Identity,
    ids,
    store::{AuditEntry, TokenKind, TokenRecord, TokenTemplate},
    types::{AnyId, BaseUnits, Cidr, Coin, EnterpriseId, OtpCode, TokenId, UserId, WalletId},
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
fn nullable<'de, D, T>(d: D) -> std::result::Result<Option<Option<T>>, D::Error>
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

/// The permission carried by tokens of service employees created with `admin: true`.
pub const SERVICE_ADMIN_PERMISSION: &str = "service_admin";

/// Fields a template may supply (all of §4.3 but `otp` and `accessTokenTemplateId`).
pub const TEMPLATE_FIELDS: &[&str] = &[
    "scope",
    "duration",
    "label",
    "admin",
    "ipRestrict",
    "enterprise",
    "spendingLimits",
    "permittedEnterprises",
    "permittedWallets",
];

/// Checks a template's fields (a JSON object of [`TEMPLATE_FIELDS`] with the types of §4.3)
/// and stores it. Errors say which field is wrong.
pub async fn create_template(store: &crate::store::DynStore, fields: Value) -> Result<TokenTemplate> {
    let Value::Object(map) = &fields else {
        return Err(Error::invalid_field("", "a token template must be a JSON object"));
    };
    if let Some(k) = map.keys().find(|k| !TEMPLATE_FIELDS.contains(&k.as_str())) {
        return Err(Error::invalid_field(
            k.clone(),
            format!("field {k:?} cannot be in a template (allowed: {})", TEMPLATE_FIELDS.join(", ")),
        ));
    }
    let parsed: CreateAccessTokenRequest = parse_value(&fields)?;
    if let Some(scope) = &parsed.scope {
        parse_scopes(&scope_values(scope))
            .map_err(|(i, e)| Error::invalid_field(format!("scope[{i}]"), format!("scope[{i}]: {e}")))?;
    }
    let t = TokenTemplate { id: AnyId::new_random(), fields, created_at: ids::now() };
    store.insert_template(&t).await?;
    Ok(t)
}

fn scope_values(s: &ScopeInput) -> Vec<String> {
    match s {
        ScopeInput::Many(v) => v.clone(),
        ScopeInput::One(s) => vec![s.clone()],
    }
}

/// A validated request, ready to become a token.
struct Validated {
    label: String,
    otp: OtpCode,
    grants: Vec<Grant>,
    duration: Option<u64>,
    admin: bool,
    ip_restrict: Option<Vec<Cidr>>,
    enterprise: Option<EnterpriseId>,
    spending_limits: Option<Value>,
    permitted_wallets: Option<Vec<WalletId>>,
    permitted_enterprises: Option<Vec<EnterpriseId>>,
    tx_value_limit: Option<BaseUnits>,
}

/// Largest lists a token request may carry (issue 9 §8); longer ones are a 400 naming the field.
pub const MAX_SCOPES: usize = 64;
pub const MAX_IP_RESTRICT: usize = 100;
pub const MAX_PERMITTED: usize = 1000;
pub const MAX_SPENDING_LIMITS: usize = 100;

/// Refuses a list longer than `max` before any of it is examined.
fn cap(field: &str, len: usize, max: usize) -> Result<()> {
    if len > max {
        return Err(Error::invalid_field(field, format!("at most {max} entries")));
    }
    Ok(())
}

/// A list of ids (parsed by serde, so each is well formed), capped, duplicates dropped.
fn id_list<T: Ord + Clone>(field: &str, v: Option<Vec<T>>) -> Result<Option<Vec<T>>> {
    let Some(v) = v else { return Ok(None) };
    cap(field, v.len(), MAX_PERMITTED)?;
    let mut seen = BTreeSet::new();
    Ok(Some(v.into_iter().filter(|id| seen.insert(id.clone())).collect()))
}

fn base_units(field: &str, v: &Value) -> Result<String> {
    BaseUnits::from_json(v)
        .map(BaseUnits::into_string)
        .ok_or_else(|| Error::invalid_field(field, BaseUnits::EXPECTED))
}

/// `spendingLimits` as stored: `{coin: {txValueLimit, maxLimit?, allErc20TokensLimit?}}` with
/// base-unit strings; `None` for an empty list. Errors name the element's field.
fn spending_limits(list: Vec<SpendingLimitRequest>) -> Result<Option<Value>> {
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

fn validate(req: CreateAccessTokenRequest) -> Result<Validated> {
    let label = req.label.map(|l| l.trim().to_string()).unwrap_or_default();
    if label.is_empty() {
        return Err(Error::missing_field("label"));
    }
    if label.chars().count() > 256 {
        return Err(Error::invalid_field("label", "at most 256 characters"));
    }
    let otp = req.otp.as_deref().map(str::trim).filter(|o| !o.is_empty());
    let Some(otp) = otp else { return Err(Error::missing_field("otp")) };
    let otp = OtpCode::parse(otp).ok_or_else(|| Error::invalid_field("otp", "exactly 6 digits"))?;
    if let Some(ScopeInput::Many(list)) = &req.scope {
        cap("scope", list.len(), MAX_SCOPES)?;
    }
    if let Some(Some(list)) = &req.ip_restrict {
        cap("ipRestrict", list.len(), MAX_IP_RESTRICT)?;
    }
    if let Some(list) = &req.spending_limits {
        cap("spendingLimits", list.len(), MAX_SPENDING_LIMITS)?;
    }
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
        permitted_wallets: id_list("permittedWallets", req.permitted_wallets)?,
        permitted_enterprises: id_list("permittedEnterprises", req.permitted_enterprises)?,
    })
}

/// Fills fields absent from `body` from the template named by `accessTokenTemplateId`.
async fn apply_template(svc: &Identity, body: &mut Value) -> Result<()> {
    let Some(map) = body.as_object_mut() else {
        return Err(Error::Invalid {
            name: ErrorName::InvalidRequestBody,
            message: "the request body must be a JSON object".into(),
            context: json!({}),
        });
    };
    let Some(id) = map.get("accessTokenTemplateId") else { return Ok(()) };
    let field = "accessTokenTemplateId";
    let id: AnyId = id
        .as_str()
        .and_then(|s| s.parse().ok())
        .ok_or_else(|| Error::invalid_field(field, "must be a 32-hex template id"))?;
    let template = svc
        .store
        .template_by_id(&id)
        .await?
        .ok_or_else(|| Error::invalid_field(field, "no such access token template"))?;
    if let Value::Object(fields) = template.fields {
        for (k, v) in fields {
            map.entry(k).or_insert(v);
        }
    }
    Ok(())
}

/// A new access token: its secret value (shown once) and the stored record.
#[derive(Debug)]
pub struct CreatedToken {
    pub value: String,
    pub record: TokenRecord,
}

/// Builds the record of the token `value` with the fields every token has: its hash (the
/// lookup key) and its value sealed under the master key (the HMAC key, issue 20 §1). The
/// caller sets the rest (label, limits, restrictions). Times are Unix seconds; `ip` is the
/// requesting client's address. Errors: `Internal` if sealing fails.
#[allow(clippy::too_many_arguments)]
pub fn new_token_record(
    svc: &Identity,
    value: &str,
    user_id: &UserId,
    kind: TokenKind,
    scopes: Vec<Grant>,
    created_at: i64,
    expires_at: i64,
    ip: IpAddr,
) -> Result<TokenRecord> {
    let id = TokenId::new_random();
    let sealed = svc.key.seal(&super::auth::token_aad(&id), value.as_bytes())?;
    Ok(TokenRecord {
        id,
        token_hash: super::auth::hash_token(value),
        user_id: user_id.clone(),
        kind,
        label: None,
        scopes,
        created_at,
        expires_at,
        revoked_at: None,
        ip: Some(ip.to_string()),
        ip_restrict: None,
        enterprise: None,
        is_extensible: false,
        admin: false,
        spending_limits: None,
        permitted_wallets: None,
        permitted_enterprises: None,
        origin: svc.config.environment.as_str().into(),
        parent_id: None,
        last_used_at: None,
        unlock: None,
        sealed_value: Some(sealed),
        extension_address: None,
        tx_value_limit: None,
    })
}

/// The widest `ipRestrict` blocks production accepts without `tokens.allow_wide_ip_restrict`.
pub const MIN_IPV4_PREFIX: u8 = 8;
pub const MIN_IPV6_PREFIX: u8 = 32;

/// Production needs a non-empty `ipRestrict` of blocks no wider than /8 (IPv4) or /32 (IPv6),
/// unless `allow_wide` (issue 9 §4).
fn check_production_ip_restrict(blocks: Option<&[Cidr]>, allow_wide: bool) -> Result<()> {
    let Some(blocks) = blocks else {
        return Err(Error::invalid_field(
            "ipRestrict",
            "the production environment requires a non-empty ipRestrict",
        ));
    };
    if allow_wide {
        return Ok(());
    }
    for (i, b) in blocks.iter().enumerate() {
        let wide = match b.prefix() {
            (len, true) => len < MIN_IPV4_PREFIX,
            (len, false) => len < MIN_IPV6_PREFIX,
        };
        if wide {
            return Err(Error::invalid_field(
                format!("ipRestrict[{i}]"),
                format!(
                    "blocks wider than /{MIN_IPV4_PREFIX} (IPv4) or /{MIN_IPV6_PREFIX} (IPv6) need tokens.allow_wide_ip_restrict"
                ),
            ));
        }
    }
    Ok(())
}

fn exceeds(field: String, message: String) -> Error {
    Error::Invalid { name: ErrorName::ExceedsCreatingToken, message, context: json!({ "field": field }) }
}

/// A child's permitted list within its parent's: absent, it takes the parent's.
fn within_parent<T: PartialEq + Clone>(
    field: &str,
    parent: &Option<Vec<T>>,
    child: &mut Option<Vec<T>>,
) -> Result<()> {
    let Some(allowed) = parent else { return Ok(()) };
    match child {
        None => *child = Some(allowed.clone()),
        Some(list) => {
            if let Some(i) = list.iter().position(|x| !allowed.contains(x)) {
                return Err(exceeds(
                    format!("{field}[{i}]"),
                    format!("{field}[{i}] is not permitted to the creating token"),
                ));
            }
        }
    }
    Ok(())
}

/// Bounds a child token's lists by its parent's (issue 9 §4): `permittedWallets`,
/// `permittedEnterprises` and `ipRestrict` must lie within the parent's, `spendingLimits` may
/// not exceed the parent's per coin; each absent one (or absent coin) takes the parent's.
/// Errors: `ExceedsCreatingToken` naming the first offending element.
fn bound_by_parent(parent: &TokenRecord, v: &mut Validated) -> Result<()> {
    within_parent("permittedWallets", &parent.permitted_wallets, &mut v.permitted_wallets)?;
    within_parent("permittedEnterprises", &parent.permitted_enterprises, &mut v.permitted_enterprises)?;
    if let Some(parent_blocks) = &parent.ip_restrict {
        match &v.ip_restrict {
            None => v.ip_restrict = Some(parent_blocks.clone()),
            Some(blocks) => {
                for (i, b) in blocks.iter().enumerate() {
                    let inside = parent_blocks.iter().any(|p| p.contains(b));
                    if !inside {
                        return Err(exceeds(
                            format!("ipRestrict[{i}]"),
                            format!("{b} is not within the creating token's ipRestrict"),
                        ));
                    }
                }
            }
        }
    }
    if let Some(max) = &parent.tx_value_limit {
        match &v.tx_value_limit {
            None => v.tx_value_limit = Some(max.clone()),
            Some(limit) if limit > max => {
                return Err(exceeds(
                    "txValueLimit".into(),
                    format!("txValueLimit exceeds the creating token's ({})", max.as_str()),
                ));
            }
            Some(_) => {}
        }
    }
    if let Some(Value::Object(parent_limits)) = &parent.spending_limits {
        let mut limits = match v.spending_limits.take() {
            Some(Value::Object(m)) => m,
            _ => Map::new(),
        };
        for (coin, parent_entry) in parent_limits {
            let Some(child_entry) = limits.get(coin) else {
                limits.insert(coin.clone(), parent_entry.clone());
                continue;
            };
            for path in ["/txValueLimit", "/allErc20TokensLimit/txValueLimit"] {
                let value = |e: &Value| e.pointer(path).and_then(BaseUnits::from_json);
                if let Some(max) = value(parent_entry) {
                    if value(child_entry).is_none_or(|c| c > max) {
                        return Err(exceeds(
                            format!("spendingLimits.{coin}{}", path.replace('/', ".")),
                            format!("the {coin} limit exceeds the creating token's ({})", max.as_str()),
                        ));
                    }
                }
            }
        }
        v.spending_limits = Some(Value::Object(limits));
    }
    Ok(())
}

/// Bounds a validated request by its creator (docs/scopes.md): the enterprise is the parent's
/// (and the user must belong to it), every scope lies within the parent's, the lists lie within
/// the parent's ([`bound_by_parent`]), production's `ipRestrict` rules hold, and only a service
/// employee's admin session makes admin tokens.
async fn bound_by_creator(svc: &Identity, auth: &Principal, v: &mut Validated) -> Result<()> {
    let parent = &auth.token;
    // The child's enterprise: inherited from the parent when absent, never different from it.
    match (&parent.enterprise, &v.enterprise) {
        (Some(p), Some(c)) if p != c => {
            return Err(Error::invalid_field(
                "enterprise",
                "cannot differ from the creating token's enterprise",
            ))
        }
        (Some(p), None) => v.enterprise = Some(p.clone()),
        _ => {}
    }
    if let Some(e) = &v.enterprise {
        require_membership(&svc.store, &auth.user.id, e, "enterprise").await?;
    }
    let policy = svc.policy;
    let same_enterprise = v.enterprise.is_some() && v.enterprise == parent.enterprise;
    for (i, g) in v.grants.iter().enumerate() {
        if !policy.grant_covers(&parent.scopes, g, same_enterprise) {
            return Err(exceeds(
                format!("scope[{i}]"),
                format!("scope {:?} is not within the creating token's scopes", g.to_scope_string()),
            ));
        }
    }
    bound_by_parent(parent, v)?;
    if svc.config.environment == Environment::Production {
        check_production_ip_restrict(v.ip_restrict.as_deref(), svc.config.tokens.allow_wide_ip_restrict)?;
    }
    if v.admin && !(parent.admin && auth.user.service_admin) {
        return Err(Error::invalid_field(
            "admin",
            "only a service employee's admin session may create admin tokens",
        ));
    }
    Ok(())
}

/// The child's lifetime in seconds: `requested`, or the longest allowed. A token made from an
/// interactive login (password and OTP, then the OTP again here) may live up to 10 years, which
/// is what API tokens are for; one made by another access token never outlives it (issue 10
/// §1). Errors: `ExceedsCreatingToken` naming `duration`.
fn lifetime(parent: &TokenRecord, requested: Option<u64>, now: i64) -> Result<u64> {
    let remaining = if parent.kind == TokenKind::Session {
        MAX_DURATION
    } else {
        u64::try_from(parent.expires_at.saturating_sub(now)).unwrap_or(0)
    };
    match requested {
        Some(d) if d > remaining => Err(Error::Invalid {
            name: ErrorName::ExceedsCreatingToken,
            message: format!(
                "duration may not exceed the creating token's remaining lifetime ({remaining} s)"
            ),
            context: json!({ "field": "duration", "maxDuration": remaining }),
        }),
        Some(d) => Ok(d),
        None => Ok(MAX_DURATION.min(remaining)),
    }
}

/// Creates an access token for the principal's user from a §4.3 request body (a JSON object;
/// `accessTokenTemplateId` fills absent fields from a template). Needs a correct OTP of that
/// user, checked last so a bad request does not use it up. The new token cannot exceed the
/// creating one (scopes, permitted lists, enterprise, expiry, admin). Errors: `Invalid` naming
/// the field, `ExceedsCreatingToken`, `Forbidden`, `LoginFailed` (`InvalidOtp`).
pub async fn create_access_token(svc: &Identity, auth: &Principal, mut body: Value) -> Result<CreatedToken> {
    auth.require(svc.policy, Action::CreateAccessToken)?;
    apply_template(svc, &mut body).await?;
    let req: CreateAccessTokenRequest = parse_value(&body)?;
    let mut v = validate(req)?;
    let parent = &auth.token;
    let now = ids::now();

    bound_by_creator(svc, auth, &mut v).await?;
    let duration = lifetime(parent, v.duration, now)?;

    // Everything is valid: only now spend the one-time password.
    if !verify_otp(svc, &auth.user, &v.otp, auth.client_ip).await? {
        return Err(Error::LoginFailed {
            name: ErrorName::InvalidOtp,
            message: "a valid one-time password is required".into(),
            needs_otp: true,
        });
    }
    let value = new_token_value();
    let scopes = v.grants.clone();
    let mut record = new_token_record(
        svc,
        &value,
        &auth.user.id,
        TokenKind::Access,
        scopes,
        now,
        now + i64::try_from(duration).unwrap_or(0),
        auth.client_ip,
    )?;
    record.label = Some(v.label);
    record.ip_restrict = v.ip_restrict;
    record.enterprise = v.enterprise;
    record.admin = v.admin;
    record.spending_limits = v.spending_limits;
    record.tx_value_limit = v.tx_value_limit;
    record.permitted_wallets = v.permitted_wallets;
    record.permitted_enterprises = v.permitted_enterprises;
    record.parent_id = Some(parent.id.clone());
    let notifications =
        crate::outbox::access_token_notifications(&svc.store, &record, svc.config.webhooks.max_held).await?;
    let entry = crate::audit::EntryExt::data(
        auth.audit(AuditType::TokenCreated),
        serde_json::json!({
            "id": record.id, "label": record.label, "admin": record.admin,
            "scope": record.scopes.iter().map(|g| g.to_scope_string()).collect::<Vec<_>>(),
        }),
    );
    let entry = AuditEntry { enterprise_id: record.enterprise.clone(), ..entry };
    svc.store.insert_token(&record, &notifications, &[entry]).await?;
    if !notifications.is_empty() {
        svc.dispatch.wake();
    }
    Ok(CreatedToken { value, record })
}
