#!/usr/bin/env bash
# bench/sink_lag: the embedded sink's lag (commit time - record ts, p50/p99)
# at a steady 10,000 records/s with QUEEN_S3_MAX_WINDOW_MS=10000, beside the
# goal maxWindowMs + guard + 2 s (see bench/sink_lag.py).
# BENCH_LAG_SECONDS sets the push duration (300); BENCH_LAG_VERBOSE=1 lists
# every window.
# Usage: bench/sink_lag.sh [build-dir]   (make bench runs it via scripts/bench.sh)
set -euo pipefail
build=${1:-build}
root="$(cd "$(dirname "$0")/.." && pwd)"
export QUEEN_ROOT="$root" QUEEN_BIN="$root/$build/queen"
exec /usr/bin/python3 "$root/bench/sink_lag.py" "$build"
