#!/usr/bin/env bash
# Throughput against the child SA's rekey interval in bytes: a redo of Shaikh & Al-Khayatt,
# "A Performance Study of IPSec Protocol", Table 6 (their figures:
# /work/shared/studies/key-update-interval.csv, key update interval in KB against kbit/s), with
# tunneld against tunneld (t-t) and tunneld against strongSwan's charon (t-s, kernel-libipsec),
# in the namespaces of scripts/ci/ike-lifecycle.sh (lca / lcn / lcb, scripts/lib/ike-lifecycle.sh).
#
# For each peer pair, each interval (INTERVALS, MB: default "10 50 100 200 never") and each
# repetition (REPS, default 3): fresh namespaces and daemons, the child rekeyed every N MB
# (tunneld: `rekey_bytes = N` in [[connection.children]], no rekey_time; charon in t-s:
# `rekey_bytes = N` in swanctl.conf, rekey_time 0), tunneld in lca initiates, then one iperf3
# TCP transfer from 10.100.1.1 to 10.100.2.1, the same size for every interval of a pair
# (TRANSFER_MB_T_T, default 2000; TRANSFER_MB_T_S, default 400; TRANSFER_MB sets both),
# bounded by TIMEOUT (default 240 s). Counted per run: seconds, goodput (iperf3's
# receiver), TCP retransmits (iperf3's sender: the packets lost in the tunnel), child rekeys
# (tunneld's monitor: child.up after the first; charon's log: CREATE_CHILD_SA rekeys either
# way, scripts/lib/ike-lifecycle.sh's sw_rekeys). A run with an interval must see at least
# floor(transfer MB / N) - 1 rekeys, a "never" run none: otherwise the cell is marked
# `no-rekey` (or `unexpected-rekey`) and the script fails at the end (until tunneld has
# CREATE_CHILD_SA, only the never column can pass).
#
# Output in OUT (default out/rekey-interval): runs.csv (one row per run), summary.csv (medians
# per cell), summary.md (a table with the paper's figures), rekey-interval.svg
# (scripts/studies/rekey_interval_plot.py: no gnuplot or matplotlib here).
#
#   sudo bash scripts/studies/rekey-interval-study.sh                  # both pairs, ~18 min
#   sudo bash scripts/studies/rekey-interval-study.sh t-t              # one pair
#   INTERVALS="never" REPS=1 sudo -E bash scripts/studies/rekey-interval-study.sh   # what works today
#   sudo bash scripts/studies/rekey-interval-study.sh --ci             # t-t 500 MB, t-s 100 MB, 1 rep, "10 50 never"
#   bash scripts/studies/rekey-interval-study.sh --if-possible         # no root / netns: say why, exit 0
#
# Run measurements under `flock /tmp/ipsec-bench.lock` on a shared machine.
set -euo pipefail
cd "$(dirname "$0")/../.."
START=$SECONDS
NETNS_TAG=rekey-interval
. scripts/lib/netns.sh
. scripts/lib/strongswan.sh
. scripts/lib/ike-lifecycle.sh
ALL_PAIRS="t-t t-s"
parse_stages "$ALL_PAIRS" "$@" # also --ci (CI=1)
# The transfer is the same for every interval of a pair; tunneld <-> tunneld moves about 2.6
# Gbit/s here and tunneld <-> charon (libipsec) about 60 Mbit/s, so each pair has its own size
# (TRANSFER_MB sets both): t-t 2000 MB (~6 s), t-s 400 MB (~55 s).
if [ $CI = 1 ]; then
  INTERVALS=${INTERVALS:-"10 50 never"}
  TRANSFER_MB_T_T=${TRANSFER_MB_T_T:-${TRANSFER_MB:-500}}
  TRANSFER_MB_T_S=${TRANSFER_MB_T_S:-${TRANSFER_MB:-100}}
  REPS=${REPS:-1}
else
  INTERVALS=${INTERVALS:-"10 50 100 200 never"}
  TRANSFER_MB_T_T=${TRANSFER_MB_T_T:-${TRANSFER_MB:-2000}}
  TRANSFER_MB_T_S=${TRANSFER_MB_T_S:-${TRANSFER_MB:-400}}
  REPS=${REPS:-3}
fi
TIMEOUT=${TIMEOUT:-240}
PAPER=${PAPER:-/work/shared/studies/key-update-interval.csv}
OUT=${OUT:-out/rekey-interval}
need_netns "network namespaces, tunneld, charon"
swan_install
command -v iperf3 >/dev/null || apt_install iperf3
locate_tunneld --bin ipsec
IPSEC=$(dirname "$BIN")/ipsec
[ -z "${TUNNELD_BIN:-}" ] || IPSEC=${IPSEC_BIN:-$IPSEC}
[ -x "$IPSEC" ] || fail "no ipsec binary at $IPSEC"
"$BIN" --help 2>&1 | grep -q -- '--keylog' || cannot "this tunneld has no IKE (no --keylog option)"
WORK=$(mktemp -d /tmp/rekey-interval.XXXXXX)
BAD=0
trap 'rc=$?; [ $rc -ne 0 ] || [ $BAD = 0 ] || rc=1; swan_stop_all; cleanup_all $rc 5' EXIT
trap 'fail "interrupted"' INT TERM
mkdir -p "$OUT"
RUNS=$OUT/runs.csv
echo "peer,interval_mb,rep,transfer_bytes,seconds,mbps,retransmits,rekeys_tunneld,rekeys_charon,expected_rekeys,status" >"$RUNS"

