"""bench/sink helper: the embedded sink's throughput beside `zstd -3`.

A queue `bench.sink` is pre-loaded with N records (BENCH_SINK_RECORDS,
default 1,000,000) of ~500-byte JSON over 64 partitions, pushed with the
sink off in batches of 1000.  The node then boots with the sink on
(QUEEN_S3_START=earliest, default window settings, zstd) against the test
bucket (tests/bucket: s3rver behind our proxy), and the time from the
sink's start to the commit pointer announcing every record is measured.
The lake's objects are decompressed into the JSONL they hold (the tail
window under target MB closes only by age, so it is left out: the time and
bytes are those up to the last commit seen); the peer is
`zstd -3 -T1` compressing those same bytes on one core in the same run.
Prints MB/s of uncompressed JSONL per sink thread, the peer's MB/s, the
ratio (goal >= 0.5), the bucket's share of the time (sum of `ms` in the
proxy's request log), the CPU-seconds of the sink (the queen-s3 threads,
zstd's worker among them, plus the helper threads that exited meanwhile:
one uploader per window) and of the whole process per record, and the load
average.  The time runs from the sink's start to its last commit, both read
from the node's info log (the broker's own boot, which replays its log,
comes before and is printed apart).  With BENCH_SINK_PERF=FILE the sink phase runs under `perf record`
into FILE; with BENCH_SINK_STDERR=FILE the node's log is copied to FILE.
Never a test: it only prints.
Usage: /usr/bin/python3 bench/sink_run.py [build-dir]"""
import hashlib
import json
import os
import subprocess
import sys
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from sink_common import (BenchRun, bench_env, commit_times,  # noqa: E402
                         iso_s)
import lake  # noqa: E402  (sink_common put tests/ on sys.path)
from sinkenv import PREFIX, TENANT, kv_get  # noqa: E402

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


def stat_secs(path):
    """(comm, utime + stime in seconds) of a /proc stat file."""
    with open(path) as f:
        st = f.read()
    f = st[st.rindex(")") + 2:].split()
    return (st[st.index("(") + 1:st.rindex(")")],
            (int(f[11]) + int(f[12])) / os.sysconf("SC_CLK_TCK"))


def cpu_seconds(pid):
    """(CPU-s of the live threads named queen-s3, CPU-s of threads that
    exited, CPU-s of the whole process) from /proc."""
    sink = live = 0.0
    for tid in os.listdir("/proc/%d/task" % pid):
        try:
            comm, secs = stat_secs("/proc/%d/task/%s/stat" % (pid, tid))
        except OSError:
            continue
        live += secs
        sink += secs if comm.startswith("queen-s3") else 0
    whole = stat_secs("/proc/%d/stat" % pid)[1]
    return sink, whole - live, whole


def sink_cpu(at_start, now):
    """(CPU-s of the sink, of the whole process) at `now`: the queen-s3
    threads' own time plus that of threads which exited since `at_start`
    (the sink's short-lived helpers: one uploader per window, multipart
    workers), whose time lives on only in the process total."""
    return now[0] + now[1] - at_start[1], now[2]


def watch(node, total, quiet=45.0):
    """Poll /status until every record is committed, or until no commit
    for `quiet` s: the tail window (under target MB) only closes by age,
    maxWindowMs (300 s) of log clock later, and is not counted.  Returns
    (records committed, monotonic times of the first and last commits,
    CPU seconds (sink, whole process) at the last commit)."""
    seen, last, first = 0, time.monotonic(), None
    at_start = cpu_seconds(node.proc.pid)
    cpu = (0.0, 0.0)
    while seen < total and time.monotonic() - last < quiet:
        rows = node.get("/status").json()["s3"]["sinks"][0]["queues"]
        n = sum(q["records"] for q in rows if q["name"] == QUEUE)
        if n != seen:
            seen, last = n, time.monotonic()
            first = first or last
            cpu = sink_cpu(at_start, cpu_seconds(node.proc.pid))
        time.sleep(0.1)
    if seen == 0:
        raise SystemExit("bench/sink: nothing was committed")
    return seen, first, last, cpu


