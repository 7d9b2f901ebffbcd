"""Packaging and basics (issue 19 item 10): the command line (--version,
--help, --help-config), /metrics with the build and process families,
`make install` and the systemd unit."""
import os
import re
import resource
import shutil
import subprocess
import time

import pytest

import loglines
from queenproc import Broker, queen_bin, queen_root

SEMVER = r"\d+\.\d+\.\d+(?:[-+][0-9A-Za-z.-]+)?"


def _run(*args, env=None):
    return subprocess.run([queen_bin(), *args], capture_output=True,
                          timeout=30, env=env)


def _version():
    p = _run("--version")
    assert p.returncode == 0, p
    m = re.fullmatch(r"queen (%s)\n" % SEMVER, p.stdout.decode())
    assert m, p.stdout
    return m.group(1)


# ---- the command line ----------------------------------------------------

def test_version_prints_one_line_and_exits_0():
    p = _run("--version")
    assert p.returncode == 0, p
    assert p.stderr == b""
    assert re.fullmatch(r"queen %s\n" % SEMVER, p.stdout.decode()), p.stdout


def test_help_prints_usage_on_stdout_and_exits_0():
    for flag in ("--help", "-h"):
        p = _run(flag)
        assert p.returncode == 0, p
        out = p.stdout.decode()
        assert out.startswith("usage: "), out
        for word in ("--version", "--help-config", "QUEEN_"):
            assert word in out, (word, out)
        assert p.stderr == b""
    # Anything else is still a usage error: exit 2, usage on stderr.
    for args in (["--bogus"], ["--version", "extra"], ["-x"]):
        p = _run(*args)
        assert p.returncode == 2, (args, p)
        assert p.stdout == b"", args
        assert p.stderr.decode().startswith("usage: "), (args, p.stderr)
        assert "--help-config" in p.stderr.decode()


def test_the_boot_log_shows_the_same_version(tmp_path):
    ver = _version()
    b = Broker(str(tmp_path / "d"))
    try:
        b.start()
        text = b.stderr()
    finally:
        b.stop()
    assert any(ln["level"] == "info" and ln["area"] == "broker" and
               ln["msg"].startswith("queen %s listening" % ver)
               for ln in loglines.parse(text)), text
    # No other product version anywhere in the log.
    others = set(re.findall(r"\bqueen(?:-s3)?[ /](%s)" % SEMVER, text))
    assert others == {ver}, others


def _source(path):
    with open(os.path.join(queen_root(), path), encoding="utf-8") as f:
        return f.read()


def _known_names():
    """envcheck.c's known[]: tests/integration/test_envcheck.py keeps it
    equal to every QUEEN_ name the sources read."""
    text = _source("src/broker/envcheck.c")
    a = text.index("known[] = {")
    return set(re.findall(r'"(QUEEN_[A-Z0-9_]+)"', text[a:text.index("};", a)]))


def _broker_rows():
    """name -> default of every ROW(...) of src/broker/config.c."""
    text = _source("src/broker/config.c")
    rows = re.findall(r'ROW\("(QUEEN_[A-Z0-9_]+)",\s*\w+,\s*"([^"]*)"', text)
    assert len(rows) >= 8, rows
    return dict(rows)


def _help_config():
    p = _run("--help-config")
    assert p.returncode == 0, p
    rows = {}
    for line in p.stdout.decode().splitlines():
        m = re.match(r"^(QUEEN_[A-Z0-9_]+)\s+default\s+(\S+)\s+(\S.*)$", line)
        if m:
            assert m.group(1) not in rows, "listed twice: " + line
            rows[m.group(1)] = (m.group(2), m.group(3))
        else:
            assert not line.startswith("QUEEN_"), "malformed: " + line
    return rows


def test_help_config_lists_every_name_the_broker_reads():
    rows = _help_config()
    known = _known_names()
    assert known, "no name in envcheck.c's known[]"
    assert known - set(rows) == set(), sorted(known - set(rows))
    assert set(rows) - known == set(), sorted(set(rows) - known)
    for name, (_, what) in rows.items():
        assert len(what) >= 10, (name, what)
    # The broker's rows with the table's own defaults.
    for name, default in _broker_rows().items():
        assert rows[name][0] == (default or "(derived)"), (name, rows[name])


