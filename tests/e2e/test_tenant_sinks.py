"""Tenant sinks on one node (issue 15 item 2; docs/design/protocol.md §1,
"Tenant sinks"): the environment's sink mirrors the default tenant into
`lake`, and a sink the control plane configures mirrors a cluster's broker
tenant into `acme-lake` with its own credentials. Each lake is exact in its
own bucket; /status lists both sinks; the cp sink's series and log lines
carry its tenant; the secret shows nowhere; DELETE stops the sink and drops
its entry and its series while the environment's sink carries on."""
import http.client
import json
import re
import time

import lake
from bucket import TestBucket
from queenproc import free_port, wait_until
from sinkenv import PREFIX, TENANT, sink_env

KEY = "5f" * 32
TOKEN = "cp-token-of-the-tenant-sinks-test"
ACCESS = "acme-access"
SECRET = "acme-secret-7d41c09b2e"
SEALED_ERROR = ("the S3 secret cannot be opened on this node: "
                "QUEEN_ENCRYPTION_KEY is unset or differs from the key of the "
                "node that sealed it (every node needs the same key)")


def cp(port, method, path, body=None):
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    try:
        hdrs = {"x-queen-cp-token": TOKEN}
        data = None
        if body is not None:
            data = json.dumps(body).encode()
            hdrs["content-type"] = "application/json"
        conn.request(method, path, body=data, headers=hdrs)
        r = conn.getresponse()
        raw = r.read()
        return r.status, (json.loads(raw) if raw else None), raw
    finally:
        conn.close()


def push(node, items, tenant=None):
    hdrs = {"x-queen-tenant": tenant} if tenant else None
    r = node.request("POST", "/api/v1/push", body=lake.push_body(items),
                     headers=hdrs)
    assert r.status == 201, r
    return lake.acked_from_push(items, r.json())


def items(tag, n=20):
    return [{"queue": "orders", "partition": "p-%d" % (i % 2),
             "transactionId": "%s-%d" % (tag, i),
             "payload": b'{"tag":"%s","i":%d}' % (tag.encode(), i)}
            for i in range(n)]


def s3_block(node):
    return node.get("/status").json()["s3"]


def entries(node):
    return s3_block(node)["sinks"]


def cp_entry(node):
    return next((s for s in entries(node) if s["source"] == "cp"), {})


def metrics_text(node):
    return node.get("/metrics/prometheus").body.decode()


def check_log_tenants(log, bt):
    """docs/design/observability.md §3: every line the cp tenant's sink
    logs about a queue ends with its tenant; the default tenant's carry the
    queue and no tenant. Both sinks mirror a queue named orders, so the
    windows each committed (k = 1, 2, ... once each) tell them apart."""
    ks = {"cp": [], "env": []}
    for line in log.splitlines():
        if " queen-s3: " not in line or " queue=orders" not in line:
            continue
        assert line.endswith(" tenant=%s" % bt) or " tenant=" not in line, \
            line
        m = re.search(r"window committed queue=orders k=(\d+) ", line)
        if m:
            ks["cp" if " tenant=" in line else "env"].append(int(m.group(1)))
    for who, k in ks.items():
        assert k and sorted(k) == list(range(1, len(k) + 1)), (who, ks)


def test_a_cp_tenant_sink_runs_beside_the_env_sink_and_goes_on_delete(
        broker_factory, tmp_path):
    bucket = TestBucket(buckets=["lake", "acme-lake"],
                        extra_keys={ACCESS: SECRET},
                        workdir=str(tmp_path / "bucket"))
    bucket.start()
    try:
        run(broker_factory, bucket)
    finally:
        bucket.stop()


def cp_node(broker_factory, bucket, **env):
    """A node with the embedded control plane and cluster acme-main in it:
    (node, the control plane's port, the cluster's answer)."""
    cp_port = free_port()
    node = broker_factory(env=sink_env(
        bucket, QUEEN_PROXY_EMBEDDED="true", QUEEN_PROXY_PORT=cp_port,
        QUEEN_PROXY_CP_TOKEN=TOKEN, QUEEN_ENCRYPTION_KEY=KEY,
        QUEEN_TENANCY_HEADER="true", **env))
    st, c, raw = cp(cp_port, "POST", "/api/cp/clusters",
                    {"tenant_slug": "acme", "slug": "acme-main"})
    assert st in (200, 201), raw
    return node, cp_port, c


