"""The KV routes of docs/design/http-api.md §7 against the real binary: POST
/api/v1/kv
and the single-op routes, the envelopes and statuses, versions across a
restart and kill -9, safeTime moved by KV writes, and the leader's sweep."""
import http.client
import json
import threading
import time

from queenproc import wait_until

# Not queen-s3: the sink's namespace is read-only over HTTP
# (test_kv_reserved.py).
NS = "app"


def kv(broker, ops, expect=200):
    r = broker.post("/api/v1/kv", ops)
    assert r.status == expect, r
    return r.json()


def put(key, value, **kw):
    op = {"op": "put", "ns": NS, "key": key, "value": value}
    if "ttlSeconds" not in kw:
        op["forever"] = True
    op.update(kw)
    return op


def safe_time(broker):
    r = broker.post("/api/v1/partitions/changed",
                    {"entries": [{"queue": "none"}]})
    assert r.status == 200, r
    return r.json()["safeTime"]


def test_put_get_round_trip_of_the_sinks_keys(broker):
    keys = ["s3:default:orders:lease", "s3:sink-2:a%2Fb:intent",
            "s3:default:a%20b%2F%C3%BC%3Ac:committed"]
    for k in keys:
        res = kv(broker, [put(k, {"k": 1})])["results"][0]
        assert res["applied"] is True and res["op"] == "put"
        got = kv(broker, [{"op": "get", "ns": NS, "key": k}])["results"][0]
        assert got["found"] is True and got["key"] == k
        assert got["value"] == {"k": 1}
        assert got["version"] == res["version"]
        assert got["expiresAt"] is None
        assert got["updatedAt"].endswith("+00:00")


def test_bare_array_and_operations_object_are_both_accepted(broker):
    a = kv(broker, {"operations": [put("x", 1)]})
    b = kv(broker, [{"op": "get", "ns": NS, "key": "x"}])
    assert b["results"][0]["version"] == a["results"][0]["version"]
    assert b["results"][0]["index"] == 0


def test_result_shapes_keep_their_field_order(broker):
    r = broker.post("/api/v1/kv", [put("o", 5),
                                   {"op": "get", "ns": NS, "key": "nope"}])
    pairs = r.pairs()[0][1]
    assert [k for k, _ in pairs[0]] == ["index", "op", "applied", "key",
                                        "value", "version"]
    assert [k for k, _ in pairs[1]] == ["index", "op", "found", "key"]


def test_put_if_absent_live_row_answers_exists_with_the_winner(broker):
    v = kv(broker, [put("p", "a")])["results"][0]["version"]
    res = kv(broker, [{"op": "putIfAbsent", "ns": NS, "key": "p",
                       "value": "b", "forever": True}])["results"][0]
    assert res["op"] == "putIfAbsent"
    assert res["applied"] is False and res["reason"] == "exists"
    assert res["value"] == "a" and res["version"] == v


def test_expect_right_and_stale_version(broker):
    v1 = kv(broker, [put("e", 1)])["results"][0]["version"]
    r2 = kv(broker, [put("e", 2, expect=v1)])["results"][0]
    assert r2["applied"] is True and r2["version"] != v1
    r3 = kv(broker, [put("e", 3, expect=v1)])["results"][0]
    assert r3["applied"] is False and r3["reason"] == "version"
    assert r3["version"] == r2["version"] and r3["value"] == 2


def test_a_lost_required_second_op_leaves_the_first_unapplied(broker):
    v = kv(broker, [put("held", "x")])["results"][0]["version"]
    body = kv(broker, [put("first", 1),
                       {"op": "putIfAbsent", "ns": NS, "key": "held",
                        "value": "y", "forever": True, "required": True}])
    assert body == {"ok": False, "reason": "kv_precondition",
                    "failedIndex": 1, "kvReason": "exists", "version": v,
                    "value": "x"}
    got = kv(broker, [{"op": "get", "ns": NS, "key": "first"}])["results"][0]
    assert got == {"index": 0, "op": "get", "found": False, "key": "first"}


