"""`queen lake verify` and `queen lake restore` (docs/lake.md) against real
processes: an s3rver bucket behind the signing proxy and real brokers.

- The nine record damages of the verifier's self-test, made to a lake built
  from a real broker's log: the tool and tests/e2e/lake.py both refuse each,
  naming the same window and key (or the same record).
- Lakes the sink wrote, in every format and codec, both layouts and two
  alignments: the tool finds them exact, from the bucket and with --broker.
- --broker: a record deleted from an object (manifest rewritten to match)
  is "in the log, not in the lake"; one added is "in the lake, not in the
  log".
- restore into a fresh broker twice, then the lake that broker's sink
  writes, verified with --broker: exact; a restore killed with kill -9
  halfway and run again: every record once."""
import copy
import json
import os
import signal
import subprocess
import time

import pytest

import lake
import test_lake_selftest as st
import tlsfront
from sinkenv import PREFIX, TENANT, sink_env, sink_row, wait_until

CREDS = {"QUEEN_S3_ACCESS_KEY": "queen",
         "QUEEN_S3_SECRET_KEY": "queen-secret-key"}


def queen_bin():
    return os.environ.get("QUEEN_BIN") or os.path.join(
        os.environ.get("QUEEN_ROOT", "."), "build", "queen")


def tool(bucket, *args, check=None, timeout=300, name="lake",
         path_style=True, env=None):
    """Run `queen lake ...` against bucket name (with --path-style unless
    path_style is False: a flag is given once), env added to the
    environment; returns the CompletedProcess."""
    env = dict(os.environ, **CREDS, **(env or {}))
    for k in ("QUEEN_S3_ENDPOINT", "QUEEN_S3_BUCKET", "QUEEN_S3_PREFIX"):
        env.pop(k, None)
    cmd = [queen_bin(), "lake", args[0], "--endpoint", bucket.endpoint,
           "--bucket", name, *(["--path-style"] if path_style else []),
           *args[1:]]
    p = subprocess.run(cmd, env=env, capture_output=True, text=True,
                       timeout=timeout)
    if check is not None:
        assert p.returncode == check, (p.returncode, p.stdout, p.stderr)
    return p


def verify_json(bucket, *args, check=None):
    p = tool(bucket, "verify", "--json", *args, check=check)
    assert p.stdout, p.stderr
    return p.returncode, json.loads(p.stdout)


def url(node):
    return "http://127.0.0.1:%d" % node.port


def push_all(node, items, chunk=200):
    acked = []
    for i in range(0, len(items), chunk):
        part = items[i:i + chunk]
        r = node.request("POST", "/api/v1/push", body=lake.push_body(part))
        assert r.status == 201, r
        acked += lake.acked_from_push(part, r.json())
    return acked


# ---------------------------------------------------------------------------
# The self-test's damages, on a lake built from a real broker's log

QUEUE = st.QUEUE


@pytest.fixture(scope="module")
def logged(tmp_path_factory):
    """A broker (no sink) holding the self-test's records, pushed one
    window at a time, and the bucket; the windows rebuilt from the log with
    the broker's own stamps, so the broker's log is their truth."""
    from bucket import TestBucket
    from queenproc import Broker
    tmp = tmp_path_factory.mktemp("lake-tool")
    b = TestBucket(buckets=["lake"], workdir=str(tmp / "bucket")).start()
    node = Broker(str(tmp / "data"))
    os.makedirs(node.data_dir)
    node.start()
    try:
        shapes, _ = st.build_records()
        acked, rounds = [], []
        for _, _, recs in shapes:
            items = [{"queue": QUEUE, "partition": p, "transactionId": txn,
                      "payload": v.strip() if v is not None else b"null"}
                     for p, _, txn, _, v in sorted(recs, key=lambda r: r[1])]
            got = push_all(node, items)
            assert len(got) == len(items)
            acked += got
            rounds.append({(p, o) for p, o, _, _ in got})
        log = lake.broker_log(node, QUEUE, st.PARTITIONS)
        windows = []
        for i, keys in enumerate(rounds):
            recs = sorted(((p, o, log.records[(p, o)][1],
                            log.records[(p, o)][0], log.records[(p, o)][2])
                           for p, o in keys),
                          key=lambda r: (r[0].encode(), r[1]))
            windows.append([min(r[3] for r in recs), None, recs])
        for i in range(len(windows)):
            windows[i][1] = windows[i + 1][0] if i + 1 < len(windows) else \
                max(r[3] for r in windows[i][2]) + 1
        windows = [tuple(w) for w in windows]
        yield b, node, windows, acked, log
    finally:
        node.stop()
        b.stop()


def put_lake(bucket, prefix, windows, **kw):
    c = bucket.boto3()
    opts = dict(compression="gzip", align="none",
                writer="queen-s3/2.0.0 jsonl+gzip")
    opts.update(kw)
    lake.make_lake(lambda k, body: c.put_object(Bucket="lake", Key=k,
                                                Body=body),
                   prefix, TENANT, QUEUE, windows, **opts)
    return lake.Boto3Reader(c, "lake")


def first_violation(bucket, prefix, node):
    rc, out = verify_json(bucket, "--prefix", prefix, "--queue", QUEUE,
                          "--broker", url(node))
    assert rc == 1, out
    (q,) = out["queues"]
    assert not q["exact"] and q["violations"], out
    return q["violations"][0]


NINE = [st.damage_payload, st.damage_txn, st.damage_duplicate,
        st.damage_missing, st.damage_order, st.damage_ts, st.damage_tiling,
        st.damage_moved_to_next_window, st.damage_copied_to_a_later_window]


def test_the_nine_damages_are_refused_by_both_verifiers(logged):
    b, node, windows, acked, log = logged
    r = put_lake(b, "good", windows)
    lake.verify_queue(r, "good", TENANT, QUEUE, acked, compression="gzip",
                      align="none", log=log)
    rc, out = verify_json(b, "--prefix", "good", "--queue", QUEUE,
                          "--broker", url(node))
    assert rc == 0 and out["exact"], out
    assert out["queues"][0]["records"] == len(acked)
    assert out["queues"][0]["stampsChecked"] == len(acked)
    for damage in NINE:
        w = copy.deepcopy(windows)
        damage(w)
        prefix = "d-" + damage.__name__[len("damage_"):]
        r = put_lake(b, prefix, w)
        with pytest.raises(lake.LakeError) as e:
            lake.verify_queue(r, prefix, TENANT, QUEUE, acked,
                              compression="gzip", align="none", log=log)
        theirs = e.value.reason
        ours = first_violation(b, prefix, node)
        # The window and the key (or the record) the Python verifier
        # names, the tool names too.
        keys = [lake.data_key(prefix, TENANT, QUEUE, k, w[k - 1][0],
                              w[k - 1][1], compression="gzip", align="none")
                for k in (1, 2, 3)]
        named = [k for k in (1, 2, 3) if keys[k - 1] in theirs]
        if damage is st.damage_tiling:
            assert "windows 1 and 2 do not tile" in theirs, theirs
            assert ours.startswith("window 2: ") and \
                "windows 1 and 2 do not tile" in ours, ours
            continue
        if damage is st.damage_missing:
            p, o = windows[2][2][-1][0], windows[2][2][-1][1]
            rec = "%r/%d" % (p, o)
            assert rec in theirs and "not in the lake" in theirs, theirs
            assert ours.startswith("window 3: ") and \
                "%s/%d is in the log, not in the lake" % (p, o) in ours, ours
            continue
        assert named, theirs
        k = named[-1]  # the window where the damage shows (the later one)
        assert ours.startswith("window %d: %s" % (k, keys[k - 1])), \
            (damage.__name__, ours, theirs)


def test_parquet_windows_of_the_earlier_writer_tag_stay_valid(logged):
    """Manifests that name parquet/q1 (the writer before 4 MiB zstd pages)
    are exact to both verifiers; a tag neither wrote is refused by both.
    From the bucket alone: the broker's log holds payloads in their fetched
    form, and Parquet keeps the pushed bytes."""
    b, node, windows, acked, log = logged
    pushed = {(p, o): v for p, o, _, v in acked}
    windows = [(t0, t1, [(p, o, x, t, pushed[(p, o)]) for p, o, x, t, _ in rs])
               for t0, t1, rs in windows]
    kw = dict(fmt="parquet", compression="zstd", align="none")
    for tag, ok in (("q1", True), ("q2", True), ("q0", False)):
        r = put_lake(b, tag, windows,
                     writer="queen-s3/2.0.0 parquet/%s zstd" % tag, **kw)
        rc, out = verify_json(b, "--prefix", tag, "--queue", QUEUE)
        if ok:
            lake.verify_queue(r, tag, TENANT, QUEUE, acked, **kw)
            assert rc == 0 and out["exact"], out
            continue
        with pytest.raises(lake.LakeError, match="writer"):
            lake.verify_queue(r, tag, TENANT, QUEUE, acked, **kw)
        (q,) = out["queues"]
        assert rc == 1 and "parquet/q0 zstd" in q["violations"][0], out


def footer_of(body):
    """(start, end) of a Parquet file's footer (FileMetaData) in body."""
    import struct
    (n,) = struct.unpack("<I", body[-8:-4])
    return len(body) - 8 - n, len(body) - 8


def edit_footer(body, old, new):
    """body with the first `old` in its footer replaced by `new` (of the
    same length, so the footer keeps its length and still decodes)."""
    assert len(old) == len(new)
    a, z = footer_of(body)
    at = body.index(old, a, z)
    return body[:at] + new + body[at + len(old):]


@pytest.mark.parametrize("damage", ["column_renamed", "ts_max_changed",
                                    "kv_key_altered"])
def test_a_parquet_footer_edited_is_named(bucket, damage):
    """A Parquet object whose footer was edited after the commit, the
    manifest's sha256 rewritten to match: a column renamed in the schema,
    the ts column's max statistic moved, a key of the key-value metadata
    altered. The rows still decode, but the footer is not the one the
    writer makes of them: one violation naming the window, the key and the
    part of the footer."""
    import struct
    t0 = st.T0
    queue = "pqf-" + damage
    recs = [("p", o, "t%d" % o, t0 + 1 + o, b'{"o":%d}' % o)
            for o in range(3)]
    c = bucket.boto3()
    (m,) = lake.make_lake(lambda key, body: c.put_object(
        Bucket="lake", Key=key, Body=body), PREFIX, TENANT, queue,
        [(t0, t0 + 100, recs)], fmt="parquet", compression="zstd")
    rc, out = verify_json(bucket, "--queue", queue)
    assert rc == 0, out  # the lake as written is exact
    key = m["objects"][0]["key"]
    body = c.get_object(Bucket="lake", Key=key)["Body"].read()
    top = struct.pack("<q", t0 + 3)  # the ts column's max
    old, new, part = {
        "column_renamed": (b"transaction_id", b"transaction_ix",
                           "the schema"),
        "ts_max_changed": (top, struct.pack("<q", t0 + 4),
                           "the statistics of column ts in row group 0"),
        "kv_key_altered": (b"queen.queue", b"queen.queux",
                           "the key-value metadata"),
    }[damage]
    body = edit_footer(body, old, new)
    c.put_object(Bucket="lake", Key=key, Body=body)
    mkey = lake.manifest_key(PREFIX, TENANT, queue, 1)
    raw = c.get_object(Bucket="lake", Key=mkey)["Body"].read().replace(
        m["objects"][0]["sha256"].encode(),
        lake.hashlib.sha256(body).hexdigest().encode())
    c.put_object(Bucket="lake", Key=mkey, Body=raw)
    rc, out = verify_json(bucket, "--queue", queue)
    (q,) = out["queues"]
    assert rc == 1 and q["violationCount"] == 1, out
    assert q["violations"][0] == (
        "window 1: %s: parquet footer: %s differs from what the writer makes "
        "of its rows" % (key, part)), out
    # restore reads the window as verify does: it stops there, unpushed
    p = tool(bucket, "restore", "--queue", queue, "--to",
             "http://127.0.0.1:1", "--json", check=2)
    doc = json.loads(p.stdout)
    assert doc["error"].startswith("window 1: %s: parquet footer: %s" % (
        key, part)) and doc["records"] == 0, doc


def test_records_deleted_and_added_are_found_with_the_broker(logged):
    b, node, windows, acked, log = logged
    # A record deleted from the middle of window 2's object: the manifest
    # matches the object (make_lake writes both).
    w = copy.deepcopy(windows)
    gone = w[1][2].pop(4)
    put_lake(b, "deleted", w)
    rc, out = verify_json(b, "--prefix", "deleted", "--queue", QUEUE)
    assert rc == 1, out  # from the bucket alone: offsets not contiguous
    assert "offsets %d..%d are neither in the lake nor lost" % (
        gone[1], gone[1]) in out["queues"][0]["violations"][0], out
    ours = first_violation(b, "deleted", node)
    assert "record %s/%d is in the log, not in the lake" % gone[:2] in ours, \
        ours
    # A record added after the last of its partition, inside window 3.
    w = copy.deepcopy(windows)
    p = st.PARTITIONS[0]
    top = max(r for q, r in log.records if q == p)
    ts = max(r[3] for r in w[2][2] if r[0] == p)
    w[2][2].append((p, top + 1, "added-by-hand", ts, b'{"x":1}'))
    w[2][2].sort(key=lambda r: (r[0].encode(), r[1]))
    put_lake(b, "added", w)
    tool(b, "verify", "--prefix", "added", "--queue", QUEUE, check=0)
    ours = first_violation(b, "added", node)
    assert ours.startswith("window 3: ") and \
        "record %s/%d is in the lake, not in the log" % (p, top + 1) in ours, \
        ours


# ---------------------------------------------------------------------------
# Lakes the sink wrote

