//! Single sign-on (docs/sso.md): OpenID Connect's authorization code flow with PKCE, `state`
//! and `nonce` (OpenID Connect Core 1.0 §3.1), against the identity provider an enterprise set
//! ([`super::sso_settings`]), through the `openidconnect` crate. [`start`] sends the browser to
//! the provider; [`finish`] takes the `state` back once, checks the `id_token` (signature by the
//! provider's keys, read afresh each time so rotated keys are followed; `iss`, `aud`, `exp`,
//! `nonce`), reads the groups from userinfo when a role mapping is set, finds the user by
//! (`iss`, `sub`) and gives a session with `grant_type: "oauth"`.

use openidconnect::{
    core::{CoreAuthenticationFlow, CoreGenderClaim},
    AuthorizationCode, CsrfToken, Nonce, OAuth2TokenResponse, PkceCodeChallenge, PkceCodeVerifier, Scope,
    TokenResponse, UserInfoClaims,
};
use serde::Deserialize;
use serde_json::{json, Value};

pub use super::sso_client::Providers;
use super::sso_client::{failed, Extra};
use super::{login::Session, sso_settings, Identity};
use crate::audit::EntryExt;
use crate::{
    digest::sha256_hex,
    error::{Error, ErrorName, Result},
    model::{audit::AuditType, token::GrantType},
    store::{SsoLoginRow, SsoSettingRow},
    types::EnterpriseId,
};

fn refused(name: ErrorName, why: &str) -> Error {
    Error::Forbidden { name, message: why.to_string(), context: json!({}) }
}

/// A sign-in sent to the provider: where the browser goes, and the cookie value that binds the
/// return to this browser.
#[derive(Debug, Clone)]
pub struct Started {
    pub redirect: String,
    pub browser: String,
}

/// The enterprise whose provider signs in `who`: an enterprise id, or the email of a member of
/// an enterprise with a provider (the first such, by name). The same error either way, so the
/// answer does not tell which emails have accounts.
async fn enterprise_for(svc: &Identity, who: &str) -> Result<(EnterpriseId, SsoSettingRow)> {
    let none = || Error::NotFound {
        name: ErrorName::SsoNotConfigured,
        message: "no single sign-on is set up for this email or enterprise".into(),
    };
    let candidates: Vec<EnterpriseId> = match who.trim().parse::<EnterpriseId>() {
        Ok(e) => vec![e],
        Err(_) => {
            let email = crate::types::Email::parse(who).map_err(|e| Error::invalid_field("email", e))?;
            match svc.store.user_by_email(&email).await? {
                Some(u) => svc.store.memberships(&u.id).await?.into_iter().map(|m| m.enterprise.id).collect(),
                None => Vec::new(),
            }
        }
    };
    for e in candidates {
        if let Some(row) = svc.store.sso_setting(&e).await? {
            return Ok((e, row));
        }
    }
    Err(none())
}

