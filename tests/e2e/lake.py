"""The lake verifier: the oracle every sink end-to-end test uses.

It reads only the bucket's files (s3rver's directory, a plain directory or
boto3) and never trusts what the sink says about itself.  verify_queue()
checks, for one queue, every rule of docs/design/scenarios.md §9
`verify_queue`:

  (1) manifests windows/<k:010>.json numbered 1..n with no gap, compact JSON
      with the keys in the order of docs/design/formats.md §3, naming the sink,
      tenant,
      queue and k; format, compression, layout and writer as expected; lost
      ranges as expected (none unless the test says which); tStart < tEnd
      and tStart(k) = tEnd(k-1) (windows tile), or tStart(k) a later hour
      boundary (an aligned queue's empty stretch stepped over);
  (2) each manifest's objects at the keys derived from (prefix, tenant,
      queue, k, tStart, tEnd, align, layout) (docs/design/formats.md §2), with bytes,
      sha256, records, partitions, minTs and maxTs matching the objects; a
      window with no record names no object (records, bytes and partitions
      0, no minTs/maxTs): a window of lost ranges alone, which carries a
      loss no record followed to the bucket (docs/s3-sink.md);
  (3) each object decoded per its extension (.jsonl.zst, .jsonl.gz, .jsonl)
      ends with LF, one line per record, each line's envelope byte-exact
      (keys partition, offset, transactionId, ts, payload; the head rebuilt
      with json.dumps(ensure_ascii=False) equals the bytes; ts ISO with 6
      digits); payload = the raw bytes after ,"payload": up to the last };
  (4) lines sorted by (partition UTF-8 bytes, offset) strictly; every ts in
      [tStart, tEnd);
  (5) every acknowledged record in the lake exactly once, with its
      transactionId and its payload byte-identical (raw LF and CR replaced by
      a space; an empty payload reads null); nothing unacknowledged;
  (6) offsets per partition contiguous from 0 (in the lake and in the push
      answers), except inside expected lost ranges; ts non-decreasing with
      offset;
  (7) no orphan data objects: every object under the queue's data prefix is
      named by a manifest; checkpoints decode and match their window: the
      same k and tEnd, positions [partition, offset(, id)] sorted by name,
      each partition's offset splitting the lake's records into those of
      windows <= k (below it) and those of later windows (at or above it),
      every partition with a record in windows <= k named (k 0:
      positions kept before the first window, when a loss came first); with
      checkpoint_every=N, a checkpoint exists for every k <= n with k % N
      == 0 (others, a drain's or a loss's, are checked like these);
  (8) with broker= (or log=), each record's ts, transactionId and payload
      equal the broker's own log read back with POST /api/v1/fetch (the
      truth for (partition, offset)): a stamp moved by 1 µs is refused.
      Records below a partition's logStartOffset (trimmed) are not checked.

Parquet objects are read with DuckDB (npm @duckdb/node-api, one node process
per verification), never with our own decoder: rule (3) becomes the schema,
codec and footer of docs/design/formats.md §7, and a payload is compared
verbatim (in
Parquet raw LF/CR stay; an empty payload is NULL).

A failure raises LakeError(reason); the reason names the rule's words
("differs from what was pushed", "transactionId", "twice", "not in the
lake", "not sorted", "outside the window", "do not tile", "no manifest
names it", "sha256 differs", "the broker's log says", "has no checkpoint",
"positions do not match") so a test can tell which rule broke.

make_lake() is the mirror image: it writes a lake by the same rules, for the
self-test and for reader-compatibility tests.
"""

import calendar
import datetime
import gzip
import hashlib
import io
import json
import os
import re
import struct
import subprocess
import sys
import tempfile
import time

ISO_RE = re.compile(r"^(\d{4})-(\d\d)-(\d\d)T(\d\d):(\d\d):(\d\d)\.(\d{6})Z$")
STRING = r'"(?:[^"\\]|\\.)*"'
HEAD_RE = re.compile(
    (r'^\{"partition":(%s),"offset":(-?\d+),"transactionId":(%s),'
     r'"ts":"([^"]*)","payload":') % (STRING, STRING), re.S)
MANIFEST_KEYS = ["sink", "tenant", "queue", "k", "tStart", "tEnd", "format",
                 "compression", "layout", "objects", "records", "bytes",
                 "partitions", "minTs", "maxTs", "lost", "writer",
                 "committedAt", "positions"]
OBJECT_KEYS = ["key", "bytes", "records", "sha256", "partition",
               "firstOffset", "lastOffset"]
EXTENSIONS = {("jsonl", "zstd"): "jsonl.zst", ("jsonl", "gzip"): "jsonl.gz",
              ("jsonl", "none"): "jsonl", ("parquet", "zstd"): "parquet",
              ("parquet", "snappy"): "parquet"}
# The writer strings our sink writes (src/sink/jsonl.h, src/parquet/parquet.h).
# The Parquet tag is ours, "q2", not parquet-rs's "59": docs/design/formats.md
# §8 allows a
# re-implementation its own, and a redo compares the whole string.
WRITER_FORMATS = {("jsonl", "zstd"): "jsonl+zstd", ("jsonl", "gzip"):
                  "jsonl+gzip", ("jsonl", "none"): "jsonl",
                  ("parquet", "zstd"): "parquet/q2 zstd",
                  ("parquet", "snappy"): "parquet/q2 snappy"}
# What earlier versions of the sink wrote for the same format: their objects
# stay valid (src/lake/lake.c, lake_codec_of). q1 had 1 MiB zstd pages.
OLDER_WRITER_FORMATS = {("parquet", "zstd"): "parquet/q1 zstd",
                        ("parquet", "snappy"): "parquet/q1 snappy"}
HOUR_US = 3600 * 10**6
SAFE = frozenset(b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"
                 b"0123456789._-")


class LakeError(AssertionError):
    """The lake breaks a rule; .reason says which and where."""

    def __init__(self, reason):
        super().__init__(reason)
        self.reason = reason


# ---------------------------------------------------------------------------
# Readers: list_keys(prefix) -> sorted keys, read(key) -> bytes | None

METADATA_SUFFIX = "._S3rver_metadata.json"


class S3rverDirReader:
    """The files of one bucket in s3rver's directory (TestBucket.data_dir)."""

    def __init__(self, data_dir, bucket):
        here = os.path.join(os.path.dirname(os.path.dirname(
            os.path.abspath(__file__))), "bucket")
        if here not in sys.path:
            sys.path.insert(0, here)
        import s3proxy  # tests/bucket: the layout of s3rver's files
        self._s3proxy = s3proxy
        self.data_dir = data_dir
        self.bucket = bucket

    def _complete(self, key):
        """s3rver streams an object's file first and writes its metadata
        file last, and lists only objects that have one; a key whose
        metadata is not there yet is a PUT in progress (its file may be
        empty or short), not an object."""
        return os.path.exists(self._s3proxy.object_path(
            self.data_dir, self.bucket, key, suffix=METADATA_SUFFIX))

    def list_keys(self, prefix=""):
        return [k for k in self._s3proxy.walk_keys(self.data_dir, self.bucket,
                                                   prefix)
                if self._complete(k)]

    def read(self, key):
        if not self._s3proxy.key_is_storable(key) or not self._complete(key):
            return None
        try:
            with open(self._s3proxy.object_path(self.data_dir, self.bucket,
                                                key), "rb") as f:
                return f.read()
        except (FileNotFoundError, NotADirectoryError):
            return None


