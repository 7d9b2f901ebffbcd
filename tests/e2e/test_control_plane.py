"""The embedded control plane (docs/design/control-plane.md) against real
queen processes: its token, tenants and clusters, a cluster's queue
configuration, the data plane's gates, the proxy tenant out of every
client's reach, every answer of the per-cluster S3 routes (docs/design/control-plane.md §5
and the table of docs/s3-sink.md), and on three nodes a write through one
node read and gated on another.

The S3 routes need QUEEN_S3_EMBEDDED=true on the answering node; without
QUEEN_S3_QUEUES no default-tenant sink runs, so no bucket is needed: the
routes only validate and store rows."""
import http.client
import json
import os
import socket

import pytest

from queenproc import free_port, free_ports, wait_until

TOKEN = "cp-token-for-tests-0123456789"
KEY = "8f" * 32
SECRET = "s3-secret-QmV4WkZpTjJ3cGxvZA"
TENANT_HDR = "x-queen-tenant"
PROXY_TENANT = "00000000-0000-0000-0000-00000000fffe"

S3_BODY = {
    "endpoint": "http://127.0.0.1:9",
    "region": "us-east-1",
    "bucket": "acme-lake",
    "accessKey": "acme-access",
    "queues": "*",
    "pathStyle": True,
}


def cp_env(**over):
    env = {
        "QUEEN_PROXY_EMBEDDED": "true",
        "QUEEN_PROXY_PORT": str(free_port()),
        "QUEEN_PROXY_CP_TOKEN": TOKEN,
        "QUEEN_TENANCY_HEADER": "true",
    }
    env.update({k: str(v) for k, v in over.items() if v is not None})
    for k in [k for k, v in over.items() if v is None]:
        env.pop(k, None)
    return env


def cp(node, method, path, body=None, token=TOKEN, raw=None):
    """One request to node's control-plane port: (status, parsed body)."""
    port = int(node.extra_env["QUEEN_PROXY_PORT"])
    conn = http.client.HTTPConnection(node.host, port, timeout=30)
    try:
        hdrs = {}
        if token is not None:
            hdrs["x-queen-cp-token"] = token
        data = raw
        if body is not None:
            data = json.dumps(body).encode()
        if data is not None:
            hdrs["content-type"] = "application/json"
        conn.request(method, path, body=data, headers=hdrs)
        r = conn.getresponse()
        text = r.read()
        try:
            return r.status, json.loads(text)
        except ValueError:
            return r.status, text
    finally:
        conn.close()


def as_tenant(node, method, path, tenant, body=None):
    return node.request(method, path, body=body,
                        headers={TENANT_HDR: tenant})


def push_as(node, tenant, queue="orders", n=1):
    items = [{"queue": queue, "partition": "p", "payload": {"i": i}}
             for i in range(n)]
    return as_tenant(node, "POST", "/api/v1/push", tenant, {"items": items})


def fetch_as(node, tenant, queue="orders"):
    return as_tenant(node, "POST", "/api/v1/fetch", tenant,
                     {"entries": [{"queue": queue, "partition": "p",
                                   "offset": 0}]})


def make_cluster(node, tenant_slug, slug):
    st, c = cp(node, "POST", "/api/cp/clusters",
               {"tenant_slug": tenant_slug, "slug": slug})
    assert st == 201, (st, c)
    return c


def error_of(st_body, status, code):
    st, body = st_body
    assert st == status, st_body
    assert body["code"] == code, body
    return body["error"]


# ---- the token ---------------------------------------------------------


def test_no_token_answers_404_and_a_wrong_token_401(broker_factory):
    off = broker_factory(env=cp_env(QUEEN_PROXY_CP_TOKEN=None))
    assert cp(off, "GET", "/api/cp/clusters")[0] == 404
    assert cp(off, "POST", "/api/cp/clusters",
              {"tenant_slug": "a", "slug": "b"})[0] == 404
    assert cp(off, "GET", "/api/cp/nothing-here")[0] == 404

    on = broker_factory(env=cp_env())
    for token in (None, "", "wrong", TOKEN + "x", TOKEN[:-1]):
        st, body = cp(on, "GET", "/api/cp/clusters", token=token)
        assert st == 401, (token, st, body)
        assert body == {"error": "bad control-plane token",
                        "code": "unauthorized"}
    assert cp(on, "GET", "/api/cp/clusters") == (200, {"clusters": []})
    # The control plane is on its own port only.
    assert on.get("/api/cp/clusters",
                  headers={"x-queen-cp-token": TOKEN}).status == 404
    assert TOKEN not in on.stderr()


