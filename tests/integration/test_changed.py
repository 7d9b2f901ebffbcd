"""POST /api/v1/partitions/changed (docs/design/http-api.md §4): creation
order, cursors,
BAD_CURSOR, since, limit, safeTime."""
import re

import pytest

ISO_US = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{6}Z$")
UUID = re.compile(r"^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-"
                  r"[0-9a-f]{12}$")
CURSOR = re.compile(r"^p\|\d+$")


def names(entry):
    return [p["name"] for p in entry["partitions"]]


def test_answer_shape_and_partition_fields(broker):
    out = broker.push([{"queue": "c", "partition": "p", "payload": i}
                       for i in range(3)])
    r = broker.post("/api/v1/partitions/changed",
                    {"entries": [{"queue": "c"}]})
    assert r.status == 200
    assert [k for k, _ in r.pairs()] == ["safeTime", "safeTimeDegraded",
                                         "entries"]
    j = r.json()
    assert ISO_US.match(j["safeTime"]) and j["safeTimeDegraded"] is False
    e = j["entries"][0]
    assert e["queue"] == "c" and e["next"] is None
    p = e["partitions"][0]
    assert list(p) == ["name", "id", "lastOffset", "logStart", "lastWriteAt"]
    assert p["name"] == "p" and UUID.match(p["id"])
    assert p["lastOffset"] == 2 and p["logStart"] == 0
    recs = broker.fetch_one("c", "p")["records"]
    assert p["lastWriteAt"] == recs[-1]["ts"]
    assert out[-1]["offset"] == 2


def test_partitions_are_listed_in_creation_order(broker):
    broker.push([{"queue": "ord", "partition": "zeta", "payload": 1}])
    broker.push([{"queue": "ord", "partition": "alpha", "payload": 1},
                 {"queue": "ord", "partition": "mid", "payload": 1}])
    broker.push([{"queue": "ord", "partition": "zeta", "payload": 2}])
    e = broker.changed([{"queue": "ord"}])["entries"][0]
    assert names(e) == ["zeta", "alpha", "mid"]


def test_unknown_queue_is_an_entry_error_checked_before_the_cursor(broker):
    e = broker.changed([{"queue": "nope"},
                        {"queue": "nope", "after": "garbage"}])["entries"]
    assert e == [{"queue": "nope", "error": "UNKNOWN_TOPIC_OR_PARTITION"}] * 2


@pytest.mark.parametrize("after", ["t|1|a", "n|a", "p|", "p|x", "garbage",
                                   "p|1x", 5, True])
def test_bad_cursor_is_an_entry_error(broker, after):
    broker.push([{"queue": "bc", "partition": "a", "payload": 1}])
    e = broker.changed([{"queue": "bc", "after": after}])["entries"][0]
    assert e["error"] == "BAD_CURSOR"
    assert e.get("partitions", []) == []


def test_empty_or_null_cursor_starts_at_the_beginning(broker):
    broker.push([{"queue": "ec", "partition": x, "payload": 1}
                 for x in ("a", "b")])
    for after in ("", None):
        e = broker.changed([{"queue": "ec", "after": after}])["entries"][0]
        assert names(e) == ["a", "b"]


def test_cursor_paging_over_2500_partitions(broker):
    parts = ["part-%04d" % i for i in range(2500)]
    for start in range(0, 2500, 500):
        broker.push([{"queue": "big", "partition": p, "payload": 1}
                     for p in parts[start:start + 500]])
    seen = []
    after = None
    pages = []
    while True:
        e = broker.changed([{"queue": "big", "after": after,
                             "limit": 1000}])["entries"][0]
        pages.append(len(e["partitions"]))
        seen += names(e)
        if e["next"] is None:
            break
        assert CURSOR.match(e["next"]), e["next"]
        after = e["next"]
        assert len(pages) < 10
    assert pages == [1000, 1000, 500]
    assert seen == parts


def test_exactly_full_last_page_costs_one_more_empty_call(broker):
    broker.push([{"queue": "full", "partition": x, "payload": 1}
                 for x in ("a", "b", "c")])
    e = broker.changed([{"queue": "full", "limit": 3}])["entries"][0]
    assert names(e) == ["a", "b", "c"] and CURSOR.match(e["next"])
    e2 = broker.changed([{"queue": "full", "limit": 3,
                          "after": e["next"]}])["entries"][0]
    assert e2["partitions"] == [] and e2["next"] is None


def test_limit_defaults_to_1000_and_is_clamped(broker):
    parts = ["l%04d" % i for i in range(1001)]
    for start in range(0, 1001, 500):
        broker.push([{"queue": "lim", "partition": p, "payload": 1}
                     for p in parts[start:start + 500]])
    e = broker.changed([{"queue": "lim"}])["entries"][0]
    assert len(e["partitions"]) == 1000 and e["next"] is not None
    e = broker.changed([{"queue": "lim", "limit": 5000}])["entries"][0]
    assert len(e["partitions"]) == 1000
    e = broker.changed([{"queue": "lim", "limit": 0}])["entries"][0]
    assert names(e) == ["l0000"] and CURSOR.match(e["next"])
    e = broker.changed([{"queue": "lim", "limit": -3}])["entries"][0]
    assert len(e["partitions"]) == 1