def bucket_reader(test_bucket, bucket="lake"):
    """A reader over a running TestBucket's files on disk (an RGW bucket,
    which has none: RGW itself, not through the test's proxy)."""
    if getattr(test_bucket, "kind", "s3rver") == "rgw":
        return test_bucket.reader(bucket)
    return S3rverDirReader(test_bucket.data_dir, bucket)


class PlainDirReader:
    """A hand-made lake: the key is the file's path below root."""

    def __init__(self, root):
        self.root = root

    def list_keys(self, prefix=""):
        keys = []
        for dirpath, _, files in os.walk(self.root):
            rel = os.path.relpath(dirpath, self.root)
            for name in files:
                key = name if rel == "." else rel + "/" + name
                if key.startswith(prefix):
                    keys.append(key)
        return sorted(keys, key=lambda k: k.encode())

    def read(self, key):
        try:
            with open(os.path.join(self.root, *key.split("/")), "rb") as f:
                return f.read()
        except (FileNotFoundError, NotADirectoryError, IsADirectoryError):
            return None

    def put(self, key, data):
        path = os.path.join(self.root, *key.split("/"))
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path, "wb") as f:
            f.write(data)


class Boto3Reader:
    """Any bucket through a boto3 client (TestBucket.boto3())."""

    def __init__(self, client, bucket):
        self.client = client
        self.bucket = bucket

    def list_keys(self, prefix=""):
        pages = self.client.get_paginator("list_objects_v2").paginate(
            Bucket=self.bucket, Prefix=prefix)
        return sorted((o["Key"] for p in pages for o in p.get("Contents", [])),
                      key=lambda k: k.encode())

    def read(self, key):
        try:
            return self.client.get_object(Bucket=self.bucket,
                                          Key=key)["Body"].read()
        except self.client.exceptions.NoSuchKey:
            return None


# ---------------------------------------------------------------------------
# Names, keys and stamps (docs/design/formats.md §1, §2, §10)

def esc(name):
    """docs/design/formats.md §1: every byte outside A-Z a-z 0-9 . _ - as
    %XX."""
    return "".join(chr(c) if c in SAFE else "%%%02X" % c
                   for c in name.encode("utf-8"))


def iso_us(us):
    """ISO-µs text of a µs stamp: 2026-09-04T10:05:00.000000Z."""
    d = datetime.datetime(1970, 1, 1) + datetime.timedelta(microseconds=us)
    return d.strftime("%Y-%m-%dT%H:%M:%S.") + "%06dZ" % d.microsecond


def parse_iso_us(text):
    m = ISO_RE.match(text)
    if not m:
        return None
    y, mo, d, h, mi, s, frac = (int(x) for x in m.groups())
    try:
        datetime.date(y, mo, d)
    except ValueError:
        return None
    if h > 23 or mi > 59 or s > 59:
        return None
    return (calendar.timegm((y, mo, d, h, mi, s)) * 10**6) + frac


def queue_root(prefix, tenant, queue):
    return "%s/tenant=%s/queue=%s" % (prefix, esc(tenant), esc(queue))


def sidecar_root(prefix, tenant, queue):
    return "%s/_queen/tenant=%s/queue=%s" % (prefix, esc(tenant), esc(queue))


def manifest_key(prefix, tenant, queue, k):
    return "%s/windows/%010d.json" % (sidecar_root(prefix, tenant, queue), k)


def checkpoint_key(prefix, tenant, queue, k):
    return "%s/checkpoint/%010d.json.zst" % (
        sidecar_root(prefix, tenant, queue), k)


def data_key(prefix, tenant, queue, k, t_start, t_end, *, fmt="jsonl",
             compression="zstd", align="hour", partition=None, first=None,
             last=None):
    """docs/design/formats.md §2; dt/hour from max(tStart, 0)."""
    stamp = iso_us(max(t_start, 0))
    parts = [queue_root(prefix, tenant, queue), "dt=" + stamp[:10]]
    if align in ("hour", "none"):
        parts.append("hour=" + stamp[11:13])
    name = "w-%010d-%016d-%016d" % (k, max(t_start, 0), max(t_end, 0))
    if partition is not None:
        name += "-p-%s-%012d-%012d" % (esc(partition), max(first, 0),
                                       max(last, 0))
    parts.append(name + "." + EXTENSIONS[(fmt, compression)])
    return "/".join(parts)


# ---------------------------------------------------------------------------
# Encoding (make_lake) and decoding

def jsonl_line(partition, offset, txn, ts_us, payload):
    """One record as the sink writes it (docs/design/formats.md §6)."""
    if payload is None or payload == b"":
        payload = b"null"
    payload = payload.replace(b"\n", b" ").replace(b"\r", b" ")
    head = '{"partition":%s,"offset":%d,"transactionId":%s,"ts":"%s",' \
        '"payload":' % (json.dumps(partition, ensure_ascii=False), offset,
                        json.dumps(txn, ensure_ascii=False), iso_us(ts_us))
    return head.encode("utf-8") + payload + b"}\n"


def compress(data, compression):
    if compression == "zstd":
        import zstandard
        return zstandard.ZstdCompressor(level=3).compress(data)
    if compression == "gzip":
        return gzip.compress(data, compresslevel=6, mtime=0)
    return data


def decompress(data, compression, key):
    try:
        if compression == "zstd":
            import zstandard
            with zstandard.ZstdDecompressor().stream_reader(
                    io.BytesIO(data), read_across_frames=True) as r:
                return r.read()
        if compression == "gzip":
            return gzip.decompress(data)
        return data
    except Exception as e:  # zstd.ZstdError, OSError, EOFError, ...
        raise LakeError("%s: does not decode as %s: %s"
                        % (key, compression, e)) from None


