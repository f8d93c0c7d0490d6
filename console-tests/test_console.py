"""The operator console in a real browser (docs/decisions.md#the-operator-console): headless Chromium driven by Playwright,
against the real server that run.sh started, with real receivers on this machine.

Each test signs in through the console's form. API calls (to create webhooks, send events and
check what the console did) go over HTTP with tokens from the API's own login.
"""

import base64
import hashlib
import http.server
import json
import os
import re
import subprocess
import threading
import time
import urllib.error
import urllib.request

import pyotp
import pytest
from playwright.sync_api import expect, sync_playwright

FIXTURE = json.load(open(os.environ["CONSOLE_FIXTURE"]))
BASE = FIXTURE["url"]
PASSWORD = FIXTURE["password"]
SHOTS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "screenshots")
CHROMIUM = os.environ.get("CONSOLE_CHROMIUM", "/usr/bin/chromium")
HOSTILE = '<script>window.__pwned=1</script>"><img src=x onerror="window.__pwned=2">'
# The test environment accepts this code besides the real one (never in production).
TEST_OTP = "000000"


def email(who):
    return FIXTURE["users"][who]["email"]


# ----- HTTP helpers -----


def api(method, path, token=None, body=None, headers=None):
    """(status, parsed JSON body or text) of an API call."""
    data = None if body is None else json.dumps(body).encode()
    req = urllib.request.Request(BASE + path, data=data, method=method)
    if body is not None:
        req.add_header("Content-Type", "application/json")
    if token:
        req.add_header("Authorization", "Bearer " + token)
    for k, v in (headers or {}).items():
        req.add_header(k, v)
    try:
        with urllib.request.urlopen(req, timeout=10) as res:
            raw, status = res.read(), res.status
    except urllib.error.HTTPError as e:
        raw, status = e.read(), e.code
    try:
        return status, json.loads(raw)
    except ValueError:
        return status, raw.decode(errors="replace")


def api_login(who):
    status, body = api("POST", "/api/v2/internal/user/login", body={"email": email(who), "password": PASSWORD, "otp": TEST_OTP})
    assert status == 200, body
    return body["access_token"]


def service_token():
    """A service admin's session: it may send events (POST /api/v2/internal/events)."""
    return api_login("root")


def wait_for(what, check, timeout=20.0):
    deadline = time.time() + timeout
    while time.time() < deadline:
        value = check()
        if value:
            return value
        time.sleep(0.2)
    raise AssertionError(f"timed out waiting for {what}")


class Receiver:
    """A webhook receiver on 127.0.0.1 answering `status` with `body`; records what it got."""

    def __init__(self, status=500, body=""):
        self.status, self.body, self.received = status, body, []
        receiver = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_POST(self):
                length = int(self.headers.get("Content-Length", "0"))
                receiver.received.append(json.loads(self.rfile.read(length) or b"{}"))
                payload = receiver.body.encode()
                self.send_response(receiver.status)
                self.send_header("Content-Type", "text/html")
                self.send_header("Content-Length", str(len(payload)))
                self.end_headers()
                self.wfile.write(payload)

            def log_message(self, *args):
                pass

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/hooks/custodian"

    def close(self):
        self.server.shutdown()


def wallet_hook(token, wallet, url, label="deposits"):
    status, body = api("POST", f"/api/v2/tbtc/wallet/{wallet}/webhooks", token, {"type": "transfer", "url": url, "label": label})
    assert status == 200, body
    return body["id"]


def send_event(wallet, transfer, **extra):
    event = {"eventId": f"ev-{transfer}", "type": "transfer", "coin": "tbtc", "walletId": wallet, "transferId": transfer, **extra}
    status, body = api("POST", "/api/v2/internal/events", service_token(), event)
    assert status == 200, body
    return body


def notifications(token, hook, state=None):
    query = f"?state={state}" if state else ""
    status, body = api("GET", f"/api/v2/webhook/{hook}/notifications{query}", token)
    assert status == 200, body
    return body["notifications"]


# ----- browser fixtures -----


@pytest.fixture(scope="session")
def browser():
    with sync_playwright() as p:
        b = p.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox"])
        yield b
        b.close()


@pytest.fixture
def context(browser):
    ctx = browser.new_context(viewport={"width": 1280, "height": 800})
    yield ctx
    ctx.close()


def sign_in(context, who, code=TEST_OTP, base=BASE, page=None):
    """`who` signs in with password and code at `base`, on `page` or a new one."""
    if page is None:
        page = context.new_page()
        page.on("dialog", lambda d: d.accept())
    page.goto(base + "/console/login")
    page.fill("#email", email(who))
    page.fill("#password", PASSWORD)
    page.fill("#otp", code)
    page.click("form[action='/console/login'] button[type=submit]")
    expect(page).to_have_url(re.compile(r"/console/overview$"))
    return page


def shot(page, name):
    page.screenshot(path=os.path.join(SHOTS, f"{name}.png"), full_page=True)


def not_pwned(page):
    assert page.evaluate("() => window.__pwned") is None, "client text ran as script"


def csrf_of(page):
    return page.locator("input[name=csrf]").first.get_attribute("value")


def sign_in_with_authenticator(context, page, local, who):
    """Chromium's virtual authenticator (CDP WebAuthn domain, user verification) on `page`, then
    `who` signs in with password and code at `local` (passkeys are bound to a host name)."""
    cdp = context.new_cdp_session(page)
    cdp.send("WebAuthn.enable")
    cdp.send("WebAuthn.addVirtualAuthenticator", {"options": {
        "protocol": "ctap2", "transport": "internal", "hasResidentKey": True,
        "hasUserVerification": True, "isUserVerified": True, "automaticPresenceSimulation": True}})
    sign_in(context, who, base=local, page=page)


# ----- the cases -----