def test_help_config_shows_the_sinks_defaults():
    rows = _help_config()
    for name, default in (("QUEEN_S3_EMBEDDED", "false"),
                          ("QUEEN_S3_PREFIX", "queen"),
                          ("QUEEN_S3_FORMAT", "jsonl"),
                          ("QUEEN_S3_TARGET_MB", "128"),
                          ("QUEEN_S3_SHUTDOWN_GRACE_MS", "30000"),
                          ("QUEEN_S3_BUCKET", "(required)")):
        assert rows[name][0] == default, (name, rows[name])


# ---- /metrics ------------------------------------------------------------

def _families(text):
    return {m.group(1): m.group(2) for m in
            re.finditer(r"^# TYPE (\S+) (\S+)$", text, re.M)}


def _samples(text, name):
    out = {}
    for line in text.splitlines():
        m = re.match(r"^%s(\{[^}]*\})? (\S+)$" % re.escape(name), line)
        if m:
            out[m.group(1) or ""] = float(m.group(2))
    return out


def _statm_rss(pid):
    """Resident bytes of pid, from /proc/PID/statm."""
    with open("/proc/%d/statm" % pid) as f:
        return int(f.read().split()[1]) * resource.getpagesize()


def _proc_limit_nofile(pid):
    with open("/proc/%d/limits" % pid) as f:
        for line in f:
            if line.startswith("Max open files"):
                return int(line.split()[3])
    raise AssertionError("no Max open files in /proc/%d/limits" % pid)


def test_metrics_is_the_prometheus_exposition_with_build_and_process(tmp_path):
    ver = _version()
    before = time.time()
    b = Broker(str(tmp_path / "d"))
    try:
        b.start()
        b.push([{"queue": "m", "payload": {"a": 1}}])
        prom = b.get("/metrics/prometheus")
        # RSS moves while the store's warmer maps pages: the gauge is read
        # between these two samples
        rss_before = _statm_rss(b.proc.pid)
        r = b.get("/metrics")
        assert r.status == 200, r
        assert (r.headers.get("Content-Type") or
                r.headers.get("content-type")) == "text/plain; version=0.0.4"
        text = r.body.decode()
        pid = b.proc.pid
        rss = _statm_rss(pid)
        fds = len(os.listdir("/proc/%d/fd" % pid))
        max_fds = _proc_limit_nofile(pid)
    finally:
        b.stop()
    fam = _families(text)
    assert fam == _families(prom.body.decode())
    assert fam["queen_build_info"] == "gauge"
    info = _samples(text, "queen_build_info")
    assert len(info) == 1 and list(info.values()) == [1], info
    assert 'version="%s"' % ver in list(info)[0], info
    for name, kind in (("process_cpu_seconds_total", "counter"),
                       ("process_resident_memory_bytes", "gauge"),
                       ("process_virtual_memory_bytes", "gauge"),
                       ("process_open_fds", "gauge"),
                       ("process_max_fds", "gauge"),
                       ("process_start_time_seconds", "gauge")):
        assert fam.get(name) == kind, (name, fam.get(name))
        assert list(_samples(text, name)) == [""], name  # one, unlabelled

    def one(name):
        return _samples(text, name)[""]
    now = time.time()
    assert 0 <= one("process_cpu_seconds_total") <= \
        (now - before) * os.cpu_count() + 1
    assert rss_before / 2 <= one("process_resident_memory_bytes") <= rss * 2
    assert one("process_virtual_memory_bytes") >= \
        one("process_resident_memory_bytes")
    assert 3 <= one("process_open_fds") and abs(one("process_open_fds") -
                                                fds) <= 4
    assert one("process_max_fds") == max_fds
    assert before - 2 <= one("process_start_time_seconds") <= now + 1


def test_promtool_accepts_metrics(broker):
    promtool = shutil.which("promtool")
    if promtool is None:
        pytest.fail("promtool is missing: scripts/setup.sh installs the "
                    "Debian package prometheus")
    broker.push([{"queue": "m", "payload": 1}])
    r = broker.get("/metrics")
    assert r.status == 200, r
    p = subprocess.run([promtool, "check", "metrics"], input=r.body,
                       capture_output=True, timeout=30)
    assert p.returncode == 0, (p.stdout, p.stderr, r.body.decode())
    assert p.stdout == b"" and p.stderr == b"", (p.stdout, p.stderr)


# ---- make install and the unit -------------------------------------------

def _build_dir():
    return os.path.relpath(os.path.dirname(queen_bin()), queen_root())


