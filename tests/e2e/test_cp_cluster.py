"""Scenario i (docs/tenants.md): control-plane tenants on
a 3-node cell. tenanta/ta-main and tenantb/tb-main mirror their queues
(ia.q0..2 + i.shared, ib.q0..2 + i.shared) into tenant-a-lake and
tenant-b-lake. A PUT through node 3 starts the sinks on every node; each
queue is owned exactly once; a kill -9 of the busiest node moves its queues
within 2 x TTL + 30 s; a node restarted with another QUEEN_ENCRYPTION_KEY
shows both tenant sinks in phase error and owns none of their queues while
the others keep exact lakes, and the right key brings it back; a DELETE
through one node stops the sink on every node. Every lake is exact
(tests/e2e/lake.py)."""
import base64
import os
import re
import tempfile
import time

import pytest

import cpcell
import lake
from bucket import TestBucket
from cluster import Cluster
from cpcell import cp, sink_entry
from queenproc import free_ports, wait_until
from sinkenv import sink_env

TTL_S = 3
TENANTS = {"tenanta": ("ta-main", "tenant-a-lake",
                       ["ia.q0", "ia.q1", "ia.q2", "i.shared"]),
           "tenantb": ("tb-main", "tenant-b-lake",
                       ["ib.q0", "ib.q1", "ib.q2", "i.shared"])}
PARTS = ["p0", "p1", "p2"]
AK, SK = "cell-ak", "cell-secret-Tq40-never-shown"


@pytest.fixture
def cell(tmp_path):
    b = TestBucket(buckets=["env-lake", "tenant-a-lake", "tenant-b-lake"],
                   workdir=str(tmp_path / "bucket"), extra_keys={AK: SK})
    b.start()
    tmp = tempfile.TemporaryDirectory(prefix="queen-cpcell-")
    env = sink_env(b, QUEEN_S3_BUCKET="env-lake", QUEEN_S3_QUEUES="i.env",
                   QUEEN_S3_COMPRESSION="gzip")
    env.update(cpcell.cell_env(0))
    ports = dict(zip((1, 2, 3), free_ports(3)))
    c = Cluster(os.path.join(tmp.name, "c"), env=env, node_env={
        i: {"QUEEN_PROXY_PORT": str(p)} for i, p in ports.items()})
    for i, p in ports.items():
        c[i].proxy_port = p
    try:
        yield c, b
    finally:
        c.close()
        b.stop()
        tmp.cleanup()


def push_any(c, tenant, items, timeout=90):
    """Push through any live node until one acknowledges (same
    transactionIds, so a retry is deduplicated)."""
    body = lake.push_body(items)
    deadline = time.monotonic() + timeout
    turn = 0
    while True:
        live = c.live()
        node = live[turn % len(live)]
        turn += 1
        try:
            r = node.request("POST", "/api/v1/push", body=body, timeout=20,
                             headers={"x-queen-tenant": tenant})
        except OSError:
            r = None
        if r is not None and r.status == 201:
            return lake.acked_from_push(items, r.json())
        assert r is None or r.status == 503, r
        assert time.monotonic() < deadline, "no node took the push"
        time.sleep(0.1)


class Pushes:
    def __init__(self, c, tenants):
        self.c = c
        self.tenants = tenants  # slug -> broker tenant uuid
        self.acked = {}         # (uuid, queue) -> tuples
        self.n = 0

    def round(self):
        for slug, t in self.tenants.items():
            items = []
            for q in TENANTS[slug][2]:
                for p in PARTS:
                    self.n += 1
                    items.append({"queue": q, "partition": p,
                                  "transactionId": "x-%07d" % self.n,
                                  "payload": b'{"n":%d,"t":"%s"}'
                                  % (self.n, slug.encode())})
            got = push_any(self.c, t, items)
            for it, a in zip(items, got):
                self.acked.setdefault((t, it["queue"]), []).append(a)

    def verify(self, bucket, timeout=120):
        for slug, t in self.tenants.items():
            reader = lake.bucket_reader(bucket, TENANTS[slug][1])
            for q in TENANTS[slug][2]:
                lake.wait_queue(reader, "queen", t, q, self.acked[(t, q)],
                                timeout, compression="gzip", align="none")


def owners(c, nodes, tenant, queues):
    """{queue: node id} when every node answers and agrees on one owner of
    each of the tenant's queues (ownedHere on one, heldBy its instance on
    the others); None otherwise."""
    entries = {}
    for n in nodes:
        try:
            e = sink_entry(n, tenant)
        except OSError:
            return None
        if e is None or e.get("phase") != "running":
            return None
        entries[n.id] = e
    out = {}
    for q in queues:
        rows = {i: r for i, e in entries.items()
                for r in e.get("queues", []) if r["name"] == q}
        if len(rows) != len(entries):
            return None
        own = [i for i, r in rows.items() if r.get("ownedHere")]
        if len(own) != 1:
            return None
        inst = entries[own[0]].get("instance")
        if any(r.get("heldBy") != inst for i, r in rows.items()
               if i != own[0]):
            return None
        out[q] = own[0]
    return out


def all_owners(c, nodes, tenants):
    out = {}
    for slug, t in tenants.items():
        o = owners(c, nodes, t, TENANTS[slug][2])
        if o is None:
            return None
        out.update({(t, q): i for q, i in o.items()})
    return out


def windows(bucket, slug, tenant, q):
    reader = lake.bucket_reader(bucket, TENANTS[slug][1])
    return len(reader.list_keys(lake.sidecar_root("queen", tenant, q) +
                                "/windows/"))


