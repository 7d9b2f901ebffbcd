#!/usr/bin/python3
"""bench/cp_tenants: what control-plane tenants cost the data plane (issue
15's figure): bench/push's load (wrk, 16 keep-alive connections, 100 items
of ~600-byte events JSON per request, bench/corpus.py) on one node of a
cell, beside the same load on a node that has 100 control-plane clusters,
each with its own sink (a PUT /api/cp/clusters/:slug/s3 row) mirroring a
queue of its own into the test bucket. Both nodes run the embedded sink
and the control plane; only the rows differ. Goal: 100 tenants within 5%
of none.

How the comparison stays fair on a shared machine: each side is a fresh
node measured by bench/push.py's measure() (wrk in slices back to back,
each slice marked SNAP when a raft snapshot was open during it); the
rounds alternate which side goes first (100, none, none, 100, ...), so
neither always runs on the warmer or the busier machine; before pushing,
each node idles IDLE_S seconds and its CPU then is printed (what the
tenants cost with no load at all). The summary prints the medians over
the rounds and over the slices without a snapshot on either side, and
the ratio of each (a snapshot halves the rate of the slices it falls in on
this machine).

Usage: /usr/bin/python3 bench/cp_tenants.py [build-dir]
  BENCH_SECONDS (20), BENCH_SLICES (4), BENCH_RUNS (4), BENCH_TENANTS (100).
Never a test: it only prints."""
import os
import statistics
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import push  # noqa: E402
from sink_common import BenchRun, bench_env  # noqa: E402
import cpcell  # noqa: E402  (sink_common put tests/e2e on sys.path)
from queenproc import Broker, free_port, wait_until  # noqa: E402

IDLE_S = 3


def setup_tenants(node, bucket, n):
    for i in range(n):
        slug = "t%03d" % i
        cl = cpcell.make_cluster(node, "ten-%03d" % i, slug)
        cpcell.configure(node, slug, "q.%s" % slug)
        a = cpcell.cp(node, "PUT", "/api/cp/clusters/%s/s3" % slug, {
            "queues": "q.%s" % slug, "endpoint": bucket.endpoint,
            "region": "us-east-1", "bucket": "lake",
            "accessKey": bucket.access_key, "secretKey": bucket.secret_key,
            "pathStyle": True})
        if a.status != 200:
            raise SystemExit("bench/cp_tenants: PUT s3 answered %r" % a)
        del cl
    wait_until(lambda: sum(1 for s in cpcell.s3_block(node).get("sinks", [])
                           if s.get("source") == "cp" and
                           s.get("phase") == "running") == n,
               120, "%d control-plane sinks running" % n, interval=0.5)


def applied_index(node):
    for line in node.get("/metrics").body.decode().splitlines():
        if line.startswith("queen_raft_applied_index "):
            return int(float(line.split()[1]))
    raise SystemExit("bench/cp_tenants: no queen_raft_applied_index")


def pad_to(node, index):
    """KV puts (one raft entry each) until the node applied index."""
    i = 0
    while applied_index(node) < index:
        a = node.post("/api/v1/kv", [{"op": "put", "ns": "bench-pad",
                                      "key": "k%d" % i, "value": i,
                                      "forever": True}])
        if a.status != 200:
            raise SystemExit("bench/cp_tenants: KV put answered %r" % a)
        i += 1


def one_round(run, tenants, secs, slices, script, tag, start_index):
    port = free_port()
    env = bench_env(run.bucket, QUEEN_S3_QUEUES="bench.sunk",
                    QUEEN_LOG_LEVEL="warn")
    env.update(cpcell.cell_env(port))
    node = Broker(os.path.join(run.tmp, "data-%s" % tag), env=env).start()
    node.proxy_port = port
    try:
        if tenants:
            setup_tenants(node, run.bucket, tenants)
        else:
            pad_to(node, start_index)
        start = applied_index(node)
        c0 = push.cpu_ticks(node.proc.pid)
        time.sleep(IDLE_S)
        idle = (push.cpu_ticks(node.proc.pid) - c0) / push.HZ / IDLE_S
        rnd, sl = push.measure(node.proc.pid, node.port, script, secs,
                               slices, tag=tag)
    finally:
        node.stop()
        subprocess.run(["rm", "-rf", node.data_dir])
    rnd["idle"] = idle
    rnd["start"] = start
    return rnd, sl


def main():
    secs = int(os.environ.get("BENCH_SECONDS", "20"))
    slices = int(os.environ.get("BENCH_SLICES", "4"))
    runs = int(os.environ.get("BENCH_RUNS", "4"))
    n = int(os.environ.get("BENCH_TENANTS", "100"))
    names = ("none", "%d tenants" % n)
    with BenchRun("queen-bench-cp.") as run:
        script = push.wrk_script(os.path.join(run.tmp, "push.lua"),
                                 push.corpus_payloads("events"))
        rounds = {k: [] for k in names}
        start_index = 0
        slc = {k: [] for k in names}
        print("bench/cp_tenants: events, %d per request, %d connections, "
              "%ds in %d slices per side, %d rounds, order alternating"
              % (push.BATCH, push.CONNS, secs, slices, runs))
        for r in range(1, runs + 1):
            order = names[::-1] if r % 2 else names
            for side in order:
                rnd, sl = one_round(run, 0 if side == "none" else n, secs,
                                    slices, script, "%s-%d" % (
                                        side.split()[0], r), start_index)
                if side != "none":
                    start_index = rnd["start"]
                for k, x in enumerate(sl, 1):
                    print("    slice %d.%d %-11s %s"
                          % (r, k, side, push.fmt(x)))
                print("  round %d  %-11s %s  idle %.3f cores, from raft "
                      "index %d" % (r, side, push.fmt(rnd), rnd["idle"],
                                    rnd["start"]))
                rounds[side].append(rnd)
                slc[side] += sl
        a, b = (rounds[k] for k in names)
        for k in names:
            push.summarize(k, rounds[k], slc[k])
        med = push.med
        print("  idle      none %.3f cores, %s %.3f cores (medians)"
              % (statistics.median(x["idle"] for x in a), names[1],
                 statistics.median(x["idle"] for x in b)))

        def ratio(what, xa, xb):
            if not xa or not xb:
                print("  ratio     %s: no slices on one side" % what)
                return
            q = med(xb, "rate") / med(xa, "rate")
            print("  ratio     %s / none, %s: records/s %.3f, CPU-us/record "
                  "%.3f (goal: records/s >= 0.95: %s)"
                  % (names[1], what, q, med(xb, "cpu_us") / med(xa, "cpu_us"),
                     "met" if q >= 0.95 else "NOT met"))
        ratio("rounds", a, b)
        ratio("slices without a snapshot",
              [x for x in slc[names[0]] if not x.get("snap")],
              [x for x in slc[names[1]] if not x.get("snap")])
        ratio("slices with a snapshot",
              [x for x in slc[names[0]] if x.get("snap")],
              [x for x in slc[names[1]] if x.get("snap")])
        print("  load      average: %.2f %.2f %.2f" % os.getloadavg())


if __name__ == "__main__":
    main()
