"""Scenario a of docs/design/scenarios.md §9 on one node, scaled down: three
queues with
300/60/20 partitions (names with non-ASCII, quote, backslash, colon,
percent, emoji, CJK), several rounds of pushes while the sink runs, every
fifth item without a transactionId, payloads that a JSON re-encoder would
change.  Each queue's lake is verified exactly once and byte-exact, and
/status, /metrics/prometheus and the KV commit pointer agree with it.

Then QUEEN_S3_START=latest: what was pushed before the sink first saw the
queue stays out of the lake; what was pushed after is in it exactly once.

Last, retention (1 s) overrunning a sink that is off: without a hold the
trimmed offsets travel as `lost` in the next window that closes, in
queen_s3_records_lost_total and in a warning; with retentionSinkHold
"default" the same pattern loses nothing.  test_sink_retention.py has the
same overrun with the sink running and lagging behind a stalled bucket."""
import json

import lake
from retention_helpers import configure, log_starts
from sinkenv import PREFIX, TENANT, kv_get, sink_row, wait_until

QUEUES = {"a.orders": 300, "a.events_v2": 60, "a-metrics": 20}
ODD_NAMES = ["\u00fcn\u00ef c\u00f8d\u00e9/1", "p:2 100%", "\U0001f986-3",
             'q"uote\\4', "\u65e5\u672c-5", "tab\t\x7f-6", "\x01ctl\n-7",
             "nul\x00-8"]
PAYLOADS = [b'{"n":123456789012345678901234567890,"m":-98765432109876543210}',
            b'{"big":1E+400,"neg":-0,"f":1.50}',
            b'"esc \\" \\\\ \\/ \\b\\f\\n\\r\\t \\u0000 \\ud83e\\udd86"',
            b'"raw \xe2\x80\xa8 \xc2\x85 \x7f caf\xc3\xa9"',
            b'[1,[2,[3,{"a":[]}]],{},true,false,null]',
            b'{"spaced" : [ 1 , 2 ] }',
            b'0']


def partitions(queue):
    n = QUEUES[queue]
    names = ODD_NAMES[:]
    names += ["%s-p%03d" % (queue, i) for i in range(n - len(names))]
    return names


def push(node, items):
    r = node.request("POST", "/api/v1/push", body=lake.push_body(items),
                     timeout=60)
    assert r.status == 201, r
    return lake.acked_from_push(items, r.json())


def round_items(queue, round_no):
    out = []
    for i, p in enumerate(partitions(queue)):
        it = {"queue": queue, "partition": p,
              "payload": PAYLOADS[(i + round_no) % len(PAYLOADS)]}
        if i % 5 != 0:
            it["transactionId"] = "%s-r%d-i%d" % (queue, round_no, i)
        out.append(it)
    return out


def committed_pointer(node, queue):
    ptr = kv_get(node, "s3:default:%s:committed" % queue)
    assert ptr["found"] is True
    value = ptr["value"]
    return json.loads(value) if isinstance(value, str) else value


def test_three_queues_many_partitions_exactly_once(sink_node, bucket):
    node = sink_node({"QUEEN_S3_QUEUES": ",".join(QUEUES)})
    acked = {q: [] for q in QUEUES}
    for r in range(4):
        for q in QUEUES:
            items = round_items(q, r)
            for i in range(0, len(items), 100):
                acked[q] += push(node, items[i:i + 100])
        if r % 2 == 0:  # let windows commit between rounds
            wait_until(lambda: all(lake.count_records(
                lake.bucket_reader(bucket), PREFIX, TENANT, q) ==
                len(acked[q]) for q in QUEUES), 90,
                "round %d to reach the lake" % r)
    reader = lake.bucket_reader(bucket)
    for q, n in QUEUES.items():
        assert len(acked[q]) == 4 * n
        got = lake.wait_queue(reader, PREFIX, TENANT, q, acked[q],
                              timeout=90, compression="zstd", align="none",
                              broker=node, checkpoint_every=2)
        assert got["records"] == 4 * n
        assert got["manifests"] >= 2
        assert got["partitions"] == {p: 4 for p in partitions(q)}

        row = wait_until(lambda q=q: (lambda x: x if x and x["records"] ==
                                      len(acked[q]) else None)(
                                          sink_row(node, q)),
                         60, "the /status row of %s to count it all" % q)
        assert row["recordsLost"] == 0
        assert row["windowsCommitted"] == got["manifests"]
        assert node.metric("queen_s3_records_written_total",
                           'queue="%s"' % q) == len(acked[q])
        ptr = committed_pointer(node, q)
        assert ptr["k"] == got["manifests"]
        assert lake.parse_iso_us(ptr["tEnd"]) == got["tEnd"]
        last = json.loads(reader.read(lake.manifest_key(
            PREFIX, TENANT, q, got["manifests"])))
        assert lake.parse_iso_us(ptr["tEnd"]) == last["tEnd"]


