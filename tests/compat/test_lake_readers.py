"""Real readers read a lake written by the sink (issue 6,
docs/design/scenarios.md §11).

A real build/queen with QUEEN_S3_EMBEDDED=true writes the queue `orders`
into the test bucket in each of JSONL zstd, JSONL gzip, JSONL none, Parquet
zstd and Parquet snappy: window 1 holds the product page's three messages,
then a corpus (42.00, 100-digit integers, raw line breaks between tokens, a
null payload, awkward partition names) follows.  The lake's files are copied
from s3rver's directory into a Hive tree on disk and read by DuckDB
(@duckdb/node-api: read_parquet / read_ndjson_objects with
hive_partitioning=true), hyparquet + hyparquet-compressors (Parquet) and
pandas (JSONL); each must return exactly the pushed records, and the page's
DuckDB query must return the page's three rows in its order.

Each run rewrites tests/compat/MATRIX.md (reader x format x result, the
reader versions and the date)."""
import base64
import datetime
import json
import os
import platform
import sys

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
E2E = os.path.join(os.path.dirname(HERE), "e2e")
if E2E not in sys.path:
    sys.path.insert(0, E2E)

import lake  # noqa: E402
from sinkenv import PREFIX, TENANT, sink_env  # noqa: E402
from test_parquet_readers import read  # noqa: E402

QUEUE = "orders"
PAGE = [("cust-1", b'{"order":1,"status":"new","total":42.00}'),
        ("cust-1", b'{"order":1,"status":"paid","total":42.00}'),
        ("cust-2", b'{"order":2,"status":"new","total":17.50}')]
BIG = b"1234567890" * 10
CORPUS = [("cust 42/eu", b'{"total":42.00}'),
          ("cust 42/eu", b'{"n":' + BIG + b',"neg":-' + BIG + b'}'),
          ("r\u00e9gion-eu", b'{\r\n  "total": 42.00,\n'
           b'  "note": "a\\nb"\n}'),
          ("r\u00e9gion-eu", b"null"),
          ("cust-1", b'[42.00,' + BIG + b',"caf\xc3\xa9"]'),
          ("cust-2", b'"text"')]
FORMATS = {  # label: (format, compression, env)
    "jsonl+zstd": ("jsonl", "zstd", {"QUEEN_S3_COMPRESSION": "zstd"}),
    "jsonl+gzip": ("jsonl", "gzip", {"QUEEN_S3_COMPRESSION": "gzip"}),
    "jsonl+none": ("jsonl", "none", {"QUEEN_S3_COMPRESSION": "none"}),
    "parquet+zstd": ("parquet", "zstd", {"QUEEN_S3_FORMAT": "parquet",
                                         "QUEEN_S3_PARQUET_CODEC": "zstd"}),
    "parquet+snappy": ("parquet", "snappy",
                       {"QUEEN_S3_FORMAT": "parquet",
                        "QUEEN_S3_PARQUET_CODEC": "snappy"}),
}
READERS = ["duckdb", "duckdb page query", "hyparquet", "pandas"]
CELLS = {}


def q(s):
    return "'" + s.replace("'", "''") + "'"


def glob_of(root, fmt, compression):
    ext = lake.EXTENSIONS[(fmt, compression)]
    return os.path.join(root, PREFIX, "tenant=*", "queue=" + QUEUE, "dt=*",
                        "hour=*", "*." + ext)


def copy_lake(reader, root):
    """The queue's data objects, as files at their keys below root."""
    files = []
    for key in reader.list_keys(lake.queue_root(PREFIX, TENANT, QUEUE) + "/"):
        path = os.path.join(root, *key.split("/"))
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path, "wb") as f:
            f.write(reader.read(key))
        files.append(path)
    return files


def expected(acked, fmt):
    """(partition, offset, transactionId, payload as the format stores it),
    sorted by partition bytes and offset."""
    out = []
    for p, o, txn, pl in acked:
        if fmt == "parquet":
            pl = pl or None
        else:
            pl = (pl or b"null").replace(b"\n", b" ").replace(b"\r", b" ")
        out.append((p, o, txn, pl))
    return sorted(out, key=lambda r: (r[0].encode(), r[1]))


