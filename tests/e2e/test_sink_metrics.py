"""The sink's /metrics/prometheus on a live broker (docs/s3-sink.md "Status
and metrics"): promtool accepts the exposition of a sink that committed
windows, had PUTs fail with 500 and lost a lease to another instance (a
forced fence), and every queen_s3_* family is there with its labels and a
value that agrees with what happened.  tests/integration/test_metrics.py
runs promtool with the sink off only.

The window histograms must count each committed window once, with its own
size: the second test commits windows of different sizes from a backlog
(the sink was off while they were pushed) and compares the histograms'
_count and _sum with the counters of windows, records and bytes."""
import json
import os
import shutil
import subprocess
import time

import pytest

import lake
from sinkenv import PREFIX, TENANT, kv_get, sink_row, wait_until

FAMILIES = {  # name: (type, label names of each sample, without le)
    "queen_s3_lag_seconds": ("gauge", ("queue",)),
    "queen_s3_safe_lag_seconds": ("gauge", ()),
    "queen_s3_windows_committed_total": ("counter", ("queue",)),
    "queen_s3_records_written_total": ("counter", ("queue",)),
    "queen_s3_bytes_written_total": ("counter", ("queue", "format")),
    "queen_s3_records_lost_total": ("counter", ("queue",)),
    "queen_s3_window_records": ("histogram", ()),
    "queen_s3_window_bytes": ("histogram", ()),
    "queen_s3_buffer_bytes": ("gauge", ()),
    "queen_s3_fetch_calls_total": ("counter", ("queue", "result")),
    "queen_s3_discovery_partitions": ("gauge", ("queue",)),
    "queen_s3_s3_requests_total": ("counter", ("op", "code")),
    "queen_s3_commit_precondition_lost_total": ("counter", ()),
    "queen_s3_checkpoint_age_windows": ("gauge", ("queue",)),
    "queen_s3_queues_given_back_total": ("counter", ()),
    "queen_s3_stage_cpu_seconds_total": ("counter", ("stage",)),
}
STAGES = ("read", "merge", "format", "compress", "sha256", "upload", "rest")
OTHER = {"instance": "node-9@elsewhere", "incarnation": "00000000000000aa",
         "sinceMs": 1}


def promtool():
    path = shutil.which("promtool")
    if path is None:
        pytest.fail("promtool is missing: scripts/setup.sh installs the "
                    "Debian package prometheus")
    return path


def _labels(text):
    out = {}
    i = 0
    while i < len(text):
        eq = text.index("=", i)
        name = text[i:eq]
        assert text[eq + 1] == '"', text
        j = eq + 2
        val = []
        while text[j] != '"':
            if text[j] == "\\":
                val.append({"n": "\n"}.get(text[j + 1], text[j + 1]))
                j += 2
            else:
                val.append(text[j])
                j += 1
        out[name] = "".join(val)
        i = j + 1
        if i < len(text):
            assert text[i] == ",", text
            i += 1
    return out


class Scrape:
    """One /metrics/prometheus answer: its text, the TYPE of each family,
    and its samples [(name, {label: value}, float)]."""

    def __init__(self, body):
        self.text = body.decode("utf-8")
        self.types, self.samples = {}, []
        for line in self.text.splitlines():
            if line.startswith("# TYPE "):
                _, _, name, kind = line.split(" ", 3)
                self.types[name] = kind
            elif line and not line.startswith("#"):
                key, _, value = line.rpartition(" ")
                if "{" in key:
                    name, rest = key.split("{", 1)
                    labels = _labels(rest[:-1])
                else:
                    name, labels = key, {}
                self.samples.append((name, labels, float(value)))

    def get(self, name, **labels):
        """The value of the one sample of name with exactly labels, or
        None."""
        hits = [v for n, ls, v in self.samples if n == name and ls == labels]
        assert len(hits) <= 1, (name, labels, hits)
        return hits[0] if hits else None

    def series(self, name):
        return [(ls, v) for n, ls, v in self.samples if n == name]

    def histogram(self, name):
        """({le: cumulative count}, sum, count) of a label-less histogram."""
        buckets = {ls["le"]: v for ls, v in self.series(name + "_bucket")}
        return buckets, self.get(name + "_sum"), self.get(name + "_count")


