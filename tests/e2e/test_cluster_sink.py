"""The embedded S3 sink on a 3-node raft cluster (issue 14 item 4; the
reference's scenarios d, j and k, docs/design/scenarios.md §9): every node
runs the sink with the same QUEEN_S3_* settings and the leases in the
replicated KV decide which node writes each queue into the one bucket.

- d: owners agreed by every node's /status, a follower owning queues and
  committing windows, kill -9 of the busiest node (the survivors claim
  within 2 x TTL + 10 s, the victim rejoins and catches up), SIGTERM of the
  busiest (rc 0, its queues taken, every lease it held released before its
  expiresAt), no (queue, k) committed by two nodes, the lake exact;
- j: placement: a late joiner takes its fair share (ceil(6/3) = 2), nothing
  moves for 3 TTLs, its SIGTERM spreads its queues over the others (<= 3
  each), its return under traffic takes 2 back;
- k: SIGTERM rounds alternating the leader and the busiest follower, with a
  lease watch through another node every 20 ms: every lease released,
  none left to expire.

The cluster is tests/integration/cluster.py's; every wait is a deadline on
a real condition. QUEEN_TEST_KEEP_LOGS=DIR keeps the nodes' logs."""

import datetime
import os
import re
import shutil
import tempfile
import threading
import time

import pytest

import lake
from cluster import Cluster
from queenproc import wait_until
from sinkenv import PREFIX, TENANT, sink_env

TTL_S = 3
GRACE_S = 10


# -- the cluster -------------------------------------------------------------

@pytest.fixture
def sink_cluster(request, bucket):
    """make(queues, **env) -> a Cluster of 3 sink nodes (not started),
    every process killed at the end, logs kept under
    $QUEEN_TEST_KEEP_LOGS/<test>/ when that is set."""
    tmp = tempfile.TemporaryDirectory(prefix="queen-csink-")
    made = []

    def make(queues, **over):
        env = sink_env(bucket, QUEEN_S3_QUEUES=",".join(queues),
                       QUEEN_S3_COMPRESSION="gzip", **over)
        c = Cluster(os.path.join(tmp.name, "c%d" % len(made)), env=env)
        made.append(c)
        return c

    yield make
    for c in made:
        c.close()
    keep = os.environ.get("QUEEN_TEST_KEEP_LOGS")
    if keep:
        dest = os.path.join(keep, re.sub(r"[^A-Za-z0-9_.-]", "_",
                                         request.node.name))
        for dirpath, _, files in os.walk(tmp.name):
            for f in files:
                if f.startswith("queen-stderr-"):
                    rel = os.path.relpath(dirpath, tmp.name)
                    os.makedirs(dest, exist_ok=True)
                    shutil.copy(os.path.join(dirpath, f), os.path.join(
                        dest, "%s-%s" % (rel.replace(os.sep, "-"), f)))
    tmp.cleanup()


def s3_block(node):
    """The first sink of node's /status, or None (down, not running yet)."""
    try:
        r = node.get("/status", timeout=5)
    except OSError:
        return None
    if r.status != 200:
        return None
    s = r.json().get("s3")
    if not s or not s.get("sinks"):
        return None
    return s["sinks"][0]


def owners(nodes, queues):
    """{queue: node id} when every node in nodes answers and agrees on the
    owner of every queue: exactly one node has it ownedHere, and every
    other one names that node's instance in heldBy. None otherwise."""
    blocks = {}
    for n in nodes:
        b = s3_block(n)
        if b is None:
            return None
        blocks[n.id] = b
    out = {}
    for q in queues:
        rows = {}
        for i, b in blocks.items():
            for r in b.get("queues", []):
                if r["name"] == q:
                    rows[i] = r
        if len(rows) != len(blocks):
            return None
        own = [i for i, r in rows.items() if r.get("ownedHere")]
        if len(own) != 1:
            return None
        inst = blocks[own[0]]["instance"]
        if any(r.get("heldBy") != inst for i, r in rows.items()
               if i != own[0]):
            return None
        out[q] = own[0]
    return out