def test_sign_in_needs_the_current_totp_code(context):
    secret = FIXTURE["users"]["alice"]["totpSecret"]
    totp = pyotp.TOTP(secret)
    now = time.time()
    taken = {totp.at(now + d) for d in (-60, -30, 0, 30, 60)} | {TEST_OTP}
    wrong = next(c for c in (f"{n:06d}" for n in range(123456, 999999, 7919)) if c not in taken)
    page = context.new_page()
    page.goto(BASE + "/console/login")
    shot(page, "login")
    page.fill("#email", email("alice"))
    page.fill("#password", PASSWORD)
    page.fill("#otp", wrong)
    with page.expect_response(lambda r: r.url.endswith("/console/login") and r.request.method == "POST") as res:
        page.click("button[type=submit]")
    assert res.value.status == 401
    expect(page.locator(".alert.error, .field-error").first).to_contain_text("InvalidOtp")
    assert context.cookies() == [] or all(c["name"] != "custodian_console" for c in context.cookies())
    page.fill("#password", PASSWORD)
    page.fill("#otp", totp.now())
    page.click("button[type=submit]")
    expect(page).to_have_url(re.compile(r"/console/overview$"))
    cookie = next(c for c in context.cookies() if c["name"] == "custodian_console")
    assert cookie["httpOnly"] and cookie["sameSite"] == "Strict"
    expect(page.locator("header .email")).to_have_text(email("alice"))
    # Signing out revokes the session: the old cookie no longer opens a page.
    page.click("text=Sign out")
    expect(page).to_have_url(re.compile(r"/console/login$"))
    context.add_cookies([{**cookie}])
    page.goto(BASE + "/console/overview")
    expect(page).to_have_url(re.compile(r"/console/login$"))


def test_the_readme_pictures_show_a_realistic_failure(context):
    """The pictures of README and docs/console.md (copied from screenshots/readme-*.png by
    hand after `console-tests/run.sh <binary> -k readme`): a receiver whose ledger is down."""
    rx = Receiver(503, '{"error": "ledger database unavailable", "retryAfter": 30}')
    try:
        alice = api_login("alice")
        wallet = FIXTURE["wallets"]["acme"]
        hook = wallet_hook(alice, wallet, rx.url, label="deposits")
        transfer = f"tr-{int(time.time() * 1000)}-readme"
        send_event(wallet, transfer)
        failed = wait_for("the notification to fail", lambda: notifications(alice, hook, "failed"))
        page = sign_in(context, "alice")
        expect(page.locator("#failures")).to_contain_text("ledger database unavailable")
        shot(page, "readme-overview")
        page.goto(f"{BASE}/console/webhooks/{hook}/notifications/{failed[0]['id']}")
        expect(page.locator("#attempts")).to_contain_text("status 503")
        shot(page, "readme-notification")
    finally:
        rx.close()


