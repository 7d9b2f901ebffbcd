"""POST /api/v1/fetch (docs/design/http-api.md §3): bounds, errors, limits,
long poll."""
import time

import pytest

import rawjson
from queenproc import Background, wait_until

MIB = 1024 * 1024
ENTRY_KEYS = ["queue", "partition", "records", "highWatermark",
              "logStartOffset"]


def push_n(broker, queue, partition, n, payload=lambda i: i, batch=1000):
    for start in range(0, n, batch):
        broker.push([{"queue": queue, "partition": partition,
                      "payload": payload(i)}
                     for i in range(start, min(n, start + batch))])


def test_answer_shape_and_record_keys(broker):
    broker.push([{"queue": "f", "partition": "p", "transactionId": "t0",
                  "payload": {"a": 1}}])
    r = broker.post("/api/v1/fetch",
                    {"entries": [{"queue": "f", "partition": "p",
                                  "offset": 0}]})
    assert r.status == 200
    root = r.pairs()
    assert [k for k, _ in root] == ["entries"]
    entry = root[0][1][0]
    assert [k for k, _ in entry] == ENTRY_KEYS
    e = r.json()["entries"][0]
    assert e["queue"] == "f" and e["partition"] == "p"
    assert e["highWatermark"] == 1 and e["logStartOffset"] == 0
    assert "error" not in e
    rec = r.pairs()[0][1][0][2][1][0]
    assert [k for k, _ in rec] == ["offset", "transactionId", "payload",
                                   "ts"]
    assert e["records"][0]["offset"] == 0
    assert e["records"][0]["transactionId"] == "t0"
    assert e["records"][0]["payload"] == {"a": 1}


def test_entries_answer_in_request_order(broker):
    broker.push([{"queue": "o", "partition": x, "payload": x}
                 for x in ("a", "b", "c")])
    out = broker.fetch([{"queue": "o", "partition": x, "offset": 0}
                        for x in ("c", "a", "b")])
    assert [e["partition"] for e in out["entries"]] == ["c", "a", "b"]
    assert [e["records"][0]["payload"] for e in out["entries"]] == \
        ["c", "a", "b"]


def test_one_call_answers_at_most_64_mib_of_records(broker):
    """1024 entries of up to 8 MiB each could ask for 8 GiB in one call
    (and 512 MiB of them failed it): the records of one call weigh at most
    64 MiB together, the call's first record whatever it weighs. The
    entries past it come back short or empty, their highWatermark saying
    more is there, and the next call takes them."""
    big = "x" * (7 * MIB)
    for i in range(10):
        broker.push([{"queue": "big", "partition": "p%d" % i,
                      "payload": big}])
    entries = [{"queue": "big", "partition": "p%d" % i, "offset": 0,
                "maxBytes": 8 * MIB} for i in range(10)]
    out = broker.fetch(entries)["entries"]
    # 9 records of 7 MiB + 2 B fit 64 MiB; a 10th would pass it
    assert [len(e["records"]) for e in out] == [1] * 9 + [0]
    assert out[9]["highWatermark"] == 1 and "error" not in out[9]
    rest = broker.fetch(entries[9:])["entries"]
    assert [r["payload"] for r in rest[0]["records"]] == [big]
    # the first record of a call goes in whatever the call asks beside it
    out = broker.fetch(entries[9:] + entries[:2])["entries"]
    assert [len(e["records"]) for e in out] == [1, 1, 1]


def test_unknown_queue_is_unknown_topic_with_zero_bounds(broker):
    e = broker.fetch_one("nowhere", "p", 0)
    assert e["error"] == "UNKNOWN_TOPIC_OR_PARTITION"
    assert e["records"] == []
    assert e["highWatermark"] == 0 and e["logStartOffset"] == 0


def test_unwritten_partition_of_a_known_queue_is_empty_not_an_error(broker):
    broker.push([{"queue": "k", "partition": "written", "payload": 1}])
    e = broker.fetch_one("k", "never", 0)
    assert "error" not in e
    assert e["records"] == []
    assert e["highWatermark"] == 0 and e["logStartOffset"] == 0


def test_offset_past_high_watermark_is_out_of_range(broker):
    push_n(broker, "r", "p", 3)
    e = broker.fetch_one("r", "p", 4)
    assert e["error"] == "OFFSET_OUT_OF_RANGE"
    assert e["records"] == []
    assert e["highWatermark"] == 3 and e["logStartOffset"] == 0


def test_offset_at_high_watermark_is_end_of_log(broker):
    push_n(broker, "r", "p", 3)
    e = broker.fetch_one("r", "p", 3)
    assert "error" not in e and e["records"] == []
    assert e["highWatermark"] == 3


def test_reads_start_at_the_requested_offset(broker):
    push_n(broker, "s", "p", 10)
    e = broker.fetch_one("s", "p", 7)
    assert [r["offset"] for r in e["records"]] == [7, 8, 9]
    assert [r["payload"] for r in e["records"]] == [7, 8, 9]


