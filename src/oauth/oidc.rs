//! OpenID Connect for the `openid` scope (OIDC Core 1.0, Discovery 1.0): id_tokens signed
//! with jsonwebtoken (ES256 by default, RS256 for a client that asks), the keys sealed under
//! the master key and published as a JWKS, the userinfo claims, and the discovery document.
//!
//! Claims: `iss`, `sub` (the user id), `aud` (the client id), `exp`, `iat`, `auth_time`,
//! `nonce` (from the authorization request), `amr`; `email` and `name` with `profile`;
//! `enterprises` (ids and names) with `openid_enterprises` (docs/decisions.md#openid-connect).

use jsonwebtoken::{Algorithm, EncodingKey, Header};
use serde_json::{json, Value};

use crate::{
    audit::{self, EntryExt},
    error::{Error, Result},
    identity::Identity,
    ids,
    master_key::MasterKey,
    model::{
        audit::AuditType,
        oauth::{OAuthClient, OAuthGrant, OidcKey},
    },
    store::{DynStore, User},
};

fn internal(e: impl std::fmt::Display) -> Error {
    Error::Internal(anyhow::anyhow!("oidc: {e}"))
}

fn aad(kid: &str) -> String {
    format!("oidc:{kid}")
}

/// A new key of `alg` (`ES256`: P-256, `RS256`: RSA 2048): its private DER (PKCS#8, PKCS#1) and
/// public JWK.
fn generate(alg: &str, kid: &str) -> Result<(Vec<u8>, Value)> {
    use base64::{engine::general_purpose::URL_SAFE_NO_PAD as B64URL, Engine};
    let mut rng = rand::rngs::OsRng;
    match alg {
        "ES256" => {
            use p256::pkcs8::EncodePrivateKey;
            let key = p256::ecdsa::SigningKey::random(&mut rng);
            let der = key.to_pkcs8_der().map_err(internal)?.as_bytes().to_vec();
            let point = key.verifying_key().to_encoded_point(false);
            let (x, y) = (point.x().ok_or_else(|| internal("x"))?, point.y().ok_or_else(|| internal("y"))?);
            let jwk = json!({ "kty": "EC", "crv": "P-256", "x": B64URL.encode(x), "y": B64URL.encode(y),
                "use": "sig", "alg": "ES256", "kid": kid });
            Ok((der, jwk))
        }
        "RS256" => {
            use rsa::{pkcs1::EncodeRsaPrivateKey, traits::PublicKeyParts};
            let key = rsa::RsaPrivateKey::new(&mut rng, 2048).map_err(internal)?;
            let der = key.to_pkcs1_der().map_err(internal)?.as_bytes().to_vec();
            let jwk = json!({ "kty": "RSA", "n": B64URL.encode(key.n().to_bytes_be()),
                "e": B64URL.encode(key.e().to_bytes_be()), "use": "sig", "alg": "RS256", "kid": kid });
            Ok((der, jwk))
        }
        other => Err(internal(format!("no such algorithm {other}"))),
    }
}

/// Adds a new signing key of `alg`; with `rotate`, the current one is retired (it stays in the
/// JWKS until the id_tokens it signed have expired). Audited as `oidc.key_added`. RSA keys take
/// a moment to make: the work runs off the async workers.
pub async fn add_key(store: &DynStore, key: &MasterKey, alg: &str, rotate: bool) -> Result<OidcKey> {
    let kid = ids::new_id();
    let (alg_owned, kid_owned) = (alg.to_string(), kid.clone());
    let (der, jwk) =
        tokio::task::spawn_blocking(move || generate(&alg_owned, &kid_owned)).await.map_err(internal)??;
    let k = OidcKey {
        sealed: hex::encode(key.seal(&aad(&kid), &der)?),
        kid,
        alg: alg.to_string(),
        public_jwk: jwk.to_string(),
        created_at: store.clock().now(),
        retired_at: None,
    };
    let entry =
        audit::entry(AuditType::OidcKeyAdded).data(json!({ "kid": k.kid, "alg": k.alg, "rotation": rotate }));
    store.add_oidc_key(&k, rotate, &[entry]).await?;
    Ok(k)
}

/// The current signing key of `alg`, made the first time one is needed.
async fn current_key(svc: &Identity, alg: &str) -> Result<OidcKey> {
    let keys = svc.store.oidc_keys().await?;
    match keys.into_iter().rev().find(|k| k.alg == alg && k.retired_at.is_none()) {
        Some(k) => Ok(k),
        None => add_key(&svc.store, &svc.key, alg, false).await,
    }
}

