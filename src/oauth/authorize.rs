//! The authorization endpoint's rules (RFC 6749 §4.1.1, PKCE RFC 7636 §4.3): what a request
//! must hold, the user's consent, and the code it gives. Errors about the client or its
//! redirect URI are shown to the user and never redirected (§4.1.2.1: an open redirect
//! otherwise); the others go back to the client's redirect URI with `error` and `state`.

use serde_json::json;
use url::Url;

use super::{hash, new_secret, OAuthError};
use crate::{
    error::Result,
    grant::{Grant, Scope},
    identity::{bearer::Principal, scopes::Policy},
    ids,
    model::{
        audit::AuditType,
        oauth::{AuthorizationCode, OAuthClient, OAuthGrant},
    },
    store::DynStore,
};

/// An authorization request's parameters, as sent.
#[derive(Debug, Clone, Default, serde::Deserialize, serde::Serialize)]
pub struct AuthorizeRequest {
    #[serde(default)]
    pub response_type: String,
    #[serde(default)]
    pub client_id: String,
    #[serde(default)]
    pub redirect_uri: Option<String>,
    #[serde(default)]
    pub scope: Option<String>,
    #[serde(default)]
    pub state: Option<String>,
    #[serde(default)]
    pub code_challenge: Option<String>,
    #[serde(default)]
    pub code_challenge_method: Option<String>,
    #[serde(default)]
    pub nonce: Option<String>,
}

/// A request that passed every check.
#[derive(Debug, Clone)]
pub struct Checked {
    pub client: OAuthClient,
    /// Where the answer goes: the request's `redirect_uri`, or the client's only one.
    pub redirect_uri: String,
    /// Whether the request named it (then the token request must name it too, §4.1.3).
    pub redirect_named: bool,
    pub scopes: Vec<String>,
    pub state: Option<String>,
    pub code_challenge: Option<String>,
    pub nonce: Option<String>,
}

/// Why a request is refused.
#[derive(Debug, Clone)]
pub enum Refused {
    /// Shown to the user: the client or redirect URI cannot be trusted with an answer.
    Here(String),
    /// Sent back to the client's redirect URI.
    Back { redirect_uri: String, error: OAuthError, state: Option<String> },
}

/// The longest `state` and `nonce` taken, characters.
pub const MAX_PARAM: usize = 512;

/// Checks an authorization request against its client. `Err(Here)` for an unknown or
/// disabled client or a redirect URI it did not register; `Err(Back)` for the rest:
/// `unsupported_response_type`, `invalid_request` (PKCE missing, not S256, or malformed),
/// `invalid_scope` (none, or one the client may not ask for).
pub async fn check(
    store: &DynStore,
    req: &AuthorizeRequest,
) -> Result<std::result::Result<Checked, Refused>> {
    let here = |m: &str| Ok(Err(Refused::Here(m.to_string())));
    let client = match req.client_id.parse() {
        Ok(id) => store.oauth_client(&id).await?.filter(|c| !c.disabled),
        Err(_) => None,
    };
    let Some(client) = client else { return here("unknown or disabled client_id") };
    let redirect_uri = match &req.redirect_uri {
        Some(uri) if client.redirect_uris.contains(uri) => uri.clone(),
        Some(_) => return here("redirect_uri is not one the client registered"),
        None if client.redirect_uris.len() == 1 => client.redirect_uris[0].clone(),
        None => return here("redirect_uri is required: the client registered several"),
    };
    let state = req.state.clone().filter(|s| s.len() <= MAX_PARAM);
    let back = |error: OAuthError| {
        Ok(Err(Refused::Back { redirect_uri: redirect_uri.clone(), error, state: state.clone() }))
    };
    if req.response_type != "code" {
        let e = OAuthError {
            error: "unsupported_response_type",
            description: "only response_type=code".into(),
            status: 302,
        };
        return back(e);
    }
    if req.state.as_ref().is_some_and(|s| s.len() > MAX_PARAM)
        || req.nonce.as_ref().is_some_and(|s| s.len() > MAX_PARAM)
    {
        return back(OAuthError::invalid_request(format!("state and nonce: at most {MAX_PARAM} characters")));
    }
    let challenge = match (&req.code_challenge, req.code_challenge_method.as_deref()) {
        (Some(c), Some("S256"))
            if c.len() == 43 && c.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_') =>
        {
            Some(c.clone())
        }
        (Some(_), Some("S256")) => {
            return back(OAuthError::invalid_request("code_challenge: 43 base64url characters"))
        }
        (Some(_), _) => {
            return back(OAuthError::invalid_request("code_challenge_method must be S256 (plain is refused)"))
        }
        (None, _) if client.secret_hash.is_some() && client.pkce_optional => None,
        (None, _) => {
            return back(OAuthError::invalid_request(
                "PKCE is required (code_challenge, S256; RFC 9700 §2.1.1)",
            ))
        }
    };
    let scopes: Vec<String> = req
        .scope
        .as_deref()
        .unwrap_or_default()
        .split(' ')
        .filter(|s| !s.is_empty())
        .map(str::to_string)
        .collect();
    if scopes.is_empty() || scopes.len() > super::clients::MAX_SCOPES {
        return back(OAuthError::invalid_scope("ask for 1 to 64 scope values"));
    }
    if let Some(s) = scopes.iter().find(|s| !client.scopes.contains(s)) {
        return back(OAuthError::invalid_scope(format!("{s} is not a scope this client may ask for")));
    }
    Ok(Ok(Checked {
        client,
        redirect_uri,
        redirect_named: req.redirect_uri.is_some(),
        scopes,
        state: req.state.clone(),
        code_challenge: challenge,
        nonce: req.nonce.clone(),
    }))
}

