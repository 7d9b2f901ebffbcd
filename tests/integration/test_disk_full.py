"""A full disk is an answer, not a hang (issue 19 item 2).

Each test mounts a tmpfs of a fixed size as the broker's data directory,
places a ballast file next to it, and pushes until the file system is full.
Every refused write must be answered within a second (507, or 503 for an
I/O error), /health must say why, the log must name the file and the
errno's text once, SIGTERM must finish within its grace, and once the
ballast is removed the node takes writes again without a restart. Every
acknowledged record is read back: present, in order, exactly once.
A directory too small for the preallocated raft segments refuses to boot
with a line saying how much is needed.

Mounting needs root: the tests skip, saying so, only when they are not root
and the mount fails.
"""

import json
import os
import re
import signal
import subprocess
import time

import pytest

import loglines
from queenproc import Background, Broker, queen_bin, wait_until

NOSPACE = "No space left on device"
ANSWER_S = 1.0  # a refusal must come back within this
SEGMENT_MB = 8  # keeps the boot need small: 3 x 8 MiB + 16 MiB
ITEMS = 20
PAD = "p" * 2000


@pytest.fixture
def brokers():
    """Makes Brokers and kills whatever is left of them at teardown, before
    the file systems under them are unmounted."""
    made = []

    def make(data_dir, env=None):
        b = Broker(data_dir, env=env)
        made.append(b)
        return b

    yield make
    for b in made:
        if b.proc is not None:
            b.proc.kill()
            b.proc.wait(10)
            b._reap()


@pytest.fixture
def small_fs(tmp_path):
    """A mounted tmpfs of the given size in MiB; unmounted at teardown."""
    mounts = []

    def mount(size_mb, at=None):
        mnt = at or tmp_path / ("fs-%d" % len(mounts))
        os.makedirs(mnt, exist_ok=True)
        r = subprocess.run(["mount", "-t", "tmpfs", "-o",
                            "size=%dm" % size_mb, "tmpfs", str(mnt)],
                           capture_output=True, text=True)
        if r.returncode != 0:
            if os.geteuid() != 0:
                pytest.skip("mounting a fixed-size tmpfs needs root "
                            "(uid %d): %s" % (os.geteuid(), r.stderr.strip()))
            raise AssertionError("mount tmpfs as root failed: %s" % r.stderr)
        mounts.append(mnt)
        return str(mnt)

    yield mount
    for mnt in reversed(mounts):
        subprocess.run(["umount", "-l", str(mnt)], capture_output=True)


def ballast(path, mb):
    with open(path, "wb") as f:
        chunk = b"\0" * (1 << 20)
        for _ in range(mb):
            f.write(chunk)


def timed(broker, method, path, body):
    """(status, parsed body or text, seconds); the client waits 10 s."""
    t0 = time.monotonic()
    r = broker.request(method, path, body=body, timeout=10)
    dt = time.monotonic() - t0
    try:
        parsed = r.json()
    except ValueError:
        parsed = r.body.decode("utf-8", "replace")
    return r.status, parsed, dt


def push_body(first):
    return {"items": [{"queue": "full", "payload": {"seq": first + i,
                                                    "pad": PAD}}
                      for i in range(ITEMS)]}


class Pusher:
    """Pushes numbered records one request at a time and keeps the verdict
    of each request: acknowledged seqs in order, refusals with their text."""

    def __init__(self, broker):
        self.broker = broker
        self.next = 0
        self.acked = []      # seqs, in acknowledgement order
        self.refused = []    # (status, body, seconds, seqs)

    def push(self):
        seqs = list(range(self.next, self.next + ITEMS))
        status, body, dt = timed(self.broker, "POST", "/api/v1/push",
                                 push_body(self.next))
        self.next += ITEMS
        if status == 201:
            assert [it["status"] for it in body] == ["queued"] * ITEMS, body
            self.acked.extend(seqs)
        else:
            self.refused.append((status, body, dt, seqs))
        return status, body, dt

    def until_refused(self, timeout=120):
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            status, body, dt = self.push()
            if status != 201:
                return status, body, dt
        raise AssertionError("pushes were never refused; acked %d records" %
                             len(self.acked))


