"""Retention (docs/design/http-api.md §6): the leader trims whole appends by
retentionSeconds and maxWaitTimeSeconds; the retention sink hold keeps what
the sink has not committed, up to its ceiling."""
import time

import pytest

from queenproc import wait_until
from retention_helpers import (DEADLINE, configure, iso, log_start,
                               parse_iso, watch)


@pytest.fixture
def broker(broker_factory):
    """The hold tests write the sink's commit pointer over HTTP, which only
    the test and repair switch allows (namespace queen-s3 is the sink's)."""
    return broker_factory(env={"QUEEN_KV_UNSAFE_SINK_WRITES": "true"})


def push(broker, queue, n):
    out = broker.push([{"queue": queue, "payload": i} for i in range(n)])
    assert all(o["status"] == "queued" for o in out), out
    return [o["offset"] for o in out]


def test_retention_seconds_trims_whole_appends(broker):
    q = "r1"
    configure(broker, q, retentionEnabled=True, retentionSeconds=2)
    t_a = time.monotonic()
    assert push(broker, q, 2) == [0, 1]

    def first_trim():
        ls, _ = log_start(broker, q)
        if ls != 0:
            return ls
        return None
    ls = wait_until(first_trim, DEADLINE, "the first append to be trimmed")
    assert time.monotonic() - t_a >= 2.0, "trimmed before it was 2 s old"
    assert ls == 2  # the whole append, never a part of it
    e = broker.fetch_one(q, offset=0)
    assert e["error"] == "OFFSET_OUT_OF_RANGE"
    assert (e["logStartOffset"], e["highWatermark"]) == (2, 2)
    assert broker.fetch_one(q, offset=2)["records"] == []

    # two appends SPACING s apart: the older goes first, as a whole. With
    # retentionSeconds = 2 * SPACING both are kept for SPACING s, then only
    # the newer for SPACING s: long enough for a loaded machine to look
    # (with 2 s and 2 s apart, as before, the newer one could go before
    # the test saw logStart 5).
    spacing = 4
    configure(broker, q, retentionEnabled=True, retentionSeconds=2 * spacing)
    assert push(broker, q, 3) == [2, 3, 4]
    time.sleep(spacing)  # spacing of the second append (setup, not a wait)
    assert push(broker, q, 1) == [5]
    seen = watch(broker, q, 5, {2, 5, 6})
    e = broker.fetch_one(q, offset=5)
    assert [r["offset"] for r in e["records"]] == [5], seen
    assert e["logStartOffset"] == 5
    watch(broker, q, 6, {5, 6})
    e = broker.fetch_one(q, offset=4)
    assert e["error"] == "OFFSET_OUT_OF_RANGE"
    assert (e["logStartOffset"], e["highWatermark"]) == (6, 6)
    # offsets continue after a full trim
    assert push(broker, q, 1) == [6]


def test_disabled_retention_keeps_everything(broker):
    configure(broker, "keep", retentionEnabled=False, retentionSeconds=1)
    configure(broker, "ctl", retentionEnabled=True, retentionSeconds=1)
    push(broker, "keep", 1)
    push(broker, "ctl", 1)
    watch(broker, "ctl", 1, {0, 1})
    assert log_start(broker, "keep") == (0, 0)


def test_hold_without_pointer_floors_at_the_cap(broker):
    # hold set, no committed row: the cap (now - 60 s) protects everything
    # younger; a queue without a hold trimmed in the same pass shows the
    # retention itself is due.
    configure(broker, "held", retentionEnabled=True, retentionSeconds=1,
              retentionSinkHold="default", retentionSinkHoldMaxSeconds=60)
    configure(broker, "open", retentionEnabled=True, retentionSeconds=1)
    push(broker, "held", 2)
    push(broker, "open", 2)
    watch(broker, "open", 2, {0, 2})
    # one more full pass after the one that trimmed "open"
    push(broker, "open", 1)
    watch(broker, "open", 3, {2, 3})
    assert log_start(broker, "held") == (0, 1)