/// Starts a sign-in for `who` (an email or an enterprise id), the browser to come back to
/// `redirect_uri` and then the console's `next`. With `link`, the signed-in session of a member
/// of enterprise `who` asks to link their account to the person the provider will name
/// (docs/sso.md#linking: how an administrator's account is linked). Errors:
/// `SsoNotConfigured` (404), `TooManyRequests` when `sso.max_pending` sign-ins wait or the
/// client `ip` started `sso.max_starts_per_client` unfinished ones, `SsoFailed` (401, audited
/// as `login.failed`) when the provider cannot be discovered.
pub async fn start(
    svc: &Identity,
    who: &str,
    next: &str,
    redirect_uri: &str,
    link: Option<&super::bearer::Principal>,
    ip: std::net::IpAddr,
) -> Result<Started> {
    let (enterprise, row) = enterprise_for(svc, who).await?;
    if let Some(auth) = link {
        let member =
            svc.store.memberships(&auth.user.id).await?.iter().any(|m| m.enterprise.id == enterprise);
        if !member || who.trim().parse::<EnterpriseId>().is_err() {
            return Err(Error::not_found(ErrorName::SsoNotConfigured));
        }
    }
    let now = svc.store.clock().now();
    let client_key = super::throttle::client_key(ip);
    super::throttle::begin_sso(svc, enterprise.as_str(), &client_key, now).await?;
    let client = match svc.sso.client(svc, &row, redirect_uri).await {
        Ok(c) => c,
        Err(e) => {
            audit_refusal(svc, &e, Some(enterprise), ip).await;
            return Err(e);
        }
    };
    let setting = sso_settings::settings_of(&row)?;
    let (challenge, verifier) = PkceCodeChallenge::new_random_sha256();
    let mut request = client.authorize_url(
        CoreAuthenticationFlow::AuthorizationCode,
        CsrfToken::new_random,
        Nonce::new_random,
    );
    let scopes = match setting.scopes.is_empty() {
        true => vec!["email".to_string(), "profile".to_string()],
        false => setting.scopes.clone(),
    };
    for s in scopes {
        request = request.add_scope(Scope::new(s));
    }
    let (url, state, nonce) = request.set_pkce_challenge(challenge).url();
    let browser = super::bearer::new_token_value();
    let state_hash = sha256_hex(state.secret().as_bytes());
    let sealed = svc.key.seal(&format!("sso-verifier:{state_hash}"), verifier.secret().as_bytes())?;
    let login = SsoLoginRow {
        state_hash,
        enterprise_id: enterprise,
        browser_hash: sha256_hex(browser.as_bytes()),
        nonce: nonce.secret().clone(),
        verifier: hex::encode(sealed),
        next: next.chars().take(2048).collect(),
        link_user: link.map(|a| a.user.id.clone()),
        expires_at: now + i64::try_from(svc.config.sso.login_ttl).unwrap_or(600),
    };
    if !svc.store.keep_sso_login(&login, svc.config.sso.max_pending, now).await? {
        return Err(Error::Throttled {
            name: ErrorName::TooManyRequests,
            message: "too many single sign-ons are under way; try again shortly".into(),
            retry_after_secs: 10,
        });
    }
    Ok(Started { redirect: url.to_string(), browser })
}

/// A finished sign-in: the session, the console's `next`, and, for an account just made by
/// provisioning, its TOTP seed, shown this once (docs/sso.md#linking): the person needs its
/// codes to make access tokens or add a passkey.
#[derive(Debug)]
pub struct Finished {
    pub session: Session,
    pub next: String,
    pub new_totp: Option<super::users::CreatedUser>,
}

/// What the provider sent the browser back with.
#[derive(Debug, Clone, Default, Deserialize)]
pub struct Callback {
    #[serde(default)]
    pub state: String,
    pub code: Option<String>,
    pub error: Option<String>,
    pub error_description: Option<String>,
}

/// Finishes a sign-in: the session and the console's `next`. `browser` is the cookie
/// [`start`] set. Every refusal is audited as `login.failed` (`reason` `sso`, and why). Errors:
/// `SsoFailed` (401: an unknown, used or expired `state`, another browser, the provider's
/// error, a token that does not verify), `SsoNotLinked` (403: no account for this person, and
/// none that may be linked by email), `SsoNoRole` (403: no group the mapping knows).
pub async fn finish(
    svc: &Identity,
    cb: &Callback,
    browser: Option<&str>,
    redirect_uri: &str,
    ip: std::net::IpAddr,
) -> Result<Finished> {
    let taken = svc.store.take_sso_login(&sha256_hex(cb.state.as_bytes())).await?;
    let enterprise = taken.as_ref().map(|t| t.enterprise_id.clone());
    let result = match taken {
        Some(login) => finish_login(svc, cb, login, browser, redirect_uri, ip).await,
        None => Err(failed("this sign-in is unknown, used already or expired; start again")),
    };
    match &result {
        Err(e) => audit_refusal(svc, e, enterprise, ip).await,
        Ok(_) => {
            let (e, client) =
                (enterprise.as_ref().map(EnterpriseId::as_str), super::throttle::client_key(ip));
            let now = svc.store.clock().now();
            super::throttle::sso_finished(svc, e.unwrap_or_default(), &client, now).await?;
        }
    }
    result
}

/// A refused sign-in, audited as `login.failed` (`reason` `sso`, and why).
async fn audit_refusal(svc: &Identity, e: &Error, enterprise: Option<EnterpriseId>, ip: std::net::IpAddr) {
    let mut entry = crate::audit::entry(AuditType::LoginFailed)
        .data(json!({ "reason": "sso", "grantType": "oauth", "error": e.to_string() }));
    entry.ip = Some(ip.to_string());
    entry.enterprise_id = enterprise;
    crate::audit::record(&svc.store, &[entry]).await;
}

