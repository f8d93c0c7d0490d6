//! OAuth 2.0 through the real server (RFC 6749 §4.1 with PKCE, RFC 7636): the authorization
//! endpoint sends the browser to the console's sign-in and consent page; the token endpoint
//! exchanges the code and rotates refresh tokens. Every negative is refused with its RFC error
//! and issues nothing.

use base64::{engine::general_purpose::URL_SAFE_NO_PAD as B64URL, Engine};
use reqwest::{redirect::Policy, Client, Response};
use serde_json::Value;
use sha2::{Digest, Sha256};

use crate::common::*;

const REDIRECT: &str = "http://127.0.0.1:9/callback";
const VERIFIER: &str = "a-long-enough-pkce-verifier-of-at-least-43-characters";

fn challenge(verifier: &str) -> String {
    B64URL.encode(Sha256::digest(verifier.as_bytes()))
}

/// A browser: no redirects followed, the console cookie carried by hand.
struct Browser {
    client: Client,
    cookie: String,
}

impl Browser {
    async fn signed_in(app: &TestApp, user: &TestUser) -> Browser {
        let client = Client::builder().redirect(Policy::none()).no_proxy().build().unwrap();
        let form = [("email", user.email.as_str()), ("password", PASSWORD), ("otp", "000000")];
        let res = client.post(app.url("/console/login")).form(&form).send().await.unwrap();
        assert_eq!(res.status(), 303, "console sign-in");
        let cookie = res.headers()["set-cookie"].to_str().unwrap().split(';').next().unwrap().to_string();
        Browser { client, cookie }
    }

    async fn get(&self, app: &TestApp, path: &str) -> Response {
        self.client.get(app.url(path)).header("Cookie", &self.cookie).send().await.unwrap()
    }

    async fn post_form(&self, app: &TestApp, path: &str, form: &[(&str, String)]) -> Response {
        self.client.post(app.url(path)).header("Cookie", &self.cookie).form(form).send().await.unwrap()
    }
}

fn location(res: &Response) -> String {
    res.headers().get("location").map(|v| v.to_str().unwrap().to_string()).unwrap_or_default()
}

fn query_of(url: &str, key: &str) -> Option<String> {
    url::Url::parse(url).ok()?.query_pairs().find(|(k, _)| k == key).map(|(_, v)| v.into_owned())
}

/// A confidential client of the test app, and its secret.
async fn client(app: &TestApp) -> (String, String) {
    client_with(app, false).await
}

/// A confidential client, PKCE-optional (as BitGoJS's `authenticateWithAuthCode` needs) or not.
async fn client_with(app: &TestApp, pkce_optional: bool) -> (String, String) {
    let new = custodian::oauth::clients::NewClient {
        name: "Ledger Sync".into(),
        redirect_uris: vec![REDIRECT.into()],
        scopes: vec!["openid".into(), "profile".into(), "wallet_view_all".into()],
        public: false,
        id_token_alg: None,
        pkce_optional,
    };
    let (c, secret) = custodian::oauth::clients::create(&app.state.store, new).await.unwrap();
    (c.id.to_string(), secret.unwrap())
}

fn authorize_query(client_id: &str, extra: &str) -> String {
    format!(
        "response_type=code&client_id={client_id}&scope=profile%20openid&state=st-1&code_challenge={}&code_challenge_method=S256{extra}",
        challenge(VERIFIER)
    )
}