def counts(own, ids):
    """{node id: queues it owns} for every id (0 when none)."""
    out = {i: 0 for i in ids}
    for i in own.values():
        out[i] += 1
    return out


def instances(c):
    """{node id: sink instance name} of the nodes that answer."""
    out = {}
    for n in c.live():
        b = s3_block(n)
        if b is not None:
            out[n.id] = b["instance"]
    return out


def committed_by_node(c):
    """{(queue, k): [node ids]} from every node's "window committed" lines
    (all its starts)."""
    out = {}
    # the line as docs/design/observability.md §3 reads it
    pat = re.compile(r"window committed queue=(\S+) k=(\d+)")
    for n in c.nodes.values():
        for q, k in pat.findall(n.logs()):
            out.setdefault((q, int(k)), []).append(n.id)
    return out


def assert_no_window_twice(c):
    twice = {qk: ids for qk, ids in committed_by_node(c).items()
             if len(ids) > 1}
    assert not twice, "windows committed twice: %s" % twice


# -- the load ------------------------------------------------------------------

class Load:
    """Pushes in a thread of its own to every live node in turn: each batch
    one record per (queue, partition), retried through any node until a
    201 (same transactionIds, so a retry is deduplicated; a `duplicate`
    answer names the offset the first attempt got). acked[q] holds the
    (partition, offset, transactionId, payload) of every acknowledged
    record."""

    def __init__(self, c, queues, partitions, pause=0.25):
        self.c = c
        self.queues = queues
        self.partitions = partitions
        self.pause = pause
        self.acked = {q: {} for q in queues}
        self.n = 0
        self.batches = 0
        self.error = None
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self._thread = None
        self._turn = 0

    def start(self):
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()
        return self

    def _run(self):
        try:
            while not self._stop.is_set():
                self.push_once()
                self._stop.wait(self.pause)
        except BaseException as e:  # noqa: BLE001 -- re-raised in stop()
            self.error = e

    def stop(self):
        self._stop.set()
        if self._thread is not None:
            self._thread.join(120)
            assert not self._thread.is_alive(), "the load did not stop"
        if self.error is not None:
            raise self.error

    def push_once(self, timeout=90):
        items = []
        with self._lock:
            for q in self.queues:
                for p in self.partitions:
                    self.n += 1
                    items.append({"queue": q, "partition": p,
                                  "transactionId": "t-%08d" % self.n,
                                  "payload": b'{"n":%d,"q":"%s"}'
                                  % (self.n, q.encode())})
        body = lake.push_body(items)
        deadline = time.monotonic() + timeout
        while True:
            live = [n for n in self.c.nodes.values() if n.alive()]
            if live:
                node = live[self._turn % len(live)]
                self._turn += 1
                try:
                    r = node.request("POST", "/api/v1/push", body=body,
                                     timeout=20)
                except OSError:
                    r = None
                if r is not None and r.status == 201:
                    break
                assert r is None or r.status == 503, (node.id, r)
            assert time.monotonic() < deadline, \
                "no node took a push within %ds" % timeout
            time.sleep(0.1)
        answer = r.json()
        assert len(answer) == len(items), answer
        with self._lock:
            for it, a in zip(items, answer):
                assert a["status"] in ("queued", "duplicate"), a
                q = it["queue"]
                self.acked[q][(it["partition"], a["offset"])] = (
                    it["partition"], a["offset"], a["transaction_id"],
                    it["payload"])
            self.batches += 1

    def acked_of(self, q):
        with self._lock:
            return list(self.acked[q].values())


def verify_lake(bucket, c, load, queues, timeout=120):
    """Every acknowledged record in the lake once (lake.py's rules); the
    checkpoints present must be exact, but not every second window has
    one: a commit retried through a leader change skips its checkpoint
    ("checkpoint not written; the next restart re-reads more, and nothing
    else"), which costs a re-read, never a record."""
    reader = lake.bucket_reader(bucket)
    node = c.live()[0]
    for q in queues:
        lake.wait_queue(reader, PREFIX, TENANT, q, load.acked_of(q), timeout,
                        compression="gzip", align="none", broker=node)


