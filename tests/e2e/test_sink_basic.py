"""Scenario a, one queue (docs/design/scenarios.md §9): a single node mirrors
the queue
`orders` into the test bucket in JSONL (zstd), exactly once, and what
/status, /metrics/prometheus and the KV commit pointer say agrees with the
lake the verifier reads from s3rver's files."""
import loglines
import json

import lake
from bucket import TestBucket
from sinkenv import PREFIX, TENANT, kv_get, sink_env, sink_row, wait_until

PAYLOADS = [b'{"order":1,"status":"new","total":42.00}',
            b'{"n":12345678901234567890,"big":1E+400,"neg":-0}',
            b'"caf\xc3\xa9 \\u2028 \xe2\x80\xa8"',
            b'[1,[2,[3]]]',
            b'{"s":"' + b"x" * 700 + b'"}']


def push(node, items):
    r = node.request("POST", "/api/v1/push", body=lake.push_body(items))
    assert r.status == 201, r
    return lake.acked_from_push(items, r.json())


def items(round_no, n=30):
    out = []
    for i in range(n):
        it = {"queue": "orders", "partition": "cust-%d" % (i % 3),
              "payload": PAYLOADS[(i + round_no) % len(PAYLOADS)]}
        if i % 5 != 0:
            it["transactionId"] = "r%d-i%d" % (round_no, i)
        out.append(it)
    return out


def wait_lake(reader, node, queue, acked):
    """The queue's lake holds acked exactly once (the sink_env settings)."""
    return lake.wait_queue(reader, PREFIX, TENANT, queue, acked, timeout=60,
                           compression="zstd", align="none", broker=node,
                           checkpoint_every=2)


def wait_failed(node, queue, what):
    """The queue's status row once its state is failed."""
    def failed():
        r = sink_row(node, queue) or {}
        return r if r.get("state") == "failed" else None
    return wait_until(failed, 60, what)


def test_one_queue_is_mirrored_exactly_once(sink_node, bucket):
    node = sink_node({"QUEEN_S3_COMPRESSION": "zstd"})
    acked = []
    for r in range(4):
        acked += push(node, items(r))
    reader = lake.bucket_reader(bucket)
    got = lake.wait_queue(reader, PREFIX, TENANT, "orders", acked,
                          timeout=60, compression="zstd", align="none",
                          broker=node, checkpoint_every=2)
    assert got["records"] == len(acked) == 120
    assert got["partitions"] == {"cust-0": 40, "cust-1": 40, "cust-2": 40}

    row = wait_until(lambda: (lambda q: q if q and q["records"] == len(acked)
                              else None)(sink_row(node, "orders")),
                     60, "the /status row to count every record")
    assert row["ownedHere"] is True and row["heldBy"] is None
    assert row["recordsLost"] == 0
    assert row["windowsCommitted"] == got["manifests"]
    assert row["k"] == got["manifests"]
    assert node.metric("queen_s3_records_written_total",
                       'queue="orders"') == len(acked)
    assert node.metric("queen_s3_windows_committed_total",
                       'queue="orders"') == got["manifests"]

    ptr = kv_get(node, "s3:default:orders:committed")
    assert ptr["found"] is True
    value = ptr["value"]
    if isinstance(value, str):
        value = json.loads(value)
    assert value["k"] == got["manifests"]
    assert lake.parse_iso_us(value["tEnd"]) == got["tEnd"]

    s3 = node.get("/status").json()["s3"]
    assert s3["mode"] == "in-process"
    assert s3["sinks"][0]["bucket"]["reachable"] is True
    assert s3["sinks"][0]["ok"] is True
    assert s3["sinks"][0]["health"] == {"ok": True, "queues": 1}
    assert "queen-secret-key" not in node.get("/status").body.decode()
    assert "queen-secret-key" not in node.stderr()


