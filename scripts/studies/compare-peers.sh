#!/usr/bin/env bash
# Side-by-side throughput of tunneld and other userspace tunnels, as root, in one run: two
# network namespaces joined by one veth pair (10.98.0.1 <-> 10.98.0.2), and over it, one at a
# time, each variant:
#
#   veth          plain veth, no tunnel (the ceiling)
#   tunneld-esp   tunneld, ESP tunnel mode AES-128-GCM on raw IP protocol 50
#   tunneld-udp   tunneld, the same in ESP-in-UDP (RFC 3948, port 4500)
#   tunneld-cbc   tunneld, ESP-in-UDP AES-128-CBC + HMAC-SHA1-96
#   wireguard-go  wireguard-go (Go module proxy, pinned below), configured with `wg`
#   boringtun     boringtun-cli (crates.io), configured with `wg`
#   openvpn       OpenVPN 2.6 (Debian), UDP, TLS with a two-certificate PKI the script makes
#                 with openssl, data channel AES-128-GCM, no compression
#   openvpn-lz4   the same with `compress lz4-v2` (allowed with `allow-compression yes`)
#   stunnel       stunnel4 (Debian) carrying iperf3's TCP over TLS 1.3,
#                 TLS_AES_128_GCM_SHA256 (TCP traffic only: udpN and ping are skipped)
#                 (these three are set up by scripts/lib/ssl-tunnels.sh, shared with
#                 scripts/studies/ipsec-vs-ssl.sh)
#
# For each repetition (REPS, default 3) the variants run in a rotated order (so no variant is
# always first or last), each with the traffic in TRAFFIC (default "tcp udp64"), DURATION
# seconds per test (default 10):
#
#   tcp     iperf3 TCP for 1 and for 4 streams (STREAMS): the median goodput (Mbit/s, iperf3's
#           receiver figure) and the median CPU-seconds per GB of the tunnel processes (both
#           ends: utime + stime from /proc/PID/stat over the transfer, divided by the bytes
#           received).
#   udpN    iperf3 UDP, N-byte payloads, as fast as the sender goes (`-u -b 0 -l N`, N from 16
#           to 1400; udp64 is the small-packet test): the median packets per second received
#           (iperf3's receiver side: packets minus lost, over its seconds), the median CPU
#           microseconds per received packet of the tunnel processes (both ends, as above)
#           and the median loss. With DURATION >= 5, pings 100 ms apart through the tunnel
#           from 2 s into the transfer to 1 s before its end: the round trip under that load
#           (a separate table: median, 99th percentile, loss).
#   ping    light load: 400 pings through the tunnel, 5 ms apart (`ping -i 0.005`): the median
#           and 99th-percentile round trip in microseconds, and the loss.
#
# The raw figures are kept in $OUT (default /tmp/compare-peers.txt).
#
#   sudo bash scripts/studies/compare-peers.sh                        # everything, ~10 min
#   DURATION=3 REPS=1 sudo -E bash scripts/studies/compare-peers.sh   # a quick look
#   TRAFFIC=udp64 VARIANTS="tunneld-udp wireguard-go" sudo -E bash scripts/studies/compare-peers.sh
#   VARIANTS="veth tunneld-esp wireguard-go" sudo -E bash scripts/studies/compare-peers.sh
#   TUNNELD_BIN=target/release/tunneld TUNNELD_ARGS="--log info" ...
#   BASE_BIN=/path/to/older/tunneld VARIANTS="base-esp tunneld-esp" ...  # before/after
#
# base-esp, base-udp, base-cbc are tunneld-* run with $BASE_BIN (another build) instead.
# Any tunneld variant takes a worker count: tunneld-udp@w1, tunneld-udp@w2 (--workers N;
# default one per core), @uring: TUN reads through io_uring (TUNNELD_TUN_URING=on), and
# @NAME=VALUE: tunneld run with that TUNNELD_* variable in its environment (e.g.
# tunneld-udp@TUNNELD_TUN_YIELD=off), and @pN: N generated policies per direction (bypass,
# 198.18.0.0/15 host -> 203.0.113.0/24, never matched) placed before the real ones, so the
# SPD's cost shows beside the plain config in one run (issue #30), for the scaling figure
# and before/after:
#   VARIANTS="tunneld-udp tunneld-udp@p10000 tunneld-udp@p100000" TRAFFIC=tcp STREAMS=1 ...
#   VARIANTS="tunneld-udp@w1 tunneld-udp@w2" STREAMS=4 sudo -E bash scripts/studies/compare-peers.sh
# and @qN (ESP in UDP only, N up to 100,000): N generated peers beside the real one, as N real
# sites would be configured: each peer (198.18.0.1 onwards, routed to the other namespace,
# which drops what comes, so none ever answers) in [tunnel] `peers`, with its own pair of
# AES-128-GCM tunnel SAs and a protect policy each way between the inner subnet and the
# site's own /27 of 100.64.0.0/10; the generated SAs, peers and policies come before the real
# ones (the real peer is listed last). So each daemon holds N+1 peers, 2N+2 SAs and 2N+2
# policies, and the cost of many peers shows beside the plain config (issue #30); @pN and @qN
# combine (tunneld-udp@p10000@q10000). The startup wait grows with both (10 s + 1 s per
# 10,000 policies + 1 s per 500 peers):
#   VARIANTS="tunneld-udp tunneld-udp@q10000" TRAFFIC=tcp STREAMS=1 DURATION=5 ...
#   BASE_BIN=/path/to/older/tunneld VARIANTS="base-udp@q10000 tunneld-udp@q10000" ...
# Every variant's output also has the memory of its tunnel processes (the mean over them,
# for tunneld its two daemons): VmRSS once up and after the tests, and the peak (VmHWM).
#
# Installs what is missing: iperf3 and wireguard-tools (apt), wireguard-go (go install, into
# $TOOLS, default /tmp/compare-peers-tools) and boringtun-cli (cargo install, same place; it
# takes several minutes to build the first time). A variant whose tool cannot be had is
# reported as missing, not silently dropped. Every wait has a deadline; the namespaces and
# every process started are removed on exit.
set -euo pipefail
cd "$(dirname "$0")/../.."
NETNS_TAG=compare-peers
NETNS_LOG_FD=2
. scripts/lib/netns.sh
. scripts/lib/ssl-tunnels.sh
[ "$(id -u)" -eq 0 ] || fail "needs root (network namespaces, TUN devices)"

