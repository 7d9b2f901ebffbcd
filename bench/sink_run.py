"""bench/sink helper: the embedded sink's throughput beside `zstd -3`.

A queue `bench.sink` is pre-loaded with N records (BENCH_SINK_RECORDS,
default 1,000,000) of ~500-byte JSON over 64 partitions, pushed with the
sink off in batches of 1000.  The node then boots with the sink on
(QUEEN_S3_START=earliest, default window settings, zstd) against the test
bucket (tests/bucket: s3rver behind our proxy), and the time from the
process start to the commit pointer announcing every record is measured.
The lake's objects are decompressed into the JSONL they hold (the tail
window under target MB closes only by age, so it is left out: the time and
bytes are those up to the last commit seen); the peer is
`zstd -3 -T1` compressing those same bytes on one core in the same run.
Prints MB/s of uncompressed JSONL per sink thread, the peer's MB/s, the
ratio (goal >= 0.5) and the bucket's share of the time (sum of `ms` in the
proxy's request log).  Never a test: it only prints.
Usage: /usr/bin/python3 bench/sink_run.py [build-dir]"""
import datetime
import hashlib
import json
import os
import subprocess
import sys
import tempfile
import threading
import time

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), ".."))
sys.path[:0] = [os.path.join(ROOT, "tests", "integration"),
                os.path.join(ROOT, "tests", "bucket"),
                os.path.join(ROOT, "tests", "e2e")]
import lake  # noqa: E402
from bucket import TestBucket  # noqa: E402
from queenproc import Broker  # noqa: E402
from sinkenv import PREFIX, TENANT, kv_get, sink_env  # noqa: E402

QUEUE = "bench.sink"
PARTS = 64
BATCH = 1000


def payload(n):
    """~500 bytes of JSON whose note is hex of a hash chain (compresses
    like text, not like a run of one letter)."""
    head = b'{"order":%d,"status":"paid","total":42.00,"note":"' % n
    note = b""
    h = b"%d" % n
    while len(note) < 500 - len(head) - 2:
        h = hashlib.sha256(h).digest()
        note += h.hex().encode()
    return head + note[:500 - len(head) - 2] + b'"}'


