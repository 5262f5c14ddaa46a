#!/usr/bin/env bash
# MOBIKE (RFC 4555; issue #36 item 3, docs/ike-mobike.md): a strongSwan 5.9.8 road-warrior
# client (charon + kernel-libipsec, `vips = 0.0.0.0`, `mobike = yes`, PSK) with two addresses
# on its interface connects to tunneld (the gateway, with a pool) and pings a host behind it;
# while the ping runs the address its SA uses is removed; charon notices (netlink) and moves
# the SA to its other address with UPDATE_SA_ADDRESSES. As root in namespaces named by PID:
#
#   c (charon) 10.94.1.2 + 10.94.1.3 (secondary) ---- 10.94.1.1 s (tunneld) 10.94.100.1 ---- 10.94.100.2 h
#   pool "rw": 10.94.3.0/24 (ipsec0 of s routes it)
#
# Stages:
#   move    mobike on both sides (tunneld's `ike list` says MOBIKE and keeps charon's other
#           address from its ADDITIONAL_IP4_ADDRESS): after the move the IKE SA is the same (its SPIs in tunneld's
#           `ike list --json` and charon's list-sas), its peer is the other address, the ping
#           lost at most a handful, tunneld's event stream has ike.peer_moved with "mobike":true;
#           tunneld moved only after its return-routability check (RFC 4555 3.5): charon's log
#           has tunneld's INFORMATIONAL with COOKIE2 received at the new address and its
#           answer echoing it, and tunneld's `ike list --json` counts one answered check
#   nomobike  tunneld's connection says `mobike = false` (the negative case): charon cannot
#           move the SA, so the one with those SPIs does not survive the move (charon
#           re-authenticates: another IKE SA, or none), and no MOBIKE move is reported
#
#   sudo bash scripts/ci/ike-mobike.sh                # every stage (builds tunneld and ipsec)
#   sudo bash scripts/ci/ike-mobike.sh --ci           # the same, the CI's short form (< 30 s)
#   bash scripts/ci/ike-mobike.sh --if-possible       # no root / netns / strongSwan: say why, exit 0
#   IKE_MOBIKE_KEEP=1 ...                             # keep the work directory (configs, logs)
#   TUNNELD_BIN=target/debug/tunneld IPSEC_BIN=target/debug/ipsec sudo -E bash scripts/ci/ike-mobike.sh
set -euo pipefail
cd "$(dirname "$0")/../.."
NETNS_TAG=ike-mobike
. scripts/lib/netns.sh
. scripts/lib/strongswan.sh
. scripts/lib/roadwarrior.sh
ALL="move nomobike"
parse_stages "$ALL" "$@" # --ci: every stage (they take about 15 s)
need_netns "network namespaces, charon, tunneld"
swan_install
rw_bins
WORK=$(mktemp -d /tmp/ike-mobike.XXXXXX)
trap 'rc=$?; swan_stop_all >/dev/null 2>&1 || true; [ "${IKE_MOBIKE_KEEP:-0}" = 0 ] || { log "files kept in $WORK"; [ $rc -ne 0 ] || WORK=; }; cleanup_all $rc 12' EXIT
trap 'fail "interrupted"' INT TERM
SWAN_LOG="ike=2 cfg=1 knl=2 net=1 enc=1 dmn=1 lib=1 job=1"

T=mb$(($$ % 10000000))
S=${T}s H=${T}h C=${T}c
GW=10.94.1.1
A1=10.94.1.2
A2=10.94.1.3
HOST=10.94.100.2
POOL_NET=10.94.3.0/24
IKE=aes128gcm16-prfsha256-x25519
ESP=aes128gcm16
PSK="mb-$RANDOM$RANDOM"

# ---- the namespaces ------------------------------------------------------------------------
netns_add "$S" "$H" "$C"
for ns in "$S" "$H" "$C"; do ip -n "$ns" link set lo up; done
ip link add "${T}sc" netns "$S" type veth peer name "${T}cs" netns "$C"
ip link add "${T}sh" netns "$S" type veth peer name "${T}hs" netns "$H"
# the second address stays when the first goes (a secondary is deleted with its primary else)
ip netns exec "$C" sysctl -qw net.ipv4.conf.all.promote_secondaries=1
ip netns exec "$C" sysctl -qw net.ipv4.conf.default.promote_secondaries=1
ip -n "$S" addr add $GW/24 dev "${T}sc"
ip -n "$S" addr add 10.94.100.1/24 dev "${T}sh"
ip -n "$H" addr add $HOST/24 dev "${T}hs"
for l in "$S ${T}sc" "$S ${T}sh" "$H ${T}hs" "$C ${T}cs"; do
  read -r ns dev <<<"$l"
  ip -n "$ns" link set "$dev" up