DURATION=${DURATION:-10}
REPS=${REPS:-3}
STREAMS=${STREAMS:-"1 4"}
TRAFFIC=${TRAFFIC:-"tcp udp64"}
VARIANTS=${VARIANTS:-"veth tunneld-esp tunneld-udp tunneld-cbc wireguard-go boringtun"}
OUT=${OUT:-/tmp/compare-peers.txt}
TOOLS=${TOOLS:-/tmp/compare-peers-tools}
WG_GO_VERSION=${WG_GO_VERSION:-v0.0.0-20260522210424-ecfc5a8d5446}
BORINGTUN_VERSION=${BORINGTUN_VERSION:-0.6.0}
[[ $DURATION =~ ^[0-9]+$ && $DURATION -ge 1 && $DURATION -le 120 ]] || fail "DURATION: 1 to 120 seconds"
[[ $REPS =~ ^[0-9]+$ && $REPS -ge 1 && $REPS -le 10 ]] || fail "REPS: 1 to 10"
for t in $TRAFFIC; do
  [[ $t == tcp || $t == ping || ($t =~ ^udp([0-9]+)$ && ${BASH_REMATCH[1]} -ge 16 && ${BASH_REMATCH[1]} -le 1400) ]] ||
    fail "TRAFFIC: tcp, ping and udpN (N from 16 to 1400), not $t"
done
mkdir -p "$TOOLS"

