"""The HTTP server on a real loop and real sockets, through tests/tools/http_echo.

Each test starts its own http_echo on a free port of 127.0.0.1 and talks to
it with raw sockets (to control pipelining and byte-exact input) or
http.client (to check keep-alive reuse)."""

import hashlib
import http.client
import json
import os
import signal
import socket
import subprocess
import threading
import time

import pytest

ROOT = os.environ.get("QUEEN_ROOT", os.path.join(os.path.dirname(__file__), "..", ".."))
TOOLS = os.environ.get("QUEEN_TOOLS", os.path.join(ROOT, "build", "tools"))
ECHO = os.path.join(TOOLS, "http_echo")
MAX_BODY = 16 * 1024 * 1024
# How long a test waits for the server (socket timeouts, exits, polls):
# generous, for a loaded machine.
DEADLINE = 60.0


class Echo:
    def __init__(self, *args):
        self.proc = subprocess.Popen(
            [ECHO, "--port", "0", *args],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
        )
        line = self.proc.stdout.readline().decode()
        assert line.startswith("listening "), line
        self.port = int(line.split()[1])

    def connect(self):
        s = socket.create_connection(("127.0.0.1", self.port), timeout=DEADLINE)
        s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        return s

    def stop(self):
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
        try:
            return self.proc.wait(timeout=DEADLINE)
        finally:
            if self.proc.poll() is None:
                self.proc.kill()
            self.proc.stdout.close()
            self.proc.stderr.close()


@pytest.fixture
def echo():
    if not os.path.exists(ECHO):
        pytest.fail("http_echo not built: %s" % ECHO)
    e = Echo("--max-body", str(MAX_BODY))
    yield e
    assert e.stop() == 0


class Reader:
    """Parses responses (Content-Length framed) off a socket."""

    def __init__(self, sock):
        self.sock = sock
        self.buf = b""

    def _fill(self):
        chunk = self.sock.recv(1 << 20)
        if not chunk:
            raise EOFError("connection closed")
        self.buf += chunk

    def response(self):
        while b"\r\n\r\n" not in self.buf:
            self._fill()
        head, self.buf = self.buf.split(b"\r\n\r\n", 1)
        lines = head.decode("latin-1").split("\r\n")
        status = int(lines[0].split()[1])
        headers = {}
        for line in lines[1:]:
            k, v = line.split(":", 1)
            headers[k.strip().lower()] = v.strip()
        n = int(headers.get("content-length", "0"))
        while len(self.buf) < n:
            self._fill()
        body, self.buf = self.buf[:n], self.buf[n:]
        return status, headers, body

    def at_eof(self):
        """True once the peer closed and nothing more is buffered."""
        try:
            self._fill()
        except EOFError:
            return self.buf == b""
        return False


def get(path):
    return ("GET %s HTTP/1.1\r\nHost: t\r\n\r\n" % path).encode()


def test_keep_alive_reuses_one_connection(echo):
    conn = http.client.HTTPConnection("127.0.0.1", echo.port, timeout=DEADLINE)
    conn.request("GET", "/kv/ns/k1")
    r = conn.getresponse()
    assert r.status == 200
    assert json.loads(r.read()) == {"ns": "ns", "key": "k1"}
    first = conn.sock
    for i in range(20):
        conn.request("POST", "/echo", body=b"x%d" % i)
        r = conn.getresponse()
        assert r.status == 200
        assert r.read() == b"x%d" % i
        assert conn.sock is first
    conn.close()


def test_hundred_pipelined_requests_answer_in_order(echo):
    s = echo.connect()
    # delays that decrease along the pipeline, so answers are computed
    # in the reverse of request order
    paths = ["/delay/%d" % ((99 - i) % 10 * 5) for i in range(100)]
    s.sendall(b"".join(get(p) for p in paths))
    rd = Reader(s)
    for p in paths:
        status, _, body = rd.response()
        assert status == 200
        assert body.decode() == "delay " + p.split("/")[2]
    s.close()


def test_body_one_byte_over_the_limit_is_413_and_closed(echo):
    s = echo.connect()
    body = b"a" * (MAX_BODY + 1)
    s.sendall(b"POST /echo HTTP/1.1\r\nContent-Length: %d\r\n\r\n" % len(body))
    s.sendall(body)
    rd = Reader(s)
    status, headers, out = rd.response()
    assert status == 413
    assert headers["connection"] == "close"
    assert json.loads(out) == {"error": "request body over the size limit", "code": "too_large"}
    s.shutdown(socket.SHUT_WR)
    assert rd.at_eof()
    s.close()
    conn = http.client.HTTPConnection("127.0.0.1", echo.port, timeout=DEADLINE)
    conn.request("GET", "/metrics")
    assert 'queen_http_refused_total{status="413"} 1\n' in conn.getresponse().read().decode()
    conn.close()