def scrape(node):
    r = node.get("/metrics/prometheus")
    assert r.status == 200, r
    return r.body


def check_promtool(body):
    p = subprocess.run([promtool(), "check", "metrics"], input=body,
                       capture_output=True, timeout=60)
    assert p.returncode == 0, (p.stdout, p.stderr, body.decode())


def push(node, queue, n, tag, partitions=3):
    items = [{"queue": queue, "partition": "p-%d" % (i % partitions),
              "payload": b'{"tag":"%s","i":%d}' % (tag.encode(), i)}
             for i in range(n)]
    r = node.request("POST", "/api/v1/push", body=lake.push_body(items))
    assert r.status == 201, r
    return lake.acked_from_push(items, r.json())


def nudge(node):
    """One record into a queue the sink does not mirror: a log entry, so
    the node's safeTime moves although the lease refreshes (TTL/3) are
    20 minutes apart here. Returns True, for use inside a predicate."""
    node.push([{"queue": "zz.nudge", "payload": 1}])
    return True


def settle_lake(node, reader, queue, n):
    wait_until(lambda: nudge(node) and lake.count_records(
        reader, PREFIX, TENANT, queue) >= n, 90,
        "%d records of %s in the lake" % (n, queue), interval=0.3)


def backlog_then_sink(node, batches):
    """Push each batch of items with the sink off (the node runs with
    QUEEN_S3_EMBEDDED=false), then restart the node with the sink on, so it
    catches up from a backlog. Returns the acked records."""
    acked = []
    for items in batches:
        resp = node.request("POST", "/api/v1/push",
                            body=lake.push_body(items), timeout=120)
        assert resp.status == 201, resp
        acked += lake.acked_from_push(items, resp.json())
    node.extra_env["QUEEN_S3_EMBEDDED"] = "true"
    assert node.stop() == 0
    node.start()
    return acked


def committed(node, queue):
    return (sink_row(node, queue) or {}).get("windowsCommitted", 0)