def windows_in_lake(bucket, q):
    reader = lake.bucket_reader(bucket)
    return len(reader.list_keys(lake.sidecar_root(PREFIX, TENANT, q) +
                                "/windows/"))


# -- the lease watch -------------------------------------------------------------

def parse_kv_time(text):
    """expiresAt as the KV answers it ("2026-10-02T00:00:01.5+00:00") in
    seconds since the epoch."""
    m = re.match(r"^(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d)(?:\.(\d{1,6}))?\+00:00$",
                 text)
    assert m, text
    t = datetime.datetime.strptime(m.group(1), "%Y-%m-%dT%H:%M:%S")
    t = t.replace(tzinfo=datetime.timezone.utc).timestamp()
    return t + (int(m.group(2).ljust(6, "0")) / 1e6 if m.group(2) else 0)


class LeaseWatch:
    """Reads every queue's lease row through one node every `every`
    seconds. For each lease (queue, incarnation) it sees, it keeps the
    latest expiresAt and the instance, and records how the lease ended:
    `released` when the row was seen absent, or held by another
    incarnation, before that expiresAt (the wall clock of this machine,
    which the nodes share), `expired` when first seen gone at or after
    it. A read that fails (the node busy, a leader change) is skipped."""

    def __init__(self, node, queues, every=0.02):
        self.node = node
        self.queues = queues
        self.every = every
        self.current = {}  # queue -> (instance, incarnation, expiresAt)
        self.ended = []    # (queue, instance, incarnation, how, late_s)
        self.reads = 0
        self._stop = threading.Event()
        self._thread = None
        self._lock = threading.Lock()

    def start(self):
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()
        return self

    def _read(self):
        ops = [{"op": "get", "ns": "queen-s3",
                "key": "s3:default:%s:lease" % lake.esc(q)}
               for q in self.queues]
        try:
            r = self.node.post("/api/v1/kv", ops, timeout=5)
        except OSError:
            return None
        if r.status != 200:
            return None
        t = time.time()
        return t, r.json()["results"]

    def _run(self):
        import json
        while not self._stop.is_set():
            got = self._read()
            if got is not None:
                t, results = got
                with self._lock:
                    self.reads += 1
                    for q, res in zip(self.queues, results):
                        now = None
                        if res.get("found"):
                            v = res["value"]
                            v = json.loads(v) if isinstance(v, str) else v
                            now = (v.get("instance"), v.get("incarnation"),
                                   parse_kv_time(res["expiresAt"]))
                        was = self.current.get(q)
                        if was is not None and (now is None or
                                                now[1] != was[1]):
                            how = "released" if t < was[2] else "expired"
                            self.ended.append((q, was[0], was[1], how,
                                               t - was[2]))
                        self.current[q] = now
            self._stop.wait(self.every)

    def stop(self):
        self._stop.set()
        self._thread.join(30)

    def endings(self, instance):
        """The ends of the leases instance held, so far."""
        with self._lock:
            return [e for e in self.ended if e[1] == instance]

    def holding(self, instance):
        with self._lock:
            return sorted(q for q, v in self.current.items()
                          if v is not None and v[0] == instance)


# -- helpers of the scenarios -----------------------------------------------------

def wait_owners(c, queues, timeout, nodes=None, cond=None, what="owners"):
    """The agreed owners of the live nodes (or nodes) once cond(own)
    holds, within timeout."""
    def agreed():
        c.check_alive()
        own = owners(nodes or c.live(), queues)
        if own is None:
            return None
        if cond is not None and not cond(own):
            return None
        return own
    return wait_until(agreed, timeout, what, interval=0.2)


def hold_still(c, queues, own, seconds):
    """Nothing moves for `seconds`: every read of the owners (while they
    agree) is own. Returns own."""
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        c.check_alive()
        now = owners(c.live(), queues)
        if now is not None:
            assert now == own, "ownership moved: %s -> %s" % (own, now)
        time.sleep(0.2)
    return own


