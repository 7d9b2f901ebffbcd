"""The sink's boot (docs/design/protocol.md §1, §2 and docs/design/scenarios.md
§9): a bad setting stops the boot
with one FATAL line and exit 2; without QUEEN_S3_EMBEDDED there is no `s3`
block; a named queue that does not exist yet shows `missing` until its
first push, then ships; scenario e: names that need escaping and payloads
with raw line breaks."""
import loglines
import json

import lake
from sinkenv import PREFIX, TENANT, kv_get, sink_row, wait_until


def boot_fails(sink_node, env):
    node = sink_node(env, start=False)
    node.start(wait=False)
    rc = node.wait_exit(60)
    log = node.stderr()
    node._reap()
    return rc, log


def test_bad_threads_is_fatal(sink_node):
    rc, log = boot_fails(sink_node, {"QUEEN_S3_THREADS": "0"})
    assert rc == 2, log
    fatal = [r for r in loglines.parse(log) if "FATAL" in r["msg"]]
    assert len(fatal) == 1, log
    assert fatal[0]["level"] == "error" and fatal[0]["area"] == "boot"
    assert fatal[0]["msg"] == (
        "FATAL: QUEEN_S3_EMBEDDED=true: QUEEN_S3_THREADS=0 is "
        "not an integer in 1..=64"), fatal


def test_bad_grace_is_fatal_and_never_echoes_the_secret(sink_node):
    rc, log = boot_fails(sink_node, {"QUEEN_S3_SHUTDOWN_GRACE_MS": "99"})
    assert rc == 2, log
    assert ("QUEEN_S3_EMBEDDED=true: QUEEN_S3_SHUTDOWN_GRACE_MS=99 is not an "
            "integer in 100..=3600000") in log
    assert "queen-secret-key" not in log


def test_sink_off_has_no_s3_block(sink_node):
    node = sink_node({"QUEEN_S3_EMBEDDED": "false"})
    assert "s3" not in node.get("/status").json()
    assert "queen_s3_" not in node.get("/metrics/prometheus").body.decode()


def test_a_padded_embedded_setting_starts_the_sink(sink_node, bucket):
    """QUEEN_S3_EMBEDDED is trimmed like every sink value (a Kubernetes
    manifest's "true " or a Secret's trailing newline): the boot's checks
    took it as true while the host did not, and the node ran with no sink
    and no word of it."""
    node = sink_node({"QUEEN_S3_EMBEDDED": " true \n",
                      "QUEEN_S3_QUEUES": "padded"})
    assert node.get("/status").json().get("s3") is not None
    items = [{"queue": "padded", "partition": "p", "payload": b'{"a":1}'}]
    r = node.request("POST", "/api/v1/push", body=lake.push_body(items))
    assert r.status == 201, r
    lake.wait_queue(lake.bucket_reader(bucket), PREFIX, TENANT, "padded",
                    lake.acked_from_push(items, r.json()), timeout=60,
                    compression="zstd", align="none")


def test_a_mixed_case_embedded_setting_is_named_lowercased(sink_node):
    rc, log = boot_fails(sink_node, {"QUEEN_S3_EMBEDDED": " MayBe "})
    assert rc != 0, log
    assert "QUEEN_S3_EMBEDDED=maybe is not a boolean" in log, log


def test_missing_queue_ships_once_created(sink_node, bucket):
    node = sink_node({"QUEEN_S3_QUEUES": "later"})
    wait_until(lambda: (sink_row(node, "later") or {}).get("state") ==
               "missing", 60, "the row of `later` to say missing")
    # The row and the log line are written by different steps of one look:
    # wait for the line too rather than read the log at the row's moment.
    wait_until(lambda: "the queue does not exist; looking again until it "
               "does" in node.stderr(), 30, "the missing-queue log line")
    items = [{"queue": "later", "partition": "p", "payload": b'{"a":1}'}]
    r = node.request("POST", "/api/v1/push", body=lake.push_body(items))
    assert r.status == 201, r
    acked = lake.acked_from_push(items, r.json())
    lake.wait_queue(lake.bucket_reader(bucket), PREFIX, TENANT, "later",
                    acked, timeout=60, compression="zstd", align="none")


