"""bench/sink_partitions helper: the broker's memory with the embedded sink
on a queue of many partitions, each written once, then traffic on 1,000 of
them, beside the same broker without the sink in the same run (issue 13
item 8: per-partition state bounded and counted).

Two phases, each on a fresh data dir:
  load: a node without the sink takes BENCH_PARTS_N partitions (1,000,000)
     of one queue, one 100-byte record each, in pushes of 10,000 records
     (10,000 partitions a push) from two connections; then it stops.
  run: the node boots again on that data, without the sink (phase 1) or
     with it (phase 2: START=latest, QUEEN_S3_MEMORY_MB=BENCH_PARTS_MB (64),
     QUEEN_S3_MAX_WINDOW_MS=BENCH_PARTS_WINDOW_MS (10000), the rest at its
     defaults), and takes BENCH_PARTS_RATE records/s (2000) for
     BENCH_PARTS_SECONDS (60) over 1,000 of the partitions, spread over the
     whole range, then BENCH_PARTS_SETTLE (15) s of quiet. A checkpoint
     (all 1,000,000 positions) comes every 20 windows, the product's
     default, so none in a default run's 8 windows but the drain's after
     the sampling: BENCH_PARTS_CHECKPOINT_EVERY=2 sets
     QUEEN_S3_CHECKPOINT_EVERY to measure them.
A sampler reads /proc/<pid>/status every 250 ms from the second boot on.
Prints the load time, both phases' peak RssAnon and VmHWM, the sink's
status (tracked partitions, those the last full sweep counted) and its
queen_s3_buffer_bytes (buffered weight plus the partitions' own bytes),
and the figure: RssAnon(sink) - RssAnon(no sink), peak against peak,
beside QUEEN_S3_MEMORY_MB + one window's object (the largest in the
bucket). Never a test: it prints.
Usage: /usr/bin/python3 bench/sink_partitions.py [build-dir]"""
import os
import subprocess
import sys
import tempfile
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from sink_lag import (ROOT, TEST_ONLY, Pusher, loadavg,  # noqa: E402
                      paced_producer, payloads)
from sink_mem import Sampler, largest_object, mb, proc_status  # noqa: E402
from bucket import TestBucket  # noqa: E402
from queenproc import Broker  # noqa: E402
from sinkenv import sink_env  # noqa: E402

QUEUE = "bench.parts"
HOT = 1000
LOAD_BATCH = 10000
BATCH = 100
MB = 1024 * 1024


def name(i):
    return "p%07d" % i


