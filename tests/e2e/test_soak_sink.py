"""A randomized soak of the sink's promise: every acknowledged record lands
in the lake exactly once, byte for byte, and loss is never silent.

One node with the sink on mirrors two queues:
  - soak.keep has no retention: at the end its whole log is read back, every
    acknowledged push must be in it, and the lake must equal it exactly
    (every record once, byte-exact, with the broker's stamp; nothing else;
    no lost range);
  - soak.trim has a short retention and no sink hold, so trims race the sink
    (above all while the node is down): every offset the broker ever gave
    out is either in the lake exactly once (byte-exact against what was
    pushed or read back) or inside a lost range of a manifest, never both,
    and a lost range covers only offsets the broker trimmed.

Two pushers send batches with odd partition names and the payload corpus of
the reader matrix. A killer sends SIGKILL at random moments; some restarts
arm one of the five crash points (QUEEN_S3_CRASH_AT), so the node also dies
inside the commit sequence; and now and then the bucket answers 503 for a
few seconds, so the sink falls behind while retention trims soak.trim. A log reader copies what the broker holds while
the chaos runs, so records retention trims later still have a known text.

The seed is QUEEN_SOAK_SEED (random when unset; printed either way), the
chaos lasts QUEEN_SOAK_SECONDS (60). Re-run a failure with its seed.

In `make check` once, with a random seed; `make soak` runs it SOAK_RUNS
times, each with its own seed. QUEEN_TEST_KEEP_LOGS=DIR keeps the node's
logs of every start for a failure's post-mortem."""
import os
import random
import threading
import time

import lake
from retention_helpers import configure
from sinkenv import PREFIX, TENANT, sink_row, wait_until

KEEP, TRIM = "soak.keep", "soak.trim"
PARTITIONS = ["cust 42/eu", "r\u00e9gion-eu", "a=b%c+d", "\u65e5\u672c/\u30c7",
              "quote\"back\\slash", "x" * 120, "Default", "p.0", "tab\tname"]
BIG = b"1234567890" * 10
PAYLOADS = [b'{"total":42.00}', b'{"n":' + BIG + b',"neg":-' + BIG + b'}',
            b'{\r\n  "total": 42.00,\n  "note": "a\\nb"\n}', b"null",
            b'[42.00,' + BIG + b',"caf\xc3\xa9"]', b'"text"',
            b'{"s":"' + b"y" * 3000 + b'"}', b'{"big":1E+400,"neg":-0}',
            b'"\xe2\x80\xa8 \\u2028"', b"0"]
CRASH_POINTS = ["after_intent", "mid_upload", "after_upload",
                "before_commit", "after_commit"]


