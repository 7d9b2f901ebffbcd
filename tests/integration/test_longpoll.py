"""Long-poll fetches cannot starve the broker (issue 13 item 10): a waiter is
re-read only when a partition it names changes, the waiters are bounded per
connection (429) and per node (503), and the bounds free up when waiters
answer or their connections close. Observed through
queen_fetch_long_poll_rereads_total and queen_fetch_waiting."""
import json
import socket
import threading
import time

from queenproc import wait_until

REREADS = "queen_fetch_long_poll_rereads_total"
WAITING = "queen_fetch_waiting"


def fetch_request(entries, **extra):
    body = {"entries": entries}
    body.update(extra)
    data = json.dumps(body).encode()
    return (b"POST /api/v1/fetch HTTP/1.1\r\nHost: t\r\n"
            b"Content-Type: application/json\r\n"
            b"Content-Length: %d\r\n\r\n" % len(data)) + data


def long_poll(queue, partition, offset, wait_ms):
    return fetch_request([{"queue": queue, "partition": partition,
                           "offset": offset}],
                         maxWaitMs=wait_ms, minBytes=1)


class Conn:
    """A raw connection: pipelined requests, Content-Length framed answers."""

    def __init__(self, port, timeout=30):
        self.s = socket.create_connection(("127.0.0.1", port),
                                          timeout=timeout)
        self.s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.buf = b""

    def send(self, data):
        self.s.sendall(data)

    def _fill(self):
        chunk = self.s.recv(65536)
        if not chunk:
            raise EOFError("connection closed")
        self.buf += chunk

    def read(self):
        """(status, headers (lower-case names), body)."""
        while b"\r\n\r\n" not in self.buf:
            self._fill()
        head, _, rest = self.buf.partition(b"\r\n\r\n")
        lines = head.decode().split("\r\n")
        status = int(lines[0].split(" ")[1])
        headers = {}
        for ln in lines[1:]:
            k, _, v = ln.partition(":")
            headers[k.strip().lower()] = v.strip()
        n = int(headers.get("content-length", "0"))
        while len(rest) < n:
            self._fill()
            head, _, rest = self.buf.partition(b"\r\n\r\n")
        self.buf = rest[n:]
        return status, headers, rest[:n]

    def close(self):
        self.s.close()


def metric(broker, name, labels=""):
    v = broker.metric(name, labels)
    assert v is not None, "%s is not in /metrics/prometheus" % name
    return v


def test_waiter_is_reread_when_its_partition_changes_not_another(broker):
    broker.push([{"queue": "w", "partition": p, "payload": 0}
                 for p in ("A", "B")])
    got = {}

    def poll():
        t0 = time.monotonic()
        got["answer"] = broker.fetch(
            [{"queue": "w", "partition": "A", "offset": 1}],
            maxWaitMs=20000, minBytes=1)
        got["elapsed"] = time.monotonic() - t0

    t = threading.Thread(target=poll)
    t.start()
    wait_until(lambda: broker.metric(WAITING) == 1, 10,
               "the long poll on A to wait")
    before = metric(broker, REREADS)
    for i in range(20):
        broker.push([{"queue": "w", "partition": "B", "payload": i}])
        broker.push([{"queue": "other", "partition": "A", "payload": i}])
    time.sleep(1.5)  # past a slice: nothing re-reads the waiter on A
    assert metric(broker, REREADS) == before
    assert t.is_alive(), "the waiter on A answered when B changed"
    broker.push([{"queue": "w", "partition": "A", "payload": "a1"}])
    t.join(15)
    assert not t.is_alive()
    assert metric(broker, REREADS) == before + 1
    recs = got["answer"]["entries"][0]["records"]
    assert [r["payload"] for r in recs] == ["a1"]
    assert got["elapsed"] < 15