done
ip -n "$H" route add $POOL_NET via 10.94.100.1
ip netns exec "$S" sysctl -qw net.ipv4.ip_forward=1
for k in all default; do ip netns exec "$S" sysctl -qw "net.ipv4.conf.$k.rp_filter=0"; done

# ---- tunneld, the gateway -------------------------------------------------------------------
# td_conf DIR MOBIKE: tunneld.toml with the pool `rw` and the %any connection `rw`.
td_conf() {
  local d=$1
  mkdir -p "$d"
  cat >"$d/tunneld.toml" <<EOF
# written by scripts/ci/ike-mobike.sh
[tunnel]
tun = "ipsec0"
local = "$GW"
secrets = "$d/secrets.toml"

[[pool]]
name = "rw"
addrs = "$POOL_NET"

[[connection]]
name = "rw"
local_addrs = ["$GW"]
remote_addrs = ["%any"]
proposals = ["$IKE"]
encap = true
mobike = $2
local = { id = "gw.mb.test", auth = "psk" }
remote = { auth = "psk" }
pools = ["rw"]

[[connection.children]]
name = "net"
local_ts = ["10.94.100.0/24"]
esp_proposals = ["$ESP"]
EOF
  (umask 077 && printf '[[ike]]\nid = ["gw.mb.test"]\nsecret = "%s"\n' "$PSK" >"$d/secrets.toml")
}
TD_PID=
td_start() { rw_gw_start "$S" "$1" $POOL_NET; }
td_stop() { rw_gw_stop "$S" $POOL_NET; }
# td_sas DIR: "SPI_I SPI_R REMOTE" of each IKE SA tunneld lists
td_sas() {
  "$IPSEC" ike list --control "$1/ctl.sock" --json 2>/dev/null |
    python3 -c 'import json,sys
for s in json.load(sys.stdin).get("ike_sas", []):
    print(s["spi_i"], s["spi_r"], s["remote"])'
}

# ---- the client -----------------------------------------------------------------------------
CD=$WORK/c
client_start() {
  rm -rf "$CD"
  swan_instance "$CD"
  rw_client_conf "$CD" name=home remote_addrs=$GW proposals=$IKE mobike=yes vips=0.0.0.0 auth=psk \
    id=alice@mb.test remote_id=gw.mb.test psk="$PSK" remote_ts=10.94.100.0/24 esp=$ESP
  ip -n "$C" addr flush dev "${T}cs"
  ip -n "$C" addr add $A1/24 dev "${T}cs"
  ip -n "$C" addr add $A2/24 dev "${T}cs"
  ip netns exec "$C" ping -c 1 -W 3 -q $GW >/dev/null || fail "topology: the client cannot reach the gateway"
  swan_start "$C" "$CD"
  swan_load "$CD"
  swan_initiate "$CD" net
}
client_stop() { swan_stop "$CD" 2>/dev/null || true; }
# swan_spis: "SPI_I SPI_R" of charon's IKE SAs (hex, as tunneld prints them)
swan_spis() {
  swan_list_sas "$CD" | sed -n 's/.*initiator-spi=\([0-9a-f]*\) responder-spi=\([0-9a-f]*\).*/\1 \2/p'
}

# move DIR: pings the host for ~6 s; at 1.5 s the address the SA uses is removed. Leaves
# SENT/RECEIVED (the ping's counts) and BEFORE/AFTER (tunneld's SAs before and after).
move() {
  local d=$1
  BEFORE=$(td_sas "$d")
  [ "$(echo "$BEFORE" | wc -l)" = 1 ] && [ -n "$BEFORE" ] || fail "not one IKE SA at tunneld before the move: '$BEFORE'"
  [ "$(echo "$BEFORE" | cut -d' ' -f3)" = "$A1:4500" ] || fail "the SA does not use $A1 before the move: $BEFORE"
  ip netns exec "$C" ping -n -c 30 -i 0.2 -W 1 $HOST >"$WORK/ping.txt" 2>&1 &
  local ping=$!
  BG+=("$ping")
  sleep 1.5
  ip -n "$C" addr del $A1/24 dev "${T}cs"
  log "removed $A1 from the client's interface while it pings"
  wait "$ping" || true
  read -r SENT RECEIVED < <(sed -n 's/^\([0-9]*\) packets transmitted, \([0-9]*\) received.*/\1 \2/p' "$WORK/ping.txt")
  AFTER=$(td_sas "$d")
}

