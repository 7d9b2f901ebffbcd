"""Real readers read the Parquet files our writer makes (issue 6 acceptance).

Records go to build/tools/parquet_tool as length-prefixed binary (see the
tool's header), the tool writes a .parquet with src/parquet/parquet.c, and
tests/compat/read_parquet.mjs reads it with DuckDB (@duckdb/node-api) and
hyparquet (+ hyparquet-compressors). Every record must come back exactly:
bytes of partition, transaction_id and payload (42.00, 100-digit integers and
raw line breaks included), offset, and ts to the microsecond as a TIMESTAMP
WITH TIME ZONE. Both codecs.
"""
import base64
import json
import os
import struct
import subprocess

import pytest

ROOT = os.environ.get("QUEEN_ROOT") or os.path.abspath(
    os.path.join(os.path.dirname(__file__), "..", ".."))
TOOLS = os.environ.get("QUEEN_TOOLS") or os.path.join(ROOT, "build", "tools")
TOOL = os.path.join(TOOLS, "parquet_tool")
READER = os.path.join(ROOT, "tests", "compat", "read_parquet.mjs")
CODECS = ["zstd", "snappy"]
TENANT = "00000000-0000-0000-0000-000000000001"
T0 = 1791007200000000  # 2026-10-03T06:00:00Z


def encode(records):
    out = bytearray()
    for part, off, txn, ts, payload in records:
        p, t, pl = part.encode(), txn.encode(), payload or b""
        out += struct.pack("<I", len(p)) + p + struct.pack("<q", off)
        out += struct.pack("<I", len(t)) + t + struct.pack("<q", ts)
        out += struct.pack("<I", len(pl)) + pl
    return bytes(out)


def write_parquet(tmp_path, records, name="f.parquet", codec="zstd",
                  row_group=None, queue="orders", tenant=TENANT):
    src = tmp_path / (os.path.basename(name) + ".in")
    src.write_bytes(encode(records))
    dst = tmp_path / name
    dst.parent.mkdir(parents=True, exist_ok=True)
    cmd = [TOOL, "write", "--codec", codec]
    if row_group:
        cmd += ["--row-group", str(row_group)]
    if queue is not None:
        cmd += ["--queue", queue]
    if tenant is not None:
        cmd += ["--tenant", tenant]
    subprocess.run(cmd + [str(src), str(dst)], check=True, timeout=120)
    return str(dst)


def read(mode, *args):
    r = subprocess.run(["node", READER, mode, *args], capture_output=True,
                       timeout=300, cwd=os.path.dirname(READER))
    assert r.returncode == 0, r.stderr.decode(errors="replace")[-2000:]
    return json.loads(r.stdout)


def b64(b):
    return base64.b64encode(b).decode()


def expected_rows(records):
    return [[b64(p.encode()), str(o), b64(t.encode()), str(ts),
             None if not pl else b64(pl)] for p, o, t, ts, pl in records]


def awkward_records():
    pretty = b'{\r\n  "total": 42.00,\n  "note": "a\\nb",\n  "n": 1.500\n}'
    big = b'{"big":' + b"1234567890" * 10 + b"}"
    recs = []
    names = ["cust 42/eu", "région-eu", "東京-01", "z\U0001F600"]
    for pi, name in enumerate(sorted(names, key=lambda s: s.encode())):
        for off in range(30):
            payload = [pretty, big, None, b'"text"', b"[1,2,3]",
                       b'{"amount":42.00,"e":1E+400,"z":-0}'][off % 6]
            recs.append((name, off, f"01a1007b-855d-7001-8107-{pi:04d}{off:08d}",
                         T0 + off * 1_000_000 + pi, payload))
    return recs