def test_make_install_places_the_files(tmp_path):
    dest = tmp_path / "root"
    p = subprocess.run(
        ["make", "--no-print-directory", "QUEEN_SETUP_DONE=1",
         "BUILD=" + _build_dir(), "DESTDIR=" + str(dest), "PREFIX=/usr",
         "install"],
        cwd=queen_root(), capture_output=True, timeout=600)
    assert p.returncode == 0, (p.stdout.decode(), p.stderr.decode())
    binary = dest / "usr" / "bin" / "queen"
    assert binary.is_file() and os.access(binary, os.X_OK)
    q = subprocess.run([str(binary), "--version"], capture_output=True,
                       timeout=30)
    assert q.returncode == 0 and q.stdout.decode() == "queen %s\n" % \
        _version()
    unit = dest / "usr" / "lib" / "systemd" / "system" / "queen.service"
    assert unit.is_file()
    text = unit.read_text()
    assert "ExecStart=/usr/bin/queen\n" in text, text
    assert (dest / "usr" / "share" / "doc" / "queen" / "LICENSE").is_file()
    assert "Documentation=file:///usr/share/doc/queen/operations.md\n" in text
    assert (dest / "usr" / "share" / "doc" / "queen" /
            "operations.md").is_file()
    assert "u queen " in (dest / "usr" / "lib" / "sysusers.d" /
                          "queen.conf").read_text()
    assert (dest / "etc" / "queen" / "queen.env").is_file()
    assert "EnvironmentFile=-/etc/queen/queen.env\n" in text, text
    assert "@" not in text, text  # every placeholder filled in
    # The test drivers of tests/tools are not part of the product.
    assert not (dest / "usr" / "bin" / "s3tool").exists()
    # Nothing lands outside DESTDIR: every file is under it by construction,
    # and the default PREFIX is /usr/local.
    d = subprocess.run(["make", "-n", "--no-print-directory",
                        "QUEEN_SETUP_DONE=1", "BUILD=" + _build_dir(),
                        "DESTDIR=/x", "install"], cwd=queen_root(),
                       capture_output=True, timeout=60)
    assert d.returncode == 0, d
    assert "/x/usr/local/bin/queen" in d.stdout.decode(), d.stdout


def _unit_text():
    return _source("packaging/queen.service")


def _unit_value(text, key):
    vals = re.findall(r"^%s=(.*)$" % key, text, re.M)
    assert len(vals) == 1, (key, vals)
    return vals[0]


def _seconds(v):
    m = re.fullmatch(r"(\d+)(s|min)?", v)
    assert m, v
    return int(m.group(1)) * (60 if m.group(2) == "min" else 1)


def test_the_unit_stops_with_sigterm_after_the_sinks_grace():
    text = _unit_text()
    assert _unit_value(text, "KillSignal") == "SIGTERM"
    assert _unit_value(text, "Restart") == "on-failure"
    grace_ms = int(_help_config()["QUEEN_S3_SHUTDOWN_GRACE_MS"][0])
    assert _seconds(_unit_value(text, "TimeoutStopSec")) * 1000 > grace_ms
    assert int(_unit_value(text, "LimitNOFILE")) >= 65536
    assert _unit_value(text, "User") == "queen"
    assert _unit_value(text, "EnvironmentFile").lstrip("-") == \
        "@SYSCONFDIR@/queen/queen.env"
    env = _source("packaging/queen.env")
    m = re.search(r"^QUEEN_RAFT_DIR=(\S+)$", env, re.M)
    assert m, env
    assert m.group(1) in _unit_value(text, "ReadWritePaths").split()


def test_systemd_analyze_verifies_the_unit(tmp_path):
    sa = shutil.which("systemd-analyze")
    if sa is None:
        pytest.skip("systemd-analyze is not installed (package systemd)")
    # The unit as installed, its ExecStart pointing at this build.
    unit = tmp_path / "queen.service"
    unit.write_text(_unit_text().replace("@BINDIR@/queen", queen_bin())
                    .replace("@SYSCONFDIR@", str(tmp_path))
                    .replace("@DOCDIR@", str(tmp_path)))
    (tmp_path / "queen").mkdir()
    (tmp_path / "queen" / "queen.env").write_text("")
    p = subprocess.run([sa, "verify", "--man=no", str(unit)],
                       capture_output=True, timeout=60,
                       env=dict(os.environ, SYSTEMD_LOG_LEVEL="warning"))
    out = (p.stdout + p.stderr).decode()
    assert p.returncode == 0, out
    lines = [ln for ln in out.splitlines() if "queen.service" in ln]
    assert lines == [], out
