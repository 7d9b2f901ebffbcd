"""Loss bookkeeping (issue 13 item 1): a loss no record follows is never
silent and never stuck in memory.

ls.lost has retention (1 s) and no hold. The bucket holds its next data PUT
so the sink is stuck in an upload; records pushed meanwhile are trimmed
before the sink reads them, and then nothing is pushed any more. Before,
the lost range waited in memory for a window with records that never came:
no manifest, no counter, no warning, and a restart forgot it. Now the sink
counts and logs it when it finds it, and a window of lost ranges alone (a
manifest with no object) carries it to the bucket within one max window
age. A restart afterwards does not report it again.

ls.clean runs beside it with no retention: queen_s3_records_lost_total is
there for it too, at 0."""
import loglines
import json

import lake
from retention_helpers import configure, log_starts
from sinkenv import PREFIX, TENANT, sink_row, wait_until

LOST, CLEAN = "ls.lost", "ls.clean"
VERIFY = dict(compression="zstd", align="none")


def push(node, queue, first, n=10):
    items = [{"queue": queue, "partition": "p-%d" % (i % 2),
              "transactionId": "%s-%d" % (queue, i),
              "payload": b'{"n":%d}' % i}
             for i in range(first, first + n)]
    r = node.request("POST", "/api/v1/push", body=lake.push_body(items))
    assert r.status == 201, r
    acked = lake.acked_from_push(items, r.json())
    assert len(acked) == n
    return acked


def ranges(acked):
    by = {}
    for p, o, _, _ in acked:
        by.setdefault(p, []).append(o)
    return [{"partition": p, "from": min(offs), "to": max(offs)}
            for p, offs in sorted(by.items())]


def lost_metric(node, queue):
    return node.metric("queen_s3_records_lost_total", 'queue="%s"' % queue)


def manifests(reader, queue):
    root = lake.sidecar_root(PREFIX, TENANT, queue) + "/windows/"
    return [json.loads(reader.read(k)) for k in sorted(reader.list_keys(root))]


def test_a_loss_no_record_follows_lands_in_a_window_of_its_own(sink_node,
                                                                bucket):
    node = sink_node({"QUEEN_S3_QUEUES": "%s,%s" % (LOST, CLEAN),
                      "QUEEN_S3_THREADS": "2",
                      "QUEEN_S3_LEASE_TTL_MS": "30000",
                      "QUEEN_S3_MAX_WINDOW_MS": "2000"})
    reader = lake.bucket_reader(bucket)
    acked = {q: push(node, q, 0) for q in (LOST, CLEAN)}
    for q in (LOST, CLEAN):
        lake.wait_queue(reader, PREFIX, TENANT, q, acked[q], timeout=60,
                        **VERIFY)
    wait_until(lambda: lost_metric(node, CLEAN) == 0, 10,
               "queen_s3_records_lost_total present at 0")
    assert lost_metric(node, LOST) == 0
    configure(node, LOST, retentionEnabled=True, retentionSeconds=1)

    bucket.fault("hold", count=1, method="PUT",
                 prefix=lake.queue_root(PREFIX, TENANT, LOST) + "/",
                 ms=100000)
    read = push(node, LOST, 10)
    wait_until(lambda: bucket.stats()["held"] == 1, 30,
               "the data PUT of %s to be held" % LOST)
    unread = push(node, LOST, 20)  # the driver is stuck in its upload
    end = {x["partition"]: x["to"] + 1 for x in ranges(unread)}
    wait_until(lambda: log_starts(node, LOST) == end, 30,
               "retention to trim %s past what the sink has not read" % LOST)
    assert bucket.release_held() == 1
    # Nothing is pushed any more: the loss must get out on its own.
    lost = ranges(unread)
    wait_until(lambda: lost_metric(node, LOST) == 10, 30,
               "the sink to count the trimmed records when it finds them")
    # Within one max window age (2 s) of the loss, give or take a pass.
    wait_until(lambda: any(m["lost"] for m in manifests(reader, LOST)), 10,
               "a manifest to carry the lost ranges")
    got = lake.wait_queue(reader, PREFIX, TENANT, LOST,
                          acked[LOST] + read + unread, timeout=30,
                          expect_lost=lost, **VERIFY)
    assert got["records"] == 20
    last = manifests(reader, LOST)[-1]
    assert last["objects"] == [] and last["records"] == 0, last
    assert sorted((x["partition"], x["from"], x["to"])
                  for x in last["lost"]) == sorted(
        (x["partition"], x["from"], x["to"]) for x in lost)
    wait_until(lambda: (sink_row(node, LOST) or {}).get("recordsLost") == 10,
               30, "the /status row to count the lost records")
    log = node.stderr()
    for x in lost:
        lines = loglines.records(
            log, msg="records went away before the sink read them",
            queue=LOST, partition=x["partition"], **{"from": str(x["from"]),
                                                     "to": str(x["to"])})
        assert len(lines) == 1, log
    assert lost_metric(node, CLEAN) == 0
    assert sink_row(node, CLEAN)["recordsLost"] == 0

    # A restart finds the loss committed and does not name it again.
    configure(node, LOST, retentionEnabled=True, retentionSeconds=3600)
    assert node.stop() == 0
    node.start()
    after = push(node, LOST, 30)
    got = lake.wait_queue(reader, PREFIX, TENANT, LOST,
                          acked[LOST] + read + unread + after, timeout=60,
                          expect_lost=lost, **VERIFY)
    assert got["records"] == 30
    assert "records went away" not in node.stderr()
    assert lost_metric(node, LOST) == 0
    assert node.stop() == 0
