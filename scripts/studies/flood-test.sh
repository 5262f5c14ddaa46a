#!/usr/bin/env bash
# The flood test (issue #13), as root: while a TCP transfer of a known file (FLOOD_MB, default
# 50 MB of random bytes) runs through tunneld from A to B, A's namespace floods B's underlay
# address with garbage and replayed datagrams (crates/tunnel/examples/flood.rs: sendmmsg on
# a raw socket), in two phases:
#
#   raw  B runs examples/tunnel/esp-ah-b.toml plus an IPComp SA and an inbound policy that
#        uses it, so it reads raw IP protocols 50, 51 and 108; FLOOD_RAW (default 600000)
#        packets: ESP with unknown SPIs, ESP on the valid SPI with a bad ICV, truncated ESP, AH
#        with unknown SPIs and with the valid SPI and a bad ICV, IPComp with unknown CPIs and
#        with the valid CPI and garbage to inflate, and captured valid packets replayed
#   udp  B runs examples/tunnel/udp-b.toml (ESP in UDP, port 4500); FLOOD_UDP (default
#        400000) datagrams: ESP with unknown SPIs, with the valid SPI and a bad ICV,
#        NAT-keepalives, non-ESP (IKE), runts, and captured ESP-in-UDP datagrams replayed
#
# Each phase first moves the same file without a flood (the baseline, which also warms the
# daemon's buffers), then with it. Checks, per phase: the file arrives byte-identical (sha256);
# B's tunneld's VmRSS grows less than RSS_LIMIT_KB (default 2048) from before the flood to
# after it; every garbage packet is counted by B under a drop reason (engine drops by SA and
# reason, the daemon's udp_* counters), except those the kernel dropped before tunneld saw
# them (B's raw/UDP socket queue drops from /proc/net/raw and /proc/net/udp, A's veth tx
# drops), which are reported: sent - kernel drops <= counted <= sent; the flood never moves
# B's learned ESP-in-UDP endpoint; both daemons stop cleanly. Reported: CPU of B's tunneld
# per garbage packet ((utime + stime with the flood - without it) / packets sent) and the
# transfer's duration with and without the flood. Bounded: every wait has a deadline, the
# flood at most FLOOD_SECS (default 15) seconds per phase; about 40 s in all.
#
#   sudo bash scripts/studies/flood-test.sh           # builds tunneld and the flood sender (release)
#   TUNNELD_BIN=... FLOOD_BIN=... sudo -E bash scripts/studies/flood-test.sh
set -euo pipefail
cd "$(dirname "$0")/../.."
START=$SECONDS
NETNS_TAG=flood-test
. scripts/lib/netns.sh
[ "$(id -u)" -eq 0 ] || fail "needs root (network namespaces, TUN devices, raw sockets)"
for c in ip tshark python3; do command -v $c >/dev/null || fail "needs $c (scripts/ci/netns-test.sh installs it)"; done
locate_tunneld
if [ -z "${FLOOD_BIN:-}" ]; then
  cargo build --release --locked --quiet -p ipsec-tunnel --example flood
  FLOOD_BIN=$(release_dir)/examples/flood
fi
[ -x "$FLOOD_BIN" ] || fail "no flood sender at $FLOOD_BIN"
MB=${FLOOD_MB:-50}
RSS_LIMIT_KB=${RSS_LIMIT_KB:-2048}
HELPER="python3 $PWD/scripts/lib/netns_helper.py"

ID=$$
NSA=fl-a-$ID
NSB=fl-b-$ID
VA=flva$ID
VB=flvb$ID
A4=10.99.0.1
B4=10.99.0.2
WORK=$(mktemp -d /tmp/flood-test.XXXXXX)
trap 'cleanup_all $? 15' EXIT
trap 'fail "interrupted"' INT TERM

netns_pair "$NSA" "$NSB" "$VA" "$VB" $A4/24 $B4/24

head -c $((MB * 1024 * 1024)) /dev/urandom >"$WORK/file"
SUM=$(sha256sum "$WORK/file" | cut -d' ' -f1)

