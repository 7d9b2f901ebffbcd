"""Boot and shutdown: settings refused with the exact FATAL line, SIGTERM
finishing in-flight requests, /health, /status, unknown routes."""
import os
import re
import shutil
import signal
import struct
import subprocess

import pytest

import loglines
from queenproc import (Background, Broker, boot_env, free_port, queen_bin,
                       wait_until)

FATAL = r"^FATAL: "


@pytest.mark.parametrize("var,value,why", [
    ("QUEEN_PORT", "abc", "not a decimal integer"),
    ("QUEEN_PORT", "70000", "out of range 1..65535"),
    ("QUEEN_BIND_ADDR", "nowhere", "not an IPv4 or IPv6 address literal"),
    ("QUEEN_RAFT_NODE_ID", "0", "out of range 1..18446744073709551615"),
    ("QUEEN_RAFT_LISTEN", "127.0.0.1", "not ip:port"),
    ("QUEEN_MAX_BODY_BYTES", "lots", "not a byte size"),
    ("QUEEN_MAX_CONNECTIONS", "15", "out of range 16..1000000"),
    ("QUEEN_TENANCY_HEADER", "maybe",
     "not a boolean (true or false; also 1/0, yes/no, on/off)"),
    ("QUEEN_TENANCY_HEADER", "", "not a boolean"),
    # set but empty would leave the broker open (an unset shell variable)
    ("QUEEN_AUTH_TOKENS", "", "set but empty; name its file, or unset it "
     "to run without authentication"),
    ("QUEEN_TLS_KEY", "", "set but empty; name its file, or unset it to "
     "run without TLS"),
])
def test_bad_value_stops_the_boot_with_one_fatal_line(tmp_path, var, value,
                                                      why):
    env = boot_env(tmp_path / "d")
    env[var] = value
    p = subprocess.run([queen_bin()], env=env, capture_output=True,
                       timeout=60)
    assert p.returncode == 2, p
    lines = p.stderr.decode().splitlines()
    fatal = [r["msg"] for r in loglines.parse(p.stderr.decode())
             if r["level"] == "error"]
    assert len(fatal) == 1, lines
    assert re.match(FATAL + re.escape("%s=%s: %s" % (var, value, why)),
                    fatal[0]), fatal[0]
    assert not (tmp_path / "d").exists()


def test_help_config_lists_every_setting():
    p = subprocess.run([queen_bin(), "--help-config"], capture_output=True,
                       timeout=60)
    assert p.returncode == 0
    out = p.stdout.decode()
    for var in ("QUEEN_PORT", "QUEEN_BIND_ADDR", "QUEEN_RAFT_DIR",
                "QUEEN_RAFT_NODE_ID", "QUEEN_RAFT_LISTEN",
                "QUEEN_MAX_BODY_BYTES", "QUEEN_TENANCY_HEADER"):
        assert var in out


def test_data_dir_defaults_to_queen_data_in_the_working_dir(tmp_path):
    b = Broker(str(tmp_path / "unused"))
    env = b.environment()
    del env["QUEEN_RAFT_DIR"]
    proc = subprocess.Popen([queen_bin()], env=env, cwd=str(tmp_path),
                            stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL)
    try:
        b.proc = proc
        wait_until(lambda: _health_ok(b), 60, "/health")
        assert (tmp_path / "queen-data").is_dir()
    finally:
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(60) == 0


def _health_ok(b):
    if b.proc.poll() is not None:
        raise AssertionError("queen exited with %d" % b.proc.returncode)
    try:
        return b.get("/health", timeout=5).status == 200
    except OSError:
        return False


def test_health_reports_the_raft_role_and_indexes(broker):
    r = broker.get("/health")
    assert r.status == 200
    j = r.json()
    assert j["status"] == "healthy" and j["engine"] == "raft"
    assert isinstance(j["version"], str) and j["version"]
    assert j["raft"]["role"] == "leader"
    before = j["raft"]["applied"]
    assert isinstance(before, int) and isinstance(j["raft"]["commit"], int)
    broker.push([{"queue": "h", "payload": 1}])
    after = broker.get("/health").json()["raft"]
    assert after["applied"] > before and after["commit"] >= after["applied"]


def test_status_is_ok_without_an_s3_block(broker):
    r = broker.get("/status")
    assert r.status == 200
    j = r.json()
    assert j["status"] == "ok" and isinstance(j["engine"], str)
    assert "s3" not in j


def test_queue_listing_names_every_queue(broker):
    assert broker.get("/api/v1/resources/queues").json() == {"queues": []}
    broker.push([{"queue": "b", "payload": 1}, {"queue": "a", "payload": 1}])
    j = broker.get("/api/v1/resources/queues?stats=lanes").json()
    assert sorted(q["name"] for q in j["queues"]) == ["a", "b"]


