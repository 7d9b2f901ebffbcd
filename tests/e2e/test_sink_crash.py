"""Scenario b (docs/design/scenarios.md §9) for every object format the sink
writes: the
node aborts at each crash point of the commit sequence (QUEEN_S3_CRASH_AT),
the KV pointers and the bucket show exactly what that point leaves behind,
and the next run redoes or commits the window so the lake is complete,
exactly once, with every object that existed before the crash unchanged.

The steps exist once, in test_crash_point_then_redo; what differs by format
(the settings, how the lake is verified, what a data object looks like) is
in FORMATS and check_data_objects().  JSONL runs at all five points and so
does Parquet, its codec alternating between zstd and snappy (both at
mid_upload), so both codecs are crashed and redone without running ten
Parquet cases.  JSONL runs again at the two points whose redo finds no
manifest on a bucket that answers 403 for it, as AWS does to a principal
without s3:ListBucket.  The cases share
one test bucket (a queue each), which saves starting s3rver for each."""
import loglines
import hashlib
import json
import os
import subprocess

import pytest

import lake
from bucket import TestBucket
from sinkenv import PREFIX, TENANT, kv_get, sink_env, wait_until

LANES = ["lane-%d" % i for i in range(8)]

FORMATS = {  # name: sink settings, verify options, honest rounds, timeouts
    "jsonl": dict(env={}, verify=dict(compression="zstd"), ext=".jsonl.zst",
                  rounds=3, timeout=60, redo_timeout=90),
    # JSONL on a bucket that answers 403 for the redo's missing manifest,
    # as one does to a principal without s3:ListBucket
    "jsonl-unlisted": dict(env={}, verify=dict(compression="zstd"),
                           ext=".jsonl.zst", rounds=2, timeout=60,
                           redo_timeout=90, unlisted=True),
    "parquet-zstd": dict(env={"QUEEN_S3_FORMAT": "parquet",
                              "QUEEN_S3_PARQUET_CODEC": "zstd"},
                         verify=dict(fmt="parquet", compression="zstd"),
                         ext=".parquet", rounds=2, timeout=90,
                         redo_timeout=120),
    "parquet-snappy": dict(env={"QUEEN_S3_FORMAT": "parquet",
                                "QUEEN_S3_PARQUET_CODEC": "snappy"},
                           verify=dict(fmt="parquet", compression="snappy"),
                           ext=".parquet", rounds=2, timeout=90,
                           redo_timeout=120),
}

EXPECT = {  # point: (intent k - committed k, data object, manifest)
    "after_intent": (1, False, False),
    "mid_upload": (1, True, False),
    "after_upload": (1, True, True),
    "before_commit": (1, True, True),
    "after_commit": (0, True, True),
}

# mid_upload is the one point whose redo PUTs an object again over the same
# key (the stranded one must come back byte-identical), so both codecs run
# it; the other points alternate.
CASES = [("jsonl", p) for p in EXPECT] + [
    ("parquet-zstd", "after_intent"), ("parquet-zstd", "mid_upload"),
    ("parquet-snappy", "mid_upload"), ("parquet-zstd", "after_upload"),
    ("parquet-snappy", "before_commit"), ("parquet-zstd", "after_commit"),
    ("jsonl-unlisted", "after_intent"), ("jsonl-unlisted", "mid_upload")]


class Pusher:
    """Pushes with transaction ids, keeping the acked records; a batch whose
    answer was lost is kept as the leftover, pushed again later (a record
    stored before the crash then answers `duplicate` with its offset)."""

    def __init__(self, queue):
        self.queue = queue
        self.acked = {}
        self.leftover = []
        self.n = 0

    def batch(self, per_lane):
        out = []
        for _ in range(per_lane):
            for lane in LANES:
                self.n += 1
                out.append({"queue": self.queue, "partition": lane,
                            "transactionId": "t-%06d" % self.n,
                            "payload": b'{"n":%d,"total":42.00}' % self.n})
        return out

    def push(self, node, items):
        try:
            r = node.request("POST", "/api/v1/push",
                             body=lake.push_body(items), timeout=60)
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


def snapshot(reader, queue):
    """sha256 of every object of queue (data and sidecars)."""
    keys = reader.list_keys(lake.queue_root(PREFIX, TENANT, queue) + "/") + \
        reader.list_keys(lake.sidecar_root(PREFIX, TENANT, queue) + "/")
    return {k: hashlib.sha256(reader.read(k)).hexdigest() for k in keys}


def kv_doc(node, queue, what):
    row = kv_get(node, "s3:default:%s:%s" % (lake.esc(queue), what))
    if not row["found"]:
        return None
    v = row["value"]
    return json.loads(v) if isinstance(v, str) else v


def check_data_objects(fmt, reader, keys):
    """What a whole data object of fmt looks like: its extension, and the
    container's frame (a zstd frame; Parquet's PAR1 at both ends)."""
    spec = FORMATS[fmt]
    for key in keys:
        assert key.endswith(spec["ext"]), key
        body = reader.read(key)
        if spec["ext"] == ".parquet":
            assert body[:4] == b"PAR1" and body[-4:] == b"PAR1", key
        else:
            assert body[:4] == b"\x28\xb5\x2f\xfd", key
            assert lake.decompress(body, "zstd", key).endswith(b"\n"), key


