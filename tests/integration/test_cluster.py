"""Three build/queen processes as one raft cluster (issue 14 items 1 and 2):
boot from empty directories, /health and /status, writes sent to a
follower forwarded to the leader and read back on the node asked, 503
no_leader without a majority, restart and wipe of a node, kill -9 of the
leader (alone and under a push load), bad peers lists, rogue raft peers,
and runtime membership (marked `membership`, so a build without it can
deselect it with -m "not membership").

Every wait is a deadline on a real condition (queenproc.wait_until); the
"never" checks (no term change while a rogue runs) poll the condition for
the whole span they speak about."""

import hashlib
import hmac
import http.client
import json
import os
import re
import shutil
import signal
import socket
import struct
import subprocess
import tempfile
import threading
import time

import pytest

import loglines
from cluster import TOKEN, Cluster, Node, raw_connect
from queenproc import Broker, free_ports, queen_bin, wait_until

WRONG_TOKEN = "not-the-cluster-token-9876543210"


@pytest.fixture
def make_cluster(request):
    """Clusters in a temporary directory, every process killed at the end;
    the logs copied to $QUEEN_TEST_KEEP_LOGS/<test>/ when that is set."""
    tmp = tempfile.TemporaryDirectory(prefix="queen-cluster-")
    made = []

    def make(n=3, **kw):
        c = Cluster(os.path.join(tmp.name, "c%d" % len(made)), n=n, **kw)
        made.append(c)
        return c

    make.tmp = tmp.name
    yield make
    for c in made:
        c.close()
    _keep_logs(tmp.name, request.node.name)
    tmp.cleanup()


@pytest.fixture(scope="module")
def shared():
    """One cluster for the tests that only write through it (booted once
    to keep the file's runtime down)."""
    tmp = tempfile.TemporaryDirectory(prefix="queen-cluster-")
    c = Cluster(os.path.join(tmp.name, "shared"))
    try:
        c.start(timeout=30)
        yield c
    finally:
        c.close()
        _keep_logs(tmp.name, "shared")
        tmp.cleanup()


def _keep_logs(root, name):
    keep = os.environ.get("QUEEN_TEST_KEEP_LOGS")
    if not keep:
        return
    dest = os.path.join(keep, re.sub(r"[^A-Za-z0-9_.-]", "_", name))
    for dirpath, _, files in os.walk(root):
        for f in files:
            if f.startswith("queen-stderr-"):
                rel = os.path.relpath(dirpath, root).replace(os.sep, "-")
                os.makedirs(dest, exist_ok=True)
                shutil.copy(os.path.join(dirpath, f),
                            os.path.join(dest, "%s-%s" % (rel, f)))


def header(r, name):
    for k, v in r.headers.items():
        if k.lower() == name.lower():
            return v
    return None


def items(queue, txns, partition="Default"):
    return [{"queue": queue, "partition": partition, "transactionId": t,
             "payload": {"t": t}} for t in txns]


def check_503(c, r):
    """A 503 of a write: Retry-After 1, the reference's envelope, and a
    leader hint, when there is one, that is a member's HTTP address (what
    a client can send the write to)."""
    assert header(r, "Retry-After") == "1", r.headers
    body = r.json()
    assert isinstance(body.get("error"), str) and body.get("code"), body
    if "leader" in body:
        assert body["leader"] in [n.http_addr for n in c.nodes.values()], \
            (body, [n.http_addr for n in c.nodes.values()])


def push_ok(c, node, its, timeout=30):
    """Push through node, retrying 503s and refused connections until a
    201 (same transactionIds, so a retry is deduplicated); the answer."""
    def once():
        try:
            r = node.post("/api/v1/push", {"items": its}, timeout=20)
        except OSError:
            return None
        if r.status == 503:
            check_503(c, r)
            return None
        assert r.status == 201, (node.id, r)
        return r.json()
    return wait_until(once, timeout, "a push through node %d" % node.id,
                      interval=0.1)


def wait_settling(node, timeout=15):
    """node's /health answers 503 settling (no leader known)."""
    def settling():
        if node.proc is not None and node.proc.poll() is not None:
            raise AssertionError("node %d exited with %d:\n%s" % (
                node.id, node.proc.returncode, node.logs()[-4000:]))
        h = node.health()
        return h is not None and h[0] == 503 and \
            h[1].get("status") == "settling"
    wait_until(settling, timeout, "node %d to report settling" % node.id)


# --------------------------------------------------------------------------
# Boot, /health, /status


def test_three_nodes_elect_one_leader_health_and_status(shared):
    c = shared
    lid = c.leader(timeout=30)
    terms = set()
    for node in c.nodes.values():
        status, body = node.health()
        assert status == 200, (node.id, body)
        assert body["status"] == "healthy"
        r = body["raft"]
        assert r["role"] == ("leader" if node.id == lid else "follower"), r
        assert r["leaderId"] == lid, r
        assert r["leader"] == c[lid].http_addr, r
        for k in ("term", "applied", "commit"):
            assert isinstance(r[k], int) and r[k] >= 0, (k, r)
        assert r["term"] >= 1
        terms.add(r["term"])
    assert len(terms) == 1, terms
    for node in c.nodes.values():
        r = node.get("/status")
        assert r.status == 200, r
        members = sorted(r.json()["cluster"]["members"],
                         key=lambda m: m["id"])
        assert [m["id"] for m in members] == [1, 2, 3]
        for m in members:
            want = {"id": m["id"], "raft": c[m["id"]].raft_addr,
                    "http": c[m["id"]].http_addr, "role": "voter",
                    "self": m["id"] == node.id, "leader": m["id"] == lid}
            assert {k: m.get(k) for k in want} == want, (node.id, m)
        assert TOKEN not in r.body.decode()
        assert TOKEN not in node.logs()


def test_lone_node_settles_and_never_leads(make_cluster):
    """One node of three, alone: 503 settling with no leader, and it never
    makes itself leader of a cluster of its own (the bug of issue 14)."""
    c = make_cluster()
    node = c.start_node(1)
    wait_settling(node, timeout=30)
    deadline = time.monotonic() + 4  # four election timeouts
    while time.monotonic() < deadline:
        c.check_alive()
        status, body = node.health()
        assert status == 503 and body["status"] == "settling", body
        assert body["raft"]["role"] != "leader", body
        assert body["raft"]["leader"] is None, body
        time.sleep(0.1)
    t0 = time.monotonic()
    r = node.post("/api/v1/push", {"items": items("lone", ["x"])},
                  timeout=30)
    assert time.monotonic() - t0 <= 15
    assert r.status == 503 and r.json()["code"] == "no_leader", r
    check_503(c, r)


# --------------------------------------------------------------------------
# Every node serves every route


