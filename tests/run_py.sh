#!/usr/bin/env bash
# Runs the Python integration and end-to-end suites (tests/integration,
# tests/e2e, tests/bucket, tests/compat) with Debian's pytest against the
# binaries in the build directory given as $1.
#   QUEEN_PY_MARK  the pytest -m expression (default "not cluster_long": the
#                  long cluster tests run in `make check-cluster`, which sets
#                  it to cluster_long); a -m in PYTEST_ARGS wins over it
#   QUEEN_PY_LOG   where pytest's output is kept (build/results/pytest.log)
#   QUEEN_RGW_LANE 0 skips the RGW lane: after the main run (not under
#                  make check-cluster), the S3 client and the sink's
#                  scenarios (s3, a, b, b2, e, g, Parquet) run again with
#                  QUEEN_TEST_BUCKET=rgw, against Ceph's RADOS Gateway
#                  behind the same proxy (tests/bucket/README.md); its
#                  output goes to build/results/pytest-rgw.log
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
out=${QUEEN_PY_LOG:-build/results/pytest.log}
mark=${QUEEN_PY_MARK:-not cluster_long}
# One pytest run: $1 the kind for the summary, $2 its log, the rest pytest's
# arguments; adds its counts to build/results/summary.
run() {
  local kind=$1 log=$2 rc line p f e s
  shift 2
  /usr/bin/python3 -m pytest -q -p no:cacheprovider "$@" 2>&1 | tee "$log"
  rc=${PIPESTATUS[0]}
  # pytest's closing line, e.g. "3 failed, 120 passed, 2 skipped, 1 error in
  # 80.1s" (counts in any order, each optional).
  line=$(grep -E '^=* ?[0-9]+ (passed|failed|skipped|errors?|deselected|xfailed|xpassed|warnings?)' "$log" | tail -1)
  count() { printf '%s' "$line" | grep -oE "[0-9]+ $1" | grep -oE '[0-9]+' | head -1; }
  p=$(count passed); f=$(count failed); e=$(count 'errors?'); s=$(count skipped)
  if [ -z "$line" ] && [ "$rc" -ne 0 ]; then f=1; fi  # no closing line: a failure
  echo "$kind ${p:-0} $(( ${f:-0} + ${e:-0} )) ${s:-0}" >> build/results/summary
  return "$rc"
}
run py "$out" -m "$mark" ${PYTEST_ARGS:-} "${dirs[@]}"
rc=$?
if [ "${QUEEN_RGW_LANE:-1}" != 0 ] && [ -z "${QUEEN_PY_MARK:-}" ]; then
  rgw_files=(tests/e2e/test_s3_client.py tests/e2e/test_sink_basic.py
             tests/e2e/test_sink_scenarios.py tests/e2e/test_sink_crash.py
             tests/e2e/test_sink_b2.py tests/e2e/test_sink_faults.py
             tests/e2e/test_sink_no_bucket.py tests/e2e/test_sink_parquet.py
             tests/e2e/test_sink_config.py::test_names_and_whitespace)
  echo "integration: the RGW lane (QUEEN_TEST_BUCKET=rgw)"
  QUEEN_TEST_BUCKET=rgw run py-rgw "$(dirname "$out")/pytest-rgw.log" \
    -m "$mark" ${PYTEST_ARGS:-} "${rgw_files[@]}" || rc=1
fi
exit $rc