def test_a_body_without_the_token_is_refused_before_it_is_read(
        broker_factory):
    """The control-plane token is checked on a request's head: a caller
    without it gets its answer before it sends a byte of a body (no 100
    Continue), and the connection closes, so it cannot make the node hold
    QUEEN_MAX_BODY_BYTES for it. With the token, 100 Continue."""
    node = broker_factory(env=cp_env())
    port = int(node.extra_env["QUEEN_PROXY_PORT"])

    def head(lines):
        s = socket.create_connection(("127.0.0.1", port), timeout=10)
        s.sendall(("\r\n".join(
            ["POST /api/cp/clusters HTTP/1.1", "Host: q",
             "Content-Type: application/json",
             "Content-Length: %d" % (60 << 20), "Expect: 100-continue"] +
            lines) + "\r\n\r\n").encode())
        got = b""
        while True:
            chunk = s.recv(65536)
            if not chunk:
                break
            got += chunk
            if got.startswith(b"HTTP/1.1 100 "):
                break
        s.close()
        return got.decode()
    for lines in ([], ["x-queen-cp-token: wrong"]):
        got = head(lines)
        assert got.startswith("HTTP/1.1 401 "), got
        assert '"bad control-plane token"' in got, got
    assert head(["x-queen-cp-token: " + TOKEN]).startswith(
        "HTTP/1.1 100 Continue")
    assert cp(node, "GET", "/api/cp/clusters") == (200, {"clusters": []})


def test_a_taken_control_plane_port_stops_the_boot(broker_factory):
    import socket
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen(1)
        port = busy.getsockname()[1]
        node = broker_factory(env=cp_env(QUEEN_PROXY_PORT=port,
                                         QUEEN_BIND_ADDR="127.0.0.1"),
                              start=False)
        node.start(wait=False)
        assert node.wait_exit(60) != 0
    assert "QUEEN_PROXY_PORT=%d" % port in node.stderr()
    assert TOKEN not in node.stderr()


# ---- tenants and clusters ---------------------------------------------


def test_clusters_and_tenants_are_created_once_and_found(broker_factory):
    node = broker_factory(env=cp_env())
    c = make_cluster(node, "acme", "acme-main")
    assert set(c) >= {"id", "tenant_id", "broker_tenant_uuid", "slug"}
    assert c["slug"] == "acme-main" and c["tenant_slug"] == "acme"
    assert c["status"] == "active" and c["deleting"] is False
    # The same cluster again: 200, the same ids.
    st, again = cp(node, "POST", "/api/cp/clusters",
                   {"tenant_slug": "acme", "slug": "acme-main"})
    assert st == 200 and again == c
    # A second cluster of the same tenant shares the tenant, not the
    # broker tenant.
    c2 = make_cluster(node, "acme", "acme-two")
    assert c2["tenant_id"] == c["tenant_id"]
    assert c2["broker_tenant_uuid"] != c["broker_tenant_uuid"]
    # The slug belongs to acme.
    error_of(cp(node, "POST", "/api/cp/clusters",
                {"tenant_slug": "globex", "slug": "acme-main"}), 409,
             "slug_taken")
    for bad in ({"tenant_slug": "acme", "slug": "Acme"},
                {"tenant_slug": "acme", "slug": ""},
                {"tenant_slug": "acme", "slug": "a" * 65},
                {"tenant_slug": "ac me", "slug": "x"},
                # a NUL cut the name, which then named another row
                {"tenant_slug": "acme", "slug": "acme-main\u0000x"},
                {"tenant_slug": "acme\u0000evil", "slug": "x"},
                {"slug": "x"}):
        msg = error_of(cp(node, "POST", "/api/cp/clusters", bad), 400,
                       "invalid")
        assert "slug" in msg, msg
    error_of(cp(node, "POST", "/api/cp/clusters", raw=b"[1]"), 400,
             "invalid")
    # Found by id and by slug; listed.
    assert cp(node, "GET", "/api/cp/clusters/" + c["id"]) == (200, c)
    assert cp(node, "GET", "/api/cp/clusters/acme-main") == (200, c)
    error_of(cp(node, "GET", "/api/cp/clusters/nope"), 404,
             "cluster_unknown")
    st, lst = cp(node, "GET", "/api/cp/clusters")
    assert st == 200
    assert sorted(x["slug"] for x in lst["clusters"]) == ["acme-main",
                                                          "acme-two"]
    st, ts = cp(node, "GET", "/api/cp/tenants")
    assert st == 200 and [t["slug"] for t in ts["tenants"]] == ["acme"]
    # A tenant alone.
    st, t = cp(node, "POST", "/api/cp/tenants", {"slug": "globex"})
    assert st == 201 and t["slug"] == "globex" and t["status"] == "active"
    assert cp(node, "POST", "/api/cp/tenants", {"slug": "globex"}) == (200, t)
    # Status: refused values, unknown names, then set.
    error_of(cp(node, "PUT", "/api/cp/clusters/acme-main/status",
                {"status": "paused"}), 400, "invalid")
    error_of(cp(node, "PUT", "/api/cp/clusters/acme-main/status",
                {"status": "active\u0000garbage"}), 400, "invalid")
    error_of(cp(node, "POST", "/api/cp/tenants", {"slug": "globex\u0000x"}),
             400, "invalid")
    error_of(cp(node, "PUT", "/api/cp/clusters/nope/status",
                {"status": "active"}), 404, "cluster_unknown")
    error_of(cp(node, "PUT", "/api/cp/tenants/nope/status",
                {"status": "active"}), 404, "tenant_unknown")
    st, s = cp(node, "PUT", "/api/cp/clusters/%s/status" % c["id"],
               {"status": "push_blocked"})
    assert st == 200 and s["status"] == "push_blocked", s
    st, s = cp(node, "PUT", "/api/cp/tenants/acme/status",
               {"status": "suspended"})
    assert st == 200 and s["status"] == "suspended", s
    st, got = cp(node, "GET", "/api/cp/clusters/acme-main")
    assert got["tenant_status"] == "suspended"
    assert got["effective_status"] == "suspended"
    # Delete a cluster, then the tenant with the rest.
    assert cp(node, "DELETE", "/api/cp/clusters/acme-two") == (
        200, {"cluster": "acme-two", "removed": True})
    error_of(cp(node, "GET", "/api/cp/clusters/acme-two"), 404,
             "cluster_unknown")
    st, d = cp(node, "DELETE", "/api/cp/tenants/acme")
    assert st == 200 and d == {"tenant": "acme", "removed": True,
                               "clusters": 1}, d
    error_of(cp(node, "GET", "/api/cp/clusters/acme-main"), 404,
             "cluster_unknown")
    st, ts = cp(node, "GET", "/api/cp/tenants")
    assert [t["slug"] for t in ts["tenants"]] == ["globex"]
    # The slug is free again, for anyone.
    assert make_cluster(node, "globex", "acme-main")["tenant_slug"] == \
        "globex"


