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
# The machine is shared, so the two peers run BENCH_RUNS (3) interleaved
# rounds (queen, redis, queen, redis, ...) and the summary is the median of
# each figure. Beside the wall figures each round prints CPU-µs per record
# of the server process (utime+stime, less sensitive to a busy machine than
# records/s; the load generators share the same 2 cores) and the load
# average.
#
# With --tls (bench/push_tls.sh) the peer is queen itself over plain HTTP:
# each round runs queen plain, then queen over HTTPS (QUEEN_TLS_CERT/KEY, a
# self-signed RSA-2048 certificate made here; wrk keeps its 16 TLS
# connections open, so this is the cost of encryption, not of handshakes),
# and the summary prints the ratio https/plain. Redis is not run then.
#
# With --encrypted (bench/push_enc.sh) the peer is queen itself too: every
# round pushes for BENCH_SECONDS to a plain queue and to a queue with
# encryptionEnabled, each on a fresh broker with QUEEN_ENCRYPTION_KEY (each payload sealed with AES-256-GCM before it is
# proposed, docs/design/formats.md §11); payloads are 500-byte JSON, and
# the summary prints the ratio encrypted/plain (issue 15's goal: >= 0.8).
#
# Usage: bench/push.sh [--tls|--encrypted] [build-dir]   (make bench runs
# each via scripts/bench.sh). QUEEN_BIN overrides the binary (to compare two builds
# with one script).
set -euo pipefail
tls=0
enc=0
if [ "${1:-}" = "--tls" ]; then tls=1; shift; fi
if [ "${1:-}" = "--encrypted" ]; then enc=1; shift; fi
build=${1:-build}
root="$(cd "$(dirname "$0")/.." && pwd)"
queen="${QUEEN_BIN:-$root/$build/queen}"
secs=${BENCH_SECONDS:-20}
runs=${BENCH_RUNS:-3}
conns=16
batch=100
tmp=$(mktemp -d /tmp/queen-bench-push.XXXXXX)
qpid=""; rpid=""
# Every step runs whatever the one before returned: under set -e, the wait
# on a killed server (143) would otherwise end the cleanup there.
cleanup() {
  if [ -n "$qpid" ]; then kill "$qpid" 2>/dev/null || true; wait "$qpid" 2>/dev/null || true; fi
  if [ -n "$rpid" ]; then kill "$rpid" 2>/dev/null || true; wait "$rpid" 2>/dev/null || true; fi
  rm -rf "$tmp"
}
trap cleanup EXIT

free_port() {
  /usr/bin/python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'
}
wait_http() { # url
  for _ in $(seq 1 200); do
    curl -sfk "$1" >/dev/null 2>&1 && return 0
    sleep 0.05
  done
  echo "bench/push: $1 did not answer" >&2; return 1
}
cpu() { awk '{print $14 + $15}' "/proc/$1/stat"; } # utime+stime, clock ticks
hz=$(getconf CLK_TCK)
load() { cut -d' ' -f1 /proc/loadavg; }

# One JSON payload (200 bytes; 500 with --encrypted, an order-like
# document), and a push body of $batch items.
psize=200
if [ "$enc" = 1 ]; then psize=500; fi
payload=$(/usr/bin/python3 - "$psize" <<'PY'
import sys
size = int(sys.argv[1])
head = "{\"order\":123456,\"status\":\"paid\",\"total\":42.00,\"note\":\""
if size > 200:
    head = ('{"order":123456,"customer":{"id":"c-20931","name":"Ana Lima",'
            '"email":"ana@example.com"},"items":[{"sku":"A-1","qty":2,'
            '"price":9.95},{"sku":"B-7","qty":1,"price":22.10}],'
            '"status":"paid","total":42.00,"note":"')
print(head + "x" * (size - len(head) - 2) + "\"}")
PY
)
plen=${#payload}
mkqueue_lua() { # queue out
/usr/bin/python3 - "$payload" "$batch" "$2" "$1" <<'PY'
import json, sys
payload, batch, out, queue = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4]
items = ",".join('{"queue":"%s","partition":"p%d","payload":%s}' % (queue, i % 4, payload)
                 for i in range(batch))
body = '{"items":[%s]}' % items
with open(out, "w") as f:
    f.write('wrk.method = "POST"\n')
    f.write('wrk.headers["Content-Type"] = "application/json"\n')
    f.write("wrk.body = %s\n" % json.dumps(body))
PY
}
mkqueue_lua bench "$tmp/push.lua"
mkqueue_lua sealed "$tmp/push-enc.lua"

