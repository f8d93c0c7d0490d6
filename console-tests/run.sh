#!/usr/bin/env bash
# Runs the console's browser suite (test_console.py: Playwright for Python driving Debian's
# headless Chromium) against a fresh Custodian: `console-tests/run.sh <binary> [pytest args]`.
# With CUSTODIAN_CONSOLE_POSTGRES_URL (an admin URL such as postgres://postgres@127.0.0.1:5432/postgres)
# it runs on a fresh PostgreSQL database, dropped afterwards; otherwise on a SQLite file.
# Needs: python3 with playwright, pytest and pyotp (CONSOLE_PYTHON, default python3), and
# /usr/bin/chromium (CONSOLE_CHROMIUM). Screenshots go to console-tests/screenshots/.
set -euo pipefail
bin=$(realpath "${1:?usage: console-tests/run.sh path/to/custodian [pytest args]}")
shift
here=$(cd "$(dirname "$0")" && pwd)
python=${CONSOLE_PYTHON:-python3}
# shellcheck source=../scripts/client-suite-server.sh
. "$(dirname "$0")/../scripts/client-suite-server.sh"
server_setup console "${CUSTODIAN_CONSOLE_POSTGRES_URL:-}"
# The receivers run on this machine; a failed notification fails for good after one retry.
export CUSTODIAN_DELIVERY_ALLOWED_CIDRS=127.0.0.0/8
export CUSTODIAN_DELIVERY_RETRY_SCHEDULE=1
export CUSTODIAN_DELIVERY_SUSPEND_AFTER_FAILURES=1000
export CUSTODIAN_DELIVERY_SUSPEND_AFTER_TOTAL_FAILURES=1000
# Passkeys are bound to a host name (browsers refuse an address): the passkey test opens the
# console at http://localhost:<port>.
export CUSTODIAN_PASSKEYS_ALLOW_ANY_PORT=true
password='correct horse battery staple'
cli() { (cd "$dir" && "$bin" "$@"); }
new_user() { printf '%s\n' "$password" | cli user create --email "$1" --password-stdin --json "${@:2}"; }
new_enterprise() { cli enterprise create --name "$1" --json | "$python" -c 'import json, sys; print(json.load(sys.stdin)["id"])'; }
alice=$(new_user alice@example.com)
bob=$(new_user bob@example.com)
root=$(new_user root@example.com --service-admin)
carol=$(new_user carol@example.com)
dave=$(new_user dave@example.com)
# Erin signs in through Acme's identity provider (docs/sso.md).
erin=$(new_user erin@example.com)
acme=$(new_enterprise "Acme Fund")
beta=$(new_enterprise "Beta Capital")
cli enterprise add-user --enterprise "$acme" --email alice@example.com --admin > /dev/null
# Dave approves Acme's withdrawals (an enterprise admin other than the initiator).
cli enterprise add-user --enterprise "$acme" --email dave@example.com --admin > /dev/null
cli enterprise add-user --enterprise "$beta" --email bob@example.com --admin > /dev/null
cli enterprise add-user --enterprise "$acme" --email erin@example.com > /dev/null
# Withdrawals are valued in US dollars (docs/policy.md#circuit-breaker): the console shows it.
cli price set --coin hteth --usd 3000 > /dev/null
id_of() { printf '%s' "$1" | "$python" -c 'import json, sys; print(json.load(sys.stdin)["id"])'; }
w1=$(od -An -tx1 -N16 /dev/urandom | tr -d ' \n')
w2=$(od -An -tx1 -N16 /dev/urandom | tr -d ' \n')
wallet() {
  printf '{"id": "%s", "label": "%s", "coin": "tbtc", "type": "hot", "m": 2, "n": 3, "enterprise": "%s", "organization": "org", "allowBackupKeySigning": false, "approvalsRequired": 1, "coinSpecific": {}, "deleted": false, "disableTransactionNotifications": false, "hasLargeNumberOfAddresses": false, "isCold": false, "startDate": "2025-01-01T00:00:00Z", "users": [{"user": "%s", "permissions": ["admin", "spend", "view"]}]}' "$@"
}
echo "[$(wallet "$w1" "Acme hot" "$acme" "$(id_of "$alice")"), $(wallet "$w2" "Beta hot" "$beta" "$(id_of "$bob")")]" > "$dir/wallets.json"
cli wallet import wallets.json > /dev/null
# An OAuth application whose redirect URI the browser test intercepts.
oauth_client=$(cli oauth-client create --name "Ledger Sync" --redirect-uri http://127.0.0.1:9/callback \
  --scope profile --scope wallet_view_all --json)