/// Consents on the page and returns the redirect the browser is sent to.
async fn consent(app: &TestApp, browser: &Browser, query: &str, decision: &str) -> String {
    let page = browser.get(app, &format!("/console/oauth/authorize?{query}")).await;
    let status = page.status();
    if status == 303 {
        return location(&page);
    }
    let html = page.text().await.unwrap();
    assert_eq!(status, 200, "{html}");
    assert!(html.contains("Ledger Sync") && html.contains("view your profile"), "{html}");
    let csrf = html.split("name=\"csrf\" value=\"").nth(1).unwrap().split('"').next().unwrap().to_string();
    let mut form: Vec<(&str, String)> = url::form_urlencoded::parse(query.as_bytes())
        .map(|(k, v)| {
            (
                match k.as_ref() {
                    "response_type" => "response_type",
                    "client_id" => "client_id",
                    "scope" => "scope",
                    "state" => "state",
                    "code_challenge" => "code_challenge",
                    "code_challenge_method" => "code_challenge_method",
                    "redirect_uri" => "redirect_uri",
                    _ => "nonce",
                },
                v.into_owned(),
            )
        })
        .collect();
    form.push(("csrf", csrf));
    form.push(("decision", decision.to_string()));
    let res = browser.post_form(app, "/console/oauth/authorize", &form).await;
    assert_eq!(res.status(), 303);
    location(&res)
}

async fn token(app: &TestApp, form: &[(&str, &str)], basic: Option<(&str, &str)>) -> Response {
    let mut req = app.client.post(app.url("/oauth/token")).form(form);
    if let Some((id, secret)) = basic {
        req = req.basic_auth(id, Some(secret));
    }
    req.send().await.unwrap()
}

async fn rfc_error(res: Response, status: u16, error: &str) {
    assert_eq!(res.status().as_u16(), status);
    let body: Value = res.json().await.unwrap();
    assert_eq!(body["error"], error, "{body}");
    assert!(body["error_description"].is_string(), "{body}");
}

#[tokio::test]
async fn a_code_from_consent_is_exchanged_once_and_refresh_tokens_rotate() {
    let app = spawn_app().await;
    let user = app.create_user("owner@example.com").await;
    let (id, secret) = client(&app).await;
    let query = authorize_query(&id, "");
    // /oauth/authorize sends the browser to the console, and a stranger to the sign-in page.
    let res = Client::builder()
        .redirect(Policy::none())
        .build()
        .unwrap()
        .get(app.url(&format!("/oauth/authorize?{query}")))
        .send()
        .await
        .unwrap();
    assert_eq!(location(&res), format!("/console/oauth/authorize?{query}"));
    let stranger = Client::builder().redirect(Policy::none()).build().unwrap();
    let res = stranger.get(app.url(&format!("/console/oauth/authorize?{query}"))).send().await.unwrap();
    assert!(
        location(&res).starts_with("/console/login?next=%2Fconsole%2Foauth%2Fauthorize"),
        "{}",
        location(&res)
    );

    let browser = Browser::signed_in(&app, &user).await;
    let back = consent(&app, &browser, &query, "approve").await;
    assert!(back.starts_with(REDIRECT), "{back}");
    assert_eq!(query_of(&back, "state").as_deref(), Some("st-1"));
    let code = query_of(&back, "code").unwrap();
    let form = [("grant_type", "authorization_code"), ("code", code.as_str()), ("code_verifier", VERIFIER)];
    let issued: Value = expect_json(token(&app, &form, Some((&id, &secret))).await, 200).await;
    assert_eq!(
        (issued["grant_type"].as_str(), issued["token_type"].as_str()),
        (Some("authorization_code"), Some("bearer"))
    );
    assert_eq!(issued["scope"], "profile openid");
    let access = issued["access_token"].as_str().unwrap().to_string();
    assert_eq!(expect_json(app.me(&access).await, 200).await["user"]["id"], user.id.as_str());
    let session = expect_json(app.get_auth("/api/v2/user/session", &access).await, 200).await;
    assert_eq!(session["session"]["grant_type"], "authorization_code", "{session}");
    // The code again: refused, and every token of its grant revoked.
    rfc_error(token(&app, &form, Some((&id, &secret))).await, 400, "invalid_grant").await;
    assert_eq!(app.me(&access).await.status(), 401);

    // The consent is remembered; JSON client credentials (BitGoJS's way) work too.
    let back = consent(&app, &browser, &query, "approve").await;
    let code = query_of(&back, "code").unwrap();
    let body = serde_json::json!({ "grant_type": "authorization_code", "code": code, "code_verifier": VERIFIER,
        "client_id": id, "client_secret": secret });
    let first: Value = expect_json(app.post("/oauth/token", &body).await, 200).await;
    let refresh = |t: &str| serde_json::json!({ "grant_type": "refresh_token", "refresh_token": t, "client_id": id, "client_secret": secret });
    let second: Value =
        expect_json(app.post("/oauth/token", &refresh(first["refresh_token"].as_str().unwrap())).await, 200)
            .await;
    assert_eq!(second["grant_type"], "refresh_token");
    let session = expect_json(
        app.get_auth("/api/v2/user/session", second["access_token"].as_str().unwrap()).await,
        200,
    )
    .await;
    assert_eq!(session["session"]["grant_type"], "refresh_token");
    assert_ne!(second["refresh_token"], first["refresh_token"], "rotated");
    let live = second["access_token"].as_str().unwrap();
    expect_json(app.me(live).await, 200).await;
    // The used refresh token again: the whole grant is revoked.
    let reused = app.post("/oauth/token", &refresh(first["refresh_token"].as_str().unwrap())).await;
    rfc_error(reused, 400, "invalid_grant").await;
    assert_eq!(app.me(live).await.status(), 401);
    let after = app.post("/oauth/token", &refresh(second["refresh_token"].as_str().unwrap())).await;
    rfc_error(after, 400, "invalid_grant").await;
    let audit = app.raw_sql("SELECT type FROM audit_log WHERE type LIKE 'oauth.%' ORDER BY seq").await;
    for t in [
        "oauth.consented",
        "oauth.token_issued",
        "oauth.code_reused",
        "oauth.refresh_reused",
        "oauth.grant_revoked",
    ] {
        assert!(audit.iter().any(|a| a == t), "{t} in {audit:?}");
    }
}