if [ "$tls" = 1 ]; then
  openssl req -x509 -newkey rsa:2048 -nodes -keyout "$tmp/tls.key" \
    -out "$tmp/tls.crt" -days 2 -subj /CN=127.0.0.1 2>/dev/null
fi

# One queen round: a fresh data dir; appends "rate p50 p99 cpu_us load
# records" to $tmp/queen.rounds ($tmp/queen-https.rounds over TLS). $2 is
# the scheme, http (default) or https.
queen_round() {
  local r=$1 scheme=${2:-http} qport rport qcpu0 qcpu qreqs qreq qp50 qp99 qbad
  local out="$tmp/queen.rounds" tag="$r"
  local tlsenv=()
  if [ "$scheme" = https ]; then
    out="$tmp/queen-https.rounds"; tag="$r-https"
    tlsenv=(QUEEN_TLS_CERT="$tmp/tls.crt" QUEEN_TLS_KEY="$tmp/tls.key")
  fi
  qport=$(free_port); rport=$(free_port)
  env QUEEN_PORT=$qport QUEEN_BIND_ADDR=127.0.0.1 QUEEN_RAFT_DIR="$tmp/queen$tag" \
    QUEEN_RAFT_LISTEN=127.0.0.1:$rport QUEEN_LOG_LEVEL=warn "${tlsenv[@]}" \
    "$queen" 2>"$tmp/queen$tag.log" &
  qpid=$!
  wait_http "$scheme://127.0.0.1:$qport/health"
  qcpu0=$(cpu "$qpid")
  wrk -t2 -c$conns -d${secs}s --latency -s "$tmp/push.lua" \
    "$scheme://127.0.0.1:$qport/api/v1/push" >"$tmp/wrk$tag.txt"
  qcpu=$(( $(cpu "$qpid") - qcpu0 ))
  kill -TERM "$qpid"; wait "$qpid" || true; qpid=""
  rm -rf "$tmp/queen$tag"
  wrk_row "$tmp/wrk$tag.txt" "$qcpu" "$tag" >>"$out"
}

# Print "rate p50 p99 cpu_us load records" of one wrk output ($1) and the
# server's CPU ticks over it ($2); $3 names the round in warnings.
wrk_row() {
  local f=$1 qcpu=$2 r=$3 qreqs qreq qp50 qp99 qbad
  qreqs=$(awk '/requests in/ {print $1}' "$f")
  qreq=$(awk '/^Requests\/sec:/ {print $2}' "$f")
  qp50=$(awk '$1=="50%" {print $2}' "$f")
  qp99=$(awk '$1=="99%" {print $2}' "$f")
  qbad=$(awk '/Non-2xx/ {print $5}' "$f"); qbad=${qbad:-0}
  [ "$qbad" = 0 ] || echo "bench/push: queen round $r: $qbad non-2xx answers" >&2
  /usr/bin/python3 - "$qreq" "$qreqs" "$qcpu" "$qp50" "$qp99" "$(load)" \
    "$batch" "$hz" <<'PY'
import sys
req, reqs, cpu, p50, p99, load, batch, hz = sys.argv[1:]
ms = lambda s: float(s[:-2]) if s.endswith("ms") else float(s[:-2]) / 1000 if s.endswith("us") else float(s[:-1]) * 1000
recs = int(reqs) * int(batch)
print(float(req) * int(batch), ms(p50), ms(p99), int(cpu) / int(hz) * 1e6 / max(recs, 1), load, recs)
PY
}

# One --encrypted round: the plain queue "bench", then the queue "sealed"
# (encryptionEnabled), each on a broker of its own with the same key and a
# fresh data directory (a second run on the same store would pay for the
# first one's snapshot); the order alternates between rounds. Appends to
# $tmp/queen.rounds and $tmp/queen-enc.rounds.
enc_round() {
  local r=$1 q order
  order="plain enc"
  if [ $((r % 2)) = 0 ]; then order="enc plain"; fi
  for q in $order; do
    enc_phase "$r" "$q"
  done
}

