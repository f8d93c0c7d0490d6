//! Single sign-on against a real OpenID Connect provider (docs/sso.md#tests): panva's
//! oidc-provider (sso-tests/, installed by `.ci/run`), driven through its sign-in pages and
//! Custodian's console routes over HTTP, as a browser would.

use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};

use reqwest::{header, redirect::Policy, Client, Response};
use serde_json::{json, Value};

use crate::common::*;

/// The provider, stopped when dropped. Its state file is read on every request, so a test
/// changes its users by [`Provider::write`].
pub struct Provider {
    child: Child,
    pub issuer: String,
    state: tempfile::NamedTempFile,
}

/// Seconds provider.mjs has to say it listens (it takes about one).
const START_SECS: u64 = 20;

/// Starts of provider.mjs made before a test gives up. Rarely (once in about 700 starts on
/// our CI machine, under the suite's load) node never gets as far as listening; left alone,
/// that held a whole CI run until its limit. Such a start is reported, killed and made again.
const START_TRIES: usize = 3;

/// Starts `provider.mjs` on `port` (0: a free one): the process and its issuer.
fn spawn(state: &std::path::Path, port: u16) -> (Child, String) {
    let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/sso-tests");
    assert!(
        std::path::Path::new(dir).join("node_modules/oidc-provider").exists(),
        "oidc-provider not found: run `npm install` in sso-tests/ (as .ci/run does)"
    );
    let mut stuck = Vec::new();
    for _ in 0..START_TRIES {
        match try_spawn(dir, state, port) {
            Ok(started) => return started,
            Err(report) => {
                // Shown in the run's log even when a retry passes.
                crate::watchdog::say(&report);
                stuck.push(report);
            }
        }
    }
    panic!("provider.mjs did not start in {START_TRIES} tries:\n{}", stuck.join("\n"))
}

/// One start of provider.mjs, or a report of why it did not start: how far it got (its
/// stderr) and what its threads were waiting on.
fn try_spawn(dir: &str, state: &std::path::Path, port: u16) -> Result<(Child, String), String> {
    let stderr_path = state.with_extension("stderr");
    let stderr = std::fs::File::create(&stderr_path).expect("provider's stderr file");
    let mut child = Command::new("node")
        .arg(format!("{dir}/provider.mjs"))
        .arg(state)
        .env("PORT", port.to_string())
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(stderr)
        .spawn()
        .expect("start node");
    // Read on a thread of its own, with a deadline: the test's thread also runs the server.
    let stdout = child.stdout.take().expect("piped stdout");
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let mut line = String::new();
        let read = BufReader::new(stdout).read_line(&mut line).map(|_| line);
        let _ = tx.send(read);
    });
    let read = |p: &std::path::Path| std::fs::read_to_string(p).unwrap_or_default();
    let line = match rx.recv_timeout(std::time::Duration::from_secs(START_SECS)) {
        Ok(Ok(line)) => line,
        Ok(Err(e)) => format!("(reading its stdout failed: {e})"),
        Err(_) => {
            let pid = child.id();
            // Each thread's name, state and what the kernel has it waiting on.
            let thread = |t: std::path::PathBuf| {
                let stat = read(&t.join("stat"));
                let fields: Vec<&str> = stat.split_whitespace().take(3).collect();
                format!("{} {}", fields.join(" "), read(&t.join("wchan")))
            };
            let tasks: Vec<String> = std::fs::read_dir(format!("/proc/{pid}/task"))
                .map(|d| d.flatten().map(|t| thread(t.path())).collect())
                .unwrap_or_default();
            let _ = child.kill();
            let _ = child.wait();
            return Err(format!(
                "provider.mjs (pid {pid}, port {port}) did not say it listens within {START_SECS} s; \
                 its threads (id, name, state, wait):\n{}\nits stderr:\n{}",
                tasks.join("\n"),
                read(&stderr_path)
            ));
        }
    };
    match serde_json::from_str::<Value>(&line).ok().and_then(|v| v["issuer"].as_str().map(str::to_string)) {
        Some(issuer) => Ok((child, issuer)),
        None => {
            let _ = child.kill();
            let status = child.wait();
            panic!(
                "provider.mjs (port {port}) did not start: {line:?}, {status:?}, stderr:\n{}",
                read(&stderr_path)
            )
        }
    }
}

impl Drop for Provider {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Provider {
    /// Starts a provider with one confidential client (`custodian` / `s3cret`) returning to
    /// `app`'s callback, and `accounts` (sub -> {email, email_verified, groups}).
    /// Its id_tokens live `id_token_ttl` seconds.
    pub fn start(app: &TestApp, accounts: Value, id_token_ttl: u64) -> Provider {
        Provider::start_with(app, accounts, json!({ "idTokenTtl": id_token_ttl }))
    }

    /// [`Provider::start`] with `extra` settings of provider.mjs (`conformIdTokenClaims`).
    pub fn start_with(app: &TestApp, accounts: Value, extra: Value) -> Provider {
        let state = tempfile::NamedTempFile::new().unwrap();
        let mut provider_state = json!({
            "clients": [{ "client_id": "custodian", "client_secret": "s3cret",
                "redirect_uris": [app.url("/console/sso/callback")] }],
            "accounts": accounts,
        });
        for (k, v) in extra.as_object().unwrap() {
            provider_state[k] = v.clone();
        }
        std::fs::write(state.path(), provider_state.to_string()).unwrap();
        let (child, issuer) = spawn(state.path(), 0);
        Provider { child, issuer, state }
    }