def test_push_on_a_follower_is_forwarded_and_read_on_that_node(shared):
    c = shared
    lid = c.leader()
    for f in c.followers():
        q = "fwd-%d" % f.id
        txns = ["%s-%d" % (q, i) for i in range(5)]
        r = f.post("/api/v1/push", {"items": items(q, txns)})
        assert r.status == 201, r
        ans = r.json()
        assert [a["status"] for a in ans] == ["queued"] * 5, ans
        assert [a["offset"] for a in ans] == list(range(5)), ans
        assert [a["transaction_id"] for a in ans] == txns
        # Read-your-write on the node asked, with no wait.
        got = Cluster.records(f, q)
        assert got == [(i, t, {"t": t}) for i, t in enumerate(txns)], got
        ch = f.changed([{"queue": q, "since": None}])
        parts = ch["entries"][0]["partitions"]
        assert [(p["name"], p["lastOffset"]) for p in parts] == \
            [("Default", 4)], ch
        # The same transactionIds through the other follower: duplicates
        # with the original offsets (the dedup state is the cluster's).
        other = [n for n in c.followers() if n.id != f.id][0]
        r = other.post("/api/v1/push", {"items": items(q, txns[:2])})
        assert r.status == 201, r
        assert [(a["status"], a["offset"]) for a in r.json()] == \
            [("duplicate", 0), ("duplicate", 1)], r
    # A refusal is the leader's too, word for word.
    bad = [n.post("/api/v1/push", {"items": "x"}) for n in
           [c[lid]] + c.followers()]
    assert all(b.status == 400 and b.json() == bad[0].json() for b in bad), \
        bad
    c.wait_converged()
    for f in c.followers():
        q = "fwd-%d" % f.id
        logs = c.all_records(q)
        assert len(logs[lid]) == 5
        assert all(v == logs[lid] for v in logs.values()), logs


def test_kv_writes_on_a_follower_are_forwarded_and_read_on_that_node(shared):
    c = shared
    f = c.followers()[0]
    r = f.post("/api/v1/kv", {"operations": [
        {"op": "put", "ns": "cl", "key": "a", "value": {"v": 1},
         "forever": True},
        {"op": "incr", "ns": "cl", "key": "n", "forever": True}]})
    assert r.status == 200, r
    res = r.json()["results"]
    assert res[0]["applied"] is True and res[0]["version"] > 0, res
    g = f.get("/api/v1/kv/cl/a")
    assert g.status == 200, g
    assert g.json()["found"] is True and g.json()["value"] == {"v": 1}, g
    assert g.json()["version"] == res[0]["version"]

    r = f.request("PUT", "/api/v1/kv/cl/b", body={"value": "two",
                                                  "forever": True})
    assert r.status == 200, r
    assert r.json()["applied"] is True, r
    g = f.get("/api/v1/kv/cl/b")
    assert g.json().get("value") == "two", g
    # A conditional write through the other follower sees the cluster's
    # version of the key.
    other = [n for n in c.followers() if n.id != f.id][0]
    r = other.request("PUT", "/api/v1/kv/cl/b",
                      body={"value": "three", "forever": True,
                            "expect": g.json()["version"]})
    assert r.status == 200 and r.json()["applied"] is True, r
    assert other.get("/api/v1/kv/cl/b").json()["value"] == "three"
    c.wait_converged()
    for node in c.nodes.values():
        assert node.get("/api/v1/kv/cl/b").json()["value"] == "three"


def test_configure_on_a_follower_is_forwarded_and_read_on_that_node(shared):
    c = shared
    f = c.followers()[0]
    r = f.post("/api/v1/configure", {"queue": "cfg-f",
                                     "options": {"retentionSeconds": 77}})
    assert r.status == 200, r
    assert r.json()["configured"] is True
    assert r.json()["options"]["retentionSeconds"] == 77
    names = [q["name"] for q in
             f.get("/api/v1/resources/queues").json()["queues"]]
    assert "cfg-f" in names, names
    # A merge of nothing through the leader answers the stored options.
    lead = c.leader_node()
    r = lead.post("/api/v1/configure", {"queue": "cfg-f", "options": {}})
    assert r.status == 200 and r.json()["options"]["retentionSeconds"] == 77
    r = f.post("/api/v1/configure", {"queue": "", "options": {}})
    assert r.status == 400 and r.json()["code"] == "bad_request", r


# --------------------------------------------------------------------------
# Rogue raft peers


def _handshake(claimed_id, addr):
    """libraft's TCP handshake (protocol 1, server id, padded address)."""
    a = addr.encode() + b"\0"
    pad = (len(a) + 7) // 8 * 8
    return struct.pack("<QQQ", 1, claimed_id, pad) + a.ljust(pad, b"\0")


def _request_vote(term, candidate):
    """A RequestVote with disrupt_leader set and a log far ahead."""
    return struct.pack("<QQ", 3, 40) + struct.pack(
        "<QQQQQ", term, candidate, 1 << 40, term - 1, 1)


def _recv_exact(sock, n, timeout):
    """n bytes from sock, or what came before it closed or the deadline."""
    sock.settimeout(timeout)
    out = b""
    try:
        while len(out) < n:
            b = sock.recv(n - len(out))
            if not b:
                break
            out += b
    except OSError:
        pass
    return out


def _wrong_proof_hello(sock, claimed_id, addr, token, to_id):
    """Speak the transport's handshake (src/raft/transport.h) as a peer
    that knows the protocol but not the token: read the challenge, answer
    a raft hello proved with token for the listener to_id. Returns the
    verdict's status byte, or None when the node closed without one."""
    ch = _recv_exact(sock, 40, 5)
    assert len(ch) == 40 and ch[:4] == b"QNRT" and ch[4] == 2 and \
        ch[5] == 1, "no challenge from the raft port: %r" % ch
    nonce_s = ch[8:40]
    a = addr.encode()
    head = b"QNRT" + bytes([2, 2, 1, len(a)]) + struct.pack(
        ">Q", claimed_id) + os.urandom(32)
    proof = hmac.new(token.encode(), b"queen raft dial v2" + nonce_s +
                     head + a + struct.pack(">Q", to_id),
                     hashlib.sha256).digest()
    try:
        sock.sendall(head + proof + a)
    except OSError:
        return None
    v = _recv_exact(sock, 40, 5)
    return v[6] if len(v) == 40 else None


def _closed_by_peer(sock, timeout):
    """True once the other end closes (or resets) the connection."""
    sock.settimeout(0.2)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            if sock.recv(4096) == b"":
                return True
        except socket.timeout:
            continue
        except OSError:
            return True
    return False


def _raft_warns(node):
    return _raft_warn_lines(node.logs())


def _raft_warn_lines(text):
    """The warn lines of a log that speak of raft."""
    out = []
    for r in loglines.parse(text):
        text = (r["area"] + " " + r["msg"]).lower()
        if r["level"] == "warn" and "raft" in text:
            out.append(r)
    return out


def test_rogue_raw_tcp_on_the_raft_port_is_refused(shared):
    c = shared
    lid = c.leader()
    term = c[lid].raft()["term"]
    before = {n.id: len(_raft_warns(n)) for n in c.nodes.values()}
    victims = [c[lid]] + c.followers()[:1]
    for v in victims:
        s = raw_connect(v.raft_addr)
        s.sendall(os.urandom(256))
        assert _closed_by_peer(s, 10), "garbage kept open by %d" % v.id
        s.close()
        # A well-formed libraft handshake claiming to be another member,
        # then a vote request 1000 terms ahead that would depose the
        # leader if it were let through.
        other = [n for n in c.nodes.values() if n.id != v.id][0]
        s = raw_connect(v.raft_addr)
        try:
            s.sendall(_handshake(other.id, other.raft_addr) +
                      _request_vote(term + 1000, other.id))
        except OSError:
            pass
        assert _closed_by_peer(s, 10), \
            "an unauthenticated handshake kept open by %d" % v.id
        s.close()
        # The node's own handshake, proved with the wrong token: refused
        # (a verdict other than 0, or a close), and then closed even if
        # the rogue goes on with a vote request.
        s = raw_connect(v.raft_addr)
        verdict = _wrong_proof_hello(s, other.id, other.raft_addr,
                                     WRONG_TOKEN, v.id)
        assert verdict != 0, "a wrong token accepted by %d" % v.id
        try:
            s.sendall(_request_vote(term + 2000, other.id))
        except OSError:
            pass
        assert _closed_by_peer(s, 10), \
            "a connection with a bad proof kept open by %d" % v.id
        s.close()
    for v in victims:
        wait_until(lambda: len(_raft_warns(v)) >= before[v.id] + 2, 10,
                   "two warn lines about refused raft connections on %d"
                   % v.id)
    deadline = time.monotonic() + 3
    while time.monotonic() < deadline:
        for node in c.nodes.values():
            r = node.raft()
            assert r is not None and r["leaderId"] == lid and \
                r["term"] == term, (node.id, r)
        time.sleep(0.1)
    for node in c.nodes.values():
        assert WRONG_TOKEN not in node.logs() and TOKEN not in node.logs()
    push_ok(c, c[lid], items("after-rogue", ["r1"]))


