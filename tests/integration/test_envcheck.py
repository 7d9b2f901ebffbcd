"""No QUEEN_* setting is ignored in silence (issue 14, issue 19 item 5): a
typo boots with a warning naming the setting it misses, a setting of the
product this build does not implement is refused where ignoring it is
unsafe, QUEEN_ENCRYPTION_KEY is read and a malformed one warns, and the list of names the broker reads stays in step with the
sources."""
import os
import re
import subprocess

import pytest

import loglines
from queenproc import Broker, boot_env, queen_bin

ROOT = os.environ.get("QUEEN_ROOT") or os.path.join(
    os.path.dirname(__file__), "..", "..")
FATAL = r"^FATAL: "


def errors(text):
    """The messages of the error lines of a log (every line must parse)."""
    return [r["msg"] for r in loglines.parse(text) if r["level"] == "error"]


def boot_warnings(text):
    return [r["msg"] for r in loglines.parse(text)
            if r["level"] == "warn" and r["area"] == "boot"]


def _env(tmp_path):
    env = boot_env(tmp_path / "d")
    return env


TOKEN = "0123456789abcdef-cluster"


@pytest.mark.parametrize("peers,token,why", [
    ("2=127.0.0.1:7002/127.0.0.1:6002,3=127.0.0.1:7003/127.0.0.1:6003",
     TOKEN, "this node's id 1 (QUEEN_RAFT_NODE_ID) is not in the list"),
    ("1=127.0.0.1:7001/127.0.0.1:{port},1=127.0.0.1:7002/127.0.0.1:6002",
     TOKEN, "id 1 is listed twice"),
    ("1=127.0.0.1:7001/127.0.0.1:{port},2=127.0.0.1:7001/127.0.0.1:6002",
     TOKEN, "ids 1 and 2 share an address"),
    ("1=127.0.0.1:7001/127.0.0.1:{port},2=127.0.0.1:7002",
     TOKEN, "entry '2=127.0.0.1:7002' is not {id}={raft ip:port}/"),
    ("1=127.0.0.1:7001/127.0.0.1:{port},0=127.0.0.1:7002/127.0.0.1:6002",
     TOKEN, "the id must be an integer >= 1"),
    ("1=127.0.0.1:99999/127.0.0.1:{port}",
     TOKEN, "raft address '127.0.0.1:99999' is not ip:port"),
    ("1=127.0.0.1:7001/127.0.0.1:{port},,2=127.0.0.1:7002/127.0.0.1:6002",
     TOKEN, "entry 2 is empty"),
    (",".join("%d=127.0.0.1:%d/127.0.0.1:%d" % (i, 7000 + i, 6000 + i)
              for i in range(2, 12)).replace("2=127.0.0.1:7002/127.0.0.1:6002",
                                             "1=127.0.0.1:7001/127.0.0.1:{port}"),
     TOKEN, "more than 9 peers"),
    ("1=127.0.0.1:7001/127.0.0.1:6999,2=127.0.0.1:7002/127.0.0.1:6002",
     TOKEN, "this node's http address in QUEEN_RAFT_PEERS is 127.0.0.1:6999"),
    ("1=127.0.0.1:7001/127.0.0.1:{port},2=127.0.0.1:7002/127.0.0.1:6002",
     None, "a cluster of 2 peers needs a shared token"),
    ("1=127.0.0.1:7001/127.0.0.1:{port},2=127.0.0.1:7002/127.0.0.1:6002",
     "tiny-tok", "QUEEN_RAFT_TOKEN=<redacted>: shorter than 16 bytes"),
])
def test_a_bad_peers_list_stops_the_boot_with_one_line(tmp_path, peers, token,
                                                       why):
    env = _env(tmp_path)
    del env["QUEEN_RAFT_LISTEN"]
    env["QUEEN_RAFT_PEERS"] = peers.replace("{port}", env["QUEEN_PORT"])
    if token is not None:
        env["QUEEN_RAFT_TOKEN"] = token
    p = subprocess.run([queen_bin()], env=env, capture_output=True,
                       timeout=60)
    assert p.returncode == 2, p
    fatal = errors(p.stderr.decode())
    assert len(fatal) == 1, p.stderr
    assert why in fatal[0], fatal[0]
    if token is not None:
        assert token not in p.stderr.decode()
    assert not (tmp_path / "d").exists()


