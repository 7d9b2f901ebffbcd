"""Encrypted queues (issue 15 item 4, docs/design/formats.md §11): a queue configured
with encryptionEnabled stores its payloads sealed under
QUEEN_ENCRYPTION_KEY. No byte of the data directory (raft segments,
snapshots, LMDB) holds them in clear, while POST /api/v1/fetch and the
lake give them back byte for byte. Without a usable key a push still
succeeds, stored plaintext, with a warning. The key itself is never in the
log, in /status or on disk."""
import os

import lake
import rawjson
from sinkenv import PREFIX, TENANT, wait_until

KEY = "5f1e0c3a9b7d2468ace013579bdf2468ace013579bdf02468ace13579bdf0246"
OTHER_KEY = "00" * 31 + "01"
ENC, PLAIN = "vault", "ledger"


def shapes(tag, n):
    """Payloads of several shapes, each carrying the distinctive marker
    tag-n-<i> (ASCII, so a byte search finds it in any plaintext copy)."""
    m = lambda i: ("%s-%04d-%d" % (tag, n, i)).encode()  # noqa: E731
    return [
        b'{"marker":"' + m(0) + b'","total":42.00,"n":12345678901234567890}',
        b'"' + m(1) + b' caf\xc3\xa9 \xe2\x9c\x93 \xf0\x9f\x94\x92 \\u2028"',
        b'["' + m(2) + b'",[1,[2,[3]]],null,true]',
        b'{\n  "marker": "' + m(3) + b'",\r\n  "x": -0\n}',
        b'{"marker":"' + m(4) + b'","blob":"' + b"\xce\xb1\xce\xb2" * 30000 +
        b'"}',
    ]


def markers(tag, rounds):
    return [("%s-%04d-%d" % (tag, n, i)).encode()
            for n in range(rounds) for i in range(5)]


def configure(node, queue, **options):
    r = node.post("/api/v1/configure", {"queue": queue, "options": options})
    assert r.status == 200, r
    assert r.json()["options"]["encryptionEnabled"] == \
        options.get("encryptionEnabled", False)


def push(node, queue, payloads, round_no):
    items = [{"queue": queue, "partition": "p%d" % (i % 2), "payload": p,
              "transactionId": "%s-r%d-%d" % (queue, round_no, i)}
             for i, p in enumerate(payloads)]
    r = node.request("POST", "/api/v1/push", body=lake.push_body(items))
    assert r.status == 201, r
    return lake.acked_from_push(items, r.json())


def fetched(node, queue, partitions):
    """{(partition, offset): payload bytes exactly as fetch answered}."""
    out = {}
    for p in partitions:
        off = 0
        while True:
            r = node.post("/api/v1/fetch", {"entries": [
                {"queue": queue, "partition": p, "offset": off,
                 "maxBytes": 8 << 20}]})
            assert r.status == 200, r
            e = rawjson.parse(r.body)["entries"].value[0]
            recs = e["records"].value
            for rec in recs:
                out[(p, rec["offset"].value)] = rec["payload"].raw
                off = rec["offset"].value + 1
            if not recs or off >= e["highWatermark"].value:
                break
    return out


def data_files(root):
    """Every file of a data directory by kind: raft segments, snapshots,
    LMDB."""
    kinds = {"raft": [], "snapshot": [], "lmdb": []}
    for d, _, names in os.walk(root):
        for n in names:
            path = os.path.join(d, n)
            if n.startswith("snapshot-"):
                kinds["snapshot"].append(path)
            elif n.endswith(".mdb"):
                kinds["lmdb"].append(path)
            elif os.path.basename(d) == "raft":
                kinds["raft"].append(path)
    return kinds


def found_in(paths, needles):
    """The needles that occur in any of the files (read whole)."""
    hits = set()
    for path in paths:
        with open(path, "rb") as f:
            data = f.read()
        hits.update(x for x in needles if x in data)
    return hits


def snapshot_taken(node):
    return data_files(node.data_dir)["snapshot"] or None