def test_a_path_name_past_its_limit_is_refused_not_cut(broker_factory):
    """A :slug or :id of the path that is no slug (too long, a byte
    outside a-z0-9-, a decoded NUL) answers 400 like the same slug in a
    create's body; it never reaches, and so never changes, the tenant or
    cluster whose slug it starts with."""
    node = broker_factory(env=s3_env())
    t64 = "t" * 63 + "1"
    c64 = "c" * 63 + "1"
    c = make_cluster(node, t64, c64)
    st, s3 = put_s3(node, c64, dict(S3_BODY, secretKey=SECRET))
    assert st == 200, s3
    st, tenants = cp(node, "GET", "/api/cp/tenants")
    assert st == 200 and [t["slug"] for t in tenants["tenants"]] == [t64]
    active = {"status": "active"}
    blocked = {"status": "suspended"}
    for bad in (t64 + "x", t64 + "-" * 40, t64 + "%00", t64 + "%00x",
                t64[:10] + "%00" + t64[10:]):
        for method, path, body in (
                ("DELETE", "/api/cp/tenants/%s", None),
                ("PUT", "/api/cp/tenants/%s/status", blocked)):
            msg = error_of(cp(node, method, path % bad, body), 400,
                           "invalid")
            assert "slug" in msg, (method, path, msg)
    for bad in (c64 + "x", c64 + "-" * 40, c64 + "%00", c64 + "%00x",
                c["id"] + "%00", c["id"].upper() + "%00x", "Acme"):
        for method, path, body in (
                ("GET", "/api/cp/clusters/%s", None),
                ("DELETE", "/api/cp/clusters/%s", None),
                ("PUT", "/api/cp/clusters/%s/status", blocked),
                ("POST", "/api/cp/clusters/%s/configure", {"queue": "q"}),
                ("PUT", "/api/cp/clusters/%s/s3",
                 dict(S3_BODY, bucket="other")),
                ("GET", "/api/cp/clusters/%s/s3", None),
                ("DELETE", "/api/cp/clusters/%s/s3", None)):
            msg = error_of(cp(node, method, path % bad, body), 400,
                           "invalid")
            assert "slug" in msg, (method, path, msg)
    # Nothing changed: the same tenant, cluster and sink rows.
    assert cp(node, "GET", "/api/cp/tenants") == (200, tenants)
    assert cp(node, "GET", "/api/cp/clusters/" + c64) == (200, c)
    assert cp(node, "GET", "/api/cp/clusters/" + c["id"].upper()) == (200, c)
    assert cp(node, "GET", "/api/cp/clusters/%s/s3" % c64) == (200, s3)
    # A name within the rules still answers 404 when nobody has it.
    error_of(cp(node, "DELETE", "/api/cp/tenants/" + t64[:63]), 404,
             "tenant_unknown")
    error_of(cp(node, "PUT", "/api/cp/tenants/%s/status" % t64[:63],
                active), 404, "tenant_unknown")
    error_of(cp(node, "GET", "/api/cp/clusters/" + c64[:63]), 404,
             "cluster_unknown")


