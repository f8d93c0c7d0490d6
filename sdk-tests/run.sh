#!/usr/bin/env bash
# Runs the BitGoJS suite (sdk.test.mjs) against a fresh Custodian: `sdk-tests/run.sh <binary>`.
# With CUSTODIAN_SDK_POSTGRES_URL (an admin URL such as postgres://postgres@127.0.0.1:5432/postgres)
# it runs on a fresh PostgreSQL database, dropped afterwards; otherwise on a SQLite file in a
# temporary folder.
set -euo pipefail
bin=$(realpath "${1:?usage: sdk-tests/run.sh path/to/custodian}")
here=$(cd "$(dirname "$0")" && pwd)
# shellcheck source=../scripts/client-suite-server.sh
. "$(dirname "$0")/../scripts/client-suite-server.sh"
server_setup sdk "${CUSTODIAN_SDK_POSTGRES_URL:-}"
email=sdk-$(date +%s%N)@example.com
password='correct horse battery staple'
user=$(cd "$dir" && printf '%s\n' "$password" | "$bin" user create --email "$email" --password-stdin --json \
  | python3 -c 'import json, sys; print(json.load(sys.stdin)["id"])')
enterprise=$(cd "$dir" && "$bin" enterprise create --name "SDK Fund" --json | python3 -c 'import json, sys; print(json.load(sys.stdin)["id"])')
(cd "$dir" && "$bin" enterprise add-user --enterprise "$enterprise" --email "$email" --admin > /dev/null)
wallet=$(od -An -tx1 -N16 /dev/urandom | tr -d ' \n')
cat > "$dir/wallet.json" <<JSON
[{"id": "$wallet", "label": "sdk hot", "coin": "tbtc", "type": "hot", "m": 2, "n": 3, "enterprise": "$enterprise",
  "organization": "org-sdk", "allowBackupKeySigning": false, "approvalsRequired": 1, "coinSpecific": {},
  "deleted": false, "disableTransactionNotifications": false, "hasLargeNumberOfAddresses": false, "isCold": false,
  "startDate": "2025-01-01T00:00:00Z", "users": [{"user": "$user", "permissions": ["admin", "spend", "view"]}]}]
JSON
(cd "$dir" && "$bin" wallet import wallet.json > /dev/null)
server_start "$bin"
cd "$here"
if ! CUSTODIAN_URL="http://127.0.0.1:$port" CUSTODIAN_EMAIL="$email" CUSTODIAN_PASSWORD="$password" \
  CUSTODIAN_WALLET="$wallet" node --test sdk.test.mjs; then
  echo "--- server log" >&2
  tail -n 50 "$dir/serve.log" >&2
  exit 1
fi