#[tokio::test]
async fn bad_requests_are_refused_with_their_rfc_errors_and_issue_nothing() {
    let app = spawn_app_with(|c| c.oauth.code_ttl = 1).await;
    let user = app.create_user("owner@example.com").await;
    let (id, secret) = client(&app).await;
    let browser = Browser::signed_in(&app, &user).await;
    // A redirect URI the client did not register: shown here, never redirected to.
    let wrong = authorize_query(&id, "&redirect_uri=https%3A%2F%2Fevil.example%2Fcb");
    let res = browser.get(&app, &format!("/console/oauth/authorize?{wrong}")).await;
    assert_eq!(res.status(), 400);
    assert!(location(&res).is_empty());
    // Plain PKCE, and a scope the client may not ask for: back to the client with the error.
    let plain = format!("response_type=code&client_id={id}&scope=profile&code_challenge={VERIFIER}&code_challenge_method=plain&state=s");
    let back = location(&browser.get(&app, &format!("/console/oauth/authorize?{plain}")).await);
    assert_eq!(query_of(&back, "error").as_deref(), Some("invalid_request"), "{back}");
    let scim = format!(
        "response_type=code&client_id={id}&scope=scim&state=s&code_challenge={}&code_challenge_method=S256",
        challenge(VERIFIER)
    );
    let back = location(&browser.get(&app, &format!("/console/oauth/authorize?{scim}")).await);
    assert_eq!(query_of(&back, "error").as_deref(), Some("invalid_scope"), "{back}");
    // Denied: access_denied with the state.
    let back = consent(&app, &browser, &authorize_query(&id, ""), "deny").await;
    assert_eq!(query_of(&back, "error").as_deref(), Some("access_denied"));
    assert_eq!(query_of(&back, "state").as_deref(), Some("st-1"));

    let code = || async {
        query_of(&consent(&app, &browser, &authorize_query(&id, ""), "approve").await, "code").unwrap()
    };
    let c = code().await;
    // No verifier, a wrong verifier, a wrong secret.
    let basic = Some((id.as_str(), secret.as_str()));
    rfc_error(
        token(&app, &[("grant_type", "authorization_code"), ("code", &c)], basic).await,
        400,
        "invalid_grant",
    )
    .await;
    let c = code().await;
    let wrong_verifier = "b".repeat(43);
    let form = [
        ("grant_type", "authorization_code"),
        ("code", c.as_str()),
        ("code_verifier", wrong_verifier.as_str()),
    ];
    rfc_error(token(&app, &form, basic).await, 400, "invalid_grant").await;
    let c = code().await;
    let form = [("grant_type", "authorization_code"), ("code", c.as_str()), ("code_verifier", VERIFIER)];
    rfc_error(token(&app, &form, Some((&id, "cs_wrong"))).await, 401, "invalid_client").await;
    // The code expires (oauth.code_ttl, 1 s here): the clock moves past it.
    app.state.store.clock().advance(std::time::Duration::from_secs(2));
    rfc_error(token(&app, &form, basic).await, 400, "invalid_grant").await;
    // Unknown grant types; a disabled client.
    rfc_error(token(&app, &[("grant_type", "password")], basic).await, 400, "unsupported_grant_type").await;
    let c = code().await;
    custodian::oauth::clients::set_disabled(&app.state.store, &id.parse().unwrap(), true).await.unwrap();
    let form = [("grant_type", "authorization_code"), ("code", c.as_str()), ("code_verifier", VERIFIER)];
    rfc_error(token(&app, &form, basic).await, 401, "invalid_client").await;
    let res = browser.get(&app, &format!("/console/oauth/authorize?{}", authorize_query(&id, ""))).await;
    assert_eq!(res.status(), 400);
    let issued = app.raw_sql("SELECT id FROM access_tokens WHERE oauth_grant_id IS NOT NULL").await;
    assert!(issued.is_empty(), "nothing issued: {issued:?}");
}