def test_get_prefix_pages_through_2500_keys(broker):
    for base in range(0, 2500, 250):
        kv(broker, [put("pg:%05d" % i, i) for i in range(base, base + 250)])
    seen = []
    after = None
    for _ in range(10):
        op = {"op": "getPrefix", "ns": NS, "prefix": "pg:", "limit": 1000,
              "keysOnly": True}
        if after:
            op["after"] = after
        res = kv(broker, [op])["results"][0]
        seen += [row["key"] for row in res["rows"]]
        assert all("value" not in row for row in res["rows"])
        if not res["truncated"]:
            assert res["nextAfter"] is None
            break
        after = res["nextAfter"]
        assert after == res["rows"][-1]["key"]
    assert seen == ["pg:%05d" % i for i in range(2500)]


def test_get_many_sees_the_calls_own_writes(broker):
    res = kv(broker, [{"op": "getMany", "ns": NS, "keys": ["gm:b", "gm:a",
                                                           "gm:c"]},
                      put("gm:a", "A"), put("gm:b", "B")])["results"]
    rows = res[0]["rows"]
    assert [r["key"] for r in rows] == ["gm:a", "gm:b"]
    assert res[0]["missing"] == ["gm:c"] and res[0]["truncated"] is False


def test_a_ttl_row_expires_and_the_leader_sweeps_it(broker):
    res = kv(broker, [put("ttl", 1, ttlSeconds=1)])["results"][0]
    got = kv(broker, [{"op": "get", "ns": NS, "key": "ttl"}])["results"][0]
    assert got["found"] is True and got["expiresAt"].endswith("+00:00")

    def gone():
        g = kv(broker, [{"op": "get", "ns": NS, "key": "ttl"}])["results"][0]
        return not g["found"]
    wait_until(gone, 10, "the TTL row to expire")
    # expect: 0 wins over the expired row, swept or not.
    r = kv(broker, [put("ttl", 2, expect=0)])["results"][0]
    assert r["applied"] is True and r["version"] > res["version"]


def test_single_op_routes(broker):
    r = broker.request("PUT", "/api/v1/kv/%s/a/b%%2Fc" % NS,
                       body={"value": {"z": 1}, "forever": True})
    assert r.status == 200, r
    put_res = r.json()
    assert put_res["applied"] is True and put_res["key"] == "a/b/c"
    r = broker.get("/api/v1/kv/%s/a/b%%2Fc" % NS)
    assert r.status == 200
    assert r.json()["value"] == {"z": 1}
    assert r.headers.get("ETag") == '"%d"' % put_res["version"]
    r = broker.get("/api/v1/kv/%s/missing" % NS)
    assert r.status == 200 and r.json()["found"] is False
    assert "ETag" not in r.headers
    r = broker.request("DELETE", "/api/v1/kv/%s/a/b%%2Fc" % NS)
    assert r.status == 200 and r.json()["applied"] is True
    r = broker.request("DELETE", "/api/v1/kv/%s/a/b%%2Fc" % NS)
    assert r.status == 200 and r.json()["reason"] == "absent"


def check_refused(broker, body, status, reason, method="POST",
                  path="/api/v1/kv"):
    before = kv(broker, [{"op": "getPrefix", "ns": "v", "prefix": "w"}])
    r = broker.request(method, path, body=body)
    assert r.status == status, (reason, r)
    b = r.json()
    assert b["reason"] == reason, b
    assert b["error"] == ("payload_too_large" if status == 413
                          else "kv_bad_request")
    after = kv(broker, [{"op": "getPrefix", "ns": "v", "prefix": "w"}])
    assert before == after