/// The redirect that answers `checked` with `params` (and its `state`).
pub fn answer(checked_uri: &str, params: &[(&str, &str)], state: Option<&str>) -> String {
    let mut url = match Url::parse(checked_uri) {
        Ok(u) => u,
        Err(_) => return checked_uri.to_string(),
    };
    {
        let mut q = url.query_pairs_mut();
        for (k, v) in params {
            q.append_pair(k, v);
        }
        if let Some(s) = state {
            q.append_pair("state", s);
        }
    }
    url.to_string()
}

/// The scopes of `checked` the user may not grant: those no session of theirs holds
/// (`session`: the signed-in console session's scopes).
pub fn beyond_user(policy: Policy, session: &[Grant], scopes: &[String]) -> Option<String> {
    scopes
        .iter()
        .find(|s| Grant::parse(s).map_or(true, |g| !policy.grant_covers(session, &g, false)))
        .cloned()
}

/// Whether the user already consented to this client for these scopes (a live grant holding
/// them all): then no consent page is shown.
pub async fn remembered(store: &DynStore, auth: &Principal, checked: &Checked) -> Result<bool> {
    let grants = store.oauth_grants(&auth.user.id, 100).await?;
    Ok(grants
        .iter()
        .any(|g| g.client_id == checked.client.id && checked.scopes.iter().all(|s| g.scopes.contains(s))))
}

/// The user approves: a grant and its code (single use, `code_ttl` seconds). Audited as
/// `oauth.consented`. Returns the redirect carrying `code` and `state`, or, for a scope the
/// user may not grant, one carrying `invalid_scope`.
pub async fn approve(
    store: &DynStore,
    policy: Policy,
    code_ttl: u64,
    auth: &Principal,
    checked: &Checked,
) -> Result<String> {
    if let Some(s) = beyond_user(policy, &auth.token.scopes, &checked.scopes) {
        let e = OAuthError::invalid_scope(format!("{s} is beyond what your account may do"));
        return Ok(refusal(checked, &e));
    }
    let now = store.clock().now();
    let new_id =
        || ids::new_id().parse().map_err(|e: &str| crate::error::Error::Internal(anyhow::anyhow!(e)));
    let grant = OAuthGrant {
        id: new_id()?,
        user_id: auth.user.id.clone(),
        client_id: checked.client.id.clone(),
        scopes: checked.scopes.clone(),
        created_at: now,
        last_used_at: None,
        revoked_at: None,
        amr: match auth.token.grant_type {
            crate::model::token::GrantType::Passkey => vec!["hwk".into(), "user".into()],
            _ => vec!["pwd".into(), "otp".into()],
        },
        auth_time: auth.token.created_at,
    };
    let code = new_secret("ac_");
    let record = AuthorizationCode {
        code_hash: hash(&code),
        grant_id: grant.id.clone(),
        redirect_uri: checked.redirect_named.then(|| checked.redirect_uri.clone()),
        code_challenge: checked.code_challenge.clone(),
        nonce: checked.nonce.clone(),
        auth_time: auth.token.created_at,
        expires_at: now + i64::try_from(code_ttl).unwrap_or(60),
        used_at: None,
    };
    let entry = crate::audit::EntryExt::data(
        auth.audit(AuditType::OAuthConsented),
        json!({ "clientId": grant.client_id, "grantId": grant.id, "scopes": grant.scopes }),
    );
    store.add_oauth_grant(&grant, &record, &[entry]).await?;
    Ok(answer(&checked.redirect_uri, &[("code", &code)], checked.state.as_deref()))
}

/// The redirect that carries `e` back to the client.
pub fn refusal(checked: &Checked, e: &OAuthError) -> String {
    answer(
        &checked.redirect_uri,
        &[("error", e.error), ("error_description", &e.description)],
        checked.state.as_deref(),
    )
}

/// The user denies: `access_denied` (§4.1.2.1).
pub fn deny(checked: &Checked) -> String {
    let e =
        OAuthError { error: "access_denied", description: "the user denied the request".into(), status: 302 };
    refusal(checked, &e)
}

/// The scope values with what each permits (§4.3), for the consent page.
pub fn described(scopes: &[String]) -> Vec<(String, &'static str)> {
    scopes
        .iter()
        .map(|s| {
            let name = s.split(':').next().unwrap_or(s);
            let text = name.parse::<Scope>().map(Scope::description).unwrap_or("");
            (s.clone(), text)
        })
        .collect()
}