def test_configure_lands_in_the_clusters_broker_tenant(broker_factory):
    node = broker_factory(env=cp_env())
    c = make_cluster(node, "acme", "acme-main")
    st, body = cp(node, "POST", "/api/cp/clusters/acme-main/configure",
                  {"queue": "orders", "options": {"retentionSeconds": 3600}})
    assert st == 200, body
    assert body["queue"] == "orders"
    assert body["options"]["retentionSeconds"] == 3600
    # The same validation as /api/v1/configure.
    st, bad = cp(node, "POST", "/api/cp/clusters/acme-main/configure",
                 {"options": {}})
    assert st == 400 and bad["error"] == "queue is required", bad
    error_of(cp(node, "POST", "/api/cp/clusters/nope/configure",
                {"queue": "orders"}), 404, "cluster_unknown")
    r = as_tenant(node, "GET", "/api/v1/resources/queues",
                  c["broker_tenant_uuid"])
    assert r.status == 200 and [q["name"] for q in r.json()["queues"]] == \
        ["orders"], r
    # Not in the default tenant.
    r = node.get("/api/v1/resources/queues")
    assert r.json()["queues"] == [], r


# ---- the gates ---------------------------------------------------------


def set_status(node, path, status):
    st, body = cp(node, "PUT", path, {"status": status})
    assert st == 200, (st, body)


def wait_push_status(node, tenant, status, what):
    wait_until(lambda: push_as(node, tenant).status == status, 30, what)


def test_push_blocked_refuses_pushes_and_suspended_everything(
        broker_factory):
    node = broker_factory(env=cp_env())
    c = make_cluster(node, "acme", "acme-main")
    other = make_cluster(node, "globex", "globex-main")
    t = c["broker_tenant_uuid"]
    assert push_as(node, t).status == 201

    set_status(node, "/api/cp/clusters/acme-main/status", "push_blocked")
    wait_push_status(node, t, 403, "push_blocked to refuse pushes")
    r = push_as(node, t)
    assert r.json()["code"] == "tenant_push_blocked", r
    assert "push_blocked" in r.json()["error"], r
    f = fetch_as(node, t)
    assert f.status == 200 and len(f.json()["entries"][0]["records"]) >= 1
    assert as_tenant(node, "GET", "/api/v1/kv/app/k", t).status == 200
    # Another tenant is not gated.
    assert push_as(node, other["broker_tenant_uuid"]).status == 201

    # The tenant's status suspends all of its clusters.
    set_status(node, "/api/cp/tenants/acme/status", "suspended")
    wait_until(lambda: fetch_as(node, t).status == 403, 30,
               "suspended to refuse reads")
    assert push_as(node, t).json()["code"] == "tenant_suspended"
    assert fetch_as(node, t).json()["code"] == "tenant_suspended"
    for method, path, body in (
            ("GET", "/api/v1/resources/queues", None),
            ("POST", "/api/v1/partitions/changed",
             {"entries": [{"queue": "orders", "partition": "p"}]}),
            ("POST", "/api/v1/configure", {"queue": "orders"}),
            ("GET", "/api/v1/kv/app/k", None)):
        r = as_tenant(node, method, path, t, body)
        assert r.status == 403, (path, r)
        assert "suspended" in r.body.decode(), (path, r)

    # Back to active on both: pushes and reads again.
    set_status(node, "/api/cp/tenants/acme/status", "active")
    wait_push_status(node, t, 403, "the cluster's own push_blocked to stay")
    set_status(node, "/api/cp/clusters/acme-main/status", "active")
    wait_push_status(node, t, 201, "active to take pushes again")
    assert fetch_as(node, t).status == 200


