"""Raft snapshots as markers (docs/internals/store-raft.md, "Snapshots"),
with build/queen processes and real kill -9: the snapshot file a node keeps
is a 20-byte marker, not the store; a node restarted after markers (even
killed mid-push) has every acknowledged record exactly once; a follower
whose log the leader compacted catches up through InstallSnapshot of the
leader's full dump of its store, and its records equal the leader's,
across kill -9 of either side; a node whose store is behind its marker
(lost, or replaced by an older copy) refuses to boot with one line that
says what to do.

Snapshots are forced with the config's knobs (QUEEN_RAFT_SNAPSHOT_THRESHOLD
64 entries, the smallest allowed; 8 kept behind). Every wait is a deadline
on a real condition."""

import os
import re
import shutil
import threading
from concurrent.futures import ThreadPoolExecutor

from cluster import Cluster
from queenproc import Broker, wait_until
from test_cluster import items, make_cluster, push_ok  # noqa: F401
from test_kv import assert_each_answered_once, incr_from_clients

SNAP_ENV = {"QUEEN_RAFT_SNAPSHOT_THRESHOLD": "64",
            "QUEEN_RAFT_SNAPSHOT_TRAILING": "8"}
MARKER_MAGIC = b"QMARK001"


def snapshot_files(data_dir):
    """{name: bytes} of libraft's snapshot files (not the .meta ones)."""
    d = os.path.join(data_dir, "raft")
    out = {}
    for f in sorted(os.listdir(d)) if os.path.isdir(d) else []:
        if f.startswith("snapshot-") and not f.endswith(".meta"):
            with open(os.path.join(d, f), "rb") as fh:
                out[f] = fh.read()
    return out


def txns_of(node, queue):
    return [t for _, t, _ in Cluster.records(node, queue)]


def metric(node, name):
    try:
        return node.metric(name) or 0
    except OSError:
        return 0


class Pusher:
    """Pushes one record at a time through whichever node nodes() names,
    in a thread, until stopped; keeps every transactionId answered 201
    (acknowledged) and tolerates refused connections and 503s (the node
    was killed or there is no leader): a txn not acknowledged may be
    retried with the same id, so it is never counted twice."""

    def __init__(self, queue, nodes, prefix):
        self.queue = queue
        self.nodes = nodes
        self.prefix = prefix
        self.acked = []
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self):
        i = 0
        while not self.stop.is_set():
            t = "%s%d" % (self.prefix, i)
            for node in self.nodes():
                try:
                    r = node.post("/api/v1/push",
                                  {"items": items(self.queue, [t])},
                                  timeout=10)
                except (OSError, AttributeError):
                    continue
                if r.status == 201:
                    self.acked.append(t)
                    i += 1
                    break

    def halt(self):
        self.stop.set()
        self.thread.join(60)
        assert not self.thread.is_alive()
        return list(self.acked)


def push_until_snapshots(node, queue, prefix, n_snapshots, push=None):
    """Push batches of 5 through node until it took n_snapshots more
    snapshots; returns the transactionIds pushed."""
    base = metric(node, "queen_raft_snapshots_total")
    pushed = []
    push = push or (lambda its: node.push(its))

    def more():
        k = len(pushed)
        batch = ["%s%d" % (prefix, k + j) for j in range(5)]
        push(items(queue, batch))
        pushed.extend(batch)
        return metric(node, "queen_raft_snapshots_total") >= base + n_snapshots
    wait_until(more, 120, "%d snapshots on %s" % (n_snapshots, node.port),
               interval=0)
    return pushed


def assert_markers(data_dir):
    files = snapshot_files(data_dir)
    assert files, "no snapshot file in %s" % data_dir
    for name, data in files.items():
        assert len(data) == 20 and data.startswith(MARKER_MAGIC), \
            (name, len(data), data[:16])


# --------------------------------------------------------------------------
# One node