def test_max_wait_ignores_the_hold(broker):
    configure(broker, "mw", maxWaitTimeSeconds=1, retentionSinkHold="default",
              retentionSinkHoldMaxSeconds=31536000)
    push(broker, "mw", 3)
    watch(broker, "mw", 3, {0, 3})


def kv_put(broker, key, value):
    r = broker.post("/api/v1/kv", {"operations": [
        {"op": "put", "ns": "queen-s3", "key": key, "value": value,
         "forever": True}]})
    assert r.status == 200, r
    assert r.json()["results"][0]["applied"] is True, r


def test_committed_row_holds_records_after_tend_minus_60s(broker):
    q = "e.ord/eu 1"  # escaped in the KV key as e.ord%2Feu%201
    configure(broker, q, retentionEnabled=True, retentionSeconds=1,
              retentionSinkHold="default", retentionSinkHoldMaxSeconds=3600)
    configure(broker, "ctl2", retentionEnabled=True, retentionSeconds=1)
    push(broker, q, 2)  # append A: offsets 0, 1
    ts_a = parse_iso(broker.fetch_one(q)["records"][0]["ts"])
    time.sleep(0.3)  # spacing so append B is stamped well after A
    push(broker, q, 2)  # append B: offsets 2, 3
    ts_b = parse_iso(broker.fetch_one(q, offset=2)["records"][0]["ts"])
    assert ts_b - ts_a > 2000
    # floor = tEnd(ms) - 60 s lands 1 ms above A's stamp, below B's
    kv_put(broker, "s3:default:e.ord%2Feu%201:committed",
           {"k": 1, "tEnd": iso(ts_a + 60_000_000 + 1000), "manifest": "m",
            "records": 2, "bytes": 10, "committedAtMs": 0})
    watch(broker, q, 2, {0, 2})
    # a queue without a hold, pushed now, trimmed in a later pass
    push(broker, "ctl2", 1)
    watch(broker, "ctl2", 1, {0, 1})
    assert log_start(broker, q) == (2, 3)
    e = broker.fetch_one(q, offset=2)
    assert [r["offset"] for r in e["records"]] == [2, 3]

    # the sink commits further: B goes too
    kv_put(broker, "s3:default:e.ord%2Feu%201:committed",
           {"k": 2, "tEnd": iso(ts_b + 60_000_000 + 1000), "manifest": "m",
            "records": 2, "bytes": 10, "committedAtMs": 0})
    watch(broker, q, 4, {2, 4})


def test_committed_row_of_another_hold_name_is_ignored(broker):
    q = "other"
    configure(broker, q, retentionEnabled=True, retentionSeconds=1,
              retentionSinkHold="mine", retentionSinkHoldMaxSeconds=3600)
    configure(broker, "ctl3", retentionEnabled=True, retentionSeconds=1)
    push(broker, q, 1)
    kv_put(broker, "s3:theirs:other:committed",
           {"tEnd": iso(int(time.time() * 1e6) + 120_000_000)})
    push(broker, "ctl3", 1)
    watch(broker, "ctl3", 1, {0, 1})
    push(broker, "ctl3", 1)
    watch(broker, "ctl3", 2, {1, 2})
    assert log_start(broker, q) == (0, 0)


def test_trims_survive_a_restart_and_the_new_leader_plans(broker):
    configure(broker, "rs", retentionEnabled=True, retentionSeconds=1)
    push(broker, "rs", 2)
    watch(broker, "rs", 2, {0, 2})
    push(broker, "rs", 1)
    broker.stop()
    broker.start()
    assert log_start(broker, "rs")[0] in (2, 3)
    # the restarted leader plans again: the append pushed before the stop
    watch(broker, "rs", 3, {2, 3})
    e = broker.fetch_one("rs", offset=1)
    assert e["error"] == "OFFSET_OUT_OF_RANGE"
    assert (e["logStartOffset"], e["highWatermark"]) == (3, 3)