def make_lake(put, prefix, tenant, queue, windows, *, fmt="jsonl",
              compression="zstd", layout="merged", align="hour",
              sink="default", writer=None, committed_at=None,
              checkpoint_every=0, lost=None):
    """Write a lake by the rules verify_queue checks (Parquet objects come
    from our writer through tests/tools/parquet_tool).  put(key, bytes)
    stores an object; windows = [(tStart, tEnd, [(partition, offset,
    transactionId, ts µs, payload bytes)])] for k = 1, 2, ...; the records
    are written in the order given (sort them to obtain a good lake).
    lost = {k: [{"partition", "from", "to"}]}.  Returns the manifests."""
    writer = writer or "queen-s3/2.0.0 " + WRITER_FORMATS[(fmt, compression)]
    committed_at = committed_at or "2026-10-02T00:00:00.000000Z"
    out = []
    for k, (t_start, t_end, records) in enumerate(windows, 1):
        groups = [] if not records else [(None, records)] \
            if layout == "merged" else _runs_by_partition(records)
        objects = []
        for part, recs in groups:
            if fmt == "parquet":
                body = parquet_with_tool(recs, queue, tenant, compression)
            else:
                body = compress(b"".join(jsonl_line(*r) for r in recs),
                                compression)
            key = data_key(prefix, tenant, queue, k, t_start, t_end, fmt=fmt,
                           compression=compression, align=align,
                           partition=part,
                           first=recs[0][1] if part is not None else None,
                           last=recs[-1][1] if part is not None else None)
            put(key, body)
            obj = {"key": key, "bytes": len(body), "records": len(recs),
                   "sha256": hashlib.sha256(body).hexdigest()}
            if part is not None:
                obj.update(partition=part, firstOffset=recs[0][1],
                           lastOffset=recs[-1][1])
            objects.append(obj)
        m = {"sink": sink, "tenant": tenant, "queue": queue, "k": k,
             "tStart": t_start, "tEnd": t_end, "format": fmt,
             "compression": compression, "layout": layout,
             "objects": objects, "records": len(records),
             "bytes": sum(o["bytes"] for o in objects),
             "partitions": len({r[0] for r in records})}
        if records:
            m["minTs"] = min(r[3] for r in records)
            m["maxTs"] = max(r[3] for r in records)
        m.update(lost=list((lost or {}).get(k, [])), writer=writer,
                 committedAt=committed_at)
        put(manifest_key(prefix, tenant, queue, k), compact(m))
        if checkpoint_every and k % checkpoint_every == 0:
            put(checkpoint_key(prefix, tenant, queue, k),
                compress(compact({"k": k, "tEnd": t_end,
                                  "positions": positions_after(windows, k)}),
                         "zstd"))
        out.append(m)
    return out


def positions_after(windows, k):
    """A checkpoint's positions after window k (as the sink's engine keeps
    them): per partition of the lake, the first offset not in windows
    1..k, sorted by the name's bytes."""
    upto, later = {}, {}
    for i, (_, _, records) in enumerate(windows, 1):
        for r in records:
            if i <= k:
                upto[r[0]] = max(upto.get(r[0], -1), r[1])
            else:
                later[r[0]] = min(later.get(r[0], r[1]), r[1])
    names = set(upto) | set(later)
    return [[p, upto[p] + 1 if p in upto else later[p]]
            for p in sorted(names, key=lambda x: x.encode("utf-8"))]


def _runs_by_partition(records):
    runs = []
    for r in records:
        if runs and runs[-1][0] == r[0]:
            runs[-1][1].append(r)
        else:
            runs.append((r[0], [r]))
    return runs


def compact(obj):
    return json.dumps(obj, ensure_ascii=False,
                      separators=(",", ":")).encode("utf-8")


# ---------------------------------------------------------------------------
# Verification


HOUR_US = 3600 * 10**6


def windows_meet(prev_end, t_start):
    """Window k starts where k - 1 ended, or on a later hour boundary: an
    aligned queue idle across hh:00 has its empty stretch stepped over
    (docs/design/window.md), and no record can lie in that gap."""
    return t_start == prev_end or (t_start > prev_end
                                   and t_start % HOUR_US == 0)


def verify_queue(reader, prefix, tenant, queue, acked, *, fmt="jsonl",
                 compression="zstd", layout="merged", align="hour",
                 sink="default", expect_lost=None, broker=None, log=None,
                 checkpoint_every=None):
    """Check the lake of one queue (rules (1)-(8) above) against the acked
    records [(partition, offset, transactionId, payload bytes)].  broker is
    a running broker (anything with request(method, path, body=)) whose log
    holds the queue: its records are the truth for each lake record's ts,
    transactionId and payload (rule (8)); log is that truth given directly
    (a BrokerLog).  checkpoint_every=N requires the checkpoints of rule (7).
    align is "hour", "day" or "none", or a function of k giving it (a redo
    keeps its intent's align while later windows take a new one).
    Returns a summary dict; raises LakeError with the first broken rule."""
    if (fmt, compression) not in EXTENSIONS:
        raise ValueError("no %s object is compressed with %s"
                         % (fmt, compression))
    expect_lost = sorted(_lost_tuple(x) for x in expect_lost or [])
    want = _index_acked(acked, expect_lost, fmt)
    manifests = _read_manifests(reader, prefix, tenant, queue)
    opts = dict(fmt=fmt, compression=compression, layout=layout,
                align=align, sink=sink, tenant=tenant, queue=queue)
    if broker is not None and log is None:
        log = broker_log(broker, queue, sorted({a[0] for a in acked}),
                         fmt=fmt)
    opts["log"] = log
    if fmt == "parquet":
        opts["parquet"] = _parquet_read_all(reader, manifests)
    seen = {}  # (partition, offset) -> (ts, where, k)
    named = set()
    lost = []
    prev = None
    for k, m in manifests:
        _check_manifest(m, k, tenant, queue, opts)
        if prev is not None and not windows_meet(prev["tEnd"], m["tStart"]):
            raise LakeError("windows %d and %d do not tile: tEnd(%d)=%d but "
                            "tStart(%d)=%d" % (k - 1, k, k - 1, prev["tEnd"],
                                               k, m["tStart"]))
        lost += [_lost_tuple(x) for x in m["lost"]]
        _check_objects(reader, prefix, tenant, queue, k, m, opts, seen, want)
        named.update(o["key"] for o in m["objects"])
        prev = m
    if sorted(lost) != expect_lost:
        raise LakeError("lost ranges %s differ from the expected %s"
                        % (sorted(lost), expect_lost))
    for (p, o) in sorted(want, key=lambda x: (x[0].encode(), x[1])):
        if (p, o) not in seen:
            raise LakeError("record %r/%d was acknowledged but is not in the "
                            "lake" % (p, o))
    per_partition = _check_offsets(seen, expect_lost)
    _check_orphans(reader, prefix, tenant, queue, named)
    checkpoints = _check_checkpoints(reader, prefix, tenant, queue,
                                     dict(manifests), seen, checkpoint_every)
    return {"manifests": len(manifests), "objects": len(named),
            "records": len(seen), "partitions": per_partition,
            "bytes": sum(m["bytes"] for _, m in manifests),
            "tEnd": prev["tEnd"] if prev else None, "lost": lost,
            "checkpoints": checkpoints,
            "stamps_checked": sum(1 for x in seen if log is not None and
                                  x in log.records)}