NAME = "e.ord/eu \u00e9t\u00e9:1%"
WS = [b'{"ok":1}', b'{"a":\n1}', b'[1,\r\n2]',
      b'{\n  "pretty": [\n    1,\n    2\n  ]\n}', b'{"after":"ws"}']


def test_names_and_whitespace(sink_node, bucket):
    node = sink_node({"QUEEN_S3_QUEUES": NAME + ",e.whitespace"})
    items = [{"queue": NAME, "partition": "lane %d/\u00fc" % i,
              "payload": b'{"i":%d}' % j}
             for i in range(8) for j in range(5)]
    items.append({"queue": NAME, "partition": "huge",
                  "payload": b'"' + b"h" * 1500000 + b'"'})
    ws = [{"queue": "e.whitespace", "partition": "w", "payload": p}
          for p in WS]
    acked = {}
    for batch in (items, ws):
        r = node.request("POST", "/api/v1/push", body=lake.push_body(batch))
        assert r.status == 201, r
        for it, rec in zip(batch, lake.acked_from_push(batch, r.json())):
            acked.setdefault(it["queue"], []).append(rec)
    reader = lake.bucket_reader(bucket)
    lake.wait_queue(reader, PREFIX, TENANT, NAME, acked[NAME], timeout=90,
                    compression="zstd", align="none")
    lake.wait_queue(reader, PREFIX, TENANT, "e.whitespace",
                    acked["e.whitespace"], timeout=60, compression="zstd",
                    align="none")
    row = kv_get(node, "s3:default:e.ord%2Feu%20%C3%A9t%C3%A9%3A1%25:lease")
    assert row["found"] is True
    value = row["value"]
    if isinstance(value, str):
        value = json.loads(value)
    assert value["instance"].startswith("node-1@")


# The presence key s3:{sink}:node={esc(instance)} must fit a KV key for the
# longest sink name: 413 escaped bytes (sink/config.h), so 404 plain bytes
# plus "%2Fnode-1".
LONG_SINK = "s" * 64


def test_the_longest_instance_writes_its_presence_row(sink_node):
    node = sink_node({"QUEEN_S3_INSTANCE": "a" * 404,
                      "QUEEN_S3_SINK": LONG_SINK})
    key = "s3:%s:node=%s%%2Fnode-1" % (LONG_SINK, "a" * 404)
    try:
        wait_until(lambda: kv_get(node, key)["found"], 60,
                   "the presence row of the longest instance name")
    except AssertionError as e:
        raise AssertionError("%s\n%s" % (e, node.stderr()[-4000:]))
    # The row was never refused. A loaded machine may start the sink before
    # the raft leader is ready: that write is retried ("leader not ready")
    # and is no refusal of the key.
    refused = [r for r in loglines.parse(node.stderr())
               if "cannot write this node's presence row" in r["msg"] and
               r.get("error") != "leader not ready"]
    assert refused == [], refused


def test_an_instance_one_byte_too_long_is_fatal(sink_node):
    rc, log = boot_fails(sink_node, {"QUEEN_S3_INSTANCE": "a" * 405,
                                     "QUEEN_S3_SINK": LONG_SINK})
    assert rc == 2, log
    fatal = [r for r in loglines.parse(log) if "FATAL" in r["msg"]]
    assert len(fatal) == 1, log
    assert fatal[0]["level"] == "error" and fatal[0]["msg"] == (
        "FATAL: QUEEN_S3_EMBEDDED=true: QUEEN_S3_INSTANCE=" +
        "a" * 405 + " is too long: with /node-1 appended it is 414 bytes "
        "once escaped in its presence key s3:{sink}:node={instance}, and at "
        "most 413 fit beside a 64-character sink name in a KV key. Use at "
        "most 404 characters of [A-Za-z0-9._-] (any other byte counts "
        "three)"), fatal
    assert "queen-secret-key" not in log
