#!/bin/sh
# What this machine charges for memory touched for the first time: a fresh
# mapping of a file (the store's LMDB map) beside pread() of the same bytes,
# and fresh anonymous memory (4 KiB pages, huge pages) beside memory touched
# before, ns per 4 KiB page (tests/tools/touch_bench.c says how). Read it
# beside bench/sink's read and merge stages: on a machine whose hypervisor
# shadows the page tables, first touches are most of those stages.
#   bench/touch.sh [build-dir]   BENCH_TOUCH_MB (256), BENCH_TOUCH_RUNS (5)
set -eu
build=${1:-build}
cd "$(dirname "$0")/.."
make -s "$build/tools/touch_bench"
exec "$build/tools/touch_bench" --mb "${BENCH_TOUCH_MB:-256}" \
  --runs "${BENCH_TOUCH_RUNS:-5}"
