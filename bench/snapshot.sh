#!/bin/sh
# How long a raft snapshot of a ~300 MB store (clickstream-like JSON) blocks
# the loop thread: the legacy path (compact copy + read back on the loop)
# beside the async path (read txn on the loop, dump on a worker), same store,
# same run; and the CPU the node's own path (the dump into one LZ4 frame)
# spends per snapshot, with the frame's ratio.
#   bench/snapshot.sh [MB] [RUNS]
set -eu
cd "$(dirname "$0")/.."
make -s build/tools/snapshot_bench
exec build/tools/snapshot_bench --mb "${1:-300}" --runs "${2:-5}"
