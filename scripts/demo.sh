#!/usr/bin/env bash
# The product page's "Try it" (docs: s3-sink.md) on one machine: the test
# bucket (s3rver behind our verifying proxy, bucket "lake") stands in for
# MinIO, and queen runs with the page's sink settings. It pushes the page's
# three messages, waits for window 1 (polling /status with a deadline),
# prints the status line, the two keys in the bucket, the decompressed
# object's lines and a DuckDB query over the lake's files (the page's, with
# read_json over the JSONL objects the "Try it" writes and no dt filter),
# then stops everything it started.
# Usage: scripts/demo.sh [build-dir]
set -euo pipefail
build=${1:-build}
root="$(cd "$(dirname "$0")/.." && pwd)"
queen="${QUEEN_BIN:-$root/$build/queen}"
py=/usr/bin/python3
tmp=$(mktemp -d /tmp/queen-demo.XXXXXX)
pid=""
bpid=""
cleanup() {
  if [ -n "$pid" ] && kill -0 "$pid" 2>/dev/null; then
    kill -TERM "$pid"; wait "$pid" || true
  fi
  if [ -n "$bpid" ] && kill -0 "$bpid" 2>/dev/null; then
    kill -TERM "$bpid"; wait "$bpid" || true
  fi
  rm -rf "$tmp"
}
trap cleanup EXIT

# What the demo needs beyond the build: s3rver and DuckDB from npm.
if [ ! -x "$root/tests/node_modules/.bin/s3rver" ] ||
   [ ! -d "$root/tests/node_modules/@duckdb/node-api" ]; then
  echo "demo: installing the npm packages in tests/"
  (cd "$root/tests" && npm install --no-audit --no-fund >/dev/null)
fi
[ -x "$queen" ] || { echo "demo: $queen is missing: run make" >&2; exit 1; }

free_port() {
  $py -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'
}
wait_for() { # wait_for <seconds> <what> <command...>
  local secs=$1 what=$2; shift 2
  local end=$((SECONDS + secs))
  until "$@" >/dev/null 2>&1; do
    if [ $SECONDS -ge $end ]; then
      echo "demo: gave up waiting for $what after ${secs}s" >&2
      [ -f "$tmp/queen.log" ] && tail -20 "$tmp/queen.log" >&2
      exit 1
    fi
    sleep 0.2
  done
}

echo "demo: starting the test bucket (s3rver behind the verifying proxy)"
$py "$root/tests/bucket/bucket.py" serve --buckets lake --access-key queen \
  --secret-key queen-secret-key --region us-east-1 --workdir "$tmp/bucket" \
  --ready-file "$tmp/bucket.json" 2>"$tmp/bucket.log" &
bpid=$!
wait_for 60 "the test bucket" test -s "$tmp/bucket.json"
endpoint=$($py -c 'import json,sys; print(json.load(open(sys.argv[1]))["endpoint"])' "$tmp/bucket.json")
echo "demo: bucket lake at $endpoint"

port=$(free_port)
raft=$(free_port)
QUEEN_PORT=$port QUEEN_BIND_ADDR=127.0.0.1 QUEEN_RAFT_DIR="$tmp/data" \
  QUEEN_RAFT_LISTEN=127.0.0.1:$raft \
  QUEEN_S3_EMBEDDED=true QUEEN_S3_QUEUES=orders QUEEN_S3_ENDPOINT="$endpoint" \
  QUEEN_S3_REGION=us-east-1 QUEEN_S3_PATH_STYLE=true QUEEN_S3_BUCKET=lake \
  QUEEN_S3_ACCESS_KEY=queen QUEEN_S3_SECRET_KEY=queen-secret-key \
  QUEEN_S3_START=earliest QUEEN_S3_MAX_WINDOW_MS=10000 \
  "$queen" 2>"$tmp/queen.log" &
pid=$!
base="http://127.0.0.1:$port"
wait_for 30 "the broker" curl -sf "$base/health"
echo "demo: broker on $base"

echo "demo: push three messages to orders/cust-1 and orders/cust-2"
curl -s -X POST "$base/api/v1/push" -H 'content-type: application/json' -d '{"items":[ {"queue":"orders","partition":"cust-1","payload":{"order":1,"status":"new","total":42.00}}, {"queue":"orders","partition":"cust-2","payload":{"order":2,"status":"new","total":17.50}}, {"queue":"orders","partition":"cust-1","payload":{"order":1,"status":"paid","total":42.00}} ]}' >/dev/null

# .s3.sinks[0].queues[0] | {state, k, windowsCommitted, records, lagSeconds}
projection='
import json, sys
q = json.load(sys.stdin)["s3"]["sinks"][0]["queues"][0]
print(json.dumps({k: q[k] for k in ("state", "k", "windowsCommitted", "records", "lagSeconds")}, separators=(",", ":")))
'
committed() {
  curl -sf "$base/status" | $py -c '
import json, sys
q = json.load(sys.stdin)["s3"]["sinks"][0]["queues"]
sys.exit(0 if q and q[0]["windowsCommitted"] >= 1 else 1)'
}
echo "demo: waiting for window 1 (the window closes after 10 s on the broker's clock)"
wait_for 120 "window 1" committed
echo "demo: status"
curl -sf "$base/status" | $py -c "$projection"

echo "demo: the keys in the bucket"
$py - "$endpoint" "$tmp/lake" <<'EOF'
import os, sys, boto3, botocore.config, zstandard
endpoint, out = sys.argv[1], sys.argv[2]
s3 = boto3.client("s3", endpoint_url=endpoint, region_name="us-east-1",
                  aws_access_key_id="queen", aws_secret_access_key="queen-secret-key",
                  config=botocore.config.Config(s3={"addressing_style": "path"},
                                                signature_version="s3v4"))
keys = [o["Key"] for o in s3.list_objects_v2(Bucket="lake").get("Contents", [])]
for k in keys:
    print(k)
for k in keys:
    path = os.path.join(out, k)
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "wb") as f:
        f.write(s3.get_object(Bucket="lake", Key=k)["Body"].read())
data = [k for k in keys if k.endswith(".jsonl.zst")]
print("demo: the data object, decompressed")
with open(os.path.join(out, data[0]), "rb") as f:
    sys.stdout.write(zstandard.ZstdDecompressor().decompressobj().decompress(f.read()).decode())
EOF

echo "demo: DuckDB over the lake's files"
cat >"$tmp/duck.mjs" <<'EOF'
import { DuckDBInstance } from '@duckdb/node-api';
const glob = process.env.LAKE + '/queen/tenant=*/queue=orders/dt=*/hour=*/*.jsonl.zst';
const db = await DuckDBInstance.create(':memory:');
const con = await db.connect();
const sql = `SELECT partition, "offset", ts, payload FROM read_json('${glob}', hive_partitioning = true) ORDER BY partition, ts, "offset"`;
console.log(sql);
const r = await con.runAndReadAll(sql);
for (const row of r.getRowObjectsJson()) console.log(JSON.stringify(row));
EOF
sed -i "s#'@duckdb/node-api'#'$root/tests/node_modules/@duckdb/node-api/lib/index.js'#" "$tmp/duck.mjs"
LAKE="$tmp/lake" node "$tmp/duck.mjs"

kill -TERM "$pid"
wait "$pid" && echo "demo: broker stopped cleanly (exit 0)"
pid=""