def run(broker_factory, bucket):
    node, cp_port, c = cp_node(broker_factory, bucket)
    bt, cid = c["broker_tenant_uuid"], c["id"]
    doc = {"endpoint": bucket.endpoint, "region": "us-east-1",
           "bucket": "acme-lake", "accessKey": ACCESS, "secretKey": SECRET,
           "queues": "orders", "pathStyle": True, "start": "earliest",
           "align": "none", "maxWindowMs": 1000}
    st, _, raw = cp(cp_port, "PUT", "/api/cp/clusters/acme-main/s3", doc)
    assert st == 200, raw

    acked_env = push(node, items("env"))
    acked_cp = push(node, items("acme"), tenant=bt)
    env_lake = lake.bucket_reader(bucket, "lake")
    cp_lake = lake.bucket_reader(bucket, "acme-lake")
    lake.wait_queue(env_lake, PREFIX, TENANT, "orders", acked_env,
                    timeout=60, align="none")
    lake.wait_queue(cp_lake, PREFIX, bt, "orders", acked_cp, timeout=60,
                    align="none")
    # each bucket holds its own tenant only
    assert not [k for k in cp_lake.list_keys() if "tenant=%s/" % TENANT in k]
    assert not [k for k in env_lake.list_keys() if "tenant=%s/" % bt in k]
    check_log_tenants(node.stderr(), bt)

    sinks = wait_until(
        lambda: (lambda s: s if len(s) == 2 and s[1]["phase"] == "running"
                 else None)(entries(node)), 30, "two running sink entries")
    by = {s["source"]: s for s in sinks}
    assert [s["tenant"] for s in sinks] == sorted([TENANT, bt])
    assert by["env"]["tenant"] == TENANT and by["env"]["cluster"] is None
    assert by["cp"]["tenant"] == bt and by["cp"]["cluster"] == cid
    assert by["cp"]["bucket"]["name"] == "acme-lake"
    assert by["cp"]["uptimeMs"] >= 0 and by["cp"]["error"] is None
    assert s3_block(node)["controlPlane"] == {"error": None}

    # the counters follow the commit that the lake already shows
    wait_until(lambda: node.metric("queen_s3_records_written_total",
                                   'tenant="%s",queue="orders"' % bt) ==
               len(acked_cp), 30, "the cp sink's labelled counter")
    wait_until(lambda: node.metric("queen_s3_records_written_total",
                                   'queue="orders"') == len(acked_env), 30,
               "the env sink's unlabelled counter")
    text = metrics_text(node)
    assert text.count("# TYPE queen_s3_records_written_total ") == 1

    for where in (node.get("/status").body.decode(), text, node.stderr(),
                  json.dumps(cp(cp_port, "GET",
                                "/api/cp/clusters/acme-main/s3")[1])):
        assert SECRET not in where

    # a rotated secret (a PUT that carries it always writes) rebuilds the
    # sink once: a new sink, so its uptime starts again
    up = wait_until(lambda: (lambda e: e["uptimeMs"] if e.get("uptimeMs", 0)
                             > 2000 else None)(cp_entry(node)), 30,
                    "the cp sink to run two seconds")
    st, _, raw = cp(cp_port, "PUT", "/api/cp/clusters/acme-main/s3", doc)
    assert st == 200, raw
    wait_until(lambda: (lambda e: e.get("phase") == "running" and
                        e["uptimeMs"] < up)(cp_entry(node)), 30,
               "the rebuilt cp sink to run")
    acked_cp += push(node, items("acme2"), tenant=bt)
    lake.wait_queue(cp_lake, PREFIX, bt, "orders", acked_cp, timeout=60,
                    align="none")
    assert node.stderr().count("draining the tenant's sink to rebuild") == 1

    # a node whose key cannot open the secret: the tenant's entry is in
    # error and ships nothing, the environment's sink carries on; the
    # right key brings it back
    node.stop()
    node.extra_env["QUEEN_ENCRYPTION_KEY"] = "a0" * 32
    node.start()
    e = wait_until(lambda: (lambda e: e if e.get("phase") == "error"
                            else None)(cp_entry(node)), 30,
                   "the cp entry in error")
    assert e["error"] == SEALED_ERROR and "queues" not in e
    assert e["source"] == "cp" and e["cluster"] == cid
    assert node.stderr().count("the control plane's sink for this tenant "
                               "cannot be started") == 1
    more_env = push(node, items("env1"))
    lake.wait_queue(env_lake, PREFIX, TENANT, "orders", acked_env + more_env,
                    timeout=60, align="none")
    acked_env += more_env
    held = push(node, items("acme3"), tenant=bt)
    assert lake.count_records(cp_lake, PREFIX, bt, "orders") == len(acked_cp)
    node.stop()
    node.extra_env["QUEEN_ENCRYPTION_KEY"] = KEY
    node.start()
    acked_cp += held
    lake.wait_queue(cp_lake, PREFIX, bt, "orders", acked_cp, timeout=60,
                    align="none")

    st, c, raw = cp(cp_port, "DELETE", "/api/cp/clusters/acme-main/s3")
    assert st == 200 and c["removed"] is True, raw
    wait_until(lambda: [s["source"] for s in entries(node)] == ["env"], 30,
               "the cp sink's entry to go after its drain")
    wait_until(lambda: ('tenant="%s"' % bt) not in metrics_text(node), 10,
               "the cp sink's series to go")
    # the environment's sink carries on
    more = push(node, items("env2"))
    lake.wait_queue(env_lake, PREFIX, TENANT, "orders", acked_env + more,
                    timeout=60, align="none")
    assert SECRET not in node.stderr()