def assert_refusal(status, body, dt):
    assert status in (503, 507), (status, body)
    assert dt < ANSWER_S, "refusal took %.2f s: %r" % (dt, body)
    assert isinstance(body, dict) and body.get("code") in (
        "storage_full", "retry"), body
    assert NOSPACE in body["error"], body


def assert_names_the_raft_log(text, raft_dir):
    """An answer (or /health) names the raft log by its last name only:
    where the node keeps its data is the log's to say."""
    assert "raft log .../raft:" in text, text
    assert raft_dir not in text and os.path.dirname(raft_dir) not in text, \
        text


def read_back(broker):
    """Every record of queue "full" in offset order: [(offset, seq)]."""
    out = []
    offset = 0
    while True:
        e = broker.fetch_one("full", offset=offset, maxBytes=4 << 20)
        recs = e["records"]
        if not recs:
            return out
        for r in recs:
            out.append((r["offset"], r["payload"]["seq"]))
        offset = recs[-1]["offset"] + 1


def assert_acked_kept(pusher, records):
    """Acknowledged seqs present exactly once, in acknowledgement order. A
    refused request's records may appear only when its answer said its
    entry is logged (stored once storage recovers), and then all of them,
    once."""
    seqs = [s for _, s in records]
    assert len(seqs) == len(set(seqs)), "a record is stored twice"
    offsets = [o for o, _ in records]
    assert offsets == list(range(len(offsets))), "offsets have gaps"
    acked = set(pusher.acked)
    assert [s for s in seqs if s in acked] == pusher.acked
    stored = set(seqs)
    for status, body, _, batch in pusher.refused:
        present = [s for s in batch if s in stored]
        logged = isinstance(body, dict) and "logged but not acknowledged" in \
            body.get("error", "")
        assert present in ([], batch if logged else []), (body, present)


def nospace_errors(broker):
    return [ln["msg"] for ln in loglines.parse(broker.stderr())
            if ln["level"] == "error" and NOSPACE in ln["msg"]]


def test_full_disk_answers_at_once_and_recovers_without_restart(small_fs,
                                                             brokers):
    fs = small_fs(120)
    ballast_path = os.path.join(fs, "ballast")
    ballast(ballast_path, 40)
    data = os.path.join(fs, "data")
    os.makedirs(data)
    b = brokers(data, env={"QUEEN_RAFT_SEGMENT_MB": str(SEGMENT_MB)})
    b.start()
    try:
        p = Pusher(b)
        assert_refusal(*p.until_refused())
        assert len(p.acked) > 0
        # It stays an answer: more pushes and a KV write, each at once.
        for _ in range(5):
            status, body, dt = p.push()
            assert_refusal(status, body, dt)
        # Answers tell why, never where the node keeps its data (the log
        # does, below).
        for _, body, _, _ in p.refused:
            assert fs not in json.dumps(body), body
        status, body, dt = timed(b, "POST", "/api/v1/kv",
                                 [{"op": "put", "ns": "app", "key": "k",
                                   "value": "v", "forever": True}])
        assert status == 507 and dt < ANSWER_S, (status, body, dt)
        assert body["error"] == "kv_storage_full", body
        assert fs not in json.dumps(body), body
        # Health says why.
        h = b.get("/health")
        assert h.status == 503, h
        assert h.json()["status"] == "unhealthy", h
        assert NOSPACE in h.json()["reason"], h
        assert fs not in h.json()["reason"], h.json()
        # The log names the file and the errno text, once, though the node
        # retries every second.
        lines = nospace_errors(b)
        assert len(lines) >= 1, b.stderr()
        assert data in lines[0], lines[0]
        t_fail = time.monotonic()
        wait_until(lambda: time.monotonic() - t_fail > 3.5, 10,
                   "3 retry rounds")
        assert nospace_errors(b) == lines, b.stderr()
        assert not re.search(r"Input/output error", b.stderr())

        # Space returns: writes are taken again, no restart.
        os.remove(ballast_path)
        wait_until(lambda: b.get("/health").status == 200, 30,
                   "/health to turn healthy after the ballast went")
        for _ in range(5):
            status, body, _ = p.push()
            assert status == 201, body
        status, body, _ = timed(b, "POST", "/api/v1/kv",
                                [{"op": "put", "ns": "app", "key": "k",
                                  "value": "v", "forever": True}])
        assert status == 200, body
        assert_acked_kept(p, read_back(b))
    finally:
        b.stop()