def metrics_text(port):
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=DEADLINE)
    conn.request("GET", "/metrics")
    text = conn.getresponse().read().decode()
    conn.close()
    return text


def wait_metric(port, line):
    deadline = time.monotonic() + DEADLINE
    while line not in metrics_text(port):
        assert time.monotonic() < deadline, (line, metrics_text(port))
        time.sleep(0.02)


BIG = b"b" * (800 << 10)
SMALL = b"s" * (400 << 10)


def hold_and_wait(e):
    """On e (--max-held 1 MiB): connection a sends BIG's head and its
    first 1000 bytes (held whole from its head), then b sends SMALL's head,
    which would pass the bound and waits. Returns (a, b)."""
    a = e.connect()
    a.sendall(b"POST /echo HTTP/1.1\r\nContent-Length: %d\r\n\r\n"
              % len(BIG) + BIG[:1000])
    wait_metric(e.port, "queen_http_body_bytes_held %d\n" % len(BIG))
    b = e.connect()
    b.sendall(b"POST /echo HTTP/1.1\r\nContent-Length: %d\r\n\r\n"
              % len(SMALL))
    wait_metric(e.port, "queen_http_bodies_waiting 1\n")
    return a, b


def test_a_body_past_the_held_bound_waits_for_another_connections_body():
    """A body is held from its head to its answer; while one connection's
    800 KiB body is still coming in, another's 400 KiB body would pass the
    1 MiB bound: it waits, unread, and is answered once the first was."""
    e = Echo("--max-held", str(1 << 20))
    try:
        a, b = hold_and_wait(e)
        sender = threading.Thread(target=b.sendall, args=(SMALL,))
        sender.start()  # blocks once the socket buffers are full
        b.settimeout(0.5)
        with pytest.raises(socket.timeout):
            b.recv(1)  # no answer while it waits
        b.settimeout(DEADLINE)
        a.sendall(BIG[1000:])
        status, _, out = Reader(a).response()
        assert status == 200 and out == BIG
        status, _, out = Reader(b).response()
        assert status == 200 and out == SMALL
        sender.join(DEADLINE)
        a.close()
        b.close()
        text = metrics_text(e.port)
        assert "queen_http_body_bytes_held 0\n" in text, text
        assert "queen_http_bodies_waiting 0\n" in text, text
    finally:
        e.stop()


def test_a_waiting_body_outlives_the_idle_timeout():
    """A connection whose body waits for room reads nothing on purpose:
    the idle timeout (300 ms here) must not close it while it waits."""
    e = Echo("--max-held", str(1 << 20), "--idle-ms", "300")
    try:
        a, b = hold_and_wait(e)
        # keep a's body alive past b's idle timeout, a byte at a time
        end = time.monotonic() + 1.5
        sent = 1000
        while time.monotonic() < end:
            a.sendall(BIG[sent:sent + 1])
            sent += 1
            time.sleep(0.1)
        assert "queen_http_bodies_waiting 1\n" in metrics_text(e.port)
        a.sendall(BIG[sent:])
        status, _, out = Reader(a).response()
        assert status == 200 and out == BIG
        b.sendall(SMALL)
        status, _, out = Reader(b).response()
        assert status == 200 and out == SMALL
        a.close()
        b.close()
    finally:
        e.stop()


def test_a_transfer_coding_but_chunked_is_501_closed_and_counted(echo):
    """RFC 9112 6.1: a coding the server does not decode is refused, not
    read as a plain chunked body, and counted as the server's own answer."""
    s = echo.connect()
    s.sendall(b"POST /echo HTTP/1.1\r\nTransfer-Encoding: gzip, chunked\r\n"
              b"\r\n3\r\nabc\r\n0\r\n\r\n")
    rd = Reader(s)
    status, headers, out = rd.response()
    assert status == 501
    assert headers["connection"] == "close"
    assert json.loads(out)["code"] == "not_implemented"
    s.shutdown(socket.SHUT_WR)
    assert rd.at_eof()
    s.close()
    conn = http.client.HTTPConnection("127.0.0.1", echo.port, timeout=DEADLINE)
    conn.request("GET", "/metrics")
    assert 'queen_http_refused_total{status="501"} 1\n' in \
        conn.getresponse().read().decode()
    conn.close()


