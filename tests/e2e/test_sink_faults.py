"""Scenario g (reference 7.9): bucket faults. A bucket that does not answer
yet shows in /status and holds everything back (no lease before the bucket
answers); once it answers the lake completes. Injected 503 SlowDown and 500
InternalError on PUTs are retried: the lake stays exact and the S3 request
counters show them. Scenario f: a short lease TTL under continuous pushes
never fences the node's own queue."""
import os
import re
import threading
import time

import lake
from bucket import TestBucket
from sinkenv import PREFIX, TENANT, kv_get, sink_env, wait_until, it


def push(node, n, first, queue="orders"):
    items = [{"queue": queue, "partition": "p-%d" % (i % 4),
              "transactionId": "g-%06d" % (first + i),
              "payload": b'{"i":%d,"x":1.50}' % (first + i)} for i in range(n)]
    r = node.request("POST", "/api/v1/push", body=lake.push_body(items))
    assert r.status == 201, r
    return lake.acked_from_push(items, r.json())


def test_bucket_down_then_faults(broker_factory, tmp_path):
    port = it.free_port()
    later = TestBucket(buckets=["lake"], port=port,
                       workdir=str(tmp_path / "bucket"))

    class Early:  # the endpoint before anything listens there
        endpoint = "http://127.0.0.1:%d" % port
    node = broker_factory(env=sink_env(Early))

    def unreachable():
        s3 = node.get("/status").json()["s3"]["sinks"][0]
        return s3["bucket"]["reachable"] is False and s3["bucket"]["error"]
    err = wait_until(unreachable, 30, "bucket.reachable false")
    assert "cannot reach the bucket lake at" in err
    assert "QUEEN_S3_PATH_STYLE=true is what most gateways need" in err
    acked = push(node, 20, 0) + push(node, 20, 20)
    assert kv_get(node, "s3:default:orders:lease")["found"] is False

    later.start()
    try:
        reader = lake.bucket_reader(later)
        lake.wait_queue(reader, PREFIX, TENANT, "orders", acked, timeout=90,
                        compression="zstd", align="none")
        assert "the bucket answers; starting the queues" in node.stderr()

        later.fault("503", count=4, method="PUT", prefix=PREFIX + "/tenant=",
                    retry_after=1)
        later.fault("500", count=2, method="PUT", prefix=PREFIX + "/_queen/")
        n = 40
        while later.stats()["faults"]["503"] < 4 or \
                later.stats()["faults"]["500"] < 2:
            acked += push(node, 10, n)
            n += 10
            assert n < 2000, later.stats()
            time.sleep(0.3)
        lake.wait_queue(reader, PREFIX, TENANT, "orders", acked, timeout=90,
                        compression="zstd", align="none")
        assert node.metric("queen_s3_s3_requests_total",
                           'op="put",code="503"') >= 4
        assert node.metric("queen_s3_s3_requests_total",
                           'op="put",code="500"') >= 2
        assert node.stop() == 0
    finally:
        later.stop()


def test_short_ttl_never_fences_itself(sink_node, bucket):
    node = sink_node({"QUEEN_S3_LEASE_TTL_MS": "1000",
                      "QUEEN_S3_MAX_WINDOW_MS": "100",
                      "QUEEN_S3_DISCOVERY_INTERVAL_MS": "10"})
    acked = []
    n = 0
    end = time.monotonic() + 15
    while time.monotonic() < end:
        acked += push(node, 8, n)
        n += 8
        time.sleep(0.05)
    reader = lake.bucket_reader(bucket)
    lake.wait_queue(reader, PREFIX, TENANT, "orders", acked, timeout=60,
                    compression="zstd", align="none")
    log = node.stderr()
    assert "queue fenced" not in log
    assert node.metric("queen_s3_commit_precondition_lost_total") == 0
