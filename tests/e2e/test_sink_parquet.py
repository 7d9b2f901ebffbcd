"""Scenarios a (scaled down) and b (reference 7.9) with QUEEN_S3_FORMAT=
parquet: a node mirrors `orders` into Parquet objects exactly once, and
after an abort at a crash point of the commit sequence the next run redoes
or commits the window so the lake is complete, with every object that
existed before the crash unchanged.  The lake is read through DuckDB by
lake.verify_queue(fmt="parquet")."""
import pytest

import lake
from sinkenv import PREFIX, TENANT, kv_get, wait_until
from test_sink_crash import EXPECT, QUEUE, Pusher, kv_doc, snapshot

PAYLOADS = [b'{"order":1,"status":"new","total":42.00}',
            b'{"n":12345678901234567890123456789012345678901234567890}',
            b'{\r\n  "total": 42.00,\n  "note": "a\\nb"\n}',
            b'[1,[2,[3]]]']
@pytest.mark.parametrize("codec", ["zstd", "snappy"])
def test_parquet_queue_is_mirrored_exactly_once(sink_node, bucket, codec):
    node = sink_node({"QUEEN_S3_FORMAT": "parquet",
                      "QUEEN_S3_PARQUET_CODEC": codec})
    acked = []
    for r in range(3):
        items = [{"queue": QUEUE, "partition": "cust-%d" % (i % 3),
                  "transactionId": "r%d-i%d" % (r, i),
                  "payload": PAYLOADS[(i + r) % len(PAYLOADS)]}
                 for i in range(20)]
        resp = node.request("POST", "/api/v1/push",
                            body=lake.push_body(items))
        assert resp.status == 201, resp
        acked += lake.acked_from_push(items, resp.json())
    reader = lake.bucket_reader(bucket)
    got = lake.wait_queue(reader, PREFIX, TENANT, QUEUE, acked, timeout=90,
                          fmt="parquet", compression=codec, align="none")
    assert got["records"] == len(acked) == 60
    assert got["partitions"] == {"cust-0": 21, "cust-1": 21, "cust-2": 18}
    ptr = kv_get(node, "s3:default:%s:committed" % QUEUE)
    assert ptr["found"] is True
    assert kv_doc(node, "committed")["k"] == got["manifests"]


def _crash(node, p, point):
    node.extra_env["QUEEN_S3_CRASH_AT"] = point
    node.start()

    def died():
        if node.proc.poll() is not None:
            return True
        p.push(node, p.batch(2))
        return False
    wait_until(died, 60, "the crash point %s to fire" % point, interval=0.3)
    assert node.proc.returncode == -6, node.stderr()
    log = node.stderr()
    assert ("QUEEN_S3_CRASH_AT fired: aborting" in log or
            "aborting between multipart parts" in log), log
    node._reap()


@pytest.mark.parametrize("point", list(EXPECT))
def test_parquet_crash_point_then_redo(sink_node, bucket, point):
    reader = lake.bucket_reader(bucket)
    verify = dict(fmt="parquet", compression="zstd", align="none")
    p = Pusher()
    node = sink_node({"QUEEN_S3_FORMAT": "parquet"})
    for _ in range(2):  # an honest run
        assert p.push(node, p.batch(10))
        lake.wait_queue(reader, PREFIX, TENANT, QUEUE, p.records(),
                        timeout=90, **verify)
    assert node.stop() == 0

    _crash(node, p, point)
    before = snapshot(reader)

    node.extra_env["QUEEN_S3_EMBEDDED"] = "false"  # the pointers
    del node.extra_env["QUEEN_S3_CRASH_AT"]
    node.start()
    intent = kv_doc(node, "intent")
    committed = kv_doc(node, "committed")
    assert node.stop() == 0
    gap, has_data, has_manifest = EXPECT[point]
    assert intent["k"] - committed["k"] == gap
    data_root = lake.queue_root(PREFIX, TENANT, QUEUE) + "/"
    data = [key for key in reader.list_keys(data_root)
            if ("/w-%010d-" % intent["k"]) in key]
    assert bool(data) == has_data, data
    assert all(key.endswith(".parquet") for key in data), data
    manifest = reader.read(lake.manifest_key(PREFIX, TENANT, QUEUE,
                                             intent["k"]))
    assert (manifest is not None) == has_manifest

    node.extra_env["QUEEN_S3_EMBEDDED"] = "true"  # the redo
    node.start()
    left, p.leftover = p.leftover, []
    if left:
        assert p.push(node, left)
    assert p.push(node, p.batch(10))
    lake.wait_queue(reader, PREFIX, TENANT, QUEUE, p.records(), timeout=120,
                    **verify)
    after = snapshot(reader)
    for key, digest in before.items():
        assert after.get(key) == digest, "%s changed or vanished" % key
    restored = "queue restored queue=%s committed_k=%d redo=%s" % (
        QUEUE, committed["k"], "false" if point == "after_commit" else "true")
    log = node.stderr()
    assert restored in log, log
    from_manifest = "committing it from its manifest" in log
    assert from_manifest == (point in ("after_upload", "before_commit"))
