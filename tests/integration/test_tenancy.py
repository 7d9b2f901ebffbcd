"""Tenancy (docs/design/http-api.md §1): with QUEEN_TENANCY_HEADER=true the
tenant of a
call is its x-queen-tenant header (a missing header is the default tenant),
and every route sees only that tenant's queues, records and KV rows; with
the setting off the header is ignored; a malformed header answers 400 and
stores nothing."""

import pytest

from queenproc import Background, wait_until

A = "0a0a0a0a-0000-4000-8000-00000000000a"
B = "0B0B0B0B-0000-4000-8000-00000000000B"  # either case is canonical
DEFAULT = "00000000-0000-0000-0000-000000000001"
# Not queen-s3: the sink's namespace is read-only over HTTP
# (test_kv_reserved.py).
NS = "app"
BAD = ["not-a-uuid", "", "0a0a0a0a00004000800000000000000a",
       A + "0", A[:-1], "{" + A + "}", "0a0a0a0a-0000-4000-8000-00000000000g",
       "0a0a0a0a-0000-4000-8000_00000000000a"]


def hdr(tenant):
    return {} if tenant is None else {"x-queen-tenant": tenant}


def push(b, tenant, items, expect=201):
    r = b.post("/api/v1/push", {"items": items}, headers=hdr(tenant))
    assert r.status == expect, r
    return r.json()


def fetch(b, tenant, queue, partition="Default", offset=0, **extra):
    body = {"entries": [{"queue": queue, "partition": partition,
                         "offset": offset}]}
    body.update(extra)
    r = b.post("/api/v1/fetch", body, headers=hdr(tenant))
    assert r.status == 200, r
    return r.json()["entries"][0]


def changed(b, tenant, queue):
    r = b.post("/api/v1/partitions/changed", {"entries": [{"queue": queue}]},
               headers=hdr(tenant))
    assert r.status == 200, r
    return r.json()["entries"][0]


def queues(b, tenant):
    r = b.get("/api/v1/resources/queues", headers=hdr(tenant))
    assert r.status == 200, r
    return [q["name"] for q in r.json()["queues"]]


def kv(b, tenant, ops, expect=200):
    r = b.post("/api/v1/kv", ops, headers=hdr(tenant))
    assert r.status == expect, r
    return r.json()


def payloads(entry):
    return [rec["payload"] for rec in entry["records"]]


@pytest.fixture
def tenancy(broker_factory):
    return broker_factory(env={"QUEEN_TENANCY_HEADER": "true"})


def test_two_tenants_pushing_one_queue_name_read_only_their_own(tenancy):
    push(tenancy, A, [{"queue": "orders", "payload": {"t": "a", "i": i}}
                      for i in range(3)])
    push(tenancy, B, [{"queue": "orders", "payload": {"t": "b", "i": 0}}])
    push(tenancy, B, [{"queue": "orders", "partition": "p2",
                       "payload": {"t": "b", "i": 1}}])

    a = fetch(tenancy, A, "orders")
    assert payloads(a) == [{"t": "a", "i": i} for i in range(3)]
    assert a["highWatermark"] == 3
    b = fetch(tenancy, B, "orders")
    assert payloads(b) == [{"t": "b", "i": 0}]
    assert b["highWatermark"] == 1
    # A's queue has no partition p2: B's partition is B's alone.
    assert fetch(tenancy, A, "orders", "p2")["records"] == []
    assert payloads(fetch(tenancy, B, "orders", "p2")) == [{"t": "b", "i": 1}]
    # No header: the default tenant, which has no such queue.
    assert fetch(tenancy, None, "orders")["error"] == \
        "UNKNOWN_TOPIC_OR_PARTITION"

    assert [p["name"] for p in changed(tenancy, A, "orders")["partitions"]] \
        == ["Default"]
    assert [p["name"] for p in changed(tenancy, B, "orders")["partitions"]] \
        == ["Default", "p2"]
    assert changed(tenancy, None, "orders")["error"] == \
        "UNKNOWN_TOPIC_OR_PARTITION"

    assert queues(tenancy, A) == ["orders"]
    assert queues(tenancy, B) == ["orders"]
    assert queues(tenancy, None) == []


