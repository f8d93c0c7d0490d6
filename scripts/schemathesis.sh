#!/usr/bin/env bash
# Conformance run of the published OpenAPI document (docs/decisions.md#the-openapi-document): boots
# the server on a fresh SQLite file with a service admin who is also an enterprise admin, gives
# schemathesis real ids to work on (an enterprise, a wallet, a webhook of each level and their
# notifications), then runs `st run --checks all` against GET /openapi.json. Exits non-zero
# when any of these checks fails: not_a_server_error, status_code_conformance,
# response_schema_conformance, content_type_conformance, positive_data_acceptance; or when an
# operation answered only 401/403 (it was never exercised past authentication), logout and the
# revocation of one's own token excepted: they end the session they are called with, so they
# run last, each with a session of its own, and are listed.
#
#   scripts/schemathesis.sh                   # 25 examples per operation (what CI runs)
#   MAX_EXAMPLES=200 scripts/schemathesis.sh  # a longer run
#   CUSTODIAN_BIN=target/debug/custodian scripts/schemathesis.sh   # skip the release build
set -euo pipefail
cd "$(dirname "$0")/.."

MAX_EXAMPLES="${MAX_EXAMPLES:-25}"
VENV="${SCHEMATHESIS_VENV:-target/schemathesis-venv}"

if [ ! -x "$VENV/bin/st" ]; then
  python3 -m venv "$VENV"
  "$VENV/bin/pip" install -q 'schemathesis>=4.0,<5'
fi

BIN="${CUSTODIAN_BIN:-}"
if [ -z "$BIN" ]; then
  cargo build --release --quiet
  BIN=target/release/custodian
fi

WORK=$(mktemp -d)
SERVER_PID=""
cleanup() {
  [ -n "$SERVER_PID" ] && kill "$SERVER_PID" 2>/dev/null && wait "$SERVER_PID" 2>/dev/null
  rm -rf "$WORK"
}
trap cleanup EXIT

# The test environment (OTP 000000 accepted, sessions with scope `all`). Every limit a run of
# thousands of requests from one user and one address would reach is set out of its way: login
# and OTP lockouts, hashing slots per client, the per-user API rate limit and the per-webhook
# operation limit, so that every operation is exercised rather than answered 429. Every address
# is allowed as a webhook host: a callback URL with an IP host (docs/webhooks.md#the-callback-url)
# is then refused only for its form, and the SSRF guard, which refuses private addresses by
# configuration, is tested in tests/api/delivery.rs.
export CUSTODIAN_DATABASE_URL="sqlite://$WORK/custodian.db"
export CUSTODIAN_ENVIRONMENT=test
export CUSTODIAN_LOGIN_MAX_FAILURES_PER_EMAIL=1000000
export CUSTODIAN_LOGIN_MAX_FAILURES_PER_IP=1000000
export CUSTODIAN_LOGIN_MAX_OTP_FAILURES=1000000
export CUSTODIAN_LOGIN_MAX_HASHES_PER_CLIENT=64
export CUSTODIAN_RATE_LIMIT_REQUESTS=100000000
export CUSTODIAN_RATE_LIMIT_ADMIN_REQUESTS=0
export CUSTODIAN_WEBHOOKS_OPERATIONS_PER_MINUTE=100000000
export CUSTODIAN_DELIVERY_ALLOWED_CIDRS=0.0.0.0/0,::/0
export RUST_LOG=error

EMAIL=schemathesis@example.com
PASSWORD='schemathesis password 1'
echo "$PASSWORD" | "$BIN" user create --email "$EMAIL" --name "Schema Thesis" --password-stdin --service-admin --json >/dev/null
# The example wallets' enterprise, with the run's user as its admin.
export ST_ENTERPRISE=5f2a1c9e8d7b6a5f4e3d2c1b0a998877
"$BIN" enterprise create --name "Schemathesis" --id "$ST_ENTERPRISE" --json >/dev/null
"$BIN" enterprise add-user --enterprise "$ST_ENTERPRISE" --email "$EMAIL" --admin >/dev/null
"$BIN" wallet import examples/wallets.json --json >/dev/null
export ST_WALLET
ST_WALLET=$(python3 -c 'import json; print(next(w["id"] for w in json.load(open("examples/wallets.json")) if w["label"] == "BTC hot wallet"))')

PORT=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
"$BIN" serve --listen "127.0.0.1:$PORT" >"$WORK/server.log" 2>&1 &
SERVER_PID=$!
BASE="http://127.0.0.1:$PORT"
for _ in $(seq 1 100); do
  curl -fsS "$BASE/health" >/dev/null 2>&1 && break
  sleep 0.1
done