def _relay_once(srv, target_addr, timeout):
    """Sit on a stopped member's raft address (srv, listening) as a relay
    with no token: take the first connection a member dials to it, open one
    to target_addr, pass the target's challenge to the dialer and the
    dialer's hello to the target, then the target's answer (if any) back.
    Returns (the target's verdict byte or None, the dialer's socket)."""
    srv.settimeout(timeout)
    dial, _ = srv.accept()
    dial.settimeout(timeout)
    host, port = target_addr.rsplit(":", 1)
    up = socket.create_connection((host, int(port)), timeout=timeout)
    try:
        dial.sendall(_recv_exact(up, 40, timeout))
        hello = _recv_exact(dial, 80, timeout)
        assert len(hello) == 80, "the dialer sent no hello: %r" % hello
        hello += _recv_exact(dial, hello[7], timeout)
        up.sendall(hello)
        verdict = _recv_exact(up, 40, timeout)
        if len(verdict) == 40:
            dial.sendall(verdict)
        return (verdict[6] if len(verdict) == 40 else None), dial
    finally:
        up.close()


@pytest.mark.parametrize("target", ["follower", "leader"])
def test_a_relay_on_a_stopped_members_address_gets_no_stream(make_cluster,
                                                             target):
    """A process that took the raft address of a member that is down gets
    the leader's dials meant for that member. Passing them on to another
    member, or back to the leader itself, must not make an authenticated
    stream: the proof names the node it is meant for (transport.h (2)).
    Version 1 let such a relay read the replication stream, move the term
    with a forged AppendEntries, and crash the leader."""
    c = make_cluster()
    lid = c.start()
    down, other = [n for n in c.nodes.values() if n.id != lid]
    c.kill9(down.id)
    srv = socket.socket()
    srv.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    host, port = down.raft_addr.rsplit(":", 1)
    srv.bind((host, int(port)))
    srv.listen(8)
    to = other.raft_addr if target == "follower" else c[lid].raft_addr
    term = c[lid].raft()["term"]
    try:
        for _ in range(3):  # the leader dials again after each refusal
            verdict, dial = _relay_once(srv, to, 10)
            try:
                assert verdict != 0, \
                    "node at %s accepted a hello meant for node %d" % (
                        to, down.id)
                # whatever the relay says next, the leader hands nothing
                # over: it closes (an accepted stream would carry entries)
                assert _closed_by_peer(dial, 10), \
                    "the leader kept a relayed connection open"
            finally:
                dial.close()
    finally:
        srv.close()
    c.check_alive()
    assert c.leader(timeout=10) == lid
    assert c[lid].raft()["term"] == term
    push_ok(c, c[lid], items("relay", ["after"]), timeout=10)


def test_silent_strangers_on_the_raft_ports_do_not_stop_an_election(
        make_cluster):
    """Connections that never say a word hold a handshake slot each until
    the handshake times out. A stranger that holds many from one address
    (127.0.0.2 here; the members dial from 127.0.0.1) and reopens each one
    the node closes must leave room for the members: with one bound for
    every caller, the survivors of a leader's kill -9 stayed candidates for
    as long as the flood lasted."""
    import selectors
    import threading
    c = make_cluster()
    lid = c.start()
    survivors = [n for n in c.nodes.values() if n.id != lid]
    # Restarted under a leader, the followers have no connection to each
    # other yet (a follower only answers the leader): the election after
    # the kill must dial through the flood.
    for n in survivors:
        c.restart(n.id)
        wait_until(lambda n=n: (n.raft() or {}).get("leaderId") == lid, 30,
                   "node %d following %d again" % (n.id, lid))
    assert c.leader(timeout=10) == lid
    sel = selectors.DefaultSelector()
    stop = threading.Event()
    held = {"n": 0}

    def hold(addr):
        host, port = addr.rsplit(":", 1)
        s = socket.socket()
        s.setblocking(False)
        s.bind(("127.0.0.2", 0))
        try:
            s.connect((host, int(port)))
        except BlockingIOError:
            pass
        sel.register(s, selectors.EVENT_READ, addr)
        held["n"] += 1

    def flood():
        for n in survivors:
            for _ in range(200):
                hold(n.raft_addr)
        while not stop.is_set():
            for key, _ in sel.select(0.05):
                try:
                    d = key.fileobj.recv(4096)
                except OSError:
                    d = b""
                if not d:  # closed by the node: take the slot again
                    sel.unregister(key.fileobj)
                    key.fileobj.close()
                    hold(key.data)
        for key in list(sel.get_map().values()):
            key.fileobj.close()

    refused0 = {n.id: n.metric("queen_raft_connections_refused_total") or 0
                for n in survivors}
    t = threading.Thread(target=flood, daemon=True)
    t.start()
    try:
        # the flood is on once every survivor turns some of it away
        wait_until(lambda: all(
            (n.metric("queen_raft_connections_refused_total") or 0) >=
            refused0[n.id] + 16 for n in survivors), 15,
            "the survivors refusing the flood's connections")
        # a caller from another address (the members' own) is still
        # answered at once with a challenge, not turned away as busy
        for n in survivors:
            s = raw_connect(n.raft_addr)
            try:
                ch = _recv_exact(s, 40, 5)
            finally:
                s.close()
            assert ch[:4] == b"QNRT", \
                "node %d turned a caller away during the flood: %r" % (
                    n.id, ch)
        c.kill9(lid)
        new = c.leader(timeout=20, nodes=survivors)
        assert new != lid
        assert t.is_alive(), "the flood ended before the election"
        push_ok(c, c[new], items("flood", ["during"]), timeout=10)
    finally:
        stop.set()
        t.join(10)


