#!/usr/bin/env bash
# bench/sink: the embedded S3 sink's JSONL throughput per sink thread beside
# `zstd -3` on one core over the same bytes, in the same round; the median of
# BENCH_SINK_ROUNDS rounds (3) on copies of one preload (see
# bench/sink_run.py). BENCH_SINK_RECORDS sets the record count (1,000,000;
# 300000 commits one window); BENCH_SINK_PERF / BENCH_SINK_STDERR name files
# for round 1's perf profile / node log. BENCH_CORPUS picks the corpora of
# bench/corpus.py (events,telemetry,entropy by default), each run in turn.
# BENCH_BUCKET: s3rver (behind the proxy; the default) or rgw (Ceph RGW,
# written to directly).
# Usage: bench/sink.sh [build-dir]   (make bench runs it via scripts/bench.sh;
# QUEEN_BIN, when set, names the binary to measure instead)
set -euo pipefail
build=${1:-build}
root="$(cd "$(dirname "$0")/.." && pwd)"
export QUEEN_ROOT="$root" QUEEN_BIN="${QUEEN_BIN:-$root/$build/queen}"
exec /usr/bin/python3 "$root/bench/sink_run.py" "$build"
