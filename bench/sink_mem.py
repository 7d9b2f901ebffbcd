"""bench/sink_mem helper: the broker's memory with the embedded sink on,
10,000 partitions receiving traffic and QUEEN_S3_MEMORY_MB=64, beside the
same broker without the sink under the same traffic (issue 5, Performance).

Two phases in one run, each on a fresh data dir and the same paced traffic:
BENCH_MEM_RATE records/s (5000) for BENCH_MEM_SECONDS (120), 100 records a
push from two keep-alive connections, payloads of 200-500 B, the records
walking round-robin over 10,000 partitions of one queue (every push touches
100 partitions, every partition gets a record every 2 s at 5000/s).
  1. no sink: QUEEN_S3_EMBEDDED=false;
  2. sink: QUEEN_S3_EMBEDDED=true against the test bucket, START=earliest,
     QUEEN_S3_MEMORY_MB=64, every other setting at its default (so windows
     would grow to 128 MB or 300 s: the budget is what closes them).
A sampler reads /proc/<pid>/status every 250 ms (VmRSS, RssAnon, RssFile)
and VmHWM at the end, through the traffic and BENCH_MEM_SETTLE (15) s after.
Prints both peaks, the largest object in the bucket (one window's object),
and the goal RSS(sink) <= 64 MB + RSS(no sink) + one window's object, met
or not, on VmHWM and on anonymous memory (RssFile is LMDB's map: the pages
of the log a reader touched, which the kernel can drop; the sink reads the
whole log, the no-sink broker barely reads it); then, from time-paired
samples, the sink's RssAnon over the no-sink broker's, with and without its
buffered weight of the moment (the metric, read once a second).  Never a
test: it prints.
Usage: /usr/bin/python3 bench/sink_mem.py [build-dir]"""
import os
import subprocess
import sys
import tempfile
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from sink_lag import (ROOT, TEST_ONLY, batch_body, group_cpu,  # noqa: E402
                      loadavg, paced_producer, payloads, proc_cpu)
import lake  # noqa: E402  (sink_lag put tests/ on sys.path)
from bucket import TestBucket  # noqa: E402
from queenproc import Broker  # noqa: E402
from sinkenv import PREFIX, TENANT, sink_env  # noqa: E402

QUEUE = "bench.mem"
PARTS = 10000
BATCH = 100
CONNS = 2
MEMORY_MB = 64
MB = 1024 * 1024


def proc_status(pid):
    """VmRSS, RssAnon, RssFile, VmHWM of /proc/<pid>/status in bytes."""
    out = {}
    try:
        with open("/proc/%d/status" % pid) as f:
            for line in f:
                k, _, v = line.partition(":")
                if k in ("VmRSS", "RssAnon", "RssFile", "VmHWM"):
                    out[k] = int(v.split()[0]) * 1024
    except OSError:
        pass
    return out


class Sampler(threading.Thread):
    """Samples the broker's memory (and, with the sink, its buffered
    bytes) until stop(); keeps the peaks."""

    def __init__(self, node, with_sink):
        super().__init__(daemon=True)
        self.node, self.with_sink = node, with_sink
        self.peak = {"VmRSS": 0, "RssAnon": 0, "RssFile": 0, "VmHWM": 0}
        self.buffered_peak = 0
        self.buffered = 0
        self.samples = 0
        self.timeline = []  # (s since start, VmRSS, RssAnon, buffered)
        self.t0 = time.monotonic()
        self.done = threading.Event()

    def run(self):
        last_metric = 0.0
        while not self.done.wait(0.25):
            st = proc_status(self.node.proc.pid)
            for k, v in st.items():
                self.peak[k] = max(self.peak[k], v)
            self.samples += 1
            if self.with_sink and time.monotonic() - last_metric >= 1.0:
                last_metric = time.monotonic()
                try:
                    v = self.node.metric("queen_s3_buffer_bytes")
                except OSError:
                    v = None
                self.buffered = int(v or 0)
                self.buffered_peak = max(self.buffered_peak, self.buffered)
            self.timeline.append((time.monotonic() - self.t0,
                                  st.get("VmRSS", 0), st.get("RssAnon", 0),
                                  self.buffered))

    def stop(self):
        self.done.set()
        self.join()
        st = proc_status(self.node.proc.pid)
        self.peak["VmHWM"] = max(self.peak["VmHWM"], st.get("VmHWM", 0))
        return self.peak


