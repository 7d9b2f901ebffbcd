"""GET /metrics/prometheus: promtool accepts it, and the broker families
count what happened."""
import shutil
import subprocess

import pytest


def test_promtool_accepts_the_exposition(broker):
    promtool = shutil.which("promtool")
    if promtool is None:
        pytest.fail("promtool is missing: scripts/setup.sh installs the "
                    "Debian package prometheus")
    broker.push([{"queue": "m", "partition": "p", "payload": {"a": 1}}])
    broker.fetch_one("m", "p")
    broker.get("/api/v1/nope")
    r = broker.get("/metrics/prometheus")
    assert r.status == 200
    assert r.headers.get("Content-Type", r.headers.get("content-type")) == \
        "text/plain; version=0.0.4"
    p = subprocess.run([promtool, "check", "metrics"], input=r.body,
                       capture_output=True, timeout=30)
    assert p.returncode == 0, (p.stdout, p.stderr, r.body.decode())


def test_push_counters_and_raft_indexes(broker):
    broker.push([{"queue": "mc", "payload": "abc"},
                 {"queue": "mc", "payload": [1, 2]}])
    broker.push([{"queue": "mc", "transactionId": "t", "payload": 1},
                 {"queue": "mc", "transactionId": "t", "payload": 1}])
    assert broker.metric("queen_push_requests_total") == 2
    assert broker.metric("queen_push_records_total") == 3
    assert broker.metric("queen_push_duplicates_total") == 1
    # payload bytes as stored: "abc" (5) + [1, 2] (json.dumps: 6) + 1 (1)
    assert broker.metric("queen_push_bytes_total") == 12
    health = broker.get("/health").json()["raft"]
    assert broker.metric("queen_raft_applied_index") >= health["applied"]
    assert broker.metric("queen_raft_commit_index") >= health["commit"]
    assert broker.metric("queen_store_size_bytes") > 0


def test_http_requests_are_counted_by_route_and_status(broker):
    broker.push([{"queue": "hr", "payload": 1}])
    broker.post("/api/v1/push", b"nope")
    broker.get("/api/v1/missing")
    assert broker.metric("queen_http_requests_total",
                         'route="/api/v1/push",status="201"') == 1
    assert broker.metric("queen_http_requests_total",
                         'route="/api/v1/push",status="400"') == 1
    assert broker.metric("queen_http_requests_total",
                         'route="unmatched",status="404"') == 1


def test_stats_refresh_answers_that_the_raft_engine_refreshed_nothing(broker):
    """POST /api/v1/stats/refresh (docs/design/http-api.md §8): the raft
    engine has no cached statistics; the answer says so, with or without
    a body, and GET is 405."""
    for body in (None, b"", b"{}", b"not json"):
        r = broker.request("POST", "/api/v1/stats/refresh", body=body)
        assert r.status == 200, (body, r)
        assert r.pairs() == [("success", True), ("refreshed", False),
                             ("engine", "raft")], r
    assert broker.get("/api/v1/stats/refresh").status == 405
