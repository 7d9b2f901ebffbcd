#!/usr/bin/env bash
# `make stress-unit`: the unit binaries STRESS_UNIT_RUNS (20) times in a row
# and the integration suites STRESS_PY_RUNS (2) times, while stress-ng keeps
# two CPU-bound workers busy. A test that only passes on an idle machine
# fails here. Prints one "N passed, N failed" line for all the runs.
# Usage: scripts/stress-unit.sh BUILD-DIR UNIT-BINARY...
set -u
build=$1; shift
runs=${STRESS_UNIT_RUNS:-20}
pyruns=${STRESS_PY_RUNS:-2}
command -v stress-ng >/dev/null || { echo "stress-unit: stress-ng is missing (scripts/setup.sh installs it)"; exit 1; }
stress-ng --cpu 2 --timeout 4h --quiet &
load=$!
trap 'kill "$load" 2>/dev/null; wait "$load" 2>/dev/null' EXIT
mkdir -p build/results
log=build/results/stress.log
: > "$log"
fails=0
for i in $(seq 1 "$runs"); do
  rm -f build/results/summary
  if tests/run_unit.sh "$@" > build/results/stress-unit.out 2>&1; then r=ok; else r=FAIL; fails=$((fails+1)); cat build/results/stress-unit.out; fi
  echo "stress-unit: unit run $i/$runs: $r ($(tail -1 build/results/stress-unit.out))" | tee -a "$log"
done
for i in $(seq 1 "$pyruns"); do
  rm -f build/results/summary
  if tests/run_py.sh "$build" > build/results/stress-py.out 2>&1; then r=ok; else r=FAIL; fails=$((fails+1)); grep -E '^(FAILED|ERROR)' build/results/stress-py.out; fi
  echo "stress-unit: integration run $i/$pyruns: $r ($(grep -E '[0-9]+ (passed|failed)' build/results/stress-py.out | tail -1))" | tee -a "$log"
done
rm -f build/results/summary
total=$((runs + pyruns))
echo "stress-unit: $total runs under stress-ng --cpu 2, $fails failed"
echo "$((total - fails)) passed, $fails failed"
[ "$fails" -eq 0 ]
