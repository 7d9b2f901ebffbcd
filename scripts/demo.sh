#!/usr/bin/env bash
# The product page's "Try it", broker part: start queen on a free port with a
# temporary data directory, push the three messages of the page to two
# partitions, read them back with /api/v1/fetch and print them, then stop the
# broker with SIGTERM. (The sink issue extends this with a local S3 server.)
# Usage: scripts/demo.sh [build-dir]
set -euo pipefail
build=${1:-build}
root="$(cd "$(dirname "$0")/.." && pwd)"
queen="$root/$build/queen"
tmp=$(mktemp -d /tmp/queen-demo.XXXXXX)
pid=""
cleanup() {
  if [ -n "$pid" ] && kill -0 "$pid" 2>/dev/null; then
    kill -TERM "$pid"; wait "$pid" || true
  fi
  rm -rf "$tmp"
}
trap cleanup EXIT

free_port() {
  /usr/bin/python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'
}
port=$(free_port)
raft=$(free_port)
QUEEN_PORT=$port QUEEN_BIND_ADDR=127.0.0.1 QUEEN_RAFT_DIR="$tmp/data" \
  QUEEN_RAFT_LISTEN=127.0.0.1:$raft "$queen" 2>"$tmp/queen.log" &
pid=$!
base="http://127.0.0.1:$port"
for _ in $(seq 1 200); do
  curl -sf "$base/health" >/dev/null 2>&1 && break
  kill -0 "$pid" 2>/dev/null || { cat "$tmp/queen.log"; exit 1; }
  sleep 0.05
done
echo "demo: broker on $base (data in $tmp/data)"

echo "demo: push three messages to orders/cust-1 and orders/cust-2"
curl -s -X POST "$base/api/v1/push" -H 'content-type: application/json' -d '{"items":[ {"queue":"orders","partition":"cust-1","payload":{"order":1,"status":"new","total":42.00}}, {"queue":"orders","partition":"cust-2","payload":{"order":2,"status":"new","total":17.50}}, {"queue":"orders","partition":"cust-1","payload":{"order":1,"status":"paid","total":42.00}} ]}'
echo

echo "demo: fetch them back (payloads byte for byte: 42.00 stays 42.00)"
curl -s -X POST "$base/api/v1/fetch" -H 'content-type: application/json' \
  -d '{"entries":[{"queue":"orders","partition":"cust-1","offset":0},{"queue":"orders","partition":"cust-2","offset":0}]}'
echo

echo "demo: partitions of orders, in creation order"
curl -s -X POST "$base/api/v1/partitions/changed" -H 'content-type: application/json' \
  -d '{"entries":[{"queue":"orders"}]}'
echo

kill -TERM "$pid"
wait "$pid" && echo "demo: broker stopped cleanly (exit 0)"
pid=""