if want move; then
  TD=$WORK/td
  td_conf "$TD" true
  td_start "$TD"
  client_start
  SWAN_BEFORE=$(swan_spis)
  # MOBIKE in use, and charon's other address kept from its ADDITIONAL_IP4_ADDRESS (3.4)
  list=$("$IPSEC" ike list --control "$TD/ctl.sock" --json 2>&1) || fail "ipsec ike list: $list"
  python3 -c 'import json,sys; s=json.loads(sys.argv[1])["ike_sas"][0]; sys.exit(not (s.get("mobike") and sys.argv[2] in s.get("peer_addresses", [])))' "$list" $A2 ||
    fail "tunneld's ike list does not say MOBIKE with the client's other address $A2: $list"
  move "$TD"
  log "pings: $RECEIVED of $SENT answered; tunneld before: $BEFORE; after: $AFTER"
  read -r spi_i spi_r _ <<<"$BEFORE"
  [ "$(echo "$AFTER" | wc -l)" = 1 ] || fail "tunneld has not one IKE SA after the move: $AFTER"
  [ "$(echo "$AFTER" | cut -d' ' -f1-2)" = "$spi_i $spi_r" ] || fail "the IKE SA did not survive the move: before $BEFORE, after $AFTER"
  [ "$(echo "$AFTER" | cut -d' ' -f3)" = "$A2:4500" ] || fail "tunneld's SA is not at $A2:4500 after the move: $AFTER"
  [ "$(swan_spis)" = "$SWAN_BEFORE" ] || fail "charon's IKE SA changed: before '$SWAN_BEFORE', after '$(swan_spis)'"
  [ "$((SENT - RECEIVED))" -le 5 ] || fail "$((SENT - RECEIVED)) of $SENT pings lost across the move (at most 5)"
  grep -q '"event":"ike.peer_moved".*"new":"'$A2':4500","mobike":true' "$TD/monitor.log" ||
    fail "no MOBIKE ike.peer_moved to $A2:4500 in tunneld's events: $(grep peer_moved "$TD/monitor.log" || true)"
  grep -q 'UPDATE_SA_ADDRESSES\|N(UPD_SA_ADDR)' "$CD/charon.log" || fail "charon's log shows no UPDATE_SA_ADDRESSES"
  # return routability (RFC 4555 3.5): tunneld checked the new address before moving (its
  # INFORMATIONAL with COOKIE2 reached charon there, charon echoed it) and counted the answer
  grep -q "received packet: from $GW\[4500\] to $A2\[4500\]" "$CD/charon.log" &&
    grep -q 'parsed INFORMATIONAL request [0-9]* \[ N(COOKIE2) \]' "$CD/charon.log" &&
    grep -q 'generating INFORMATIONAL response [0-9]* \[ N(COOKIE2) \]' "$CD/charon.log" ||
    fail "charon's log shows no return-routability check from tunneld at $A2: $(grep -e 'INFORMATIONAL' "$CD/charon.log" | tail -n 4)"
  checks=$("$IPSEC" ike list --control "$TD/ctl.sock" --json | python3 -c 'import json,sys; print(json.load(sys.stdin)["ike_sas"][0]["counters"]["mobike_checks"])')
  [ "$checks" = 1 ] || fail "tunneld's ike list counts $checks answered return-routability checks, not 1"
  log "move: the same IKE SA ($spi_i/$spi_r) followed the client to $A2 after tunneld's return-routability check, $((SENT - RECEIVED)) of $SENT pings lost"
  client_stop
  td_stop
fi
if want nomobike; then
  TD=$WORK/td0
  td_conf "$TD" false
  td_start "$TD"
  client_start
  move "$TD"
  log "pings: $RECEIVED of $SENT answered; tunneld before: $BEFORE; after: $AFTER"
  read -r spi_i spi_r _ <<<"$BEFORE"
  ! grep -q "^$spi_i $spi_r $A2:4500" <<<"$AFTER" || fail "without MOBIKE the IKE SA $spi_i/$spi_r moved to $A2 all the same: $AFTER"
  ! grep -q '"mobike":true' "$TD/monitor.log" || fail "tunneld reported a MOBIKE move with mobike = false"
  kill -0 "$TD_PID" || fail "tunneld exited"
  log "nomobike: the IKE SA $spi_i/$spi_r did not follow the client (after: ${AFTER:-none})"
  client_stop
  td_stop
fi
swan_stop_all
log "all stages passed (${RAN[*]})"