SINK_LAKES = [
    dict(QUEEN_S3_FORMAT="jsonl", QUEEN_S3_COMPRESSION="zstd"),
    dict(QUEEN_S3_FORMAT="jsonl", QUEEN_S3_COMPRESSION="gzip",
         QUEEN_S3_LAYOUT="per-partition", QUEEN_S3_ALIGN="hour"),
    dict(QUEEN_S3_FORMAT="jsonl", QUEEN_S3_COMPRESSION="none",
         QUEEN_S3_ALIGN="day"),
    dict(QUEEN_S3_FORMAT="parquet", QUEEN_S3_PARQUET_CODEC="zstd",
         QUEEN_S3_LAYOUT="per-partition"),
    dict(QUEEN_S3_FORMAT="parquet", QUEEN_S3_PARQUET_CODEC="snappy",
         QUEEN_S3_ALIGN="hour"),
]


def sink_lake(bucket, broker_factory, rounds=3, per_round=30, queue="orders",
              **over):
    node = broker_factory(env=sink_env(bucket, QUEEN_S3_QUEUES=queue, **over))
    reader = lake.bucket_reader(bucket)
    acked = []
    for r in range(rounds):
        items = [{"queue": queue, "partition": "p-%d" % (i % 4),
                  "payload": b'{"r":%d,"i":%d,"s":"\\u00e9\xc3\xa9 %s"}'
                  % (r, i, b"x" * (i % 7))}
                 for i in range(per_round)]
        acked += push_all(node, items)
        wait_until(lambda: lake.count_records(reader, PREFIX, TENANT, queue)
                   == len(acked), 60, "round %d in the lake" % r,
                   interval=0.1)
    return node, acked


@pytest.mark.parametrize("over", SINK_LAKES,
                         ids=["-".join(v.lower() for v in o.values())
                              for o in SINK_LAKES])
def test_lakes_the_sink_wrote_are_exact(bucket, broker_factory, over):
    node, acked = sink_lake(bucket, broker_factory, **over)
    rc, out = verify_json(bucket, check=0)  # every queue under the prefix
    (q,) = out["queues"]
    assert q["queue"] == "orders" and q["exact"] and q["records"] == \
        len(acked), out
    assert q["windows"] >= 3 and q["violations"] == []
    rc, out = verify_json(bucket, "--queue", "orders", "--broker", url(node),
                          check=0)
    assert out["queues"][0]["stampsChecked"] == len(acked)
    # A window range, and the human summary.
    p = tool(bucket, "verify", "--queue", "orders", "--from-k", "2",
             "--to-k", "2", check=0)
    assert "queue orders: exact" in p.stdout and "windows 2..2" in p.stdout


def test_verify_cannot_run_without_a_bucket_or_flags(bucket):
    p = tool(bucket, "verify", "--queue", "nothing-here")
    assert p.returncode == 2 and "no manifest" in p.stderr, p
    p = subprocess.run([queen_bin(), "lake", "verify"], capture_output=True,
                       text=True, env={"PATH": os.environ.get("PATH", "")})
    assert p.returncode == 2 and "--endpoint and --bucket" in p.stderr
    p = subprocess.run([queen_bin(), "lake", "verify", "--endpoint",
                        "http://127.0.0.1:1", "--bucket", "lake",
                        "--secret-key", "s3cr3t-never-printed"],
                       capture_output=True, text=True, timeout=120,
                       env={"PATH": os.environ.get("PATH", "")})
    assert p.returncode == 2, p
    assert "s3cr3t-never-printed" not in p.stdout + p.stderr
    # With --json, stdout is one JSON document whatever the exit, and
    # after exit 2 it says why, as stderr does.
    for args, name in ((("--queue", "nothing-here"), "lake"),
                       ((), "no-such-bucket"),
                       (("--prefix", "no-lake-here"), "lake")):
        p = tool(bucket, "verify", "--json", *args, name=name)
        assert p.returncode == 2, p
        doc = json.loads(p.stdout)
        assert doc["exact"] is False, (args, p)
        assert doc["error"] and doc["error"] in p.stderr, (args, p)
    # A flag of the other command is a bad flag, not ignored.
    for cmd, flag in (("verify", "--to"), ("verify", "--as"),
                      ("verify", "--state"), ("verify", "--batch"),
                      ("restore", "--broker")):
        p = tool(bucket, cmd, "--queue", "q", flag, "1")
        assert p.returncode == 2 and "%s is not a flag of %s" % (
            flag, cmd) in p.stderr, p


def test_a_flag_given_twice_is_refused_but_queue(bucket):
    """A flag given twice (`--bucket a --bucket b`) is refused, exit 2
    naming the flag and never its values (the last one silently won, so a
    typo in a script read another bucket); --queue alone repeats."""
    small_lake(bucket, "twice-ok")
    for cmd, args in (
            ("verify", ("--bucket", "other", "--bucket", "lake")),
            ("verify", ("--secret-key=s3cr3t-a", "--secret-key=s3cr3t-b")),
            ("verify", ("--from-k", "1", "--from-k", "2")),
            ("verify", ("--json", "--json=false")),
            ("restore", ("--to", "http://127.0.0.1:1", "--to",
                         "http://127.0.0.1:2"))):
        flag = args[0].split("=")[0]
        p = tool(bucket, cmd, "--queue", "twice-ok", *args, check=2)
        assert p.stderr == "queen lake: %s is given twice; it takes one " \
            "value\n" % flag, (cmd, args, p.stderr)
        assert p.stdout == "" and "s3cr3t" not in p.stderr, (cmd, args, p)
    rc, out = verify_json(bucket, "--queue", "twice-ok", "--queue",
                          "twice-ok", check=0)
    assert [q["queue"] for q in out["queues"]] == ["twice-ok"], out


def test_a_value_too_long_for_its_setting_is_refused(bucket):
    """A value that does not fit where the tool keeps it is exit 2 naming
    the flag, never cut short (a tenant or a key cut short names or signs
    something else), and the value itself is not printed."""
    for flag, n, most in (("--tenant", 256, 255), ("--region", 64, 63),
                          ("--prefix", 512, 511), ("--access-key", 128, 127),
                          ("--secret-key", 4097, 4096)):
        value = "k" * (n - 1) + "Z"
        p = tool(bucket, "verify", "--queue", "q", flag, value)
        assert p.returncode == 2, (flag, p)
        assert "queen lake: %s is %d bytes long; at most %d" % (
            flag, n, most) in p.stderr, (flag, p.stderr)
        assert value not in p.stdout + p.stderr, flag
    # One byte less is accepted (the run then finds no lake there).
    p = tool(bucket, "verify", "--queue", "q", "--tenant", "t" * 255)
    assert p.returncode == 2 and "bytes long" not in p.stderr, p
    for flag, cmd in (("--broker", "verify"), ("--to", "restore")):
        p = tool(bucket, cmd, "--queue", "q", flag,
                 "http://127.0.0.1:1/" + "u" * 1900)
        assert p.returncode == 2 and \
            "a broker URL is 1900 bytes at most" in p.stderr, (flag, p)


def closed_port():
    """A port on 127.0.0.1 that nothing listens on (bound, then closed)."""
    import socket
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def one_line_exit_2(ep, args, deadline, with_run=False):
    """Run `queen lake <args>` against the bucket endpoint ep: it must exit
    2 within deadline seconds (a timeout fails the test) with one line on
    stderr and no retry. That line (and the run, with_run)."""
    env = {"PATH": os.environ.get("PATH", ""), **CREDS}
    cmd = [queen_bin(), "lake", args[0], "--endpoint", ep, "--bucket",
           "lake", "--path-style", *args[1:]]
    p = subprocess.run(cmd, env=env, capture_output=True, text=True,
                       timeout=deadline)
    assert p.returncode == 2, (args, p)
    lines = p.stderr.splitlines()
    assert len(lines) == 1 and "retrying" not in p.stderr, (args, p)
    return (lines[0], p) if with_run else lines[0]


def test_an_unreachable_bucket_is_one_line_at_once():
    """A bucket endpoint that refuses the first connection is a wrong one:
    exit 2 with the one-line reason well before the ~12 s the S3 client's
    retries took (with a warning per retry), for both commands and with or
    without --queue. (A bucket that answered once is retried as before:
    tests/unit/test_s3client.c.)"""
    ep = "http://127.0.0.1:%d" % closed_port()
    runs = [("verify", "--json"), ("verify", "--queue", "q", "--json"),
            ("restore", "--queue", "q", "--to", "http://127.0.0.1:1",
             "--json")]
    for args in runs:
        line, p = one_line_exit_2(ep, args, 4, with_run=True)
        assert "connect" in line.lower(), (args, p)
        doc = json.loads(p.stdout)
        assert doc["error"] in line, (args, p)
        assert doc.get("exact", doc.get("ok")) is False, (args, doc)


class PageRepeater:
    """An S3 endpoint that ignores start-after: every LIST answers the same
    truncated page (a store with a paging bug), and any GET answers {}."""

    def __init__(self, page_keys):
        import http.server
        import threading

        keys = "".join("<Contents><Key>%s</Key><Size>2</Size></Contents>" % k
                       for k in page_keys)
        body = ("<?xml version=\"1.0\" encoding=\"UTF-8\"?>"
                "<ListBucketResult><Name>lake</Name>"
                "<IsTruncated>true</IsTruncated>%s</ListBucketResult>"
                % keys).encode()
        self.lists = 0
        outer = self

        class H(http.server.BaseHTTPRequestHandler):
            def do_GET(self):
                is_list = "list-type=2" in self.path
                outer.lists += is_list
                out = body if is_list else b"{}"
                self.send_response(200)
                self.send_header("Content-Length", str(len(out)))
                self.end_headers()
                self.wfile.write(out)

            def log_message(self, *a):
                pass

        self.srv = http.server.ThreadingHTTPServer(("127.0.0.1", 0), H)
        self.port = self.srv.server_address[1]
        self.th = threading.Thread(target=self.srv.serve_forever, daemon=True)
        self.th.start()

    def close(self):
        self.srv.shutdown()
        self.srv.server_close()


def test_a_store_that_ignores_start_after_is_one_line_not_a_loop():
    """A store whose LIST ignores start-after answers the same truncated
    page for ever: paging on it looped until killed. A page that does not
    move past start-after is a clear error, exit 2, after its second page."""
    env = {"PATH": os.environ.get("PATH", ""), **CREDS}
    win = ("%s/_queen/tenant=%s/queue=q/windows/0000000001.json"
           % (PREFIX, TENANT))
    rep = PageRepeater([win])
    try:
        ep = "http://127.0.0.1:%d" % rep.port
        for args in [("verify", "--queue", "q", "--json"),
                     ("verify", "--json"),
                     ("restore", "--queue", "q", "--to",
                      "http://127.0.0.1:1", "--json")]:
            cmd = [queen_bin(), "lake", args[0], "--endpoint", ep,
                   "--bucket", "lake", "--path-style", "--prefix", PREFIX,
                   *args[1:]]
            before = rep.lists
            # the deadline: a timeout here fails the test
            p = subprocess.run(cmd, env=env, capture_output=True, text=True,
                               timeout=30)
            assert p.returncode == 2, (args, p)
            assert "does not move past start-after" in p.stderr, (args, p)
            # two pages of each of its LISTs at most (verify runs three)
            assert rep.lists - before <= 8, (args, rep.lists - before)
    finally:
        rep.close()


class SilentPort:
    """A port on 127.0.0.1 that drops every new connection's packets, as a
    firewall does: a listener with a backlog of 0 whose accept queue is
    kept full and never accepted, so the kernel drops further SYNs."""

    def __enter__(self):
        import socket
        import time
        self.listener = socket.socket()
        self.listener.bind(("127.0.0.1", 0))
        self.listener.listen(0)
        self.port = self.listener.getsockname()[1]
        self.fill = []
        deadline = time.monotonic() + 10
        # connections never accepted, until one more cannot complete
        while True:
            c = socket.socket()
            c.settimeout(0.5)
            if c.connect_ex(("127.0.0.1", self.port)) != 0:
                c.close()
                return self
            self.fill.append(c)
            assert time.monotonic() < deadline, "the backlog never filled"

    def __exit__(self, *exc):
        for c in self.fill:
            c.close()
        self.listener.close()


def test_a_bucket_that_drops_the_connection_is_one_line_after_one_timeout():
    """An endpoint that drops packets (no answer, no refusal) before any
    answer is as wrong as one that refuses: one connect timeout (5 s),
    then exit 2 with the one-line reason, not six attempts with backoff
    (over 30 s, a warning per retry)."""
    env = {"PATH": os.environ.get("PATH", ""), **CREDS}
    with SilentPort() as silent:
        ep = "http://127.0.0.1:%d" % silent.port
        for args in [("verify", "--queue", "q", "--json"),
                     ("restore", "--queue", "q", "--to",
                      "http://127.0.0.1:1", "--json")]:
            cmd = [queen_bin(), "lake", args[0], "--endpoint", ep,
                   "--bucket", "lake", "--path-style", *args[1:]]
            # the deadline: a timeout here fails the test
            p = subprocess.run(cmd, env=env, capture_output=True, text=True,
                               timeout=14)
            assert p.returncode == 2, (args, p)
            lines = p.stderr.splitlines()
            assert len(lines) == 1 and "retrying" not in p.stderr, (args, p)
            low = lines[0].lower()
            assert "connect" in low and "timeout" in low, (args, p)
            doc = json.loads(p.stdout)
            assert doc["error"] in lines[0], (args, p)


# A port that accepts every connection and never answers.
MutePeer = tlsfront.Listener


def run_timed(cmd, env, deadline):
    """Run cmd to its end; a run past deadline seconds fails the test.
    Returns (CompletedProcess, seconds taken)."""
    import time
    t0 = time.monotonic()
    p = subprocess.run(cmd, env=env, capture_output=True, text=True,
                       timeout=deadline)
    return p, time.monotonic() - t0


