//! Access tokens (spec §4.3, §2.4, §5): scoped tokens, templates, and the rule that a token
//! cannot create a token larger than itself (docs/scopes.md). The request is parsed here, not in
//! `http/`, because templates store the same fields and are merged into it before parsing.
//!
//! Layer rule: no web-framework types and nothing of the HTTP layer (docs/architecture.md).

use crate::error::ErrorName;
use crate::model::audit::AuditType;
use std::net::IpAddr;

use serde_json::{json, Map, Value};

use super::{
    bearer::{new_token_value, Principal},
    otp::verify_otp,
    scopes::{parse_scopes, Action, Grant},
    token_request::{scope_values, validate, Validated},
    users::require_membership,
};
use crate::{
    config::Environment,
    error::{parse_value, Error, Result},
    identity::Identity,
    model::{
        audit::AuditEntry,
        token::{TokenKind, TokenRecord, TokenTemplate},
    },
    types::{AnyId, BaseUnits, Cidr, TokenId, UserId},
};

pub use super::token_request::{
    AllErc20TokensLimit, CreateAccessTokenRequest, ScopeInput, SpendingLimitRequest, MAX_DURATION,
    MAX_IP_RESTRICT, MAX_PERMITTED, MAX_SCOPES, MAX_SPENDING_LIMITS,
};

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
    let mut parsed: CreateAccessTokenRequest = parse_value(&fields)?;
    super::token_request::caps(&parsed)?;
    // Addresses, a duration and a label the template gives must be ones a token may have.
    if let Some(d) = parsed.duration.as_ref().filter(|d| !d.is_null()) {
        let max = super::token_request::MAX_DURATION;
        if !crate::types::whole_number(d).is_some_and(|d| (1..=max).contains(&d)) {
            let why = format!("must be a whole number of seconds from 1 to {max}");
            return Err(Error::invalid_field("duration", why));
        }
    }
    if let Some(Some(list)) = &parsed.ip_restrict {
        for (i, cidr) in list.iter().enumerate() {
            crate::types::Cidr::parse(cidr)
                .map_err(|e| Error::invalid_field(format!("ipRestrict[{i}]"), e))?;
        }
    }
    if let Some(label) = &parsed.label {
        if label.trim().is_empty() || label.trim().chars().count() > 256 {
            return Err(Error::invalid_field("label", "1 to 256 characters, not only white space"));
        }
    }
    // Checked as a token request checks them, so a template can never supply a bad limit.
    super::token_request::spending_limits(parsed.spending_limits.take().unwrap_or_default())?;
    if let Some(scope) = &parsed.scope {
        parse_scopes(&scope_values(scope))
            .map_err(|(i, e)| Error::invalid_field(format!("scope[{i}]"), format!("scope[{i}]: {e}")))?;
    }
    let t = TokenTemplate { id: AnyId::new_random(), fields, created_at: store.clock().now() };
    store.insert_template(&t).await?;
    Ok(t)
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
    /// The token as it is handed over when it goes ECDH-encrypted
    /// ([`super::issuance::for_created_token`]); then `value` is not sent.
    pub encrypted: Option<super::issuance::EncryptedToken>,
}

/// Builds the record of the token `value` with the fields every token has: its hash (the
/// lookup key) and its value sealed under the master key (the HMAC key, docs/decisions.md#signed-requests). The
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
    let sealed = svc.key.seal(&super::bearer::token_aad(&id), value.as_bytes())?;
    Ok(TokenRecord {
        id,
        token_hash: super::bearer::hash_token(value),
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
        grant_type: Default::default(),
        derivation_path: None,
        oauth_grant: None,
    })
}

/// The widest `ipRestrict` blocks production accepts without `tokens.allow_wide_ip_restrict`.
pub const MIN_IPV4_PREFIX: u8 = 8;
pub const MIN_IPV6_PREFIX: u8 = 32;

/// Production needs a non-empty `ipRestrict` of blocks no wider than /8 (IPv4) or /32 (IPv6),
/// unless `allow_wide` (docs/decisions.md#brute-force-limits).
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

/// Bounds a child token's lists by its parent's (docs/decisions.md#brute-force-limits): `permittedWallets`,
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
/// is what API tokens are for; one made by another access token never outlives it (docs/decisions.md#token-and-session-lifecycle
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
    let now = svc.store.clock().now();

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
    record.grant_type = parent.grant_type;
    let encrypted = super::issuance::for_created_token(svc, auth, &mut record, &value).await?;
    let notifications =
        crate::notifications::access_token_notifications(&svc.store, &record, svc.config.webhooks.max_held)
            .await?;
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
    Ok(CreatedToken { value, record, encrypted })
}
