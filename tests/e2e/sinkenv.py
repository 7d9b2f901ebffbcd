"""Helpers of the sink's end-to-end tests: the sink settings of
docs/design/scenarios.md §9
adapted to one node, and reads of KV rows and /status rows over HTTP. A
module of its own (not conftest) so tests import it by a name no other
directory uses."""
import urllib.parse

import queenproc as it  # noqa: F401  (tests use it.queen_root() and friends)
from queenproc import Broker, wait_until  # noqa: F401

TENANT = "00000000-0000-0000-0000-000000000001"
PREFIX = "queen"


def sink_env(bucket, **over):
    env = {
        "QUEEN_S3_EMBEDDED": "true",
        "QUEEN_S3_QUEUES": "orders",
        "QUEEN_S3_ENDPOINT": bucket.endpoint if bucket is not None else "",
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
