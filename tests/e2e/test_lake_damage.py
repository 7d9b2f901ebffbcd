"""The verifier against a lake the sink really wrote: the lake passes with
every rule on (stamps against the broker's log, checkpoints due every 2
windows), and each damage made to a scratch copy of it is refused with its
own message.  The damages keep every other rule true (the object's bytes,
sha256, minTs and maxTs in the manifest are rewritten to match), so only
the rule under test can see them."""
import hashlib
import json
import os
import shutil

import pytest

import lake
from sinkenv import PREFIX, TENANT, wait_until

QUEUE = "orders"


class Scratch(lake.S3rverDirReader):
    """A copy of the bucket's files that the test may damage."""

    def __init__(self, bucket, dst):
        shutil.copytree(bucket.data_dir, dst)
        super().__init__(dst, "lake")

    def _meta(self, key):
        return self._s3proxy.object_path(self.data_dir, self.bucket, key,
                                         suffix=lake.METADATA_SUFFIX)

    def put(self, key, data):
        path = self._s3proxy.object_path(self.data_dir, self.bucket, key)
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path, "wb") as f:
            f.write(data)
        if not os.path.exists(self._meta(key)):  # as s3rver: written last
            with open(self._meta(key), "w", encoding="utf-8") as f:
                f.write("{}")

    def delete(self, key):
        os.unlink(self._s3proxy.object_path(self.data_dir, self.bucket, key))
        if os.path.exists(self._meta(key)):
            os.unlink(self._meta(key))


def rewrite_window(r, k, change):
    """Apply change(lines) -> lines to window k's object (merged JSONL,
    zstd) and make its manifest agree with the new bytes."""
    mkey = lake.manifest_key(PREFIX, TENANT, QUEUE, k)
    m = json.loads(r.read(mkey))
    obj = m["objects"][0]
    lines = lake.decompress(r.read(obj["key"]), "zstd", obj["key"])
    lines = change(lines[:-1].split(b"\n"))
    body = lake.compress(b"\n".join(lines) + b"\n", "zstd")
    r.put(obj["key"], body)
    stamps = [lake.parse_iso_us(lake.HEAD_RE.match(ln.decode()).group(4))
              for ln in lines]
    obj.update(bytes=len(body), sha256=hashlib.sha256(body).hexdigest())
    m.update(bytes=len(body), minTs=min(stamps), maxTs=max(stamps))
    r.put(mkey, lake.compact(m))
    return m


def restamp(line, ts_us):
    text = line.decode("utf-8")
    old = lake.HEAD_RE.match(text).group(4)
    return text.replace('"ts":"%s"' % old, '"ts":"%s"' % lake.iso_us(ts_us),
                        1).encode("utf-8")


def stamp_of(line):
    return lake.parse_iso_us(lake.HEAD_RE.match(line.decode()).group(4))


def shift_one(us):
    """Move one stamp by us, keeping ts non-decreasing with offset: later
    for the window's last line (its next offset is in the next window),
    earlier for its first (its previous offset is in the window before)."""
    def change(lines):
        i = len(lines) - 1 if us > 0 else 0
        lines[i] = restamp(lines[i], stamp_of(lines[i]) + us)
        return lines
    return change


def to_window_start(t_start):
    return lambda lines: [restamp(ln, t_start) for ln in lines]


@pytest.fixture(scope="module")
def real_lake(tmp_path_factory):
    """One broker and bucket for the module: a lake of three rounds."""
    from bucket import TestBucket
    from queenproc import Broker
    from sinkenv import sink_env
    tmp = tmp_path_factory.mktemp("damage")
    b = TestBucket(buckets=["lake"], workdir=str(tmp / "bucket")).start()
    node = Broker(str(tmp / "data"), env=sink_env(b))
    os.makedirs(node.data_dir)
    node.start()
    acked = []
    reader = lake.bucket_reader(b)
    try:
        for r in range(3):
            items = [{"queue": QUEUE, "partition": "p-%d" % (i % 3),
                      "payload": b'{"r":%d,"i":%d}' % (r, i)}
                     for i in range(12)]
            resp = node.request("POST", "/api/v1/push",
                                body=lake.push_body(items))
            assert resp.status == 201, resp
            acked += lake.acked_from_push(items, resp.json())
            wait_until(lambda: lake.count_records(reader, PREFIX, TENANT,
                                                  QUEUE) == len(acked), 60,
                       "round %d in the lake" % r, interval=0.1)
        got = lake.wait_queue(reader, PREFIX, TENANT, QUEUE, acked,
                              timeout=30, align="none", broker=node,
                              checkpoint_every=2)
        assert got["manifests"] >= 3 and got["checkpoints"]
        assert got["stamps_checked"] == len(acked)
        yield b, node, acked, got
    finally:
        node.stop()
        b.stop()


def verify(r, node, acked):
    return lake.verify_queue(r, PREFIX, TENANT, QUEUE, acked, align="none",
                             broker=node, checkpoint_every=2)


def test_the_undamaged_copy_passes(real_lake, tmp_path):
    b, node, acked, got = real_lake
    assert verify(Scratch(b, str(tmp_path / "c")), node, acked) == got


@pytest.mark.parametrize("name", ["plus_5us", "minus_1us", "window_start"])
def test_a_moved_stamp_is_refused_only_by_the_broker_log(real_lake, tmp_path,
                                                          name):
    b, node, acked, _ = real_lake
    r = Scratch(b, str(tmp_path / "c"))
    m = json.loads(r.read(lake.manifest_key(PREFIX, TENANT, QUEUE, 2)))
    change = {"plus_5us": shift_one(5), "minus_1us": shift_one(-1),
              "window_start": to_window_start(m["tStart"])}[name]
    rewrite_window(r, 2, change)
    with pytest.raises(lake.LakeError, match="has ts .*, the broker's log "
                       "says"):
        verify(r, node, acked)
    # Without the broker's log the damage passes: the hole rule (8) closes.
    lake.verify_queue(r, PREFIX, TENANT, QUEUE, acked, align="none",
                      checkpoint_every=2)


def test_a_missing_checkpoint_is_refused(real_lake, tmp_path):
    b, node, acked, got = real_lake
    r = Scratch(b, str(tmp_path / "c"))
    k = got["checkpoints"][0]
    r.delete(lake.checkpoint_key(PREFIX, TENANT, QUEUE, k))
    with pytest.raises(lake.LakeError, match="window %d has no checkpoint"
                       % k):
        verify(r, node, acked)


def test_checkpoint_positions_off_by_one_are_refused(real_lake, tmp_path):
    b, node, acked, got = real_lake
    r = Scratch(b, str(tmp_path / "c"))
    k = got["checkpoints"][0]
    key = lake.checkpoint_key(PREFIX, TENANT, QUEUE, k)
    doc = json.loads(lake.decompress(r.read(key), "zstd", key))
    assert doc["positions"], doc
    doc["positions"][0][1] += 1
    r.put(key, lake.compress(lake.compact(doc), "zstd"))
    with pytest.raises(lake.LakeError, match="positions do not match the "
                       "manifests"):
        verify(r, node, acked)