def test_a_bucket_that_never_answers_is_one_line_in_seconds():
    """An endpoint that accepts the connection and never answers (no HTTP
    server there, or a hung one) before the bucket answered anything is a
    wrong one: exit 2 after one stall of 10 s with the one-line reason
    naming it, not after six attempts of the 120 s a request may take."""
    env = {"PATH": os.environ.get("PATH", ""), **CREDS}
    with MutePeer() as mute:
        for args in [("verify", "--queue", "q", "--json"),
                     ("restore", "--queue", "q", "--to",
                      "http://127.0.0.1:1", "--json")]:
            cmd = [queen_bin(), "lake", args[0], "--endpoint", mute.url,
                   "--bucket", "lake", "--path-style", *args[1:]]
            p, took = run_timed(cmd, env, 60)
            assert p.returncode == 2, (args, p)
            lines = p.stderr.splitlines()
            assert len(lines) == 1 and "retrying" not in p.stderr, (args, p)
            assert "no answer from %s" % mute.url in lines[0], (args, p)
            assert "queen-secret-key" not in p.stdout + p.stderr, (args, p)
            doc = json.loads(p.stdout)
            assert doc["error"] in lines[0], (args, p)
            assert took < 30, (args, took)


class ConnectProxy(MutePeer):
    """An HTTP proxy on 127.0.0.1 that answers every CONNECT with "200
    Connection established" and then pipes the bytes both ways to the
    port named, as an https_proxy does."""

    tunnels = 0

    def on_connection(self, conn):
        import socket
        import threading
        head = b""
        while b"\r\n\r\n" not in head:
            chunk = conn.recv(4096)
            if not chunk:
                break
            head += chunk
        verb, target = (head.split(b" ") + [b"", b""])[:2]
        if verb != b"CONNECT":
            conn.close()
            return
        host, port = target.decode().rsplit(":", 1)
        origin = socket.create_connection((host, int(port)))
        self.held += [conn, origin]
        self.tunnels += 1
        conn.sendall(b"HTTP/1.1 200 Connection established\r\n\r\n")
        for a, b in ((conn, origin), (origin, conn)):
            threading.Thread(target=tlsfront.pipe, args=(a, b),
                             daemon=True).start()


def test_a_silent_bucket_behind_a_proxy_is_one_line_in_seconds():
    """Behind an https_proxy (curl takes it from the environment), a bucket
    that accepts the tunnel and never answers its TLS handshake is one line
    after the connect timeout (5 s), exit 2, not a timeout retried. (This
    covers the tunnel only: a bucket silent after a handshake, where the
    proxy's own "200 Connection established" must not count as the
    bucket's answer, needs a certificate the tool trusts.)"""
    with MutePeer() as mute, ConnectProxy() as proxy:
        env = {"PATH": os.environ.get("PATH", ""), **CREDS,
               "https_proxy": proxy.url}
        ep = "https://127.0.0.1:%d" % mute.port
        cmd = [queen_bin(), "lake", "verify", "--endpoint", ep, "--bucket",
               "lake", "--path-style", "--queue", "q", "--json"]
        p, took = run_timed(cmd, env, 60)
        assert proxy.tunnels >= 1, "the tool did not go through the proxy"
        assert p.returncode == 2, p
        lines = p.stderr.splitlines()
        assert len(lines) == 1 and "retrying" not in p.stderr, p
        assert "timeout" in lines[0].lower(), p
        assert json.loads(p.stdout)["error"] in lines[0], p
        assert "queen-secret-key" not in p.stdout + p.stderr, p
        assert took < 20, took


def test_a_tls_bucket_of_a_private_authority_is_read_with_its_ca_file(
        bucket, tmp_path):
    """An https endpoint whose certificate a private authority signed (an
    on-premises MinIO or Ceph): --ca-file (or QUEEN_S3_CA_FILE) names that
    authority and the run is exact; without it the one line names the
    certificate; a CA file that cannot be read is refused before any
    request."""
    small_lake(bucket, "tls")
    ca, cert, key = tlsfront.make_ca(str(tmp_path / "pki"))
    port = int(bucket.endpoint.rsplit(":", 1)[1])
    env = {"PATH": os.environ.get("PATH", ""), **CREDS}
    with tlsfront.TlsFront(cert, key, to_port=port) as front:
        base = [queen_bin(), "lake", "verify", "--endpoint", front.url,
                "--bucket", "lake", "--path-style", "--queue", "tls",
                "--json"]
        p, _ = run_timed(base + ["--ca-file", ca], env, 120)
        assert p.returncode == 0, (p.stdout, p.stderr)
        doc = json.loads(p.stdout)
        assert doc["exact"] is True and doc["queues"][0]["records"] == 3, doc
        p, _ = run_timed(base, dict(env, QUEEN_S3_CA_FILE=ca), 120)
        assert p.returncode == 0, (p.stdout, p.stderr)
        p, took = run_timed(base, env, 60)
        assert p.returncode == 2, (p.stdout, p.stderr)
        lines = p.stderr.splitlines()
        assert len(lines) == 1 and "certificate" in lines[0], p.stderr
        assert took < 30, took
        missing = str(tmp_path / "no-such.pem")
        p, _ = run_timed(base + ["--ca-file", missing], env, 60)
        assert p.returncode == 2, (p.stdout, p.stderr)
        assert "--ca-file %s: cannot read it" % missing in p.stderr, p.stderr
        assert "queen-secret-key" not in p.stdout + p.stderr


def test_a_bucket_silent_after_its_handshake_behind_a_proxy_is_one_line(
        tmp_path):
    """Behind an https_proxy, a bucket that completes the TLS handshake
    and then never answers is one line after the stall (10 s), exit 2: the
    proxy's own "200 Connection established" is not the bucket's answer
    (were it taken for one, the bucket would count as answering and the
    stall be retried six times)."""
    ca, cert, key = tlsfront.make_ca(str(tmp_path / "pki"))
    with tlsfront.TlsFront(cert, key) as silent, ConnectProxy() as proxy:
        env = {"PATH": os.environ.get("PATH", ""), **CREDS,
               "https_proxy": proxy.url}
        cmd = [queen_bin(), "lake", "verify", "--endpoint", silent.url,
               "--bucket", "lake", "--path-style", "--queue", "q", "--json",
               "--ca-file", ca]
        p, took = run_timed(cmd, env, 120)
        assert proxy.tunnels >= 1, "the tool did not go through the proxy"
        assert silent.handshakes >= 1, "no TLS handshake was made"
        assert p.returncode == 2, p
        lines = p.stderr.splitlines()
        assert len(lines) == 1 and "retrying" not in p.stderr, p
        assert "no answer from %s" % silent.url in lines[0], p
        assert json.loads(p.stdout)["error"] in lines[0], p
        assert took < 30, took


def test_a_bucket_that_stalls_after_answering_is_retried_then_given_up(
        bucket):
    """Once the bucket answered (the listings), an object's GET that sends
    its head and half its body and then nothing is a transient fault: cut
    after about 10 s of silence and retried, and the run is exact. A
    bucket that stalls every such GET is given up after the client's six
    tries: exit 2 with one line naming the timeout, not a hang, nor six
    tries of the 120 s a request may take."""
    small_lake(bucket, "stalls")
    args = ("verify", "--queue", "stalls", "--json")
    try:
        bucket.fault("stall", count=1, method="GET", prefix=PREFIX,
                     ms=120000)
        t0 = time.monotonic()
        p = tool(bucket, *args, timeout=60)
        took = time.monotonic() - t0
        assert p.returncode == 0, (p.stdout, p.stderr)
        assert json.loads(p.stdout)["queues"][0]["violations"] == [], p
        assert bucket.stats()["faults"]["stall"] == 1
        assert 9 < took < 45, took  # one stall cut, then the retry
        bucket.release_held()
        bucket.fault("stall", count=-1, method="GET", prefix=PREFIX,
                     ms=120000)
        t0 = time.monotonic()
        p = tool(bucket, *args, timeout=240)
        took = time.monotonic() - t0
        assert p.returncode == 2, (p.stdout, p.stderr)
        err = json.loads(p.stdout)["error"]
        assert "timeout" in err.lower() or "timed out" in err.lower(), err
        assert err in p.stderr.splitlines()[-1], p.stderr
        assert "queen-secret-key" not in p.stdout + p.stderr
        assert bucket.stats()["faults"]["stall"] >= 1 + 6, bucket.stats()
        assert 50 < took < 200, took
    finally:
        bucket.clear_faults()
        bucket.release_held()


def test_a_broker_that_never_answers_is_given_up_in_about_30_s(bucket):
    """--broker or --to naming a port that accepts and never answers: each
    try ends after 10 s of silence, and the tries after 30 s: exit 2 naming
    the broker, not after 30 tries of 120 s each."""
    small_lake(bucket, "mute")
    env = dict(os.environ, **CREDS)
    for k in ("QUEEN_S3_ENDPOINT", "QUEEN_S3_BUCKET", "QUEEN_S3_PREFIX"):
        env.pop(k, None)
    base = [queen_bin(), "lake", None, "--endpoint", bucket.endpoint,
            "--bucket", "lake", "--path-style", "--queue", "mute", "--json"]
    with MutePeer() as mute:
        for cmd, flag in (("verify", "--broker"), ("restore", "--to")):
            argv = list(base)
            argv[2] = cmd
            p, took = run_timed(argv + [flag, mute.url], env, 60)
            assert p.returncode == 2, (cmd, p)
            err = json.loads(p.stdout)["error"]
            assert "%s/api/v1/" % mute.url in err and \
                "connected, but no answer came" in err, (cmd, err)
            assert err in p.stderr, (cmd, p)
            assert 25 < took < 50, (cmd, took)


def test_an_unresolved_virtual_host_suggests_path_style():
    """Without --path-style the bucket is a host name of its own; when that
    name does not resolve, the reason is followed by a line that names both
    addresses. With --path-style (nothing to suggest) the reason is alone,
    and the --json error is the reason either way."""
    env = {"PATH": os.environ.get("PATH", ""), **CREDS}
    base = [queen_bin(), "lake", "verify", "--endpoint",
            "http://s3.example.invalid:9000", "--bucket", "lake", "--queue",
            "q", "--json"]
    p = subprocess.run(base, env=env, capture_output=True, text=True,
                       timeout=60)
    assert p.returncode == 2, p
    lines = p.stderr.splitlines()
    assert len(lines) == 2 and "lake.s3.example.invalid" in lines[0], p
    assert lines[1] == ("queen lake verify: the bucket was addressed as the "
                        "host lake.s3.example.invalid; --path-style addresses"
                        " it as s3.example.invalid:9000/lake"), p
    assert json.loads(p.stdout)["error"] in lines[0], p
    p = subprocess.run(base + ["--path-style"], env=env, capture_output=True,
                       text=True, timeout=60)
    assert p.returncode == 2 and len(p.stderr.splitlines()) == 1, p
    assert "--path-style" not in p.stderr, p


# ---------------------------------------------------------------------------
# restore

def log_records(node, queue, partitions):
    """{(partition, offset): (txn, payload)} of the broker's log."""
    got = lake.broker_log(node, queue, partitions)
    return {k: (v[1], v[2]) for k, v in got.records.items()}


def test_restore_twice_then_the_new_lake_is_exact(bucket, broker_factory):
    src, acked = sink_lake(bucket, broker_factory)
    parts = sorted({a[0] for a in acked})
    want = log_records(src, "orders", parts)
    dst = broker_factory(env=sink_env(bucket, QUEEN_S3_PREFIX="restored",
                                      QUEEN_S3_QUEUES="copy"))
    # A base URL with a trailing slash is the same broker.
    p = tool(bucket, "restore", "--queue", "orders", "--as", "copy", "--to",
             url(dst) + "/", "--json", check=0)
    first = json.loads(p.stdout)
    assert first["records"] == len(acked) and first["queued"] == len(acked)
    assert first["ok"] is True and "error" not in first, first
    p = tool(bucket, "restore", "--queue", "orders", "--as", "copy", "--to",
             url(dst), "--json", check=0)
    again = json.loads(p.stdout)
    assert again["queued"] == 0 and again["duplicates"] == len(acked), again
    assert log_records(dst, "copy", parts) == want
    reader = lake.bucket_reader(bucket)
    wait_until(lambda: lake.count_records(reader, "restored", TENANT, "copy")
               == len(acked), 60, "the restored queue's lake", interval=0.1)
    rc, out = verify_json(bucket, "--prefix", "restored", "--queue", "copy",
                          "--broker", url(dst) + "/", check=0)
    assert out["queues"][0]["records"] == len(acked)
    assert out["queues"][0]["stampsChecked"] == len(acked)


def test_restore_killed_halfway_then_run_again_is_exact(bucket,
                                                        broker_factory,
                                                        tmp_path):
    src, acked = sink_lake(bucket, broker_factory, rounds=3, per_round=200)
    parts = sorted({a[0] for a in acked})
    want = log_records(src, "orders", parts)
    dst = broker_factory()
    state = str(tmp_path / "restore.state")
    env = dict(os.environ, **CREDS)
    cmd = [queen_bin(), "lake", "restore", "--endpoint", bucket.endpoint,
           "--bucket", "lake", "--path-style", "--queue", "orders", "--to",
           url(dst), "--batch", "1", "--state", state]
    proc = subprocess.Popen(cmd, env=env, stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL)

    def pushed():
        n = 0
        for p in parts:
            e = dst.fetch_one("orders", p, 0)
            n += e.get("highWatermark", 0)
        return n

    try:
        wait_until(lambda: pushed() >= 50, 60, "the restore under way",
                   interval=0.01)
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
    halfway = pushed()
    assert 0 < halfway < len(acked), halfway  # killed halfway
    p = subprocess.run(cmd + ["--json"], env=env, capture_output=True,
                       text=True, timeout=300)
    assert p.returncode == 0, p.stderr
    out = json.loads(p.stdout)
    assert out["queued"] < len(acked), out  # it went on, it did not redo
    assert log_records(dst, "orders", parts) == want  # every record once
    # Run again: the state file says everything is done.
    p = subprocess.run(cmd + ["--json"], env=env, capture_output=True,
                       text=True, timeout=300)
    assert p.returncode == 0 and json.loads(p.stdout)["records"] == 0


