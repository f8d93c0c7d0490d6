#!/usr/bin/env bash
# Runs the BitGoJS suite (sdk.test.mjs) against a fresh Custodian: `sdk-tests/run.sh <binary>`.
# With CUSTODIAN_SDK_POSTGRES_URL (an admin URL such as postgres://postgres@127.0.0.1:5432/postgres)
# it runs on a fresh PostgreSQL database, dropped afterwards; otherwise on a SQLite file in a
# temporary folder. With CUSTODIAN_SDK_URL it drives a deployment already running there instead
# (deploy/multihost/run.sh: several hosts behind a load balancer), set up through the CLI with the
# exported CUSTODIAN_DATABASE_URL and CUSTODIAN_SECRET_KEY_FILE; CUSTODIAN_SDK_ANVIL_URL names its
# node and CUSTODIAN_SDK_RECEIVER_HOST the address its hosts reach this machine at.
set -euo pipefail
bin=$(realpath "${1:?usage: sdk-tests/run.sh path/to/custodian}")
here=$(cd "$(dirname "$0")" && pwd)
# shellcheck source=../scripts/client-suite-server.sh
. "$(dirname "$0")/../scripts/client-suite-server.sh"
if [ -n "${CUSTODIAN_SDK_URL:-}" ]; then
  dir=$(mktemp -d)
  server_cleanup() { rm -rf "$dir"; }
  trap server_cleanup EXIT
else
  server_setup sdk "${CUSTODIAN_SDK_POSTGRES_URL:-}"
fi
# With CUSTODIAN_SDK_KEYS=pkcs11 the custodial wallets' keys live in SoftHSM2 (Debian's
# softhsm2), its token made here, and only the custodial-wallet test runs.
only=()
if [ "${CUSTODIAN_SDK_KEYS:-}" = pkcs11 ]; then
  mkdir -p "$dir/softhsm/tokens"
  printf 'directories.tokendir = %s\nobjectstore.backend = file\n' "$dir/softhsm/tokens" > "$dir/softhsm/softhsm2.conf"
  export SOFTHSM2_CONF="$dir/softhsm/softhsm2.conf"
  softhsm2-util --init-token --free --label sdk --pin 2468 --so-pin 1357 > /dev/null
  export CUSTODIAN_KEYS_BACKEND=pkcs11 CUSTODIAN_KEYS_PKCS11_MODULE=/usr/lib/softhsm/libsofthsm2.so \
    CUSTODIAN_KEYS_PKCS11_TOKEN=sdk CUSTODIAN_PKCS11_PIN=2468
  only=(--test-name-pattern "custodial wallet")
fi
email=sdk-$(date +%s%N)@example.com
password='correct horse battery staple'
user=$(cd "$dir" && printf '%s\n' "$password" | "$bin" user create --email "$email" --password-stdin --json \
  | python3 -c 'import json, sys; print(json.load(sys.stdin)["id"])')
# A second user for the ECDH tests: once they have an ECDH keychain, BitGoJS needs the service's
# xpub (serverXpub) to log them in.
ecdh_email=sdk-ecdh-$(date +%s%N)@example.com
(cd "$dir" && printf '%s\n' "$password" | "$bin" user create --email "$ecdh_email" --password-stdin > /dev/null)
server_xpub=$(cd "$dir" && "$bin" ecdh show-xpub)
# A third user for the passkey test, whose refused attempts count toward their own lockout.
passkey_email=sdk-passkey-$(date +%s%N)@example.com
(cd "$dir" && printf '%s\n' "$password" | "$bin" user create --email "$passkey_email" --password-stdin > /dev/null)
# An OAuth application for authenticateWithAuthCode (docs/oauth.md).
# authenticateWithAuthCode sends no code_verifier: the application is registered PKCE-optional.
oauth_client=$(cd "$dir" && "$bin" oauth-client create --name "SDK suite" --redirect-uri http://127.0.0.1:9/callback \
  --scope profile --scope wallet_view_all --scope openid --pkce-optional --json)