def test_a_timed_waiter_on_a_does_not_answer_early_when_b_changes(broker):
    broker.push([{"queue": "t", "partition": p, "payload": 0}
                 for p in ("A", "B")])
    c = Conn(broker.port)
    try:
        t0 = time.monotonic()
        c.send(long_poll("t", "A", 1, 2500))
        wait_until(lambda: broker.metric(WAITING) == 1, 10, "the waiter")
        for i in range(10):
            broker.push([{"queue": "t", "partition": "B", "payload": i}])
        status, _, body = c.read()
        elapsed = time.monotonic() - t0
        assert status == 200
        assert json.loads(body)["entries"][0]["records"] == []
        assert elapsed >= 2.3, elapsed
        assert metric(broker, REREADS) == 0
    finally:
        c.close()


def test_past_the_connection_bound_a_long_poll_answers_429(broker_factory):
    b = broker_factory(env={"QUEEN_MAX_LONG_POLLS_PER_CONN": "2"})
    b.push([{"queue": "pc", "payload": 0}])
    c = Conn(b.port)
    try:
        for _ in range(3):
            c.send(long_poll("pc", "Default", 1, 1500))
        wait_until(lambda: b.metric(WAITING) == 2, 10, "two waiters")
        t0 = time.monotonic()
        assert c.read()[0] == 200  # at their deadline, in order
        assert c.read()[0] == 200
        status, headers, body = c.read()
        assert status == 429, body
        assert headers.get("retry-after") == "1"
        assert json.loads(body) == {
            "error": "too many long polls on this connection: 2 are waiting "
                     "(QUEEN_MAX_LONG_POLLS_PER_CONN=2)",
            "code": "too_many_requests"}
        assert time.monotonic() - t0 < 5
        assert metric(b, "queen_fetch_long_poll_refused_total",
                      'reason="connection"') == 1
        # The bound freed up with the answers: two more wait again.
        c.send(long_poll("pc", "Default", 1, 20000))
        c.send(long_poll("pc", "Default", 1, 20000))
        wait_until(lambda: b.metric(WAITING) == 2, 10, "two waiters again")
        b.push([{"queue": "pc", "payload": 1}])
        assert c.read()[0] == 200 and c.read()[0] == 200
    finally:
        c.close()


def test_past_the_node_bound_a_long_poll_answers_503(broker_factory):
    b = broker_factory(env={"QUEEN_MAX_LONG_POLLS": "2"})
    b.push([{"queue": "pn", "payload": 0}])
    conns = [Conn(b.port) for _ in range(3)]
    try:
        conns[0].send(long_poll("pn", "Default", 1, 20000))
        conns[1].send(long_poll("pn", "Default", 1, 20000))
        wait_until(lambda: b.metric(WAITING) == 2, 10, "two waiters")
        t0 = time.monotonic()
        conns[2].send(long_poll("pn", "Default", 1, 20000))
        status, headers, body = conns[2].read()
        assert status == 503, body
        assert time.monotonic() - t0 < 3
        assert headers.get("retry-after") == "1"
        assert json.loads(body) == {
            "error": "too many long polls on this node: 2 are waiting "
                     "(QUEEN_MAX_LONG_POLLS=2)",
            "code": "retry"}
        assert metric(b, "queen_fetch_long_poll_refused_total",
                      'reason="node"') == 1
        # A fetch that needs no wait is never refused.
        assert b.fetch_one("pn", "Default", 0)["records"][0]["payload"] == 0

        # Closing the waiters' connections frees the bound long before
        # their deadline.
        conns[0].close()
        conns[1].close()
        wait_until(lambda: b.metric(WAITING) == 0, 5,
                   "the closed connections' waiters to go")
        conns[2].send(long_poll("pn", "Default", 1, 20000))
        wait_until(lambda: b.metric(WAITING) == 1, 10, "a new waiter")
        b.push([{"queue": "pn", "payload": 1}])
        status, _, body = conns[2].read()
        assert status == 200
        recs = json.loads(body)["entries"][0]["records"]
        assert [r["payload"] for r in recs] == [1]
    finally:
        for c in conns:
            c.close()