def test_no_client_acts_for_the_proxy_tenant(broker_factory):
    node = broker_factory(env=cp_env())
    make_cluster(node, "acme", "acme-main")
    for method, path, body in (
            ("GET", "/api/v1/kv/px.clusters/slug:acme-main", None),
            ("POST", "/api/v1/kv", [{"op": "getPrefix", "ns": "px.clusters",
                                     "prefix": "#"}]),
            ("PUT", "/api/v1/kv/px.clusters/slug:evil", {"value": {"id": 1}}),
            ("POST", "/api/v1/push", {"items": [{"queue": "q",
                                                  "payload": 1}]}),
            ("POST", "/api/v1/fetch", {"entries": [{"queue": "q",
                                                     "partition": "p",
                                                     "offset": 0}]}),
            ("GET", "/api/v1/resources/queues", None)):
        r = as_tenant(node, method, path, PROXY_TENANT.upper(), body)
        assert r.status == 403, (path, r)
        assert b"control plane" in r.body, (path, r)
        assert b"acme" not in r.body, (path, r)
    # Nothing was forged.
    st, lst = cp(node, "GET", "/api/cp/clusters")
    assert [x["slug"] for x in lst["clusters"]] == ["acme-main"]


# ---- the S3 routes -----------------------------------------------------


def s3_env(**over):
    """The sink on. The environment's own sink mirrors a queue no test
    pushes to, into a bucket nobody serves (its probe keeps failing, which
    the routes do not care about)."""
    env = {"QUEEN_S3_EMBEDDED": "true", "QUEEN_ENCRYPTION_KEY": KEY,
           "QUEEN_S3_QUEUES": "env-only",
           "QUEEN_S3_ENDPOINT": "http://127.0.0.1:9",
           "QUEEN_S3_REGION": "us-east-1", "QUEEN_S3_BUCKET": "env-lake",
           "QUEEN_S3_ACCESS_KEY": "env", "QUEEN_S3_SECRET_KEY": "env-secret",
           "QUEEN_S3_PATH_STYLE": "true"}
    env.update(over)
    return cp_env(**env)


def put_s3(node, slug, body):
    return cp(node, "PUT", "/api/cp/clusters/%s/s3" % slug, body)


def test_s3_routes_refuse_before_storing(broker_factory):
    """Every refusal of the table that needs no sealing key, on a node
    without QUEEN_ENCRYPTION_KEY (so the last one is
    encryption_required)."""
    node = broker_factory(env=s3_env(QUEEN_ENCRYPTION_KEY=None))
    make_cluster(node, "acme", "acme-main")
    full = dict(S3_BODY, secretKey=SECRET)
    answers = []

    answers.append(put_s3(node, "nope", full))
    error_of(answers[-1], 404, "cluster_unknown")
    answers.append(cp(node, "GET", "/api/cp/clusters/nope/s3"))
    error_of(answers[-1], 404, "cluster_unknown")
    answers.append(cp(node, "GET", "/api/cp/clusters/acme-main/s3"))
    error_of(answers[-1], 404, "s3_unset")
    for raw, kind in ((b'["not", "an", "object"]', "a list"),
                      (b"null", "null"), (b"5", "a number"),
                      (b'"s"', "a string"), (b"true", "a boolean")):
        answers.append(cp(node, "PUT", "/api/cp/clusters/acme-main/s3",
                          raw=raw))
        assert error_of(answers[-1], 400, "invalid") == (
            "a tenant's sink is a JSON object of its settings, not " + kind)
    answers.append(cp(node, "PUT", "/api/cp/clusters/acme-main/s3",
                      raw=b'{"bucket": '))
    assert error_of(answers[-1], 400, "invalid").startswith(
        "the body must be a JSON object")
    answers.append(put_s3(node, "acme-main", dict(full, leaseTtlMs=5000)))
    assert "leaseTtlMs" in error_of(answers[-1], 400, "invalid")
    answers.append(put_s3(node, "acme-main", dict(full, colour="blue")))
    assert "colour" in error_of(answers[-1], 400, "invalid")
    answers.append(put_s3(node, "acme-main", dict(full, sessionToken="t")))
    assert "sessionToken" in error_of(answers[-1], 400, "invalid")
    answers.append(put_s3(node, "acme-main",
                          dict(full, prefix="p" * 40000)))
    assert "32 KiB" in error_of(answers[-1], 400, "invalid")
    answers.append(put_s3(node, "acme-main", dict(full,
                                                  secretKey="s" * 4097)))
    assert "4096" in error_of(answers[-1], 400, "invalid")
    answers.append(put_s3(node, "acme-main", S3_BODY))
    assert "secretKey is required" in error_of(answers[-1], 400, "invalid")
    # a password in the endpoint: refused, and not echoed
    answers.append(put_s3(node, "acme-main", dict(
        full, endpoint="http://u:%s@127.0.0.1:9" % SECRET)))
    assert "has an '@' in it" in error_of(answers[-1], 400, "invalid")
    # ... nor hidden past a NUL, which every rule would stop reading at
    answers.append(put_s3(node, "acme-main", dict(
        full, endpoint="http://127.0.0.1:9\u0000:%s@evil" % SECRET)))
    assert error_of(answers[-1], 400, "invalid") == (
        "endpoint holds a NUL (\\u0000), which no setting takes")
    answers.append(put_s3(node, "acme-main", dict(full,
                                                  queues=["cq\u0000zz"])))
    assert error_of(answers[-1], 400, "invalid") == (
        "queues holds a name with a NUL (\\u0000), which the list does "
        "not take")
    answers.append(put_s3(node, "acme-main", full))
    msg = error_of(answers[-1], 409, "encryption_required")
    assert msg == ("this cell has no QUEEN_ENCRYPTION_KEY: a tenant's S3 "
                   "secret is never stored in clear; set the same key on "
                   "every node first")
    # Nothing was stored.
    error_of(cp(node, "GET", "/api/cp/clusters/acme-main/s3"), 404,
             "s3_unset")
    assert cp(node, "DELETE", "/api/cp/clusters/acme-main/s3") == (
        200, {"cluster": "acme-main", "removed": False})
    for a in answers:
        assert SECRET not in json.dumps(a[1]), a
    assert SECRET not in node.stderr()