    /// Stops it and starts it again at the same address, with a new signing key. Off the
    /// test's thread, which also runs the server.
    pub async fn restart(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let port: u16 = self.issuer.rsplit(':').next().unwrap().parse().unwrap();
        let state = self.state.path().to_path_buf();
        let (child, issuer) = tokio::task::spawn_blocking(move || spawn(&state, port)).await.unwrap();
        self.child = child;
        assert_eq!(issuer, self.issuer);
    }

    /// Replaces the accounts.
    pub fn write(&self, accounts: Value) {
        self.set("accounts", accounts);
    }

    /// Sets one field of provider.mjs's state (`tamper`, say), read on its next request.
    pub fn set(&self, key: &str, value: Value) {
        let mut v: Value =
            serde_json::from_str(&std::fs::read_to_string(self.state.path()).unwrap()).unwrap();
        v[key] = value;
        std::fs::write(self.state.path(), v.to_string()).unwrap();
    }
}

/// A browser's HTTP client: redirects not followed (the tests follow them), and a deadline on
/// every request, so a hung answer fails the test instead of holding it.
fn browser() -> Client {
    let deadline = std::time::Duration::from_secs(60);
    Client::builder().redirect(Policy::none()).no_proxy().timeout(deadline).build().unwrap()
}

/// Cookies by name, as a browser would keep them (paths ignored: each host gets its own jar).
#[derive(Default)]
struct Jar(Vec<(String, String)>);

impl Jar {
    fn take(&mut self, res: &Response) {
        for v in res.headers().get_all(header::SET_COOKIE) {
            let Some((name, rest)) = v.to_str().unwrap().split_once('=') else { continue };
            let value = rest.split(';').next().unwrap_or_default().to_string();
            self.0.retain(|(n, _)| n != name);
            self.0.push((name.to_string(), value));
        }
    }

    fn header(&self) -> String {
        self.0.iter().map(|(n, v)| format!("{n}={v}")).collect::<Vec<_>>().join("; ")
    }