# The raw phase's configs: B also gets an IPComp SA and an inbound policy (for a prefix no
# traffic uses) with it, so it opens raw sockets for IP protocols 50, 51 and 108.
cp examples/tunnel/esp-ah-a.toml "$WORK/raw-a.toml"
{ cat examples/tunnel/esp-ah-b.toml
  cat <<'EOF'

[[sa]]
name = "comp-ab"
proto = "comp"
spi = 0x4001
comp = "deflate"

[[policy]]
name = "flood-comp-in"
dir = "in"
src = "10.101.0.0/24"
dst = "10.101.0.0/24"
action = "protect"
bundle = ["comp-ab", "esp-ab", "ah-ab"]
EOF
} >"$WORK/raw-b.toml"
cp examples/tunnel/udp-a.toml "$WORK/udp-a.toml"
cp examples/tunnel/udp-b.toml "$WORK/udp-b.toml"

DA='' DB='' P=''
start() { # PHASE
  P=$1
  start_tunneld_pair "$WORK/$P-a.toml" "$WORK/$P-b.toml" "$WORK/$P" "tunneld ($P)"
}
stop() {
  stop_pid "$DA" "tunneld ($P) in $NSA"
  stop_pid "$DB" "tunneld ($P) in $NSB"
  for h in a b; do
    grep -q 'tunneld: stopped' "$WORK/$P-$h.log" || fail "tunneld ($P, host $h) did not log its clean stop"
  done
}

rss_kb() { awk '/^VmRSS:/ { print $2 }' "/proc/$1/status"; }
# Drops the kernel counted before tunneld could read a packet: B's raw and UDP socket queues
# and A's veth (a full backlog on B's side).
kernel_drops() {
  local raw udp veth
  raw=$(ip netns exec "$NSB" awk 'NR > 1 { s += $NF } END { print s + 0 }' /proc/net/raw)
  udp=$(ip netns exec "$NSB" awk 'NR > 1 { s += $NF } END { print s + 0 }' /proc/net/udp)
  veth=$(ip -n "$NSA" -s -j link show "$VA" | python3 -c 'import json,sys; print(json.load(sys.stdin)[0]["stats64"]["tx"]["dropped"])')
  echo "$raw $udp $veth"
}

transfer() { # NAME: the file from A to B over the tunnel; prints "SECONDS"
  local name=$1 rc=0
  ip netns exec "$NSB" timeout 60 python3 - "$WORK/$name.recv" <<'EOF' &
import hashlib, socket, sys
s = socket.socket()
s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind(("10.100.0.2", 5301))
s.listen(1)
s.settimeout(50)
c, _ = s.accept()
c.settimeout(50)
h, n = hashlib.sha256(), 0
while True:
    d = c.recv(1 << 16)
    if not d:
        break
    h.update(d)
    n += len(d)
open(sys.argv[1], "w").write(f"{n} {h.hexdigest()}\n")
EOF
  local srv=$!
  BG+=("$srv")
  wait_tcp_listen 10 "the receiver" "$NSB" 5301
  local t0=$EPOCHREALTIME
  ip netns exec "$NSA" timeout 50 python3 -c '
import socket, sys
c = socket.create_connection(("10.100.0.2", 5301), timeout=50)
with open(sys.argv[1], "rb") as f:
    c.sendfile(f)
c.shutdown(socket.SHUT_WR)
c.recv(1)
' "$WORK/file" || rc=$?
  wait "$srv" || rc=$?
  [ $rc -eq 0 ] || fail "$P: the transfer ($name) failed"
  read -r n sum <"$WORK/$name.recv"
  [ "$n $sum" = "$((MB * 1024 * 1024)) $SUM" ] ||
    fail "$P: the file arrived changed ($name): $n bytes, sha256 $sum; sent $((MB * 1024 * 1024)) bytes, $SUM"
  python3 -c "print(f'{$EPOCHREALTIME - $t0:.2f}')"
}

