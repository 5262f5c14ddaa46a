#!/usr/bin/env bash
# The CI fuzz pass. Builds every cargo-fuzz target once (`cargo +nightly fuzz build -O`),
# copies each target's committed minimized corpus (fuzz/corpus/<target>/) into a scratch
# directory, writes the seeds of this commit next to it (scripts/fuzz/fuzz-seeds.sh), then runs each
# target for SECONDS (default 25) from both with -timeout=5 -rss_limit_mb=2048 -max_len=8192,
# FUZZ_JOBS targets at a time (default 2). The clone's corpus is never written: what a pass
# finds is thrown away with the scratch directory (scripts/fuzz/fuzz-long.sh grows the corpus).
# Prints executions per target; exits 1 if any target crashed, timed out or ran out of memory
# (the reproducer is under fuzz/artifacts/<target>/, the log under fuzz/logs/; both ignored by git).
#   scripts/fuzz/fuzz.sh            short pass (CI)
#   scripts/fuzz/fuzz.sh 300        long pass: 5 minutes per target
set -euo pipefail
cd "$(dirname "$0")/../.."
SECONDS_PER_TARGET="${1:-25}"
JOBS="${FUZZ_JOBS:-2}"
command -v cargo-fuzz >/dev/null || cargo install cargo-fuzz --locked
cargo +nightly fuzz build -O
FUZZ_BIN="$PWD/fuzz/target/$(rustc -vV | sed -n 's/^host: //p')/release"
FUZZ_SCRATCH=$(mktemp -d "${TMPDIR:-/tmp}/ipsec-fuzz-ci.XXXXXX")
trap 'rm -rf "$FUZZ_SCRATCH"' EXIT
bash scripts/fuzz/fuzz-seeds.sh "$FUZZ_SCRATCH/seeds" >/dev/null
mkdir -p fuzz/logs fuzz/artifacts
targets=$(cd fuzz && ls fuzz_targets | sed -n 's/\.rs$//p' | sort)
run_one() {
  local t="$1" dirs=()
  mkdir -p "$FUZZ_SCRATCH/corpus/$t" "fuzz/artifacts/$t"
  if [ -d "fuzz/corpus/$t" ]; then cp -r "fuzz/corpus/$t/." "$FUZZ_SCRATCH/corpus/$t/"; fi
  [ -d "$FUZZ_SCRATCH/seeds/$t" ] && dirs+=("$FUZZ_SCRATCH/seeds/$t")
  # A crash reproducer once found and fixed stays a regression input (fuzz/regressions/<target>/).
  [ -d "fuzz/regressions/$t" ] && dirs+=("fuzz/regressions/$t")
  if "$FUZZ_BIN/$t" -max_total_time="$SECONDS_PER_TARGET" -timeout=5 -rss_limit_mb=2048 \
      -max_len=8192 -print_final_stats=1 -artifact_prefix="fuzz/artifacts/$t/" \
      "$FUZZ_SCRATCH/corpus/$t" "${dirs[@]}" >"fuzz/logs/$t.log" 2>&1; then
    echo "ok"
  else
    echo "FAILED"
  fi >"fuzz/logs/$t.status"
  rm -rf "$FUZZ_SCRATCH/corpus/$t"
}
export -f run_one
export SECONDS_PER_TARGET FUZZ_BIN FUZZ_SCRATCH
printf '%s\n' $targets | xargs -P "$JOBS" -I{} bash -c 'run_one {}'
failed=0
printf '%-20s %14s %8s %7s  %s\n' target executions cov corpus result
for t in $targets; do
  execs=$(grep -ao 'stat::number_of_executed_units: *[0-9]*' "fuzz/logs/$t.log" | grep -o '[0-9]*$' || echo '?')
  cov=$(grep -aoE 'cov: [0-9]+' "fuzz/logs/$t.log" | tail -1 | grep -oE '[0-9]+' || echo '?')
  # A target without a committed corpus yet counts 0 (find fails there: pipefail).
  files=$({ find "fuzz/corpus/$t" -type f 2>/dev/null || true; } | wc -l)
  status=$(cat "fuzz/logs/$t.status")
  printf '%-20s %14s %8s %7s  %s\n' "$t" "$execs" "$cov" "$files" "$status"
  if [ "$status" != ok ]; then
    failed=1
    grep -aE 'ERROR|panicked|Test unit written' "fuzz/logs/$t.log" | head -5 || true
  fi
done
echo "commit $(git rev-parse --short HEAD)$(git diff --quiet HEAD -- . || echo ' (+ uncommitted changes)')"
exit "$failed"
