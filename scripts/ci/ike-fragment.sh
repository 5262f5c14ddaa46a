#!/usr/bin/env bash
# IKE fragmentation (RFC 7383) between tunneld and strongSwan's charon (5.9.8,
# kernel-libipsec) in network namespaces, as root (docs/ike-fragmentation.md):
#
#   fra (tunneld)  frva 10.95.1.1/24 --- frna | frn (router) | frnb --- frvb 10.95.2.1/24  frb (charon)
#   inner addresses on lo: 10.95.11.1 (A), 10.95.12.1 (B); identities a.<100 letters>.fr.test
#   and b.<100 letters>.fr.test
#
# Both sides announce fragmentation (tunneld `fragmentation = "yes"`, charon's default) and
# use a small fragment size (FRAG_SIZE, default 400 bytes of IP datagram: tunneld's
# `fragment_size`, charon's `charon.fragment_size`); the child has NETS (default 8) /24
# selectors on A's side (10.95.11.0/24, 10.95.13.0/24, ...; B has the one 10.95.12.0/24:
# charon's kernel-libipsec installs one route per remote selector and fails on a second route
# to the same one) and the identities are long, so the PSK IKE_AUTH (some 550 bytes, its
# response some 420) goes in 2 or more fragments each way.
# Cases:
#   t-init   tunneld initiates
#   sw-init  charon initiates
#   lost     tunneld initiates; the router (frn, nftables) drops the first IKE_AUTH fragment 1
#            tunneld sends, once: tunneld retransmits every fragment and the exchange completes
# Each case checks:
#   - the capture on A's link (tshark): IKE_AUTH frames with an Encrypted Fragment payload
#     (isakmp.frag.number) from A and from B, at least 2 each, each frame within FRAG_SIZE
#     (IP length), fragment 1 .. Total of each direction present; no IKE_SA_INIT fragment
#   - both sides up (one IKE SA, one child), pings 10.95.11.1 -> 10.95.12.1 through the tunnel
#   - tunneld's counters (stats file): fragments sent and messages reassembled > 0, none
#     dropped; charon's log: "received fragment" and "split into" lines
#   - lost: the nftables rule dropped exactly one frame; tunneld counted a retransmission
#   - every daemon stops on SIGTERM with status 0
#
#   sudo bash scripts/ci/ike-fragment.sh                  # every case (builds tunneld, ipsec)
#   sudo bash scripts/ci/ike-fragment.sh lost             # only that one
#   sudo bash scripts/ci/ike-fragment.sh --ci             # the same cases, fewer pings
#   FRAG_SIZE=576 NETS=12 TUNNELD_BIN=... IPSEC_BIN=... sudo -E bash scripts/ci/ike-fragment.sh
#   TD_FRAG=no sudo -E bash scripts/ci/ike-fragment.sh t-init   # tunneld without fragmentation: must fail
#   bash scripts/ci/ike-fragment.sh --if-possible         # no root / netns / IKE: say why, exit 0
#
# A failing case prints why, the others still run; the work directory (configs, logs with
# every key, captures) is kept when a case failed (IKE_FRAGMENT_KEEP=1: always). Every wait
# is bounded; a case is stopped after 60 s.
set -euo pipefail
cd "$(dirname "$0")/../.."
START=$SECONDS
NETNS_TAG=ike-fragment
. scripts/lib/netns.sh
. scripts/lib/strongswan.sh
. scripts/lib/ike-lifecycle.sh
ALL_CASES="t-init sw-init lost"
parse_stages "$ALL_CASES" "$@" # also --ci (CI=1)
FRAG_SIZE=${FRAG_SIZE:-400}
NETS=${NETS:-8}
if [ $CI = 1 ]; then PINGS=${PINGS:-5}; else PINGS=${PINGS:-20}; fi
# the topology of scripts/lib/ike-lifecycle.sh, in namespaces fr* on 10.95.0.0/16
TOPO=fr$(($$ % 100000)) # the PID: runs side by side do not collide
TD_FAIL=case_fail
A_NET=10.95.1.1
B_NET=10.95.2.1
A_IN=10.95.11.1
B_IN=10.95.12.1
LONG=$(printf 'x%.0s' $(seq 50)).$(printf 'y%.0s' $(seq 50))
A_ID=a.$LONG.fr.test
B_ID=b.$LONG.fr.test
# NETS /24s on A's side: 10.95.11.0/24, 10.95.13.0/24, ...; B's: 10.95.12.0/24
A_TS=() B_TS=(10.95.12.0/24)
for i in $(seq 0 $((NETS - 1))); do
  A_TS+=("10.95.$((11 + 2 * i)).0/24")