# A real Ethereum node for the Chains page (anvil from chain-tests/, installed by .ci/run), watched
# as hteth, with an Acme wallet at its second dev account.
anvil_bin="$here/../chain-tests/node_modules/.bin/anvil"
[ -x "$anvil_bin" ] || { echo "anvil is missing: run npm install in chain-tests/" >&2; exit 1; }
anvil_port=$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
"$anvil_bin" --port "$anvil_port" --silent & anvil_pid=$!
sso_pid=
trap 'kill $anvil_pid $sso_pid 2>/dev/null; server_cleanup' EXIT
export CUSTODIAN_CHAINS_HTETH_RPC_URL="http://127.0.0.1:$anvil_port" CUSTODIAN_CHAINS_HTETH_CHAIN_ID=31337 \
  CUSTODIAN_CHAINS_HTETH_CONFIRMATIONS=3 CUSTODIAN_CHAINS_HTETH_START_BLOCK=0 CUSTODIAN_CHAINS_HTETH_POLL_INTERVAL_MS=100
w3=$(od -An -tx1 -N16 /dev/urandom | tr -d ' \n')
wallet "$w3" "Acme ETH" "$acme" "$(id_of "$alice")" \
  | sed 's/"coin": "tbtc"/"coin": "hteth"/; s/"coinSpecific": {}/"coinSpecific": {"baseAddress": "0x70997970C51812dc3A010C7d01b50e0d17dc79C8"}/' \
  | sed 's/^/[/; s/$/]/' > "$dir/eth.json"
cli wallet import eth.json > /dev/null
server_start "$bin"
# A real OpenID Connect provider (sso-tests/, installed by .ci/run) for the single sign-on test:
# one client returning to this console, and Erin with a verified email.
[ -d "$here/../sso-tests/node_modules/oidc-provider" ] || { echo "oidc-provider is missing: run npm install in sso-tests/" >&2; exit 1; }
cat > "$dir/sso.json" <<JSON
{"clients": [{"client_id": "custodian", "client_secret": "s3cret", "redirect_uris": ["http://127.0.0.1:$port/console/sso/callback"]}],
 "accounts": {"erin-sub": {"email": "erin@example.com", "email_verified": true, "groups": []}}}
JSON
mkfifo "$dir/sso.out"
node "$here/../sso-tests/provider.mjs" "$dir/sso.json" > "$dir/sso.out" 2> "$dir/sso.log" & sso_pid=$!
read -r sso_line < "$dir/sso.out"
sso_issuer=$(printf '%s' "$sso_line" | "$python" -c 'import json, sys; print(json.load(sys.stdin)["issuer"])')
"$python" - "$dir/fixture.json" <<PY
import json, sys
json.dump({
    "url": "http://127.0.0.1:$port",
    "password": "$password",
    "users": {"alice": $alice, "bob": $bob, "root": $root, "carol": $carol, "dave": $dave, "erin": $erin},
    "sso": "$sso_issuer",
    "enterprises": {"acme": "$acme", "beta": "$beta"},
    "wallets": {"acme": "$w1", "beta": "$w2", "eth": "$w3"},
    "anvil": "http://127.0.0.1:$anvil_port",
    "oauth": $oauth_client,
}, open(sys.argv[1], "w"))
PY
mkdir -p "$here/screenshots"
cd "$here"
if ! CONSOLE_FIXTURE="$dir/fixture.json" "$python" -m pytest -q -p no:cacheprovider test_console.py "$@"; then
  echo "--- server log" >&2
  tail -n 50 "$dir/serve.log" >&2
  exit 1
fi