def run_phase(b, tmp, name, with_sink, rate, seconds, settle, pool):
    env = sink_env(b, QUEEN_S3_QUEUES=QUEUE, QUEEN_S3_START="earliest",
                   QUEEN_S3_MEMORY_MB=MEMORY_MB, QUEEN_LOG_LEVEL="info",
                   QUEEN_S3_EMBEDDED="true" if with_sink else "false")
    for k in TEST_ONLY + ("QUEEN_S3_MAX_WINDOW_MS",):
        env.pop(k)
    node = Broker(os.path.join(tmp, name), env=env).start()
    try:
        base = proc_status(node.proc.pid)
        cpu0 = proc_cpu(node.proc.pid)
        s = Sampler(node, with_sink)
        s.start()
        period = BATCH / float(rate)
        res = paced_producer(
            node.port, seconds, period, BATCH, CONNS,
            lambda s0, n: batch_body(QUEUE, s0, n, PARTS, pool, "p%05d"))
        time.sleep(settle)  # the sink keeps reading: keep sampling
        peak = s.stop()
        cpu = proc_cpu(node.proc.pid) - cpu0
        out = {"peak": peak, "base": base, "res": res, "cpu": cpu,
               "buffered": s.buffered_peak, "samples": s.samples,
               "timeline": s.timeline}
        if with_sink:
            row = node.get("/status").json()["s3"]["sinks"][0]["queues"]
            q = [x for x in row if x["name"] == QUEUE]
            out["committed"] = q[0]["records"] if q else 0
            out["windows"] = q[0]["windowsCommitted"] if q else 0
            out["forced"] = node.stderr().count("memory budget reached")
        return out
    finally:
        node.stop()


def largest_object(b):
    reader = lake.bucket_reader(b)
    best = (0, None)
    for key in reader.list_keys(lake.queue_root(PREFIX, TENANT, QUEUE) +
                                "/"):
        best = max(best, (os.path.getsize(b.object_path("lake", key)), key))
    return best


def mb(n):
    return n / MB


def describe(name, ph):
    p, r = ph["peak"], ph["res"]
    print("%s: pushed %d records at %.0f/s over %.1f s (%d slots late); "
          "RSS at boot %.1f MB; peak VmHWM %.1f MB, VmRSS %.1f MB "
          "(RssAnon %.1f MB, RssFile %.1f MB) over %d samples; broker "
          "%.1f us CPU per record" % (
              name, r["acked"], r["acked"] / r["elapsed"], r["elapsed"],
              r["late"], mb(ph["base"].get("VmRSS", 0)), mb(p["VmHWM"]),
              mb(p["VmRSS"]), mb(p["RssAnon"]), mb(p["RssFile"]),
              ph["samples"], ph["cpu"] / max(1, r["acked"]) * 1e6))