def test_a_full_raft_log_file_system_answers_and_recovers(small_fs, brokers):
    """The raft log on a file system of its own (the store elsewhere): the
    failure is libraft's (a segment it cannot allocate), the refused entry
    is not written, and growing the file system brings writes back."""
    data = os.path.join(small_fs(200), "data")
    raft_dir = os.path.join(data, "raft")
    small_fs(44, at=raft_dir)
    b = brokers(data, env={"QUEEN_RAFT_SEGMENT_MB": str(SEGMENT_MB)})
    b.start()
    try:
        p = Pusher(b)
        status, body, dt = p.until_refused()
        assert_refusal(status, body, dt)
        assert_names_the_raft_log(body["error"], raft_dir)
        for _ in range(3):
            assert_refusal(*p.push())
        h = b.get("/health")
        assert h.status == 503 and NOSPACE in h.json()["reason"], h
        lines = nospace_errors(b)
        assert len(lines) == 1 and raft_dir in lines[0], b.stderr()
        r = subprocess.run(["mount", "-o", "remount,size=120m", raft_dir],
                           capture_output=True, text=True)
        assert r.returncode == 0, r.stderr
        wait_until(lambda: b.get("/health").status == 200, 30,
                   "/health to turn healthy after the file system grew")
        for _ in range(5):
            status, body, _ = p.push()
            assert status == 201, body
        assert_acked_kept(p, read_back(b))
    finally:
        b.stop()


def restart_with_room(b, filler, pusher):
    """Remove filler and start b: every record pusher had acknowledged is
    there."""
    os.remove(filler)
    b.start()
    try:
        assert_acked_kept(pusher, read_back(b))
    finally:
        b.stop()


def test_sigterm_on_a_full_disk_exits_within_its_grace(small_fs, brokers):
    fs = small_fs(120)
    ballast_path = os.path.join(fs, "ballast")
    ballast(ballast_path, 40)
    data = os.path.join(fs, "data")
    os.makedirs(data)
    b = brokers(data, env={"QUEEN_RAFT_SEGMENT_MB": str(SEGMENT_MB)})
    b.start()
    p = Pusher(b)
    assert_refusal(*p.until_refused())
    # A push in flight while the signal lands is answered, not left hanging.
    inflight = Background(timed, b, "POST", "/api/v1/push", push_body(10**9))
    t0 = time.monotonic()
    b.signal(signal.SIGTERM)
    rc = b.wait_exit(timeout=30)
    took = time.monotonic() - t0
    assert rc == 0, b.stderr()
    assert took < 5, "SIGTERM took %.1f s" % took
    try:
        status, body, _ = inflight.result(timeout=15)
        assert status in (503, 507), (status, body)
    except OSError:
        pass  # refused at connect or closed by the stop: an error, not a hang
    b._reap()
    restart_with_room(b, ballast_path, p)


def assert_boot_wants_room(b, data, need_mb, segment_mb):
    """Booting b stops with one FATAL line naming the room data lacks."""
    p = subprocess.run([queen_bin()], env=b.environment(),
                       capture_output=True, text=True, timeout=60)
    assert p.returncode != 0, p
    lines = [ln["msg"] for ln in loglines.parse(p.stderr)
             if ln["msg"].startswith("FATAL")]
    assert len(lines) == 1, p.stderr
    assert re.search(r"QUEEN_RAFT_DIR=%s: \d+ MiB free, %d MiB needed: "
                     r"the raft log preallocates 3 segments of %d MiB "
                     r"\(QUEEN_RAFT_SEGMENT_MB\)" % (
                         re.escape(data), need_mb, segment_mb),
                     lines[0]), lines[0]


