"""Issue 19 item 6: SIGTERM never waits on S3 retries beyond the grace.

With the bucket down, a stop used to wait for the S3 client's own retries
(10 s and more, with "retrying in" lines after "stopping: no new reads"),
longer than Docker's default stop timeout. Now the client stops retrying by
itself at the stop, sends nothing and cuts transfers from a deadline a
margin before QUEEN_S3_SHUTDOWN_GRACE_MS, and every queue it could not
drain is named. Cutting a window mid-way leaves nothing half done: the next
run redoes it from its intent and the lake is exact."""
import re
import time

import lake
from sinkenv import PREFIX, TENANT, it, sink_env, sink_row, wait_until

QUEUES = ["sq0", "sq1"]
# What a loaded machine may take past the sink's stop to close raft and
# exit (a barrier and a 200 ms delay): the grace itself is the behaviour.
CLOSE_SLACK_S = 1.0


def push(node, queue, n, first):
    items = [{"queue": queue, "partition": "p-%d" % (i % 3),
              "transactionId": "%s-%06d" % (queue, first + i),
              "payload": b'{"i":%d}' % (first + i)} for i in range(n)]
    r = node.request("POST", "/api/v1/push", body=lake.push_body(items))
    assert r.status == 201, r
    return lake.acked_from_push(items, r.json())


def nudge(node):
    """Move safeTime with a queue the sink does not write."""
    r = node.request("POST", "/api/v1/push", body=lake.push_body(
        [{"queue": "nudge", "payload": b"1"}]))
    assert r.status == 201, r


def after_stop(log):
    return log[log.index("stopping: no new reads"):]


def test_sigterm_with_the_bucket_down_exits_within_the_grace_naming_the_queues(
        sink_node, bucket):
    grace_ms = 5000
    node = sink_node({"QUEEN_S3_QUEUES": ",".join(QUEUES),
                      "QUEEN_S3_SHUTDOWN_GRACE_MS": grace_ms,
                      "QUEEN_S3_LEASE_TTL_MS": 3000})
    reader = lake.bucket_reader(bucket)
    acked = {q: [] for q in QUEUES}
    n = 0

    def committed():
        nonlocal n
        for q in QUEUES:
            acked[q] += push(node, q, 5, n)
        n += 5
        nudge(node)
        return all((sink_row(node, q) or {}).get("windowsCommitted", 0) >= 1
                   for q in QUEUES)
    wait_until(committed, 60, "a window committed per queue", interval=0.3)

    bucket.fault("down")  # connections refused from now on

    def failing():
        nonlocal n
        for q in QUEUES:
            acked[q] += push(node, q, 5, n)
        n += 5
        nudge(node)
        rows = [sink_row(node, q) or {} for q in QUEUES]
        return all("transport" in ((r.get("lastError") or {}).get(
            "message") or "") for r in rows)
    wait_until(failing, 60, "every queue failing to upload", interval=0.3)

    t0 = time.monotonic()
    node.signal(15)
    assert node.wait_exit(grace_ms / 1000 + 60) == 0
    took = time.monotonic() - t0
    log = node.stderr()
    node._reap()
    assert took <= grace_ms / 1000 + CLOSE_SLACK_S, (took, log)
    tail = after_stop(log)
    # the client retried nothing by itself once stopping
    assert not re.search(r" s3: .*; retrying in \d+ ms", tail), tail
    for q in QUEUES:
        assert re.search(r"queue not drained: .* queue=%s " % q, tail), tail
    assert "did not stop inside its grace window" in tail, tail

    # Nothing half done: with the bucket back the next run redoes the open
    # windows and the lake holds every acknowledged record once.
    bucket.clear_faults()
    node.start()
    for q in QUEUES:
        def done(q=q):
            nudge(node)
            return lake.count_records(reader, PREFIX, TENANT, q) == \
                len(acked[q])
        wait_until(done, 120, "the lake of %s" % q, interval=0.3)
        lake.wait_queue(reader, PREFIX, TENANT, q, acked[q], timeout=60,
                        align="none", broker=node, checkpoint_every=2)


def test_sigterm_with_the_bucket_unreachable_from_the_start_exits_at_once(
        broker_factory):
    """Nothing owned, nothing to finish: the probe's backoff (once the S3
    client's retry ladder, with waits of up to 16 s; the probe is one
    request now) does not hold the stop."""
    class Closed:  # a port nothing listens on
        endpoint = "http://127.0.0.1:%d" % it.free_port()
    node = broker_factory(env=sink_env(
        Closed, QUEEN_S3_SHUTDOWN_GRACE_MS=30000))
    wait_until(lambda: "the bucket does not answer; retrying" in
               node.stderr(), 60, "the probe's first failure")
    t0 = time.monotonic()
    node.signal(15)
    assert node.wait_exit(90) == 0
    took = time.monotonic() - t0
    log = node.stderr()
    node._reap()
    tail = after_stop(log)
    assert "HEAD queen/: attempt" not in tail, tail
    assert took < 2.0, (took, log)
    assert "every queue drained; the sink has stopped" in tail, tail
