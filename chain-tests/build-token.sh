#!/usr/bin/env bash
# Rebuilds each contracts/*.bin (committed) from its contracts/*.sol with solc from npm (pinned
# in package.json): `npm install` here first. The tests deploy the committed bytecode; this
# script shows where it comes from, and CI checks (`--check`) that it still matches.
set -euo pipefail
cd "$(dirname "$0")"
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
for sol in contracts/*.sol; do
  name=$(basename "$sol" .sol)
  node_modules/.bin/solcjs --bin --optimize --output-dir "$out" "$sol" >/dev/null
  bin=$(ls "$out"/*"$name".bin)
  if [ "${1:-}" = "--check" ]; then
    cmp -s "$bin" "contracts/$name.bin" || { echo "contracts/$name.bin is not what solc builds from $name.sol" >&2; exit 1; }
    echo "contracts/$name.bin matches its source"
  else
    cp "$bin" "contracts/$name.bin"
    echo "wrote contracts/$name.bin"
  fi
done
