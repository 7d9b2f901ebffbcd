#!/usr/bin/env bash
# bench/http: the HTTP layer alone (tests/tools/http_echo) beside Node's http
# module in the same run. Node is the natural peer: it is libuv + llhttp too,
# so the ratio shows what our connection, queue and answer code costs.
#
# Both servers echo a POST body on 127.0.0.1. wrk (2 threads, 64 keep-alive
# connections, BENCH_SECONDS each, default 10) posts two bodies: 25 bytes
# (per-request overhead) and 20 KiB (about a 100-record push). Prints req/s
# for each and the ratio queen/node. wrk shares the machine's cores with the
# server, as in docs/design/dependencies.md §3.
#
# Usage: bench/http.sh [build-dir]
set -euo pipefail
build=${1:-build}
root="$(cd "$(dirname "$0")/.." && pwd)"
echo_bin="$root/$build/tools/http_echo"
secs=${BENCH_SECONDS:-10}
tmp=$(mktemp -d /tmp/queen-bench-http.XXXXXX)
pids=() # every server started, stopped on exit
# Each step may fail (a server already gone; wait answers 143 for a killed
# one) without set -e cutting the cleanup short, which used to leave the
# second server running and $tmp behind.
cleanup() {
  local p
  for p in "${pids[@]}"; do
    kill "$p" 2>/dev/null || true
    wait "$p" 2>/dev/null || true
  done
  rm -rf "$tmp"
}
trap cleanup EXIT

free_port() {
  /usr/bin/python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'
}
wait_http() { # url
  for _ in $(seq 1 200); do
    curl -sf -X POST --data x "$1" >/dev/null 2>&1 && return 0
    sleep 0.05
  done
  echo "bench/http: $1 did not answer" >&2; return 1
}

eport=$(free_port)
"$echo_bin" --port "$eport" >/dev/null 2>"$tmp/echo.err" &
pids+=($!)
nport=$(free_port)
node -e '
const http = require("http");
http.createServer((req, res) => {
  const parts = [];
  req.on("data", (c) => parts.push(c));
  req.on("end", () => {
    const body = Buffer.concat(parts);
    res.writeHead(200, {"Content-Type": "application/octet-stream",
                        "Content-Length": body.length});
    res.end(body);
  });
}).listen(Number(process.argv[1]), "127.0.0.1");
' "$nport" &
pids+=($!)
for port in "$eport" "$nport"; do
  wait_http "http://127.0.0.1:$port/echo"
done

rate() { # port lua -> req/s
  wrk -t 2 -c 64 -d "${secs}s" -s "$2" "http://127.0.0.1:$1/echo" |
    awk '/^Requests\/sec:/ {print $2}'
}
for size in 25 20480; do
  /usr/bin/python3 - "$size" "$tmp/post.lua" <<'PY'
import sys
n, out = int(sys.argv[1]), sys.argv[2]
with open(out, "w") as f:
    f.write('wrk.method = "POST"\n')
    f.write('wrk.headers["Content-Type"] = "application/json"\n')
    f.write('wrk.body = "%s"\n' % ("x" * n))
PY
  q=$(rate "$eport" "$tmp/post.lua")
  n=$(rate "$nport" "$tmp/post.lua")
  ratio=$(/usr/bin/python3 -c "print('%.2f' % ($q / $n))")
  printf 'http echo %6d B body: queen %10.0f req/s   node %10.0f req/s   ratio %sx\n' \
    "$size" "$q" "$n" "$ratio"
done
