"""A drain before the first window under `latest` (the default start).

The next engine of a queue with nothing committed starts at its own first
safeTime, so records the last one buffered and left in the log for "the
next owner" were never mirrored: a SIGTERM restart (or any rebuild of the
sink) within the first window lost them from the lake, silently (the
tenants audit). The drain now commits such a queue's buffered records as
window 1 whatever their size or age."""
import lake
from sinkenv import PREFIX, TENANT, sink_env, sink_row, wait_until

QUEUE = "lt.orders"
VERIFY = dict(compression="zstd", align="none")


def push(node, first, n):
    items = [{"queue": QUEUE, "partition": "p-%d" % (i % 2),
              "transactionId": "lt-%d" % i, "payload": b'{"n":%d}' % i}
             for i in range(first, first + n)]
    r = node.request("POST", "/api/v1/push", body=lake.push_body(items))
    assert r.status == 201, r
    return lake.acked_from_push(items, r.json())


def latest_node(broker_factory, bucket):
    """A node whose sink reads QUEUE from `latest`, windows of 15 s, and
    the bucket's reader, once the queue is filling."""
    node = broker_factory(env=sink_env(
        bucket, QUEEN_S3_QUEUES=QUEUE, QUEEN_S3_START="latest",
        QUEEN_S3_MAX_WINDOW_MS="15000"))
    r = node.request("POST", "/api/v1/configure", body={"queue": QUEUE})
    assert r.status == 200, r
    wait_until(lambda: (sink_row(node, QUEUE) or {}).get("state") ==
               "filling", 30, "the queue to be filling")
    return node, lake.bucket_reader(bucket)


def test_a_restart_before_the_first_window_under_latest_keeps_its_records(
        broker_factory, bucket):
    node, reader = latest_node(broker_factory, bucket)

    def buffered():
        return (sink_row(node, QUEUE) or {}).get("bufferedBytes", 0) > 0
    before = push(node, 0, 6)
    wait_until(buffered, 30, "the sink to read the records")
    # Two discovery passes later the node's safeTime is above them: the
    # drain may close a window over them (never above safeTime).
    for _ in range(2):
        seen = sink_row(node, QUEUE)["safeTime"]
        wait_until(lambda: sink_row(node, QUEUE)["safeTime"] > seen, 30,
                   "the sink's safeTime to move past %s" % seen)
    assert sink_row(node, QUEUE)["k"] == 0
    assert node.stop() == 0
    assert "queue drained" in node.stderr()
    node.start()
    after = push(node, 6, 4)
    lake.wait_queue(reader, PREFIX, TENANT, QUEUE, before, timeout=30,
                    **VERIFY)  # window 1, committed by the drain
    wait_until(lambda: (sink_row(node, QUEUE) or {}).get("k") == 1, 30,
               "the restarted node to see window 1")
    assert node.stop() == 0  # the drain of a committed queue as before
    node.start()
    got = lake.wait_queue(reader, PREFIX, TENANT, QUEUE, before + after,
                          timeout=60, **VERIFY)
    assert got["records"] == 10
    assert node.stop() == 0


def test_a_kill_before_the_first_window_under_latest_keeps_its_records(
        broker_factory, bucket):
    """kill -9 with records read but window 1 not closed: no drain runs, so
    only the start the sink recorded when it first found the queue lets the
    next life begin there. Without it, it began at its own first safeTime,
    above those records, and they were never in the lake."""
    node, reader = latest_node(broker_factory, bucket)
    before = push(node, 0, 6)
    wait_until(lambda: (sink_row(node, QUEUE) or {}).get(
        "bufferedBytes", 0) > 0, 30, "the sink to read the records")
    assert sink_row(node, QUEUE)["k"] == 0
    node.kill9()
    node.start()
    wait_until(lambda: (sink_row(node, QUEUE) or {}).get("state") ==
               "filling", 30, "the restarted queue to be filling")
    after = push(node, 6, 4)
    got = lake.wait_queue(reader, PREFIX, TENANT, QUEUE, before + after,
                          timeout=60, **VERIFY)  # window 1, at its age
    assert got["records"] == 10
    assert node.stop() == 0