#[test]
fn a_scope_beyond_what_the_users_sessions_hold_is_not_granted() {
    use custodian::{config::Environment, identity::scopes::session_scopes, oauth::authorize::beyond_user};
    let policy = custodian::identity::scopes::Policy { environment: Environment::Production };
    let production = session_scopes(Environment::Production);
    assert_eq!(beyond_user(policy, &production, &["profile".into(), "scim".into()]).as_deref(), Some("scim"));
    assert_eq!(beyond_user(policy, &production, &["profile".into(), "openid".into()]), None);
}

/// Approves a fresh authorization and exchanges its code: the token answer.
async fn tokens(app: &TestApp, browser: &Browser, id: &str, secret: &str) -> Value {
    let back = consent(app, browser, &authorize_query(id, ""), "approve").await;
    let code = query_of(&back, "code").unwrap();
    let form = [("grant_type", "authorization_code"), ("code", code.as_str()), ("code_verifier", VERIFIER)];
    expect_json(token(app, &form, Some((id, secret))).await, 200).await
}

#[tokio::test]
async fn clients_introspect_and_revoke_their_tokens_and_users_revoke_applications() {
    let app = spawn_app().await;
    let user = app.create_user("owner@example.com").await;
    let (id, secret) = client(&app).await;
    let browser = Browser::signed_in(&app, &user).await;
    let issued = tokens(&app, &browser, &id, &secret).await;
    let access = issued["access_token"].as_str().unwrap();
    let ask = |path: &'static str, token: String, id: String, secret: String| {
        let app = &app;
        async move {
            let form = [("token", token)];
            let res =
                app.client.post(app.url(path)).basic_auth(id, Some(secret)).form(&form).send().await.unwrap();
            expect_json(res, 200).await
        }
    };
    let seen = ask("/oauth/introspect", access.into(), id.clone(), secret.clone()).await;
    assert_eq!(
        (seen["active"].as_bool(), seen["sub"].as_str()),
        (Some(true), Some(user.id.as_str())),
        "{seen}"
    );
    assert_eq!(seen["scope"], "profile openid");
    // Another client sees nothing of it.
    let (other, other_secret) = client(&app).await;
    let theirs = ask("/oauth/introspect", access.into(), other.clone(), other_secret.clone()).await;
    assert_eq!(theirs["active"], false);
    // ...and revoking it is a 200 that changes nothing (RFC 7009 §2.2).
    assert_eq!(ask("/oauth/revoke", access.into(), other, other_secret).await, serde_json::json!({}));
    expect_json(app.me(access).await, 200).await;
    // Revoking the refresh token ends the grant: the access token too.
    ask("/oauth/revoke", issued["refresh_token"].as_str().unwrap().into(), id.clone(), secret.clone()).await;
    assert_eq!(app.me(access).await.status(), 401);
    let gone = ask("/oauth/introspect", access.into(), id.clone(), secret.clone()).await;
    assert_eq!(gone["active"], false);
    // A value holding a NUL is refused, even a client_secret a service admin's introspection
    // does not use (schemathesis found it answered).
    let root = app.create_user_with("root@example.com", true).await;
    let root_token = app.login(&root).await;
    let form = [("token", "x"), ("client_secret", "a\0b")];
    let res = app.client.post(app.url("/oauth/introspect")).bearer_auth(&root_token).form(&form).send().await;
    assert_eq!(res.unwrap().status(), 400);
    let form = [("token", "x")];
    let res = app.client.post(app.url("/oauth/introspect")).bearer_auth(&root_token).form(&form).send().await;
    assert_eq!(expect_json(res.unwrap(), 200).await["active"], false);

    // The user ends an application's access from the console's Security page.
    let issued = tokens(&app, &browser, &id, &secret).await;
    let access = issued["access_token"].as_str().unwrap();
    let page = browser.get(&app, "/console/security").await.text().await.unwrap();
    assert!(page.contains("Ledger Sync"), "{page}");
    let grant = page.split("data-grant-id=\"").nth(1).unwrap().split('"').next().unwrap().to_string();
    let csrf = page.split("name=\"csrf\" value=\"").nth(1).unwrap().split('"').next().unwrap().to_string();
    let res = browser
        .post_form(&app, &format!("/console/security/applications/{grant}/revoke"), &[("csrf", csrf)])
        .await;
    assert!(res.text().await.unwrap().contains("Application access revoked"));
    assert_eq!(app.me(access).await.status(), 401);
    let audit = app.raw_sql("SELECT data FROM audit_log WHERE type = 'oauth.grant_revoked'").await;
    assert!(
        audit.iter().any(|d| d.contains("\"by\":\"user\""))
            && audit.iter().any(|d| d.contains("\"by\":\"client\"")),
        "{audit:?}"
    );
}

