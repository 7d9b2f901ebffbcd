"""Scenario b (reference 7.9): the node aborts at each crash point of the
commit sequence (QUEEN_S3_CRASH_AT), the KV pointers and the bucket show
exactly what that point leaves behind, and the next run redoes or commits
the window so the lake is complete, exactly once, with every object that
existed before the crash unchanged."""
import hashlib
import json

import pytest

import lake
from sinkenv import PREFIX, TENANT, kv_get, wait_until

QUEUE = "orders"
LANES = ["lane-%d" % i for i in range(8)]


class Pusher:
    """Pushes with transaction ids, keeping the acked records; a batch whose
    answer was lost is kept as the leftover, pushed again later (a record
    stored before the crash then answers `duplicate` with its offset)."""

    def __init__(self):
        self.acked = {}
        self.leftover = []
        self.n = 0

    def batch(self, per_lane):
        out = []
        for _ in range(per_lane):
            for lane in LANES:
                self.n += 1
                out.append({"queue": QUEUE, "partition": lane,
                            "transactionId": "t-%06d" % self.n,
                            "payload": b'{"n":%d,"total":42.00}' % self.n})
        return out

    def push(self, node, items):
        try:
            r = node.request("POST", "/api/v1/push",
                             body=lake.push_body(items), timeout=10)
        except OSError:
            self.leftover += items
            return False
        assert r.status == 201, r
        for it, a in zip(items, r.json()):
            assert a["status"] in ("queued", "duplicate"), a
            key = (it["partition"], a["offset"])
            self.acked[key] = (it["partition"], a["offset"],
                               a["transaction_id"], it["payload"])
        return True

    def records(self):
        return list(self.acked.values())


def snapshot(reader):
    return {k: hashlib.sha256(reader.read(k)).hexdigest()
            for k in reader.list_keys("")}


def kv_doc(node, what):
    row = kv_get(node, "s3:default:%s:%s" % (QUEUE, what))
    if not row["found"]:
        return None
    v = row["value"]
    return json.loads(v) if isinstance(v, str) else v


EXPECT = {  # point: (intent k - committed k, data object, manifest)
    "after_intent": (1, False, False),
    "mid_upload": (1, True, False),
    "after_upload": (1, True, True),
    "before_commit": (1, True, True),
    "after_commit": (0, True, True),
}


@pytest.mark.parametrize("point", list(EXPECT))
def test_crash_point_then_redo(sink_node, bucket, point):
    reader = lake.bucket_reader(bucket)
    verify = dict(compression="zstd", align="none")
    p = Pusher()
    node = sink_node()
    for _ in range(3):  # (1) an honest run
        assert p.push(node, p.batch(10))
        lake.wait_queue(reader, PREFIX, TENANT, QUEUE, p.records(),
                        timeout=60, **verify)
    assert node.stop() == 0

    node.extra_env["QUEEN_S3_CRASH_AT"] = point  # (2) armed
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
    before = snapshot(reader)

    node.extra_env["QUEEN_S3_EMBEDDED"] = "false"  # (3) the pointers
    del node.extra_env["QUEEN_S3_CRASH_AT"]
    node.start()
    intent = kv_doc(node, "intent")
    committed = kv_doc(node, "committed")
    assert node.stop() == 0
    ck = committed["k"]
    gap, has_data, has_manifest = EXPECT[point]
    assert intent["k"] - ck == gap
    k = intent["k"]
    data_root = lake.queue_root(PREFIX, TENANT, QUEUE) + "/"
    data = [key for key in reader.list_keys(data_root)
            if ("/w-%010d-" % k) in key]
    assert bool(data) == has_data, data
    manifest = reader.read(lake.manifest_key(PREFIX, TENANT, QUEUE, k))
    assert (manifest is not None) == has_manifest

    node.extra_env["QUEEN_S3_EMBEDDED"] = "true"  # (4) the redo
    node.start()
    left, p.leftover = p.leftover, []
    if left:
        assert p.push(node, left)
    assert p.push(node, p.batch(10))
    lake.wait_queue(reader, PREFIX, TENANT, QUEUE, p.records(), timeout=90,
                    **verify)
    after = snapshot(reader)
    for key, digest in before.items():
        assert after.get(key) == digest, "%s changed or vanished" % key
    log = node.stderr()
    restored = "queue restored queue=%s committed_k=%d redo=%s" % (
        QUEUE, ck, "false" if point == "after_commit" else "true")
    assert restored in log, log
    from_manifest = "committing it from its manifest" in log
    assert from_manifest == (point in ("after_upload", "before_commit"))