def test_single_node_kill9_after_markers_keeps_every_acked_record(tmp_path):
    b = Broker(str(tmp_path / "data"), env=SNAP_ENV)
    b.start()
    try:
        want = push_until_snapshots(b, "mk", "a", 2)
        assert_markers(b.data_dir)
        assert metric(b, "queen_raft_snapshot_last_bytes") == 20
        # Keep pushing, and kill -9 in the middle of it, past another
        # snapshot so the log the restart replays starts after a marker.
        p = Pusher("mk", lambda: [b], "b")
        base = metric(b, "queen_raft_snapshots_total")
        wait_until(lambda: len(p.acked) > 50 and
                   metric(b, "queen_raft_snapshots_total") > base,
                   120, "pushes across one more snapshot")
        b.kill9()
        acked = p.halt()
        assert_markers(b.data_dir)
        b.start()
        got = txns_of(b, "mk")
        assert len(got) == len(set(got)), "a record is there twice"
        assert got[:len(want)] == want
        missing = set(acked) - set(got)
        assert not missing, "acknowledged records lost: %s" % sorted(missing)
        # The offsets go on from there.
        b.push(items("mk", ["after"]))
        assert txns_of(b, "mk")[-1] == "after"
        assert len(txns_of(b, "mk")) == len(got) + 1
    finally:
        b.stop()


def refused_line(b):
    """b exits non-zero on its own; the one line that says why."""
    rc = b.wait_exit(60)
    log = b.stderr()
    b._reap()
    assert rc != 0, log[-3000:]
    lines = [ln for ln in log.splitlines()
             if "is behind the raft snapshot marker" in ln]
    assert len(lines) == 1, log[-3000:]
    return lines[0]


def test_a_store_lost_or_older_than_the_marker_refuses_to_boot(tmp_path):
    data = str(tmp_path / "data")
    store = os.path.join(data, "store")
    older = str(tmp_path / "older-store")
    b = Broker(data, env=SNAP_ENV)
    b.start()
    b.push(items("mk", ["x0", "x1"]))
    assert b.stop() == 0
    shutil.copytree(store, older)  # a backup taken here, before any marker
    b.start()
    push_until_snapshots(b, "mk", "y", 2)
    assert b.stop() == 0
    # The store replaced by the older copy.
    shutil.rmtree(store)
    shutil.copytree(older, store)
    b.start(wait=False)
    line = refused_line(b)
    assert "FATAL" in line and store in line, line
    assert re.search(r"behind the raft snapshot marker \(applied [1-9]\d* "
                     r"< \d+;", line), line
    assert "wipe this node's data directory" in line, line
    assert "restore a backup" in line, line
    # The store deleted.
    shutil.rmtree(store)
    b.start(wait=False)
    line = refused_line(b)
    assert "(applied 0 <" in line and store in line, line
    assert "restore a backup" in line, line
    # Nothing was served in between: the marker is still the only snapshot
    # and the raft directory was not changed into a fresh node.
    assert_markers(data)


# --------------------------------------------------------------------------
# A cluster


class HealthWatch:
    """Reads node's /health every few ms in a thread, from start() until
    halt(), and keeps every sample whose applied index is above its commit
    index (a node applies only what is committed, and after an
    InstallSnapshot everything up to the snapshot is committed), and, when
    floor is given, every 200 answer while applied is more than 1,000
    (health.c's HEALTH_READY_LAG) below floor: the index the leader had
    committed before the watch began."""

    def __init__(self, node, floor=None):
        self.node = node
        self.floor = floor
        self.bad = []
        self.samples = 0
        self.healthy = 0
        self._stop = threading.Event()
        self._t = threading.Thread(target=self._run, daemon=True)

    def _run(self):
        while not self._stop.is_set():
            h = self.node.health()
            r = h[1].get("raft") if h and isinstance(h[1], dict) else None
            if r is not None and "applied" in r and "commit" in r:
                self.samples += 1
                self.healthy += h[0] == 200
                if r["applied"] > r["commit"]:
                    self.bad.append(r)
                elif (self.floor is not None and h[0] == 200 and
                      r["applied"] + 1000 < self.floor):
                    self.bad.append(dict(r, http=200, floor=self.floor))
            self._stop.wait(0.005)

    def start(self):
        self._t.start()
        return self

    def halt(self):
        self._stop.set()
        self._t.join(timeout=30)
        return self.bad