def rss_kib(pid):
    """The broker's anonymous resident memory, where a kept body would be:
    its file pages (the store's map, which the store's warmer maps ahead of
    the writer) are not the heap."""
    with open("/proc/%d/status" % pid) as f:
        for line in f:
            if line.startswith("RssAnon:"):
                return int(line.split()[1])
    raise AssertionError("no RssAnon")


def test_a_parked_long_poll_does_not_keep_its_body(broker_factory):
    b = broker_factory(env={"QUEEN_MAX_LONG_POLLS_PER_CONN": "8"})
    b.push([{"queue": "big", "payload": 0}])
    pad = "x" * (8 * 1024 * 1024)
    c = Conn(b.port)
    try:
        base = rss_kib(b.proc.pid)
        for _ in range(8):  # 64 MiB of bodies
            c.send(fetch_request([{"queue": "big", "offset": 1}],
                                 pad=pad, maxWaitMs=20000, minBytes=1))
        wait_until(lambda: b.metric(WAITING) == 8, 20, "eight waiters")
        grown = rss_kib(b.proc.pid) - base
        assert grown < 24 * 1024, "RSS grew by %d KiB" % grown
        b.push([{"queue": "big", "payload": 1}])
        for _ in range(8):
            assert c.read()[0] == 200
    finally:
        c.close()


def get_health():
    return b"GET /health HTTP/1.1\r\nHost: t\r\n\r\n"


def closed_at_once(port):
    """Whether a new connection is closed by the node without an answer."""
    c = Conn(port, timeout=10)
    try:
        c.send(get_health())
        c.read()
        return False
    except (EOFError, ConnectionResetError):
        return True
    finally:
        c.close()


def test_at_the_connection_limit_the_idle_longest_makes_room(broker_factory):
    """QUEEN_MAX_CONNECTIONS: at the limit a new connection closes the one
    idle the longest, never one with a long poll parked; when every one has
    a request in flight the new one is closed at once."""
    b = broker_factory(env={"QUEEN_MAX_CONNECTIONS": "16"})
    b.push([{"queue": "cl", "payload": 0}])
    parked, idle, newer = [], [], []
    try:
        for _ in range(11):
            c = Conn(b.port)
            c.send(long_poll("cl", "Default", 1, 60000))
            parked.append(c)
        wait_until(lambda: b.metric(WAITING) == 11, 10, "eleven waiters")
        for _ in range(5):  # 16 open: the limit
            c = Conn(b.port)
            c.send(get_health())
            assert c.read()[0] == 200
            idle.append(c)
        for _ in range(5):  # each takes the place of the idle longest
            c = Conn(b.port)
            c.send(get_health())
            assert c.read()[0] == 200
            newer.append(c)
        for c in idle:
            with_eof = False
            try:
                c.send(get_health())
                c.read()
            except (EOFError, ConnectionResetError, BrokenPipeError):
                with_eof = True
            assert with_eof
        for c in newer[1:]:  # the newest still serve
            c.send(get_health())
            assert c.read()[0] == 200
        for c in newer:
            c.close()
        wait_until(lambda: b.metric(WAITING) == 11, 10,
                   "every waiter still parked")
        for _ in range(5):  # 16 with a request in flight
            c = Conn(b.port)
            c.send(get_health() + long_poll("cl", "Default", 1, 60000))
            assert c.read()[0] == 200  # one write: the long poll is in too
            parked.append(c)
        assert closed_at_once(b.port)
        parked[0].close()
        wait_until(lambda: not closed_at_once(b.port), 10,
                   "a place once a parked connection closed")
        b.push([{"queue": "cl", "payload": 1}])
        assert b.metric("queen_http_connections_rejected_total") >= 1
        assert b.metric("queen_http_connections_evicted_total") >= 5
    finally:
        for c in idle + newer + parked:
            c.close()