def test_live_sink_metrics_pass_promtool_after_faults_and_a_fence(
        sink_node, bucket):
    # "orders" loses its lease; "kept" keeps running, so the gauges of a
    # queue this node runs are there at the last scrape. A TTL of an hour:
    # the lease refresher (every TTL/3) cannot notice the takeover before
    # the next commit does, so the commit's precondition is what fails.
    # QUEEN_KV_UNSAFE_SINK_WRITES lets the test stage the other owner's
    # lease row over HTTP (the queen-s3 namespace is read-only otherwise).
    node = sink_node({"QUEEN_S3_QUEUES": "orders,kept",
                      "QUEEN_S3_LEASE_TTL_MS": "3600000",
                      "QUEEN_KV_UNSAFE_SINK_WRITES": "true"})
    # Two PUTs of kept's data objects answer 500 (the client retries).
    bucket.fault("500", count=2, method="PUT",
                 prefix="%s/tenant=%s/queue=kept/" % (PREFIX, TENANT))
    acked = {"orders": push(node, "orders", 12, "o1"),
             "kept": push(node, "kept", 30, "k1", partitions=5)}
    reader = lake.bucket_reader(bucket)
    for q in acked:
        settle_lake(node, reader, q, len(acked[q]))
        lake.wait_queue(reader, PREFIX, TENANT, q, acked[q], timeout=90,
                        compression="zstd", align="none", broker=node)
    wait_until(lambda: bucket.stats()["faults"]["500"] == 2, 30,
               "both 500 faults to fire")
    wait_until(lambda: (lambda s: (s.get("queen_s3_s3_requests_total",
                                         op="put", code="500") or 0) >= 2)(
        Scrape(scrape(node))), 30, "the failed PUTs to be counted")

    # The forced fence: another instance's lease row, then a window to
    # commit; its first fenced write finds the row changed.
    assert committed(node, "orders") >= 1
    r = node.request("PUT", "/api/v1/kv/queen-s3/s3:default:orders:lease",
                     body={"value": OTHER, "ttlSeconds": 3600})
    assert r.status == 200, r
    push(node, "orders", 5, "o2")
    wait_until(lambda: nudge(node) and Scrape(scrape(node)).get(
        "queen_s3_commit_precondition_lost_total") == 1, 60,
        "the commit to lose its precondition (a fence)", interval=0.3)
    wait_until(lambda: (sink_row(node, "orders") or {}).get("ownedHere")
               is False, 30, "orders to stop here")
    assert kv_get(node, "s3:default:orders:lease")["value"]["instance"] == \
        OTHER["instance"]

    # kept goes on: windows up to the next checkpoint (every 2 windows).
    more = push(node, "kept", 10, "k2", partitions=5)
    acked["kept"] += more
    settle_lake(node, reader, "kept", len(acked["kept"]))
    got_kept = lake.wait_queue(reader, PREFIX, TENANT, "kept",
                               acked["kept"], timeout=90, compression="zstd",
                               align="none", broker=node, checkpoint_every=2)
    windows_kept = got_kept["manifests"]
    windows_orders = len(reader.list_keys(lake.sidecar_root(
        PREFIX, TENANT, "orders") + "/windows/"))

    def settled():
        nudge(node)
        x = Scrape(scrape(node))
        ok = x.get("queen_s3_windows_committed_total", queue="kept") == \
            windows_kept and x.get("queen_s3_checkpoint_age_windows",
                                   queue="kept") == windows_kept % 2
        return x if ok else None
    wait_until(settled, 30, "the metrics to show kept's last window")

    body = scrape(node)
    check_promtool(body)
    s = Scrape(body)

    # Every documented family, with HELP and TYPE, in this order.
    assert [f for f in s.types if f.startswith("queen_s3_")] == \
        list(FAMILIES), s.types
    for name, (kind, _) in FAMILIES.items():
        assert s.types[name] == kind, (name, s.types[name])
        assert "# HELP %s " % name in s.text, name
    for name, labels, _ in s.samples:
        if not name.startswith("queen_s3_"):
            continue
        fam = next(f for f in FAMILIES if name.startswith(f))
        want = set(FAMILIES[fam][1])
        if name.endswith("_bucket"):
            want.add("le")
        assert set(labels) == want, (name, labels)

    assert s.get("queen_s3_windows_committed_total",
                 queue="kept") == windows_kept
    assert s.get("queen_s3_windows_committed_total",
                 queue="orders") == windows_orders >= 1
    assert s.get("queen_s3_records_written_total", queue="kept") == \
        len(acked["kept"])
    assert s.get("queen_s3_records_written_total", queue="orders") == \
        lake.count_records(reader, PREFIX, TENANT, "orders") == 12
    assert s.get("queen_s3_bytes_written_total", queue="kept",
                 format="jsonl") == got_kept["bytes"]
    assert s.get("queen_s3_records_lost_total", queue="kept") == 0
    assert s.get("queen_s3_records_lost_total", queue="orders") == 0

    # Gauges of a queue exist only while this node runs it.
    lag = s.get("queen_s3_lag_seconds", queue="kept")
    assert lag is not None and 0 <= lag < 60, lag
    assert s.get("queen_s3_lag_seconds", queue="orders") is None
    safe = s.get("queen_s3_safe_lag_seconds")
    assert safe is not None and -5 < safe < 60, safe
    assert s.get("queen_s3_discovery_partitions", queue="kept") == 5
    assert s.get("queen_s3_discovery_partitions", queue="orders") is None
    age = s.get("queen_s3_checkpoint_age_windows", queue="kept")
    assert age == windows_kept % 2, (age, windows_kept)
    assert s.get("queen_s3_checkpoint_age_windows", queue="orders") is None
    assert s.get("queen_s3_buffer_bytes") is not None and \
        s.get("queen_s3_buffer_bytes") >= 0

    assert s.get("queen_s3_fetch_calls_total", queue="kept",
                 result="ok") > 0
    assert s.get("queen_s3_fetch_calls_total", queue="orders",
                 result="ok") > 0
    assert s.get("queen_s3_s3_requests_total", op="put", code="500") == 2
    assert s.get("queen_s3_s3_requests_total", op="put", code="200") >= \
        windows_kept + windows_orders
    assert s.get("queen_s3_commit_precondition_lost_total") == 1
    assert s.get("queen_s3_queues_given_back_total") == 0

    for fam in ("queen_s3_window_records", "queen_s3_window_bytes"):
        buckets, total, count = s.histogram(fam)
        assert buckets["+Inf"] == count == windows_kept + windows_orders, \
            (fam, buckets, count)
        values = list(buckets.values())
        assert values == sorted(values), (fam, buckets)
        assert total > 0, fam
    # 1 <= records of a window <= 30 here: none in le="1" unless a window
    # held one record, all in le="100".
    buckets, _, count = s.histogram("queen_s3_window_records")
    assert buckets["100"] == count

    # The log says why orders stopped.
    log = node.stderr()
    assert "queue fenced" in log or "lease lost" in log or \
        "precondition" in log, log[-3000:]
    assert node.stop() == 0


