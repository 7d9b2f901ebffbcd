"""The embedded sink's settings at boot (docs/design/protocol.md §1 and
docs/design/config.md §1-§5): with
QUEEN_S3_EMBEDDED=true every refused value stops the broker with exit 2 and
the one line `<ts> ERROR boot: FATAL: QUEEN_S3_EMBEDDED=true: <message>`, word for
word; ignored leftovers (QUEEN_S3_LISTEN, QUEEN_S3_LOG_FORMAT) give one
warning and the broker boots."""
import re
import subprocess

import pytest

import loglines
from queenproc import Broker, boot_env, queen_bin

FATAL = r"^FATAL: QUEEN_S3_EMBEDDED=true: "

GOOD = {
    "QUEEN_S3_QUEUES": "orders",
    "QUEEN_S3_ENDPOINT": "http://127.0.0.1:9",
    "QUEEN_S3_PATH_STYLE": "true",
    "QUEEN_S3_REGION": "us-east-1",
    "QUEEN_S3_BUCKET": "lake",
    "QUEEN_S3_ACCESS_KEY": "AKID",
    "QUEEN_S3_SECRET_KEY": "boot-test-secret",
}


def bounded(name, lo, hi, what):
    """One value below and one above the range: the outside template."""
    out = []
    if lo > 0:
        out.append((name, str(lo - 1), "%s=%d is outside %d..=%d. It is %s" %
                    (name, lo - 1, lo, hi, what)))
    out.append((name, str(hi + 1), "%s=%d is outside %d..=%d. It is %s" %
                (name, hi + 1, lo, hi, what)))
    out.append((name, "1.5", "%s=1.5 is not a whole number. It is %s, in "
                "%d..=%d" % (name, what, lo, hi)))
    return out


def preflight(name, lo, hi):
    return [(name, str(v), "%s=%d is not an integer in %d..=%d" %
             (name, v, lo, hi)) for v in (lo - 1, hi + 1)]


