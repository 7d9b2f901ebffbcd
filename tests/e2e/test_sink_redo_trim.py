"""A crash inside a window's commit sequence, then a trim of its records
while the node is down (issue 13: a loss is never silent, a redo leaves
no object behind that no manifest names).

Both tests commit window 1, then leave window 2 half done at a crash
point, and trim every record of it (retention of 1 s, no hold) while the
sink is off. The node then comes back with the sink:

- after_upload: window 2's manifest (objects [], its lost ranges) is in
  the bucket, so the new process commits it from the manifest without
  reading anything. The process that found the loss counted it and died;
  the one that commits must count it too, in recordsLost and
  queen_s3_records_lost_total.
- mid_upload (merged layout): window 2's data object landed, its manifest
  did not. The redo finds no record left. It must replace that object
  with one of no record under the same key, named by its manifest, not
  leave it where no manifest names it (readers of the glob would read
  records the manifest calls lost, and verify would name an orphan)."""
import json

import lake
from retention_helpers import configure, log_starts
from sinkenv import PREFIX, TENANT, sink_env, sink_row, wait_until
from test_sink_crash import lake_tool
from test_sink_loss import push, ranges

VERIFY = dict(compression="zstd", align="none")


def manifest(reader, queue, k):
    body = reader.read(lake.manifest_key(PREFIX, TENANT, queue, k))
    return None if body is None else json.loads(body)


def window_one(broker_factory, bucket, queue):
    node = broker_factory(env=sink_env(bucket, QUEEN_S3_QUEUES=queue))
    reader = lake.bucket_reader(bucket)
    acked = push(node, queue, 0, 4)
    lake.wait_queue(reader, PREFIX, TENANT, queue, acked, timeout=60,
                    **VERIFY)
    wait_until(lambda: (sink_row(node, queue) or {}).get("k") == 1, 30,
               "window 1 to show in the status row")
    assert node.stop() == 0
    return node, reader, acked


def trim_all(node, queue, acked, sink):
    """With the sink as given, trim the queue up to its last record."""
    node.extra_env["QUEEN_S3_EMBEDDED"] = sink
    node.start()
    end = {}
    for p, o, _, _ in acked:
        end[p] = max(end.get(p, 0), o + 1)
    configure(node, queue, retentionEnabled=True, retentionSeconds=1)
    wait_until(lambda: log_starts(node, queue) == end, 60,
               "retention to trim %s to %s" % (queue, end))
    configure(node, queue, retentionEnabled=False)
    assert node.stop() == 0


def until_abort(node, point, pushing=None):
    node.extra_env.update({"QUEEN_S3_EMBEDDED": "true",
                           "QUEEN_S3_CRASH_AT": point,
                           "QUEEN_TEST_MODE": "true"})
    node.start()

    def died():
        if node.proc.poll() is not None:
            return True
        if pushing is not None:
            pushing()
        return False
    wait_until(died, 60, "the crash point %s to fire" % point, interval=0.3)
    assert node.proc.returncode == -6, node.stderr()
    node._reap()
    del node.extra_env["QUEEN_S3_CRASH_AT"]


def test_a_window_committed_from_its_manifest_counts_its_loss(
        broker_factory, bucket):
    queue = "rt.manifest"
    node, reader, acked = window_one(broker_factory, bucket, queue)
    node.extra_env["QUEEN_S3_EMBEDDED"] = "false"
    node.start()
    gone = push(node, queue, 4, 4)
    assert node.stop() == 0
    trim_all(node, queue, acked + gone, "false")

    until_abort(node, "after_upload")  # found, counted, died
    m = manifest(reader, queue, 2)
    assert m is not None and m["objects"] == [], m
    node.extra_env["QUEEN_S3_EMBEDDED"] = "true"
    node.start()
    wait_until(lambda: (sink_row(node, queue) or {}).get("k") == 2, 60,
               "window 2 to commit from its manifest")
    assert "committing it from its manifest" in node.stderr()
    assert "records went away" not in node.stderr()  # not read again
    assert sink_row(node, queue)["recordsLost"] == 4
    assert node.metric("queen_s3_records_lost_total",
                       'queue="%s"' % queue) == 4
    lake.wait_queue(reader, PREFIX, TENANT, queue, acked + gone, timeout=30,
                    expect_lost=ranges(gone), **VERIFY)
    assert node.stop() == 0


def test_a_redo_with_every_record_trimmed_leaves_no_orphan(broker_factory,
                                                           bucket):
    queue = "rt.orphan"
    node, reader, acked = window_one(broker_factory, bucket, queue)
    gone = []
    until_abort(node, "mid_upload",
                lambda: gone.extend(push(node, queue, 4 + len(gone), 2)))
    data_root = lake.queue_root(PREFIX, TENANT, queue) + "/"
    first = [k for k in reader.list_keys(data_root) if "/w-0000000002-" in k]
    assert len(first) == 1, first  # the first attempt's object landed
    assert manifest(reader, queue, 2) is None
    got = lake.decompress(reader.read(first[0]), "zstd", first[0])
    assert got.count(b"\n") > 0
    trim_all(node, queue, acked + gone, "false")

    node.extra_env["QUEEN_S3_EMBEDDED"] = "true"
    node.start()
    wait_until(lambda: (sink_row(node, queue) or {}).get("k") == 2, 60,
               "the redo of window 2 to commit")
    m = manifest(reader, queue, 2)
    assert m["records"] == 0, m
    assert [o["key"] for o in m["objects"]] == first, m
    assert m["objects"][0]["records"] == 0, m
    assert lake.decompress(reader.read(first[0]), "zstd", first[0]) == b""
    keys = [k for k in reader.list_keys(data_root) if "/w-0000000002-" in k]
    assert keys == first, keys
    lake.wait_queue(reader, PREFIX, TENANT, queue, acked + gone, timeout=30,
                    expect_lost=ranges(gone), **VERIFY)
    tool = lake_tool(bucket, node, queue)
    assert tool.returncode == 0, (tool.stdout, tool.stderr)
    assert json.loads(tool.stdout)["exact"] is True
    assert node.stop() == 0
