#!/usr/bin/env bash
# bench/parquet: our Parquet writer (src/parquet/parquet.c) alone beside
# DuckDB's writer (SET threads=1, COPY ... TO (FORMAT parquet, COMPRESSION c))
# on the same rows, in the same run: 1,000,000 records, 64 partitions,
# ~500-byte JSON payloads (tests/tools/parquet_tool gen). Our figure is the
# writer's own time (add + finish, in memory) as parquet_tool measures it;
# DuckDB's is the COPY from an in-memory table, including its file write.
# MB/s are of the input records (partition + transaction_id + payload + 24
# bytes of integers per record). Goal: at least as fast as DuckDB, and no
# more than 10% larger.
#
# Usage: bench/parquet.sh [build-dir]   (BENCH_RECORDS overrides 1000000)
set -euo pipefail
build=${1:-build}
root="$(cd "$(dirname "$0")/.." && pwd)"
tool="$root/$build/tools/parquet_tool"
n=${BENCH_RECORDS:-1000000}
tmp=$(mktemp -d /tmp/queen-bench-parquet.XXXXXX)
trap 'rm -rf "$tmp"' EXIT

"$tool" gen "$n" 64 500 "$tmp/in.bin"
in_bytes=$(stat -c %s "$tmp/in.bin")
field() { sed -n "s/.*$1=\([0-9.]*\).*/\1/p"; }

printf '%-8s %-7s %10s %12s %10s\n' writer codec "MB/s" "bytes" "seconds"
for codec in zstd snappy; do
  ours=$("$tool" write --time --codec "$codec" --queue bench "$tmp/in.bin" "$tmp/ours-$codec.parquet")
  duck=$(node "$root/bench/parquet_duckdb.mjs" "$tmp/ours-$codec.parquet" "$tmp/duck-$codec.parquet" "$codec")
  os=$(echo "$ours" | field seconds); ob=$(echo "$ours" | field bytes)
  ds=$(echo "$duck" | field seconds); db=$(echo "$duck" | field bytes)
  /usr/bin/python3 - "$codec" "$in_bytes" "$n" "$os" "$ob" "$ds" "$db" <<'PY'
import sys
codec, inb, n = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
os_, ob, ds, db = float(sys.argv[4]), int(sys.argv[5]), float(sys.argv[6]), int(sys.argv[7])
mb = inb / 1e6
print(f"{'queen':<8} {codec:<7} {mb / os_:10.1f} {ob:12d} {os_:10.3f}")
print(f"{'duckdb':<8} {codec:<7} {mb / ds:10.1f} {db:12d} {ds:10.3f}")
print(f"ratio {codec}: speed queen/duckdb {ds / os_:.2f}x, "
      f"size queen/duckdb {ob / db:.3f} ({n} records, {mb:.0f} MB in)")
PY
done
