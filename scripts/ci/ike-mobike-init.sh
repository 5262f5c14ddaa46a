#!/usr/bin/env bash
# MOBIKE with tunneld as the initiator whose own address changes (RFC 4555 3.5; issue #36
# item 3, docs/ike-mobike.md "Our own address"): tunneld is the client (a laptop moving from
# Wi-Fi to LTE), a strongSwan 5.9.8 charon (kernel-libipsec, PSK) the server. As root in
# namespaces named by PID:
#
#   t (tunneld) A 10.96.1.2 -> B 10.96.1.3 ---- 10.96.1.1 s (charon, remote_addrs = %any)
#   inner: 10.96.11.1 on t's lo (routed into ipsec0) <-> 10.96.12.1 on s's lo (table 220)
#
# Stages:
#   move      charon with mobike = yes: while a ping runs through the tunnel, B is added to
#             t's interface and A removed; `ipsec ike update gw --local B` moves tunneld's
#             sockets and sends UPDATE_SA_ADDRESSES from B: the same IKE SA (its SPIs in
#             charon's list-sas and tunneld's ike list) is at B on both sides, the ping lost
#             at most 5 of 20, charon's log has the update
#   auto      the same move without the command: tunneld's address watch (rtnetlink) sees A
#             go, takes the source of the route to charon (B) and moves the SA itself
#   nomobike  charon with mobike = no: the update is refused and says why (no MOBIKE), the
#             IKE SA stays at A and still carries pings
#
#   sudo bash scripts/ci/ike-mobike-init.sh            # every stage (builds tunneld and ipsec)
#   sudo bash scripts/ci/ike-mobike-init.sh --ci       # the same, the CI's short form (< 30 s)
#   bash scripts/ci/ike-mobike-init.sh --if-possible   # no root / netns / strongSwan: say why, exit 0
#   IKE_MOBIKE_KEEP=1 ...                              # keep the work directory (configs, logs)
#   TUNNELD_BIN=target/debug/tunneld IPSEC_BIN=target/debug/ipsec sudo -E bash scripts/ci/ike-mobike-init.sh
set -euo pipefail
cd "$(dirname "$0")/../.."
NETNS_TAG=ike-mobike-init
. scripts/lib/netns.sh
. scripts/lib/strongswan.sh
. scripts/lib/roadwarrior.sh
. scripts/lib/tunneld-conf.sh
ALL="move auto nomobike"
parse_stages "$ALL" "$@" # --ci: every stage (they take about 15 s)
need_netns "network namespaces, charon, tunneld"
swan_install
rw_bins
WORK=$(mktemp -d /tmp/ike-mobike-init.XXXXXX)
trap 'rc=$?; swan_stop_all >/dev/null 2>&1 || true; [ "${IKE_MOBIKE_KEEP:-0}" = 0 ] || { log "files kept in $WORK"; [ $rc -ne 0 ] || WORK=; }; cleanup_all $rc 12' EXIT
trap 'fail "interrupted"' INT TERM
SWAN_LOG="ike=2 cfg=1 knl=2 net=1 enc=1 dmn=1 lib=1 job=1"

P=mi$(($$ % 10000000))
T=${P}t S=${P}s
GW=10.96.1.1
A=10.96.1.2
B=10.96.1.3
IN_T=10.96.11.1
IN_S=10.96.12.1
IKE_PROP=aes128gcm16-prfsha256-x25519
ESP_PROP=aes128gcm16
PSK="mi-$RANDOM$RANDOM"

# ---- the namespaces ------------------------------------------------------------------------
netns_add "$T" "$S"
ip link add "${P}ts" netns "$T" type veth peer name "${P}st" netns "$S"
for ns in "$T" "$S"; do ip -n "$ns" link set lo up; done
ip -n "$S" addr add $GW/24 dev "${P}st"
ip -n "$S" addr add $IN_S/32 dev lo
ip -n "$T" addr add $IN_T/32 dev lo
# B stays when A (the primary) goes
ip netns exec "$T" sysctl -qw net.ipv4.conf.all.promote_secondaries=1
ip netns exec "$T" sysctl -qw net.ipv4.conf.default.promote_secondaries=1
ip -n "$T" link set "${P}ts" up
ip -n "$S" link set "${P}st" up