def paired(on, off, less_buffered=False):
    """RssAnon(sink) - RssAnon(no sink) at the same time since the
    traffic began (the same records pushed): the sink's share with the
    broker's own saw-tooth (the raft log in memory, each snapshot's copy
    of the store) mostly taken out; with less_buffered, also less the
    sink's buffered weight of that moment (what the sink holds beyond its
    budget: the plan, the encoder, read buffers, holes).  Returns (median,
    max) in bytes."""
    if not on or not off:
        return 0, 0
    diffs, j = [], 0
    for t, _, anon, buffered in on:
        while j + 1 < len(off) and abs(off[j + 1][0] - t) <= abs(off[j][0] - t):
            j += 1
        diffs.append(anon - off[j][2] - (buffered if less_buffered else 0))
    diffs.sort()
    return diffs[len(diffs) // 2], diffs[-1]


def timeline(on, off):
    """Every 10 s: RssAnon of both phases and the sink's buffered bytes."""
    j = 0
    rows = []
    for t, _, anon, buffered in on:
        if t < 10 * len(rows):
            continue
        while j + 1 < len(off) and off[j + 1][0] <= t:
            j += 1
        rows.append("%3.0fs %5.0f/%5.0f/%4.0f" % (t, mb(anon), mb(off[j][2]),
                                                  mb(buffered)))
    print("timeline (MB: RssAnon sink / no sink / buffered):")
    for i in range(0, len(rows), 4):
        print("  " + "   ".join(rows[i:i + 4]))


def verdict(what, sink, nosink, obj):
    goal = MEMORY_MB * MB + nosink + obj
    print("goal on %s: %.1f MB <= %d MB + %.1f MB + %.1f MB = %.1f MB: %s"
          % (what, mb(sink), MEMORY_MB, mb(nosink), mb(obj), mb(goal),
             "MET" if sink <= goal else "NOT MET"))


def main():
    build = sys.argv[1] if len(sys.argv) > 1 else "build"
    os.environ.setdefault("QUEEN_BIN", os.path.join(ROOT, build, "queen"))
    rate = int(os.environ.get("BENCH_MEM_RATE", "5000"))
    seconds = float(os.environ.get("BENCH_MEM_SECONDS", "120"))
    settle = float(os.environ.get("BENCH_MEM_SETTLE", "15"))
    tmp = tempfile.mkdtemp(prefix="queen-bench-mem.")
    b = TestBucket(buckets=["lake"]).start()
    pool = payloads(512)
    try:
        print("traffic: %d records/s for %.0f s over %d partitions of one "
              "queue, payloads 200-500 B; load average %s" % (
                  rate, seconds, PARTS, loadavg()))
        bcpu0 = group_cpu(b.proc.pid)
        off = run_phase(b, tmp, "nosink", False, rate, seconds, settle, pool)
        describe("no sink", off)
        on = run_phase(b, tmp, "sink", True, rate, seconds, settle, pool)
        describe("sink   ", on)
        size, key = largest_object(b)
        print("sink: %d windows committed (%d of %d records), %d closed "
              "early by the budget; peak queen_s3_buffer_bytes %.1f MB "
              "(limit %d MB); test bucket %.1f CPU-s" % (
                  on["windows"], on["committed"], on["res"]["acked"],
                  on["forced"], mb(on["buffered"]), MEMORY_MB,
                  group_cpu(b.proc.pid) - bcpu0))
        print("one window's object (the largest in the bucket): %.1f MB%s"
              % (mb(size), " (%s)" % key.rsplit("/", 1)[-1] if key else ""))
        verdict("VmHWM", on["peak"]["VmHWM"], off["peak"]["VmHWM"], size)
        verdict("anonymous memory (peak RssAnon)", on["peak"]["RssAnon"],
                off["peak"]["RssAnon"], size)
        med_d, max_d = paired(on["timeline"], off["timeline"])
        print("RssAnon(sink) - RssAnon(no sink) at the same point of the "
              "traffic: median %.1f MB, max %.1f MB" % (mb(med_d),
                                                        mb(max_d)))
        med_x, max_x = paired(on["timeline"], off["timeline"], True)
        print("the same less the sink's buffered weight (its memory beyond "
              "the budget): median %.1f MB, max %.1f MB" % (mb(med_x),
                                                          mb(max_x)))
        if os.environ.get("BENCH_MEM_VERBOSE"):
            timeline(on["timeline"], off["timeline"])
        print("load average after: %s (2 cores, shared machine)" %
              loadavg())
    finally:
        b.stop()
        subprocess.run(["rm", "-rf", tmp])


if __name__ == "__main__":
    main()