def test_s3_unavailable_and_system_tenant(broker_factory):
    plain = broker_factory(env=cp_env(QUEEN_ENCRYPTION_KEY=None))
    make_cluster(plain, "acme", "acme-main")
    for method in ("PUT", "GET", "DELETE"):
        error_of(cp(plain, method, "/api/cp/clusters/acme-main/s3",
                    dict(S3_BODY, secretKey=SECRET)
                    if method == "PUT" else None), 404, "s3_unavailable")
    noheader = broker_factory(env=s3_env(QUEEN_PROXY_TENANT_HEADER="false",
                                         QUEEN_ENCRYPTION_KEY=None))
    make_cluster(noheader, "acme", "acme-main")
    error_of(put_s3(noheader, "acme-main", dict(S3_BODY, secretKey=SECRET)),
             409, "system_tenant")
    # The page's table does not limit it to PUT: GET and DELETE say so too.
    for method in ("GET", "DELETE"):
        error_of(cp(noheader, method, "/api/cp/clusters/acme-main/s3"), 409,
                 "system_tenant")


def sealed_rows(node):
    """The px.s3sinks rows as the store holds them, read from LMDB's file
    bytes: what a byte search of the data directory finds."""
    blob = b""
    for root, _, files in os.walk(node.data_dir):
        for f in files:
            with open(os.path.join(root, f), "rb") as fh:
                blob += fh.read()
    return blob


@pytest.mark.skipif(os.environ.get("QUEEN_CP_NO_KEY_TESTS") == "1",
                    reason="needs QUEEN_ENCRYPTION_KEY support")
def test_s3_put_get_delete_with_a_sealed_secret(broker_factory):
    node = broker_factory(env=s3_env())
    make_cluster(node, "acme", "acme-main")
    st, put = put_s3(node, "acme-main", dict(S3_BODY, secretKey=SECRET))
    assert st == 200, put
    assert set(put) == {"cluster", "tenant", "enabled", "config",
                        "secretKeySet", "updatedAt"}
    assert put["secretKeySet"] is True and put["enabled"] is True
    assert put["config"] == S3_BODY
    st, got = cp(node, "GET", "/api/cp/clusters/acme-main/s3")
    assert st == 200 and got == put
    # Without the secret: kept; the same settings write nothing. A null or
    # blank secretKey (the page's example sends "") counts as none given.
    st, same = put_s3(node, "acme-main", S3_BODY)
    assert st == 200 and same["updatedAt"] == put["updatedAt"]
    for blank in (None, "", "  \t"):
        st, same = put_s3(node, "acme-main", dict(S3_BODY, secretKey=blank))
        assert st == 200 and same == put, (blank, st, same)
    st, off = put_s3(node, "acme-main", dict(S3_BODY, enabled=False))
    assert st == 200 and off["enabled"] is False
    assert off["secretKeySet"] is True
    assert off["updatedAt"] > put["updatedAt"]
    # A PUT with the secret always writes, even identical.
    st, rot = put_s3(node, "acme-main",
                     dict(S3_BODY, enabled=False, secretKey=SECRET))
    assert st == 200 and rot["updatedAt"] > off["updatedAt"]
    # Invalid settings change nothing.
    st, _ = put_s3(node, "acme-main", dict(S3_BODY, leaseTtlMs=1))
    assert st == 400
    assert cp(node, "GET", "/api/cp/clusters/acme-main/s3") == (200, rot)
    # The secret is stored sealed only.
    blob = sealed_rows(node)
    assert b"secret_key_sealed" in blob
    assert SECRET.encode() not in blob
    # Delete: removed, then nothing to remove; the next PUT needs the
    # secret again.
    assert cp(node, "DELETE", "/api/cp/clusters/acme-main/s3") == (
        200, {"cluster": "acme-main", "removed": True})
    assert cp(node, "DELETE", "/api/cp/clusters/acme-main/s3") == (
        200, {"cluster": "acme-main", "removed": False})
    error_of(cp(node, "GET", "/api/cp/clusters/acme-main/s3"), 404,
             "s3_unset")
    for blank in ({}, {"secretKey": None}, {"secretKey": ""},
                  {"secretKey": " "}):
        msg = error_of(put_s3(node, "acme-main", dict(S3_BODY, **blank)),
                       400, "invalid")
        assert msg.startswith("secretKey is required the first time"), msg
    assert SECRET not in node.stderr()


