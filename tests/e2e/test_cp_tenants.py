"""Scenario h (docs/tenants.md): control-plane tenants on
one node. The environment's sink mirrors the default tenant into env-lake;
clusters acme-main, globex-main and initech-main each mirror their own
broker tenant through the control plane, acme and globex into their own
buckets, initech into acme's bucket under the prefix "lake". Every lake is
checked exactly (tests/e2e/lake.py) after each step that may move it, and no
secret is found in any answer, log, bucket object or data file."""
import base64
import time

import pytest

import cpcell
import lake
from bucket import TestBucket
from cpcell import cp, push, sink_entry, wait_gone, wait_phase
from queenproc import free_port, wait_until
from sinkenv import sink_env

QUEUE = "h.orders"
PARTS = ["lane-%d" % i for i in range(8)]
PAYLOADS = [b'{"order":1,"status":"new","total":42.00}',
            b'{"n":12345678901234567890,"big":1E+400,"neg":-0}',
            b'"caf\xc3\xa9 \\u2028 \xe2\x80\xa8"',
            b'[1,[2,[3]]]',
            b'{"s":"' + b"y" * 300 + b'"}']
SECRETS = {"acme": ("acme-ak", "acme-secret-Zq81-never-shown"),
           "acme2": ("acme-ak2", "acme-secret-rotated-Wp55-never-shown"),
           "globex": ("globex-ak", "globex-secret-Kx72-never-shown"),
           "initech": ("initech-ak", "initech-secret-Jv93-never-shown")}
ENV_SECRET = "env-secret-Hm14-never-shown"


@pytest.fixture
def cell_bucket(tmp_path):
    keys = {ak: sk for ak, sk in SECRETS.values()}
    keys["env-ak"] = ENV_SECRET
    b = TestBucket(buckets=["env-lake", "acme-lake", "globex-lake"],
                   workdir=str(tmp_path / "bucket"), extra_keys=keys)
    b.start()
    try:
        yield b
    finally:
        b.stop()


def items(tag, rnd, n=24):
    out = []
    for i in range(n):
        it = {"queue": QUEUE, "partition": PARTS[i % len(PARTS)],
              "payload": PAYLOADS[(i + rnd) % len(PAYLOADS)]}
        if i % 5:
            it["transactionId"] = "%s-r%d-i%d" % (tag, rnd, i)
        out.append(it)
    return out


def doc(bucket, name, who, prefix=None, **over):
    ak, sk = SECRETS[who]
    d = {"queues": QUEUE, "endpoint": bucket.endpoint, "region": "us-east-1",
         "bucket": name, "accessKey": ak, "secretKey": sk,
         "pathStyle": True, "start": "earliest", "align": "none",
         "maxWindowMs": 1000, "compression": "gzip"}
    if prefix:
        d["prefix"] = prefix
    d.update(over)
    return d


class Cell:
    """The node, its tenants and what each one pushed."""

    def __init__(self, node, bucket):
        self.node = node
        self.bucket = bucket
        self.acked = {}      # tenant uuid -> acked tuples
        self.where = {}      # tenant uuid -> (bucket, prefix)
        self.answers = []    # every control-plane answer body
        self.rounds = 0

    def push(self, tenant, tag, n=24):
        self.rounds += 1
        got = push(self.node, tenant, items(tag, self.rounds, n))
        self.acked.setdefault(tenant, []).extend(got)
        return got

    def reader(self, tenant):
        name, _ = self.where[tenant]
        return lake.bucket_reader(self.bucket, name)

    def verify(self, tenant, timeout=90):
        name, prefix = self.where[tenant]
        comp = "zstd" if tenant == cpcell.DEFAULT_TENANT else "gzip"
        return lake.wait_queue(self.reader(tenant), prefix, tenant, QUEUE,
                               self.acked[tenant], timeout=timeout,
                               compression=comp, align="none")

    def count(self, tenant):
        name, prefix = self.where[tenant]
        return lake.count_records(self.reader(tenant), prefix, tenant, QUEUE)

    def keys(self, tenant):
        name, prefix = self.where[tenant]
        return sorted(k for k in self.bucket.list_keys(name)
                      if "tenant=%s/" % tenant in k)


def frozen(cell, tenant, seconds):
    """The tenant's lake does not change for `seconds` (polled)."""
    before = cell.keys(tenant)
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        assert cell.keys(tenant) == before, \
            "the lake of %s moved while its sink was stopped" % tenant
        time.sleep(0.25)