@pytest.mark.parametrize("codec", CODECS)
def test_both_readers_return_exactly_the_records(tmp_path, codec):
    recs = awkward_records()
    f = write_parquet(tmp_path, recs, codec=codec)
    want = expected_rows(recs)
    duck = read("duckdb", f)[f]
    assert [r[:5] for r in duck["rows"]] == want
    assert {r[5] for r in duck["rows"]} == {"TIMESTAMP WITH TIME ZONE"}
    hyp = read("hyparquet", f)[f]
    assert hyp["rows"] == want


@pytest.mark.parametrize("codec", CODECS)
def test_schema_metadata_and_kv_as_duckdb_sees_them(tmp_path, codec):
    recs = [(f"p{p}", o, f"t{p}-{o}", T0 + o * 10 + p, b'{"a":1}')
            for p in range(3) for o in range(834)][:2500]
    f = write_parquet(tmp_path, recs, codec=codec, row_group=1000)
    d = read("duckdb", f)[f]
    cols = {s["name"]: s for s in d["schema"]}
    assert [s["name"] for s in d["schema"]] == [
        "queen_record", "partition", "offset", "transaction_id", "ts", "payload"]
    assert cols["partition"]["logical_type"] == "StringType()"
    assert cols["transaction_id"]["converted_type"] == "UTF8"
    assert cols["payload"]["repetition_type"] == "OPTIONAL"
    assert cols["offset"]["type"] == "INT64"
    assert cols["ts"]["duckdb_type"] == "TIMESTAMP WITH TIME ZONE"
    assert "isAdjustedToUTC=1" in cols["ts"]["logical_type"]
    assert "MICROS=MicroSeconds()" in cols["ts"]["logical_type"]
    assert d["kv"] == [["queen.envelope", "1"], ["queen.queue", "orders"],
                       ["queen.tenant", TENANT]]
    assert d["file_meta"]["created_by"] == "queen-s3"
    assert d["file_meta"]["num_rows"] == "2500"
    md = d["metadata"]
    assert {m["compression"] for m in md} == {codec.upper()}
    groups = {}
    for m in md:
        groups.setdefault(int(m["row_group_id"]), m["row_group_num_rows"])
    assert [int(groups[g]) for g in sorted(groups)] == [1000, 1000, 500]
    for g in range(3):
        chunk = recs[g * 1000:(g + 1) * 1000]
        by = {m["path_in_schema"]: m for m in md if int(m["row_group_id"]) == g}
        assert by["offset"]["stats_min_value"] == str(min(r[1] for r in chunk))
        assert by["offset"]["stats_max_value"] == str(max(r[1] for r in chunk))
        assert by["offset"]["stats_null_count"] == "0"
        assert by["partition"]["stats_min_value"] == chunk[0][0]
        assert by["partition"]["stats_max_value"] == chunk[-1][0]
        assert by["partition"]["encodings"].startswith("PLAIN_DICTIONARY")
        assert "DELTA_BINARY_PACKED" in by["ts"]["encodings"]
    # ts statistics prune: a range with no row skips every row group
    r = read("sql", f"SELECT count(*) AS n FROM read_parquet('{f}') "
                    "WHERE ts < TIMESTAMPTZ '2026-10-03 05:00:00+00'")
    assert r["rows"] == [{"n": "0"}]


@pytest.mark.parametrize("codec", CODECS)
def test_large_empty_and_null_payloads(tmp_path, codec):
    huge = b'{"blob":"' + b"x" * 1_500_000 + b'"}'
    recs = [("a", 0, "t0", T0, b"{}"), ("a", 1, "", T0 + 1, None),
            ("a", 2, "t2", T0 + 2, huge), ("a", 3, "t3", T0 + 3, b"0")]
    f = write_parquet(tmp_path, recs, codec=codec)
    want = expected_rows(recs)
    assert [r[:5] for r in read("duckdb", f)[f]["rows"]] == want
    assert read("hyparquet", f)[f]["rows"] == want