def test_wrong_token_node_never_joins(make_cluster):
    """A process with the right peers list and node 3's addresses but the
    wrong token, while the real node 3 is down: the cluster's leader and
    term do not move, the rogue never knows a leader, and nothing written
    to the cluster reaches it."""
    c = make_cluster()
    c.start()
    c.kill9(3)
    lid = c.leader(timeout=15, nodes=[c[1], c[2]])
    term = c[lid].raft()["term"]
    push_ok(c, c[lid], items("guarded", ["g0"]))
    rogue_dir = os.path.join(c.root, "rogue", "data")
    os.makedirs(rogue_dir)
    rogue = Broker(rogue_dir, env=c.env_of(3, token=WRONG_TOKEN),
                   port=c[3].port, raft_port=c[3].raft_port)
    before = len(_raft_warns(c[1])) + len(_raft_warns(c[2]))
    rogue.start(wait=False)
    try:
        # It does try: a refused raft connection is logged on one side.
        wait_until(lambda: len(_raft_warns(c[1])) + len(_raft_warns(c[2]))
                   > before or _raft_warn_lines(rogue.stderr()), 15,
                   "a warn line about the rogue's refused raft connection")
        seen_503 = False
        deadline = time.monotonic() + 8
        n = 1
        while time.monotonic() < deadline:
            assert rogue.proc.poll() is None, rogue.stderr()
            for node in (c[1], c[2]):
                r = node.raft()
                assert r is not None and r["leaderId"] == lid and \
                    r["term"] == term, (node.id, r)
            try:
                h = rogue.get("/health", timeout=5)
                assert h.status != 200, h
                if h.status == 503:
                    assert h.json()["status"] == "settling", h
                    seen_503 = True
            except OSError:
                pass
            push_ok(c, c[lid], items("guarded", ["g%d" % n]))
            n += 1
            time.sleep(0.2)
        assert seen_503, "the rogue never answered /health"
        assert Cluster.records(rogue, "guarded") == []
        assert len(Cluster.records(c[lid], "guarded")) == n
    finally:
        if rogue.proc is not None:
            rogue.kill9()
    # The real node 3 comes back and gets everything.
    c.start_node(3)
    c.wait_converged(timeout=30)
    logs = c.all_records("guarded")
    assert len(logs[3]) == n and logs[3] == logs[lid]


# --------------------------------------------------------------------------
# Bad peers lists


def _peers_case(case):
    """(environment additions, fragments of which the FATAL line must name
    one) for one bad configuration of node 2."""
    ports = free_ports(24)
    r, h = ports[:12], ports[12:]

    def entry(i, k=None):
        k = i if k is None else k
        return "%d=127.0.0.1:%d/127.0.0.1:%d" % (i, r[k], h[k])
    good = [entry(1), entry(2), entry(3)]
    listen = "127.0.0.1:%d" % r[2]
    env = {"QUEEN_RAFT_NODE_ID": "2", "QUEEN_RAFT_LISTEN": listen,
           "QUEEN_PORT": str(h[2]), "QUEEN_RAFT_TOKEN": TOKEN}
    if case == "own_id_missing":
        env["QUEEN_RAFT_NODE_ID"] = "4"
        peers, want, names = good, ["4"], ["QUEEN_RAFT_PEERS"]
    elif case == "duplicate_id":
        peers = good + ["2=127.0.0.1:%d/127.0.0.1:%d" % (r[9], h[9])]
        want, names = ["2"], ["QUEEN_RAFT_PEERS"]
    elif case == "duplicate_raft_address":
        peers = good + ["4=127.0.0.1:%d/127.0.0.1:%d" % (r[1], h[9])]
        want, names = ["127.0.0.1:%d" % r[1], "4"], ["QUEEN_RAFT_PEERS"]
    elif case == "duplicate_http_address":
        peers = good + ["4=127.0.0.1:%d/127.0.0.1:%d" % (r[9], h[3])]
        want, names = ["127.0.0.1:%d" % h[3], "4"], ["QUEEN_RAFT_PEERS"]
    elif case == "no_equals":
        bad = "127.0.0.1:%d/127.0.0.1:%d" % (r[3], h[3])
        peers, want = good[:2] + [bad], [bad]
        names = ["QUEEN_RAFT_PEERS"]
    elif case == "no_slash":
        bad = "3=127.0.0.1:%d" % r[3]
        peers, want = good[:2] + [bad], [bad]
        names = ["QUEEN_RAFT_PEERS"]
    elif case == "bad_port":
        bad = "3=127.0.0.1:99999/127.0.0.1:%d" % h[3]
        peers, want = good[:2] + [bad], ["99999", bad]
        names = ["QUEEN_RAFT_PEERS"]
    elif case == "id_zero":
        bad = "0=127.0.0.1:%d/127.0.0.1:%d" % (r[9], h[9])
        peers, want = good + [bad], [bad, "0="]
        names = ["QUEEN_RAFT_PEERS"]
    elif case == "ten_entries":
        peers, want = [entry(i) for i in range(1, 11)], ["10", "9"]
        names = ["QUEEN_RAFT_PEERS"]
    elif case == "listen_differs":
        env["QUEEN_RAFT_LISTEN"] = "127.0.0.1:%d" % r[11]
        peers, want = good, ["127.0.0.1:%d" % r[2]]
        names = ["QUEEN_RAFT_LISTEN"]
    elif case == "no_token":
        del env["QUEEN_RAFT_TOKEN"]
        peers, want = good, ["token"]
        names = ["QUEEN_RAFT_TOKEN"]
    else:
        raise ValueError(case)
    env["QUEEN_RAFT_PEERS"] = ",".join(peers)
    return env, want, names


@pytest.mark.parametrize("case", [
    "own_id_missing", "duplicate_id", "duplicate_raft_address",
    "duplicate_http_address", "no_equals", "no_slash", "bad_port", "id_zero",
    "ten_entries", "listen_differs", "no_token"])
def test_bad_peers_list_stops_the_boot_with_one_line(tmp_path, case):
    extra, want, names = _peers_case(case)
    env = {k: v for k, v in os.environ.items() if not k.startswith("QUEEN_")}
    env.update({"QUEEN_BIND_ADDR": "127.0.0.1",
                "QUEEN_RAFT_DIR": str(tmp_path / "d"),
                "QUEEN_RAFT_SEGMENT_MB": "8"})
    env.update(extra)
    p = subprocess.run([queen_bin()], env=env, capture_output=True,
                       timeout=30)
    err = p.stderr.decode()
    assert p.returncode != 0, err
    fatal = [r["msg"] for r in loglines.parse(err)
             if r["msg"].startswith("FATAL")]
    assert len(fatal) == 1, err
    for name in names:
        assert name in fatal[0], fatal[0]
    # The line names the offending part, not only the setting: look for
    # it in what follows the echoed value.
    reason = fatal[0]
    for name in names:
        head = "FATAL: %s=" % name
        if reason.startswith(head):
            value = env.get(name, "")
            tail = reason[len(head):]
            reason = tail[len(os.path.commonprefix([tail, value])):]
            break
    assert any(w in reason for w in want), (want, reason, fatal[0])
    assert TOKEN not in err


# --------------------------------------------------------------------------
# No leader