def busiest(own, ids):
    """The id owning most queues (the lowest id among equals)."""
    n = counts(own, ids)
    return max(sorted(n), key=lambda i: n[i])


def start_with_traffic(c, queues, partitions):
    c.start(timeout=60)
    load = Load(c, queues, partitions)
    load.push_once()  # every queue exists before the sink looks twice
    return load.start()


def sigterm(c, node_id, timeout):
    """SIGTERM one node: its exit code, within timeout seconds."""
    node = c[node_id]
    node.signal(15)
    t0 = time.monotonic()
    rc = node.wait_exit(timeout)
    took = time.monotonic() - t0
    node._reap()
    return rc, took


def check_released(watch, instance, moving):
    """Every lease instance held on the queues in moving ended released,
    none expired, and it holds none of them now."""
    ends = watch.endings(instance)
    ended = {e[0] for e in ends}
    assert set(moving) <= ended, \
        "leases of %s not seen to end: %s (ends %s)" % (
            instance, sorted(set(moving) - ended), ends)
    expired = [e for e in ends if e[3] != "released"]
    assert not expired, "leases left to expire: %s" % expired
    assert not watch.holding(instance), watch.holding(instance)


# -- scenario d -------------------------------------------------------------------

D_QUEUES = ["d.q%d" % i for i in range(6)]
D_PARTS = ["p%02d" % i for i in range(16)]


def test_d_owners_failover_and_handover(sink_cluster, bucket):
    c = sink_cluster(D_QUEUES)
    ids = list(c.nodes)
    load = start_with_traffic(c, D_QUEUES, D_PARTS)
    try:
        # Every node agrees on the owners.
        own = wait_owners(c, D_QUEUES, 2 * TTL_S + 30,
                          what="every node to agree on the owners")
        # A follower owns a queue and commits at least 2 windows of it.
        lid = c.leader()

        def follower_commits():
            now = owners(c.live(), D_QUEUES)
            if now is None:
                return None
            for n in c.live():
                if n.id == lid:
                    continue
                b = s3_block(n)
                if b is None:
                    continue
                for r in b["queues"]:
                    if r.get("ownedHere") and r["windowsCommitted"] >= 2:
                        return (n.id, r["name"])
            return None
        fid, fq = wait_until(follower_commits, 30,
                             "a follower committing 2 windows of a queue",
                             interval=0.3)
        assert c.leader() != fid
        wait_until(lambda: all(windows_in_lake(bucket, q) >= 2
                               for q in D_QUEUES), 60,
                   "2 windows of every queue", interval=0.5)

        # kill -9 of the busiest node: the others claim all within
        # 2 x TTL + 10 s.
        own = owners(c.live(), D_QUEUES) or own
        victim = busiest(own, ids)
        moving = sorted(q for q, i in own.items() if i == victim)
        inst = instances(c)[victim]
        other = [n for n in c.live() if n.id != victim][0]
        watch = LeaseWatch(other, D_QUEUES).start()
        wait_until(lambda: set(moving) <= set(watch.holding(inst)), 10,
                   "the watch to see %s's leases" % inst)
        t0 = time.monotonic()
        c.kill9(victim)
        survivors = [n for n in c.live()]
        own = wait_owners(c, D_QUEUES, 2 * TTL_S + 10, nodes=survivors,
                          cond=lambda o: victim not in o.values(),
                          what="the survivors to claim %s" % moving)
        took = time.monotonic() - t0
        watch.stop()
        assert took <= 2 * TTL_S + 10, took
        print("kill -9 of node %d (%s): claimed in %.1f s" % (victim, moving,
                                                             took))
        # The watch's own check: a killed node gives nothing back, so every
        # lease it held is seen to expire (the SIGTERM case below would
        # pass on a watch that cannot tell).
        ends = watch.endings(inst)
        assert {e[0] for e in ends} >= set(moving), ends
        assert all(e[3] == "expired" for e in ends), ends
        # The victim restarts and catches up.
        c.start_node(victim)
        c[victim].wait_healthy(60)
        c.wait_converged(60)
        wait_owners(c, D_QUEUES, 2 * TTL_S + 30,
                    what="the restarted node %d to agree" % victim)

        # SIGTERM of the busiest: rc 0, its leases released, not expired,
        # its queues taken by the others.
        own = wait_owners(c, D_QUEUES, 30)
        victim = busiest(own, ids)
        moving = sorted(q for q, i in own.items() if i == victim)
        inst = instances(c)[victim]
        other = [n for n in c.live() if n.id != victim][0]
        watch = LeaseWatch(other, D_QUEUES).start()
        wait_until(lambda: set(moving) <= set(watch.holding(inst)), 10,
                   "the watch to see %s's leases" % inst)
        t0 = time.monotonic()
        c[victim].signal(15)
        rc = c[victim].wait_exit(GRACE_S + 20)
        assert rc == 0
        assert time.monotonic() - t0 <= GRACE_S + 20
        c[victim]._reap()
        survivors = c.live()
        wait_owners(c, D_QUEUES, max(0.1, 2 * TTL_S + 25 -
                                     (time.monotonic() - t0)),
                    nodes=survivors,
                    cond=lambda o: victim not in o.values(),
                    what="the others to take %s" % moving)
        watch.stop()
        check_released(watch, inst, moving)
        print("SIGTERM of node %d: %d leases released (%s)" % (
            victim, len(moving), watch.endings(inst)))
        log = c[victim].logs()
        drained = set(re.findall(r"queue drained queue=(\S+)", log))
        assert set(moving) <= drained, (moving, drained)
        c.start_node(victim)
        c[victim].wait_healthy(60)
        wait_owners(c, D_QUEUES, 2 * TTL_S + 30,
                    what="node %d back after its SIGTERM" % victim)
        load.push_once()
    finally:
        load.stop()
    c.wait_converged(60)
    verify_lake(bucket, c, load, D_QUEUES)
    assert_no_window_twice(c)


