"""The lake verifier's self-test (the `self` check of
docs/design/scenarios.md §9): a good
hand-made lake is accepted, and each damage is refused with its own reason:
records (payload, transactionId, duplicates, order, window, tiling), stamps
checked against the broker's log (every ts of a window set to its start, one
ts moved by 5 µs or 1 µs), records moved or copied across windows,
per-partition objects, Parquet rows, and checkpoints (missing, off the
cadence but inexact, garbage, positions that do not match the manifests).  Also pins the
formats the verifier derives (docs/design/formats.md §1, §2, §6) to their
test vectors."""

import copy
import functools
import hashlib
import json
import os
import subprocess

import pytest

import lake
from lake import LakeError, PlainDirReader, make_lake, verify_queue

T0 = 1790812800 * 10**6  # 2026-10-01T00:00:00Z
SEC = 10**6
PREFIX, TENANT, QUEUE = "queen", "00000000-0000-0000-0000-000000000001", \
    "a.orders"
PARTITIONS = ["cust-0420", "ünï cødé/1", "p:2 100%", "日本-5", 'q"uote\\4',
              "🦆-3"]
PAYLOADS = [b'{"type":"paid","amount":1290}', b"42.00",
            b"12345678901234567890123456789", b"1E+400", b"-0",
            b'"caf\\u00e9 \xc3\xa9t\xc3\xa9"', b'{"a":\n1}', b"[1,\r\n2]",
            None, b'"\xe2\x80\xa8 and \xc2\x85 raw"', b'{"x":"DEL\x7f"}',
            b"[[[],[{}]],true,null]", b'"' + b"s" * 4000 + b'"',
            b' {"after" :\t"ws"} ']
GOOD = dict(writer="queen-s3/1.5.0 jsonl+gzip",
            committed_at="2026-10-02T00:00:00.000000Z")
