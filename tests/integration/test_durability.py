"""kill -9 under four pushing clients, then a restart on the same directory:
every push answered 201 is there with the same offset, ts, transactionId and
bytes; offsets stay gapless; a retried push answers duplicate."""
import loglines
import http.client
import json
import signal
import threading
import time

import rawjson
from queenproc import wait_until

PARTITIONS = ["p0", "p1", "p2"]


def payload_text(client, seq, i):
    # spacing and 1.50 must survive byte for byte
    return ('{"c": %d, "s": %d, "i": %d, "price": 1.50}' %
            (client, seq, i)).encode()


class Pushers:
    """Four clients pushing until stop; what they were answered goes to
    `answered`, anything wrong to `problems`, which the test asserts is
    empty in its own thread (an assert in a worker thread would only be a
    warning to pytest). `ending` is set just before the broker is killed or
    signalled: from then on a push may fail or be refused (503) without
    being a problem."""

    def __init__(self, port, n=4):
        self.stop = threading.Event()
        self.ending = threading.Event()
        self.lock = threading.Lock()
        self.answered = []
        self.problems = []
        self.threads = [threading.Thread(target=self._run,
                                         args=(port, c))
                        for c in range(n)]

    def start(self):
        for t in self.threads:
            t.start()

    def count(self):
        with self.lock:
            return len(self.answered)

    def finish(self):
        """Stop the clients, wait for them; (answered, problems)."""
        self.stop.set()
        for t in self.threads:
            t.join(120)
        with self.lock:
            alive = [t.name for t in self.threads if t.is_alive()]
            problems = list(self.problems)
            if alive:
                problems.append("clients still running: %s" % alive)
            return list(self.answered), problems

    def _run(self, port, client):
        try:
            pusher(port, client, self)
        except Exception as e:  # noqa: BLE001 -- reported to the test
            with self.lock:
                self.problems.append("client %d: %r" % (client, e))


def pusher(port, client, ps):
    seq = 0
    retry = False
    # A generous timeout: a loaded machine can take seconds to answer.
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
    while not ps.stop.is_set():
        items = []
        for i in range(5):
            txn = "c%d-s%d-i%d" % (client, seq, i)
            part = PARTITIONS[(seq + i) % 3]
            items.append((txn, part, payload_text(client, seq, i)))
        body = b'{"items":[' + b",".join(
            b'{"queue":"dur","partition":"%s","transactionId":"%s",'
            b'"payload":%s}' % (p.encode(), t.encode(), pl)
            for t, p, pl in items) + b"]}"
        try:
            conn.request("POST", "/api/v1/push", body=body,
                         headers={"content-type": "application/json"})
            r = conn.getresponse()
            data = r.read()
        except (OSError, http.client.HTTPException) as e:
            if ps.ending.is_set():
                return  # the broker died: this push may or may not be stored
            with ps.lock:
                ps.problems.append("client %d: push failed: %r" % (client, e))
            return
        if r.status == 503 and not ps.ending.is_set():
            # docs/design/http-api.md §1: retryable (no leader yet, busy, a commit that
            # timed out on a loaded machine). A client retries the same
            # transactionIds after Retry-After; a retry of a push that was
            # stored answers duplicate with the original offset.
            retry = True
            time.sleep(float(r.getheader("Retry-After") or 1))
            continue
        if r.status != 201:
            if not ps.ending.is_set():
                with ps.lock:
                    ps.problems.append("client %d: push answered %d: %r" %
                                       (client, r.status, data[:300]))
            return  # after the kill or signal: refused, may not be stored
        out = json.loads(data)
        with ps.lock:
            for (txn, part, pl), e in zip(items, out):
                ok = ("queued", "duplicate") if retry else ("queued",)
                if e["status"] not in ok:
                    ps.problems.append("client %d: %s answered %r" %
                                       (client, txn, e))
                    continue
                ps.answered.append({"txn": txn, "partition": part,
                                    "payload": pl, "offset": e["offset"],
                                    "message_id": e["message_id"]})
        seq += 1
        retry = False


def read_all(broker, partition):
    out = []
    offset = 0
    while True:
        r = broker.post("/api/v1/fetch", {"entries": [
            {"queue": "dur", "partition": partition, "offset": offset,
             "maxBytes": 8 * 1024 * 1024}]})
        assert r.status == 200, r
        e = r.json()["entries"][0]
        raws = rawjson.fetch_payloads(r.body)
        for rec, raw in zip(e["records"], raws):
            out.append({"offset": rec["offset"], "ts": rec["ts"],
                        "txn": rec["transactionId"], "payload": raw})
        if not e["records"] or offset + len(e["records"]) >= \
                e["highWatermark"]:
            return out
        offset += len(e["records"])


def test_kill_9_under_four_clients_loses_no_answered_push(broker):
    ps = Pushers(broker.port)
    ps.start()
    wait_until(lambda: ps.count() >= 2000 or ps.problems, 120,
               "2000 answered records")
    # What a reader saw before the crash must not change after it.
    seen_before = {p: read_all(broker, p) for p in PARTITIONS}
    wait_until(lambda: ps.count() >= 3000 or ps.problems, 120,
               "3000 answered records")
    ps.ending.set()
    broker.kill9()
    answered, problems = ps.finish()
    assert problems == []

    broker.start()
    after = {p: read_all(broker, p) for p in PARTITIONS}
    for p in PARTITIONS:
        offsets = [r["offset"] for r in after[p]]
        assert offsets == list(range(len(offsets))), "gap in %s" % p
        assert after[p][:len(seen_before[p])] == seen_before[p]
    for a in answered:
        rec = after[a["partition"]][a["offset"]]
        assert rec["txn"] == a["txn"], (a, rec)
        assert rec["payload"] == a["payload"], (a, rec)

    # Retrying answered pushes with the same transactionId is a duplicate
    # that points at the original record.
    for a in answered[:20] + answered[-20:]:
        body = (b'{"items":[{"queue":"dur","partition":"%s",'
                b'"transactionId":"%s","payload":0}]}' %
                (a["partition"].encode(), a["txn"].encode()))
        r = broker.post("/api/v1/push", body)
        assert r.status == 201, r
        e = r.json()[0]
        assert e["status"] == "duplicate", (a, e)
        assert e["offset"] == a["offset"]
        assert e["message_id"] == a["message_id"]


def test_sigterm_under_four_clients_exits_0_and_keeps_answered_pushes(
        broker):
    ps = Pushers(broker.port)
    ps.start()
    wait_until(lambda: ps.count() >= 1000 or ps.problems, 120,
               "1000 answered records")
    ps.ending.set()
    broker.signal(signal.SIGTERM)
    assert broker.wait_exit(60) == 0, broker.stderr()
    answered, problems = ps.finish()
    assert problems == []
    err = broker.stderr()
    assert "Assertion" not in err and \
        not [r for r in loglines.parse(err) if r["level"] == "error"], err
    broker._reap()
    broker.start()
    after = {p: read_all(broker, p) for p in PARTITIONS}
    for p in PARTITIONS:
        assert [r["offset"] for r in after[p]] == list(range(len(after[p])))
    for a in answered:
        rec = after[a["partition"]][a["offset"]]
        assert (rec["txn"], rec["payload"]) == (a["txn"], a["payload"])
