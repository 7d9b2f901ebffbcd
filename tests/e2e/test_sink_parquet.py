"""Scenario a (docs/design/scenarios.md §9, scaled down) with
QUEEN_S3_FORMAT=parquet: a
node mirrors a queue into Parquet objects exactly once, with either codec.
The lake is read through DuckDB by lake.verify_queue(fmt="parquet").
Both codecs share one test bucket, a queue each.  Scenario b with Parquet
(crash points, redo) is test_sink_crash.py, which runs the same steps for
every format."""
import json

import pytest

import lake
from bucket import TestBucket
from sinkenv import PREFIX, TENANT, kv_get, sink_env

PAYLOADS = [b'{"order":1,"status":"new","total":42.00}',
            b'{"n":12345678901234567890123456789012345678901234567890}',
            b'{\r\n  "total": 42.00,\n  "note": "a\\nb"\n}',
            b'[1,[2,[3]]]']


@pytest.fixture(scope="module")
def shared_bucket(tmp_path_factory):
    b = TestBucket(buckets=["lake"],
                   workdir=str(tmp_path_factory.mktemp("pq") / "bucket"))
    b.start()
    try:
        yield b
    finally:
        b.stop()


@pytest.mark.parametrize("codec", ["zstd", "snappy"])
def test_parquet_queue_is_mirrored_exactly_once(broker_factory, shared_bucket,
                                                codec):
    queue = "orders-" + codec
    node = broker_factory(env=sink_env(shared_bucket, QUEEN_S3_QUEUES=queue,
                                       QUEEN_S3_FORMAT="parquet",
                                       QUEEN_S3_PARQUET_CODEC=codec))
    acked = []
    for r in range(3):
        items = [{"queue": queue, "partition": "cust-%d" % (i % 3),
                  "transactionId": "r%d-i%d" % (r, i),
                  "payload": PAYLOADS[(i + r) % len(PAYLOADS)]}
                 for i in range(20)]
        resp = node.request("POST", "/api/v1/push",
                            body=lake.push_body(items))
        assert resp.status == 201, resp
        acked += lake.acked_from_push(items, resp.json())
    reader = lake.bucket_reader(shared_bucket)
    got = lake.wait_queue(reader, PREFIX, TENANT, queue, acked, timeout=90,
                          fmt="parquet", compression=codec, align="none",
                          broker=node, checkpoint_every=2)
    assert got["records"] == len(acked) == 60
    assert got["stamps_checked"] == 60
    assert got["partitions"] == {"cust-0": 21, "cust-1": 21, "cust-2": 18}
    ptr = kv_get(node, "s3:default:%s:committed" % queue)
    assert ptr["found"] is True
    value = ptr["value"]
    value = json.loads(value) if isinstance(value, str) else value
    assert value["k"] == got["manifests"]