/// The published keys (RFC 7517 JWK Set): current ones, and retired ones still within
/// `oauth.access_token_ttl` of their retirement.
pub async fn jwks(svc: &Identity) -> Result<Value> {
    let ttl = i64::try_from(svc.config.oauth.access_token_ttl).unwrap_or(3600);
    let now = svc.store.clock().now();
    let keys: Vec<Value> = svc
        .store
        .oidc_keys()
        .await?
        .into_iter()
        .filter(|k| k.retired_at.is_none_or(|r| r + ttl > now))
        .filter_map(|k| serde_json::from_str(&k.public_jwk).ok())
        .collect();
    Ok(json!({ "keys": keys }))
}

/// The identity claims of `user` that `scopes` release (userinfo's and the id_token's).
pub async fn user_claims(store: &DynStore, user: &User, scopes: &[String]) -> Result<Value> {
    let mut claims = json!({ "sub": user.id });
    if scopes.iter().any(|s| s == "profile" || s == "all") {
        claims["email"] = json!(user.email);
        claims["email_verified"] = json!(true);
        let name = format!("{} {}", user.name_first, user.name_last).trim().to_string();
        claims["name"] = json!(name);
    }
    if scopes.iter().any(|s| s == "openid_enterprises") {
        let list: Vec<Value> = store
            .memberships(&user.id)
            .await?
            .iter()
            .map(|m| json!({ "id": m.enterprise.id, "name": m.enterprise.name }))
            .collect();
        claims["enterprises"] = json!(list);
    }
    Ok(claims)
}

/// The id_token of `grant` for `client` (OIDC Core §2), signed with the client's algorithm.
pub async fn id_token(
    svc: &Identity,
    issuer: &str,
    client: &OAuthClient,
    grant: &OAuthGrant,
    user: &User,
    nonce: Option<&str>,
) -> Result<String> {
    let key = current_key(svc, &client.id_token_alg).await?;
    let der = svc.key.open(&aad(&key.kid), &hex::decode(&key.sealed).map_err(internal)?)?;
    let now = svc.store.clock().now();
    let ttl = i64::try_from(svc.config.oauth.access_token_ttl).unwrap_or(3600);
    let mut claims = user_claims(&svc.store, user, &grant.scopes).await?;
    claims["iss"] = json!(issuer);
    claims["aud"] = json!(client.id);
    claims["iat"] = json!(now);
    claims["exp"] = json!(now + ttl);
    claims["auth_time"] = json!(grant.auth_time);
    claims["amr"] = json!(grant.amr);
    if let Some(n) = nonce {
        claims["nonce"] = json!(n);
    }
    let (alg, encoding) = match key.alg.as_str() {
        "RS256" => (Algorithm::RS256, EncodingKey::from_rsa_der(&der)),
        _ => (Algorithm::ES256, EncodingKey::from_ec_der(&der)),
    };
    let mut header = Header::new(alg);
    header.kid = Some(key.kid.clone());
    jsonwebtoken::encode(&header, &claims, &encoding).map_err(internal)
}

/// The discovery document (OpenID Connect Discovery 1.0 §3) of `issuer`.
pub fn discovery(issuer: &str) -> Value {
    json!({
        "issuer": issuer,
        "authorization_endpoint": format!("{issuer}/oauth/authorize"),
        "token_endpoint": format!("{issuer}/oauth/token"),
        "userinfo_endpoint": format!("{issuer}/oauth/userinfo"),
        "jwks_uri": format!("{issuer}/oauth/jwks"),
        "revocation_endpoint": format!("{issuer}/oauth/revoke"),
        "introspection_endpoint": format!("{issuer}/oauth/introspect"),
        "response_types_supported": ["code"],
        "response_modes_supported": ["query"],
        "grant_types_supported": ["authorization_code", "refresh_token"],
        "subject_types_supported": ["public"],
        "id_token_signing_alg_values_supported": ["ES256", "RS256"],
        "token_endpoint_auth_methods_supported": ["client_secret_basic", "client_secret_post", "none"],
        "code_challenge_methods_supported": ["S256"],
        "scopes_supported": ["openid", "profile", "openid_enterprises"],
        "claims_supported": ["sub", "iss", "aud", "exp", "iat", "auth_time", "nonce", "amr", "email", "email_verified", "name", "enterprises"],
    })
}