def preload(node, total, threads=2):
    """Push `total` records in batches; returns the bytes of payload."""
    lock = threading.Lock()
    state = {"next": 0}

    def worker():
        while True:
            with lock:
                start = state["next"]
                if start >= total:
                    return
                state["next"] = min(total, start + BATCH)
                end = state["next"]
            items = [{"queue": QUEUE, "partition": "p%02d" % (i % PARTS),
                      "payload": payload(i)} for i in range(start, end)]
            r = node.request("POST", "/api/v1/push",
                             body=lake.push_body(items), timeout=120)
            if r.status != 201:
                raise SystemExit("bench/sink: push answered %r" % r)
    ts = [threading.Thread(target=worker) for _ in range(threads)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()


def committed_records(node):
    row = kv_get(node, "s3:default:%s:committed" % QUEUE)
    if not row["found"]:
        return 0
    v = row["value"]
    v = json.loads(v) if isinstance(v, str) else v
    return v


def watch(node, total, quiet=45.0):
    """Poll /status until every record is committed, or until no commit
    for `quiet` s: the tail window (under target MB) only closes by age,
    maxWindowMs (300 s) of log clock later, and is not counted.  Returns
    (records committed, monotonic times of the first and last commits)."""
    seen, last, first = 0, time.monotonic(), None
    while seen < total and time.monotonic() - last < quiet:
        rows = node.get("/status").json()["s3"]["sinks"][0]["queues"]
        n = sum(q["records"] for q in rows if q["name"] == QUEUE)
        if n != seen:
            seen, last = n, time.monotonic()
            first = first or last
        time.sleep(0.1)
    if seen == 0:
        raise SystemExit("bench/sink: nothing was committed")
    return seen, first, last


def wall(iso):
    """Seconds since the epoch of the request log's ISO-µs stamp."""
    return datetime.datetime.strptime(iso, "%Y-%m-%dT%H:%M:%S.%fZ").replace(
        tzinfo=datetime.timezone.utc).timestamp()


def lake_jsonl(b, keys):
    """The uncompressed JSONL bytes of the queue's data objects `keys`."""
    reader = lake.bucket_reader(b)
    out = []
    for key in keys:
        data = reader.read(key)
        out.append(lake.decompress(data, "zstd", key)
                   if key.endswith(".zst") else data)
    return b"".join(out)


def main():
    total = int(os.environ.get("BENCH_SINK_RECORDS", "1000000"))
    tmp = tempfile.mkdtemp(prefix="queen-bench-sink.")
    b = TestBucket(buckets=["lake"]).start()
    node = None
    try:
        env = sink_env(b, QUEEN_S3_QUEUES=QUEUE, QUEEN_S3_EMBEDDED="false",
                       QUEEN_LOG_LEVEL="warn")
        for k in ("QUEEN_S3_ALIGN", "QUEEN_S3_MAX_WINDOW_MS",
                  "QUEEN_S3_DISCOVERY_INTERVAL_MS", "QUEEN_S3_SAFE_GUARD_MS",
                  "QUEEN_S3_LEASE_TTL_MS", "QUEEN_S3_SHUTDOWN_GRACE_MS",
                  "QUEEN_S3_CHECKPOINT_EVERY"):
            env.pop(k)  # default window settings
        node = Broker(os.path.join(tmp, "data"), env=env).start()
        t0 = time.monotonic()
        preload(node, total)
        print("preload: %d records of ~500 B over %d partitions in %.1f s"
              % (total, PARTS, time.monotonic() - t0))
        assert node.stop() == 0
        node.extra_env["QUEEN_S3_EMBEDDED"] = "true"
        t0, t0w = time.monotonic(), time.time()
        node.start()
        st = node.get("/status").json()["s3"]
        threads = st.get("threads") or 1

        committed, _, last = watch(node, total)
        elapsed = last - t0
        keys = lake.bucket_reader(b).list_keys(
            lake.queue_root(PREFIX, TENANT, QUEUE) + "/")
        lines = b.log_lines()
        ms = sum(x.get("ms") or 0 for x in lines)
        node.stop()  # its drain may commit the tail window: not counted
        node = None
        data = lake_jsonl(b, keys)
        path = os.path.join(tmp, "lake.jsonl")
        with open(path, "wb") as f:
            f.write(data)
        z0 = time.monotonic()
        subprocess.run(["zstd", "-3", "-T1", "-q", "-f", "-o",
                        path + ".zst", path], check=True)
        zsecs = time.monotonic() - z0
        mb = len(data) / 1e6
        ours = mb / elapsed / threads
        peer = mb / zsecs
        print("sink: %.1f MB of JSONL (%d of %d records; the rest is the "
              "tail window, closed only by age) from boot to the last "
              "commit in %.2f s with %d sink thread(s): %.1f MB/s per "
              "thread" % (mb, committed, total, elapsed, threads, ours))
        puts = [wall(x["t"]) - t0w for x in lines if x["method"] == "PUT"
                and "/windows/" not in (x["key"] or "")]
        if puts:
            print("  (boot to the first data PUT landing: %.2f s, which "
                  "includes the default safe guard of 5 s and discovery "
                  "of 2 s; data PUTs span %.2f s)" %
                  (min(puts), max(puts) - min(puts)))
        print("zstd -3 -T1 on the same bytes: %.2f s, %.1f MB/s" %
              (zsecs, peer))
        print("ratio sink/zstd: %.2f (goal >= 0.5)" % (ours / peer))
        print("test bucket time (sum of request ms): %.2f s = %.0f%% of "
              "the sink's time" % (ms / 1000, 100 * ms / 1000 / elapsed))
    finally:
        if node is not None:
            node.stop()
        b.stop()
        subprocess.run(["rm", "-rf", tmp])


if __name__ == "__main__":
    main()
