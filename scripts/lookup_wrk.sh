#!/usr/bin/env bash
# The wallet lookup beside its one-query reference, measured by `wrk -c64` from another
# process (docs/decisions.md#performance-as-the-data-grows): `cargo bench --bench lookup` serves both routes over 10,000 stored
# wallets (BENCH_SERVE), and wrk POSTs random ids to each in alternating rounds.
# Usage: scripts/lookup_wrk.sh [rounds (5)] [seconds per run (5)]
set -euo pipefail
rounds=${1:-5}
secs=${2:-5}
dir=$(mktemp -d)
trap 'kill $(jobs -p) 2>/dev/null || true; rm -rf "$dir"' EXIT
cat > "$dir/lookup.lua" <<'LUA'
-- A body of LOOKUP_IDS distinct random ids of the bench's 10,000 wallets.
local size = tonumber(os.getenv("LOOKUP_IDS") or "1")
local token = os.getenv("LOOKUP_TOKEN")
wrk.method = "POST"
wrk.headers["Content-Type"] = "application/json"
if token and token ~= "" then wrk.headers["Authorization"] = "Bearer " .. token end
request = function()
  local seen, ids = {}, {}
  while #ids < size do
    local i = math.random(0, 9999)
    if not seen[i] then
      seen[i] = true
      ids[#ids + 1] = string.format('"%032x"', i)
    end
  end
  return wrk.format(nil, nil, nil, '{"ids":[' .. table.concat(ids, ",") .. ']}')
end
LUA
serve_secs=$(( rounds * secs * 4 + 60 ))
BENCH_SERVE=$serve_secs BENCH_SERVE_FILE="$dir/serve.env" cargo bench --bench lookup >"$dir/bench.log" 2>&1 &
for _ in $(seq 1 600); do [ -s "$dir/serve.env" ] && break; sleep 1; done
[ -s "$dir/serve.env" ] || { cat "$dir/bench.log"; exit 1; }
# shellcheck disable=SC1091
source "$dir/serve.env"
rps() { # url token size
  LOOKUP_TOKEN=$2 LOOKUP_IDS=$3 wrk -c64 -t2 -d"${secs}s" -s "$dir/lookup.lua" "$1" \
    | awk '/Requests\/sec/ {print $2} /Non-2xx/ {print "non-2xx: " $0 > "/dev/stderr"}'
}
echo "wrk -c64 -t2, ${secs} s per run, $rounds alternating rounds ($(date -u +%F), $(nproc) cores)"
for size in 1 100; do
  ratios=()
  for _ in $(seq 1 "$rounds"); do
    ours=$(rps "$CUSTODIAN_URL" "$TOKEN" "$size")
    ref=$(rps "$REFERENCE_URL" "" "$size")
    ratio=$(awk -v a="$ours" -v b="$ref" 'BEGIN {printf "%.2f", a / b}')
    echo "  $size ids: custodian $ours req/s, reference $ref req/s, ratio $ratio"
    ratios+=("$ratio")
  done
  median=$(printf '%s\n' "${ratios[@]}" | sort -n | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}')
  echo "$size ids: median ratio $median"
done