def test_since_keeps_partitions_written_at_or_after_it(broker):
    broker.push([{"queue": "sn", "partition": "old", "payload": 1}])
    broker.push([{"queue": "sn", "partition": "new", "payload": 1}])
    e = broker.changed([{"queue": "sn"}])["entries"][0]
    old_at, new_at = [p["lastWriteAt"] for p in e["partitions"]]
    assert old_at < new_at
    e = broker.changed([{"queue": "sn", "since": new_at}])["entries"][0]
    assert names(e) == ["new"]
    e = broker.changed([{"queue": "sn", "since": old_at}])["entries"][0]
    assert names(e) == ["old", "new"]
    e = broker.changed([{"queue": "sn", "since": None}])["entries"][0]
    assert names(e) == ["old", "new"]


def test_unparsable_since_refuses_the_call(broker):
    broker.push([{"queue": "bs", "payload": 1}])
    r = broker.post("/api/v1/partitions/changed",
                    {"entries": [{"queue": "bs"},
                                 {"queue": "bs", "since": "yesterday"}]})
    assert r.status == 400
    assert r.json() == {
        "error": "bad body: entry 1: since is not a timestamp: yesterday"}


def test_since_on_a_day_its_month_does_not_have_refuses_the_call(broker):
    broker.push([{"queue": "bd", "payload": 1}])
    for bad in ("2020-02-30T00:00:00.000000Z", "2021-02-29T00:00:00Z",
                "2026-04-31T12:00:00Z"):
        r = broker.post("/api/v1/partitions/changed",
                        {"entries": [{"queue": "bd", "since": bad}]})
        assert r.status == 400, (bad, r)
        assert r.json() == {
            "error": "bad body: entry 0: since is not a timestamp: " + bad}
    e = broker.changed([{"queue": "bd", "since": "2020-02-29T00:00:00Z"}])
    assert [p["name"] for p in e["entries"][0]["partitions"]] == ["Default"]


def test_names_are_bounded_as_push_bounds_them(broker):
    broker.push([{"queue": "q" * 447, "payload": 1}])
    e = broker.changed([{"queue": "q" * 447}])["entries"][0]
    assert [p["name"] for p in e["partitions"]] == ["Default"]
    r = broker.post("/api/v1/partitions/changed",
                    {"entries": [{"queue": "q"}, {"queue": "q" * 448}]})
    assert r.status == 413, r
    assert r.json() == {
        "error": "entries[1].queue: name of 448 bytes is over the 447-byte "
                 "limit", "code": "too_large"}
    r = broker.post("/api/v1/partitions/changed",
                    {"entries": [{"queue": "q\u0000"}]})
    assert r.status == 200, r


DUPLICATE_FIELDS = [
    (b'{"entries":[],"entries":[{"queue":"dc"}]}',
     'bad changed body: duplicate key "entries"'),
    (b'{"entries":[{"queue":"dc","queue":"other"}]}',
     'bad changed body: entries[0]: duplicate key "queue"'),
    (b'{"entries":[{"queue":"dc"},{"queue":"dc","since":null,'
     b'"since":"2020-01-01T00:00:00Z"}]}',
     'bad changed body: entries[1]: duplicate key "since"'),
    (b'{"entries":[{"queue":"dc","after":"","after":"p|1"}]}',
     'bad changed body: entries[0]: duplicate key "after"'),
    (b'{"entries":[{"queue":"dc","limit":1,"limit":2}]}',
     'bad changed body: entries[0]: duplicate key "limit"'),
]


@pytest.mark.parametrize("body,msg", DUPLICATE_FIELDS,
                         ids=range(len(DUPLICATE_FIELDS)))
def test_a_repeated_field_answers_400_bad_body(broker, body, msg):
    broker.push([{"queue": "dc", "payload": 1}])
    r = broker.post("/api/v1/partitions/changed", body)
    assert r.status == 400, r
    assert r.json() == {"error": msg, "code": "bad_body"}


def test_fields_the_broker_ignores_may_repeat(broker):
    broker.push([{"queue": "dci", "payload": 1}])
    r = broker.post("/api/v1/partitions/changed",
                    b'{"entries":[{"queue":"dci","x":1,"x":2}],"y":1,"y":2}')
    assert r.status == 200, r
    assert names(r.json()["entries"][0]) == ["Default"]


def test_an_empty_queue_is_refused_as_push_refuses_it(broker):
    r = broker.post("/api/v1/partitions/changed",
                    {"entries": [{"queue": "q"}, {"queue": ""}]})
    assert r.status == 400, r
    assert r.json() == {
        "error": "bad changed body: entries[1].queue is empty",
        "code": "bad_body"}


def test_more_than_1024_entries_is_refused(broker):
    r = broker.post("/api/v1/partitions/changed",
                    {"entries": [{"queue": "x"}] * 1025})
    assert r.status == 400 and r.json() == {"error": "too many entries"}


def test_safe_time_is_at_least_every_applied_stamp(broker):
    for i in range(5):
        broker.push([{"queue": "sf", "partition": "p%d" % (i % 2),
                      "payload": i}])
        j = broker.changed([{"queue": "sf"}])
        stamps = [p["lastWriteAt"] for p in j["entries"][0]["partitions"]]
        assert all(j["safeTime"] >= s for s in stamps), (j["safeTime"],
                                                         stamps)


def test_new_records_are_stamped_above_an_earlier_safe_time(broker):
    broker.push([{"queue": "above", "partition": "a", "payload": 1}])
    safe = broker.changed([{"queue": "above"}])["safeTime"]
    broker.push([{"queue": "above", "partition": "a", "payload": 2}])
    recs = broker.fetch_one("above", "a")["records"]
    assert recs[-1]["ts"] > safe