def test_unknown_route_answers_404_no_such_route(broker):
    r = broker.get("/api/v1/nope")
    assert r.status == 404
    assert r.json() == {"code": "no_such_route", "error": "not found",
                        "path": "/api/v1/nope"}


def test_sigterm_answers_the_in_flight_request_and_exits_0(broker):
    broker.push([{"queue": "term", "payload": 0}])
    # The longest long poll (30 s), so that it is still in flight when the
    # signal comes on a loaded machine.
    poll = Background(broker.post, "/api/v1/fetch", {
        "entries": [{"queue": "term", "offset": 1}],
        "maxWaitMs": 30000, "minBytes": 1}, timeout=90)
    wait_until(lambda: broker.metric("queen_fetch_waiting") == 1, 60,
               "the long poll to wait in the broker")
    broker.signal(signal.SIGTERM)
    assert broker.wait_exit(60) == 0
    r = poll.result(60)
    assert r.status == 200, r
    assert r.json()["entries"][0]["records"] == []
    err = broker.stderr()
    assert "Assertion" not in err and \
        not [r for r in loglines.parse(err) if r["level"] == "error"], err


def test_restart_keeps_the_log(broker):
    out = broker.push([{"queue": "keep", "payload": {"v": 1}}])
    rc = broker.stop()
    assert rc == 0, broker.stderr()
    broker.start()
    e = broker.fetch_one("keep")
    assert [r["payload"] for r in e["records"]] == [{"v": 1}]
    again = broker.push([{"queue": "keep", "payload": 2}])
    assert again[0]["offset"] == out[0]["offset"] + 1


def test_port_in_use_fails_the_boot_with_one_error_line(broker, tmp_path):
    env = broker.environment()
    env["QUEEN_RAFT_DIR"] = str(tmp_path / "second")
    env["QUEEN_RAFT_LISTEN"] = "127.0.0.1:%d" % free_port()
    p = subprocess.run([queen_bin()], env=env, capture_output=True,
                       timeout=60)
    assert p.returncode == 1, p
    errors = [r["msg"] for r in loglines.parse(p.stderr.decode())
              if r["level"] == "error"]
    assert len(errors) == 1, errors
    assert re.search(r"^FATAL: .*127\.0\.0\.1:%d.*in use" % broker.port,
                     errors[0]), errors[0]
    # issue 19 item 7: the line names the settings behind the address
    assert "QUEEN_BIND_ADDR=127.0.0.1 QUEEN_PORT=%d: " % broker.port \
        in errors[0], errors[0]
    assert broker.get("/health").status == 200


@pytest.mark.parametrize("listen_set", [True, False], ids=["set", "derived"])
def test_raft_port_in_use_names_queen_raft_listen_and_the_cause(
        broker, tmp_path, listen_set):
    """Issue 19 item 7: a raft port in use said only `raft_start: I/O
    error: `; the line now names the setting, the address and the errno
    text, also when the address is the default QUEEN_PORT+1000."""
    env = broker.environment()
    env["QUEEN_RAFT_DIR"] = str(tmp_path / "second")
    if listen_set:
        env["QUEEN_PORT"] = str(free_port())
        want = "raft: cannot listen on 127.0.0.1:%d (QUEEN_RAFT_LISTEN): " \
            "Address already in use" % broker.raft_port
    else:
        if broker.raft_port <= 1000:
            pytest.skip("no QUEEN_PORT puts the raft port here")
        del env["QUEEN_RAFT_LISTEN"]
        env["QUEEN_PORT"] = str(broker.raft_port - 1000)
        want = "raft: cannot listen on 127.0.0.1:%d (QUEEN_RAFT_LISTEN " \
            "unset: 127.0.0.1 on QUEEN_PORT+1000): Address already in use" \
            % broker.raft_port
    p = subprocess.run([queen_bin()], env=env, capture_output=True,
                       timeout=60)
    assert p.returncode == 1, p
    errors = [r["msg"] for r in loglines.parse(p.stderr.decode())
              if r["level"] == "error"]
    assert len(errors) == 1, errors
    assert re.match(FATAL + re.escape(want) + "$", errors[0]), errors[0]
    assert broker.get("/health").status == 200


def boot_fatal(env):
    """The one error line of a boot with env that must fail."""
    p = subprocess.run([queen_bin()], env=env, capture_output=True,
                       timeout=60)
    assert p.returncode != 0, p
    fatal = [r["msg"] for r in loglines.parse(p.stderr.decode())
             if r["level"] == "error"]
    assert len(fatal) == 1, p.stderr
    return fatal[0]


