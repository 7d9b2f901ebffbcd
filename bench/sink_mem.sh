#!/usr/bin/env bash
# bench/sink_mem: the broker's peak RSS with the embedded sink on
# (QUEEN_S3_MEMORY_MB=64) and 10,000 partitions receiving traffic, beside the
# same broker without the sink under the same traffic, in the same run (see
# bench/sink_mem.py). BENCH_MEM_RATE (5000 records/s), BENCH_MEM_SECONDS
# (120) and BENCH_MEM_SETTLE (15) shape the traffic.
# Usage: bench/sink_mem.sh [build-dir]   (make bench runs it via scripts/bench.sh)
set -euo pipefail
build=${1:-build}
root="$(cd "$(dirname "$0")/.." && pwd)"
export QUEEN_ROOT="$root" QUEEN_BIN="$root/$build/queen"
exec /usr/bin/python3 "$root/bench/sink_mem.py" "$build"