def test_an_encrypted_queue_is_sealed_at_rest_and_plain_in_fetch_and_lake(
        sink_node, bucket):
    node = sink_node({"QUEEN_ENCRYPTION_KEY": KEY,
                      "QUEEN_S3_QUEUES": "%s,%s" % (ENC, PLAIN),
                      "QUEEN_S3_COMPRESSION": "zstd",
                      "QUEEN_RAFT_SNAPSHOT_THRESHOLD": "64",
                      "QUEEN_RAFT_SEGMENT_MB": "1"})
    configure(node, ENC, encryptionEnabled=True)
    configure(node, PLAIN)
    rounds = 12
    acked = {ENC: [], PLAIN: []}
    pushed = {ENC: {}, PLAIN: {}}
    for n in range(rounds):
        for q, tag in ((ENC, b"SEALED"), (PLAIN, b"CLEAR")):
            payloads = shapes(tag.decode(), n)
            got = push(node, q, payloads, n)
            acked[q] += got
            pushed[q].update({(p, o): pl for p, o, _, pl in got})
    # Sink lease refreshes and pushes are raft entries; at 64 a snapshot.
    wait_until(lambda: snapshot_taken(node), 90, "a raft snapshot")

    for q in (ENC, PLAIN):
        assert fetched(node, q, ["p0", "p1"]) == pushed[q]

    reader = lake.bucket_reader(bucket)
    for q in (ENC, PLAIN):
        got = lake.wait_queue(reader, PREFIX, TENANT, q, acked[q],
                              timeout=120, compression="zstd", align="none",
                              broker=node)
        assert got["records"] == len(acked[q]) == rounds * 5

    files = data_files(node.data_dir)
    assert files["raft"] and files["snapshot"] and files["lmdb"], files
    sealed, clear = markers("SEALED", rounds), markers("CLEAR", rounds)
    for kind, paths in files.items():
        assert found_in(paths, sealed) == set(), kind
        if kind == "snapshot":
            # A node's own raft snapshots are 20-byte markers of the
            # applied index (docs/internals/store-raft.md): no payload.
            for p in [p for p in paths if not p.endswith(".meta")]:
                with open(p, "rb") as f:
                    data = f.read()
                assert len(data) == 20 and data[:8] == b"QMARK001", p
            continue
        # The search can fail: the plain queue's markers are in each kind.
        assert found_in(paths, clear), kind
    everything = [p for paths in files.values() for p in paths]
    assert found_in(everything, clear) == set(clear)

    key_forms = [KEY.encode(), KEY.upper().encode(), bytes.fromhex(KEY)]
    assert found_in(everything, key_forms) == set()
    log = node.stderr().encode()
    assert not any(k in log for k in key_forms)
    status = node.get("/status").body
    assert not any(k in status for k in key_forms)
    assert b"stored plaintext" not in log


def test_without_a_usable_key_pushes_succeed_plaintext_with_a_warning(
        broker_factory):
    for env, boot_warning in (({}, None),
                              ({"QUEEN_ENCRYPTION_KEY": KEY[:-1]},
                               "QUEEN_ENCRYPTION_KEY is not 64 hex")):
        node = broker_factory(env=env)
        configure(node, ENC, encryptionEnabled=True)
        payloads = shapes("NOKEY", len(env))
        got = push(node, ENC, payloads, 0)
        assert len(got) == 5
        assert fetched(node, ENC, ["p0", "p1"]) == \
            {(p, o): pl for p, o, _, pl in got}
        wait_until(lambda: "QUEEN_ENCRYPTION_KEY is not set; stored "
                   "plaintext" in node.stderr(), 30, "the warning")
        log = node.stderr()
        assert 'queue=%s' % ENC in log
        if boot_warning:
            assert boot_warning in log
            assert KEY[:-1] not in log
        files = data_files(node.data_dir)
        # Stored in clear: what the reference asks when there is no key.
        mine = [("NOKEY-%04d-%d" % (len(env), i)).encode() for i in range(5)]
        assert found_in(files["lmdb"], mine) == set(mine)
        node.stop()


