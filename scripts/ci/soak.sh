#!/usr/bin/env bash
# The soak test (issue #22), as root: two tunnelds in network namespaces carry one long
# iperf3 TCP transfer (A -> B, SOAK_RATE, default 50 Mbit/s) for SOAK_SECONDS (default 600;
# scripts/test.sh runs 120) while, all bounded in rate and time:
#
#   - both directions are rekeyed over the control sockets every SOAK_REKEY seconds (default
#     3; `ipsec sa update`, new SPI and key, the receiving side first: make before break);
#   - every SOAK_RELOAD seconds (default 7) both config files are rewritten (the current
#     generation's SAs, as a key manager keeps them, plus a dummy SA added one time and
#     removed the next) and both daemons get SIGHUP; the next rekey waits for the reload;
#   - A's namespace floods B's underlay address with garbage ESP/AH/IPComp (unknown SPIs;
#     crates/tunnel/examples/flood.rs) at SOAK_FLOOD_RATE packets a second (default 2000);
#   - control clients come and go on both sockets: `ipsec show`, `ipsec sa list`, monitors
#     that connect and leave with no event between, and a client that trickles a request a
#     byte at a time; one monitor per host stays for the whole run.
#
# It fails unless: iperf3 completes; no packet is lost to a rekey (every packet A sealed on
# any generation of esp-ab B opened, and back, except what the kernel dropped on the raw
# socket queues, reported; no SA, live or retired, dropped a packet as no_sa, bad_icv, replay
# or expired); each staying monitor saw every sa.replaced (2 per rekey) and every reload
# succeeded; VmRSS grows less than SOAK_RSS_KB (default 4096 kB), the open file descriptors
# by at most 2 and the stats file by at most 1 KB between the first sample (after the first
# rekey and reload) and the last (after the churn stops) on both daemons; both stop cleanly.
# It prints the figures: RSS, fds and stats size at start and end, the transfer, rekeys,
# reloads, clients, flood packets, losses.
#
#   sudo bash scripts/ci/soak.sh                    # 10 minutes
#   sudo SOAK_SECONDS=120 bash scripts/ci/soak.sh   # the CI pass
#   sudo bash scripts/ci/soak.sh --if-possible      # exit 0 (saying why) without root/netns
set -euo pipefail
cd "$(dirname "$0")/../.."
START=$SECONDS
NETNS_TAG=soak
. scripts/lib/netns.sh
parse_stages "" "$@"
need_netns "network namespaces, TUN devices, raw sockets"
pkgs=()
command -v iperf3 >/dev/null || pkgs+=(iperf3)
command -v python3 >/dev/null || pkgs+=(python3)
[ ${#pkgs[@]} -eq 0 ] || apt_install "${pkgs[@]}"

DUR=${SOAK_SECONDS:-600}
REKEY=${SOAK_REKEY:-3}
RELOAD=${SOAK_RELOAD:-7}
RATE=${SOAK_RATE:-50M}
FLOOD_RATE=${SOAK_FLOOD_RATE:-2000}
RSS_KB=${SOAK_RSS_KB:-4096}
[ "$DUR" -ge 30 ] || fail "SOAK_SECONDS must be at least 30"

locate_tunneld --bin ipsec
CTL=${IPSEC_BIN:-$(dirname "$BIN")/ipsec}
[ -x "$CTL" ] || fail "no ipsec binary at $CTL (set IPSEC_BIN)"
if [ -z "${FLOOD_BIN:-}" ]; then
  cargo build --release --locked --quiet -p ipsec-tunnel --example flood
  FLOOD_BIN=$(release_dir)/examples/flood
fi
[ -x "$FLOOD_BIN" ] || fail "no flood sender at $FLOOD_BIN"
HELPER="python3 $PWD/scripts/lib/netns_helper.py"

ID=$$
NSA=rbs-a-$ID
NSB=rbs-b-$ID
VA=rbsva$ID
VB=rbsvb$ID
A4=10.99.0.1
B4=10.99.0.2
WORK=$(mktemp -d /tmp/soak.XXXXXX)
trap 'cleanup_all $? 20' EXIT
trap 'fail "interrupted"' INT TERM
netns_pair "$NSA" "$NSB" "$VA" "$VB" $A4/24 $B4/24

# The generations' SPECs (AES-GCM-128, keys derived from the generation: test keys, printed
# into the logs on purpose), computed at once: python3 per rekey would slow the switches.
NG=$((DUR / REKEY + 2))
python3 - "$NG" "$A4" "$B4" >"$WORK/specs" <<'PY'
import sys
n, a, b = int(sys.argv[1]), sys.argv[2], sys.argv[3]
def key(seed): return "0x" + bytes((seed * 37 + i * 11 + 5) % 256 for i in range(20)).hex()
for g in range(n + 1):
    print(f"proto esp spi {0x10000 + g:#x} mode tunnel src {a} dst {b} aead rfc4106(gcm(aes)) {key(g)} 128",
          f"proto esp spi {0x20000 + g:#x} mode tunnel src {b} dst {a} aead rfc4106(gcm(aes)) {key(g + 5000)} 128", sep="\t")
PY
SPEC_AB=() SPEC_BA=()
while IFS=$'\t' read -r ab ba; do
  SPEC_AB+=("$ab")
  SPEC_BA+=("$ba")
done <"$WORK/specs"

# write_config HOST GEN RELOADS: HOST's (a or b) config file with generation GEN's SAs and,
# on odd RELOADS, a dummy SA (no policy) with an SPI of its own.
write_config() {
  local h=$1 g=$2 r=$3 local peer out in
  if [ "$h" = a ]; then local=$A4 peer=$B4 out=esp-ab in=esp-ba; else local=$B4 peer=$A4 out=esp-ba in=esp-ab; fi
  {
    printf '[tunnel]\ntun = "ipsec0"\nlocal = "%s"\npeer = "%s"\n\n' "$local" "$peer"
    printf '[[sa]]\nname = "esp-ab"\nxfrm = "%s"\n\n' "${SPEC_AB[g]}"
    printf '[[sa]]\nname = "esp-ba"\nxfrm = "%s"\n\n' "${SPEC_BA[g]}"
    if [ $((r % 2)) -eq 1 ]; then
      printf '[[sa]]\nname = "dummy"\nxfrm = "proto esp spi %#x mode tunnel src %s dst %s aead rfc4106(gcm(aes)) 0x%040x 128"\n\n' \
        $((0x30000 + r)) "$A4" "$B4" "$r"
    fi
    printf '[[policy]]\ndir = "out"\nsrc = "10.100.0.0/24"\ndst = "10.100.0.0/24"\naction = "protect"\nbundle = ["%s"]\n\n' "$out"
    printf '[[policy]]\ndir = "in"\nsrc = "10.100.0.0/24"\ndst = "10.100.0.0/24"\naction = "protect"\nbundle = ["%s"]\n' "$in"
  } >"$WORK/$h.toml.new"
  mv "$WORK/$h.toml.new" "$WORK/$h.toml"
}
write_config a 0 0
write_config b 0 0
SOCK_A=$WORK/a.sock
SOCK_B=$WORK/b.sock
ip netns exec "$NSA" "$BIN" --config "$WORK/a.toml" --stats "$WORK/a.json" --control "$SOCK_A" 2>"$WORK/a.log" &
DA=$!
BG+=("$DA")
ip netns exec "$NSB" "$BIN" --config "$WORK/b.toml" --stats "$WORK/b.json" --control "$SOCK_B" 2>"$WORK/b.log" &
DB=$!
BG+=("$DB")
wait_for 10 "tunneld in $NSA to write its stats" test -s "$WORK/a.json"
wait_for 10 "tunneld in $NSB to write its stats" test -s "$WORK/b.json"
wait_for 5 "the control sockets" test -S "$SOCK_A" -a -S "$SOCK_B"
ip -n "$NSA" addr add 10.100.0.1/24 dev ipsec0
ip -n "$NSB" addr add 10.100.0.2/24 dev ipsec0
ip netns exec "$NSA" ping -q -c 3 -i 0.2 -W 1 10.100.0.2 >/dev/null || fail "no ping through the tunnel"

"$CTL" monitor --json --control "$SOCK_A" >"$WORK/mon-a.jsonl" 2>"$WORK/mon-a.log" &
MON_A=$!
BG+=("$MON_A")
"$CTL" monitor --json --control "$SOCK_B" >"$WORK/mon-b.jsonl" 2>"$WORK/mon-b.log" &
MON_B=$!
BG+=("$MON_B")

ctl() { # SOCKET ARGS...: one `ipsec` control command; fails the test if it fails
  local s=$1
  shift
  "$CTL" "$1" "$2" --control "$s" "${@:3}" >>"$WORK/ctl.log" 2>&1 ||
    fail "ipsec $1 $2 --control $s: $(tail -n 1 "$WORK/ctl.log")"
}
REKEYS=0
RELOADS=0
GEN=0
rekey() {
  GEN=$((GEN + 1))
  ctl "$SOCK_B" sa update esp-ab ${SPEC_AB[GEN]}
  ctl "$SOCK_A" sa update esp-ba ${SPEC_BA[GEN]}
  ctl "$SOCK_A" sa update esp-ab ${SPEC_AB[GEN]}
  ctl "$SOCK_B" sa update esp-ba ${SPEC_BA[GEN]}
  REKEYS=$((REKEYS + 1))
}
reloads_logged() { grep -c 'reload of ' "$1" || true; }
reload_seen() { [ "$(reloads_logged "$WORK/$1.log")" -gt "$2" ]; }
reload() {
  RELOADS=$((RELOADS + 1))
  write_config a "$GEN" "$RELOADS"
  write_config b "$GEN" "$RELOADS"
  local na nb
  na=$(reloads_logged "$WORK/a.log")
  nb=$(reloads_logged "$WORK/b.log")
  kill -HUP "$DA" "$DB"
  wait_for 10 "reload $RELOADS on A" reload_seen a "$na"
  wait_for 10 "reload $RELOADS on B" reload_seen b "$nb"
  if grep -q 'reload of .* failed' "$WORK/a.log" "$WORK/b.log"; then
    fail "a reload failed: $(grep -h 'reload of .* failed' "$WORK/a.log" "$WORK/b.log" | head -1)"
  fi
}

# sample HOST PID: "RSS_KB FDS STATS_BYTES"
sample() {
  echo "$(awk '/^VmRSS:/ { print $2 }' "/proc/$2/status") $(find "/proc/$2/fd" -mindepth 1 -maxdepth 1 | wc -l) $(stat -c %s "$WORK/$1.json")"
}

ip netns exec "$NSB" timeout $((DUR + 60)) iperf3 -s -1 -B 10.100.0.2 -p 5203 >"$WORK/iperf-server.log" 2>&1 &
SRV=$!
BG+=("$SRV")
wait_tcp_listen 10 "the iperf3 server" "$NSB" 5203
timeout $((DUR + 60)) ip netns exec "$NSA" iperf3 -c 10.100.0.2 -p 5203 -t "$DUR" -b "$RATE" -J \
  >"$WORK/iperf.json" 2>&1 &
CLI=$!
BG+=("$CLI")
T0=$SECONDS
END=$((T0 + DUR))

# Warm-up: one rekey and one reload, then the first sample.
sleep 2
rekey
reload
sleep 1
S0_A=$(sample a "$DA")
S0_B=$(sample b "$DB")
RAW0_A=$(ip netns exec "$NSA" $HELPER rawdrops)
RAW0_B=$(ip netns exec "$NSB" $HELPER rawdrops)
log "first sample (RSS kB, fds, stats bytes): A $S0_A, B $S0_B"

# The flood, bounded by count and time.
FLOOD_SECS=$((END - SECONDS - 5))
ip netns exec "$NSA" "$FLOOD_BIN" --src $A4 --dst $B4 --count $((FLOOD_RATE * FLOOD_SECS)) --secs "$FLOOD_SECS" \
  --rate "$FLOOD_RATE" --esp-spi 0x7fff0001 --ah-spi 0x7fff0002 --cpi 0x7ff0 >"$WORK/flood.json" 2>"$WORK/flood.log" &
FLOOD=$!
BG+=("$FLOOD")

# Control clients coming and going until the churn deadline; counts in churn.count.
CHURN_END=$((END - 4))
churn() {
  local n=0 s
  while [ $SECONDS -lt $CHURN_END ]; do
    for s in "$SOCK_A" "$SOCK_B"; do
      "$CTL" show --control "$s" >/dev/null 2>>"$WORK/churn.log" || echo "show failed on $s" >>"$WORK/churn-fail.log"
      "$CTL" sa list --control "$s" >/dev/null 2>>"$WORK/churn.log" || echo "sa list failed on $s" >>"$WORK/churn-fail.log"
      # A monitor that leaves with no event between (issue #22 defect 2).
      timeout 0.3 "$CTL" monitor --control "$s" >/dev/null 2>&1 || true
      n=$((n + 3))
    done
    if [ $((n % 30)) -eq 0 ]; then
      # A client trickling a request a byte every 0.5 s (issue #22 defect 1); cut off by
      # tunneld after 2 s; bounded here at 4 s.
      timeout 4 python3 - "$SOCK_A" >>"$WORK/churn.log" 2>&1 <<'PY' || true
import socket, sys, time
s = socket.socket(socket.AF_UNIX); s.connect(sys.argv[1]); s.sendall(b'{"v":1,"op":"sa.li')
try:
    for _ in range(8):
        time.sleep(0.5); s.sendall(b" ")
except OSError:
    pass
PY
      n=$((n + 1))
    fi
    echo "$n" >"$WORK/churn.count"
    sleep 0.2
  done
}
churn &
CHURN=$!
BG+=("$CHURN")

next_rekey=$((SECONDS + REKEY))
next_reload=$((SECONDS + RELOAD))
while [ $SECONDS -lt $((END - 3)) ]; do
  kill -0 "$DA" 2>/dev/null || fail "tunneld A died"
  kill -0 "$DB" 2>/dev/null || fail "tunneld B died"
  if [ $SECONDS -ge $next_rekey ]; then
    rekey
    next_rekey=$((SECONDS + REKEY))
  fi
  if [ $SECONDS -ge $next_reload ]; then
    reload
    next_reload=$((SECONDS + RELOAD))
  fi
  sleep 0.2
done
wait "$CHURN" || true
rc=0
wait "$CLI" || rc=$?
wait "$SRV" || true
[ $rc -eq 0 ] || fail "iperf3 failed: $(grep -m1 '"error"' "$WORK/iperf.json" || tail -n 3 "$WORK/iperf.json")"
wait "$FLOOD" || fail "the flood sender failed: $(tail -n 2 "$WORK/flood.log")"
# Every client gone (CLIENT_IDLE is 2 s); the last sample.
sleep 3
S1_A=$(sample a "$DA")
S1_B=$(sample b "$DB")
RAW1_A=$(ip netns exec "$NSA" $HELPER rawdrops)
RAW1_B=$(ip netns exec "$NSB" $HELPER rawdrops)
log "last sample (RSS kB, fds, stats bytes): A $S1_A, B $S1_B"
cp "$WORK/a.json" "$WORK/a-running.json"
kill -TERM "$MON_A" "$MON_B" 2>/dev/null || true
stop_pid "$DA" "tunneld A"
stop_pid "$DB" "tunneld B"
for h in a b; do
  w=$(grep -E ' (WARN|ERROR) ' "$WORK/$h.log" | grep -v 'control socket: .* clients connected' || true)
  [ -z "$w" ] || fail "tunneld $h logged warnings: $(echo "$w" | head -3)"
  grep -q 'tunneld: stopped' "$WORK/$h.log" || fail "tunneld $h did not log its clean stop"
done
[ ! -s "$WORK/churn-fail.log" ] || fail "control clients failed: $(head -3 "$WORK/churn-fail.log")"

python3 - "$WORK" "$REKEYS" "$RELOADS" "$(cat "$WORK/churn.count" 2>/dev/null || echo 0)" \
  "$S0_A" "$S1_A" "$S0_B" "$S1_B" "$((RAW1_A - RAW0_A))" "$((RAW1_B - RAW0_B))" "$RSS_KB" "$DUR" <<'PY' || fail "soak: see above"
import json, sys
work, rekeys, reloads, clients = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
s0a, s1a, s0b, s1b = ([int(x) for x in v.split()] for v in sys.argv[5:9])
raw_a, raw_b, rss_kb, dur = (int(x) for x in sys.argv[9:13])
A, B = (json.load(open(f"{work}/{h}.json")) for h in "ab")
I = json.load(open(f"{work}/iperf.json"))
flood = json.loads(open(f"{work}/flood.json").read().strip().splitlines()[-1])
mons = [[json.loads(l) for l in open(f"{work}/mon-{h}.jsonl") if l.strip()] for h in "ab"]
bad = []
def tot(s, name, d):
    return sum(x[d]["packets"] for x in s["engine"]["sas"] if x["name"] == name) + s["engine"]["retired"][d]["packets"]
def sa_drops(s, d, k):
    return sum(x[d]["drops"][k] for x in s["engine"]["sas"]) + s["engine"]["retired"][d]["drops"][k]
for h, s in (("A", A), ("B", B)):
    for d in ("inbound", "outbound"):
        for k in ("no_sa", "bad_icv", "replay", "expired"):
            if n := sa_drops(s, d, k):
                bad.append(f"{h}: {n} {d} packets dropped by an SA as {k}")
    if s["daemon"]["underlay_send_errors"]:
        bad.append(f"{h}: {s['daemon']['underlay_send_errors']} underlay send errors")
    if len(s["engine"]["sas"]) > 3:
        bad.append(f"{h}: {len(s['engine']['sas'])} SAs in the SAD at the end (retired ones not freed?)")
lost_ab = tot(A, "esp-ab", "outbound") - tot(B, "esp-ab", "inbound") - raw_b
lost_ba = tot(B, "esp-ba", "outbound") - tot(A, "esp-ba", "inbound") - raw_a
if lost_ab or lost_ba:
    bad.append(f"sealed but not opened (beyond the kernel's raw socket drops): {lost_ab} A->B, {lost_ba} B->A")
for h, evs in (("A", mons[0]), ("B", mons[1])):
    rep = sum(1 for e in evs if e.get("event") == "sa.replaced")
    if rep != 2 * rekeys:
        bad.append(f"monitor {h}: {rep} sa.replaced events, expected {2 * rekeys}")
    rel = sum(1 for e in evs if e.get("event") == "config.reloaded")
    if rel != reloads:
        bad.append(f"monitor {h}: {rel} config.reloaded events, expected {reloads}")
for h, (r0, f0, z0), (r1, f1, z1) in (("A", s0a, s1a), ("B", s0b, s1b)):
    if r1 - r0 > rss_kb:
        bad.append(f"{h}: VmRSS grew {r1 - r0} kB (limit {rss_kb})")
    if f1 - f0 > 2:
        bad.append(f"{h}: open file descriptors grew from {f0} to {f1}")
    if z1 - z0 > 1024:
        bad.append(f"{h}: the stats file grew from {z0} to {z1} bytes")
end = I["end"]
got = end["sum_received"]["bytes"]
if got < 1_000_000:
    bad.append(f"iperf3 moved only {got} bytes")
print(f"soak: {dur} s: iperf3 {got / 1e6:.0f} MB ({end['sum_received']['bits_per_second'] / 1e6:.1f} Mbit/s, "
      f"{end['sum_sent'].get('retransmits', 0)} retransmits); {rekeys} rekeys of both directions, {reloads} SIGHUP reloads, "
      f"~{clients} control clients, {flood['sent']} garbage packets flooded")
print(f"soak: SAs retired and freed: A {A['engine']['retired']['sas']}, B {B['engine']['retired']['sas']}; SAs left: "
      f"A {len(A['engine']['sas'])}, B {len(B['engine']['sas'])}; B's engine-level no_sa (the flood): {B['engine']['inbound_drops']['no_sa']}")
print(f"soak: packets sealed but not opened: {lost_ab} A->B, {lost_ba} B->A; kernel raw socket queue drops: A {raw_a}, B {raw_b}")
for h, (r0, f0, z0), (r1, f1, z1) in (("A", s0a, s1a), ("B", s0b, s1b)):
    print(f"soak: {h}: VmRSS {r0} -> {r1} kB ({r1 - r0:+d}), fds {f0} -> {f1}, stats file {z0} -> {z1} bytes")
if bad:
    print("FAILED:\n  " + "\n  ".join(bad), file=sys.stderr)
    sys.exit(1)
PY
log "passed in $((SECONDS - START)) s"