def test_every_validation_reason_answers_and_writes_nothing(broker):
    w = {"op": "put", "ns": "v", "key": "w1", "value": 1, "forever": True}
    cases = [
        (b"{nope", 400, "kv_bad_body"),
        ({"ops": []}, 400, "kv_bad_body"),
        ([w, {"op": "get", "ns": "Bad", "key": "k"}], 400, "kv_bad_namespace"),
        ([w, {"op": "frob", "ns": "v", "key": "k"}], 400, "kv_unknown_op"),
        ([w, {"op": "get", "ns": "v", "key": "k", "tenant": "x"}], 400,
         "kv_tenant_not_an_input"),
        ([w, 7], 400, "kv_bad_request"),
        ([w, {"op": "get", "ns": "v", "key": ""}], 400, "kv_bad_key"),
        ([w, {"op": "get", "ns": "v", "key": "a\u0000b"}], 400, "kv_bad_key"),
        ([w, {"op": "get", "ns": "v", "key": "k" * 513}], 413,
         "kv_key_too_large"),
        ([w, {"op": "put", "ns": "v", "key": "k", "value": 1}], 400,
         "kv_expiry_not_specified"),
        ([w, {"op": "put", "ns": "v", "key": "k", "value": 1,
              "forever": False}], 400, "kv_expiry_not_specified"),
        ([w, {"op": "put", "ns": "v", "key": "k", "value": 1,
              "forever": True, "ttlSeconds": 5}], 400,
         "kv_expiry_not_specified"),
        ([w, {"op": "put", "ns": "v", "key": "k", "value": 1,
              "ttlSeconds": 0}], 400, "kv_bad_ttl"),
        ([w, {"op": "put", "ns": "v", "key": "k", "value": "x" * 70000,
              "forever": True}], 413, "kv_value_too_large"),
        ([w, {"op": "put", "ns": "v", "key": "k", "value": 1,
              "forever": True, "expect": -1}], 400, "kv_bad_expect"),
        ([w, {"op": "putIfAbsent", "ns": "v", "key": "k", "value": 1,
              "forever": True, "expect": 3}], 400, "kv_bad_expect"),
        ([w, {"op": "incr", "ns": "v", "key": "k", "forever": True,
              "expect": 1}], 400, "kv_bad_expect"),
        ([w, dict(w)], 400, "kv_duplicate_key_in_call"),
        ([w] + [{"op": "get", "ns": "v", "key": "g"}] * 256, 400,
         "kv_too_many_ops"),
        ([w, {"op": "getMany", "ns": "v", "keys": ["k"] * 4100}], 400,
         "kv_too_many_keys"),
        ([w, {"op": "getPrefix", "ns": "v"}], 400, "kv_prefix_required"),
    ]
    for body, status, reason in cases:
        check_refused(broker, body, status, reason)
    check_refused(broker, None, 400, "kv_no_query_string", method="GET",
                  path="/api/v1/kv/v/k?x=1")
    check_refused(broker, {"key": "k", "value": 1, "forever": True}, 400,
                  "kv_field_in_path", method="PUT", path="/api/v1/kv/v/w2")


KV_REPEATED = [
    (b'{"operations":[],"operations":[{"op":"put","ns":"v","key":"w3",'
     b'"value":1,"forever":true}]}',
     'duplicate key "operations"'),
    (b'[{"op":"get","ns":"v","key":"k"},{"op":"put","ns":"v","key":"w3",'
     b'"key":"w4","value":1,"forever":true}]',
     'operation 1: duplicate key "key"'),
    (b'[{"op":"put","ns":"v","key":"w3","value":1,"value":2,'
     b'"forever":true}]',
     'operation 0: duplicate key "value"'),
    (b'[{"op":"put","op":"delete","ns":"v","key":"w3","value":1,'
     b'"forever":true}]',
     'operation 0: duplicate key "op"'),
    (b'[{"op":"put","ns":"v","ns":"w","key":"w3","value":1,'
     b'"forever":true}]',
     'operation 0: duplicate key "ns"'),
    (b'[{"op":"put","ns":"v","key":"w3","value":1,"forever":true,'
     b'"expect":0,"\\u0065xpect":5}]',
     'operation 0: duplicate key "expect"'),
    (b'[{"op":"put","ns":"v","key":"w3","value":1,"ttlSeconds":5,'
     b'"ttlSeconds":6}]',
     'operation 0: duplicate key "ttlSeconds"'),
    (b'[{"op":"getPrefix","ns":"v","prefix":"w","limit":1,"limit":2}]',
     'operation 0: duplicate key "limit"'),
]


def test_a_repeated_field_is_refused_and_writes_nothing(broker):
    for body, detail in KV_REPEATED:
        check_refused(broker, body, 400, "kv_bad_body")
        r = broker.post("/api/v1/kv", body)
        assert r.json() == {"error": "kv_bad_request", "reason": "kv_bad_body",
                            "detail": detail}, (body, r)
    for body, detail in [
            (b'{"value":1,"value":2,"forever":true}', 'duplicate key "value"'),
            (b'{"value":1,"forever":true,"forever":false}',
             'duplicate key "forever"'),
            (b'{"value":1,"forever":true,"required":true,"required":false}',
             'duplicate key "required"')]:
        check_refused(broker, body, 400, "kv_bad_body", method="PUT",
                      path="/api/v1/kv/v/w5")
        r = broker.request("PUT", "/api/v1/kv/v/w5", body=body)
        assert r.json()["detail"] == detail, r
    r = broker.request("DELETE", "/api/v1/kv/v/w5",
                       body=b'{"expect":0,"expect":1}')
    assert r.status == 400, r
    assert r.json() == {"error": "kv_bad_request", "reason": "kv_bad_body",
                        "detail": 'duplicate key "expect"'}