# ---- one run: charon (MOBIKE yes|no), tunneld at A initiating ------------------------------
SD=
TD=
start_both() {
  local mobike=$1
  ip -n "$T" addr flush dev "${P}ts"
  ip -n "$T" addr add $A/24 dev "${P}ts"
  ip netns exec "$T" ping -c 1 -W 3 -q $GW >/dev/null || fail "topology: tunneld's side cannot reach $GW"
  SD=$WORK/s-$mobike
  swan_instance "$SD"
  swan_site_conf "$SD" name=gw local=$GW remote=%any local_id=charon.mi.test remote_id=tunneld.mi.test \
    psk="$PSK" local_ts=$IN_S/32 remote_ts=$IN_T/32 mobike="$mobike"
  swan_start "$S" "$SD"
  swan_load "$SD"
  TD=$WORK/t-$mobike
  td_conf "$TD" local=$A remote=$GW local_id=tunneld.mi.test remote_id=charon.mi.test psk="$PSK" \
    local_ts=$IN_T/32 remote_ts=$IN_S/32
  rw_gw_start "$T" "$TD" $IN_S/32
  ip -n "$T" route replace $IN_S/32 dev ipsec0 src $IN_T
  "$IPSEC" ike initiate gw --control "$TD/ctl.sock" >"$TD/initiate.out" 2>&1 || fail "ipsec ike initiate: $(cat "$TD/initiate.out")"
  local deadline=$((SECONDS + 10))
  until [ "$(swan_established "$SD")" = "1 1" ] && [ -n "$(td_sas)" ]; do
    [ $SECONDS -lt $deadline ] || fail "no IKE SA and child within 10 s: charon $(swan_established "$SD"), tunneld '$(td_sas)'"
    sleep 0.2
  done
  ip netns exec "$T" ping -c 2 -i 0.2 -W 2 -q -I $IN_T $IN_S >/dev/null || fail "no ping through the tunnel before the move"
}
stop_both() {
  swan_stop "$SD" 2>/dev/null || true
  rw_gw_stop "$T" $IN_S/32
}
# td_sas: "SPI_I SPI_R LOCAL REMOTE" of each IKE SA tunneld lists
td_sas() {
  "$IPSEC" ike list --control "$TD/ctl.sock" --json 2>/dev/null |
    python3 -c 'import json,sys
for s in json.load(sys.stdin).get("ike_sas", []):
    print(s["spi_i"], s["spi_r"], s["local"], s["remote"])'
}
# swan_sas: "SPI_I SPI_R REMOTE_HOST" of charon's IKE SAs (hex, as tunneld prints them)
swan_sas() {
  swan_list_sas "$SD" |
    sed -n 's/.*remote-host=\([0-9.]*\).*initiator-spi=\([0-9a-f]*\) responder-spi=\([0-9a-f]*\).*/\2 \3 \1/p'
}