CASES = (
    preflight("QUEEN_S3_THREADS", 1, 64)
    + preflight("QUEEN_S3_SHUTDOWN_GRACE_MS", 100, 3600000)
    + bounded("QUEEN_S3_TARGET_MB", 1, 5120,
              "the uncompressed buffered bytes a window closes at")
    + bounded("QUEEN_S3_MAX_WINDOW_MS", 100, 86400000,
              "how long a window may stay open; the lag SLO is about this "
              "plus the safe lag")
    + bounded("QUEEN_S3_CHECKPOINT_EVERY", 1, 100000,
              "windows between position checkpoints; it bounds the re-read "
              "after a restart")
    + bounded("QUEEN_S3_MEMORY_MB", 1, 1048576,
              "the buffer budget across every queue of every sink this node "
              "runs, inside the broker's process")
    + bounded("QUEEN_S3_FETCH_CONCURRENCY", 1, 256,
              "in-flight fetch calls per queue; each one is a read of this "
              "node's log on the broker's blocking pool, so it is the "
              "throttle a backfill is held back with")
    + bounded("QUEEN_S3_DISCOVERY_INTERVAL_MS", 10, 3600000,
              "how often an idle queue asks which partitions moved")
    + bounded("QUEEN_S3_SAFE_GUARD_MS", 0, 3600000,
              "subtracted from the node's safeTime before a window may "
              "close: a margin on the broker's clock, paid in latency")
    + bounded("QUEEN_S3_LEASE_TTL_MS", 1000, 3600000,
              "how long a queue lease survives without a refresh")
    + bounded("QUEEN_S3_MULTIPART_THRESHOLD_MB", 5, 5120,
              "objects at or below this go up as a single PUT with a "
              "Content-MD5; above it they go up as a multipart upload")
    + [
        ("QUEEN_S3_PATH_STYLE", "Maybe", "QUEEN_S3_PATH_STYLE=maybe is not a "
         "boolean. It is `true` or `false`"),
        ("QUEEN_S3_SSE", "DES", "QUEEN_S3_SSE=des is not a mode. It is "
         "`AES256` (bucket-managed keys) or `aws:kms` (+ "
         "QUEEN_S3_SSE_KMS_KEY_ID). Unset it to send no "
         "x-amz-server-side-encryption header at all"),
        ("QUEEN_S3_SSE_KMS_KEY_ID", "key-1", "QUEEN_S3_SSE_KMS_KEY_ID is set "
         "but QUEEN_S3_SSE=off \u2014 the key id would be ignored and every "
         "object encrypted with the bucket's own key. Set "
         "QUEEN_S3_SSE=aws:kms, or unset the key id"),
        ("QUEEN_S3_FORMAT", "csv", "QUEEN_S3_FORMAT=csv is not a format. It "
         "is `jsonl` (one JSON object per line, every reader takes it) or "
         "`parquet`"),
        ("QUEEN_S3_COMPRESSION", "lz4", "QUEEN_S3_COMPRESSION=lz4 is not a "
         "codec. It is `zstd`, `gzip` or `none`, and it applies to `jsonl` "
         "objects \u2014 a Parquet file's codec is QUEEN_S3_PARQUET_CODEC"),
        ("QUEEN_S3_PARQUET_CODEC", "gzip", "QUEEN_S3_PARQUET_CODEC=gzip is "
         "not a codec. It is `zstd` or `snappy`"),
        ("QUEEN_S3_LAYOUT", "flat", "QUEEN_S3_LAYOUT=flat is not a layout. "
         "It is `merged` (one object per window, partitions as a column \u2014"
         " the only shape that survives a million lanes) or `per-partition` "
         "(one object per window per partition)"),
        ("QUEEN_S3_ALIGN", "week", "QUEEN_S3_ALIGN=week is not an alignment."
         " It is `hour`, `day` or `none`; it is the Hive bucket a window may "
         "not straddle, so dt=/hour= are exact"),
        ("QUEEN_S3_START", "middle", "QUEEN_S3_START=middle is not a start. "
         "It is `latest` (a queue with no committed pointer starts at the "
         "current safeTime) or `earliest` (it backfills everything retention"
         " still holds)"),
        ("QUEEN_S3_CRASH_AT", "later", "QUEEN_S3_CRASH_AT=later is not a "
         "fault point. It is `after_intent`, `mid_upload`, `after_upload`, "
         "`before_commit` or `after_commit` \u2014 the crash matrix of the "
         "test plan. Unset it anywhere that is not a test"),
        ("QUEEN_S3_CRASH_AT", "mid_upload", "QUEEN_S3_CRASH_AT=mid_upload "
         "aborts this node at every commit; it is for the crash tests only "
         "and needs QUEEN_TEST_MODE=true beside it. Unset it anywhere that "
         "is not a test"),
        ("QUEEN_S3_SINK", "a/b", "QUEEN_S3_SINK=a/b is not a sink name. It "
         "is 1..=64 characters of [A-Za-z0-9._-]: the name scopes the sink's"
         " KV documents (lease, intent, commit pointer) and anything else "
         "could run into another sink's keys. It is in no object key: two "
         "sinks writing the same queue use different QUEEN_S3_PREFIX values"),
        ("QUEEN_S3_BUCKET", "lake/x", "QUEEN_S3_BUCKET=lake/x is not a bucket"
         " name: it is one name, with no slash and no space. A prefix inside"
         " the bucket is QUEEN_S3_PREFIX"),
        ("QUEEN_S3_ENDPOINT", "s3.local", "QUEEN_S3_ENDPOINT=s3.local has no "
         "scheme: it starts with http:// or https://"),
        ("QUEEN_S3_ENDPOINT", "http://gw:abc", "QUEEN_S3_ENDPOINT=http://gw:abc"
         " has a port that is not one"),
        ("QUEEN_S3_ENDPOINT", "http://gw/lake", "QUEEN_S3_ENDPOINT=http://gw/"
         "lake carries a path. The endpoint is scheme://host[:port] only; a "
         "prefix inside the bucket is QUEEN_S3_PREFIX"),
        # credentials in the URL: refused, and the value never printed
        # (boot_refused looks for "boot-test-secret" in stderr)
        ("QUEEN_S3_ENDPOINT", "http://AKID:boot-test-secret@gw:7070",
         "QUEEN_S3_ENDPOINT has an '@' in it (user:password@host?); it is "
         "not printed, as it may hold a secret. The endpoint is "
         "scheme://host[:port] only, and the keys have settings of their "
         "own"),
        ("QUEEN_S3_PREFIX", "a//b", "QUEEN_S3_PREFIX=a//b has an empty or "
         "relative segment (\"\"). It is a plain path, e.g. `queen` or "
         "`lake/queen`"),
        ("QUEEN_S3_QUEUES", "a,*", "QUEEN_S3_QUEUES lists `*` among queue "
         "names: every queue of the tenant is the string \"*\" on its own"),
        ("QUEEN_S3_PARTITIONS", "orders:0..3", "QUEEN_S3_PARTITIONS is set: "
         "the static partition list is not supported in this release. A "
         "window may only close at or below the broker's safeTime, and "
         "safeTime is answered by POST /api/v1/partitions/changed \u2014 the "
         "endpoint discovery already uses \u2014 so a sink with a static list "
         "has no boundary it is allowed to close at. Unset "
         "QUEEN_S3_PARTITIONS; the sink discovers the partitions of "
         "QUEEN_S3_QUEUES itself, at any cardinality"),
    ])