def _lost_tuple(x):
    if isinstance(x, dict):
        return (x["partition"], x["from"], x["to"])
    return tuple(x)


def _in_lost(lost, p, o):
    return any(lp == p and lo <= o <= hi for lp, lo, hi in lost)


def _index_acked(acked, expect_lost, fmt="jsonl"):
    want = {}
    offsets = {}
    pairs = set()
    for p, o, txn, payload in acked:
        if (p, o) in pairs:
            raise LakeError("the push answers hold %r/%d twice" % (p, o))
        pairs.add((p, o))
        if isinstance(payload, str):
            payload = payload.encode("utf-8")
        if fmt == "parquet":
            payload = payload or None  # verbatim; empty is NULL
        elif payload is None or payload == b"":
            payload = b"null"
        else:
            payload = payload.replace(b"\n", b" ").replace(b"\r", b" ")
        offsets.setdefault(p, []).append(o)
        if not _in_lost(expect_lost, p, o):
            want[(p, o)] = (txn, payload)
    for p, offs in offsets.items():
        if sorted(offs) != list(range(len(offs))):
            raise LakeError("the push answers' offsets of partition %r are "
                            "not contiguous from 0" % p)
    return want


def _read_manifests(reader, prefix, tenant, queue):
    root = sidecar_root(prefix, tenant, queue) + "/windows/"
    out = []
    for key in reader.list_keys(root):
        m = re.match(r"^(\d{10})\.json$", key[len(root):])
        if not m:
            raise LakeError("%s: not a manifest name (windows/<k:010>.json)"
                            % key)
        k = int(m.group(1))
        if k != len(out) + 1:
            raise LakeError("manifests are not numbered 1..n without a gap: "
                            "%s follows k=%d" % (key, len(out)))
        data = reader.read(key)
        try:
            doc = json.loads(data, object_pairs_hook=_no_duplicate_keys)
        except ValueError as e:
            raise LakeError("manifest %d: not JSON: %s" % (k, e)) from None
        if not isinstance(doc, dict):
            raise LakeError("manifest %d: not a JSON object" % k)
        if compact(doc) != data:
            raise LakeError("manifest %d: not compact JSON with the keys in "
                            "order" % k)
        out.append((k, doc))
    return out


def _no_duplicate_keys(pairs):
    d = {}
    for name, value in pairs:
        if name in d:
            raise ValueError("duplicate key %r" % name)
        d[name] = value
    return d


def _is_int(v):
    return isinstance(v, int) and not isinstance(v, bool)


def _check_manifest(m, k, tenant, queue, opts):
    keys = list(m)
    order = [x for x in MANIFEST_KEYS if x in m]
    missing = [x for x in MANIFEST_KEYS if x not in m and
               x not in ("minTs", "maxTs", "positions")]
    if missing or keys != order:
        raise LakeError("manifest %d: keys %s, expected the order %s"
                        % (k, keys, MANIFEST_KEYS))
    expect = {"sink": opts["sink"], "tenant": tenant, "queue": queue,
              "k": k, "format": opts["fmt"],
              "compression": opts["compression"], "layout": opts["layout"]}
    for name, value in expect.items():
        if m[name] != value:
            raise LakeError("manifest %d: %s is %r, expected %r"
                            % (k, name, m[name], value))
    for name in ("tStart", "tEnd", "records", "bytes", "partitions"):
        if not _is_int(m[name]):
            raise LakeError("manifest %d: %s is not an integer" % (k, name))
    if not m["tStart"] < m["tEnd"]:
        raise LakeError("manifest %d: tStart %d is not below tEnd %d"
                        % (k, m["tStart"], m["tEnd"]))
    desc = WRITER_FORMATS[(opts["fmt"], opts["compression"])]
    older = OLDER_WRITER_FORMATS.get((opts["fmt"], opts["compression"]))
    w = m["writer"]
    # Exactly the product page's form: the codec library's version is in
    # the intent, never in the writer string (docs/design/formats.md §8).
    if not (isinstance(w, str) and re.match(r"^queen-s3/\S+ ", w) and
            w.split(" ", 1)[1] in (desc, older)):
        raise LakeError("manifest %d: writer %r is not 'queen-s3/<version> "
                        "%s'" % (k, w, desc))
    c = m["committedAt"]
    if not isinstance(c, str) or parse_iso_us(c) is None:
        raise LakeError("manifest %d: committedAt %r is not ISO-µs" % (k, c))
    if not isinstance(m["lost"], list) or not isinstance(m["objects"], list):
        raise LakeError("manifest %d: lost and objects must be arrays" % k)
    if not m["objects"] and (m["records"], m["bytes"], m["partitions"]) != \
            (0, 0, 0):
        raise LakeError("manifest %d names no object but holds records"
                        % k)
    if (("minTs" in m) != (m["records"] > 0)) or \
            (("maxTs" in m) != (m["records"] > 0)):
        raise LakeError("manifest %d: minTs/maxTs present iff records > 0"
                        % k)
    _check_manifest_positions(m, k)


def _check_manifest_positions(m, k):
    """The optional trailing `positions`: [name, offset(, id)] per partition
    the window touched, sorted by name bytes, one each, every partition with
    a lost range named, and for a partition with records in the window's
    objects an offset above them (checked in _check_objects)."""
    if "positions" not in m:
        return
    v = m["positions"]
    if not isinstance(v, list):
        raise LakeError("manifest %d: positions is not an array" % k)
    names = []
    for x in v:
        if not (isinstance(x, list) and len(x) in (2, 3) and
                isinstance(x[0], str) and _is_int(x[1]) and
                (len(x) == 2 or isinstance(x[2], str))):
            raise LakeError("manifest %d: position %r is not [name, offset"
                            "(, id)]" % (k, x))
        names.append(x[0].encode())
    if names != sorted(set(names)):
        raise LakeError("manifest %d: positions are not sorted by name, one "
                        "per partition" % k)
    for lost in m["lost"]:
        if isinstance(lost, dict) and \
                lost.get("partition", "").encode() not in names:
            raise LakeError("manifest %d: lost partition %r has no position"
                            % (k, lost.get("partition")))


