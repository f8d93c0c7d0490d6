# Sourced by sdk-tests/run.sh and console-tests/run.sh: a fresh Custodian for a client suite.
#
# server_setup NAME [POSTGRES_ADMIN_URL]: a temporary folder in $dir with a master key; with an
#   admin URL, a fresh PostgreSQL database custodian_NAME_PID (dropped at exit), else a SQLite
#   file in $dir. Exports CUSTODIAN_DATABASE_URL, CUSTODIAN_ENVIRONMENT=test and
#   CUSTODIAN_SECRET_KEY_FILE; at exit the server stops and everything is removed.
# server_start BIN: runs `BIN serve` in $dir on a free port ($port, $pid), its log in
#   $dir/serve.log, and waits until /health answers.
dir=
pid=
db=
admin_url=

server_cleanup() {
  [ -n "$pid" ] && kill "$pid" 2>/dev/null && wait "$pid" 2>/dev/null
  [ -n "$db" ] && psql -q "$admin_url" -c "DROP DATABASE IF EXISTS $db WITH (FORCE)" > /dev/null
  [ -n "$dir" ] && rm -rf "$dir"
}

server_setup() {
  dir=$(mktemp -d)
  admin_url=${2:-}
  trap server_cleanup EXIT
  if [ -n "$admin_url" ]; then
    db=custodian_$1_$$
    psql -q "$admin_url" -c "CREATE DATABASE $db" > /dev/null
    export CUSTODIAN_DATABASE_URL="${admin_url%/*}/$db"
  else
    export CUSTODIAN_DATABASE_URL="sqlite://$dir/custodian.db"
  fi
  export CUSTODIAN_ENVIRONMENT=test
  export CUSTODIAN_SECRET_KEY_FILE="$dir/master.key"
  head -c 32 /dev/urandom | od -An -tx1 | tr -d ' \n' > "$dir/master.key"
  chmod 600 "$dir/master.key"
}

server_start() {
  port=$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
  (cd "$dir" && exec "$1" serve --listen "127.0.0.1:$port" 2> "$dir/serve.log") &
  pid=$!
  for _ in $(seq 100); do
    curl -fs "http://127.0.0.1:$port/health" > /dev/null && break
    sleep 0.1
  done
}
