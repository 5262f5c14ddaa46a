#!/usr/bin/env bash
# tunneld end to end, as root: two network namespaces joined by a veth pair (the underlay,
# 10.99.0.1/24 <-> 10.99.0.2/24), tunneld in each with a TUN device carrying 10.100.0.0/24 and
# fd00:100::/64, for three configs from examples/tunnel/:
#
#   esp       ESP tunnel, AES-CBC + HMAC-SHA-256: pings both ways over IPv4 and IPv6; tshark
#             on the veth decrypts every ESP frame with the config's keys and reports its ICV
#             good; bad packets sent into the underlay (unknown SPIs, a wrong ICV, truncated
#             ESP, a replayed captured packet) are dropped and counted under their reasons
#             and the tunnel still works; iperf3 TCP for 3 s; the two daemons' counters agree
#   comp-esp  IPComp (DEFLATE) + ESP tunnel, AES-GCM: compressible pings are compressed (and
#             counted), small ones go uncompressed, tshark decrypts; iperf3 TCP over IPv6
#   esp-ah    ESP tunnel + AH on the outer header: AH on the wire, both SAs count every packet
#   ring      raw ESP received through the AF_PACKET rings and sent through AF_PACKET (the esp, comp-esp, esp-ah and v6
#             stages use them too, by default): both daemons say they do; an ESP packet sent
#             as two IPv4 fragments is reassembled and reaches the engine exactly once (once
#             more a replay); packets longer than the rings' frames (veth and TUN MTU raised)
#             arrive through the raw sockets, each once; iperf3; what A sends bypasses
#             netfilter's OUTPUT hook (AF_PACKET, PACKET_QDISC_BYPASS); then the same with
#             --no-af-packet (the raw-socket fallback), which must not use AF_PACKET and whose
#             packets all pass OUTPUT
#   udp       ESP in UDP (RFC 3948) on port 4500, AES-GCM: pings both ways, tshark decodes
#             udp.port==4500 as ESP and checks every ICV, scapy decrypts every captured frame
#             and tunneld opens (and answers) what scapy seals as IP()/UDP()/ESP; one
#             UDP_SEGMENT send of 20 datagrams reaches the TUN device as one USO super-packet
#             and all 20 arrive at B in order; iperf3 (over UDP GSO/GRO)
#   udp-nat   the same through a third namespace doing SNAT with nftables (another address,
#             ports 20000-20999; nothing in from B's side unless it answers A): B learns A's
#             endpoint from authenticated packets, its replies reach A, A's keepalive
#             counted; iperf3 through the NAT
#   flood     scripts/studies/flood-test.sh: 1 M garbage and replayed packets during a transfer
#   rekey     make-before-break rekeys with `ipsec sa update` during a transfer; a hard
#             lifetime and the --on-event hook that replaces the SA (details at the stage)
#   v6        an IPv6-only underlay: a second veth pair with only fd00:99::1/64 <-> fd00:99::2/64,
#             raw ESP (AES-GCM, IPv6 raw sockets) and then ESP in UDP over IPv6: the TUN MTU
#             counts the IPv6 (and UDP) header, pings of both inner families (the largest
#             inner packet too), tshark checks every ESP frame's ICV, iperf3, counters agree
#   peers     host A with two peers at once over ESP in UDP: B over IPv4 (the first veth) and
#             C over IPv6 (a third namespace on a second veth of A), different inner prefixes
#             routed to each (the SPD picks the peer); pings and iperf3 to both at the same
#             time, tshark on each link checks every ESP frame's ICV and that no packet of the
#             other peer's SAs is on it; keepalives and per-peer endpoints in A's stats
#   user      the udp pair unprivileged: B with tunneld --user nobody (root opens the devices,
#             then it drops to uid 65534 with no capability), A started as nobody with no
#             capability at all on a persistent TUN device made for nobody; /proc/PID/status
#             shows uid 65534, CapEff/CapPrm 0 and NoNewPrivs 1 for both; pings, the control
#             socket (ipsec show; --control-group lets a non-root member in, nobody else),
#             --metrics (promtool checks it) and a SIGHUP reload still work, the stats are
#             written as nobody
#   nooffload the udp stage's traffic again with tunneld --no-offload (the udp stage runs
#             with TUN offloads on and checks they are), so both paths are covered; here
#             ESP in UDP is named on the SAs (`encap = { type = "espinudp", ... }`), not in
#             [tunnel]
#   nat-clients two tunneld IKE initiators behind one NAT namespace (nftables masquerade)
#             to a `remote_addrs = %any` tunneld responder: the responder pings the first
#             client after the second is up, then all ping at once, every echo answered; the
#             responder keeps one endpoint per client (issue #31)
#   ike       two tunnelds over IKEv2 with mirrored configs as in docs/ike.md (PSK,
#             aes128gcm16-prfsha256-x25519, start_action start on A), no NAT and no
#             `encap`: the child comes up and carries pings both ways; ESP in UDP goes
#             4500 -> 4500 (issue #31 defect 7: before, to the peer's port 500)
#
# Every daemon must stop cleanly on SIGTERM (exit 0) and log no warning. Installs iproute2,
# iputils-ping, iperf3 and tshark if missing. Bounded: every wait has a deadline; all stages about 200 s.
# Exits non-zero with a message naming the failed check; the logs are kept then. iperf3 is
# capped at IPERF_RATE (default 200M; 0 = unlimited) so the run is bounded in bytes too.
#
#   sudo bash scripts/ci/netns-test.sh            # builds tunneld (release) first; every stage
#   sudo bash scripts/ci/netns-test.sh v6 peers   # only the stages named, in the order above
#   TUNNELD_BIN=path/to/tunneld sudo -E bash scripts/ci/netns-test.sh
#   bash scripts/ci/netns-test.sh --if-possible   # scripts/test.sh: without root, /dev/net/tun
#                                              # or working `ip netns`, say why and exit 0
set -euo pipefail
cd "$(dirname "$0")/../.."
START=$SECONDS
NETNS_TAG=netns-test
. scripts/lib/netns.sh
. scripts/lib/tunneld-conf.sh # td_conf: the tunneld.toml writer of the ike and nat-clients stages
ALL_STAGES="esp comp-esp esp-ah ring udp udp-nat flood rekey v6 peers nooffload user nat-clients ike"
# STAGES, IF_POSSIBLE, want (RAN records the stages run) and cannot: scripts/lib/netns.sh.
parse_stages "$ALL_STAGES" "$@"

[ "$(id -u)" -eq 0 ] || cannot "needs root (network namespaces, TUN devices, raw sockets)"
[ -c /dev/net/tun ] || cannot "/dev/net/tun is missing"

