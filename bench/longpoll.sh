#!/usr/bin/env bash
# bench/longpoll: push throughput with 10,000 parked long polls beside the
# same push load with none, in the same run (issue 13 item 10: parked long
# polls must not starve the broker; goal: within 10% of none).
#
# Each round starts a fresh single-node broker (default bounds: 16 parked
# long polls per connection, 10,000 per node) and, for each mode, parks
# BENCH_PARKED (10000) long polls over BENCH_PARKED/16 keep-alive
# connections (16 pipelined fetches each, maxWaitMs 30000), waits until
# queen_fetch_waiting says they all wait, then runs the push load of
# bench/push.sh (wrk, 16 connections, 100 items of 200-byte JSON per
# request, queue "bench", partitions p0..p3) for BENCH_SECONDS (10; keep
# it under 25 so no long poll reaches its deadline). Modes:
#   none   no long poll: the peer;
#   other  each waiter names one of 1000 partitions of another queue
#          (minBytes 1): a push must not touch them at all;
#   same   each waiter names one of the pushed partitions p0..p3 at offset
#          0 (maxBytes 1, so an answer stays small) with minBytes 2^62, so
#          it is never satisfied: every append
#          walks the 2,500 waiters of its partition (one addition each to
#          their estimate of what a re-read would weigh; no store read,
#          since the estimate stays under minBytes: api/longpoll.h (4)).
# Modes run interleaved (none, other, same, none, ...) for BENCH_RUNS (3)
# rounds; the summary is the median records/s of each, the ratio to none,
# and the server's CPU-µs per record. The machine is shared (2 cores, the
# load generators on the same cores): the load average is printed too.
#
# Usage: bench/longpoll.sh [build-dir]   (make bench runs it via
# scripts/bench.sh). QUEEN_BIN overrides the binary.
set -euo pipefail
build=${1:-build}
root="$(cd "$(dirname "$0")/.." && pwd)"
queen="${QUEEN_BIN:-$root/$build/queen}"
secs=${BENCH_SECONDS:-10}
runs=${BENCH_RUNS:-3}
parked=${BENCH_PARKED:-10000}
modes=${BENCH_MODES:-none other same}
conns=16
batch=100
tmp=$(mktemp -d /tmp/queen-bench-longpoll.XXXXXX)
qpid=""; ppid_=""
cleanup() {
  if [ -n "$ppid_" ]; then kill "$ppid_" 2>/dev/null || true; wait "$ppid_" 2>/dev/null || true; fi
  if [ -n "$qpid" ]; then kill "$qpid" 2>/dev/null || true; wait "$qpid" 2>/dev/null || true; fi
  rm -rf "$tmp"
}
trap cleanup EXIT
ulimit -n 65536 2>/dev/null || ulimit -n 16384 2>/dev/null || true

free_port() {
  /usr/bin/python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'
}
wait_http() { # url
  for _ in $(seq 1 200); do
    curl -sf "$1" >/dev/null 2>&1 && return 0
    sleep 0.05
  done
  echo "bench/longpoll: $1 did not answer" >&2; return 1
}
waiting() { # port
  curl -sf "http://127.0.0.1:$1/metrics/prometheus" |
    awk '$1=="queen_fetch_waiting" {print $2 + 0}'
}
cpu() { awk '{print $14 + $15}' "/proc/$1/stat"; } # utime+stime, clock ticks
hz=$(getconf CLK_TCK)
load() { cut -d' ' -f1 /proc/loadavg; }