def s3_raw(body, **extra):
    """A PUT body's bytes: body's members, then extra's raw member text
    (so a key can be given twice)."""
    text = json.dumps(body)[:-1]
    for k, v in extra.items():
        text += ', "%s": %s' % (k.rstrip("_"), v)
    return (text + "}").encode()


def test_a_repeated_field_is_refused_and_nothing_stored(broker_factory):
    """A setting, secretKey or enabled given twice in a PUT is refused
    rather than stored (the stored document would be read first-wins);
    a body member of the other cp routes too."""
    node = broker_factory(env=s3_env())
    make_cluster(node, "acme", "acme-main")
    full = dict(S3_BODY, secretKey=SECRET)
    path = "/api/cp/clusters/acme-main/s3"
    for extra, key in [({"bucket_": '"other-lake"'}, "bucket"),
                       ({"secretKey_": '"%s"' % SECRET}, "secretKey"),
                       ({"enabled": "true", "enabled_": "false"}, "enabled"),
                       ({"pathStyle_": "false"}, "pathStyle")]:
        body = s3_raw(full, **extra)
        assert body.count(b'"%s"' % key.encode()) == 2, body
        msg = error_of(cp(node, "PUT", path, raw=body), 400, "invalid")
        assert msg == 'duplicate key "%s"' % key, msg
        error_of(cp(node, "GET", path), 404, "s3_unset")
    # A good PUT after the refusals stores exactly what it was given.
    st, put = put_s3(node, "acme-main", full)
    assert st == 200 and put["config"] == S3_BODY, put
    # The other cp bodies: the members they read, once each.
    for method, p, raw, key in [
            ("POST", "/api/cp/clusters",
             b'{"tenant_slug":"acme","slug":"acme-x","slug":"acme-y"}',
             "slug"),
            ("POST", "/api/cp/clusters",
             b'{"tenant_slug":"a","tenant_slug":"b","slug":"acme-x"}',
             "tenant_slug"),
            ("POST", "/api/cp/tenants", b'{"slug":"g1","slug":"g2"}', "slug"),
            ("PUT", "/api/cp/clusters/acme-main/status",
             b'{"status":"active","status":"suspended"}', "status"),
            ("PUT", "/api/cp/tenants/acme/status",
             b'{"status":"suspended","status":"active"}', "status")]:
        msg = error_of(cp(node, method, p, raw=raw), 400, "invalid")
        assert msg == 'duplicate key "%s"' % key, (p, msg)
    st, lst = cp(node, "GET", "/api/cp/clusters")
    assert st == 200
    assert [c["slug"] for c in lst["clusters"]] == ["acme-main"]
    assert lst["clusters"][0]["status"] == "active"
    st, ts = cp(node, "GET", "/api/cp/tenants")
    assert st == 200 and [t["slug"] for t in ts["tenants"]] == ["acme"]
    assert ts["tenants"][0]["status"] == "active"
    assert SECRET not in node.stderr()


def crash_on_delete(node, path):
    """DELETE path on a node armed with QUEEN_CP_CRASH_AFTER_MARK: it aborts
    once the deleting mark applied; restart it unarmed."""
    try:
        cp(node, "DELETE", path)
    except (OSError, http.client.HTTPException):
        pass  # the node died under the call
    assert node.wait_exit(60) != 0
    assert "QUEEN_CP_CRASH_AFTER_MARK fired" in node.stderr()
    node._reap()
    node.extra_env.pop("QUEEN_CP_CRASH_AFTER_MARK")
    node.start()


