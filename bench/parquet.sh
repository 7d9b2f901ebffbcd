#!/usr/bin/env bash
# bench/parquet: our Parquet writer (src/parquet/parquet.c) alone beside
# DuckDB's writer (SET threads=1, COPY ... TO (FORMAT parquet, COMPRESSION c))
# on the same rows, in the same run, for each corpus of bench/corpus.py
# (events, telemetry, entropy; BENCH_CORPUS picks a comma list): BENCH_RECORDS
# records (1,000,000) over 64 partitions, sorted as a window is. Our figure
# is the writer's own time (add + finish, in memory) as parquet_tool
# measures it; DuckDB's is the COPY from an in-memory table, including its
# file write. MB/s are of the input records (partition + transaction_id +
# payload + 24 bytes of integers per record). Each codec runs BENCH_RUNS (3)
# interleaved rounds (queen, duckdb, queen, ...); the lines are the medians.
# Goals (issue 17): on events at least 1.5 x DuckDB threads=1, at no more
# than 1.0 x its size.
#
# Usage: bench/parquet.sh [build-dir]
set -euo pipefail
build=${1:-build}
root="$(cd "$(dirname "$0")/.." && pwd)"
tool="$root/$build/tools/parquet_tool"
n=${BENCH_RECORDS:-1000000}
runs=${BENCH_RUNS:-3}
corpora=${BENCH_CORPUS:-events,telemetry,entropy}
tmp=$(mktemp -d /tmp/queen-bench-parquet.XXXXXX)
trap 'rm -rf "$tmp"' EXIT
field() { sed -n "s/.*$1=\([0-9.]*\).*/\1/p"; }

for corpus in ${corpora//,/ }; do
  /usr/bin/python3 "$root/bench/corpus.py" --parquet-in "$corpus" "$n" 64 "$tmp/in.bin"
  in_bytes=$(stat -c %s "$tmp/in.bin")
  echo "== corpus $corpus: $n records, $((in_bytes / 1000000)) MB in, $runs round(s) per codec"
  printf '%-8s %-7s %10s %12s %10s\n' writer codec "MB/s" "bytes" "seconds"
  for codec in zstd snappy; do
    qs=(); ds=()
    for _ in $(seq 1 "$runs"); do
      ours=$("$tool" write --time --codec "$codec" --queue bench "$tmp/in.bin" "$tmp/ours-$codec.parquet")
      duck=$(node "$root/bench/parquet_duckdb.mjs" "$tmp/ours-$codec.parquet" "$tmp/duck-$codec.parquet" "$codec")
      qs+=("$(echo "$ours" | field seconds)"); ob=$(echo "$ours" | field bytes)
      ds+=("$(echo "$duck" | field seconds)"); db=$(echo "$duck" | field bytes)
    done
    /usr/bin/python3 - "$codec" "$in_bytes" "$n" "$ob" "$db" "${qs[*]}" "${ds[*]}" "$corpus" <<'PY'
import statistics
import sys
codec, inb, n, ob, db = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4]), int(sys.argv[5])
qs = [float(x) for x in sys.argv[6].split()]
ds = [float(x) for x in sys.argv[7].split()]
corpus = sys.argv[8]
mb = inb / 1e6
q, d = statistics.median(qs), statistics.median(ds)
print(f"{'queen':<8} {codec:<7} {mb / q:10.1f} {ob:12d} {q:10.3f}")
print(f"{'duckdb':<8} {codec:<7} {mb / d:10.1f} {db:12d} {d:10.3f}")
print(f"ratio {corpus} {codec}: speed queen/duckdb {d / q:.2f}x (median of "
      f"{len(qs)}; per round {', '.join('%.2f' % (b / a) for a, b in zip(qs, ds))}), "
      f"size queen/duckdb {ob / db:.3f}")
PY
  done
done
echo "load average: $(cut -d' ' -f1-3 /proc/loadavg)"
