"""Issue 19 item 8: logs people can parse. A broker with the sink on, one
queue that gets records and one named in QUEEN_S3_QUEUES that never exists,
runs at debug level; then every line of its log must parse strictly, as
text by default (`<ts> <LEVEL> <area>: <msg> k=v`, the reference's log
regexes matching it), as logfmt with QUEEN_LOG_FORMAT=logfmt and as one
JSON object per line with QUEEN_LOG_FORMAT=json, with ts, level, area and
msg first. The missing
queue is logged once (the retries every 5 s are debug lines) and is never
said to be owned; no Kafka error name and no secret is in the log. The
sink logs under the target queen-s3 (docs/s3-sink.md), its S3 client's
retries included: one 503 on a data PUT makes the client log a retry."""
import os
import re
import subprocess

import cpcell
import loglines
import pytest
from sinkenv import wait_until

import queenproc as it

KAFKA_NAMES = re.compile(r"UNKNOWN_TOPIC|OFFSET_OUT_OF_RANGE|NOT_LEADER_FOR|"
                         r"LEADER_NOT_AVAILABLE|TOPIC_OR_PARTITION")
OWN = re.compile(r"\bown(s|ed|er|ing)?\b", re.IGNORECASE)


def mentions(r, queue):
    return r.get("queue") == queue or queue in r["msg"]


def run_and_check(sink_node, bucket, fmt):
    env = {"QUEEN_S3_QUEUES": "orders,nosuch", "QUEEN_LOG_LEVEL": "debug"}
    if fmt != "text":
        env["QUEEN_LOG_FORMAT"] = fmt
    node = sink_node(env=env)
    bucket.fault("503", count=1, method="PUT", prefix="queen/tenant=")
    items = [{"queue": "orders", "partition": "p one", "payload": {"n": i}}
             for i in range(3)]
    node.push(items)

    def progress():
        rs = loglines.parse(node.stderr(), fmt)
        committed = [r for r in rs if r["msg"] == "window committed" and
                     r.get("queue") == "orders"]
        # the retries of the missing queue, each a debug claim and restore
        retries = [r for r in rs if r["level"] == "debug" and
                   mentions(r, "nosuch")]
        return committed and len(retries) >= 4
    wait_until(progress, 90, "a committed window and two retries of nosuch")
    node.stop()
    log = node.stderr()
    rs = loglines.parse(log, fmt)
    missing = [r for r in rs if r["level"] != "debug" and
               mentions(r, "nosuch") and "does not exist" in r["msg"]]
    assert len(missing) == 1, missing
    assert missing[0]["level"] == "info", missing
    owned = [r for r in rs if mentions(r, "nosuch") and OWN.search(r["msg"])]
    assert owned == [], owned
    assert not KAFKA_NAMES.search(log), KAFKA_NAMES.search(log)
    assert "queen-secret-key" not in log
    retried = [r for r in rs if "retrying in" in r["msg"]]
    assert retried, "no retry of the faulted PUT in the log"
    assert [r for r in retried if r["area"] != "queen-s3"] == [], retried
    committed = [r for r in rs if r["msg"] == "window committed"]
    assert [r for r in committed if r["area"] != "queen-s3"] == [], committed
    other = [r for r in rs if r["area"] in ("sink", "s3")]
    assert other == [], other
    boot = [r for r in rs if r["msg"].startswith("queen-s3 ")]
    assert len(boot) == 1, boot
    if fmt != "text":
        check_boot_fields(boot[0], bucket)
    return rs, log


DEFAULT_TENANT = "00000000-0000-0000-0000-000000000001"
BOOT_FIELDS = ["tenant", "sink", "instance", "queues", "partitions", "s3",
               "bucket", "prefix", "region", "addressing", "sse", "format",
               "compression", "layout", "align", "target_mb",
               "max_window_ms", "start", "checkpoint_every", "memory_mb",
               "fetch_concurrency", "discovery_interval_ms",
               "safe_guard_ms", "lease_ttl_ms", "multipart_threshold_mb",
               "crash_at"]


def check_boot_fields(r, bucket):
    """In logfmt and JSON the boot line's settings are fields of their own
    (docs/design/config.md §6), in the text line's order, under msg
    "queen-s3 <version>"."""
    assert re.fullmatch(r"queen-s3 \d+\.\d+\.\d+\S*", r["msg"]), r
    assert list(r)[4:] == BOOT_FIELDS, r
    assert r["tenant"] == DEFAULT_TENANT and r["sink"] == "default", r
    assert r["queues"] == "orders,nosuch", r
    assert r["bucket"] == "lake" and r["s3"] == bucket.endpoint, r
    assert r["format"] == "jsonl" and r["crash_at"] == "never", r


def test_every_line_is_text_and_a_missing_queue_is_logged_once(sink_node,
                                                               bucket):
    rs, log = run_and_check(sink_node, bucket, "text")
    assert {r["level"] for r in rs} >= {"info", "debug"}
    # the reference's e2e regexes read the default format as it is
    assert re.search(r"(\S+Z) +INFO (?:\S+: )?queen-s3: window committed "
                     r"queue=(\S+) k=(\d+) records=(\d+)", log), log
    assert re.search(r"queue restored queue=\S+ committed_k=\d+ "
                     r"redo=(true|false)", log), log


