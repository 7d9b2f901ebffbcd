"""bench/sink_lag helper: the embedded sink's lag at a steady 10,000
records/s (issue 5, Performance).

One node with the sink on (QUEEN_S3_EMBEDDED=true) against the test bucket
(tests/bucket: s3rver behind our SigV4-verifying proxy), with
QUEEN_S3_MAX_WINDOW_MS=10000, QUEEN_S3_START=earliest and every other
setting at its default (align hour, guard QUEEN_S3_SAFE_GUARD_MS 5000 ms,
discovery every 2000 ms, target 128 MB).  A paced producer pushes 100
records every 10 ms (two keep-alive connections taking turns, payloads of
200-500 B over 8 partitions) for BENCH_LAG_SECONDS (300).  Then it waits
for the last window to commit and reads the lake back: for every record,
lag = (its window's commit time) - (its ts).  The commit time is the
broker's "window committed" log line (the pointer moved); the manifest's
committedAt (taken before the manifest PUT) is printed beside it.

Prints p50/p90/p99/max beside the goal p99 <= maxWindowMs + guard + 2 s,
met or not; the push rate actually achieved (and how late the producer
ran); where the time between ts and commit goes (window span, tEnd to the
data PUT, the PUTs, to the pointer); CPU-seconds per record of the broker,
the bucket and the producer; the load average.  Never a test: it only
prints.  Usage: /usr/bin/python3 bench/sink_lag.py [build-dir]"""
import http.client
import json
import os
import re
import resource
import sys
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
# ROOT and TEST_ONLY are sink_mem.py's too (it imports them from here).
from sink_common import (ROOT, TEST_ONLY, BenchRun,  # noqa: E402,F401
                         bench_env, commit_times, iso_s)
import lake  # noqa: E402  (sink_common put tests/ on sys.path)
from sinkenv import PREFIX, TENANT  # noqa: E402

QUEUE = "bench.lag"
PARTS = 8
BATCH = 100
PERIOD = 0.010  # one push of BATCH every PERIOD: 10,000 records/s
CONNS = 2
MAX_WINDOW_MS = 10000
DEFAULT_GUARD_MS = 5000  # QUEEN_S3_SAFE_GUARD_MS default (docs/design/config.md §4)
TICK = os.sysconf("SC_CLK_TCK")


# --- helpers sink_mem.py imports too -------------------------------------

def proc_cpu(pid):
    """CPU-seconds (user + system) of one live process, 0.0 if gone."""
    try:
        with open("/proc/%d/stat" % pid) as f:
            fields = f.read().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0
    return (int(fields[11]) + int(fields[12])) / TICK


def group_cpu(pgid):
    """CPU-seconds of every live process of a process group (the test
    bucket's proxy and its s3rver)."""
    total = 0.0
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open("/proc/%s/stat" % name) as f:
                fields = f.read().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[2]) == pgid:
            total += (int(fields[11]) + int(fields[12])) / TICK
    return total


def self_cpu():
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


def loadavg():
    return "%.2f %.2f %.2f" % os.getloadavg()


def percentile(sorted_values, p):
    """Nearest-rank percentile of an ascending list (p in 0..100)."""
    if not sorted_values:
        return float("nan")
    i = max(0, min(len(sorted_values) - 1,
                   int(round(p / 100.0 * len(sorted_values) + 0.5)) - 1))
    return sorted_values[i]


def payloads(n, lo=200, hi=500):
    """n distinct JSON payloads of lo..hi bytes (hex of a hash chain, so
    they compress like text); {seq} is filled in per record."""
    import hashlib
    out = []
    h = b"queen"
    for i in range(n):
        size = lo + (i * 7919) % (hi - lo + 1)
        head = b'{"seq":{seq},"status":"paid","total":42.00,"note":"'
        note = b""
        while len(note) < size:
            h = hashlib.sha256(h).digest()
            note += h.hex().encode()
        out.append(head + note[:max(1, size - len(head) - 2)] + b'"}')
    return out


