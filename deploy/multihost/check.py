"""The multi-host test's driver (run by deploy/multihost/run.sh, which makes the hosts): starts
3 API and 2 worker processes of Custodian on their hosts, all on the PostgreSQL host, behind
HAProxy, and checks that they behave as one service. Prints what it measured; exits non-zero on
the first broken promise. Standard library only.
"""

import argparse
import hashlib
import hmac
import http.client
import json
import os
import socket
import subprocess
import sys
import threading
import time

LB = ("10.88.0.10", 8080)
RX = "http://10.88.0.30:9000"
DB_URL = "postgres://postgres@10.88.0.2:5432/custodian"
API = {"api1": "10.88.0.11", "api2": "10.88.0.12", "api3": "10.88.0.13"}
WORKERS = {"wrk1": "10.88.0.21", "wrk2": "10.88.0.22"}
WALLET = "0123456789abcdef0123456789abcdef"
PASSWORD = "correct horse battery staple"
EVENTS = 20_000
#: The defaults of rate_limit.requests and rate_limit.period: the test runs what operators run.
RATE_REQUESTS, RATE_PERIOD = 360, 60


def fail(message):
    print(f"FAILED: {message}", flush=True)
    sys.exit(1)


def say(message):
    print(message, flush=True)


class Client:
    """One keep-alive HTTP connection to (host, port), made again after an error."""

    def __init__(self, addr, timeout=30):
        self.addr, self.timeout, self.conn = addr, timeout, None

    def send(self, method, path, body=None, headers=None, token=None):
        """Returns (status, parsed JSON or None); raises OSError when the connection fails."""
        headers = dict(headers or {})
        if token:
            headers["Authorization"] = f"Bearer {token}"
        data = None
        if body is not None:
            data = body if isinstance(body, bytes) else json.dumps(body).encode()
            headers.setdefault("Content-Type", "application/json")
        if self.conn is None:
            self.conn = http.client.HTTPConnection(*self.addr, timeout=self.timeout)
        try:
            self.conn.request(method, path, body=data, headers=headers)
            res = self.conn.getresponse()
            raw = res.read()
        except (OSError, http.client.HTTPException) as e:
            self.conn.close()
            self.conn = None
            raise OSError(str(e)) from e
        try:
            return res.status, json.loads(raw) if raw else None
        except ValueError:
            return res.status, None


class Host:
    """A `custodian serve` process on one host (network namespace)."""

    def __init__(self, name, addr, role, deployment):
        self.name, self.addr, self.role, self.d, self.proc = name, addr, role, deployment, None

    def start(self):
        log = open(os.path.join(self.d.work, f"{self.name}.log"), "ab")
        cmd = ["ip", "netns", "exec", f"cu-{self.name}", self.d.bin, "serve", "--listen", "0.0.0.0:8080", "--role", self.role]
        # `ip netns exec` execs the server: this process is the server, and kill -9 reaches it.
        self.proc = subprocess.Popen(cmd, env=self.d.env, cwd=self.d.work, stdout=subprocess.DEVNULL, stderr=log)
        deadline = time.time() + 30
        while time.time() < deadline:
            try:
                if Client((self.addr, 8080), timeout=2).send("GET", "/health")[0] == 200:
                    return
            except OSError:
                pass
            if self.proc.poll() is not None:
                fail(f"{self.name} exited at start (see {self.name}.log)")
            time.sleep(0.1)
        fail(f"{self.name} did not become healthy")

    def kill9(self):
        self.proc.kill()
        self.proc.wait()

    def stop(self):
        """SIGTERM: finishes what it has in flight, then exits."""
        self.proc.terminate()
        try:
            self.proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            fail(f"{self.name} did not stop within 60 s of SIGTERM")