# A tick can commit several windows from a backlog (up to 64 rounds): each
# must be observed with its own size, not the last one's (issue 18 item 5).
def test_window_histograms_count_each_window_with_its_own_size(
        sink_node, bucket):
    """About 3.3 MB of records pushed while the sink is off, then the sink
    catches up with QUEEN_S3_TARGET_MB=1: several windows of about 1 MiB
    and a smaller last one, cut from a backlog (so several may commit in
    one tick).  The histograms' _count must equal windows_committed_total,
    and their _sum must equal the sum of the manifests' records and bytes
    (= records_written_total and bytes_written_total)."""
    node = sink_node({"QUEEN_S3_EMBEDDED": "false", "QUEEN_S3_TARGET_MB": "1",
                      "QUEEN_S3_COMPRESSION": "none"})
    acked = backlog_then_sink(node, (
        [{"queue": "orders", "partition": "p-%d" % (i % 3),
          "payload": b'"%s"' % (b"%02d" % (r * 10 + i) * (12000 + 2500 * r))}
         for i in range(10)] for r in range(8)))
    reader = lake.bucket_reader(bucket)
    got = lake.wait_queue(reader, PREFIX, TENANT, "orders", acked,
                          timeout=90, compression="none", align="none",
                          broker=node)
    sizes = []
    for k in range(1, got["manifests"] + 1):
        doc = json.loads(reader.read(lake.manifest_key(PREFIX, TENANT,
                                                       "orders", k)))
        sizes.append((doc["records"], doc["bytes"]))
    assert len({r for r, _ in sizes}) >= 2, sizes  # windows differ in size
    s = wait_until(lambda: (lambda x: x if x.get(
        "queen_s3_windows_committed_total", queue="orders") ==
        got["manifests"] else None)(Scrape(scrape(node))), 30,
        "the counters to count every window")
    check_promtool(s.text.encode())
    _, rec_sum, rec_count = s.histogram("queen_s3_window_records")
    _, byte_sum, byte_count = s.histogram("queen_s3_window_bytes")
    assert s.get("queen_s3_records_written_total", queue="orders") == \
        len(acked) == sum(r for r, _ in sizes)
    assert rec_count == byte_count == len(sizes), (rec_count, sizes)
    assert rec_sum == sum(r for r, _ in sizes), (rec_sum, sizes)
    assert byte_sum == sum(b for _, b in sizes) == s.get(
        "queen_s3_bytes_written_total", queue="orders", format="jsonl"), \
        (byte_sum, sizes)


def thread_cpu(pid):
    """{thread name: CPU seconds} of the process's live threads, summed by
    name (utime + stime of /proc/<pid>/task/*/stat)."""
    out = {}
    for tid in os.listdir("/proc/%d/task" % pid):
        try:
            with open("/proc/%d/task/%s/stat" % (pid, tid)) as f:
                st = f.read()
        except OSError:
            continue
        name = st[st.index("(") + 1:st.rindex(")")]
        f = st[st.rindex(")") + 2:].split()
        out[name] = out.get(name, 0.0) + \
            (int(f[11]) + int(f[12])) / os.sysconf("SC_CLK_TCK")
    return out