    fn get(&self, name: &str) -> Option<&str> {
        self.0.iter().find(|(n, _)| n == name).map(|(_, v)| v.as_str())
    }
}

/// The `href` of the page's `#onward-link` (HTML-unescaped).
fn onward(page: &str) -> String {
    let at = page.find("id=\"onward-link\"").expect("an onward link");
    let href = &page[at..];
    let start = href.find("href=\"").unwrap() + 6;
    let end = start + href[start..].find('"').unwrap();
    href[start..end].replace("&amp;", "&")
}

/// What a sign-in through the console came to.
pub struct Outcome {
    /// The callback's status and page.
    pub status: u16,
    pub page: String,
    /// The console session, when signed in.
    pub session: Option<String>,
    /// The callback URL the provider sent the browser to.
    pub callback: String,
}

/// Signs in at the console as `who` (an email or enterprise id), logging in at the provider as
/// `sub`.
pub async fn sign_in(app: &TestApp, who: &str, sub: &str) -> Outcome {
    let (callback, ours) = reach_callback(app, who, sub).await;
    finish(&callback, &ours).await
}

/// The console's form and the provider's sign-in, up to the callback URL the provider sends the
/// browser to; with the console's cookies.
async fn reach_callback(app: &TestApp, who: &str, sub: &str) -> (String, Jar) {
    let http = browser();
    let res = http.post(app.url("/console/sso")).form(&[("who", who)]).send().await.unwrap();
    at_provider(app, res, sub).await
}

/// From the console's page that sends the browser to the provider (`res`), through the
/// provider's sign-in as `sub`, up to the callback URL; with the console's cookies.
async fn at_provider(app: &TestApp, res: Response, sub: &str) -> (String, Jar) {
    match log_in_at_provider(app, res, sub).await {
        Ok(reached) => reached,
        Err((status, page)) => panic!("the provider refused {sub}: {status} {page}"),
    }
}

/// [`at_provider`], or the status and page of the provider's refusal to sign `sub` in.
async fn log_in_at_provider(app: &TestApp, res: Response, sub: &str) -> Result<(String, Jar), (u16, String)> {
    let http = browser();
    let (mut ours, mut theirs) = (Jar::default(), Jar::default());
    assert_eq!(res.status(), 200, "the page to the provider");
    ours.take(&res);
    let to_provider = onward(&res.text().await.unwrap());
    let res = http.get(&to_provider).send().await.unwrap();
    theirs.take(&res);
    let interaction = res.headers()[header::LOCATION].to_str().unwrap().to_string();
    let interaction = if interaction.starts_with('/') {
        format!("{}{interaction}", &to_provider[..to_provider.find("/auth").unwrap()])
    } else {
        interaction
    };
    let res = http
        .post(&interaction)
        .header(header::COOKIE, theirs.header())
        .form(&[("prompt", "login"), ("login", sub), ("password", "any")])
        .send()
        .await
        .unwrap();
    if !res.status().is_redirection() {
        return Err((res.status().as_u16(), res.text().await.unwrap()));
    }
    theirs.take(&res);
    let resume = res.headers()[header::LOCATION].to_str().unwrap().to_string();
    let res = http.get(&resume).header(header::COOKIE, theirs.header()).send().await.unwrap();
    let callback = res.headers()[header::LOCATION].to_str().unwrap().to_string();
    assert!(callback.starts_with(&app.url("/console/sso/callback")), "{callback}");
    Ok((callback, ours))
}

async fn finish(callback: &str, ours: &Jar) -> Outcome {
    let http = browser();
    let res = http.get(callback).header(header::COOKIE, ours.header()).send().await.unwrap();
    let status = res.status().as_u16();
    let mut jar = Jar::default();
    jar.take(&res);
    let session = jar.get("custodian_console").filter(|v| !v.is_empty()).map(str::to_string);
    Outcome { status, page: res.text().await.unwrap(), session, callback: callback.to_string() }
}

/// An enterprise with Alice (admin) and Carol (member), its provider set by Alice with the
/// group mapping `custody-admins` -> admin, `custody` -> member.
async fn enterprise_with_provider() -> (TestApp, Provider, String, String) {
    enterprise_with_provider_and(|_| {}).await
}

/// [`enterprise_with_provider`] with the configuration changed by `tweak`.
async fn enterprise_with_provider_and(
    tweak: impl FnOnce(&mut custodian::config::Config),
) -> (TestApp, Provider, String, String) {
    // The provider is on this machine: the SSRF guard lets it be reached only when allowed.
    let app = spawn_app_with(|c| {
        c.delivery.allowed_cidrs = vec!["127.0.0.0/8".parse().unwrap()];
        tweak(c)
    })
    .await;
    let alice = app.create_user("alice@example.com").await;
    let carol = app.create_user("carol@example.com").await;
    let enterprise = app.create_enterprise("Acme", &[(&alice, true), (&carol, false)]).await;
    let provider = Provider::start(
        &app,
        json!({
            "carol-sub": { "email": "carol@example.com", "email_verified": true, "groups": ["custody"] },
            "alice-sub": { "email": "alice@example.com", "email_verified": true, "groups": ["custody-admins"] },
        }),
        1800,
    );
    let alice_token = app.login(&alice).await;
    let setting = json!({
        "oauthProvider": "oidc", "issuer": provider.issuer, "clientId": "custodian", "clientSecret": "s3cret",
        "scopes": ["email", "groups"], "groupsClaim": "groups",
        "groupRoles": { "custody-admins": "admin", "custody": "member" },
    });
    let path = format!("/api/v2/enterprise/{enterprise}/oauthSetting");
    expect_json(app.put_auth(&path, &alice_token, &setting).await, 200).await;
    (app, provider, enterprise, alice_token)
}

#[tokio::test]
async fn a_member_signs_in_through_the_enterprise_s_provider_and_gets_an_oauth_session() {
    let (app, provider, enterprise, alice_token) = enterprise_with_provider().await;
    // The setting reads back without its secret, which is sealed at rest.
    let path = format!("/api/v2/enterprise/{enterprise}/oauthSetting");
    let shown = expect_json(app.get_auth(&path, &alice_token).await, 200).await;
    assert_eq!(
        (shown["issuer"].as_str(), shown["clientId"].as_str()),
        (Some(provider.issuer.as_str()), Some("custodian"))
    );
    assert!(shown.get("clientSecret").is_none(), "{shown}");
    let stored = app.raw_sql("SELECT client_secret FROM enterprise_sso").await;
    assert!(stored.len() == 1 && !stored[0].contains(&hex::encode("s3cret")), "{stored:?}");
    // Carol signs in by her email: her account is linked by her verified email, once.
    let out = sign_in(&app, "carol@example.com", "carol-sub").await;
    assert_eq!(out.status, 200, "{}", out.page);
    let session = out.session.expect("a console session");
    let view = expect_json(app.get_auth("/api/v2/user/session", &session).await, 200).await;
    assert_eq!(view["session"]["grant_type"], "oauth", "{view}");
    assert_eq!(view["session"]["ssoProvider"], "oidc", "{view}");
    assert_eq!(view["session"]["oauth"]["oauthRequired"], false, "{view}");
    assert_eq!(view["session"]["oauth"]["expires"], view["session"]["expires"], "{view}");
    // A long-lived access token made with it (a fresh code, as the console's Access tokens
    // page asks) works like any other: what an SDK user takes away.
    let made = json!({ "label": "sdk", "otp": "000000", "scope": ["profile", "wallet_view_all"], "duration": 86400 });
    let token = expect_json(app.post_auth("/api/v2/user/accesstoken", &session, &made).await, 200).await;
    let token = token["token"].as_str().unwrap();
    let me = expect_json(app.get_auth("/api/v2/user/me", token).await, 200).await;
    assert_eq!(me["user"]["username"], "carol@example.com", "{me}");
    // It lasts as long as the provider's id_token (1,800 s here), not login.session_ttl (3,600).
    let at = |k: &str| chrono::DateTime::parse_from_rfc3339(view["session"][k].as_str().unwrap()).unwrap();
    let lasts = (at("expires") - at("created")).num_seconds();
    assert!((1790..=1800).contains(&lasts), "{view}");
    let linked = app.raw_sql("SELECT subject FROM sso_identities").await;
    assert_eq!(linked, vec!["carol-sub".to_string()]);
    // Again, by the enterprise's id: the link is used.
    let again = sign_in(&app, &enterprise, "carol-sub").await;
    assert!(again.session.is_some(), "{}", again.page);
    // The callback is used once: a replay is refused and audited.
    let replay = finish(&out.callback, &Jar::default()).await;
    assert_eq!(replay.status, 401, "{}", replay.page);
    assert!(replay.page.contains("unknown, used already or expired"), "{}", replay.page);
    let audit = app.raw_sql("SELECT data FROM audit_log WHERE type = 'login.failed'").await;
    assert!(audit.iter().any(|d| d.contains("\"reason\":\"sso\"")), "{audit:?}");
    let types = app.raw_sql("SELECT type FROM audit_log WHERE type LIKE 'sso.%' ORDER BY seq").await;
    assert_eq!(types, ["sso.setting_set", "sso.identity_linked"]);
}

#[tokio::test]
async fn email_linking_refuses_unverified_emails_admins_and_people_with_no_mapped_group() {
    let (app, provider, enterprise, _) = enterprise_with_provider().await;
    // Alice is an enterprise admin: never linked by email, whatever the provider says.
    let out = sign_in(&app, &enterprise, "alice-sub").await;
    assert_eq!(out.status, 403, "{}", out.page);
    assert!(out.page.contains("administrator"), "{}", out.page);
    // Carol's email unverified at the provider: not linked.
    provider.write(json!({
        "carol-sub": { "email": "carol@example.com", "email_verified": false, "groups": ["custody"] },
        "other-sub": { "email": "carol@example.com", "email_verified": true, "groups": ["sales"] },
        "hank-sub": { "email": "hank@example.com", "email_verified": true, "groups": ["custody"] },
    }));
    // Hank, a member whose account is deactivated: his verified email links nothing.
    let hank = app.create_user("hank@example.com").await;
    let (hank_id, e): (custodian::types::UserId, custodian::types::EnterpriseId) =
        (hank.id.parse().unwrap(), enterprise.parse().unwrap());
    app.state.store.upsert_membership(&e, &hank_id, false, &[]).await.unwrap();
    let now = app.state.store.clock().now();
    app.state
        .store
        .update_user(&hank_id, custodian::store::UserChange::Active(false), now, &[])
        .await
        .unwrap();
    let out = sign_in(&app, &enterprise, "hank-sub").await;
    assert_eq!(out.status, 403, "{}", out.page);
    assert!(out.page.contains("deactivated"), "{}", out.page);
    let out = sign_in(&app, &enterprise, "carol-sub").await;
    assert_eq!(out.status, 403, "{}", out.page);
    assert!(out.page.contains("not verified"), "{}", out.page);
    // A person whose groups map to no role is refused before any link is made.
    let out = sign_in(&app, &enterprise, "other-sub").await;
    assert_eq!(out.status, 403, "{}", out.page);
    assert!(out.page.contains("none of your groups"), "{}", out.page);
    assert!(app.raw_sql("SELECT subject FROM sso_identities").await.is_empty());
    assert!(out.session.is_none());
}

#[tokio::test]
async fn a_sign_in_is_bound_to_its_browser_and_only_enterprise_admins_set_the_provider() {
    let (app, _provider, enterprise, alice_token) = enterprise_with_provider().await;
    // A callback carried to another browser (without the cookie of the start) is refused, and
    // the sign-in is spent: the right browser cannot use it after.
    let (callback, ours) = reach_callback(&app, "carol@example.com", "carol-sub").await;
    let elsewhere = finish(&callback, &Jar::default()).await;
    assert_eq!(elsewhere.status, 401, "{}", elsewhere.page);
    assert!(elsewhere.page.contains("another browser"), "{}", elsewhere.page);
    let late = finish(&callback, &ours).await;
    assert!(late.status == 401 && late.session.is_none(), "{}", late.page);
    // An unknown email and an enterprise without a provider read alike.
    let http = browser();
    for who in ["nobody@example.com", "0123456789abcdef0123456789abcdef"] {
        let res = http.post(app.url("/console/sso")).form(&[("who", who)]).send().await.unwrap();
        assert_eq!(res.status(), 404, "{who}");
        assert!(res.text().await.unwrap().contains("no single sign-on is set up"));
    }
    // Someone outside the enterprise may not read or set its provider; a bad issuer is refused
    // and changes nothing.
    let path = format!("/api/v2/enterprise/{enterprise}/oauthSetting");
    let dave = app.create_user("dave@example.com").await;
    let token = app.login(&dave).await;
    assert_error(app.get_auth(&path, &token).await, 404, "EnterpriseNotFound").await;
    let bad = json!({ "oauthProvider": "oidc", "issuer": "ftp://x", "clientId": "c", "clientSecret": "s" });
    let body = assert_error(app.put_auth(&path, &alice_token, &bad).await, 400, "InvalidField").await;
    assert_eq!(body["context"]["field"], "issuer");
    let unmapped = json!({ "oauthProvider": "okta", "oktaDomain": "acme.okta.com", "clientId": "c", "clientSecret": "s", "groupRoles": { "x": "owner" } });
    assert_error(app.put_auth(&path, &alice_token, &unmapped).await, 400, "InvalidField").await;
    let kept = expect_json(app.get_auth(&path, &alice_token).await, 200).await;
    assert_eq!(kept["oauthProvider"], "oidc");
}

#[tokio::test]
async fn sign_ins_waiting_at_providers_are_capped_by_sso_max_pending() {
    let (app, _provider, enterprise, _) = enterprise_with_provider_and(|c| c.sso.max_pending = 1).await;
    let http = browser();
    let start = || http.post(app.url("/console/sso")).form(&[("who", enterprise.as_str())]).send();
    assert_eq!(start().await.unwrap().status(), 200);
    let res = start().await.unwrap();
    assert_eq!(res.status(), 429);
    assert!(res.text().await.unwrap().contains("too many single sign-ons"));
    // Once the waiting one expires (`sso.login_ttl`), its place is free again.
    app.state.store.clock().advance(std::time::Duration::from_secs(601));
    let out = sign_in(&app, &enterprise, "carol-sub").await;
    assert_eq!(out.status, 200, "{}", out.page);
}

#[tokio::test]
async fn one_client_s_unfinished_sign_ins_are_capped_by_sso_max_starts_per_client() {
    let (app, _provider, enterprise, _) =
        enterprise_with_provider_and(|c| c.sso.max_starts_per_client = 2).await;
    let http = browser();
    let start = || http.post(app.url("/console/sso")).form(&[("who", enterprise.as_str())]).send();
    let first = start().await.unwrap();
    assert_eq!(start().await.unwrap().status(), 200);
    // The third is refused before the provider is called: nothing is kept for it.
    let res = start().await.unwrap();
    assert_eq!(res.status(), 429);
    let retry: u64 = res.headers()[header::RETRY_AFTER].to_str().unwrap().parse().unwrap();
    assert!((1..=app.state.config.login.window).contains(&retry), "{retry}");
    assert!(res.text().await.unwrap().contains("from this address"));
    assert_eq!(app.raw_sql("SELECT state_hash FROM sso_logins").await.len(), 2);
    // The first, finished, frees this client's places (the second was abandoned).
    let (callback, ours) = at_provider(&app, first, "carol-sub").await;
    assert!(finish(&callback, &ours).await.session.is_some());
    assert_eq!(start().await.unwrap().status(), 200);
    assert_eq!(start().await.unwrap().status(), 200);
    assert_eq!(start().await.unwrap().status(), 429);
    // The window (`login.window`) passes: the abandoned ones no longer count.
    app.state.store.clock().advance(std::time::Duration::from_secs(app.state.config.login.window + 1));
    assert_eq!(start().await.unwrap().status(), 200);
}

#[tokio::test]
async fn sso_required_refuses_passwords_and_break_glass_owners_keep_theirs() {
    let (app, _provider, enterprise, alice_token) = enterprise_with_provider().await;
    let path = format!("/api/v2/enterprise/{enterprise}/oauthSetting");
    let mut setting = expect_json(app.get_auth(&path, &alice_token).await, 200).await;
    let alice = app
        .state
        .store
        .user_by_email(&custodian::types::Email::parse("alice@example.com").unwrap())
        .await
        .unwrap()
        .unwrap();
    let outsider = app.create_user("dave@example.com").await;
    setting["clientSecret"] = json!("s3cret");
    setting["ssoRequired"] = json!(true);
    // A break-glass owner must be a member.
    setting["breakGlass"] = json!([outsider.id]);
    let body = assert_error(app.put_auth(&path, &alice_token, &setting).await, 400, "InvalidField").await;
    assert_eq!(body["context"]["field"], "breakGlass");
    setting["breakGlass"] = json!([alice.id.as_str()]);
    expect_json(app.put_auth(&path, &alice_token, &setting).await, 200).await;
    // Carol may no longer use her password, through the API or the console.
    let res = app.login_raw("carol@example.com", PASSWORD, "000000").await;
    let body = assert_error(res, 403, "SsoRequired").await;
    assert!(body["error"].as_str().unwrap().contains("/console/sso"), "{body}");
    let form = [("email", "carol@example.com"), ("password", PASSWORD), ("otp", "000000")];
    let res = app.client.post(app.url("/console/login")).form(&form).send().await.unwrap();
    assert_eq!(res.status(), 403);
    assert!(res.text().await.unwrap().contains("requires single sign-on"));
    // Nor may Erin, a member with a passkey, use it.
    let (erin, _, mut key, _) = crate::passkeys::with_passkey(&app, "erin@example.com").await;
    let erin_id: custodian::types::UserId = erin.id.parse().unwrap();
    let e: custodian::types::EnterpriseId = enterprise.parse().unwrap();
    app.state.store.upsert_membership(&e, &erin_id, false, &[]).await.unwrap();
    let assertion = key.assert(&crate::passkeys::challenge(&app, Some("erin@example.com")).await);
    assert_error(crate::passkeys::sign_in(&app, &assertion).await, 403, "SsoRequired").await;
    // Carol signs in through the provider.
    let out = sign_in(&app, "carol@example.com", "carol-sub").await;
    assert!(out.session.is_some(), "{}", out.page);
    // Alice, the named owner, and a service admin member keep their passwords, audited.
    assert_eq!(app.login_raw("alice@example.com", PASSWORD, "000000").await.status(), 200);
    let ops = app.create_user_with("ops@example.com", true).await;
    let ops_id: custodian::types::UserId = ops.id.parse().unwrap();
    app.state.store.upsert_membership(&e, &ops_id, false, &[]).await.unwrap();
    app.login(&ops).await;
    let glass =
        app.raw_sql("SELECT user_id FROM audit_log WHERE type = 'login.break_glass' ORDER BY seq").await;
    assert_eq!(glass, vec![alice.id.as_str().to_string(), ops.id.clone()]);
    let refused = app.raw_sql("SELECT data FROM audit_log WHERE type = 'login.failed'").await;
    assert_eq!(refused.iter().filter(|d| d.contains("sso_required")).count(), 3, "{refused:?}");
    // Someone in no such enterprise is untouched.
    app.login(&outsider).await;
}

#[tokio::test]
async fn an_admin_links_their_account_from_a_signed_in_session_only() {
    let (app, _provider, enterprise, _) = enterprise_with_provider().await;
    // Alice, an admin, signs in to the console with her password, and links from Security.
    let http = browser();
    let form = [("email", "alice@example.com"), ("password", PASSWORD), ("otp", "000000")];
    let res = http.post(app.url("/console/login")).form(&form).send().await.unwrap();
    let mut console = Jar::default();
    console.take(&res);
    let page =
        http.get(app.url("/console/security")).header(header::COOKIE, console.header()).send().await.unwrap();
    let page = page.text().await.unwrap();
    assert!(page.contains("sso-link-panel"), "the Security page offers the link");
    let marker = "name=\"csrf\" value=\"";
    let at = page.find(marker).unwrap() + marker.len();
    let csrf = &page[at..at + page[at..].find('"').unwrap()];
    let link = [("csrf", csrf), ("enterprise", enterprise.as_str())];
    let post_link = || {
        http.post(app.url("/console/sso/link")).header(header::COOKIE, console.header()).form(&link).send()
    };
    let (callback, ours) = at_provider(&app, post_link().await.unwrap(), "alice-sub").await;
    let out = finish(&callback, &ours).await;
    assert!(out.session.is_some(), "{}", out.page);
    let linked = app.raw_sql("SELECT user_id || ' ' || subject FROM sso_identities").await;
    let alice =
        app.state.store.user_by_email(&custodian::types::Email::parse("alice@example.com").unwrap()).await;
    assert_eq!(linked, vec![format!("{} alice-sub", alice.unwrap().unwrap().id.as_str())]);
    let audit = app.raw_sql("SELECT data FROM audit_log WHERE type = 'sso.identity_linked'").await;
    assert!(audit.len() == 1 && audit[0].contains("signed-in session"), "{audit:?}");
    // From now on she signs in through the provider alone.
    let again = sign_in(&app, &enterprise, "alice-sub").await;
    assert!(again.session.is_some(), "{}", again.page);
    // Carol's person at the provider cannot be linked to Alice as well: it is Carol's.
    let carol = sign_in(&app, "carol@example.com", "carol-sub").await;
    assert!(carol.session.is_some(), "{}", carol.page);
    let (callback, ours) = at_provider(&app, post_link().await.unwrap(), "carol-sub").await;
    let out = finish(&callback, &ours).await;
    assert_eq!(out.status, 403, "{}", out.page);
    assert!(out.page.contains("linked to another account"), "{}", out.page);
    // Without a session, the link form is not there.
    let res =
        http.post(app.url("/console/sso/link")).form(&[("enterprise", enterprise.as_str())]).send().await;
    assert_ne!(res.unwrap().status(), 200);
}

#[tokio::test]
async fn rotated_keys_are_followed_and_an_expired_token_or_a_wrong_issuer_is_refused() {
    let (app, mut provider, enterprise, alice_token) =
        enterprise_with_provider_and(|c| c.sso.login_ttl = 3600).await;
    let jwks = |issuer: String| async move {
        let keys: Value = browser().get(format!("{issuer}/jwks")).send().await.unwrap().json().await.unwrap();
        keys["keys"][0]["kid"].as_str().unwrap().to_string()
    };
    let first = sign_in(&app, &enterprise, "carol-sub").await;
    assert!(first.session.is_some(), "{}", first.page);
    // The provider rotates its signing key: the next sign-in reads the new one.
    let before = jwks(provider.issuer.clone()).await;
    provider.restart().await;
    assert_ne!(jwks(provider.issuer.clone()).await, before);
    let rotated = sign_in(&app, &enterprise, "carol-sub").await;
    assert!(rotated.session.is_some(), "{}", rotated.page);
    // An id_token past its exp (1,800 s) when it comes back is refused, by the service's clock.
    let (callback, ours) = reach_callback(&app, &enterprise, "carol-sub").await;
    app.state.store.clock().advance(std::time::Duration::from_secs(1900));
    let late = finish(&callback, &ours).await;
    assert_eq!(late.status, 401, "{}", late.page);
    assert!(late.page.contains("does not verify"), "{}", late.page);
    // A provider whose discovery document names another issuer is refused at the start.
    let path = format!("/api/v2/enterprise/{enterprise}/oauthSetting");
    let other = provider.issuer.replace("127.0.0.1", "localhost");
    let setting = json!({ "oauthProvider": "oidc", "issuer": other, "clientId": "custodian", "clientSecret": "s3cret" });
    expect_json(app.put_auth(&path, &alice_token, &setting).await, 200).await;
    let http = browser();
    let res = http.post(app.url("/console/sso")).form(&[("who", enterprise.as_str())]).send().await.unwrap();
    assert_eq!(res.status(), 401);
    assert!(res.text().await.unwrap().contains("discovery"));
    assert!(failed_sso_logins(&app).await.last().unwrap().contains("discovery"), "audited");
}

#[tokio::test]
async fn provisioning_makes_a_member_of_that_enterprise_only_and_is_off_by_default() {
    let (app, provider, enterprise, alice_token) = enterprise_with_provider().await;
    provider.write(json!({
        "frank-sub": { "email": "frank@example.com", "email_verified": true, "groups": ["custody"] },
        "gina-sub": { "email": "gina@example.com", "email_verified": false, "groups": ["custody"] },
    }));
    // Off by default: a person no account has is refused, and nothing is made.
    let out = sign_in(&app, &enterprise, "frank-sub").await;
    assert_eq!(out.status, 403, "{}", out.page);
    assert!(out.page.contains("no account has your email"), "{}", out.page);
    // On: Frank's verified email makes an account, a member of this enterprise alone.
    let path = format!("/api/v2/enterprise/{enterprise}/oauthSetting");
    let mut setting = expect_json(app.get_auth(&path, &alice_token).await, 200).await;
    (setting["clientSecret"], setting["provisioning"]) = (json!("s3cret"), json!(true));
    expect_json(app.put_auth(&path, &alice_token, &setting).await, 200).await;
    let out = sign_in(&app, &enterprise, "frank-sub").await;
    assert!(out.session.is_some(), "{}", out.page);
    // His authenticator key is shown on this first page, once: he needs its codes for tokens.
    assert!(out.page.contains("id=\"totp-secret\"") && out.page.contains("otpauth://totp/"), "{}", out.page);
    assert!(
        out.page.contains("frank%40example.com") || out.page.contains("frank@example.com"),
        "{}",
        out.page
    );
    assert!(!out.page.contains("http-equiv=\"refresh\""), "the page waits for him");
    let again = sign_in(&app, &enterprise, "frank-sub").await;
    assert!(again.session.is_some() && !again.page.contains("totp-secret"), "{}", again.page);
    let frank =
        app.state.store.user_by_email(&custodian::types::Email::parse("frank@example.com").unwrap()).await;
    let frank = frank.unwrap().expect("an account for Frank");
    let ms = app.state.store.memberships(&frank.id).await.unwrap();
    assert_eq!(
        ms.iter().map(|m| (m.enterprise.id.as_str().to_string(), m.is_admin)).collect::<Vec<_>>(),
        [(enterprise.clone(), false)]
    );
    let made = app.raw_sql("SELECT data FROM audit_log WHERE type = 'user.created'").await;
    assert!(made.iter().any(|d| d.contains("frank@example.com") && d.contains("\"by\":\"sso\"")), "{made:?}");
    // Nobody knows his password: it does not sign him in.
    assert_ne!(app.login_raw("frank@example.com", PASSWORD, "000000").await.status(), 200);
    // An unverified email makes nothing.
    let out = sign_in(&app, &enterprise, "gina-sub").await;
    assert_eq!(out.status, 403, "{}", out.page);
    assert!(app
        .state
        .store
        .user_by_email(&custodian::types::Email::parse("gina@example.com").unwrap())
        .await
        .unwrap()
        .is_none());
}

#[tokio::test]
async fn a_provider_at_a_private_address_is_not_called_unless_allowed() {
    let (app, _provider, enterprise, _) =
        enterprise_with_provider_and(|c| c.delivery.allowed_cidrs.clear()).await;
    let http = browser();
    let res = http.post(app.url("/console/sso")).form(&[("who", enterprise.as_str())]).send().await.unwrap();
    assert_eq!(res.status(), 401);
    let page = res.text().await.unwrap();
    assert!(page.contains("discovery") && page.contains("SSRF guard"), "{page}");
    assert!(app.raw_sql("SELECT state_hash FROM sso_logins").await.is_empty());
}

#[tokio::test]
async fn two_enterprises_sign_in_through_two_providers_at_once_and_email_may_come_from_userinfo() {
    let (app, provider, acme, _) = enterprise_with_provider().await;
    // Beta's provider puts email and groups at userinfo only, not in the id_token; its people
    // have the same subs as Acme's provider's, which must not matter.
    let bob = app.create_user("bob@example.com").await;
    let beta = app.create_enterprise("Beta", &[(&bob, true)]).await;
    let dan = app.create_user("dan@example.com").await;
    let dan_id: custodian::types::UserId = dan.id.parse().unwrap();
    let beta_id: custodian::types::EnterpriseId = beta.parse().unwrap();
    app.state.store.upsert_membership(&beta_id, &dan_id, false, &[]).await.unwrap();
    let second = Provider::start_with(
        &app,
        json!({ "carol-sub": { "email": "dan@example.com", "email_verified": true, "groups": [] } }),
        json!({ "conformIdTokenClaims": true }),
    );
    assert_ne!(second.issuer, provider.issuer);
    let bob_token = app.login(&bob).await;
    let setting = json!({ "oauthProvider": "oidc", "issuer": second.issuer, "clientId": "custodian", "clientSecret": "s3cret" });
    expect_json(
        app.put_auth(&format!("/api/v2/enterprise/{beta}/oauthSetting"), &bob_token, &setting).await,
        200,
    )
    .await;
    let (a, b) = tokio::join!(sign_in(&app, &acme, "carol-sub"), sign_in(&app, &beta, "carol-sub"));
    assert!(a.session.is_some(), "{}", a.page);
    assert!(b.session.is_some(), "{}", b.page);
    let me = expect_json(app.me(b.session.as_deref().unwrap()).await, 200).await;
    assert_eq!(me["user"]["id"], dan.id.as_str(), "Beta's carol-sub is Dan, by the email userinfo gave");
    let me = expect_json(app.me(a.session.as_deref().unwrap()).await, 200).await;
    assert_eq!(me["user"]["username"], "carol@example.com");
    let linked =
        app.raw_sql("SELECT issuer FROM sso_identities WHERE subject = 'carol-sub' ORDER BY issuer").await;
    assert_eq!(linked.len(), 2, "one person per issuer: {linked:?}");
}

/// The `login.failed` entries of SSO sign-ins: their `error`s.
async fn failed_sso_logins(app: &TestApp) -> Vec<String> {
    let rows = app.raw_sql("SELECT data FROM audit_log WHERE type = 'login.failed' ORDER BY seq").await;
    rows.iter()
        .map(|d| serde_json::from_str::<Value>(d).unwrap())
        .filter(|d| d["reason"] == "sso")
        .map(|d| d["error"].as_str().unwrap_or_default().to_string())
        .collect()
}

#[tokio::test]
async fn a_hostile_provider_s_forged_unsigned_replayed_or_endless_answer_is_refused_and_audited() {
    let (app, provider, enterprise, _) = enterprise_with_provider().await;
    // A sign-in that works, whose id_token the provider keeps to replay.
    let honest = sign_in(&app, &enterprise, "carol-sub").await;
    assert!(honest.session.is_some(), "{}", honest.page);
    let cases = [
        // Carol's token made out to Alice, Carol's signature kept.
        (json!("forge"), "does not verify"),
        // The signature stripped and alg none.
        (json!("none"), "does not verify"),
        // The previous sign-in's id_token: signed, unexpired, but its nonce is another's.
        (json!("replay"), "nonce"),
        // An answer past sso.max_answer_bytes (1 MiB): cut off, not held.
        (json!("huge"), "sso.max_answer_bytes"),
    ];
    provider.set("forgeSub", json!("alice-sub"));
    for (n, (tamper, says)) in cases.into_iter().enumerate() {
        provider.set("tamper", tamper.clone());
        let out = sign_in(&app, &enterprise, "carol-sub").await;
        assert_eq!(out.status, 401, "{tamper}: {}", out.page);
        assert!(out.session.is_none(), "{tamper}");
        assert!(out.page.contains(says), "{tamper}: {}", out.page);
        let failed = failed_sso_logins(&app).await;
        assert_eq!(failed.len(), n + 1, "{failed:?}");
        assert!(failed[n].contains(says), "{tamper}: {failed:?}");
    }
    // The replayed token's callback cannot be used again either: its state is spent.
    provider.set("tamper", Value::Null);
    let (callback, ours) = reach_callback(&app, &enterprise, "carol-sub").await;
    assert!(finish(&callback, &ours).await.session.is_some());
    let again = finish(&callback, &ours).await;
    assert_eq!(again.status, 401, "{}", again.page);
    assert!(again.page.contains("used already"), "{}", again.page);
    // A callback whose state was changed on the way matches no sign-in.
    let (callback, ours) = reach_callback(&app, &enterprise, "carol-sub").await;
    let changed = callback.replacen("state=", "state=x", 1);
    let out = finish(&changed, &ours).await;
    assert!(out.status == 401 && out.page.contains("unknown"), "{}", out.page);
    assert!(failed_sso_logins(&app).await.last().unwrap().contains("unknown"));
    // Alice was never signed in by any of it.
    let alice = app.raw_sql("SELECT subject FROM sso_identities WHERE subject = 'alice-sub'").await;
    assert!(alice.is_empty(), "{alice:?}");
}

#[tokio::test]
async fn a_person_removed_from_the_group_or_disabled_at_the_provider_cannot_sign_in_again() {
    let (app, provider, enterprise, _) = enterprise_with_provider().await;
    let carol = sign_in(&app, &enterprise, "carol-sub").await;
    assert!(carol.session.is_some(), "{}", carol.page);
    // Out of every mapped group: linked, but refused.
    provider.write(
        json!({ "carol-sub": { "email": "carol@example.com", "email_verified": true, "groups": ["sales"] } }),
    );
    let out = sign_in(&app, &enterprise, "carol-sub").await;
    assert_eq!(out.status, 403, "{}", out.page);
    assert!(out.session.is_none());
    assert!(failed_sso_logins(&app).await.last().unwrap().contains("group"), "{}", out.page);
    // Disabled at the provider: it signs her in no more, so no callback reaches Custodian.
    provider.write(json!({ "carol-sub": { "email": "carol@example.com", "email_verified": true, "groups": ["custody"], "disabled": true } }));
    let http = browser();
    let res = http.post(app.url("/console/sso")).form(&[("who", enterprise.as_str())]).send().await.unwrap();
    let refused = log_in_at_provider(&app, res, "carol-sub").await.err().expect("refused at the provider");
    assert_eq!(refused.0, 403, "{}", refused.1);
    // Enabled again, she signs in: the refusal was the provider's.
    provider.write(json!({ "carol-sub": { "email": "carol@example.com", "email_verified": true, "groups": ["custody"] } }));
    assert!(sign_in(&app, &enterprise, "carol-sub").await.session.is_some());
}