def test_a_node_with_another_key_returns_the_envelope_and_warns(
        broker_factory):
    node = broker_factory(env={"QUEEN_ENCRYPTION_KEY": KEY})
    configure(node, ENC, encryptionEnabled=True)
    payloads = shapes("ROTATE", 0)
    want = {(p, o): pl for p, o, _, pl in push(node, ENC, payloads, 0)}
    assert fetched(node, ENC, ["p0", "p1"]) == want

    node.stop()
    node.extra_env["QUEEN_ENCRYPTION_KEY"] = OTHER_KEY
    node.start()
    other = fetched(node, ENC, ["p0", "p1"])
    assert set(other) == set(want)
    for pos, text in other.items():
        env = rawjson.parse(text).plain()
        assert sorted(env) == ["authTag", "encrypted", "iv"], text[:200]
        assert b"ROTATE" not in text
    wait_until(lambda: "does not open with this node's QUEEN_ENCRYPTION_KEY"
               in node.stderr(), 30, "the warning")
    assert OTHER_KEY not in node.stderr()

    node.stop()
    node.extra_env["QUEEN_ENCRYPTION_KEY"] = KEY
    node.start()
    assert fetched(node, ENC, ["p0", "p1"]) == want


def test_a_sink_without_the_key_writes_the_stored_bytes_as_a_json_string(
        sink_node, bucket):
    """docs/s3-sink.md: a payload the node cannot decrypt is written to the
    lake as a JSON string of its stored bytes (fetch answers the envelope
    object itself)."""
    node = sink_node({"QUEEN_ENCRYPTION_KEY": KEY,
                      "QUEEN_S3_QUEUES": "elsewhere",
                      "QUEEN_S3_COMPRESSION": "none"})
    configure(node, ENC, encryptionEnabled=True)
    acked = push(node, ENC, shapes("LOCKED", 0), 0)
    node.stop()
    node.extra_env.update({"QUEEN_ENCRYPTION_KEY": OTHER_KEY,
                           "QUEEN_S3_QUEUES": ENC})
    node.start()
    stored = fetched(node, ENC, ["p0", "p1"])
    assert set(stored) == {(p, o) for p, o, _, _ in acked}
    reader = lake.bucket_reader(bucket)
    wait_until(lambda: lake.count_records(reader, PREFIX, TENANT, ENC) ==
               len(acked), 90, "the lake to hold every record")
    seen, lost = lake.records_and_lost(reader, PREFIX, TENANT, ENC, "none")
    assert lost == [] and set(seen) == set(stored)
    for pos, (_, payload, _, _) in seen.items():
        text = rawjson.parse(payload).plain()
        assert isinstance(text, str), payload[:200]
        assert text.encode() == stored[pos]
        assert sorted(rawjson.parse(stored[pos]).plain()) == \
            ["authTag", "encrypted", "iv"]
    assert OTHER_KEY not in node.stderr() and KEY not in node.stderr()


def storage_format(node):
    r = node.get("/api/v1/cluster/members")
    assert r.status == 200, r
    return r.json()["storageFormat"]