payload=$(/usr/bin/python3 -c '
head = "{\"order\":123456,\"status\":\"paid\",\"total\":42.00,\"note\":\""
print(head + "x" * (200 - len(head) - 2) + "\"}")')
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

# The parker: opens n/16 connections, pipelines 16 long polls on each, and
# holds them until killed (it reads nothing: no waiter answers during a
# round). Args: port mode n.
cat >"$tmp/park.py" <<'PY'
import json, signal, socket, sys, time
port, mode, n = int(sys.argv[1]), sys.argv[2], int(sys.argv[3])
per_conn = 16
def req(i):
    if mode == "other":
        e = {"queue": "idle", "partition": "i%d" % (i % 1000), "offset": 0}
        body = {"entries": [e], "maxWaitMs": 30000, "minBytes": 1}
    else:
        e = {"queue": "bench", "partition": "p%d" % (i % 4), "offset": 0,
             "maxBytes": 1}
        body = {"entries": [e], "maxWaitMs": 30000, "minBytes": 1 << 62}
    data = json.dumps(body).encode()
    return (b"POST /api/v1/fetch HTTP/1.1\r\nHost: b\r\n"
            b"Content-Type: application/json\r\nContent-Length: %d\r\n\r\n"
            % len(data)) + data
socks = []
for c in range((n + per_conn - 1) // per_conn):
    s = socket.create_connection(("127.0.0.1", port))
    k = min(per_conn, n - c * per_conn)
    s.sendall(b"".join(req(c * per_conn + j) for j in range(k)))
    socks.append(s)
signal.signal(signal.SIGTERM, lambda *a: sys.exit(0))
while True:
    time.sleep(3600)
PY

# One round of one mode; appends "mode rate cpu_us_per_record load waiting"
# to $tmp/rounds.
round_of() {
  local r=$1 mode=$2 qport rport qcpu0 qcpu qreq qreqs qbad w0 w1
  qport=$(free_port); rport=$(free_port)
  QUEEN_PORT=$qport QUEEN_BIND_ADDR=127.0.0.1 QUEEN_RAFT_DIR="$tmp/q$r$mode" \
    QUEEN_RAFT_LISTEN=127.0.0.1:$rport QUEEN_LOG_LEVEL=warn \
    "$queen" 2>"$tmp/queen$r$mode.log" &
  qpid=$!
  wait_http "http://127.0.0.1:$qport/health"
  # The queues exist before anyone waits (an unknown queue answers at once).
  for q in idle bench; do
    curl -sf -X POST "http://127.0.0.1:$qport/api/v1/push" \
      -H 'content-type: application/json' \
      -d "{\"items\":[{\"queue\":\"$q\",\"partition\":\"p0\",\"payload\":0}]}" >/dev/null
  done
  w0=0
  if [ "$mode" != none ]; then
    /usr/bin/python3 "$tmp/park.py" "$qport" "$mode" "$parked" &
    ppid_=$!
    for _ in $(seq 1 600); do
      w0=$(waiting "$qport"); [ "${w0:-0}" -ge "$parked" ] && break
      sleep 0.1
    done
    [ "${w0:-0}" -ge "$parked" ] ||
      echo "bench/longpoll: round $r $mode: only $w0 long polls waiting" >&2
  fi
  qcpu0=$(cpu "$qpid")
  wrk -t2 -c$conns -d${secs}s -s "$tmp/push.lua" \
    "http://127.0.0.1:$qport/api/v1/push" >"$tmp/wrk$r$mode.txt"
  qcpu=$(( $(cpu "$qpid") - qcpu0 ))
  w1=$(waiting "$qport")
  if [ -n "$ppid_" ]; then
    # The parker's connections close: its waiters answer within a slice.
    kill "$ppid_"; wait "$ppid_" 2>/dev/null || true; ppid_=""
    for _ in $(seq 1 100); do
      [ "$(waiting "$qport")" = 0 ] && break
      sleep 0.1
    done
  fi
  kill -TERM "$qpid"; wait "$qpid" || true; qpid=""
  rm -rf "$tmp/q$r$mode"
  qreqs=$(awk '/requests in/ {print $1}' "$tmp/wrk$r$mode.txt")
  qreq=$(awk '/^Requests\/sec:/ {print $2}' "$tmp/wrk$r$mode.txt")
  qbad=$(awk '/Non-2xx/ {print $5}' "$tmp/wrk$r$mode.txt"); qbad=${qbad:-0}
  [ "$qbad" = 0 ] || echo "bench/longpoll: round $r $mode: $qbad non-2xx answers" >&2
  /usr/bin/python3 -c "
recs = $qreqs * $batch
print('$mode', $qreq * $batch, $qcpu / $hz * 1e6 / max(recs, 1), '$(load)', '$w0', '$w1')" \
    >>"$tmp/rounds"
}

for r in $(seq 1 "$runs"); do
  for mode in $modes; do
    round_of "$r" "$mode"
  done
done

echo "bench/longpoll: push load of bench/push.sh (${secs}s, $conns connections, $batch x 200 B a request) beside $parked parked long polls, $runs rounds"
/usr/bin/python3 - "$tmp/rounds" "$runs" <<'PY'
import statistics, sys
rows = [l.split() for l in open(sys.argv[1])]
by = {}
for i, r in enumerate(rows):
    by.setdefault(r[0], []).append(r)
    print("  round %d  %-5s %9.0f records/s  %5.2f CPU-us/record  (load %s, waiting %s before, %s after)"
          % (i // len(set(x[0] for x in rows)) + 1, r[0], float(r[1]), float(r[2]), r[3], r[4], r[5]))
med = {m: statistics.median(float(r[1]) for r in rs) for m, rs in by.items()}
cpu = {m: statistics.median(float(r[2]) for r in rs) for m, rs in by.items()}
for m in by:
    line = "  %-5s %9.0f records/s  %5.2f CPU-us/record  (medians)" % (m, med[m], cpu[m])
    if m != "none" and "none" in med:
        line += "   ratio %s/none = %.2f" % (m, med[m] / med["none"])
    print(line)
print("  load   average %s over the rounds" % " ".join(r[3] for r in rows))
if "other" in med and "none" in med:
    ok = med["other"] >= 0.9 * med["none"]
    print("  goal   10000 parked on other partitions within 10%% of none: %s"
          % ("met" if ok else "NOT met"))
PY
