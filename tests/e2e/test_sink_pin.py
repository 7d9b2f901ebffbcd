"""Issue 13 item 3 with real processes: a redo writes the keys its intent
pins, whatever the settings became since.  The node aborts at mid_upload
(QUEEN_S3_CRASH_AT) with QUEEN_S3_ALIGN=hour, so the crashed window's data
object is already under dt=.../hour=HH/; it restarts with
QUEEN_S3_ALIGN=day.  The redo must put that window under the same
hour-aligned key again (never a second copy under dt=.../), log what
differs, and the windows after it take the day layout.  The lake is then
verified whole: every acknowledged record exactly once, byte-exact against
the broker's log, and no object that no manifest names."""
import pytest

import lake
from bucket import TestBucket
from sinkenv import PREFIX, TENANT, sink_env, wait_until
from test_sink_crash import Pusher, crash, kv_doc


@pytest.fixture
def pin_bucket(tmp_path):
    b = TestBucket(buckets=["lake"], workdir=str(tmp_path / "bucket"))
    b.start()
    try:
        yield b
    finally:
        b.stop()


def window_keys(reader, queue, k):
    root = lake.queue_root(PREFIX, TENANT, queue) + "/"
    return [key for key in reader.list_keys(root) if ("/w-%010d-" % k) in key]


def test_a_redo_keeps_the_align_of_its_intent(broker_factory, pin_bucket):
    queue = "pin.align"
    reader = lake.bucket_reader(pin_bucket)
    p = Pusher(queue)
    node = broker_factory(env=sink_env(pin_bucket, QUEEN_S3_QUEUES=queue,
                                       QUEEN_S3_ALIGN="hour"))
    assert p.push(node, p.batch(10))  # an honest window under hour=
    lake.wait_queue(reader, PREFIX, TENANT, queue, p.records(), timeout=60,
                    broker=node, checkpoint_every=2, align="hour")
    assert node.stop() == 0

    crash(node, p, "mid_upload")
    node.extra_env["QUEEN_S3_EMBEDDED"] = "false"  # read the pointers
    del node.extra_env["QUEEN_S3_CRASH_AT"]
    node.start()
    k = kv_doc(node, queue, "intent")["k"]
    assert kv_doc(node, queue, "committed")["k"] == k - 1
    assert node.stop() == 0
    first = window_keys(reader, queue, k)
    assert first and all("/hour=" in key for key in first), first

    node.extra_env["QUEEN_S3_EMBEDDED"] = "true"  # the redo, now day
    node.extra_env["QUEEN_S3_ALIGN"] = "day"
    node.start()
    left, p.leftover = p.leftover, []
    if left:
        assert p.push(node, left)
    assert p.push(node, p.batch(10))

    def align_of(w):
        return "hour" if w <= k else "day"

    summary = lake.wait_queue(reader, PREFIX, TENANT, queue, p.records(),
                              timeout=90, settle=30, broker=node,
                              checkpoint_every=2, align=align_of)
    assert summary["manifests"] > k
    # the crashed window under its first attempt's keys only
    assert sorted(window_keys(reader, queue, k)) == sorted(first)
    # the windows after it under the day layout
    for w in range(k + 1, summary["manifests"] + 1):
        keys = window_keys(reader, queue, w)
        assert all("/hour=" not in key for key in keys), keys
    wait_until(lambda: "align=hour (now day)" in node.stderr(), 10,
               "the redo to name the align it keeps")
    assert "the redo's intent names other settings" in node.stderr()