enterprise=$(cd "$dir" && "$bin" enterprise create --name "SDK Fund" --json | python3 -c 'import json, sys; print(json.load(sys.stdin)["id"])')
(cd "$dir" && "$bin" enterprise add-user --enterprise "$enterprise" --email "$email" --admin > /dev/null)
# A second admin of the enterprise, who approves the first user's withdrawals (docs/withdrawals.md).
approver_email=sdk-approver-$(date +%s%N)@example.com
(cd "$dir" && printf '%s\n' "$password" | "$bin" user create --email "$approver_email" --password-stdin > /dev/null)
(cd "$dir" && "$bin" enterprise add-user --enterprise "$enterprise" --email "$approver_email" --admin > /dev/null)
wallet=$(od -An -tx1 -N16 /dev/urandom | tr -d ' \n')
cat > "$dir/wallet.json" <<JSON
[{"id": "$wallet", "label": "sdk hot", "coin": "tbtc", "type": "hot", "m": 2, "n": 3, "enterprise": "$enterprise",
  "organization": "org-sdk", "allowBackupKeySigning": false, "approvalsRequired": 1, "coinSpecific": {},
  "deleted": false, "disableTransactionNotifications": false, "hasLargeNumberOfAddresses": false, "isCold": false,
  "startDate": "2025-01-01T00:00:00Z", "users": [{"user": "$user", "permissions": ["admin", "spend", "view"]}]}]
JSON
(cd "$dir" && "$bin" wallet import wallet.json > /dev/null)
# A real Ethereum node (anvil from chain-tests/, installed by .ci/run) watched as hteth, with a
# wallet at its second dev account; the suite's receiver runs on this machine.
anvil_bin="$here/../chain-tests/node_modules/.bin/anvil"
if [ -n "${CUSTODIAN_SDK_ANVIL_URL:-}" ]; then
  anvil_url=$CUSTODIAN_SDK_ANVIL_URL
else
  [ -x "$anvil_bin" ] || { echo "anvil is missing: run npm install in chain-tests/" >&2; exit 1; }
  anvil_port=$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
  "$anvil_bin" --port "$anvil_port" --silent & anvil_pid=$!
  trap 'kill $anvil_pid 2>/dev/null; server_cleanup' EXIT
  anvil_url="http://127.0.0.1:$anvil_port"
  # The test ERC-20 (chain-tests/contracts), deployed on the fresh node and watched as hteth:tst.
  token_contract=$(python3 - "$anvil_url" "$here/../chain-tests/contracts/TestToken.bin" <<'PY'
import json, sys, time, urllib.request
url, code = sys.argv[1], open(sys.argv[2]).read().strip()
def rpc(method, params):
    body = json.dumps({"jsonrpc": "2.0", "id": 1, "method": method, "params": params}).encode()
    for _ in range(100):
        try:
            req = urllib.request.Request(url, body, {"Content-Type": "application/json"})
            with urllib.request.urlopen(req, timeout=5) as res:
                return json.load(res)["result"]
        except OSError:
            time.sleep(0.1)
    raise SystemExit("anvil did not answer")
deploy = {"from": "0xf39Fd6e51aad88F6F4ce6aB8827279cffFb92266", "data": "0x" + code + format(10**27, "064x"), "gas": "0x200000"}
sent = rpc("eth_sendTransaction", [deploy])
# anvil mines a moment after it answers the send: the receipt is asked for until it is there.
for _ in range(100):
    receipt = rpc("eth_getTransactionReceipt", [sent])
    if receipt:
        break
    time.sleep(0.05)
else:
    raise SystemExit("the token's deployment was not mined")
print(receipt["contractAddress"])
PY
)
  export CUSTODIAN_CHAINS_HTETH_TOKENS="[{coin=\"hteth:tst\",contract=\"$token_contract\",decimals=18}]"
  export CUSTODIAN_CHAINS_HTETH_RPC_URL="$anvil_url" CUSTODIAN_CHAINS_HTETH_CHAIN_ID=31337 \
    CUSTODIAN_CHAINS_HTETH_CONFIRMATIONS=2 CUSTODIAN_CHAINS_HTETH_START_BLOCK=0 CUSTODIAN_CHAINS_HTETH_POLL_INTERVAL_MS=100 \
    CUSTODIAN_DELIVERY_ALLOWED_CIDRS=127.0.0.0/8