def test_a_tenant_whose_bucket_is_down_holds_up_no_other_tenant(
        broker_factory, tmp_path):
    """The node's one sink thread (QUEEN_S3_THREADS=1) is shared by every
    tenant sink. A control-plane tenant's bucket that answers the probe
    and then 503 to every read keeps a call of that thread in its retry
    ladder (its queue's start, about half a minute a call): meanwhile the
    pool runs another thread, and the default tenant's lake stays fresh,
    each record in it within seconds. (A bucket that does not answer at
    all holds no thread: the probe is one request.)"""
    bucket = TestBucket(buckets=["lake"], workdir=str(tmp_path / "bucket"))
    other = TestBucket(buckets=["acme-lake"], workdir=str(tmp_path / "other"),
                       extra_keys={ACCESS: SECRET})
    bucket.start()
    other.start()
    try:
        cp_port = free_port()
        node = broker_factory(env=sink_env(
            bucket, QUEEN_S3_THREADS=1, QUEEN_PROXY_EMBEDDED="true",
            QUEEN_PROXY_PORT=cp_port, QUEEN_PROXY_CP_TOKEN=TOKEN,
            QUEEN_ENCRYPTION_KEY=KEY, QUEEN_TENANCY_HEADER="true"))
        acked = push(node, items("env0"))
        env_lake = lake.bucket_reader(bucket, "lake")
        lake.wait_queue(env_lake, PREFIX, TENANT, "orders", acked,
                        timeout=60, align="none")
        st, c, raw = cp(cp_port, "POST", "/api/cp/clusters",
                        {"tenant_slug": "acme", "slug": "acme-main"})
        assert st in (200, 201), raw
        bt = c["broker_tenant_uuid"]
        other.fault("503", count=-1, method="GET")  # reads only: not HEAD
        doc = {"endpoint": other.endpoint, "region": "us-east-1",
               "bucket": "acme-lake", "accessKey": ACCESS,
               "secretKey": SECRET, "queues": "orders", "pathStyle": True,
               "start": "earliest", "align": "none", "maxWindowMs": 1000}
        st, _, raw = cp(cp_port, "PUT", "/api/cp/clusters/acme-main/s3", doc)
        assert st == 200, raw
        push(node, items("acme"), tenant=bt)
        # the cp queue's start is in its retry ladder on the sink thread
        wait_until(lambda: re.search(r"GET .*retrying in \d+ ms.* tenant=%s"
                                     % bt, node.stderr()), 60,
                   "the cp tenant's queue start retrying")
        for i in range(1, 4):
            t0 = time.monotonic()
            acked += push(node, items("env%d" % i))
            lake.wait_queue(env_lake, PREFIX, TENANT, "orders", acked,
                            timeout=60, align="none")
            took = time.monotonic() - t0
            assert took < 8, "round %d: %.1f s to the lake" % (i, took)
            time.sleep(3)  # spread the rounds over the ladder's waits
        assert not lake.bucket_reader(other, "acme-lake").list_keys(), \
            "the cp tenant's queue wrote while its reads failed"
        assert node.get("/status").json()["s3"]["threads"] == 1
    finally:
        bucket.stop()
        other.stop()


def test_a_tenant_sink_refused_by_its_bucket_names_its_own_keys(
        broker_factory, tmp_path):
    """A control-plane tenant's sink whose bucket refuses its keys: its
    bucket.error names the tenant's accessKey/secretKey, the fields its
    document sets, not the environment's QUEEN_S3_* variables it does not
    use; the secret shows nowhere."""
    bucket = TestBucket(buckets=["lake", "acme-lake"],
                        workdir=str(tmp_path / "bucket"))
    bucket.start()
    try:
        node, cp_port, _ = cp_node(broker_factory, bucket)
        doc = {"endpoint": bucket.endpoint, "region": "us-east-1",
               "bucket": "acme-lake", "accessKey": "queen",
               "secretKey": SECRET, "queues": "orders", "pathStyle": True,
               "start": "earliest", "align": "none", "maxWindowMs": 1000}
        st, _, raw = cp(cp_port, "PUT", "/api/cp/clusters/acme-main/s3", doc)
        assert st == 200, raw

        def refused():
            b = cp_entry(node).get("bucket") or {}
            return b.get("reachable") is False and b.get("error")
        err = wait_until(refused, 60, "the cp sink's bucket refused")
        assert "403" in err, err
        assert "The tenant's accessKey/secretKey must be allowed" in err, err
        assert "QUEEN_S3_ACCESS_KEY" not in err, err
        assert SECRET not in json.dumps(node.get("/status").json())
        assert SECRET not in node.stderr()
    finally:
        bucket.stop()