def test_a_value_with_repeated_keys_is_stored_as_sent(broker):
    """A value is the client's JSON: repeated keys inside it, and members
    the route ignores, are kept and never refused."""
    value = b'{"a":1,"a":2,"b":{"c":3,"c":4}}'
    r = broker.post("/api/v1/kv",
                    b'[{"op":"put","ns":"' + NS.encode() + b'","key":"dv",'
                    b'"x":1,"x":2,"value":' + value + b',"forever":true}]')
    assert r.status == 200, r
    assert r.json()["results"][0]["applied"] is True
    r = broker.request("PUT", "/api/v1/kv/%s/dv2" % NS,
                       body=b'{"value":' + value + b',"y":1,"y":2,'
                            b'"forever":true}')
    assert r.status == 200, r
    for key in ("dv", "dv2"):
        got = broker.get("/api/v1/kv/%s/%s" % (NS, key))
        assert got.status == 200, got
        assert value in got.body, got


def test_a_value_is_stored_and_limited_as_compact_json(broker):
    """http-api.md §7: a value is at most 65536 bytes of compact JSON. The
    layout between its tokens is not the value's: it is dropped before the
    limit is applied and before the value is stored; whitespace inside its
    strings is kept."""
    sent = (b'{ "v" :\t[1 , 2,\r\n {"a b" : "c  d\\" e"}' + b" " * 70000 +
            b"] }")
    compact = b'{"v":[1,2,{"a b":"c  d\\" e"}]}'
    r = broker.post("/api/v1/kv",
                    b'[{"op":"put","ns":"' + NS.encode() + b'","key":"cj",'
                    b'"value":' + sent + b',"forever":true}]')
    assert r.status == 200, r
    r = broker.request("PUT", "/api/v1/kv/%s/cj2" % NS,
                       body=b'{"value":  ' + sent + b' ,"forever":true}')
    assert r.status == 200, r
    for key in ("cj", "cj2"):
        got = broker.get("/api/v1/kv/%s/%s" % (NS, key))
        assert got.status == 200, got
        assert b'"value":' + compact in got.body, got
    # over the limit once compact: still refused, nothing stored
    big = b'"' + b"x" * 65535 + b'"'
    check_refused(broker, b'[{"op":"put","ns":"' + NS.encode() +
                  b'","key":"cj3","value":' + big + b',"forever":true}]',
                  413, "kv_value_too_large")
    got = broker.get("/api/v1/kv/%s/cj3" % NS)
    assert got.json()["found"] is False, got


def test_the_namespace_detail_quotes_the_pattern(broker):
    r = broker.post("/api/v1/kv", [{"op": "get", "ns": "Bad", "key": "k"}])
    assert r.json()["detail"] == \
        "namespace 'Bad' does not match ^[a-z0-9][a-z0-9._-]{0,63}$"


def test_kv_writes_move_safe_time_on_an_idle_broker(broker):
    kv(broker, [put("tick", 0)])
    t0 = safe_time(broker)
    for i in range(3):
        time.sleep(0.01)
        kv(broker, [put("tick", i + 1)])
    assert safe_time(broker) > t0


def writer(port, stop, answered, lock):
    i = 0
    while not stop.is_set():
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=5)
        key = "crash:%06d" % i
        body = json.dumps([{"op": "putIfAbsent", "ns": NS, "key": key,
                            "value": i, "forever": True}]).encode()
        try:
            conn.request("POST", "/api/v1/kv", body=body,
                         headers={"content-type": "application/json"})
            r = conn.getresponse()
            if r.status == 200:
                res = json.loads(r.read())["results"][0]
                with lock:
                    answered.append((key, res["applied"], res["version"]))
        except OSError:
            return
        finally:
            conn.close()
        i += 1