def test_a_failed_receiver_is_found_fixed_resent_and_recovered(context):
    rx = Receiver(500, HOSTILE + " receiver is down")
    try:
        alice = api_login("alice")
        wallet = FIXTURE["wallets"]["acme"]
        hook = wallet_hook(alice, wallet, rx.url, label=HOSTILE)
        first = f"tr-{int(time.time() * 1000)}"
        send_event(wallet, first, memo=HOSTILE)
        failed = wait_for("the first notification to fail", lambda: notifications(alice, hook, "failed"))
        nid = failed[0]["id"]

        page = sign_in(context, "alice")
        expect(page.locator("#failures")).to_contain_text("500")
        expect(page.locator("#failures")).to_contain_text("receiver is down")
        expect(page.locator("#card-failed .value")).not_to_have_text("0")
        expect(page.locator("svg.chart")).to_be_visible()
        not_pwned(page)
        shot(page, "overview")

        page.goto(BASE + "/console/webhooks?level=wallet")
        row = page.locator("#webhooks tr", has=page.locator(f"a[href$='{hook}']"))
        expect(row).to_contain_text("never")  # never delivered...
        expect(row).to_contain_text(re.compile(r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\dZ"))  # ...but failed at a time
        page.goto(BASE + "/console/overview")
        # The wallet has the readme test's webhook too, failing at about the same time: this
        # notification's own row.
        page.locator(f"#failures a[href$='/notifications/{nid}']", has_text="Details").first.click()
        expect(page).to_have_url(re.compile(rf"/notifications/{nid}$"))
        expect(page.locator("#attempts")).to_contain_text("status 500")
        expect(page.locator("#attempts pre.response").first).to_contain_text("<script>window.__pwned=1</script>")
        expect(page.locator("#notification-state")).to_contain_text("failed")
        expect(page.locator("pre.payload").first).to_contain_text(first)
        not_pwned(page)
        shot(page, "notification")

        # The receiver is fixed: resend this one.
        rx.status, rx.body = 200, "ok"
        page.click("text=Resend now")
        expect(page.locator(".alert.ok")).to_contain_text("Queued")
        wait_for("the resend to arrive", lambda: sum(1 for r in rx.received if r.get("transferId") == first) >= 3)
        # Reload by address: a reload of the resend's answer would post the form again.
        detail = f"{BASE}/console/webhooks/{hook}/notifications/{nid}"
        wait_for("the state to read processed", lambda: page.goto(detail) and "processed" in page.locator("#notification-state").inner_text())

        # A second failure, recovered from the webhook's page.
        rx.status, rx.body = 500, "down again"
        second = f"tr-{int(time.time() * 1000)}-2"
        send_event(wallet, second)
        wait_for("the second notification to fail", lambda: notifications(alice, hook, "failed"))
        rx.status, rx.body = 200, "ok"
        page.goto(f"{BASE}/console/webhooks/{hook}")
        expect(page.locator("#webhook-url")).to_have_text(rx.url)
        not_pwned(page)
        shot(page, "webhook")
        page.click("text=Count and confirm")
        expect(page.locator("#recover-count")).to_contain_text("1 failed notification")
        shot(page, "recover")
        page.click("button:has-text('Recover 1')")
        expect(page.locator(".alert.ok")).to_contain_text("Recovered: 1 notification")
        wait_for("the recovered one to arrive", lambda: sum(1 for r in rx.received if r.get("transferId") == second) >= 3)
        wait_for("nothing left failed", lambda: not notifications(alice, hook, "failed"))
        page.goto(f"{BASE}/console/notifications?webhook={hook}&state=processed")
        expect(page.locator("#results tbody tr")).to_have_count(2)
        expect(page.locator("#results")).to_contain_text("processed")
        shot(page, "notifications")
        status, audit = api("GET", "/api/v2/auditlog?type=webhook.recovered", alice)
        assert status == 200 and audit["auditLogs"][0]["data"]["count"] == 1, audit
    finally:
        rx.close()


def test_revoking_a_token_in_the_console_makes_the_api_refuse_it(context):
    alice = api_login("alice")
    status, created = api("POST", "/api/v2/user/accesstoken", alice, {"label": "nightly script", "otp": TEST_OTP, "scope": ["openid", "profile"]})
    assert status == 200, created
    script = created["token"]
    assert api("GET", "/api/v2/user/me", script)[0] == 200
    page = sign_in(context, "alice")
    page.goto(BASE + "/console/tokens")
    row = page.locator("#tokens tr", has_text="nightly script")
    row.locator("button", has_text="Revoke").click()
    expect(page.locator(".alert.ok")).to_contain_text("revoked")
    assert api("GET", "/api/v2/user/me", script)[0] == 401

    # Creating one shows its value once.
    page.fill("#label", "console made")
    page.fill("#scope", "openid profile")
    page.fill("#token-otp", TEST_OTP)
    page.click("button:has-text('Create token')")
    value = page.locator("#new-token").inner_text().strip()
    expect(page.locator("#new-token-box")).to_contain_text("won't be able to see it again")
    expect(page.locator("button[data-copy=new-token]")).to_be_visible()
    assert api("GET", "/api/v2/user/me", value)[0] == 200
    shot(page, "tokens")
    page.goto(BASE + "/console/tokens")
    assert value not in page.content()
    # A bad scope is shown beside its field, with a 400 and nothing created.
    page.fill("#scope", "no_such_scope")
    page.fill("#token-otp", TEST_OTP)
    with page.expect_response(lambda r: r.url.endswith("/console/tokens") and r.request.method == "POST") as res:
        page.click("button:has-text('Create token')")
    assert res.value.status == 400
    expect(page.locator(".field-error, .alert.error").first).to_be_visible()


def test_rotating_the_enterprise_secret_shows_it_once(context):
    rx = Receiver(200, "ok")
    try:
        alice = api_login("alice")
        hook = wallet_hook(alice, FIXTURE["wallets"]["acme"], rx.url, label="rotation")
        page = sign_in(context, "alice")
        page.goto(f"{BASE}/console/webhooks/{hook}")
        page.click("button:has-text('Rotate enterprise secret')")
        secret = page.locator("#new-secret").inner_text().strip()
        assert secret.startswith("whsec_"), secret
        expect(page.locator("#new-secret-box")).to_contain_text("shown only once")
        page.goto(f"{BASE}/console/webhooks/{hook}")
        assert secret not in page.content()
        expect(page.locator("#new-secret")).to_have_count(0)
    finally:
        rx.close()


def test_an_enterprise_admin_sees_only_their_enterprises(context):
    rx = Receiver(200, "ok")
    try:
        bob = api_login("bob")
        beta_wallet = FIXTURE["wallets"]["beta"]
        hook = wallet_hook(bob, beta_wallet, rx.url, label="beta deposits")
        send_event(beta_wallet, f"tr-beta-{int(time.time() * 1000)}")
        nid = wait_for("bob's notification", lambda: notifications(bob, hook))[0]["id"]

        page = sign_in(context, "alice")
        page.goto(BASE + "/console/webhooks")
        assert hook not in page.content()
        for path in (f"/console/webhooks/{hook}", f"/console/webhooks/{hook}/notifications/{nid}"):
            res = page.goto(BASE + path)
            assert res.status == 404, path
            expect(page.locator(".alert.error")).to_contain_text("NotFound")
        page.goto(f"{BASE}/console/notifications?webhook={hook}&range=7d")
        expect(page.locator("#results tbody tr")).to_have_count(0)
        res = page.goto(BASE + "/console/admin/users")
        assert res.status == 403
        expect(page.locator("header nav")).not_to_contain_text("Users")

        root = context.browser.new_context(viewport={"width": 1280, "height": 800})
        try:
            admin = sign_in(root, "root")
            admin.goto(BASE + "/console/webhooks")
            expect(admin.locator("#webhooks")).to_contain_text("beta deposits")
            shot(admin, "webhooks")
            admin.goto(BASE + "/console/admin/users")
            expect(admin.locator("#users")).to_contain_text(email("bob"))
            shot(admin, "users")
            admin.goto(BASE + "/console/admin/enterprises")
            expect(admin.locator("main")).to_contain_text("Beta Capital")
            shot(admin, "enterprises")
            admin.goto(BASE + "/console/audit")
            admin.click("button:has-text('Verify chain')")
            expect(admin.locator("#verify-result")).to_contain_text(re.compile(r"ok, \d+ entries"))
            shot(admin, "audit")
        finally:
            root.close()
    finally:
        rx.close()


def test_a_post_without_the_csrf_token_or_from_another_origin_is_refused(context):
    rx = Receiver(200, "ok")
    try:
        alice = api_login("alice")
        hook = wallet_hook(alice, FIXTURE["wallets"]["acme"], rx.url, label="csrf")
        page = sign_in(context, "alice")
        page.goto(f"{BASE}/console/webhooks/{hook}")
        token = csrf_of(page)
        url = f"{BASE}/console/webhooks/{hook}/test"
        origin = {"Origin": BASE}
        form = {"Content-Type": "application/x-www-form-urlencoded"}
        missing = context.request.post(url, data="", headers={**form, **origin})
        assert missing.status == 403 and "InvalidCsrfToken" in missing.text()
        wrong = context.request.post(url, data="csrf=" + "0" * 64, headers={**form, **origin})
        assert wrong.status == 403
        foreign = context.request.post(url, data="csrf=" + token, headers={**form, "Origin": "http://evil.example"})
        assert foreign.status == 403 and "CrossOriginRequest" in foreign.text()
        assert notifications(alice, hook) == []
        # The same request from this origin with the token is accepted: the refusals above were
        # about the token and the origin, nothing else.
        ok = context.request.post(url, data="csrf=" + token, headers={**form, **origin})
        assert ok.status == 200 and "queued" in ok.text()
        assert len(notifications(alice, hook)) == 1
    finally:
        rx.close()


def test_client_text_renders_as_text_and_the_csp_blocks_inline_script(context):
    alice = api_login("alice")
    url = "http://127.0.0.1:9/hooks?x=%22%3E%3Cimg%20src%3Dx%20onerror%3Dalert(1)%3E"
    status, body = api(
        "POST",
        f"/api/v2/tbtc/wallet/{FIXTURE['wallets']['acme']}/webhooks",
        alice,
        {"type": "transfer", "url": url, "label": HOSTILE, "customHttpHeaders": {"X-Evil-Header": HOSTILE}},
    )
    assert status == 200, body
    hook = body["id"]
    page = sign_in(context, "alice")
    res = page.goto(f"{BASE}/console/webhooks/{hook}")
    csp = res.headers["content-security-policy"]
    assert "script-src 'self'" in csp and "unsafe-inline" not in csp
    assert res.headers["x-frame-options"] == "DENY" and res.headers["referrer-policy"]
    expect(page.locator("h1")).to_contain_text("<script>window.__pwned=1</script>")
    expect(page.locator("#custom-headers")).to_contain_text("X-Evil-Header")
    assert "<script>window.__pwned" not in page.content()
    assert page.locator("img[src=x]").count() == 0
    not_pwned(page)
    ran = page.evaluate(
        "() => { const s = document.createElement('script'); s.textContent = 'window.__inline = 1';"
        " document.body.appendChild(s); return window.__inline === undefined ? null : window.__inline; }"
    )
    assert ran is None, "the CSP let an inline script run"
    page.goto(BASE + "/console/webhooks")
    not_pwned(page)


def test_pages_fit_a_phone_width_screen(browser):
    ctx = browser.new_context(viewport={"width": 390, "height": 844})
    try:
        page = sign_in(ctx, "alice")
        for path in ("/console/overview", "/console/webhooks", "/console/notifications", "/console/tokens", "/console/audit"):
            page.goto(BASE + path)
            width = page.evaluate("() => document.documentElement.scrollWidth")
            assert width <= 392, f"{path} is {width}px wide at phone width"
        page.goto(BASE + "/console/overview")
        shot(page, "overview-phone")
    finally:
        ctx.close()


def test_service_admins_manage_users_and_anyone_removes_their_webhook(context):
    root = sign_in(context, "root")
    root.goto(BASE + "/console/admin/users")
    row = lambda: root.locator("#users tr", has_text=email("bob"))  # noqa: E731
    row().locator("button", has_text="Reset OTP").click()
    secret = root.locator("#new-otp-secret").inner_text().strip()
    assert re.fullmatch(r"[A-Z2-7]{16,}", secret), secret
    row().locator("button", has_text="Deactivate").click()
    expect(root.locator(".alert.ok")).to_contain_text("deactivated")
    status, _ = api("POST", "/api/v2/internal/user/login", body={"email": email("bob"), "password": PASSWORD, "otp": TEST_OTP})
    assert status == 401
    row().locator("button", has_text="Activate").click()
    expect(root.locator(".alert.ok")).to_contain_text("may sign in again")
    assert api_login("bob")
    status, audit = api("GET", "/api/v2/auditlog?type=user.deactivated", api_login("root"))
    assert status == 200 and audit["auditLogs"][0]["data"]["by"] == "console", audit

    alice = api_login("alice")
    hook = wallet_hook(alice, FIXTURE["wallets"]["acme"], "http://127.0.0.1:9/gone", label="to remove")
    page = context.browser.new_context(viewport={"width": 1280, "height": 800})
    try:
        mine = sign_in(page, "alice")
        mine.goto(f"{BASE}/console/webhooks/{hook}")
        mine.click("button:has-text('Remove webhook')")
        expect(mine).to_have_url(re.compile(r"/console/webhooks$"))
        status, listed = api("GET", f"/api/v2/tbtc/wallet/{FIXTURE['wallets']['acme']}/webhooks", alice)
        assert status == 200 and all(w["id"] != hook for w in listed["webhooks"]), listed
    finally:
        page.close()


def test_a_passkey_added_on_the_security_page_signs_in_stands_for_a_code_and_is_removed(context):
    """Chromium's virtual authenticator (CDP WebAuthn domain) with user verification."""
    local = BASE.replace("127.0.0.1", "localhost")
    page = context.new_page()
    page.on("dialog", lambda d: d.accept())
    sign_in_with_authenticator(context, page, local, "carol")

    page.goto(local + "/console/security")
    expect(page.locator("#no-passkeys")).to_be_visible()
    page.fill("#passkey-label", "virtual laptop")
    page.fill("#passkey-otp", TEST_OTP)
    page.click("#passkey-add button[type=submit]")
    expect(page.locator(".alert.ok")).to_contain_text("Passkey added: virtual laptop")
    expect(page.locator("#passkeys tbody tr")).to_have_count(1)
    shot(page, "security")

    # A token made with the passkey in place of the code.
    page.goto(local + "/console/tokens")
    page.fill("#label", "made with a passkey")
    page.fill("#scope", "openid profile wallet_view_all")
    page.click("button[data-passkey-otp]")
    expect(page.locator("button[data-passkey-otp]")).to_have_text("Passkey ready")
    page.click("form[action='/console/tokens'] button[type=submit]")
    expect(page.locator("#new-token")).to_contain_text("v2x")

    # Signed out, the passkey alone signs back in (no email: a discoverable credential).
    page.click("text=Sign out")
    expect(page).to_have_url(re.compile(r"/console/login$"))
    page.click("#passkey-signin button[type=submit]")
    expect(page).to_have_url(re.compile(r"/console/overview$"))
    expect(page.locator("header .email")).to_have_text(email("carol"))
    status, audit = api("GET", "/api/v2/auditlog?type=user.passkey_added", api_login("root"))
    assert status == 200 and len(audit["auditLogs"]) == 1, audit

    # Removed with a fresh passkey assertion, it signs in no more.
    page.goto(local + "/console/security")
    row = page.locator("#passkeys tbody tr").first
    row.locator("button[data-passkey-otp]").click()
    expect(row.locator("button[data-passkey-otp]")).to_have_text("Passkey ready")
    row.locator("button", has_text="Remove").click()
    expect(page.locator(".alert.ok")).to_contain_text("Passkey removed")
    expect(page.locator("#no-passkeys")).to_be_visible()
    page.click("text=Sign out")
    with page.expect_response(lambda r: r.url.endswith("/console/login/passkey")) as res:
        page.click("#passkey-signin button[type=submit]")
    assert res.value.status == 401
    expect(page.locator(".alert.error, .field-error").first).to_contain_text("InvalidCredentials")


def test_a_service_admin_removes_a_users_passkeys(context):
    root = sign_in(context, "root")
    root.goto(BASE + "/console/admin/users")
    root.locator("#users tr", has_text=email("alice")).locator("button", has_text="Remove passkeys").click()
    expect(root.locator(".alert.ok")).to_contain_text("passkey(s) of " + email("alice") + " removed")
    status, audit = api("GET", "/api/v2/auditlog?type=user.passkeys_removed_by_admin", api_login("root"))
    assert status == 200 and audit["auditLogs"][0]["data"]["by"] == "console", audit


def test_an_application_is_allowed_denied_and_revoked(context):
    """OAuth consent in Chromium: the sign-in page, then the consent page; Allow, Deny, and the
    grant's revocation from the Security page."""
    client = FIXTURE["oauth"]
    answers = []
    page = context.new_page()
    page.on("dialog", lambda d: d.accept())
    # The application's redirect URI: the browser's visit is recorded and answered here.
    page.route("http://127.0.0.1:9/**", lambda route: (answers.append(route.request.url), route.fulfill(status=200, body="ok")))
    # PKCE (S256), which every application must use (RFC 9700 §2.1.1).
    verifier = "console-suite-pkce-verifier-of-at-least-43-characters"
    challenge = base64.urlsafe_b64encode(hashlib.sha256(verifier.encode()).digest()).rstrip(b"=").decode()
    query = (f"response_type=code&client_id={client['clientId']}&scope=profile%20wallet_view_all&state=xyz"
             f"&code_challenge={challenge}&code_challenge_method=S256")
    page.goto(f"{BASE}/oauth/authorize?{query}")
    expect(page).to_have_url(re.compile(r"/console/login\?next="))
    page.fill("#email", email("alice"))
    page.fill("#password", PASSWORD)
    page.fill("#otp", TEST_OTP)
    page.click("form[action='/console/login'] button[type=submit]")
    expect(page.locator("#consent")).to_contain_text("Ledger Sync")
    expect(page.locator("#consent-scopes")).to_contain_text("view any wallet in any of your enterprises")
    expect(page.locator("#consent")).to_contain_text("Acme Fund")
    shot(page, "oauth-consent")
    page.click("button[value=deny]")
    page.wait_for_url(re.compile(r"^http://127\.0\.0\.1:9/callback\?"))
    assert "error=access_denied" in page.url and "state=xyz" in page.url, page.url
    page.goto(f"{BASE}/oauth/authorize?{query}")
    page.click("button[value=approve]")
    page.wait_for_url(re.compile(r"^http://127\.0\.0\.1:9/callback\?code="))
    assert len(answers) == 2, answers
    code = re.search(r"code=([^&]+)", page.url).group(1)
    status, issued = api("POST", "/oauth/token", body={
        "grant_type": "authorization_code", "code": code, "code_verifier": verifier,
        "client_id": client["clientId"], "client_secret": client["clientSecret"]})
    assert status == 200, issued
    token = issued["access_token"]
    assert api("GET", "/api/v2/user/me", token)[0] == 200
    page.goto(BASE + "/console/security")
    row = page.locator("#applications tr", has_text="Ledger Sync")
    expect(row).to_contain_text("profile wallet_view_all")
    row.locator("button", has_text="Revoke").click()
    expect(page.locator(".alert.ok")).to_contain_text("Application access revoked")
    assert api("GET", "/api/v2/user/me", token)[0] == 401


def rpc(method, params):
    """A JSON-RPC call to the test's Ethereum node (anvil)."""
    body = json.dumps({"jsonrpc": "2.0", "id": 1, "method": method, "params": params}).encode()
    req = urllib.request.Request(FIXTURE["anvil"], data=body, headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=10) as res:
        answer = json.loads(res.read())
    assert "error" not in answer, answer
    return answer["result"]


def test_the_chains_page_shows_the_node_and_a_transfer_it_saw(context):
    # anvil's first dev account pays the Acme ETH wallet's base address 2 ETH; three blocks confirm it.
    sent = rpc("eth_sendTransaction", [{"from": "0xf39Fd6e51aad88F6F4ce6aB8827279cffFb92266",
                                         "to": "0x70997970C51812dc3A010C7d01b50e0d17dc79C8", "value": hex(2 * 10**18)}])
    rpc("anvil_mine", ["0x3"])
    root = sign_in(context, "root")
    root.goto(BASE + "/console/chains")
    panel = root.locator("#chain-hteth")
    expect(panel).to_be_visible()
    row = panel.locator("table.transfers tr", has_text=FIXTURE["wallets"]["eth"])
    for _ in range(50):
        if row.count() and "confirmed" in row.first.inner_text() and "unconfirmed" not in row.first.inner_text():
            break
        time.sleep(0.2)
        root.reload()
    expect(row.first).to_contain_text(str(2 * 10**18))
    expect(row.first).to_contain_text("confirmed")
    assert sent[:10] in row.first.inner_text()
    expect(panel.locator("#chain-lag .value")).to_have_text("0")
    root.screenshot(path=os.path.join(SHOTS, "chains.png"), full_page=True)
    # Chains span every tenant: an enterprise admin neither sees the entry nor opens the page.
    alice = sign_in(context.browser.new_context(), "alice")
    expect(alice.locator("nav a", has_text="Chains")).to_have_count(0)
    alice.goto(BASE + "/console/chains")
    expect(alice.locator("body")).not_to_contain_text("Latest transfers")


def test_a_wallet_page_shows_its_addresses_balances_and_transfers(context):
    # A 3 ETH payment to the Acme ETH wallet, confirmed by three blocks.
    watched = "0x70997970C51812dc3A010C7d01b50e0d17dc79C8"
    sent = rpc("eth_sendTransaction", [{"from": "0xf39Fd6e51aad88F6F4ce6aB8827279cffFb92266",
                                         "to": watched, "value": hex(3 * 10**18)}])
    rpc("anvil_mine", ["0x3"])
    eth = FIXTURE["wallets"]["eth"]
    alice = sign_in(context, "alice")
    alice.goto(f"{BASE}/console/wallets/{eth}")
    row = alice.locator("#transfers tr", has_text=sent[:20])
    for _ in range(50):
        text = row.first.inner_text() if row.count() else ""
        if "confirmed" in text and "unconfirmed" not in text:
            break
        time.sleep(0.2)
        alice.reload()
    expect(row.first).to_contain_text(str(3 * 10**18))
    expect(row.first).to_contain_text("receive")
    expect(alice.locator("#addresses")).to_contain_text(watched)
    # The balance is the node's, read at the block the watcher reached.
    node = int(rpc("eth_getBalance", [watched, "latest"]), 16)
    expect(alice.locator("#wallet-balance .value")).to_have_text(str(node))
    # The state filter: no transfer of this wallet was removed.
    alice.select_option("#state", "removed")
    alice.click("form.filters button")
    expect(alice.locator("#transfers")).to_have_count(0)
    assert "state=removed" in alice.url
    # Bob, of another enterprise, may not see it: the same answer as a wallet that does not exist.
    bob = sign_in(context.browser.new_context(), "bob")
    res = bob.goto(f"{BASE}/console/wallets/{eth}")
    assert res.status == 404
    expect(bob.locator(".alert.error")).to_contain_text("WalletNotFound")
    # Service admins reach it from the Chains page.
    root = sign_in(context.browser.new_context(viewport={"width": 1280, "height": 800}), "root")
    root.goto(BASE + "/console/chains")
    root.locator("#chain-hteth table.transfers a", has_text=eth).first.click()
    expect(root.locator("#wallet h2")).to_contain_text("Acme ETH")
    shot(root, "wallet")


RICH = "0xf39Fd6e51aad88F6F4ce6aB8827279cffFb92266"
PAYEE = "0x3C44CdDdB6a900fa2b585dd299e03d12FA4293BC"


def custodial_wallet(token, label):
    """A custodial wallet of Acme made through the API, funded with 1 ETH and seen by the watcher."""
    body = {"label": label, "enterprise": FIXTURE["enterprises"]["acme"], "type": "custodial", "approvalsRequired": 1}
    status, wallet = api("POST", "/api/v2/hteth/wallet/add", token, body)
    assert status == 200, wallet
    rpc("eth_sendTransaction", [{"from": RICH, "to": wallet["coinSpecific"]["baseAddress"], "value": hex(10**18)}])
    rpc("anvil_mine", ["0x3"])
    # Withdrawals are admitted against the balance at the chain's confirmation depth.
    wait_for("the watcher's confirmed balance", lambda: api("GET", f"/api/v2/hteth/wallet/{wallet['id']}?expandBalance=true", token)[1].get("confirmedBalanceString") == str(10**18))
    return wallet


def withdraw_in_console(page, base, wallet, amount):
    page.goto(f"{base}/console/wallets/{wallet}")
    page.fill("#withdraw-address", PAYEE)
    page.fill("#withdraw-amount", str(amount))
    page.fill("#withdraw-otp", TEST_OTP)
    page.click("#withdraw button[type=submit]")
    expect(page).to_have_url(re.compile(r"/console/withdrawals/[0-9a-f]{32}$"))
    return page.url.rsplit("/", 1)[1]


def test_a_withdrawal_is_made_approved_and_followed_to_confirmed_in_the_console(context):
    wallet = custodial_wallet(api_login("alice"), "Acme cold")["id"]
    alice = sign_in(context, "alice")
    # A bad address is refused beside its field, and nothing is stored.
    alice.goto(f"{BASE}/console/wallets/{wallet}")
    alice.fill("#withdraw-address", "0x123")
    alice.fill("#withdraw-amount", "5")
    alice.fill("#withdraw-otp", TEST_OTP)
    with alice.expect_response(lambda r: r.url.endswith("/withdraw")) as res:
        alice.click("#withdraw button[type=submit]")
    assert res.value.status == 400
    expect(alice.locator(".field-error[data-field=address]")).to_be_visible()
    expect(alice.locator("#withdrawals")).to_have_count(0)
    # A wrong code is refused beside the code field, and nothing is stored.
    alice.fill("#withdraw-address", PAYEE)
    alice.fill("#withdraw-amount", "5")
    alice.fill("#withdraw-otp", "123456")
    with alice.expect_response(lambda r: r.url.endswith("/withdraw")) as res:
        alice.click("#withdraw button[type=submit]")
    assert res.value.status == 401
    expect(alice.locator(".field-error[data-field=otp]")).to_contain_text("InvalidOtp")
    expect(alice.locator("#withdrawals")).to_have_count(0)
    first = withdraw_in_console(alice, BASE, wallet, 123456789)
    expect(alice.locator("#withdrawal h2")).to_contain_text("pendingApproval")
    expect(alice.locator("#withdrawal")).to_contain_text(PAYEE)
    # Valued when it was made, at the price run.sh set (123456789 wei is far below a cent).
    expect(alice.locator("#usd")).to_have_text("$0.00 (3000 USD per coin)")
    # The initiator sees it on the Approvals page with Cancel only.
    alice.goto(BASE + "/console/approvals")
    mine = alice.locator(f"section.approval:has(a[href='/console/withdrawals/{first}'])")
    expect(mine.locator("button", has_text="Cancel withdrawal")).to_be_visible()
    expect(mine.locator("form.approve")).to_have_count(0)
    # Dave, the enterprise's other admin, approves it with his code.
    dave = sign_in(context.browser.new_context(viewport={"width": 1280, "height": 800}), "dave")
    dave.goto(BASE + "/console/approvals")
    card = dave.locator(f"section.approval:has(a[href='/console/withdrawals/{first}'])")
    # What an approver sees is what moves: the amount in ETH with its base units beside, the
    # initiator by name and email, the wallet by label, a payee never paid before flagged.
    expect(card.locator(".pays .amount")).to_have_text("0.000000000123456789 hteth")
    expect(card.locator(".pays .base-units")).to_contain_text("123456789")
    expect(card.locator(".initiator")).to_contain_text("alice@example.com")
    expect(card.locator("h3 a.wallet")).to_have_text("Acme cold")
    expect(card.locator(".first-payee")).to_be_visible()
    expect(card.locator(".usd")).to_have_text("$0.00 (3000 USD per coin)")
    expect(card.locator(".approvals")).to_have_text("0 of 1")
    shot(dave, "approvals")
    card.locator("input[name=otp]").fill(TEST_OTP)
    card.locator("form.approve button[type=submit]").click()
    expect(dave.locator(".alert.ok")).to_contain_text("Approved: the withdrawal goes to the signer.")
    # The timeline: signed, sent, then the watcher's confirmations.
    dave.goto(f"{BASE}/console/withdrawals/{first}")
    for _ in range(100):
        if "delivered" in dave.locator("#withdrawal h2").inner_text():
            break
        time.sleep(0.2)
        dave.reload()
    expect(dave.locator("#withdrawal h2")).to_contain_text("delivered")
    expect(dave.locator("#timeline")).to_contain_text("approved by")
    expect(dave.locator("#timeline")).to_contain_text("dave@")
    expect(dave.locator("#timeline")).to_contain_text("signed: 0x")
    rpc("anvil_mine", ["0x3"])
    row = dave.locator("#attempts tbody tr").first
    for _ in range(100):
        if "confirmed" in row.inner_text() and "unconfirmed" not in row.inner_text():
            break
        time.sleep(0.2)
        dave.reload()
    expect(row).to_contain_text("confirmed")
    shot(dave, "withdrawal")
    tx = row.get_attribute("data-hash")
    receipt = rpc("eth_getTransactionReceipt", [tx])
    assert receipt["status"] == "0x1" and receipt["to"].lower() == PAYEE.lower(), receipt
    # A second one, rejected by Dave: it ends there. Its payee was paid before: not flagged.
    second = withdraw_in_console(alice, BASE, wallet, 7)
    dave.goto(BASE + "/console/approvals")
    expect(dave.locator(f"section.approval:has(a[href='/console/withdrawals/{second}']) .first-payee")).to_have_count(0)
    dave.locator(f"section.approval:has(a[href='/console/withdrawals/{second}'])").locator("button", has_text="Reject").click()
    expect(dave.locator(".alert.ok")).to_contain_text("rejected")
    alice.goto(f"{BASE}/console/withdrawals/{second}")
    expect(alice.locator("#withdrawal h2")).to_contain_text("rejected")
    expect(alice.locator("#timeline")).to_contain_text("rejected by")
    # Carol, of no enterprise, sees neither the approval nor the timeline.
    carol = sign_in(context.browser.new_context(), "carol")
    carol.goto(BASE + "/console/approvals")
    expect(carol.locator("#no-approvals")).to_be_visible()
    assert carol.goto(f"{BASE}/console/withdrawals/{first}").status == 404


def test_an_approval_made_with_a_passkey_in_place_of_the_code(browser):
    local = BASE.replace("127.0.0.1", "localhost")
    wallet = custodial_wallet(api_login("alice"), "Acme passkey")["id"]
    alice = sign_in(browser.new_context(), "alice")
    pending = withdraw_in_console(alice, BASE, wallet, 99)
    ctx = browser.new_context(viewport={"width": 1280, "height": 800})
    page = ctx.new_page()
    page.on("dialog", lambda d: d.accept())
    sign_in_with_authenticator(ctx, page, local, "dave")
    page.goto(local + "/console/security")
    page.fill("#passkey-label", "dave's laptop")
    page.fill("#passkey-otp", TEST_OTP)
    page.click("#passkey-add button[type=submit]")
    expect(page.locator(".alert.ok")).to_contain_text("Passkey added")
    page.goto(local + "/console/approvals")
    card = page.locator(f"section.approval:has(a[href='/console/withdrawals/{pending}'])")
    card.locator("button[data-passkey-otp]").click()
    expect(card.locator("button[data-passkey-otp]")).to_have_text("Passkey ready")
    card.locator("form.approve button[type=submit]").click()
    expect(page.locator(".alert.ok")).to_contain_text("Approved")
    status, audit = api("GET", "/api/v2/auditlog?type=withdrawal.approved", api_login("root"))
    assert status == 200 and any(e.get("data", {}).get("txRequestId") == pending for e in audit["auditLogs"]), audit


def test_a_wallet_policy_page_shows_rules_history_pending_changes_and_a_dry_run(context):
    alice_token = api_login("alice")
    wallet = custodial_wallet(alice_token, "Acme policy")["id"]
    rule_path = f"/api/v2/hteth/wallet/{wallet}/policy/rule"
    whitelist = {"id": "payees", "type": "coinAddressWhitelist", "condition": {"addresses": [PAYEE]}, "action": {"type": "deny"}}
    status, body = api("POST", rule_path, alice_token, whitelist)
    assert status == 200, body
    # Alice asks to remove it: a loosening, waiting for another admin.
    status, pending = api("DELETE", rule_path, alice_token, {"id": "payees"})
    assert status == 200 and pending["state"] == "pending", pending
    # An enterprise rule for hteth applies to the wallet too, shown beside its own.
    cap = {"id": "cap", "type": "velocityLimit", "condition": {"amountString": str(10**21), "timeWindow": 86400}, "action": {"type": "getApproval"}}
    status, body = api("POST", f"/api/v2/hteth/enterprise/{FIXTURE['enterprises']['acme']}/policy/rule", alice_token, cap)
    assert status == 200, body
    alice = sign_in(context, "alice")
    alice.goto(f"{BASE}/console/wallets/{wallet}")
    alice.click("#policy-link")
    expect(alice.locator("#rules tr[data-rule-id=payees]")).to_contain_text("coinAddressWhitelist")
    expect(alice.locator("#rules tr[data-rule-id='enterprise.cap']")).to_contain_text("the enterprise")
    expect(alice.locator(f"#pending-changes [data-approval-id='{pending['id']}']")).to_contain_text("removing rule payees")
    expect(alice.locator("#history")).to_contain_text("policy.rule_created")
    expect(alice.locator("#history")).to_contain_text("policy.change_requested")
    # The dry run: a payee off the list is denied, with the reason; one on it waits for approval.
    alice.fill("#dry-address", "0x90F79bf6EB2c4f870365E785982E1f101E93b906")
    alice.fill("#dry-amount", "5")
    alice.click("#dry-run button[type=submit]")
    expect(alice.locator("#dry-answer")).to_contain_text("denied")
    expect(alice.locator("#dry-answer .reasons")).to_contain_text("is not on the whitelist")
    alice.fill("#dry-address", PAYEE)
    alice.fill("#dry-amount", "5")
    alice.click("#dry-run button[type=submit]")
    expect(alice.locator("#dry-answer")).to_contain_text("pendingApproval")
    # A bad address is refused beside the form, and nothing is stored.
    alice.fill("#dry-address", "0x12")
    with alice.expect_response(lambda r: r.url.endswith("/policy/evaluate")) as res:
        alice.click("#dry-run button[type=submit]")
    assert res.value.status == 400
    expect(alice.locator("#dry-answer")).to_contain_text("address")
    # Dave sees the change on the Approvals page, described.
    dave = sign_in(context.browser.new_context(), "dave")
    dave.goto(BASE + "/console/approvals")
    card = dave.locator(f"section.approval[data-approval-id='{pending['id']}']")
    expect(card).to_contain_text("Policy change on")
    expect(card.locator(".reason")).to_contain_text("removing rule payees")
    # Alice asks to remove the enterprise's rule: the enterprise's approval, which Dave, its other
    # admin, approves on the same page; the rule goes with it.
    enterprise_rules = f"/api/v2/hteth/enterprise/{FIXTURE['enterprises']['acme']}/policy/rule"
    status, change = api("DELETE", enterprise_rules, alice_token, {"id": "cap"})
    assert status == 200 and change["scope"] == "enterprise", change
    dave.goto(BASE + "/console/approvals")
    card = dave.locator(f"section.approval[data-approval-id='{change['id']}']")
    expect(card.locator("h3")).to_contain_text("Policy change on enterprise")
    expect(card.locator(".enterprise")).to_have_text(FIXTURE["enterprises"]["acme"])
    card.locator("input[name=otp]").fill(TEST_OTP)
    card.locator("form.approve button[type=submit]").click()
    expect(dave.locator(".alert.ok")).to_contain_text("Approved: the policy change is applied.")
    status, body = api("GET", enterprise_rules, alice_token)
    assert status == 200 and body["rules"] == [], body


def test_a_member_signs_in_with_sso_through_the_enterprise_s_identity_provider(context):
    acme = FIXTURE["enterprises"]["acme"]
    # Alice, Acme's admin, sets the provider on its page in the console.
    alice = sign_in(context, "alice")
    alice.goto(BASE + "/console/security")
    alice.click(f"#sso-settings-panel a[data-enterprise='{acme}']")
    expect(alice.locator("#sso-none")).to_be_visible()
    expect(alice.locator("#redirect-uri")).to_have_text(BASE + "/console/sso/callback")
    alice.select_option("#oauthProvider", "oidc")
    alice.fill("#issuer", FIXTURE["sso"])
    alice.fill("#clientId", "custodian")
    alice.fill("#clientSecret", "s3cret")
    alice.fill("#groupRoles", "not-a-mapping")
    alice.click("#sso-setting button[type=submit]")
    # A bad line is shown beside its field, and nothing is saved.
    expect(alice.locator(".alert.error")).to_contain_text("is not value=role")
    expect(alice.locator("#sso-none")).to_be_visible()
    alice.fill("#clientSecret", "s3cret")
    alice.fill("#groupRoles", "")
    alice.click("#sso-setting button[type=submit]")
    expect(alice.locator(".alert.ok")).to_contain_text("Saved")
    expect(alice.locator("#sso-current")).to_contain_text(FIXTURE["sso"])
    expect(alice.locator("#clientSecret")).to_have_value("")
    shot(alice, "sso-setting")
    status, body = api("GET", f"/api/v2/enterprise/{acme}/oauthSetting", api_login("alice"))
    assert status == 200 and body["issuer"] == FIXTURE["sso"] and "clientSecret" not in body, body
    status, audit = api("GET", "/api/v2/auditlog?type=sso.setting_set", api_login("root"))
    assert status == 200 and len(audit["auditLogs"]) == 1, audit
    # Erin, in a browser of her own.
    page = context.browser.new_context(viewport={"width": 1280, "height": 800}).new_page()
    page.goto(BASE + "/console/login")
    page.click("#sso-link")
    page.fill("#who", email("erin"))
    page.click("#sso button[type=submit]")
    # The provider's own sign-in page (oidc-provider's), then back to the console, signed in.
    page.wait_for_selector("input[name=login]")
    assert page.url.startswith(FIXTURE["sso"]), page.url
    page.fill("input[name=login]", "erin-sub")
    page.fill("input[name=password]", "any")
    page.click("button[type=submit]")
    expect(page).to_have_url(re.compile(r"/console/overview$"))
    expect(page.locator("header .email")).to_have_text(email("erin"))
    shot(page, "sso-signed-in")
    status, audit = api("GET", "/api/v2/auditlog?type=login.succeeded", api_login("root"))
    assert status == 200, audit
    erin = FIXTURE["users"]["erin"]["id"]
    mine = [e for e in audit["auditLogs"] if e.get("userId") == erin]
    assert mine and mine[0]["data"]["grantType"] == "oauth", mine
    status, audit = api("GET", "/api/v2/auditlog?type=sso.identity_linked", api_login("root"))
    assert status == 200 and len(audit["auditLogs"]) == 1, audit
    # Erin makes a long-lived access token in the console, and BitGo's SDK, unmodified, uses it.
    page.goto(BASE + "/console/tokens")
    page.fill("#label", "sdk after sso")
    page.fill("#scope", "openid profile wallet_view_all")
    page.fill("#token-otp", TEST_OTP)
    page.click("form[action='/console/tokens'] button[type=submit]")
    token = page.locator("#new-token").inner_text().strip()
    sdk = os.path.join(os.path.dirname(__file__), "..", "sdk-tests", "with-token.mjs")
    ran = subprocess.run(["node", sdk, token], env={**os.environ, "CUSTODIAN_URL": BASE},
                         capture_output=True, text=True, timeout=60)
    assert ran.returncode == 0, ran.stderr
    answer = json.loads(ran.stdout)
    assert answer["me"]["username"] == email("erin"), answer
    assert sorted(answer["session"]["scope"]) == ["openid", "profile", "wallet_view_all"], answer
    assert "ecdhXprv" not in ran.stdout and "encryptedECDHXprv" not in ran.stdout, answer
    # Erin, a member and not an admin, may not open the provider's page.
    res = page.goto(BASE + f"/console/enterprises/{acme}/sso")
    assert res.status == 403
    expect(page.locator("body")).to_contain_text("only an admin of the enterprise")
    # The console removes the provider: Erin's next sign-in is by password again.
    alice.goto(BASE + f"/console/enterprises/{acme}/sso")
    alice.click("#sso-current button[type=submit]")
    expect(alice.locator(".alert.ok")).to_contain_text("Removed")
    expect(alice.locator("#sso-none")).to_be_visible()