def test_negative_offset_refuses_the_whole_call(broker):
    push_n(broker, "n", "p", 1)
    r = broker.post("/api/v1/fetch", {"entries": [
        {"queue": "n", "partition": "p", "offset": 0},
        {"queue": "n", "partition": "p", "offset": -1}]})
    assert r.status == 400
    assert r.json() == {"error": "offset must be non-negative"}


def test_more_than_1024_entries_is_refused(broker):
    entries = [{"queue": "x", "offset": 0}] * 1025
    r = broker.post("/api/v1/fetch", {"entries": entries})
    assert r.status == 400 and r.json() == {"error": "too many entries"}
    r = broker.post("/api/v1/fetch", {"entries": entries[:1024]})
    assert r.status == 200 and len(r.json()["entries"]) == 1024


def test_names_are_bounded_as_push_bounds_them(broker):
    broker.push([{"queue": "q" * 447, "partition": "p" * 447, "payload": 1}])
    e = broker.fetch_one("q" * 447, "p" * 447)
    assert e["highWatermark"] == 1 and "error" not in e
    for entry, where in (({"queue": "q" * 448, "offset": 0}, "queue"),
                         ({"queue": "q", "partition": "\u00e9" * 224,
                           "offset": 0}, "partition")):
        r = broker.post("/api/v1/fetch", {"entries": [entry]})
        assert r.status == 413, r
        assert r.json() == {
            "error": "entries[0].%s: name of 448 bytes is over the 447-byte "
                     "limit" % where, "code": "too_large"}
        pushed = broker.post("/api/v1/push", {"items": [
            dict(entry, payload=1)]})
        assert pushed.status == 413, pushed


def test_names_with_control_bytes_read_back(broker):
    broker.push([{"queue": "a\u0000", "partition": "b\t\u0000", "payload": 7}])
    e = broker.fetch_one("a\u0000", partition="b\t\u0000")
    assert [m["payload"] for m in e["records"]] == [7], e
    assert (e["queue"], e["partition"]) == ("a\u0000", "b\t\u0000"), e


def test_unparsable_body_is_bad_body(broker):
    for body in (b"{", b"[]", b'{"entries":5}', b'{"entries":[{"queue":1}]}',
                 b'{"entries":[{"queue":"q"}]}'):
        r = broker.post("/api/v1/fetch", body)
        assert r.status == 400, (body, r)
        assert r.json()["code"] == "bad_body"


DUPLICATE_FIELDS = [
    (b'{"entries":[],"entries":[{"queue":"dq","offset":0}]}',
     'bad fetch body: duplicate key "entries"'),
    (b'{"entries":[],"maxWaitMs":0,"maxWaitMs":1000}',
     'bad fetch body: duplicate key "maxWaitMs"'),
    (b'{"minBytes":1,"entries":[],"minBytes":2}',
     'bad fetch body: duplicate key "minBytes"'),
    (b'{"entries":[{"queue":"dq","queue":"other","offset":0}]}',
     'bad fetch body: entries[0]: duplicate key "queue"'),
    (b'{"entries":[{"queue":"dq","offset":0},{"queue":"dq","partition":"a",'
     b'"partition":"b","offset":0}]}',
     'bad fetch body: entries[1]: duplicate key "partition"'),
    (b'{"entries":[{"queue":"dq","offset":0,"offset":1}]}',
     'bad fetch body: entries[0]: duplicate key "offset"'),
    (b'{"entries":[{"queue":"dq","offset":0,"maxBytes":1,"maxBytes":2}]}',
     'bad fetch body: entries[0]: duplicate key "maxBytes"'),
    (b'{"entries":[{"queue":"dq","\\u006fffset":0,"offset":1}]}',
     'bad fetch body: entries[0]: duplicate key "offset"'),
]


@pytest.mark.parametrize("body,msg", DUPLICATE_FIELDS,
                         ids=range(len(DUPLICATE_FIELDS)))
def test_a_repeated_field_answers_400_bad_body(broker, body, msg):
    broker.push([{"queue": "dq", "payload": 1}])
    r = broker.post("/api/v1/fetch", body)
    assert r.status == 400, r
    assert r.json() == {"error": msg, "code": "bad_body"}


def test_fields_the_broker_ignores_may_repeat(broker):
    broker.push([{"queue": "dqi", "payload": 1}])
    r = broker.post("/api/v1/fetch",
                    b'{"entries":[{"queue":"dqi","offset":0,"x":1,"x":2}],'
                    b'"y":1,"y":2}')
    assert r.status == 200, r
    assert [x["payload"] for x in r.json()["entries"][0]["records"]] == [1]


def test_an_empty_partition_reads_default_as_push_writes_it(broker):
    broker.push([{"queue": "ep", "partition": "", "payload": "e"}])
    e = broker.fetch([{"queue": "ep", "partition": "", "offset": 0}])
    entry = e["entries"][0]
    assert entry["partition"] == "Default" and "error" not in entry
    assert [x["payload"] for x in entry["records"]] == ["e"]
    assert broker.fetch_one("ep", "Default")["records"] == entry["records"]