def test_dedup_is_per_tenant(tenancy):
    item = {"queue": "d", "transactionId": "same", "payload": 1}
    assert push(tenancy, A, [item])[0]["status"] == "queued"
    assert push(tenancy, B, [item])[0]["status"] == "queued"
    assert push(tenancy, A, [item])[0]["status"] == "duplicate"


def test_concurrent_pushes_of_two_tenants_never_share_an_entry(tenancy):
    """Group commit coalesces concurrent pushes: each tenant's records must
    still land in its own queue."""
    def run(tenant, tag):
        for i in range(40):
            push(tenancy, tenant, [{"queue": "g", "payload": [tag, i]}])

    # Each client's failure is raised here, in the test's thread.
    clients = [Background(run, t, tag)
               for t, tag in ((A, "a"), (B, "b"), (None, "d"))]
    for c in clients:
        c.result(120)
    for tenant, tag in ((A, "a"), (B, "b"), (None, "d")):
        e = fetch(tenancy, tenant, "g")
        assert payloads(e) == [[tag, i] for i in range(40)], tenant


def test_long_poll_wakes_only_for_its_own_tenant(tenancy):
    push(tenancy, A, [{"queue": "w", "payload": 0}])
    push(tenancy, B, [{"queue": "w", "payload": "b0"}])
    poll = Background(fetch, tenancy, A, "w", offset=1, maxWaitMs=20000)
    wait_until(lambda: tenancy.metric("queen_fetch_waiting") == 1, 60,
               "the long poll to wait")
    push(tenancy, B, [{"queue": "w", "payload": "b1"}])
    push(tenancy, A, [{"queue": "w", "payload": 1}])
    assert payloads(poll.result(60)) == [1]


def test_configure_is_per_tenant(tenancy):
    r = tenancy.post("/api/v1/configure",
                     {"queue": "c", "options": {"leaseTime": 7}},
                     headers=hdr(A))
    assert r.status == 200, r
    assert queues(tenancy, A) == ["c"]
    assert queues(tenancy, B) == []
    r = tenancy.post("/api/v1/configure",
                     {"queue": "c", "options": {"leaseTime": 9}},
                     headers=hdr(B))
    assert r.status == 200, r
    assert r.json()["options"]["leaseTime"] == 9
    r = tenancy.post("/api/v1/configure", {"queue": "c"}, headers=hdr(A))
    assert r.status == 200, r
    assert r.json()["options"]["leaseTime"] == 7


def test_kv_rows_are_per_tenant(tenancy):
    put = {"op": "put", "ns": NS, "key": "k", "value": "a", "forever": True}
    va = kv(tenancy, A, [put])["results"][0]["version"]
    get = [{"op": "get", "ns": NS, "key": "k"}]
    assert kv(tenancy, A, get)["results"][0]["value"] == "a"
    assert kv(tenancy, B, get)["results"][0]["found"] is False
    assert kv(tenancy, None, get)["results"][0]["found"] is False
    # The single-key routes too.
    r = tenancy.request("PUT", "/api/v1/kv/%s/k" % NS,
                        body={"value": "b", "forever": True}, headers=hdr(B))
    assert r.status == 200 and r.json()["applied"] is True, r
    r = tenancy.get("/api/v1/kv/%s/k" % NS, headers=hdr(B))
    assert r.status == 200 and r.json()["value"] == "b", r
    r = tenancy.get("/api/v1/kv/%s/k" % NS, headers=hdr(A))
    assert r.json()["value"] == "a" and r.json()["version"] == va, r
    r = tenancy.request("DELETE", "/api/v1/kv/%s/k" % NS, headers=hdr(B))
    assert r.status == 200 and r.json()["applied"] is True, r
    assert kv(tenancy, A, get)["results"][0]["found"] is True


def test_the_default_tenant_spelled_out_is_the_default_tenant(tenancy):
    push(tenancy, DEFAULT, [{"queue": "dq", "payload": 1}])
    assert payloads(fetch(tenancy, None, "dq")) == [1]


