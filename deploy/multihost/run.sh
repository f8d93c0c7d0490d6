#!/usr/bin/env bash
# The multi-host test (docs/deployment.md): `deploy/multihost/run.sh path/to/custodian [--bench]`,
# as root. Builds the hosts of hosts.sh in network namespaces, starts PostgreSQL on its own host,
# HAProxy with deploy/haproxy.cfg, a webhook receiver and an Ethereum node (anvil, from
# chain-tests/), then check.py starts 3 API and 2 worker processes and proves, with figures
# printed, that the service behaves as one: the BitGoJS suite through the balancer, the
# aggregate rate limit, replay refusal on every other host, 20,000 events across kill -9, and
# a rolling restart. Everything is removed at exit. --bench measures end-to-end deliveries/s
# of this layout against one process instead (docs/performance.md).
set -euo pipefail
bin=$(realpath "${1:?usage: deploy/multihost/run.sh path/to/custodian [--bench]}")
shift
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
[ "$(id -u)" = 0 ] || { echo "the multi-host test makes network namespaces: run it as root" >&2; exit 1; }
command -v haproxy >/dev/null || { echo "HAProxy is missing (Debian package haproxy)" >&2; exit 1; }
pgbin=/usr/lib/postgresql/$(ls /usr/lib/postgresql | sort -V | tail -n 1)/bin
[ -x "$pgbin/initdb" ] || { echo "PostgreSQL's server binaries are missing" >&2; exit 1; }
anvil_bin="$root/chain-tests/node_modules/.bin/anvil"
[ -x "$anvil_bin" ] || { echo "anvil is missing: run npm install in chain-tests/" >&2; exit 1; }

# shellcheck source=hosts.sh
. "$here/hosts.sh"
work=$(mktemp -d /tmp/custodian-multihost.XXXXXX)
chmod 755 "$work"
pids=()
cleanup() {
  set +e
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null; done
  hosts_down
  rm -rf "$work"
}
trap cleanup EXIT
hosts_up

# The database host.
mkdir "$work/pg" && chown postgres "$work/pg"
runuser -u postgres -- "$pgbin/initdb" -D "$work/pg" -A trust -U postgres >/dev/null
echo "host all all 10.88.0.0/24 trust" >> "$work/pg/pg_hba.conf"
on db runuser -u postgres -- "$pgbin/pg_ctl" -D "$work/pg" -l "$work/pg/log" -w -o \
  "-c listen_addresses=10.88.0.2 -c unix_socket_directories=$work/pg -c max_connections=200" start >/dev/null
psql -q "postgres://postgres@10.88.0.2:5432/postgres" -c "CREATE DATABASE custodian"

# The balancer, with its admin socket in the work folder.
sed "s#/run/haproxy/admin.sock#$work/haproxy.sock#" "$root/deploy/haproxy.cfg" > "$work/haproxy.cfg"
on lb haproxy -f "$work/haproxy.cfg" -db > "$work/haproxy.log" 2>&1 & pids+=($!)
# The receiver host, and the Ethereum node on this machine.
on rx python3 "$here/receiver.py" 10.88.0.30 9000 & pids+=($!)
"$anvil_bin" --host 10.88.0.1 --port 8545 --silent & pids+=($!)

head -c 32 /dev/urandom | od -An -tx1 | tr -d ' \n' > "$work/master.key"
chmod 600 "$work/master.key"
python3 "$here/check.py" --bin "$bin" --work "$work" --root "$root" "$@"