# ---- tools ------------------------------------------------------------------------------
pkgs=()
command -v iperf3 >/dev/null || pkgs+=(iperf3)
command -v wg >/dev/null || pkgs+=(wireguard-tools)
command -v python3 >/dev/null || pkgs+=(python3)
mapfile -t -O ${#pkgs[@]} pkgs < <(ssl_tunnel_pkgs "$VARIANTS")
[ ${#pkgs[@]} -eq 0 ] || apt_install "${pkgs[@]}"
WG_GO=${WG_GO:-$TOOLS/bin/wireguard}
if [[ " $VARIANTS " == *" wireguard-go "* && ! -x $WG_GO ]]; then
  log "go install golang.zx2c4.com/wireguard@$WG_GO_VERSION"
  GOBIN=$TOOLS/bin timeout 900 go install "golang.zx2c4.com/wireguard@$WG_GO_VERSION" >&2 || log "wireguard-go: install failed"
fi
BORINGTUN=${BORINGTUN:-$TOOLS/bin/boringtun-cli}
if [[ " $VARIANTS " == *" boringtun "* && ! -x $BORINGTUN ]]; then
  log "cargo install boringtun-cli@$BORINGTUN_VERSION (minutes)"
  timeout 2400 cargo install --quiet --locked --root "$TOOLS" "boringtun-cli@$BORINGTUN_VERSION" >&2 || log "boringtun-cli: install failed"
fi
BIN=''
[[ " $VARIANTS " != *" tunneld"* ]] || locate_tunneld

# ---- namespaces -------------------------------------------------------------------------
ID=$$
# NS_PREFIX, NET and INNER move the namespaces, the underlay subnet (NET.0.0/24) and
# tunneld's inner subnet (INNER.0/24) for a machine shared with other tests.
NS_PREFIX=${NS_PREFIX:-cmp}
NSA=$NS_PREFIX-a-$ID
NSB=$NS_PREFIX-b-$ID
VA=cpva$ID
VB=cpvb$ID
NET=${NET:-10.98}
# tunneld's inner subnet (INNER.0/24, on the TUN devices).
INNER=${INNER:-10.100.0}
A4=$NET.0.1
B4=$NET.0.2
WORK=$(mktemp -d /tmp/compare-peers.XXXXXX)
# On exit: SIGTERM first (wireguard-go and boringtun get to remove their sockets), then the
# shared cleanup, then any socket left behind.
cleanup() {
  local rc=$? p
  for p in "${BG[@]}"; do kill -TERM "$p" 2>/dev/null || true; done
  sleep 0.2
  cleanup_all $rc 10
  rm -f /var/run/wireguard/cwa"$ID".sock /var/run/wireguard/cwb"$ID".sock
}
trap cleanup EXIT
trap 'fail "interrupted"' INT TERM

netns_pair "$NSA" "$NSB" "$VA" "$VB" $A4/24 $B4/24
# @qN's generated peers (198.18.0.0/15) are reached through the other namespace, which drops
# what comes (it does not forward): their NAT-keepalives leave as to a real peer and no answer
# comes back.
if [[ $VARIANTS == *@q* ]]; then
  ip -n "$NSA" route add 198.18.0.0/15 via $B4
  ip -n "$NSB" route add 198.18.0.0/15 via $A4
fi

# ---- tunneld configs (AES-128-GCM raw, in UDP; AES-CBC + HMAC-SHA1 in UDP) ----------------
K1=0x303132333435363738393a3b3c3d3e3f01020304
K2=0x404142434445464748494a4b4c4d4e4f05060708
E1=0x000102030405060708090a0b0c0d0e0f
E2=0x101112131415161718191a1b1c1d1e1f
H1=0x0001020304050607080910111213141516171819
H2=0x2021222324252627282930313233343536373839
# N bypass policies of direction DIR that no packet of the tests matches (/32 -> /24).
filler_policies() { # DIR N
  awk -v dir="$1" -v n="$2" 'BEGIN {
    for (i = 0; i < n; i++)
      printf "[[policy]]\nname = \"f-%s-%d\"\ndir = \"%s\"\nsrc = \"198.%d.%d.%d/32\"\ndst = \"203.0.113.0/24\"\naction = \"bypass\"\n\n",
        dir, i, dir, 18 + int(i / 65536), int(i / 256) % 256, i % 256
  }'
}

# The address of generated peer I (0-based): 198.18.0.1 onwards (198.18.0.0/15, RFC 2544's
# benchmarking block; routed to the other namespace, which drops what it gets).
# shellcheck disable=SC2016
QPEER_AWK='function qpeer(i, n) { n = i + 1; return sprintf("198.%d.%d.%d", 18 + int(n / 65536), int(n / 256) % 256, n % 256) }'
# The peers list of [tunnel]: N generated peers, then the real one (last: the worst place for
# anything that scans the list).
peers_list() { # N REAL
  awk -v n="$1" -v real="$2" "$QPEER_AWK"'
  BEGIN {
    print "peers = ["
    for (i = 0; i < n; i++) printf "  \"%s\",\n", qpeer(i)
    printf "  \"%s\",\n]\n", real
  }'
}
# What N sites behind N generated peers need on side ME, as the real peer's are written: per
# peer an outbound and an inbound ESP SA (tunnel mode, AES-128-GCM, keys of their own; SPIs
# 0x100000+I out and 0x200000+I in on side a, the other way round on b) ...
peer_sas() { # N ME SIDE(a|b)
  awk -v n="$1" -v me="$2" -v side="$3" "$QPEER_AWK"'
  function sa(name, spi, src, dst, tag, i) {
    printf "[[sa]]\nname = \"%s\"\nproto = \"esp\"\nspi = 0x%x\nmode = \"tunnel\"\nsrc = \"%s\"\ndst = \"%s\"\n", name, spi, src, dst
    printf "aead = { alg = \"rfc4106(gcm(aes))\", key = \"0x%02x%06x%s\", icv = 128 }\n\n", tag, i, "a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5"
  }
  BEGIN {
    for (i = 0; i < n; i++) {
      o = 1048576 + i; x = 2097152 + i
      if (side == "b") { t = o; o = x; x = t }
      sa("q-out-" i, o, me, qpeer(i), side == "a" ? 1 : 2, i)
      sa("q-in-" i, x, qpeer(i), me, side == "a" ? 2 : 1, i)
    }
  }'
}
# ... and an outbound and an inbound protect policy between our inner subnet and the site's
# own /27 of 100.64.0.0/10 (no test packet is addressed there).
peer_policies() { # N INNER-PREFIX
  awk -v n="$1" -v inner="$2" '
  BEGIN {
    for (i = 0; i < n; i++) {
      b = i * 32
      site = sprintf("100.%d.%d.%d/27", 64 + int(b / 65536), int(b / 256) % 256, b % 256)
      printf "[[policy]]\nname = \"q-out-%d\"\ndir = \"out\"\nsrc = \"%s\"\ndst = \"%s\"\naction = \"protect\"\nbundle = [\"q-out-%d\"]\n\n", i, inner, site, i
      printf "[[policy]]\nname = \"q-in-%d\"\ndir = \"in\"\nsrc = \"%s\"\ndst = \"%s\"\naction = \"protect\"\nbundle = [\"q-in-%d\"]\n\n", i, site, inner, i
    }
  }'
}

# KIND(esp|udp|cbc) SIDE(a|b) [FILLER policies per direction] [PEERS: generated peers]
tunneld_config() {
  local kind=$1 side=$2 filler=${3:-0} peers=${4:-0} me=$A4 peer=$B4 out=ab in=ba encap=''
  [ "$side" = b ] && { me=$B4; peer=$A4; out=ba; in=ab; }
  [ "$kind" != esp ] && encap='encap = "espinudp"'
  local peerline="peer = \"$peer\""
  [ "$peers" -eq 0 ] || peerline=$(peers_list "$peers" "$peer")
  local alg1="aead = { alg = \"rfc4106(gcm(aes))\", key = \"$K1\", icv = 128 }"
  local alg2="aead = { alg = \"rfc4106(gcm(aes))\", key = \"$K2\", icv = 128 }"
  if [ "$kind" = cbc ]; then
    alg1="enc = { alg = \"cbc(aes)\", key = \"$E1\" }
auth = { alg = \"hmac(sha1)\", key = \"$H1\", trunc = 96 }"
    alg2="enc = { alg = \"cbc(aes)\", key = \"$E2\" }
auth = { alg = \"hmac(sha1)\", key = \"$H2\", trunc = 96 }"
  fi
  cat <<EOF
[tunnel]
tun = "cmptun0"
local = "$me"
$peerline
$encap

EOF
  [ "$peers" -eq 0 ] || peer_sas "$peers" "$me" "$side"
  cat <<EOF
[[sa]]
name = "esp-ab"
proto = "esp"
spi = 0x2001
mode = "tunnel"
src = "$A4"
dst = "$B4"
$alg1

[[sa]]
name = "esp-ba"
proto = "esp"
spi = 0x2002
mode = "tunnel"
src = "$B4"
dst = "$A4"
$alg2

EOF
  if [ "$filler" -gt 0 ]; then
    filler_policies out "$filler"
    filler_policies in "$filler"
  fi
  [ "$peers" -eq 0 ] || peer_policies "$peers" "$INNER.0/24"
  cat <<EOF
[[policy]]
name = "out"
dir = "out"
src = "$INNER.0/24"
dst = "$INNER.0/24"
action = "protect"
bundle = ["esp-$out"]

[[policy]]
name = "in"
dir = "in"
src = "$INNER.0/24"
dst = "$INNER.0/24"
action = "protect"
bundle = ["esp-$in"]
EOF
}

PIDS=() # the tunnel processes of the current variant (their CPU is measured)
TARGET=''
# iperf3's server address in NSB and the address and port its client connects to in NSA:
# TARGET and 5201, except through stunnel (a local port forwarded over TLS).
SRV_ADDR=''
CLI_ADDR=''
CLI_PORT=5201

up() { # VARIANT: starts it; sets PIDS and TARGET (the address iperf3 connects to)
  PIDS=()
  SRV_ADDR=''
  CLI_ADDR=''
  CLI_PORT=5201
  case $1 in
    veth)
      TARGET=$B4
      ;;
    openvpn | openvpn-lz4 | stunnel)
      # scripts/lib/ssl-tunnels.sh; stunnel forwards NSA's 127.0.0.1:5202 to NSB's 127.0.0.1:5201.
      ssl_tunnel_up "$1" $INNER.11 $INNER.12 5201
      ;;
    tunneld-* | base-*)
      # KIND[@wN][@uring][@TUNNELD_X=V]: tunneld-udp@w1 runs tunneld-udp with --workers 1;
      # @uring with TUNNELD_TUN_URING=on (TUN reads through io_uring, not one read(2) each);
      # @TUNNELD_X=V with that variable set; @pN N filler policies per direction, @qN N
      # generated peers (they combine: tunneld-udp@p10000@q10000).
      local spec=${1#*-} bin=$BIN kind workers=() envs=() opts=() opt filler=0 peers=0 t0
      kind=${spec%%@*}
      IFS=@ read -r -a opts <<<"${spec#"$kind"}"
      for opt in "${opts[@]}"; do
        case $opt in
          '') ;;
          w[0-9]*) workers=(--workers "${opt#w}") ;;
          uring) envs+=(TUNNELD_TUN_URING=on) ;;
          p[0-9]*) filler=${opt#p} ;;
          q[0-9]*) peers=${opt#q} ;;
          TUNNELD_[A-Z_]*=*) envs+=("$opt") ;; # a TUNNELD_* variable for both daemons
          *) fail "unknown variant option @$opt in $1" ;;
        esac
      done
      [[ $filler =~ ^[0-9]+$ && $filler -le 1000000 ]] || fail "$1: @pN takes 0 to 1000000 policies"
      [[ $peers =~ ^[0-9]+$ && $peers -le 100000 ]] || fail "$1: @qN takes 0 to 100000 peers"
      [[ $peers -eq 0 || $kind != esp ]] || fail "$1: @qN makes ESP-in-UDP peers (tunneld-udp, tunneld-cbc)"
      [[ $1 == base-* ]] && bin=${BASE_BIN:?BASE_BIN: the other tunneld build}
      t0=$EPOCHREALTIME
      for side in a b; do
        local ns=$NSA
        [ $side = b ] && ns=$NSB
        tunneld_config "$kind" $side "$filler" "$peers" >"$WORK/$kind-$side.toml"
        # shellcheck disable=SC2086
        ip netns exec "$ns" env "${envs[@]}" "$bin" --config "$WORK/$kind-$side.toml" --log warn "${workers[@]}" ${TUNNELD_ARGS:-} 2>"$WORK/tunneld-$kind-$side.log" &
        BG+=($!)
        PIDS+=($!)
      done
      wait_for $((10 + filler / 10000 + peers / 500)) "cmptun0 in both namespaces" sh -c "ip -n $NSA link show cmptun0 && ip -n $NSB link show cmptun0"
      [ "$filler$peers" = 00 ] || log "$1: both tunnels up $(awk -v a="$t0" -v b="$EPOCHREALTIME" 'BEGIN { printf "%.1f", b - a }') s after the start"
      ip -n "$NSA" addr add $INNER.1/24 dev cmptun0
      ip -n "$NSB" addr add $INNER.2/24 dev cmptun0
      TARGET=$INNER.2
      ;;
    wireguard-go | boringtun)
      local ka kb
      ka=$(wg genkey)
      kb=$(wg genkey)
      for side in a b; do
        local ns=$NSA dev=cwa$ID key=$ka peerkey=$kb peer=$B4 addr=10.101.0.1
        [ $side = b ] && { ns=$NSB; dev=cwb$ID; key=$kb; peerkey=$ka; peer=$A4; addr=10.101.0.2; }
        if [ "$1" = wireguard-go ]; then
          ip netns exec "$ns" env WG_I_PREFER_BUGGY_USERSPACE_TO_POLISHED_KMOD=1 "$WG_GO" -f "$dev" >"$WORK/$1-$side.log" 2>&1 &
        else
          ip netns exec "$ns" env WG_SUDO=1 "$BORINGTUN" --foreground --disable-drop-privileges "$dev" >"$WORK/$1-$side.log" 2>&1 &
        fi
        BG+=($!)
        PIDS+=($!)
        wait_for 10 "$1's $dev" ip netns exec "$ns" wg show "$dev"
        echo "$key" >"$WORK/key"
        ip netns exec "$ns" wg set "$dev" private-key "$WORK/key" listen-port 51820 \
          peer "$(echo "$peerkey" | wg pubkey)" allowed-ips 10.101.0.0/24 endpoint "$peer:51820"
        ip -n "$ns" addr add $addr/24 dev "$dev"
        ip -n "$ns" link set "$dev" mtu 1420 up
      done
      rm -f "$WORK/key"
      TARGET=10.101.0.2
      ;;
    *) fail "unknown variant $1" ;;
  esac
  wait_for 10 "$1: a ping through" ip netns exec "$NSA" ping -c1 -W1 "$TARGET"
}