def test_a_checkpoint_off_by_one_is_refused_by_both(bucket, broker_factory):
    node, acked = sink_lake(bucket, broker_factory)
    reader = lake.bucket_reader(bucket)
    got = lake.wait_queue(reader, PREFIX, TENANT, "orders", acked, 30,
                          align="none", checkpoint_every=2)
    k = got["checkpoints"][0]
    key = lake.checkpoint_key(PREFIX, TENANT, "orders", k)
    c = bucket.boto3()
    doc = json.loads(lake.decompress(reader.read(key), "zstd", key))
    doc["positions"][0][1] += 1
    c.put_object(Bucket="lake", Key=key,
                 Body=lake.compress(lake.compact(doc), "zstd"))
    with pytest.raises(lake.LakeError, match="positions do not match the "
                       "manifests") as e:
        lake.verify_queue(reader, PREFIX, TENANT, "orders", acked,
                          align="none", checkpoint_every=2)
    assert key in e.value.reason
    rc, out = verify_json(bucket, "--queue", "orders")
    assert rc == 1, out
    v = out["queues"][0]["violations"]
    assert len(v) == 1 and v[0].startswith("window %d: %s: positions do not "
                                           "match the manifests" % (k, key)), v


def small_lake(bucket, queue, n=3, prefix=PREFIX, **kw):
    """A hand-made lake of n windows, one record each in partition "p";
    returns the windows."""
    t0 = st.T0
    windows = [(t0 + k * 100, t0 + (k + 1) * 100,
                [("p", k, "txn-%d" % k, t0 + k * 100 + 1, b'{"k":%d}' % k)])
               for k in range(n)]
    c = bucket.boto3()
    lake.make_lake(lambda key, body: c.put_object(Bucket="lake", Key=key,
                                                  Body=body),
                   prefix, TENANT, queue, windows, **kw)
    return windows


def run_through_outage(cmd, env, broker, timeout):
    """Run the tool (cmd) while broker is down for its first 5 s, wanting
    it still retrying then; start broker and wait for the tool's end.
    Returns (exit code, stdout, stderr)."""
    proc = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    try:
        try:
            proc.wait(timeout=5)  # the outage: 5 s with no broker
        except subprocess.TimeoutExpired:
            pass
        assert proc.poll() is None, proc.communicate()  # still retrying
        broker.start()
        out, errs = proc.communicate(timeout=timeout)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(timeout=30)
    return proc.returncode, out, errs


def test_restore_waits_for_a_broker_that_comes_up_late(bucket,
                                                       broker_factory):
    """No connection is retried for about 30 s per batch (docs/lake.md §3):
    a broker down for the restore's first 5 s costs nothing."""
    small_lake(bucket, "late")
    dst = broker_factory(start=False)
    env = dict(os.environ, **CREDS)
    cmd = [queen_bin(), "lake", "restore", "--endpoint", bucket.endpoint,
           "--bucket", "lake", "--path-style", "--queue", "late", "--to",
           url(dst), "--json"]
    rc, out, errs = run_through_outage(cmd, env, dst, 60)
    assert rc == 0, errs
    assert json.loads(out)["queued"] == 3, out
    assert dst.fetch_one("late", "p", 0).get("highWatermark") == 3


def test_a_window_range_past_the_lake_is_not_exact(bucket):
    """--from-k past the last manifest reads no window: verify does not
    call that exact (as for --to-k), restore says it has nothing there."""
    small_lake(bucket, "short")
    for args in (("--from-k", "4"), ("--to-k", "4"), ("--from-k", "5",
                                                      "--to-k", "9")):
        rc, out = verify_json(bucket, "--queue", "short", *args)
        (q,) = out["queues"]
        assert rc == 1 and not out["exact"] and not q["exact"], (args, out)
        assert any("is past the last manifest (k=3)" in v
                   for v in q["violations"]), (args, out)
    rc, out = verify_json(bucket, "--queue", "short", "--from-k", "3",
                          check=0)
    assert out["queues"][0]["windows"] == 1, out
    p = tool(bucket, "restore", "--queue", "short", "--from-k", "4", "--to",
             "http://127.0.0.1:1")
    assert p.returncode == 2 and "--from-k 4 is past the last manifest " \
        "(k=3)" in p.stderr, p
    # with --json the failure is a document too, as verify's is
    p = tool(bucket, "restore", "--queue", "short", "--from-k", "4", "--to",
             "http://127.0.0.1:1", "--json")
    assert p.returncode == 2, p
    doc = json.loads(p.stdout)
    assert doc["ok"] is False and doc["records"] == 0, doc
    assert doc["error"] == "--from-k 4 is past the last manifest (k=3)", doc
    assert doc["error"] in p.stderr, p


def test_a_record_without_transaction_id_is_restored_once(bucket,
                                                          broker_factory):
    """A lake record whose transactionId is "" (the broker takes an empty
    id as none and mints one) gets an id derived from its place in the
    lake, the same on every run: a second restore adds nothing. The place
    includes the lake's queue, so the same partition and offset of another
    queue restored into the same target is a record of its own."""
    t0 = st.T0
    for queue in ("noid", "noid2"):
        c = bucket.boto3()
        recs = [("p", o, "" if o != 1 else "given-%s" % queue, t0 + 1 + o,
                 b'{"o":%d}' % o) for o in range(3)]
        lake.make_lake(lambda key, body: c.put_object(Bucket="lake", Key=key,
                                                      Body=body),
                       PREFIX, TENANT, queue, [(t0, t0 + 100, recs)])
    dst = broker_factory()

    def restore(queue):
        p = tool(bucket, "restore", "--queue", queue, "--as", "target",
                 "--to", url(dst), "--json", check=0)
        return json.loads(p.stdout)

    first = restore("noid")
    again = restore("noid")
    assert first["queued"] == 3, first
    assert again["queued"] == 0 and again["duplicates"] == 3, again
    assert first["derivedIds"] == again["derivedIds"] == 2, (first, again)
    log = dst.fetch_one("target", "p", 0)["records"]
    assert [json.loads(json.dumps(x["payload"])) for x in log] == \
        [{"o": 0}, {"o": 1}, {"o": 2}], log
    txns = [x["transactionId"] for x in log]
    assert txns[1] == "given-noid", txns
    for t in (txns[0], txns[2]):
        assert t.startswith("lake-") and len(t) == 37, txns
        int(t[5:], 16)
    assert txns[0] != txns[2], txns
    # another queue's records at the same places are not its duplicates
    other = restore("noid2")
    assert other["queued"] == 3 and other["duplicates"] == 0, other
    assert len(dst.fetch_one("target", "p", 0)["records"]) == 6


def test_a_restore_the_broker_refuses_still_prints_its_document(
        bucket, broker_factory):
    """A push the broker refuses (a 4xx) stops the restore with exit 2; with
    --json stdout still holds the restore's document, "ok":false and the
    reason stderr gives, as verify's document does after exit 2."""
    small_lake(bucket, "refused")
    dst = broker_factory()
    too_long = "q" * 600  # over the broker's queue name limit: 413
    p = tool(bucket, "restore", "--queue", "refused", "--as", too_long,
             "--to", url(dst), "--json")
    assert p.returncode == 2, p
    doc = json.loads(p.stdout)
    assert doc["ok"] is False and doc["queue"] == too_long, doc
    assert 1 <= doc["records"] <= 3 and doc["queued"] == 0, doc
    assert "answered 413" in doc["error"], doc
    assert doc["error"] in p.stderr, p


def test_partitions_only_the_broker_has_are_counted_apart(bucket,
                                                          broker_factory):
    """verify --broker counts the lake's partitions as `partitions` and the
    log's partitions the lake does not name as `brokerOnlyPartitions`;
    before, the broker's were added to the lake's count."""
    node = broker_factory()
    push_all(node, [{"queue": "bq", "partition": "p", "transactionId":
                     "b%d" % i, "payload": b'{"i":%d}' % i}
                    for i in range(3)])
    log = lake.broker_log(node, "bq", ["p"])
    recs = sorted((p, o, v[1], v[0], v[2]) for (p, o), v in
                  log.records.items())
    c = bucket.boto3()
    lake.make_lake(lambda key, body: c.put_object(Bucket="lake", Key=key,
                                                  Body=body),
                   PREFIX, TENANT, "bq", [(recs[0][3], recs[-1][3] + 1, recs)])
    # stamped after the lake's last window: in the log only, no violation
    push_all(node, [{"queue": "bq", "partition": "late", "payload": b"1"}])
    rc, out = verify_json(bucket, "--queue", "bq", "--broker", url(node),
                          check=0)
    (q,) = out["queues"]
    assert q["exact"] and q["stampsChecked"] == 3, out
    assert q["partitions"] == 1, out
    assert q["brokerOnlyPartitions"] == 1, out
    rc, out = verify_json(bucket, "--queue", "bq", check=0)
    assert out["queues"][0]["partitions"] == 1, out
    assert out["queues"][0]["brokerOnlyPartitions"] == 0, out
    p = tool(bucket, "verify", "--queue", "bq", "--broker", url(node),
             check=0)
    assert "1 partitions\n" in p.stdout and \
        "3 records compared with the broker's log, 1 partitions only " \
        "there" in p.stdout, p.stdout


def test_a_tenants_lake_meets_that_tenants_log(bucket, broker_factory):
    """--tenant T reads T's lake, so --broker compares it with T's log and
    restore pushes into T's queue (x-queen-tenant), not the default
    tenant's."""
    tenant = "0199aaaa-bbbb-7ccc-8ddd-eeeeeeeeeeee"
    hdr = {"x-queen-tenant": tenant}
    node = broker_factory(env={"QUEEN_TENANCY_HEADER": "true"})
    items = [{"queue": "tq", "partition": "p", "transactionId": "x%d" % i,
              "payload": {"i": i}} for i in range(3)]
    r = node.request("POST", "/api/v1/push", body=json.dumps(
        {"items": items}, separators=(",", ":")).encode(), headers=hdr)
    assert r.status == 201, r

    def log_of(queue):
        r = node.request("POST", "/api/v1/fetch", body=json.dumps(
            {"entries": [{"queue": queue, "partition": "p", "offset": 0}]}
        ).encode(), headers=hdr)
        assert r.status == 200, r
        return r.json()["entries"][0]["records"]

    recs = [("p", x["offset"], x["transactionId"], lake.parse_iso_us(x["ts"]),
             json.dumps(x["payload"], separators=(",", ":")).encode())
            for x in log_of("tq")]
    assert len(recs) == 3, recs
    c = bucket.boto3()
    lake.make_lake(lambda key, body: c.put_object(Bucket="lake", Key=key,
                                                  Body=body),
                   PREFIX, tenant, "tq", [(recs[0][3], recs[-1][3] + 1, recs)])
    rc, out = verify_json(bucket, "--tenant", tenant, "--broker", url(node))
    assert rc == 0 and out["exact"], out
    assert out["queues"][0]["stampsChecked"] == 3, out
    p = tool(bucket, "restore", "--tenant", tenant, "--queue", "tq", "--as",
             "copy", "--to", url(node), "--json", check=0)
    assert json.loads(p.stdout)["queued"] == 3, p.stdout
    assert [(x["transactionId"], x["payload"]) for x in log_of("copy")] == \
        [(x[2], {"i": i}) for i, x in enumerate(recs)]


def test_an_object_past_the_last_manifest_is_an_orphan(bucket):
    """A data object no committed window names is an orphan, also when its
    k is past the last manifest (an upload whose commit never came), and
    a stray name that is no window's at all."""
    w = small_lake(bucket, "orph")
    c = bucket.boto3()
    t0, t1 = w[2][1], w[2][1] + 100
    stray = [lake.data_key(PREFIX, TENANT, "orph", 4, t0, t1),
             "%s/w-12" % lake.queue_root(PREFIX, TENANT, "orph")]
    for key in stray:
        c.put_object(Bucket="lake", Key=key, Body=b"{}\n")
    rc, out = verify_json(bucket, "--queue", "orph")
    assert rc == 1, out
    v = out["queues"][0]["violations"]
    for key in stray:
        assert any(key + ": data object, but no manifest names it" in x
                   for x in v), (key, v)
    # past the last manifest it may be a running sink's window in flight:
    # the violation says so, and how to leave it out
    assert any(stray[0] in x and "past the last manifest, k=3" in x and
               "--to-k 3 leaves it out" in x for x in v), v
    # --to-k leaves the windows past it out: an object there is not looked at
    rc, out = verify_json(bucket, "--queue", "orph", "--to-k", "2")
    v = out["queues"][0]["violations"]
    assert not any(stray[0] in x for x in v), v


def test_a_stray_data_key_is_named_without_a_window(bucket):
    """A data object whose name is no window's ("w-12", "notes.txt") has no
    k: it is named as a stray object, not as "window -1"."""
    small_lake(bucket, "stray-data")
    c = bucket.boto3()
    root = lake.queue_root(PREFIX, TENANT, "stray-data")
    stray = ["%s/notes.txt" % root, "%s/w-12" % root]
    for key in stray:
        c.put_object(Bucket="lake", Key=key, Body=b"{}\n")
    rc, out = verify_json(bucket, "--queue", "stray-data")
    assert rc == 1 and out["queues"][0]["violations"] == [
        "stray object %s: data object, but no manifest names it (its name "
        "is no window's)" % key for key in stray], out