# one_run PEER MB REP: one transfer; appends to RUNS.
one_run() {
  local peer=$1 mb=$2 rep=$3 psk="ri-$RANDOM-$RANDOM" TRANSFER_MB=$TRANSFER_MB_T_T
  [ "$peer" = t-t ] || TRANSFER_MB=$TRANSFER_MB_T_S
  local bytes=$((TRANSFER_MB * 1000000))
  CASE=$peer-$mb-$rep
  CD=$WORK/$CASE
  mkdir -p "$CD"
  local rb=() sb=("rekey=0")
  if [ "$mb" != never ]; then
    rb=("rekey_bytes=$((mb * 1000000))")
    sb+=("rekey_bytes=$((mb * 1000000))")
  fi
  topo_up
  if [ "$peer" = t-s ]; then
    swan_instance "$CD/b"
    swan_site_conf "$CD/b" local=$B_NET remote=$A_NET local_id=$B_ID remote_id=$A_ID \
      local_ts=10.100.2.0/24 remote_ts=10.100.1.0/24 psk="$psk" ike=$IKE_PROP esp=$ESP_PROP "${sb[@]}"
    swan_start lcb "$CD/b"
    swan_load "$CD/b"
  else
    td_conf "$CD/b" local=$B_NET remote=$A_NET local_id=$B_ID remote_id=$A_ID \
      local_ts=10.100.2.0/24 remote_ts=10.100.1.0/24 psk="$psk" ${rb[@]+"${rb[@]}"}
    td_start lcb "$CD/b" $A_IN
  fi
  td_conf "$CD/a" local=$A_NET remote=$B_NET local_id=$A_ID remote_id=$B_ID \
    local_ts=10.100.1.0/24 remote_ts=10.100.2.0/24 psk="$psk" ${rb[@]+"${rb[@]}"}
  td_start lca "$CD/a" $B_IN
  td_ctl "$CD/a" ike initiate gw >"$CD/initiate.out" 2>&1 || fail "$CASE: ipsec ike initiate failed: $(cat "$CD/initiate.out")"
  wait_for 10 "$CASE: the child up" bash -c "ip netns exec lca ping -c 1 -W 1 -I $A_IN $B_IN"
  ip netns exec lcb timeout $((TIMEOUT + 10)) iperf3 -s -1 -B $B_IN -p 5201 >"$CD/iperf-server.log" 2>&1 &
  local srv=$!
  BG+=("$srv")
  wait_tcp_listen 10 "$CASE: the iperf3 server" lcb 5201
  local rc=0
  timeout $TIMEOUT ip netns exec lca iperf3 -c $B_IN -B $A_IN -p 5201 -n $bytes -J >"$CD/iperf.json" 2>&1 || rc=$?
  stop_pids "$srv"
  local secs mbps retr
  if [ $rc -eq 0 ]; then
    read -r secs mbps retr < <(python3 -c '
import json, sys
e = json.load(open(sys.argv[1]))["end"]
r, s = e["sum_received"], e["sum_sent"]
print("%.2f %.1f %d" % (r["seconds"], r["bits_per_second"] / 1e6, s.get("retransmits", 0)))' "$CD/iperf.json")
  else
    secs=; mbps=; retr=
  fi
  local rt rs=0 r
  read -r rt _ <<<"$(td_rekeys "$CD/a")"
  if [ "$peer" = t-s ]; then
    read -r -a r <<<"$(sw_rekeys "$CD/b/charon.log")"
    rs=$((r[0] + r[2]))
  fi
  local expect=0 status=ok n
  n=$rt
  [ "$peer" = t-t ] || [ "$rs" -le "$n" ] || n=$rs
  if [ "$mb" != never ]; then
    expect=$((TRANSFER_MB / mb - 1))
    [ $expect -ge 1 ] || expect=1
    [ "$n" -ge $expect ] || status=no-rekey
  else
    [ "$n" = 0 ] || status=unexpected-rekey
  fi
  [ $rc -eq 0 ] || status="iperf3-failed($rc)"
  for s in a b; do
    if [ -n "${TD_PID[$CD/$s]:-}" ]; then td_stop "$CD/$s"; fi
  done
  [ "$peer" != t-s ] || swan_stop "$CD/b"
  echo "$peer,$mb,$rep,$bytes,$secs,$mbps,$retr,$rt,$rs,$expect,$status" >>"$RUNS"
  log "$CASE: ${secs:-?} s, ${mbps:-?} Mbit/s, $retr retransmits, rekeys tunneld $rt charon $rs (expected >= $expect): $status"
  [ "$status" != ok ] || [ "${REKEY_STUDY_KEEP:-0}" = 1 ] || rm -rf "$CD"
}

for peer in $ALL_PAIRS; do
  want "$peer" || continue
  for mb in $INTERVALS; do
    for rep in $(seq "$REPS"); do
      # each run in its own process: a failure (say, a tunneld that refuses rekey_bytes) ends
      # that run only, its processes are killed, the cell says so
      (
        trap 'swan_stop_all >/dev/null 2>&1; for p in "${BG[@]}"; do kill -KILL "$p" 2>/dev/null || true; done' EXIT
        one_run "$peer" "$mb" "$rep"
      ) &
      rc=0
      wait $! || rc=$?
      for p in $(ip netns pids lca 2>/dev/null) $(ip netns pids lcb 2>/dev/null); do kill -KILL "$p" 2>/dev/null || true; done
      if ! grep -q "^$peer,$mb,$rep," "$RUNS"; then
        echo "$peer,$mb,$rep,,,,,,,,failed($rc)" >>"$RUNS"
        log "$peer-$mb-$rep: failed (files in $WORK/$peer-$mb-$rep)"
      fi
      grep -q "^$peer,$mb,$rep,.*,ok$" "$RUNS" || BAD=1
    done
  done
done
for ns in lca lcn lcb; do ip netns del "$ns" 2>/dev/null || true; done

# medians, the table, the plot
python3 - "$RUNS" "$OUT/summary.csv" "$OUT/summary.md" "$PAPER" "t-t $TRANSFER_MB_T_T MB, t-s $TRANSFER_MB_T_S" "$BIN ($(date -u -r "$BIN" +%Y-%m-%dT%H:%MZ); scripts at $(git rev-parse --short HEAD 2>/dev/null || echo '?'))" <<'EOF'
import csv, statistics, sys
runs, summ, md, paper, transfer, rev = sys.argv[1:7]
rows = list(csv.DictReader(open(runs)))
cells = {}
for r in rows:
    cells.setdefault((r["peer"], r["interval_mb"]), []).append(r)
med = lambda xs: statistics.median(xs) if xs else float("nan")
out = []
for (peer, mb), rs in cells.items():
    ok = [r for r in rs if r["mbps"]]
    out.append({"peer": peer, "interval_mb": mb, "runs": len(rs),
                "median_mbps": f"{med([float(r['mbps']) for r in ok]):.1f}",
                "median_seconds": f"{med([float(r['seconds']) for r in ok]):.2f}",
                "median_rekeys": med([max(int(r["rekeys_tunneld"] or 0), int(r["rekeys_charon"] or 0)) for r in rs]),
                "median_retransmits": med([int(r["retransmits"]) for r in ok]),
                "expected_rekeys": rs[0]["expected_rekeys"],
                "status": ",".join(sorted({r["status"] for r in rs}))})
with open(summ, "w", newline="") as f:
    w = csv.DictWriter(f, fieldnames=list(out[0].keys()) if out else ["peer"])
    w.writeheader()
    w.writerows(out)
ref = {}
try:
    for r in csv.DictReader(open(paper)):
        ref[str(int(float(r["key_update_interval_kb"]) / 1000))] = r["throughput_kbps"]
except OSError:
    pass
with open(md, "w") as f:
    f.write(f"Transfer {transfer} MB per run, medians over the runs of each cell; tunneld {rev}.\n\n")
    f.write("| pair | rekey every (MB) | runs | Mbit/s | s | rekeys (expected >=) | TCP retransmits | status | paper (kbit/s) |\n")
    f.write("| --- | --- | --- | --- | --- | --- | --- | --- | --- |\n")
    for o in out:
        f.write(f"| {o['peer']} | {o['interval_mb']} | {o['runs']} | {o['median_mbps']} | {o['median_seconds']} | "
                f"{o['median_rekeys']} ({o['expected_rekeys']}) | {o['median_retransmits']} | {o['status']} | "
                f"{ref.get(o['interval_mb'], '')} |\n")
print(open(md).read())
EOF
if python3 scripts/studies/rekey_interval_plot.py "$OUT/summary.csv" "$PAPER" "$OUT/rekey-interval.svg" 2>"$WORK/plot.log"; then
  log "plot: $OUT/rekey-interval.svg"
else
  log "plot failed: $(tail -n 3 "$WORK/plot.log")"
fi
log "runs: $RUNS; summary: $OUT/summary.csv, $OUT/summary.md ($((SECONDS - START)) s)"
[ $BAD = 0 ] || fail "some runs did not rekey as configured (or failed): see the status column"
