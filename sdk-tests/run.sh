#!/usr/bin/env bash
# Runs the BitGoJS suite (sdk.test.mjs) against a fresh Custodian: `sdk-tests/run.sh <binary>`.
# With CUSTODIAN_SDK_POSTGRES_URL (an admin URL such as postgres://postgres@127.0.0.1:5432/postgres)
# it runs on a fresh PostgreSQL database, dropped afterwards; otherwise on a SQLite file in a
# temporary folder.
set -euo pipefail
bin=$(realpath "${1:?usage: sdk-tests/run.sh path/to/custodian}")
here=$(cd "$(dirname "$0")" && pwd)
dir=$(mktemp -d)
pid=
db=
cleanup() {
  [ -n "$pid" ] && kill "$pid" 2>/dev/null && wait "$pid" 2>/dev/null
  [ -n "$db" ] && psql -q "$CUSTODIAN_SDK_POSTGRES_URL" -c "DROP DATABASE IF EXISTS $db WITH (FORCE)" > /dev/null
  rm -rf "$dir"
}
trap cleanup EXIT
if [ -n "${CUSTODIAN_SDK_POSTGRES_URL:-}" ]; then
  db=custodian_sdk_$$
  psql -q "$CUSTODIAN_SDK_POSTGRES_URL" -c "CREATE DATABASE $db" > /dev/null
  export CUSTODIAN_DATABASE_URL="${CUSTODIAN_SDK_POSTGRES_URL%/*}/$db"
else
  export CUSTODIAN_DATABASE_URL="sqlite://$dir/custodian.db"
fi
export CUSTODIAN_ENVIRONMENT=test
export CUSTODIAN_SECRET_KEY_FILE="$dir/master.key"
head -c 32 /dev/urandom | od -An -tx1 | tr -d ' \n' > "$dir/master.key"
chmod 600 "$dir/master.key"
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
port=$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
(cd "$dir" && exec "$bin" serve --listen "127.0.0.1:$port" 2> "$dir/serve.log") &
pid=$!
for _ in $(seq 100); do
  curl -fs "http://127.0.0.1:$port/health" > /dev/null && break
  sleep 0.1
done
cd "$here"
if ! CUSTODIAN_URL="http://127.0.0.1:$port" CUSTODIAN_EMAIL="$email" CUSTODIAN_PASSWORD="$password" \
  CUSTODIAN_WALLET="$wallet" node --test sdk.test.mjs; then
  echo "--- server log" >&2
  tail -n 50 "$dir/serve.log" >&2
  exit 1
fi