@pytest.fixture(scope="module")
def crash_bucket(tmp_path_factory):
    b = TestBucket(buckets=["lake"],
                   workdir=str(tmp_path_factory.mktemp("crash") / "bucket"))
    b.start()
    try:
        yield b
    finally:
        b.stop()


def crash(node, p, point):
    """Boot armed at point and push until the node aborts there."""
    node.extra_env["QUEEN_S3_CRASH_AT"] = point
    node.extra_env["QUEEN_TEST_MODE"] = "true"
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


@pytest.mark.parametrize("fmt,point", CASES)
def test_crash_point_then_redo(broker_factory, crash_bucket, fmt, point):
    spec = FORMATS[fmt]
    queue = "b.crash.%s.%s" % (fmt, point)
    reader = lake.bucket_reader(crash_bucket)
    verify = dict(align="none", **spec["verify"])
    p = Pusher(queue)
    node = broker_factory(env=sink_env(crash_bucket, QUEEN_S3_QUEUES=queue,
                                       **spec["env"]))
    for _ in range(spec["rounds"]):  # (1) an honest run
        assert p.push(node, p.batch(10))
        lake.wait_queue(reader, PREFIX, TENANT, queue, p.records(),
                        timeout=spec["timeout"], broker=node,
                        checkpoint_every=2, **verify)
    assert node.stop() == 0

    crash(node, p, point)  # (2) armed
    before = snapshot(reader, queue)

    node.extra_env["QUEEN_S3_EMBEDDED"] = "false"  # (3) the pointers
    del node.extra_env["QUEEN_S3_CRASH_AT"]
    node.start()
    intent = kv_doc(node, queue, "intent")
    committed = kv_doc(node, queue, "committed")
    assert node.stop() == 0
    ck = committed["k"]
    gap, has_data, has_manifest = EXPECT[point]
    assert intent["k"] - ck == gap
    k = intent["k"]
    data_root = lake.queue_root(PREFIX, TENANT, queue) + "/"
    data = [key for key in reader.list_keys(data_root)
            if ("/w-%010d-" % k) in key]
    assert bool(data) == has_data, data
    check_data_objects(fmt, reader, data)
    manifest = reader.read(lake.manifest_key(PREFIX, TENANT, queue, k))
    assert (manifest is not None) == has_manifest

    if spec.get("unlisted"):  # its manifest is missing: a GET answers 403
        crash_bucket.fault("403", count=-1, method="GET",
                           prefix=lake.manifest_key(PREFIX, TENANT, queue, k))
    node.extra_env["QUEEN_S3_EMBEDDED"] = "true"  # (4) the redo
    node.start()
    left, p.leftover = p.leftover, []
    if left:
        assert p.push(node, left)
    assert p.push(node, p.batch(10))
    # Stamps against the broker's log, and every due checkpoint, the one
    # due at the crashed window included (written once the restarted run
    # has read past that window's end).
    lake.wait_queue(reader, PREFIX, TENANT, queue, p.records(),
                    timeout=spec["redo_timeout"], settle=30, broker=node,
                    checkpoint_every=2, **verify)
    after = snapshot(reader, queue)
    for key, digest in before.items():
        assert after.get(key) == digest, "%s changed or vanished" % key
    log = node.stderr()
    assert loglines.records(
        log, msg="queue restored", queue=queue, committed_k=str(ck),
        redo="false" if point == "after_commit" else "true"), log
    from_manifest = "committing it from its manifest" in log
    assert from_manifest == (point in ("after_upload", "before_commit"))
    if spec.get("unlisted"):
        assert loglines.records(
            log, msg="cannot tell whether the redo's manifest is there*",
            queue=queue, k=str(k)), log
        crash_bucket.clear_faults()

    # The offline tool agrees (issue 16): the lake left by a crash at this
    # point and its redo verifies from the bucket alone and against the log.
    tool = lake_tool(crash_bucket, node, queue)
    assert tool.returncode == 0, (tool.stdout, tool.stderr)
    out = json.loads(tool.stdout)
    assert out["exact"] is True, out
    assert out["queues"][0]["records"] == len(p.records()), out


def lake_tool(test_bucket, node, queue):
    """`queen lake verify --json --broker` on one queue of the test bucket."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("QUEEN_")}
    env.update({"QUEEN_S3_ACCESS_KEY": test_bucket.access_key,
                "QUEEN_S3_SECRET_KEY": test_bucket.secret_key})
    binary = os.environ.get("QUEEN_BIN") or os.path.join(
        os.environ.get("QUEEN_ROOT", "."), "build", "queen")
    return subprocess.run(
        [binary, "lake", "verify", "--json", "--endpoint",
         test_bucket.endpoint, "--bucket", "lake", "--path-style",
         "--queue", queue, "--broker", "http://127.0.0.1:%d" % node.port],
        env=env, capture_output=True, text=True, timeout=300)
