#!/usr/bin/env bash
# tunneld's IKEv2 responder under a flood of spoofed IKE_SA_INIT requests (issue #29,
# docs/ike-dos.md), in network namespaces, as root:
#
#   fla  charon A  flva 10.94.251.2 --- flna |                      | flnb --- flvb 10.94.254.2  flb  tunneld
#   flc  charon C  flvc 10.94.252.2 --- flnc |  fln (router)        |
#   flf  flooder   flvf 10.94.253.2 --- flnf |  10.94.0.0-239.255: blackhole (the sink of the answers)
#   inner addresses on lo: 10.94.240.1 (tunneld), 10.94.241.1 (A), 10.94.242.1 (C)
#
# tunneld has two connections: `gw-a` for charon A (up before the flood; pings every 20 ms
# from 10.94.241.1 to 10.94.240.1 through it for the whole run) and `any` (remote_addrs
# %any), which charon C connects to while the flood runs. The flooder (scripts/lib/ike_flood.py,
# a raw socket) sends COUNT well-formed IKE_SA_INITs at RATE a second, each with its own SPIi,
# from random source addresses of 10.94.0.0/16 outside 10.94.240.0/20; the router forwards
# them (rp_filter off) and drops tunneld's answers to those addresses (blackhole routes).
# A sampler reads tunneld's VmRSS, `ipsec ike list --json` and the stats file every 0.5 s.
# Checks:
#   - charon C connects during the flood (swanctl --initiate, within charon's own
#     retransmissions: 3 tries, ~7 s), with the COOKIE round trip (RFC 7296 2.6)
#   - tunneld sent COOKIEs; the half-open SAs stayed at most cookie_threshold (20 here) + 5
#   - `ipsec ike list` answered every time during the flood
#   - tunneld's VmRSS grew at most RSS_MARGIN_MB (8) from before the flood to its peak
#   - no ping lost over the existing tunnel
# and prints the figures table (requests/s sent and answered, cookies, half-open peak, RSS,
# the time charon took to connect).
#
#   sudo bash scripts/ci/ike-flood.sh                 # 200,000 requests at 10,000/s (20 s)
#   sudo bash scripts/ci/ike-flood.sh --ci            # 40,000 at 4,000/s (10 s)
#   COUNT=50000 RATE=5000 TUNNELD_BIN=... IPSEC_BIN=... sudo -E bash scripts/ci/ike-flood.sh
#   TD_IKE_TABLE=no TUNNELD_BIN=old/tunneld ... # a tunneld without the [ike] table: it must fail
#   bash scripts/ci/ike-flood.sh --if-possible        # no root / netns / strongSwan: say why, exit 0
#
# Only namespaces named fl* and addresses of 10.94.0.0/16 are used. Every wait is bounded;
# the work directory (configs, logs, samples) is kept when the run failed (IKE_FLOOD_KEEP=1:
# always).
set -euo pipefail
cd "$(dirname "$0")/../.."
START=$SECONDS
NETNS_TAG=ike-flood
. scripts/lib/netns.sh
. scripts/lib/strongswan.sh
. scripts/lib/ike-lifecycle.sh # td_head, td_conn, td_ctl (not its topology)
parse_stages "" "$@" # also --ci (CI=1)
if [ $CI = 1 ]; then COUNT=${COUNT:-40000}; RATE=${RATE:-4000}; else COUNT=${COUNT:-200000}; RATE=${RATE:-10000}; fi
RSS_MARGIN_MB=${RSS_MARGIN_MB:-8}
need_netns "network namespaces, charon, tunneld, a raw socket"
command -v python3 >/dev/null || cannot "python3 is missing"

swan_install
locate_tunneld --bin ipsec
IPSEC=$(dirname "$BIN")/ipsec
[ -z "${TUNNELD_BIN:-}" ] || IPSEC=${IPSEC_BIN:-$IPSEC}
[ -x "$IPSEC" ] || fail "no ipsec binary at $IPSEC"
"$IPSEC" ike --help >/dev/null 2>&1 || cannot "this ipsec has no \`ike\` subcommand"
WORK=$(mktemp -d /tmp/ike-flood.XXXXXX)
trap 'rc=$?; [ "${IKE_FLOOD_KEEP:-0}" = 0 ] || { log "files kept in $WORK"; [ $rc -ne 0 ] || WORK=; }; swan_stop_all >/dev/null 2>&1 || true; cleanup_all $rc 15' EXIT
trap 'fail "interrupted"' INT TERM

TD=10.94.254.2
A_NET=10.94.251.2
C_NET=10.94.252.2
F_NET=10.94.253.2
TD_IN=10.94.240.1
A_IN=10.94.241.1
C_IN=10.94.242.1
# tunneld's [ike] table sets cookie_threshold to 20 (its default is 30): the half-open peak
# shows the key reached the responder. TD_IKE_TABLE=no leaves the table out (a tunneld from
# before it refuses the key), and the default is expected.
if [ "${TD_IKE_TABLE:-yes}" = yes ]; then COOKIE_THRESHOLD=20; else COOKIE_THRESHOLD=30; fi

