#!/usr/bin/env bash
# IKE SA setup time and bytes on the wire with and without ML-KEM (docs/performance.md,
# docs/ike-pq.md), tunneld beside strongSwan 6.1 in the same run, as root:
#
#   pb<PID>a (tunneld)   10.92.1.1 --- 10.92.1.2 \
#                                                  pb<PID>b (charon 6.1, the responder of both)
#   pb<PID>c (charon 6.1) 10.92.2.1 --- 10.92.2.2 /
#
# For each IKE proposal (x25519; x25519 + ke1 ML-KEM-768; ML-KEM-1024 alone; all with
# aes256gcm16-prfsha384), RUNS times in turn: tunneld (A) sets up an IKE SA with its child to
# charon B and deletes it, then charon C does the same to B. dumpcap captures B's links; per IKE
# SA (initiator SPI) tshark gives the time from the first IKE_SA_INIT request to the IKE_AUTH
# response as B's links saw them, and the IKE bytes (UDP payloads of IKE_SA_INIT,
# IKE_INTERMEDIATE and IKE_AUTH, both ways, fragments and retransmissions included) and
# datagrams. Prints the medians (and min-max of the times; and of the IKE_SA_INIT round trip
# alone, "init rtt") per initiator and proposal. Holds
# the machine-wide lock /tmp/ipsec-bench.lock while it measures.
#
#   sudo bash scripts/studies/pq-bench.sh                 # RUNS=10
#   RUNS=20 TUNNELD_BIN=... IPSEC_BIN=... sudo -E bash scripts/studies/pq-bench.sh
set -euo pipefail
cd "$(dirname "$0")/../.."
NETNS_TAG=pq-bench
. scripts/lib/netns.sh
. scripts/lib/strongswan.sh
. scripts/lib/ike-lifecycle.sh
parse_stages "" "$@"
need_netns "network namespaces, charon 6.1, tunneld"
. scripts/lib/pq-chroot.sh
pq_swan_ready
SWAN_LOG="ike=1 chd=1 knl=0 cfg=1 net=1 enc=1 dmn=1 lib=1 job=1"
RUNS=${RUNS:-10}
T=pb$(($$ % 10000000))
A_NET=10.92.1.1
BA_NET=10.92.1.2
C_NET=10.92.2.1
BC_NET=10.92.2.2
TOPO=$T
read -r -a PROPS <<<"${PQ_BENCH_PROPS:-aes256gcm16-prfsha384-x25519 aes256gcm16-prfsha384-x25519-ke1_mlkem768 aes256gcm16-prfsha384-mlkem1024}"
ESP_PROP=aes256gcm16
locate_tunneld --bin ipsec
IPSEC=$(dirname "$BIN")/ipsec
[ -z "${TUNNELD_BIN:-}" ] || IPSEC=${IPSEC_BIN:-$IPSEC}
WORK=$(mktemp -d /tmp/pq-bench.XXXXXX)
trap 'rc=$?; swan_stop_all; rm -rf "${PQ_CHROOT:?}$WORK" 2>/dev/null; [ $rc -ne 0 ] || [ "${PQ_BENCH_KEEP:-0}" = 0 ] || { log "files kept in $WORK"; WORK=; }; cleanup_all $rc 5' EXIT
trap 'fail "interrupted"' INT TERM

topo() {
  local ns
  for ns in "${T}a" "${T}b" "${T}c"; do ip netns del "$ns" 2>/dev/null || true; done
  NETNS=()
  netns_add "${T}a" "${T}b" "${T}c"
  ip link add "${T}a0" netns "${T}a" type veth peer name "${T}ba" netns "${T}b"
  ip link add "${T}c0" netns "${T}c" type veth peer name "${T}bc" netns "${T}b"
  ip -n "${T}a" addr add $A_NET/24 dev "${T}a0"
  ip -n "${T}b" addr add $BA_NET/24 dev "${T}ba"
  ip -n "${T}c" addr add $C_NET/24 dev "${T}c0"
  ip -n "${T}b" addr add $BC_NET/24 dev "${T}bc"
  for ns in "${T}a" "${T}b" "${T}c"; do ip -n "$ns" link set lo up; done
  ip -n "${T}a" link set "${T}a0" up
  ip -n "${T}c" link set "${T}c0" up
  ip -n "${T}b" link set "${T}ba" up
  ip -n "${T}b" link set "${T}bc" up
  ip -n "${T}a" addr add 10.92.11.1/32 dev lo
  ip -n "${T}c" addr add 10.92.13.1/32 dev lo
  ip -n "${T}b" addr add 10.92.12.1/32 dev lo
  ip netns exec "${T}a" ping -c 1 -W 3 -q $BA_NET >/dev/null || fail "A cannot reach B"
  ip netns exec "${T}c" ping -c 1 -W 3 -q $BC_NET >/dev/null || fail "C cannot reach B"
}