def test_a_queue_named_twice_is_verified_once(bucket):
    small_lake(bucket, "twice")
    small_lake(bucket, "other")
    rc, out = verify_json(bucket, "--queue", "twice", "--queue", "other",
                          "--queue", "twice", check=0)
    assert [q["queue"] for q in out["queues"]] == ["twice", "other"], out


def test_verify_waits_for_a_broker_that_comes_back(bucket, broker_factory):
    """The broker's answers are retried as the bucket's are (docs/lake.md
    §1: exit 2 only after retries): a broker down for verify's first 5 s
    is compared with once it is back."""
    node, acked = sink_lake(bucket, broker_factory, rounds=1)
    node.stop()
    env = dict(os.environ, **CREDS)
    for k in ("QUEEN_S3_ENDPOINT", "QUEEN_S3_BUCKET", "QUEEN_S3_PREFIX"):
        env.pop(k, None)
    cmd = [queen_bin(), "lake", "verify", "--endpoint", bucket.endpoint,
           "--bucket", "lake", "--path-style", "--queue", "orders", "--json",
           "--broker", url(node)]
    rc, out, errs = run_through_outage(cmd, env, node, 120)
    assert rc == 0, (out, errs)
    q = json.loads(out)["queues"][0]
    assert q["exact"] and q["stampsChecked"] == len(acked), out


def test_a_damaged_record_in_a_zstd_object_is_one_violation(bucket):
    """An object decoded whole (zstd frames that state their size) stops at
    its first violation: that one is reported once, and the records are
    not read a second time (which named the first record 'not sorted
    after' the damaged one, and counted the bytes twice)."""
    t0 = st.T0
    recs = [("p", o, "t%d" % o, t0 + 1 + o, b'{"o":%d}' % o) for o in range(3)]
    bad = recs[:2] + [("p", 2, "t2", t0 + 500, b'{"o":2}')]  # past tEnd
    c = bucket.boto3()
    lake.make_lake(lambda key, body: c.put_object(Bucket="lake", Key=key,
                                                  Body=body),
                   PREFIX, TENANT, "zst", [(t0, t0 + 100, bad)])
    rc, out = verify_json(bucket, "--queue", "zst")
    q = out["queues"][0]
    assert rc == 1 and q["violationCount"] == 1, out
    assert "is outside the window" in q["violations"][0], out
    body = b"".join(lake.jsonl_line(*r) for r in bad)
    assert q["decodedBytes"] == len(body), out


def test_a_missing_manifest_is_named_and_every_other_window_read(bucket):
    """A gap among the manifests (the first one included) or a stray key
    among them is a violation naming its window and key, and every
    manifest present is still read: the objects they name are not called
    orphans."""
    small_lake(bucket, "gap1", n=4)
    small_lake(bucket, "gap3", n=5)
    small_lake(bucket, "stray", n=4)
    c = bucket.boto3()
    c.delete_object(Bucket="lake", Key=lake.manifest_key(PREFIX, TENANT,
                                                         "gap1", 1))
    c.delete_object(Bucket="lake", Key=lake.manifest_key(PREFIX, TENANT,
                                                         "gap3", 3))
    bak = lake.manifest_key(PREFIX, TENANT, "stray", 1) + ".bak"
    c.put_object(Bucket="lake", Key=bak, Body=b"{}")
    for queue, k, key in (
            ("gap1", 2, lake.manifest_key(PREFIX, TENANT, "gap1", 2)),
            ("gap3", 4, lake.manifest_key(PREFIX, TENANT, "gap3", 4)),
            ("stray", 0, bak)):
        rc, out = verify_json(bucket, "--queue", queue)
        assert rc == 1, (queue, out)
        (q,) = out["queues"]
        v = q["violations"]
        assert v[0].startswith("window %d: %s: " % (k, key)), (queue, v)
        # only the deleted manifest's object is named by none
        orphans = [x for x in v if "no manifest names it" in x]
        assert len(orphans) == (0 if queue == "stray" else 1), (queue, v)
        # every record of the windows whose manifest is there was read
        assert q["records"] == {"gap1": 3, "gap3": 4, "stray": 4}[queue], \
            (queue, q)


def test_verify_lists_only_queues_with_a_manifest(bucket):
    """Without --queue every queue with a manifest is verified; one that
    has only a checkpoint is not a queue of the lake and stops nothing."""
    small_lake(bucket, "a-queue")
    small_lake(bucket, "c-queue")
    c = bucket.boto3()
    c.put_object(Bucket="lake", Body=b"x",
                 Key=lake.checkpoint_key(PREFIX, TENANT, "b-queue", 1))
    rc, out = verify_json(bucket)
    assert rc == 0, out
    assert [q["queue"] for q in out["queues"]] == ["a-queue", "c-queue"], out


def test_broker_with_from_k_finds_a_record_missing_before_the_first(
        bucket, broker_factory):
    """--broker --from-k K: a record of the log stamped inside the windows
    read, below a partition's first record there, is not in the lake."""
    node = broker_factory()
    for i in range(3):  # one push each: three stamps
        assert len(push_all(node, [{"queue": "fk", "partition": "p",
                                    "transactionId": "t%d" % i,
                                    "payload": b'{"i":%d}' % i}])) == 1
    log = lake.broker_log(node, "fk", ["p"])
    rec = [("p", o, log.records[("p", o)][1], log.records[("p", o)][0],
            log.records[("p", o)][2]) for o in range(3)]
    ts = [r[3] for r in rec]
    # window 1 holds offset 0, window 2 nothing, window 3 offset 2 only;
    # offset 1 (stamped in window 2 or 3's span) is in no window
    windows = [(ts[0], ts[0] + 1, [rec[0]]), (ts[0] + 1, ts[2], []),
               (ts[2], ts[2] + 1, [rec[2]])]
    c = bucket.boto3()
    lake.make_lake(lambda k, body: c.put_object(Bucket="lake", Key=k,
                                                Body=body),
                   PREFIX, TENANT, "fk", windows)
    for args in ((), ("--from-k", "2")):
        rc, out = verify_json(bucket, "--queue", "fk", "--broker", url(node),
                              *args)
        assert rc == 1, (args, out)
        v = out["queues"][0]["violations"]
        assert any("record p/1 is in the log, not in the lake" in x
                   for x in v), (args, v)


def test_switch_flags_take_true_or_false(bucket):
    """--path-style=false turns off QUEEN_S3_PATH_STYLE; a value that is
    not a boolean is refused."""
    small_lake(bucket, "sw")
    p = tool(bucket, "verify", "--queue", "sw", "--json=false", check=0)
    assert not p.stdout.lstrip().startswith("{"), p.stdout
    p = tool(bucket, "verify", "--queue", "sw", "--json=maybe", check=2)
    assert "--json=maybe is not a boolean" in p.stderr, p.stderr
    # path style off over QUEEN_S3_PATH_STYLE: the bucket's virtual host
    # does not resolve here
    p = tool(bucket, "verify", "--queue", "sw", "--path-style=false",
             path_style=False, env={"QUEEN_S3_PATH_STYLE": "true"}, check=2)
    assert "--path-style addresses it as" in p.stderr, p.stderr


def test_a_broker_url_with_a_password_is_refused_unprinted(bucket):
    small_lake(bucket, "pw")
    for cmd, flag in (("verify", "--broker"), ("restore", "--to")):
        p = tool(bucket, cmd, "--queue", "pw", flag,
                 "http://admin:hunter2@127.0.0.1:1", check=2)
        assert "hunter2" not in p.stdout + p.stderr, p
        assert "%s: a user or password in the URL is not taken" % flag \
            in p.stderr, p.stderr


def test_a_state_file_of_another_restore_is_refused(bucket, broker_factory,
                                                    tmp_path):
    """--state belongs to one restore (lake, queue, broker): another's is
    refused, not resumed past windows it never pushed."""
    small_lake(bucket, "st1")
    small_lake(bucket, "st2", n=5)
    dst = broker_factory()
    state = str(tmp_path / "state")
    p = tool(bucket, "restore", "--queue", "st1", "--to", url(dst),
             "--state", state, "--json", check=0)
    assert json.loads(p.stdout)["queued"] == 3
    p = tool(bucket, "restore", "--queue", "st2", "--to", url(dst),
             "--state", state, "--json", check=2)
    assert "is not this restore's" in json.loads(p.stdout)["error"], p
    assert dst.fetch_one("st2", "p", 0).get("highWatermark", 0) == 0
    # a file that is not a state file is refused the same way
    with open(state, "w") as f:
        f.write("k 10\n")
    p = tool(bucket, "restore", "--queue", "st1", "--to", url(dst),
             "--state", state, check=2)
    assert "is not this restore's" in p.stderr, p.stderr


def test_objects_a_violation_left_unread_are_not_orphans(bucket):
    """A window stops at its first bad object; the objects after it are
    still named by its manifest, so they are not orphans."""
    t0 = st.T0
    recs = [("a", 0, "t0", t0 + 1, b"1"), ("b", 0, "t1", t0 + 2, b"2"),
            ("c", 0, "t2", t0 + 3, b"3")]
    c = bucket.boto3()
    ms = lake.make_lake(lambda key, body: c.put_object(Bucket="lake",
                                                       Key=key, Body=body),
                        PREFIX, TENANT, "pp", [(t0, t0 + 100, recs)],
                        layout="per-partition")
    keys = [o["key"] for o in ms[0]["objects"]]
    assert len(keys) == 3
    c.put_object(Bucket="lake", Key=keys[0], Body=b"damaged")
    rc, out = verify_json(bucket, "--queue", "pp")
    assert rc == 1, out
    v = out["queues"][0]["violations"]
    assert any(x.startswith("window 1: %s: " % keys[0]) for x in v), v
    assert not any("no manifest names it" in x for x in v), v


def test_an_unreadable_manifest_is_one_violation_not_a_tiling_one(bucket):
    """A manifest that is not JSON is its own violation; the next window is
    not said to miss the tEnd it never gave."""
    small_lake(bucket, "unj")
    key = lake.manifest_key(PREFIX, TENANT, "unj", 2)
    bucket.boto3().put_object(Bucket="lake", Key=key, Body=b"not json")
    rc, out = verify_json(bucket, "--queue", "unj")
    assert rc == 1, out
    v = out["queues"][0]["violations"]
    assert v[0].startswith("window 2: %s: " % key), v
    assert not any("do not tile" in x for x in v), v


@pytest.mark.parametrize("damage", ["not_json", "over_64_mib"])
def test_an_unreadable_manifest_is_its_windows_one_violation(bucket, damage):
    """A manifest in the bucket that cannot be read (not JSON, or over the
    64 MiB a manifest may hold) is one violation naming its window and
    key, and the rest of the lake is still checked: its objects are not
    called orphans (they sit where its window's are) and its checkpoint is
    not checked against a tEnd it never gave."""
    queue = "unread-" + damage
    small_lake(bucket, queue, n=4, checkpoint_every=1)
    key = lake.manifest_key(PREFIX, TENANT, queue, 2)
    body = b"not json" if damage == "not_json" else \
        b"{" + b" " * (64 << 20)
    bucket.boto3().put_object(Bucket="lake", Key=key, Body=body)
    p = tool(bucket, "verify", "--queue", queue, "--json", timeout=120)
    assert p.returncode == 1, p.stderr
    (q,) = json.loads(p.stdout)["queues"]
    v = q["violations"]
    assert len(v) == 1 and v[0].startswith("window 2: %s: " % key), v
    if damage == "over_64_mib":
        assert "over the 64 MiB a manifest may hold" in v[0], v
    assert q["records"] == 3 and q["windows"] == 4, q  # 1, 3 and 4 read


class OtherServer:
    """An HTTP server on 127.0.0.1 that is not queen: every POST gets a 404
    and a web server's HTML error page, with CR LF line ends, a tab, a
    byte that is not UTF-8 and more than a line's worth of text."""

    PAGE = (b"<html>\r\n<head><title>404 Not Found</title></head>\r\n"
            b"<body>\r\n\t<center><h1>404 Not Found</h1></center>\r\n"
            b"<hr><center>nginx \xff</center>\r\n" + b"<!-- pad -->" * 40 +
            b"\r\n</body>\r\n</html>\r\n")

    def __enter__(self):
        import http.server
        import threading
        page = self.PAGE

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_POST(self):
                self.rfile.read(int(self.headers.get("Content-Length", 0)))
                self.send_response(404)
                self.send_header("Content-Type", "text/html")
                self.send_header("Content-Length", str(len(page)))
                self.end_headers()
                self.wfile.write(page)

            def log_message(self, *args):
                pass

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0),
                                                      Handler)
        self.url = "http://127.0.0.1:%d" % self.server.server_address[1]
        self.thread = threading.Thread(target=self.server.serve_forever,
                                       daemon=True)
        self.thread.start()
        return self

    def __exit__(self, *exc):
        self.server.shutdown()
        self.server.server_close()
        self.thread.join(timeout=10)


def test_a_broker_url_that_is_not_queen_gives_a_one_line_reason(bucket):
    """--broker or --to naming a web server that answers its HTML error
    page: exit 2 with one line that names the status and quotes the first
    bytes of the page as one escaped, bounded string, not the page's
    lines."""
    small_lake(bucket, "other")
    with OtherServer() as other:
        for cmd, flag in (("verify", "--broker"), ("restore", "--to")):
            p = tool(bucket, cmd, "--queue", "other", "--json", flag,
                     other.url, timeout=120)
            assert p.returncode == 2, (cmd, p)
            err = json.loads(p.stdout)["error"]
            assert p.stderr.splitlines() == [p.stderr.rstrip("\n")], \
                (cmd, p.stderr)
            assert err in p.stderr, (cmd, p)
            assert "answered 404: " in err, (cmd, err)
            assert '"<html>\\r\\n<head><title>404 Not Found</title>' in err, \
                (cmd, err)
            assert "\\t<center>" in err and err.endswith('"...'), (cmd, err)
            assert len(err) < 250 and not any(
                ord(ch) < 0x20 or ord(ch) == 0x7f for ch in err), (cmd, err)