# ---- the namespaces --------------------------------------------------------------------------
for ns in fla flb flc fln flf; do ip netns del "$ns" 2>/dev/null || true; done
netns_add fla flb flc fln flf
link() { # NS IF_NS ADDR IF_ROUTER ROUTER_ADDR
  ip link add "$2" netns "$1" type veth peer name "$4" netns fln
  ip -n "$1" addr add "$3/24" dev "$2"
  ip -n fln addr add "$5/24" dev "$4"
  ip -n "$1" link set lo up
  ip -n "$1" link set "$2" up
  ip -n fln link set "$4" up
  ip -n "$1" route add default via "$5"
}
ip -n fln link set lo up
link fla flva $A_NET flna 10.94.251.1
link flc flvc $C_NET flnc 10.94.252.1
link flb flvb $TD flnb 10.94.254.1
link flf flvf $F_NET flnf 10.94.253.1
for ns in fln flb; do
  ip netns exec $ns sysctl -qw net.ipv4.conf.all.rp_filter=0 net.ipv4.conf.default.rp_filter=0
  for i in $(ip -n $ns -o link show | awk -F': ' '{print $2}' | cut -d@ -f1); do
    ip netns exec $ns sysctl -qw "net.ipv4.conf.$i.rp_filter=0"
  done
done
ip netns exec fln sysctl -qw net.ipv4.ip_forward=1
# the spoofed sources 10.94.0.0 - 10.94.239.255: tunneld's answers to them end here
for p in 10.94.0.0/17 10.94.128.0/18 10.94.192.0/19 10.94.224.0/20; do ip -n fln route add blackhole $p; done
ip -n fla addr add $A_IN/32 dev lo
ip -n flc addr add $C_IN/32 dev lo
ip -n flb addr add $TD_IN/32 dev lo
for ns in fla flc flf; do
  ip netns exec $ns ping -c 1 -W 3 -q $TD >/dev/null || fail "topology: $ns cannot reach $TD"
done

# ---- tunneld ---------------------------------------------------------------------------------
PSK_A="fa-$RANDOM-$RANDOM-$RANDOM"
PSK_C="fc-$RANDOM-$RANDOM-$RANDOM"
D=$WORK/td
if [ "${TD_IKE_TABLE:-yes}" = yes ]; then td_head "$D" local=$TD cookie_threshold=$COOKIE_THRESHOLD; else td_head "$D" local=$TD; fi
# flood_conn NAME REMOTE_ADDR PEER PEER_INNER PSK: the connection NAME, b.fl.test to PEER.fl.test
flood_conn() {
  td_conn "$D" name="$1" local=$TD remote="$2" local_id=b.fl.test remote_id="$3.fl.test" \
    local_ts=$TD_IN/32 remote_ts="$4/32" psk="$5"
}
flood_conn gw-a $A_NET a $A_IN "$PSK_A"
flood_conn any %any c $C_IN "$PSK_C"
ip netns exec flb "$BIN" --config "$D/tunneld.toml" --control "$D/ctl.sock" --stats "$D/stats.json" 2>"$WORK/tunneld.log" &
TUNNELD=$!
BG+=("$TUNNELD")
deadline=$((SECONDS + 10))
until [ -S "$D/ctl.sock" ] && [ -s "$D/stats.json" ] && ip -n flb link show ipsec0 >/dev/null 2>&1; do
  kill -0 $TUNNELD 2>/dev/null || fail "tunneld exited at start: $(tail -n 5 "$WORK/tunneld.log")"
  [ $SECONDS -lt $deadline ] || fail "tunneld: no control socket / stats / ipsec0 within 10 s"
  sleep 0.1
done
ip -n flb route add $A_IN/32 dev ipsec0 src $TD_IN
ip -n flb route add $C_IN/32 dev ipsec0 src $TD_IN

# ---- charon A (the existing tunnel) and charon C (connects during the flood) -------------------
SWAN_LOG="ike=2 chd=1 knl=1 cfg=1 net=1 enc=1 dmn=1 lib=1 job=1"
swan_instance "$WORK/a"
swan_site_conf "$WORK/a" local=$A_NET remote=$TD local_id=a.fl.test remote_id=b.fl.test \
  local_ts=$A_IN/32 remote_ts=$TD_IN/32 psk="$PSK_A" ike=$IKE_PROP esp=$ESP_PROP encap=yes
swan_start fla "$WORK/a"
swan_load "$WORK/a"
swan_instance "$WORK/c"
swan_site_conf "$WORK/c" local=$C_NET remote=$TD local_id=c.fl.test remote_id=b.fl.test \
  local_ts=$C_IN/32 remote_ts=$TD_IN/32 psk="$PSK_C" ike=$IKE_PROP esp=$ESP_PROP encap=yes
