#!/usr/bin/env bash
# The resumable long fuzz run: rotates the cargo-fuzz targets in slices until each has
# GOAL_EXECS executions (10 M) or GOAL_CPU seconds of CPU time (one CPU-hour), across as many
# invocations (sessions) as it takes. Everything it learns lives in a state directory OUTSIDE
# the clone (default /var/tmp/ipsec-fuzz, or $FUZZ_STATE / --state DIR):
#   STATE/<target>/corpus/       the growing corpus (starts from fuzz/corpus/<target> + seeds)
#   STATE/<target>/slices.tsv    one line per finished slice (commit, wall s, CPU ms, execs, cov, ft, exit)
#   STATE/<target>/logs/         libFuzzer's log of each slice
#   STATE/<target>/crashes/      reproducers (crash-*, timeout-*, oom-*)
#   STATE/<target>/CRASHED       present once the target crashed: it is not run again until removed
# Usage:
#   scripts/fuzz/fuzz-long.sh [--budget MIN] [--slice MIN] [--jobs N] [--targets a,b] [--no-build]
#       run slices for at most MIN minutes of wall time (default 60), each slice at most
#       --slice minutes (default 10), N targets at a time (default 1), under nice -n 19;
#       the target furthest from its goal goes next. Ctrl-C / SIGTERM end the slices cleanly
#       (their executions are kept); a session killed hard loses only the CPU time of the
#       slice it was in (its executions are recovered from the log on the next start).
#   scripts/fuzz/fuzz-long.sh --status      the table on stdout
#   scripts/fuzz/fuzz-long.sh --report      the table written into docs/fuzzing.md between markers
#   scripts/fuzz/fuzz-long.sh --merge       every target's grown corpus merged and minimized
#                                      (libFuzzer -merge=1) into fuzz/corpus/<target>/
# Environment: FUZZ_STATE, GOAL_EXECS, GOAL_CPU (seconds).
set -uo pipefail
cd "$(dirname "$0")/../.."
ROOT=$PWD
STATE="${FUZZ_STATE:-/var/tmp/ipsec-fuzz}"
GOAL_EXECS="${GOAL_EXECS:-10000000}"
GOAL_CPU="${GOAL_CPU:-3600}"
BUDGET_MIN=60
SLICE_MIN=10
JOBS=1
BUILD=1
MODE=run
ONLY=""
# The same limits as the CI pass (scripts/fuzz/fuzz.sh).
FUZZ_FLAGS=(-timeout=5 -rss_limit_mb=2048 -max_len=8192)
MAX_FILE=65536   # corpus files larger than this are not committed by --merge

die() { echo "fuzz-long: $*" >&2; exit 2; }
while [ $# -gt 0 ]; do
  case "$1" in
    --budget) BUDGET_MIN="$2"; shift ;;
    --slice) SLICE_MIN="$2"; shift ;;
    --jobs) JOBS="$2"; shift ;;
    --state) STATE="$2"; shift ;;
    --targets) ONLY="${2//,/ }"; shift ;;
    --no-build) BUILD=0 ;;
    --status) MODE=status ;;
    --report) MODE=report ;;
    --merge) MODE=merge ;;
    -h|--help) sed -n '2,/^set -uo/p' "$0" | sed '$d' | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) die "unknown argument $1 (see --help)" ;;
  esac
  shift
done
for n in "$BUDGET_MIN" "$SLICE_MIN" "$JOBS" "$GOAL_EXECS" "$GOAL_CPU"; do
  [[ "$n" =~ ^[0-9]+$ ]] || die "not a whole number: $n"
done

HOST=$(rustc -vV | sed -n 's/^host: //p')
BIN="${FUZZ_BIN_DIR:-$ROOT/fuzz/target/$HOST/release}"   # FUZZ_BIN_DIR: for testing this script
TARGETS=$(cd fuzz && ls fuzz_targets | sed -n 's/\.rs$//p' | sort)
if [ -n "$ONLY" ]; then
  for t in $ONLY; do grep -qx "$t" <<<"$TARGETS" || die "no target $t"; done
  TARGETS=$(printf '%s\n' $ONLY)