def rejoin_by_install(c, lid, f, queue, want):
    """Start the stopped f: the leader dumps its store for it, f restores
    that full snapshot, and f's records of queue are want, equal
    everywhere. f's /health never shows an applied index above its commit
    index meanwhile."""
    dumps_before = metric(c[lid], "queen_raft_snapshot_dumps_total")
    c.start_node(f.id)
    watch = HealthWatch(f).start()
    wait_until(lambda: metric(c[lid], "queen_raft_snapshot_dumps_total") >
               dumps_before, 60, "the leader's full dump for node %d" % f.id)
    c.wait_converged(timeout=90)
    wait_until(lambda: watch.samples > 50, 30, "samples of /health")
    bad = watch.halt()
    assert not bad, "applied > commit in %d samples, first %s" % (len(bad),
                                                                   bad[0])
    assert "restored snapshot at" in f.logs(), f.logs()[-3000:]
    logs = c.all_records(queue)
    assert [t for _, t, _ in logs[f.id]] == want
    assert all(v == logs[lid] for v in logs.values())


def test_a_follower_far_behind_is_settling_until_it_caught_up(make_cluster):
    """A follower restarted 3,000 entries behind answers /health 503
    "settling" until it has applied to within 1,000 of what the leader had
    committed, then 200: from the leader's first message it knows the
    leader's commit index, where its own stopped at its last stored entry
    (it answered 200 with applied 7 and commit 1 beside a leader at
    3,378). With snapshots every 64 entries, so it catches up by the
    leader's full dump, which takes a while to arrive."""
    c = make_cluster(env=SNAP_ENV)
    lid = c.start()
    f = c.followers()[0]
    c.kill9(f.id)
    lid = c.leader(timeout=15)
    start = c[lid].raft()["commit"]
    n = 0
    with ThreadPoolExecutor(8) as ex:  # concurrent pushes may share entries
        while c[lid].raft()["commit"] < start + 3000:
            list(ex.map(lambda i: push_ok(c, c[lid], items(
                "hq", ["h%d" % i], partition="p%d" % (i % 4))),
                range(n, n + 1000)))
            n += 1000
    floor = c[lid].raft()["commit"]
    watch = HealthWatch(f, floor=floor)
    c.start_node(f.id)
    watch.start()
    c.wait_converged(timeout=90, min_applied=floor)
    wait_until(lambda: watch.healthy > 20, 30, "/health 200 on node %d" %
               f.id)
    bad = watch.halt()
    assert not bad, "%d bad samples, first %s" % (len(bad), bad[0])


def a_follower_down(make_cluster, queue, prefix):
    """A 3-node cluster with 5 records of queue, converged, then a
    follower killed: (cluster, that follower, the records)."""
    c = make_cluster(env=SNAP_ENV)
    lid = c.start()
    f = c.followers()[0]
    want = ["%s%d" % (prefix, i) for i in range(5)]
    push_ok(c, c[lid], items(queue, want))
    c.wait_converged()
    c.kill9(f.id)
    return c, f, want


def test_follower_behind_a_compacted_log_catches_up_by_a_full_dump(
        make_cluster):
    c, f, want = a_follower_down(make_cluster, "wq", "w")
    lid = c.leader(timeout=15)
    want += push_until_snapshots(c[lid], "wq", "v", 3,
                                 push=lambda its: push_ok(c, c[lid], its))
    assert_markers(c[lid].data_dir)
    rejoin_by_install(c, lid, f, "wq", want)
    # The follower's own later snapshots are markers again; what it got
    # from the leader was the full frame (LZ4) or has been replaced since.
    more = push_until_snapshots(c[lid], "wq", "u", 2,
                                push=lambda its: push_ok(c, c[lid], its))
    want += more
    c.wait_converged(timeout=60)
    wait_until(lambda: any(d.startswith(MARKER_MAGIC) for d in
                           snapshot_files(f.data_dir).values()),
               60, "a marker of node %d's own" % f.id)
    # kill -9 the leader under a push load: a new leader, no acked loss.
    p = Pusher("wq", lambda: [n for n in c.live()], "k")
    wait_until(lambda: len(p.acked) > 20, 60, "pushes before the kill")
    c.kill9(lid)
    wait_until(lambda: len(p.acked) > 40, 90, "pushes after the kill")
    acked = p.halt()
    new = c.leader(timeout=30)
    assert new != lid
    c.start_node(lid)
    c.wait_converged(timeout=90)
    logs = c.all_records("wq")
    got = [t for _, t, _ in logs[new]]
    assert all(v == logs[new] for v in logs.values())
    assert got[:len(want)] == want
    assert len(got) == len(set(got)), "a record is there twice"
    missing = set(acked) - set(got)
    assert not missing, "acknowledged records lost: %s" % sorted(missing)