def test_sigterm_drains_and_releases_the_lease(sink_node, bucket):
    node = sink_node({"QUEEN_S3_LEASE_TTL_MS": "60000"})
    acked = push(node, items(0))
    reader = lake.bucket_reader(bucket)
    lake.wait_queue(reader, PREFIX, TENANT, "orders", acked, timeout=60,
                    compression="zstd", align="none", broker=node,
                    checkpoint_every=2)
    acked += push(node, items(1))
    node.signal(15)
    assert node.wait_exit(60) == 0
    log = node.stderr()
    assert "stopping: no new reads, the window in flight is finished" in log
    assert loglines.records(log, msg="queue drained", queue="orders")
    assert "every queue drained; the sink has stopped" in log
    node._reap()

    # The lease was given back although its TTL is a minute.
    node.extra_env["QUEEN_S3_EMBEDDED"] = "false"
    node.start()
    assert kv_get(node, "s3:default:orders:lease")["found"] is False
    node.stop()

    # The next run finishes what the drain left to the log: nothing lost.
    node.extra_env["QUEEN_S3_EMBEDDED"] = "true"
    node.start()
    lake.wait_queue(reader, PREFIX, TENANT, "orders", acked, timeout=60,
                    compression="zstd", align="none", broker=node,
                    checkpoint_every=2)


def _queue_names(node):
    return [r["name"] for r in
            node.get("/status").json()["s3"]["sinks"][0]["queues"]]


def test_star_takes_queues_created_later(sink_node, bucket):
    # s.zero exists before the sink starts; once the sink lists it, its
    # first listing is done, and s.one and s.two, created after that, can
    # only come from a later listing. (Pushed right after the start, as
    # before, they could be in the first listing.)
    plain = sink_node({"QUEEN_S3_EMBEDDED": "false"})
    push(plain, [{"queue": "s.zero", "payload": b"0"}])
    assert plain.stop() == 0
    node = sink_node({"QUEEN_S3_QUEUES": "*"}, data_dir=plain.data_dir)
    wait_until(lambda: "s.zero" in _queue_names(node), 60,
               "the sink's first listing")
    assert _queue_names(node) == ["s.zero"]
    acked = {}
    for q in ("s.one", "s.two"):
        its = [{"queue": q, "partition": "p-%d" % (i % 2),
                "payload": b'{"q":"%s","i":%d}' % (q.encode(), i)}
               for i in range(10)]
        acked[q] = push(node, its)
    reader = lake.bucket_reader(bucket)
    for q, recs in acked.items():
        lake.wait_queue(reader, PREFIX, TENANT, q, recs, timeout=60,
                        compression="zstd", align="none", broker=node,
                        checkpoint_every=2)
    assert _queue_names(node) == ["s.one", "s.two", "s.zero"]


def test_per_partition_layout_aligned_by_day(sink_node, bucket):
    node = sink_node({"QUEEN_S3_LAYOUT": "per-partition",
                      "QUEEN_S3_ALIGN": "day",
                      "QUEEN_S3_COMPRESSION": "gzip"})
    acked = push(node, items(0)) + push(node, items(1))
    got = lake.wait_queue(lake.bucket_reader(bucket), PREFIX, TENANT,
                          "orders", acked, timeout=60, compression="gzip",
                          layout="per-partition", align="day",
                          broker=node, checkpoint_every=2)
    assert got["objects"] >= 3  # one object per partition and window


def test_memory_budget_closes_the_window_early(sink_node, bucket):
    # Neither size (128 MB) nor age (10 min) can close a window here: only
    # the node's 1 MiB budget can (docs/design/window.md §12).
    node = sink_node({"QUEEN_S3_MEMORY_MB": "1",
                      "QUEEN_S3_MAX_WINDOW_MS": "600000"})
    reader = lake.bucket_reader(bucket)
    acked = []
    for r in range(6):
        its = [{"queue": "orders", "partition": "p-%d" % (i % 4),
                "payload": b'"' + (b"%d" % r) * 4000 + b'"'}
               for i in range(100)]
        acked += push(node, its)
    # Windows commit within a minute, ten times less than their age limit.
    wait_until(lambda: lake.count_records(reader, PREFIX, TENANT,
                                          "orders") >= 100, 60,
               "no window closed early under the 1 MiB budget", interval=0.2)
    assert "memory budget reached: closing this queue's window early" in \
        node.stderr()
    # What is left after the last forced close may weigh less than the
    # budget and then waits for its age, as docs/design/window.md §9 says. A
    # restart
    # with the default age limit commits it: every record exactly once.
    assert node.stop() == 0
    node = sink_node(data_dir=node.data_dir)
    wait_lake(reader, node, "orders", acked)