fi

commit() {
  local c
  c=$(git rev-parse --short HEAD)
  git diff --quiet HEAD -- crates src fuzz/fuzz_targets fuzz/src Cargo.toml 2>/dev/null || c="$c+"
  echo "$c"
}

# Totals of one target from its slices.tsv: execs cpu_ms cov ft slices first_commit last_commit
totals() {
  local f="$STATE/$1/slices.tsv"
  if [ ! -s "$f" ]; then echo "0 0 0 0 0 - -"; return; fi
  awk -F'\t' '{e+=$5; c+=$4; if ($6!="") cov=$6; if ($7!="") ft=$7; n++; if (first=="") first=$1; last=$1}
    END {printf "%d %d %d %d %d %s %s\n", e, c, cov, ft, n, first, last}' "$f"
}

# Progress toward the goal in per mille (the larger of executions and CPU time), 1000 = done.
progress() {
  local e c
  read -r e c _ < <(totals "$1")
  awk -v e="$e" -v c="$c" -v ge="$GOAL_EXECS" -v gc="$GOAL_CPU" \
    'BEGIN {p = e / ge; q = c / 1000 / gc; if (q > p) p = q; if (p > 1) p = 1; printf "%d\n", p * 1000}'
}

# A slice whose session was killed hard has a log but no line in slices.tsv: count the
# executions of its last status line (its CPU time is unknown and counted as 0).
recover() {
  local t="$1" d="$STATE/$1" log n
  for log in "$d"/logs/slice-*.log; do
    [ -e "$log" ] || continue
    n=$(basename "$log" .log); n=${n#slice-}
    [ -e "$d/logs/slice-$n.done" ] && continue
    local execs cov ft c
    execs=$(grep -aoE '^#[0-9]+' "$log" | tail -1 | tr -d '#'); execs=${execs:-0}
    read -r cov ft < <(grep -aoE 'cov: [0-9]+ ft: [0-9]+' "$log" | tail -1 | awk '{print $2, $4}')
    c=$(cat "$d/logs/slice-$n.commit" 2>/dev/null || echo '?')
    printf '%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n' "$c" "$(date -u -r "$log" +%FT%TZ)" 0 0 \
      "$execs" "${cov:-}" "${ft:-}" lost >>"$d/slices.tsv"
    touch "$d/logs/slice-$n.done"
    echo "fuzz-long: $t: slice $n was cut off; recovered $execs executions from its log"
  done
}

# Sum of the children's user+system time of this shell, in ms: bash's `times` (second line),
# written to a file because a command substitution would run it in a new subshell.
child_cpu_ms() {
  sed -n 2p "$1" | awk '{
    s = 0
    for (i = 1; i <= 2; i++) { split($i, a, "m"); sub("s", "", a[2]); s += a[1] * 60 + a[2] }
    printf "%d\n", s * 1000 }'
}