def _check_objects(reader, prefix, tenant, queue, k, m, opts, seen, want):
    per_partition = opts["layout"] == "per-partition"
    if not per_partition and len(m["objects"]) != 1 and \
            (m["objects"] or m["records"]):
        raise LakeError("manifest %d: a merged window names exactly one "
                        "object, not %d" % (k, len(m["objects"])))
    totals = {"records": 0, "bytes": 0}
    partitions, stamps, top = set(), [], {}
    for obj in m["objects"]:
        lines = _check_object(reader, k, m, obj, opts, per_partition,
                              (prefix, tenant, queue))
        if per_partition and obj.get("partition") in partitions:
            raise LakeError("manifest %d: more than one object for partition "
                            "%r in one window" % (k, obj["partition"]))
        totals["records"] += obj["records"]
        totals["bytes"] += obj["bytes"]
        for p, o, txn, ts, payload in lines:
            _check_record(k, obj["key"], p, o, txn, ts, payload, seen, want,
                          opts["log"])
            partitions.add(p)
            stamps.append(ts)
            top[p] = max(top.get(p, -1), o)
    for name in ("records", "bytes"):
        if m[name] != totals[name]:
            raise LakeError("manifest %d: %s %d is not the sum over its "
                            "objects (%d)" % (k, name, m[name], totals[name]))
    if m["partitions"] != len(partitions):
        raise LakeError("manifest %d: partitions %d, the objects hold %d"
                        % (k, m["partitions"], len(partitions)))
    if "positions" in m:
        at = {x[0]: x[1] for x in m["positions"]}
        for p in partitions:
            if p not in at or at[p] <= top[p]:
                raise LakeError("manifest %d: partition %r goes on at %r, "
                                "not above its records (up to %d)"
                                % (k, p, at.get(p), top[p]))
    if stamps and (m["minTs"], m["maxTs"]) != (min(stamps), max(stamps)):
        raise LakeError("manifest %d: minTs/maxTs %d/%d, the objects hold "
                        "%d/%d" % (k, m["minTs"], m["maxTs"], min(stamps),
                                   max(stamps)))


def _check_object(reader, k, m, obj, opts, per_partition, where):
    if not isinstance(obj, dict) or list(obj) != \
            [x for x in OBJECT_KEYS if x in obj]:
        raise LakeError("manifest %d: object entry %r has keys out of order"
                        % (k, obj))
    extra = ("partition" in obj, "firstOffset" in obj, "lastOffset" in obj)
    if extra != (per_partition,) * 3:
        raise LakeError("manifest %d: partition/firstOffset/lastOffset must "
                        "%sappear in %s objects" % (
                            k, "" if per_partition else "not ",
                            opts["layout"]))
    prefix, tenant, queue = where
    align = opts["align"](k) if callable(opts["align"]) else opts["align"]
    key = data_key(prefix, tenant, queue, k, m["tStart"], m["tEnd"],
                   fmt=opts["fmt"], compression=opts["compression"],
                   align=align, partition=obj.get("partition"),
                   first=obj.get("firstOffset"), last=obj.get("lastOffset"))
    if obj["key"] != key:
        raise LakeError("manifest %d: object key %s is not the derived key %s"
                        % (k, obj["key"], key))
    data = reader.read(key)
    if data is None:
        raise LakeError("manifest %d names %s, which is not in the bucket"
                        % (k, key))
    if len(data) != obj["bytes"]:
        raise LakeError("%s: %d bytes, the manifest says %d"
                        % (key, len(data), obj["bytes"]))
    if hashlib.sha256(data).hexdigest() != obj["sha256"]:
        raise LakeError("%s: sha256 differs from the manifest's" % key)
    if opts["fmt"] == "parquet":
        lines = _parquet_lines(opts["parquet"].get(key), key, m, opts)
    else:
        text = decompress(data, opts["compression"], key)
        lines = [] if text == b"" and obj["records"] == 0 else \
            _parse_lines(text, key, m["tStart"], m["tEnd"])
    if len(lines) != obj["records"]:
        raise LakeError("%s: %d lines, the manifest says %d records"
                        % (key, len(lines), obj["records"]))
    if per_partition:
        _check_part_offsets(k, m, obj, key, lines)
    return lines


def _check_part_offsets(k, m, obj, key, lines):
    """A per-partition object holds its partition's offsets firstOffset..
    lastOffset (the ones its key names), but for those a trim took before a
    redo read them again: the manifest names those lost, and the object may
    then hold no record at all (docs/design/formats.md §5)."""
    first, last = obj["firstOffset"], obj["lastOffset"]
    if {x[0] for x in lines} - {obj["partition"]}:
        raise LakeError("%s: holds other partitions or offsets than its "
                        "manifest entry" % key)
    offs = [x[1] for x in lines]
    if offs != sorted(offs):  # offsets restart (a new incarnation)
        if (offs[0], offs[-1]) != (first, last):
            raise LakeError("%s: holds other partitions or offsets than its "
                            "manifest entry" % key)
        return
    lost = [_lost_tuple(x) for x in m["lost"]]
    lo, hi = (offs[0], offs[-1]) if offs else (last + 1, last)
    if lo < first or hi > last:
        raise LakeError("%s: holds other partitions or offsets than its "
                        "manifest entry" % key)
    # a head or tail the object lacks (a trim before a redo) is lost here;
    # a gap inside is rule (5)'s
    for a, b in ((first, lo - 1), (hi + 1, last)):
        if a <= b and not any(lp == obj["partition"] and x <= a and b <= y
                              for lp, x, y in _merged(lost)):
            raise LakeError("%s: holds other partitions or offsets than its "
                            "manifest entry (offsets %d..%d neither in it "
                            "nor lost in window %d)" % (key, a, b, k))


def _merged(lost):
    """Lost ranges with adjacent or overlapping ones of a partition joined."""
    out = []
    for p, a, b in sorted(lost):
        if out and out[-1][0] == p and a <= out[-1][2] + 1:
            out[-1] = (p, out[-1][1], max(out[-1][2], b))
        else:
            out.append((p, a, b))
    return out


def _parse_lines(text, key, t_start, t_end):
    if not text.endswith(b"\n"):
        raise LakeError("%s: does not end with LF" % key)
    recs = [_parse_line(line, "%s line %d" % (key, n))
            for n, line in enumerate(text[:-1].split(b"\n"), 1)]
    return _check_order(recs, key, "line", t_start, t_end)


def _check_order(recs, key, unit, t_start, t_end):
    """Rule (4) over one object's records, in their stored order."""
    out = []
    prev = None
    for n, rec in enumerate(recs, 1):
        where = "%s %s %d" % (key, unit, n)
        p, o, _, ts, _ = rec
        sort_key = (p.encode("utf-8"), o)
        if prev is not None and sort_key == prev:
            raise LakeError("%s: record %r/%d is in the lake twice"
                            % (where, p, o))
        if prev is not None and sort_key < prev:
            raise LakeError("%s: record %r/%d is not sorted after %r/%d"
                            % (where, p, o, prev[0].decode(), prev[1]))
        if not t_start <= ts < t_end:
            raise LakeError("%s: ts %s is outside the window [%s, %s)"
                            % (where, iso_us(ts), iso_us(t_start),
                               iso_us(t_end)))
        prev = sort_key
        out.append(rec)
    return out