def test_verify_help_and_a_token_without_a_broker(bucket):
    p = tool(bucket, "verify", "--help", check=0)
    assert p.stdout.startswith("usage: queen lake verify"), p
    p = tool(bucket, "verify", "--token", "secret-token-xyz", check=2)
    assert "--token is sent to --broker only" in p.stderr, p.stderr
    assert "secret-token-xyz" not in p.stdout + p.stderr, p


def test_a_gap_partly_lost_names_only_what_is_not(bucket):
    """Offsets missing between two records, some of them in a lost range:
    the violation names the runs the lost ranges leave, not the whole
    gap."""
    t0 = st.T0
    windows = [(t0, t0 + 100, [("p", 0, "t0", t0 + 1, b"0")]),
               (t0 + 100, t0 + 200, [("p", 6, "t6", t0 + 101, b"6")])]
    c = bucket.boto3()
    lake.make_lake(lambda key, body: c.put_object(Bucket="lake", Key=key,
                                                  Body=body),
                   PREFIX, TENANT, "partlost", windows,
                   lost={1: [{"partition": "p", "from": 2, "to": 3}]})
    rc, out = verify_json(bucket, "--queue", "partlost")
    assert rc == 1, out
    v = [x for x in out["queues"][0]["violations"] if "neither" in x]
    assert len(v) == 2, v
    assert "offsets 1..1 are neither in the lake nor lost" in v[0], v
    assert "offsets 4..5 are neither in the lake nor lost" in v[1], v


def test_names_with_nul_and_control_bytes_are_verified_and_shown(bucket):
    """Queue and partition names are any bytes, NUL included: the queue
    found by listing is the whole name (not one cut at its NUL, which here
    is another queue), the JSON names it exactly, and a message or the
    human summary shows a name with a control byte as a JSON string."""
    t0 = st.T0
    odd, plain = "nul\x00q", "nul"
    for queue, part in ((odd, "p\x00x"), (plain, "p")):
        windows = [(t0, t0 + 100, [(part, 0, "t0", t0 + 1, b"0"),
                                   (part, 1, "t1", t0 + 2, b"1")]),
                   (t0 + 100, t0 + 200, [(part, 4, "t4", t0 + 101, b"4")])]
        c = bucket.boto3()
        lake.make_lake(lambda key, body: c.put_object(Bucket="lake", Key=key,
                                                      Body=body),
                       PREFIX, TENANT, queue, windows,
                       lost={2: [{"partition": part, "from": 2, "to": 2}]})
    rc, out = verify_json(bucket)
    assert rc == 1, out
    byname = {q["queue"]: q for q in out["queues"]}
    assert sorted(byname) == sorted([odd, plain]), out
    for queue, part in ((odd, "p\x00x"), (plain, "p")):
        q = byname[queue]
        assert q["records"] == 3 and q["windows"] == 2, q
        assert q["lost"] == [{"k": 2, "partition": part, "from": 2,
                              "to": 2}], q
        v = q["violations"]
        assert len(v) == 1, v
        shown = '"p\\u0000x"' if part != "p" else "p"
        assert ("partition %s: offsets 3..3 are neither in the lake nor lost"
                % shown) in v[0], v
    p = tool(bucket, "verify", check=1)
    assert 'queue "nul\\u0000q": VIOLATIONS' in p.stdout, p.stdout
    assert "queue nul: VIOLATIONS" in p.stdout, p.stdout
    assert 'partition "p\\u0000x" offsets 2..2' in p.stdout, p.stdout
    assert "\x00" not in p.stdout + p.stderr, p


def test_a_window_with_a_violation_adds_no_other(bucket, broker_factory):
    """A damaged record stops its window, whose records are then not
    folded: what later windows or the log say of the offsets it held is that
    window's violation, not more of them (before: each partition of it
    also had a gap in the next window, and one it alone named was counted
    among the broker's only, its records "in the log, not in the lake")."""
    node = broker_factory()
    rounds = [[("a", 3)], [("a", 3), ("b", 2), ("d", 1), ("z", 1)],
              [("a", 2), ("b", 1), ("z", 1)]]
    for n, shape in enumerate(rounds):
        push_all(node, [{"queue": "wq", "partition": p, "transactionId":
                         "w%d-%s-%d" % (n, p, i), "payload": b'{"i":%d}' % i}
                        for p, count in shape for i in range(count)])
    log = lake.broker_log(node, "wq", ["a", "b", "d", "z"])
    by_round, seen = [], set()
    for n in range(len(rounds)):
        keys = {k for k, v in log.records.items()
                if v[1].startswith("w%d-" % n)} - seen
        seen |= keys
        by_round.append(sorted(((p, o, log.records[(p, o)][1],
                                 log.records[(p, o)][0],
                                 log.records[(p, o)][2]) for p, o in keys),
                               key=lambda r: (r[0].encode(), r[1])))
    # window 2's last record, z/0, is cut short, the manifest to match
    by_round[1] = [r if (r[0], r[1]) != ("z", 0) else
                   r[:4] + (b'{"i":',) for r in by_round[1]]
    edges = [min(r[3] for r in recs) for recs in by_round]
    windows = [(edges[i], edges[i + 1] if i + 1 < len(edges) else
                max(r[3] for r in recs) + 1, recs)
               for i, recs in enumerate(by_round)]
    c = bucket.boto3()
    lake.make_lake(lambda key, body: c.put_object(Bucket="lake", Key=key,
                                                  Body=body),
                   PREFIX, TENANT, "wq", windows)
    for extra in ((), ("--broker", url(node))):
        rc, out = verify_json(bucket, "--queue", "wq", *extra)
        (q,) = out["queues"]
        assert rc == 1 and q["violationCount"] == 1, (extra, out)
        assert q["violations"][0].startswith("window 2: ") and \
            "payload is not JSON" in q["violations"][0], (extra, q)
        # d is in window 2 alone, before the damage
        assert q["partitions"] == 4 and q["brokerOnlyPartitions"] == 0, \
            (extra, q)


def test_a_record_missing_after_the_last_names_its_windows_manifest(logged):
    """A partition's last record deleted from the lake (manifest to match):
    with --broker it is "in the log, not in the lake", named with the
    window whose span holds its stamp and that window's manifest."""
    b, node, windows, acked, log = logged
    w = copy.deepcopy(windows)
    p = st.PARTITIONS[0]
    j = max(i for i, win in enumerate(w) if any(r[0] == p for r in win[2]))
    last = max((r for r in w[j][2] if r[0] == p), key=lambda r: r[1])
    w[j][2].remove(last)
    put_lake(b, "tail", w)
    ours = first_violation(b, "tail", node)
    assert ours.startswith("window %d: %s: record %s/%d is in the log, not "
                           "in the lake" % (j + 1, lake.manifest_key(
                               "tail", TENANT, QUEUE, j + 1), p, last[1])), \
        ours


def two_partition_lake(bucket, queue, **kw):
    """Two windows of queue, one record in each of partitions a and b in
    each, written with make_lake (kw: its options); the boto3 client."""
    t0 = st.T0
    windows = [(t0 + k * 100, t0 + (k + 1) * 100,
                [(p, k, "t-%s-%d" % (p, k), t0 + k * 100 + 1, b"1")
                 for p in ("a", "b")]) for k in range(2)]
    c = bucket.boto3()
    lake.make_lake(lambda key, body: c.put_object(Bucket="lake", Key=key,
                                                  Body=body),
                   PREFIX, TENANT, queue, windows, **kw)
    return c


@pytest.mark.parametrize("damage", ["unsorted", "duplicate"])
def test_checkpoint_positions_out_of_order_or_twice_are_refused(bucket,
                                                                damage):
    """A checkpoint's positions are sorted by partition name, one each
    (docs/design/formats.md §4): two swapped, or one written twice, with
    the offsets still right, are a violation naming the checkpoint."""
    queue = "cp-" + damage
    c = two_partition_lake(bucket, queue, checkpoint_every=1)
    rc, out = verify_json(bucket, "--queue", queue, check=0)
    key = lake.checkpoint_key(PREFIX, TENANT, queue, 1)
    doc = json.loads(lake.decompress(
        c.get_object(Bucket="lake", Key=key)["Body"].read(), "zstd", key))
    assert doc["positions"] == [["a", 1], ["b", 1]], doc
    doc["positions"] = doc["positions"][::-1] if damage == "unsorted" else \
        doc["positions"][:1] + doc["positions"]
    c.put_object(Bucket="lake", Key=key,
                 Body=lake.compress(lake.compact(doc), "zstd"))
    rc, out = verify_json(bucket, "--queue", queue)
    assert rc == 1 and out["queues"][0]["violations"] == [
        "window 1: %s: positions are not sorted by partition, once each"
        % key], out


@pytest.mark.parametrize("damage", ["unsorted", "duplicate"])
def test_manifest_positions_out_of_order_or_twice_are_refused(bucket,
                                                              damage):
    """A manifest's positions are sorted by partition name, one each, as a
    checkpoint's are (docs/design/formats.md §3): two swapped, or one
    written twice, are a violation naming the manifest, and restore stops
    there."""
    queue = "mpos-" + damage
    c = two_partition_lake(bucket, queue)
    key = lake.manifest_key(PREFIX, TENANT, queue, 1)
    m = json.loads(c.get_object(Bucket="lake", Key=key)["Body"].read())
    m["positions"] = [["a", 1], ["b", 1]]
    c.put_object(Bucket="lake", Key=key, Body=lake.compact(m))
    verify_json(bucket, "--queue", queue, check=0)  # sorted, once each
    m["positions"] = [["b", 1], ["a", 1]] if damage == "unsorted" else \
        [["a", 1], ["a", 1], ["b", 1]]
    c.put_object(Bucket="lake", Key=key, Body=lake.compact(m))
    why = "window 1: %s: positions are not sorted by partition, once each" \
        % key
    rc, out = verify_json(bucket, "--queue", queue)
    assert rc == 1 and out["queues"][0]["violations"] == [why], out
    p = tool(bucket, "restore", "--queue", queue, "--to",
             "http://127.0.0.1:1", "--json", check=2)
    assert json.loads(p.stdout)["error"].startswith(why), p.stdout


def test_a_checkpoint_past_the_last_manifest_is_named_by_its_key(bucket):
    small_lake(bucket, "cp-past")
    key = lake.checkpoint_key(PREFIX, TENANT, "cp-past", 5)
    bucket.boto3().put_object(Bucket="lake", Key=key, Body=b"x")
    rc, out = verify_json(bucket, "--queue", "cp-past")
    assert rc == 1, out
    assert out["queues"][0]["violations"] == [
        "window 5: %s: checkpoint of window 5, which has no manifest"
        % key], out


def test_restore_state_is_written_first_and_a_rerun_says_nothing_to_do(
        bucket, broker_factory, tmp_path):
    """An unwritable --state stops restore before its first push; a
    finished restore run again says there is nothing to restore (not
    "windows 4..3"); a flag given where a value is due is refused."""
    small_lake(bucket, "sw")
    dst = broker_factory()
    bad = str(tmp_path / "no-such-dir" / "state")
    p = tool(bucket, "restore", "--queue", "sw", "--to", url(dst),
             "--state", bad, check=2)
    assert "no-such-dir" in p.stderr, p.stderr
    assert dst.fetch_one("sw", "p", 0).get("highWatermark", 0) == 0
    state = str(tmp_path / "state")
    tool(bucket, "restore", "--queue", "sw", "--to", url(dst), "--state",
         state, check=0)
    p = tool(bucket, "restore", "--queue", "sw", "--to", url(dst), "--state",
             state, check=0)
    assert p.stdout.startswith("nothing to restore: --state %s says windows "
                               "up to 3 of sw are in sw" % state), p.stdout
    p = tool(bucket, "verify", "--queue", "--json", check=2)
    assert "--queue needs a value, not the flag --json" in p.stderr, p.stderr
    assert p.stdout == "", p.stdout
    p = tool(bucket, "restore", "--queue", "sw", "--to", "--token=s3cr3t",
             check=2)
    assert "not the flag --token " in p.stderr and \
        "s3cr3t" not in p.stderr, p.stderr


def test_the_broker_does_not_excuse_a_gap_it_trimmed(bucket, broker_factory):
    """A gap in the lake is a violation from the bucket alone; --broker
    adds checks and takes none away, so a gap whose records the broker's
    retention has since trimmed (below logStartOffset) is still one."""
    node = broker_factory()
    r = node.request("POST", "/api/v1/configure", body={
        "queue": "rq", "options": {"retentionEnabled": True,
                                   "retentionSeconds": 1}})
    assert r.status == 200, r
    push_all(node, [{"queue": "rq", "partition": "p", "transactionId":
                     "r%d" % i, "payload": b'{"i":%d}' % i} for i in range(4)])
    first = node.fetch_one("rq", "p", 0)["records"][0]

    def trimmed():
        push_all(node, [{"queue": "rq", "partition": "p", "payload": b"4"}])
        e = node.fetch_one("rq", "p", 0)
        return e["logStartOffset"] >= 4 and e

    e = wait_until(trimmed, 30, "retention trims offsets 0..3")
    last = node.fetch_one("rq", "p", e["logStartOffset"])["records"][0]
    recs = [("p", x["offset"], x["transactionId"],
             lake.parse_iso_us(x["ts"]), json.dumps(
                 x["payload"], separators=(",", ":")).encode())
            for x in (first, last)]
    c = bucket.boto3()
    lake.make_lake(lambda key, body: c.put_object(Bucket="lake", Key=key,
                                                  Body=body),
                   PREFIX, TENANT, "rq", [(recs[0][3], recs[1][3] + 1, recs)])
    gap = "offsets 1..%d are neither in the lake nor lost" % (last["offset"] - 1)
    for extra in ((), ("--broker", url(node))):
        rc, out = verify_json(bucket, "--queue", "rq", *extra)
        v = out["queues"][0]["violations"]
        assert rc == 1 and len(v) == 1 and gap in v[0], (extra, out)