def sink_stamps(log):
    """From the node's info log: the wall time the sink started and those
    of every `window committed` line of the queue."""
    start = None
    for line in log.splitlines():
        if "starting the S3 sink in-process" in line:
            start = iso_s(line.split(" ", 1)[0])
            break
    commits = sorted(commit_times(log, QUEUE).values())
    if start is None or not commits:
        raise SystemExit("bench/sink: no sink start or commit in the log")
    return start, commits


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
    with BenchRun("queen-bench-sink.") as run:
        tmp, b = run.tmp, run.bucket
        # default window settings
        env = bench_env(b, QUEEN_S3_QUEUES=QUEUE, QUEEN_S3_EMBEDDED="false",
                        QUEEN_LOG_LEVEL="warn")
        node = run.start_node(env)
        t0 = time.monotonic()
        preload(node, total)
        print("preload: %d records of ~500 B over %d partitions in %.1f s"
              % (total, PARTS, time.monotonic() - t0))
        assert node.stop() == 0
        node.extra_env["QUEEN_S3_EMBEDDED"] = "true"
        node.extra_env["QUEEN_LOG_LEVEL"] = "info"  # the sink's own stamps
        t0 = time.monotonic()
        node.start(timeout=300)  # the boot replays the preloaded log
        ready = time.monotonic() - t0
        st = node.get("/status").json()["s3"]
        threads = st.get("threads") or 1
        perf = None
        if os.environ.get("BENCH_SINK_PERF"):
            perf = subprocess.Popen(
                ["perf", "record", "--call-graph", "dwarf", "-F", "250",
                 "-q", "-o", os.environ["BENCH_SINK_PERF"], "-p",
                 str(node.proc.pid)], stdout=subprocess.DEVNULL)

        committed, _, last, cpu = watch(node, total)
        if perf is not None:
            perf.send_signal(2)
            perf.wait()
        keys = lake.bucket_reader(b).list_keys(
            lake.queue_root(PREFIX, TENANT, QUEUE) + "/")
        lines = b.log_lines()
        ms = sum(x.get("ms") or 0 for x in lines)
        log = node.stderr()
        node.stop()  # its drain may commit the tail window: not counted
        if os.environ.get("BENCH_SINK_STDERR"):
            subprocess.run(["cp", node.stderr_path,
                            os.environ["BENCH_SINK_STDERR"]], check=True)
        run.node = None
        start, commits = sink_stamps(log)
        elapsed = commits[-1] - start
        data = lake_jsonl(b, keys)
        path = os.path.join(tmp, "lake.jsonl")
        with open(path, "wb") as f:
            f.write(data)
        z0, c0 = time.monotonic(), os.times()
        subprocess.run(["zstd", "-3", "-T1", "-q", "-f", "-o",
                        path + ".zst", path], check=True)
        zsecs, c1 = time.monotonic() - z0, os.times()
        zcpu = (c1.children_user + c1.children_system -
                c0.children_user - c0.children_system)
        mb = len(data) / 1e6
        ours = mb / elapsed / threads
        peer = mb / zsecs
        print("sink: %.1f MB of JSONL (%d of %d records; the rest is the "
              "tail window, closed only by age) from the sink's start to "
              "the last commit in %.2f s with %d sink thread(s): %.1f MB/s "
              "per thread" % (mb, committed, total, elapsed, threads, ours))
        print("  (from the process start: %.2f s, of which the broker's "
              "boot to /health answering %.2f s; windows committed at %s s "
              "after the sink's start)" %
              (last - t0, ready,
               ", ".join("%.2f" % (c - start) for c in commits)))
        print("  (CPU at the last commit: the sink (queen-s3 threads and "
              "its helper threads that exited) %.2f s = %.2f us/record, "
              "whole process %.2f s = %.2f us/record)" %
              (cpu[0], cpu[0] / committed * 1e6, cpu[1],
               cpu[1] / committed * 1e6))
        print("zstd -3 -T1 on the same bytes: %.2f s, %.1f MB/s (CPU %.2f s)"
              % (zsecs, peer, zcpu))
        print("ratio sink/zstd: %.2f (goal >= 0.5)" % (ours / peer))
        print("  per CPU-second (sink threads' CPU / zstd's CPU, which the "
              "machine's other load does not move): %.1f vs %.1f MB/s, "
              "ratio %.2f" % (mb / cpu[0] if cpu[0] else 0,
                              mb / zcpu if zcpu else 0,
                              zcpu / cpu[0] if cpu[0] else 0))
        print("test bucket time (sum of request ms): %.2f s = %.0f%% of "
              "the sink's time (a window's PUTs run beside the next "
              "window's reads, so only part of it is waited for; if none "
              "were: %.1f MB/s per thread, ratio %.2f)" %
              (ms / 1000, 100 * ms / 1000 / elapsed,
               mb / (elapsed - ms / 1000) / threads,
               mb / (elapsed - ms / 1000) / threads / peer))
        print("load average: %.2f %.2f %.2f" % os.getloadavg())


if __name__ == "__main__":
    main()
