#!/usr/bin/env bash
# Rebuilds contracts/TestToken.bin (committed) from contracts/TestToken.sol with solc from npm
# (pinned in package.json): `npm install` here first. The tests deploy the committed bytecode;
# this script shows where it comes from, and CI checks that it still matches.
set -euo pipefail
cd "$(dirname "$0")"
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
node_modules/.bin/solcjs --bin --optimize --output-dir "$out" contracts/TestToken.sol >/dev/null
bin=$(ls "$out"/*TestToken.bin)
if [ "${1:-}" = "--check" ]; then
  cmp -s "$bin" contracts/TestToken.bin || { echo "contracts/TestToken.bin is not what solc builds from TestToken.sol" >&2; exit 1; }
  echo "contracts/TestToken.bin matches its source"
else
  cp "$bin" contracts/TestToken.bin
  echo "wrote contracts/TestToken.bin"
fi