def test_a_second_broker_on_one_data_dir_is_refused_naming_the_holder(
        tmp_path):
    """Issue 19 item 1: two brokers on one data directory corrupted its raft
    log; the second now stops at boot with one line naming the directory
    and the PID that holds it, and the first goes on untouched."""
    first = Broker(str(tmp_path / "d"))
    first.start()
    try:
        r = first.post("/api/v1/push", {"items": [
            {"queue": "q", "partition": "p", "payload": {"n": 1}}]})
        assert r.status == 201, r
        fatal = [boot_fatal(Broker(str(tmp_path / "d")).environment())]
        assert re.match(FATAL + re.escape(
            "QUEEN_RAFT_DIR=%s: in use by another queen process (pid %d)"
            % (str(tmp_path / "d"), first.proc.pid)), fatal[0]), fatal[0]
        r = first.post("/api/v1/push", {"items": [
            {"queue": "q", "partition": "p", "payload": {"n": 2}}]})
        assert r.status == 201, r
    finally:
        assert first.stop() == 0
    # the lock went with the process: a restart on the directory works and
    # finds both records
    again = Broker(str(tmp_path / "d"))
    again.start()
    try:
        recs = again.fetch_one("q", "p")["records"]
        assert [x["payload"] for x in recs] == [{"n": 1}, {"n": 2}], recs
    finally:
        assert again.stop() == 0


def test_deleting_the_lock_file_lets_no_second_broker_in(tmp_path):
    """The lock is the directory's, not the file's: a cleanup of a
    "stale" queen.lock while the broker runs used to let a second broker
    share the raft log and corrupt it. The second is refused all the same
    (the PID is unknown then), and the first goes on."""
    d = str(tmp_path / "d")
    first = Broker(d)
    first.start()
    try:
        os.unlink(os.path.join(d, "queen.lock"))
        fatal = boot_fatal(Broker(d).environment())
        assert re.match(FATAL + re.escape(
            "QUEEN_RAFT_DIR=%s: in use by another queen process" % d),
            fatal), fatal
        r = first.post("/api/v1/push", {"items": [
            {"queue": "q", "partition": "p", "payload": {"n": 1}}]})
        assert r.status == 201, r
    finally:
        assert first.stop() == 0


def pushed_dir(tmp_path, n=20):
    """A data directory a broker pushed n records into, then stopped."""
    d = str(tmp_path / "d")
    b = Broker(d)
    b.start()
    for i in range(n):
        r = b.post("/api/v1/push", {"items": [
            {"queue": "q", "partition": "p", "payload": {"n": i}}]})
        assert r.status == 201, r
    assert b.stop() == 0
    return d


def boot_fails(d):
    """Boot a broker on d, which must fail with exit 1: its error lines."""
    p = subprocess.run([queen_bin()], env=Broker(d).environment(),
                       capture_output=True, timeout=60)
    assert p.returncode == 1, p
    return [r["msg"] for r in loglines.parse(p.stderr.decode())
            if r["level"] == "error"]


def pages_bytes(path):
    """The bytes data.mdb's pages take by its newer meta page: (last page +
    1) x page size. The file is longer while the store's warmer has
    allocated pages past them (docs/internals/store-raft.md). LMDB's meta
    on this machine's amd64: a 16-byte page header, then magic (u32,
    0xBEEFC0DE), version (u32), address, mapsize, two 48-byte db records,
    last page (u64) and txnid (u64); page 0 and page 1 are the two metas,
    and the free db's md_pad holds the page size."""
    with open(path, "rb") as f:
        head = f.read(2 * 65536)
    metas = []
    psize = struct.unpack_from("<I", head, 16 + 24)[0]  # mm_dbs[0].md_pad
    for at in (0, psize):
        magic, = struct.unpack_from("<I", head, at + 16)
        assert magic == 0xBEEFC0DE, hex(magic)
        last, txnid = struct.unpack_from("<QQ", head, at + 136)
        metas.append((txnid, last))
    return (max(metas)[1] + 1) * psize


def test_a_truncated_store_refuses_the_boot_with_one_line(tmp_path):
    """A data.mdb shorter than its pages (a partial copy of a backup)
    ended the boot on SIGBUS with an empty log; now one line names the
    file and both lengths, and the boot fails (exit 1, as any store that
    does not open)."""
    d = pushed_dir(tmp_path)
    path = os.path.join(d, "store", "data.mdb")
    whole = pages_bytes(path)
    assert os.path.getsize(path) >= whole > 8192
    os.truncate(path, 8192)
    fatal = boot_fails(d)
    assert fatal == ["FATAL: %s is 8192 bytes, shorter than the %d its pages "
                     "take: the store was cut (a partial copy or a "
                     "truncation); restore the data directory whole from "
                     "one backup" % (path, whole)], fatal