def test_an_empty_queue_is_refused_as_push_refuses_it(broker):
    r = broker.post("/api/v1/fetch", {"entries": [
        {"queue": "q", "offset": 0}, {"queue": "", "offset": 0}]})
    assert r.status == 400, r
    assert r.json() == {"error": "bad fetch body: entries[1].queue is empty",
                        "code": "bad_body"}
    r = broker.post("/api/v1/push", {"items": [{"queue": "", "payload": 1}]})
    assert r.status == 400, r


def test_numeric_partition_reads_its_decimal_name(broker):
    broker.push([{"queue": "num", "partition": "7", "payload": "seven"}])
    e = broker.fetch([{"queue": "num", "partition": 7, "offset": 0}])
    assert e["entries"][0]["records"][0]["payload"] == "seven"


def test_first_record_is_delivered_even_above_max_bytes(broker):
    push_n(broker, "mb", "p", 3, payload=lambda i: "x" * 1000)
    e = broker.fetch_one("mb", "p", 0, maxBytes=10)
    assert [r["offset"] for r in e["records"]] == [0]


def test_max_bytes_counts_payload_lengths(broker):
    # each payload is "x..." of 98 chars + 2 quotes = 100 bytes
    push_n(broker, "w", "p", 10, payload=lambda i: "x" * 98)
    assert len(broker.fetch_one("w", "p", 0, maxBytes=300)["records"]) == 3
    assert len(broker.fetch_one("w", "p", 0, maxBytes=299)["records"]) == 2
    # maxBytes below 1 is clamped to 1: still the first record only.
    assert len(broker.fetch_one("w", "p", 0, maxBytes=0)["records"]) == 1


def test_max_bytes_defaults_to_1mib_and_is_clamped_to_8mib(broker):
    quarter = "y" * (MIB // 4 - 2)  # 256 KiB with the quotes
    for _ in range(40):
        broker.push([{"queue": "clamp", "payload": quarter}])
    e = broker.fetch_one("clamp", "Default", 0)
    assert len(e["records"]) == 4
    e = broker.fetch_one("clamp", "Default", 0, maxBytes=100 * MIB)
    assert len(e["records"]) == 32


def test_at_most_10000_records_per_entry(broker):
    push_n(broker, "many", "p", 10050, payload=lambda i: 1, batch=2000)
    e = broker.fetch_one("many", "p", 0, maxBytes=8 * MIB)
    assert len(e["records"]) == 10000
    assert e["records"][-1]["offset"] == 9999
    assert e["highWatermark"] == 10050


def test_null_payload_reads_as_null(broker):
    broker.push([{"queue": "nul", "payload": None}])
    r = broker.post("/api/v1/fetch",
                    {"entries": [{"queue": "nul", "offset": 0}]})
    assert rawjson.fetch_payloads(r.body) == [b"null"]


# The long polls below wait up to MAX_WAIT_MS, the most the broker allows
# (API_FETCH_MAX_WAIT_MS). One that answers without waiting it out answers
# in milliseconds; SOONER_S, the bound it is held to, is just short of the
# wait it must not do, which leaves a loaded machine all the time there is.
MAX_WAIT_MS = 30000
SOONER_S = MAX_WAIT_MS / 1000 - 1


def timed_fetch(broker, entries, **extra):
    """broker.fetch(entries, **extra) and the seconds it took."""
    t0 = time.monotonic()
    out = broker.fetch(entries, **extra)
    return out, time.monotonic() - t0


def test_long_poll_returns_when_a_push_applies(broker):
    broker.push([{"queue": "lp", "payload": 0}])
    poll = Background(timed_fetch, broker, [{"queue": "lp", "offset": 1}],
                      maxWaitMs=MAX_WAIT_MS, minBytes=1)
    wait_until(lambda: broker.metric("queen_fetch_waiting") == 1, 60,
               "the long poll to wait in the broker")
    broker.push([{"queue": "lp", "payload": 1}])
    answer, elapsed = poll.result(60)
    recs = answer["entries"][0]["records"]
    assert [r["payload"] for r in recs] == [1]
    assert elapsed < SOONER_S  # woken by the push, not at maxWaitMs


def test_long_poll_gives_up_at_max_wait(broker):
    broker.push([{"queue": "idle", "payload": 0}])
    out, elapsed = timed_fetch(broker, [{"queue": "idle", "offset": 1}],
                               maxWaitMs=700, minBytes=1)
    assert out["entries"][0]["records"] == []
    # No sooner than its 700 ms; and its own, not the longest, wait.
    assert 0.6 <= elapsed < SOONER_S, elapsed


def test_long_poll_answers_at_once_on_an_entry_error(broker):
    out, elapsed = timed_fetch(broker, [{"queue": "ghost", "offset": 0}],
                               maxWaitMs=MAX_WAIT_MS)
    assert out["entries"][0]["error"] == "UNKNOWN_TOPIC_OR_PARTITION"
    assert elapsed < SOONER_S


def test_min_bytes_zero_answers_without_waiting(broker):
    broker.push([{"queue": "mz", "payload": 0}])
    out, elapsed = timed_fetch(broker, [{"queue": "mz", "offset": 1}],
                               maxWaitMs=MAX_WAIT_MS, minBytes=0)
    assert out["entries"][0]["records"] == []
    assert elapsed < SOONER_S
