"""Packaging with the sink on (issue 19 item 10): the log names one product
version, the broker's and the sink's lines alike, and /metrics carries the
sink's families beside the build and process ones, which promtool accepts.
tests/integration/test_packaging.py covers the same with the sink off."""
import re
import shutil
import subprocess

import pytest

import loglines
from sinkenv import it, sink_row, wait_until

SEMVER = r"\d+\.\d+\.\d+(?:[-+][0-9A-Za-z.-]+)?"


def _version():
    p = subprocess.run([it.queen_bin(), "--version"], capture_output=True,
                       timeout=30)
    assert p.returncode == 0, p
    return re.fullmatch(r"queen (%s)\n" % SEMVER, p.stdout.decode()).group(1)


def _families(text):
    return {m.group(1): m.group(2) for m in
            re.finditer(r"^# TYPE (\S+) (\S+)$", text, re.M)}


def test_one_version_in_the_log_and_metrics_with_the_sink(sink_node):
    ver = _version()
    node = sink_node()
    node.push([{"queue": "orders", "payload": {"i": 1}}])
    wait_until(lambda: (sink_row(node, "orders") or {}).get(
        "windowsCommitted", 0) >= 1 or None, 60, "a window of orders",
        interval=0.2)
    log = node.stderr()
    # the boot line (docs/design/config.md §6) is one message of key=value
    # words: in the text format they read as fields, so the line itself is
    # matched
    boot = [ln for ln in log.splitlines() if " sink=default instance=" in ln]
    assert len(boot) == 1, log
    r = loglines.parse(boot[0])[0]
    assert r["level"] == "info" and r["area"] == "queen-s3", boot
    assert re.search(r" INFO queen-s3: queen-s3 %s tenant=\S+ sink=default "
                     % re.escape(ver), boot[0]), boot[0]
    assert set(re.findall(r"\bqueen(?:-s3)? (%s)\b" % SEMVER, log)) == \
        {ver}, log

    prom = node.get("/metrics/prometheus").body.decode()
    r = node.get("/metrics")
    assert r.status == 200, r
    fam = _families(r.body.decode())
    assert fam == _families(prom)
    for name in ("queen_build_info", "process_resident_memory_bytes",
                 "queen_s3_lag_seconds", "queen_s3_s3_requests_total"):
        assert name in fam, name
    promtool = shutil.which("promtool")
    if promtool is None:
        pytest.fail("promtool is missing: scripts/setup.sh installs the "
                    "Debian package prometheus")
    p = subprocess.run([promtool, "check", "metrics"], input=r.body,
                       capture_output=True, timeout=60)
    assert p.returncode == 0, (p.stdout, p.stderr, r.body.decode())