fi
# Litecoin Core in regtest (Debian's litecoind, installed by .ci/run), watched as tltc: the
# UTXO wallet test pays its addresses and reads transfers and unspents through BitGoJS.
ltc_rpc_url=
if [ -z "${CUSTODIAN_SDK_URL:-}" ] && [ -x /usr/lib/litecoin/litecoind ]; then
  ltc_rpc=$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
  mkdir -p "$dir/litecoin"
  /usr/lib/litecoin/litecoind -regtest -datadir="$dir/litecoin" -rpcport="$ltc_rpc" -listen=0 -rpcbind=127.0.0.1 \
    -rpcallowip=127.0.0.1 -rpcuser=sdk -rpcpassword=sdk -fallbackfee=0.0001 > /dev/null 2>&1 & ltc_pid=$!
  # litecoind writes its files while it shuts down: wait for it before its folder is removed.
  trap 'kill $ltc_pid ${anvil_pid:-} 2>/dev/null || true; wait $ltc_pid 2>/dev/null || true; server_cleanup' EXIT
  ltc_rpc_url="http://127.0.0.1:$ltc_rpc"
  export CUSTODIAN_CHAINS_TLTC_FAMILY=utxo CUSTODIAN_CHAINS_TLTC_RPC_URL="$ltc_rpc_url" \
    CUSTODIAN_CHAINS_TLTC_NETWORK=regtest CUSTODIAN_CHAINS_TLTC_RPC_USER=sdk CUSTODIAN_CHAINS_TLTC_RPC_PASSWORD=sdk \
    CUSTODIAN_CHAINS_TLTC_CONFIRMATIONS=2 CUSTODIAN_CHAINS_TLTC_START_BLOCK=0 CUSTODIAN_CHAINS_TLTC_POLL_INTERVAL_MS=100
fi
eth_wallet=$(od -An -tx1 -N16 /dev/urandom | tr -d ' \n')
sed "s/\"id\": \"$wallet\"/\"id\": \"$eth_wallet\"/; s/\"coin\": \"tbtc\"/\"coin\": \"hteth\"/;
  s/\"coinSpecific\": {}/\"coinSpecific\": {\"baseAddress\": \"0x70997970c51812dc3a010c7d01b50e0d17dc79c8\"}/" \
  "$dir/wallet.json" > "$dir/eth.json"
(cd "$dir" && "$bin" wallet import eth.json > /dev/null)
if [ -n "${CUSTODIAN_SDK_URL:-}" ]; then
  url=$CUSTODIAN_SDK_URL
else
  server_start "$bin"
  url="http://127.0.0.1:$port"
fi
cd "$here"
if ! CUSTODIAN_URL="$url" CUSTODIAN_EMAIL="$email" CUSTODIAN_PASSWORD="$password" \
  CUSTODIAN_ECDH_EMAIL="$ecdh_email" CUSTODIAN_SERVER_XPUB="$server_xpub" CUSTODIAN_PASSKEY_EMAIL="$passkey_email" \
  CUSTODIAN_OAUTH_CLIENT="$oauth_client" CUSTODIAN_ENTERPRISE="$enterprise" CUSTODIAN_APPROVER_EMAIL="$approver_email" \
  CUSTODIAN_WALLET="$wallet" CUSTODIAN_ETH_WALLET="$eth_wallet" CUSTODIAN_ANVIL_URL="$anvil_url" CUSTODIAN_TOKEN_CONTRACT="${token_contract:-}" CUSTODIAN_RECEIVER_HOST="${CUSTODIAN_SDK_RECEIVER_HOST:-127.0.0.1}" CUSTODIAN_LTC_RPC_URL="$ltc_rpc_url" \
  node --test "${only[@]}" sdk.test.mjs; then
  if [ -f "$dir/serve.log" ]; then
    echo "--- server log" >&2
    tail -n 50 "$dir/serve.log" >&2
  fi
  exit 1
fi
