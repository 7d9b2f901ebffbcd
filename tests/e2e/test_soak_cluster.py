"""A randomized soak of the cluster's promise (issue 14, "a randomized soak
on 3 nodes"): while any node may die by kill -9 at any moment (never two at
once), every push the cluster acknowledged is in every node's log, the
three logs are the same, and the lake equals the log exactly once.

Three sink nodes (tests/integration/cluster.py, the settings of
tests/e2e/test_cluster_sink.py) mirror three queues into one bucket (one
each, when placement has settled):
  - soak.keep and soak.keep2 have no retention: at the end every node's
    log of every partition is read back (payloads byte for byte) and the
    three must be identical (offsets, transactionIds, stamps, payloads); every
    acknowledged push must be in it with its transactionId and payload;
    and the lake must equal that log exactly (lake.py's verify_queue: every
    record once, byte-exact, the broker's stamp, nothing else, no lost
    range);
  - soak.trim has a 2 s retention and no sink hold, so trims race the sink
    (above all in a bucket outage): the rules of the single-node soak
    (tests/e2e/test_soak_sink.py): every offset in the lake exactly once or
    in a lost range, never both, a lost range only below the log start;
    and where the nodes still hold an offset, they hold the same record.

Three pushers, one per node, send batches with odd partition names and the
payload corpus of the single-node soak; most items carry a transactionId
(one batch in ten of a queue without retention is read back at once from
the node that answered it: a client reads its own writes there). A
push answered 503, or cut off (connection refused or reset, timeout), is
sent again, the same body, through any live node, until one answers 201: a
retried item is answered `duplicate` with the first attempt's offset when
that attempt was committed. A reader copies soak.trim's log from any live
node while the chaos runs, so records retention trims later still have a
known text (two nodes giving different records for one offset fail the
test).

The killer, every 3 to 9 s, sends SIGKILL to the leader, the node owning
most queues in the sink, or a random follower; the victim stays down 0.5 to
6 s while the others go on, then restarts on its data directory, and the
next kill waits until the three agree on a leader and the victim has
applied what was committed when it came back. Some victims come back with
one of the sink's five crash points armed (QUEEN_S3_CRASH_AT): once the
node owns a queue again it aborts inside the commit sequence, and another
node takes the half-done window over; it then restarts disarmed. Now and
then the bucket answers 503 for a few seconds instead.

The seed is QUEEN_SOAK_SEED (random when unset; printed either way), the
chaos lasts QUEEN_SOAK_SECONDS (120). Re-run a failure with its seed.
Marked cluster_long: not in `make check`; `make soak-cluster` runs it
SOAK_RUNS times, each with its own seed. QUEEN_TEST_KEEP_LOGS=DIR keeps the
nodes' logs of every start."""
import http.client
import os
import random
import threading
import time

import pytest

import lake
import test_soak_sink as single
from queenproc import wait_until
from retention_helpers import configure
from sinkenv import PREFIX, TENANT
from test_cluster_sink import (assert_no_window_twice, busiest, owners,
                               sink_cluster)  # noqa: F401 (a fixture)

pytestmark = pytest.mark.cluster_long

KEEP, TRIM = single.KEEP, single.TRIM
KEEP2 = "soak.keep2"
KEEPS = [KEEP, KEEP2]
QUEUES = [KEEP, KEEP2, TRIM]
PARTITIONS = single.PARTITIONS
PAYLOADS = single.PAYLOADS
COMPRESSION = "gzip"  # the sink_cluster fixture's
PUSH_DEADLINE = 180   # a push no node takes within this fails the test


def is_up(node):
    p = node.proc  # the killer thread may reap it meanwhile
    return p is not None and p.poll() is None