enc_phase() {
  local r=$1 q=$2 qport rport c0 name=bench flag=false lua="$tmp/push.lua" out="$tmp/queen.rounds"
  if [ "$q" = enc ]; then
    name=sealed; flag=true; lua="$tmp/push-enc.lua"; out="$tmp/queen-enc.rounds"
  fi
  qport=$(free_port); rport=$(free_port)
  env QUEEN_PORT=$qport QUEEN_BIND_ADDR=127.0.0.1 QUEEN_RAFT_DIR="$tmp/queen$r$q" \
    QUEEN_RAFT_LISTEN=127.0.0.1:$rport QUEEN_LOG_LEVEL=warn \
    QUEEN_ENCRYPTION_KEY="$(openssl rand -hex 32)" \
    "$queen" 2>"$tmp/queen$r$q.log" &
  qpid=$!
  wait_http "http://127.0.0.1:$qport/health"
  curl -sf -XPOST -H 'Content-Type: application/json' \
    -d "{\"queue\":\"$name\",\"options\":{\"encryptionEnabled\":$flag}}" \
    "http://127.0.0.1:$qport/api/v1/configure" >/dev/null
  c0=$(cpu "$qpid")
  wrk -t2 -c$conns -d${secs}s --latency -s "$lua" \
    "http://127.0.0.1:$qport/api/v1/push" >"$tmp/wrk$r-$q.txt"
  wrk_row "$tmp/wrk$r-$q.txt" $(( $(cpu "$qpid") - c0 )) "$r-$q" >>"$out"
  if grep -q "stored plaintext" "$tmp/queen$r$q.log"; then
    echo "bench/push: round $r stored plaintext:" >&2; cat "$tmp/queen$r$q.log" >&2
  fi
  kill -TERM "$qpid"; wait "$qpid" || true; qpid=""
  rm -rf "$tmp/queen$r$q"
}

# One redis round, as many XADDs as queen stored in its round (at least 1M).
redis_round() {
  local r=$1 n redport rcpu0 rcpu rrate rp50 rp99
  n=$(awk 'END {print ($6 > 1000000 ? ($6 < 20000000 ? $6 : 20000000) : 1000000)}' "$tmp/queen.rounds")
  redport=$(free_port)
  mkdir -p "$tmp/redis$r"
  redis-server --port "$redport" --bind 127.0.0.1 --dir "$tmp/redis$r" --save "" \
    --appendonly yes --appendfsync everysec --daemonize no \
    --logfile "$tmp/redis$r.log" &
  rpid=$!
  for _ in $(seq 1 200); do
    redis-cli -p "$redport" ping >/dev/null 2>&1 && break; sleep 0.05
  done
  rcpu0=$(cpu "$rpid")
  redis-benchmark -p "$redport" -c $conns -P $batch -n "$n" \
    XADD bench '*' payload "$payload" >"$tmp/redis$r.txt" 2>&1
  rcpu=$(( $(cpu "$rpid") - rcpu0 ))
  kill "$rpid"; wait "$rpid" 2>/dev/null || true; rpid=""
  rm -rf "$tmp/redis$r"
  rrate=$(grep -Eo 'throughput summary: [0-9.]+' "$tmp/redis$r.txt" | awk '{print $3}')
  read -r rp50 rp99 < <(awk '/latency summary/ {getline; getline; print $3, $5}' "$tmp/redis$r.txt")
  /usr/bin/python3 -c "print($rrate, $rp50, $rp99, $rcpu / $hz * 1e6 / $n, '$(load)', $n)" \
    >>"$tmp/redis.rounds"
}

if [ "$tls" = 1 ]; then
  for r in $(seq 1 "$runs"); do
    queen_round "$r" http
    queen_round "$r" https
  done
  echo "bench/push --tls: ${plen}-byte JSON payloads, $batch per request, $conns keep-alive connections, ${secs}s, $runs rounds"
  /usr/bin/python3 - "$tmp/queen.rounds" "$tmp/queen-https.rounds" "$batch" <<'PY'
import statistics, sys
def rows(path):
    return [[float(x) for x in line.split()] for line in open(path)]
p, t, batch = rows(sys.argv[1]), rows(sys.argv[2]), int(sys.argv[3])
for i, (a, b) in enumerate(zip(p, t), 1):
    print("  round %d  http %8.0f records/s p99 %7.2fms %5.2f CPU-us/record (load %.2f)"
          "  https %8.0f records/s p99 %7.2fms %5.2f CPU-us/record (load %.2f)  ratio %.2f"
          % (i, a[0], a[2], a[3], a[4], b[0], b[2], b[3], b[4], b[0] / a[0]))
