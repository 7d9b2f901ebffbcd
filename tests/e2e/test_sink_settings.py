"""Settings and retry behaviours of docs/s3-sink.md that no other test runs
against a live broker.  Each case shows the setting's effect in the bucket,
in /status, in /metrics/prometheus or in the log, not only that the boot
accepts it:

- QUEEN_S3_PREFIX other than `queen` (outer slashes trimmed);
- QUEEN_S3_PATH_STYLE=false and unset (its default): virtual-host requests,
  Host `lake.localhost:<port>` (curl resolves any *.localhost to loopback
  itself; the test bucket's proxy takes the bucket from such a Host);
- QUEEN_S3_SAFE_GUARD_MS above 0;
- QUEEN_S3_FETCH_CONCURRENCY=1 over more partitions than one fetch call
  carries (1024);
- QUEEN_S3_CHECKPOINT_EVERY=3, asserted by the verifier;
- QUEEN_S3_ALIGN=hour (the default) outside the demo;
- the QUEEN_S3_THREADS default, clamp(cores / 4, 1, 2), and a set value;
- the bucket probe's backoff (1 s doubling up to 60 s) and its error logged
  at most once per 30 s;
- a failed queue tried again after 60 s, a fenced queue claimed again after
  one TTL, and a queue given back (`released`) not claimed again by this
  node for 2 TTLs.

The retry cases read the log's own stamps (each line starts with ISO-µs)
and the test bucket's request log, so they measure what the sink did, not
when the test happened to look."""
import loglines
import json
import os

import pytest

import lake
from sinkenv import PREFIX, TENANT, kv_get, sink_row, wait_until

OTHER = {"instance": "node-9@elsewhere", "incarnation": "00000000000000aa",
         "sinceMs": 1}


def push(node, queue, n, tag="x", partitions=3, first=0):
    items = [{"queue": queue, "partition": "p-%d" % (i % partitions),
              "transactionId": "%s-%d" % (tag, i),
              "payload": b'{"tag":"%s","i":%d}' % (tag.encode(), i)}
             for i in range(first, first + n)]
    r = node.request("POST", "/api/v1/push", body=lake.push_body(items),
                     timeout=60)
    assert r.status == 201, r
    return lake.acked_from_push(items, r.json())


def manifests(reader, queue, prefix=PREFIX):
    root = lake.sidecar_root(prefix, TENANT, queue) + "/windows/"
    return [json.loads(reader.read(k)) for k in reader.list_keys(root)]


def log_time(rec):
    """The wall time (s) of a log line: its ts field, ISO-µs."""
    us = lake.parse_iso_us(rec["ts"])
    assert us is not None, rec
    return us / 1e6


def log_lines(node, text, **fields):
    """The log lines (parsed) whose message or a value holds text and
    whose fields equal the given ones."""
    return [r for r in loglines.parse(node.stderr())
            if any(text in v for v in r.values() if isinstance(v, str)) and
            all(r.get(k) == v for k, v in fields.items())]


def request_time(entry):
    return lake.parse_iso_us(entry["t"]) / 1e6


def sink_status(node):
    return node.get("/status").json()["s3"]


# -- QUEEN_S3_PREFIX ---------------------------------------------------------

def test_a_prefix_other_than_queen(sink_node, bucket):
    node = sink_node({"QUEEN_S3_PREFIX": "/team-a/lake.v2/"})
    acked = push(node, "orders", 20)
    reader = lake.bucket_reader(bucket)
    got = lake.wait_queue(reader, "team-a/lake.v2", TENANT, "orders", acked,
                          timeout=60, align="none", broker=node,
                          checkpoint_every=2)
    assert got["records"] == 20
    keys = reader.list_keys("")
    assert keys and all(k.startswith("team-a/lake.v2/") for k in keys), keys
    assert not reader.list_keys("queen/")
    assert sink_status(node)["sinks"][0]["bucket"]["prefix"] == \
        "team-a/lake.v2"
    # The probe asked for the prefix itself, slashes trimmed.
    heads = [e for e in bucket.log_lines() if e["method"] == "HEAD"]
    assert heads and heads[0]["key"] == "team-a/lake.v2/", heads[:3]


# -- QUEEN_S3_PATH_STYLE -----------------------------------------------------

@pytest.mark.parametrize("path_style", ["false", ""],
                         ids=["false", "unset-default"])