done
[ "$NETS" -ge 1 ] && [ $((11 + 2 * (NETS - 1))) -le 255 ] || fail "NETS=$NETS: 1 to 123"
need_netns "network namespaces, charon, tunneld"

swan_install
locate_tunneld --bin ipsec
IPSEC=$(dirname "$BIN")/ipsec
[ -z "${TUNNELD_BIN:-}" ] || IPSEC=${IPSEC_BIN:-$IPSEC}
[ -x "$IPSEC" ] || fail "no ipsec binary at $IPSEC"
grep -q -- '--keylog' <<<"$("$BIN" --help 2>&1)" || cannot "this tunneld has no IKE (no --keylog option)"
WORK=$(mktemp -d /tmp/ike-fragment.XXXXXX)
FAILED=0
trap 'rc=$?; [ $rc -ne 0 ] || [ $FAILED -eq 0 ] || rc=1; [ "${IKE_FRAGMENT_KEEP:-0}" = 0 ] || { log "files kept in $WORK"; [ $rc -ne 0 ] || WORK=; }; cleanup_all $rc 5' EXIT
trap 'fail "interrupted"' INT TERM

# drop_first_fragment: the router drops the first IKE_AUTH request fragment 1 from A, once.
# On UDP 4500 the IKE header follows the 4-byte non-ESP marker: from the UDP header (@th) the
# header's Next Payload is at byte 8+4+16, the exchange type at 8+4+18, the flags at
# 8+4+19 (0x08: initiator, request) and the SKF's Fragment Number at 8+4+28+4.
drop_first_fragment() {
  ip netns exec ${TOPO}n nft -f - <<EOF || case_fail "nft could not load the drop rule"
table ip frdrop {
  set dropped {
    type ipv4_addr
    flags dynamic,timeout
    timeout 1h
  }
  chain frfwd {
    type filter hook forward priority filter; policy accept;
    ip saddr $A_NET udp dport 4500 @th,224,8 53 @th,240,8 35 @th,248,8 0x08 @th,352,16 1 ip saddr @dropped accept
    ip saddr $A_NET udp dport 4500 @th,224,8 53 @th,240,8 35 @th,248,8 0x08 @th,352,16 1 update @dropped { ip saddr } counter drop
  }
}
EOF
}
nft_dropped() {
  ip netns exec ${TOPO}n nft list chain ip frdrop frfwd 2>/dev/null | sed -n 's/.*counter packets \([0-9]*\).*/\1/p' | head -n 1
}

# ---- tunneld (scripts/lib/ike-lifecycle.sh: td_conf, td_start, td_counts, td_stop) --------
# td_start routes B's /24 (B_TS, 10.95.12.0/24) into ipsec0.
# td_stat FIELD: tunneld's IKE counter FIELD from its stats file (written every second).
td_stat() {
  python3 -c 'import json, sys; print(json.load(open(sys.argv[1]))["ike"].get(sys.argv[2], "?"))' "$CD/a/stats.json" "$1" 2>/dev/null || echo "?"
}

# ---- one case ------------------------------------------------------------------------------