def test_refused_peer_that_stays_is_closed_after_the_linger(echo):
    s = echo.connect()
    s.sendall(b"POST /echo HTTP/1.1\r\nContent-Length: %d\r\n\r\nabc" % (MAX_BODY + 1))
    rd = Reader(s)
    status, _, _ = rd.response()
    assert status == 413
    # we neither send more nor close: the server must give up on its own
    # (after 2 s; the socket timeout is DEADLINE)
    t0 = time.monotonic()
    assert rd.at_eof()
    assert time.monotonic() - t0 < DEADLINE
    s.close()


def test_body_at_the_limit_and_a_10mb_body_are_accepted(echo):
    for n in (10 * 1000 * 1000, MAX_BODY):
        body = os.urandom(n)
        conn = http.client.HTTPConnection("127.0.0.1", echo.port, timeout=DEADLINE)
        conn.request("POST", "/echo", body=body)
        r = conn.getresponse()
        assert r.status == 200
        out = r.read()
        assert len(out) == n
        assert hashlib.sha256(out).digest() == hashlib.sha256(body).digest()
        conn.close()


def test_chunked_body_is_assembled(echo):
    s = echo.connect()
    s.sendall(
        b"POST /echo HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n"
        b"5\r\nhello\r\n1;ext=1\r\n \r\n5\r\nworld\r\n0\r\n\r\n"
    )
    status, _, body = Reader(s).response()
    assert status == 200
    assert body == b"hello world"
    s.close()


def test_malformed_request_is_400_and_closed(echo):
    s = echo.connect()
    s.sendall(b"GET /kv/a/b HTTP/1.1\r\n\r\nGET /x HTTP/1.1\r\nBad Header\r\n\r\n")
    rd = Reader(s)
    status, _, _ = rd.response()
    assert status == 200
    status, headers, body = rd.response()
    assert status == 400
    assert headers["connection"] == "close"
    assert json.loads(body)["code"] == "bad_request"
    assert rd.at_eof()
    s.close()


def test_unknown_path_is_404_envelope(echo):
    conn = http.client.HTTPConnection("127.0.0.1", echo.port, timeout=DEADLINE)
    conn.request("GET", "/api/v1/nothing?x=1")
    r = conn.getresponse()
    assert r.status == 404
    assert r.getheader("content-type") == "application/json"
    assert r.read() == b'{"code":"no_such_route","error":"not found","path":"/api/v1/nothing"}'
    conn.close()


def test_expect_100_continue_gets_an_interim_answer(echo):
    s = echo.connect()
    s.sendall(b"POST /echo HTTP/1.1\r\nExpect: 100-continue\r\nContent-Length: 3\r\n\r\n")
    rd = Reader(s)
    status, _, _ = rd.response()
    assert status == 100
    s.sendall(b"abc")
    status, _, body = rd.response()
    assert (status, body) == (200, b"abc")
    s.close()


def test_metrics_count_requests_by_route_and_status(echo):
    conn = http.client.HTTPConnection("127.0.0.1", echo.port, timeout=DEADLINE)
    for _ in range(3):
        conn.request("GET", "/kv/a/b")
        conn.getresponse().read()
    conn.request("GET", "/nope")
    conn.getresponse().read()
    conn.request("GET", "/metrics")
    text = conn.getresponse().read().decode()
    assert 'queen_http_requests_total{route="/kv/:ns/*key",status="200"} 3\n' in text
    assert 'queen_http_requests_total{route="unmatched",status="404"} 1\n' in text
    assert "queen_http_connections 1\n" in text
    conn.close()


def wait_inflight(echo, want):
    deadline = time.monotonic() + DEADLINE
    while time.monotonic() < deadline:
        conn = http.client.HTTPConnection("127.0.0.1", echo.port, timeout=DEADLINE)
        conn.request("GET", "/inflight")
        n = int(conn.getresponse().read())
        conn.close()
        if n >= want:
            return
        time.sleep(0.01)
    pytest.fail("no request in flight after %.0f s" % DEADLINE)