class Soak:
    def __init__(self, node, bucket, seed):
        self.node = node
        self.bucket = bucket
        self.rng = random.Random(seed)
        self.lock = threading.Lock()
        self.up = threading.Event()
        self.up.set()
        self.stop = threading.Event()
        self.acked = {KEEP: {}, TRIM: {}}    # (p, o) -> (txn, payload)
        self.logged = {KEEP: {}, TRIM: {}}   # (p, o) -> (txn, ts)
        self.kills = 0
        self.outages = 0
        self.crashes = 0
        self.errors = []

    def pusher(self, who):
        rng = random.Random(self.rng.random())
        n = 0
        while not self.stop.is_set():
            if not self.up.wait(1):
                continue
            queue = KEEP if rng.random() < 0.5 else TRIM
            items = []
            for _ in range(rng.randint(1, 12)):
                n += 1
                it = {"queue": queue, "partition": rng.choice(PARTITIONS),
                      "payload": rng.choice(PAYLOADS)}
                if rng.random() < 0.7:
                    it["transactionId"] = "%s-%d" % (who, n)
                items.append(it)
            try:
                r = self.node.request("POST", "/api/v1/push",
                                      body=lake.push_body(items), timeout=10)
            except OSError:
                time.sleep(0.05)  # the node is down: the outcome is unknown
                continue
            if r.status != 201:
                if r.status >= 500:
                    continue  # not acknowledged: nothing is promised
                self.errors.append("push answered %d: %r" % (r.status, r))
                continue
            with self.lock:
                for p, o, txn, payload in lake.acked_from_push(items,
                                                               r.json()):
                    if (p, o) in self.acked[queue]:
                        self.errors.append("%s %r/%d acknowledged twice"
                                           % (queue, p, o))
                    self.acked[queue][(p, o)] = (txn, payload)
            time.sleep(rng.random() * 0.02)

    def read_log(self, queue):
        """Copy (transactionId, ts) of every record the broker holds of
        queue; returns {partition: (logStart, highWatermark)}."""
        bounds = {}
        for p in PARTITIONS:
            with self.lock:
                have = [o for (q, o) in self.logged[queue] if q == p]
            nxt = max(have) + 1 if have else 0
            while True:
                e = self.node.fetch_one(queue, p, nxt)
                if e.get("error") == "OFFSET_OUT_OF_RANGE":
                    if nxt < e["logStartOffset"]:
                        nxt = e["logStartOffset"]
                        continue
                    break
                assert "error" not in e or e["error"] == \
                    "UNKNOWN_TOPIC_OR_PARTITION", e
                with self.lock:
                    for rec in e["records"]:
                        self.logged[queue][(p, rec["offset"])] = (
                            rec["transactionId"],
                            lake.parse_iso_us(rec["ts"]))
                if not e["records"]:
                    bounds[p] = (e["logStartOffset"], e["highWatermark"])
                    break
                nxt = e["records"][-1]["offset"] + 1
        return bounds

    def reader(self):
        while not self.stop.is_set():
            if not self.up.wait(1):
                continue
            try:
                self.read_log(TRIM)
            except (OSError, AssertionError):
                pass
            time.sleep(0.1)

    def killer(self, until):
        while time.monotonic() < until and not self.stop.is_set():
            self.stop.wait(self.rng.uniform(2.0, 8.0))
            if self.stop.is_set() or time.monotonic() >= until:
                break
            if self.rng.random() < 0.35:
                # the bucket goes away for a while: the sink stops reading,
                # pushes go on, and retention trims what it has not read
                self.outages += 1
                self.bucket.fault("down503", count=-1)
                self.stop.wait(self.rng.uniform(3.0, 8.0))
                self.bucket.clear_faults()
                continue
            self.up.clear()
            if self.node.proc is not None and self.node.proc.poll() is None:
                self.node.kill9()
                self.kills += 1
            else:
                self.node.proc.wait(10)
                self.node._reap()
                self.crashes += 1
            arm = self.rng.random() < 0.3
            self.node.extra_env.pop("QUEEN_S3_CRASH_AT", None)
            if arm:
                self.node.extra_env["QUEEN_S3_CRASH_AT"] = \
                    self.rng.choice(CRASH_POINTS)
            self.node.start(wait=False)
            self._wait_up()
            self.up.set()
        self.stop.set()

    def _wait_up(self):
        def healthy():
            if self.node.proc.poll() is not None:
                # an armed crash point fired during the boot's redo: start
                # again disarmed
                self.node._reap()
                self.crashes += 1
                self.node.extra_env.pop("QUEEN_S3_CRASH_AT", None)
                self.node.start(wait=False)
                return False
            try:
                return self.node.get("/health", timeout=1).status == 200
            except OSError:
                return False
        wait_until(healthy, 60, "the node to come back")


def lake_records(reader, queue):
    """Every record line of the queue's lake and every lost range."""
    return lake.records_and_lost(reader, PREFIX, TENANT, queue, "zstd")


def covered(seen, lost, bounds):
    """Every offset below each partition's high watermark is in the lake or
    a lost range."""
    for p, (_, hw) in bounds.items():
        for o in range(hw):
            if (p, o) not in seen and not lake._in_lost(lost, p, o):
                return False
    return True


