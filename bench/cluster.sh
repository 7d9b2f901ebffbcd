#!/usr/bin/env bash
# bench/cluster: queen's push rate and failover on a 3-node raft cluster
# beside NATS JetStream with 3 replicas, in the same run; and both on one
# node (queen alone, one nats-server with a replicas-1 stream).
#
# Throughput. queen: N build/queen processes on this machine (raft log and
# LMDB in temp dirs on disk), one wrk per node (-t1, 6 keep-alive
# connections each; 18 in all, -t2 -c18 on a single node) POSTing
# /api/v1/push with 100 items of 200-byte JSON payloads, as bench/push.sh.
# JetStream: N nats-server (Debian) clustered over loopback routes, a stream
# with file storage and num_replicas N, one node process per server with 6
# publishers (`nats` from npm, bench/cluster_nats.mjs), each publishing
# 100 messages of the same payload at a time and awaiting all their acks
# (one "request"). Each prints records/s, p50/p99 request latency (queen:
# merged from each wrk's percentiles; JetStream: every batch timed),
# server CPU-µs per record (all N servers' utime+stime) and the load
# generators' CPU-µs per record. The machine is shared: BENCH_RUNS (3)
# interleaved rounds (queen 1, nats 1, queen 3, nats 3, ...) of
# BENCH_SECONDS (20) each, medians in the summary, load average per round.
#
# Failover. BENCH_FAILOVERS (3) rounds on a fresh 3-node cluster of each:
# two loops per survivor push one record at a time (queen: POST push,
# bench/cluster_failover.py; JetStream: publish with ack), the leader (the
# stream leader's server for JetStream) is killed with SIGKILL, and the
# figure is the time from the kill to the first 201 / ack for a push sent
# after it. Median of the rounds.
#
# Usage: bench/cluster.sh [build-dir]; QUEEN_BIN overrides the binary.
set -euo pipefail
build=${1:-build}
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
queen="${QUEEN_BIN:-$root/$build/queen}"
secs=${BENCH_SECONDS:-20}
runs=${BENCH_RUNS:-3}
fails=${BENCH_FAILOVERS:-3}
per_node=6
batch=100
token=bench-cluster-token-0123456789
command -v nats-server >/dev/null || { echo "bench/cluster: nats-server missing (scripts/setup.sh)" >&2; exit 1; }
[ -d "$root/tests/node_modules/nats" ] || { echo "bench/cluster: tests/node_modules/nats missing (scripts/setup.sh)" >&2; exit 1; }
tmp=$(mktemp -d /tmp/queen-bench-cluster.XXXXXX)
pids=()
# Every step runs whatever the one before returned (see bench/push.sh).
stop_all() {
  local p
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
  # (in braces: the shell's own "Killed" notice for a kill -9 goes too)
  for p in "${pids[@]}"; do { wait "$p"; } 2>/dev/null || true; done
  pids=()
}
cleanup() { stop_all; rm -rf "$tmp"; }
trap cleanup EXIT

free_port() {
  /usr/bin/python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'
}
cpu() { awk '{print $14 + $15}' "/proc/$1/stat"; } # utime+stime, clock ticks
cpu_all() { local s=0 p; for p in "${pids[@]}"; do s=$((s + $(cpu "$p"))); done; echo $s; }
hz=$(getconf CLK_TCK)
load() { cut -d' ' -f1 /proc/loadavg; }

