#!/usr/bin/env bash
# Runs every fuzz target for SECS seconds each (default 10: the smoke run .ci/run makes).
# FUZZ_SEED=N makes the run repeat the same inputs (the smoke run in .ci/run is seeded, so a
# landing fails only on what its own change made reachable; campaigns run unseeded to explore).
# A longer campaign: scripts/fuzz.sh 600. Installs cargo-fuzz when it is missing; on this stable
# toolchain RUSTC_BOOTSTRAP=1 lets it use the sanitizer flags. Exits non-zero on a crash (the
# input is kept under fuzz/artifacts/TARGET/). Prints each target's execution count.
set -euo pipefail
cd "$(dirname "$0")/.."
secs="${1:-10}"
if ! command -v cargo-fuzz >/dev/null 2>&1; then
  cargo install --quiet --locked cargo-fuzz --version 0.13.2
fi
export RUSTC_BOOTSTRAP=1
targets=(shell rules arguments answer)
for t in "${targets[@]}"; do
  mkdir -p "fuzz/corpus/$t"
done
cargo fuzz build
total=0
for t in "${targets[@]}"; do
  log="$(mktemp)"
  if ! cargo fuzz run "$t" -- -max_total_time="$secs" -max_len=4096 -print_final_stats=1 ${FUZZ_SEED:+-seed="$FUZZ_SEED"} >"$log" 2>&1; then
    tail -40 "$log"
    echo "fuzz target $t failed" >&2
    exit 1
  fi
  runs="$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -1)"
  echo "fuzz $t: ${runs:-0} executions in ${secs} s"
  total=$((total + ${runs:-0}))
  rm -f "$log"
done
echo "fuzz: $total executions in all"