@pytest.mark.parametrize("codec", CODECS)
def test_100001_records_make_two_row_groups(tmp_path, codec):
    recs = [(f"cust-{i % 7}", i // 7, f"txn-{i}", T0 + i, b'{"i":%d}' % i)
            for i in range(100_001)]
    recs.sort(key=lambda r: (r[0], r[1]))
    f = write_parquet(tmp_path, recs, codec=codec)
    want = expected_rows(recs)
    d = read("duckdb", f)[f]
    assert [r[:5] for r in d["rows"]] == want
    sizes = sorted({(m["row_group_id"], m["row_group_num_rows"])
                    for m in d["metadata"]})
    assert [int(n) for _, n in sizes] == [100_000, 1]
    h = read("hyparquet", f)[f]
    assert h["row_groups"] == [100_000, 1]
    assert h["rows"] == want


def test_ten_thousand_partitions_in_one_window(tmp_path):
    recs = [(f"p-{p:05d}-ü", o, f"t{p}.{o}", T0 + o * 100 + p, b"[%d]" % p)
            for p in range(10_000) for o in range(2)]
    f = write_parquet(tmp_path, recs, codec="zstd")
    want = expected_rows(recs)
    assert [r[:5] for r in read("duckdb", f)[f]["rows"]] == want
    assert read("hyparquet", f)[f]["rows"] == want


def test_no_tenant_writes_two_pairs_and_hyparquet_sees_them(tmp_path):
    f = write_parquet(tmp_path, [("a", 0, "t", T0, b"1")], tenant=None)
    assert read("duckdb", f)[f]["kv"] == [["queen.envelope", "1"],
                                          ["queen.queue", "orders"]]
    assert read("hyparquet", f)[f]["kv"] == [["queen.envelope", "1"],
                                             ["queen.queue", "orders"]]


def test_the_product_page_query_over_a_hive_layout(tmp_path):
    recs = [("cust-1", 0, "a", T0 + 5, b'{"order":1,"total":42.00}'),
            ("cust-1", 1, "b", T0 + 5, b'{"order":1,"status":"paid"}'),
            ("cust-2", 0, "c", T0 + 5, b'{"order":2,"total":17.50}')]
    key = (f"queen/tenant={TENANT}/queue=orders/dt=2026-10-03/hour=06/"
           "w-0000000001-1791007200000000-1791009458377855.parquet")
    write_parquet(tmp_path, recs, name=key)
    glob = str(tmp_path / "queen/tenant=*/queue=orders/dt=*/hour=*/*.parquet")
    r = read("sql", 'SELECT partition, "offset"::VARCHAR AS o, payload, '
             "queue FROM read_parquet('" + glob + "', hive_partitioning = true)"
             " WHERE dt = '2026-10-03' ORDER BY partition, ts, \"offset\"")
    assert [(x["partition"], x["o"], x["payload"], x["queue"])
            for x in r["rows"]] == [
        ("cust-1", "0", '{"order":1,"total":42.00}', "orders"),
        ("cust-1", "1", '{"order":1,"status":"paid"}', "orders"),
        ("cust-2", "0", '{"order":2,"total":17.50}', "orders")]


def test_extreme_offsets_and_stamps_need_64_bit_deltas(tmp_path):
    # Jumps across the whole int64 range force 64-bit miniblocks in
    # DELTA_BINARY_PACKED; both readers must still get every value back.
    recs = [("a", -2**63, "x", T0, b"1"), ("a", -5, "x", T0 + 1, b"1"),
            ("a", 2**63 - 1, "x", T0 - 2**40, b"1"), ("b", 0, "y", -2**62, None)]
    recs += [("c", i * 2**57, "z", T0 + i * 2**50, b"2") for i in range(-60, 60)]
    f = write_parquet(tmp_path, recs, codec="snappy")
    want = expected_rows(recs)
    assert [r[:5] for r in read("duckdb", f)[f]["rows"]] == want
    assert read("hyparquet", f)[f]["rows"] == want