down() {
  stop_pids "${PIDS[@]}"
  PIDS=()
}

measure() { # VARIANT STREAMS REP: one iperf3 TCP run; appends a line to $OUT
  local v=$1 n=$2 rep=$3
  ip netns exec "$NSB" timeout $((DURATION + 30)) iperf3 -s -1 -B "${SRV_ADDR:-$TARGET}" -p 5201 >"$WORK/iperf-server.log" 2>&1 &
  local srv=$!
  BG+=("$srv")
  wait_tcp_listen 10 "the iperf3 server" "$NSB" 5201
  local c0 c1 rc=0
  c0=$(cpu_ticks "${PIDS[@]}")
  timeout $((DURATION + 30)) ip netns exec "$NSA" iperf3 -c "${CLI_ADDR:-$TARGET}" -p "$CLI_PORT" -t "$DURATION" -P "$n" -J >"$WORK/iperf.json" 2>&1 || rc=$?
  c1=$(cpu_ticks "${PIDS[@]}")
  wait "$srv" || true
  [ $rc -eq 0 ] || fail "$v: iperf3 failed: $(grep -m1 '"error"' "$WORK/iperf.json" || tail -n 3 "$WORK/iperf.json")"
  python3 - "$WORK/iperf.json" "$v" "$n" "$rep" $((c1 - c0)) "$(getconf CLK_TCK)" >>"$OUT" <<'EOF'
import json, sys
r = json.load(open(sys.argv[1]))["end"]
v, n, rep, ticks, hz = sys.argv[2], sys.argv[3], sys.argv[4], int(sys.argv[5]), int(sys.argv[6])
got = r["sum_received"]["bytes"]
mbps = r["sum_received"]["bits_per_second"] / 1e6
retr = r["sum_sent"].get("retransmits", 0)
print(f"{v} {n} {rep} {mbps:.0f} {ticks / hz / (got / 1e9):.2f} {retr}")
EOF
  log "$(tail -n1 "$OUT")"
}

