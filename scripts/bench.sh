#!/usr/bin/env bash
# Runs every benchmark present in bench/ (push, push_tls, push_enc, cluster,
# longpoll, http, s3put, parquet, touch, sink, sink_lag, sink_mem, sink_partitions,
# sink_takeover, verify, restore, cp_tenants, as they appear), each printing
# its figures beside a peer
# measured in the same run (sink_lag and sink_takeover beside their goals:
# their peer is the rule itself; BENCH_LAG_SECONDS=300 makes sink_lag the
# longest).
# Usage: scripts/bench.sh [build-dir]. A benchmark is bench/<name>.sh,
# bench/<name>.py (run with Debian's /usr/bin/python3) or an executable
# bench/<name>; each gets the build dir as its first argument.
set -u
build=${1:-build}
root="$(cd "$(dirname "$0")/.." && pwd)"
cd "$root"
rc=0
ran=0
for name in push push_tls push_enc cluster longpoll http s3put parquet touch sink sink_lag sink_mem sink_partitions sink_takeover verify restore cp_tenants; do
  for cand in "bench/$name.sh" "bench/$name.py" "bench/$name"; do
    [ -f "$cand" ] || continue
    echo "== bench/$name"
    case "$cand" in
      *.py) /usr/bin/python3 "$cand" "$build" ;;
      *.sh) bash "$cand" "$build" ;;
      *) "$cand" "$build" ;;
    esac
    r=$?
    [ $r -eq 0 ] || { echo "bench/$name failed with $r"; rc=1; }
    ran=$((ran + 1))
    break
  done
done
[ $ran -gt 0 ] || echo "bench: nothing in bench/ yet"
exit $rc
