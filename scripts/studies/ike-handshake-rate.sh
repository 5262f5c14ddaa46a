#!/usr/bin/env bash
# IKEv2 handshake latency and rate against tunneld (issue #39 item 9), in network
# namespaces, as root: tunneld in lcb answers; the load generator (crates/ike/examples/
# ike-load.rs, the project's IKE crate) in lca makes COUNT handshakes one after another
# (IKE_SA_INIT on port 500, IKE_AUTH with a child on 4500, then a Delete of the IKE SA) and
# prints how long each IKE_SA_INIT took to be answered, how long until the child was up, and
# handshakes per second.
#
# Two tunneld binaries in one run, alternated ROUNDS times (before/after side by side):
#   BEFORE_BIN=/tmp/old/tunneld AFTER_BIN=target/release/tunneld sudo -E bash scripts/studies/ike-handshake-rate.sh
#   flock /tmp/ipsec-bench.lock sudo -E bash scripts/studies/ike-handshake-rate.sh     # this tree's tunneld only
#   COUNT=200 ROUNDS=5 MAX_INIT_MS=10 ...                                      # defaults: 100, 3, none
#   bash scripts/studies/ike-handshake-rate.sh --if-possible                           # no root/netns: say why, exit 0
# MAX_INIT_MS=N: fail when the last binary's median IKE_SA_INIT answer took longer than N ms
# (an idle tunneld answers within a millisecond; before the fix it waited up to 50 ms for its
# poll timer). Without BEFORE_BIN only AFTER_BIN (or this tree's release build) runs.
set -euo pipefail
cd "$(dirname "$0")/../.."
NETNS_TAG=ike-handshake-rate
. scripts/lib/netns.sh
. scripts/lib/strongswan.sh
. scripts/lib/ike-lifecycle.sh
TOPO=hr$$ # namespaces hrPIDa, hrPIDn, hrPIDb: beside other runs
parse_stages "run" "$@"
COUNT=${COUNT:-100}
ROUNDS=${ROUNDS:-3}
need_netns "network namespaces, tunneld"
if [ -n "${AFTER_BIN:-}" ]; then TUNNELD_BIN=$AFTER_BIN; fi
locate_tunneld --bin ipsec
AFTER=$BIN
IPSEC=${IPSEC_BIN:-$(dirname "$BIN")/ipsec}
[ -x "$IPSEC" ] || IPSEC=$(release_dir)/ipsec
[ -x "$IPSEC" ] || { cargo build --release --locked --quiet --bin ipsec; IPSEC=$(release_dir)/ipsec; }
cargo build --release --locked --quiet -p ipsec-ike --example ike-load
LOAD=$(release_dir)/examples/ike-load
[ -x "$LOAD" ] || fail "no ike-load at $LOAD"
BINS=()
[ -z "${BEFORE_BIN:-}" ] || BINS+=("before=$BEFORE_BIN")
BINS+=("after=$AFTER")
WORK=$(mktemp -d /tmp/ike-handshake-rate.XXXXXX)
trap 'cleanup_all $? 5' EXIT
trap 'fail "interrupted"' INT TERM
PSK="hr-$RANDOM-$RANDOM-$RANDOM"
topo_up
for r in $(seq 1 "$ROUNDS"); do
  for nb in "${BINS[@]}"; do
    name=${nb%%=*}
    BIN=${nb#*=}
    d=$WORK/$name.$r
    td_conf "$d" local=$B_NET remote=$A_NET local_id=$B_ID remote_id=$A_ID \
      local_ts=10.100.2.0/24 remote_ts=10.100.1.0/24 psk="$PSK"
    td_start "${TOPO}b" "$d" $A_IN
    out=$(timeout 300 ip netns exec "${TOPO}a" "$LOAD" --local $A_NET --remote $B_NET --psk "$PSK" \
      --local-id $A_ID --remote-id $B_ID --local-ts 10.100.1.0/24 --remote-ts 10.100.2.0/24 \
      --count "$COUNT") || fail "$name round $r: the load generator failed: $out"
    td_stop "$d"
    echo "$name $r $out" | tee -a "$WORK/results"
  done
done
python3 - "$WORK/results" "${MAX_INIT_MS:-}" <<'PY'
import json, statistics, sys
rows = {}
for line in open(sys.argv[1]):
    name, r, js = line.split(" ", 2)
    rows.setdefault(name, []).append(json.loads(js))
print(f"{'tunneld':8} {'runs':>4} {'handshakes/s':>13} {'IKE_SA_INIT ms (median of medians)':>36} {'child up ms':>12}")
last = None
for name, rs in rows.items():
    rate = statistics.median(x["per_second"] for x in rs)
    init = statistics.median(x["ike_sa_init_ms"]["median"] for x in rs)
    up = statistics.median(x["child_up_ms"]["median"] for x in rs)
    p90 = statistics.median(x["ike_sa_init_ms"]["p90"] for x in rs)
    print(f"{name:8} {len(rs):>4} {rate:>13.1f} {init:>22.2f} (p90 {p90:.2f}) {up:>12.2f}")
    last = init
if sys.argv[2] and last is not None and last > float(sys.argv[2]):
    print(f"FAIL: the median IKE_SA_INIT answer took {last:.2f} ms > {sys.argv[2]} ms")
    sys.exit(1)
PY
log "done (files in $WORK)"