def test_sigterm_answers_the_request_in_flight_then_exits_0():
    e = Echo()
    try:
        slow = e.connect()
        idle = e.connect()
        # 3 s: still in flight when the signal comes on a loaded machine
        slow.sendall(get("/delay/3000"))
        wait_inflight(e, 1)
        e.proc.send_signal(signal.SIGTERM)
        status, headers, body = Reader(slow).response()
        assert (status, body) == (200, b"delay 3000")
        assert headers["connection"] == "close"
        assert Reader(idle).at_eof()
        assert e.proc.wait(timeout=DEADLINE) == 0
    finally:
        assert e.stop() == 0


def test_peer_gone_before_the_answer_does_not_hurt_the_server(echo):
    for _ in range(5):
        s = echo.connect()
        s.sendall(get("/delay/50"))
        s.close()
    # answers to vanished peers are dropped and their connections freed;
    # the server still serves
    want = 'queen_http_requests_total{route="/delay/:ms",status="200"} 5\n'
    conn = http.client.HTTPConnection("127.0.0.1", echo.port, timeout=DEADLINE)
    deadline = time.monotonic() + DEADLINE
    while True:
        conn.request("GET", "/metrics")
        text = conn.getresponse().read().decode()
        if want in text and "queen_http_connections 1\n" in text:
            break
        assert time.monotonic() < deadline, text
        time.sleep(0.01)
    conn.close()


def test_idle_connection_is_closed_but_a_slow_handler_is_waited_for():
    e = Echo("--idle-ms", "300")
    try:
        idle = e.connect()
        half = e.connect()
        half.sendall(b"GET /kv/a/b HTTP/1.1\r\nHost: t\r\n")  # never finished
        slow = e.connect()
        slow.sendall(get("/delay/900"))
        t0 = time.monotonic()
        assert Reader(idle).at_eof()
        assert Reader(half).at_eof()
        assert time.monotonic() - t0 < DEADLINE
        status, headers, body = Reader(slow).response()
        assert (status, body) == (200, b"delay 900")
        assert "connection" not in headers
    finally:
        assert e.stop() == 0


def test_an_absolute_form_target_is_served_as_its_path(echo):
    """RFC 9112 3.2.2: a server accepts a request target in absolute form
    (what a client speaking through a proxy sends); it was answered 404."""
    s = echo.connect()
    for target in ("http://127.0.0.1:%d/kv/a/b%%20c" % echo.port,
                   "HTTP://t/kv/a/b%20c?x=1", "/kv/a/b%20c"):
        s.sendall(("GET %s HTTP/1.1\r\nHost: t\r\n\r\n" % target).encode())
        status, _, body = Reader(s).response()
        assert (status, body) == (200, b'{"ns":"a","key":"b c"}'), target
    s.sendall(b"GET http://t HTTP/1.1\r\nHost: t\r\n\r\n")
    assert Reader(s).response()[0] == 404  # "/": no such route here
    s.close()


def closed_by_peer(sock):
    """True once the server closed sock (FIN or reset), nothing unread."""
    try:
        return sock.recv(1 << 16) == b""
    except (ConnectionResetError, BrokenPipeError):
        return True


def test_a_connection_without_a_request_head_is_closed_soon():
    """A connection that sends nothing, or trickles its head a byte at a
    time, held one of the server's connections for the whole idle timeout
    (120 s: 4096 of them, no token needed, locked every client out). It is
    closed first_head_ms after its accept however its bytes come; one whose
    request came in lives on under the idle timeout."""
    e = Echo("--first-head-ms", "800", "--idle-ms", "60000")
    try:
        served = e.connect()
        served.sendall(get("/kv/a/b"))
        assert Reader(served).response()[0] == 200
        silent = e.connect()
        trickle = e.connect()
        t0 = time.monotonic()
        head = b"GET /kv/a/b HTTP/1.1\r\nHost: t\r\nX-Pad: %s\r\n" % (
            b"a" * 40)
        sent = 0
        for ch in head:
            try:
                trickle.sendall(bytes([ch]))
            except OSError:
                break
            sent += 1
            time.sleep(0.1)  # the pace of a trickling client, not a wait
        # cut while it trickled (~8 s of bytes), not once it went quiet
        assert sent < len(head) // 2, (sent, len(head))
        assert closed_by_peer(silent)
        assert closed_by_peer(trickle)
        assert time.monotonic() - t0 < DEADLINE
        served.sendall(get("/kv/a/b"))
        assert Reader(served).response()[0] == 200
    finally:
        assert e.stop() == 0