def test_three_nodes_seal_once_and_every_copy_opens(tmp_path):
    """The seal is made once, by the node that takes the push, and the
    sealed bytes are what raft replicates: every node's copy (a follower's,
    and one rebuilt from a snapshot after its data directory is wiped)
    fetches byte-exact plaintext, and no node's data directory holds it.
    The binary sealed form is written only once the rolling-upgrade gate
    raised the cluster's storage format to 2 (store/format.h), which it
    does by itself when every voter runs this build; from then on no log
    entry or row holds an envelope, and no client can write the gate's
    namespace."""
    from cluster import Cluster

    c = Cluster(str(tmp_path / "c"), env={
        "QUEEN_ENCRYPTION_KEY": KEY, "QUEEN_RAFT_SNAPSHOT_THRESHOLD": "64",
        "QUEEN_RAFT_SNAPSHOT_TRAILING": "8"})
    try:
        c.start()
        entry, other = c.followers()
        for node in c.live():
            wait_until(lambda: storage_format(node) == 2, 30,
                       "storage format 2 on node %s" % node.id)
        r = entry.post("/api/v1/kv", [{"op": "put", "ns": "queen-cluster",
                                       "key": "format", "value": 1,
                                       "forever": True}])
        assert r.status == 403, r
        assert r.json()["reason"] == "kv_reserved_namespace", r.json()
        configure(entry, ENC, encryptionEnabled=True)
        configure(entry, PLAIN)
        pushed = {ENC: {}, PLAIN: {}}
        rounds = 64

        def push_rounds(node, first, last):
            for n in range(first, last):
                for q, tag in ((ENC, "SEALED3"), (PLAIN, "CLEAR3")):
                    got = push(node, q, shapes(tag, n), n)
                    pushed[q].update({(p, o): pl for p, o, _, pl in got})

        push_rounds(entry, 0, rounds // 2)
        c.wait_converged(60)
        for node in c.live():
            for q in (ENC, PLAIN):
                assert fetched(node, q, ["p0", "p1"]) == pushed[q], node.id

        # The other follower starts again from nothing while the log goes
        # on past two snapshots (8 entries kept behind each): the leader
        # can only send it a snapshot, then the log after it.
        c.kill9(other.id)
        c.wipe(other.id)
        push_rounds(c.leader_node(), rounds // 2, rounds)
        wait_until(lambda: snapshot_taken(c.leader_node()), 90,
                   "a snapshot on the leader")
        c.start_node(other.id)
        c.wait_converged(90)
        assert snapshot_taken(other), "the wiped node installed no snapshot"
        for q in (ENC, PLAIN):
            assert fetched(other, q, ["p0", "p1"]) == pushed[q]

        sealed = markers("SEALED3", rounds)
        clear = markers("CLEAR3", rounds)
        for node in c.nodes.values():
            files = data_files(node.data_dir)
            everything = [p for paths in files.values() for p in paths]
            assert found_in(everything, sealed) == set(), node.id
            # The search can fail: the plain queue is in clear there.
            assert found_in(everything, clear) == set(clear), node.id
            # Sealed in the binary form: no envelope anywhere.
            assert found_in(everything, [b"authTag"]) == set(), node.id
            assert storage_format(node) == 2, node.id
            assert KEY.encode() not in node.stderr().encode()
    finally:
        c.close()


def test_a_plain_payload_shaped_like_an_envelope_stays_as_pushed_on_a_new_node(
        sink_node, bucket):
    """A new cluster applies pushes for its first seconds before its storage
    format rises to 2 (docs/design/formats.md §12), and those rows carry no
    flag. A plain queue's payload that merely looks like an envelope was
    then taken for one: the lake got it as a JSON string (one sealed under
    this node's key was even opened). Only an encrypted queue's rows were
    ever envelopes, so the read now leaves a plain queue's bytes alone."""
    node = sink_node({"QUEEN_ENCRYPTION_KEY": KEY, "QUEEN_S3_QUEUES": PLAIN,
                      "QUEEN_S3_START": "earliest"})
    foreign = (b'{"encrypted":"aGVsbG8=","iv":"AQEBAQEBAQEBAQEBAQEBAQ==",'
               b'"authTag":"AgICAgICAgICAgICAgICAg=="}')
    items = [{"queue": PLAIN, "partition": "p0", "payload": foreign,
              "transactionId": "env-0"},
             {"queue": PLAIN, "partition": "p0",
              "payload": b'{"encrypted":"","iv":"x","authTag":"y","n":1}',
              "transactionId": "env-1"}]
    r = node.request("POST", "/api/v1/push", body=lake.push_body(items))
    assert r.status == 201, r
    acked = lake.acked_from_push(items, r.json())
    assert storage_format(node) < 2  # the push came before the rise
    assert fetched(node, PLAIN, ["p0"]) == \
        {("p0", i): it["payload"] for i, it in enumerate(items)}
    reader = lake.bucket_reader(bucket)
    got = lake.wait_queue(reader, PREFIX, TENANT, PLAIN, acked, timeout=60,
                          compression="zstd", align="none", broker=node)
    assert got["records"] == 2