login() {
  curl -fsS -X POST "$BASE/api/v2/internal/user/login" -H 'content-type: application/json' \
    -d "{\"email\":\"$EMAIL\",\"password\":\"$PASSWORD\",\"otp\":\"000000\"}" |
    python3 -c 'import json,sys; print(json.load(sys.stdin)["access_token"])'
}
call() { # METHOD PATH BODY: prints the answer's `id`, or of its first notification
  curl -fsS -X "$1" "$BASE$2" -H 'content-type: application/json' -H "Authorization: Bearer $TOKEN" -d "$3" |
    python3 -c 'import json,sys; d=json.load(sys.stdin); print(d.get("id") or d["webhookNotifications"][0]["id"])'
}
TOKEN=$(login)
# A webhook of each level, each with a notification, for the operations that take their ids.
HOOK='"url":"https://receiver.example.com/hooks","label":"schemathesis"'
export ST_WALLET_WEBHOOK ST_BLOCK_WEBHOOK ST_ENTERPRISE_WEBHOOK ST_NOTIFICATION
ST_WALLET_WEBHOOK=$(call POST "/api/v2/btc/wallet/$ST_WALLET/webhooks" "{\"type\":\"transfer\",$HOOK}")
ST_BLOCK_WEBHOOK=$(call POST /api/v2/btc/webhooks "{\"type\":\"block\",\"numConfirmations\":1,$HOOK}")
ST_ENTERPRISE_WEBHOOK=$(call POST "/api/v2/enterprise/$ST_ENTERPRISE/webhooks" "{\"type\":\"accessToken\",$HOOK}")
ST_NOTIFICATION=$(call POST "/api/v2/btc/wallet/$ST_WALLET/webhooks/$ST_WALLET_WEBHOOK/simulate" '{"transferId":"59cd72485007a239fb00282ed480da1f"}')
call POST "/api/v2/btc/webhooks/$ST_BLOCK_WEBHOOK/simulate" '{"blockId":"00000000000000000001"}' >/dev/null
# The enterprise's webhook secret, so that its notifications are signed as in production.
curl -fsS -X POST "$BASE/api/v2/webhook/secret" -H 'content-type: application/json' -H "Authorization: Bearer $TOKEN" \
  -d "{\"enterpriseId\":\"$ST_ENTERPRISE\"}" >/dev/null

# Logout and revoking one's own token end the session they are called with: every later request
# of the run would be a 401. They run after everything else, each with a session of its own.
SESSION_ENDERS=(
  "GET /api/v1/user/logout" "GET /api/v2/user/logout" "POST /api/v2/user/logout"
  "DELETE /api/v1/user/accesstoken/{id}" "DELETE /api/v2/user/accesstoken/{id}"
)
st_run() { # LOG TOKEN [st options...]
  local log=$1 token=$2
  shift 2
  "$VENV/bin/st" --config-file scripts/schemathesis.toml run "$BASE/openapi.json" \
    --phases examples,coverage,fuzzing \
    --checks all \
    --header "Authorization: Bearer $token" \
    --max-examples "$MAX_EXAMPLES" \
    --workers 2 \
    --suppress-health-check all \
    --report junit --report-dir "$WORK/report" \
    --no-color "$@" >"$log" 2>&1
}
set +e
# The stateful phase is left out: it feeds the lookup's `ids` list into single `walletId`
# path parameters, which no schema can make valid.
exclude=()
for path in $(printf '%s\n' "${SESSION_ENDERS[@]#* }" | sort -u); do exclude+=(--exclude-path "$path"); done
st_run "$WORK/st.log" "$TOKEN" "${exclude[@]}"
ST_EXIT=$?
for op in "${SESSION_ENDERS[@]}"; do
  st_run "$WORK/st-enders.log" "$(login)" --include-name "$op"
  cat "$WORK/st-enders.log" >>"$WORK/st-enders-all.log"
done
set -e
cat "$WORK/st.log"
cat "$WORK/st-enders-all.log" >>"$WORK/st.log"

# Which of the required checks failed, from the failure codes schemathesis prints
# (`st explain STxxx` describes each).
python3 - "$WORK/st.log" "$(IFS=';'; echo "${SESSION_ENDERS[*]}")" <<'PY'
import re, sys
codes = {
    "not_a_server_error": ["ST101", "ST102"],
    "status_code_conformance": ["ST103"],
    "content_type_conformance": ["ST104", "ST105", "ST106"],
    "response_schema_conformance": ["ST108", "ST109", "ST110", "ST111"],
    "positive_data_acceptance": ["ST202"],
}
log = open(sys.argv[1], encoding="utf-8", errors="replace").read()
m = re.search(r"(\d+) generated", log)
print(f"schemathesis: {m.group(1) if m else '?'} test cases generated")
seen = re.findall(r"^- (ST[0-9]+) ", log, re.M)
failed = {c: sum(seen.count(code) for code in cs) for c, cs in codes.items()}
failed = {c: n for c, n in failed.items() if n}
for c, n in sorted(failed.items()):
    print(f"FAILED {c}: {n}")
# "Authentication failed: N operations returned only 401/403 responses", then one line each.
enders = set(sys.argv[2].split(";"))
only_auth, inside = set(), False
for line in log.splitlines():
    if "returned only 401/403 responses" in line:
        inside = True
    elif inside and re.match(r"^\s+- [A-Z]+ /", line):
        only_auth.add(line.strip()[2:])
    elif inside and line.strip() and not re.match(r"^40[13] ", line):
        inside = False
unexpected = sorted(only_auth - enders)
print(f"schemathesis: {len(unexpected)} operations answered only 401/403"
      + (f" (and, as expected, {len(only_auth & enders)} that end their own session)" if only_auth & enders else ""))
for op in unexpected:
    print(f"FAILED only 401/403: {op}")
if failed or unexpected:
    sys.exit(1)
print("schemathesis: no failure of " + ", ".join(sorted(codes)))
PY
# 0: no failure; 1: failures, judged above. Anything else is a run that did not happen.
if [ "$ST_EXIT" -gt 1 ]; then
  echo "schemathesis did not run (exit code $ST_EXIT)" >&2
  exit 1
fi
echo "schemathesis exit code $ST_EXIT (checks outside the required five do not fail this script)"