phase() { # PHASE COUNT FLOOD_OPTIONS...
  local p=$1 count=$2
  shift 2
  start "$p"
  # Valid packets to replay: a capture of pings both ways.
  : >"$WORK/tshark.log"
  ip netns exec "$NSB" tshark -n -q -i "$VB" -f "ip proto 50 or ip proto 51 or ip proto 108 or udp port 4500" \
    -F pcap -w "$WORK/$p.pcap" -a duration:30 2>"$WORK/tshark.log" &
  local cap=$!
  BG+=("$cap")
  wait_for 15 "tshark to start capturing" grep -q "Capturing on" "$WORK/tshark.log"
  sleep 0.5
  ip netns exec "$NSA" ping -q -n -c 8 -i 0.05 -W 2 10.100.0.2 >"$WORK/ping.log" 2>&1 || fail "$p: ping through the tunnel"
  sleep 0.2
  kill -INT "$cap" 2>/dev/null || true
  wait "$cap" || true
  local t_base t_flood c0 cb c1 c2 r1 r2 k1 k2
  c0=$(cpu_ticks "$DB")
  t_base=$(transfer "$p-base")
  cb=$(cpu_ticks "$DB")
  sleep 1.2 # a fresh stats file
  cp "$WORK/$p-a.json" "$WORK/$p-a.before.json"
  cp "$WORK/$p-b.json" "$WORK/$p-b.before.json"
  r1=$(rss_kb "$DB")
  k1=$(kernel_drops)
  c1=$(cpu_ticks "$DB")
  ip netns exec "$NSA" "$FLOOD_BIN" --src $A4 --dst $B4 --count "$count" --secs "${FLOOD_SECS:-15}" \
    --replay "$WORK/$p.pcap" "$@" >"$WORK/$p-flood.out" 2>"$WORK/$p-flood.log" &
  local fl=$!
  BG+=("$fl")
  sleep 0.3
  t_flood=$(transfer "$p-flood")
  wait "$fl" || fail "$p: the flood sender failed: $(cat "$WORK/$p-flood.log")"
  sleep 0.3 # the socket queues drain
  c2=$(cpu_ticks "$DB")
  r2=$(rss_kb "$DB")
  k2=$(kernel_drops)
  sleep 1.2
  cp "$WORK/$p-a.json" "$WORK/$p-a.after.json"
  cp "$WORK/$p-b.json" "$WORK/$p-b.after.json"
  # The base transfer's CPU (cb - c0) is what moving the file costs without the flood.
  python3 - "$WORK" "$p" "$(cat "$WORK/$p-flood.out")" "$c0 $cb $c1 $c2" "$r1 $r2" "$k1" "$k2" \
    "$t_base $t_flood" "$RSS_LIMIT_KB" "$(getconf CLK_TCK)" <<'EOF' || fail "$p: see above"
import json, sys
work, p, flood, cpu, rss, k1, k2, times, limit, hz = sys.argv[1:]
flood = json.loads(flood)
c0, cb, c1, c2 = map(int, cpu.split()); r1, r2 = map(int, rss.split())
k1 = list(map(int, k1.split())); k2 = list(map(int, k2.split()))
tb, tf = map(float, times.split())
def load(n):
    return json.load(open(f"{work}/{p}-{n}.json"))
def counted(s):
    e = s["engine"]
    n = sum(e["inbound_drops"].values())
    n += sum(sum(sa["inbound"]["drops"].values()) for sa in e["sas"])
    n += sum(e["retired"]["inbound"]["drops"].values())
    d = s["daemon"]
    return n + d["udp_non_esp"] + d["udp_runts"] + d["udp_keepalives_rx"], d
b0, b1, a0, a1 = load("b.before"), load("b.after"), load("a.before"), load("a.after")
n0, d0 = counted(b0); n1, d1 = counted(b1)
legit_keepalives = a1["daemon"]["udp_keepalives_tx"] - a0["daemon"]["udp_keepalives_tx"]
got = n1 - n0 - legit_keepalives
sent = flood["sent"]
kd = [y - x for x, y in zip(k1, k2)]
# AF_PACKET ring overflows (raw ESP/AH/IPComp received through rings), counted by tunneld.
kd.append(b1["daemon"].get("underlay_ring_drops", 0) - b0["daemon"].get("underlay_ring_drops", 0))
kernel = sum(kd)
hz = int(hz)
base_s, flood_s = (cb - c0) / hz, (c2 - c1) / hz
per = (flood_s - base_s) / sent * 1e6 if sent else 0
reasons = {}
for s0, s1 in ((b0, b1),):
    for r, v in s1["engine"]["inbound_drops"].items():
        reasons[f"engine.{r}"] = v - s0["engine"]["inbound_drops"].get(r, 0)
    old = {sa["name"]: sa for sa in s0["engine"]["sas"]}
    for sa in s1["engine"]["sas"]:
        for r, v in sa["inbound"]["drops"].items():
            reasons[f"{sa['name']}.{r}"] = v - old.get(sa["name"], {"inbound": {"drops": {}}})["inbound"]["drops"].get(r, 0)
    for r in ("udp_non_esp", "udp_runts", "udp_keepalives_rx"):
        reasons[r] = d1[r] - d0[r] - (legit_keepalives if r == "udp_keepalives_rx" else 0)
reasons = {k: v for k, v in reasons.items() if v}
print(f"flood-test: {p}: sent {sent} packets in {flood['seconds']:.1f} s ({sent / max(flood['seconds'], 1e-9) / 1e3:.0f} kpps; "
      f"{', '.join(f'{k} {v}' for k, v in flood['by_kind'].items())})")
print(f"flood-test: {p}: counted by tunneld under drop reasons: {got} ({', '.join(f'{k} {v}' for k, v in sorted(reasons.items()))})")
print(f"flood-test: {p}: dropped by the kernel before tunneld: {kernel} (raw socket queues {kd[0]}, UDP socket queue {kd[1]}, veth {kd[2]}, AF_PACKET rings {kd[3]})")
print(f"flood-test: {p}: VmRSS of B's tunneld {r1} kB before the flood, {r2} kB after ({r2 - r1:+d} kB; limit +{limit} kB)")
print(f"flood-test: {p}: CPU of B's tunneld: {base_s:.2f} s for the transfer alone, {flood_s:.2f} s with the flood: "
      f"{per:.2f} us per garbage packet; transfer {tb:.2f} s alone, {tf:.2f} s under the flood")
ok = True
if not sent - kernel <= got <= sent:
    print(f"flood-test: {p}: FAILED: {got} counted, {sent} sent, {kernel} dropped by the kernel", file=sys.stderr); ok = False
if r2 - r1 >= int(limit):
    print(f"flood-test: {p}: FAILED: VmRSS grew {r2 - r1} kB", file=sys.stderr); ok = False
if b1["daemon"]["tun_write_errors"] or b1["daemon"]["underlay_recv_errors"]:
    print(f"flood-test: {p}: FAILED: I/O errors on B: {b1['daemon']}", file=sys.stderr); ok = False
open(f"{work}/{p}.summary", "w").write(json.dumps({"sent": sent, "counted": got, "kernel_drops": kernel,
    "rss_kb": [r1, r2], "us_per_packet": per, "transfer_s": [tb, tf]}) + "\n")
sys.exit(0 if ok else 1)
EOF
  if grep -E 'endpoint is now' "$WORK/$p-b.log" | grep -v "is now $A4:4500\$" >/dev/null; then
    fail "$p: the flood moved B's ESP-in-UDP endpoint: $(grep 'endpoint is now' "$WORK/$p-b.log")"
  fi
  stop
}

phase raw "${FLOOD_RAW:-600000}" --mode raw --esp-spi 0x3001 --ah-spi 0x5001 --cpi 0x4001
phase udp "${FLOOD_UDP:-400000}" --mode udp --esp-spi 0x3001
python3 - "$WORK" <<'EOF' || fail "too few packets"
import json, os, sys
r, u = (json.load(open(f"{sys.argv[1]}/{p}.summary")) for p in ("raw", "udp"))
print(f"flood-test: in all {r['sent'] + u['sent']} garbage and replayed packets, "
      f"{r['counted'] + u['counted']} counted by tunneld, {r['kernel_drops'] + u['kernel_drops']} dropped by the kernel")
if r["sent"] + u["sent"] < int(os.environ.get("FLOOD_MIN", "1000000")):
    sys.exit("flood-test: fewer than FLOOD_MIN (default 1 M) packets sent: raise FLOOD_SECS or check the sender")
EOF
log "all checks passed ($((SECONDS - START)) s)"
