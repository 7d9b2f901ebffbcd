"""Retention shorter than the lag of a running sink (issue 5,
docs/design/http-api.md §6 and docs/design/window.md §8).  The sink runs all
along; the bucket makes it lag: a `hold`
fault keeps its data PUTs (one per queue) until the test releases them, and
a queue driver reads nothing while its upload is in flight
(docs/design/window.md §11:
the tick's actions run in order, fetches after the upload).

Two queues on one node, pushed the same records at the same moments:
  - rs.lost has retention (1 s) and no hold: what was pushed while the sink
    was stuck is trimmed before the sink reads it, and must show as a `lost`
    range in the next manifest, in queen_s3_records_lost_total and in the
    warning log, while every record the sink did read (including the ones
    retention trimmed after the sink had them) lands exactly once;
  - rs.held has the same retention with retentionSinkHold "default":
    retention keeps what the sink has not committed, and nothing is lost.

Retention is judged against the same pass for both queues, so rs.lost's
trim is the real condition that proves rs.held would have lost records
without its hold."""
import loglines
import lake
from retention_helpers import configure, log_starts
from sinkenv import PREFIX, TENANT, sink_row, wait_until

PAYLOADS = [b'{"n":1,"total":42.00}', b'"caf\xc3\xa9"', b'[1,[2,{}]]',
            b'{"big":1E+400}', b'0']
LOST, HELD = "rs.lost", "rs.held"


def push(node, queue, first, n=10, partition=None):
    """Records first.. of queue: to p-0 and p-1 in turn, or all to
    partition."""
    items = [{"queue": queue, "partition": partition or "p-%d" % (i % 2),
              "transactionId": "%s-%s%d" % (
                  queue, partition + "-" if partition else "", i),
              "payload": PAYLOADS[i % len(PAYLOADS)]}
             for i in range(first, first + n)]
    r = node.request("POST", "/api/v1/push", body=lake.push_body(items))
    assert r.status == 201, r
    acked = lake.acked_from_push(items, r.json())
    assert len(acked) == n
    return acked


def ranges(acked):
    """The acked records of one push as inclusive {partition, from, to}."""
    by = {}
    for p, o, _, _ in acked:
        by.setdefault(p, []).append(o)
    out = []
    for p, offs in sorted(by.items()):
        assert sorted(offs) == list(range(min(offs), max(offs) + 1))
        out.append({"partition": p, "from": min(offs), "to": max(offs)})
    return out


def test_retention_overruns_a_lagging_sink_unless_held(sink_node, bucket):
    node = sink_node({"QUEEN_S3_QUEUES": "%s,%s" % (LOST, HELD),
                      "QUEEN_S3_THREADS": "2",
                      # a PUT held longer than a short TTL is another story
                      # (test_sink_faults.py); here the lease must not matter
                      "QUEEN_S3_LEASE_TTL_MS": "30000",
                      "QUEEN_S3_CHECKPOINT_EVERY": "1"})
    reader = lake.bucket_reader(bucket)
    verify = dict(compression="zstd", align="none")
    acked = {q: push(node, q, 0) for q in (LOST, HELD)}
    for q in (LOST, HELD):  # the sink runs and has caught up
        lake.wait_queue(reader, PREFIX, TENANT, q, acked[q], timeout=60,
                        **verify)
    configure(node, LOST, retentionEnabled=True, retentionSeconds=1)
    configure(node, HELD, retentionEnabled=True, retentionSeconds=1,
              retentionSinkHold="default", retentionSinkHoldMaxSeconds=60)

    # The bucket stalls: each queue's next data object is held.
    bucket.fault("hold", count=2, method="PUT", prefix=PREFIX + "/tenant=",
                 ms=100000)
    read = {q: push(node, q, 10) for q in (HELD, LOST)}
    wait_until(lambda: bucket.stats()["held"] == 2, 60,
               "a data PUT of each queue to be held")
    # Pushed while both drivers are stuck in their upload: unread.
    unread = {q: push(node, q, 20) for q in (HELD, LOST)}
    end = {p["partition"]: p["to"] + 1 for p in ranges(unread[LOST])}
    wait_until(lambda: log_starts(node, LOST) == end, 60,
               "retention to trim %s past what the sink has not read" % LOST)
    assert bucket.stats()["held"] == 2, "the sink was not stuck all along"
    # The hold keeps everything the sink has not committed (offsets 5..14
    # of each partition), and the pass that trimmed rs.lost saw it.
    assert log_starts(node, HELD) == {"p-0": 0, "p-1": 0}
    # Longer retention, so that the records the lost ranges travel with (no
    # empty window is ever emitted) are not trimmed in turn.
    configure(node, LOST, retentionEnabled=True, retentionSeconds=3600)
    assert bucket.release_held() == 2

    after = {q: push(node, q, 30) for q in (LOST, HELD)}
    lost = ranges(unread[LOST])
    wait_until(lambda: node.metric("queen_s3_records_lost_total",
                                   'queue="%s"' % LOST) == 10, 60,
               "the sink to count %s's trimmed records as lost" % LOST)
    got = lake.wait_queue(reader, PREFIX, TENANT, LOST,
                          acked[LOST] + read[LOST] + unread[LOST] +
                          after[LOST], timeout=60, expect_lost=lost, **verify)
    assert got["records"] == 30 and sorted(got["lost"]) == sorted(
        (x["partition"], x["from"], x["to"]) for x in lost)
    got = lake.wait_queue(reader, PREFIX, TENANT, HELD,
                          acked[HELD] + read[HELD] + unread[HELD] +
                          after[HELD], timeout=60, **verify)
    assert got["records"] == 40 and got["lost"] == []

    assert node.metric("queen_s3_records_lost_total",
                       'queue="%s"' % HELD) == 0
    wait_until(lambda: (sink_row(node, LOST) or {}).get("recordsLost") == 10,
               60, "the /status row of %s to count the lost records" % LOST)
    assert sink_row(node, HELD)["recordsLost"] == 0
    log = node.stderr()
    for x in lost:
        lines = loglines.records(
            log, msg="records went away before the sink read them",
            queue=LOST, partition=x["partition"], **{"from": str(x["from"]),
                                                     "to": str(x["to"])})
        assert len(lines) == 1, log
    assert loglines.records(
        log, msg="records went away before the sink read them",
        queue=HELD) == [], log
    assert "queue fenced" not in log
    assert node.stop() == 0