def uncovered_report(node, queue, lake_seen, bounds):
    """What a failure to cover the log leaves to look at: the offsets in
    neither the lake nor a lost range, the queue's status row, and the
    node's log lines that name the queue."""
    out = []
    if lake_seen is None:
        out.append("the lake was never read whole")
    else:
        seen, lost = lake_seen
        for p, (start, hw) in sorted(bounds.items()):
            holes = [o for o in range(hw)
                     if (p, o) not in seen and not lake._in_lost(lost, p, o)]
            if holes:
                out.append("%r (logStart %d, hw %d): %d offsets uncovered, "
                           "%d..%d" % (p, start, hw, len(holes), holes[0],
                                       holes[-1]))
        out.append("lost ranges: %r" % sorted(lost)[:20])
    try:
        out.append("status row: %r" % sink_row(node, queue))
    except OSError as e:
        out.append("status unreadable: %r" % e)
    lines = [ln for ln in node.stderr().splitlines() if queue in ln]
    out.append("the node's last lines on %s:" % queue)
    out.extend(lines[-40:])
    return "\n".join(out)


def check_queue(soak, queue, seen, lost, bounds):
    acked, logged = soak.acked[queue], soak.logged[queue]
    for (p, o), (txn, payload) in acked.items():
        want = payload.replace(b"\n", b" ").replace(b"\r", b" ")
        if (p, o) in logged:
            assert logged[(p, o)][0] == txn, \
                "%s %r/%d: the log's transactionId %r is not the acked %r" % (
                    queue, p, o, logged[(p, o)][0], txn)
        if (p, o) in seen:
            s_txn, s_payload, s_ts, k = seen[(p, o)]
            assert s_txn == txn and s_payload == want, \
                "%s %r/%d in window %d differs from what was pushed" % (
                    queue, p, o, k)
        else:
            assert lake._in_lost(lost, p, o), \
                "%s %r/%d was acknowledged but is neither in the lake nor " \
                "in a lost range" % (queue, p, o)
    for (p, o), (txn, _, ts, k) in seen.items():
        hw = bounds.get(p, (0, 0))[1]
        assert o < hw, "%s %r/%d in window %d is above the log's end %d" % (
            queue, p, o, k, hw)
        assert not lake._in_lost(lost, p, o), \
            "%s %r/%d is in window %d and in a lost range" % (queue, p, o, k)
        if (p, o) in logged:
            l_txn, l_ts = logged[(p, o)]
            assert (txn, ts) == (l_txn, l_ts), \
                "%s %r/%d in window %d: (txn, ts) %r, the broker says %r" % (
                    queue, p, o, k, (txn, ts), (l_txn, l_ts))
    for p, lo, hi in lost:
        start = bounds.get(p, (0, 0))[0]
        assert hi < start, \
            "%s: lost range %r %d..%d reaches offsets the log still holds " \
            "(logStart %d)" % (queue, p, lo, hi, start)
    ranges = sorted(lost)
    for a, b in zip(ranges, ranges[1:]):
        assert a[0] != b[0] or a[2] < b[1], \
            "%s: lost ranges %r and %r overlap" % (queue, a, b)