# -- scenario j -------------------------------------------------------------------

J_QUEUES = ["j.q%d" % i for i in range(6)]
J_PARTS = ["p%d" % i for i in range(4)]


def test_j_placement(sink_cluster, bucket):
    c = sink_cluster(J_QUEUES)
    ids = list(c.nodes)
    c.start_node(1)
    c.start_node(2)
    time.sleep(1.5)  # the scenario: node 3 boots 1.5 s after the others
    c.start_node(3)
    c.leader(60)
    load = Load(c, J_QUEUES, J_PARTS)
    load.push_once()
    load.start()
    try:
        share = lambda o: max(counts(o, ids).values()) <= 2  # noqa: E731
        own = wait_owners(c, J_QUEUES, 120, cond=share,
                          what="no node owning more than 2")
        hold_still(c, J_QUEUES, own, 3 * TTL_S)

        rc, took = sigterm(c, 3, GRACE_S + 20)
        assert rc == 0
        two = [c[1], c[2]]
        own = wait_owners(
            c, J_QUEUES, 60, nodes=two,
            cond=lambda o: 3 not in o.values() and
            max(counts(o, [1, 2]).values()) <= 3,
            what="nodes 1 and 2 owning <= 3 each")

        c.start_node(3)
        c[3].wait_healthy(60)
        own = wait_owners(c, J_QUEUES, 120, cond=share,
                          what="back to <= 2 each with node 3")
        hold_still(c, J_QUEUES, own, 3 * TTL_S)
    finally:
        load.stop()
    verify_lake(bucket, c, load, J_QUEUES)
    assert_no_window_twice(c)


# -- scenario k -------------------------------------------------------------------

K_QUEUES = ["k.q%d" % i for i in range(6)]
K_PARTS = ["p%d" % i for i in range(4)]
K_ROUNDS = int(os.environ.get("QUEEN_TEST_K_ROUNDS", "6"))


