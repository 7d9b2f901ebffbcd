#!/usr/bin/python3
"""bench/cp_tenants: what control-plane tenants cost the data plane (issue
15's figure): bench/push's load (wrk, 16 keep-alive connections, 100 items
of ~600-byte events JSON per request, bench/corpus.py) on one node of a
cell, beside the same load on a node that has 100 control-plane clusters,
each with its own sink (a PUT /api/cp/clusters/:slug/s3 row) mirroring a
queue of its own into the test bucket. Both nodes run the embedded sink
and the control plane; only the rows differ. The rounds interleave (none,
100, none, 100, ...) and the summary prints the medians of records/s and
of the server's CPU-us per record, and their ratio. Goal: 100 tenants
within 5% of none.

Usage: /usr/bin/python3 bench/cp_tenants.py [build-dir]
  BENCH_SECONDS (15), BENCH_RUNS (3), BENCH_TENANTS (100).
Never a test: it only prints."""
import json
import os
import statistics
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import corpus  # noqa: E402
from sink_common import BenchRun, bench_env  # noqa: E402
import cpcell  # noqa: E402  (sink_common put tests/e2e on sys.path)
from queenproc import Broker, free_port, wait_until  # noqa: E402

CONNS = 16
BATCH = 100


def wrk_script(path):
    items = ",".join('{"queue":"bench","partition":"p%d","payload":%s}'
                     % (i % 4, corpus.payload("events", i).decode())
                     for i in range(BATCH))
    body = '{"items":[%s]}' % items
    with open(path, "w") as f:
        f.write('wrk.method = "POST"\n')
        f.write('wrk.headers["Content-Type"] = "application/json"\n')
        f.write("wrk.body = %s\n" % json.dumps(body))


def cpu_ticks(pid):
    with open("/proc/%d/stat" % pid) as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return int(fields[11]) + int(fields[12])


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


def one_round(run, tenants, secs, script, tag):
    port = free_port()
    env = bench_env(run.bucket, QUEEN_S3_QUEUES="bench.sunk",
                    QUEEN_LOG_LEVEL="warn")
    env.update(cpcell.cell_env(port))
    node = Broker(os.path.join(run.tmp, "data-%s" % tag), env=env).start()
    node.proxy_port = port
    try:
        if tenants:
            setup_tenants(node, run.bucket, tenants)
        c0 = cpu_ticks(node.proc.pid)
        out = subprocess.run(
            ["wrk", "-t2", "-c%d" % CONNS, "-d%ds" % secs, "--latency", "-s",
             script, "http://127.0.0.1:%d/api/v1/push" % node.port],
            check=True, stdout=subprocess.PIPE, text=True).stdout
        c1 = cpu_ticks(node.proc.pid)
    finally:
        node.stop()
        subprocess.run(["rm", "-rf", node.data_dir])
    reqs = int(next(ln.split()[0] for ln in out.splitlines()
                    if "requests in" in ln))
    rate = float(next(ln.split()[1] for ln in out.splitlines()
                      if ln.startswith("Requests/sec:")))
    if "Non-2xx" in out:
        print("  warning: non-2xx answers in round %s" % tag)
    recs = reqs * BATCH
    hz = os.sysconf("SC_CLK_TCK")
    return {"rate": rate * BATCH,
            "cpu_us": (c1 - c0) / hz * 1e6 / max(1, recs),
            "load": os.getloadavg()[0]}


def main():
    secs = int(os.environ.get("BENCH_SECONDS", "15"))
    runs = int(os.environ.get("BENCH_RUNS", "3"))
    n = int(os.environ.get("BENCH_TENANTS", "100"))
    with BenchRun("queen-bench-cp.") as run:
        script = os.path.join(run.tmp, "push.lua")
        wrk_script(script)
        none, many = [], []
        for r in range(1, runs + 1):
            a = one_round(run, 0, secs, script, "none-%d" % r)
            b = one_round(run, n, secs, script, "cp-%d" % r)
            none.append(a)
            many.append(b)
            print("round %d: none %.0f records/s %.2f CPU-us/record (load "
                  "%.2f)  %d tenants %.0f records/s %.2f CPU-us/record "
                  "(load %.2f)  ratio %.3f"
                  % (r, a["rate"], a["cpu_us"], a["load"], n, b["rate"],
                     b["cpu_us"], b["load"], b["rate"] / a["rate"]))
        med = lambda rs, k: statistics.median(x[k] for x in rs)  # noqa: E731
        print("medians: none %.0f records/s %.2f CPU-us/record; %d tenants "
              "%.0f records/s %.2f CPU-us/record"
              % (med(none, "rate"), med(none, "cpu_us"), n,
                 med(many, "rate"), med(many, "cpu_us")))
        ratio = med(many, "rate") / med(none, "rate")
        print("ratio %d tenants / none: records/s %.3f, CPU-us/record %.3f "
              "(goal: records/s >= 0.95: %s)"
              % (n, ratio, med(many, "cpu_us") / med(none, "cpu_us"),
                 "met" if ratio >= 0.95 else "NOT met"))
        print("load average: %.2f %.2f %.2f" % os.getloadavg())


if __name__ == "__main__":
    main()
