#!/usr/bin/env bash
# Remote access (issue #36 item 1, docs/remote-access.md): tunneld as the gateway with an
# address pool and a DNS server, two strongSwan 5.9.8 road-warrior clients (charon +
# kernel-libipsec, `vips = 0.0.0.0`, PSK) behind ONE masquerading NAT (nftables), as root in
# network namespaces named by this script's PID:
#
#   c1 (charon, alice)  192.168.71.2 --+
#                                      +-- n (nftables masquerade) 10.93.1.254 ---- 10.93.1.1 s (tunneld)
#   c2 (charon, bob)    192.168.72.2 --+                                                 |
#                                                                     h (a host) 10.93.100.2 -- 10.93.100.1
#   pool "rw": 10.93.3.0/24 (ipsec0 of s routes it), DNS 10.93.100.53, split_include 10.93.100.0/24
#
# Stages:
#   pool   both clients connect; each gets its own address from the pool (charon's list-sas and
#          tunneld's `ike list`, which shows the virtual IP) and the pool's DNS server (written
#          by charon's resolve plugin to a file of the test's own); each pings the host behind
#          the gateway and the other client through the gateway; the per-pool gauges
#          (`ipsec show --stats FILE --format prometheus`) say 2 leased
#          and `ike list` shows each client's children's bytes in and out (data-plane counts)
#   again  alice disconnects (her lease is released) and connects again: the same address
#   replace (the gateway has `unique = "replace"`) bob's charon comes back as alice: tunneld
#          sends alice's first IKE SA a Delete (charon c1 logs "received DELETE for IKE_SA"
#          and has no SA left), the newcomer gets alice's address, tunneld's monitor says
#          ike.down Replaced; c2 then goes back to being bob
#   full   tunneld restarted with a pool of one address: alice gets it, bob is refused with
#          INTERNAL_ADDRESS_FAILURE (charon's log; tunneld's ike.pool_exhausted event), and
#          tunneld keeps serving (alice still pings)
#
#   sudo bash scripts/ci/ike-roadwarrior.sh              # every stage (builds tunneld and ipsec)
#   sudo bash scripts/ci/ike-roadwarrior.sh --ci         # the same, the CI's short form (< 40 s)
#   bash scripts/ci/ike-roadwarrior.sh --if-possible     # no root / netns / strongSwan: say why, exit 0
#   IKE_RW_KEEP=1 ...                                 # keep the work directory (configs, logs)
#   TUNNELD_BIN=target/debug/tunneld IPSEC_BIN=target/debug/ipsec sudo -E bash scripts/ci/ike-roadwarrior.sh
set -euo pipefail
cd "$(dirname "$0")/../.."
NETNS_TAG=ike-roadwarrior
. scripts/lib/netns.sh
. scripts/lib/strongswan.sh
. scripts/lib/roadwarrior.sh
ALL="pool again replace full"
parse_stages "$ALL" "$@" # --ci: every stage (they take about 10 s)
need_netns "network namespaces, charon, tunneld"
swan_install
rw_bins
WORK=$(mktemp -d /tmp/ike-roadwarrior.XXXXXX)
trap 'rc=$?; swan_stop_all >/dev/null 2>&1 || true; [ "${IKE_RW_KEEP:-0}" = 0 ] || { log "files kept in $WORK"; [ $rc -ne 0 ] || WORK=; }; cleanup_all $rc 8' EXIT
trap 'fail "interrupted"' INT TERM
SWAN_LOG="ike=2 cfg=2 knl=1 net=1 enc=1 dmn=1 lib=1 job=1"
SWAN_PLUGINS="$SWAN_PLUGINS resolve"

T=rw$(($$ % 10000000))
S=${T}s N=${T}n H=${T}h C1=${T}c1 C2=${T}c2
GW=10.93.1.1
NAT_WAN=10.93.1.254
HOST=10.93.100.2
DNS=10.93.100.53
POOL_NET=10.93.3.0/24
IKE=aes128gcm16-prfsha256-x25519
ESP=aes128gcm16
PSK="rw-$RANDOM$RANDOM"