/// Checks an id_token against the published JWKS as a relying party does: its `kid`'s key,
/// its algorithm, `iss` and `aud`. Returns the claims.
async fn verified(app: &TestApp, id_token: &str, audience: &str) -> Value {
    use jsonwebtoken::{decode, decode_header, jwk::JwkSet, DecodingKey, Validation};
    let header = decode_header(id_token).unwrap();
    let jwks: JwkSet = app.client.get(app.url("/oauth/jwks")).send().await.unwrap().json().await.unwrap();
    let jwk = jwks.find(header.kid.as_deref().unwrap()).expect("the signing key is published");
    let mut validation = Validation::new(header.alg);
    validation.set_audience(&[audience]);
    validation.set_issuer(&[app.url("").trim_end_matches('/')]);
    decode::<Value>(id_token, &DecodingKey::from_jwk(jwk).unwrap(), &validation)
        .expect("a valid id_token")
        .claims
}

#[tokio::test]
async fn openid_connect_id_tokens_verify_across_a_key_rotation_and_userinfo_answers() {
    let app = spawn_app().await;
    let user = app.create_user("owner@example.com").await;
    let acme = app.create_enterprise("Acme Fund", &[(&user, true)]).await;
    let new = |alg: Option<&str>| custodian::oauth::clients::NewClient {
        name: "Ledger Sync".into(),
        redirect_uris: vec![REDIRECT.into()],
        scopes: vec!["openid".into(), "profile".into(), "openid_enterprises".into()],
        public: false,
        id_token_alg: alg.map(str::to_string),
        pkce_optional: false,
    };
    let (c, secret) = custodian::oauth::clients::create(&app.state.store, new(None)).await.unwrap();
    let (id, secret) = (c.id.to_string(), secret.unwrap());
    let discovery: Value =
        expect_json(app.client.get(app.url("/.well-known/openid-configuration")).send().await.unwrap(), 200)
            .await;
    assert_eq!(discovery["issuer"], app.url("").trim_end_matches('/'));
    assert_eq!(discovery["token_endpoint"], app.url("/oauth/token"));
    let browser = Browser::signed_in(&app, &user).await;
    let ask = |nonce: &str| {
        format!("response_type=code&client_id={id}&scope=openid%20profile%20openid_enterprises&state=s&nonce={nonce}&code_challenge={}&code_challenge_method=S256", challenge(VERIFIER))
    };
    let exchange = |query: String| {
        let (app, browser, id, secret) = (&app, &browser, id.clone(), secret.clone());
        async move {
            let page = browser.get(app, &format!("/console/oauth/authorize?{query}")).await;
            let back = if page.status() == 303 {
                location(&page)
            } else {
                consent(app, browser, &query, "approve").await
            };
            let code = query_of(&back, "code").unwrap();
            let form =
                [("grant_type", "authorization_code"), ("code", code.as_str()), ("code_verifier", VERIFIER)];
            expect_json(token(app, &form, Some((&id, &secret))).await, 200).await
        }
    };
    let first = exchange(ask("n-1")).await;
    let claims = verified(&app, first["id_token"].as_str().unwrap(), &id).await;
    assert_eq!((claims["sub"].as_str(), claims["nonce"].as_str()), (Some(user.id.as_str()), Some("n-1")));
    assert_eq!(claims["amr"], serde_json::json!(["pwd", "otp"]));
    assert_eq!(claims["email"], "owner@example.com");
    assert_eq!(claims["enterprises"][0]["id"], acme.as_str());
    // A rotation: new id_tokens carry the new key; the old one stays published, so the token
    // signed before still verifies.
    let before = first["id_token"].as_str().unwrap().to_string();
    let rotated = custodian::oauth::oidc::add_key(&app.state.store, &app.state.identity.key, "ES256", true)
        .await
        .unwrap();
    let second = exchange(ask("n-2")).await;
    let header = jsonwebtoken::decode_header(second["id_token"].as_str().unwrap()).unwrap();
    assert_eq!(header.kid.as_deref(), Some(rotated.kid.as_str()));
    verified(&app, second["id_token"].as_str().unwrap(), &id).await;
    verified(&app, &before, &id).await;
    // Userinfo with the access token.
    let info =
        expect_json(app.get_auth("/oauth/userinfo", second["access_token"].as_str().unwrap()).await, 200)
            .await;
    assert_eq!(
        (info["sub"].as_str(), info["email"].as_str()),
        (Some(user.id.as_str()), Some("owner@example.com"))
    );
    // A client that asks for RS256 gets RS256.
    let (rsa, rsa_secret) =
        custodian::oauth::clients::create(&app.state.store, new(Some("RS256"))).await.unwrap();
    let (rid, rsecret) = (rsa.id.to_string(), rsa_secret.unwrap());
    let query = ask("n-3").replace(&id, &rid);
    let back = consent(&app, &browser, &query, "approve").await;
    let code = query_of(&back, "code").unwrap();
    let form = [("grant_type", "authorization_code"), ("code", code.as_str()), ("code_verifier", VERIFIER)];
    let issued = expect_json(token(&app, &form, Some((&rid, &rsecret))).await, 200).await;
    let rs = issued["id_token"].as_str().unwrap();
    assert_eq!(jsonwebtoken::decode_header(rs).unwrap().alg, jsonwebtoken::Algorithm::RS256);
    verified(&app, rs, &rid).await;
}

