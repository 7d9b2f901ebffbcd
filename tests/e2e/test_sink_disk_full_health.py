"""A queue this node ran and cannot get its lease back stays in the health
verdict (docs/design/window.md §13, stranded). The data dir (a small tmpfs)
fills: the lease renewal fails, the queue stops fenced, and every claim
fails with insufficient storage. While it is stuck /status says ok false
with the queue named, the row keeps lagSeconds and the claim's error, and
/metrics keeps queen_s3_lag_seconds; once space returns, the queue is
claimed again, commits, and the verdict is green.

Mounting needs root: the test skips when it is not root and the mount
fails."""
import errno
import os
import subprocess

import pytest

from sinkenv import sink_row, wait_until


def sink_block(node):
    return node.get("/status").json()["s3"]["sinks"][0]


def fill(path):
    """Write path until the file system is full."""
    chunk = b"\0" * (1 << 20)
    with open(path, "wb") as f:
        try:
            while True:
                f.write(chunk)
                f.flush()
        except OSError as e:
            assert e.errno == errno.ENOSPC, e


@pytest.fixture
def small_fs(tmp_path):
    mnt = tmp_path / "fs"
    os.makedirs(mnt)
    r = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=64m", "tmpfs",
                        str(mnt)], capture_output=True, text=True)
    if r.returncode != 0:
        if os.geteuid() != 0:
            pytest.skip("mounting a tmpfs needs root: %s" % r.stderr.strip())
        raise AssertionError("mount tmpfs failed: %s" % r.stderr)
    try:
        yield str(mnt)
    finally:
        subprocess.run(["umount", "-l", str(mnt)], capture_output=True)


def test_a_queue_stuck_on_a_full_disk_turns_the_health_red(small_fs,
                                                            sink_node):
    node = sink_node(env={"QUEEN_RAFT_SEGMENT_MB": "4"},
                     data_dir=os.path.join(small_fs, "data"))
    filler = os.path.join(small_fs, "filler")
    try:
        node.push([{"queue": "orders", "partition": "p",
                    "payload": {"i": 0}}])
        wait_until(lambda: (sink_row(node, "orders") or {}).get(
            "windowsCommitted", 0) >= 1, 60, "a first window")
        assert sink_block(node)["ok"] is True
        fill(filler)
        # the preallocated raft segment still takes small writes: push
        # until the broker refuses for want of space
        pad = "p" * 4000
        for i in range(5000):
            r = node.request("POST", "/api/v1/push", body={"items": [
                {"queue": "orders", "partition": "p",
                 "payload": {"i": i, "pad": pad}} for _ in range(20)]})
            if r.status != 201:
                break
        assert r.status in (503, 507), r

        def stuck():
            s = sink_block(node)
            row = [q for q in s["queues"] if q["name"] == "orders"][0]
            err = (row.get("lastError") or {}).get("message") or ""
            return (s["ok"] is False and s["health"]["ok"] is False and
                    s["health"]["queue"] == "orders" and
                    not row["ownedHere"] and row["lagSeconds"] is not None
                    and "lease claim" in err and
                    "insufficient storage" in err.lower())
        # fenced after the TTL less its margin (2 s), then red once the
        # lag is past three windows (30 s at least)
        try:
            wait_until(stuck, 90, "the stuck queue to turn the verdict red")
        except AssertionError:
            raise AssertionError("%r\n%s" % (sink_block(node),
                                               node.stderr()[-3000:]))
        row = sink_row(node, "orders")
        lag = node.metric("queen_s3_lag_seconds", 'queue="orders"')
        assert lag is not None and lag > 30, (lag, row)
        assert abs(lag - row["lagSeconds"]) < 5, (lag, row)
    finally:
        if os.path.exists(filler):
            os.remove(filler)
    k = sink_row(node, "orders")["windowsCommitted"]
    wait_until(lambda: sink_row(node, "orders")["ownedHere"], 90,
               "the queue to be claimed again once space returns")
    node.push([{"queue": "orders", "partition": "p", "payload": {"i": 1}}])
    wait_until(lambda: sink_row(node, "orders")["windowsCommitted"] > k, 90,
               "a commit after the claim")
    wait_until(lambda: sink_block(node)["ok"] is True and
               sink_block(node)["health"]["ok"] is True, 60,
               "the verdict to be green again")
    node.proc.kill()
    node.proc.wait(10)