# One slice of target $1 for at most $2 seconds of wall time, in the background of the caller.
run_slice() {
  local t="$1" secs="$2" d="$STATE/$1"
  local n e c cov ft rc before after left commit_id start
  mkdir -p "$d/corpus" "$d/crashes" "$d/logs"
  n=$(( $(ls "$d/logs" | grep -c '^slice-.*\.log$') + 1 ))
  read -r e _ < <(totals "$t")
  left=$(( GOAL_EXECS - e )); [ "$left" -lt 1 ] && left=1
  commit_id=$(cat "$STATE/.commit")
  echo "$commit_id" >"$d/logs/slice-$n.commit"
  local log="$d/logs/slice-$n.log"
  local seeds=()
  [ -d "$STATE/.seeds/$t" ] && seeds=("$STATE/.seeds/$t")
  trap 'true' INT TERM   # keep this shell alive to record the slice; the fuzzer stops itself
  start=$(date +%s)
  times >"$d/logs/.times"
  before=$(child_cpu_ms "$d/logs/.times")
  nice -n 19 "$BIN/$t" "${FUZZ_FLAGS[@]}" -max_total_time="$secs" -runs="$left" \
    -print_final_stats=1 -artifact_prefix="$d/crashes/" "$d/corpus" "${seeds[@]}" \
    >"$log" 2>&1 &
  echo $! >"$d/logs/slice-$n.pid"
  wait $!
  rc=$?
  # A signal to this shell interrupts `wait`; the fuzzer may still be writing its stats.
  while kill -0 "$(cat "$d/logs/slice-$n.pid")" 2>/dev/null; do wait "$(cat "$d/logs/slice-$n.pid")"; rc=$?; done
  times >"$d/logs/.times"
  after=$(child_cpu_ms "$d/logs/.times")
  c=$(( after - before ))
  e=$(grep -aoE 'stat::number_of_executed_units: *[0-9]+' "$log" | grep -oE '[0-9]+$' | tail -1)
  [ -n "$e" ] || e=$(grep -aoE '^#[0-9]+' "$log" | tail -1 | tr -d '#')
  read -r cov ft < <(grep -aoE 'cov: [0-9]+ ft: [0-9]+' "$log" | tail -1 | awk '{print $2, $4}')
  local how=ok
  case "$rc" in
    0) ;;
    72|130|143) how=interrupted ;;
    *) how="failed($rc)" ;;
  esac
  printf '%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n' "$commit_id" "$(date -u +%FT%TZ)" \
    $(( $(date +%s) - start )) "$c" "${e:-0}" "${cov:-}" "${ft:-}" "$how" >>"$d/slices.tsv"
  touch "$d/logs/slice-$n.done"
  rm -f "$d/logs/slice-$n.pid"
  if [ "$how" != ok ] && [ "$how" != interrupted ]; then
    local art
    art=$(grep -aoE '(Test unit|artifact) written to [^ ]+' "$log" | awk '{print $NF}' | tail -1)
    {
      echo "slice $n, commit $commit_id, exit $rc"
      echo "reproducer: ${art:-none written}"
      echo "log: $log"
      grep -aE 'ERROR|panicked|SUMMARY|Test unit written' "$log" | head -8
    } >"$d/CRASHED"
    {
      echo
      echo "################################################################"
      echo "## fuzz-long: $t FAILED (exit $rc) -- it will not run again until"
      echo "## $d/CRASHED is removed."
      sed 's/^/## /' "$d/CRASHED"
      echo "################################################################"
    } >&2
  fi
  echo "fuzz-long: $t slice $n: $(( $(date +%s) - start )) s wall, $((c / 1000)) s CPU, ${e:-0} execs, cov ${cov:-?} ft ${ft:-?} ($how); total $(totals "$t" | awk '{printf "%.2f M execs, %d s CPU", $1/1e6, $2/1000}')"
}

# The next target: not done, not crashed, not running, furthest from its goal.
pick() {
  local best="" bp=1001 t p
  for t in $TARGETS; do
    [ -e "$STATE/$t/CRASHED" ] && continue
    [ -n "${RUNNING[$t]:-}" ] && continue
    p=$(progress "$t")
    [ "$p" -ge 1000 ] && continue
    if [ "$p" -lt "$bp" ]; then best=$t; bp=$p; fi
  done
  echo "$best"
}