#[tokio::test]
async fn service_admins_register_rotate_and_delete_applications_in_the_console() {
    let app = spawn_app().await;
    let root = app.create_user_with("root@example.com", true).await;
    let browser = Browser::signed_in(&app, &root).await;
    let page = browser.get(&app, "/console/admin/applications").await.text().await.unwrap();
    let csrf = page.split("name=\"csrf\" value=\"").nth(1).unwrap().split('"').next().unwrap().to_string();
    let form = [
        ("csrf", csrf.clone()),
        ("name", "Treasury Bot".to_string()),
        ("redirect_uris", REDIRECT.to_string()),
        ("scopes", "openid profile".to_string()),
        ("id_token_alg", "ES256".to_string()),
    ];
    let made = browser.post_form(&app, "/console/admin/applications", &form).await.text().await.unwrap();
    let secret =
        made.split("id=\"new-client-secret\">").nth(1).unwrap().split('<').next().unwrap().to_string();
    let id = made.split("data-client-id=\"").nth(1).unwrap().split('"').next().unwrap().to_string();
    assert!(secret.starts_with("cs_"), "{made}");
    let check = |secret: String| {
        let (app, id) = (&app, id.clone());
        async move {
            let form = [("grant_type", "refresh_token"), ("refresh_token", "rt_unknown")];
            let res = token(app, &form, Some((&id, &secret))).await;
            let body: Value = res.json().await.unwrap();
            body["error"].as_str().unwrap_or_default().to_string()
        }
    };
    assert_eq!(check(secret.clone()).await, "invalid_grant", "the secret authenticates");
    let rotated = browser
        .post_form(&app, &format!("/console/admin/applications/{id}/rotate"), &[("csrf", csrf.clone())])
        .await;
    let rotated = rotated.text().await.unwrap();
    let fresh =
        rotated.split("id=\"new-client-secret\">").nth(1).unwrap().split('<').next().unwrap().to_string();
    assert_eq!(check(secret).await, "invalid_client", "the old secret stops");
    assert_eq!(check(fresh.clone()).await, "invalid_grant");
    let deleted =
        browser.post_form(&app, &format!("/console/admin/applications/{id}/delete"), &[("csrf", csrf)]).await;
    assert!(!deleted.text().await.unwrap().contains(&id));
    assert_eq!(check(fresh).await, "invalid_client");
    // Not for a user without the service-admin permission.
    let user = app.create_user("someone@example.com").await;
    let theirs = Browser::signed_in(&app, &user).await;
    assert_eq!(theirs.get(&app, "/console/admin/applications").await.status(), 403);
}