class Deployment:
    def __init__(self, args):
        self.bin, self.work, self.root = args.bin, args.work, args.root
        self.env = dict(
            os.environ,
            CUSTODIAN_DATABASE_URL=DB_URL,
            CUSTODIAN_SECRET_KEY_FILE=os.path.join(self.work, "master.key"),
            CUSTODIAN_ENVIRONMENT="test",
            CUSTODIAN_LOG_FORMAT="json",
            # Settings that must match on every host (docs/deployment.md).
            CUSTODIAN_TRUSTED_PROXIES="10.88.0.10/32",
            CUSTODIAN_DELIVERY_ALLOWED_CIDRS="10.88.0.0/24",
            CUSTODIAN_DELIVERY_TIMEOUT="5",
            CUSTODIAN_CHAINS_HTETH_RPC_URL="http://10.88.0.1:8545",
            CUSTODIAN_CHAINS_HTETH_CHAIN_ID="31337",
            CUSTODIAN_CHAINS_HTETH_CONFIRMATIONS="2",
            CUSTODIAN_CHAINS_HTETH_START_BLOCK="0",
            CUSTODIAN_CHAINS_HTETH_POLL_INTERVAL_MS="100",
        )
        self.env.pop("CUSTODIAN_LISTEN", None)
        self.api = {n: Host(n, a, "api", self) for n, a in API.items()}
        self.workers = {n: Host(n, a, "worker", self) for n, a in WORKERS.items()}

    def cli(self, *args, stdin=None):
        out = subprocess.run([self.bin, *args], env=self.env, cwd=self.work, input=stdin, capture_output=True, text=True)
        if out.returncode != 0:
            fail(f"custodian {' '.join(args)}: {out.stderr.strip()}")
        return out.stdout

    def create_user(self, email, admin=False):
        args = ["user", "create", "--email", email, "--password-stdin", "--json"] + (["--service-admin"] if admin else [])
        return json.loads(self.cli(*args, stdin=PASSWORD + "\n"))

    def login(self, email):
        status, body = Client(LB).send("POST", "/api/v2/internal/user/login", {"email": email, "password": PASSWORD, "otp": "000000"})
        if status != 200:
            fail(f"login of {email} through the balancer: {status} {body}")
        return body

    def haproxy(self, command):
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        s.connect(os.path.join(self.work, "haproxy.sock"))
        s.sendall(command.encode() + b"\n")
        out = b""
        while chunk := s.recv(65536):
            out += chunk
        s.close()
        return out.decode()

    def haproxy_server(self, name):
        """HAProxy's view of backend server `name`: (status, current sessions)."""
        lines = self.haproxy("show stat").splitlines()
        fields = lines[0].lstrip("# ").split(",")
        for line in lines[1:]:
            row = dict(zip(fields, line.split(",")))
            if row.get("pxname") == "custodian" and row.get("svname") == name:
                return row["status"], int(row["scur"] or 0)
        fail(f"HAProxy does not know {name}")

    def wait_up_in_haproxy(self, names, secs=30):
        deadline = time.time() + secs
        while time.time() < deadline:
            if all(self.haproxy_server(n)[0] == "UP" for n in names):
                return
            time.sleep(0.2)
        fail(f"HAProxy did not see {names} up")


def receiver_stats():
    c = Client(("10.88.0.30", 9000))
    return c.send("GET", "/stats")[1]


def wait_distinct(n, secs):
    deadline = time.time() + secs
    while time.time() < deadline:
        stats = receiver_stats()
        if stats["distinct"] >= n:
            return stats
        time.sleep(0.5)
    return receiver_stats()


