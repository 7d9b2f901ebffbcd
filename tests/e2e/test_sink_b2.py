"""Scenario b2 (docs/design/scenarios.md §9): the node aborts between two parts
of a
multipart data object (QUEEN_S3_CRASH_AT=mid_upload with a 20 MB window
over a 5 MB multipart threshold).  The bucket then holds exactly one
stranded upload with one 16 MiB part and no object; the unarmed restart
redoes the window with the same bytes, completed as a multipart object, and
leaves every object that existed before the crash unchanged; and no
multipart upload is left in the bucket."""
import hashlib


import lake
from sinkenv import PREFIX, TENANT, wait_until

QUEUE = "b2.big"
LANES = ["p-%d" % i for i in range(4)]
PART = 16 * 1024 * 1024
ENV = {"QUEEN_S3_QUEUES": QUEUE, "QUEEN_S3_COMPRESSION": "none",
       "QUEEN_S3_MULTIPART_THRESHOLD_MB": "5",
       "QUEEN_S3_TARGET_MB": "20"}
VERIFY = dict(compression="none", align="none")


class Pusher:
    """Pushes ~8.3 KB records with transaction ids, keeping the acked ones;
    a batch whose answer was lost (the node died) is kept as leftover."""

    def __init__(self):
        self.acked = {}
        self.leftover = []
        self.n = 0

    def batch(self, count):
        out = []
        for _ in range(count):
            self.n += 1
            pad = (b"%08d" % self.n) * 1035
            out.append({"queue": QUEUE, "partition": LANES[self.n % 4],
                        "transactionId": "b2-%06d" % self.n,
                        "payload": b'{"n":%d,"pad":"%s"}' % (self.n, pad)})
        return out

    def push(self, node, items):
        try:
            r = node.request("POST", "/api/v1/push",
                             body=lake.push_body(items), timeout=30)
        except OSError:
            self.leftover += items
            return False
        assert r.status == 201, r
        for it, a in zip(items, r.json()):
            assert a["status"] in ("queued", "duplicate"), a
            self.acked[(it["partition"], a["offset"])] = (
                it["partition"], a["offset"], a["transaction_id"],
                it["payload"])
        return True

    def records(self):
        return list(self.acked.values())


def snapshot(reader):
    return {k: hashlib.sha256(reader.read(k)).hexdigest()
            for k in reader.list_keys("")}


def crash_between_parts_then_redo(sink_node, bucket):
    """The scenario, asserted step by step; returns the stranded upload
    (as bucket.uploads() listed it after the crash) once the redo
    committed."""
    reader = lake.bucket_reader(bucket)
    p = Pusher()
    node = sink_node(dict(ENV))  # (1) warm-up: one honest window
    assert p.push(node, p.batch(20))
    lake.wait_queue(reader, PREFIX, TENANT, QUEUE, p.records(), timeout=60,
                    **VERIFY)
    assert node.stop() == 0
    before = snapshot(reader)
    assert before

    node.extra_env["QUEEN_S3_CRASH_AT"] = "mid_upload"  # (2) armed
    node.extra_env["QUEEN_TEST_MODE"] = "true"
    node.extra_env["QUEEN_S3_MAX_WINDOW_MS"] = "600000"
    node.start()
    for _ in range(34):
        if node.proc.poll() is not None or not p.push(node, p.batch(100)):
            break
    wait_until(lambda: node.proc.poll() is not None, 120,
               "the node to abort between multipart parts", interval=0.2)
    assert node.proc.returncode == -6, node.stderr()
    assert "aborting between multipart parts" in node.stderr()
    node._reap()

    ups = bucket.uploads("lake")
    assert len(ups) == 1, ups
    up = ups[0]
    assert [x["partNumber"] for x in up["parts"]] == [1], up
    assert up["parts"][0]["size"] == PART, up
    assert reader.read(up["key"]) is None
    # the stranded part's bytes, by their MD5 as the server lists it (an
    # RGW bucket has no part file to read)
    stranded_md5 = up["parts"][0]["md5"]

    del node.extra_env["QUEEN_S3_CRASH_AT"]  # (3) the redo
    node.extra_env["QUEEN_S3_MAX_WINDOW_MS"] = "1000"
    node.start()
    left, p.leftover = p.leftover, []
    if left:
        assert p.push(node, left)
    assert p.push(node, p.batch(10))
    got = lake.wait_queue(reader, PREFIX, TENANT, QUEUE, p.records(),
                          timeout=150, **VERIFY)
    assert got["records"] == len(p.records())
    redone = reader.read(up["key"])
    assert redone is not None and len(redone) > PART
    assert hashlib.md5(redone[:PART]).hexdigest() == stranded_md5
    etag = bucket.boto3().head_object(Bucket="lake", Key=up["key"])["ETag"]
    assert int(etag.strip('"').rsplit("-", 1)[1]) >= 2, etag
    after = snapshot(reader)
    for key, digest in before.items():
        assert after.get(key) == digest, "%s changed or vanished" % key
    return up


def test_crash_between_multipart_parts_then_redo(sink_node, bucket):
    crash_between_parts_then_redo(sink_node, bucket)


# The redo uploads the window again under a new multipart upload; the one
# the crash stranded (its 16 MiB part billed on a real bucket until a
# lifecycle rule removes it) must be aborted once the redo's object landed.
def test_no_stranded_upload_is_left_after_the_redo(sink_node, bucket):
    up = crash_between_parts_then_redo(sink_node, bucket)
    try:
        wait_until(lambda: bucket.uploads("lake") == [], 30,
                   "no multipart upload left in the bucket")
    except AssertionError:
        assert bucket.uploads("lake") == [], ("stranded by the crash:", up)