def test_a_trim_after_a_crash_in_the_first_window_is_reported(sink_node,
                                                              bucket):
    """Window 1 is closed (its intent is in the KV) and cannot go up: the
    bucket is down. The node dies, and retention trims what window 1 held
    while it is down. No commit pointer or checkpoint names a position,
    and the merged layout's intent keeps no offsets: the restart must still
    report those records lost, from offset 0, not start at the log start
    as a first run would."""
    queue = "rt.first"
    node = sink_node({"QUEEN_S3_QUEUES": queue})
    configure(node, queue, retentionEnabled=True, retentionSeconds=1)
    wait_until(lambda: (sink_row(node, queue) or {}).get("state") ==
               "filling", 60, "the sink to run %s" % queue)
    bucket.fault("down503", count=-1)
    acked = push(node, queue, 0)
    wait_until(lambda: sink_row(node, queue)["state"] == "upload", 60,
               "window 1 to close and fail to go up")
    end = {p["partition"]: p["to"] + 1 for p in ranges(acked)}
    wait_until(lambda: log_starts(node, queue) == end, 60,
               "retention to trim what window 1 holds")
    assert sink_row(node, queue)["k"] == 0
    node.kill9()
    bucket.clear_faults()
    node.start()

    lost = ranges(acked)
    wait_until(lambda: node.metric("queen_s3_records_lost_total",
                                   'queue="%s"' % queue) == 10, 60,
               "the restart to count what the trim took as lost")
    reader = lake.bucket_reader(bucket)
    got = lake.wait_queue(reader, PREFIX, TENANT, queue, acked, timeout=60,
                          expect_lost=lost, compression="zstd", align="none")
    assert got["records"] == 0 and sorted(got["lost"]) == sorted(
        (x["partition"], x["from"], x["to"]) for x in lost), got
    assert loglines.records(node.stderr(), msg="queue restored", queue=queue,
                            redo="true"), node.stderr()
    assert node.stop() == 0


def test_a_partition_created_and_trimmed_while_the_sink_is_stuck_is_lost(
        sink_node, bucket):
    """The sink runs (its first full sweep is long done) when the bucket
    goes down: the window going up cannot commit, the next one closes
    behind it, and the queue discovers nothing until they are up. A new
    partition is pushed and trimmed meanwhile. When the bucket is back the
    sink first sees that partition at a log start past its records: they
    were the sink's (the partition is younger than the run), so they are
    a lost range, not a partition to begin at its log start."""
    queue = "rt.young"
    node = sink_node({"QUEEN_S3_QUEUES": queue})
    configure(node, queue, retentionEnabled=True, retentionSeconds=1)
    wait_until(lambda: (sink_row(node, queue) or {}).get("state") ==
               "filling", 60, "the sink to run %s" % queue)
    old = push(node, queue, 0, partition="old")
    wait_until(lambda: sink_row(node, queue)["windowsCommitted"] >= 1, 60,
               "a first window")
    bucket.fault("down503", count=-1)
    # One window fails to go up, the next closes behind it: the queue stops
    # discovering until they are committed.
    old += push(node, queue, 10, partition="old")
    wait_until(lambda: (old.extend(push(node, queue, len(old), n=1,
                                        partition="old")),
                        sink_row(node, queue)["state"] != "filling")[1],
               60, "two windows closed behind the bucket", interval=0.5)
    young = push(node, queue, 0, partition="young")
    wait_until(lambda: log_starts(node, queue).get("young") == 10, 60,
               "retention to trim the young partition")
    assert sink_row(node, queue)["state"] != "filling", \
        "the queue went back to filling: it may have read the partition"
    bucket.clear_faults()

    wait_until(lambda: (node.metric("queen_s3_records_lost_total",
                                    'queue="%s"' % queue) or 0) >= 10, 90,
               "the sink to count the young partition as lost")
    reader = lake.bucket_reader(bucket)

    def whole():
        # Records of "old" the stuck queue had not read may be trimmed and
        # lost too: every acked one is in the lake or in a lost range.
        try:
            seen, got = lake.records_and_lost(reader, PREFIX, TENANT, queue,
                                              "zstd")
        except lake.LakeError:
            return None
        every = all((p, o) in seen or lake._in_lost(got, p, o)
                    for p, o, _, _ in old + young)
        return (seen, got) if every else None
    seen, got = wait_until(whole, 90, "every acked record in the lake or lost",
                           interval=0.5)
    assert [x for x in got if x[0] == "young"] == [("young", 0, 9)], got
    assert not [k for k in seen if k[0] == "young"], seen
    assert node.stop() == 0