def test_a_listen_address_off_the_peers_entry_is_refused(tmp_path):
    env = _env(tmp_path)
    env["QUEEN_RAFT_LISTEN"] = "127.0.0.1:7005"
    env["QUEEN_RAFT_TOKEN"] = TOKEN
    env["QUEEN_RAFT_PEERS"] = ("1=127.0.0.1:7001/127.0.0.1:%s,"
                               "2=127.0.0.1:7002/127.0.0.1:6002"
                               % env["QUEEN_PORT"])
    p = subprocess.run([queen_bin()], env=env, capture_output=True,
                       timeout=60)
    assert p.returncode == 2, p
    fatal = errors(p.stderr.decode())
    assert len(fatal) == 1 and "QUEEN_RAFT_LISTEN=127.0.0.1:7005: this " \
        "node's raft address in QUEEN_RAFT_PEERS is 127.0.0.1:7001" in fatal[0]
    assert TOKEN not in p.stderr.decode()


def test_an_encryption_key_is_read_and_a_bad_one_warns_unprinted(tmp_path):
    """docs/design/formats.md §11: 64 hex is the key (no word at boot); anything else
    boots with one warning naming the variable, never its value."""
    for value, warned in (("ab" * 32, False), ("ab" * 31 + "zz", True),
                          ("ab" * 33, True)):
        b = Broker(str(tmp_path / ("d-" + value[-4:] + str(len(value)))),
                   env={"QUEEN_ENCRYPTION_KEY": value})
        try:
            b.start()
            log = b.stderr()
        finally:
            b.stop()
        warnings = [w for w in boot_warnings(log)
                    if "QUEEN_ENCRYPTION_KEY" in w]
        assert len(warnings) == (1 if warned else 0), log
        if warned:
            assert "encryption is disabled" in warnings[0]
        assert value not in log


def test_a_typo_boots_with_one_warning_naming_the_setting(tmp_path):
    b = Broker(str(tmp_path / "d"), env={"QUEEN_S3_EMBEDED": "true",
                                         "QUEEN_S3_FORMATT": "parquet"})
    try:
        b.start()
        warns = boot_warnings(b.stderr())
        assert len(warns) == 2, b.stderr()  # the sink is off: no third
        assert "QUEEN_S3_EMBEDED: unknown; did you mean QUEEN_S3_EMBEDDED?" \
            in warns, warns
        assert any("did you mean QUEEN_S3_FORMAT?" in w for w in warns)
        assert "parquet" not in "\n".join(warns)
    finally:
        b.stop()


def test_a_clean_environment_boots_without_a_boot_warning(tmp_path):
    b = Broker(str(tmp_path / "d"))
    try:
        b.start()
        assert boot_warnings(b.stderr()) == [], b.stderr()
    finally:
        b.stop()


def test_the_known_list_is_every_name_the_sources_read():
    src = os.path.join(ROOT, "src")
    read = set()
    for d, _, files in os.walk(src):
        for f in files:
            if f.endswith((".c", ".h")) and f != "envcheck.c":
                with open(os.path.join(d, f), encoding="utf-8") as fh:
                    read |= set(re.findall(r'"(QUEEN_[A-Z0-9_]+)"', fh.read()))
    with open(os.path.join(src, "broker", "envcheck.c"),
              encoding="utf-8") as fh:
        text = fh.read()
    a = text.index("known[] = {")
    b = text.index("};", a)
    known = set(re.findall(r'"(QUEEN_[A-Z0-9_]+)"', text[a:b]))
    u = text.index("unsupported[] = {")
    rest = text[:a] + text[b:u] + text[text.index("};", u):]
    read |= set(re.findall(r'"(QUEEN_[A-Z0-9_]+)"', rest))
    read = {x for x in read if not x.endswith("_")}  # prefixes
    assert read, "no QUEEN_ name found in the sources"
    assert read <= known, sorted(read - known)
    assert known <= read, sorted(known - read)


def test_strict_config_refuses_a_typo(tmp_path):
    env = _env(tmp_path)
    env.update({"QUEEN_STRICT_CONFIG": "true", "QUEEN_S3_FORMATT": "parquet"})
    p = subprocess.run([queen_bin()], env=env, capture_output=True,
                       timeout=60)
    assert p.returncode == 2, p
    fatal = errors(p.stderr.decode())
    assert len(fatal) == 1, p.stderr
    assert re.match(FATAL + re.escape(
        "QUEEN_S3_FORMATT: unknown; did you mean QUEEN_S3_FORMAT? "
        "(QUEEN_STRICT_CONFIG=true)"), fatal[0]), fatal[0]


def test_sink_settings_with_the_sink_off_warn_once(tmp_path):
    b = Broker(str(tmp_path / "d"), env={"QUEEN_S3_BUCKET": "lake",
                                         "QUEEN_S3_QUEUES": "orders"})
    try:
        b.start()
        warns = boot_warnings(b.stderr())
        assert len(warns) == 1, b.stderr()
        assert "the S3 sink is off and ignores" in warns[0]
        assert "QUEEN_S3_BUCKET" in warns[0] and "lake" not in \
            warns[0].split("ignores")[1].replace("QUEEN_S3_", "")
    finally:
        b.stop()