# moved HOW: the ping across the move (HOW: cmd runs `ipsec ike update`, auto waits for
# tunneld), then the same IKE SA must be at B at both ends with at most 5 pings lost
moved() {
  local how=$1 ping out spi_i spi_r local
  BEFORE=$(td_sas)
  SWAN_BEFORE=$(swan_sas)
  read -r spi_i spi_r local _ <<<"$BEFORE"
  [ "$local" = "$A:4500" ] || fail "tunneld's SA is not at $A:4500 before the move: $BEFORE"
  [ "$SWAN_BEFORE" = "$spi_i $spi_r $A" ] || fail "charon's SA is not '$spi_i $spi_r $A': '$SWAN_BEFORE'"
  ip netns exec "$T" ping -n -c 20 -i 0.2 -W 1 -I $IN_T $IN_S >"$WORK/ping-$how.txt" 2>&1 &
  ping=$!
  BG+=("$ping")
  sleep 1.5
  # the laptop's address changes: B comes, A goes
  ip -n "$T" addr add $B/24 dev "${P}ts"
  ip -n "$T" addr del $A/24 dev "${P}ts"
  if [ "$how" = cmd ]; then
    out=$("$IPSEC" ike update gw --local $B --control "$TD/ctl.sock" 2>&1) || fail "ipsec ike update gw --local $B: $out"
    log "ipsec ike update: $out"
  fi
  wait "$ping" || true
  read -r SENT RECEIVED < <(sed -n 's/^\([0-9]*\) packets transmitted, \([0-9]*\) received.*/\1 \2/p' "$WORK/ping-$how.txt")
  AFTER=$(td_sas)
  SWAN_AFTER=$(swan_sas)
  log "$how: pings: $RECEIVED of $SENT answered; tunneld before: $BEFORE; after: $AFTER; charon after: $SWAN_AFTER"
  [ "$(echo "$AFTER" | wc -l)" = 1 ] || fail "tunneld has not one IKE SA after the move: $AFTER"
  [ "$AFTER" = "$spi_i $spi_r $B:4500 $GW:4500" ] || fail "tunneld's IKE SA is not the same one at $B:4500: before $BEFORE, after $AFTER"
  [ "$SWAN_AFTER" = "$spi_i $spi_r $B" ] || fail "charon's IKE SA is not the same one at $B: '$SWAN_AFTER'"
  [ "$((SENT - RECEIVED))" -le 5 ] || fail "$((SENT - RECEIVED)) of $SENT pings lost across the move (at most 5)"
  grep -q 'N(UPD_SA_ADDR)' "$SD/charon.log" || fail "charon's log shows no UPDATE_SA_ADDRESSES"
  grep -q "our address moved from $A to $B" "$TD/tunneld.log" || fail "tunneld's log does not say it moved"
  log "$how: the same IKE SA ($spi_i/$spi_r) moved to $B at both ends, $((SENT - RECEIVED)) of $SENT pings lost"
}

if want move; then
  start_both yes
  moved cmd
  stop_both
fi
if want auto; then
  start_both yes
  moved auto
  grep -q "our address $A is gone; the route toward $GW leaves from $B" "$TD/tunneld.log" ||
    fail "tunneld's log does not say it followed the address by itself"
  stop_both
fi
if want nomobike; then
  start_both no
  BEFORE=$(td_sas)
  ip -n "$T" addr add $B/24 dev "${P}ts"
  rc=0
  out=$("$IPSEC" ike update gw --local $B --control "$TD/ctl.sock" 2>&1) || rc=$?
  [ $rc -ne 0 ] || fail "ipsec ike update was not refused without MOBIKE: $out"
  grep -q "MOBIKE is not in use" <<<"$out" || fail "the refusal does not say why: $out"
  [ "$(td_sas)" = "$BEFORE" ] || fail "tunneld's SA changed after a refused update: $BEFORE -> $(td_sas)"
  read -r spi_i spi_r _ <<<"$BEFORE"
  [ "$(swan_sas)" = "$spi_i $spi_r $A" ] || fail "charon's SA changed: '$(swan_sas)'"
  ! grep -q 'N(UPD_SA_ADDR)' "$SD/charon.log" || fail "an UPDATE_SA_ADDRESSES reached charon without MOBIKE"
  # the sockets went back to A: the tunnel still carries pings
  ip netns exec "$T" ping -c 3 -i 0.2 -W 2 -q -I $IN_T $IN_S >/dev/null || fail "no ping through the tunnel after the refused update"
  log "nomobike: refused ($out), the IKE SA $spi_i/$spi_r stays at $A and carries pings"
  stop_both
fi
swan_stop_all
log "all stages passed (${RAN[*]})"