def test_virtual_host_addressing(sink_node, bucket, path_style):
    node = sink_node({"QUEEN_S3_PATH_STYLE": path_style,
                      "QUEEN_S3_ENDPOINT": bucket.vhost_endpoint})
    acked = push(node, "orders", 20)
    reader = lake.bucket_reader(bucket)
    lake.wait_queue(reader, PREFIX, TENANT, "orders", acked, timeout=60,
                    align="none", broker=node, checkpoint_every=2)
    log = bucket.log_lines()
    assert log
    # Every request named the bucket in its Host, none in its path.
    assert all(e["vhost"] and e["bucket"] == "lake" for e in log), \
        [e for e in log if not e["vhost"]][:3]
    assert any(e["method"] == "PUT" and e["key"].startswith(PREFIX + "/")
               for e in log)
    assert "addressing=virtual-host " in node.stderr()
    assert sink_status(node)["sinks"][0]["bucket"]["reachable"] is True


def test_path_style_true_names_the_bucket_in_the_path(sink_node, bucket):
    """The counterpart: the same proxy, path style, no virtual host."""
    node = sink_node()
    acked = push(node, "orders", 5)
    lake.wait_queue(lake.bucket_reader(bucket), PREFIX, TENANT, "orders",
                    acked, timeout=60, align="none", broker=node)
    log = bucket.log_lines()
    assert log and not any(e["vhost"] for e in log)
    assert "addressing=path-style" in node.stderr()


# -- QUEEN_S3_SAFE_GUARD_MS --------------------------------------------------

def test_a_safe_guard_holds_every_window_end_back(sink_node, bucket):
    guard_s = 3
    node = sink_node({"QUEEN_S3_SAFE_GUARD_MS": str(guard_s * 1000)})
    reader = lake.bucket_reader(bucket)
    acked = []
    for r in range(3):
        acked += push(node, "orders", 10, tag="g%d" % r, first=10 * r)
        wait_until(lambda: lake.count_records(reader, PREFIX, TENANT,
                                              "orders") == len(acked), 60,
                   "round %d in the lake" % r, interval=0.1)
    got = lake.verify_queue(reader, PREFIX, TENANT, "orders", acked,
                            align="none", broker=node, checkpoint_every=2)
    # tEnd <= safeTime - guard, and safeTime <= the wall clock at commit:
    # every window was committed at least the guard after its end.
    # committedAt is the commit's wall clock cut to the millisecond (the
    # driver keeps it in ms), so it may read up to 999 µs early.
    for m in manifests(reader, "orders"):
        held = lake.parse_iso_us(m["committedAt"]) - m["tEnd"]
        assert held >= guard_s * 10**6 - 999, (m["k"], held)
    # ... so the newest record is at least the guard older than tEnd's
    # commit, and an idle queue's lag stays near the guard, not near 0.
    lag = wait_until(lambda: node.metric("queen_s3_lag_seconds",
                                         'queue="orders"'), 10,
                     "the lag gauge")
    assert lag >= guard_s - 0.5, lag
    row = sink_row(node, "orders")
    assert lake.parse_iso_us(row["safeTime"]) - \
        lake.parse_iso_us(row["tEnd"]) >= guard_s * 10**6, row
    assert got["records"] == 30


# -- QUEEN_S3_FETCH_CONCURRENCY ----------------------------------------------

def test_fetch_concurrency_one_over_more_partitions_than_one_call(
        sink_node, bucket):
    """A fetch call carries at most 1024 partitions; with one call at a time
    the 1100 partitions take at least two calls per pass, and every record
    still lands once."""
    plain = sink_node({"QUEEN_S3_EMBEDDED": "false"})
    acked = []
    for lo in range(0, 1100, 275):
        items = [{"queue": "wide", "partition": "p%04d" % i,
                  "payload": b'{"i":%d}' % i} for i in range(lo, lo + 275)]
        r = plain.request("POST", "/api/v1/push", body=lake.push_body(items),
                          timeout=60)
        assert r.status == 201, r
        acked += lake.acked_from_push(items, r.json())
    assert plain.stop() == 0
    node = sink_node({"QUEEN_S3_QUEUES": "wide",
                      "QUEEN_S3_FETCH_CONCURRENCY": "1"},
                     data_dir=plain.data_dir)
    assert "fetch_concurrency=1 " in node.stderr()
    got = lake.wait_queue(lake.bucket_reader(bucket), PREFIX, TENANT, "wide",
                          acked, timeout=120, align="none", broker=node)
    assert len(got["partitions"]) == 1100
    calls = node.metric("queen_s3_fetch_calls_total",
                        'queue="wide",result="ok"')
    assert calls >= 2, calls
    assert node.metric("queen_s3_discovery_partitions",
                       'queue="wide"') == 1100