# ---- what it needs ----------------------------------------------------------------------
pkgs=()
command -v ip >/dev/null || pkgs+=(iproute2)
command -v ping >/dev/null || pkgs+=(iputils-ping)
command -v iperf3 >/dev/null || pkgs+=(iperf3)
command -v tshark >/dev/null || pkgs+=(tshark)
command -v python3 >/dev/null || pkgs+=(python3)
command -v nft >/dev/null || pkgs+=(nftables)
[ ${#pkgs[@]} -eq 0 ] || apt_install "${pkgs[@]}"

PROBE=tnl-probe-$$
ip netns add "$PROBE" 2>/dev/null || cannot "\`ip netns add\` does not work here"
ip netns exec "$PROBE" true 2>/dev/null || { ip netns del "$PROBE"; cannot "\`ip netns exec\` does not work here"; }
ip netns del "$PROBE"

locate_tunneld
HELPER="python3 $PWD/scripts/lib/netns_helper.py"

# ---- namespaces -------------------------------------------------------------------------
ID=$$
NSA=tnl-a-$ID
NSB=tnl-b-$ID
VA=tnva$ID
VB=tnvb$ID
A4=10.99.0.1
B4=10.99.0.2
WORK=$(mktemp -d /tmp/netns-test.XXXXXX)
# BG (scripts/lib/netns.sh): background processes we started (daemons, tshark, iperf3 server)
trap 'cleanup_all $? 15' EXIT
trap 'fail "interrupted"' INT TERM

netns_pair "$NSA" "$NSB" "$VA" "$VB" $A4/24 $B4/24

# ---- one variant ------------------------------------------------------------------------
V='' DA='' DB='' CAP=''
CAPS=()         # tshark processes running (cap_start), stopped together by cap_stop
TUNNELD_ARGS=() # extra tunneld arguments for start
SA='' SB=''

start() { # VARIANT [CONFIG_DIR (default examples/tunnel) [b-first: B up before A starts]]
  V=$1
  local dir=${2:-examples/tunnel} order=${3:-}
  SA=$WORK/$V-a.json
  SB=$WORK/$V-b.json
  if [ "$order" != b-first ]; then
    ip netns exec "$NSA" "$BIN" --config "$dir/$V-a.toml" --stats "$SA" ${TUNNELD_ARGS[@]+"${TUNNELD_ARGS[@]}"} 2>"$WORK/$V-a.log" &
    DA=$!
    BG+=("$DA")
  fi
  ip netns exec "$NSB" "$BIN" --config "$dir/$V-b.toml" --stats "$SB" ${TUNNELD_ARGS[@]+"${TUNNELD_ARGS[@]}"} 2>"$WORK/$V-b.log" &
  DB=$!
  BG+=("$DB")
  if [ "$order" = b-first ]; then
    wait_for 10 "tunneld ($V) in $NSB to write its stats" test -s "$SB"
    ip netns exec "$NSA" "$BIN" --config "$dir/$V-a.toml" --stats "$SA" ${TUNNELD_ARGS[@]+"${TUNNELD_ARGS[@]}"} 2>"$WORK/$V-a.log" &
    DA=$!
    BG+=("$DA")
  fi
  wait_for 10 "tunneld ($V) in $NSA to write its stats" test -s "$SA"
  wait_for 10 "tunneld ($V) in $NSB to write its stats" test -s "$SB"
  ip -n "$NSA" addr add 10.100.0.1/24 dev ipsec0
  ip -n "$NSA" addr add fd00:100::1/64 dev ipsec0 nodad
  ip -n "$NSB" addr add 10.100.0.2/24 dev ipsec0
  ip -n "$NSB" addr add fd00:100::2/64 dev ipsec0 nodad
  log "$V: tunneld running in both namespaces ($(ip -n "$NSA" -o link show ipsec0 | grep -o 'mtu [0-9]*'))"
}

stop() {
  stop_pid "$DA" "tunneld ($V) in $NSA"
  stop_pid "$DB" "tunneld ($V) in $NSB"
  for h in a b; do
    if grep -E ' (WARN|ERROR) ' "$WORK/$V-$h.log" >/dev/null; then
      fail "tunneld ($V, host $h) logged warnings: $(grep -E ' (WARN|ERROR) ' "$WORK/$V-$h.log" | head -3)"
    fi
    grep -q 'tunneld: stopped' "$WORK/$V-$h.log" || fail "tunneld ($V, host $h) did not log its clean stop"
  done
}

# ping_ok NS DST COUNT [ping options]: exactly COUNT echo requests, every one answered.
ping_ok() {
  local ns=$1 dst=$2 n=$3
  shift 3
  ip netns exec "$ns" ping -q -n -c "$n" -i 0.2 -W 2 -w 10 "$@" "$dst" >"$WORK/ping.out" 2>&1 ||
    fail "$V: ping $* $dst from $ns: $(tail -n 2 "$WORK/ping.out" | head -n 1)"
  grep -q "$n packets transmitted, $n received" "$WORK/ping.out" ||
    fail "$V: ping $dst from $ns: $(grep transmitted "$WORK/ping.out")"
}

expect() { # WHAT EXPR...: over the two stats files, retried while the once-a-second stats catch up
  local what=$1
  shift
  $HELPER expect --what "$V: $what" "$SA" "$SB" "$@" || fail "$V: $what (see above)"
}

cap_start() { # FILE [INTERFACE [FILTER [NAMESPACE]]]: tshark on B's veth, IPsec protocols only by default
  local tlog=$WORK/tshark-$(basename "$1").log
  : >"$tlog"
  ip netns exec "${4:-$NSB}" tshark -n -q -i "${2:-$VB}" -f "${3:-ip proto 50 or ip proto 51 or ip proto 108}" \
    -F pcap -w "$1" -a duration:60 2>"$tlog" &
  CAP=$!
  BG+=("$CAP")
  CAPS+=("$CAP")
  wait_for 15 "tshark to start capturing" grep -q "Capturing on" "$tlog"
  # dumpcap may still be opening the interface; tshark 4.0 says when it is done.
  for _ in $(seq 30); do
    grep -q "Capture started" "$tlog" && break
    sleep 0.1
  done
  sleep 0.5
}

cap_stop() { # stops every capture cap_start started
  sleep 0.3 # the last replies
  for c in "${CAPS[@]}"; do
    kill -INT "$c" 2>/dev/null || true
    for _ in $(seq 100); do
      kill -0 "$c" 2>/dev/null || break
      sleep 0.1
    done
    kill -0 "$c" 2>/dev/null && fail "tshark did not stop"
    wait "$c" || true
  done
  CAPS=()
}

iperf() { # SERVER_ADDR SECONDS [client options]
  local addr=$1 t=$2 rc=0
  shift 2
  ip netns exec "$NSB" timeout 30 iperf3 -s -1 -B "$addr" -p 5201 >"$WORK/iperf-server.log" 2>&1 &
  local srv=$!
  BG+=("$srv")
  wait_tcp_listen 10 "the iperf3 server" "$NSB" 5201
  timeout 30 ip netns exec "$NSA" iperf3 -c "$addr" -p 5201 -t "$t" -b "${IPERF_RATE:-200M}" -J "$@" >"$WORK/iperf.json" 2>&1 || rc=$?
  wait "$srv" || true
  [ $rc -eq 0 ] || fail "$V: iperf3 to $addr failed: $(grep -m1 '"error"' "$WORK/iperf.json" || tail -n 3 "$WORK/iperf.json")"
  python3 - "$WORK/iperf.json" <<'EOF' || fail "$V: iperf3 to $addr moved too little"
import json, sys
r = json.load(open(sys.argv[1]))["end"]
got = r["sum_received"]["bytes"]
print(f"netns-test: iperf3: {got / 1e6:.1f} MB received ({r['sum_received']['bits_per_second'] / 1e6:.0f} Mbit/s), "
      f"{r['sum_sent'].get('retransmits', 0)} retransmits")
sys.exit(0 if got > 1_000_000 else 1)
EOF
}

rawdrops() { ip netns exec "$1" $HELPER rawdrops; }
# The drops the kernel counted on a namespace's UDP sockets (IPv4 and IPv6).
udpdrops() { ip netns exec "$1" awk 'FNR > 1 { s += $NF } END { print s + 0 }' /proc/net/udp /proc/net/udp6; }

# Each stage runs when it is wanted (see the header); its body is not indented, to keep the
# diffs of the stages small.

# ---- esp --------------------------------------------------------------------------------
if want esp; then
start esp
cap_start "$WORK/esp.pcap"
ping_ok "$NSA" 10.100.0.2 3
ping_ok "$NSA" fd00:100::2 3
ping_ok "$NSB" 10.100.0.1 3
ping_ok "$NSB" fd00:100::1 3
cap_stop
# 12 packets each way: 6 echo requests and 6 replies.
expect "ping packets counted by both daemons" \
  "A.sas.esp_ab.outbound.packets == 12" "B.sas.esp_ab.inbound.packets == 12" \
  "B.sas.esp_ba.outbound.packets == 12" "A.sas.esp_ba.inbound.packets == 12" \
  "A.daemon.underlay_tx_packets == B.daemon.underlay_rx_packets == 12" \
  "B.daemon.underlay_tx_packets == A.daemon.underlay_rx_packets == 12" \
  "A.daemon.tun_tx_packets == B.daemon.tun_tx_packets == 12" \
  "A.daemon.engine_in_drops == B.daemon.engine_in_drops == 0"
$HELPER esp "$WORK/esp.pcap" --frames 24 \
  --uat "$($HELPER uat examples/tunnel/esp-a.toml esp-ab)" \
  --uat "$($HELPER uat examples/tunnel/esp-a.toml esp-ba)" || fail "esp: tshark did not decrypt every frame"

# Bad input into B's underlay, from A: 5 unknown SPIs, 3 wrong ICVs on the real SPI, 2
# truncated ESP headers, and the first captured A->B packet again.
log "esp: sending bad packets: $(ip netns exec "$NSA" $HELPER inject --dst $B4 --spi 0x1001 \
  --unknown-spi 5 --bad-icv 3 --truncated 2 --replay "$WORK/esp.pcap" --replay-src $A4)"
expect "bad packets dropped and counted under their reasons" \
  "B.engine.inbound_drops.no_sa == 5" "B.engine.inbound_drops.malformed == 2" \
  "B.sas.esp_ab.inbound.drops.bad_icv == 3" "B.sas.esp_ab.inbound.drops.replay == 1" \
  "B.daemon.underlay_rx_packets == 12 + 11" "B.daemon.engine_in_drops == 11" \
  "B.sas.esp_ab.inbound.packets == 12" "B.daemon.tun_tx_packets == 12"
ping_ok "$NSA" 10.100.0.2 2
ping_ok "$NSB" fd00:100::1 2
expect "the tunnel still works after the bad packets" \
  "A.sas.esp_ab.outbound.packets == B.sas.esp_ab.inbound.packets == 16" \
  "B.sas.esp_ba.outbound.packets == A.sas.esp_ba.inbound.packets == 16"
iperf 10.100.0.2 3
# IPv6 TCP with a Destination Options header (issue #22 defect 5): with offloads on the kernel
# hands tunneld TSO6 super-packets that carry it; they were dropped as "not plain TCP" and the
# transfer stalled. 8 MB from A to B with the option set on the socket (IPV6_DSTOPTS, 59: an
# 8-byte header of PadN), bounded by socket timeouts.
GSO0=$(python3 -c 'import json, sys; print(json.load(open(sys.argv[1]))["daemon"]["tun_gso_packets"])' "$SA")
ip netns exec "$NSB" timeout 30 python3 - >"$WORK/dstopts-server.out" 2>&1 <<'PY' &
import socket
s = socket.socket(socket.AF_INET6); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind(("fd00:100::2", 5301)); s.listen(1); s.settimeout(25)
c, _ = s.accept(); c.settimeout(10); n = 0
while (b := c.recv(1 << 16)):
    n += len(b)
print(n)
PY
DSRV=$!
BG+=("$DSRV")
wait_tcp_listen 10 "the Destination Options server" "$NSB" 5301
ip netns exec "$NSA" timeout 30 python3 - <<'PY' || fail "esp: IPv6 TCP with a Destination Options header did not complete (offloads on)"
import socket
s = socket.socket(socket.AF_INET6); s.settimeout(10)
s.setsockopt(socket.IPPROTO_IPV6, 59, bytes([0, 0, 1, 4, 0, 0, 0, 0]))  # IPV6_DSTOPTS: PadN
s.connect(("fd00:100::2", 5301)); s.sendall(bytes(8 << 20)); s.shutdown(socket.SHUT_WR)
s.recv(1)
PY
wait "$DSRV" || true
[ "$(cat "$WORK/dstopts-server.out")" = $((8 << 20)) ] ||
  fail "esp: IPv6 TCP with a Destination Options header: $(cat "$WORK/dstopts-server.out") bytes of $((8 << 20)) arrived"
expect "IPv6 TCP with a Destination Options header: super-packets segmented, none refused" \
  "A.daemon.tun_offload_errors == 0" "A.daemon.tun_gso_packets > $GSO0"
log "esp: IPv6 TCP with a Destination Options header: 8 MB through TSO6 super-packets"
DROPS_A=$(rawdrops "$NSA")
DROPS_B=$(rawdrops "$NSB")
stop
# Every packet one daemon sealed and sent, the other received and opened, except those the
# kernel dropped on a full raw socket queue (reported, and accounted for exactly).
log "esp: raw socket queue drops: A $DROPS_A, B $DROPS_B"
expect "final counters agree" \
  "A.sas.esp_ab.outbound.packets - A.daemon.underlay_send_errors == B.sas.esp_ab.inbound.packets + $DROPS_B" \
  "B.sas.esp_ba.outbound.packets - B.daemon.underlay_send_errors == A.sas.esp_ba.inbound.packets + $DROPS_A" \
  "A.daemon.underlay_tx_packets == A.sas.esp_ab.outbound.packets - A.daemon.underlay_send_errors" \
  "B.daemon.tun_tx_packets + B.daemon.tun_write_errors == B.sas.esp_ab.inbound.packets" \
  "sum(B.sas.esp_ab.inbound.drops.values()) == 4" "sum(B.engine.inbound_drops.values()) == 7" \
  "sum(A.sas.esp_ba.inbound.drops.values()) == 0" "sum(A.engine.inbound_drops.values()) == 0" \
  "A.daemon.tun_read_errors + A.daemon.underlay_recv_errors + B.daemon.tun_read_errors + B.daemon.underlay_recv_errors == 0" \
  "A.sas.esp_ab.outbound.packets > 1000"
fi

# ---- comp-esp -----------------------------------------------------------------------------
if want comp-esp; then
start comp-esp
cap_start "$WORK/comp-esp.pcap"
ping_ok "$NSA" 10.100.0.2 3 -s 1000 -p 61 # compressible, both ways
ping_ok "$NSB" fd00:100::1 3 -s 1000 -p 62
ping_ok "$NSA" fd00:100::2 3 -s 16 # under IPComp's 90-byte threshold: not compressed
cap_stop
expect "IPComp compresses the large pings and passes the small ones as they are" \
  "A.sas.comp_ab.outbound.packets == A.sas.esp_ab.outbound.packets == 9" \
  "B.sas.comp_ba.outbound.packets == B.sas.esp_ba.outbound.packets == 9" \
  "A.sas.comp_ab.outbound.packets - A.sas.comp_ab.outbound.not_compressed == 6" \
  "B.sas.comp_ba.outbound.packets - B.sas.comp_ba.outbound.not_compressed == 6" \
  "A.sas.comp_ab.outbound.overhead_bytes < -3000" "B.sas.comp_ba.outbound.overhead_bytes < -3000" \
  "B.sas.comp_ab.inbound.packets == 6" "B.sas.comp_ab.inbound.not_compressed == 3" \
  "A.sas.comp_ba.inbound.packets == 6" "A.sas.comp_ba.inbound.not_compressed == 3" \
  "B.sas.esp_ab.inbound.packets == A.sas.esp_ba.inbound.packets == 9" \
  "A.daemon.engine_in_drops == B.daemon.engine_in_drops == 0"
$HELPER esp "$WORK/comp-esp.pcap" --frames 18 \
  --uat "$($HELPER uat examples/tunnel/comp-esp-a.toml esp-ab)" \
  --uat "$($HELPER uat examples/tunnel/comp-esp-a.toml esp-ba)" || fail "comp-esp: tshark did not decrypt every frame"
iperf fd00:100::2 2
DROPS_A=$(rawdrops "$NSA")
DROPS_B=$(rawdrops "$NSB")
stop
expect "final counters agree" \
  "A.sas.esp_ab.outbound.packets - A.daemon.underlay_send_errors == B.sas.esp_ab.inbound.packets + $DROPS_B" \
  "B.sas.esp_ba.outbound.packets - B.daemon.underlay_send_errors == A.sas.esp_ba.inbound.packets + $DROPS_A" \
  "B.sas.comp_ab.inbound.packets + B.sas.comp_ab.inbound.not_compressed == B.sas.esp_ab.inbound.packets" \
  "sum(B.engine.inbound_drops.values()) + sum(A.engine.inbound_drops.values()) == 0"
fi

# ---- esp-ah -------------------------------------------------------------------------------
if want esp-ah; then
start esp-ah
cap_start "$WORK/esp-ah.pcap"
ping_ok "$NSA" 10.100.0.2 3
ping_ok "$NSB" fd00:100::1 3 -s 1200
cap_stop
expect "ESP and AH count every packet" \
  "A.sas.esp_ab.outbound.packets == A.sas.ah_ab.outbound.packets == 6" \
  "B.sas.ah_ab.inbound.packets == B.sas.esp_ab.inbound.packets == 6" \
  "B.sas.esp_ba.outbound.packets == B.sas.ah_ba.outbound.packets == 6" \
  "A.sas.ah_ba.inbound.packets == A.sas.esp_ba.inbound.packets == 6" \
  "A.daemon.engine_in_drops == B.daemon.engine_in_drops == 0"
$HELPER count "$WORK/esp-ah.pcap" "ah && esp && !ipcomp" --frames 12 || fail "esp-ah: not AH around ESP on the wire"
$HELPER esp "$WORK/esp-ah.pcap" --frames 12 \
  --uat "$($HELPER uat examples/tunnel/esp-ah-a.toml esp-ab)" \
  --uat "$($HELPER uat examples/tunnel/esp-ah-a.toml esp-ba)" || fail "esp-ah: tshark did not decrypt every frame"
stop
fi

# ---- ring: the AF_PACKET receive rings and the raw-socket fallback --------------------------
# frag_replay: the first A->B ESP packet of a capture sent again from A as two IPv4 fragments.
frag_replay() { # PCAP
  ip netns exec "$NSA" python3 - "$1" "$A4" "$B4" <<'PY' || fail "$V: could not send the fragments"
import socket, struct, sys
sys.path.insert(0, "scripts/lib")
from netns_helper import pcap_ipv4
pcap, src, dst = sys.argv[1:]
p = next(p for p in pcap_ipv4(pcap) if p[9] == 50 and socket.inet_ntoa(p[12:16]) == src)
hl = (p[0] & 15) * 4
head, body = bytearray(p[:hl]), p[hl:]
s = socket.socket(socket.AF_INET, socket.SOCK_RAW, socket.IPPROTO_RAW)
for off, part, more in ((0, body[:48], 1), (48, body[48:], 0)):
    h = bytearray(head)
    struct.pack_into("!HHH", h, 2, hl + len(part), 0x4242, (more << 13) | (off // 8))
    h[10:12] = b"\0\0"  # the kernel fills in the checksum
    s.sendto(bytes(h) + part, (dst, 0))
print(f"netns-test: sent a {len(p)}-byte ESP packet again as two fragments")
PY
}
ring_round() { # FALLBACK(0|1)
  local fallback=$1
  for h in a b; do
    if [ "$fallback" = 1 ]; then
      ! grep -q 'AF_PACKET' "$WORK/$V-$h.log" || fail "$V: tunneld ($h) used AF_PACKET with --no-af-packet"
    else
      grep -q "to 10.99.0.* through [0-9]* AF_PACKET ring(s)" "$WORK/$V-$h.log" || fail "$V: tunneld ($h) does not receive through the rings"
      grep -q "sending raw IP packets through AF_PACKET" "$WORK/$V-$h.log" || fail "$V: tunneld ($h) does not send through AF_PACKET"
    fi
  done
  # With the rings, tunneld's tc ingress filter (pref 65104) ends the packets they took
  # before the IP stack; without them (the first daemons' filters removed on exit) none.
  local tcf
  tcf=$(ip netns exec "$NSB" tc filter show dev "$VB" ingress 2>/dev/null | grep -c 'pref 65104 bpf.*handle' || true)
  [ "$tcf" = "$((1 - fallback))" ] || fail "$V: $tcf tc ingress filters of tunneld on B's veth, expected $((1 - fallback))"
  # ESP that A sends through the stack passes netfilter's OUTPUT hook and is counted there;
  # what it sends through AF_PACKET bypasses it.
  ip netns exec "$NSA" nft -f - <<'NFT'
table ip ringtest {
  chain out { type filter hook output priority 0; ip protocol esp counter; }
}
NFT
  cap_start "$WORK/$V.pcap"
  ping_ok "$NSA" 10.100.0.2 3
  ping_ok "$NSB" fd00:100::1 3
  cap_stop
  expect "pings counted by both daemons" \
    "A.sas.esp_ab.outbound.packets == B.sas.esp_ab.inbound.packets == 6" \
    "B.sas.esp_ba.outbound.packets == A.sas.esp_ba.inbound.packets == 6"
  frag_replay "$WORK/$V.pcap"
  expect "the fragmented packet reassembled and seen once (a replay)" \
    "B.sas.esp_ab.inbound.drops.replay == 1" "B.daemon.underlay_rx_packets == 7" \
    "B.sas.esp_ab.inbound.packets == 6"
  # Packets longer than the rings' frames (1968 bytes): through the raw sockets.
  local mtu0
  mtu0=$(ip -n "$NSA" -o link show ipsec0 | grep -o 'mtu [0-9]*' | cut -d' ' -f2)
  for ns in "$NSA" "$NSB"; do
    ip -n "$ns" link set dev "$([ "$ns" = "$NSA" ] && echo "$VA" || echo "$VB")" mtu 4000
    ip -n "$ns" link set dev ipsec0 mtu 3600
  done
  ping_ok "$NSA" 10.100.0.2 2 -s 3000 -M do
  ping_ok "$NSB" fd00:100::1 2 -s 3000 -M do
  expect "long packets, each received once" \
    "A.sas.esp_ab.outbound.packets == B.sas.esp_ab.inbound.packets == 10" \
    "B.sas.esp_ba.outbound.packets == A.sas.esp_ba.inbound.packets == 10" \
    "A.daemon.underlay_rx_packets == 10" "B.daemon.underlay_rx_packets == 11"
  for ns in "$NSA" "$NSB"; do
    ip -n "$ns" link set dev ipsec0 mtu "$mtu0"
    ip -n "$ns" link set dev "$([ "$ns" = "$NSA" ] && echo "$VA" || echo "$VB")" mtu 1500
  done
  iperf 10.100.0.2 2
  local da db hooked
  da=$(rawdrops "$NSA")
  db=$(rawdrops "$NSB")
  hooked=$(ip netns exec "$NSA" nft list chain ip ringtest out | grep -o 'packets [0-9]*' | cut -d' ' -f2)
  ip netns exec "$NSA" nft delete table ip ringtest
  stop
  if [ "$fallback" = 1 ]; then
    expect "every ESP packet A sent went through the stack ($hooked counted in OUTPUT)" \
      "$hooked >= A.daemon.underlay_tx_packets"
  else
    expect "ESP that A sent bypassed the stack (only $hooked counted in OUTPUT)" \
      "$hooked * 10 < A.daemon.underlay_tx_packets"
  fi
  expect "final counters agree" \
    "A.sas.esp_ab.outbound.packets - A.daemon.underlay_send_errors == B.sas.esp_ab.inbound.packets + $db" \
    "B.sas.esp_ba.outbound.packets - B.daemon.underlay_send_errors == A.sas.esp_ba.inbound.packets + $da" \
    "sum(A.engine.inbound_drops.values()) == 0" "sum(B.sas.esp_ab.inbound.drops.values()) == 1" \
    "A.daemon.udp_runts + B.daemon.udp_runts == 0" "A.sas.esp_ab.outbound.packets > 1000"
}
if want ring; then
mkdir -p "$WORK/ring"
for h in a b; do cp "examples/tunnel/esp-$h.toml" "$WORK/ring/ring-$h.toml"; done
start ring "$WORK/ring"
ring_round 0
log "ring: AF_PACKET rings: fragments, long packets and iperf3 each received once"
for h in a b; do cp "examples/tunnel/esp-$h.toml" "$WORK/ring/ringoff-$h.toml"; done
TUNNELD_ARGS=(--no-af-packet)
start ringoff "$WORK/ring"
TUNNELD_ARGS=()
ring_round 1
log "ring: the raw-socket fallback (--no-af-packet): the same"
fi

# ---- udp (ESP in UDP, RFC 3948), directly and through a NAT -------------------------------
# Directly: pings both ways, tshark decodes udp.port==4500 as ESP and checks every ICV,
# iperf3. Then A sits behind a third namespace doing SNAT (nftables, another source address
# and port) that lets nothing in from B's side unless it answers A: B must learn A's
# endpoint from A's authenticated packets, and its replies must reach A.
if want udp; then
start udp examples/tunnel b-first # A's first keepalive reaches a listening B
grep -q 'offloads on' "$WORK/udp-a.log" || fail "udp: tunneld did not get its TUN offloads (nooffload tests without them)"
[ "$(ip -n "$NSA" -o link show ipsec0 | grep -o 'mtu [0-9]*')" = "mtu 1438" ] ||
  fail "udp: TUN MTU is not 1438 (1500 - IPv4 20 - UDP 8 - ESP-GCM 54 rounded): $(ip -n "$NSA" -o link show ipsec0)"
cap_start "$WORK/udp.pcap" "$VB" "udp port 4500"
ping_ok "$NSA" 10.100.0.2 3
ping_ok "$NSB" fd00:100::1 3
ping_ok "$NSA" 10.100.0.2 2 -s 1410 -M do # the largest inner packet, 1438 bytes: 1438 + 54 + 8 + 20 = 1500
cap_stop
expect "ESP in UDP: pings counted by both daemons, keepalives received" \
  "A.sas.esp_ab.outbound.packets == B.sas.esp_ab.inbound.packets == 8" \
  "B.sas.esp_ba.outbound.packets == A.sas.esp_ba.inbound.packets == 8" \
  "B.daemon.udp_keepalives_rx >= 1" "A.daemon.udp_keepalives_tx >= 1" \
  "A.daemon.underlay_send_errors == B.daemon.underlay_send_errors == 0" \
  "A.daemon.engine_in_drops == B.daemon.engine_in_drops == 0"
UAT_AB=$($HELPER uat examples/tunnel/udp-a.toml esp-ab)
UAT_BA=$($HELPER uat examples/tunnel/udp-a.toml esp-ba)
$HELPER count "$WORK/udp.pcap" "udp.port == 4500 && udp.srcport == 4500 && esp && ip.flags.mf == 0" --frames 16 ||
  fail "udp: not 16 unfragmented ESP-in-UDP frames on port 4500"
$HELPER esp "$WORK/udp.pcap" --frames 16 --uat "$UAT_AB" --uat "$UAT_BA" || fail "udp: tshark did not decrypt every frame"
# scapy (an independent implementation) decrypts one captured frame of each direction.
python3 scripts/lib/scapy_udp_check.py decrypt "$WORK/udp.pcap" examples/tunnel/udp-a.toml --frames 16 ||
  fail "udp: scapy did not decrypt the captured ESP-in-UDP frames"
# USO: one sendmsg(2) with UDP_SEGMENT (20 datagrams of 1200 bytes) reaches A's TUN device as
# one GSO_UDP_L4 super-packet; tunneld cuts it and B gets all 20, in order and intact.
ip netns exec "$NSB" python3 scripts/lib/uso_check.py recv 7001 20 1200 >"$WORK/uso.out" 2>&1 &
USO_PID=$!
BG+=("$USO_PID")
wait_for 5 "the USO receiver" ip netns exec "$NSB" sh -c "ss -Hlun 'sport = :7001' | grep -q ."
ip netns exec "$NSA" python3 scripts/lib/uso_check.py send 10.100.0.2 7001 20 1200 >/dev/null ||
  fail "udp: USO: the UDP_SEGMENT send failed"
wait "$USO_PID" || true
[ "$(cat "$WORK/uso.out")" = 20 ] ||
  fail "udp: USO: B got $(cat "$WORK/uso.out") of the 20 datagrams cut from one UDP super-packet"
expect "USO: A read one UDP super-packet from its TUN device and cut it" \
  "A.daemon.tun_gso_packets == 1" "A.daemon.tun_offload_errors == 0"
log "udp: USO: one UDP super-packet of 20 datagrams cut by tunneld, all 20 received in order"
iperf 10.100.0.2 2
expect "udp: the transfer went as UDP GSO runs from A and came in as UDP GRO reads at B" \
  "A.daemon.udp_gso_sends > 0" "A.daemon.udp_gso_datagrams > A.daemon.udp_gso_sends" \
  "B.daemon.udp_gro_reads > 0" "B.daemon.udp_gro_datagrams > B.daemon.udp_gro_reads"
log "udp: UDP GSO/GRO: $(python3 -c 'import json, sys; a, b = (json.load(open(f))["daemon"] for f in sys.argv[1:]); print("A sent %d datagrams in %d GSO runs, B read %d in %d GRO reads" % (a["udp_gso_datagrams"], a["udp_gso_sends"], b["udp_gro_datagrams"], b["udp_gro_reads"]))' "$SA" "$SB")"
# ... and tunneld opens what scapy seals: 5 echo requests as IP()/UDP(4500)/ESP (sequence
# numbers far ahead of A's, so sent after A's traffic), answered.
log "udp: scapy sent $(ip netns exec "$NSA" python3 scripts/lib/scapy_udp_check.py inject examples/tunnel/udp-a.toml \
  --sa esp-ab --src $A4 --dst $B4 --count 5 --seq-from 1000000) packets sealed by scapy"
DROPS_A=$(udpdrops "$NSA")
DROPS_B=$(udpdrops "$NSB")
expect "tunneld accepts what scapy seals (and answers it)" \
  "B.sas.esp_ab.inbound.packets + $DROPS_B == A.sas.esp_ab.outbound.packets - A.daemon.underlay_send_errors + 5" \
  "B.daemon.engine_in_drops == 0" \
  "B.daemon.tun_tx_packets + B.daemon.tun_write_errors == B.sas.esp_ab.inbound.packets"
stop
log "udp: UDP socket queue drops: A $DROPS_A, B $DROPS_B"
expect "final counters agree" \
  "A.sas.esp_ab.outbound.packets + 5 - A.daemon.underlay_send_errors == B.sas.esp_ab.inbound.packets + $DROPS_B" \
  "B.sas.esp_ba.outbound.packets - B.daemon.underlay_send_errors == A.sas.esp_ba.inbound.packets + $DROPS_A" \
  "sum(A.engine.inbound_drops.values()) + sum(B.engine.inbound_drops.values()) == 0" \
  "A.daemon.udp_runts + A.daemon.udp_non_esp + B.daemon.udp_runts + B.daemon.udp_non_esp == 0" \
  "A.sas.esp_ab.outbound.packets > 1000"
fi

# Through a NAT: A 10.97.0.1 -- N (10.97.0.254 | 10.98.0.254, SNAT to ports 20000-20999) -- B 10.98.0.2
if want udp-nat; then
UAT_AB=$($HELPER uat examples/tunnel/udp-a.toml esp-ab)
UAT_BA=$($HELPER uat examples/tunnel/udp-a.toml esp-ba)
NSN=tnl-n-$ID
netns_add "$NSN"
ip link add tnna$ID netns "$NSA" type veth peer name tnan$ID netns "$NSN"
ip link add tnnb$ID netns "$NSB" type veth peer name tnbn$ID netns "$NSN"
ip -n "$NSA" addr add 10.97.0.1/24 dev tnna$ID
ip -n "$NSN" addr add 10.97.0.254/24 dev tnan$ID
ip -n "$NSN" addr add 10.98.0.254/24 dev tnbn$ID
ip -n "$NSB" addr add 10.98.0.2/24 dev tnnb$ID
for l in "$NSA tnna$ID" "$NSN tnan$ID" "$NSN tnbn$ID" "$NSB tnnb$ID"; do ip -n ${l% *} link set ${l#* } up; done
ip -n "$NSN" link set lo up
ip -n "$NSA" route add 10.98.0.0/24 via 10.97.0.254
ip -n "$NSB" route add 10.97.0.0/24 via 10.98.0.254 # reaches N, whose firewall drops it
ip netns exec "$NSN" sysctl -q -w net.ipv4.ip_forward=1
ip netns exec "$NSN" nft -f - <<EOF || fail "udp-nat: nft could not load the NAT rules"
table ip nat {
  chain post { type nat hook postrouting priority srcnat; policy accept;
    oifname "tnbn$ID" ip saddr 10.97.0.0/24 meta l4proto udp snat to 10.98.0.254:20000-20999
    oifname "tnbn$ID" ip saddr 10.97.0.0/24 masquerade
  }
}
table ip filter {
  chain guard { type filter hook forward priority filter; policy drop;
    ct state established,related counter accept
    iifname "tnan$ID" counter accept
    counter
  }
}
EOF
mkdir -p "$WORK/nat"
for h in a b; do
  sed -e 's/10\.99\.0\.1"/10.97.0.1"/g' -e 's/10\.99\.0\.2"/10.98.0.2"/g' examples/tunnel/udp-$h.toml >"$WORK/nat/udp-nat-$h.toml"
done
start udp-nat "$WORK/nat" b-first
cap_start "$WORK/udp-nat.pcap" "tnnb$ID" "udp port 4500"
ping_ok "$NSA" 10.100.0.2 3 # A first: its packets open the NAT's mapping
ping_ok "$NSB" 10.100.0.1 3
ping_ok "$NSB" fd00:100::1 2
ping_ok "$NSA" fd00:100::2 2
cap_stop
grep -q 'the peer.s endpoint is now 10\.98\.0\.254:20[0-9][0-9][0-9]' "$WORK/udp-nat-b.log" ||
  fail "udp-nat: B did not learn A's endpoint behind the NAT: $(grep -i endpoint "$WORK/udp-nat-b.log" | head -3)"
expect "through the NAT: B learned A's endpoint, every packet arrived, A's keepalive counted" \
  "A.sas.esp_ab.outbound.packets == B.sas.esp_ab.inbound.packets == 10" \
  "B.sas.esp_ba.outbound.packets == A.sas.esp_ba.inbound.packets == 10" \
  "B.daemon.udp_keepalives_rx >= 1" "A.daemon.udp_keepalives_rx == 0" \
  "A.daemon.engine_in_drops == B.daemon.engine_in_drops == 0"
$HELPER count "$WORK/udp-nat.pcap" "ip.src == 10.98.0.254 && udp.srcport >= 20000 && udp.srcport <= 20999 && udp.dstport == 4500 && esp" --frames 10 ||
  fail "udp-nat: B did not see A's ESP from the NAT's address and a translated port"
$HELPER count "$WORK/udp-nat.pcap" "ip.dst == 10.98.0.254 && udp.dstport >= 20000 && udp.dstport <= 20999 && esp" --frames 10 ||
  fail "udp-nat: B's ESP did not go to the NAT's address and port"
$HELPER esp "$WORK/udp-nat.pcap" --frames 20 --uat "${UAT_AB//10.9[79].0.[12]/*}" --uat "${UAT_BA//10.9[79].0.[12]/*}" ||
  fail "udp-nat: tshark did not decrypt every frame"
# Bulk through the NAT: UDP GSO runs from A are forwarded (and translated) by N, GRO at B.
iperf 10.100.0.2 2
expect "udp-nat: iperf3 through the NAT, nothing dropped by the engines" \
  "A.daemon.engine_in_drops == B.daemon.engine_in_drops == 0" \
  "A.sas.esp_ab.outbound.packets > 1000"
stop
# Whether B's first keepalive reached the NAT before A's first packet opened the mapping
# depends on timing (it failed once in CI under load), so it is reported, not required: what
# matters, that B learned A's translated endpoint and its replies got through, is checked above.
log "udp-nat: B's unsolicited packets dropped by the NAT: $(ip netns exec "$NSN" nft list chain ip filter guard | awk '/^[[:space:]]*counter packets/ {print $3}')"
ip netns del "$NSN"
fi

# ---- flood (issue #13): garbage and replays at a daemon during a transfer -------------------
# scripts/studies/flood-test.sh, in namespaces of its own (its header says what it checks).
if want flood; then
TUNNELD_BIN=$BIN bash scripts/studies/flood-test.sh || fail "flood: see above"
fi

# ---- rekey (issue #14): make-before-break rekeys under load, hard lifetime + --on-event ----
# The esp pair again, each daemon with a control socket. During a bounded iperf3 TCP transfer
# (REKEY_SECONDS, default 10 s, at REKEY_RATE, default 100 Mbit/s) both directions are
# rekeyed every 2 s with `ipsec sa update` (new SPIs and keys; the receiving side first):
# the transfer completes, nothing is dropped as no_sa or bad_icv, tshark decrypts every ESP
# frame on the wire with the keys of all generations, both `ipsec monitor`s saw every
# change. Then an SA with a 3 s hard lifetime expires and A's --on-event hook installs a
# fresh one on both hosts (the hook reaches B's socket too): pings work again after it.
if want rekey; then
if [ -n "${IPSEC_BIN:-}" ]; then
  CTL=$IPSEC_BIN
else
  CTL=$(dirname "$BIN")/ipsec
  [ -x "$CTL" ] || [ -n "${TUNNELD_BIN:-}" ] || cargo build --release --locked --quiet --bin ipsec
fi
[ -x "$CTL" ] || fail "no ipsec binary at $CTL (set IPSEC_BIN)"
V=rekey
SA=$WORK/rekey-a.json
SB=$WORK/rekey-b.json
SOCK_A=$WORK/rekey-a.sock
SOCK_B=$WORK/rekey-b.sock
HOOK=$WORK/rekey-hook.sh
# hexkey BYTES SEED: a key for generation SEED (test keys, printed into the log on purpose).
hexkey() { python3 -c "import sys; n, s = int(sys.argv[1]), int(sys.argv[2]); print('0x' + bytes((s * 37 + i * 11 + 5) % 256 for i in range(n)).hex())" "$1" "$2"; }
# spec SPI SRC DST SEED: the example's algorithms (AES-128-CBC + HMAC-SHA-256-128), new keys.
spec() { echo "proto esp spi $1 mode tunnel src $2 dst $3 enc cbc(aes) $(hexkey 16 "$4") auth-trunc hmac(sha256) $(hexkey 32 $(($4 + 100))) 128"; }
# uat_of SPI SRC DST SEED: the same SA as a Wireshark esp_sa entry.
uat_of() { printf '"IPv4","%s","%s","0x%08x","AES-CBC [RFC3602]","%s","HMAC-SHA-256-128 [RFC4868]","%s"' \
  "$2" "$3" "$1" "$(hexkey 16 "$4")" "$(hexkey 32 $(($4 + 100)))"; }
ctl() { # SOCKET ARGS...: one `ipsec` control command; fails the test if it fails
  local s=$1
  shift
  # --control before the SPEC words, which take the rest of the line
  "$CTL" "$1" "$2" --control "$s" "${@:3}" >>"$WORK/rekey-ctl.log" 2>&1 ||
    fail "rekey: ipsec $* --control $s: $(tail -n 1 "$WORK/rekey-ctl.log")"
}
# The --on-event hook on A: when the test SA esp-ab reaches its hard lifetime, a fresh
# generation (SPI 0x5001) goes in on B (receiving) and then on A, as a key manager would.
spec 0x5001 $A4 $B4 50 >"$WORK/rekey-fresh.spec"
cat >"$HOOK" <<HOOK
#!/bin/sh
ev=\$(cat)
case "\$ev" in *'"event":"sa.hard_expired"'*'"sa":"esp-ab"'*) ;; *) exit 0 ;; esac
"$CTL" sa update --control "$SOCK_B" esp-ab --spec-file "$WORK/rekey-fresh.spec" >>"$WORK/rekey-hook.log" 2>&1 &&
  "$CTL" sa update --control "$SOCK_A" esp-ab --spec-file "$WORK/rekey-fresh.spec" >>"$WORK/rekey-hook.log" 2>&1 &&
  echo "\$ev" >"$WORK/rekey-hook.done"
HOOK
chmod +x "$HOOK"
ip netns exec "$NSA" "$BIN" --config examples/tunnel/esp-a.toml --stats "$SA" --control "$SOCK_A" \
  --on-event "$HOOK" 2>"$WORK/rekey-a.log" &
DA=$!
BG+=("$DA")
ip netns exec "$NSB" "$BIN" --config examples/tunnel/esp-b.toml --stats "$SB" --control "$SOCK_B" 2>"$WORK/rekey-b.log" &
DB=$!
BG+=("$DB")
wait_for 10 "tunneld (rekey) in $NSA to write its stats" test -s "$SA"
wait_for 10 "tunneld (rekey) in $NSB to write its stats" test -s "$SB"
wait_for 5 "the control sockets" test -S "$SOCK_A" -a -S "$SOCK_B"
ip -n "$NSA" addr add 10.100.0.1/24 dev ipsec0
ip -n "$NSB" addr add 10.100.0.2/24 dev ipsec0
"$CTL" monitor --json --control "$SOCK_A" >"$WORK/rekey-mon-a.jsonl" 2>"$WORK/rekey-mon-a.log" &
MON_A=$!
BG+=("$MON_A")
"$CTL" monitor --json --control "$SOCK_B" >"$WORK/rekey-mon-b.jsonl" 2>"$WORK/rekey-mon-b.log" &
MON_B=$!
BG+=("$MON_B")
cap_start "$WORK/rekey.pcap"
ping_ok "$NSA" 10.100.0.2 2
UATS=("$($HELPER uat examples/tunnel/esp-a.toml esp-ab)" "$($HELPER uat examples/tunnel/esp-a.toml esp-ba)")
RT=${REKEY_SECONDS:-10}
# The generations' SPECs, computed before the transfer (python3 would slow the switches).
NG=$(((RT - 1) / 2))
SPEC_AB=() SPEC_BA=()
for g in $(seq 1 $NG); do
  ab=$((0x2000 + g)) ba=$((0x3000 + g))
  SPEC_AB[g]=$(spec $ab $A4 $B4 $g)
  SPEC_BA[g]=$(spec $ba $B4 $A4 $((g + 20)))
  UATS+=("$(uat_of $ab $A4 $B4 $g)" "$(uat_of $ba $B4 $A4 $((g + 20)))")
done
ip netns exec "$NSB" timeout $((RT + 20)) iperf3 -s -1 -B 10.100.0.2 -p 5202 >"$WORK/rekey-iperf-server.log" 2>&1 &
SRV=$!
BG+=("$SRV")
wait_tcp_listen 10 "the iperf3 server" "$NSB" 5202
timeout $((RT + 20)) ip netns exec "$NSA" iperf3 -c 10.100.0.2 -p 5202 -t "$RT" -b "${REKEY_RATE:-100M}" -P "${REKEY_STREAMS:-1}" -J \
  >"$WORK/rekey-iperf.json" 2>&1 &
CLI=$!
BG+=("$CLI")
REKEYS=0
T0=${EPOCHREALTIME/[.,]/}
for g in $(seq 1 $NG); do
  sleep 2
  t1=${EPOCHREALTIME/[.,]/}
  # Receiving sides first (new inbound SA, the old kept until idle), then the senders.
  ctl "$SOCK_B" sa update esp-ab ${SPEC_AB[g]}
  ctl "$SOCK_A" sa update esp-ba ${SPEC_BA[g]}
  ctl "$SOCK_A" sa update esp-ab ${SPEC_AB[g]}
  ctl "$SOCK_B" sa update esp-ba ${SPEC_BA[g]}
  t2=${EPOCHREALTIME/[.,]/}
  REKEYS=$((REKEYS + 1))
  log "rekey: generation $g at $(((t1 - T0) / 1000)) ms, both directions switched in $(((t2 - t1) / 1000)) ms"
done
rc=0
wait "$CLI" || rc=$?
wait "$SRV" || true
[ $rc -eq 0 ] || fail "rekey: iperf3 failed: $(grep -m1 '"error"' "$WORK/rekey-iperf.json" || tail -n 3 "$WORK/rekey-iperf.json")"
log "rekey: $REKEYS rekeys of both directions during the transfer"

# Hard lifetime: generation L (SPI 0x4001) expires on A after 3 s; the hook replaces it.
ctl "$SOCK_B" sa update esp-ab $(spec 0x4001 $A4 $B4 40)
ctl "$SOCK_A" sa update esp-ab --hard-seconds 3 $(spec 0x4001 $A4 $B4 40)
UATS+=("$(uat_of 0x4001 $A4 $B4 40)" "$(uat_of 0x5001 $A4 $B4 50)")
ip netns exec "$NSA" ping -q -n -c 30 -i 0.2 -W 1 10.100.0.2 >"$WORK/rekey-ping.out" 2>&1 || true
wait_for 10 "the --on-event hook to install the fresh SA" test -s "$WORK/rekey-hook.done"
ping_ok "$NSA" 10.100.0.2 3
ping_ok "$NSB" 10.100.0.1 3
log "rekey: hard expiry and hook: $(grep -o '[0-9]* packets transmitted, [0-9]* received' "$WORK/rekey-ping.out") across the expiry"
cap_stop
DROPS_A=$(rawdrops "$NSA")
DROPS_B=$(rawdrops "$NSB")
kill -TERM "$MON_A" "$MON_B" 2>/dev/null || true
stop_pid "$DA" "tunneld (rekey) in $NSA"
stop_pid "$DB" "tunneld (rekey) in $NSB"
for h in a b; do
  # The one warning expected: the test SA's hard limit, on A.
  w=$(grep -E ' (WARN|ERROR) ' "$WORK/rekey-$h.log" | grep -v 'WARN SA `esp-ab` reached its hard Seconds limit' || true)
  [ -z "$w" ] || fail "tunneld (rekey, host $h) logged warnings: $(echo "$w" | head -3)"
  grep -q 'tunneld: stopped' "$WORK/rekey-$h.log" || fail "tunneld (rekey, host $h) did not log its clean stop"
done
grep -q 'WARN SA `esp-ab` reached its hard Seconds limit' "$WORK/rekey-a.log" || fail "rekey: A did not log the hard expiry"
python3 - "$SA" "$SB" "$WORK/rekey-iperf.json" "$WORK/rekey-mon-a.jsonl" "$WORK/rekey-mon-b.jsonl" \
  "$REKEYS" "$DROPS_A" "$DROPS_B" <<'PY' || fail "rekey: counters, iperf3 or monitor events (see above)"
import json, sys
A, B, I = (json.load(open(p)) for p in sys.argv[1:4])
rekeys, drops_a, drops_b = (int(x) for x in sys.argv[6:9])
mons = [[json.loads(l) for l in open(p) if l.strip()] for p in sys.argv[4:6]]
bad = []
# The SAs installed now, plus the retired ones (rekeyed away and freed) added up. On each
# host one SA name carries each direction (A seals esp-ab, B opens it), so the retired
# direction totals belong to it.
def per_sa(s, d, k): return sum(x[d]["drops"][k] for x in s["engine"]["sas"]) + s["engine"]["retired"][d]["drops"][k]
def tot(s, name, d): return sum(x[d]["packets"] for x in s["engine"]["sas"] if x["name"] == name) + s["engine"]["retired"][d]["packets"]
for h, s in (("A", A), ("B", B)):
    for k in ("no_sa", "bad_icv", "replay"):
        n = per_sa(s, "inbound", k) + s["engine"]["inbound_drops"].get(k, 0)
        if n:
            bad.append(f"{h}: {n} inbound packets dropped as {k}")
    if s["daemon"]["underlay_send_errors"]:
        bad.append(f"{h}: {s['daemon']['underlay_send_errors']} underlay send errors")
# Every packet A sealed on any generation of esp-ab, B opened (and the other way), except the
# kernel's raw socket queue drops (reported).
lost_ab = tot(A, "esp-ab", "outbound") - tot(B, "esp-ab", "inbound") - drops_b
lost_ba = tot(B, "esp-ba", "outbound") - tot(A, "esp-ba", "inbound") - drops_a
if lost_ab or lost_ba:
    bad.append(f"sealed but not opened: {lost_ab} A->B, {lost_ba} B->A")
gens_a = A["engine"]["retired"]["sas"]
end = I["end"]
retr = end["sum_sent"].get("retransmits", 0)
got = end["sum_received"]["bytes"]
if got < 1_000_000:
    bad.append(f"iperf3 moved only {got} bytes")
# The monitors: every update on each host (2 per rekey, 1 + 1 by the hook on A, 1 + 1 on B),
# the expiry on A, and SPIs as installed.
for h, evs in (("A", mons[0]), ("B", mons[1])):
    rep = [e for e in evs if e.get("event") == "sa.replaced"]
    want = 2 * rekeys + 2
    if len(rep) != want:
        bad.append(f"monitor {h}: {len(rep)} sa.replaced events, expected {want}")
    spis = {e["spi"] for e in rep}
    for g in range(1, rekeys + 1):
        for spi in (0x2000 + g, 0x3000 + g):
            if hex(spi) not in spis:
                bad.append(f"monitor {h}: no sa.replaced for SPI {hex(spi)}")
    if not any(e.get("event") == "sa.retired" for e in evs):
        bad.append(f"monitor {h}: no sa.retired")
if not any(e.get("event") == "sa.hard_expired" and e.get("sa") == "esp-ab" for e in mons[0]):
    bad.append("monitor A: no sa.hard_expired for esp-ab")
for h, s in (("A", A), ("B", B)):
    print(f"netns-test: rekey: {h}'s SAs (SPI: packets out/in): " + ", ".join(
        f"{x['spi']:#x}: {x['outbound']['packets']}/{x['inbound']['packets']}" for x in s["engine"]["sas"]))
if bad:
    print("FAILED:\n  " + "\n  ".join(bad), file=sys.stderr)
    sys.exit(1)
print(f"netns-test: rekey: iperf3 {got / 1e6:.1f} MB received ({end['sum_received']['bits_per_second'] / 1e6:.0f} Mbit/s), "
      f"{retr} retransmits over {rekeys} rekeys; {gens_a} SAs retired and freed on A; packets sealed but not opened: 0; "
      f"no_sa/bad_icv/replay drops: 0; raw socket queue drops: A {drops_a}, B {drops_b}")
PY
# tshark: every ESP frame on the wire decrypts (with the keys of its generation), ICV good,
# and holds TCP or ICMP; and the capture has every frame the daemons sent.
python3 - "$WORK/rekey.pcap" "$SA" "$SB" $((2 * REKEYS + 4)) "${UATS[@]}" <<'PY' || fail "rekey: tshark did not decrypt every frame, or not every generation was on the wire"
import json, os, subprocess, sys, tempfile
pcap, sa, sb, nspi, uats = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4]), sys.argv[5:]
cmd = ["tshark", "-n", "-r", pcap, "-o", "esp.enable_encryption_decode:TRUE", "-o", "esp.enable_authentication_check:TRUE"]
for u in uats:
    cmd += ["-o", "uat:esp_sa:" + u]
cmd += ["-Y", "esp", "-T", "fields", "-E", "separator=/t", "-E", "occurrence=f",
        "-e", "esp.spi", "-e", "esp.icv_good", "-e", "tcp.srcport", "-e", "icmp.type", "-e", "esp.sequence"]
env = dict(os.environ, WIRESHARK_CONFIG_DIR=tempfile.mkdtemp(prefix="ws-config-"))
p = subprocess.run(cmd, capture_output=True, text=True, timeout=300, env=env)
if p.returncode != 0:
    sys.exit(f"tshark failed: {p.stderr.strip()}")
rows = [l.split("\t") for l in p.stdout.splitlines() if l.strip()]
bad = [r for r in rows if r[1] != "1" or not (r[2] or r[3])]
sent = sum(json.load(open(f))["daemon"]["underlay_tx_packets"] for f in (sa, sb))
spis = sorted({r[0] for r in rows})
print(f"netns-test: rekey: tshark: {len(rows)} ESP frames, SPIs {', '.join(spis)}, {len(bad)} not decrypted; the daemons sent {sent}")
# Reordering on the wire (issue #39 item 8: several workers seal one SA, a worker preempted
# between taking its sequence numbers and sending lets the others' packets pass): per SPI,
# how far below the highest sequence number seen so far each frame arrived. A frame further
# behind than the receiver's replay window is dropped as a replay.
top, depth, behind = {}, {}, {}
for r in rows:
    if len(r) < 5 or not r[4]:
        continue
    spi, q = r[0], int(r[4])
    d = top.get(spi, 0) - q
    if d > 0:
        depth[spi] = max(depth.get(spi, 0), d)
        for w in (32, 64, 128, 256, 1024):
            if d >= w:
                behind[w] = behind.get(w, 0) + 1
    top[spi] = max(top.get(spi, 0), q)
worst = max(depth.items(), key=lambda x: x[1], default=("-", 0))
print(f"netns-test: rekey: reordering on the wire: at most {worst[1]} packets behind (SPI {worst[0]}); "
      "frames at least W behind: " + ", ".join(f"W={w}: {behind.get(w, 0)}" for w in (32, 64, 128, 256, 1024)))
if bad:
    print("  e.g. " + "; ".join("\t".join(r) for r in bad[:5]), file=sys.stderr)
sys.exit(0 if not bad and len(rows) == sent and len(spis) == nspi else 1)
PY
fi

# ---- v6: an IPv6-only underlay ---------------------------------------------------------------
# A second veth pair between the two namespaces with IPv6 addresses only (fd00:99::1/64 <->
# fd00:99::2/64; no IPv4 address on it). Raw ESP (examples/tunnel/v6-*.toml, AES-GCM over
# IPv6 raw sockets), then ESP in UDP over IPv6 (udp6-*.toml, UDP6 sockets): the default TUN
# MTU counts the 40-byte IPv6 outer header (and the UDP header), pings of both inner families
# both ways and the largest inner packets (-M do), tshark on the IPv6 veth checks every ESP
# frame's ICV with the keys, iperf3, and the daemons' counters agree.
# frag6_replay PCAP: the first A->B ESP packet over IPv6 of a capture sent again from A as two
# IPv6 fragments (RFC 8200 4.5).
frag6_replay() {
  ip netns exec "$NSA" python3 - "$1" <<'PY' || fail "v6: could not send the IPv6 fragments"
import socket, struct, sys
sys.path.insert(0, "scripts/lib")
from netns_helper import pcap_ipv6
src, dst = socket.inet_pton(socket.AF_INET6, "fd00:99::1"), socket.inet_pton(socket.AF_INET6, "fd00:99::2")
p = next(p for p in pcap_ipv6(sys.argv[1]) if p[6] == 50 and p[8:24] == src)
body = p[40:]
s = socket.socket(socket.AF_INET6, socket.SOCK_RAW, socket.IPPROTO_RAW)
for off, part, more in ((0, body[:48], 1), (48, body[48:], 0)):
    h = bytearray(p[:40])
    struct.pack_into("!H", h, 4, 8 + len(part))
    h[6] = 44  # a Fragment header next, then ESP
    frag = struct.pack("!BBHI", 50, 0, off | more, 0x4242)
    s.sendto(bytes(h) + frag + part, ("fd00:99::2", 0))
print(f"netns-test: sent a {len(p)}-byte ESP packet over IPv6 again as two fragments")
PY
}

v6_stage() { # VARIANT ORDER TUN_MTU CAPTURE_FILTER IPERF_DST DROPS_FN
  local v=$1 order=$2 mtu=$3 filter=$4 dst=$5 drops=$6
  start "$v" examples/tunnel "$order"
  local got
  got=$(ip -n "$NSA" -o link show ipsec0 | grep -o 'mtu [0-9]*')
  [ "$got" = "mtu $mtu" ] || fail "$v: TUN MTU is $got, not $mtu (1500 - IPv6 40$([ "$v" = udp6 ] && echo ' - UDP 8') - ESP-GCM 34)"
  cap_start "$WORK/$v.pcap" "$V6B" "$filter"
  # Raw ESP over IPv6 goes out through AF_PACKET (the ring stage's check, for IPv6): past
  # netfilter's OUTPUT hook, where only what the raw socket sends is counted.
  [ "$v" != v6 ] || ip netns exec "$NSA" nft -f - <<'NFT'
table ip6 v6test {
  chain out { type filter hook output priority 0; meta l4proto esp counter; }
}
NFT
  ping_ok "$NSA" 10.100.0.2 3
  ping_ok "$NSA" fd00:100::2 3
  ping_ok "$NSB" 10.100.0.1 3
  ping_ok "$NSB" fd00:100::1 3
  # The largest inner packets: inner + ESP-GCM 34 (+ UDP 8) + IPv6 40 = 1500 bytes.
  ping_ok "$NSA" 10.100.0.2 2 -s $((mtu - 28)) -M do
  ping_ok "$NSA" fd00:100::2 2 -s $((mtu - 48)) -M do
  cap_stop
  expect "pings counted by both daemons" \
    "A.sas.esp_ab.outbound.packets == B.sas.esp_ab.inbound.packets == 16" \
    "B.sas.esp_ba.outbound.packets == A.sas.esp_ba.inbound.packets == 16" \
    "A.daemon.underlay_send_errors == B.daemon.underlay_send_errors == 0" \
    "A.daemon.not_to_peer == B.daemon.not_to_peer == 0" \
    "A.daemon.engine_in_drops == B.daemon.engine_in_drops == 0"
  if [ "$v" = v6 ]; then
    # An ESP packet fragmented on the way (IPv6 fragments, reassembled by B's kernel) is
    # received: here the first A->B one again, so B counts one replay.
    frag6_replay "$WORK/$v.pcap"
    expect "an IPv6-fragmented ESP packet reassembled and seen once (a replay)" \
      "B.sas.esp_ab.inbound.drops.replay == 1" "B.sas.esp_ab.inbound.packets == 16"
  fi
  $HELPER count "$WORK/$v.pcap" "ipv6 && !ip && esp" --frames 32 || fail "$v: not 32 ESP frames over IPv6 on the link"
  $HELPER esp "$WORK/$v.pcap" --frames 32 \
    --uat "$($HELPER uat "examples/tunnel/$v-a.toml" esp-ab)" \
    --uat "$($HELPER uat "examples/tunnel/$v-a.toml" esp-ba)" || fail "$v: tshark did not decrypt every frame"
  iperf "$dst" 2
  local da db hooked=0
  da=$($drops "$NSA")
  db=$($drops "$NSB")
  if [ "$v" = v6 ]; then
    hooked=$(ip netns exec "$NSA" nft list chain ip6 v6test out | grep -o 'packets [0-9]*' | cut -d' ' -f2)
    ip netns exec "$NSA" nft delete table ip6 v6test
  fi
  stop
  [ "$v" != v6 ] || expect "IPv6 ESP that A sent bypassed the stack (only $hooked counted in OUTPUT)" \
    "$hooked * 10 < A.daemon.underlay_tx_packets"
  log "$v: socket queue drops: A $da, B $db"
  expect "final counters agree" \
    "A.sas.esp_ab.outbound.packets - A.daemon.underlay_send_errors == B.sas.esp_ab.inbound.packets + $db" \
    "B.sas.esp_ba.outbound.packets - B.daemon.underlay_send_errors == A.sas.esp_ba.inbound.packets + $da" \
    "A.daemon.underlay_tx_packets == A.sas.esp_ab.outbound.packets - A.daemon.underlay_send_errors" \
    "B.daemon.tun_tx_packets + B.daemon.tun_write_errors == B.sas.esp_ab.inbound.packets" \
    "sum(A.engine.inbound_drops.values()) + sum(B.engine.inbound_drops.values()) == 0" \
    "A.daemon.udp_runts + A.daemon.udp_non_esp + B.daemon.udp_runts + B.daemon.udp_non_esp == 0" \
    "A.sas.esp_ab.outbound.packets > 1000"
}
if want v6; then
V6A=tn6a$ID
V6B=tn6b$ID
ip link add "$V6A" netns "$NSA" type veth peer name "$V6B" netns "$NSB"
ip -n "$NSA" -6 addr add fd00:99::1/64 dev "$V6A" nodad
ip -n "$NSB" -6 addr add fd00:99::2/64 dev "$V6B" nodad
ip -n "$NSA" link set "$V6A" up
ip -n "$NSB" link set "$V6B" up
[ -z "$(ip -n "$NSA" -4 -o addr show dev "$V6A")$(ip -n "$NSB" -4 -o addr show dev "$V6B")" ] ||
  fail "v6: the IPv6 link has an IPv4 address"
wait_for 10 "the IPv6 underlay" ip netns exec "$NSA" ping -6 -n -c 1 -W 1 fd00:99::2
v6_stage v6 '' 1426 "ip6 proto 50" 10.100.0.2 rawdrops
v6_stage udp6 b-first 1418 "udp port 4500" fd00:100::2 udpdrops
expect "ESP in UDP over IPv6: keepalives, the peer's endpoint in the stats" \
  "B.daemon.udp_keepalives_rx >= 1" "A.daemon.udp_keepalives_tx >= 1" \
  "A.peers[0]['peer'] == 'fd00:99::2' and A.peers[0]['endpoint'] == '[fd00:99::2]:4500' and A.peers[0]['learned']"
ip -n "$NSA" link del "$V6A"
fi

# ---- peers: one daemon, two peers -----------------------------------------------------------
# A (examples/tunnel/peers-a.toml) with B over IPv4 (the first veth, 10.99.0.2) and C over
# IPv6 (namespace tnl-c-*, a second veth of A: fd00:98::1/64 <-> fd00:98::3/64), both ESP in
# UDP. Inner networks: A 10.100.1.0/24 + fd00:100:1::/64, B .2, C .3; A routes B's and C's
# into its TUN device and the SPD picks the SA, whose tunnel destination picks the peer.
if want peers; then
NSC=tnl-c-$ID
PA=tnpa$ID
PC=tnpc$ID
netns_add "$NSC"
ip link add "$PA" netns "$NSA" type veth peer name "$PC" netns "$NSC"
ip -n "$NSA" -6 addr add fd00:98::1/64 dev "$PA" nodad
ip -n "$NSC" -6 addr add fd00:98::3/64 dev "$PC" nodad
ip -n "$NSC" link set lo up
ip -n "$NSA" link set "$PA" up
ip -n "$NSC" link set "$PC" up
wait_for 10 "the link to C" ip netns exec "$NSA" ping -6 -n -c 1 -W 1 fd00:98::3
V=peers
SA=$WORK/peers-a.json
SB=$WORK/peers-b.json
SC=$WORK/peers-c.json
# B and C first: A's first keepalives find them listening.
ip netns exec "$NSB" "$BIN" --config examples/tunnel/peers-b.toml --stats "$SB" 2>"$WORK/peers-b.log" &
DB=$!
BG+=("$DB")
ip netns exec "$NSC" "$BIN" --config examples/tunnel/peers-c.toml --stats "$SC" 2>"$WORK/peers-c.log" &
DC=$!
BG+=("$DC")
wait_for 10 "tunneld (peers) in $NSB to write its stats" test -s "$SB"
wait_for 10 "tunneld (peers) in $NSC to write its stats" test -s "$SC"
ip netns exec "$NSA" "$BIN" --config examples/tunnel/peers-a.toml --stats "$SA" 2>"$WORK/peers-a.log" &
DA=$!
BG+=("$DA")
wait_for 10 "tunneld (peers) in $NSA to write its stats" test -s "$SA"
ip -n "$NSA" addr add 10.100.1.1/24 dev ipsec0
ip -n "$NSA" addr add fd00:100:1::1/64 dev ipsec0 nodad
for n in 2 3; do
  ip -n "$NSA" route add 10.100.$n.0/24 dev ipsec0
  ip -n "$NSA" -6 route add fd00:100:$n::/64 dev ipsec0
done
for l in "$NSB 2" "$NSC 3"; do
  ns=${l% *} n=${l#* }
  ip -n "$ns" addr add 10.100.$n.1/24 dev ipsec0
  ip -n "$ns" addr add fd00:100:$n::1/64 dev ipsec0 nodad
  ip -n "$ns" route add 10.100.1.0/24 dev ipsec0
  ip -n "$ns" -6 route add fd00:100:1::/64 dev ipsec0
done
log "peers: A with peers B (IPv4) and C (IPv6) running ($(grep -o 'underlay [^;]*' "$WORK/peers-a.log" | head -1))"
peers_expect() { # WHAT EXPR...: over A's, B's and C's stats
  local what=$1
  shift
  $HELPER expect --what "peers: $what" "$SA" "$SB" --c "$SC" "$@" || fail "peers: $what (see above)"
}
# ping_both NS1 DST1 NS2 DST2 COUNT [options]: both at the same time, every echo answered.
ping_both() {
  local n=$5 p1 p2 rc1=0 rc2=0
  ip netns exec "$1" ping -q -n -c "$n" -i 0.2 -W 2 -w 10 "${@:6}" "$2" >"$WORK/ping1.out" 2>&1 &
  p1=$!
  ip netns exec "$3" ping -q -n -c "$n" -i 0.2 -W 2 -w 10 "${@:6}" "$4" >"$WORK/ping2.out" 2>&1 &
  p2=$!
  wait $p1 || rc1=$?
  wait $p2 || rc2=$?
  for o in 1 2; do
    grep -q "$n packets transmitted, $n received" "$WORK/ping$o.out" ||
      fail "peers: concurrent pings to $2 and $4: $(grep -h transmitted "$WORK"/ping[12].out | tr '\n' ' ')"
  done
  [ $rc1 -eq 0 ] && [ $rc2 -eq 0 ] || fail "peers: ping failed ($rc1, $rc2)"
}
cap_start "$WORK/peers-b.pcap" "$VB" "udp port 4500" "$NSB"
cap_start "$WORK/peers-c.pcap" "$PC" "udp port 4500" "$NSC"
ping_both "$NSA" 10.100.2.1 "$NSA" 10.100.3.1 5
ping_both "$NSB" 10.100.1.1 "$NSC" 10.100.1.1 5
ping_both "$NSA" fd00:100:2::1 "$NSA" fd00:100:3::1 3
cap_stop
# Each link: 5 + 3 + 5 packets each way, all of its peer's SAs, every ICV good; none of the
# other peer's SAs (their SPIs are not on it, and a frame tshark cannot decrypt fails the check).
peers_expect "each peer's SAs count its packets, keepalives reach both, endpoints learned" \
  "A.sas.esp_ab.outbound.packets == B.sas.esp_ab.inbound.packets == 13" \
  "B.sas.esp_ba.outbound.packets == A.sas.esp_ba.inbound.packets == 13" \
  "A.sas.esp_ac.outbound.packets == C.sas.esp_ac.inbound.packets == 13" \
  "C.sas.esp_ca.outbound.packets == A.sas.esp_ca.inbound.packets == 13" \
  "A.daemon.not_to_peer == 0" "A.daemon.underlay_send_errors == 0" \
  "A.daemon.engine_in_drops + B.daemon.engine_in_drops + C.daemon.engine_in_drops == 0" \
  "B.daemon.udp_keepalives_rx >= 1" "C.daemon.udp_keepalives_rx >= 1" "A.daemon.udp_keepalives_tx >= 2" \
  "[p['peer'] for p in A.peers] == ['10.99.0.2', 'fd00:98::3']" \
  "[p['endpoint'] for p in A.peers] == ['10.99.0.2:4500', '[fd00:98::3]:4500']" \
  "all(p['learned'] for p in A.peers)"
$HELPER count "$WORK/peers-b.pcap" "esp && (esp.spi == 0x5003 || esp.spi == 0x5103)" --frames 0 ||
  fail "peers: C's SAs on B's link"
$HELPER count "$WORK/peers-c.pcap" "esp && (esp.spi == 0x5002 || esp.spi == 0x5102)" --frames 0 ||
  fail "peers: B's SAs on C's link"
$HELPER count "$WORK/peers-c.pcap" "ipv6 && esp" --frames 26 || fail "peers: not 26 ESP frames over IPv6 on C's link"
$HELPER esp "$WORK/peers-b.pcap" --frames 26 \
  --uat "$($HELPER uat examples/tunnel/peers-a.toml esp-ab)" \
  --uat "$($HELPER uat examples/tunnel/peers-a.toml esp-ba)" || fail "peers: tshark on B's link"
$HELPER esp "$WORK/peers-c.pcap" --frames 26 \
  --uat "$($HELPER uat examples/tunnel/peers-a.toml esp-ac)" \
  --uat "$($HELPER uat examples/tunnel/peers-a.toml esp-ca)" || fail "peers: tshark on C's link"
# iperf3 to B and C at the same time.
for l in "$NSB 10.100.2.1 5203" "$NSC 10.100.3.1 5204"; do
  set -- $l
  ip netns exec "$1" timeout 30 iperf3 -s -1 -B "$2" -p "$3" >"$WORK/iperf-server-$3.log" 2>&1 &
  BG+=("$!")
  wait_tcp_listen 10 "the iperf3 server on $2" "$1" "$3"
done
timeout 30 ip netns exec "$NSA" iperf3 -c 10.100.2.1 -p 5203 -t 2 -b "${IPERF_RATE:-200M}" -J >"$WORK/iperf-b.json" 2>&1 &
IB=$!
timeout 30 ip netns exec "$NSA" iperf3 -c 10.100.3.1 -p 5204 -t 2 -b "${IPERF_RATE:-200M}" -J >"$WORK/iperf-c.json" 2>&1 &
IC=$!
rc=0
wait $IB || rc=$?
wait $IC || rc=$((rc + $?))
[ $rc -eq 0 ] || fail "peers: iperf3 to B and C at the same time failed: $(tail -n 3 "$WORK"/iperf-[bc].json)"
python3 - "$WORK/iperf-b.json" "$WORK/iperf-c.json" <<'PY' || fail "peers: iperf3 moved too little"
import json, sys
ok = True
for name, path in zip("BC", sys.argv[1:]):
    r = json.load(open(path))["end"]["sum_received"]
    print(f"netns-test: peers: iperf3 to {name}: {r['bytes'] / 1e6:.1f} MB ({r['bits_per_second'] / 1e6:.0f} Mbit/s)")
    ok &= r["bytes"] > 1_000_000
sys.exit(0 if ok else 1)
PY
DROPS_A=$(udpdrops "$NSA")
DROPS_B=$(udpdrops "$NSB")
DROPS_C=$(udpdrops "$NSC")
stop_pid "$DA" "tunneld (peers) in $NSA"
stop_pid "$DB" "tunneld (peers) in $NSB"
stop_pid "$DC" "tunneld (peers) in $NSC"
for h in a b c; do
  if grep -E ' (WARN|ERROR) ' "$WORK/peers-$h.log" >/dev/null; then
    fail "tunneld (peers, host $h) logged warnings: $(grep -E ' (WARN|ERROR) ' "$WORK/peers-$h.log" | head -3)"
  fi
  grep -q 'tunneld: stopped' "$WORK/peers-$h.log" || fail "tunneld (peers, host $h) did not log its clean stop"
done
log "peers: UDP socket queue drops: A $DROPS_A, B $DROPS_B, C $DROPS_C"
peers_expect "final counters agree" \
  "A.sas.esp_ab.outbound.packets - A.daemon.underlay_send_errors >= B.sas.esp_ab.inbound.packets >= A.sas.esp_ab.outbound.packets - A.daemon.underlay_send_errors - $DROPS_B" \
  "A.sas.esp_ac.outbound.packets - A.daemon.underlay_send_errors >= C.sas.esp_ac.inbound.packets >= A.sas.esp_ac.outbound.packets - A.daemon.underlay_send_errors - $DROPS_C" \
  "A.sas.esp_ab.outbound.packets + A.sas.esp_ac.outbound.packets - A.daemon.underlay_send_errors == B.sas.esp_ab.inbound.packets + C.sas.esp_ac.inbound.packets + $DROPS_B + $DROPS_C" \
  "B.sas.esp_ba.outbound.packets + C.sas.esp_ca.outbound.packets - B.daemon.underlay_send_errors - C.daemon.underlay_send_errors == A.sas.esp_ba.inbound.packets + A.sas.esp_ca.inbound.packets + $DROPS_A" \
  "A.daemon.underlay_tx_packets == A.sas.esp_ab.outbound.packets + A.sas.esp_ac.outbound.packets - A.daemon.underlay_send_errors" \
  "sum(A.engine.inbound_drops.values()) + sum(B.engine.inbound_drops.values()) + sum(C.engine.inbound_drops.values()) == 0" \
  "A.sas.esp_ab.outbound.packets > 1000" "A.sas.esp_ac.outbound.packets > 1000"
ip netns del "$NSC"
ip -n "$NSA" link del "$PA" 2>/dev/null || true
fi

# ---- nooffload: the udp stage's traffic with TUN offloads off --------------------------------
if want nooffload; then
mkdir -p "$WORK/nooffload"
# The udp pair with ESP in UDP named on the SAs (`encap = { type = "espinudp", ... }`, the
# TOML form of `encap espinudp 4500 4500 0.0.0.0`) instead of in [tunnel].
for h in a b; do
  sed -e '/^encap = "espinudp"/d' \
    -e 's/^proto = "esp"$/proto = "esp"\nencap = { type = "espinudp", sport = 4500, dport = 4500 }/' \
    "examples/tunnel/udp-$h.toml" >"$WORK/nooffload/nooffload-$h.toml"
  [ "$(grep -c '^encap = { type = "espinudp"' "$WORK/nooffload/nooffload-$h.toml")" = 2 ] ||
    fail "nooffload: could not move encap onto the SAs of udp-$h.toml"
done
TUNNELD_ARGS=(--no-offload)
start nooffload "$WORK/nooffload" b-first
TUNNELD_ARGS=()
for h in a b; do
  grep -q 'offloads off' "$WORK/nooffload-$h.log" || fail "nooffload: tunneld ($h) did not run with offloads off"
  grep -q 'ESP in UDP 4500 -> 4500' "$WORK/nooffload-$h.log" ||
    fail "nooffload: tunneld ($h) did not take ESP in UDP from its SAs"
done
[ "$(ip -n "$NSA" -o link show ipsec0 | grep -o 'mtu [0-9]*')" = "mtu 1438" ] || fail "nooffload: TUN MTU is not 1438"
cap_start "$WORK/nooffload.pcap" "$VB" "udp port 4500"
ping_ok "$NSA" 10.100.0.2 3
ping_ok "$NSB" fd00:100::1 3
ping_ok "$NSA" 10.100.0.2 2 -s 1410 -M do
cap_stop
expect "ESP in UDP without offloads: pings counted by both daemons" \
  "A.sas.esp_ab.outbound.packets == B.sas.esp_ab.inbound.packets == 8" \
  "B.sas.esp_ba.outbound.packets == A.sas.esp_ba.inbound.packets == 8" \
  "A.daemon.tun_gso_packets + A.daemon.tun_gro_packets + B.daemon.tun_gso_packets + B.daemon.tun_gro_packets == 0" \
  "A.daemon.engine_in_drops == B.daemon.engine_in_drops == 0"
$HELPER esp "$WORK/nooffload.pcap" --frames 16 \
  --uat "$($HELPER uat examples/tunnel/udp-a.toml esp-ab)" \
  --uat "$($HELPER uat examples/tunnel/udp-a.toml esp-ba)" || fail "nooffload: tshark did not decrypt every frame"
python3 scripts/lib/scapy_udp_check.py decrypt "$WORK/nooffload.pcap" examples/tunnel/udp-a.toml --frames 16 ||
  fail "nooffload: scapy did not decrypt the captured ESP-in-UDP frames"
iperf 10.100.0.2 2
DROPS_A=$(udpdrops "$NSA")
DROPS_B=$(udpdrops "$NSB")
stop
log "nooffload: UDP socket queue drops: A $DROPS_A, B $DROPS_B"
expect "final counters agree, no super-packets either way" \
  "A.sas.esp_ab.outbound.packets - A.daemon.underlay_send_errors == B.sas.esp_ab.inbound.packets + $DROPS_B" \
  "B.sas.esp_ba.outbound.packets - B.daemon.underlay_send_errors == A.sas.esp_ba.inbound.packets + $DROPS_A" \
  "A.daemon.tun_gso_packets + A.daemon.tun_gro_packets + B.daemon.tun_gso_packets + B.daemon.tun_gro_packets == 0" \
  "sum(A.engine.inbound_drops.values()) + sum(B.engine.inbound_drops.values()) == 0" \
  "A.sas.esp_ab.outbound.packets > 1000"
fi

# ---- user (issue #21): tunneld drops root once everything is open ---------------------------
if want user; then
V=user
mkdir -p "$WORK/user"
chown nobody "$WORK/user"
chmod 711 "$WORK"
SA=$WORK/user/a.json
SB=$WORK/user/b.json
CTL=${IPSEC_BIN:-$(dirname "$BIN")/ipsec}
[ -x "$CTL" ] || cargo build --release --locked --quiet --bin ipsec
ip netns exec "$NSB" "$BIN" --config examples/tunnel/udp-b.toml --user nobody --stats "$SB" 2>"$WORK/user-b.log" &
DB=$!
BG+=("$DB")
# A never has a privilege: the administrator made a persistent TUN device for nobody (with
# its MTU, up), and tunneld starts as nobody with no capability at all.
ip netns exec "$NSA" ip tuntap add dev ipsec0 mode tun user nobody multi_queue
ip -n "$NSA" link set ipsec0 mtu 1438 up
ip netns exec "$NSA" setpriv --reuid=nobody --regid=nogroup --clear-groups --inh-caps=-all --no-new-privs \
  "$BIN" --config examples/tunnel/udp-a.toml --stats "$SA" --control "$WORK/user/a.sock" \
  --control-group nogroup --metrics 127.0.0.1:9720 2>"$WORK/user-a.log" &
DA=$!
BG+=("$DA")
wait_for 10 "tunneld (user) in $NSA to write its stats" test -s "$SA"
wait_for 10 "tunneld (user) in $NSB to write its stats" test -s "$SB"
ip -n "$NSA" addr add 10.100.0.1/24 dev ipsec0
ip -n "$NSB" addr add 10.100.0.2/24 dev ipsec0
for pid in "$DA" "$DB"; do
  st=/proc/$pid/status
  grep -qE '^Uid:\s+65534\s+65534\s+65534\s+65534$' "$st" || fail "user: tunneld $pid is not uid 65534: $(grep ^Uid "$st")"
  grep -qE '^CapEff:\s+0000000000000000$' "$st" || fail "user: tunneld $pid keeps capabilities: $(grep ^CapEff "$st")"
  grep -qE '^CapPrm:\s+0000000000000000$' "$st" || fail "user: tunneld $pid keeps permitted capabilities"
  grep -qE '^NoNewPrivs:\s+1$' "$st" || fail "user: tunneld $pid lacks NoNewPrivs"
done
[ "$(stat -c %U "$SA")" = nobody ] || fail "user: the stats file is not written by nobody"
ping_ok "$NSA" 10.100.0.2 3
grep -q '^sa: esp-ab' <<<"$("$CTL" show --control "$WORK/user/a.sock")" || fail "user: ipsec show over the control socket"
# --control-group nogroup: the socket is group nogroup, mode 0660; a non-root member may use
# it, a non-member is refused.
[ "$(stat -c '%a %G' "$WORK/user/a.sock")" = "660 nogroup" ] ||
  fail "user: the control socket is $(stat -c '%a %G' "$WORK/user/a.sock"), not 660 nogroup"
grep -q '^sa: esp-ab' <<<"$(setpriv --reuid=1 --regid=nogroup --clear-groups "$CTL" show --control "$WORK/user/a.sock")" ||
  fail "user: a member of the control group was refused"
if setpriv --reuid=1 --regid=1 --clear-groups "$CTL" show --control "$WORK/user/a.sock" >/dev/null 2>&1; then
  fail "user: a user outside the control group was served"
fi
# The metrics endpoint (tunneld --metrics): the counters over HTTP, accepted by promtool.
ip netns exec "$NSA" python3 -c 'import urllib.request,sys; sys.stdout.write(urllib.request.urlopen("http://127.0.0.1:9720/metrics", timeout=5).read().decode())' \
  >"$WORK/user-metrics.txt" || fail "user: GET http://127.0.0.1:9720/metrics"
grep -qE '^ipsec_sa_packets_total\{sa="esp-ab",spi="0x3001",proto="esp",direction="out"\} 3$' "$WORK/user-metrics.txt" ||
  fail "user: /metrics lacks esp-ab's 3 outbound packets: $(grep -m3 ipsec_sa_packets "$WORK/user-metrics.txt")"
if command -v promtool >/dev/null; then
  promtool check metrics <"$WORK/user-metrics.txt" || fail "user: promtool check metrics refused /metrics"
fi
kill -HUP "$DA"
wait_for 5 "the reload as nobody" grep -q 'config.reloaded' "$WORK/user-a.log"
ping_ok "$NSA" 10.100.0.2 2
expect "pings counted after dropping root" "A.sas.esp_ab.outbound.packets == B.sas.esp_ab.inbound.packets == 5"
stop
ip netns exec "$NSA" ip tuntap del dev ipsec0 mode tun multi_queue 2>/dev/null || true
log "user: tunneld ran as nobody with no capabilities (B dropped them, A never had any); traffic, control socket and reload worked"
fi

# ---- nat-clients: two road warriors behind one NAT address (issue #31 defect 5) ----------
# Two tunneld IKE initiators, A and B, in namespaces of their own behind one NAT namespace
# (nftables masquerade: both leave as 10.96.0.254, B's ports translated since A holds 500 and
# 4500), to a tunneld responder R with `remote_addrs = %any`. Each client gets its own child
# SA (R narrows 10.101.0.0/16 to the client's /32). After B is up R pings A, then both
# clients ping R and R pings both clients, all at once; every echo must be answered: R's
# packets for A go to A's translated port, B's to B's (before the fix, B's handshake moved the
# one endpoint of 10.96.0.254 to B's port, and R's pings of A all went to B: this stage fails
# with the old tunneld). R's stats list one endpoint per client, at two ports of the NAT's
# address.
if want nat-clients; then
V=nat-clients
NR=tnl-r-$ID NN=tnl-m-$ID NCA=tnl-ca-$ID NCB=tnl-cb-$ID
netns_add "$NR" "$NN" "$NCA" "$NCB"
ip link add tnrm$ID netns "$NR" type veth peer name tnmr$ID netns "$NN"
ip link add tnam$ID netns "$NCA" type veth peer name tnma$ID netns "$NN"
ip link add tnbm$ID netns "$NCB" type veth peer name tnmb$ID netns "$NN"
ip -n "$NR" addr add 10.96.0.1/24 dev tnrm$ID
ip -n "$NN" addr add 10.96.0.254/24 dev tnmr$ID
ip -n "$NN" addr add 10.95.1.254/24 dev tnma$ID
ip -n "$NN" addr add 10.95.2.254/24 dev tnmb$ID
ip -n "$NCA" addr add 10.95.1.2/24 dev tnam$ID
ip -n "$NCB" addr add 10.95.2.2/24 dev tnbm$ID
for l in "$NR tnrm$ID" "$NN tnmr$ID" "$NN tnma$ID" "$NN tnmb$ID" "$NCA tnam$ID" "$NCB tnbm$ID"; do
  ip -n ${l% *} link set ${l#* } up
done
for ns in "$NR" "$NN" "$NCA" "$NCB"; do ip -n "$ns" link set lo up; done
ip -n "$NCA" route add default via 10.95.1.254
ip -n "$NCB" route add default via 10.95.2.254
ip netns exec "$NN" sysctl -q -w net.ipv4.ip_forward=1
ip netns exec "$NN" nft -f - <<EOF || fail "nat-clients: nft could not load the NAT rules"
table ip nat {
  chain post { type nat hook postrouting priority srcnat; policy accept;
    oifname "tnmr$ID" ip saddr 10.95.0.0/16 masquerade
  }
}
EOF
D=$WORK/natc
mkdir -p "$D"
# One key for the gateway's identity, whoever the client is (R names no remote identity);
# each client has an identity of its own (one identity twice: R keeps only the newer IKE SA).
# the shared writer (scripts/lib/tunneld-conf.sh): DIR/tunneld.toml and DIR/secrets.toml
natc_conf() { # NAME LOCAL REMOTE LOCAL_ID REMOTE_ID(empty: any) LOCAL_TS REMOTE_TS START
  td_conf "$D/$1" name=rw local="$2" remote="$3" local_id="$4" remote_id="$5" psk="nat-clients test key" \
    local_ts="$6" remote_ts="$7" start="$8" ike= esp= dpd=
}
natc_conf r 10.96.0.1 %any gw.natc.test "" 10.100.0.0/24 10.101.0.0/16 none
natc_conf a 10.95.1.2 10.96.0.1 rw-a.natc.test gw.natc.test 10.101.1.1/32 10.100.0.0/24 start
natc_conf b 10.95.2.2 10.96.0.1 rw-b.natc.test gw.natc.test 10.101.2.1/32 10.100.0.0/24 start
NATC_PIDS=()
natc_start() { # NAME NAMESPACE INNER_ADDR ROUTE
  ip netns exec "$2" "$BIN" --config "$D/$1/tunneld.toml" --stats "$D/$1.json" 2>"$WORK/$V-$1.log" &
  BG+=("$!")
  NATC_PIDS+=("$!")
  wait_for 10 "tunneld ($V $1) to write its stats" test -s "$D/$1.json"
  ip -n "$2" addr add "$3" dev ipsec0
  ip -n "$2" route add "$4" dev ipsec0 src "${3%/*}"
}
natc_start r "$NR" 10.100.0.1/24 10.101.0.0/16
natc_start a "$NCA" 10.101.1.1/32 10.100.0.0/24
wait_for 15 "A's child SA (one ping through)" ip netns exec "$NCA" ping -q -n -c 1 -W 1 10.100.0.1
natc_start b "$NCB" 10.101.2.1/32 10.100.0.0/24
wait_for 15 "B's child SA (one ping through)" ip netns exec "$NCB" ping -q -n -c 1 -W 1 10.100.0.1
# R to A first, after B's handshake and ping (before the fix the one endpoint of the NAT's
# address was B's then, and every echo request for A went to B).
ping_ok "$NR" 10.101.1.1 5
# Then all at once: each client pings R and R pings each client; every echo answered.
natc_ping() { # NAMESPACE DST OUT
  ip netns exec "$1" ping -q -n -c 20 -i 0.1 -W 2 -w 15 "$2" >"$3" 2>&1 || true
}
natc_ping "$NCA" 10.100.0.1 "$WORK/natc-a.ping" &
P1=$!
natc_ping "$NCB" 10.100.0.1 "$WORK/natc-b.ping" &
P2=$!
natc_ping "$NR" 10.101.1.1 "$WORK/natc-ra.ping" &
P3=$!
natc_ping "$NR" 10.101.2.1 "$WORK/natc-rb.ping" &
P4=$!
wait "$P1" "$P2" "$P3" "$P4"
for p in a b ra rb; do
  grep -q "20 packets transmitted, 20 received" "$WORK/natc-$p.ping" ||
    fail "nat-clients: pings ($p: a, b from the clients; ra, rb from R) through the shared NAT address: $(grep transmitted "$WORK/natc-$p.ping")"
done
# R's stats: one endpoint per client, both at the NAT's address, at two ports.
cat >"$D/endpoints.py" <<'EOF'
import json, sys
peers = [p for p in json.load(open(sys.argv[1])).get("peers", []) if p.get("peer") == "10.96.0.254"]
ports = {p.get("endpoint", "").rsplit(":", 1)[-1] for p in peers}
sys.exit(0 if len(peers) == 2 and len(ports) == 2 else 1)
EOF
wait_for 5 "R's stats to list two endpoints at the NAT's address" python3 "$D/endpoints.py" "$D/r.json"
log "nat-clients: R's endpoints: $(python3 -c 'import json, sys; print(", ".join(p["endpoint"] for p in json.load(open(sys.argv[1]))["peers"]))' "$D/r.json")"
for i in 2 1 0; do
  stop_pid "${NATC_PIDS[$i]}" "tunneld ($V ${i})"
done
for h in r a b; do
  if grep -E ' (WARN|ERROR) ' "$WORK/$V-$h.log" | grep -v 'EVERY IKE AND ESP KEY' >/dev/null; then
    fail "tunneld ($V, $h) logged warnings: $(grep -E ' (WARN|ERROR) ' "$WORK/$V-$h.log" | head -3)"
  fi
done
log "nat-clients: two IKE clients behind one NAT address, pings both ways at once, every one answered at its own port"
fi

# ---- IKEv2 between two tunnelds, no NAT, no `encap` (issue #31 defect 7) --------------
# Mirrored configs as in docs/ike.md's site-to-site example: before the fix IKE stayed on
# port 500 (no NAT seen), the child's ESP in UDP followed it, and every sealed packet went
# from 4500 to the peer's port 500, where the IKE socket dropped it: the child was up and
# carried nothing.
if want ike; then
V=ike
D=$WORK/ike
mkdir -p "$D"
ike_conf() { # NAME LOCAL REMOTE LOCAL_ID REMOTE_ID LOCAL_TS REMOTE_TS START
  td_conf "$D/$1" name=site local="$2" remote="$3" local_id="$4" remote_id="$5" psk="ike stage test key" \
    ike=aes128gcm16-prfsha256-x25519 esp= encap=no dpd= local_ts="$6" remote_ts="$7" start="$8"
}
ike_conf a $A4 $B4 a.ike.test b.ike.test 10.100.0.1/32 10.100.0.2/32 start
ike_conf b $B4 $A4 b.ike.test a.ike.test 10.100.0.2/32 10.100.0.1/32 none
IKE_PIDS=()
for h in b a; do
  ns=$NSA
  [ $h = b ] && ns=$NSB
  ip netns exec "$ns" "$BIN" --config "$D/$h/tunneld.toml" --stats "$D/$h.json" 2>"$WORK/$V-$h.log" &
  BG+=("$!")
  IKE_PIDS+=("$!")
  wait_for 10 "tunneld ($V $h) to write its stats" test -s "$D/$h.json"
done
ip -n "$NSA" addr add 10.100.0.1/24 dev ipsec0
ip -n "$NSB" addr add 10.100.0.2/24 dev ipsec0
cap_start "$WORK/ike.pcap" "$VB" "udp"
wait_for 15 "the IKE child SA (one ping through)" ip netns exec "$NSA" ping -q -n -c 1 -W 1 10.100.0.2
ping_ok "$NSA" 10.100.0.2 10
ping_ok "$NSB" 10.100.0.1 10
cap_stop
# Every datagram after IKE_SA_INIT, ESP in UDP included, between the NAT-T ports (port 500
# only for IKE_SA_INIT, 500 -> 500, if the capture saw it).
udp_ports=$(tshark -r "$WORK/ike.pcap" -T fields -e udp.srcport -e udp.dstport 2>/dev/null | sort -u | tr '\t\n' ': ')
[[ " $udp_ports" == *" 4500:4500 "* ]] || fail "ike: no ESP in UDP 4500 -> 4500 captured (ports: $udp_ports)"
[ -z "$(echo "$udp_ports" | tr ' ' '\n' | grep -v -x -e '4500:4500' -e '500:500' -e '')" ] ||
  fail "ike: UDP between ports $udp_ports (want 4500:4500, and 500:500 for IKE_SA_INIT)"
for i in 1 0; do
  stop_pid "${IKE_PIDS[$i]}" "tunneld ($V ${i})"
done
for h in a b; do
  if grep -E ' (WARN|ERROR) ' "$WORK/$V-$h.log" >/dev/null; then
    fail "tunneld ($V, $h) logged warnings: $(grep -E ' (WARN|ERROR) ' "$WORK/$V-$h.log" | head -3)"
  fi
done
log "ike: two tunnelds over IKEv2 without a NAT or encap: pings both ways through the child, ESP in UDP 4500 -> 4500"
fi

log "all checks passed: ${RAN[*]} ($((SECONDS - START)) s)"