payload=$(/usr/bin/python3 -c '
head = "{\"order\":123456,\"status\":\"paid\",\"total\":42.00,\"note\":\""
print(head + "x" * (200 - len(head) - 2) + "\"}")')
plen=${#payload}
# The wrk script: the push body, and a done() that writes the request
# count, the duration and 1000 latency quantiles (µs) to the file named
# in the environment, so the rounds of the N wrk processes can be merged.
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
    f.write('''
function done(summary, latency, requests)
  local f = assert(io.open(os.getenv("BENCH_WRK_OUT"), "w"))
  local e = summary.errors
  f:write(summary.requests, " ", summary.duration, " ",
          e.connect + e.read + e.write + e.status + e.timeout, "\\n")
  for k = 0, 999 do f:write(latency:percentile((k + 0.5) / 10), "\\n") end
  f:close()
end
''')
PY

# ---- queen -----------------------------------------------------------------
# start_queen N DIR: N nodes with data under DIR; sets qports (http) and
# pids, and returns once every node answers /health 200 (leader known,
# applied up to commit).
qports=()
start_queen() {
  local n=$1 dir=$2 i peers="" rports=()
  qports=()
  for i in $(seq 1 "$n"); do qports+=("$(free_port)"); rports+=("$(free_port)"); done
  for i in $(seq 1 "$n"); do
    peers+="${peers:+,}$i=127.0.0.1:${rports[i-1]}/127.0.0.1:${qports[i-1]}"
  done
  for i in $(seq 1 "$n"); do
    local env=(QUEEN_PORT="${qports[i-1]}" QUEEN_BIND_ADDR=127.0.0.1
      QUEEN_RAFT_DIR="$dir/n$i" QUEEN_RAFT_LISTEN="127.0.0.1:${rports[i-1]}"
      QUEEN_LOG_LEVEL=warn)
    [ "$n" = 1 ] || env+=(QUEEN_RAFT_NODE_ID="$i" QUEEN_RAFT_PEERS="$peers" QUEEN_RAFT_TOKEN="$token")
    env "${env[@]}" "$queen" 2>"$dir.n$i.log" &
    pids+=($!)
  done
  for i in $(seq 1 "$n"); do
    local ok=0
    for _ in $(seq 1 600); do
      curl -sf "http://127.0.0.1:${qports[i-1]}/health" >/dev/null 2>&1 && { ok=1; break; }
      sleep 0.05
    done
    [ $ok = 1 ] || { echo "bench/cluster: queen node $i not healthy; log:" >&2; tail -5 "$dir.n$i.log" >&2; return 1; }
  done
}

# Merges the wrk outputs $@ (see push.lua) into "rate p50ms p99ms requests".
merge_wrk() {
  /usr/bin/python3 - "$batch" "$@" <<'PY'
import sys
batch, files = int(sys.argv[1]), sys.argv[2:]
rate, reqs, errs, pts = 0.0, 0, 0, []
for f in files:
    lines = open(f).read().split()
    n, dur, e = int(lines[0]), int(lines[1]), int(lines[2])
    rate += n / (dur / 1e6)
    reqs += n
    errs += e
    pts += [(float(v), n / 1000.0) for v in lines[3:]]
if errs:
    print("bench/cluster: %d wrk errors (non-2xx or socket)" % errs, file=sys.stderr)
pts.sort()
tot = sum(w for _, w in pts)
def q(p):
    acc = 0.0
    for v, w in pts:
        acc += w
        if acc >= p * tot:
            return v / 1000.0
    return pts[-1][0] / 1000.0
print(rate * batch, q(0.5), q(0.99), reqs * batch)
PY
}

# queen_round N ROUND: appends "rate p50 p99 server_cpu_us client_cpu_us
# load" to $tmp/queen$N.rounds.
queen_round() {
  local n=$1 r=$2 dir="$tmp/q$1-$2" c0 c1 i outs=() recs line
  start_queen "$n" "$dir"
  c0=$(cpu_all)
  (
    if [ "$n" = 1 ]; then
      BENCH_WRK_OUT="$dir.w1" wrk -t2 -c$((per_node * 3)) -d"${secs}s" -s "$tmp/push.lua" \
        "http://127.0.0.1:${qports[0]}/api/v1/push" >/dev/null &
    else
      for i in $(seq 1 "$n"); do
        BENCH_WRK_OUT="$dir.w$i" wrk -t1 -c$per_node -d"${secs}s" -s "$tmp/push.lua" \
          "http://127.0.0.1:${qports[i-1]}/api/v1/push" >/dev/null &
      done
    fi
    wait
    awk '{print $16 + $17}' "/proc/$BASHPID/stat" >"$dir.ccpu"
  )
  c1=$(cpu_all)
  stop_all
  rm -rf "$dir"
  for i in $(seq 1 "$n"); do [ -f "$dir.w$i" ] && outs+=("$dir.w$i"); done
  [ "$n" = 1 ] && outs=("$dir.w1")
  line=$(merge_wrk "${outs[@]}")
  recs=$(echo "$line" | awk '{print $4}')
  /usr/bin/python3 -c "print('$line'.rsplit(' ', 1)[0], ($c1 - $c0) / $hz * 1e6 / max($recs, 1), $(cat "$dir.ccpu") / $hz * 1e6 / max($recs, 1), '$(load)')" \
    >>"$tmp/queen$n.rounds"
}

# ---- NATS JetStream --------------------------------------------------------
# start_nats N DIR: N nats-server with JetStream (store under DIR),
# clustered over loopback routes when N > 1, and the stream "bench" with N
# replicas; sets nurls, nnames and pids.
nurls=(); nnames=()
start_nats() {
  local n=$1 dir=$2 i cports=() routes="" ports=()
  nurls=(); nnames=()
  for i in $(seq 1 "$n"); do ports+=("$(free_port)"); cports+=("$(free_port)"); done
  for i in $(seq 1 "$n"); do routes+="${routes:+,}nats://127.0.0.1:${cports[i-1]}"; done
  for i in $(seq 1 "$n"); do
    local args=(-a 127.0.0.1 -p "${ports[i-1]}" -n "bench$i" -js -sd "$dir/n$i")
    [ "$n" = 1 ] || args+=(--cluster_name bench --cluster "nats://127.0.0.1:${cports[i-1]}" --routes "$routes")
    mkdir -p "$dir/n$i"
    nats-server "${args[@]}" >"$dir.n$i.log" 2>&1 &
    pids+=($!)
    nurls+=("nats://127.0.0.1:${ports[i-1]}")
    nnames+=("bench$i")
  done
  local all
  all=$(IFS=,; echo "${nurls[*]}")
  node "$root/bench/cluster_nats.mjs" stream "$all" "$n" >"$dir.leader" ||
    { echo "bench/cluster: JetStream stream not created; log:" >&2; tail -5 "$dir.n1.log" >&2; return 1; }
}

# nats_round N ROUND: appends the same columns as queen_round to
# $tmp/nats$N.rounds.
nats_round() {
  local n=$1 r=$2 dir="$tmp/n$1-$2" c0 c1 i procs line
  start_nats "$n" "$dir"
  c0=$(cpu_all)
  procs=$n; [ "$n" = 1 ] && procs=2 # 18 publishers on one server: 2 processes of 9, as wrk -t2
  (
    for i in $(seq 1 "$procs"); do
      node "$root/bench/cluster_nats.mjs" pub "${nurls[(i-1) % n]}" $((per_node * 3 / procs)) \
        "$secs" "$batch" "$payload" "$dir.p$i" &
    done
    wait
    awk '{print $16 + $17}' "/proc/$BASHPID/stat" >"$dir.ccpu"
  )
  c1=$(cpu_all)
  stop_all
  rm -rf "$dir"
  line=$(/usr/bin/python3 - "$dir".p* <<'PY'
import sys
rate, recs, lat = 0.0, 0, []
for f in sys.argv[1:]:
    lines = open(f).read().split("\n")
    n, el = lines[0].split()
    rate += int(n) / float(el)
    recs += int(n)
    lat += [float(x) for x in lines[1:] if x]
lat.sort()
q = lambda p: lat[min(len(lat) - 1, int(p * len(lat)))]
print(rate, q(0.5), q(0.99), recs)
PY
)
  recs=$(echo "$line" | awk '{print $4}')
  /usr/bin/python3 -c "print('$line'.rsplit(' ', 1)[0], ($c1 - $c0) / $hz * 1e6 / max($recs, 1), $(cat "$dir.ccpu") / $hz * 1e6 / max($recs, 1), '$(load)')" \
    >>"$tmp/nats$n.rounds"
}

# ---- rounds ----------------------------------------------------------------
# (BENCH_CLUSTER_LIB=1: sourced for its functions, as bench/cluster_probe.sh
# does.)
[ "${BENCH_CLUSTER_LIB:-0}" = 1 ] && return 0
for r in $(seq 1 "$runs"); do
  queen_round 1 "$r"
  nats_round 1 "$r"
  queen_round 3 "$r"
  nats_round 3 "$r"
done

# The shell's own "Killed" notice for the server killed by the helper goes
# to /dev/null; the helpers' errors to the script's stderr (fd 3).
exec 3>&2
for r in $(seq 1 "$fails"); do
  {
    start_queen 3 "$tmp/fq$r" 2>&3
    /usr/bin/python3 "$root/bench/cluster_failover.py" "$(IFS=,; echo "${qports[*]}")" \
      "$(IFS=,; echo "${pids[*]}")" "$payload" >>"$tmp/queen.failover" 2>&3
    stop_all
    rm -rf "$tmp/fq$r"
    start_nats 3 "$tmp/fn$r" 2>&3
    node "$root/bench/cluster_nats.mjs" failover "$(IFS=,; echo "${nurls[*]}")" \
      "$(IFS=,; echo "${nnames[*]}")" "$(IFS=,; echo "${pids[*]}")" "$payload" >>"$tmp/nats.failover" 2>&3
    stop_all
    rm -rf "$tmp/fn$r"
  } 2>/dev/null
done

echo "bench/cluster: ${plen}-byte JSON payloads, $batch per request, $((per_node * 3)) connections/publishers, ${secs}s, $runs rounds, $fails failovers"
/usr/bin/python3 - "$tmp" "$batch" <<'PY'
import statistics, sys
tmp, batch = sys.argv[1], int(sys.argv[2])
def rows(name):
    return [[float(x) for x in l.split()] for l in open("%s/%s.rounds" % (tmp, name))]
med = lambda rs, k: statistics.median(x[k] for x in rs)
def line(tag, rs):
    return ("%-14s %9.0f records/s  p50 %7.2fms  p99 %7.2fms  server %5.2f CPU-us/record"
            "  client %5.2f CPU-us/record" % (tag, med(rs, 0), med(rs, 1), med(rs, 2), med(rs, 3), med(rs, 4)))
q1, n1, q3, n3 = rows("queen1"), rows("nats1"), rows("queen3"), rows("nats3")
for i in range(len(q1)):
    print("  round %d  load %s" % (i + 1, " ".join("%.2f" % rs[i][5] for rs in (q1, n1, q3, n3))))
    for tag, rs in (("queen 1 node", q1), ("jetstream R1", n1), ("queen 3 nodes", q3), ("jetstream R3", n3)):
        print("    %-14s %9.0f records/s  p50 %7.2fms  p99 %7.2fms  server %5.2f  client %5.2f CPU-us/record"
              % (tag, rs[i][0], rs[i][1], rs[i][2], rs[i][3], rs[i][4]))
print("  medians (request = %d records; JetStream: %d publishes, every ack awaited)" % (batch, batch))
for tag, rs in (("queen 1 node", q1), ("jetstream R1", n1), ("queen 3 nodes", q3), ("jetstream R3", n3)):
    print("  " + line(tag, rs))
def fo(name):
    out = []
    for l in open("%s/%s.failover" % (tmp, name)):
        out.append(dict(x.split("=") for x in l.split()))
    return out
qf, nf = fo("queen"), fo("nats")
ms = lambda rs: [float(x["ms"]) for x in rs]
print("  failover (kill -9 of the leader to the first 201 / ack through a survivor; errors:"
      " answers not 201 / publishes not acked in between)")
print("  queen         %s ms  median %.0f ms  (new leader's /health after %s ms)"
      % (" ".join("%.0f (%s errors)" % (float(x["ms"]), x["errors"]) for x in qf),
         statistics.median(ms(qf)), " ".join("%.0f" % float(x["elected"]) for x in qf)))
print("  jetstream R3  %s ms  median %.0f ms"
      % (" ".join("%.0f (%s errors)" % (float(x["ms"]), x["errors"]) for x in nf), statistics.median(ms(nf))))
r3, r1 = med(q3, 0) / med(n3, 0), med(q1, 0) / med(n1, 0)
p99ok = med(q3, 2) <= med(n3, 2)
print("  ratio  queen/jetstream: 3 nodes %.2f records/s (p99 %.2f), 1 node %.2f records/s (p99 %.2f)"
      % (r3, med(q3, 2) / med(n3, 2), r1, med(q1, 2) / med(n1, 2)))
print("  goal   3 nodes >= 1.0x JetStream R3 at a p99 no worse: %s; failover <= JetStream's: %s"
      % ("met" if r3 >= 1.0 and p99ok else "NOT met",
         "met" if statistics.median(ms(qf)) <= statistics.median(ms(nf)) else "NOT met"))
PY