def test_no_majority_answers_503_no_leader_and_reads_stay_local(
        make_cluster):
    c = make_cluster()
    lid = c.start()
    push_ok(c, c[lid], items("nl", ["a0", "a1"]))
    kv = c[lid].request("PUT", "/api/v1/kv/nl/k", body={"value": 1,
                                                        "forever": True})
    assert kv.status == 200, kv
    c.wait_converged()
    # The leader loses both followers: the push it gets now cannot be
    # committed on a majority and must not be answered 201.
    for f in c.followers():
        c.kill9(f.id)
    lead = c[lid]
    t0 = time.monotonic()
    r = lead.post("/api/v1/push", {"items": items("nl", ["lost"])},
                  timeout=30)
    assert time.monotonic() - t0 <= 15, "answered after %.1fs" % (
        time.monotonic() - t0)
    assert r.status == 503, r
    check_503(c, r)
    assert r.json()["code"] in ("no_leader", "timeout"), r
    wait_settling(lead)
    for path, body in (("/api/v1/push", {"items": items("nl", ["b0"])}),
                       ("/api/v1/configure", {"queue": "nl2"})):
        t0 = time.monotonic()
        r = lead.post(path, body, timeout=30)
        assert time.monotonic() - t0 <= 15
        assert r.status == 503, (path, r)
        check_503(c, r)
        b = r.json()
        assert b["code"] == "no_leader" and isinstance(b["error"], str), b
    r = lead.request("PUT", "/api/v1/kv/nl/k", body={"value": 2,
                                                     "forever": True},
                     timeout=30)
    assert r.status == 503 and header(r, "Retry-After") == "1", r
    # Reads are this node's own state: answered without a leader.
    got = Cluster.records(lead, "nl")
    assert [t for _, t, _ in got] == ["a0", "a1"], got
    g = lead.get("/api/v1/kv/nl/k")
    assert g.status == 200 and g.json()["value"] == 1, g
    st = lead.get("/status")
    assert st.status == 200, st
    # The followers come back: a leader again, and writes succeed.
    for f in c.nodes.values():
        if not f.alive():
            c.start_node(f.id)
    lid = c.leader(timeout=30)
    push_ok(c, c[lid], items("nl", ["c0"]))
    c.wait_converged()
    logs = c.all_records("nl")
    assert all(v == logs[lid] for v in logs.values()), logs


