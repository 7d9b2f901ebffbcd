#!/usr/bin/env bash
# Runs the Python integration and end-to-end suites (tests/integration,
# tests/e2e, tests/bucket, tests/compat) with Debian's pytest against the
# binaries in the build directory given as $1. Tests marked cluster_long
# (minutes each) are left to make check-cluster and make soak-cluster.
set -u
build=${1:-build}
if [ ! -d "$build" ] || [ $# -gt 1 ]; then
  echo "usage: tests/run_py.sh [build-dir]   (one file: QUEEN_ROOT=\$PWD" \
       "QUEEN_BIN=\$PWD/build/queen /usr/bin/python3 -m pytest FILE)" >&2
  exit 2
fi
export QUEEN_BIN="$PWD/$build/queen"
export QUEEN_TOOLS="$PWD/$build/tools"
export QUEEN_ROOT="$PWD"
dirs=()
for d in tests/bucket tests/integration tests/e2e tests/compat; do
  ls "$d"/test_*.py >/dev/null 2>&1 && dirs+=("$d")
done
mkdir -p build/results
if [ "${#dirs[@]}" -eq 0 ]; then
  echo "integration: no suites"; echo "py 0 0 0" >> build/results/summary; exit 0
fi
out=build/results/pytest.log
/usr/bin/python3 -m pytest -q -p no:cacheprovider -m "not cluster_long" ${PYTEST_ARGS:-} "${dirs[@]}" 2>&1 | tee "$out"
rc=${PIPESTATUS[0]}
# pytest's closing line, e.g. "3 failed, 120 passed, 2 skipped, 1 error in
# 80.1s" (counts in any order, each optional).
line=$(grep -E '^=* ?[0-9]+ (passed|failed|skipped|errors?|deselected|xfailed|xpassed|warnings?)' "$out" | tail -1)
count() { printf '%s' "$line" | grep -oE "[0-9]+ $1" | grep -oE '[0-9]+' | head -1; }
p=$(count passed); f=$(count failed); e=$(count 'errors?'); s=$(count skipped)
if [ -z "$line" ] && [ "$rc" -ne 0 ]; then f=1; fi  # no closing line: a failure
echo "py ${p:-0} $(( ${f:-0} + ${e:-0} )) ${s:-0}" >> build/results/summary
exit $rc
