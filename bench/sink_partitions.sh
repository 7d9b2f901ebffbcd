#!/usr/bin/env bash
# bench/sink_partitions: the broker's memory with the embedded sink on a
# queue of BENCH_PARTS_N (1,000,000) partitions each written once, then
# traffic on 1,000 of them, beside the same broker without the sink in the
# same run; prints the sink's RSS beyond the no-sink broker beside
# QUEEN_S3_MEMORY_MB + one window (see bench/sink_partitions.py for the
# knobs).
# Usage: bench/sink_partitions.sh [build-dir]   (make bench runs it via scripts/bench.sh)
set -euo pipefail
build=${1:-build}
root="$(cd "$(dirname "$0")/.." && pwd)"
export QUEEN_ROOT="$root" QUEEN_BIN="$root/$build/queen"
exec /usr/bin/python3 "$root/bench/sink_partitions.py" "$build"