class Soak:
    def __init__(self, c, bucket, seed):
        self.c = c
        self.ids = sorted(c.nodes)
        self.bucket = bucket
        self.rng = random.Random(seed)
        self.lock = threading.Lock()
        self.stop = threading.Event()
        self.acked = {q: {} for q in QUEUES}   # (p, o) -> (txn, payload)
        self.logged = {q: {} for q in QUEUES}  # (p, o) -> (txn, ts)
        self.kills = []                        # (kind, node id)
        self.crashes = []                      # (crash point, node id)
        self.outages = 0
        self.retries = 0
        self.duplicates = 0  # retried items the first attempt committed
        self.own_reads = 0   # pushes read back at once on the node asked
        self.batches = 0
        self.errors = []
        # every thread's own random stream, drawn here so the seed alone
        # decides them
        self.seeds = [self.rng.random() for _ in range(8)]
        self.t0 = time.monotonic()

    # -- the pushers -------------------------------------------------------

    def send(self, body, home, rng):
        """POST body to home, then to any live node after a 503 or a cut,
        until a 201: (its Response, the node that answered), or None (and
        an error) past the deadline or on another answer."""
        deadline = time.monotonic() + PUSH_DEADLINE
        node = home
        while True:
            if is_up(node):
                try:
                    r = node.request("POST", "/api/v1/push", body=body,
                                     timeout=20)
                except (OSError, http.client.HTTPException):
                    r = None  # the outcome is unknown: send it again
                if r is not None and r.status == 201:
                    return r, node
                if r is not None and r.status != 503:
                    self.errors.append("push to node %d answered %d: %r"
                                       % (node.id, r.status, r))
                    return None
            if time.monotonic() > deadline:
                self.errors.append("no node took a push within %d s"
                                   % PUSH_DEADLINE)
                return None
            with self.lock:
                self.retries += 1
            time.sleep(0.05 + rng.random() * 0.1)
            live = [n for n in self.c.nodes.values() if is_up(n)]
            node = rng.choice(live) if live else home

    def pusher(self, who, home):
        rng = random.Random(self.seeds[home.id])
        n = 0
        while not self.stop.is_set():
            queue = rng.choice(QUEUES)
            items = []
            for _ in range(rng.randint(1, 12)):
                n += 1
                it = {"queue": queue, "partition": rng.choice(PARTITIONS),
                      "payload": rng.choice(PAYLOADS)}
                if rng.random() < 0.8:
                    it["transactionId"] = "%s-%d" % (who, n)
                items.append(it)
            sent = self.send(lake.push_body(items), home, rng)
            if sent is None:
                continue
            r, node = sent
            answer = r.json()
            if len(answer) != len(items):
                self.errors.append("%d items, %d answers: %r"
                                   % (len(items), len(answer), answer))
                continue
            with self.lock:
                self.batches += 1
                for it, a in zip(items, answer):
                    if a.get("status") not in ("queued", "duplicate"):
                        self.errors.append("push item answered %r" % a)
                        continue
                    # a duplicate is a retried item whose first attempt
                    # was committed: the answer names that record
                    key = (it["partition"], a["offset"])
                    self.duplicates += a["status"] == "duplicate"
                    if key in self.acked[queue]:
                        self.errors.append(
                            "%s %r/%d acknowledged twice (%r, then %r)"
                            % ((queue,) + key + (self.acked[queue][key][0],
                                                 a["transaction_id"])))
                    self.acked[queue][key] = (a["transaction_id"],
                                              it["payload"])
            if queue in KEEPS and rng.random() < 0.1:
                self.read_own_write(node, queue, items[0], answer[0])
            time.sleep(rng.random() * 0.03)

    def read_own_write(self, node, queue, item, a):
        """The node that answered a push holds the record at once (a
        follower answers after its own apply)."""
        p, o = item["partition"], a["offset"]
        try:
            r = node.request("POST", "/api/v1/fetch", body={"entries": [
                {"queue": queue, "partition": p, "offset": o}]}, timeout=20)
        except (OSError, http.client.HTTPException):
            return  # the node died meanwhile
        e = r.json()["entries"][0] if r.status == 200 else None
        rec = e["records"][0] if e and e.get("records") else None
        if rec is None or rec["offset"] != o or \
                rec["transactionId"] != a["transaction_id"]:
            self.errors.append("node %d answered the push of %s %r/%d but "
                               "its fetch right after gives %d %r"
                               % (node.id, queue, p, o, r.status, e))
        else:
            with self.lock:
                self.own_reads += 1

    # -- the reader of soak.trim -------------------------------------------

    def read_log(self, queue, node):
        """Copy (transactionId, ts) of every record node holds of queue;
        two nodes giving different records for one offset is an error.
        Returns {partition: (logStart, highWatermark)}."""
        bounds = {}
        for p in PARTITIONS:
            with self.lock:
                have = [o for (q, o) in self.logged[queue] if q == p]
            nxt = max(have) + 1 if have else 0
            while True:
                e = node.fetch_one(queue, p, nxt)
                if e.get("error") == "OFFSET_OUT_OF_RANGE":
                    if nxt < e["logStartOffset"]:
                        nxt = e["logStartOffset"]
                        continue
                    bounds[p] = (e["logStartOffset"], e["highWatermark"])
                    break
                assert "error" not in e or e["error"] == \
                    "UNKNOWN_TOPIC_OR_PARTITION", e
                with self.lock:
                    for rec in e["records"]:
                        k = (p, rec["offset"])
                        v = (rec["transactionId"],
                             lake.parse_iso_us(rec["ts"]))
                        if k in self.logged[queue] and \
                                self.logged[queue][k] != v:
                            self.errors.append(
                                "%s %r/%d: node %d holds %r, another node "
                                "held %r" % (queue, p, k[1], node.id, v,
                                             self.logged[queue][k]))
                        self.logged[queue][k] = v
                if not e["records"]:
                    bounds[p] = (e["logStartOffset"], e["highWatermark"])
                    break
                nxt = e["records"][-1]["offset"] + 1
        return bounds

    def reader(self):
        rng = random.Random(self.seeds[0])
        while not self.stop.is_set():
            live = [n for n in self.c.nodes.values() if is_up(n)]
            if live:
                try:
                    self.read_log(TRIM, rng.choice(live))
                except (OSError, http.client.HTTPException, AssertionError,
                        ValueError):
                    pass  # the node died under the read
            self.stop.wait(0.1 + rng.random() * 0.2)

    # -- the killer --------------------------------------------------------

    def victim(self):
        """(kind, id) of the node to kill: the leader, the busiest sink
        owner or a random follower."""
        lid = self.c.leader(120)
        r = self.rng.random()
        if r < 0.35:
            return "leader", lid
        if r < 0.7:
            own = owners(self.c.live(), QUEUES)
            if own:
                return "owner", busiest(own, self.ids)
        return "follower", self.rng.choice([i for i in self.ids
                                            if i != lid])

    def killer(self, until):
        while time.monotonic() < until:
            time.sleep(self.rng.uniform(3.0, 9.0))
            if time.monotonic() >= until:
                break
            r = self.rng.random()
            if r < 0.15:
                # the bucket goes away: the sink stops reading, retention
                # trims soak.trim meanwhile
                self.outages += 1
                self.bucket.fault("down503", count=-1)
                time.sleep(self.rng.uniform(3.0, 8.0))
                self.bucket.clear_faults()
                continue
            kind, vid = self.victim()
            self.c.kill9(vid)
            self.kills.append((kind, vid))
            print("soak-cluster: %.1f s: kill -9 of node %d (%s)"
                  % (time.monotonic() - self.t0, vid, kind))
            time.sleep(self.rng.uniform(0.5, 6.0))
            if r < 0.35:
                self.crash_point(vid)
            self.restart(vid)

    def crash_point(self, vid):
        """Start vid with a crash point of the sink's commit sequence
        armed: it aborts there once it owns a queue again and commits a
        window of it (or redoes an intent at boot), and another node takes
        the queue over from the half-done commit. No other node is killed
        meanwhile; after 40 s without the crash it is killed anyway. vid
        is down again on return."""
        node = self.c[vid]
        point = self.rng.choice(single.CRASH_POINTS)
        node.extra_env["QUEEN_S3_CRASH_AT"] = point
        try:
            self.c.start_node(vid)
            end = time.monotonic() + 40
            while node.proc.poll() is None and time.monotonic() < end:
                time.sleep(0.1)
            if node.proc.poll() is None:
                print("soak-cluster: %.1f s: node %d never reached %s"
                      % (time.monotonic() - self.t0, vid, point))
                self.c.kill9(vid)
            else:
                node.proc.wait(10)
                node._reap()
                self.crashes.append((point, vid))
                print("soak-cluster: %.1f s: node %d aborted at %s"
                      % (time.monotonic() - self.t0, vid, point))
        finally:
            node.extra_env.pop("QUEEN_S3_CRASH_AT", None)
        time.sleep(self.rng.uniform(0.0, 2.0))

    def restart(self, vid):
        """Start vid again; return once the three agree on a leader and
        vid applied what the leader had committed when vid answered."""
        node = self.c.start_node(vid)
        node.wait_healthy(120)
        lid = self.c.leader(120)
        commit = self.c[lid].raft()["commit"]
        wait_until(lambda: (node.raft() or {}).get("applied", 0) >= commit,
                   120, "node %d to apply index %d" % (vid, commit),
                   interval=0.1)