def test_a_burst_of_large_pushes_keeps_the_leader(make_cluster):
    """Twelve concurrent 60 MiB pushes to the leader. Holding them all at
    once, the leader's loop copied and proposed ~720 MB in one go, its raft
    answers waited behind that past the election timeout, and it stepped
    down: every push answered 503 no_leader. A node now holds at most
    QUEEN_MAX_HELD_BODY_BYTES (64 MiB) of bodies at once: the pushes past
    it wait, unread, for room. Every push is answered 201 and stored once
    on every node, and the leader keeps its term and says nothing of
    stepping down."""
    c = make_cluster()
    lid = c.start()
    lead = c[lid]
    term = lead.raft()["term"]
    pad = b"z" * (60 << 20)
    res = {}

    def push(i):
        body = (b'{"items":[{"queue":"big","transactionId":"t%d",'
                b'"payload":"' % i) + pad + b'"}]}'
        try:
            res[i] = lead.post("/api/v1/push", body, timeout=300)
        except OSError as e:
            res[i] = e

    threads = [threading.Thread(target=push, args=(i,)) for i in range(12)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    for i, r in sorted(res.items()):
        assert getattr(r, "status", None) == 201, (i, r)
    raft = lead.raft()
    assert raft["term"] == term and raft["role"] == "leader", raft
    assert "no longer the leader" not in lead.logs()
    got = Cluster.records(lead, "big")
    assert sorted(t for _, t, _ in got) == sorted(
        "t%d" % i for i in range(12)), len(got)
    assert all(len(p) == len(pad) for _, _, p in got)
    c.wait_converged(timeout=60)  # the followers applied the same entries


def test_a_follower_held_past_the_election_timeout_keeps_its_forward(
        make_cluster):
    """A follower that stops hearing the leader for its election timeout
    (a loop held by other work, or a leader held so) goes to pre-vote, and
    raft names no leader until it hears the same leader again. Its forward
    connection closed at that moment, and a write the leader was about to
    commit was answered 503 no_leader. Now it waits on the open connection
    (for two election timeouts at most): 201, stored once. Here the
    leader is stopped (SIGSTOP) once it has the write in its socket, the
    follower (election timeout 1 s, the others 5 s, so neither the leader
    steps down nor the third node stands) goes leaderless, stays so for
    200 ms (its 10 ms tick saw it: the old code closed then), and the
    leader is let go on, within the follower's grace of 2 x 1 s."""
    c = make_cluster(env={"QUEEN_RAFT_ELECTION_TIMEOUT_MS": "5000"})
    lid = c.start()
    lead = c[lid]
    f = c.followers()[0]
    c.stop_node(f.id)
    f.extra_env["QUEEN_RAFT_ELECTION_TIMEOUT_MS"] = "1000"
    c.start_node(f.id)
    push_ok(c, f, items("held", ["warm"]))  # f's forward connection is up
    for k in range(2):
        txn = "held-%d" % k
        sent = f.metric("queen_raft_forwarded_writes_total")
        res = {}

        def push():
            try:
                res["r"] = f.post("/api/v1/push",
                                  {"items": items("held", [txn])},
                                  timeout=30)
            except OSError as e:
                res["r"] = e

        lead.signal(signal.SIGSTOP)
        stopped = time.monotonic()
        t = threading.Thread(target=push)
        try:
            t.start()
            wait_until(lambda: f.metric("queen_raft_forwarded_writes_total")
                       > sent, 10, "node %d to forward the write" % f.id,
                       interval=0.01)
            wait_until(lambda: (f.raft() or {}).get("leaderId") == 0, 10,
                       "node %d to name no leader" % f.id, interval=0.01)
            time.sleep(0.2)  # the fault's length, not a wait for a result
        finally:
            lead.signal(signal.SIGCONT)
        # well inside the others' 5 s: no election could have intervened
        assert time.monotonic() - stopped < 4.0, time.monotonic() - stopped
        t.join(40)
        r = res.get("r")
        assert getattr(r, "status", None) == 201, (k, r)
        assert [a["status"] for a in r.json()] == ["queued"], (k, r)
        raft = lead.raft()
        assert raft["role"] == "leader", raft
    c.wait_converged()
    logs = c.all_records("held")
    want = ["warm", "held-0", "held-1"]
    assert all(sorted(x for _, x, _ in v) == sorted(want)
               for v in logs.values()), logs


def test_a_held_loop_does_not_count_toward_the_election_timeout(
        make_cluster):
    """libuv runs the timers that came due before it reads a socket, so
    after a callback held a node's loop past its election timeout, raft's
    tick judged the timeout before the node read what waited behind the
    hold: a follower stood for election against a leader it was about to
    hear, and a leader could step down with its followers' answers unread.
    Raft's clock now skips the loop's holds. Here follower F (election
    timeout 1 s; QUEEN_TEST_HOLD_LOOP_MS: a SIGUSR2 holds its loop 2.5 s in
    the poll phase, then 2.5 s more in the next timers phase, after raft's
    tick) is held while the leader is stopped (SIGSTOP, so nothing waits in
    F's socket to set it right), and a /health sent during the holds is
    answered as soon as they end. The old clock had made F a candidate by
    then; now F is still a follower of the same leader, and stands only
    once a full timeout passed unheld. The others' timeout is 10 s, so no
    one else stands meanwhile; once the leader goes on, F follows it."""
    c = make_cluster(env={"QUEEN_RAFT_ELECTION_TIMEOUT_MS": "10000"})
    lid = c.start()
    lead = c[lid]
    f = c.followers()[0]
    c.stop_node(f.id)
    f.extra_env.update({"QUEEN_RAFT_ELECTION_TIMEOUT_MS": "1000",
                        "QUEEN_TEST_MODE": "true",
                        "QUEEN_TEST_HOLD_LOOP_MS": "2500"})
    c.start_node(f.id)
    wait_until(lambda: (f.raft() or {}).get("leaderId") == lid, 30,
               "node %d to follow node %d" % (f.id, lid))
    push_ok(c, lead, items("hl", ["a"]))
    line = "test: holding the event loop"
    held = f.logs().count(line)
    lead.signal(signal.SIGSTOP)
    try:
        # what the leader sent before it stopped reaches F first (the
        # fault's timing, not a wait for a result)
        time.sleep(0.05)
        f.signal(signal.SIGUSR2)
        wait_until(lambda: f.logs().count(line) > held + 1, 10,
                   "node %d's second hold to begin" % f.id, interval=0.02)
        raft = f.raft()  # answered right after the second hold
        assert raft is not None
        assert raft["role"] == "follower", raft
        assert raft["leaderId"] == lid, raft
        # its clock runs on unheld: the stopped leader is left once a full
        # timeout (1..2 s) passed
        wait_until(lambda: (f.raft() or {}).get("role") == "candidate", 10,
                   "node %d to stand" % f.id, interval=0.05)
    finally:
        lead.signal(signal.SIGCONT)
    lid = c.leader(timeout=30)
    push_ok(c, c[lid], items("hl", ["b"]))
    c.wait_converged()
    logs = c.all_records("hl")
    assert all(sorted(x for _, x, _ in v) == ["a", "b"]
               for v in logs.values()), logs


# --------------------------------------------------------------------------
# Restart, wipe, failover


def test_restarted_node_rejoins_and_catches_up(make_cluster):
    c = make_cluster()
    lid = c.start()
    f = c.followers()[0]
    push_ok(c, c[lid], items("rj", ["a%d" % i for i in range(10)]))
    c.wait_converged()
    c.kill9(f.id)
    lid = c.leader(timeout=15)
    for i in range(20):
        push_ok(c, c[lid], items("rj", ["b%d-%d" % (i, j)
                                        for j in range(5)]))
    c.start_node(f.id)
    c.wait_converged(timeout=30)
    logs = c.all_records("rj")
    assert len(logs[f.id]) == 110
    assert all(v == logs[lid] for v in logs.values())
    # It serves writes again, read back at once.
    push_ok(c, f, items("rj", ["c0"]))
    assert Cluster.records(f, "rj")[-1][1] == "c0"


def _snapshot_knobs():
    out = subprocess.run([queen_bin(), "--help-config"], capture_output=True,
                         timeout=30).stdout.decode()
    return sorted(set(re.findall(r"QUEEN_RAFT_SNAPSHOT_[A-Z_]+", out)))


# With its thresholds left to the node, libraft snapshots after at most
# 32768 entries (src/raft/node.c SNAP_THRESHOLD_MAX) and keeps at most 4096
# of them: past this many entries a node with nothing needs a snapshot.
AUTO_SNAPSHOT_ENTRIES = 32768


def _fill_log(c, node, queue, entries):
    """Push one record a request (one raft entry each) over one kept-alive
    connection until node's applied index reaches entries; the
    transactionIds pushed, in order."""
    conn = http.client.HTTPConnection("127.0.0.1", node.port, timeout=20)
    txns = []
    try:
        while True:
            for _ in range(500):
                t = "f%d" % len(txns)
                conn.request("POST", "/api/v1/push",
                             body=json.dumps({"items": items(queue, [t])}),
                             headers={"content-type": "application/json"})
                r = conn.getresponse()
                body = r.read()
                assert r.status == 201, (r.status, body)
                txns.append(t)
            if node.raft()["applied"] >= entries:
                return txns
    finally:
        conn.close()


def _snapshot_files(node):
    d = os.path.join(node.data_dir, "raft")
    return sorted(f for f in os.listdir(d) if f.startswith("snapshot-")
                  and not f.endswith(".meta")) if os.path.isdir(d) else []


def _rss_anon_mb(node):
    with open("/proc/%d/status" % node.proc.pid) as f:
        for line in f:
            if line.startswith("RssAnon:"):
                return int(line.split()[1]) // 1024
    raise AssertionError("no RssAnon for node %d" % node.id)


def _push_volume(node, queue, mib, threads=4):
    """Push about mib MiB of 600-byte JSON records, 100 a request (one
    raft entry of ~64 KB each, more with group commit), over threads
    kept-alive connections; the number of records."""
    per = max(1, (mib << 20) // (100 * 640) // threads)
    errors = []

    def run(t):
        conn = http.client.HTTPConnection("127.0.0.1", node.port, timeout=30)
        try:
            for i in range(per):
                its = [{"queue": queue, "partition": "p%d" % (j % 8),
                        "transactionId": "v%d-%d-%d" % (t, i, j),
                        "payload": {"n": j, "pad": "x%04d" % i * 110}}
                       for j in range(100)]
                conn.request("POST", "/api/v1/push",
                             body=json.dumps({"items": its}),
                             headers={"content-type": "application/json"})
                r = conn.getresponse()
                body = r.read()
                if r.status != 201:
                    errors.append((r.status, body[:200]))
                    return
        finally:
            conn.close()
    ts = [threading.Thread(target=run, args=(t,)) for t in range(threads)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    assert not errors, errors[:3]
    return per * threads * 100


def test_every_node_bounds_the_log_it_keeps_in_memory(make_cluster):
    """libraft keeps every entry since the last snapshot in memory, on a
    follower as on the leader. The snapshot spacing followed the size of
    the entries the node proposed, so a follower stayed at 32768 entries:
    gigabytes of heap under group commit. With QUEEN_RAFT_LOG_MEMORY_MB
    at 16, every node snapshots each ~16 MiB of log, and a follower's heap
    stays far below the 160 MiB pushed."""
    c = make_cluster(env={"QUEEN_RAFT_LOG_MEMORY_MB": "16"})
    lid = c.start()
    n = _push_volume(c[lid], "mem", 160)
    c.wait_converged(timeout=60)
    for f in c.followers():
        assert _snapshot_files(f), "follower %d took no snapshot" % f.id
        rss = _rss_anon_mb(f)
        assert rss < 120, "follower %d: RssAnon %d MiB after %d records" % (
            f.id, rss, n)
    assert _snapshot_files(c[lid]), "the leader took no snapshot"


@pytest.mark.parametrize("snapshot", [False, True],
                         ids=["log", "snapshot"])
def test_wiped_node_rejoins_under_its_id_and_catches_up(make_cluster,
                                                        snapshot):
    """A node whose directory was wiped rejoins under its id and gets
    everything: from the log when the log still holds it all, from a
    snapshot once the log was compacted (no setting lowers the snapshot
    threshold, so that variant fills the log past it)."""
    env = {}
    entries = 0
    if snapshot:
        knobs = _snapshot_knobs()
        entries = AUTO_SNAPSHOT_ENTRIES + 1000
        if "QUEEN_RAFT_SNAPSHOT_THRESHOLD" in knobs:
            env["QUEEN_RAFT_SNAPSHOT_THRESHOLD"] = "1024"
            entries = 1024 + 1000
            if "QUEEN_RAFT_SNAPSHOT_TRAILING" in knobs:
                env["QUEEN_RAFT_SNAPSHOT_TRAILING"] = "128"
    c = make_cluster(env=env)
    lid = c.start()
    f = c.followers()[0]
    push_ok(c, c[lid], items("wp", ["a%d" % i for i in range(10)]))
    c.wait_converged()
    c.kill9(f.id)
    c.wipe(f.id)
    lid = c.leader(timeout=15)
    want = ["a%d" % i for i in range(10)]
    if snapshot:
        want += _fill_log(c, c[lid], "wp", entries)
        assert _snapshot_files(c[lid]), "the leader took no snapshot"
    for i in range(20):
        push_ok(c, c[lid], items("wp", ["b%d" % i]))
        want.append("b%d" % i)
    c.start_node(f.id)
    c.wait_converged(timeout=60)
    logs = c.all_records("wp")
    assert [t for _, t, _ in logs[f.id]] == want
    assert all(v == logs[lid] for v in logs.values())
    if snapshot:
        # The leader's snapshot compacted its log (libraft keeps at most
        # 4096 entries behind it): the wiped node can only have caught up
        # by installing that snapshot, and it holds one.
        assert _snapshot_files(f), "the wiped node installed no snapshot"
    r = f.raft()
    assert r["role"] == "follower" and r["leaderId"] == lid
    members = f.get("/status").json()["cluster"]["members"]
    assert sorted(m["id"] for m in members) == [1, 2, 3]
    push_ok(c, f, items("wp", ["c0"]))
    assert Cluster.records(f, "wp")[-1][1] == "c0"


def test_leader_kill9_survivors_elect_and_keep_every_push(make_cluster):
    c = make_cluster()
    old = c.start()
    acked = []
    for i in range(10):
        node = c[1 + i % 3]
        txns = ["k%d-%d" % (i, j) for j in range(3)]
        ans = push_ok(c, node, items("fo", txns))
        acked += [(a["offset"], a["transaction_id"]) for a in ans]
    term = c[old].raft()["term"]
    c.kill9(old)
    t0 = time.monotonic()
    # At once, before the followers notice: a write through a follower
    # that still knows the dead leader answers 201 (through the new one)
    # or 503 naming the old leader's HTTP address, within the bound.
    f = [n for n in c.live()][0]
    r = f.post("/api/v1/push", {"items": items("fo", ["early"])},
               timeout=30)
    assert time.monotonic() - t0 <= 15
    if r.status == 503:
        check_503(c, r)
        assert r.json().get("leader", c[old].http_addr) == c[old].http_addr
    else:
        assert r.status == 201, r
        acked += [(a["offset"], a["transaction_id"]) for a in r.json()]
    new = c.leader(timeout=10)
    assert new != old
    assert c[new].raft()["term"] > term
    survivor = [n for n in c.live() if n.id != new][0]
    push_ok(c, survivor, items("fo", ["after"]), timeout=10)
    assert time.monotonic() - t0 < 15
    for node in c.live():
        got = [(o, t) for o, t, _ in Cluster.records(node, "fo")]
        assert got[:30] == sorted(acked)[:30], (node.id, got)
        assert got[-1][1] == "after"
    c.start_node(old)
    c.wait_converged(timeout=30)
    logs = c.all_records("fo")
    assert all(v == logs[new] for v in logs.values())
    txns = [t for _, t, _ in logs[old]]
    assert len(set(txns)) == len(txns), txns
    # "early" is there if it was answered 201; a 503 does not say.
    assert {t for _, t in acked} | {"after"} <= set(txns)
    assert set(txns) <= {t for _, t in acked} | {"after", "early"}


def test_push_load_through_every_node_survives_leader_kill9_and_restart(
        make_cluster):
    """Three writers push batches with transactionIds to the three nodes
    in turn, retrying 503s and refused connections; the leader is killed
    mid-way and restarted. Every push answered 201 is in every node's log
    exactly once, at the offset it was answered with, and the three logs
    are identical."""
    c = make_cluster()
    c.start()
    stop = threading.Event()
    acked = {}  # (partition, txn) -> offset
    done = [0, 0, 0]  # batches answered 201, per writer
    errors = []

    def writer(w):
        k = w
        n = 0
        try:
            while not stop.is_set():
                part = "p%d" % (n % 2)
                its = items("load", ["w%d-%d-%d" % (w, n, j)
                                     for j in range(4)], part)
                deadline = time.monotonic() + 60
                while True:
                    assert time.monotonic() < deadline, \
                        "writer %d: batch %d stuck" % (w, n)
                    node = c[1 + k % 3]
                    k += 1
                    try:
                        r = node.post("/api/v1/push", {"items": its},
                                      timeout=20)
                    except OSError:
                        time.sleep(0.02)
                        continue
                    if r.status == 503:
                        check_503(c, r)
                        time.sleep(0.02)
                        continue
                    assert r.status == 201, (node.id, r)
                    break
                for a in r.json():
                    assert a["status"] in ("queued", "duplicate"), a
                    acked[(part, a["transaction_id"])] = a["offset"]
                n += 1
                done[w] = n
        except BaseException as e:  # noqa: BLE001 -- asserted below
            errors.append(e)

    threads = [threading.Thread(target=writer, args=(w,), daemon=True)
               for w in range(3)]
    for t in threads:
        t.start()
    try:
        def progress(more, what, timeout):
            goal = sum(done) + more
            wait_until(lambda: errors or sum(done) >= goal, timeout, what)
            assert not errors, errors
        progress(90, "90 batches before the kill", 30)
        old = c.leader()
        c.kill9(old)
        t_kill = time.monotonic()
        progress(1, "a batch after the kill", 20)
        failover = time.monotonic() - t_kill
        progress(90, "90 batches on two nodes", 30)
        c.start_node(old)
        progress(90, "90 batches after the restart", 30)
    finally:
        stop.set()
        for t in threads:
            t.join(90)
    assert not any(t.is_alive() for t in threads)
    assert not errors, errors
    c.wait_converged(timeout=30)
    for part in ("p0", "p1"):
        logs = c.all_records("load", part)
        ref = logs[1]
        assert all(v == ref for v in logs.values()), "logs differ: %s" % {
            i: len(v) for i, v in logs.items()}
        assert [o for o, _, _ in ref] == list(range(len(ref)))
        txns = [tx for _, tx, _ in ref]
        assert len(set(txns)) == len(txns), "a push stored twice"
        want = {tx: o for (p, tx), o in acked.items() if p == part}
        assert set(txns) == set(want), (
            "missing %s, never acked %s" % (sorted(set(want) - set(txns)),
                                            sorted(set(txns) - set(want))))
        for o, tx, payload in ref:
            assert want[tx] == o and payload == {"t": tx}
    assert failover < 15, failover


# --------------------------------------------------------------------------
# Runtime membership (issue 14 item 1, last point)


@pytest.mark.membership
def test_replace_a_dead_node_by_a_new_one(make_cluster):
    c = make_cluster()
    lid = c.start()
    push_ok(c, c[lid], items("mb", ["m0", "m1"]))
    dead = [f for f in c.followers()][0]
    c.kill9(dead.id)
    lid = c.leader(timeout=15)
    r = c[lid].request("DELETE", "/api/v1/cluster/members/%d" % dead.id)
    assert r.status in (200, 204), r
    del c.nodes[dead.id]

    p4, r4 = free_ports(2)
    new = Node(4, os.path.join(c.root, "node-4"), p4, r4, {})
    c.nodes[4] = new
    new.extra_env = c.env_of(4)  # the peers list of the new membership
    # docs/operations.md: start the new node, then add it; the add
    # answers once it caught up (202 joining past 30 s).
    c.start_node(4)
    via = [n for n in c.live() if n.id not in (lid, 4)][0]
    body = {"id": 4, "raft": new.raft_addr, "http": new.http_addr}
    r = via.post("/api/v1/cluster/members", body, timeout=60)
    if r.status == 503:  # membership runs on the leader: follow the hint
        check_503(c, r)
        hinted = [n for n in c.live() if n.http_addr == r.json()["leader"]]
        assert hinted, r
        r = hinted[0].post("/api/v1/cluster/members", body, timeout=60)
    assert r.status in (200, 202), r
    c.wait_converged(timeout=30)
    ids = sorted(c.nodes)
    for node in c.live():
        ms = node.get("/status").json()["cluster"]["members"]
        assert sorted(m["id"] for m in ms) == ids, (node.id, ms)
        assert all(m["role"] == "voter" for m in ms), ms
    push_ok(c, new, items("mb", ["m2"]))
    assert [t for _, t, _ in Cluster.records(new, "mb")] == ["m0", "m1",
                                                             "m2"]
    # Node 4 votes: with the old leader gone, 4 and the other elect.
    c.kill9(lid)
    nl = c.leader(timeout=15)
    push_ok(c, c[nl], items("mb", ["m3"]))
    c.wait_converged()
    assert [t for _, t, _ in Cluster.records(new, "mb")] == ["m0", "m1",
                                                             "m2", "m3"]


@pytest.mark.membership
def test_a_member_started_after_its_add_is_promoted_when_it_comes(
        make_cluster):
    """libraft gives up a promotion after its catch-up rounds (~5 s). A new
    node started some seconds after its add (or one with a store to catch
    up on) got 500 "no connection" and stayed a spare for good, and a
    second add answered "a member already". The leader now promotes it
    again until it comes: the add answers 200 voter (or 202 joining past
    30 s), and the member votes."""
    c = make_cluster()
    lid = c.start()
    push_ok(c, c[lid], items("late", ["l0"]))
    p4, r4 = free_ports(2)
    new = Node(4, os.path.join(c.root, "node-4"), p4, r4, {})
    c.nodes[4] = new
    new.extra_env = c.env_of(4)
    body = {"id": 4, "raft": new.raft_addr, "http": new.http_addr}
    answer = {}

    def add():
        answer["r"] = c[lid].post("/api/v1/cluster/members", body,
                                  timeout=90)

    t = threading.Thread(target=add)
    t.start()

    def role_of_4():
        ms = c[lid].get("/status").json()["cluster"]["members"]
        return next((m["role"] for m in ms if m["id"] == 4), None)
    wait_until(lambda: role_of_4() is not None, 10, "4 added as a spare")
    # the scenario: the server comes after libraft's first promotion gave
    # up (its catch-up rounds take ~5 s)
    time.sleep(7)
    c.start_node(4)
    t.join(90)
    r = answer["r"]
    assert r.status in (200, 202), r
    assert r.json()["role"] in ("voter", "joining"), r
    wait_until(lambda: role_of_4() == "voter", 60, "4 promoted to voter")
    c.wait_converged(timeout=30)
    assert [t for _, t, _ in Cluster.records(new, "late")] == ["l0"]
    r = c[lid].post("/api/v1/cluster/members", body)
    assert r.status == 400 and "a member already" in r.json()["error"], r


def test_member_add_refusal_quotes_the_json_error_once(broker):
    """A member body that is not JSON answers 400 with the scanner's own
    sentence after one prefix (the prefix was once printed over it)."""
    before = broker.get("/api/v1/cluster/members").json()
    for body, why in [(b"", "unexpected end of text"),
                      (b"hello", "unexpected character")]:
        r = broker.post("/api/v1/cluster/members", body)
        assert r.status == 400, r
        assert r.json() == {
            "error": "bad member body: invalid JSON at byte 0: " + why,
            "code": "bad_request"}, r
    assert broker.get("/api/v1/cluster/members").json() == before


def test_a_member_body_with_a_key_given_twice_is_refused(broker):
    """{"id":2,...,"id":3} was read first-wins; every other route refuses
    a key given twice, and so does this one, adding nothing."""
    before = broker.get("/api/v1/cluster/members").json()
    r = broker.post("/api/v1/cluster/members",
                    b'{"id":2,"raft":"127.0.0.1:1","http":"127.0.0.1:2",'
                    b'"id":3}')
    assert r.status == 400, r
    assert r.json() == {"error": 'bad member body: duplicate key "id"',
                        "code": "bad_request"}, r
    assert broker.get("/api/v1/cluster/members").json() == before


@pytest.mark.parametrize("path,shown", [
    # any byte can come percent-decoded from the path: quoted as UTF-8
    ("%ff%C3%A9", "?\u00e9"),
    # %00 decodes to a NUL: "1%00junk" is not id 1 (a number read up to
    # the NUL took it as 1 and removed member 1)
    ("1%00junk", "1?junk"),
])
def test_member_remove_refusal_quotes_the_id_and_removes_nothing(broker, path,
                                                                  shown):
    """The refusal quotes the decoded id as valid UTF-8 and removes
    nothing."""
    before = broker.get("/api/v1/cluster/members").json()
    r = broker.request("DELETE", "/api/v1/cluster/members/" + path)
    assert r.status == 400, r
    assert r.json() == {"error": "bad member id '%s'" % shown,
                        "code": "bad_request"}, r
    assert broker.get("/api/v1/cluster/members").json() == before


def test_a_spare_left_by_an_add_that_failed_can_be_removed(broker):
    """On a lone voter, an add whose new member cannot be reached is not
    promoted (the node tries again for minutes: 202 joining after 30 s),
    and libraft keeps the member it added as a spare. Its removal was
    refused as "the last voter" (the voters were counted, not whether the
    target is one), so the spare stayed for good. The spare goes (its
    promotion ends with it); the lone voter itself still may not."""
    raft, http = ("127.0.0.1:%d" % p for p in free_ports(2))
    r = broker.post("/api/v1/cluster/members",
                    json.dumps({"id": 2, "raft": raft,
                                "http": http}).encode(), timeout=60)
    assert r.status == 202 and r.json()["role"] == "joining", r

    def member(i):
        ms = broker.get("/status").json()["cluster"]["members"]
        return next((m for m in ms if m["id"] == i), None)
    spare = member(2)
    assert spare is not None and spare["role"] != "voter", spare
    # a try of the promotion may be running: 503 retry meanwhile
    deadline = time.monotonic() + 30
    while True:
        r = broker.request("DELETE", "/api/v1/cluster/members/2")
        if r.status != 503 or time.monotonic() > deadline:
            break
        assert r.json()["code"] == "retry", r
        time.sleep(0.2)
    assert r.status == 200, r
    assert r.json() == {"id": 2, "removed": True}, r
    assert member(2) is None
    r = broker.request("DELETE", "/api/v1/cluster/members/1")
    assert r.status == 400, r
    assert r.json()["error"] == "id 1 is the last voter", r
    assert member(1)["role"] == "voter"


@pytest.mark.membership
def test_a_member_that_the_log_names_otherwise_says_so_at_start(
        make_cluster):
    """The membership comes from the log: a member restarted on another
    raft address is still called on the old one by the others. It
    campaigned alone without a word; it now logs one error at the start
    naming both addresses."""
    c = make_cluster()
    lid = c.start()
    push_ok(c, c[lid], items("mw", ["w0"]))
    moved = [f for f in c.followers()][0]
    old = moved.raft_addr
    assert c.stop_node(moved.id) == 0
    moved.raft_port = free_ports(1)[0]
    moved.extra_env = c.env_of(moved.id)
    c.start_node(moved.id)
    want = ("this node's raft address in the membership its log holds is "
            "%s, not %s" % (old, moved.raft_addr))
    wait_until(lambda: want in moved.logs(), 30, "the moved node's error")