# ---- the namespaces ------------------------------------------------------------------------
netns_add "$S" "$N" "$H" "$C1" "$C2"
for ns in "$S" "$N" "$H" "$C1" "$C2"; do ip -n "$ns" link set lo up; done
ip link add "${T}sw" netns "$S" type veth peer name "${T}nw" netns "$N"
ip link add "${T}sh" netns "$S" type veth peer name "${T}hs" netns "$H"
ip link add "${T}n1" netns "$N" type veth peer name "${T}c1" netns "$C1"
ip link add "${T}n2" netns "$N" type veth peer name "${T}c2" netns "$C2"
ip -n "$S" addr add $GW/24 dev "${T}sw"
ip -n "$N" addr add $NAT_WAN/24 dev "${T}nw"
ip -n "$S" addr add 10.93.100.1/24 dev "${T}sh"
ip -n "$H" addr add $HOST/24 dev "${T}hs"
ip -n "$H" addr add $DNS/32 dev lo
ip -n "$N" addr add 192.168.71.1/24 dev "${T}n1"
ip -n "$N" addr add 192.168.72.1/24 dev "${T}n2"
ip -n "$C1" addr add 192.168.71.2/24 dev "${T}c1"
ip -n "$C2" addr add 192.168.72.2/24 dev "${T}c2"
for l in "$S ${T}sw" "$S ${T}sh" "$N ${T}nw" "$N ${T}n1" "$N ${T}n2" "$H ${T}hs" "$C1 ${T}c1" "$C2 ${T}c2"; do
  read -r ns dev <<<"$l"
  ip -n "$ns" link set "$dev" up
done
ip -n "$C1" route add default via 192.168.71.1
ip -n "$C2" route add default via 192.168.72.1
ip -n "$H" route add $POOL_NET via 10.93.100.1
ip netns exec "$N" sysctl -qw net.ipv4.ip_forward=1
ip netns exec "$S" sysctl -qw net.ipv4.ip_forward=1
for k in all default; do ip netns exec "$S" sysctl -qw "net.ipv4.conf.$k.rp_filter=0"; done
ip netns exec "$N" nft -f - <<EOF
table ip rwnat {
  chain post {
    type nat hook postrouting priority 100;
    oifname "${T}nw" masquerade
  }
}
EOF
ip netns exec "$C1" ping -c 1 -W 3 -q $GW >/dev/null || fail "topology: c1 cannot reach the gateway"
ip netns exec "$C2" ping -c 1 -W 3 -q $GW >/dev/null || fail "topology: c2 cannot reach the gateway"

# ---- tunneld, the gateway -------------------------------------------------------------------
# td_conf DIR ADDRS: tunneld.toml with the pool `rw` (ADDRS) and the %any connection `rw`.
td_conf() {
  local d=$1
  mkdir -p "$d"
  cat >"$d/tunneld.toml" <<EOF
# written by scripts/ci/ike-roadwarrior.sh
[tunnel]
tun = "ipsec0"
local = "$GW"
secrets = "$d/secrets.toml"

[[pool]]
name = "rw"
addrs = "$2"
dns = ["$DNS"]
split_include = ["10.93.100.0/24"]
dns_domains = ["rw.test"]

[[connection]]
name = "rw"
local_addrs = ["$GW"]
remote_addrs = ["%any"]
proposals = ["$IKE"]
encap = true
local = { id = "gw.rw.test", auth = "psk" }
remote = { auth = "psk" }
pools = ["rw"]
unique = "replace"

[[connection.children]]
name = "net"
local_ts = ["10.93.100.0/24", "$POOL_NET"]
esp_proposals = ["$ESP"]
EOF
  (umask 077 && printf '[[ike]]\nid = ["gw.rw.test"]\nsecret = "%s"\n' "$PSK" >"$d/secrets.toml")
}
TD_PID=
td_start() { rw_gw_start "$S" "$1" $POOL_NET --stats "$1/stats.json"; }
td_ctl() { local d=$1; shift; "$IPSEC" "$@" --control "$d/ctl.sock"; }