def test_a_data_dir_too_small_for_the_raft_segments_refuses_to_boot(
        small_fs, brokers):
    fs = small_fs(48)
    b = brokers(os.path.join(fs, "data"))
    assert_boot_wants_room(b, os.path.join(fs, "data"), 208, 64)
    # The same directory boots with segments that fit.
    b2 = brokers(os.path.join(fs, "data"),
                 env={"QUEEN_RAFT_SEGMENT_MB": str(SEGMENT_MB)})
    b2.start()
    try:
        status, body, _ = timed(b2, "POST", "/api/v1/push", push_body(0))
        assert status == 201, body
    finally:
        b2.stop()


def fill_up(path):
    """Write path until the file system has no byte left."""
    with open(path, "wb", buffering=0) as f:
        chunk = b"\0" * (1 << 20)
        try:
            while True:
                f.write(chunk)
        except OSError:
            pass
        for n in (4096, 1):  # the last blocks
            try:
                while True:
                    f.write(b"\0" * n)
            except OSError:
                pass


def test_a_restart_on_a_full_disk_says_how_much_room_it_needs(small_fs,
                                                              brokers):
    """kill -9 of a node, then its disk fills to the last byte: the next
    boot stops with the line that names the room it needs, not libraft's
    "raft_init: unknown error"; with the room back it boots with every
    acknowledged record."""
    fs = small_fs(120)
    data = os.path.join(fs, "data")
    os.makedirs(data)
    b = brokers(data, env={"QUEEN_RAFT_SEGMENT_MB": str(SEGMENT_MB)})
    b.start()
    p = Pusher(b)
    for _ in range(5):
        p.push()
    b.kill9()
    filler = os.path.join(fs, "filler")
    fill_up(filler)
    assert_boot_wants_room(b, data, 40, SEGMENT_MB)
    restart_with_room(b, filler, p)