def test_follower_killed_during_its_install_comes_back_equal(make_cluster):
    c = make_cluster(env=SNAP_ENV)
    lid = c.start()
    f = c.followers()[0]
    push_ok(c, c[lid], items("kq", ["a0"]))
    c.wait_converged()
    c.kill9(f.id)
    lid = c.leader(timeout=15)
    want = ["a0"] + push_until_snapshots(
        c[lid], "kq", "b", 3, push=lambda its: push_ok(c, c[lid], its))
    dumps = metric(c[lid], "queen_raft_snapshot_dumps_total")
    c.start_node(f.id)
    # kill -9 the follower as soon as the leader made its dump: the
    # install is in flight or just done.
    wait_until(lambda: metric(c[lid], "queen_raft_snapshot_dumps_total") >
               dumps, 60, "the leader's full dump")
    c.kill9(f.id)
    want += push_until_snapshots(c[lid], "kq", "c", 1,
                                 push=lambda its: push_ok(c, c[lid], its))
    c.start_node(f.id)
    c.wait_converged(timeout=90)
    logs = c.all_records("kq")
    assert [t for _, t, _ in logs[lid]] == want
    assert all(v == logs[lid] for v in logs.values())
    # And a follower wiped entirely rejoins the same way.
    c.kill9(f.id)
    c.wipe(f.id)
    want += push_until_snapshots(c[lid], "kq", "d", 1,
                                 push=lambda its: push_ok(c, c[lid], its))
    rejoin_by_install(c, lid, f, "kq", want)


def test_a_follower_whose_raft_directory_is_lost_catches_up(make_cluster):
    """raft/ deleted on a follower (its store kept): the store is ahead of
    the new log. A single node refuses that boot (test_boot.py); a node
    with other voters warns and boots, and the leader's snapshot puts it
    right, as it does for a follower killed during its install."""
    c, f, want = a_follower_down(make_cluster, "rq", "r")
    shutil.rmtree(os.path.join(f.data_dir, "raft"))
    lid = c.leader(timeout=15)
    want += push_until_snapshots(c[lid], "rq", "s", 2,
                                 push=lambda its: push_ok(c, c[lid], its))
    c.start_node(f.id)
    c.wait_converged(timeout=90)
    assert re.search(r"store \S+ is ahead of the raft log \(applied \d+ > "
                     r"last index \d+\): waiting for the leader's snapshot",
                     f.logs()), f.logs()[-3000:]
    logs = c.all_records("rq")
    assert [t for _, t, _ in logs[lid]] == want
    assert all(v == logs[lid] for v in logs.values())



def test_kv_writes_through_every_node_get_their_own_answers(make_cluster):
    """KV increments sent to the leader and to both followers at once while
    every node takes snapshots each 64 entries: every call is answered 200
    with its own entry's value (1..n, each once). A snapshot applies queued
    entries before their callbacks run, on a follower as on the leader."""
    c = make_cluster(env=SNAP_ENV)
    c.start()
    c.wait_converged()
    nodes = [c.leader_node()] + c.followers()
    answers = incr_from_clients(nodes, 2, 120)
    assert_each_answered_once(answers, len(nodes) * 2 * 120)
    assert all(metric(n, "queen_raft_snapshots_total") >= 5 for n in nodes)