async fn finish_login(
    svc: &Identity,
    cb: &Callback,
    login: SsoLoginRow,
    browser: Option<&str>,
    redirect_uri: &str,
    ip: std::net::IpAddr,
) -> Result<Finished> {
    let now = svc.store.clock().now();
    if login.expires_at <= now {
        return Err(failed("this sign-in expired; start again"));
    }
    if browser.map(|b| sha256_hex(b.as_bytes())) != Some(login.browser_hash.clone()) {
        return Err(failed("this sign-in was started in another browser"));
    }
    if let Some(error) = &cb.error {
        let said = cb.error_description.as_deref().unwrap_or_default();
        return Err(failed(&crate::text::clip(format!("the provider answered {error}: {said}"), 300)));
    }
    let code = cb.code.clone().ok_or_else(|| failed("the provider sent no code"))?;
    let row = svc
        .store
        .sso_setting(&login.enterprise_id)
        .await?
        .ok_or_else(|| failed("the enterprise's provider was removed"))?;
    let client = svc.sso.client(svc, &row, redirect_uri).await?;
    let sealed = hex::decode(&login.verifier).map_err(|e| Error::Internal(e.into()))?;
    let verifier = svc.key.open(&format!("sso-verifier:{}", login.state_hash), &sealed)?;
    let verifier = PkceCodeVerifier::new(String::from_utf8(verifier).map_err(|e| Error::Internal(e.into()))?);
    let exchange = client.exchange_code(AuthorizationCode::new(code)).map_err(|e| failed(&e.to_string()))?;
    let tokens =
        svc.sso.bounded("token", exchange.set_pkce_verifier(verifier).request_async(&svc.sso.http)).await?;
    let id_token = tokens.id_token().ok_or_else(|| failed("the provider sent no id_token"))?;
    // `exp` and `iat` are judged by the service's clock (tests move it).
    let clock = svc.store.clock();
    let verifier = client.id_token_verifier().set_time_fn(|| {
        chrono::DateTime::from_timestamp_millis(clock.now_ms()).unwrap_or_else(chrono::Utc::now)
    });
    let claims = id_token
        .claims(&verifier, &Nonce::new(login.nonce.clone()))
        .map_err(|e| failed(&format!("the id_token does not verify: {e}")))?;
    // The session starts now, after the provider issued the id_token: its life is measured
    // from here to the token's `exp`, never past it.
    let now = svc.store.clock().now();
    let mut person = Person {
        issuer: claims.issuer().as_str().to_string(),
        subject: claims.subject().as_str().to_string(),
        email: claims.email().map(|e| e.as_str().to_lowercase()),
        email_verified: claims.email_verified() == Some(true),
        expires: claims.expiration().timestamp(),
    };
    let setting = sso_settings::settings_of(&row)?;
    let access = tokens.access_token().clone();
    let role = from_userinfo(svc, &client, access, claims.subject().clone(), &setting, &mut person).await?;
    let (user, new_totp) = match &login.link_user {
        Some(asker) => (link_asker(svc, &login.enterprise_id, &person, asker, now).await?, None),
        None => linked_user(svc, &login.enterprise_id, &person, setting.provisioning, now).await?,
    };
    let user = member_with_role(svc, &login.enterprise_id, user, role).await?;
    let ttl = match svc.config.sso.session_ttl {
        0 => person.expires.saturating_sub(now).max(1),
        ttl => i64::try_from(ttl).unwrap_or(i64::MAX),
    };
    svc.store.set_last_login(&user.id, now, &[]).await?;
    let options =
        super::login::SessionOptions { grant_type: GrantType::Oauth, ttl: Some(ttl), ..Default::default() };
    let session = super::login::issue_session(svc, user, ip, now, options).await?;
    Ok(Finished { session, next: login.next, new_totp })
}