def process_cpu(pid):
    with open("/proc/%d/stat" % pid) as f:
        st = f.read()
    f = st[st.rindex(")") + 2:].split()
    return (int(f[11]) + int(f[12])) / os.sysconf("SC_CLK_TCK")


def test_stage_cpu_counters_move_and_add_up_to_the_sink_threads(
        sink_node, bucket):
    """queen_s3_stage_cpu_seconds_total (docs/design/observability.md §2,
    family 16): after a backlog of about 72 MB of JSON goes to the lake in
    windows of 1 MiB, zstd, every stage a record passes through has counted
    CPU, and the stages add up to what the sink's threads spent: the pool
    threads (queen-s3) run every step inside a frame whose rest is counted,
    so the stages but upload (the uploader threads, which exited) come to
    their CPU (in /proc's ticks, give or take), and all stages together stay
    within the process's CPU."""
    node = sink_node({"QUEEN_S3_EMBEDDED": "false", "QUEEN_S3_TARGET_MB": "1"})
    acked = backlog_then_sink(node, (
        [{"queue": "orders", "partition": "p-%d" % (i % 4),
          "payload": json.dumps({
              "event": "view", "round": r, "i": i,
              "sku": "sku-%06d" % (i * 7919 % 100000),
              "note": "x%d" % (i * 31 % 997) * 40}).encode()}
         for i in range(4000)] for r in range(48)))
    reader = lake.bucket_reader(bucket)
    lake.wait_queue(reader, PREFIX, TENANT, "orders", acked, timeout=120,
                    compression="zstd", align="none", broker=node)
    s = wait_until(lambda: (lambda x: x if x.get(
        "queen_s3_records_written_total", queue="orders") == len(acked)
        else None)(Scrape(scrape(node))), 30, "every record counted")
    threads = thread_cpu(node.proc.pid)
    whole = process_cpu(node.proc.pid)
    s = Scrape(scrape(node))  # after /proc: counters only grow
    check_promtool(s.text.encode())
    got = {ls["stage"]: v
           for ls, v in s.series("queen_s3_stage_cpu_seconds_total")}
    assert sorted(got) == sorted(STAGES), got
    for stage in STAGES:
        if stage != "rest":
            assert got[stage] > 0, (stage, got)
    pool = threads.get("queen-s3", 0.0)
    in_pool = sum(got.values()) - got["upload"]
    assert pool > 0.1, threads
    assert in_pool >= 0.8 * pool - 0.05, (got, threads)
    assert sum(got.values()) <= whole + 0.05, (got, whole)
    # Compression is the largest single stage of a zstd window here, and
    # the digest one pass over the compressed bytes costs far less.
    assert got["compress"] > got["sha256"], got
    assert node.stop() == 0


def test_a_quiet_rows_safe_time_less_its_complete_through_is_its_lag(
        sink_node):
    """A row's lagSeconds is the owning node's safeTime less completeThrough
    (docs/design/observability.md §1), read at the moment of the request.
    Its safeTime was the one of the queue's last step, older by as long as
    the queue had been quiet, so the three fields disagreed."""
    node = sink_node({"QUEEN_S3_QUEUES": "quiet"})
    r = node.request("POST", "/api/v1/push", body=lake.push_body(
        [{"queue": "quiet", "partition": "p", "payload": b'{"a":1}'}]))
    assert r.status == 201, r
    wait_until(lambda: (sink_row(node, "quiet") or {}).get(
        "windowsCommitted", 0) >= 1, 60, "window 1 committed")
    checked = 0
    for _ in range(40):
        row = sink_row(node, "quiet")
        if row["lagSeconds"] is not None and row["safeTime"] and \
                row["completeThrough"]:
            gap = lake.parse_iso_us(row["safeTime"]) - \
                lake.parse_iso_us(row["completeThrough"])
            assert abs(gap - round(row["lagSeconds"] * 1e6)) <= 1, row
            checked += 1
        time.sleep(0.1)
    assert checked >= 30, checked