def test_every_line_is_logfmt_with_the_setting(sink_node, bucket):
    rs, _ = run_and_check(sink_node, bucket, "logfmt")
    assert {r["level"] for r in rs} >= {"info", "debug"}


def test_json_lines_have_stable_field_names(sink_node, bucket):
    rs, _ = run_and_check(sink_node, bucket, "json")
    committed = [r for r in rs if r["msg"] == "window committed"]
    assert committed and set(committed[0]) >= {
        "ts", "level", "area", "msg", "queue", "k", "records", "bytes",
        "t_end", "lag_seconds", "lost"}, committed


@pytest.mark.parametrize("fmt", ["text", "logfmt", "json"])
def test_warn_keeps_every_info_line_out(sink_node, fmt):
    """QUEEN_LOG_LEVEL=warn: no info line in any format, the sink's boot
    line (its own fields in logfmt and JSON) included, while the sink
    commits a window."""
    env = {"QUEEN_S3_QUEUES": "orders", "QUEEN_LOG_LEVEL": "warn"}
    if fmt != "text":
        env["QUEEN_LOG_FORMAT"] = fmt
    node = sink_node(env=env)
    node.push([{"queue": "orders", "partition": "p", "payload": {"n": 1}}])

    def committed():
        s3 = node.get("/status").json()["s3"]
        return any(q["name"] == "orders" and q["records"] >= 1
                   for sk in s3["sinks"] for q in sk["queues"])
    wait_until(committed, 90, "the sink to commit the record")
    node.stop()
    rs = loglines.parse(node.stderr(), fmt)
    assert [r for r in rs if r["level"] not in ("warn", "error")] == [], rs


def test_an_unknown_log_format_is_refused_at_boot(tmp_path):
    env = {k: v for k, v in os.environ.items()
           if not k.startswith("QUEEN_")}
    env.update({"QUEEN_LOG_FORMAT": "xml", "QUEEN_PORT": str(it.free_port()),
                "QUEEN_RAFT_DIR": str(tmp_path / "d")})
    p = subprocess.run([it.queen_bin()], env=env, capture_output=True,
                       timeout=30)
    assert p.returncode == 2, p
    rs = loglines.parse(p.stderr.decode())
    fatal = [r for r in rs if r["level"] == "error"]
    assert len(fatal) == 1, rs
    assert fatal[0]["msg"] == ("FATAL: QUEEN_LOG_FORMAT=xml: not one of "
                               "text, logfmt, json"), fatal


@pytest.mark.parametrize("fmt", ["logfmt", "json"])
def test_a_control_plane_tenants_boot_line_has_the_same_fields(
        broker_factory, bucket, fmt):
    """docs/design/config.md §6: a control-plane tenant's sink logs its boot
    line as "started the control plane's sink for a tenant", with cluster
    and version in front of the environment sink's fields, in their order,
    holding the tenant's own settings; never its secret."""
    proxy_port = it.free_port()
    # the sink on, but no environment sink: its settings are unset
    node = broker_factory(env=cpcell.cell_env(proxy_port,
                                              QUEEN_S3_EMBEDDED="true",
                                              QUEEN_LOG_FORMAT=fmt))
    node.proxy_port = proxy_port
    tenant = cpcell.make_cluster(node, "acme", "acme-main")[
        "broker_tenant_uuid"]
    d = {"queues": "cp.orders,cp.more", "endpoint": bucket.endpoint,
         "region": "us-east-1", "bucket": "lake", "accessKey": "queen",
         "secretKey": "queen-secret-key", "pathStyle": True,
         "prefix": "cp-lake", "compression": "gzip", "align": "none",
         "maxWindowMs": 1500}
    a = cpcell.cp(node, "PUT", "/api/cp/clusters/acme-main/s3", d)
    assert a.status == 200, a
    msg = "started the control plane's sink for a tenant"

    def boot():
        return [r for r in loglines.parse(node.stderr(), fmt)
                if r["msg"] == msg]
    lines = wait_until(boot, cpcell.RELOAD_S + 30, "the tenant's boot line")
    assert len(lines) == 1, lines
    r = lines[0]
    assert r["level"] == "info" and r["area"] == "queen-s3", r
    assert list(r)[4:] == ["cluster", "version"] + BOOT_FIELDS, r
    assert r["cluster"], r
    assert re.fullmatch(r"\d+\.\d+\.\d+\S*", r["version"]), r
    assert r["tenant"] == tenant and r["tenant"] != DEFAULT_TENANT, r
    assert r["queues"] == "cp.orders,cp.more", r
    assert r["s3"] == bucket.endpoint and r["bucket"] == "lake", r
    assert r["prefix"] == "cp-lake" and r["compression"] == "gzip", r
    assert r["align"] == "none" and r["max_window_ms"] == "1500", r
    node.stop()
    assert "queen-secret-key" not in node.stderr()
    # no environment sink was set: no line of its own
    assert [x for x in loglines.parse(node.stderr(), fmt)
            if x["msg"].startswith("queen-s3 ")] == []
