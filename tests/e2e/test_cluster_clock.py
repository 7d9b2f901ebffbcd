"""Stamps and safeTime across leaders with clocks that disagree (issue 14
item 3): one node's wall clock runs 30 s ahead (libfaketime), another's
30 s behind, the third is right. Leadership moves between them (kill -9 of
the leader, three times) while every node pushes and runs the sink.

What must hold: stamps strictly increase in log order on every partition
across every leader change (a new leader stamps above everything applied,
whatever its clock says), every node holds the same log, and the lake is
exact: each acknowledged record in one window once, the windows tiling
(lake.py's rules), no (queue, k) committed by two nodes. A skewed clock
moves stamps, never which records a window holds."""

import os
import shutil

import pytest

from queenproc import wait_until
from test_cluster_sink import (Load, assert_no_window_twice,  # noqa: F401
                               sink_cluster, verify_lake, wait_owners)

LIBFAKETIME = "/usr/lib/x86_64-linux-gnu/faketime/libfaketime.so.1"
QUEUES = ["clk.a", "clk.b"]
PARTS = ["p0", "p1", "p2"]


def skewed(offset):
    return {"LD_PRELOAD": LIBFAKETIME, "FAKETIME": offset,
            # libuv's timers read the monotonic clock: keep it real.
            "FAKETIME_DONT_FAKE_MONOTONIC": "1"}


def log_of(node, queue, partition):
    """[(offset, ts text)] of a partition as node holds it, from 0."""
    out = []
    offset = 0
    while True:
        r = node.post("/api/v1/fetch", {"entries": [
            {"queue": queue, "partition": partition, "offset": offset,
             "maxRecords": 1000}]})
        assert r.status == 200, r
        recs = r.json()["entries"][0]["records"]
        if not recs:
            return out
        out += [(x["offset"], x["ts"]) for x in recs]
        offset = recs[-1]["offset"] + 1


@pytest.mark.skipif(not os.path.exists(LIBFAKETIME) or
                    shutil.which("faketime") is None,
                    reason="libfaketime is not installed (scripts/setup.sh)")
def test_a_leader_30s_off_changes_stamps_never_windows(sink_cluster, bucket):
    c = sink_cluster(QUEUES)
    c[1].extra_env.update(skewed("+30s"))
    c[2].extra_env.update(skewed("-30s"))
    c.start(timeout=60)
    load = Load(c, QUEUES, PARTS, pause=0.1)
    load.push_once()
    load.start()
    leaders = []
    try:
        wait_owners(c, QUEUES, 60, what="every node to agree on the owners")
        for _ in range(3):
            lid = c.leader()
            leaders.append(lid)
            before = load.batches
            c.kill9(lid)
            c.leader()  # a survivor leads
            c.restart(lid)
            c.wait_converged()
            # Pushes went on through the change.
            wait_until(lambda: load.batches >= before + 10, 60,
                       "pushes after the leader change")
            # And into partitions new after it: their first stamp is the
            # new leader's alone (a partition's records also never stamp
            # below its last one), so a leader that stamped by its own
            # slow clock would put them into windows already closed.
            for j in range(3):
                extra = Load(c, QUEUES, ["r%d-%d" % (len(leaders), j)])
                extra.n = 10000000 * (len(leaders) * 3 + j + 1)
                extra.push_once()
                for q in QUEUES:
                    with load._lock:
                        load.acked[q].update(extra.acked[q])
        leaders.append(c.leader())
    finally:
        load.stop()
    c.wait_converged()
    # Stamps strictly increase in log order, across the leader changes,
    # and every node holds the same log.
    for q in QUEUES:
        for p in PARTS:
            logs = {n.id: log_of(n, q, p) for n in c.live()}
            for i, lg in logs.items():
                ts = [t for _, t in lg]
                assert len(ts) > 0, (i, q, p)
                back = [(a, b) for a, b in zip(ts, ts[1:]) if a > b]
                assert not back, "node %d %s/%s: ts went back: %s" % (
                    i, q, p, back[:3])
            first = next(iter(logs.values()))
            for i, lg in logs.items():
                assert lg == first, "node %d holds another %s/%s" % (i, q, p)
    verify_lake(bucket, c, load, QUEUES)
    assert_no_window_twice(c)
    print("clock: leaders in turn %s" % leaders)