def _parse_line(line, where):
    try:
        text = line.decode("utf-8")
    except UnicodeDecodeError:
        raise LakeError("%s: not UTF-8" % where) from None
    m = HEAD_RE.match(text)
    if not m or not line.endswith(b"}"):
        raise LakeError("%s: not the envelope "
                        '{"partition","offset","transactionId","ts","payload"}'
                        ": %r" % (where, line[:200]))
    try:
        p, txn = json.loads(m.group(1)), json.loads(m.group(3))
    except ValueError:
        raise LakeError("%s: bad JSON string in the envelope" % where) \
            from None
    o, ts_text = int(m.group(2)), m.group(4)
    ts = parse_iso_us(ts_text)
    if ts is None:
        raise LakeError("%s: ts %r is not ISO with 6 digits" % (where,
                                                                 ts_text))
    head = ('{"partition":%s,"offset":%d,"transactionId":%s,"ts":"%s",'
            '"payload":' % (json.dumps(p, ensure_ascii=False), o,
                            json.dumps(txn, ensure_ascii=False), ts_text))
    head_bytes = head.encode("utf-8")
    if not line.startswith(head_bytes):
        raise LakeError("%s: envelope is not byte-exact: %r, expected %r"
                        % (where, line[:len(head_bytes)], head_bytes))
    payload = line[len(head_bytes):-1]
    try:
        json.loads(payload)
    except ValueError:
        raise LakeError("%s: payload is not JSON: %r" % (where, payload[:200])) \
            from None
    return (p, o, txn, ts, payload)


def _check_record(k, key, p, o, txn, ts, payload, seen, want, log=None):
    if (p, o) in seen:
        raise LakeError("record %r/%d is in the lake twice (%s and %s)"
                        % (p, o, seen[(p, o)][1], key))
    seen[(p, o)] = (ts, key, k)
    if (p, o) not in want:
        raise LakeError("%s: record %r/%d was never acknowledged"
                        % (key, p, o))
    want_txn, want_payload = want[(p, o)]
    if txn != want_txn:
        raise LakeError("%s: record %r/%d has transactionId %r, the push "
                        "answer said %r" % (key, p, o, txn, want_txn))
    if payload != want_payload:
        raise LakeError("%s: record %r/%d payload differs from what was "
                        "pushed: %r, expected %r" % (key, p, o, payload[:200],
                                                     want_payload[:200]))
    if log is not None:
        _check_against_log(key, p, o, txn, ts, payload, log)


def _check_offsets(seen, lost):
    by = {}
    for (p, o), (ts, _, _) in seen.items():
        by.setdefault(p, []).append((o, ts))
    counts = {}
    for p, recs in by.items():
        recs.sort()
        expect = [o for o in range(recs[-1][0] + 1)
                  if not _in_lost(lost, p, o)]
        if [o for o, _ in recs] != expect:
            raise LakeError("partition %r: offsets in the lake are not "
                            "contiguous from 0" % p)
        for (o1, t1), (o2, t2) in zip(recs, recs[1:]):
            if t2 < t1:
                raise LakeError("partition %r: ts goes backwards from offset "
                                "%d to %d" % (p, o1, o2))
        counts[p] = len(recs)
    return counts


def _check_orphans(reader, prefix, tenant, queue, named):
    for key in reader.list_keys(queue_root(prefix, tenant, queue) + "/"):
        if key not in named:
            raise LakeError("%s: data object, but no manifest names it" % key)


def _check_checkpoints(reader, prefix, tenant, queue, manifests, seen,
                       every=None):
    root = sidecar_root(prefix, tenant, queue) + "/"
    out = []
    by_partition = {}
    for (p, o), (_, _, k) in seen.items():
        by_partition.setdefault(p, []).append((o, k))
    for key in reader.list_keys(root):
        rest = key[len(root):]
        if rest.startswith("windows/"):
            continue
        m = re.match(r"^checkpoint/(\d{10})\.json\.zst$", rest)
        if not m:
            raise LakeError("%s: neither a manifest nor a checkpoint" % key)
        k = int(m.group(1))
        if k not in manifests and k != 0:
            raise LakeError("%s: checkpoint of window %d, which has no "
                            "manifest" % (key, k))
        # A checkpoint off the cadence is the sink's too (a drain's, or one
        # written when it found a loss): its positions must be exact.
        try:
            doc = json.loads(decompress(reader.read(key) or b"", "zstd", key))
        except ValueError:
            raise LakeError("%s: checkpoint is not JSON" % key) from None
        t_end = manifests[k]["tEnd"] if k != 0 else doc.get("tEnd")
        if not isinstance(doc, dict) or doc.get("k") != k or \
                not _is_int(doc.get("tEnd")) or doc.get("tEnd") != t_end or \
                not isinstance(doc.get("positions"), list):
            raise LakeError("%s: checkpoint does not match window %d's "
                            "manifest (k, tEnd, positions)" % (key, k))
        _check_positions(key, k, doc["positions"], by_partition)
        out.append(k)
    if every:
        for k in sorted(manifests):
            if k % every == 0 and k not in out:
                raise LakeError("window %d has no checkpoint (due every %d "
                                "windows): %s is missing" % (
                                    k, every, checkpoint_key(
                                        prefix, tenant, queue, k)))
    return out


def _check_positions(key, k, positions, by_partition):
    """Rule (7): a checkpoint's positions against the lake's records."""
    names = []
    at = {}
    for pos in positions:
        if not (isinstance(pos, list) and 2 <= len(pos) <= 3 and
                isinstance(pos[0], str) and _is_int(pos[1]) and
                pos[1] >= 0 and (len(pos) == 2 or pos[2] is None or
                                 isinstance(pos[2], str))):
            raise LakeError("%s: position %r is not [partition, offset(, "
                            "id)]" % (key, pos))
        names.append(pos[0].encode("utf-8"))
        at[pos[0]] = pos[1]
    if names != sorted(names) or len(set(names)) != len(names):
        raise LakeError("%s: positions are not sorted by partition, once "
                        "each" % key)
    for p, recs in by_partition.items():
        if p not in at:
            if any(rk <= k for _, rk in recs):
                raise LakeError("%s: positions do not match the manifests: "
                                "%r has records in windows <= %d but no "
                                "position" % (key, p, k))
            continue
        for o, rk in recs:
            if (o < at[p]) != (rk <= k):
                raise LakeError("%s: positions do not match the manifests: "
                                "%r is at offset %d, but offset %d is in "
                                "window %d" % (key, p, at[p], o, rk))


class BrokerLog:
    """The broker's log of one queue: records {(partition, offset): (ts µs,
    transactionId, payload as the lake must hold it)} and starts
    {partition: logStartOffset} (records below it were trimmed)."""

    def __init__(self, records, starts=None):
        self.records = records
        self.starts = starts or {}


def _lake_payload(payload, fmt):
    if isinstance(payload, str):
        payload = payload.encode("utf-8")
    if fmt == "parquet":
        return payload or None
    if payload is None or payload == b"":
        return b"null"
    return payload.replace(b"\n", b" ").replace(b"\r", b" ")