table() {
  local t e c cov ft n first last files bytes cfiles done_ status totale=0 totalc=0 ndone=0
  echo "| target | executions | CPU time | cov | ft | corpus (state) | corpus (repo) | slices | commits | done |"
  echo "|---|---:|---:|---:|---:|---:|---:|---:|---|---|"
  for t in $TARGETS; do
    read -r e c cov ft n first last < <(totals "$t")
    files=$(find "$STATE/$t/corpus" -type f 2>/dev/null | wc -l)
    cfiles=$(find "fuzz/corpus/$t" -type f 2>/dev/null | wc -l)
    bytes=$(du -sk --apparent-size "fuzz/corpus/$t" 2>/dev/null | cut -f1)
    if [ -e "$STATE/$t/CRASHED" ]; then
      status="**crashed**"
    elif [ "$(progress "$t")" -ge 1000 ]; then
      if [ "$e" -ge "$GOAL_EXECS" ]; then status="yes (execs)"; else status="yes (CPU)"; fi
      ndone=$((ndone + 1))
    else
      status="no ($(progress "$t" | awk '{printf "%d%%", $1 / 10}'))"
    fi
    local commits="$first"
    [ "$first" != "$last" ] && commits="$first..$last"
    printf '| %s | %s | %s | %s | %s | %s | %s (%s KB) | %s | %s | %s |\n' "$t" \
      "$(awk -v e="$e" 'BEGIN {printf "%.2f M", e / 1e6}')" \
      "$(awk -v c="$c" 'BEGIN {printf "%.1f min", c / 60000}')" \
      "${cov:-0}" "${ft:-0}" "$files" "$cfiles" "${bytes:-0}" "$n" "$commits" "$status"
    totale=$((totale + e)); totalc=$((totalc + c))
  done
  echo
  echo "Goal per target: $(awk -v g="$GOAL_EXECS" 'BEGIN {printf "%g M", g / 1e6}') executions or $((GOAL_CPU / 60)) CPU-minutes. Done: $ndone of $(wc -w <<<"$TARGETS"). Total: $(awk -v e="$totale" 'BEGIN {printf "%.1f M", e / 1e6}') executions, $(awk -v c="$totalc" 'BEGIN {printf "%.1f", c / 3.6e6}') CPU-hours. Committed corpus: $(find fuzz/corpus -type f 2>/dev/null | wc -l) files, $(du -sk --apparent-size fuzz/corpus 2>/dev/null | cut -f1) KB. Table written $(date -u '+%F %H:%M UTC') at commit $(commit)."
}

case "$MODE" in
  status) table; exit 0 ;;
  report)
    doc=docs/fuzzing.md
    grep -q '^<!-- fuzz-long table begin -->$' "$doc" || die "$doc has no '<!-- fuzz-long table begin -->' marker"
    tmp=$(mktemp)
    table >"$tmp"
    awk -v f="$tmp" '
      /^<!-- fuzz-long table begin -->$/ {print; while ((getline l < f) > 0) print l; skip = 1; next}
      /^<!-- fuzz-long table end -->$/ {skip = 0}
      !skip {print}' "$doc" >"$doc.new" && mv "$doc.new" "$doc"
    rm -f "$tmp"
    echo "fuzz-long: table written into $doc"
    exit 0 ;;
esac

if [ "$BUILD" = 1 ]; then
  command -v cargo-fuzz >/dev/null || cargo install cargo-fuzz --locked
  nice -n 19 cargo +nightly fuzz build -O || die "build failed"
fi
for t in $TARGETS; do [ -x "$BIN/$t" ] || die "$BIN/$t is not built (drop --no-build)"; done
mkdir -p "$STATE"
commit >"$STATE/.commit"
# The seeds of this commit (read-only second corpus directory of every slice and merge).
rm -rf "$STATE/.seeds"
nice -n 19 bash scripts/fuzz/fuzz-seeds.sh "$STATE/.seeds" >/dev/null || die "seeds failed"

