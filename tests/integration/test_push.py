"""POST /api/v1/push (docs/design/http-api.md §2): the 201 array and its key
order, ids,
defaults, dedup, byte-exact payloads, refusals that store nothing, stamps."""
import http.client
import json
import re

import pytest

import rawjson

UUID7 = re.compile(
    r"^[0-9a-f]{8}-[0-9a-f]{4}-7[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$")
ISO_US = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{6}Z$")
PUSH_KEYS = ["index", "message_id", "transaction_id", "queueName", "status",
             "offset"]

PRODUCT_PAGE_PUSH = (
    b'{"items":[ {"queue":"orders","partition":"cust-1","payload":{"order":1,'
    b'"status":"new","total":42.00}}, {"queue":"orders","partition":"cust-2",'
    b'"payload":{"order":2,"status":"new","total":17.50}}, {"queue":"orders",'
    b'"partition":"cust-1","payload":{"order":1,"status":"paid","total":42.00}'
    b'} ]}')


def raw_push(broker, items_text):
    """Push items given as raw JSON text fragments (bytes), so payload bytes
    reach the broker exactly as written."""
    body = b'{"items":[' + b",".join(items_text) + b"]}"
    return broker.post("/api/v1/push", body)


def item_text(queue, payload_raw, partition=None, txn=None):
    parts = [b'"queue":' + json.dumps(queue).encode()]
    if partition is not None:
        parts.append(b'"partition":' + json.dumps(partition).encode())
    if txn is not None:
        parts.append(b'"transactionId":' + json.dumps(txn).encode())
    parts.append(b'"payload":' + payload_raw)
    return b"{" + b",".join(parts) + b"}"


def queue_names(broker):
    r = broker.get("/api/v1/resources/queues")
    assert r.status == 200, r
    return [q["name"] for q in r.json()["queues"]]


def test_product_page_push_answers_201_with_offsets_and_one_ts(broker):
    r = broker.post("/api/v1/push", PRODUCT_PAGE_PUSH)
    assert r.status == 201, r
    pairs = r.pairs()
    assert isinstance(pairs, list) and len(pairs) == 3
    for i, elem in enumerate(pairs):
        assert [k for k, _ in elem] == PUSH_KEYS
        d = dict(elem)
        assert d["index"] == i
        assert UUID7.match(d["message_id"]), d
        assert d["transaction_id"] == d["message_id"]
        assert d["queueName"] == "orders"
        assert d["status"] == "queued"
    assert [dict(e)["offset"] for e in pairs] == [0, 0, 1]

    a = broker.post("/api/v1/fetch", {"entries": [
        {"queue": "orders", "partition": "cust-1", "offset": 0},
        {"queue": "orders", "partition": "cust-2", "offset": 0}]})
    assert a.status == 200, a
    p1 = rawjson.fetch_payloads(a.body, 0)
    p2 = rawjson.fetch_payloads(a.body, 1)
    assert p1 == [b'{"order":1,"status":"new","total":42.00}',
                  b'{"order":1,"status":"paid","total":42.00}']
    assert p2 == [b'{"order":2,"status":"new","total":17.50}']
    entries = a.json()["entries"]
    stamps = {rec["ts"] for e in entries for rec in e["records"]}
    assert len(stamps) == 1, stamps
    assert ISO_US.match(stamps.pop())
    txns = [rec["transactionId"] for e in entries for rec in e["records"]]
    ids = [d["message_id"] for d in r.json()]
    assert sorted(txns) == sorted(ids)


def test_message_ids_are_distinct_uuid7(broker):
    out = broker.push([{"queue": "ids", "payload": i} for i in range(50)])
    ids = [e["message_id"] for e in out]
    assert len(set(ids)) == 50
    assert all(UUID7.match(i) for i in ids)