REQUIRED = [
    ("QUEEN_S3_ENDPOINT", "the S3 API base URL, e.g. "
     "https://s3.eu-central-1.amazonaws.com or http://gw:7070"),
    ("QUEEN_S3_REGION", "the region label the SigV4 credential scope is "
     "signed with, e.g. eu-central-1 (any label an S3-compatible gateway "
     "accepts, commonly us-east-1)"),
    ("QUEEN_S3_BUCKET", "the destination bucket"),
    ("QUEEN_S3_ACCESS_KEY", "the S3 access key id"),
    ("QUEEN_S3_SECRET_KEY", "the S3 secret access key"),
]


def base_env(tmp_path, extra):
    env = boot_env(tmp_path / "d", QUEEN_S3_EMBEDDED="true")
    env.update(extra)
    return env


def boot_refused(tmp_path, env, message):
    p = subprocess.run([queen_bin()], env=env, capture_output=True,
                       timeout=60)
    assert p.returncode == 2, p
    lines = p.stderr.decode().splitlines()
    fatal = [r["msg"] for r in loglines.parse(p.stderr.decode())
             if r["level"] == "error"]
    assert len(fatal) == 1, lines
    assert re.match(FATAL + re.escape(message) + "$", fatal[0]), fatal[0]
    assert "boot-test-secret" not in p.stderr.decode()
    assert not (tmp_path / "d").exists()


@pytest.mark.parametrize("var,value,message", CASES,
                         ids=["%s=%s" % (c[0], c[1]) for c in CASES])
def test_refused_value_stops_the_boot(tmp_path, var, value, message):
    extra = dict(GOOD)
    extra[var] = value
    boot_refused(tmp_path, base_env(tmp_path, extra), message)


@pytest.mark.parametrize("var,what", REQUIRED, ids=[r[0] for r in REQUIRED])
def test_missing_required_variable(tmp_path, var, what):
    extra = dict(GOOD)
    del extra[var]
    boot_refused(tmp_path, base_env(tmp_path, extra),
                 "%s is not set: it is %s" % (var, what))


IP_ENDPOINTS = ["http://127.0.0.1:9", "http://10.1.2.3", "https://[::1]:9000"]