def lake_records(reader, queue):
    """Every record line of the queue's lake and every lost range."""
    return lake.records_and_lost(reader, PREFIX, TENANT, queue, COMPRESSION)


def node_logs(c, queue):
    """{id: lake.BrokerLog} of every node (payloads byte for byte)."""
    return {n.id: lake.broker_log(n, queue, PARTITIONS) for n in c.live()}


def compare_logs(logs, queue, whole):
    """The nodes hold the same records: every offset all of them hold is
    the same (stamp, transactionId, payload bytes) everywhere; with whole,
    they hold the same offsets and the same log starts too."""
    ids = sorted(logs)
    first = logs[ids[0]]
    for i in ids[1:]:
        other = logs[i]
        if whole:
            assert other.starts == first.starts, \
                "%s: log starts of node %d %r, node %d %r" % (
                    queue, ids[0], first.starts, i, other.starts)
            only = set(first.records) ^ set(other.records)
            assert not only, "%s: nodes %d and %d differ in offsets %s" % (
                queue, ids[0], i, sorted(only)[:10])
        for k in set(first.records) & set(other.records):
            assert first.records[k] == other.records[k], \
                "%s %r/%d: node %d holds %r, node %d %r" % (
                    queue, k[0], k[1], ids[0], first.records[k], i,
                    other.records[k])
    return first