def post_events(prefix, count, token, threads=16, on_progress=None):
    """Posts `count` transfer events through the balancer, each retried with its eventId until
    accepted, as a client must (an eventId is accepted once). Returns (seconds, retries)."""
    lock = threading.Lock()
    state = {"next": 0, "done": 0, "retries": 0}

    def worker():
        c = Client(LB)
        while True:
            with lock:
                i = state["next"]
                if i >= count:
                    return
                state["next"] += 1
            event = {"eventId": f"{prefix}-{i}", "type": "transfer", "walletId": WALLET}
            for attempt in range(200):
                try:
                    if c.send("POST", "/api/v2/internal/events", event, token=token)[0] == 200:
                        break
                except OSError:
                    pass
                with lock:
                    state["retries"] += 1
                time.sleep(0.1)
            else:
                fail(f"event {prefix}-{i} was never accepted")
            with lock:
                state["done"] += 1
                done = state["done"]
            if on_progress:
                on_progress(done)

    started = time.time()
    ts = [threading.Thread(target=worker) for _ in range(threads)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    return time.time() - started, state["retries"]


def sign(version, token, token_id, method, path, ts_ms):
    """BitGo's request signature (sdk-hmac): headers for `version` 2, 3 or 4."""
    key = token.encode()
    if version == 4:
        ts = ts_ms // 1000
        body_hash = hashlib.sha256(b"").hexdigest()
        request_id = f"mh-{ts_ms}"
        mac = hmac.new(key, f"{ts}\n{method}\n{path}\n{body_hash}\n{request_id}\n".encode(), hashlib.sha256).hexdigest()
        return {"Authorization": f"Bearer {token_id}", "X-Request-Timestamp": str(ts), "X-Content-SHA256": body_hash,
                "X-Auth-Request-Id": request_id, "X-Signature": mac}
    subject = f"{ts_ms}|{path}|" if version == 2 else f"{method}|{ts_ms}|3.0|{path}|"
    mac = hmac.new(key, subject.encode(), hashlib.sha256).hexdigest()
    return {"Authorization": f"Bearer {hashlib.sha256(key).hexdigest()}", "Auth-Timestamp": str(ts_ms), "HMAC": mac,
            "BitGo-Auth-Version": f"{version}.0"}


def check_sdk(d):
    env = dict(d.env, CUSTODIAN_SDK_URL=f"http://{LB[0]}:{LB[1]}", CUSTODIAN_SDK_ANVIL_URL="http://10.88.0.1:8545",
               CUSTODIAN_SDK_RECEIVER_HOST="10.88.0.1")
    out = subprocess.run([os.path.join(d.root, "sdk-tests", "run.sh"), d.bin], env=env, capture_output=True, text=True)
    counts = {k: v for k, v in (line[2:].split(" ", 1) for line in out.stdout.splitlines() if line.startswith("# ") and " " in line[2:])}
    if out.returncode != 0:
        print(out.stdout[-6000:], out.stderr[-3000:])
        fail("the BitGoJS suite through the balancer")
    say(f"BitGoJS suite through HAProxy to 3 API hosts: {counts.get('pass', '?')} passed, {counts.get('fail', '?')} failed")


def check_rate(d, token, secs=10):
    counts = {"ok": 0, "limited": 0}
    lock = threading.Lock()
    until = time.time() + secs

    def worker():
        c = Client(LB)
        while time.time() < until:
            status, body = c.send("GET", "/api/v2/user/me", token=token)
            if status not in (200, 429):
                fail(f"GET /api/v2/user/me: {status} {body}")
            with lock:
                counts["ok" if status == 200 else "limited"] += 1

    started = time.time()
    ts = [threading.Thread(target=worker) for _ in range(8)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    elapsed = time.time() - started
    allowed = RATE_REQUESTS + RATE_REQUESTS / RATE_PERIOD * elapsed
    say(f"rate limit ({RATE_REQUESTS}/{RATE_PERIOD} s), one user through 3 API hosts for {elapsed:.1f} s: "
        f"{counts['ok']} allowed, {counts['limited']} refused with 429; the limit allows {allowed:.0f} "
        f"(per-process buckets would allow {3 * allowed:.0f})")
    if counts["limited"] == 0 or counts["ok"] > allowed * 1.10:
        fail(f"{counts['ok']} allowed, more than {allowed:.0f} + 10%")


def check_replay(d, token, token_id):
    path = "/api/v2/user/me"
    hosts = list(API.values())
    for version in (2, 3, 4):
        headers = sign(version, token, token_id, "GET", path, int(time.time() * 1000))
        status, body = Client((hosts[0], 8080)).send("GET", path, headers=headers)
        if status != 200:
            fail(f"v{version} signed read on api1: {status} {body}")
        # Every other host, and every other method (v2 does not sign it).
        for host in hosts:
            for method in ("GET", "POST", "DELETE", "PUT"):
                if host == hosts[0] and method == "GET":
                    continue
                status, body = Client((host, 8080)).send(method, path, headers=headers)
                if status != 401 or body["name"] not in ("RequestReplayed", "InvalidSignature"):
                    fail(f"v{version} GET replayed as {method} on {host}: {status} {body}")
    say("replay: a signed read (v2, v3, v4) taken on api1 and replayed on all 3 hosts under GET, POST, "
        "DELETE and PUT: every replay 401 RequestReplayed or InvalidSignature")


def check_events_across_kills(d, token):
    before = receiver_stats()["distinct"]
    killed = threading.Event()

    def progress(done):
        if done == EVENTS // 3 and not killed.is_set():
            killed.set()
            threading.Thread(target=kill_and_restart).start()

    def kill_and_restart():
        d.api["api2"].kill9()
        d.workers["wrk1"].kill9()
        say(f"  kill -9 of api2 and wrk1 after {EVENTS // 3} events accepted")
        time.sleep(3)
        d.api["api2"].start()
        d.workers["wrk1"].start()
        say("  api2 and wrk1 restarted")

    secs, retries = post_events("mh", EVENTS, token, on_progress=progress)
    stats = wait_distinct(before + EVENTS, 300)
    got = stats["distinct"] - before
    gaps = stats["duplicate_gaps"]
    say(f"{EVENTS} events through the balancer in {secs:.1f} s ({retries} client retries with the same eventId); "
        f"{got} distinct notifications delivered, {stats['duplicates']} duplicates"
        + (f" (same idempotency-key, {min(gaps):.1f} to {max(gaps):.1f} s after the first arrival)" if gaps else ""))
    if got != EVENTS:
        fail(f"{got} of {EVENTS} notifications delivered")
    # A duplicate comes only from a lease that ended with its worker (docs/webhooks.md): the
    # lease is twice delivery.timeout (5 s) plus 5 s, so never sooner than 5 s.
    if any(g < 5 for g in gaps):
        fail(f"a duplicate arrived sooner than a lease could expire: {gaps}")


def check_rolling_restart(d, token):
    before = receiver_stats()["distinct"]
    lock = threading.Lock()
    state = {"stop": False, "n": 0, "ok": 0, "failed": [], "accepted": 0}

    def load():
        c = Client(LB)
        while not state["stop"]:
            with lock:
                i = state["n"]
                state["n"] += 1
            try:
                if i % 2:
                    status, body = c.send("GET", "/api/v2/user/me", token=token)
                else:
                    status, body = c.send("POST", "/api/v2/internal/events", {"eventId": f"roll-{i}", "type": "transfer", "walletId": WALLET}, token=token)
            except OSError as e:
                status, body = 0, str(e)
            with lock:
                if 200 <= status < 300:
                    state["ok"] += 1
                    state["accepted"] += i % 2 == 0
                else:
                    state["failed"].append((status, body))

    ts = [threading.Thread(target=load) for _ in range(8)]
    for t in ts:
        t.start()
    started = time.time()
    for name, host in d.api.items():
        # The documented procedure (docs/deployment.md): drain, stop, start, ready.
        d.haproxy(f"set server custodian/{name} state maint")
        deadline = time.time() + 10
        while d.haproxy_server(name)[1] > 0 and time.time() < deadline:
            time.sleep(0.1)
        host.stop()
        host.start()
        d.haproxy(f"set server custodian/{name} state ready")
        d.wait_up_in_haproxy([name])
        say(f"  {name} restarted")
    time.sleep(1)
    state["stop"] = True
    for t in ts:
        t.join()
    secs = time.time() - started
    stats = wait_distinct(before + state["accepted"], 120)
    say(f"rolling restart of the 3 API hosts under load ({secs:.1f} s): {state['ok']} requests answered 2xx, "
        f"{len(state['failed'])} not; {state['accepted']} events accepted, {stats['distinct'] - before} delivered")
    if state["failed"]:
        fail(f"requests failed during the rolling restart: {state['failed'][:5]}")
    if stats["distinct"] - before != state["accepted"]:
        fail("an accepted event was lost")


def bench(d, token, n):
    """End-to-end deliveries/s: events posted through the balancer until the receiver has each."""
    def run(label, prefix):
        before = receiver_stats()["distinct"]
        started = time.time()
        posted, _ = post_events(prefix, n, token)
        stats = wait_distinct(before + n, 600)
        secs = time.time() - started
        if stats["distinct"] - before != n:
            fail(f"{label}: {stats['distinct'] - before} of {n} delivered")
        say(f"| {label} | {n} | {n / posted:.0f} | {secs:.1f} | {n / secs:.0f} |")
        return n / secs

    say("| layout | events | accepted/s | first send to last receipt, s | deliveries/s |\n|---|---|---|---|---|")
    three = run("3 API + 2 worker processes", "bench-a")
    for h in list(d.api.values())[1:] + list(d.workers.values()):
        h.stop()
    one = d.api["api1"]
    one.stop()
    one.role = "all"
    one.start()
    d.wait_up_in_haproxy(["api1"])
    single = run("1 process (--role all)", "bench-b")
    say(f"ratio 3+2 / 1: {three / single:.2f}")


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--bin", required=True)
    p.add_argument("--work", required=True)
    p.add_argument("--root", required=True)
    p.add_argument("--bench", action="store_true")
    p.add_argument("--events", type=int, default=EVENTS)
    args = p.parse_args()
    d = Deployment(args)
    try:
        d.cli("migrate")
        d.create_user("ops@example.com", admin=True)
        d.create_user("alice@example.com")
        wallet = [{"id": WALLET, "label": "w", "coin": "tbtc", "allowBackupKeySigning": False, "approvalsRequired": 1,
                   "coinSpecific": {}, "deleted": False, "disableTransactionNotifications": False,
                   "hasLargeNumberOfAddresses": False, "isCold": False, "startDate": "2025-01-01T00:00:00Z"}]
        with open(os.path.join(d.work, "wallet.json"), "w") as f:
            json.dump(wallet, f)
        d.cli("wallet", "import", "wallet.json")
        for h in list(d.api.values()) + list(d.workers.values()):
            h.start()
        d.wait_up_in_haproxy(list(API))
        say("3 API hosts and 2 delivery workers up on one PostgreSQL host, behind HAProxy")
        admin = d.login("ops@example.com")
        token = admin["access_token"]
        status, body = Client(LB).send("POST", f"/api/v2/tbtc/wallet/{WALLET}/webhooks", {"type": "transfer", "url": f"{RX}/hook"}, token=token)
        if status != 200:
            fail(f"registering the receiver's webhook: {status} {body}")
        if args.bench:
            bench(d, token, args.events)
            return
        check_sdk(d)
        check_rate(d, d.login("alice@example.com")["access_token"])
        check_replay(d, token, admin["token_id"])
        check_events_across_kills(d, token)
        check_rolling_restart(d, token)
        say("multi-host: every check passed")
    finally:
        for h in list(d.api.values()) + list(d.workers.values()):
            if h.proc and h.proc.poll() is None:
                h.proc.kill()


if __name__ == "__main__":
    main()