def uptime(node, tenant):
    e = sink_entry(node, tenant)
    return None if e is None else e.get("uptimeMs")


def test_scenario_h_tenants_on_one_node(broker_factory, cell_bucket):
    b = cell_bucket
    proxy_port = free_port()
    env = sink_env(b, QUEEN_S3_BUCKET="env-lake", QUEEN_S3_QUEUES=QUEUE,
                   QUEEN_S3_ACCESS_KEY="env-ak",
                   QUEEN_S3_SECRET_KEY=ENV_SECRET)
    env.update(cpcell.cell_env(proxy_port))
    node = broker_factory(env=env)
    node.proxy_port = proxy_port
    cell = Cell(node, b)
    rec = cell.answers

    # The default tenant's queue exists before the sink looks for it.
    r = node.post("/api/v1/configure", {"queue": QUEUE, "options": {}})
    assert r.status == 200, r
    default = cpcell.DEFAULT_TENANT
    cell.where[default] = ("env-lake", "queen")

    clusters = {}
    for tenant_slug, slug in (("acme", "acme-main"), ("globex", "globex-main"),
                              ("initech", "initech-main")):
        clusters[tenant_slug] = cpcell.make_cluster(node, tenant_slug, slug,
                                                    record=rec)
    acme = clusters["acme"]["broker_tenant_uuid"]
    globex = clusters["globex"]["broker_tenant_uuid"]
    initech = clusters["initech"]["broker_tenant_uuid"]
    assert len({acme, globex, initech, default}) == 4
    cell.where.update({acme: ("acme-lake", "queen"),
                       globex: ("globex-lake", "queen"),
                       initech: ("acme-lake", "lake")})

    # A node-wide setting is refused with the sink's own sentence, nothing
    # is stored, and the secret is not echoed.
    bad = doc(b, "acme-lake", "acme", leaseTtlMs=3000)
    a = cp(node, "PUT", "/api/cp/clusters/acme-main/s3", bad, record=rec)
    assert a.status == 400 and a.code() == "invalid", a
    assert b"leaseTtlMs" in a.body
    a = cp(node, "GET", "/api/cp/clusters/acme-main/s3", record=rec)
    assert a.status == 404 and a.code() == "s3_unset", a

    # The sinks are set up before their queues exist: the missing retry
    # finds them once they are configured.
    for who, cl, name, prefix in (("acme", "acme-main", "acme-lake", None),
                                  ("globex", "globex-main", "globex-lake",
                                   None),
                                  ("initech", "initech-main", "acme-lake",
                                   "lake")):
        a = cp(node, "PUT", "/api/cp/clusters/%s/s3" % cl,
               doc(b, name, who, prefix), record=rec)
        assert a.status == 200, a
        j = a.json()
        assert set(j) == {"cluster", "tenant", "enabled", "config",
                          "secretKeySet", "updatedAt"}, j
        assert j["secretKeySet"] is True and j["enabled"] is True
        assert "secretKey" not in j["config"]
        assert j["tenant"] == clusters[who]["broker_tenant_uuid"]
    g = cp(node, "GET", "/api/cp/clusters/acme-main/s3", record=rec)
    assert g.status == 200, g
    assert set(g.json()) == {"cluster", "tenant", "enabled", "config",
                             "secretKeySet", "updatedAt"}
    for t in (acme, globex, initech):
        wait_phase(node, t, "running", cpcell.RELOAD_S + 30)
    sinks = cpcell.s3_block(node)["sinks"]
    by_tenant = {s["tenant"]: s for s in sinks}
    assert by_tenant[default]["source"] == "env"
    assert by_tenant[default]["cluster"] is None
    for t in (acme, globex, initech):
        assert by_tenant[t]["source"] == "cp", by_tenant[t]
    assert [s["tenant"] for s in sinks] == sorted(
        s["tenant"] for s in sinks), "sinks are ordered by tenant"

    time.sleep(0.5)  # let each sink see its queue missing at least once
    for cl in ("acme-main", "globex-main", "initech-main"):
        cpcell.configure(node, cl, QUEUE)

    for rnd in range(3):
        for t, tag in ((default, "d"), (acme, "a"), (globex, "g"),
                       (initech, "i")):
            cell.push(t, tag)
    for t in (default, acme, globex, initech):
        got = cell.verify(t)
        assert got["records"] == len(cell.acked[t])

    # Each bucket holds only the tenant roots allowed in it.
    allowed = {"env-lake": {("queen", default)},
               "acme-lake": {("queen", acme), ("lake", initech)},
               "globex-lake": {("queen", globex)}}
    for name, roots in allowed.items():
        keys = b.list_keys(name)
        assert keys, name
        for k in keys:
            assert any(k.startswith("%s/tenant=%s/" % r) or
                       k.startswith("%s/_queen/tenant=%s/" % r)
                       for r in roots), (name, k)

    # Metrics: the environment's series carry no tenant label, each
    # control-plane sink's carry its own.
    assert node.metric("queen_s3_records_written_total",
                       'queue="%s"' % QUEUE) == len(cell.acked[default])
    for t in (acme, globex, initech):
        assert node.metric("queen_s3_records_written_total",
                           'tenant="%s",queue="%s"' % (t, QUEUE)) == \
            len(cell.acked[t])

    # DELETE: acme's sink stops, its lake freezes while the others ship.
    a = cp(node, "DELETE", "/api/cp/clusters/acme-main/s3", record=rec)
    assert a.status == 200 and a.json() == {"cluster": "acme-main",
                                            "removed": True}, a
    wait_gone(node, acme, cpcell.RELOAD_S + 20)
    a = cp(node, "DELETE", "/api/cp/clusters/acme-main/s3", record=rec)
    assert a.status == 200 and a.json()["removed"] is False, a
    a = cp(node, "GET", "/api/cp/clusters/acme-main/s3", record=rec)
    assert a.status == 404 and a.code() == "s3_unset", a
    wait_until(lambda: node.metric(
        "queen_s3_records_written_total",
        'tenant="%s",queue="%s"' % (acme, QUEUE)) is None and
        sink_entry(node, acme) is None, 20,
        "acme's status entry and metric series to be dropped")
    before = cell.keys(acme)
    for rnd in range(3):
        cell.push(acme, "a-del")
        cell.push(globex, "g-del")
        time.sleep(2)
    assert cell.keys(acme) == before, "acme's lake moved after DELETE"
    cell.verify(globex)

    # Suspend globex's cluster, then its tenant: the sink goes, the lake
    # and pushes stop; active again ships the backlog.
    cell.push(globex, "g-pre-suspend")
    cpcell.set_status(node, "/api/cp/clusters/%s/status" % clusters[
        "globex"]["id"], "suspended")
    cpcell.set_status(node, "/api/cp/tenants/globex/status", "suspended")
    wait_gone(node, globex, cpcell.RELOAD_S + 20)
    assert cpcell.push_status(node, globex, items("g-susp", 99, 4)) == 403
    frozen(cell, globex, 3)
    cpcell.set_status(node, "/api/cp/tenants/globex/status", "active")
    cpcell.set_status(node, "/api/cp/clusters/globex-main/status", "active")
    wait_phase(node, globex, "running", cpcell.RELOAD_S + 20)
    cell.push(globex, "g-back")
    cell.verify(globex)

    # push_blocked: pushes are refused, the sink keeps running and ships
    # what the queue holds.
    cell.push(initech, "i-pre-block")
    up = uptime(node, initech)
    cpcell.set_status(node, "/api/cp/clusters/initech-main/status",
                      "push_blocked")
    def blocked():
        # A push that still lands before the gate closes is acked like any.
        its = items("i-blk", 98, 2)
        r = node.request("POST", "/api/v1/push", body=lake.push_body(its),
                         headers={"x-queen-tenant": initech})
        if r.status == 201:
            cell.acked[initech] += lake.acked_from_push(its, r.json())
        return r.status == 403
    wait_until(blocked, 10, "pushes to a push_blocked cluster to be refused")
    time.sleep(cpcell.RELOAD_S + 1)  # a reload passes: nothing rebuilt
    e = sink_entry(node, initech)
    assert e is not None and e["phase"] == "running", e
    assert e["uptimeMs"] >= up, "push_blocked must not rebuild the sink"
    cell.verify(initech)
    r = node.request("POST", "/api/v1/fetch", body={"entries": [
        {"queue": QUEUE, "partition": PARTS[0], "offset": 0}]},
        headers={"x-queen-tenant": initech})
    assert r.status == 200, r
    cpcell.set_status(node, "/api/cp/clusters/initech-main/status", "active")

    # Secret rotation: a new key pair rebuilds the sink exactly once.
    wait_until(lambda: (uptime(node, globex) or 0) > 3000, 30,
               "globex's sink to run a while")
    rot = doc(b, "globex-lake", "globex")
    rot["accessKey"], rot["secretKey"] = SECRETS["acme2"]
    a = cp(node, "PUT", "/api/cp/clusters/globex-main/s3", rot, record=rec)
    assert a.status == 200, a
    old = uptime(node, globex)
    wait_until(lambda: (lambda u: u is not None and u < old)(
        uptime(node, globex)), cpcell.RELOAD_S + 20,
        "the rotated secret to rebuild globex's sink", interval=0.1)
    seen = []
    end = time.monotonic() + cpcell.RELOAD_S + 2
    while time.monotonic() < end:
        u = uptime(node, globex)
        if u is not None:
            seen.append(u)
        time.sleep(0.2)
    assert seen == sorted(seen), "globex's sink was rebuilt twice: %s" % seen
    cell.push(globex, "g-rot")
    cell.verify(globex)

    # enabled:false keeps the row and stops the sink; true resumes.
    a = cp(node, "PUT", "/api/cp/clusters/initech-main/s3",
           {k: v for k, v in doc(b, "acme-lake", "initech", "lake",
                                 enabled=False).items() if k != "secretKey"},
           record=rec)
    assert a.status == 200, a
    assert a.json()["enabled"] is False and a.json()["secretKeySet"] is True
    wait_gone(node, initech, cpcell.RELOAD_S + 20)
    cell.push(initech, "i-off")
    frozen(cell, initech, 2)
    a = cp(node, "PUT", "/api/cp/clusters/initech-main/s3",
           {k: v for k, v in doc(b, "acme-lake", "initech", "lake").items()
            if k != "secretKey"}, record=rec)
    assert a.status == 200 and a.json()["enabled"] is True, a
    wait_phase(node, initech, "running", cpcell.RELOAD_S + 20)
    cell.verify(initech)

    # acme again: the secret is required after a DELETE; with it, the sink
    # resumes from its commit pointer and the lake is exact.
    nosecret = {k: v for k, v in doc(b, "acme-lake", "acme").items()
                if k != "secretKey"}
    a = cp(node, "PUT", "/api/cp/clusters/acme-main/s3", nosecret,
           record=rec)
    assert a.status == 400 and a.code() == "invalid", a
    a = cp(node, "PUT", "/api/cp/clusters/acme-main/s3",
           doc(b, "acme-lake", "acme"), record=rec)
    assert a.status == 200, a
    wait_phase(node, acme, "running", cpcell.RELOAD_S + 20)
    cell.push(acme, "a-back")
    for t in (default, acme, globex, initech):
        cell.verify(t)

    # No secret anywhere: answers, /status, the log, the bucket's requests
    # and objects, the data directory.
    answers = b"".join(rec) + node.get("/status").body + \
        node.get("/metrics/prometheus").body
    log = node.stderr().encode()
    secrets = [sk.encode() for _, sk in SECRETS.values()] + \
        [ENV_SECRET.encode()]
    needles = secrets + [base64.b64encode(s) for s in secrets]
    for n in needles:
        assert n not in answers, n
        assert n not in log, n
    reqlog = open(b.log_path, "rb").read()
    for n in needles:
        assert n not in reqlog, n
    assert cpcell.tree_has(b.data_dir, needles) == {}
    node.stop()
    found = cpcell.tree_has(node.data_dir, needles)
    assert found == {}, "a secret is in clear in %s" % found


def test_a_cell_without_a_key_refuses_to_store_a_secret(broker_factory,
                                                        cell_bucket):
    b = cell_bucket
    proxy_port = free_port()
    env = sink_env(b, QUEEN_S3_BUCKET="env-lake", QUEEN_S3_QUEUES=QUEUE,
                   QUEEN_S3_ACCESS_KEY="env-ak",
                   QUEEN_S3_SECRET_KEY=ENV_SECRET)
    env.update(cpcell.cell_env(proxy_port, key=None))
    node = broker_factory(env=env)
    node.proxy_port = proxy_port
    cl = cpcell.make_cluster(node, "nokey", "nokey-main")
    a = cp(node, "PUT", "/api/cp/clusters/nokey-main/s3",
           doc(b, "acme-lake", "acme"))
    assert a.status == 409 and a.code() == "encryption_required", a
    assert SECRETS["acme"][1].encode() not in a.body
    a = cp(node, "GET", "/api/cp/clusters/nokey-main/s3")
    assert a.status == 404, a
    time.sleep(cpcell.RELOAD_S + 1)  # a reload passes: still no sink
    assert sink_entry(node, cl["broker_tenant_uuid"]) is None
    assert SECRETS["acme"][1] not in node.stderr()