def test_a_broker_url_that_is_not_http_is_refused_at_once(bucket):
    for flag, cmd in (("--to", ["restore", "--queue", "q"]),
                      ("--broker", ["verify"])):
        # the last three only curl's parser refuses: they were retried
        # for about 30 s
        for u in ("file:///etc/passwd", "not a url", "", "gopher://h:1",
                  "http://", "http://[::1", "http://127.0.0.1:99999",
                  "http://127.0.0.1:65536/"):
            p = tool(bucket, *cmd, flag, u, check=2, timeout=20)
            assert "%s must be a broker's http:// or https:// URL" % flag \
                in p.stderr, (u, p.stderr)


def test_a_key_the_sink_never_spells_is_no_queue(bucket):
    """Discovery takes a queue only from keys spelled as the sink escapes
    names: "queue=%61bc" (not how "abc" is written) or "queue=%ZZ" is no
    queue, and the real ones are still verified."""
    small_lake(bucket, "zgood")
    c = bucket.boto3()
    body = c.get_object(Bucket="lake", Key=lake.manifest_key(
        PREFIX, TENANT, "zgood", 1))["Body"].read()
    for odd in ("%61bc", "%ZZ"):
        c.put_object(Bucket="lake", Body=body, Key="%s/_queen/tenant=%s/"
                     "queue=%s/windows/0000000001.json" % (PREFIX, TENANT, odd))
    rc, out = verify_json(bucket, check=0)
    assert [q["queue"] for q in out["queues"]] == ["zgood"], out


def test_the_json_document_stays_utf8(bucket):
    """Bytes that are not UTF-8 (a damaged lake's key, the command line)
    never make the --json document invalid: they come out as '?'."""
    small_lake(bucket, "u8")
    c = bucket.boto3()
    body = c.get_object(Bucket="lake", Key=lake.manifest_key(
        PREFIX, TENANT, "u8", 1))["Body"].read()
    c.put_object(Bucket="lake", Body=body, Key="%s/_queen/tenant=%s/"
                 "queue=%%FF/windows/0000000001.json" % (PREFIX, TENANT))
    env = dict(os.environ, **CREDS)
    for args in (["--json"], ["--json", "--queue", b"bad\xff".decode(
            "utf-8", "surrogateescape")]):
        p = subprocess.run(
            [queen_bin(), "lake", "verify", "--endpoint", bucket.endpoint,
             "--bucket", "lake", "--path-style", *args], env=env,
            capture_output=True, timeout=60)
        out = json.loads(p.stdout.decode("utf-8"))  # strict: raises if not
        assert p.returncode in (1, 2), (p.returncode, out)
        assert "?" in json.dumps(out, ensure_ascii=False), out


def test_state_of_the_same_broker_with_a_trailing_slash_resumes(
        bucket, broker_factory, tmp_path):
    small_lake(bucket, "ts")
    dst = broker_factory()
    state = str(tmp_path / "state")
    tool(bucket, "restore", "--queue", "ts", "--to", url(dst), "--state",
         state, check=0)
    p = tool(bucket, "restore", "--queue", "ts", "--to", url(dst) + "/",
             "--state", state, check=0)
    assert p.stdout.startswith("nothing to restore"), p.stdout


def test_a_lost_range_must_hold_no_record_and_be_a_range(bucket):
    """The sink lists lost only offsets it could not read: a lost range
    over a record the lake holds is a violation (as in the tests'
    verifier), and so is one that is no range of offsets."""
    t0 = st.T0
    windows = [(t0, t0 + 100, [("p", 0, "t0", t0 + 1, b"0"),
                               ("p", 1, "t1", t0 + 2, b"1")]),
               (t0 + 100, t0 + 200, [("p", 4, "t4", t0 + 101, b"4")])]
    c = bucket.boto3()
    put = (lambda key, body: c.put_object(Bucket="lake", Key=key, Body=body))
    lake.make_lake(put, PREFIX, TENANT, "lostover", windows,
                   lost={2: [{"partition": "p", "from": 1, "to": 3}]})
    rc, out = verify_json(bucket, "--queue", "lostover")
    assert rc == 1 and out["queues"][0]["violations"] == [
        "window 2: %s: partition p: lost range 1..3 holds offset 1, which "
        "is in the lake" % lake.manifest_key(PREFIX, TENANT, "lostover", 2)
    ], out
    for name, bad in (("lostneg", (-2, 3)), ("lostback", (3, 2))):
        lake.make_lake(put, PREFIX, TENANT, name, windows,
                       lost={2: [{"partition": "p", "from": bad[0],
                                  "to": bad[1]}]})
        rc, out = verify_json(bucket, "--queue", name)
        v = out["queues"][0]["violations"]
        assert rc == 1 and v[0] == (
            "window 2: %s: lost range p %d..%d is not a range of offsets"
            % (lake.manifest_key(PREFIX, TENANT, name, 2), bad[0], bad[1])), v


def test_a_restore_that_found_no_lake_says_toK_null(bucket, broker_factory):
    dst = broker_factory()
    p = tool(bucket, "restore", "--queue", "none-here", "--to", url(dst),
             "--json", check=2)
    out = json.loads(p.stdout)
    assert out["toK"] is None and out["ok"] is False and \
        "no manifest" in out["error"], out


def test_a_changed_transaction_id_names_its_record(logged):
    """--broker names the record whose transactionId differs, and both
    ids: each name printed from a buffer of its own."""
    b, node, windows, acked, log = logged
    w = copy.deepcopy(windows)
    st.damage_txn(w)
    (was, now), = [(r0, r1) for w0, w1 in zip(windows, w)
                   for r0, r1 in zip(w0[2], w1[2]) if r0 != r1]
    put_lake(b, "txn-named", w)
    ours = first_violation(b, "txn-named", node)
    assert "record %s/%d has transactionId %s, the broker's log says %s" % (
        now[0], now[1], now[2], was[2]) in ours, ours


def test_a_lake_the_sink_started_at_latest_is_exact(bucket, broker_factory):
    """QUEEN_S3_START=latest (the default): the records that created the
    queue are older than the first window and not in the lake, so each
    partition's first offset there is above 0. The bucket does not say
    where the sink started, so that is no gap; the log agrees."""
    node = broker_factory(env=sink_env(bucket, QUEEN_S3_QUEUES="late",
                                       QUEEN_S3_START="latest"))
    before = push_all(node, [{"queue": "late", "partition": "p-%d" % (i % 2),
                              "payload": b'{"i":%d}' % i} for i in range(4)])
    assert sorted(o for _, o, _, _ in before) == [0, 0, 1, 1]
    reader = lake.bucket_reader(bucket)
    wait_until(lambda: (sink_row(node, "late") or {}).get("state") ==
               "filling", 30, "the sink reads late")
    after = push_all(node, [{"queue": "late", "partition": "p-%d" % (i % 2),
                             "payload": b'{"i":%d}' % i} for i in range(4, 10)])
    wait_until(lambda: lake.count_records(reader, PREFIX, TENANT, "late")
               == len(after), 60, "the records after the start in the lake",
               interval=0.1)
    for extra in ((), ("--broker", url(node))):
        rc, out = verify_json(bucket, "--queue", "late", *extra)
        (q,) = out["queues"]
        assert rc == 0 and q["exact"] and q["records"] == len(after), \
            (extra, out)


def test_a_partitions_first_record_deleted_is_found_by_the_broker(logged):
    """A partition's first record in the lake deleted (manifest to match):
    from the bucket alone that is where the sink may have started it, so
    only --broker, whose log holds it stamped inside window 1, names it."""
    b, node, windows, acked, log = logged
    w = copy.deepcopy(windows)
    p = st.PARTITIONS[0]
    first = min((r for r in w[0][2] if r[0] == p), key=lambda r: r[1])
    assert first[1] == 0
    w[0][2].remove(first)
    put_lake(b, "head", w)
    rc, out = verify_json(b, "--prefix", "head", "--queue", QUEUE, check=0)
    assert out["queues"][0]["exact"], out
    ours = first_violation(b, "head", node)
    assert "record %s/0 is in the log, not in the lake" % p in ours, ours


def test_a_window_starting_on_the_hour_after_an_idle_stretch_is_no_gap(
        bucket):
    """An aligned queue idle across hh:00: window 1 closed by age at 00:10,
    the sink stepped over the empty rest of the hour, and window 2 starts
    at 01:00 (docs/design/window.md rule 6). That is the sink's lake, and
    verify passes it; a gap that ends off the hour is still a violation,
    named as one."""
    hour = 3600 * 10**6
    t0 = st.T0  # 00:00:00
    for queue, start2 in (("idle.hour", t0 + hour),
                          ("idle.off", t0 + hour + 1)):
        windows = [
            (t0, t0 + 600 * 10**6,
             [("p", 0, "a", t0 + 1, b'{"n":0}')]),
            (start2, start2 + 5 * 10**6,
             [("p", 1, "b", start2 + 2, b'{"n":1}')]),
        ]
        c = bucket.boto3()
        lake.make_lake(lambda key, body: c.put_object(Bucket="lake", Key=key,
                                                      Body=body),
                       PREFIX, TENANT, queue, windows, align="hour")
    rc, out = verify_json(bucket, "--prefix", PREFIX, "--queue", "idle.hour")
    assert rc == 0, out
    assert out["queues"][0]["exact"] is True, out
    rc, out = verify_json(bucket, "--prefix", PREFIX, "--queue", "idle.off")
    assert rc == 1, out
    assert any("windows 1 and 2 do not tile" in v
               for v in out["queues"][0]["violations"]), out


def test_a_state_file_never_claims_a_window_no_run_pushed(
        bucket, broker_factory, tmp_path):
    """--state FILE says `k K` only when windows 1..K were all pushed: a
    run with --from-k past K + 1 is refused (exit 2, naming the windows it
    would skip) rather than moving K over them, and the next run without
    --from-k still pushes the window in between. A new file starts at the
    first run's --from-k, and that same command resumes it."""
    small_lake(bucket, "stgap")
    dst = broker_factory()
    state = str(tmp_path / "state")
    base = ("restore", "--queue", "stgap", "--to", url(dst), "--state", state)
    tool(bucket, *base, "--to-k", "1", check=0)
    p = tool(bucket, *base, "--from-k", "3", "--json", check=2)
    err = json.loads(p.stdout)["error"]
    assert "would skip window 2" in err and "--from-k 2" in err, err
    assert dst.fetch_one("stgap", "p", 0).get("highWatermark", 0) == 1
    with open(state) as f:
        assert f.read().startswith("k 1 "), state
    p = tool(bucket, *base, "--json", check=0)
    doc = json.loads(p.stdout)
    assert (doc["fromK"], doc["toK"], doc["queued"]) == (2, 3, 2), doc
    assert dst.fetch_one("stgap", "p", 0).get("highWatermark", 0) == 3
    new = str(tmp_path / "new")
    again = ("restore", "--queue", "stgap", "--to", url(dst), "--as",
             "stgap2", "--state", new, "--from-k", "2", "--to-k", "2")
    tool(bucket, *again, check=0)
    with open(new) as f:
        assert f.read().startswith("k 2 "), new
    p = tool(bucket, *again, check=0)
    assert p.stdout.startswith("nothing to restore"), p.stdout


def test_restore_stops_at_a_window_verify_calls_damaged(bucket,
                                                        broker_factory):
    """A window that does not read cleanly stops restore (exit 2, naming
    the window): records of a partition out of offset order (pushed as
    they were, they would reach the broker out of order), a manifest with
    a key twice, and windows whose bounds overlap."""
    t0 = st.T0
    c = bucket.boto3()

    def put(queue, windows):
        lake.make_lake(lambda key, body: c.put_object(Bucket="lake", Key=key,
                                                      Body=body),
                       PREFIX, TENANT, queue, windows)

    put("unsorted", [(t0, t0 + 100, [
        ("p", o, "t%d" % o, t0 + 1 + o, b'{"o":%d}' % o) for o in (0, 3, 1)])])
    put("overlap", [(t0, t0 + 100, [("p", 0, "t0", t0 + 1, b"1")]),
                    (t0 + 50, t0 + 150, [("p", 1, "t1", t0 + 120, b"2")])])
    small_lake(bucket, "dupkey", n=2)
    mkey = lake.manifest_key(PREFIX, TENANT, "dupkey", 2)
    body = c.get_object(Bucket="lake", Key=mkey)["Body"].read()
    assert b'"k":2,' in body
    c.put_object(Bucket="lake", Key=mkey,
                 Body=body.replace(b'"k":2,', b'"k":2,"k":2,', 1))
    dst = broker_factory()
    for queue, k, why in (
            ("unsorted", 1, "record p/1 is not sorted after the one before"),
            ("overlap", 2, "windows 1 and 2 do not tile"),
            ("dupkey", 2, "not compact JSON")):
        tool(bucket, "verify", "--queue", queue, check=1)
        p = tool(bucket, "restore", "--queue", queue, "--to", url(dst),
                 "--json", check=2)
        err = json.loads(p.stdout)["error"]
        assert err.startswith("window %d: " % k) and why in err, (queue, err)


