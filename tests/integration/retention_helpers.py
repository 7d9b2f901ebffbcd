"""Helpers the retention tests share (tests/integration/test_retention.py,
test_retention_tenants.py, tests/e2e/test_sink_retention.py and
test_sink_scenarios.py): configure a queue, read its partitions' logStart
from partitions/changed, watch logStart move, and the ISO-µs stamps.  Each
takes an optional tenant: None sends no x-queen-tenant header (the default
tenant)."""
import datetime

from queenproc import wait_until

# How long a test waits for a retention pass to trim: passes run every
# second, and a loaded machine can take far longer than that.
DEADLINE = 60


def hdr(tenant):
    return {} if tenant is None else {"x-queen-tenant": tenant}


def configure(node, queue, tenant=None, **options):
    r = node.post("/api/v1/configure", {"queue": queue, "options": options},
                  headers=hdr(tenant))
    assert r.status == 200, r


def changed_partitions(node, queue, tenant=None):
    """The queue's partitions as partitions/changed lists them."""
    r = node.post("/api/v1/partitions/changed",
                  {"entries": [{"queue": queue, "since": None}]},
                  headers=hdr(tenant))
    assert r.status == 200, r
    return r.json()["entries"][0]["partitions"]


def log_start(node, queue, tenant=None):
    """(logStart, lastOffset) of the queue's Default partition."""
    p = [p for p in changed_partitions(node, queue, tenant)
         if p["name"] == "Default"][0]
    return p["logStart"], p["lastOffset"]


def log_starts(node, queue, tenant=None):
    """{partition: logStart} as partitions/changed lists them."""
    return {p["name"]: p["logStart"]
            for p in changed_partitions(node, queue, tenant)}


def watch(node, queue, want, allowed, tenant=None):
    """Poll until logStart == want; every value seen must be in allowed.
    Returns the values seen, in order."""
    seen = []
    what = queue if tenant is None else "%s/%s" % (tenant, queue)

    def reached():
        ls, _ = log_start(node, queue, tenant)
        if not seen or seen[-1] != ls:
            seen.append(ls)
        assert ls in allowed, (what, seen)
        return ls == want
    wait_until(reached, DEADLINE, "%s logStart %d" % (what, want))
    return seen


def iso(us):
    t = datetime.datetime(1970, 1, 1) + datetime.timedelta(microseconds=us)
    return t.strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def parse_iso(s):
    t = datetime.datetime.strptime(s, "%Y-%m-%dT%H:%M:%S.%fZ")
    return (t - datetime.datetime(1970, 1, 1)) // datetime.timedelta(
        microseconds=1)