def test_given_transaction_id_is_kept_and_partition_defaults(broker):
    out = broker.push([{"queue": "t1", "transactionId": "tx-\u00e9\"1",
                        "payload": {"a": 1}},
                       {"queue": "t1", "partition": "", "payload": 2}])
    assert out[0]["transaction_id"] == "tx-\u00e9\"1"
    assert [e["offset"] for e in out] == [0, 1]
    e = broker.fetch_one("t1", "Default")
    assert [r["transactionId"] for r in e["records"]] == [
        "tx-\u00e9\"1", out[1]["message_id"]]
    # A fetch entry without a partition reads Default too.
    e2 = broker.fetch([{"queue": "t1", "offset": 0}])["entries"][0]
    assert len(e2["records"]) == 2


def test_repeated_transaction_id_answers_duplicate_with_original(broker):
    first = broker.push([{"queue": "d", "partition": "p",
                          "transactionId": "once", "payload": 1},
                         {"queue": "d", "partition": "p", "payload": 2}])
    again = broker.push([{"queue": "d", "partition": "p",
                          "transactionId": "once", "payload": 99},
                         {"queue": "d", "partition": "p", "payload": 3}])
    assert again[0]["status"] == "duplicate"
    assert again[0]["offset"] == first[0]["offset"] == 0
    assert again[0]["message_id"] == first[0]["message_id"]
    assert again[1]["status"] == "queued" and again[1]["offset"] == 2
    recs = broker.fetch_one("d", "p")["records"]
    assert [r["payload"] for r in recs] == [1, 2, 3]


def test_an_empty_transaction_id_counts_as_none(broker):
    """A client that sends "" for "no id" gets every record stored, each
    with its message id as its txn (docs/design/http-api.md §2, step 2):
    "" as an id would have answered every push after the first
    duplicate."""
    out = [broker.push([{"queue": "et", "transactionId": "",
                         "payload": i}])[0] for i in range(3)]
    assert [e["status"] for e in out] == ["queued"] * 3
    assert [e["transaction_id"] for e in out] == \
        [e["message_id"] for e in out]
    recs = broker.fetch_one("et")["records"]
    assert [r["payload"] for r in recs] == [0, 1, 2]
    assert [r["transactionId"] for r in recs] == \
        [e["message_id"] for e in out]


def test_duplicates_inside_one_request_collapse_onto_the_first(broker):
    out = broker.push([{"queue": "dd", "transactionId": "x", "payload": 1},
                       {"queue": "dd", "transactionId": "y", "payload": 2},
                       {"queue": "dd", "transactionId": "x", "payload": 3}])
    assert [e["status"] for e in out] == ["queued", "queued", "duplicate"]
    assert out[2]["offset"] == out[0]["offset"] == 0
    assert out[2]["message_id"] == out[0]["message_id"]
    assert out[2]["index"] == 2
    assert len(broker.fetch_one("dd")["records"]) == 2


def test_empty_items_answers_empty_array(broker):
    r = broker.post("/api/v1/push", {"items": []})
    assert r.status == 201 and r.body.strip() == b"[]", r


def test_queues_and_partitions_are_created_on_first_push(broker):
    assert "fresh" not in queue_names(broker)
    broker.push([{"queue": "fresh", "partition": "p9", "payload": None}])
    assert "fresh" in queue_names(broker)
    ch = broker.changed([{"queue": "fresh"}])
    assert [p["name"] for p in ch["entries"][0]["partitions"]] == ["p9"]


ROUND_TRIP = [
    b"1" * 100,
    b"-" + b"9" * 100,
    b"1E+400",
    b"-0",
    b"-0.0e-0",
    b"42.00",
    b'"\\" \\\\ \\/ \\b \\f \\n \\r \\t \\u0000 \\u00e9 \\ud83d\\ude00"',
    '"raw \u2028 \u0085 \x7f caf\u00e9 \U0001F600"'.encode("utf-8"),
    b'{\r\n  "pretty": [1, 2],\r\n\t"x" : {"y" : null}\n}',
    b"true",
    b"false",
    b"null",
    b'"just a string"',
    b"[]",
    b"{}",
    b"[" * 100 + b"1" + b"]" * 100,
    b'{"k":1,"k":2}',
]


@pytest.mark.parametrize("payload", ROUND_TRIP, ids=range(len(ROUND_TRIP)))
def test_payload_round_trips_byte_for_byte(broker, payload):
    r = raw_push(broker, [item_text("rt", payload)])
    assert r.status == 201, r
    a = broker.post("/api/v1/fetch",
                    {"entries": [{"queue": "rt", "offset": 0}]})
    assert a.status == 200
    assert rawjson.fetch_payloads(a.body) == [payload]


