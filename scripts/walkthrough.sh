#!/usr/bin/env bash
# Runs the README's walkthrough exactly as written (the first ```sh block under "## Walkthrough",
# then the one under "## Watching a chain", which needs ports 8545 and 4000 again and npm, then
# docs/chains.md's "### Walkthrough: watching Litecoin", docs/withdrawals.md's "## Walkthrough:
# moving money", which starts them again, then docs/sso.md's "## Walkthrough: sign in with your
# identity provider", which needs port 4001 and Node.js),
# with `bash -e -o pipefail` from the repository root, so CI fails when a newcomer's paste would.
# The database goes to a temporary folder (CUSTODIAN_DATABASE_URL) and ./data is untouched. Needs
# ports 3080 and 4000 free, curl, jq and python3. Started processes are stopped on any exit.
set -euo pipefail
cd "$(dirname "$0")/.."
for tool in curl jq python3; do
  command -v "$tool" >/dev/null || { echo "the walkthrough needs $tool" >&2; exit 1; }
done
tmp=$(mktemp -d)
block="$tmp/walkthrough.sh"
python3 - "$block" <<'PY'
import re, sys
readme = open("README.md").read()
withdrawals = open("docs/withdrawals.md").read()
chains = open("docs/chains.md").read()
sso = open("docs/sso.md").read()
# The walkthrough, then "Watching a chain", which continues from it, then moving money.
blocks = []
for text, title in ((readme, "## Walkthrough"), (readme, "## Watching a chain"), (chains, "### Walkthrough: watching Litecoin"), (withdrawals, "## Walkthrough: moving money"), (sso, "## Walkthrough: sign in with your identity provider")):
    section = text.split(title, 1)[1]
    blocks.append(re.search(r"```sh\n(.*?)```", section, re.S).group(1))
open(sys.argv[1], "w").write("\n".join(blocks))
PY
export CUSTODIAN_DATABASE_URL="sqlite://$tmp/custodian.db"
# The walkthrough runs in a session of its own: whatever it starts in the background is stopped
# with it, whatever happens.
pgid=""
cleanup() {
  if [ -n "$pgid" ]; then
    kill -TERM -- "-$pgid" >/dev/null 2>&1 || true
    # The group's nodes write their files as they shut down: wait for them (at most 10 s)
    # before their folder is removed, as sdk-tests/run.sh does for litecoind.
    for _ in $(seq 1 100); do
      kill -0 -- "-$pgid" 2>/dev/null || break
      sleep 0.1
    done
  fi
  rm -rf "$tmp"
}
trap cleanup EXIT
echo "running the README walkthrough ($(grep -c '' "$block") lines) with its database in $tmp"
setsid bash -e -o pipefail "$block" > "$tmp/out.txt" 2>&1 &
pid=$!
pgid=$pid
status=0
wait "$pid" || status=$?
if [ "$status" -ne 0 ]; then
  cat "$tmp/out.txt"
  echo "walkthrough failed (exit $status)" >&2
  exit 1
fi
cat "$tmp/out.txt"
grep -q '"state": "processed"' "$tmp/out.txt" || { echo "no webhook reached the receiver" >&2; exit 1; }
grep -q '"state": "confirmed"' "$tmp/out.txt" || { echo "no chain transfer reached the receiver" >&2; exit 1; }
grep -q '"transferType": "send"' "$tmp/out.txt" || { echo "no withdrawal reached the receiver" >&2; exit 1; }
echo "walkthrough ok"