# -- QUEEN_S3_CHECKPOINT_EVERY -----------------------------------------------

def test_checkpoint_every_three_windows(sink_node, bucket):
    node = sink_node({"QUEEN_S3_CHECKPOINT_EVERY": "3"})
    reader = lake.bucket_reader(bucket)
    acked = []
    for r in range(7):  # one window per round: the rounds wait for it
        acked += push(node, "orders", 4, tag="c%d" % r, first=4 * r)
        wait_until(lambda: lake.count_records(reader, PREFIX, TENANT,
                                              "orders") == len(acked), 60,
                   "round %d in the lake" % r, interval=0.1)
    got = lake.wait_queue(reader, PREFIX, TENANT, "orders", acked,
                          timeout=30, align="none", broker=node,
                          checkpoint_every=3)
    n = got["manifests"]
    assert n >= 7
    assert got["checkpoints"] == list(range(3, n + 1, 3))
    # Not the sink_env default of 2: window 2 has no checkpoint.
    assert reader.read(lake.checkpoint_key(PREFIX, TENANT, "orders", 2)) \
        is None
    age = wait_until(lambda: (lambda v: v if v == n % 3 else None)(
        node.metric("queen_s3_checkpoint_age_windows", 'queue="orders"')),
        10, "checkpoint_age_windows = %d" % (n % 3))
    assert age == n % 3


# A checkpoint due at window k is written also when the node crashed after
# k's objects went up (after_upload, before_commit: the restart commits k
# from its manifest before any discovery) or after k's commit (after_commit:
# the restore finds the pointer at a due k without its checkpoint), once the
# positions are exact.
@pytest.mark.parametrize("point", ["after_upload", "after_commit"])
def test_a_checkpoint_due_at_a_crashed_window_is_written(sink_node, bucket,
                                                         point):
    node = sink_node()  # checkpoint every 2
    reader = lake.bucket_reader(bucket)
    acked = push(node, "orders", 4, tag="a")
    lake.wait_queue(reader, PREFIX, TENANT, "orders", acked, timeout=60,
                    align="none")
    assert len(manifests(reader, "orders")) == 1
    assert node.stop() == 0
    node.extra_env.update(QUEEN_S3_CRASH_AT=point, QUEEN_TEST_MODE="true")
    node.start()
    acked += push(node, "orders", 4, tag="b", first=4)  # window 2: due
    wait_until(lambda: node.proc.poll() is not None, 60,
               "the crash point %s to fire" % point, interval=0.2)
    node._reap()
    del node.extra_env["QUEEN_S3_CRASH_AT"]
    node.start()
    lake.wait_queue(reader, PREFIX, TENANT, "orders", acked, timeout=60,
                    align="none", broker=node)
    acked += push(node, "orders", 4, tag="c", first=8)
    lake.wait_queue(reader, PREFIX, TENANT, "orders", acked, timeout=60,
                    align="none", broker=node)
    wait_until(lambda: reader.read(lake.checkpoint_key(
        PREFIX, TENANT, "orders", 2)) is not None, 10,
        "checkpoint 2 (due every 2 windows) in the bucket")
    lake.verify_queue(reader, PREFIX, TENANT, "orders", acked, align="none",
                      broker=node, checkpoint_every=2)


# -- QUEEN_S3_ALIGN=hour -----------------------------------------------------

def test_align_hour_keys_and_windows_inside_one_hour(sink_node, bucket):
    node = sink_node({"QUEEN_S3_ALIGN": "hour"})
    reader = lake.bucket_reader(bucket)
    acked = []
    for r in range(3):
        acked += push(node, "orders", 10, tag="h%d" % r, first=10 * r)
        wait_until(lambda: lake.count_records(reader, PREFIX, TENANT,
                                              "orders") == len(acked), 60,
                   "round %d in the lake" % r, interval=0.1)
    lake.verify_queue(reader, PREFIX, TENANT, "orders", acked, align="hour",
                      broker=node, checkpoint_every=2)
    hour = lake.HOUR_US
    for m in manifests(reader, "orders"):
        key = m["objects"][0]["key"]
        stamp = lake.iso_us(max(m["tStart"], 0))
        assert "/dt=%s/hour=%s/" % (stamp[:10], stamp[11:13]) in key, key
        # A window never crosses an hour boundary.
        if m["tStart"] > 0:
            assert m["tStart"] // hour == (m["tEnd"] - 1) // hour, m
    assert "align=hour" in node.stderr()
    assert sink_status(node)["sinks"][0]["align"] == "hour"


# -- QUEEN_S3_THREADS --------------------------------------------------------

