"""Fixtures of the sink's end-to-end tests: real queen processes with the
embedded S3 sink, pointed at the test bucket (tests/bucket, the `bucket`
fixture of tests/conftest.py).

`sink_node(env=None, data_dir=None, start=True)` makes a broker (the
integration suite's Broker class) with the sink settings of reference 7.9
adapted to one node: JSONL, align none, max window 1000 ms, discovery
100 ms, guard 0, lease TTL 3000 ms, grace 10000 ms, checkpoint every 2,
start earliest; `env` overrides any of them.
"""
import importlib.util
import json
import os
import urllib.parse

import pytest

_HERE = os.path.dirname(os.path.abspath(__file__))
_spec = importlib.util.spec_from_file_location(
    "queen_integration_conftest",
    os.path.join(_HERE, "..", "integration", "conftest.py"))
it = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(it)

Broker = it.Broker
wait_until = it.wait_until
TENANT = "00000000-0000-0000-0000-000000000001"
PREFIX = "queen"


def sink_env(bucket, **over):
    env = {
        "QUEEN_S3_EMBEDDED": "true",
        "QUEEN_S3_QUEUES": "orders",
        "QUEEN_S3_ENDPOINT": bucket.endpoint,
        "QUEEN_S3_REGION": "us-east-1",
        "QUEEN_S3_PATH_STYLE": "true",
        "QUEEN_S3_BUCKET": "lake",
        "QUEEN_S3_ACCESS_KEY": "queen",
        "QUEEN_S3_SECRET_KEY": "queen-secret-key",
        "QUEEN_S3_START": "earliest",
        "QUEEN_S3_ALIGN": "none",
        "QUEEN_S3_MAX_WINDOW_MS": "1000",
        "QUEEN_S3_DISCOVERY_INTERVAL_MS": "100",
        "QUEEN_S3_SAFE_GUARD_MS": "0",
        "QUEEN_S3_LEASE_TTL_MS": "3000",
        "QUEEN_S3_SHUTDOWN_GRACE_MS": "10000",
        "QUEEN_S3_CHECKPOINT_EVERY": "2",
    }
    env.update({k: str(v) for k, v in over.items()})
    return env


def kv_get(broker, key, ns="queen-s3"):
    """GET one KV row over HTTP: the answer's JSON ({"found": ...})."""
    r = broker.get("/api/v1/kv/%s/%s" % (ns, urllib.parse.quote(key, safe="")))
    assert r.status == 200, r
    return r.json()


def sink_row(broker, queue):
    """The /status row of queue in the first sink, or None."""
    s = broker.get("/status").json().get("s3")
    if not s or not s["sinks"]:
        return None
    for q in s["sinks"][0]["queues"]:
        if q["name"] == queue:
            return q
    return None


@pytest.fixture
def sink_node(broker_factory, bucket):
    def make(env=None, data_dir=None, start=True):
        return broker_factory(env=sink_env(bucket, **(env or {})),
                              data_dir=data_dir, start=start)
    return make


@pytest.fixture
def broker_factory():
    made = []
    import tempfile
    tmp = tempfile.TemporaryDirectory(prefix="queen-e2e-")

    def make(env=None, start=True, data_dir=None):
        d = data_dir or os.path.join(tmp.name, "data-%d" % len(made))
        os.makedirs(d, exist_ok=True)
        b = Broker(d, env=env)
        made.append(b)
        if start:
            b.start()
        return b

    make.tmp = tmp.name
    yield make
    for b in made:
        if b.proc is not None:
            b.proc.kill()
            b.proc.wait(10)
            b._reap()
    tmp.cleanup()