def test_soak_cluster_kill9_loses_nothing(sink_cluster, bucket):
    seed = int(os.environ.get("QUEEN_SOAK_SEED") or random.randrange(1 << 30))
    seconds = float(os.environ.get("QUEEN_SOAK_SECONDS") or 120)
    print("\nsoak-cluster: seed %d, %d s of chaos (QUEEN_SOAK_SEED=%d to "
          "re-run)" % (seed, seconds, seed))
    c = sink_cluster(QUEUES, QUEEN_S3_THREADS="2",
                     QUEEN_TEST_MODE="true",  # crash points may be armed
                     # a small buffer: in a bucket outage the sink stops
                     # reading, and retention trims what it has not read
                     QUEEN_S3_MEMORY_MB="2")
    c.start(timeout=120)
    node = c.leader_node(60)
    for q in KEEPS:
        configure(node, q)
    configure(node, TRIM, retentionEnabled=True, retentionSeconds=2)
    soak = Soak(c, bucket, seed)
    threads = [threading.Thread(target=soak.pusher, args=("n%d" % i, c[i]))
               for i in soak.ids]
    threads.append(threading.Thread(target=soak.reader))
    for t in threads:
        t.start()
    try:
        soak.killer(time.monotonic() + seconds)
    finally:
        soak.stop.set()
        bucket.clear_faults()
        for t in threads:
            t.join(PUSH_DEADLINE + 60)
    assert not any(t.is_alive() for t in threads), "a pusher did not end"
    assert not soak.errors, soak.errors[:5]
    c.check_alive()
    kinds = [k for k, _ in soak.kills]
    print("soak-cluster: %d kills (%d leader, %d owner, %d follower), %d "
          "crash points fired, %d bucket outages, %d batches, %d retries, "
          "%d duplicates, %d own reads, acked %d + %d + %d"
          % (len(kinds), kinds.count("leader"), kinds.count("owner"),
             kinds.count("follower"), len(soak.crashes), soak.outages,
             soak.batches, soak.retries, soak.duplicates, soak.own_reads,
             len(soak.acked[KEEP]), len(soak.acked[KEEP2]),
             len(soak.acked[TRIM])))
    c.leader(120)
    c.wait_converged(120)

    # soak.keep and soak.keep2: the three logs are one, every acknowledged
    # push is in it, and the lake equals it exactly once.
    reader = lake.bucket_reader(bucket)
    keep = {}
    for q in KEEPS:
        logs = node_logs(c, q)
        assert len(logs) == 3, sorted(logs)
        log = compare_logs(logs, q, whole=True)
        assert all(s == 0 for s in log.starts.values()), log.starts
        for (p, o), (txn, payload) in sorted(soak.acked[q].items()):
            assert (p, o) in log.records, \
                "%s %r/%d was acknowledged and is not in the log" % (q, p, o)
            _, l_txn, l_payload = log.records[(p, o)]
            want = lake._lake_payload(payload, "jsonl")
            assert (l_txn, l_payload) == (txn, want), \
                "%s %r/%d: the log holds %r, the push was acked as %r" % (
                    q, p, o, (l_txn, l_payload[:80]), (txn, payload[:80]))
        whole = [(p, o, txn, payload)
                 for (p, o), (_, txn, payload) in log.records.items()]
        keep[q] = lake.wait_queue(reader, PREFIX, TENANT, q, whole, 300,
                                  compression=COMPRESSION, align="none",
                                  log=log)
        assert keep[q]["records"] == len(whole) and not keep[q]["lost"], \
            keep[q]

    # soak.trim: what the nodes still hold is the same on all three, and
    # every offset given out is in the lake once or in a lost range.
    compare_logs(node_logs(c, TRIM), TRIM, whole=False)
    leader = c.leader_node(60)
    bounds = soak.read_log(TRIM, leader)

    def done():
        try:
            seen, lost = lake_records(reader, TRIM)
        except lake.LakeError:
            return None  # a window being written: look again
        return (seen, lost) if single.covered(seen, lost, bounds) else None
    seen, lost = wait_until(done, 300, "the lake of %s to cover its log"
                            % TRIM, interval=0.5)
    bounds = soak.read_log(TRIM, leader)
    single.check_queue(soak, TRIM, seen, lost, bounds)
    for (p, o), (txn, _) in soak.acked[TRIM].items():
        assert o < bounds[p][0] or (p, o) in soak.logged[TRIM], \
            "soak.trim %r/%d was acknowledged, is above the log start %d " \
            "and is not in the log" % (p, o, bounds[p][0])
    assert not soak.errors, soak.errors[:5]
    assert_no_window_twice(c)
    print("soak-cluster: lake keep %d + %d records; trim %d records, %d "
          "lost, %d trimmed" % (keep[KEEP]["records"],
                                keep[KEEP2]["records"], len(seen),
                       sum(hi - lo + 1 for _, lo, hi in lost),
                       sum(lo for lo, _ in bounds.values())))