swan_start flc "$WORK/c"
swan_load "$WORK/c"
swan_initiate "$WORK/a" net
ip netns exec fla ping -c 3 -i 0.2 -W 2 -q -I $A_IN $TD_IN >/dev/null || fail "the tunnel A - tunneld carries no ping"
log "the existing tunnel (charon A - tunneld gw-a) is up"

# ---- the run -----------------------------------------------------------------------------------
FLOOD_SECS=$(( (COUNT + RATE - 1) / RATE ))
PINGS=$(( (FLOOD_SECS + 8) * 50 ))
ip netns exec fla ping -n -c $PINGS -i 0.02 -W 1 -I $A_IN $TD_IN >"$WORK/ping.out" 2>&1 &
PING_PID=$!
BG+=("$PING_PID")
python3 scripts/lib/ike_flood.py sample --pid $TUNNELD --control "$D/ctl.sock" --ipsec "$IPSEC" \
  --stats "$D/stats.json" --until "$WORK/stop-sampling" --out "$WORK/samples.jsonl" &
SAMPLER=$!
BG+=("$SAMPLER")
sleep 3
log "flood: $COUNT IKE_SA_INIT requests at $RATE/s from 10.94.0.0/16 (spoofed) to $TD"
udp_drops() { ip netns exec flb awk 'NR > 1 && $2 ~ /:01F4$/ { d += $NF } END { print d + 0 }' /proc/net/udp; }
DROPS0=$(udp_drops)
FLOOD_START=$(date +%s.%N)
ip netns exec flf python3 scripts/lib/ike_flood.py send --dst $TD --count "$COUNT" --rate "$RATE" >"$WORK/flood.json" 2>"$WORK/flood.log" &
FLOODER=$!
BG+=("$FLOODER")
# charon C connects once the flood is under way (the cookies are on by then)
sleep 2
T0=$(date +%s.%N)
CONNECT=-1
if out=$(swan_ctl "$WORK/c" --initiate --child net --timeout 30 2>&1); then
  CONNECT=$(awk -v a="$(date +%s.%N)" -v b="$T0" 'BEGIN { printf "%.2f", a - b }')
  log "charon C connected in $CONNECT s during the flood"
else
  log "charon C did not connect: $(echo "$out" | tail -n 4)"
fi
kill -0 $FLOODER 2>/dev/null || log "note: the flood was over before charon C was up"
wait $FLOODER || fail "the flooder failed: $(tail -n 5 "$WORK/flood.log")"
FLOOD_END=$(date +%s.%N)
DROPS=$(( $(udp_drops) - DROPS0 ))
log "flood over: $(cat "$WORK/flood.json")"
sleep 3
touch "$WORK/stop-sampling"
wait $SAMPLER || true
wait $PING_PID || true
sent=$(sed -n 's/^\([0-9]*\) packets transmitted, \([0-9]*\) received.*/\1/p' "$WORK/ping.out")
recv=$(sed -n 's/^\([0-9]*\) packets transmitted, \([0-9]*\) received.*/\2/p' "$WORK/ping.out")
[ -n "$sent" ] && [ -n "$recv" ] || fail "no ping summary: $(tail -n 3 "$WORK/ping.out")"
RETRANS=$(grep -c 'retransmit' "$WORK/c/charon.log" || true)
COOKIE_SEEN=$(grep -c 'COOKIE' "$WORK/c/charon.log" || true)
log "charon C's log: $COOKIE_SEEN lines naming COOKIE, $RETRANS retransmissions"
[ "$CONNECT" = -1 ] || [ "$COOKIE_SEEN" -gt 0 ] || fail "charon C connected without a COOKIE: the cookies were not on"
td_ctl "$D" ike list >"$WORK/ike-list.after" 2>&1 || true
stop_pid $TUNNELD tunneld
echo
echo "ike-flood: $COUNT spoofed IKE_SA_INIT requests at $RATE/s; tunneld $(git rev-parse --short HEAD 2>/dev/null || echo '?')"
python3 scripts/lib/ike_flood.py report --samples "$WORK/samples.jsonl" --flood "$WORK/flood.json" \
  --flood-start "$FLOOD_START" --flood-end "$FLOOD_END" --expected "$COUNT" \
  --connect "$CONNECT" --retransmits "$RETRANS" --pings-sent "$sent" --pings-lost $((sent - recv)) \
  --kernel-drops "$DROPS" --cookie-threshold $COOKIE_THRESHOLD --rss-margin-mb "$RSS_MARGIN_MB" \
  --json-out "$WORK/figures.json" || fail "checks failed (files in $WORK)"
swan_host_quiet || fail "something listens on the host's UDP 500/4500 after the run"
log "passed ($((SECONDS - START)) s)"