def test_a_restore_decode_error_names_its_window_and_key(bucket,
                                                         broker_factory):
    """An object that does not decode (its manifest's sha256 made to match
    it) stops restore with one line: window K: <key>: <reason>."""
    small_lake(bucket, "trunc", n=2)
    c = bucket.boto3()
    mkey = lake.manifest_key(PREFIX, TENANT, "trunc", 2)
    m = json.loads(c.get_object(Bucket="lake", Key=mkey)["Body"].read())
    key = m["objects"][0]["key"]
    body = c.get_object(Bucket="lake", Key=key)["Body"].read()[:-3]
    c.put_object(Bucket="lake", Key=key, Body=body)
    raw = c.get_object(Bucket="lake", Key=mkey)["Body"].read().replace(
        m["objects"][0]["sha256"].encode(),
        lake.hashlib.sha256(body).hexdigest().encode())
    c.put_object(Bucket="lake", Key=mkey, Body=raw)
    dst = broker_factory()
    p = tool(bucket, "restore", "--queue", "trunc", "--to", url(dst),
             check=2)
    line = [x for x in p.stderr.splitlines() if "zstd" in x]
    assert len(line) == 1 and ("window 2: %s: " % key) in line[0], p.stderr


def test_a_payload_nested_as_deep_as_push_allows_is_verified(
        bucket, broker_factory):
    """The broker takes a payload nested 125 levels deep (push refuses
    126); its fetch answer wraps it two levels deeper than a push body
    does, and verify --broker must still read that answer."""
    queue = "deep"
    node = broker_factory(env=sink_env(bucket, QUEEN_S3_QUEUES=queue))
    items = [{"queue": queue, "partition": "p",
              "payload": b"[" * n + b"1" + b"]" * n} for n in (124, 125)]
    assert len(push_all(node, items)) == 2
    reader = lake.bucket_reader(bucket)
    wait_until(lambda: lake.count_records(reader, PREFIX, TENANT, queue)
               == 2, 60, "both in the lake", interval=0.1)
    r = node.request("POST", "/api/v1/push", body=lake.push_body(
        [{"queue": queue, "partition": "p",
          "payload": b"[" * 126 + b"1" + b"]" * 126}]))
    assert r.status != 201 or "error" in r.body.decode(), r
    rc, out = verify_json(bucket, "--queue", queue, "--broker", url(node))
    assert rc == 0, out


def test_a_stray_manifest_with_a_huge_k_is_one_gap_found_at_once(bucket):
    """A manifest copied to k=9999999999 in a 4-window lake: verify finds
    the manifests that exist from the listing, so the gap is one violation
    naming the range of missing windows, without a GET per missing k."""
    small_lake(bucket, "huge", n=4)
    c = bucket.boto3()
    src = lake.manifest_key(PREFIX, TENANT, "huge", 2)
    dst = lake.manifest_key(PREFIX, TENANT, "huge", 9999999999)
    c.put_object(Bucket="lake", Key=dst,
                 Body=c.get_object(Bucket="lake", Key=src)["Body"].read())
    p = tool(bucket, "verify", "--queue", "huge", "--json", timeout=60,
             check=1)
    (q,) = json.loads(p.stdout)["queues"]
    gaps = [v for v in q["violations"] if "without a gap" in v]
    assert len(gaps) == 1 and gaps[0].startswith("window 9999999999: %s: "
                                                 % dst), q["violations"]
    assert "windows 5..9999999998" in gaps[0], gaps
    assert any("not its own" in v for v in q["violations"]), q
    assert q["records"] == 4 and q["violationCount"] < 10, q


FORGER = "b\nqueue FAKE: exact"


def forger_lake(bucket, queue):
    """A hand-made lake of two windows whose partition FORGER's name holds
    a line break and a summary line; returns the boto3 client."""
    t0 = st.T0
    windows = [(t0 + k * 100, t0 + (k + 1) * 100,
                [(FORGER, k, "txn-%d" % k, t0 + k * 100 + 1,
                  b'{"k":%d}' % k)]) for k in range(2)]
    c = bucket.boto3()
    lake.make_lake(lambda key, body: c.put_object(Bucket="lake", Key=key,
                                                  Body=body),
                   PREFIX, TENANT, queue, windows)
    return c


def assert_no_forged_line(p, queue):
    """verify's human summary of a damaged lake: exit 1, and no text of the
    lake's ends a line early or reaches the terminal as a control."""
    assert p.returncode == 1, (p.stdout, p.stderr)
    for line in (p.stdout + p.stderr).splitlines():
        assert not line.startswith("queue FAKE") and \
            not line.startswith("queue %s: exact" % queue), p.stdout
    assert "\x1b" not in p.stdout + p.stderr, p.stdout


def test_text_of_a_damaged_lake_never_forges_a_summary_line(bucket):
    """A listed key and a manifest's partition name are the lake's text: a
    line break or an escape in either is shown, quoted or as '?', and
    never starts a line of the summary (a stray object named to look like
    "queue q: exact", a manifest's positions naming a partition whose name
    holds a line break)."""
    queue = "forge"
    c = forger_lake(bucket, queue)
    m1 = lake.manifest_key(PREFIX, TENANT, queue, 1)
    folder = json.loads(c.get_object(Bucket="lake", Key=m1)["Body"].read())[
        "objects"][0]["key"].rsplit("/", 1)[0]
    stray = folder + "/x\nqueue %s: exact\n  windows 1..9 \x1b[2K" % queue
    c.put_object(Bucket="lake", Key=stray, Body=b"x")
    p = tool(bucket, "verify", "--queue", queue)
    assert_no_forged_line(p, queue)
    assert "data object, but no manifest names it" in p.stdout, p.stdout
    c.delete_object(Bucket="lake", Key=stray)
    tool(bucket, "verify", "--queue", queue, check=0)

    doc = json.loads(c.get_object(Bucket="lake", Key=m1)["Body"].read())
    doc["positions"] = [[FORGER, 0]]  # not above its record, offset 0
    c.put_object(Bucket="lake", Key=m1, Body=lake.compact(doc))
    p = tool(bucket, "verify", "--queue", queue)
    assert_no_forged_line(p, queue)
    assert ('partition "b\\nqueue FAKE: exact" goes on at a position not '
            'above its records') in p.stdout, p.stdout


def test_a_record_repeated_from_the_window_before_is_one_violation(bucket):
    """Window 2 repeats window 1's last record of p at its head, its own
    records following: one violation, "in the lake twice". The offsets
    after the repeated one are in window 2, not missing as well."""
    t0 = st.T0
    rec = lambda o, t: ("p", o, "txn-%d" % o, t, b'{"o":%d}' % o)  # noqa
    windows = [(t0, t0 + 100, [rec(0, t0 + 1), rec(1, t0 + 2)]),
               (t0 + 100, t0 + 200, [rec(1, t0 + 101), rec(2, t0 + 102),
                                     rec(3, t0 + 103)]),
               (t0 + 200, t0 + 300, [rec(4, t0 + 201)])]
    c = bucket.boto3()
    lake.make_lake(lambda key, body: c.put_object(Bucket="lake", Key=key,
                                                  Body=body),
                   PREFIX, TENANT, "twice", windows)
    rc, doc = verify_json(bucket, "--queue", "twice", check=1)
    v = doc["queues"][0]["violations"]
    assert len(v) == 1 and "record p/1 is in the lake twice" in v[0], v
    assert doc["queues"][0]["violationCount"] == 1, doc


def one_long_record_under_1mib(bucket, queue, n, fmt):
    """A lake of queue whose second record is a string of n bytes of "a",
    beside a fine queue: exact under the default QUEEN_MAX_BODY_BYTES, one
    violation under 1 MiB (the fine queue still exact). (manifest, the
    queue's --json report under 1 MiB)."""
    t0 = st.T0
    big = b'"' + b"a" * n + b'"'
    recs = [("p", 0, "t0", t0 + 1, b'{"o":0}'), ("p", 1, "t1", t0 + 2, big)]
    small_lake(bucket, "fine", n=2)
    c = bucket.boto3()
    (m,) = lake.make_lake(lambda key, body: c.put_object(Bucket="lake",
                                                         Key=key, Body=body),
                          PREFIX, TENANT, queue, [(t0, t0 + 100, recs)],
                          fmt=fmt, compression="zstd")
    assert verify_json(bucket, "--queue", queue)[0] == 0
    p = tool(bucket, "verify", "--json", "--queue", queue, "--queue", "fine",
             env={"QUEEN_MAX_BODY_BYTES": "1MiB"})
    doc = json.loads(p.stdout)
    assert p.returncode == 1, p
    by = {q["queue"]: q for q in doc["queues"]}
    assert by["fine"]["exact"], doc
    assert by[queue]["violationCount"] == 1, by[queue]
    return m, by[queue]


def test_a_line_longer_than_any_record_is_a_violation_not_memory(bucket):
    """A line is one record, and a record came in a push body: a line longer
    than QUEEN_MAX_BODY_BYTES (as the broker reads it, 64 MiB unset) plus
    an envelope is a violation. Before, a line without LF grew a reader's
    buffer without end: a 96 KB zstd object took 3 GB per reader. Both the
    object decoded whole and the one streamed without a stated size meet
    the same bound."""
    import zstandard
    _, q = one_long_record_under_1mib(bucket, "long", 3 << 20, "jsonl")
    assert "line 2 runs past" in q["violations"][0], q
    assert "QUEEN_MAX_BODY_BYTES=1048576" in q["violations"][0], q
    p = tool(bucket, "verify", "--queue", "long",
             env={"QUEEN_MAX_BODY_BYTES": "lots"}, check=2)
    assert "QUEEN_MAX_BODY_BYTES=lots" in p.stderr, p.stderr
    # A stream of no stated size (streamed, 1 MiB at a time) with no LF.
    # The manifest is rewritten to match, so only the line is wrong.
    c = bucket.boto3()
    key = [o["Key"] for o in c.list_objects_v2(
        Bucket="lake", Prefix="%s/tenant=%s/queue=long/" % (PREFIX, TENANT))
        ["Contents"]][0]
    cctx = zstandard.ZstdCompressor(level=3, write_content_size=False)
    bomb = cctx.compressobj()
    body = b"".join([bomb.compress(b"a" * (1 << 20)) for _ in range(7)] +
                    [bomb.flush()])
    mkey = "%s/_queen/tenant=%s/queue=long/windows/0000000001.json" % (
        PREFIX, TENANT)
    man = json.loads(c.get_object(Bucket="lake", Key=mkey)["Body"].read())
    import hashlib
    for o in man["objects"]:
        o["bytes"] = len(body)
        o["sha256"] = hashlib.sha256(body).hexdigest()
    man["bytes"] = len(body)
    c.put_object(Bucket="lake", Key=key, Body=body)
    c.put_object(Bucket="lake", Key=mkey,
                 Body=json.dumps(man, separators=(",", ":")).encode())
    p = tool(bucket, "verify", "--json", "--queue", "long",
             env={"QUEEN_MAX_BODY_BYTES": "3MiB"})
    q = json.loads(p.stdout)["queues"][0]
    assert p.returncode == 1 and q["violationCount"] >= 1, p
    assert any("line 1 runs past" in v for v in q["violations"]), \
        q["violations"]


def test_a_parquet_object_decoding_past_its_bound_is_a_violation(bucket):
    """A Parquet page may declare up to 1 GiB and zstd compresses a run
    ~30,000:1, so a few kB can decode to GBs, all held at once. An object
    decoding to more than 1024 times its size and more than two of the
    longest records (QUEEN_MAX_BODY_BYTES) is a violation. A 12 MiB run of
    one byte is such an object under a 1 MiB body limit, and a fine one
    under the default 64 MiB."""
    m, q = one_long_record_under_1mib(bucket, "runs", 12 << 20, "parquet")
    assert m["bytes"] * 1024 < (12 << 20), m  # past the ratio: floor rules
    assert "decodes to more than %d bytes" % (4 * (1 << 20) + 2 * (64 << 10)) \
        in q["violations"][0], q
    assert m["objects"][0]["key"] in q["violations"][0], q


class NotQueen:
    """An HTTP server that answers every POST 200 with a fixed body: a
    web server, not a queen broker."""

    def __init__(self, status, body, ctype):
        import http.server
        import threading
        outer = self
        self.posts = 0

        class H(http.server.BaseHTTPRequestHandler):
            def do_POST(self):
                outer.posts += 1
                self.rfile.read(int(self.headers.get("Content-Length", 0)))
                self.send_response(status)
                self.send_header("Content-Type", ctype)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *a):
                pass

        self.srv = http.server.ThreadingHTTPServer(("127.0.0.1", 0), H)
        self.url = "http://127.0.0.1:%d" % self.srv.server_address[1]
        threading.Thread(target=self.srv.serve_forever, daemon=True).start()

    def close(self):
        self.srv.shutdown()
        self.srv.server_close()


def test_a_restore_to_a_server_that_is_not_queen_stops_at_once(bucket):
    """Only no answer, 429 and 5xx are a broker's to wait for: a 200 where a
    push answers 201, or a redirect, is not queen's and was retried for
    about 30 s. Now the first one stops the restore, exit 2, naming it."""
    small_lake(bucket, "nq")
    for status, body, ctype in ((200, b"<html>hello</html>", "text/html"),
                                (200, b"{}", "application/json"),
                                (302, b"", "text/plain")):
        srv = NotQueen(status, body, ctype)
        try:
            t0 = time.monotonic()
            p = tool(bucket, "restore", "--queue", "nq", "--to", srv.url,
                     "--threads", "1", timeout=60)
            assert p.returncode == 2, p
            assert "the broker's push answered %d" % status in p.stderr, p
            assert time.monotonic() - t0 < 10, (status, p)
            assert srv.posts == 1, srv.posts
        finally:
            srv.close()


def test_https_to_a_plain_http_bucket_is_one_line_at_once(bucket):
    """https:// to a port that speaks plain HTTP fails its handshake
    ("wrong version number") before any answer: a wrong endpoint, one line
    and exit 2, not six attempts with backoff (about 15 s)."""
    ep = bucket.endpoint.replace("http://", "https://", 1)
    assert ep.startswith("https://"), ep
    for args in [("verify", "--queue", "q"), ("verify",)]:
        line = one_line_exit_2(ep, args, 6)
        assert "ssl" in line.lower(), (args, line)