# conf_b D PROP: charon B answers A (a.pq.test) and C (c.pq.test).
conf_b() {
  local d=$1 p=$2 x
  {
    echo "connections {"
    for x in a:$A_NET:$BA_NET:10.92.11.1 c:$C_NET:$BC_NET:10.92.13.1; do
      IFS=: read -r n peer me inner <<<"$x"
      cat <<EOF
  from-$n {
    version = 2
    local_addrs = $me
    remote_addrs = $peer
    proposals = $p
    encap = yes
    rekey_time = 0
    local { auth = psk
      id = b.pq.test }
    remote { auth = psk
      id = $n.pq.test }
    children { net { local_ts = 10.92.12.1/32
        remote_ts = $inner/32
        esp_proposals = $ESP_PROP
        rekey_time = 0 } }
  }
EOF
    done
    echo "}"
    echo "secrets { ike-a { id-1 = b.pq.test
    id-2 = a.pq.test
    secret = \"pb-secret-a\" }"
    echo "  ike-c { id-1 = b.pq.test
    id-2 = c.pq.test
    secret = \"pb-secret-c\" } }"
  } >"$d/swanctl/swanctl.conf"
}

# ike_sas PCAP: per initiator SPI "SPI SETUP_SECONDS BYTES DATAGRAMS SRC" (IKE_SA_INIT,
# IKE_INTERMEDIATE, IKE_AUTH), from B's capture.
ike_sas() {
  tshark -n -r "$1" -Y 'isakmp.exchangetype == 34 || isakmp.exchangetype == 35 || isakmp.exchangetype == 43' -T fields -E separator=' ' \
    -e frame.time_epoch -e isakmp.ispi -e isakmp.exchangetype -e isakmp.flags -e udp.length -e ip.src 2>/dev/null |
    python3 -c '
import sys
sas = {}
for l in sys.stdin:
    f = l.split()
    if len(f) < 6:
        continue
    t, spi, ex, flags, ulen, src = float(f[0]), f[1], int(f[2]), int(f[3], 16), int(f[4]), f[5]
    s = sas.setdefault(spi, {"t0": None, "t1": None, "ti": None, "bytes": 0, "n": 0, "src": None})
    resp = flags & 0x20
    if ex == 34 and not resp and (s["t0"] is None or t < s["t0"]):
        s["t0"], s["src"] = t, src
    if ex == 34 and resp and s["ti"] is None:
        s["ti"] = t
    if ex == 35 and resp:
        s["t1"] = t if s["t1"] is None else max(s["t1"], t)
    s["bytes"] += ulen - 8
    s["n"] += 1
for spi, s in sas.items():
    if s["t0"] is not None and s["t1"] is not None:
        print(spi, "%.6f" % (s["t1"] - s["t0"]), s["bytes"], s["n"], s["src"], "%.6f" % ((s["ti"] or s["t0"]) - s["t0"]))
'
}