/// 8 exchanges of one code and 8 refreshes of one refresh token at once, 20 times each: one
/// wins, the others are reuses that revoke the grant, and the winner's token, issued in the
/// same instant, is revoked with it (RFC 6749 §4.1.2, §10.4).
#[tokio::test]
async fn racing_reuses_leave_no_live_token_of_the_grant() {
    let app = spawn_app().await;
    let user = app.create_user("racer@example.com").await;
    let (id, secret) = client(&app).await;
    let browser = Browser::signed_in(&app, &user).await;
    let query = authorize_query(&id, "");
    let exchange = |body: Value| {
        let req = app.client.post(app.url("/oauth/token")).json(&body);
        async move {
            let res = req.send().await.unwrap();
            let status = res.status().as_u16();
            (status, res.json::<Value>().await.unwrap())
        }
    };
    for round in 0..20 {
        let code = query_of(&consent(&app, &browser, &query, "approve").await, "code").unwrap();
        let body = serde_json::json!({ "grant_type": "authorization_code", "code": code, "code_verifier": VERIFIER,
            "client_id": id, "client_secret": secret });
        let answers = futures_util::future::join_all((0..8).map(|_| exchange(body.clone()))).await;
        let won: Vec<&Value> = answers.iter().filter(|(s, _)| *s == 200).map(|(_, b)| b).collect();
        assert_eq!(won.len(), 1, "round {round}: {answers:?}");
        assert!(answers.iter().all(|(s, _)| *s == 200 || *s == 400), "round {round}: {answers:?}");
        let token = won[0]["access_token"].as_str().unwrap();
        assert_eq!(app.me(token).await.status(), 401, "round {round}: the code's winner is revoked too");

        // A fresh grant (the last was revoked), then its refresh token raced.
        let code = query_of(&consent(&app, &browser, &query, "approve").await, "code").unwrap();
        let body = serde_json::json!({ "grant_type": "authorization_code", "code": code, "code_verifier": VERIFIER,
            "client_id": id, "client_secret": secret });
        let (status, first) = exchange(body).await;
        assert_eq!(status, 200, "{first}");
        let refresh = serde_json::json!({ "grant_type": "refresh_token", "refresh_token": first["refresh_token"],
            "client_id": id, "client_secret": secret });
        let answers = futures_util::future::join_all((0..8).map(|_| exchange(refresh.clone()))).await;
        let won: Vec<&Value> = answers.iter().filter(|(s, _)| *s == 200).map(|(_, b)| b).collect();
        assert_eq!(won.len(), 1, "round {round}: {answers:?}");
        for t in [won[0]["access_token"].as_str().unwrap(), first["access_token"].as_str().unwrap()] {
            assert_eq!(app.me(t).await.status(), 401, "round {round}: no token of the grant lives");
        }
    }
}

