#!/usr/bin/env bash
# bench/push: the broker's push rate beside Redis Streams in the same run.
#
# queen: single node, raft log and LMDB on disk (a temp dir), wrk with 16
# keep-alive connections POSTing /api/v1/push with 100 items of 200-byte JSON
# payloads each, for BENCH_SECONDS (20). Prints records/s and p50/p99
# request latency.
# Redis 7 peer: redis-server on a free port with AOF (appendfsync everysec),
# redis-benchmark with 16 connections pipelining XADD of the same 200-byte
# payload 100 commands at a time. Prints records/s, its p50/p99, and the
# ratio queen/redis.
#
# Usage: bench/push.sh [build-dir]   (make bench runs it via scripts/bench.sh)
set -euo pipefail
build=${1:-build}
root="$(cd "$(dirname "$0")/.." && pwd)"
queen="$root/$build/queen"
secs=${BENCH_SECONDS:-20}
conns=16
batch=100
tmp=$(mktemp -d /tmp/queen-bench-push.XXXXXX)
qpid=""; rpid=""
cleanup() {
  [ -n "$qpid" ] && kill "$qpid" 2>/dev/null && wait "$qpid" 2>/dev/null
  [ -n "$rpid" ] && kill "$rpid" 2>/dev/null && wait "$rpid" 2>/dev/null
  rm -rf "$tmp"
}
trap cleanup EXIT

free_port() {
  /usr/bin/python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'
}
wait_http() { # url
  for _ in $(seq 1 200); do
    curl -sf "$1" >/dev/null 2>&1 && return 0
    sleep 0.05
  done
  echo "bench/push: $1 did not answer" >&2; return 1
}

# One 200-byte JSON payload, and a push body of $batch items.
payload=$(/usr/bin/python3 -c '
head = "{\"order\":123456,\"status\":\"paid\",\"total\":42.00,\"note\":\""
print(head + "x" * (200 - len(head) - 2) + "\"}")')
plen=${#payload}
/usr/bin/python3 - "$payload" "$batch" "$tmp/push.lua" <<'PY'
import json, sys
payload, batch, out = sys.argv[1], int(sys.argv[2]), sys.argv[3]
items = ",".join('{"queue":"bench","partition":"p%d","payload":%s}' % (i % 4, payload)
                 for i in range(batch))
body = '{"items":[%s]}' % items
with open(out, "w") as f:
    f.write('wrk.method = "POST"\n')
    f.write('wrk.headers["Content-Type"] = "application/json"\n')
    f.write("wrk.body = %s\n" % json.dumps(body))
PY

# ---- queen ----
qport=$(free_port); rport=$(free_port)
QUEEN_PORT=$qport QUEEN_BIND_ADDR=127.0.0.1 QUEEN_RAFT_DIR="$tmp/queen" \
  QUEEN_RAFT_LISTEN=127.0.0.1:$rport QUEEN_LOG_LEVEL=warn \
  "$queen" 2>"$tmp/queen.log" &
qpid=$!
wait_http "http://127.0.0.1:$qport/health"
cpu() { awk '{print $14 + $15}' "/proc/$1/stat"; } # utime+stime, clock ticks
hz=$(getconf CLK_TCK)
qcpu0=$(cpu "$qpid")
wrk -t2 -c$conns -d${secs}s --latency -s "$tmp/push.lua" \
  "http://127.0.0.1:$qport/api/v1/push" >"$tmp/wrk.txt"
qcpu=$(( $(cpu "$qpid") - qcpu0 ))
qreqs=$(awk '/requests in/ {print $1}' "$tmp/wrk.txt")
kill -TERM "$qpid"; wait "$qpid" || true; qpid=""
qreq=$(awk '/^Requests\/sec:/ {print $2}' "$tmp/wrk.txt")
qp50=$(awk '$1=="50%" {print $2}' "$tmp/wrk.txt")
qp99=$(awk '$1=="99%" {print $2}' "$tmp/wrk.txt")
qbad=$(awk '/Non-2xx/ {print $5}' "$tmp/wrk.txt"); qbad=${qbad:-0}
qerr=$(grep -c "Socket errors" "$tmp/wrk.txt" || true)
qrate=$(/usr/bin/python3 -c "print(int(float('$qreq') * $batch))")

# ---- redis peer ----
redport=$(free_port)
redis-server --port "$redport" --bind 127.0.0.1 --dir "$tmp" --save "" \
  --appendonly yes --appendfsync everysec --daemonize no \
  --logfile "$tmp/redis.log" &
rpid=$!
for _ in $(seq 1 200); do
  redis-cli -p "$redport" ping >/dev/null 2>&1 && break; sleep 0.05
done
# as many commands as queen stored (at least 1M), so both runs are comparable
n=$(/usr/bin/python3 -c "print(max(1000000, min(int(float('$qreq') * $batch * $secs), 20000000)))")
rcpu0=$(cpu "$rpid")
redis-benchmark -p "$redport" -c $conns -P $batch -n "$n" \
  XADD bench '*' payload "$payload" >"$tmp/redis.txt" 2>&1
rlen=$(redis-cli -p "$redport" XLEN bench)
rcpu=$(( $(cpu "$rpid") - rcpu0 ))
kill "$rpid"; wait "$rpid" 2>/dev/null || true; rpid=""
rrate=$(grep -Eo 'throughput summary: [0-9.]+' "$tmp/redis.txt" | awk '{print $3}')
read -r rp50 rp99 < <(awk '/latency summary/ {getline; getline; print $3, $5}' "$tmp/redis.txt")

echo "bench/push: ${plen}-byte JSON payloads, $batch per request, $conns connections, ${secs}s"
printf "  queen  %10.0f records/s  p50 %s  p99 %s (request of %d)  non-2xx %s\n" \
  "$qrate" "$qp50" "$qp99" "$batch" "$qbad"
printf "  redis  %10.0f records/s  p50 %sms  p99 %sms (XADD, pipeline %d, AOF everysec)  XLEN %s\n" \
  "$rrate" "$rp50" "$rp99" "$batch" "$rlen"
# Records per CPU-second of the server process: less sensitive to a busy
# machine than records/s (the load generators share the same 2 cores).
/usr/bin/python3 -c "
q = $qreqs * $batch / max($qcpu / $hz, 1e-9); r = $n / max($rcpu / $hz, 1e-9)
print('  cpu    queen %.0f records per CPU-second, redis %.0f (load average %s)' % (q, r, open('/proc/loadavg').read().split()[0]))"
/usr/bin/python3 -c "print('  ratio  queen/redis = %.2f   (goal: queen >= 200000 records/s: %s)' % ($qrate / float('$rrate'), 'met' if $qrate >= 200000 else 'NOT met'))"
