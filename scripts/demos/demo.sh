#!/usr/bin/env bash
# The first command: shows the product. As root (with /dev/net/tun and `ip netns`), it builds
# tunneld, creates two network namespaces joined by a veth pair (hosts A 10.99.0.1 and B
# 10.99.0.2), starts tunneld in each with examples/tunnel/udp-{a,b}.toml (ESP in UDP on port
# 4500, AES-128-GCM, tunnel mode, inner 10.100.0.0/24), pings through the tunnel, runs iperf3
# for a few seconds, prints `ipsec show` from both ends, stops everything and deletes the
# namespaces. Every step is echoed. Installs iproute2, iputils-ping and iperf3 if missing.
# About a minute on a fresh build.
#
# Without root (or where namespaces or TUN devices are refused) it says why and runs the
# offline demo instead (scripts/demos/demo-offline.sh: seal and open a capture, two hosts' engines
# from config files, overhead on a 1500-byte link).
#
#   sudo bash scripts/demos/demo.sh            # DEMO_SECONDS=5 (iperf3 run), OUT=out/demo-live
set -euo pipefail
cd "$(dirname "$0")/../.."
command -v cargo >/dev/null || { echo "needs a Rust toolchain (rustup)"; exit 2; }

why_not=""
if [ "$(id -u)" != 0 ]; then
  why_not="not root"
elif [ ! -c /dev/net/tun ]; then
  why_not="no /dev/net/tun"
elif ! ip netns add demo-probe 2>/dev/null; then
  why_not="\`ip netns\` refused"
else
  ip netns del demo-probe
fi
if [ -n "$why_not" ]; then
  echo "demo: a live tunnel needs root, /dev/net/tun and network namespaces ($why_not):"
  echo "demo: running the offline demo (scripts/demos/demo-offline.sh) instead"
  exec bash scripts/demos/demo-offline.sh
fi

NETNS_TAG=demo
. scripts/lib/netns.sh
NSA=demo-a NSB=demo-b
SECS=${DEMO_SECONDS:-5}
OUT=${OUT:-out/demo-live}
mkdir -p "$OUT"
WORK=$(mktemp -d /tmp/ipsec-demo.XXXXXX)
trap 'cleanup_all $? 20' EXIT
trap 'fail "interrupted"' INT TERM
for ns in "$NSA" "$NSB"; do ip netns del "$ns" 2>/dev/null || true; done
command -v iperf3 >/dev/null && command -v ping >/dev/null || apt_install iproute2 iputils-ping iperf3

# step DESCRIPTION: a heading; run CMD...: echoes the command, then runs it.
step() { printf '\n\033[1m== %s\033[0m\n' "$*"; }
run() {
  printf '+ %s\n' "$*"
  "$@"
}

step "build tunneld and ipsec (release)"
run cargo build --release --quiet --bin tunneld --bin ipsec
BIN=$PWD/target/release/tunneld CTL=$PWD/target/release/ipsec

step "two hosts: namespaces $NSA and $NSB, a veth pair as the link between them"
printf '+ ip netns add %s; ip netns add %s; ip link add veth ... (10.99.0.1/24 <-> 10.99.0.2/24)\n' "$NSA" "$NSB"
netns_pair "$NSA" "$NSB" demo-va demo-vb 10.99.0.1/24 10.99.0.2/24

step "tunneld on each host: ESP in UDP (port 4500), AES-128-GCM, inner 10.100.0.0/24"
grep -E '^(tun|local|peer|encap) |^(name|proto|spi|aead|encap) ' examples/tunnel/udp-a.toml | sed 's/key = "0x[0-9a-f]*"/key = "(example key)"/' | head -12
for h in a b; do
  ns=$NSA; [ $h = b ] && ns=$NSB
  printf '+ ip netns exec %s tunneld --config examples/tunnel/udp-%s.toml --control %s --stats %s\n' \
    "$ns" $h "$WORK/ctl-$h.sock" "$OUT/stats-$h.json"
  ip netns exec "$ns" "$BIN" --config "examples/tunnel/udp-$h.toml" --control "$WORK/ctl-$h.sock" \
    --stats "$OUT/stats-$h.json" 2>"$WORK/tunneld-$h.log" &
  BG+=($!)
  eval "D$h=\$!"
done
wait_for 10 "tunneld in $NSA" test -S "$WORK/ctl-a.sock"
wait_for 10 "tunneld in $NSB" test -S "$WORK/ctl-b.sock"
run ip -n "$NSA" addr add 10.100.0.1/24 dev ipsec0
run ip -n "$NSB" addr add 10.100.0.2/24 dev ipsec0

step "ping through the tunnel, A -> B"
run ip netns exec "$NSA" ping -c 3 -i 0.2 -W 2 10.100.0.2

step "what the link carries: UDP port 4500, ESP inside (as tshark decodes it)"
if command -v tshark >/dev/null; then
  printf '+ ip netns exec %s tshark -i demo-vb -c 2 -f "udp port 4500"\n' "$NSB"
  ip netns exec "$NSB" timeout 10 tshark -l -i demo-vb -c 2 -f 'udp port 4500' \
    >"$WORK/tshark.out" 2>"$WORK/tshark.log" &
  TS=$!
  wait_for 8 "tshark to start capturing" grep -q Capturing "$WORK/tshark.log"
  ip netns exec "$NSA" ping -c 2 -i 0.2 -W 2 10.100.0.2 >/dev/null
  wait "$TS" || true
  cat "$WORK/tshark.out"
else
  echo "(tshark not installed: skipped; bash scripts/install-test-deps.sh installs it)"
fi

step "iperf3 through the tunnel for $SECS s (TCP, B -> A)"
ip netns exec "$NSA" iperf3 -s -1 -B 10.100.0.1 >"$WORK/iperf-s.log" 2>&1 &
BG+=($!)
wait_tcp_listen 10 "iperf3 server" "$NSA" 5201
run ip netns exec "$NSB" iperf3 -c 10.100.0.1 -t "$SECS" -f m | grep -E 'sender|receiver'

step "ipsec show, host A"
run "$CTL" show --control "$WORK/ctl-a.sock"
step "ipsec show, host B"
run "$CTL" show --control "$WORK/ctl-b.sock"

step "stop both daemons (SIGTERM) and delete the namespaces"
# shellcheck disable=SC2154 # Da and Db are set by the eval above
stop_pid "$Da" "tunneld in $NSA"
# shellcheck disable=SC2154
stop_pid "$Db" "tunneld in $NSB"
echo "demo: done; the daemons' last counters are in $OUT/stats-a.json and $OUT/stats-b.json"