def broker_log(broker, queue, partitions, fmt="jsonl", batch=50,
               max_bytes=4 << 20):
    """Read every record of queue's partitions back from the broker with
    POST /api/v1/fetch (payloads kept byte for byte): a BrokerLog."""
    import rawjson  # tests/integration: the payloads' exact bytes
    records, starts = {}, {}
    todo = {p: 0 for p in partitions}
    while todo:
        names = sorted(todo)[:batch]
        body = {"entries": [{"queue": queue, "partition": p,
                             "offset": todo[p], "maxBytes": max_bytes}
                            for p in names]}
        r = broker.request("POST", "/api/v1/fetch", body=body, timeout=60)
        if r.status != 200:
            raise LakeError("the broker's fetch answered %d: %r"
                            % (r.status, r.body[:300]))
        root = rawjson.parse(r.body)
        for p, e in zip(names, root["entries"].value):
            start = e["logStartOffset"].value
            hw = e["highWatermark"].value
            starts[p] = start
            recs = e["records"].value
            if "error" in e.value and not recs:
                if todo[p] < start:
                    todo[p] = start
                    continue
                raise LakeError("the broker's fetch of %r/%d: %s"
                                % (p, todo[p], e["error"].value))
            for rec in recs:
                o = rec["offset"].value
                ts = parse_iso_us(rec["ts"].value)
                records[(p, o)] = (ts, rec["transactionId"].value,
                                   _lake_payload(rec["payload"].raw, fmt))
                todo[p] = o + 1
            if not recs or todo[p] >= hw:
                del todo[p]
    return BrokerLog(records, starts)


def _check_against_log(key, p, o, txn, ts, payload, log):
    if (p, o) not in log.records:
        if o < log.starts.get(p, 0):
            return  # trimmed by retention: nothing left to compare
        raise LakeError("%s: record %r/%d is not in the broker's log"
                        % (key, p, o))
    want_ts, want_txn, want_payload = log.records[(p, o)]
    if ts != want_ts:
        raise LakeError("%s: record %r/%d has ts %s, the broker's log says "
                        "%s" % (key, p, o, iso_us(ts), iso_us(want_ts)))
    if txn != want_txn:
        raise LakeError("%s: record %r/%d has transactionId %r, the broker's "
                        "log says %r" % (key, p, o, txn, want_txn))
    if payload != want_payload and not (payload is None and
                                        want_payload == b"null"):
        # (an empty payload and a JSON null both fetch as null)
        raise LakeError("%s: record %r/%d payload %r, the broker's log says "
                        "%r" % (key, p, o, (payload or b"")[:200],
                                (want_payload or b"")[:200]))


def count_records(reader, prefix, tenant, queue):
    """Records the committed manifests announce (cheap, for waiting)."""
    root = sidecar_root(prefix, tenant, queue) + "/windows/"
    n = 0
    for key in reader.list_keys(root):
        try:
            n += json.loads(reader.read(key) or b"{}").get("records", 0)
        except ValueError:
            pass
    return n


def wait_queue(reader, prefix, tenant, queue, acked, timeout, settle=30.0,
               **kw):
    """Wait until the manifests announce every acked record, then verify.
    Fails at once when they announce more records than were acked.  Once the
    count is reached, a failed verification is retried for `settle` seconds
    (a checkpoint may still be being written, slowly on a loaded machine)
    before its error is raised."""
    deadline = time.monotonic() + timeout
    lost = [_lost_tuple(x) for x in kw.get("expect_lost") or []]
    n = sum(1 for p, o, _, _ in acked if not _in_lost(lost, p, o))
    while True:
        have = count_records(reader, prefix, tenant, queue)
        if have > n:
            raise LakeError("the lake holds %d records, more than the %d "
                            "acknowledged" % (have, n))
        if have == n or time.monotonic() > deadline:
            break
        time.sleep(0.1)
    settled = time.monotonic() + settle
    while True:
        try:
            return verify_queue(reader, prefix, tenant, queue, acked, **kw)
        except LakeError:
            if time.monotonic() > settled:
                raise
        time.sleep(0.2)


# ---------------------------------------------------------------------------
# Parquet through DuckDB (docs/design/formats.md §7)

TESTS_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DUCKDB_DUMP = r"""
const { DuckDBInstance } = require('@duckdb/node-api');
(async () => {
  const con = await (await DuckDBInstance.create(':memory:')).connect();
  const out = [];
  for (const f of process.argv.slice(1)) {
    const q = "'" + f.replace(/'/g, "''") + "'";
    const all = async (sql) => (await con.runAndReadAll(sql)).getRowObjectsJson();
    try {
      out.push({
        rows: await all(`SELECT partition AS p, CAST("offset" AS VARCHAR) AS o,
            transaction_id AS x, CAST(epoch_us(ts) AS VARCHAR) AS t, payload AS v
            FROM read_parquet(${q}, file_row_number=true) ORDER BY file_row_number`),
        schema: await all(`SELECT name, type, repetition_type AS rep, converted_type AS conv,
            CAST(logical_type AS VARCHAR) AS logical FROM parquet_schema(${q})`),
        kv: await all(`SELECT decode(key) AS k, decode(value) AS v FROM parquet_kv_metadata(${q})`),
        file: await all(`SELECT created_by AS by, CAST(format_version AS VARCHAR) AS v
            FROM parquet_file_metadata(${q})`),
        codecs: await all(`SELECT DISTINCT CAST(compression AS VARCHAR) AS c FROM parquet_metadata(${q})`),
      });
    } catch (e) {
      out.push({ error: String((e && e.message) || e) });
    }
  }
  process.stdout.write(JSON.stringify(out));
})().catch((e) => { console.error(e); process.exit(2); });
"""
PARQUET_SCHEMA = [("partition", "BYTE_ARRAY", "REQUIRED"),
                  ("offset", "INT64", "REQUIRED"),
                  ("transaction_id", "BYTE_ARRAY", "REQUIRED"),
                  ("ts", "INT64", "REQUIRED"),
                  ("payload", "BYTE_ARRAY", "OPTIONAL")]


def duckdb_read_parquet(blobs):
    """Read Parquet bodies with DuckDB: one dict per body with rows, schema,
    kv (footer key/values in order), file (created_by, format version),
    codecs; or {"error": text}."""
    if not blobs:
        return []
    with tempfile.TemporaryDirectory(prefix="lake-parquet-") as d:
        paths = []
        for i, data in enumerate(blobs):
            paths.append(os.path.join(d, "%d.parquet" % i))
            with open(paths[-1], "wb") as f:
                f.write(data)
        proc = subprocess.run(["node", "-e", DUCKDB_DUMP, *paths],
                              cwd=TESTS_DIR, capture_output=True,
                              timeout=600)
    if proc.returncode != 0:
        raise RuntimeError("duckdb (node) failed: %s"
                           % proc.stderr.decode(errors="replace")[-2000:])
    return json.loads(proc.stdout)