OPTS = dict(compression="gzip", align="none")
# window bounds: [T0, T0+1s), [T0+1s, T0+2.5s), [T0+2.5s, T0+4s)
BOUNDS = [(T0, T0 + SEC), (T0 + SEC, T0 + 5 * SEC // 2),
          (T0 + 5 * SEC // 2, T0 + 4 * SEC)]


def build_records():
    """(windows, acked): records in every window for every partition,
    offsets contiguous from 0, ts rising with offset, one in five with a
    broker-minted-looking transactionId."""
    offsets = {p: 0 for p in PARTITIONS}
    windows, acked, n = [], [], 0
    for t_start, t_end in BOUNDS:
        recs = []
        for i, p in enumerate(PARTITIONS):
            for j in range(3):
                o = offsets[p]
                offsets[p] += 1
                ts = t_start + 100 * SEC // 1000 + i * 1000 + j * 10
                txn = "019a%012x-7000-8000-%012x" % (n, o) if n % 5 == 0 \
                    else "ord-%s-%d" % (p, o)
                payload = PAYLOADS[n % len(PAYLOADS)]
                n += 1
                recs.append((p, o, txn, ts, payload))
                acked.append((p, o, txn, payload))
        recs.sort(key=lambda r: (r[0].encode(), r[1]))
        windows.append((t_start, t_end, recs))
    return windows, acked


def truth(windows, fmt="jsonl"):
    """The broker's log of an undamaged lake: what broker_log() would read
    back with POST /api/v1/fetch."""
    return lake.BrokerLog({(p, o): (ts, txn, lake._lake_payload(v, fmt))
                           for _, _, recs in windows
                           for p, o, txn, ts, v in recs})


def write(tmp_path, windows, name="lake", **kw):
    r = PlainDirReader(str(tmp_path / name))
    opts = dict(OPTS, **GOOD)
    opts.update(kw)
    make_lake(r.put, PREFIX, TENANT, QUEUE, windows, checkpoint_every=2,
              **opts)
    return r


def verify(reader, acked, **kw):
    """verify_queue with every rule on: the good lake's broker log (pass
    log=None to leave rule (8) out) and a checkpoint due every 2 windows."""
    kw.pop("writer", None)  # a make_lake option, for symmetry in the tests
    opts = dict(OPTS, checkpoint_every=2)
    if "log" not in kw:
        opts["log"] = truth(build_records()[0], kw.get("fmt", "jsonl"))
    opts.update(kw)
    return verify_queue(reader, PREFIX, TENANT, QUEUE, acked, **opts)


def test_reference_vectors():
    assert lake.esc("a/b") == "a%2Fb"
    assert lake.esc("..") == ".."
    assert lake.esc("caffè") == "caff%C3%A8"
    assert lake.esc("e.ord/eu été:1%") == "e.ord%2Feu%20%C3%A9t%C3%A9%3A1%25"
    assert lake.data_key("queen", TENANT, "orders", 1842, 1788516000000000,
                         1788516300000000) == (
        "queen/tenant=00000000-0000-0000-0000-000000000001/queue=orders/"
        "dt=2026-09-04/hour=10/w-0000001842-1788516000000000-"
        "1788516300000000.jsonl.zst")
    assert lake.data_key("queen", TENANT, "orders", 1842, 1788516000000000,
                         1788516300000000, fmt="parquet",
                         partition="cust-0420", first=1400,
                         last=1811).endswith(
        "-p-cust-0420-000000001400-000000001811.parquet")
    assert lake.manifest_key("queen", TENANT, "orders", 1) == (
        "queen/_queen/tenant=00000000-0000-0000-0000-000000000001/"
        "queue=orders/windows/0000000001.json")
    assert lake.jsonl_line("cust-0420", 1811, "ord-9f21",
                           lake.parse_iso_us("2026-09-04T10:03:41.918204Z"),
                           b'{"type":"paid","amount":1290}') == (
        b'{"partition":"cust-0420","offset":1811,"transactionId":"ord-9f21",'
        b'"ts":"2026-09-04T10:03:41.918204Z","payload":{"type":"paid",'
        b'"amount":1290}}\n')
    assert lake.parse_iso_us("2026-09-04T00:00:00.000000Z") == \
        1788480000 * 10**6
    assert lake.iso_us(-1) == "1969-12-31T23:59:59.999999Z"
    assert lake.parse_iso_us("2026-09-04T00:00:00Z") is None


def test_good_lake_is_accepted(tmp_path):
    windows, acked = build_records()
    s = verify(write(tmp_path, windows), acked)
    assert s["manifests"] == 3 and s["objects"] == 3
    assert s["records"] == len(acked) == 3 * 3 * len(PARTITIONS)
    assert s["partitions"] == {p: 9 for p in PARTITIONS}
    assert s["checkpoints"] == [2] and s["tEnd"] == BOUNDS[-1][1]
    assert s["stamps_checked"] == len(acked)


def test_good_lake_with_defaults_and_per_partition_layout(tmp_path):
    windows, acked = build_records()
    r = write(tmp_path, windows, name="zstd", compression="zstd",
              align="hour", writer="queen-s3/2.0.0 jsonl+zstd")
    verify(r, acked, compression="zstd", align="hour")
    with pytest.raises(LakeError, match="writer"):
        verify(write(tmp_path, windows, name="w", writer="x/1 jsonl+gzip"),
               acked)
    with pytest.raises(LakeError, match="writer"):  # the page's form only
        verify(write(tmp_path, windows, name="wl", compression="zstd",
                     align="hour",
                     writer="queen-s3/2.0.0 jsonl+zstd libzstd/1.5.4"),
               acked, compression="zstd", align="hour")
    with pytest.raises(LakeError, match="compression"):
        verify(r, acked, align="hour")  # a zstd lake is not a gzip one
    r = write(tmp_path, windows, name="pp", layout="per-partition",
              compression="none", writer="queen-s3/2.0.0 jsonl")
    s = verify(r, acked, layout="per-partition", compression="none")
    assert s["objects"] == 3 * len(PARTITIONS)


def test_expected_lost_ranges(tmp_path):
    windows, acked = build_records()
    w = copy.deepcopy(windows)
    p = PARTITIONS[0]
    gone = [r for r in w[1][2] if r[0] == p]  # offsets 3..5 of p
    w[1] = (w[1][0], w[1][1], [r for r in w[1][2] if r[0] != p])
    lost = [{"partition": p, "from": gone[0][1], "to": gone[-1][1]}]
    r = write(tmp_path, w, lost={2: lost})
    verify(r, acked, expect_lost=lost)
    with pytest.raises(LakeError, match="lost ranges"):
        verify(r, acked)


def damage_payload(w):
    p, o, txn, ts, _ = w[1][2][4]
    w[1][2][4] = (p, o, txn, ts, b'{"type":"paid","amount":1291}')


def damage_txn(w):
    p, o, _, ts, payload = w[1][2][4]
    w[1][2][4] = (p, o, "someone-else", ts, payload)


def damage_duplicate(w):
    w[1][2].insert(5, w[1][2][4])


def damage_missing(w):
    del w[2][2][-1]


def damage_order(w):
    w[0][2][0], w[0][2][1] = w[0][2][1], w[0][2][0]


def damage_ts(w):
    p, o, txn, _, payload = w[1][2][4]
    w[1][2][4] = (p, o, txn, w[1][1], payload)


def damage_tiling(w):
    w[1] = (w[1][0] + 1, w[1][1], w[1][2])


def damage_stamps_to_window_start(w):
    # every ts of window 2 set to its start: sorted, inside the window,
    # non-decreasing with offset, minTs/maxTs consistent; only the
    # broker's log can tell.
    t_start = w[1][0]
    w[1] = (w[1][0], w[1][1], [(p, o, x, t_start, v)
                               for p, o, x, _, v in w[1][2]])


def damage_stamp_plus_5us(w):
    p, o, txn, ts, payload = w[1][2][4]
    w[1][2][4] = (p, o, txn, ts + 5, payload)


def damage_stamp_minus_1us(w):
    p, o, txn, ts, payload = w[2][2][-1]
    w[2][2][-1] = (p, o, txn, ts - 1, payload)


def damage_moved_to_next_window(w):
    # the last record of window 1 travels to window 2 with its own stamp
    rec = w[0][2].pop()
    w[1][2].append(rec)
    w[1][2].sort(key=lambda r: (r[0].encode(), r[1]))


def damage_moved_and_restamped(w):
    # the same move, its ts set to window 2's start so that every rule but
    # the broker's stamps holds
    p, o, txn, _, v = w[0][2].pop()
    w[1][2].append((p, o, txn, w[1][0], v))
    w[1][2].sort(key=lambda r: (r[0].encode(), r[1]))


def damage_copied_to_a_later_window(w):
    p, o, txn, _, v = w[0][2][0]
    w[2][2].insert(0, (p, o, txn, w[2][0], v))
    w[2][2].sort(key=lambda r: (r[0].encode(), r[1]))


DAMAGES = [
    (damage_payload, "differs from what was pushed"),
    (damage_txn, "transactionId"),
    (damage_duplicate, "twice"),
    (damage_missing, "not in the lake"),
    (damage_order, "not sorted"),
    (damage_ts, "outside the window"),
    (damage_tiling, "do not tile"),
    (damage_stamps_to_window_start, "the broker's log says"),
    (damage_stamp_plus_5us, "the broker's log says"),
    (damage_stamp_minus_1us, "the broker's log says"),
    (damage_moved_to_next_window, "outside the window"),
    (damage_moved_and_restamped, "the broker's log says"),
    (damage_copied_to_a_later_window, "twice"),
]
# What the verifier without the broker's log (rule (8)) cannot see.
STAMP_ONLY = {damage_stamps_to_window_start, damage_stamp_plus_5us,
              damage_stamp_minus_1us, damage_moved_and_restamped}


@pytest.mark.parametrize("damage,reason", DAMAGES,
                         ids=[d.__name__ for d, _ in DAMAGES])
def test_damaged_records_are_refused(tmp_path, damage, reason):
    windows, acked = build_records()
    w = copy.deepcopy(windows)
    damage(w)
    r = write(tmp_path, w)
    with pytest.raises(LakeError) as e:
        verify(r, acked)
    assert reason in e.value.reason, e.value.reason
    if damage in STAMP_ONLY:  # the hole rule (8) closes
        verify(r, acked, log=None)


@pytest.mark.parametrize("layout", ["merged", "per-partition"])
def test_a_stamp_is_checked_in_every_layout_and_format(tmp_path, layout):
    windows, acked = build_records()
    w = copy.deepcopy(windows)
    damage_stamp_plus_5us(w)
    kw = dict(layout=layout, compression="none",
              writer="queen-s3/2.0.0 jsonl")
    with pytest.raises(LakeError, match="has ts .*, the broker's log says"):
        verify(write(tmp_path, w, **kw), acked, **kw)
    verify(write(tmp_path, windows, name="good", **kw), acked, **kw)


def test_the_broker_log_truth_checks_transaction_ids_and_payloads(tmp_path):
    windows, acked = build_records()
    r = write(tmp_path, windows)
    log = truth(windows)
    p, o, _, ts, v = windows[1][2][4]
    bad = lake.BrokerLog(dict(log.records))
    bad.records[(p, o)] = (ts, "minted-by-someone-else", v)
    with pytest.raises(LakeError, match="transactionId .* the broker's log"):
        verify(r, acked, log=bad)
    bad.records[(p, o)] = (ts, windows[1][2][4][2], b'"other"')
    with pytest.raises(LakeError, match="payload .* the broker's log says"):
        verify(r, acked, log=bad)
    del bad.records[(p, o)]
    with pytest.raises(LakeError, match="is not in the broker's log"):
        verify(r, acked, log=bad)
    # below the partition's logStartOffset a record was trimmed: unchecked
    bad.starts[p] = o + 1
    verify(r, acked, log=bad)


# -- per-partition objects

PP = dict(layout="per-partition", compression="none",
          writer="queen-s3/2.0.0 jsonl")


def test_per_partition_two_objects_for_one_partition_are_refused(tmp_path):
    windows, acked = build_records()
    w = copy.deepcopy(windows)
    recs = w[1][2]
    # p's last record of window 2 after another partition's: make_lake
    # writes p twice in that window, each object sorted and complete.
    i = max(i for i, r in enumerate(recs) if r[0] == PARTITIONS[0])
    recs.append(recs.pop(i))
    with pytest.raises(LakeError, match="more than one object for partition"):
        verify(write(tmp_path, w, **PP), acked, **PP)


def test_per_partition_damages_are_refused(tmp_path):
    windows, acked = build_records()
    w = copy.deepcopy(windows)
    # a record of one partition's object dropped: a gap in the lake
    del w[1][2][1]
    with pytest.raises(LakeError, match="not in the lake"):
        verify(write(tmp_path, w, name="gap", **PP), acked, **PP)
    # an object's manifest entry naming other offsets than it holds
    r = write(tmp_path, windows, name="entry", **PP)
    mkey = lake.manifest_key(PREFIX, TENANT, QUEUE, 2)
    m = json.loads(r.read(mkey))
    m["objects"][0]["lastOffset"] += 1
    r.put(mkey, lake.compact(m))
    with pytest.raises(LakeError, match="is not the derived key"):
        verify(r, acked, **PP)
    # an object swapped for another partition's
    r = write(tmp_path, windows, name="swap", **PP)
    m = json.loads(r.read(mkey))
    a, b = m["objects"][0]["key"], m["objects"][1]["key"]
    body_a, body_b = r.read(a), r.read(b)
    r.put(a, body_b)
    r.put(b, body_a)
    with pytest.raises(LakeError, match="bytes, the manifest says|sha256"):
        verify(r, acked, **PP)


# -- checkpoints

def checkpoint_path(r, k):
    return os.path.join(r.root, *lake.checkpoint_key(PREFIX, TENANT, QUEUE,
                                                     k).split("/"))


def put_checkpoint(r, k, doc):
    r.put(lake.checkpoint_key(PREFIX, TENANT, QUEUE, k),
          lake.compress(lake.compact(doc), "zstd"))


def test_checkpoint_positions_follow_the_manifests(tmp_path):
    windows, _ = build_records()
    pos = dict((p, o) for p, o in lake.positions_after(windows, 2))
    # each partition has offsets 0..2 in window 1 and 3..5 in window 2
    assert pos == {p: 6 for p in PARTITIONS}


def test_missing_checkpoint_is_refused(tmp_path):
    windows, acked = build_records()
    r = write(tmp_path, windows)
    os.unlink(checkpoint_path(r, 2))
    with pytest.raises(LakeError, match="window 2 has no checkpoint"):
        verify(r, acked)
    verify(r, acked, checkpoint_every=None)  # only the setting requires it


def test_checkpoint_at_a_k_not_due_must_be_exact(tmp_path):
    """A drain or a loss writes a checkpoint off the cadence: accepted when
    its positions split the lake at its window, refused when they do not."""
    windows, acked = build_records()
    r = write(tmp_path, windows)
    put_checkpoint(r, 1, {"k": 1, "tEnd": BOUNDS[0][1],
                          "positions": lake.positions_after(windows, 1)})
    verify(r, acked)
    # every window: k=1 is due, and so is k=3, which is missing
    with pytest.raises(LakeError, match="window 3 has no checkpoint"):
        verify(r, acked, checkpoint_every=1)
    put_checkpoint(r, 1, {"k": 1, "tEnd": BOUNDS[0][1],
                          "positions": lake.positions_after(windows, 2)})
    with pytest.raises(LakeError, match="positions do not match"):
        verify(r, acked)


def _with_checkpoint(tmp_path, name, mutate):
    windows, acked = build_records()
    r = write(tmp_path, windows, name=name)
    doc = {"k": 2, "tEnd": BOUNDS[1][1],
           "positions": lake.positions_after(windows, 2)}
    mutate(doc)
    put_checkpoint(r, 2, doc)
    return r, acked


CHECKPOINT_DAMAGES = [
    ("offset_plus_one",
     lambda d: d["positions"][0].__setitem__(1, d["positions"][0][1] + 1),
     "positions do not match the manifests"),
    ("offset_minus_one",
     lambda d: d["positions"][3].__setitem__(1, d["positions"][3][1] - 1),
     "positions do not match the manifests"),
    ("partition_missing", lambda d: d["positions"].pop(2),
     "positions do not match the manifests"),
    ("positions_empty", lambda d: d.__setitem__("positions", []),
     "positions do not match the manifests"),
    ("unsorted", lambda d: d["positions"].reverse(), "not sorted"),
    ("garbage_position", lambda d: d["positions"].append(["x", "y"]),
     "is not [partition, offset"),
    ("wrong_tEnd", lambda d: d.__setitem__("tEnd", BOUNDS[2][1]),
     "does not match window 2"),
    ("wrong_k", lambda d: d.__setitem__("k", 3), "does not match window 2"),
]


@pytest.mark.parametrize("name,mutate,reason", CHECKPOINT_DAMAGES,
                         ids=[c[0] for c in CHECKPOINT_DAMAGES])
def test_damaged_checkpoint_is_refused(tmp_path, name, mutate, reason):
    r, acked = _with_checkpoint(tmp_path, name, mutate)
    with pytest.raises(LakeError) as e:
        verify(r, acked)
    assert reason in e.value.reason, e.value.reason


def test_checkpoint_that_is_not_zstd_json_is_refused(tmp_path):
    windows, acked = build_records()
    r = write(tmp_path, windows)
    with open(checkpoint_path(r, 2), "wb") as f:
        f.write(b'{"k":2}')  # plain JSON, not a zstd frame
    with pytest.raises(LakeError, match="does not decode as zstd"):
        verify(r, acked)
    r.put(lake.checkpoint_key(PREFIX, TENANT, QUEUE, 2),
          lake.compress(b"garbage{", "zstd"))
    with pytest.raises(LakeError, match="checkpoint is not JSON"):
        verify(r, acked)


def test_orphan_object_is_refused(tmp_path):
    windows, acked = build_records()
    r = write(tmp_path, windows)
    key = lake.data_key(PREFIX, TENANT, QUEUE, 4, BOUNDS[-1][1],
                        BOUNDS[-1][1] + SEC, compression="gzip", align="none")
    r.put(key, lake.compress(b"", "gzip"))
    with pytest.raises(LakeError) as e:
        verify(r, acked)
    assert "no manifest names it" in e.value.reason


def test_changed_object_bytes_are_refused(tmp_path):
    windows, acked = build_records()
    r = write(tmp_path, windows)
    key = lake.data_key(PREFIX, TENANT, QUEUE, 1, *BOUNDS[0],
                        compression="gzip", align="none")
    path = os.path.join(r.root, *key.split("/"))
    data = bytearray(open(path, "rb").read())
    data[len(data) // 2] ^= 0xFF
    open(path, "wb").write(bytes(data))
    with pytest.raises(LakeError) as e:
        verify(r, acked)
    assert "sha256 differs" in e.value.reason


def test_unacknowledged_record_and_gap_in_numbering_are_refused(tmp_path):
    windows, acked = build_records()
    with pytest.raises(LakeError, match="never acknowledged"):
        verify(write(tmp_path, windows, name="a"), acked[:-1])
    r = write(tmp_path, windows, name="b")
    os.unlink(os.path.join(r.root, *lake.manifest_key(
        PREFIX, TENANT, QUEUE, 2).split("/")))
    with pytest.raises(LakeError, match="without a gap"):
        verify(r, acked)


def test_lake_in_the_test_bucket_through_disk_and_boto3(bucket):
    windows, acked = build_records()
    c = bucket.boto3()
    make_lake(lambda k, body: c.put_object(Bucket="lake", Key=k, Body=body),
              PREFIX, TENANT, QUEUE, windows, checkpoint_every=2,
              **dict(OPTS, **GOOD))
    s = verify(lake.bucket_reader(bucket), acked)
    assert s["records"] == len(acked)
    assert verify(lake.Boto3Reader(c, "lake"), acked) == s
    assert lake.wait_queue(lake.bucket_reader(bucket), PREFIX, TENANT, QUEUE,
                           acked, 5, **OPTS)["records"] == len(acked)
    with pytest.raises(LakeError, match="more than"):
        lake.wait_queue(lake.bucket_reader(bucket), PREFIX, TENANT, QUEUE,
                        acked[:-1], 5, **OPTS)


def needs_parquet_tool(test):
    """The test fails, it is not skipped, without build/tools/parquet_tool:
    `make tools` (and every make target that runs these suites) builds it."""
    @functools.wraps(test)
    def run(*args, **kw):
        if lake.find_tool("parquet_tool") is None:
            pytest.fail("build/tools/parquet_tool is not built (make tools)")
        return test(*args, **kw)
    return run


@needs_parquet_tool
@pytest.mark.parametrize("codec", ["zstd", "snappy"])
def test_parquet_lake_is_read_with_duckdb(tmp_path, codec):
    windows, acked = build_records()
    writer = "queen-s3/2.0.0 parquet/q2 " + codec
    r = write(tmp_path, windows, fmt="parquet", compression=codec,
              writer=writer)
    s = verify(r, acked, fmt="parquet", compression=codec)
    assert s["records"] == len(acked)
    # Parquet keeps raw LF/CR: a payload with them replaced is refused.
    w = copy.deepcopy(windows)
    i = next(i for i, x in enumerate(w[0][2]) if x[4] and b"\n" in x[4])
    p, o, txn, ts, payload = w[0][2][i]
    w[0][2][i] = (p, o, txn, ts, payload.replace(b"\n", b" "))
    r = write(tmp_path, w, name="lf", fmt="parquet", compression=codec,
              writer=writer)
    with pytest.raises(LakeError, match="differs from what was pushed"):
        verify(r, acked, fmt="parquet", compression=codec)


@needs_parquet_tool
def test_parquet_row_damages_are_refused(tmp_path):
    """Damaged Parquet rows, read through DuckDB: a stamp moved by 5 µs,
    a payload changed, a row's transaction_id changed, a row repeated in a
    later window, every stamp of a window set to its start."""
    windows, acked = build_records()
    kw = dict(fmt="parquet", compression="zstd",
              writer="queen-s3/2.0.0 parquet/q2 zstd")
    vkw = dict(fmt="parquet", compression="zstd")

    def damaged(name, fn):
        w = copy.deepcopy(windows)
        fn(w)
        return write(tmp_path, w, name=name, **kw)

    r = damaged("ts", damage_stamp_plus_5us)
    with pytest.raises(LakeError, match="the broker's log says"):
        verify(r, acked, **vkw)
    verify(r, acked, log=None, **vkw)  # only the broker's stamps tell
    r = damaged("payload", damage_payload)
    with pytest.raises(LakeError, match="differs from what was pushed"):
        verify(r, acked, **vkw)
    r = damaged("txn", damage_txn)
    with pytest.raises(LakeError, match="transactionId"):
        verify(r, acked, **vkw)
    r = damaged("dup", damage_copied_to_a_later_window)
    with pytest.raises(LakeError, match="twice"):
        verify(r, acked, **vkw)
    r = damaged("start", damage_stamps_to_window_start)
    with pytest.raises(LakeError, match="the broker's log says"):
        verify(r, acked, **vkw)


DUCKDB_COPY = r"""
const { DuckDBInstance } = require('@duckdb/node-api');
(async () => {
  const con = await (await DuckDBInstance.create(':memory:')).connect();
  const [src, dst] = process.argv.slice(1);
  await con.run(`COPY (SELECT p AS partition, o AS "offset", x AS transaction_id,
      make_timestamptz(t) AS ts, v AS payload FROM read_json('${src}',
      columns={p: 'VARCHAR', o: 'BIGINT', x: 'VARCHAR', t: 'BIGINT', v: 'VARCHAR'}))
      TO '${dst}' (FORMAT parquet, COMPRESSION zstd)`);
})().catch((e) => { console.error(e); process.exit(2); });
"""


@needs_parquet_tool
def test_parquet_written_by_someone_else_is_refused(tmp_path):
    windows, acked = build_records()
    r = write(tmp_path, windows, fmt="parquet", compression="zstd",
              writer="queen-s3/2.0.0 parquet/q2 zstd")
    src, dst = tmp_path / "rows.jsonl", tmp_path / "duck.parquet"
    with open(src, "w", encoding="utf-8") as f:
        for p, o, x, t, v in windows[0][2]:
            f.write(json.dumps({"p": p, "o": o, "x": x, "t": t,
                                "v": v.decode() if v else None}) + "\n")
    subprocess.run(["node", "-e", DUCKDB_COPY, str(src), str(dst)],
                   cwd=lake.TESTS_DIR, check=True, timeout=120)
    body = dst.read_bytes()
    mkey = lake.manifest_key(PREFIX, TENANT, QUEUE, 1)
    m = json.loads(r.read(mkey))
    r.put(m["objects"][0]["key"], body)
    m["objects"][0].update(bytes=len(body),
                           sha256=hashlib.sha256(body).hexdigest())
    m["bytes"] = len(body)
    r.put(mkey, lake.compact(m))
    with pytest.raises(LakeError, match="created_by"):
        verify(r, acked, fmt="parquet", compression="zstd")


def test_push_helpers_splice_payloads_and_keep_queued_answers():
    items = [{"queue": "q", "partition": "p é", "payload": b"42.00"},
             {"queue": "q", "transactionId": "t-1", "payload": b'{"a":\n1}'},
             {"queue": "q", "partition": "p é", "payload": b"[]"}]
    assert lake.push_body(items) == (
        b'{"items":[{"queue":"q","partition":"p \xc3\xa9","payload":42.00},'
        b'{"queue":"q","transactionId":"t-1","payload":{"a":\n1}},'
        b'{"queue":"q","partition":"p \xc3\xa9","payload":[]}]}')
    answer = [{"index": 0, "transaction_id": "m0", "status": "queued",
               "offset": 0},
              {"index": 1, "transaction_id": "t-1", "status": "queued",
               "offset": 0},
              {"index": 2, "transaction_id": "m2", "status": "duplicate",
               "offset": 0}]
    assert lake.acked_from_push(items, answer) == [
        ("p é", 0, "m0", b"42.00"), ("Default", 0, "t-1", b'{"a":\n1}')]


def test_a_window_of_lost_ranges_alone_is_accepted(tmp_path):
    """Issue 13: a loss no record follows travels in a window with no
    object (records, bytes and partitions 0, no minTs/maxTs)."""
    windows, acked = build_records()
    w = copy.deepcopy(windows)
    p = PARTITIONS[0]
    gone = [r for r in w[2][2] if r[0] == p]  # offsets 6..8 of p
    w.append((w[2][1], w[2][1] + SEC, []))
    w[2] = (w[2][0], w[2][1], [r for r in w[2][2] if r[0] != p])
    lost = [{"partition": p, "from": gone[0][1], "to": gone[-1][1]}]
    r = write(tmp_path, w, lost={4: lost})
    m = json.loads(r.read(lake.manifest_key(PREFIX, TENANT, QUEUE, 4)))
    assert m["objects"] == [] and m["records"] == 0 and "minTs" not in m
    got = verify(r, acked, expect_lost=lost)
    assert got["manifests"] == 4 and got["lost"] == [
        (p, gone[0][1], gone[-1][1])]
    with pytest.raises(LakeError, match="lost ranges"):
        verify(r, acked)


def test_a_window_with_records_and_no_object_is_refused(tmp_path):
    windows, acked = build_records()
    r = write(tmp_path, windows)
    key = lake.manifest_key(PREFIX, TENANT, QUEUE, 3)
    m = json.loads(r.read(key))
    m["objects"] = []
    r.put(key, lake.compact(m))
    with pytest.raises(LakeError, match="names no object but holds records"):
        verify(r, acked)
