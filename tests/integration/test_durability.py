"""kill -9 under four pushing clients, then a restart on the same directory:
every push answered 201 is there with the same offset, ts, transactionId and
bytes; offsets stay gapless; a retried push answers duplicate."""
import http.client
import json
import signal
import threading

import rawjson
from queenproc import wait_until

PARTITIONS = ["p0", "p1", "p2"]


def payload_text(client, seq, i):
    # spacing and 1.50 must survive byte for byte
    return ('{"c": %d, "s": %d, "i": %d, "price": 1.50}' %
            (client, seq, i)).encode()


def pusher(port, client, stop, answered, lock):
    seq = 0
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    while not stop.is_set():
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
        except (OSError, http.client.HTTPException):
            return  # the broker died: this push may or may not be stored
        if r.status != 201:
            continue
        out = json.loads(data)
        with lock:
            for (txn, part, pl), e in zip(items, out):
                assert e["status"] == "queued", e
                answered.append({"txn": txn, "partition": part,
                                 "payload": pl, "offset": e["offset"],
                                 "message_id": e["message_id"]})
        seq += 1


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
    stop = threading.Event()
    lock = threading.Lock()
    answered = []
    threads = [threading.Thread(target=pusher,
                                args=(broker.port, c, stop, answered, lock))
               for c in range(4)]
    for t in threads:
        t.start()
    wait_until(lambda: len(answered) >= 2000, 60, "2000 answered records")
    # What a reader saw before the crash must not change after it.
    seen_before = {p: read_all(broker, p) for p in PARTITIONS}
    wait_until(lambda: len(answered) >= 3000, 60, "3000 answered records")
    broker.kill9()
    stop.set()
    for t in threads:
        t.join(20)
    with lock:
        answered = list(answered)

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
    stop = threading.Event()
    lock = threading.Lock()
    answered = []
    threads = [threading.Thread(target=pusher,
                                args=(broker.port, c, stop, answered, lock))
               for c in range(4)]
    for t in threads:
        t.start()
    wait_until(lambda: len(answered) >= 1000, 60, "1000 answered records")
    broker.signal(signal.SIGTERM)
    assert broker.wait_exit(30) == 0, broker.stderr()
    stop.set()
    for t in threads:
        t.join(20)
    err = broker.stderr()
    assert "Assertion" not in err and " ERROR " not in err, err
    broker._reap()
    broker.start()
    after = {p: read_all(broker, p) for p in PARTITIONS}
    for p in PARTITIONS:
        assert [r["offset"] for r in after[p]] == list(range(len(after[p])))
    with lock:
        for a in answered:
            rec = after[a["partition"]][a["offset"]]
            assert (rec["txn"], rec["payload"]) == (a["txn"], a["payload"])
