#!/usr/bin/env bash
# Builds every cargo-fuzz target once (`cargo +nightly fuzz build -O`), writes the seed
# corpora (scripts/fuzz-seeds.sh), then runs each target for SECONDS (default 25) with
# -timeout=5 -rss_limit_mb=2048 -max_len=8192, FUZZ_JOBS targets at a time (default 2).
# Prints executions per target; exits 1 if any target crashed, timed out or ran out of memory
# (the reproducer is under fuzz/artifacts/<target>/, the log under fuzz/logs/).
#   scripts/fuzz.sh            short pass (CI)
#   scripts/fuzz.sh 300        long pass: 5 minutes per target
set -euo pipefail
cd "$(dirname "$0")/.."
SECONDS_PER_TARGET="${1:-25}"
JOBS="${FUZZ_JOBS:-2}"
command -v cargo-fuzz >/dev/null || cargo install cargo-fuzz --locked
cargo +nightly fuzz build -O
bash scripts/fuzz-seeds.sh >/dev/null
mkdir -p fuzz/logs fuzz/artifacts
targets=$(cargo +nightly fuzz list)
run_one() {
  local t="$1"
  mkdir -p "fuzz/corpus/$t" "fuzz/artifacts/$t"
  if cargo +nightly fuzz run -O "$t" "fuzz/corpus/$t" -- \
      -max_total_time="$SECONDS_PER_TARGET" -timeout=5 -rss_limit_mb=2048 -max_len=8192 \
      -print_final_stats=1 >"fuzz/logs/$t.log" 2>&1; then
    echo "ok"
  else
    echo "FAILED"
  fi >"fuzz/logs/$t.status"
}
export -f run_one
export SECONDS_PER_TARGET
printf '%s\n' $targets | xargs -P "$JOBS" -I{} bash -c 'run_one {}'
failed=0
printf '%-20s %14s  %s\n' target executions result
for t in $targets; do
  execs=$(grep -o 'stat::number_of_executed_units: *[0-9]*' "fuzz/logs/$t.log" | grep -o '[0-9]*$' || echo '?')
  status=$(cat "fuzz/logs/$t.status")
  printf '%-20s %14s  %s\n' "$t" "$execs" "$status"
  if [ "$status" != ok ]; then
    failed=1
    grep -E 'ERROR|panicked|Test unit written' "fuzz/logs/$t.log" | head -5 || true
  fi
done
echo "commit $(git rev-parse --short HEAD)$(git diff --quiet HEAD -- . || echo ' (+ uncommitted changes)')"
exit "$failed"
