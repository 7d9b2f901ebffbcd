"""Helpers for running build/queen in tests: free ports, deadlines, the
Broker process wrapper. A module of its own (not conftest) so every suite
can import it by a name no other directory uses."""

import http.client
import json
import os
import signal
import socket
import subprocess
import threading
import time



def queen_root():
    return os.environ.get(
        "QUEEN_ROOT",
        os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..")))


def queen_bin():
    return os.environ.get("QUEEN_BIN",
                          os.path.join(queen_root(), "build", "queen"))


def free_port():
    """A port that was free a moment ago (bound then released)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def free_ports(n):
    """n distinct ports that were free a moment ago: all n sockets are
    bound at once, so two picks can never be the same port (one port
    picked twice made a peers list fail for the wrong reason)."""
    socks = [socket.socket(socket.AF_INET, socket.SOCK_STREAM)
             for _ in range(n)]
    try:
        for s in socks:
            s.bind(("127.0.0.1", 0))
        return [s.getsockname()[1] for s in socks]
    finally:
        for s in socks:
            s.close()


def boot_env(data_dir, **extra):
    """The environment of a single node booted by hand: this process's
    environment without any QUEEN_ setting, loopback, two distinct fresh
    ports and data_dir, then extra on top."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("QUEEN_")}
    http, raft = free_ports(2)
    env.update({"QUEEN_PORT": str(http), "QUEEN_BIND_ADDR": "127.0.0.1",
                "QUEEN_RAFT_DIR": str(data_dir),
                "QUEEN_RAFT_LISTEN": "127.0.0.1:%d" % raft})
    env.update(extra)
    return env


def wait_until(cond, timeout, what, interval=0.02):
    """Poll cond() until it returns a truthy value or the deadline passes."""
    deadline = time.monotonic() + timeout
    while True:
        v = cond()
        if v:
            return v
        if time.monotonic() > deadline:
            raise AssertionError("timed out after %.1fs waiting for %s" %
                                 (timeout, what))
        time.sleep(interval)


class Background:
    """fn(*args, **kw) in a thread of its own, started at once. result()
    joins it and returns fn's value, or raises what fn raised, in the
    caller's thread: a test asserts there, where pytest sees a failure
    (in the worker it would only be a warning)."""

    def __init__(self, fn, *args, **kw):
        self._value = None
        self._error = None
        self._thread = threading.Thread(target=self._run,
                                        args=(fn, args, kw), daemon=True)
        self._thread.start()

    def _run(self, fn, args, kw):
        try:
            self._value = fn(*args, **kw)
        except BaseException as e:  # noqa: BLE001 -- re-raised in result()
            self._error = e

    def done(self):
        return not self._thread.is_alive()

    def result(self, timeout=60):
        self._thread.join(timeout)
        if self._thread.is_alive():
            raise AssertionError("still running after %.0fs" % timeout)
        if self._error is not None:
            raise self._error
        return self._value


class Response:
    def __init__(self, status, headers, body):
        self.status = status
        self.headers = headers
        self.body = body

    def json(self):
        return json.loads(self.body)

    def pairs(self):
        """The body parsed with every object as a list of (key, value), so
        key order can be asserted."""
        return json.loads(self.body, object_pairs_hook=list)

    def __repr__(self):
        return "Response(%d, %r)" % (self.status, self.body[:300])


class Broker:
    """One build/queen process. host: the address it binds and the tests
    talk to (127.0.0.1 unless the test made another one, e.g. in a network
    namespace); wrap: argv put before the binary (e.g. ["ip", "netns",
    "exec", NS], which execs it, so the process is queen itself)."""

    def __init__(self, data_dir, env=None, port=None, raft_port=None,
                 host="127.0.0.1", wrap=None):
        self.data_dir = data_dir
        self.host = host
        self.wrap = list(wrap or [])
        picked = free_ports(2)
        self.port = port or picked[0]
        self.raft_port = raft_port or picked[1]
        self.extra_env = dict(env or {})
        self.proc = None
        self.stderr_path = None
        self.starts = 0

    def environment(self):
        env = {k: v for k, v in os.environ.items()
               if not k.startswith("QUEEN_")}
        env.update({
            "QUEEN_PORT": str(self.port),
            "QUEEN_BIND_ADDR": self.host,
            "QUEEN_RAFT_DIR": self.data_dir,
            "QUEEN_RAFT_LISTEN": "%s:%d" % (self.host, self.raft_port),
        })
        env.update(self.extra_env)
        return env

    def start(self, wait=True, timeout=60):
        assert self.proc is None
        self.starts += 1
        self.stderr_path = os.path.join(
            os.path.dirname(self.data_dir.rstrip("/")),
            "queen-stderr-%d.log" % self.starts)
        self._stderr = open(self.stderr_path, "wb")
        self.proc = subprocess.Popen(self.wrap + [queen_bin()],
                                     env=self.environment(),
                                     stdin=subprocess.DEVNULL,
                                     stdout=self._stderr,
                                     stderr=self._stderr)
        if wait:
            self.wait_healthy(timeout)
        return self

    def wait_healthy(self, timeout=60):
        def healthy():
            if self.proc.poll() is not None:
                raise AssertionError("queen exited with %d during boot:\n%s" %
                                     (self.proc.returncode, self.stderr()))
            try:
                return self.get("/health", timeout=5).status == 200
            except OSError:
                return False
        wait_until(healthy, timeout, "/health to answer 200")

    def stderr(self):
        if self.stderr_path is None:
            return ""
        with open(self.stderr_path, "rb") as f:
            return f.read().decode("utf-8", "replace")

    def request(self, method, path, body=None, timeout=30, headers=None):
        conn = http.client.HTTPConnection(self.host, self.port,
                                          timeout=timeout)
        try:
            if body is not None and not isinstance(body, (bytes, bytearray)):
                body = json.dumps(body).encode()
            hdrs = {"content-type": "application/json"} if body else {}
            hdrs.update(headers or {})
            conn.request(method, path, body=body, headers=hdrs)
            r = conn.getresponse()
            return Response(r.status, dict(r.getheaders()), r.read())
        finally:
            conn.close()

    def get(self, path, **kw):
        return self.request("GET", path, **kw)

    def post(self, path, body, **kw):
        return self.request("POST", path, body=body, **kw)

    def push(self, items, expect=201):
        r = self.post("/api/v1/push", {"items": items})
        assert r.status == expect, r
        return r.json()

    def fetch(self, entries, **extra):
        body = {"entries": entries}
        body.update(extra)
        r = self.post("/api/v1/fetch", body)
        assert r.status == 200, r
        return r.json()

    def fetch_one(self, queue, partition="Default", offset=0, **kw):
        e = {"queue": queue, "partition": partition, "offset": offset}
        e.update(kw)
        return self.fetch([e])["entries"][0]

    def changed(self, entries):
        r = self.post("/api/v1/partitions/changed", {"entries": entries})
        assert r.status == 200, r
        return r.json()

    def metric(self, name, labels=""):
        """The value of one sample of /metrics/prometheus, or None."""
        want = name + ("{%s}" % labels if labels else "")
        for line in self.get("/metrics/prometheus").body.decode().splitlines():
            if line.startswith("#"):
                continue
            key, _, value = line.rpartition(" ")
            if key == want:
                return float(value)
        return None

    def signal(self, sig):
        self.proc.send_signal(sig)

    def wait_exit(self, timeout=60):
        try:
            return self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            raise AssertionError("queen did not exit within %ss:\n%s" %
                                 (timeout, self.stderr()))

    def kill9(self):
        self.proc.kill()
        self.proc.wait(10)
        self._reap()

    def _reap(self):
        self.proc = None
        self._stderr.close()

    def stop(self):
        """SIGTERM, then SIGKILL if it does not exit in time."""
        if self.proc is None:
            return None
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(60)  # a loaded machine drains slowly
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)
        rc = self.proc.returncode
        self._reap()
        return rc

    def restart(self):
        self.stop()
        return self.start()