# ---- the clients ------------------------------------------------------------------------------
# client NAME NS ID: a charon instance asking for a virtual IPv4 address; DNS to NAME/resolv.conf.
client() {
  local d=$WORK/$1 id=$3
  swan_instance "$d"
  : >"$d/resolv.conf"
  # charon's resolve plugin writes the DNS servers it is given here (no resolvconf binary)
  sed -i "s|^  plugins {|  plugins {\n    resolve {\n      file = $d/resolv.conf\n    }|" "$d/strongswan.conf"
  rw_client_conf "$d" name=home remote_addrs=$GW proposals=$IKE vips=0.0.0.0 auth=psk id="$id" \
    remote_id=gw.rw.test psk="$PSK" remote_ts="10.93.100.0/24, $POOL_NET" esp=$ESP
  swan_start "$2" "$d"
  swan_load "$d"
}
# vip NAME: the client's virtual IP as charon lists it (empty: none)
vip() { rw_client_vip "$WORK/$1"; }
# pings NS DST: how many of 3 pings were answered
pings() {
  { ip netns exec "$1" ping -n -c 3 -i 0.2 -W 2 "$2" 2>&1 || true; } |
    sed -n 's/^[0-9]* packets transmitted, \([0-9]*\) received.*/\1/p'
}
leased_metric() {
  "$IPSEC" show --stats "$1/stats.json" --format prometheus 2>/dev/null |
    sed -n 's/^ipsec_pool_leased{pool="rw"} \([0-9]*\)$/\1/p'
}

TD=$WORK/td
td_conf "$TD" $POOL_NET
td_start "$TD"
client c1 "$C1" alice@rw.test
client c2 "$C2" bob@rw.test

WANT_POOL=0 WANT_AGAIN=0 WANT_REPLACE=0
want pool && WANT_POOL=1
want again && WANT_AGAIN=1
want replace && WANT_REPLACE=1
if [ $WANT_POOL = 1 ] || [ $WANT_AGAIN = 1 ] || [ $WANT_REPLACE = 1 ]; then
  swan_initiate "$WORK/c1" net
  swan_initiate "$WORK/c2" net
  V1=$(vip c1)
  V2=$(vip c2)
  [ -n "$V1" ] && [ -n "$V2" ] || fail "a client has no virtual IP: c1 '$V1', c2 '$V2'"
  [ "$V1" != "$V2" ] || fail "both clients got $V1"
  for v in "$V1" "$V2"; do
    python3 -c 'import ipaddress,sys; sys.exit(ipaddress.ip_address(sys.argv[1]) not in ipaddress.ip_network(sys.argv[2]))' "$v" $POOL_NET ||
      fail "virtual IP $v is not in the pool $POOL_NET"
  done
  log "alice got $V1, bob got $V2 (both behind the NAT at $NAT_WAN)"
fi
if [ $WANT_POOL = 1 ]; then
  for c in c1 c2; do
    grep -q "nameserver $DNS" "$WORK/$c/resolv.conf" ||
      fail "$c: charon's resolve plugin wrote no 'nameserver $DNS': $(cat "$WORK/$c/resolv.conf")"
  done
  td_ctl "$TD" ike list >"$WORK/ike-list.txt" 2>&1 || fail "ipsec ike list: $(tail -n 3 "$WORK/ike-list.txt")"
  for v in "$V1" "$V2"; do
    grep -q "virtual IP $v" "$WORK/ike-list.txt" || fail "ipsec ike list does not show virtual IP $v: $(head -n 8 "$WORK/ike-list.txt")"
  done
  [ "$(grep -c 'ike.lease_assigned' "$TD/monitor.log")" = 2 ] || fail "tunneld's monitor has not 2 ike.lease_assigned events"
  [ "$(pings "$C1" $HOST)" = 3 ] || fail "c1 -> host behind the gateway: pings lost"
  [ "$(pings "$C2" $HOST)" = 3 ] || fail "c2 -> host behind the gateway: pings lost"
  [ "$(pings "$C1" "$V2")" = 3 ] || fail "c1 -> c2 ($V2) through the gateway: pings lost"
  [ "$(pings "$C2" "$V1")" = 3 ] || fail "c2 -> c1 ($V1) through the gateway: pings lost"
  # the children's bytes (the data plane's counts, docs/remote-access.md): after the pings,
  # every child line of `ike list` has bytes in and out, none of them 0
  td_ctl "$TD" ike list >"$WORK/ike-list.txt" 2>&1 || fail "ipsec ike list: $(tail -n 3 "$WORK/ike-list.txt")"
  nb=$(grep -c -E '; bytes in [1-9][0-9]*, out [1-9][0-9]*$' "$WORK/ike-list.txt" || true)
  [ "$nb" = 2 ] || fail "ipsec ike list: not 2 children with bytes in and out: $(grep -E 'bytes|child' "$WORK/ike-list.txt")"
  wait_for 5 "the stats file to count 2 leases" sh -c "[ \"\$(\"$IPSEC\" show --stats '$TD/stats.json' --format prometheus | sed -n 's/^ipsec_pool_leased{pool=\"rw\"} //p')\" = 2 ]"
  log "pool: distinct addresses, DNS $DNS, pings to the host and client to client, 2 leased"