def committed_twice(c, tenants):
    """(tenant queue, k) committed by two nodes, from the nodes' logs; the
    shared name is left out (both tenants commit its k = 1, 2, ...)."""
    # the line as docs/design/observability.md §3 reads it
    pat = re.compile(r"window committed queue=(\S+) k=(\d+)")
    seen = {}
    for n in c.nodes.values():
        for q, k in pat.findall(n.logs()):
            if q == "i.shared":
                continue
            seen.setdefault((q, int(k)), set()).add(n.id)
    return {qk: ids for qk, ids in seen.items() if len(ids) > 1}


def test_scenario_i_tenants_on_a_three_node_cell(cell):
    c, b = cell
    c.start()
    n1 = c[1]
    tenants = {}
    for slug, (cl, _, queues) in TENANTS.items():
        j = cpcell.make_cluster(n1, slug, cl)
        tenants[slug] = j["broker_tenant_uuid"]
        for q in queues:
            cpcell.configure(n1, cl, q)
    r = n1.post("/api/v1/configure", {"queue": "i.env", "options": {}})
    assert r.status == 200, r

    # The rows are PUT through node 3; every node starts both sinks.
    for slug, (cl, bucket_name, queues) in TENANTS.items():
        a = cp(c[3], "PUT", "/api/cp/clusters/%s/s3" % cl, {
            "queues": ",".join(queues), "endpoint": b.endpoint,
            "region": "us-east-1", "bucket": bucket_name, "accessKey": AK,
            "secretKey": SK, "pathStyle": True, "start": "earliest",
            "align": "none", "maxWindowMs": 1000, "compression": "gzip"})
        assert a.status == 200, a
    for n in c.nodes.values():
        for t in tenants.values():
            cpcell.wait_phase(n, t, "running", 3 * cpcell.RELOAD_S + 30)

    pushes = Pushes(c, tenants)
    for _ in range(3):
        pushes.round()
    own = wait_until(lambda: all_owners(c, list(c.nodes.values()), tenants),
                     2 * TTL_S + 30, "every tenant queue owned exactly once",
                     interval=0.3)
    wait_until(lambda: all(windows(b, s, t, q) >= 2
                           for s, t in tenants.items()
                           for q in TENANTS[s][2]) or pushes.round(),
               120, "two windows of every tenant queue", interval=1.0)
    pushes.verify(b)

    # kill -9 the busiest node: the survivors take its queues.
    load = {}
    for i in own.values():
        load[i] = load.get(i, 0) + 1
    victim = max(load, key=lambda i: load[i])
    moving = [k for k, i in own.items() if i == victim]
    c.kill9(victim)
    survivors = [n for n in c.nodes.values() if n.id != victim]
    t0 = time.monotonic()
    after = wait_until(lambda: all_owners(c, survivors, tenants),
                       2 * TTL_S + 30, "the survivors to own every queue",
                       interval=0.3)
    assert all(after[k] != victim for k in moving)
    assert time.monotonic() - t0 <= 2 * TTL_S + 30
    pushes.round()
    pushes.verify(b)
    c.start_node(victim).wait_healthy()
    for t in tenants.values():
        cpcell.wait_phase(c[victim], t, "running", 3 * cpcell.RELOAD_S + 30)
    pushes.round()
    pushes.verify(b)
    assert committed_twice(c, tenants) == {}

    # A node with another key cannot open the secrets: both tenant sinks
    # are in phase error there, it owns none of their queues, the others
    # carry on; the right key brings it back.
    odd = c[2]
    odd.stop()
    odd.extra_env["QUEEN_ENCRYPTION_KEY"] = cpcell.KEY_B
    odd.start()
    for t in tenants.values():
        e = cpcell.wait_phase(odd, t, "error", 3 * cpcell.RELOAD_S + 30)
        assert "QUEEN_ENCRYPTION_KEY" in (e.get("error") or ""), e
    others = [c[1], c[3]]
    wait_until(lambda: all_owners(c, others, tenants), 2 * TTL_S + 30,
               "nodes 1 and 3 to own every tenant queue", interval=0.3)
    for t in tenants.values():
        e = sink_entry(odd, t)
        assert not any(r.get("ownedHere") for r in e.get("queues", [])), e
    pushes.round()
    pushes.verify(b)
    assert SK not in odd.stderr()
    odd.stop()
    odd.extra_env["QUEEN_ENCRYPTION_KEY"] = cpcell.KEY_A
    odd.start()
    for t in tenants.values():
        cpcell.wait_phase(odd, t, "running", 3 * cpcell.RELOAD_S + 30)

    # A DELETE through node 1 stops tenant b's sink on every node.
    tb = tenants["tenantb"]
    a = cp(c[1], "DELETE", "/api/cp/clusters/tb-main/s3")
    assert a.status == 200 and a.json()["removed"] is True, a
    for n in c.nodes.values():
        cpcell.wait_gone(n, tb, cpcell.RELOAD_S + 20)
    for n in c.nodes.values():
        e = sink_entry(n, tenants["tenanta"])
        assert e is not None and e["phase"] == "running", (n.id, e)
    pushes.tenants = {"tenanta": tenants["tenanta"]}
    pushes.round()
    pushes.verify(b)
    # No secret anywhere: the logs, the bucket's objects and request log,
    # and every node's data directory (raft segments, snapshots, LMDB).
    needles = [SK.encode(), base64.b64encode(SK.encode())]
    for n in c.nodes.values():
        for x in needles:
            assert x.decode() not in n.logs()
    for x in needles:
        assert x not in open(b.log_path, "rb").read()
    assert cpcell.tree_has(b.data_dir, needles) == {}
    for n in c.nodes.values():
        n.stop()
        assert cpcell.tree_has(n.data_dir, needles) == {}, n.id