def lake_records(reader, queue):
    """(partition, offset, transactionId, payload) of every line of every
    committed window of queue, read straight from the objects."""
    root = lake.sidecar_root(PREFIX, TENANT, queue) + "/windows/"
    out = []
    for key in reader.list_keys(root):
        m = json.loads(reader.read(key))
        for obj in m["objects"]:
            data = lake.decompress(reader.read(obj["key"]), "zstd",
                                   obj["key"])
            for line in data.split(b"\n")[:-1]:
                h = lake.HEAD_RE.match(line.decode("utf-8"))
                assert h, line
                head = h.group(0).encode("utf-8")
                out.append((json.loads(h.group(1)), int(h.group(2)),
                            json.loads(h.group(3)), line[len(head):-1]))
    return out


def test_start_latest_skips_what_came_before(sink_node, bucket):
    q = "a.late"
    node = sink_node({"QUEEN_S3_EMBEDDED": "false", "QUEEN_S3_QUEUES": q,
                      "QUEEN_S3_START": "latest"})
    before = []
    for r in range(2):
        its = [{"queue": q, "partition": p, "payload": PAYLOADS[i % 7],
                "transactionId": "before-%d-%d" % (r, i)}
               for i, p in enumerate(ODD_NAMES + ["plain"])]
        before += push(node, its)
    node.stop()
    node.extra_env["QUEEN_S3_EMBEDDED"] = "true"
    node.start()
    wait_until(lambda: (lambda x: x and x["state"] == "filling" and
                        x["safeTime"])(sink_row(node, q)), 60,
               "the sink to see %s" % q)
    after = []
    for r in range(2):
        its = [{"queue": q, "partition": p, "payload": PAYLOADS[i % 7],
                "transactionId": "after-%d-%d" % (r, i)}
               for i, p in enumerate(ODD_NAMES + ["plain"])]
        after += push(node, its)
    reader = lake.bucket_reader(bucket)
    wait_until(lambda: lake.count_records(reader, PREFIX, TENANT, q) >=
               len(after), 60, "the records pushed after to reach the lake")
    got = lake_records(reader, q)
    assert sorted(got) == sorted(after)
    assert not set((p, o) for p, o, _, _ in got) & \
        set((p, o) for p, o, _, _ in before)
    row = wait_until(lambda: (lambda x: x if x and x["records"] ==
                              len(after) else None)(sink_row(node, q)),
                     60, "the /status row to count the records after")
    assert row["recordsLost"] == 0


def batch(queue, first, n=10):
    return [{"queue": queue, "partition": "p-%d" % (i % 2),
             "transactionId": "%s-%d" % (queue, i),
             "payload": PAYLOADS[i % 7]} for i in range(first, first + n)]


def test_retention_overrun_is_lost_unless_held(sink_node, bucket):
    qs = ("r.lost", "r.held")
    node = sink_node({"QUEEN_S3_QUEUES": ",".join(qs),
                      "QUEEN_S3_CHECKPOINT_EVERY": "1"})
    reader = lake.bucket_reader(bucket)
    acked = {q: push(node, batch(q, 0)) for q in qs}
    for q in qs:
        lake.wait_queue(reader, PREFIX, TENANT, q, acked[q], timeout=60,
                        compression="zstd", align="none", broker=node,
                        checkpoint_every=1)
    node.stop()

    # The sink is off while retention (1 s) runs: r.lost has no hold.
    node.extra_env["QUEEN_S3_EMBEDDED"] = "false"
    node.start()
    configure(node, "r.lost", retentionEnabled=True, retentionSeconds=1)
    configure(node, "r.held", retentionEnabled=True, retentionSeconds=1,
              retentionSinkHold="default", retentionSinkHoldMaxSeconds=60)
    later = {q: push(node, batch(q, 10)) for q in qs}
    wait_until(lambda: log_starts(node, "r.lost") == {"p-0": 10, "p-1": 10},
               60, "retention to trim r.lost")
    # The hold keeps what the sink has not committed (offsets 5..9).
    assert all(v <= 5 for v in log_starts(node, "r.held").values())
    # Retention off again, so that the records the lost ranges travel with
    # (an empty window is never emitted) cannot be trimmed in turn.
    configure(node, "r.lost", retentionEnabled=False)
    node.stop()

    node.extra_env["QUEEN_S3_EMBEDDED"] = "true"
    node.start()
    lake.wait_queue(reader, PREFIX, TENANT, "r.held",
                    acked["r.held"] + later["r.held"], timeout=60,
                    compression="zstd", align="none", broker=node,
                    checkpoint_every=1)
    last = push(node, batch("r.lost", 20))
    wait_until(lambda: node.metric("queen_s3_records_lost_total",
                                   'queue="r.lost"') == 10, 60,
               "the sink to count r.lost's trimmed records as lost")
    lost = [{"partition": "p-0", "from": 5, "to": 9},
            {"partition": "p-1", "from": 5, "to": 9}]
    lake.wait_queue(reader, PREFIX, TENANT, "r.lost",
                    acked["r.lost"] + later["r.lost"] + last, timeout=60,
                    compression="zstd", align="none", expect_lost=lost,
                    broker=node, checkpoint_every=1)
    assert node.metric("queen_s3_records_lost_total",
                       'queue="r.held"') == 0
    assert sink_row(node, "r.held")["recordsLost"] == 0
    assert sink_row(node, "r.lost")["recordsLost"] == 10
    assert "records went away before the sink read them" in node.stderr()
