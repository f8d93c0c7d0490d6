# Sourced by deploy/multihost/run.sh: hosts made of network namespaces on one bridge.
#
# hosts_up: the bridge cu-br (10.88.0.1/24, this machine, where the test driver runs) and one
#   namespace per host, each with its own address on the bridge and its own loopback:
#     cu-db    10.88.0.2   PostgreSQL
#     cu-lb    10.88.0.10  HAProxy
#     cu-api1  10.88.0.11  custodian serve --role api   (and cu-api2 .12, cu-api3 .13)
#     cu-wrk1  10.88.0.21  custodian serve --role worker (and cu-wrk2 .22)
#     cu-rx    10.88.0.30  the webhook receiver
# hosts_down: kills whatever still runs on them and removes them (idempotent, also after a
#   crash of an earlier run).

HOSTS="db:2 lb:10 api1:11 api2:12 api3:13 wrk1:21 wrk2:22 rx:30"

hosts_down() {
  local h
  for h in $HOSTS; do
    ip netns pids "cu-${h%%:*}" 2>/dev/null | xargs -r kill -9 2>/dev/null || true
    ip netns del "cu-${h%%:*}" 2>/dev/null || true
  done
  ip link del cu-br 2>/dev/null || true
}

hosts_up() {
  hosts_down
  ip link add cu-br type bridge
  ip addr add 10.88.0.1/24 dev cu-br
  ip link set cu-br up
  local h name octet
  for h in $HOSTS; do
    name=${h%%:*} octet=${h##*:}
    ip netns add "cu-$name"
    ip link add "cu-v-$name" type veth peer name eth0 netns "cu-$name"
    ip link set "cu-v-$name" master cu-br up
    ip -n "cu-$name" addr add "10.88.0.$octet/24" dev eth0
    ip -n "cu-$name" link set eth0 up
    ip -n "cu-$name" link set lo up
  done
}

# on HOST CMD...: runs CMD on host HOST (its namespace).
on() {
  local host=$1
  shift
  ip netns exec "cu-$host" "$@"
}
