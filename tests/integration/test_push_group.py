"""Group commit of pushes (src/api/push.c): concurrent push requests are
coalesced into one raft entry, yet each request gets its own answer, its
records share one stamp, offsets stay gapless and dedup verdicts across
coalesced requests are the ones separate entries would give."""
import threading


CLIENTS = 16
ROUNDS = 6
ITEMS = 10


def push_many(broker, queue, txn_of=None):
    """CLIENTS threads push ROUNDS requests of ITEMS items each, all at once
    per round. Returns {(client, round): answer list}."""
    answers = {}
    errors = []
    barrier = threading.Barrier(CLIENTS)

    def client(c):
        try:
            for r in range(ROUNDS):
                items = [{"queue": queue, "partition": "p%d" % (i % 2),
                          "payload": {"c": c, "r": r, "i": i}}
                         for i in range(ITEMS)]
                if txn_of is not None:
                    for i, it in enumerate(items):
                        it["transactionId"] = txn_of(c, r, i)
                barrier.wait(timeout=60)
                answers[(c, r)] = broker.push(items)
        except Exception as e:  # reported below, with the thread's cause
            errors.append(repr(e))
            barrier.abort()

    threads = [threading.Thread(target=client, args=(c,))
               for c in range(CLIENTS)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=120)
    assert not errors, errors
    assert len(answers) == CLIENTS * ROUNDS
    return answers


def fetch_all(broker, queue, partition):
    recs = []
    while True:
        e = broker.fetch_one(queue, partition, offset=len(recs))
        if not e["records"]:
            return recs
        recs.extend(e["records"])


def test_concurrent_pushes_share_entries_and_keep_their_answers(broker):
    before = broker.metric("queen_raft_applied_index")
    answers = push_many(broker, "grp")
    after = broker.metric("queen_raft_applied_index")
    # Coalescing happened: fewer entries than requests.
    assert after - before < CLIENTS * ROUNDS, (before, after)

    by_id = {}
    for (c, r), out in answers.items():
        assert [e["index"] for e in out] == list(range(ITEMS))
        assert all(e["status"] == "queued" for e in out), out
        assert all(e["queueName"] == "grp" for e in out)
        for i, e in enumerate(out):
            by_id[e["message_id"]] = (c, r, i, "p%d" % (i % 2), e["offset"])
    assert len(by_id) == CLIENTS * ROUNDS * ITEMS

    stamps = {}
    for part in ("p0", "p1"):
        recs = fetch_all(broker, "grp", part)
        assert [x["offset"] for x in recs] == list(range(len(recs)))
        assert len(recs) == CLIENTS * ROUNDS * ITEMS // 2
        for x in recs:
            c, r, i, p, off = by_id[x["transactionId"]]
            assert (p, off) == (part, x["offset"])
            assert x["payload"] == {"c": c, "r": r, "i": i}
            stamps.setdefault((c, r), set()).add(x["ts"])
    # One stamp per request; a client's later request has a greater stamp.
    assert all(len(s) == 1 for s in stamps.values()), stamps
    for c in range(CLIENTS):
        ts = [next(iter(stamps[(c, r)])) for r in range(ROUNDS)]
        assert ts == sorted(ts) and len(set(ts)) == ROUNDS, ts


def test_same_transaction_in_coalesced_requests_is_one_record(broker):
    # Every client pushes the same transaction ids in a round: exactly one
    # request's item is queued, every other answer is a duplicate of it.
    answers = push_many(broker, "grpdup",
                        txn_of=lambda c, r, i: "t-%d-%d" % (r, i))
    for r in range(ROUNDS):
        for i in range(ITEMS):
            got = [answers[(c, r)][i] for c in range(CLIENTS)]
            queued = [e for e in got if e["status"] == "queued"]
            assert len(queued) == 1, got
            assert all(e["status"] in ("queued", "duplicate") for e in got)
            assert len({e["message_id"] for e in got}) == 1, got
            assert len({e["offset"] for e in got}) == 1, got
    for part in ("p0", "p1"):
        recs = fetch_all(broker, "grpdup", part)
        assert len(recs) == ROUNDS * ITEMS // 2
