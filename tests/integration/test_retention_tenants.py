"""Retention across tenants (docs/design/http-api.md §1, §6): with
QUEEN_TENANCY_HEADER=true the leader plans every tenant's queues, each by
its own options, and reads each queue's retention sink hold row from the
queue's own tenant (KV namespace queen-s3 of that tenant)."""
import time

import pytest

import retention_helpers as rh
from retention_helpers import hdr, iso, parse_iso

A = "0a0a0a0a-0000-4000-8000-00000000000a"
B = "0b0b0b0b-0000-4000-8000-00000000000b"
DEFAULT = None  # no header: the default tenant


def configure(b, tenant, queue, **options):
    rh.configure(b, queue, tenant, **options)


def push(b, tenant, queue, n):
    r = b.post("/api/v1/push",
               {"items": [{"queue": queue, "payload": i} for i in range(n)]},
               headers=hdr(tenant))
    assert r.status == 201, r
    out = r.json()
    assert all(o["status"] == "queued" for o in out), out
    return [o["offset"] for o in out]


def log_start(b, tenant, queue):
    return rh.log_start(b, queue, tenant)


def first_ts(b, tenant, queue, offset):
    r = b.post("/api/v1/fetch", {"entries": [
        {"queue": queue, "partition": "Default", "offset": offset}]},
        headers=hdr(tenant))
    assert r.status == 200, r
    return parse_iso(r.json()["entries"][0]["records"][0]["ts"])


def watch(b, tenant, queue, want, allowed):
    rh.watch(b, queue, want, allowed, tenant)


def kv_put(b, tenant, key, value):
    r = b.post("/api/v1/kv", {"operations": [
        {"op": "put", "ns": "queen-s3", "key": key, "value": value,
         "forever": True}]}, headers=hdr(tenant))
    assert r.status == 200, r
    assert r.json()["results"][0]["applied"] is True, r


@pytest.fixture
def tenancy(broker_factory):
    # kv_put writes the sink's commit pointers over HTTP, which only the
    # test and repair switch allows (namespace queen-s3 is the sink's).
    return broker_factory(env={"QUEEN_TENANCY_HEADER": "true",
                               "QUEEN_KV_UNSAFE_SINK_WRITES": "true"})


def full_pass(b, tenant, queue, n_before):
    """Push one record to a retention-1 s control queue and wait until it is
    trimmed: a pass that visits every tenant has run since the call."""
    push(b, tenant, queue, 1)
    watch(b, tenant, queue, n_before + 1, {n_before, n_before + 1})


def test_each_tenant_trims_by_its_own_retention(tenancy):
    # one queue name in three tenants, three sets of options
    configure(tenancy, A, "orders", retentionEnabled=True,
              retentionSeconds=3600)
    configure(tenancy, B, "orders", retentionEnabled=True,
              retentionSeconds=1)
    configure(tenancy, B, "ctl", retentionEnabled=True, retentionSeconds=1)
    assert push(tenancy, A, "orders", 2) == [0, 1]
    t0 = time.monotonic()  # before B's append is stamped
    assert push(tenancy, B, "orders", 3) == [0, 1, 2]
    assert push(tenancy, DEFAULT, "orders", 1) == [0]  # implicit: no rule

    watch(tenancy, B, "orders", 3, {0, 3})
    assert time.monotonic() - t0 >= 0.9, "trimmed before it was 1 s old"
    # B's trims move B's partition only
    r = tenancy.post("/api/v1/fetch", {"entries": [
        {"queue": "orders", "partition": "Default", "offset": 0}]},
        headers=hdr(B))
    e = r.json()["entries"][0]
    assert e["error"] == "OFFSET_OUT_OF_RANGE", e
    assert (e["logStartOffset"], e["highWatermark"]) == (3, 3)
    # a later pass (tenants in byte order: default, A, B) changes no other
    full_pass(tenancy, B, "ctl", 0)
    assert log_start(tenancy, A, "orders") == (0, 1)
    assert log_start(tenancy, DEFAULT, "orders") == (0, 0)
    assert push(tenancy, B, "orders", 1) == [3]  # offsets continue


def test_each_tenant_reads_its_own_hold_row(tenancy):
    opts = dict(retentionEnabled=True, retentionSeconds=1,
                retentionSinkHold="default", retentionSinkHoldMaxSeconds=3600)
    for t in (DEFAULT, A, B):
        configure(tenancy, t, "h", **opts)
    configure(tenancy, A, "ctl", retentionEnabled=True, retentionSeconds=1)
    for t in (DEFAULT, A, B):
        assert push(tenancy, t, "h", 2) == [0, 1]  # append 1
    time.sleep(0.3)  # spacing so append 2 is stamped well after append 1
    for t in (DEFAULT, A, B):
        assert push(tenancy, t, "h", 2) == [2, 3]  # append 2
    ts1 = first_ts(tenancy, B, "h", 0)
    ts2 = first_ts(tenancy, B, "h", 2)
    assert ts2 - ts1 > 2000
    key = "s3:default:h:committed"
    # B's sink committed up to append 1: its floor lands 1 ms above it
    kv_put(tenancy, B, key, {"k": 1, "tEnd": iso(ts1 + 60_000_000 + 1000),
                             "manifest": "m", "records": 2, "bytes": 10,
                             "committedAtMs": 0})
    # the default tenant's sink committed everything; A's has no row
    far = int(time.time() * 1e6) + 3600_000_000
    kv_put(tenancy, DEFAULT, key, {"k": 1, "tEnd": iso(far)})

    watch(tenancy, DEFAULT, "h", 4, {0, 2, 4})
    watch(tenancy, B, "h", 2, {0, 2})
    full_pass(tenancy, A, "ctl", 0)
    assert log_start(tenancy, B, "h") == (2, 3)  # B's own row, not default's
    assert log_start(tenancy, A, "h") == (0, 3)  # no row: the cap holds all

    # B's sink commits further: B's append 2 goes too; A still holds
    kv_put(tenancy, B, key, {"k": 2, "tEnd": iso(ts2 + 60_000_000 + 1000)})
    watch(tenancy, B, "h", 4, {2, 4})
    full_pass(tenancy, A, "ctl", 1)
    assert log_start(tenancy, A, "h") == (0, 3)