def test_soak_kill9_and_trims_lose_nothing_silently(sink_node, bucket):
    seed = int(os.environ.get("QUEEN_SOAK_SEED") or random.randrange(1 << 30))
    seconds = float(os.environ.get("QUEEN_SOAK_SECONDS") or 60)
    print("soak: seed %d, %d s of chaos (QUEEN_SOAK_SEED=%d to re-run)"
          % (seed, seconds, seed))
    node = sink_node({"QUEEN_S3_QUEUES": "%s,%s" % (KEEP, TRIM),
                      "QUEEN_S3_THREADS": "2",
                      "QUEEN_S3_LEASE_TTL_MS": "2000",
                      "QUEEN_S3_CHECKPOINT_EVERY": "3",
                      # a small buffer: in a bucket outage the sink stops
                      # reading, and retention trims what it has not read
                      "QUEEN_S3_MEMORY_MB": "2",
                      "QUEEN_TEST_MODE": "true"})
    # A queue exists once configured; retention trims soak.trim after 2 s.
    configure(node, KEEP)
    configure(node, TRIM, retentionEnabled=True, retentionSeconds=2)
    # Under `earliest` the sink starts a queue where it first finds it:
    # what retention trims before then was never the sink's to lose. The
    # pushes wait until both queues run here (a first look before the
    # configure finds no queue and looks again 5 s later).
    for q in (KEEP, TRIM):
        wait_until(lambda q=q: (sink_row(node, q) or {}).get("ownedHere")
                   and sink_row(node, q)["state"] == "filling", 60,
                   "the sink to run %s" % q, interval=0.1)
    soak = Soak(node, bucket, seed)
    threads = [threading.Thread(target=soak.pusher, args=("a",)),
               threading.Thread(target=soak.pusher, args=("b",)),
               threading.Thread(target=soak.reader)]
    for t in threads:
        t.start()
    try:
        soak.killer(time.monotonic() + seconds)
    finally:
        soak.stop.set()
        soak.up.set()
        for t in threads:
            t.join(30)
    assert not soak.errors, soak.errors[:5]
    # A node still running with a crash point armed would fire it while the
    # log is read back: end the chaos with a node that has none.
    armed = node.extra_env.pop("QUEEN_S3_CRASH_AT", None) is not None
    if armed and node.proc is not None and node.proc.poll() is None:
        node.kill9()
    if node.proc is None or node.proc.poll() is not None:
        if node.proc is not None:
            node.proc.wait(10)
            node._reap()
        node.start()
    bucket.clear_faults()
    print("soak: %d kills, %d crash points fired, %d bucket outages, acked "
          "%d + %d" % (soak.kills, soak.crashes, soak.outages,
                       len(soak.acked[KEEP]),
        len(soak.acked[TRIM])))

    reader = lake.bucket_reader(bucket)
    result = {}
    for queue in (KEEP, TRIM):
        bounds = soak.read_log(queue)

        last = {}

        def done():
            try:
                seen, lost = lake_records(reader, queue)
            except lake.LakeError:
                return None  # a window being written: look again
            last["lake"] = (seen, lost)
            return (seen, lost) if covered(seen, lost, bounds) else None
        try:
            seen, lost = wait_until(done, 120, "the lake of %s to cover its "
                                    "log" % queue, interval=0.5)
        except AssertionError as e:
            raise AssertionError("%s\n%s" % (e, uncovered_report(
                node, queue, last.get("lake"), bounds))) from None
        # Retention goes on trimming after the chaos (above all right after
        # the last start): a lost range is judged against the log start of
        # now, which is at or above the one the sink saw when it found it.
        bounds = soak.read_log(queue)
        check_queue(soak, queue, seen, lost, bounds)
        result[queue] = (len(seen), sum(hi - lo + 1 for _, lo, hi in lost),
                         sum(lo for lo, _ in bounds.values()))
    assert result[KEEP][1] == 0, "soak.keep has no retention, yet lost %d" \
        % result[KEEP][1]
    # every acked record of soak.keep is in the log read back at the end
    for (p, o), (txn, _) in soak.acked[KEEP].items():
        assert (p, o) in soak.logged[KEEP], \
            "soak.keep %r/%d was acknowledged and is not in the log" % (p, o)
    assert result[TRIM][2] > 0, "retention never trimmed soak.trim"
    print("soak: lake keep %d records; trim %d records, %d lost, %d trimmed"
          % (result[KEEP][0], result[TRIM][0], result[TRIM][1],
             result[TRIM][2]))