def _parquet_read_all(reader, manifests):
    keys = []
    for _, m in manifests:
        for obj in m.get("objects") or []:
            if isinstance(obj, dict) and isinstance(obj.get("key"), str):
                keys.append(obj["key"])
    blobs = [(key, reader.read(key)) for key in keys]
    blobs = [(key, data) for key, data in blobs if data is not None]
    answers = duckdb_read_parquet([data for _, data in blobs])
    return {key: a for (key, _), a in zip(blobs, answers)}


def _parquet_lines(a, key, m, opts):
    if a is None or "error" in a:
        raise LakeError("%s: DuckDB cannot read it: %s"
                        % (key, (a or {}).get("error")))
    if a["file"] != [{"by": "queen-s3", "v": "1"}]:
        raise LakeError("%s: created_by/format version %s, expected "
                        "queen-s3/1" % (key, a["file"]))
    schema = [(c["name"], c["type"], c["rep"]) for c in a["schema"][1:]]
    if schema != PARQUET_SCHEMA:
        raise LakeError("%s: schema %s, expected %s"
                        % (key, schema, PARQUET_SCHEMA))
    ts_logical = a["schema"][4]["logical"] or ""
    if "isAdjustedToUTC=1" not in ts_logical or "MICROS=Micro" not in \
            ts_logical:
        raise LakeError("%s: ts is not TIMESTAMP(MICROS, UTC): %s"
                        % (key, ts_logical))
    for i in (1, 3, 5):
        if a["schema"][i]["conv"] != "UTF8":
            raise LakeError("%s: %s is not a STRING column"
                            % (key, a["schema"][i]["name"]))
    kv = [(x["k"], x["v"]) for x in a["kv"]]
    want_kv = [("queen.envelope", "1"), ("queen.queue", opts["queue"]),
               ("queen.tenant", opts["tenant"])]
    if kv != want_kv:
        raise LakeError("%s: footer key/values %s, expected %s"
                        % (key, kv, want_kv))
    codecs = {c["c"] for c in a["codecs"]}
    if codecs != {opts["compression"].upper()}:
        raise LakeError("%s: column codecs %s, expected %s"
                        % (key, sorted(codecs), opts["compression"].upper()))
    recs = []
    for n, r in enumerate(a["rows"], 1):
        payload = r["v"].encode("utf-8") if r["v"] is not None else None
        if payload is not None:
            try:
                json.loads(payload)
            except ValueError:
                raise LakeError("%s row %d: payload is not JSON: %r"
                                % (key, n, payload[:200])) from None
        recs.append((r["p"], int(r["o"]), r["x"], int(r["t"]), payload))
    return _check_order(recs, key, "row", m["tStart"], m["tEnd"])


def find_tool(name):
    """A tests/tools program: $QUEEN_TOOLS, else $QUEEN_ROOT/build/tools,
    else this checkout's build/tools; None when not built."""
    dirs = [os.environ.get("QUEEN_TOOLS"),
            os.path.join(os.environ.get("QUEEN_ROOT", ""), "build", "tools")
            if os.environ.get("QUEEN_ROOT") else None,
            os.path.join(os.path.dirname(TESTS_DIR), "build", "tools")]
    for d in dirs:
        if d and os.access(os.path.join(d, name), os.X_OK):
            return os.path.join(d, name)
    return None


def parquet_with_tool(records, queue, tenant, codec):
    """A Parquet object from our writer (tests/tools/parquet_tool)."""
    tool = find_tool("parquet_tool")
    if tool is None:
        raise RuntimeError("build/tools/parquet_tool is not built "
                           "(make tools)")
    buf = bytearray()
    for p, o, txn, ts, payload in records:
        pb, tb, vb = p.encode(), txn.encode(), payload or b""
        buf += struct.pack("<I", len(pb)) + pb + struct.pack("<q", o)
        buf += struct.pack("<I", len(tb)) + tb + struct.pack("<q", ts)
        buf += struct.pack("<I", len(vb)) + vb
    with tempfile.TemporaryDirectory(prefix="lake-tool-") as d:
        src, dst = os.path.join(d, "in.bin"), os.path.join(d, "out.parquet")
        with open(src, "wb") as f:
            f.write(bytes(buf))
        subprocess.run([tool, "write", "--codec", codec, "--queue", queue,
                        "--tenant", tenant, src, dst], check=True,
                       capture_output=True, timeout=120)
        with open(dst, "rb") as f:
            return f.read()


# ---------------------------------------------------------------------------
# Building the acked list from pushes (docs/design/http-api.md §2)

def push_body(items):
    """POST /api/v1/push body for items [{"queue", "partition"?,
    "transactionId"?, "payload": raw JSON bytes}], each payload spliced in
    verbatim (so 42.00 stays 42.00)."""
    out = []
    for it in items:
        head = {k: it[k] for k in ("queue", "partition", "transactionId")
                if it.get(k) is not None}
        out.append(compact(head)[:-1] + b',"payload":' + it["payload"] +
                   b"}")
    return b'{"items":[' + b",".join(out) + b"]}"


def acked_from_push(items, answer):
    """The acked tuples (partition, offset, transactionId, payload) of one
    push: the items sent and the 201 answer array.  Only `queued` entries
    count (a `duplicate` names a record already acked)."""
    if len(items) != len(answer):
        raise ValueError("%d items but %d answers" % (len(items),
                                                       len(answer)))
    out = []
    for it, a in zip(items, answer):
        if a.get("status") == "queued":
            out.append((it.get("partition") or "Default", a["offset"],
                        a["transaction_id"], it["payload"]))
    return out


def records_and_lost(reader, prefix, tenant, queue, compression):
    """Every record line of a queue's lake (merged JSONL, no alignment, the
    default sink) and every lost range, checking each manifest's shape and
    the windows' tiling on the way; a record twice fails. Returns
    ({(partition, offset): (txn, payload, ts, k)}, [lost tuples]). The
    soaks read the lake through it."""
    manifests = _read_manifests(reader, prefix, tenant, queue)
    opts = dict(fmt="jsonl", compression=compression, layout="merged",
                align="none", sink="default", tenant=tenant, queue=queue)
    seen, lost, prev = {}, [], None
    for k, m in manifests:
        _check_manifest(m, k, tenant, queue, opts)
        if prev is not None:
            assert windows_meet(prev["tEnd"], m["tStart"]), \
                "%s: windows %d and %d do not tile" % (queue, k - 1, k)
        lost += [_lost_tuple(x) for x in m["lost"]]
        for obj in m["objects"]:
            for p, o, txn, ts, payload in _check_object(
                    reader, k, m, obj, opts, False, (prefix, tenant, queue)):
                assert (p, o) not in seen, \
                    "%s: %r/%d is in the lake twice (windows %d and %d)" % (
                        queue, p, o, seen[(p, o)][3], k)
                seen[(p, o)] = (txn, payload, ts, k)
        prev = m
    return seen, lost