def test_kill_9_during_kv_batches_keeps_answered_ones_once(broker):
    stop = threading.Event()
    answered = []
    lock = threading.Lock()
    t = threading.Thread(target=writer,
                         args=(broker.port, stop, answered, lock))
    t.start()
    wait_until(lambda: len(answered) >= 200, 30, "200 answered batches")
    broker.kill9()
    stop.set()
    t.join(10)
    broker.start()
    assert all(applied for _, applied, _ in answered)
    keys = [k for k, _, _ in answered]
    for base in range(0, len(keys), 200):
        chunk = keys[base:base + 200]
        res = kv(broker, [{"op": "getMany", "ns": NS, "keys": chunk}])
        rows = {r["key"]: r["version"] for r in res["results"][0]["rows"]}
        for k, _, v in answered[base:base + 200]:
            assert rows.get(k) == v, k
    last = max(v for _, _, v in answered)
    r = kv(broker, [put("after-crash", 1)])["results"][0]
    assert r["version"] > last


def test_a_refusal_quoting_a_long_name_is_still_json(broker):
    """The detail quotes the namespace and is cut at 256 bytes; a cut inside
    a two-byte letter must not leave half of it in the answer."""
    ns = "a" + "\u00e9" * 200
    body = json.dumps([{"op": "get", "ns": ns, "key": "k"}],
                      ensure_ascii=False).encode()
    r = broker.post("/api/v1/kv", body)
    assert r.status == 400, r
    j = json.loads(r.body.decode("utf-8"))  # strict: raises on a bad byte
    assert j["reason"] == "kv_bad_namespace", j
    assert j["detail"].startswith("namespace 'a\u00e9\u00e9"), j


def test_a_path_key_that_is_not_utf8_is_refused_and_not_stored(broker):
    """%XX escapes can make any bytes; a key that is not UTF-8 is refused on
    every key route, so no later answer has to carry it."""
    for method, body in [("PUT", {"value": 1, "forever": True}),
                         ("GET", None), ("DELETE", None)]:
        r = broker.request(method, "/api/v1/kv/%s/x%%ffy" % NS, body=body)
        assert r.status == 400, (method, r)
        j = json.loads(r.body.decode("utf-8"))
        assert j["reason"] == "kv_bad_key", (method, j)
    rows = kv(broker, [{"op": "getPrefix", "ns": NS, "prefix": "x"}])
    assert rows["results"][0]["rows"] == [], rows
    # The same letters as valid UTF-8 still work.
    r = broker.request("PUT", "/api/v1/kv/%s/x%%C3%%A9y" % NS,
                       body={"value": 1, "forever": True})
    assert r.status == 200 and r.json()["key"] == "x\u00e9y", r



def incr_from_clients(nodes, clients_per_node, per, key="counted"):
    """clients_per_node threads per node, each sending per single-op incr
    calls of (NS, key): the values answered 200 and, for any other
    answer, (status, body) tuples, in arrival order."""
    op = {"op": "incr", "ns": NS, "key": key, "forever": True}
    answers, lock = [], threading.Lock()

    def client(node):
        for _ in range(per):
            r = node.post("/api/v1/kv", [op], timeout=30)
            got = r.json()["results"][0]["value"] if r.status == 200 \
                else (r.status, r.body[:200])
            with lock:
                answers.append(got)

    ts = [threading.Thread(target=client, args=(n,))
          for n in nodes for _ in range(clients_per_node)]
    for t in ts:
        t.start()
    for t in ts:
        t.join(180)
    return answers


def assert_each_answered_once(answers, n):
    """Every one of n calls answered 200 with its own entry's value."""
    failed = [a for a in answers if isinstance(a, tuple)]
    assert failed == [], "%d of %d refused: %s" % (
        len(failed), len(answers), failed[:3])
    assert sorted(answers) == list(range(1, n + 1))


def test_every_write_is_answered_with_its_own_result_across_snapshots(
        broker_factory):
    """Writes from several clients while snapshots are taken every 64
    entries: each is answered 200 with its own entry's result (incr's
    values 1..n, each once), none 500 'the kv answer was lost'. A snapshot
    applies the queued entries before their callbacks run (raft/node.c
    (D2)); one answer slot kept only the last of them."""
    b = broker_factory(env={"QUEEN_RAFT_SNAPSHOT_THRESHOLD": "64",
                            "QUEEN_RAFT_SNAPSHOT_TRAILING": "8"})
    answers = incr_from_clients([b], 6, 250)
    assert_each_answered_once(answers, 6 * 250)
    got = kv(b, [{"op": "get", "ns": NS, "key": "counted"}])["results"][0]
    assert got["value"] == 6 * 250
    assert (b.metric("queen_raft_snapshots_total") or 0) >= 10