def metric_of(s, name):
    """A counter of the echo server, read over the open connection s."""
    s.sendall(get("/metrics"))
    text = Reader(s).response()[2].decode()
    for line in text.splitlines():
        if line.startswith(name + " "):
            return int(line.split()[1])
    raise AssertionError("%s not in %s" % (name, text))


def test_at_the_limit_a_new_connection_closes_the_one_idle_longest():
    """Clients that keep connections they do not use cannot lock out one
    that has a request to send: at the limit the connection idle the
    longest is closed to make room, and the others stay."""
    e = Echo("--max-conns", "3")
    try:
        kept = []
        for _ in range(3):
            s = e.connect()
            s.sendall(get("/kv/a/b"))
            assert Reader(s).response()[0] == 200
            kept.append(s)
        kept[1].sendall(get("/kv/a/c"))  # kept[0] is now the idle longest
        assert Reader(kept[1]).response()[0] == 200
        new = e.connect()
        new.sendall(get("/kv/a/d"))
        assert Reader(new).response()[0] == 200
        assert Reader(kept[0]).at_eof()
        for s in (kept[1], kept[2]):
            s.sendall(get("/kv/a/e"))
            assert Reader(s).response()[0] == 200
        assert metric_of(new, "queen_http_connections_evicted_total") == 1
        assert metric_of(new, "queen_http_connections_rejected_total") == 0
        for s in kept + [new]:
            s.close()
    finally:
        assert e.stop() == 0


def test_at_the_limit_with_every_connection_busy_a_new_one_is_closed():
    """A connection with a request in flight is never closed to make room:
    when none is idle the new connection is closed at once."""
    e = Echo("--max-conns", "2")
    try:
        busy, readers = [], []
        for _ in range(2):
            s = e.connect()
            # one write: once the first is answered the second is in too
            s.sendall(get("/kv/a/b") + get("/delay/3000"))
            rd = Reader(s)
            assert rd.response()[0] == 200
            busy.append(s)
            readers.append(rd)
        probe = e.connect()
        assert Reader(probe).at_eof()
        probe.close()
        for rd in readers:
            assert rd.response()[0] == 200
        assert metric_of(busy[0], "queen_http_connections_rejected_total") == 1
        assert metric_of(busy[0], "queen_http_connections_evicted_total") == 0
        for s in busy:
            s.close()
    finally:
        assert e.stop() == 0


def test_connections_lingering_after_an_error_count_toward_the_limit():
    """A connection answered an error lingers (its socket open, reading to
    EOF) for up to 2 s: the limit counts it, so a client sending one bad
    request after another cannot hold more sockets than the limit."""
    e = Echo("--max-conns", "2")
    try:
        bad = []
        for _ in range(2):
            s = e.connect()
            s.sendall(b"BAD\x01 / HTTP/1.1\r\n\r\n")
            assert Reader(s).response()[0] == 400
            bad.append(s)  # no FIN from us: the node lingers
        # Closed at once: no room.  Nothing is sent first, so the close is
        # a FIN (unread data would make it a reset); with room, the node
        # would wait for a request and this read would time out.
        probe = e.connect()
        assert Reader(probe).at_eof()
        probe.close()
        for s in bad:
            s.close()
        t0 = time.monotonic()
        while True:  # room again once the lingering sockets closed
            s = e.connect()
            s.sendall(get("/kv/a/b"))
            try:
                if Reader(s).response()[0] == 200:
                    break
            except (EOFError, ConnectionResetError):
                pass
            finally:
                s.close()
            assert time.monotonic() - t0 < DEADLINE
    finally:
        assert e.stop() == 0


def test_sigterm_writes_every_pipelined_answer_then_exits_0():
    e = Echo()
    try:
        s = e.connect()
        # seconds long: all three still in flight when the signal comes on a
        # loaded machine
        s.sendall(get("/delay/3000") + get("/delay/1000") + get("/delay/2000"))
        wait_inflight(e, 3)
        e.proc.send_signal(signal.SIGTERM)
        rd = Reader(s)
        got = [rd.response() for _ in range(3)]
        assert [(st, b) for st, _, b in got] == [
            (200, b"delay 3000"),
            (200, b"delay 1000"),
            (200, b"delay 2000"),
        ]
        assert "connection" not in got[0][1]
        assert got[2][1]["connection"] == "close"
        assert rd.at_eof()
        assert e.proc.wait(timeout=DEADLINE) == 0
    finally:
        assert e.stop() == 0