def push(node, pairs, tag):
    items = [{"queue": QUEUE, "partition": p, "payload": pl,
              "transactionId": "%s-%d" % (tag, i)}
             for i, (p, pl) in enumerate(pairs)]
    r = node.request("POST", "/api/v1/push", body=lake.push_body(items))
    assert r.status == 201, r
    return lake.acked_from_push(items, r.json())


def duckdb_rows(root, fmt, compression):
    g = glob_of(root, fmt, compression)
    if fmt == "parquet":
        rows = read("sql", "SELECT to_base64(encode(partition)) AS p, "
                    '"offset"::VARCHAR AS o, to_base64(encode(transaction_id))'
                    " AS t, CASE WHEN payload IS NULL THEN NULL ELSE "
                    "to_base64(encode(payload)) END AS v, queue FROM "
                    "read_parquet(%s, hive_partitioning=true)" % q(g))["rows"]
        got = [(base64.b64decode(r["p"]).decode(), int(r["o"]),
                base64.b64decode(r["t"]).decode(),
                None if r["v"] is None else base64.b64decode(r["v"]),
                r["queue"]) for r in rows]
    else:
        rows = read("sql", "SELECT json::VARCHAR AS j, queue FROM "
                    "read_ndjson_objects(%s, compression=%s, "
                    "hive_partitioning=true)"
                    % (q(g), q({"none": "uncompressed"}.get(
                        compression, compression))))["rows"]
        got = []
        for r in rows:
            line = r["j"].encode("utf-8")
            m = lake.HEAD_RE.match(line.decode("utf-8"))
            assert m, line
            head = len(m.group(0).encode("utf-8"))
            assert line.endswith(b"}"), line
            got.append((json.loads(m.group(1)), int(m.group(2)),
                        json.loads(m.group(3)), line[head:-1], r["queue"]))
    assert {x[4] for x in got} == {QUEUE}
    return sorted((x[:4] for x in got), key=lambda r: (r[0].encode(), r[1]))


def page_query(root, fmt, compression):
    """The product page's DuckDB query over the lake's files."""
    fn = "read_parquet" if fmt == "parquet" else "read_json"
    rows = read("sql", 'SELECT partition, "offset", ts, payload FROM '
                "%s(%s, hive_partitioning = true) ORDER BY partition, ts, "
                '"offset"' % (fn, q(glob_of(root, fmt, compression))))["rows"]
    # read_json makes payload a STRUCT (its BIGINTs come back as strings);
    # to_json turns it back into JSON text to compare by value.
    payload = "payload" if fmt == "parquet" else "to_json(payload)::VARCHAR"
    texts = read("sql", "SELECT %s AS v FROM %s(%s, hive_partitioning = true)"
                 ' ORDER BY partition, ts, "offset"'
                 % (payload, fn, q(glob_of(root, fmt, compression))))["rows"]
    return [(r["partition"], str(r["offset"]), json.loads(t["v"]))
            for r, t in zip(rows, texts)]


def hyparquet_rows(files):
    got = []
    for f, ans in read("hyparquet", *files).items():
        for p, o, t, _ts, v in ans["rows"]:
            got.append((base64.b64decode(p).decode(), int(o),
                        base64.b64decode(t).decode(),
                        None if v is None else base64.b64decode(v)))
    return sorted(got, key=lambda r: (r[0].encode(), r[1]))


def pandas_rows(files, compression):
    import pandas as pd
    frames = [pd.read_json(f, lines=True, dtype=False,
                           compression=None if compression == "none"
                           else compression) for f in files]
    df = pd.concat(frames)
    got = [(r["partition"], int(r["offset"]), r["transactionId"],
            r["payload"]) for r in df.to_dict("records")]
    return sorted(got, key=lambda r: (r[0].encode(), r[1]))


def parsed(want):
    return [(p, o, t, None if pl in (None, b"null") else json.loads(pl))
            for p, o, t, pl in want]