/// userinfo (OpenID Connect Core §5.3; its `sub` checked against the id_token's by
/// openidconnect), read for the groups when a mapping is set and for the email when the
/// id_token has none: fills `person`'s email in, and gives the mapped role (`Some(admin)`).
async fn from_userinfo(
    svc: &Identity,
    client: &super::sso_client::Client,
    access: openidconnect::AccessToken,
    subject: openidconnect::SubjectIdentifier,
    setting: &sso_settings::OAuthSetting,
    person: &mut Person,
) -> Result<Option<bool>> {
    if setting.groups_claim.is_none() && person.email.is_some() {
        return Ok(None);
    }
    let request = client.user_info(access, Some(subject)).map_err(|e| failed(&e.to_string()))?;
    let info: UserInfoClaims<Extra, CoreGenderClaim> =
        svc.sso.bounded("userinfo", request.request_async(&svc.sso.http)).await?;
    if person.email.is_none() {
        person.email = info.email().map(|e| e.as_str().to_lowercase());
        person.email_verified = info.email_verified() == Some(true);
    }
    match &setting.groups_claim {
        Some(claim) => Ok(Some(mapped_role(&setting.group_roles, info.additional_claims().rest.get(claim))?)),
        None => Ok(None),
    }
}

/// The person the provider vouched for.
struct Person {
    issuer: String,
    subject: String,
    email: Option<String>,
    email_verified: bool,
    /// The id_token's `exp`, Unix seconds.
    expires: i64,
}

/// `admin` when any value of `claim` maps to it, else `member` when any maps to that. Errors:
/// `SsoNoRole` when none does.
fn mapped_role(roles: &std::collections::BTreeMap<String, String>, claim: Option<&Value>) -> Result<bool> {
    let values: Vec<&str> = match claim {
        Some(Value::Array(items)) => items.iter().filter_map(Value::as_str).collect(),
        Some(Value::String(s)) => vec![s.as_str()],
        _ => Vec::new(),
    };
    let mapped: Vec<&str> = values.iter().filter_map(|v| roles.get(*v).map(String::as_str)).collect();
    match (mapped.contains(&"admin"), mapped.contains(&"member")) {
        (true, _) => Ok(true),
        (false, true) => Ok(false),
        _ => Err(refused(
            ErrorName::SsoNoRole,
            "none of your groups at the identity provider gives a role here; ask your administrator",
        )),
    }
}

/// The user (`iss`, `sub`) is linked to; on a first sign-in, the account of the same email when
/// it may be linked (docs/sso.md#linking): the provider verified the email, the account is an
/// active member of the enterprise, and neither a service admin nor an admin of the
/// enterprise. With `provisioning`, a verified email no account has makes one. Errors:
/// `SsoNotLinked`.
async fn linked_user(
    svc: &Identity,
    enterprise: &EnterpriseId,
    p: &Person,
    provisioning: bool,
    now: i64,
) -> Result<(crate::store::User, Option<super::users::CreatedUser>)> {
    let not_linked =
        |why: &str| refused(ErrorName::SsoNotLinked, &format!("no account here is linked to you: {why}"));
    if let Some((user, linked_to)) = svc.store.sso_identity(&p.issuer, &p.subject).await? {
        if &linked_to != enterprise {
            return Err(not_linked("you are linked through another enterprise's provider"));
        }
        let found = svc.store.user_by_id(&user).await?.ok_or_else(|| not_linked("the account is gone"))?;
        return Ok(((*found).clone(), None));
    }
    let email = p.email.as_deref().ok_or_else(|| not_linked("the provider gave no email"))?;
    if !p.email_verified {
        return Err(not_linked("the provider has not verified your email"));
    }
    let email =
        crate::types::Email::parse(email).map_err(|_| not_linked("the provider's email is not an email"))?;
    let user = match svc.store.user_by_email(&email).await? {
        Some(user) => user,
        None if provisioning => {
            let (user, made) = provision(svc, enterprise, p, &email, now).await?;
            return Ok((user, Some(made)));
        }
        None => return Err(not_linked("no account has your email")),
    };
    let membership =
        svc.store.memberships(&user.id).await?.into_iter().find(|m| &m.enterprise.id == enterprise);
    match membership {
        None => return Err(not_linked("the account of your email is not a member of the enterprise")),
        Some(m) if m.is_admin || user.service_admin => {
            return Err(not_linked("an administrator's account is linked from a signed-in session only"))
        }
        Some(_) => {}
    }
    link(svc, enterprise, p, &user.id, "verified email", now).await?;
    Ok((user, None))
}