measure_udp() { # VARIANT LEN REP: one iperf3 UDP run of LEN-byte payloads, unlimited rate
  local v=$1 len=$2 rep=$3
  ip netns exec "$NSB" timeout $((DURATION + 30)) iperf3 -s -1 -B "${SRV_ADDR:-$TARGET}" -p 5201 >"$WORK/iperf-server.log" 2>&1 &
  local srv=$!
  BG+=("$srv")
  wait_tcp_listen 10 "the iperf3 server" "$NSB" 5201
  local c0 c1 rc=0 pinger=''
  if [ "$DURATION" -ge 5 ]; then
    (sleep 2 && exec ip netns exec "$NSA" ping -n -c $(((DURATION - 3) * 10)) -i 0.1 -W 1 "$TARGET") >"$WORK/ping-load.txt" 2>&1 &
    pinger=$!
    BG+=("$pinger")
  fi
  c0=$(cpu_ticks "${PIDS[@]}")
  timeout $((DURATION + 30)) ip netns exec "$NSA" iperf3 -c "$TARGET" -p 5201 -u -b 0 -l "$len" -t "$DURATION" -J >"$WORK/iperf.json" 2>&1 || rc=$?
  c1=$(cpu_ticks "${PIDS[@]}")
  wait "$srv" || true
  if [ -n "$pinger" ]; then
    wait "$pinger" || true
    ping_stats "$WORK/ping-load.txt" "$v" "udp${len}ping" "$rep" $(((DURATION - 3) * 10)) >>"$OUT" || true
  fi
  [ $rc -eq 0 ] || fail "$v: iperf3 -u failed: $(grep -m1 '"error"' "$WORK/iperf.json" || tail -n 3 "$WORK/iperf.json")"
  python3 - "$WORK/iperf.json" "$v" "udp$len" "$rep" $((c1 - c0)) "$(getconf CLK_TCK)" >>"$OUT" <<'EOF'
import json, sys
r = json.load(open(sys.argv[1]))["end"]
v, t, rep, ticks, hz = sys.argv[2], sys.argv[3], sys.argv[4], int(sys.argv[5]), int(sys.argv[6])
# The receiver's view: the datagrams that arrived (packets counted by sequence number, less
# those lost) over the receiver's seconds.
rx = r["sum_received"]
got = max(rx["packets"] - rx["lost_packets"], 1)
sent = max(r["sum_sent"]["packets"], 1)
print(f"{v} {t} {rep} {got / rx['seconds'] / 1e3:.1f} {ticks / hz / got * 1e6:.2f} {100 * (1 - got / sent):.1f}")
EOF
  log "$(tail -n1 "$OUT")"
}

