"""Issue 19 item 3: the lag is the truth at scrape time. While the bucket
is cut off nothing commits, and queen_s3_lag_seconds and the status row's
lagSeconds keep growing with the time that passes (the node's safeTime, read
when asked, minus the end of what is committed), and the health verdict
follows them; when the bucket comes back the lag falls again."""
import threading
import time

import lake
from sinkenv import sink_row, wait_until


def test_lag_grows_through_a_bucket_outage(sink_node, bucket):
    node = sink_node()
    stop = threading.Event()

    errors = []

    def pusher():
        i = 0
        while not stop.is_set():
            items = [{"queue": "orders", "partition": "p",
                      "payload": b'{"i":%d}' % i}]
            try:
                r = node.request("POST", "/api/v1/push",
                                 body=lake.push_body(items))
                if r.status != 201:
                    errors.append(r.status)
            except Exception as e:  # noqa: BLE001  (reported below)
                errors.append(repr(e))
            i += 1
            stop.wait(0.2)
    t = threading.Thread(target=pusher)
    t.start()
    try:
        wait_until(lambda: (sink_row(node, "orders") or {}).get(
            "windowsCommitted", 0) >= 1, 60, "a first window")
        bucket.fault("down503", count=-1)
        k0 = sink_row(node, "orders")["k"]
        time.sleep(3)  # let a window that was in flight fail its PUTs
        row = sink_row(node, "orders")
        lag0, t0 = row["lagSeconds"], time.monotonic()
        assert row["k"] <= k0 + 1, row
        samples = []
        deadline = t0 + 40
        while time.monotonic() < deadline:
            row = sink_row(node, "orders")
            m = node.metric("queen_s3_lag_seconds", 'queue="orders"')
            samples.append((time.monotonic() - t0, row["lagSeconds"], m))
            time.sleep(1)
        k1 = sink_row(node, "orders")["k"]
        assert k1 == row["k"], "a window committed while the bucket was down"
        for elapsed, lag, metric in samples[5:]:
            assert abs(lag - lag0 - elapsed) <= 2.0, (elapsed, lag, lag0,
                                                       samples)
            assert metric is not None and abs(metric - lag) <= 2.0, \
                (elapsed, lag, metric)
        sink = node.get("/status").json()["s3"]["sinks"][0]
        health = sink["health"]
        assert health["ok"] is False and health["queue"] == "orders", health
        assert sink["bucket"]["reachable"] is False, sink["bucket"]
        assert "writes to the bucket" in sink["bucket"]["error"] and \
            "status 503" in sink["bucket"]["error"], sink["bucket"]
        assert sink["ok"] is False, sink
    finally:
        bucket.clear_faults()
    try:
        # the driver's backoff reaches 60 s during the outage
        wait_until(lambda: sink_row(node, "orders")["lagSeconds"] < 10,
                   90, "the lag to fall once the bucket is back")
        wait_until(lambda: node.get("/status").json()["s3"]["sinks"][0][
            "health"]["ok"] is True, 60, "health back to ok")
        bucket_state = node.get("/status").json()["s3"]["sinks"][0]["bucket"]
        assert bucket_state["reachable"] is True and \
            bucket_state["error"] is None, bucket_state
        # The status reads the streak when asked; the control task logs its
        # end on its next beat.
        wait_until(lambda: "writes to the bucket succeed again" in
                   node.stderr(), 30, "the log line of writes succeeding")
        assert not errors, errors[:5]
    finally:
        stop.set()
        t.join(10)


def test_an_idle_queue_stays_behind_a_window_that_cannot_land(sink_node,
                                                              bucket):
    """One record, then nothing, while every PUT fails: its window is never
    committed, so completeThrough stays at or below the record's stamp, the
    lag keeps growing and the health turns red and stays red. Before, the
    engine heard of the commit while the objects were still going up
    (overlap) and completeThrough ran on with the idle clock: the lag fell
    back and the health went green during a total outage."""
    bucket.fault("503", count=-1, method="PUT")
    node = sink_node()
    try:
        r = node.request("POST", "/api/v1/push", body=lake.push_body(
            [{"queue": "orders", "partition": "p", "payload": b'{"i":0}'}]))
        assert r.status == 201, r
        ts = lake.parse_iso_us(node.fetch_one("orders", "p", 0)[
            "records"][0]["ts"])
        t0 = time.monotonic()
        samples = []

        def red_after_30s():
            row = sink_row(node, "orders") or {}
            health = node.get("/status").json()["s3"]["sinks"][0]["health"]
            samples.append((round(time.monotonic() - t0, 1),
                            row.get("completeThrough"), row.get("lagSeconds"),
                            health["ok"]))
            ct = row.get("completeThrough")
            assert ct is None or lake.parse_iso_us(ct) <= ts, samples
            assert row.get("windowsCommitted", 0) == 0, row
            return time.monotonic() - t0 > 45 and health["ok"] is False

        wait_until(red_after_30s, 90, "the health red past 45 s of outage")
        # once red it stays red while nothing lands
        red = [s for s in samples if s[3] is False]
        first_red = samples.index(red[0])
        assert all(s[3] is False for s in samples[first_red:]), samples
        assert samples[-1][2] is not None and samples[-1][2] >= 40, samples
    finally:
        bucket.clear_faults()