def test_a_secret_key_longer_than_199_bytes_signs_whole(broker_factory,
                                                         tmp_path):
    # The control plane takes a secretKey of up to 4 KiB (docs/s3-sink.md),
    # so the sink signs with the whole of a long one: a bucket whose secret
    # is 320 bytes checks every signature, and a window commits.
    secret = "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY" * 8
    with TestBucket(buckets=["lake"], secret_key=secret,
                    workdir=str(tmp_path / "bucket")) as b:
        node = broker_factory(env=sink_env(b, QUEEN_S3_SECRET_KEY=secret))
        push(node, items(0, n=6))
        wait_until(lambda: (sink_row(node, "orders") or {}).get("k", 0) >= 1,
                   60, "a window committed with a 320-byte secret key")
        assert b.stats()["requests"]["PUT"].get("403", 0) == 0, b.stats()
        assert secret not in node.stderr()


def test_star_skips_a_name_with_a_nul_once_and_mirrors_the_rest(sink_node,
                                                                 bucket):
    # The broker takes any name, NUL included; the sink's queue names are C
    # strings, so `*` skips such a queue with one warning (docs/s3-sink.md)
    # instead of starting a task cut at the NUL at every listing.
    node = sink_node({"QUEEN_S3_QUEUES": "*"})
    push(node, [{"queue": "nul\u0000q", "payload": b"1"}])
    acked = push(node, [{"queue": "plain", "payload": b"%d" % i}
                        for i in range(5)])
    reader = lake.bucket_reader(bucket)
    wait_lake(reader, node, "plain", acked)

    def warnings():
        return loglines.records(node.stderr(),
                                msg="a queue name holds a NUL byte*")

    wait_until(lambda: warnings(), 60, "the warning about the NUL name")
    # a queue created now is only found by a later listing: once it is
    # there, that listing met the NUL name again
    acked = push(node, [{"queue": "later", "payload": b"7"}])
    wait_lake(reader, node, "later", acked)
    assert sorted(_queue_names(node)) == ["later", "plain"]
    got = warnings()
    assert len(got) == 1, got
    assert got[0]["queue"] == 'nul\\u0000q', got
    assert not loglines.records(node.stderr(),
                                msg="starting a queue task", queue="nul")


def test_a_name_too_long_for_its_kv_keys_fails_with_its_reason(sink_node,
                                                               bucket):
    # 300 slashes are a name the broker takes (447 bytes at most), but
    # percent-encoded (%2F) in the sink's KV keys they pass what the KV
    # takes in the sink's namespace (486 bytes: the store's 511-byte key
    # holds the tenant and "queen-s3" too): the row says so and is failed,
    # not claiming for ever. The second name's keys (501 bytes) are within
    # the KV's 512 but not within 486: they were refused at every claim.
    long_name = "/" * 300
    near_name = " " * 155 + "a" * 15
    node = sink_node({"QUEEN_S3_QUEUES": "*"})
    push(node, [{"queue": long_name, "payload": b"1"},
                {"queue": near_name, "payload": b"3"}])
    acked = push(node, [{"queue": "plain", "payload": b"2"}])
    wait_lake(lake.bucket_reader(bucket), node, "plain", acked)
    for name in (long_name, near_name):
        row = wait_failed(node, name, "the long name's row failed")
        assert "makes them longer than the KV's 486 bytes in namespace " \
            "queen-s3: this queue cannot be mirrored" in \
            row["lastError"]["message"], row
    # failed, so watched (docs/design/protocol.md §8): the verdict turns red
    # on it once past the limit (30 s), as on a queue failed by a 403; it
    # stayed ok for good before.

    def verdict():
        return node.get("/status").json()["s3"]["sinks"][0]["health"]

    wait_until(lambda: not verdict()["ok"], 90, "the verdict red")
    v = verdict()
    assert v["queue"] in (long_name, near_name), v
    assert v["staleMs"] > v["limitMs"], v