def test_a_follower_whose_raft_log_fills_says_so_until_restarted(small_fs,
                                                                  tmp_path):
    """A follower's raft log on a file system of its own that fills: the
    leader and the other follower go on committing every push; the full
    follower's /health turns unhealthy naming the directory and the errno's
    text, a push sent to it is refused at once, its log says so once.
    libraft 0.15 answers a follower's failed append by keeping the entries
    in memory and never writing them again (the node then lags the commit
    by them for as long as it runs), so once the file system has room the
    node stays unhealthy and says to restart it; restarted, it holds exactly
    what the leader holds."""
    from cluster import Cluster
    c = Cluster(str(tmp_path / "c"),
                env={"QUEEN_RAFT_SEGMENT_MB": str(SEGMENT_MB)})
    full = c[3]
    raft_dir = os.path.join(full.data_dir, "raft")
    os.makedirs(raft_dir)
    small_fs(44, at=raft_dir)
    try:
        # Node 3 joins once 1 and 2 have a leader, so it is a follower.
        c.start_node(1)
        c.start_node(2)
        lid = c.leader(nodes=[c[1], c[2]])
        c.start_node(3)
        assert c.leader() == lid
        p = Pusher(c[lid])

        def unhealthy():
            for _ in range(5):
                status, body, _ = p.push()
                assert status == 201, (status, body)
            h = full.health()
            return h if h is not None and h[1] is not None and \
                h[1].get("status") == "unhealthy" else None
        status, body = wait_until(unhealthy, 120,
                                  "node 3's /health to say unhealthy")
        assert status == 503, body
        assert NOSPACE in body["reason"], body
        assert_names_the_raft_log(body["reason"], raft_dir)
        assert c.leader() == lid
        # A write through the full follower is refused at once, saying why.
        s2, b2, dt = timed(full, "POST", "/api/v1/push",
                           push_body(10 ** 6))
        assert_refusal(s2, b2, dt)
        assert_names_the_raft_log(b2["error"], raft_dir)
        # The cluster goes on taking writes meanwhile.
        for _ in range(5):
            status, body, _ = p.push()
            assert status == 201, (status, body)
        lines = nospace_errors(full)
        assert len(lines) == 1 and raft_dir in lines[0], full.logs()

        r = subprocess.run(["mount", "-o", "remount,size=400m", raft_dir],
                           capture_output=True, text=True)
        assert r.returncode == 0, r.stderr

        def says_restart():
            h = full.health()
            return h if h is not None and h[1] is not None and \
                "restart this node" in h[1].get("reason", "") else None
        status, body = wait_until(says_restart, 30,
                                  "node 3's /health to ask for a restart")
        assert status == 503 and body["status"] == "unhealthy", body
        assert_names_the_raft_log(body["reason"], raft_dir)
        # Still so a few probes later, and told once in the log.
        t0 = time.monotonic()
        wait_until(lambda: time.monotonic() - t0 > 2.5, 10, "2 probes")
        assert full.health()[0] == 503
        told = [ln["msg"] for ln in loglines.parse(full.logs())
                if ln["level"] == "error" and
                "restart this node" in ln["msg"]]
        assert len(told) == 1, full.logs()

        c.restart(3)
        wait_until(lambda: (full.health() or (0,))[0] == 200, 60,
                   "node 3's /health to turn healthy after its restart")
        c.wait_converged(timeout=60)
        recs = c.all_records("full")
        assert recs[3] == recs[lid], "node 3 differs from the leader"
        assert_acked_kept(p, read_back(c[lid]))
    finally:
        c.close()


def test_a_leader_whose_disk_fills_hands_on_its_leadership(small_fs,
                                                           tmp_path):
    """The leader's store fills: it refused every write of the cluster
    while the two followers, with room, said healthy. It now hands its
    leadership to one of them: a push through a follower is answered 201
    again within seconds, under a new leader, while the full node says
    unhealthy; every push acknowledged is kept."""
    from cluster import Cluster
    c = Cluster(str(tmp_path / "c"),
                env={"QUEEN_RAFT_SEGMENT_MB": str(SEGMENT_MB)})
    for node in c.nodes.values():
        os.makedirs(node.data_dir)
        small_fs(160, at=node.data_dir)
    try:
        lid = c.start()
        full = c[lid]
        rest = [n for n in c.nodes.values() if n is not full]
        st = os.statvfs(full.data_dir)
        free_mb = st.f_bavail * st.f_frsize >> 20
        ballast(os.path.join(full.data_dir, "ballast"), free_mb - 12)
        p = Pusher(rest[0])
        status, body, _ = p.until_refused(timeout=120)
        assert status in (503, 507), (status, body)

        def taken_again():
            status, body, _ = p.push()
            return status == 201
        wait_until(taken_again, 60, "a push taken under a new leader",
                   interval=0.2)
        new = c.leader(timeout=30, nodes=rest)
        assert new != lid, "node %d still leads" % lid
        assert (full.health() or (0,))[0] != 200, full.health()
        assert "handing the leadership to another voter" in full.logs()
        for _ in range(5):
            status, body, _ = timed(rest[1], "POST", "/api/v1/push",
                                    push_body(p.next))
            assert status == 201, (status, body)
            p.acked.extend(range(p.next, p.next + ITEMS))
            p.next += ITEMS
        # A refusal in the hand-over (a lost leadership) may still have
        # been stored: what is asked is that every acknowledged record is
        # there once, in order.
        seqs = [s for _, s in read_back(c[new])]
        assert len(seqs) == len(set(seqs)), "a record is stored twice"
        acked = set(p.acked)
        assert [s for s in seqs if s in acked] == p.acked
    finally:
        c.close()