measure() {
  local p=$1 i out deadline
  local D=$WORK/$p
  mkdir -p "$D/a" "$D/b" "$D/c"
  topo
  # no capture filter: the fragments of an IP-fragmented IKE_SA_INIT (ML-KEM-1024 keys pass
  # 1,500 bytes) carry no UDP header
  ip netns exec "${T}b" dumpcap -q -P -i "${T}ba" -i "${T}bc" -w "$D/b.pcapng" 2>"$D/dumpcap.log" &
  CAP=$!
  BG+=("$CAP")
  swan_wait_capture 10 "$D/b.pcapng"
  swan_instance "$D/b"
  conf_b "$D/b" "$p"
  swan_start "${T}b" "$D/b"
  swan_load "$D/b"
  swan_instance "$D/c"
  swan_site_conf "$D/c" local=$C_NET remote=$BC_NET local_id=c.pq.test remote_id=b.pq.test \
    local_ts=10.92.13.1/32 remote_ts=10.92.12.1/32 psk=pb-secret-c ike="$p" esp=$ESP_PROP encap=yes
  swan_start "${T}c" "$D/c"
  swan_load "$D/c"
  IKE_PROP=$p
  td_conf "$D/a" local=$A_NET remote=$BA_NET local_id=a.pq.test remote_id=b.pq.test \
    local_ts=10.92.11.1/32 remote_ts=10.92.12.1/32 psk=pb-secret-a
  A_IN=10.92.11.1 B_IN=10.92.12.1 td_start "${T}a" "$D/a" 10.92.12.1
  for i in $(seq "$RUNS"); do
    out=$(td_ctl "$D/a" ike initiate gw 2>&1) || fail "tunneld initiate: $out"
    deadline=$((SECONDS + 10))
    until [ "$(td_counts "$D/a" | cut -d' ' -f1-2)" = "1 1" ]; do
      [ $SECONDS -lt $deadline ] || fail "$p run $i: tunneld not up within 10 s"
      sleep 0.05
    done
    td_ctl "$D/a" ike terminate gw >/dev/null 2>&1 || true
    deadline=$((SECONDS + 10))
    until [ "$(td_counts "$D/a" | cut -d' ' -f1)" = 0 ]; do
      [ $SECONDS -lt $deadline ] || fail "$p run $i: tunneld not down within 10 s"
      sleep 0.05
    done
    swan_initiate "$D/c" net
    swan_terminate "$D/c" --ike sw
  done
  td_stop "$D/a"
  swan_stop "$D/c"
  swan_stop "$D/b"
  sleep 0.3
  stop_pids "$CAP"
  ike_sas "$D/b.pcapng" >"$D/sas"
}

summary() {
  python3 - "$WORK" "$RUNS" "${PROPS[@]}" <<'PY'
import statistics, sys
work, runs, props = sys.argv[1], int(sys.argv[2]), sys.argv[3:]
print("%-44s %-9s %4s %10s %15s %9s %9s %5s" % ("proposal", "initiator", "n", "setup ms", "min-max ms", "init rtt", "bytes", "dgrams"))
for p in props:
    rows = [l.split() for l in open(f"{work}/{p}/sas") if l.strip()]
    for who, src in (("tunneld", "10.92.1.1"), ("charon", "10.92.2.1")):
        r = [x for x in rows if x[4] == src]
        if not r:
            print("%-44s %-9s none" % (p, who))
            continue
        t = [float(x[1]) * 1000 for x in r]
        b = [int(x[2]) for x in r]
        n = [int(x[3]) for x in r]
        ti = [float(x[5]) * 1000 for x in r]
        print("%-44s %-9s %4d %10.2f %15s %9.2f %9d %5d" % (p, who, len(r), statistics.median(t),
              "%.2f-%.2f" % (min(t), max(t)), statistics.median(ti), statistics.median(b), statistics.median(n)))
PY
}

log "strongSwan $SWAN_VERSION; $RUNS runs a proposal and initiator; waiting for /tmp/ipsec-bench.lock"
exec 9>/tmp/ipsec-bench.lock
[ "${PQ_BENCH_NOLOCK:-0}" = 1 ] || flock 9
for p in "${PROPS[@]}"; do
  log "---- $p"
  measure "$p"
done
flock -u 9
exec 9>&-
echo
echo "pq-bench: IKE SA setup (first IKE_SA_INIT request to IKE_AUTH response, on the responder's links) and IKE bytes (UDP payloads, both ways), medians of $RUNS; responder: charon $SWAN_VERSION"
summary
