"""The sink's KV namespace is read-only over HTTP (issue 13, item 9; api/kv.h
(2)): no client of any tenant can write namespace queen-s3 through
POST /api/v1/kv or PUT/DELETE /api/v1/kv/queen-s3/*key. Each such call
answers 403 kv_reserved_namespace and changes nothing, a batch with one
such op is refused whole, and reads still answer. The rows are seeded by a
first life of the broker with QUEEN_KV_UNSAFE_SINK_WRITES=true (the test
and repair switch), which also shows the switch works and is off by
default."""
import pytest

NS = "queen-s3"
A = "0a0a0a0a-0000-4000-8000-00000000000a"
B = "0b0b0b0b-0000-4000-8000-00000000000b"
TENANTS = [None, A, B]  # None: no header, the default tenant
PTR = "s3:default:orders:committed"
LEASE = "s3:default:orders:lease"
FORGED = {"k": 999, "tEnd": "2030-01-01T00:00:00.000000Z"}


def hdr(tenant):
    return {} if tenant is None else {"x-queen-tenant": tenant}


def kv(b, tenant, ops, expect=200):
    r = b.post("/api/v1/kv", ops, headers=hdr(tenant))
    assert r.status == expect, r
    return r.json()


def put(ns, key, value, **kw):
    op = {"op": "put", "ns": ns, "key": key, "value": value}
    if "ttlSeconds" not in kw:
        op["forever"] = True
    op.update(kw)
    return op


def rows(b, tenant):
    """Every row of the tenant's sink namespace (key, value, version)."""
    res = kv(b, tenant, [{"op": "getPrefix", "ns": NS, "prefix": "s3:"}])
    return [(r["key"], r["value"], r["version"])
            for r in res["results"][0]["rows"]]


@pytest.fixture
def seeded(broker_factory):
    """A tenancy broker whose three tenants each hold a commit pointer and a
    lease row, written in a first life with the unsafe switch on."""
    b = broker_factory(env={"QUEEN_TENANCY_HEADER": "true",
                            "QUEEN_KV_UNSAFE_SINK_WRITES": "true"})
    assert "QUEEN_KV_UNSAFE_SINK_WRITES is on" in b.stderr()
    for i, t in enumerate(TENANTS):
        res = kv(b, t, [put(NS, PTR, {"k": i + 1, "tEnd": "2026-01-01T00:00:"
                                      "00.000000Z"}),
                        put(NS, LEASE, {"instance": "node-%d" % i,
                                        "incarnation": "00000000000000aa",
                                        "sinceMs": 1})])
        assert all(r["applied"] for r in res["results"]), res
    assert b.stop() == 0
    b.extra_env = {"QUEEN_TENANCY_HEADER": "true"}
    b.start()
    assert "QUEEN_KV_UNSAFE_SINK_WRITES" not in b.stderr()
    return b


def refused(b, tenant, method, path, body):
    before = {t: rows(b, t) for t in TENANTS}
    r = b.request(method, path, body=body, headers=hdr(tenant))
    assert r.status == 403, (method, path, body, r)
    got = r.json()
    assert got["error"] == "kv_forbidden", got
    assert got["reason"] == "kv_reserved_namespace", got
    assert NS in got["detail"], got
    assert {t: rows(b, t) for t in TENANTS} == before


def test_every_write_route_is_refused_403_for_every_tenant(seeded):
    b = seeded
    for t in TENANTS:
        v = rows(b, t)
        ptr_version = [row[2] for row in v if row[0] == PTR][0]
        for body in (
                [put(NS, PTR, FORGED)],
                {"operations": [put(NS, PTR, FORGED, expect=ptr_version,
                                    required=True)]},
                [{"op": "putIfAbsent", "ns": NS, "key": "s3:default:new:"
                  "committed", "value": FORGED, "forever": True}],
                [{"op": "delete", "ns": NS, "key": PTR}],
                [{"op": "delete", "namespace": NS, "key": LEASE,
                  "expect": ptr_version}],
                [{"op": "incr", "ns": NS, "key": "s3:n", "forever": True}],
                # one reserved op refuses the whole mixed batch
                [put("app", "mixed", 1), {"op": "get", "ns": NS, "key": PTR},
                 put(NS, LEASE, {"instance": "thief"}, ttlSeconds=60)]):
            refused(b, t, "POST", "/api/v1/kv", body)
        path = "/api/v1/kv/%s/%s" % (NS, PTR)
        refused(b, t, "PUT", path, {"value": FORGED, "forever": True})
        refused(b, t, "PUT", path, {"value": FORGED, "forever": True,
                                    "expect": ptr_version, "required": True})
        refused(b, t, "DELETE", path, None)
        # the path's namespace is percent-decoded before the check
        refused(b, t, "PUT", "/api/v1/kv/queen%%2Ds3/%s" % PTR,
                {"value": FORGED, "forever": True})
        refused(b, t, "POST", "/api/v1/kv",
                b'[{"op":"put","ns":"queen\\u002ds3","key":"%s",'
                b'"value":1,"forever":true}]' % PTR.encode())
        refused(b, t, "DELETE", path, {"expect": ptr_version})
        # the other namespace's half of the mixed batch was not written
        got = kv(b, t, [{"op": "get", "ns": "app", "key": "mixed"}])
        assert got["results"][0]["found"] is False, got


def test_reads_still_answer_and_other_namespaces_stay_writable(seeded):
    b = seeded
    for i, t in enumerate(TENANTS):
        r = b.get("/api/v1/kv/%s/%s" % (NS, PTR), headers=hdr(t))
        assert r.status == 200, r
        got = r.json()
        assert got["found"] is True and got["value"]["k"] == i + 1, got
        assert r.headers["ETag"] == '"%d"' % got["version"]
        res = kv(b, t, [{"op": "get", "ns": NS, "key": LEASE},
                        {"op": "getMany", "ns": NS, "keys": [PTR, LEASE]},
                        {"op": "getPrefix", "ns": NS, "prefix": "s3:default:",
                         "keysOnly": True}])["results"]
        assert res[0]["value"]["instance"] == "node-%d" % i
        assert [x["key"] for x in res[1]["rows"]] == sorted([PTR, LEASE])
        assert [x["key"] for x in res[2]["rows"]] == sorted([PTR, LEASE])
        # an ordinary namespace, and a near miss of the name, are writable
        res = kv(b, t, [put("app", PTR, FORGED), put("queen-s3x", PTR, 1)])
        assert all(x["applied"] for x in res["results"]), res
        r = b.request("PUT", "/api/v1/kv/app/k", headers=hdr(t),
                      body={"value": 1, "forever": True})
        assert r.status == 200 and r.json()["applied"] is True, r