def test_a_sink_never_overwrites_a_window_its_pointer_does_not_know(
        sink_node, bucket):
    # QUEEN_S3_SINK misspelt on a node: its KV keys are another sink's, so
    # it has no commit pointer and would write window 1 again over the
    # lake's. It fails the queue instead, writing nothing; with the name
    # put right the lake goes on exactly once.
    reader = lake.bucket_reader(bucket)
    node = sink_node()
    acked = push(node, items(0))
    wait_lake(reader, node, "orders", acked)
    m1 = lake.manifest_key(PREFIX, TENANT, "orders", 1)
    before = reader.read(m1)
    assert node.stop() == 0
    node = sink_node({"QUEEN_S3_SINK": "defualt"}, data_dir=node.data_dir)
    acked += push(node, items(1))
    row = wait_failed(node, "orders", "orders failed on the misspelt sink")
    assert "window 1 already has a manifest (sink \"default\") but this " \
        "sink's pointer is at 0: not overwritten" in \
        row["lastError"]["message"], row
    assert reader.read(m1) == before
    assert loglines.records(node.stderr(), msg="the next window's manifest "
                            "is already in the bucket*", k="1")
    assert node.stop() == 0
    node = sink_node(data_dir=node.data_dir)
    wait_lake(reader, node, "orders", acked)


def test_a_prefix_unlike_the_last_windows_is_warned_about(sink_node,
                                                          bucket):
    # A node whose QUEEN_S3_PREFIX differs from the one its queue's last
    # window was committed under goes on under its own prefix (a move on
    # every node is allowed), and says so once, naming both keys.
    reader = lake.bucket_reader(bucket)
    node = sink_node()
    acked = push(node, items(0))
    k = wait_lake(reader, node, "orders", acked)["manifests"]
    # The manifest is in the bucket before the pointer moves past it: wait
    # for the commit, so the node stops with window k committed.
    wait_until(lambda: (sink_row(node, "orders") or {}).get("k") == k, 60,
               "the pointer to reach window %d" % k)
    assert node.stop() == 0
    node = sink_node({"QUEEN_S3_PREFIX": PREFIX + "-moved"},
                     data_dir=node.data_dir)
    push(node, items(1))
    moved = lake.manifest_key(PREFIX + "-moved", TENANT, "orders", k + 1)
    wait_until(lambda: moved in reader.list_keys(PREFIX + "-moved/"), 60,
               "window %d under the new prefix" % (k + 1))
    got = loglines.records(node.stderr(), msg="the last committed window's "
                           "manifest is not where this node writes*")
    assert len(got) == 1, got
    assert got[0]["committed"] == lake.manifest_key(PREFIX, TENANT,
                                                    "orders", k), got
    assert got[0]["here"] == lake.manifest_key(PREFIX + "-moved", TENANT,
                                               "orders", k), got


def test_a_403_on_the_free_key_check_lets_the_queue_go_on(sink_node, bucket):
    # Without s3:ListBucket a missing key answers 403: the start cannot
    # tell the next window's manifest key free, says so, and goes on.
    reader = lake.bucket_reader(bucket)
    bucket.fault("403", count=-1, method="GET",
                 prefix=lake.manifest_key(PREFIX, TENANT, "orders", 1))
    node = sink_node()
    acked = push(node, items(0))
    wait_lake(reader, node, "orders", acked)
    assert loglines.records(node.stderr(), msg="cannot tell whether the "
                            "next window's manifest key is free*", k="1")