def test_large_string_payload_round_trips(broker):
    payload = b'"' + (b"abc\\n\xc3\xa9" * 300000) + b'"'
    assert len(payload) > 1500000
    r = raw_push(broker, [item_text("big", payload)])
    assert r.status == 201, r
    a = broker.post("/api/v1/fetch", {"entries": [
        {"queue": "big", "offset": 0, "maxBytes": 8 * 1024 * 1024}]})
    assert rawjson.fetch_payloads(a.body) == [payload]


INVALID_PAYLOADS = [
    b"01", b"1.", b"[1,]", b'{"a":tru}', b'"\xff"', b'"\xc0\xaf"',
    b'"\xed\xa0\x80"', b'"unterminated', b"[1", b'"\\x"', b'"\\ud800"',
    b'"tab\there"', b"+1", b".5", b"1e", b"NaN", b"[" * 200 + b"]" * 200,
]


@pytest.mark.parametrize("payload", INVALID_PAYLOADS,
                         ids=range(len(INVALID_PAYLOADS)))
def test_invalid_json_answers_400_and_stores_nothing(broker, payload):
    r = raw_push(broker, [item_text("good", b"1"),
                          item_text("bad", payload)])
    assert r.status == 400, r
    body = r.json()
    assert body["code"] == "bad_body"
    assert body["error"].startswith("bad push body: ")
    assert set(body) == {"error", "code"}
    names = queue_names(broker)
    assert "good" not in names and "bad" not in names


BAD_BODIES = [
    b"", b"not json", b"[]", b'{"items":{}}', b'{"items":[1]}',
    b'{"items":[{"payload":1}]}', b'{"items":[{"queue":5,"payload":1}]}',
    b'{"items":[{"queue":"q"}]}', b'{"items":[{"queue":"","payload":1}]}',
    b'{"items":[{"queue":"q","partition":7,"payload":1}]}',
    b'{"items":[{"queue":"q","transactionId":7,"payload":1}]}',
    b'{"nope":[]}', b'{"items":[]} x',
]


@pytest.mark.parametrize("body", BAD_BODIES, ids=range(len(BAD_BODIES)))
def test_bad_push_body_answers_400_bad_body(broker, body):
    r = broker.post("/api/v1/push", body)
    assert r.status == 400, r
    j = r.json()
    assert j["code"] == "bad_body" and j["error"].startswith("bad push body: ")
    assert "q" not in queue_names(broker)


def test_names_over_447_bytes_answer_413(broker):
    ok = broker.push([{"queue": "q" * 447, "partition": "p" * 447,
                       "payload": 1}])
    assert ok[0]["status"] == "queued"
    for item in ({"queue": "q" * 448, "payload": 1},
                 {"queue": "n", "partition": "\u00e9" * 224, "payload": 1}):
        r = broker.post("/api/v1/push", {"items": [item]})
        assert r.status == 413, r
        assert "error" in r.json()
    assert "n" not in queue_names(broker)


@pytest.mark.parametrize("name", ["tab\there", "del\u007f", "\u001f",
                                  "line\nbreak", "nul\u0000x"], ids=range(5))
def test_control_characters_are_names_like_any_text(broker, name):
    """The reference's broker takes them, NUL too, and the lake escapes
    them (test_sink_scenarios writes such names to a bucket)."""
    r = broker.post("/api/v1/push", {"items": [
        {"queue": "c" + name, "partition": name, "payload": {"n": 1}}]})
    assert r.status == 201, r
    assert r.json()[0]["status"] == "queued", r
    assert "c" + name in queue_names(broker)
    got = broker.fetch_one("c" + name, partition=name)
    assert [m["payload"] for m in got["records"]] == [{"n": 1}], got