med = lambda rs, k: statistics.median(x[k] for x in rs)
for name, rs in (("http ", p), ("https", t)):
    print("  %s  %10.0f records/s  p50 %.2fms  p99 %.2fms (request of %d)  %.2f CPU-us/record  (medians)"
          % (name, med(rs, 0), med(rs, 1), med(rs, 2), batch, med(rs, 3)))
print("  ratio  https/http = %.2f records/s, %.2f CPU-us/record"
      % (med(t, 0) / med(p, 0), med(t, 3) / med(p, 3)))
PY
  exit 0
fi

if [ "$enc" = 1 ]; then
  for r in $(seq 1 "$runs"); do
    enc_round "$r"
  done
  echo "bench/push --encrypted: ${plen}-byte JSON payloads, $batch per request, $conns keep-alive connections, ${secs}s per queue, $runs rounds"
  /usr/bin/python3 - "$tmp/queen.rounds" "$tmp/queen-enc.rounds" "$batch" <<'PY'
import statistics, sys
def rows(path):
    return [[float(x) for x in line.split()] for line in open(path)]
p, e, batch = rows(sys.argv[1]), rows(sys.argv[2]), int(sys.argv[3])
for i, (a, b) in enumerate(zip(p, e), 1):
    print("  round %d  plain %8.0f records/s p99 %7.2fms %5.2f CPU-us/record (load %.2f)"
          "  encrypted %8.0f records/s p99 %7.2fms %5.2f CPU-us/record (load %.2f)  ratio %.2f"
          % (i, a[0], a[2], a[3], a[4], b[0], b[2], b[3], b[4], b[0] / a[0]))
med = lambda rs, k: statistics.median(x[k] for x in rs)
for name, rs in (("plain    ", p), ("encrypted", e)):
    print("  %s  %10.0f records/s  p50 %.2fms  p99 %.2fms (request of %d)  %.2f CPU-us/record  (medians)"
          % (name, med(rs, 0), med(rs, 1), med(rs, 2), batch, med(rs, 3)))
ratio = med(e, 0) / med(p, 0)
print("  ratio  encrypted/plain = %.2f records/s, %.2f CPU-us/record   (goal: >= 0.80: %s)"
      % (ratio, med(e, 3) / med(p, 3), "met" if ratio >= 0.8 else "NOT met"))
PY
  exit 0
fi

for r in $(seq 1 "$runs"); do
  queen_round "$r"
  redis_round "$r"
done

echo "bench/push: ${plen}-byte JSON payloads, $batch per request, $conns connections, ${secs}s, $runs rounds"
/usr/bin/python3 - "$tmp/queen.rounds" "$tmp/redis.rounds" "$batch" <<'PY'
import statistics, sys
def rows(path):
    return [[float(x) for x in line.split()] for line in open(path)]
q, r, batch = rows(sys.argv[1]), rows(sys.argv[2]), int(sys.argv[3])
for i, (a, b) in enumerate(zip(q, r), 1):
    print("  round %d  queen %8.0f records/s p50 %6.2fms p99 %7.2fms %5.2f CPU-us/record (load %.2f)"
          "  redis %8.0f records/s %5.2f CPU-us/record (load %.2f)  ratio %.2f"
          % (i, a[0], a[1], a[2], a[3], a[4], b[0], b[3], b[4], a[0] / b[0]))
med = lambda rs, k: statistics.median(x[k] for x in rs)
qr, rr = med(q, 0), med(r, 0)
print("  queen  %10.0f records/s  p50 %.2fms  p99 %.2fms (request of %d)  %.2f CPU-us/record  (medians)"
      % (qr, med(q, 1), med(q, 2), batch, med(q, 3)))
print("  redis  %10.0f records/s  p50 %.3fms  p99 %.3fms (XADD, pipeline %d, AOF everysec)  %.2f CPU-us/record  (medians)"
      % (rr, med(r, 1), med(r, 2), batch, med(r, 3)))
print("  load   average %s over the rounds" % " ".join("%.2f" % x[4] for x in q + r))
print("  ratio  queen/redis = %.2f   (goal: queen >= 200000 records/s: %s)"
      % (qr / rr, "met" if qr >= 200000 else "NOT met"))
PY