fi
if [ $WANT_AGAIN = 1 ]; then
  swan_terminate "$WORK/c1" --ike home
  wait_for 5 "tunneld to release alice's lease" grep -q 'ike.lease_released' "$TD/monitor.log"
  swan_initiate "$WORK/c1" net
  V1B=$(vip c1)
  [ "$V1B" = "$V1" ] || fail "alice reconnected and got $V1B, not her $V1"
  [ "$(pings "$C1" $HOST)" = 3 ] || fail "c1 after reconnecting -> host: pings lost"
  log "again: alice got $V1 back"
fi
if [ $WANT_REPLACE = 1 ]; then
  # bob's charon becomes a second device of alice's (unique = "replace" on the gateway)
  swan_terminate "$WORK/c2" --ike home
  sed -i 's/bob@rw.test/alice@rw.test/g' "$WORK/c2/swanctl/swanctl.conf"
  swan_load "$WORK/c2"
  swan_initiate "$WORK/c2" net
  [ "$(vip c2)" = "$V1" ] || fail "alice's second device got '$(vip c2)', not her $V1"
  wait_for 5 "charon c1 to receive the Delete of its IKE_SA" grep -q 'received DELETE for IKE_SA' "$WORK/c1/charon.log"
  for _ in $(seq 50); do [ -z "$(swan_list_sas "$WORK/c1")" ] && break; sleep 0.1; done
  [ -z "$(swan_list_sas "$WORK/c1")" ] || fail "charon c1 still has an SA: $(swan_list_sas "$WORK/c1" | head -c 300)"
  grep -q '"event":"ike.down".*"why":"Replaced"' "$TD/monitor.log" || fail "tunneld's monitor has no ike.down Replaced"
  [ "$(pings "$C2" $HOST)" = 3 ] || fail "alice's second device -> host: pings lost"
  swan_terminate "$WORK/c2" --ike home
  sed -i 's/alice@rw.test/bob@rw.test/g' "$WORK/c2/swanctl/swanctl.conf"
  swan_load "$WORK/c2"
  log "replace: alice's first IKE SA deleted by tunneld (charon saw the Delete), her address on the second device"
fi
if want full; then
  # (swan_terminate fails the script when there is no SA: after `replace`, or `full` alone)
  swan_ctl "$WORK/c1" --terminate --ike home --timeout 5 >/dev/null 2>&1 || true
  swan_ctl "$WORK/c2" --terminate --ike home --timeout 5 >/dev/null 2>&1 || true
  rw_gw_stop "$S" $POOL_NET
  TD=$WORK/td1
  td_conf "$TD" 10.93.3.7/32
  td_start "$TD"
  swan_initiate "$WORK/c1" net
  [ "$(vip c1)" = 10.93.3.7 ] || fail "alice did not get the pool's one address: '$(vip c1)'"
  rc=0
  out=$(swan_ctl "$WORK/c2" --initiate --child net --timeout 8 2>&1) || rc=$?
  [ $rc -ne 0 ] || fail "bob connected to a full pool: $(echo "$out" | tail -n 3)"
  grep -q 'INTERNAL_ADDRESS_FAILURE' "$WORK/c2/charon.log" || fail "charon (bob) got no INTERNAL_ADDRESS_FAILURE: $(grep -i -E 'virtual|failure' "$WORK/c2/charon.log" | tail -n 3)"
  grep -q 'ike.pool_exhausted' "$TD/monitor.log" || fail "tunneld reported no ike.pool_exhausted"
  kill -0 "$TD_PID" || fail "tunneld exited"
  [ "$(pings "$C1" $HOST)" = 3 ] || fail "alice's tunnel does not carry pings after bob's refusal"
  log "full: bob refused with INTERNAL_ADDRESS_FAILURE, alice still served"
fi
swan_stop_all
stop_pid "$TD_PID" tunneld
log "all stages passed (${RAN[*]})"
