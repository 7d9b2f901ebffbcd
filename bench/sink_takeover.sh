#!/usr/bin/env bash
# bench/sink_takeover: kill -9 of a queue's owner on a 3-node cluster to the
# first window its new owner commits, beside the goal 2 x TTL + max window +
# guard (see bench/sink_takeover.py). BENCH_TAKEOVER_ROUNDS sets the rounds
# (5).
# Usage: bench/sink_takeover.sh [build-dir]   (make bench runs it via
# scripts/bench.sh)
set -euo pipefail
build=${1:-build}
root="$(cd "$(dirname "$0")/.." && pwd)"
export QUEEN_ROOT="$root" QUEEN_BIN="$root/$build/queen"
exec /usr/bin/python3 "$root/bench/sink_takeover.py" "$build"