@pytest.mark.parametrize("bad", BAD)
def test_malformed_header_answers_400_and_stores_nothing(tenancy, bad):
    h = {"x-queen-tenant": bad}
    calls = [
        ("POST", "/api/v1/push", {"items": [{"queue": "m", "payload": 1}]}),
        ("POST", "/api/v1/fetch",
         {"entries": [{"queue": "m", "partition": "Default", "offset": 0}]}),
        ("POST", "/api/v1/partitions/changed", {"entries": [{"queue": "m"}]}),
        ("POST", "/api/v1/configure", {"queue": "m2"}),
        ("GET", "/api/v1/resources/queues", None),
    ]
    for method, path, body in calls:
        r = tenancy.request(method, path, body=body, headers=h)
        assert r.status == 400, (path, r)
        e = r.json()
        assert e["code"] == "bad_request", (path, e)
        assert e["error"].startswith("bad x-queen-tenant header: "), e
        assert "is not a UUID (8-4-4-4-12 hex digits)" in e["error"], e
    kv_calls = [
        ("POST", "/api/v1/kv", [{"op": "put", "ns": NS, "key": "m",
                                 "value": 1, "forever": True}]),
        ("PUT", "/api/v1/kv/%s/m" % NS, {"value": 1, "forever": True}),
        ("GET", "/api/v1/kv/%s/m" % NS, None),
        ("DELETE", "/api/v1/kv/%s/m" % NS, None),
    ]
    for method, path, body in kv_calls:
        r = tenancy.request(method, path, body=body, headers=h)
        assert r.status == 400, (path, r)
        e = r.json()
        assert e["error"] == "kv_bad_request" and \
            e["reason"] == "kv_bad_tenant", e
        assert e["detail"].startswith("bad x-queen-tenant header: "), e
    for t in (None, A, B):
        assert queues(tenancy, t) == []
        assert kv(tenancy, t, [{"op": "get", "ns": NS, "key": "m"}])[
            "results"][0]["found"] is False
    assert tenancy.metric("queen_push_records_total") == 0


def test_a_long_or_binary_header_is_quoted_short_and_printable(tenancy):
    bad = "\xe9" * 3 + "x" * 200
    r = tenancy.post("/api/v1/fetch", {"entries": []},
                     headers={"x-queen-tenant": bad})
    assert r.status == 400, r
    msg = r.json()["error"]
    assert "???" + "x" * 61 + "...\"" in msg, msg
    assert "x" * 62 not in msg


def test_without_the_setting_the_header_is_ignored(broker):
    for t in (A, "not-a-uuid"):
        push(broker, t, [{"queue": "i", "payload": t}])
    assert payloads(fetch(broker, None, "i")) == [A, "not-a-uuid"]
    assert payloads(fetch(broker, B, "i")) == [A, "not-a-uuid"]
    assert queues(broker, "junk") == ["i"]
    assert changed(broker, B, "i")["partitions"][0]["lastOffset"] == 1
    put = {"op": "put", "ns": NS, "key": "k", "value": 1, "forever": True}
    kv(broker, A, [put])
    get = [{"op": "get", "ns": NS, "key": "k"}]
    assert kv(broker, "junk", get)["results"][0]["value"] == 1
    assert kv(broker, None, get)["results"][0]["value"] == 1


def raw_request(b, method, path, body, headers):
    """A request whose headers may repeat a name (a list of pairs)."""
    import http.client
    import json
    conn = http.client.HTTPConnection("127.0.0.1", b.port, timeout=30)
    try:
        data = json.dumps(body).encode()
        conn.putrequest(method, path)
        for k, v in headers + [("Content-Type", "application/json"),
                               ("Content-Length", str(len(data)))]:
            conn.putheader(k, v)
        conn.endheaders(data)
        r = conn.getresponse()
        return r.status, json.loads(r.read() or b"null")
    finally:
        conn.close()


def test_a_repeated_tenant_header_names_no_tenant(tenancy):
    """Behind a proxy that appends its own x-queen-tenant after the
    client's, the first one used to win: the client chose the tenant. Two
    of them name no one tenant (RFC 9110 joins them with a comma): 400,
    whichever comes first, and nothing is stored."""
    push = {"items": [{"queue": "dup", "payload": 1}]}
    for pair in ((A, DEFAULT), (DEFAULT, A), (A, A)):
        st, body = raw_request(tenancy, "POST", "/api/v1/push", push,
                               [("x-queen-tenant", t) for t in pair])
        assert st == 400, (pair, body)
        assert body["error"] == ("bad x-queen-tenant header: it is given "
                                 "more than once; send one"), body
    for t in (None, A):
        assert queues(tenancy, t) == []