class Pusher:
    """Pushes batches over one keep-alive connection; reopens it on error."""

    def __init__(self, port):
        self.port = port
        self.conn = None

    def push(self, body, timeout=60):
        for attempt in range(3):
            if self.conn is None:
                self.conn = http.client.HTTPConnection("127.0.0.1", self.port,
                                                       timeout=timeout)
            try:
                self.conn.request("POST", "/api/v1/push", body=body, headers={
                    "content-type": "application/json"})
                r = self.conn.getresponse()
                data = r.read()
            except (OSError, http.client.HTTPException):
                self.conn.close()
                self.conn = None
                if attempt == 2:
                    raise
                continue
            if r.status != 201:
                raise SystemExit("bench: push answered %d %r" %
                                 (r.status, data[:200]))
            return data.count(b'"queued"')
        return 0

    def close(self):
        if self.conn is not None:
            self.conn.close()


def batch_body(queue, seq0, n, parts, pool, part_name="p%d"):
    items = []
    for j in range(n):
        s = seq0 + j
        p = pool[s % len(pool)].replace(b"{seq}", b"%d" % s)
        items.append(b'{"queue":"%s","partition":"%s","payload":%s}' % (
            queue.encode(), (part_name % (s % parts)).encode(), p))
    return b'{"items":[' + b",".join(items) + b"]}"