# fragments_seen PCAP: per direction, the IKE_AUTH fragments in the capture, as lines
# "SRC NUMBER TOTAL IPLEN", and the IKE_SA_INIT frames with a fragment (must be none).
fragments_seen() {
  tshark -n -r "$1" -Y 'isakmp.exchangetype == 35 && isakmp.frag.number' -T fields -E separator=' ' \
    -e ip.src -e isakmp.frag.number -e isakmp.frag.total -e ip.len 2>/dev/null || true
}

run_case() {
  CASE=$1
  CD=$WORK/$CASE
  mkdir -p "$CD/a" "$CD/b"
  local initiator=$2 psk="fr-$RANDOM-$RANDOM-$RANDOM" t0=$SECONDS
  topo_up
  [ "$CASE" != lost ] || drop_first_fragment
  ip netns exec ${TOPO}a dumpcap -q -P -i ${TOPO}va -w "$CD/link.pcap" -f 'udp port 500 or udp port 4500' 2>"$CD/dumpcap.log" &
  CAP=$!
  BG+=("$CAP")
  swan_wait_capture 10 "$CD/link.pcap"
  SWAN_CHARON_EXTRA="  fragment_size = $FRAG_SIZE" swan_instance "$CD/b"
  local IFS_OLD=$IFS
  IFS=,
  swan_site_conf "$CD/b" local=$B_NET remote=$A_NET local_id=$B_ID remote_id=$A_ID \
    local_ts="${B_TS[*]}" remote_ts="${A_TS[*]}" psk="$psk" ike=$IKE_PROP esp=$ESP_PROP encap=yes
  IFS=$IFS_OLD
  swan_start ${TOPO}b "$CD/b"
  swan_load "$CD/b"
  td_conf "$CD/a" local=$A_NET remote=$B_NET local_id=$A_ID remote_id=$B_ID \
    local_ts="${A_TS[*]}" remote_ts="${B_TS[*]}" psk="$psk" fragmentation="${TD_FRAG:-yes}" fragment_size="$FRAG_SIZE"
  td_start ${TOPO}a "$CD/a" $B_IN
  pair_up "$CD" "$initiator"
  log "$CASE: up after $((SECONDS - t0)) s; $PINGS pings $A_IN -> $B_IN"
  local sent recv
  ip netns exec ${TOPO}a ping -n -c "$PINGS" -i 0.2 -W 2 -I $A_IN $B_IN >"$CD/ping.out" 2>&1 || true
  sent=$(sed -n 's/^\([0-9]*\) packets transmitted, \([0-9]*\) received.*/\1/p' "$CD/ping.out")
  recv=$(sed -n 's/^\([0-9]*\) packets transmitted, \([0-9]*\) received.*/\2/p' "$CD/ping.out")
  sleep 1.2 # the stats file is written every second
  local frag_sent frag_msgs frag_dropped retrans dropped=""
  frag_sent=$(td_stat fragments_sent)
  frag_msgs=$(td_stat fragmented_messages)
  frag_dropped=$(td_stat fragments_dropped)
  retrans=$(td_stat retransmits)
  [ "$CASE" != lost ] || dropped=$(nft_dropped)
  td_stop "$CD/a"
  swan_stop "$CD/b"
  stop_pids "$CAP"
  # the checks
  local why=() seen
  [ "${recv:-0}" -ge "$PINGS" ] || why+=("${recv:-?} of ${sent:-?} pings answered")
  seen=$(fragments_seen "$CD/link.pcap")
  echo "$seen" >"$CD/fragments"
  local from_a from_b too_big
  from_a=$(awk -v s=$A_NET '$1 == s' <<<"$seen" | grep -c . || true)
  from_b=$(awk -v s=$B_NET '$1 == s' <<<"$seen" | grep -c . || true)
  too_big=$(awk -v m="$FRAG_SIZE" '$4 > m' <<<"$seen" | grep -c . || true)
  [ "$from_a" -ge 2 ] || why+=("$from_a IKE_AUTH fragments from tunneld in the capture, expected >= 2")
  [ "$from_b" -ge 2 ] || why+=("$from_b IKE_AUTH fragments from charon in the capture, expected >= 2")
  [ "$too_big" = 0 ] || why+=("$too_big fragment frames longer than $FRAG_SIZE bytes")
  local src
  for src in $A_NET $B_NET; do
    python3 - "$src" "$CD/fragments" <<'PY' || why+=("fragments from $src: numbers not 1..Total")
import sys
src, rows = sys.argv[1], [l.split() for l in open(sys.argv[2]) if l.strip()]
got = {(int(r[1]), int(r[2])) for r in rows if r[0] == src}
totals = {t for _, t in got}
sys.exit(0 if got and all({(n, t) for n in range(1, t + 1)} <= got for t in totals) else 1)
PY
  done
  local init_frag
  init_frag=$(tshark -n -r "$CD/link.pcap" -Y 'isakmp.exchangetype == 34 && isakmp.frag.number' 2>/dev/null | grep -c . || true)
  [ "$init_frag" = 0 ] || why+=("$init_frag IKE_SA_INIT frames with a fragment")
  [ "$frag_sent" != "?" ] && [ "$frag_sent" -gt 0 ] || why+=("tunneld counted $frag_sent fragments sent")
  [ "$frag_msgs" != "?" ] && [ "$frag_msgs" -gt 0 ] || why+=("tunneld counted $frag_msgs messages reassembled")
  [ "$frag_dropped" = 0 ] || why+=("tunneld dropped $frag_dropped fragments")
  grep -q 'received fragment #' "$CD/b/charon.log" || why+=("charon logged no received fragment")
  grep -qE 'splitting IKE message .* into [0-9]+ fragments' "$CD/b/charon.log" || why+=("charon logged no message split into fragments")
  if [ "$CASE" = lost ]; then
    [ "$dropped" = 1 ] || why+=("the router dropped ${dropped:-?} frames, expected 1")
    [ "$retrans" != "?" ] && [ "$retrans" -ge 1 ] || why+=("tunneld counted $retrans retransmissions, expected >= 1")
  fi
  echo "$from_a $from_b ${retrans:-?} $((SECONDS - t0))" >"$CD/result"
  if [ ${#why[@]} -gt 0 ]; then
    local IFS=';'
    case_fail "${why[*]}"
  fi
  log "$CASE: passed ($((SECONDS - t0)) s): fragments A $from_a, B $from_b; tunneld sent $frag_sent, reassembled $frag_msgs, retransmits $retrans"
}

declare -A INIT=([t-init]=a [sw-init]=b [lost]=a)
ROWS=()
for c in $ALL_CASES; do
  want "$c" || continue
  log "---- $c"
  rm -rf "${WORK:?}/$c"
  case_bounded 60 run_case "$c" "${INIT[$c]}"
  rc=$CASE_RC
  r="? ? ? ?"
  [ ! -s "$WORK/$c/result" ] || r=$(cat "$WORK/$c/result")
  read -r fa fb rt secs <<<"$r"
  if [ $rc = 0 ]; then res=pass; else res=FAIL; FAILED=1; fi
  ROWS+=("$(printf '%-8s %4ss %6s %6s %6s  %s' "$c" "$secs" "$fa" "$fb" "$rt" "$res")")
done
for ns in ${TOPO}a ${TOPO}n ${TOPO}b; do ip netns del "$ns" 2>/dev/null || true; done
echo
echo "ike-fragment: fragment size $FRAG_SIZE (both sides), $NETS selectors on tunneld's side; frags A/B: IKE_AUTH fragments seen from tunneld / charon"
printf '%-8s %5s %6s %6s %6s  %s\n' case time "frags A" "frags B" retrans result
for r in "${ROWS[@]}"; do echo "$r"; done
[ $FAILED = 0 ] || { log "some cases failed ($((SECONDS - START)) s)"; exit 1; }
swan_host_quiet || fail "something listens on the host's UDP 500/4500 after the run"
log "all cases passed ($((SECONDS - START)) s)"