ping_stats() { # FILE VARIANT KIND REP SENT: a line "VARIANT KIND REP median-us p99-us loss-%"
  python3 - "$@" <<'EOF'
import re, statistics, sys
f, v, kind, rep, sent = sys.argv[1:6]
rtt = sorted(float(x) * 1e3 for x in re.findall(r"time=([0-9.]+) ms", open(f).read()))
if not rtt:
    print(f"{v} {kind} {rep} 0 0 100.0")
    sys.exit()
p99 = rtt[min(len(rtt) - 1, int(0.99 * len(rtt)))]
print(f"{v} {kind} {rep} {statistics.median(rtt):.0f} {p99:.0f} {100 * (1 - len(rtt) / int(sent)):.1f}")
EOF
}

measure_ping() { # VARIANT REP: 400 pings 5 ms apart; appends the median and p99 RTT (µs), loss
  local v=$1 rep=$2
  ip netns exec "$NSA" timeout 30 ping -n -c 400 -i 0.005 -W 1 "$TARGET" >"$WORK/ping.txt" 2>&1 || true
  ping_stats "$WORK/ping.txt" "$v" ping "$rep" 400 >>"$OUT"
  log "$(tail -n1 "$OUT")"
}

mem_kb() { # FIELD(VmRSS|VmHWM): its mean over the tunnel processes in PIDS, in kB (0: none)
  local p sum=0 n=0 kb
  for p in "${PIDS[@]}"; do
    kb=$(awk -v f="$1:" '$1 == f { print $2 }' "/proc/$p/status" 2>/dev/null) || continue
    [ -n "$kb" ] || continue
    sum=$((sum + kb))
    n=$((n + 1))
  done
  echo $((n ? sum / n : 0))
}