def paced_producer(port, seconds, period, batch, conns, make_body):
    """Push `batch` records every `period` s for `seconds` from `conns`
    keep-alive connections taking turns (connection i sends the slots
    n = i mod conns at t0 + n * period; a late slot goes at once, so the
    producer catches up when it can).  Returns a dict: records acked,
    elapsed, slots, late slots (> one period late), the worst lateness and
    the stalls: [start s after t0, worst lateness s] of runs more than 1 s
    behind (both connections report theirs)."""
    slots = int(round(seconds / period))
    lock = threading.Lock()
    res = {"acked": 0, "late": 0, "worst_late": 0.0, "error": None,
           "stalls": []}
    t0 = time.monotonic() + 0.2
    res["t0_wall"] = time.time() + 0.2

    def worker(i):
        p = Pusher(port)
        acked, late, worst, stalls = 0, 0, 0.0, []
        try:
            for n in range(i, slots, conns):
                due = t0 + n * period
                now = time.monotonic()
                if now < due:
                    time.sleep(due - now)
                else:
                    behind = now - due
                    worst = max(worst, behind)
                    late += behind > period
                    if behind > 1.0 and (not stalls or
                                         stalls[-1][0] + stalls[-1][1] <
                                         due - t0 - 1.0):
                        stalls.append([due - t0, behind])
                    elif behind > 1.0:
                        stalls[-1][1] = max(stalls[-1][1], behind)
                acked += p.push(make_body(n * batch, batch))
        except BaseException as e:  # noqa: BLE001 (reported below)
            res["error"] = e
        finally:
            p.close()
            with lock:
                res["acked"] += acked
                res["late"] += late
                res["worst_late"] = max(res["worst_late"], worst)
                res["stalls"].extend(stalls)
    ts = [threading.Thread(target=worker, args=(i,)) for i in range(conns)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    res["elapsed"] = time.monotonic() - t0
    res["slots"] = slots
    if res["error"] is not None:
        raise SystemExit("bench: the producer failed: %r" % res["error"])
    return res


class SnapWatch(threading.Thread):
    """Notes the wall time each libraft snapshot (snapshot-*.meta in the
    node's raft dir) first appears; libraft deletes old ones, so the dir
    is polled every 250 ms while the producer runs."""

    def __init__(self, raft_dir):
        super().__init__(daemon=True)
        self.raft_dir = raft_dir
        self.seen = {}
        self.done = threading.Event()

    def run(self):
        while not self.done.wait(0.25):
            try:
                names = os.listdir(self.raft_dir)
            except OSError:
                continue
            for name in names:
                if name.startswith("snapshot-") and name.endswith(".meta"):
                    self.seen.setdefault(name, time.time())

    def stop(self):
        self.done.set()
        self.join()
        return sorted(self.seen.values())


def describe_stalls(res, snaps):
    """Print the producer's stalls (> 1 s behind schedule, merged over the
    connections) and when the broker's raft snapshots landed."""
    merged = []
    for start, worst in sorted(res["stalls"]):
        if merged and start <= merged[-1][0] + merged[-1][1] + 1.0:
            merged[-1][1] = max(merged[-1][1], worst)
        else:
            merged.append([start, worst])
    if merged:
        print("producer stalls (s after the first push: worst lateness): " +
              ", ".join("%.0f: %.1f s" % (a, w) for a, w in merged))
    if snaps:
        print("raft snapshots landed at (s after the first push): " +
              ", ".join("%.0f" % (t - res["t0_wall"]) for t in snaps))


# --- the lag benchmark ----------------------------------------------------

TS_RE = re.compile(rb',"ts":"([0-9T:.Z-]{27})"')


def read_windows(b, queue):
    """[(manifest, [ts seconds of each record])] for every committed
    window of the queue, in k order, read from the bucket's files."""
    reader = lake.bucket_reader(b)
    side = lake.sidecar_root(PREFIX, TENANT, queue) + "/windows/"
    out = []
    for key in sorted(reader.list_keys(side)):
        m = json.loads(reader.read(key))
        stamps = []
        cache = {}
        for obj in m["objects"]:
            data = reader.read(obj["key"])
            if obj["key"].endswith(".zst"):
                data = lake.decompress(data, "zstd", obj["key"])
            for ts in TS_RE.findall(data):
                sec = cache.get(ts[:19])
                if sec is None:
                    sec = cache[ts[:19]] = iso_s(ts[:19].decode() +
                                                 ".000000Z")
                stamps.append(sec + int(ts[20:26]) / 1e6)
        out.append((m, stamps))
    return out


def put_times(b):
    """key -> (start, end) wall seconds of its last successful PUT."""
    out = {}
    for x in b.log_lines():
        if x["method"] == "PUT" and x["status"] == 200 and x["key"]:
            end = iso_s(x["t"])
            out[x["key"]] = (end - (x["ms"] or 0) / 1000.0, end)
    return out


def med(values):
    return percentile(sorted(values), 50)


def report_lag(b, node, total, guard_ms):
    windows = read_windows(b, QUEUE)
    committed = commit_times(node.stderr(), QUEUE)
    puts = put_times(b)
    lags, lags_m, span, to_put, put_s, to_ptr = [], [], [], [], [], []
    n = 0
    for m, stamps in windows:
        k = m["k"]
        c_manifest = iso_s(m["committedAt"])
        c = committed.get(k, c_manifest)
        n += len(stamps)
        lags.extend(c - ts for ts in stamps)
        lags_m.extend(c_manifest - ts for ts in stamps)
        if m["tStart"] > 0:
            span.append((m["tEnd"] - m["tStart"]) / 1e6)
        data = [puts[o["key"]] for o in m["objects"] if o["key"] in puts]
        mkey = lake.manifest_key(PREFIX, TENANT, QUEUE, k)
        if data and mkey in puts:
            to_put.append(min(s for s, _ in data) - m["tEnd"] / 1e6)
            put_s.append(puts[mkey][1] - min(s for s, _ in data))
            to_ptr.append(c - puts[mkey][1])
        if os.environ.get("BENCH_LAG_VERBOSE") and stamps:  # lost only
            print("  k=%d records=%d span %.2f s  oldest lag %.2f s  "
                  "newest lag %.2f s  tEnd->commit %.2f s" % (
                      k, len(stamps), (m["tEnd"] - m["tStart"]) / 1e6,
                      c - min(stamps), c - max(stamps), c - m["tEnd"] / 1e6))
    lags.sort()
    lags_m.sort()
    goal = (MAX_WINDOW_MS + guard_ms + 2000) / 1000.0
    p99 = percentile(lags, 99)
    print("lake: %d windows, %d records (%d acked)%s" % (
        len(windows), n, total,
        "" if n == total else "  ** MISMATCH: the lake is not complete **"))
    print("lag = commit (pointer) - ts, per record: p50 %.2f s  p90 %.2f s  "
          "p99 %.2f s  max %.2f s" % (percentile(lags, 50),
                                      percentile(lags, 90), p99, lags[-1]))
    print("  (against the manifest's committedAt: p50 %.2f s  p99 %.2f s)"
          % (percentile(lags_m, 50), percentile(lags_m, 99)))
    print("goal: p99 <= maxWindowMs %d ms + guard %d ms + 2 s = %.1f s: %s"
          % (MAX_WINDOW_MS, guard_ms, goal,
             "MET" if p99 <= goal else "NOT MET"))
    if to_put:
        print("where the time goes (medians over windows): window span "
              "%.2f s; tEnd -> first data PUT starts %.2f s (guard %.1f s, "
              "discovery, close, encoding); data + manifest PUTs %.2f s; "
              "manifest -> pointer %.3f s" % (
                  med(span) if span else float("nan"), med(to_put),
                  guard_ms / 1000.0, med(put_s), med(to_ptr)))
    return windows


def warn_lines(text, most=8):
    """Print the broker's WARN and ERROR lines (the first few, and how many
    there were): retries and timeouts behind a lag spike show up here."""
    lines = [x for x in text.splitlines() if " WARN " in x or " ERROR " in x]
    if lines:
        print("broker warnings/errors: %d; the first %d:" %
              (len(lines), min(most, len(lines))))
        for x in lines[:most]:
            print("  " + x[:240])


def main():
    build = sys.argv[1] if len(sys.argv) > 1 else "build"
    os.environ.setdefault("QUEEN_BIN", os.path.join(ROOT, build, "queen"))
    seconds = float(os.environ.get("BENCH_LAG_SECONDS", "300"))
    guard_ms = int(os.environ.get("QUEEN_S3_SAFE_GUARD_MS") or
                   DEFAULT_GUARD_MS)
    with BenchRun("queen-bench-lag.") as run:
        tmp, b = run.tmp, run.bucket
        env = bench_env(b, QUEEN_S3_QUEUES=QUEUE, QUEEN_S3_START="earliest",
                        QUEEN_S3_MAX_WINDOW_MS=MAX_WINDOW_MS,
                        QUEEN_LOG_LEVEL="info")
        if guard_ms != DEFAULT_GUARD_MS:
            env["QUEEN_S3_SAFE_GUARD_MS"] = str(guard_ms)
        node = run.start_node(env)
        pool = payloads(512)
        load0 = loadavg()
        cpu0 = (proc_cpu(node.proc.pid), group_cpu(b.proc.pid), self_cpu())
        print("producer: %d records every %d ms from %d connections for "
              "%.0f s (%d partitions, payloads 200-500 B); load average "
              "before: %s" % (BATCH, PERIOD * 1000, CONNS, seconds, PARTS,
                              load0))
        watch = SnapWatch(os.path.join(tmp, "data", "raft"))
        watch.start()
        res = paced_producer(node.port, seconds, PERIOD, BATCH, CONNS,
                             lambda s, n: batch_body(QUEUE, s, n, PARTS,
                                                     pool))
        snaps = watch.stop()
        load1 = loadavg()
        rate = res["acked"] / res["elapsed"]
        goal_rate = BATCH / PERIOD
        print("push rate achieved: %.0f records/s over %.1f s (goal %.0f): "
              "%s; %d of %d slots more than %d ms late, worst %.0f ms" % (
                  rate, res["elapsed"], goal_rate,
                  "held" if rate >= 0.99 * goal_rate else "NOT HELD",
                  res["late"], res["slots"], PERIOD * 1000,
                  res["worst_late"] * 1000))
        print("load average at the end of the push: %s" % load1)
        describe_stalls(res, snaps)
        total = res["acked"]
        # The last window closes by age: maxWindowMs + guard + discovery.
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            row = node.get("/status").json()["s3"]["sinks"][0]["queues"]
            if sum(q["records"] for q in row if q["name"] == QUEUE) >= total:
                break
            time.sleep(0.2)
        cpu1 = (proc_cpu(node.proc.pid), group_cpu(b.proc.pid), self_cpu())
        report_lag(b, node, total, guard_ms)
        warn_lines(node.stderr())
        names = ("broker (push + raft + sink)", "test bucket (proxy + "
                 "s3rver)", "producer (this script)")
        print("CPU-seconds per record: " + "; ".join(
            "%s %.1f us" % (nm, (c1 - c0) / max(1, total) * 1e6)
            for nm, c0, c1 in zip(names, cpu0, cpu1)))
        print("load average after: %s (2 cores, shared machine)" % loadavg())


if __name__ == "__main__":
    main()