/// Makes an account for a person with a verified `email` no account has, a member of
/// `enterprise` only, with a password nobody knows, linked to them. Audited as `user.created`
/// (`by: "sso"`), `enterprise.member_set` and `sso.identity_linked` (`by: "provisioning"`).
async fn provision(
    svc: &Identity,
    enterprise: &EnterpriseId,
    p: &Person,
    email: &crate::types::Email,
    now: i64,
) -> Result<(crate::store::User, super::users::CreatedUser)> {
    let unknown = super::bearer::new_token_value();
    let made =
        super::users::create_user_by(&svc.store, &svc.key, email.as_str(), None, &unknown, false, "sso");
    let made = made.await?;
    let id = made.id.clone();
    let mut member = crate::audit::entry(AuditType::EnterpriseMemberSet)
        .data(json!({ "admin": false, "by": "sso provisioning" }));
    (member.user_id, member.enterprise_id) = (Some(id.clone()), Some(enterprise.clone()));
    svc.store.upsert_membership(enterprise, &id, false, &[member]).await?;
    link(svc, enterprise, p, &id, "provisioning", now).await?;
    let user = svc.store.user_by_id(&id).await?.ok_or_else(|| failed("the new account is gone"))?;
    Ok(((*user).clone(), made))
}

/// Links the person to `user`, an active member of `enterprise` (docs/sso.md#linking), with its
/// audit entry saying `by` which way. Errors: `SsoNotLinked` for an account deactivated or not
/// a member; `SsoFailed` when another sign-in linked them first.
async fn link(
    svc: &Identity,
    enterprise: &EnterpriseId,
    p: &Person,
    user: &crate::types::UserId,
    by: &str,
    now: i64,
) -> Result<()> {
    let active = svc.store.user_by_id(user).await?.is_some_and(|u| u.is_active);
    let member = svc.store.memberships(user).await?.iter().any(|m| &m.enterprise.id == enterprise);
    if !active || !member {
        return Err(refused(
            ErrorName::SsoNotLinked,
            "the account is deactivated or not a member of the enterprise: nothing is linked",
        ));
    }
    let mut entry = crate::audit::entry(AuditType::SsoIdentityLinked)
        .data(json!({ "issuer": p.issuer, "subject": p.subject, "by": by }));
    (entry.user_id, entry.enterprise_id) = (Some(user.clone()), Some(enterprise.clone()));
    match svc.store.link_sso_identity(&p.issuer, &p.subject, user, enterprise, now, &[entry]).await? {
        true => Ok(()),
        false => Err(failed("another sign-in linked you at the same moment; sign in again")),
    }
}

/// Links the person to `asker`, whose signed-in session started this sign-in: any account of
/// the enterprise, administrators' included, as both sides proved who they are. Errors:
/// `SsoNotLinked` when the person is linked to another account already.
async fn link_asker(
    svc: &Identity,
    enterprise: &EnterpriseId,
    p: &Person,
    asker: &crate::types::UserId,
    now: i64,
) -> Result<crate::store::User> {
    let user = svc.store.user_by_id(asker).await?.ok_or_else(|| failed("the account that asked is gone"))?;
    match svc.store.sso_identity(&p.issuer, &p.subject).await? {
        Some((linked, _)) if &linked == asker => return Ok((*user).clone()),
        Some(_) => {
            return Err(refused(
                ErrorName::SsoNotLinked,
                "this person at the provider is linked to another account",
            ))
        }
        None => {}
    }
    link(svc, enterprise, p, asker, "signed-in session", now).await?;
    Ok((*user).clone())
}

/// `user`, an active member of `enterprise`, with the mapped role applied (`Some(admin)`):
/// audited as `enterprise.member_set` when it changes. Errors: `SsoNotLinked` for a deactivated
/// account or one no longer a member.
async fn member_with_role(
    svc: &Identity,
    enterprise: &EnterpriseId,
    user: crate::store::User,
    role: Option<bool>,
) -> Result<crate::store::User> {
    if !user.is_active {
        return Err(refused(ErrorName::SsoNotLinked, "your account here is deactivated"));
    }
    let ms = svc.store.memberships(&user.id).await?;
    let Some(m) = ms.iter().find(|m| &m.enterprise.id == enterprise) else {
        return Err(refused(ErrorName::SsoNotLinked, "your account is no longer a member of the enterprise"));
    };
    if let Some(admin) = role.filter(|a| *a != m.is_admin) {
        let mut entry = crate::audit::entry(AuditType::EnterpriseMemberSet)
            .data(json!({ "admin": admin, "by": "sso group mapping" }));
        entry.user_id = Some(user.id.clone());
        entry.enterprise_id = Some(enterprise.clone());
        svc.store.upsert_membership(enterprise, &user.id, admin, &[entry]).await?;
    }
    Ok(user)
}