have() {
  case $1 in
    wireguard-go) [ -x "$WG_GO" ] ;;
    boringtun) [ -x "$BORINGTUN" ] ;;
    *) true ;;
  esac
}

# ---- the runs -----------------------------------------------------------------------------
read -r -a VS <<<"$VARIANTS"
: >"$OUT"
echo "# variant streams rep mbit/s cpu-s/GB retransmits | variant udpN rep kpps cpu-us/packet loss-% | variant ping rep median-us p99-us loss-% | variant rss rep MB-up MB-after MB-peak ($(date -u +%FT%TZ), $(git rev-parse --short HEAD 2>/dev/null || echo ?), ${DURATION}s)" >>"$OUT"
MISSING=()
for v in "${VS[@]}"; do have "$v" || MISSING+=("$v"); done
for rep in $(seq "$REPS"); do
  k=${#VS[@]}
  for i in $(seq 0 $((k - 1))); do
    v=${VS[$(((i + rep - 1) % k))]}
    have "$v" || continue
    up "$v"
    rss0=$(mem_kb VmRSS)
    for t in $TRAFFIC; do
      if [ "$v" = stunnel ] && [ "$t" != tcp ]; then
        log "stunnel: $t skipped (stunnel carries TCP only)"
      elif [ "$t" = tcp ]; then
        for n in $STREAMS; do measure "$v" "$n" "$rep"; done
      elif [ "$t" = ping ]; then
        measure_ping "$v" "$rep"
      else
        measure_udp "$v" "${t#udp}" "$rep"
      fi
    done
    # The tunnel processes' memory: VmRSS once up, and VmRSS and VmHWM (the peak) after the
    # tests, in MB, the mean of the variant's processes (for tunneld: of its two daemons).
    [ ${#PIDS[@]} -eq 0 ] || echo "$v rss $rep $(awk -v a="$rss0" -v b="$(mem_kb VmRSS)" -v c="$(mem_kb VmHWM)" 'BEGIN { printf "%.1f %.1f %.1f", a / 1024, b / 1024, c / 1024 }')" >>"$OUT"
    down
  done
done

python3 - "$OUT" "${MISSING[*]:-}" <<'EOF'
import statistics, sys
rows = [l.split() for l in open(sys.argv[1]) if l.strip() and not l.startswith("#")]
order, data = [], {}
for v, n, rep, a, b, c in rows:
    if v not in order:
        order.append(v)
    data.setdefault((v, n), []).append((float(a), float(b), float(c)))
streams = sorted({n for _, n in data if n.isdigit()}, key=int)
udps = sorted({n for _, n in data if n.startswith("udp") and n[3:].isdigit()}, key=lambda n: int(n[3:]))
med = lambda xs, k: statistics.median(x[k] for x in xs)
print(open(sys.argv[1]).readline().strip())
if streams:
    hdr = "| variant | " + " | ".join(f"{n} stream{'s' if n != '1' else ''}: Mbit/s | CPU-s/GB" for n in streams) + " |"
    print(hdr)
    print("|---" * (1 + 2 * len(streams)) + "|")
    for v in order:
        cells = []
        for n in streams:
            xs = data.get((v, n), [])
            if not xs:
                cells += ["-", "-"]
                continue
            cells.append(f"{med(xs, 0):.0f}")
            cells.append("-" if v == "veth" else f"{med(xs, 1):.2f}")
        print(f"| {v} | " + " | ".join(cells) + " |")
for u in udps:
    print()
    print(f"| variant | UDP {u[3:]} B: received kpps | tunnel CPU µs/packet | loss % |")
    print("|---|---|---|---|")
    for v in order:
        xs = data.get((v, u), [])
        if not xs:
            continue
        cpu = "-" if v == "veth" else f"{med(xs, 1):.2f}"
        print(f"| {v} | {med(xs, 0):.1f} | {cpu} | {med(xs, 2):.1f} |")
for kind, what in [("ping", "light load")] + [(u + "ping", f"under UDP {u[3:]} B at full rate") for u in udps]:
    if not any(n == kind for _, n in data):
        continue
    print()
    print(f"| variant | ping, {what}: median RTT µs | 99th percentile µs | loss % |")
    print("|---|---|---|---|")
    for v in order:
        xs = data.get((v, kind), [])
        if xs:
            print(f"| {v} | {med(xs, 0):.0f} | {med(xs, 1):.0f} | {med(xs, 2):.1f} |")
if any(n == "rss" for _, n in data):
    print()
    print("| variant | memory per tunnel process: VmRSS once up, MB | VmRSS after the tests | peak (VmHWM) |")
    print("|---|---|---|---|")
    for v in order:
        xs = data.get((v, "rss"), [])
        if xs:
            print(f"| {v} | {med(xs, 0):.1f} | {med(xs, 1):.1f} | {med(xs, 2):.1f} |")
if sys.argv[2]:
    print(f"missing (not installed): {sys.argv[2]}")
EOF