/// PKCE is required of every client (RFC 9700 §2.1.1): an authorization request without a
/// code_challenge is refused, unless the confidential client was registered PKCE-optional
/// (BitGoJS's authenticateWithAuthCode). A code issued without a challenge is not exchanged
/// with a code_verifier (a PKCE downgrade), and a failed exchange uses nothing: the right
/// request after it still works.
#[tokio::test]
async fn pkce_is_required_and_a_verifier_for_a_code_without_challenge_is_refused() {
    let app = spawn_app().await;
    let user = app.create_user("downgrade@example.com").await;
    let browser = Browser::signed_in(&app, &user).await;
    let (strict, _) = client(&app).await;
    let query = "response_type=code&client_id=CLIENT&scope=profile&state=s".replace("CLIENT", &strict);
    let back = consent(&app, &browser, &query, "approve").await;
    assert_eq!(query_of(&back, "error").as_deref(), Some("invalid_request"), "{back}");
    assert!(query_of(&back, "code").is_none(), "{back}");
    // An application registered before may be let off (`custodian oauth-client pkce`), audited.
    let strict_id: custodian::types::AnyId = strict.parse().unwrap();
    custodian::oauth::clients::set_pkce_optional(&app.state.store, &strict_id, true).await.unwrap();
    let back = consent(&app, &browser, &query, "approve").await;
    assert!(query_of(&back, "code").is_some(), "{back}");
    custodian::oauth::clients::set_pkce_optional(&app.state.store, &strict_id, false).await.unwrap();
    let back = consent(&app, &browser, &query, "approve").await;
    assert_eq!(query_of(&back, "error").as_deref(), Some("invalid_request"), "required again: {back}");
    let set = app.raw_sql("SELECT type FROM audit_log WHERE type = 'oauth.client_pkce_set'").await;
    assert_eq!(set.len(), 2);
    let public = custodian::oauth::clients::NewClient {
        name: "Desk CLI".into(),
        redirect_uris: vec![REDIRECT.into()],
        scopes: vec!["profile".into()],
        public: true,
        id_token_alg: None,
        pkce_optional: false,
    };
    let (public, _) = custodian::oauth::clients::create(&app.state.store, public).await.unwrap();
    let refused = custodian::oauth::clients::set_pkce_optional(&app.state.store, &public.id, true).await;
    assert!(refused.is_err(), "a public client must use PKCE");
    let (id, secret) = client_with(&app, true).await;
    let query = "response_type=code&client_id=CLIENT&scope=profile&state=s".replace("CLIENT", &id);
    let code = query_of(&consent(&app, &browser, &query, "approve").await, "code").unwrap();
    let with = [("grant_type", "authorization_code"), ("code", code.as_str()), ("code_verifier", VERIFIER)];
    rfc_error(token(&app, &with, Some((&id, &secret))).await, 400, "invalid_grant").await;
    let without = [("grant_type", "authorization_code"), ("code", code.as_str())];
    let issued: Value = expect_json(token(&app, &without, Some((&id, &secret))).await, 200).await;
    expect_json(app.me(issued["access_token"].as_str().unwrap()).await, 200).await;
}