def test_more_than_100000_items_answer_413_and_store_nothing(broker):
    item = b'{"queue":"many","payload":1}'
    r = broker.post("/api/v1/push", b'{"items":[' + b",".join(
        [item] * 100001) + b"]}")
    assert r.status == 413, r
    assert r.json() == {
        "error": "items: 100001 items is over the limit of 100000 per push",
        "code": "too_large"}
    assert "many" not in queue_names(broker)


DUPLICATE_FIELDS = [
    (b'{"items":[],"items":[{"queue":"dup","payload":1}]}',
     'bad push body: duplicate key "items"'),
    (b'{"items":[{"queue":"dup","queue":"dup2","payload":1}]}',
     'bad push body: items[0]: duplicate key "queue"'),
    (b'{"items":[{"queue":"dup","payload":1},{"queue":"dup","partition":"a",'
     b'"partition":"b","payload":1}]}',
     'bad push body: items[1]: duplicate key "partition"'),
    (b'{"items":[{"queue":"dup","payload":1,"payload":2}]}',
     'bad push body: items[0]: duplicate key "payload"'),
    (b'{"items":[{"queue":"dup","transactionId":"a","transactionId":"b",'
     b'"payload":1}]}',
     'bad push body: items[0]: duplicate key "transactionId"'),
]


@pytest.mark.parametrize("body,msg", DUPLICATE_FIELDS,
                         ids=range(len(DUPLICATE_FIELDS)))
def test_a_repeated_field_answers_400_and_stores_nothing(broker, body, msg):
    r = broker.post("/api/v1/push", body)
    assert r.status == 400, r
    assert r.json() == {"error": msg, "code": "bad_body"}
    names = queue_names(broker)
    assert "dup" not in names and "dup2" not in names


def test_repeated_keys_inside_a_payload_are_stored_as_sent(broker):
    payload = b'{"k":1,"k":2}'
    r = raw_push(broker, [b'{"queue":"dupp","traceId":1,"traceId":2,'
                          b'"payload":' + payload + b"}"])
    assert r.status == 201, r
    a = broker.post("/api/v1/fetch",
                    {"entries": [{"queue": "dupp", "offset": 0}]})
    assert rawjson.fetch_payloads(a.body) == [payload]


def test_body_over_the_limit_answers_413(broker_factory):
    b = broker_factory(env={"QUEEN_MAX_BODY_BYTES": "64KiB"})
    big = {"items": [{"queue": "lim", "payload": "x" * 70000}]}
    r = b.post("/api/v1/push", big)
    assert r.status == 413, r
    assert "error" in r.json()
    small = {"items": [{"queue": "lim", "payload": "x" * 60000}]}
    assert b.post("/api/v1/push", small).status == 201
    assert b.get("/health").status == 200


def test_stamps_are_shared_within_a_push_and_grow_across_pushes(broker):
    stamps = []
    for i in range(5):
        broker.push([{"queue": "st", "partition": "a", "payload": i},
                     {"queue": "st", "partition": "b", "payload": i}])
    for part in ("a", "b"):
        recs = broker.fetch_one("st", part)["records"]
        stamps.append([r["ts"] for r in recs])
    assert stamps[0] == stamps[1]  # same push, same stamp, both partitions
    assert all(x < y for x, y in zip(stamps[0], stamps[0][1:])), stamps[0]


def test_unknown_fields_and_trace_id_are_ignored(broker):
    r = broker.post("/api/v1/push", {
        "items": [{"queue": "unk", "traceId": "t-1", "extra": [1, {"a": 2}],
                   "payload": {"v": 1}}],
        "bufferMs": 10})
    assert r.status == 201, r
    assert r.json()[0]["status"] == "queued"
    assert broker.fetch_one("unk")["records"][0]["payload"] == {"v": 1}


def test_keep_alive_connection_serves_many_pushes_in_order(broker):
    conn = http.client.HTTPConnection("127.0.0.1", broker.port, timeout=60)
    try:
        for i in range(20):
            conn.request("POST", "/api/v1/push", body=(
                '{"items":[{"queue":"ka","payload":%d}]}' % i).encode(),
                headers={"content-type": "application/json"})
            r = conn.getresponse()
            assert r.status == 201
            assert json.loads(r.read())[0]["offset"] == i
    finally:
        conn.close()