def test_a_raft_path_that_is_a_file_is_named(tmp_path):
    """libraft said only "raft_init: unknown error" for a file where the
    raft directory goes: the line names the setting and the path now."""
    d = tmp_path / "d"
    d.mkdir()
    (d / "raft").write_text("not a directory")
    fatal = boot_fatal(Broker(str(d)).environment())
    assert fatal == ("FATAL: QUEEN_RAFT_DIR=%s: %s is not a directory (the "
                     "raft log lives there)" % (d, d / "raft")), fatal


def test_a_store_ahead_of_its_raft_log_refuses_the_boot(tmp_path):
    """The raft directory lost (or older than the store): the node booted
    healthy and answered every write 500 "entry was applied before this
    proposal" until the new log caught up with the store. Now one line
    says so and the boot fails; the store is left as it was."""
    d = str(tmp_path / "d")
    b = Broker(d)
    b.start()
    for i in range(20):
        r = b.post("/api/v1/push", {"items": [
            {"queue": "q", "partition": "p", "payload": {"n": i}}]})
        assert r.status == 201, r
    assert b.stop() == 0
    shutil.rmtree(os.path.join(d, "raft"))
    p = subprocess.run([queen_bin()], env=Broker(d).environment(),
                       capture_output=True, timeout=60)
    assert p.returncode == 1, p
    fatal = [r["msg"] for r in loglines.parse(p.stderr.decode())
             if r["level"] == "error"]
    assert len(fatal) == 1, p.stderr
    assert re.match(re.escape("FATAL: store %s is ahead of the raft log "
                              "(applied " % os.path.join(d, "store")) +
                    r"\d+ > last index \d+; the raft directory lost or "
                    r"older\)", fatal[0]), fatal[0]


def test_the_lock_of_a_killed_broker_does_not_block_its_restart(tmp_path):
    b = Broker(str(tmp_path / "d"))
    b.start()
    b.kill9()
    b.start()
    try:
        assert b.get("/health").status == 200
    finally:
        assert b.stop() == 0


def test_a_data_dir_of_another_node_id_is_refused(tmp_path):
    """A raft log and its votes belong to one member: a directory made by
    node 1 and booted as node 2 stops the boot with one line naming both
    ids, and the directory stays node 1's."""
    d = str(tmp_path / "d")
    first = Broker(d)
    first.start()
    r = first.post("/api/v1/push", {"items": [
        {"queue": "q", "partition": "p", "payload": {"n": 1}}]})
    assert r.status == 201, r
    assert first.stop() == 0
    with open(tmp_path / "d" / "node-id", encoding="ascii") as f:
        assert f.read() == "1\n"
    env = Broker(d).environment()
    env["QUEEN_RAFT_NODE_ID"] = "2"
    fatal = [boot_fatal(env)]
    assert re.match(FATAL + re.escape(
        "QUEEN_RAFT_DIR=%s holds node 1's data, and this node is "
        "QUEEN_RAFT_NODE_ID=2: a raft log and its votes belong to one "
        "member." % d), fatal[0]), fatal[0]
    again = Broker(d)
    again.start()
    try:
        recs = again.fetch_one("q", "p")["records"]
        assert [x["payload"] for x in recs] == [{"n": 1}], recs
    finally:
        assert again.stop() == 0


def test_a_node_id_without_raft_data_is_taken_over(tmp_path):
    """A first boot that stopped before raft wrote its term and vote left
    only the marker: the directory is no member's yet, so the next boot,
    under any id, takes it."""
    d = tmp_path / "d"
    d.mkdir()
    (d / "node-id").write_text("7\n")
    b = Broker(str(d))
    b.start()
    try:
        assert b.get("/health").status == 200
    finally:
        assert b.stop() == 0
    assert (d / "node-id").read_text() == "1\n"


def test_a_node_id_that_is_no_number_is_refused(tmp_path):
    """node-id holds digits only: "-1" (which strtoull would read as a huge
    id) is refused with the file named, on a directory raft wrote."""
    d = str(tmp_path / "d")
    first = Broker(d)
    first.start()
    assert first.stop() == 0
    (tmp_path / "d" / "node-id").write_text("-1\n")
    assert re.match(FATAL + re.escape(
        "QUEEN_RAFT_DIR=%s: node-id is unreadable or not a node id (no "
        "number)" % d), boot_fatal(Broker(d).environment()))