def versions():
    import pandas
    import zstandard
    out = {"duckdb": read("sql", "SELECT version() AS v")["rows"][0]["v"]}
    for name in ("@duckdb/node-api", "hyparquet", "hyparquet-compressors"):
        with open(os.path.join(os.path.dirname(HERE), "node_modules", name,
                               "package.json")) as f:
            out[name] = json.load(f)["version"]
    out["pandas"] = pandas.__version__
    out["zstandard"] = zstandard.__version__
    out["python"] = platform.python_version()
    return out


@pytest.fixture(scope="module", autouse=True)
def matrix():
    yield
    if not CELLS:
        return
    lines = ["# Reader compatibility of a lake written by the sink", "",
             "Written by tests/compat/test_lake_readers.py on %s UTC (each "
             "run rewrites it)." % datetime.datetime.utcnow().strftime(
                 "%Y-%m-%d %H:%M"), "",
             "| reader | " + " | ".join(FORMATS) + " |",
             "|---" * (len(FORMATS) + 1) + "|"]
    for r in READERS:
        lines.append("| %s | " % r + " | ".join(
            CELLS.get((r, f), "not-run") for f in FORMATS) + " |")
    lines += ["", "Versions: " + ", ".join(
        "%s %s" % kv for kv in versions().items()) + ".", "",
        "`ok` = exactly the pushed records (partition, offset, "
        "transactionId, payload bytes; pandas: payload as parsed JSON). "
        "`n/a` = the reader does not read that format.", "",
        "(1) pandas `read_json(f, lines=True, dtype=False, compression=...)`"
        " raises `Value is too big!` (its ujson parser stops at 64-bit "
        "integers) on the corpus's 100-digit integers; over window 1 (the "
        "page's three messages) it returns exactly the pushed records.", "",
        "Incantations: DuckDB `read_parquet(glob, hive_partitioning=true)`, "
        "`read_ndjson_objects(glob, compression=..., hive_partitioning=true)`"
        " (byte-exact lines), the page's query with `read_json(glob, "
        "hive_partitioning = true)`; hyparquet `parquetReadObjects({file, "
        "compressors})` per object. The null payload is pushed as JSON "
        "`null` and is stored as that text (Parquet: the string `null`, "
        "not a NULL cell).", ""]
    with open(os.path.join(HERE, "MATRIX.md"), "w") as f:
        f.write("\n".join(lines))


def _cell(reader, label, check):
    CELLS[(reader, label)] = "fail"
    result = check()
    CELLS[(reader, label)] = result or "ok"


@pytest.mark.parametrize("label", list(FORMATS))
def test_readers_return_exactly_the_pushed_records(
        broker_factory, bucket, tmp_path, label):
    fmt, compression, env = FORMATS[label]
    node = broker_factory(env=sink_env(bucket, **env))
    reader = lake.bucket_reader(bucket)
    verify = dict(fmt=fmt, compression=compression, align="none")
    acked = push(node, PAGE, "page")
    lake.wait_queue(reader, PREFIX, TENANT, QUEUE, acked, timeout=90,
                    **verify)
    page_root = str(tmp_path / "page")
    page_files = copy_lake(reader, page_root)
    page_want = expected(acked, fmt)

    def page():
        assert page_query(page_root, fmt, compression) == [
            (p, str(o), json.loads(pl)) for p, o, _, pl in acked]
    _cell("duckdb page query", label, page)

    acked += push(node, CORPUS, "corpus")
    lake.wait_queue(reader, PREFIX, TENANT, QUEUE, acked, timeout=90,
                    **verify)
    assert node.stop() == 0
    root = str(tmp_path / "lake")
    files = copy_lake(reader, root)
    want = expected(acked, fmt)

    def duck():
        assert duckdb_rows(root, fmt, compression) == want
    _cell("duckdb", label, duck)

    def hyp():
        if fmt != "parquet":
            return "n/a"
        assert hyparquet_rows(files) == want
    _cell("hyparquet", label, hyp)

    def pan():
        if fmt == "parquet":
            return "n/a"
        assert pandas_rows(page_files, compression) == parsed(page_want)
        try:
            got = pandas_rows(files, compression)
        except ValueError as e:
            # pandas' ujson parser refuses integers beyond 64 bits.
            assert "Value is too big" in str(e), e
            return "unsupported (1)"
        assert got == parsed(want)
    _cell("pandas", label, pan)