def load(port, n):
    """One 100-byte record in each of n partitions; returns seconds."""
    body_rec = b'{"seq":%d,"note":"' + b"x" * 70 + b'"}'
    t0 = time.monotonic()
    errors = []

    def worker(i):
        p = Pusher(port)
        try:
            for s0 in range(i * LOAD_BATCH, n, 2 * LOAD_BATCH):
                items = [b'{"queue":"%s","partition":"%s","payload":%s}' % (
                    QUEUE.encode(), name(s).encode(), body_rec % s)
                    for s in range(s0, min(n, s0 + LOAD_BATCH))]
                p.push(b'{"items":[' + b",".join(items) + b"]}", timeout=300)
        except BaseException as e:  # reported after the join
            errors.append(e)
        finally:
            p.close()

    ts = [threading.Thread(target=worker, args=(i,)) for i in range(2)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    if errors:
        raise SystemExit("bench: load failed: %r" % errors[0])
    return time.monotonic() - t0


def hot_body(n_parts):
    pool = payloads(256)
    step = max(1, n_parts // HOT)

    def make(s0, n):
        items = []
        for j in range(n):
            s = s0 + j
            p = pool[s % len(pool)].replace(b"{seq}", b"%d" % s)
            items.append(b'{"queue":"%s","partition":"%s","payload":%s}' % (
                QUEUE.encode(), name((s % HOT) * step).encode(), p))
        return b'{"items":[' + b",".join(items) + b"]}"
    return make


def node_env(b, with_sink, memory_mb, window_ms):
    env = sink_env(b, QUEEN_S3_QUEUES=QUEUE, QUEEN_S3_START="latest",
                   QUEEN_S3_MEMORY_MB=memory_mb, QUEEN_LOG_LEVEL="info",
                   QUEEN_S3_MAX_WINDOW_MS=window_ms,
                   QUEEN_S3_EMBEDDED="true" if with_sink else "false")
    for k in TEST_ONLY:
        env.pop(k)
    every = os.environ.get("BENCH_PARTS_CHECKPOINT_EVERY")
    if every:
        env["QUEEN_S3_CHECKPOINT_EVERY"] = every
    return env


def phase(b, tmp, label, with_sink, n, cfg):
    data = os.path.join(tmp, label, "data")
    os.makedirs(os.path.dirname(data))
    node = Broker(data, env=node_env(b, False, cfg["mb"], cfg["window"]))
    node.start()
    try:
        secs = load(node.port, n)
    finally:
        node.stop()
    node = Broker(data, env=node_env(b, with_sink, cfg["mb"], cfg["window"]))
    node.start(timeout=300)
    try:
        base = proc_status(node.proc.pid)
        s = Sampler(node, with_sink)
        s.start()
        res = paced_producer(node.port, cfg["seconds"],
                             BATCH / float(cfg["rate"]), BATCH, 2,
                             hot_body(n))
        time.sleep(cfg["settle"])
        peak = s.stop()
        out = {"load_s": secs, "base": base, "peak": peak, "res": res,
               "buffered": s.buffered_peak}
        if with_sink:
            rows = node.get("/status").json()["s3"]["sinks"][0]["queues"]
            q = [x for x in rows if x["name"] == QUEUE]
            out["row"] = q[0] if q else {}
            text = node.get("/metrics/prometheus").body.decode()
            out["swept"] = [ln.rpartition(" ")[2] for ln in text.splitlines()
                            if ln.startswith("queen_s3_discovery_partitions")]
        return out
    finally:
        node.stop()


def main():
    build = sys.argv[1] if len(sys.argv) > 1 else "build"
    os.environ.setdefault("QUEEN_BIN", os.path.join(ROOT, build, "queen"))
    n = int(os.environ.get("BENCH_PARTS_N", "1000000"))
    cfg = {"mb": int(os.environ.get("BENCH_PARTS_MB", "64")),
           "window": int(os.environ.get("BENCH_PARTS_WINDOW_MS", "10000")),
           "rate": int(os.environ.get("BENCH_PARTS_RATE", "2000")),
           "seconds": float(os.environ.get("BENCH_PARTS_SECONDS", "60")),
           "settle": float(os.environ.get("BENCH_PARTS_SETTLE", "15"))}
    tmp = tempfile.mkdtemp(prefix="queen-bench-parts.")
    b = TestBucket(buckets=["lake"]).start()
    try:
        print("%d partitions written once, then %d records/s for %.0f s over "
              "%d of them; load average %s" % (n, cfg["rate"],
                                               cfg["seconds"], HOT,
                                               loadavg()))
        off = phase(b, tmp, "nosink", False, n, cfg)
        on = phase(b, tmp, "sink", True, n, cfg)
        for label, ph in (("no sink", off), ("sink   ", on)):
            p = ph["peak"]
            print("%s: load %.0f s; at boot RssAnon %.1f MB; peak RssAnon "
                  "%.1f MB, VmHWM %.1f MB, RssFile %.1f MB; traffic %d "
                  "records acked" % (label, ph["load_s"],
                                     mb(ph["base"].get("RssAnon", 0)),
                                     mb(p["RssAnon"]), mb(p["VmHWM"]),
                                     mb(p["RssFile"]), ph["res"]["acked"]))
        row = on.get("row", {})
        size, _ = largest_window(b)
        print("sink: %s windows committed, %s records; tracked partitions "
              "%s of %s the last full sweep counted; peak "
              "queen_s3_buffer_bytes %.1f MB (buffered weight + partition "
              "bytes)" % (row.get("windowsCommitted"), row.get("records"),
                          row.get("partitions"),
                          ",".join(on.get("swept", [])) or "?",
                          mb(on["buffered"])))
        extra = on["peak"]["RssAnon"] - off["peak"]["RssAnon"]
        goal = cfg["mb"] * MB + size
        print("sink RssAnon beyond the no-sink broker: %.1f MB, beside "
              "QUEEN_S3_MEMORY_MB + one window = %d MB + %.1f MB = %.1f MB: "
              "%s" % (mb(extra), cfg["mb"], mb(size), mb(goal),
                      "within" if extra <= goal else "OVER"))
        extra_hwm = on["peak"]["VmHWM"] - off["peak"]["VmHWM"]
        print("the same on VmHWM (LMDB pages the reads touched included): "
              "%.1f MB" % mb(extra_hwm))
        print("load average after: %s (2 cores, shared machine)" % loadavg())
    finally:
        b.stop()
        subprocess.run(["rm", "-rf", tmp])


def largest_window(b):
    """The largest object of the queue in the bucket (one window's)."""
    import sink_mem
    old = sink_mem.QUEUE
    sink_mem.QUEUE = QUEUE
    try:
        return largest_object(b)
    finally:
        sink_mem.QUEUE = old


if __name__ == "__main__":
    main()