def test_k_sigterm_hands_leases_over(sink_cluster, bucket):
    c = sink_cluster(K_QUEUES)
    ids = list(c.nodes)
    load = start_with_traffic(c, K_QUEUES, K_PARTS)
    kinds = []
    try:
        for rnd in range(K_ROUNDS):
            # Placement first spreads the queues again (2 each: the node
            # restarted last round takes its share back by give-backs), so
            # the leader and a follower both own queues to hand over.
            own = wait_owners(
                c, K_QUEUES, 90,
                cond=lambda o: max(counts(o, ids).values()) <= 2,
                what="2 queues each before round %d" % rnd)
            lid = c.leader()
            n = counts(own, ids)
            if rnd % 2 == 0:
                victim, kind = lid, "leader"
            else:
                fol = [i for i in ids if i != lid]
                victim = max(fol, key=lambda i: (n[i], -i))
                kind = "follower"
            moving = sorted(q for q, i in own.items() if i == victim)
            assert moving, (kind, victim, own)
            inst = instances(c)[victim]
            other = [node for node in c.live() if node.id != victim][0]
            watch = LeaseWatch(other, K_QUEUES).start()
            try:
                wait_until(lambda: set(moving) <= set(watch.holding(inst)),
                           10, "the watch to see %s's leases" % inst)
                rc, took = sigterm(c, victim, 40)
                assert rc == 0, (kind, victim)
                wait_owners(c, K_QUEUES, TTL_S + TTL_S + 15,
                            cond=lambda o: victim not in o.values(),
                            what="the others to own everything after "
                            "round %d (%s %d)" % (rnd, kind, victim))
            finally:
                watch.stop()
            check_released(watch, inst, moving)
            kinds.append((kind, victim, len(moving)))
            print("round %d: SIGTERM of the %s (node %d): %d/%d leases "
                  "released" % (rnd, kind, victim, len(watch.endings(inst)),
                                len(moving)))
            c.start_node(victim)
            c[victim].wait_healthy(60)
            c.leader(60)
    finally:
        load.stop()
    assert [k for k, _, _ in kinds] == \
        ["leader", "follower"] * (K_ROUNDS // 2) + ["leader"] * (K_ROUNDS % 2)
    verify_lake(bucket, c, load, K_QUEUES)
    assert_no_window_twice(c)


def test_an_owner_cut_off_from_the_quorum_gives_its_queue_up(sink_cluster,
                                                             bucket):
    """With both other nodes stopped (SIGSTOP), the owner of an idle queue
    cannot renew its lease: once its renewals have failed for the TTL less
    the margin, the lease is lost here (lease.h (4)) and the queue stops
    fenced, instead of the row showing it owned, green, for as long as the
    cut lasts. The others resume and the queue goes on."""
    import signal
    c = sink_cluster(["orders"])
    c.start(timeout=60)
    c.leader_node().push([{"queue": "orders", "payload": {"i": 1}}])
    own = wait_owners(c, ["orders"], 2 * TTL_S + 30)
    cut = c.nodes[own["orders"]]
    others = [n for n in c.nodes.values() if n.id != cut.id]
    for n in others:
        os.kill(n.proc.pid, signal.SIGSTOP)
    try:
        def given_up():
            b = s3_block(cut)
            rows = [r for r in (b or {}).get("queues", [])
                    if r["name"] == "orders"]
            return rows and not rows[0]["ownedHere"] and rows[0]
        row = wait_until(given_up, TTL_S + 30,
                         "the cut owner to give orders up")
        # why: the fenced stop's line. lastError names it too, but only
        # until a newer error replaces it, and the next claim, failing
        # without a leader ("lease claim: not the leader"), may come
        # before this poll (a CI run saw it).
        fenced = re.findall(r"queue fenced queue=orders why=(.*)",
                            cut.logs())
        assert any("the lease was not renewed in time here" in w
                   for w in fenced), (fenced, row)
    finally:
        for n in others:
            os.kill(n.proc.pid, signal.SIGCONT)
    wait_owners(c, ["orders"], 2 * TTL_S + 60,
                what="an owner again after the cut healed")
