"""Helpers of the control-plane tenant tests (docs/tenants.md; reference
scenarios h and i): the cell's settings, calls to the control plane's port,
pushes and reads as a broker tenant, and waits on the s3 block's `sinks`
entries. A module of its own (not conftest) so the tests import it by a
name no other directory uses."""
import json
import os

import http.client

import lake
from queenproc import wait_until

CP_TOKEN = "cp-token-for-the-tests-0123456789"
KEY_A = "6b" * 32  # the cell's QUEEN_ENCRYPTION_KEY
KEY_B = "3c" * 32  # another key: a node that cannot open the secrets
RELOAD_S = 5.0     # the manager reads the rows every 5 s
DEFAULT_TENANT = "00000000-0000-0000-0000-000000000001"


def cell_env(proxy_port, key=KEY_A, **over):
    env = {
        "QUEEN_PROXY_EMBEDDED": "true",
        "QUEEN_PROXY_PORT": str(proxy_port),
        "QUEEN_PROXY_CP_TOKEN": CP_TOKEN,
        "QUEEN_TENANCY_HEADER": "true",
        "QUEEN_KV_TRUSTED_PROXY": "1",
    }
    if key is not None:
        env["QUEEN_ENCRYPTION_KEY"] = key
    env.update({k: str(v) for k, v in over.items()})
    return env


class Answer:
    def __init__(self, status, body):
        self.status = status
        self.body = body

    def json(self):
        return json.loads(self.body)

    def code(self):
        """The error code string of an error answer, wherever the body
        carries it ({"error": {"code"}} or {"code"})."""
        try:
            j = self.json()
        except ValueError:
            return None
        e = j.get("error") if isinstance(j, dict) else None
        if isinstance(e, dict) and isinstance(e.get("code"), str):
            return e["code"]
        if isinstance(j, dict) and isinstance(j.get("code"), str):
            return j["code"]
        return None

    def __repr__(self):
        return "<%d %r>" % (self.status, self.body[:400])


def cp(node, method, path, body=None, token=CP_TOKEN, record=None):
    """One call to the control plane's port of node. record: a list every
    answer body is appended to (the secret search reads them)."""
    conn = http.client.HTTPConnection(node.host, node.proxy_port, timeout=30)
    try:
        hdrs = {}
        if body is not None:
            if not isinstance(body, (bytes, bytearray)):
                body = json.dumps(body).encode()
            hdrs["content-type"] = "application/json"
        if token is not None:
            hdrs["x-queen-cp-token"] = token
        conn.request(method, path, body=body, headers=hdrs)
        r = conn.getresponse()
        a = Answer(r.status, r.read())
    finally:
        conn.close()
    if record is not None:
        record.append(a.body)
    return a


def make_cluster(node, tenant_slug, slug, record=None):
    a = cp(node, "POST", "/api/cp/clusters",
           {"tenant_slug": tenant_slug, "slug": slug}, record=record)
    assert a.status in (200, 201), a
    j = a.json()
    for k in ("id", "tenant_id", "broker_tenant_uuid", "slug"):
        assert k in j, j
    return j


def set_status(node, path, status):
    a = cp(node, "PUT", path, {"status": status})
    assert a.status == 200, a
    return a


def configure(node, cluster_slug, queue, **options):
    a = cp(node, "POST", "/api/cp/clusters/%s/configure" % cluster_slug,
           {"queue": queue, "options": options})
    assert a.status in (200, 201), a
    return a


def push(node, tenant, items, expect=201):
    """Push raw-payload items as a broker tenant; the acked tuples."""
    r = node.request("POST", "/api/v1/push", body=lake.push_body(items),
                     headers={"x-queen-tenant": tenant})
    assert r.status == expect, r
    if expect != 201:
        return r
    return lake.acked_from_push(items, r.json())


def push_status(node, tenant, items):
    """The HTTP status of a push as a broker tenant (nothing asserted)."""
    return node.request("POST", "/api/v1/push", body=lake.push_body(items),
                        headers={"x-queen-tenant": tenant}).status


def s3_block(node):
    return node.get("/status").json().get("s3") or {}


def sink_entry(node, tenant):
    for s in s3_block(node).get("sinks") or []:
        if s.get("tenant") == tenant:
            return s
    return None


def wait_phase(node, tenant, phases, timeout, what=None):
    phases = (phases,) if isinstance(phases, str) else tuple(phases)
    return wait_until(
        lambda: (lambda e: e if e and e.get("phase") in phases else None)(
            sink_entry(node, tenant)),
        timeout, what or "the sink of %s in phase %s" % (tenant, phases),
        interval=0.2)


def wait_gone(node, tenant, timeout):
    """The tenant's sink entry absent or stopped."""
    return wait_until(
        lambda: (lambda e: e is None or e.get("phase") == "stopped")(
            sink_entry(node, tenant)),
        timeout, "the sink of %s to be gone" % tenant, interval=0.2)


def bucket_keys(test_bucket, name):
    return test_bucket.list_keys(name)


def tree_has(root, needles):
    """The needles (bytes) found in any file under root: {needle: path}."""
    found = {}
    for d, _, files in os.walk(root):
        for f in files:
            p = os.path.join(d, f)
            try:
                with open(p, "rb") as fh:
                    data = fh.read()
            except OSError:
                continue
            for n in needles:
                if n not in found and n in data:
                    found[n] = p
    return found