@pytest.mark.parametrize("endpoint", IP_ENDPOINTS)
@pytest.mark.parametrize("path_style", ["false", None], ids=["false", "unset"])
def test_an_ip_endpoint_without_path_style_is_refused_with_the_hint(
        tmp_path, endpoint, path_style):
    """Issue 19 item 4: with the path style off against an IP endpoint the
    sink tried `lake.127.0.0.1` for 25 s while status said ok; the boot now
    refuses it, naming both settings and the fix."""
    extra = dict(GOOD)
    extra["QUEEN_S3_ENDPOINT"] = endpoint
    if path_style is None:
        del extra["QUEEN_S3_PATH_STYLE"]
    else:
        extra["QUEEN_S3_PATH_STYLE"] = path_style
    boot_refused(tmp_path, base_env(tmp_path, extra),
                 "QUEEN_S3_ENDPOINT=%s is an IP address, and with "
                 "QUEEN_S3_PATH_STYLE=false (the default) the bucket goes in "
                 "the host name (lake.<address>), which cannot resolve. Set "
                 "QUEEN_S3_PATH_STYLE=true to put the bucket in the path"
                 % endpoint)


def test_sink_variables_without_queues(tmp_path):
    extra = dict(GOOD)
    del extra["QUEEN_S3_QUEUES"]
    boot_refused(tmp_path, base_env(tmp_path, extra),
                 "QUEEN_S3_ENDPOINT is set but QUEEN_S3_QUEUES is not: "
                 "QUEEN_S3_QUEUES is what turns the environment's sink on "
                 "\u2014 the queues it writes, or `*` for every queue of the "
                 "tenant. Set it, or unset the sink's QUEEN_S3_* variables to "
                 "run only the sinks a control plane configures")


def test_ignored_variables_warn_once_and_boot(tmp_path):
    extra = dict(GOOD)
    extra.update({"QUEEN_S3_EMBEDDED": "true",
                  "QUEEN_S3_LISTEN": "0.0.0.0:7000",
                  "QUEEN_S3_LOG_FORMAT": "json"})
    b = Broker(str(tmp_path / "d"), env=extra)
    try:
        b.start()
        warns = [r["msg"] for r in loglines.parse(b.stderr())
                 if r["level"] == "warn" and "QUEEN_S3_LISTEN" in r["msg"]]
        assert len(warns) == 1, b.stderr()
        assert "QUEEN_S3_LOG_FORMAT" in warns[0]
        assert "boot-test-secret" not in b.stderr()
    finally:
        b.stop()


def test_embedded_off_ignores_the_sink_settings(tmp_path):
    """With the sink off, even a setting the sink would refuse boots the
    broker, and nothing of the sink runs: no s3 block in /status, no
    queen_s3_* family in the metrics, no line of the sink's modules."""
    b = Broker(str(tmp_path / "d"), env={"QUEEN_S3_EMBEDDED": "false",
                                         "QUEEN_S3_FORMAT": "csv"})
    try:
        b.start()
        status = b.get("/status").json()
        assert "s3" not in status, status
        metrics = b.get("/metrics/prometheus").body.decode()
        assert "queen_s3_" not in metrics
        r = b.post("/api/v1/push", {"items": [
            {"queue": "orders", "partition": "p", "payload": {"n": 1}}]})
        assert r.status == 201, r
        assert b.fetch_one("orders", "p")["records"][0]["payload"] == \
            {"n": 1}
        log = b.stderr()
        rs = loglines.parse(log)
        assert [r for r in rs if r["area"] in ("queen-s3", "sink")] == [], log
        # named once, at boot, as a setting the sink (off) ignores
        named = [r for r in rs if "QUEEN_S3_FORMAT" in r["msg"]]
        assert len(named) == 1 and named[0]["level"] == "warn" and \
            named[0]["area"] == "boot" and "QUEEN_S3_EMBEDDED is not " \
            "true: the S3 sink is off and ignores QUEEN_S3_FORMAT" in \
            named[0]["msg"], log
        assert "csv" not in log, log
    finally:
        assert b.stop() == 0