def test_a_delete_cut_short_leaves_rows_deleting_until_repeated(
        broker_factory):
    env = s3_env(QUEEN_ENCRYPTION_KEY=None, QUEEN_TEST_MODE="true",
                 QUEEN_CP_CRASH_AFTER_MARK="true")
    node = broker_factory(env=env)
    make_cluster(node, "acme", "acme-main")
    make_cluster(node, "globex", "globex-main")
    full = dict(S3_BODY, secretKey=SECRET)

    crash_on_delete(node, "/api/cp/clusters/acme-main")
    st, got = cp(node, "GET", "/api/cp/clusters/acme-main")
    assert st == 200 and got["deleting"] is True, got
    error_of(put_s3(node, "acme-main", full), 409, "deleting")
    error_of(cp(node, "PUT", "/api/cp/clusters/acme-main/status",
                {"status": "active"}), 409, "deleting")
    error_of(cp(node, "POST", "/api/cp/clusters",
                {"tenant_slug": "acme", "slug": "acme-main"}), 409,
             "deleting")
    error_of(cp(node, "POST", "/api/cp/clusters/acme-main/configure",
                {"queue": "q"}), 409, "deleting")
    assert cp(node, "DELETE", "/api/cp/clusters/acme-main") == (
        200, {"cluster": "acme-main", "removed": True})
    error_of(cp(node, "GET", "/api/cp/clusters/acme-main"), 404,
             "cluster_unknown")

    # The same through the tenant: its clusters read as deleting.
    node.stop()
    node.extra_env["QUEEN_CP_CRASH_AFTER_MARK"] = "true"
    node.start()
    crash_on_delete(node, "/api/cp/tenants/globex")
    st, got = cp(node, "GET", "/api/cp/clusters/globex-main")
    assert st == 200 and got["deleting"] is True, got
    error_of(put_s3(node, "globex-main", full), 409, "deleting")
    error_of(cp(node, "POST", "/api/cp/clusters",
                {"tenant_slug": "globex", "slug": "globex-two"}), 409,
             "deleting")
    error_of(cp(node, "PUT", "/api/cp/tenants/globex/status",
                {"status": "active"}), 409, "deleting")
    assert cp(node, "DELETE", "/api/cp/tenants/globex") == (
        200, {"tenant": "globex", "removed": True, "clusters": 1})
    assert cp(node, "GET", "/api/cp/clusters") == (200, {"clusters": []})


def test_a_crash_point_needs_test_mode(broker_factory):
    node = broker_factory(env=cp_env(QUEEN_CP_CRASH_AFTER_MARK="true"),
                          start=False)
    node.start(wait=False)
    assert node.wait_exit(60) == 2
    assert "QUEEN_TEST_MODE=true" in node.stderr()


# ---- three nodes -------------------------------------------------------


@pytest.fixture
def cp_cluster():
    import tempfile
    from cluster import Cluster
    tmp = tempfile.TemporaryDirectory(prefix="queen-cp-")
    made = []

    def make(**env):
        base = s3_env(**env)
        base.pop("QUEEN_PROXY_PORT")
        node_env = {i: {"QUEEN_PROXY_PORT": str(p)}
                    for i, p in zip((1, 2, 3), free_ports(3))}
        c = Cluster(os.path.join(tmp.name, "c%d" % len(made)), env=base,
                    node_env=node_env)
        made.append(c)
        c.start()
        return c

    yield make
    for c in made:
        c.close()
    tmp.cleanup()


def test_three_nodes_share_rows_and_gates(cp_cluster):
    c = cp_cluster()
    n1, n2, n3 = c[1], c[2], c[3]
    made = make_cluster(n3, "acme", "acme-main")
    t = made["broker_tenant_uuid"]
    wait_until(lambda: cp(n1, "GET", "/api/cp/clusters/acme-main") ==
               (200, made), 30, "node 1 to read the cluster node 3 made")
    # The same create on another node answers the same ids.
    assert cp(n2, "POST", "/api/cp/clusters",
              {"tenant_slug": "acme", "slug": "acme-main"}) == (200, made)
    st, put = put_s3(n3, "acme-main", dict(S3_BODY, secretKey=SECRET))
    assert st == 200, put
    wait_until(lambda: cp(n1, "GET", "/api/cp/clusters/acme-main/s3") ==
               (200, put), 30, "node 1 to read the S3 row node 3 wrote")
    # The gate, set through node 3, holds on every node.
    for n in (n1, n2, n3):
        assert push_as(n, t).status == 201
    set_status(n3, "/api/cp/clusters/acme-main/status", "push_blocked")
    for n in (n1, n2, n3):
        wait_push_status(n, t, 403, "node %d to refuse pushes" % n.id)
        assert fetch_as(n, t).status == 200
    set_status(n2, "/api/cp/tenants/acme/status", "suspended")
    for n in (n1, n2, n3):
        wait_until(lambda: fetch_as(n, t).status == 403, 30,
                   "node %d to refuse reads" % n.id)
    set_status(n1, "/api/cp/tenants/acme/status", "active")
    set_status(n1, "/api/cp/clusters/acme-main/status", "active")
    for n in (n1, n2, n3):
        wait_push_status(n, t, 201, "node %d to take pushes" % n.id)
    for n in (n1, n2, n3):
        assert SECRET not in n.logs()