def thread_names(node):
    task = "/proc/%d/task" % node.proc.pid
    out = []
    for tid in os.listdir(task):
        try:
            with open(os.path.join(task, tid, "comm")) as f:
                out.append(f.read().strip())
        except FileNotFoundError:
            pass
    return out


@pytest.mark.parametrize("threads", [None, "3"], ids=["default", "three"])
def test_threads_default_and_set(sink_node, bucket, threads):
    env = {} if threads is None else {"QUEEN_S3_THREADS": threads}
    node = sink_node(env)
    assert "QUEEN_S3_THREADS" not in node.environment() or threads
    cores = os.sysconf("SC_NPROCESSORS_ONLN")
    want = min(max(cores // 4, 1), 2) if threads is None else int(threads)
    acked = push(node, "orders", 5)
    lake.wait_queue(lake.bucket_reader(bucket), PREFIX, TENANT, "orders",
                    acked, timeout=60, align="none", broker=node)
    assert sink_status(node)["threads"] == want
    names = thread_names(node)
    assert names.count("queen-s3") == want, names
    assert names.count("queen-s3-main") == 1, names


# -- the bucket probe --------------------------------------------------------

def test_the_bucket_probe_backs_off_from_1_s_to_60_s_and_logs_every_30_s(
        sink_node, bucket):
    """The probe (HEAD <prefix>/) is refused 403 eight times: a refusal no
    client retries, so each probe is one request and the gaps between them
    are the sink's own backoff, `wait/2 + jitter(wait/2)` for wait = 1, 2,
    4, ... s, capped at 60 s.  The error is logged at most once per 30 s.
    Takes about two and a half minutes: the cap is seen only on the eighth
    gap (uncapped it would be 64..128 s)."""
    n_fail = 9
    bucket.fault("403", count=n_fail, method="HEAD", prefix=PREFIX + "/")
    node = sink_node()
    wait_until(lambda: (lambda b: b["reachable"] is False and b["error"])(
        sink_status(node)["sinks"][0]["bucket"]), 30,
        "/status to say the bucket is unreachable")
    err = sink_status(node)["sinks"][0]["bucket"]["error"]
    assert "cannot reach the bucket lake" in err, err
    assert sink_row(node, "orders") is None or \
        not sink_row(node, "orders")["ownedHere"]
    acked = push(node, "orders", 3)
    lake.wait_queue(lake.bucket_reader(bucket), PREFIX, TENANT, "orders",
                    acked, timeout=300, align="none", broker=node)
    heads = [e for e in bucket.log_lines()
             if e["method"] == "HEAD" and e["key"] == PREFIX + "/"]
    refused = [request_time(e) for e in heads if e["status"] == 403]
    assert len(refused) == n_fail, heads
    assert heads[n_fail]["status"] in (200, 404), heads[n_fail]
    answered = request_time(heads[n_fail])
    times = refused + [answered]
    gaps = [b - a for a, b in zip(times, times[1:])]
    for i, gap in enumerate(gaps):
        wait = min(2 ** i, 60)
        assert wait / 2 - 0.05 <= gap <= wait + 1.0, (i, gap, gaps)
    # No lease was claimed before the bucket answered.
    log = node.stderr()
    owned = log_lines(node, "took the queue lease", queue="orders")
    assert owned and log_time(owned[0]) >= answered - 0.5, owned
    # Logged at most once per 30 s (about 4 times over ~140 s, not 9).
    errors = [log_time(ln) for ln in log_lines(
        node, "cannot reach the bucket lake")]
    assert 2 <= len(errors) < n_fail, errors
    assert all(b - a >= 29.9 for a, b in zip(errors, errors[1:])), errors
    assert "the bucket answers; starting the queues" in log
    assert sink_status(node)["sinks"][0]["bucket"]["reachable"] is True


# -- a failed queue: again in 60 s -------------------------------------------

def test_a_failed_queue_is_tried_again_after_60_s(sink_node, bucket):
    """A data PUT refused 403 (not retriable) stops the queue "failed"; the
    sink claims it again 60 s later and the lake is complete."""
    bucket.fault("403", count=1, method="PUT",
                 prefix="%s/tenant=%s/queue=orders/" % (PREFIX, TENANT))
    node = sink_node()
    acked = push(node, "orders", 6)
    stopped = wait_until(lambda: log_lines(
        node, "queue stopped; it will be tried again in case the cause was "
        "fixed", queue="orders"), 60, "the queue to fail on the 403")
    row = sink_row(node, "orders")
    assert row["ownedHere"] is False and row["state"] == "failed", row
    assert "403" in json.dumps(row["lastError"]), row
    lake.wait_queue(lake.bucket_reader(bucket), PREFIX, TENANT, "orders",
                    acked, timeout=120, align="none", broker=node)
    t_fail = log_time(stopped[0])
    owned = [log_time(ln) for ln in log_lines(
        node, "took the queue lease", queue="orders")]
    again = [t for t in owned if t > t_fail]
    assert again, owned
    assert 59.9 <= again[0] - t_fail <= 63, (t_fail, again)


# -- a fenced queue: claim again after one TTL -------------------------------

def test_a_fenced_queue_is_claimed_again_after_one_ttl(sink_node, bucket):
    """Another instance's lease row (staged over HTTP, with the unsafe
    switch the kvguard change requires), expiring in 1 s: the refresher
    (TTL/3 = 1 s) finds it, the queue stops fenced, and the node claims it
    again one TTL (3 s) later, not before, once the row is gone."""
    node = sink_node({"QUEEN_KV_UNSAFE_SINK_WRITES": "true"})
    acked = push(node, "orders", 5, tag="a")
    reader = lake.bucket_reader(bucket)
    lake.wait_queue(reader, PREFIX, TENANT, "orders", acked, timeout=60,
                    align="none")
    r = node.request("PUT", "/api/v1/kv/queen-s3/s3:default:orders:lease",
                     body={"value": OTHER, "ttlSeconds": 1})
    assert r.status == 200, r
    fenced = wait_until(lambda: log_lines(node, "queue fenced", queue="orders"),
                        30, "the queue to be fenced")
    t_fenced = log_time(fenced[0])
    acked += push(node, "orders", 5, tag="b", first=5)
    lake.wait_queue(reader, PREFIX, TENANT, "orders", acked, timeout=60,
                    align="none", broker=node)
    owned = [log_time(ln) for ln in log_lines(
        node, "took the queue lease", queue="orders")]
    again = [t for t in owned if t > t_fenced]
    assert again, owned
    ttl = 3.0
    assert ttl - 0.05 <= again[0] - t_fenced <= ttl + 2.5, (t_fenced, again)


# -- given back: `released`, not claimed again for 2 TTLs --------------------

def test_a_queue_given_back_shows_released_and_waits_two_ttls(
        sink_node, bucket):
    """A second node's presence row (staged; it never claims anything)
    makes N = 2: the fair share of two queues is one, so after holding two
    for a whole TTL this node gives one back (the least buffered, ties by
    name: `a.one`), which shows `released`; nobody takes it, and this node
    claims it again no sooner than 2 TTLs after the give-back."""
    node = sink_node({"QUEEN_S3_QUEUES": "a.one,b.two",
                      "QUEEN_KV_UNSAFE_SINK_WRITES": "true"})
    acked = {q: push(node, q, 4, tag=q) for q in ("a.one", "b.two")}
    reader = lake.bucket_reader(bucket)
    for q in acked:
        lake.wait_queue(reader, PREFIX, TENANT, q, acked[q], timeout=60,
                        align="none")
    r = node.request(
        "PUT", "/api/v1/kv/queen-s3/s3:default:node=node-9%40elsewhere",
        body={"value": OTHER, "ttlSeconds": 600})
    assert r.status == 200, r
    released = wait_until(lambda: (lambda x: x if x and x["state"] ==
                                   "released" else None)(
        sink_row(node, "a.one")), 30, "a.one to show released")
    assert released["ownedHere"] is False and released["heldBy"] is None
    gave = log_lines(node, "gave the queue back so a node below its fair "
                     "share can take it", queue="a.one")
    assert gave, node.stderr()[-3000:]
    assert node.metric("queen_s3_queues_given_back_total") >= 1
    placement = sink_status(node)["sinks"][0]["placement"]
    assert placement["nodes"] == 2 and placement["share"] == 1, placement
    assert log_lines(node, "queue drained", queue="a.one")
    # The lease was given back: no row until this node claims it again.
    t_gave = log_time(gave[0])
    owned = wait_until(lambda: [log_time(ln) for ln in log_lines(
        node, "took the queue lease", queue="a.one") if log_time(ln) >
        t_gave], 30, "this node to claim a.one again")
    ttl = 3.0
    assert owned[0] - t_gave >= 2 * ttl - 0.05, (t_gave, owned)
    acked["a.one"] += push(node, "a.one", 4, tag="again", first=4)
    lake.wait_queue(reader, PREFIX, TENANT, "a.one", acked["a.one"],
                    timeout=60, align="none", broker=node)
    assert kv_get(node, "s3:default:b.two:lease")["found"] is True