if [ "$MODE" = merge ]; then
  status=0
  for t in $TARGETS; do
    [ -d "$STATE/$t/corpus" ] || continue
    tmp=$(mktemp -d)
    mkdir -p "$tmp/new" "fuzz/corpus/$t"
    dirs=("fuzz/corpus/$t" "$STATE/$t/corpus")
    [ -d "$STATE/.seeds/$t" ] && dirs+=("$STATE/.seeds/$t")
    if nice -n 19 "$BIN/$t" -merge=1 "${FUZZ_FLAGS[@]}" -artifact_prefix="$tmp/" \
        "$tmp/new" "${dirs[@]}" >"$tmp/merge.log" 2>&1; then
      big=$(find "$tmp/new" -type f -size +"$MAX_FILE"c | wc -l)
      find "$tmp/new" -type f -size +"$MAX_FILE"c -delete
      old=$(find "fuzz/corpus/$t" -type f | wc -l)
      rm -rf "fuzz/corpus/$t"
      mv "$tmp/new" "fuzz/corpus/$t"
      echo "fuzz-long: $t: $old files in the repo + $(find "$STATE/$t/corpus" -type f | wc -l) grown -> $(find "fuzz/corpus/$t" -type f | wc -l) ($(du -sk --apparent-size "fuzz/corpus/$t" | cut -f1) KB)$( [ "$big" -gt 0 ] && echo ", $big larger than $MAX_FILE bytes dropped")"
    else
      echo "fuzz-long: $t: merge FAILED, fuzz/corpus/$t unchanged; log:" >&2
      tail -20 "$tmp/merge.log" >&2
      status=1
    fi
    rm -rf "$tmp"
  done
  exit "$status"
fi

# The run.
declare -A RUNNING=()
STOP=0
on_signal() {
  STOP=1
  echo "fuzz-long: stopping; the running slices finish their stats" >&2
  local f
  for f in "$STATE"/*/logs/slice-*.pid; do
    [ -e "$f" ] && kill -INT "$(cat "$f")" 2>/dev/null
  done
}
trap on_signal INT TERM
for t in $TARGETS; do
  recover "$t"
  rm -f "$STATE/$t"/logs/slice-*.pid
  if [ ! -d "$STATE/$t/corpus" ]; then
    mkdir -p "$STATE/$t/corpus"
    [ -d "fuzz/corpus/$t" ] && cp -r "fuzz/corpus/$t/." "$STATE/$t/corpus/"
  fi
done
deadline=$(( $(date +%s) + BUDGET_MIN * 60 ))
echo "fuzz-long: state $STATE, commit $(cat "$STATE/.commit"), budget $BUDGET_MIN min, slices of $SLICE_MIN min, $JOBS at a time"
declare -A PIDS=()
while :; do
  while [ "$STOP" = 0 ] && [ "${#RUNNING[@]}" -lt "$JOBS" ]; do
    left=$(( deadline - $(date +%s) ))
    [ "$left" -ge 30 ] || break
    t=$(pick)
    [ -n "$t" ] || break
    read -r _ c _ < <(totals "$t")
    secs=$(( SLICE_MIN * 60 ))
    [ "$secs" -gt "$left" ] && secs=$left
    cpu_left=$(( GOAL_CPU - c / 1000 ))
    [ "$cpu_left" -lt 30 ] && cpu_left=30
    [ "$secs" -gt "$cpu_left" ] && secs=$cpu_left
    run_slice "$t" "$secs" &
    PIDS[$t]=$!
    RUNNING[$t]=1
  done
  [ "${#RUNNING[@]}" -eq 0 ] && break
  wait -n
  for t in "${!PIDS[@]}"; do
    if ! kill -0 "${PIDS[$t]}" 2>/dev/null; then
      wait "${PIDS[$t]}" 2>/dev/null
      unset "PIDS[$t]" "RUNNING[$t]"
    fi
  done
done
echo
table
if ls "$STATE"/*/CRASHED >/dev/null 2>&1; then
  echo "fuzz-long: CRASHED targets: $(ls "$STATE"/*/CRASHED | xargs -n1 dirname | xargs -n1 basename | tr '\n' ' ')" >&2
  exit 1
fi
