"""HTTPS and bearer tokens on the HTTP API (issue 19 item 9): with
QUEEN_TLS_CERT/QUEEN_TLS_KEY the broker speaks TLS on its own loop, checked
with curl against a self-signed certificate made here; with
QUEEN_AUTH_TOKENS every route but /health needs "Authorization: Bearer",
a token bound to a tenant acts for that tenant only, and no token shows in
an answer or a log line. Bad files stop the boot with one line naming the
setting and the path."""
import http.client
import json
import re
import socket
import ssl
import subprocess
import time

import pytest

import loglines
from queenproc import Broker, boot_env, queen_bin, wait_until

FATAL = r"^FATAL: "
TENANT_A = "0000000a-0000-4000-8000-00000000000a"
TENANT_B = "0000000b-0000-4000-8000-00000000000b"
TOK_A = "alice-Zq3v8WnY2kR7pL4x"      # bound to TENANT_A
TOK_ADMIN = "admin-Hc5tJ9sB1mQ6dF0u"  # bound to no tenant
TOK_WRONG = "mallory-0000000000000000"


def _openssl_cert(d, name, cn="127.0.0.1"):
    cert, key = str(d / (name + ".crt")), str(d / (name + ".key"))
    subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048",
                    "-nodes", "-keyout", key, "-out", cert, "-days", "2",
                    "-subj", "/CN=" + cn,
                    "-addext", "subjectAltName=IP:127.0.0.1"],
                   check=True, capture_output=True, timeout=60)
    return cert, key


@pytest.fixture(scope="module")
def certs(tmp_path_factory):
    d = tmp_path_factory.mktemp("certs")
    cert, key = _openssl_cert(d, "server")
    _, other_key = _openssl_cert(d, "other", cn="other")
    tokens = d / "tokens"
    tokens.write_text("# operators of tenant A, then the admin job\n"
                      "%s %s\n\n%s   # any tenant\n" %
                      (TOK_A, TENANT_A, TOK_ADMIN))
    return {"cert": cert, "key": key, "other_key": other_key,
            "tokens": str(tokens)}


def curl(port, method, path, cacert, token=None, body=None, headers=(),
         scheme="https"):
    """(status, headers dict lowercased, body bytes) from one curl call."""
    cmd = ["curl", "-sS", "-X", method, "-D", "-", "--max-time", "20",
           "--cacert", cacert]
    if token is not None:
        cmd += ["-H", "Authorization: Bearer " + token]
    for h in headers:
        cmd += ["-H", h]
    data = None
    if body is not None:
        cmd += ["-H", "content-type: application/json", "--data-binary", "@-"]
        data = json.dumps(body).encode()
    cmd.append("%s://127.0.0.1:%d%s" % (scheme, port, path))
    p = subprocess.run(cmd, input=data, capture_output=True, timeout=60)
    if p.returncode != 0:
        return None, {}, p.stderr
    head, _, rest = p.stdout.partition(b"\r\n\r\n")
    while head.startswith(b"HTTP/1.1 1"):  # 100 Continue came first
        head, _, rest = rest.partition(b"\r\n\r\n")
    lines = head.decode().split("\r\n")
    status = int(lines[0].split()[1])
    hdrs = {}
    for ln in lines[1:]:
        k, _, v = ln.partition(":")
        hdrs[k.strip().lower()] = v.strip()
    return status, hdrs, rest


def start_tls(tmp_path, certs, **env):
    e = {"QUEEN_TLS_CERT": certs["cert"], "QUEEN_TLS_KEY": certs["key"],
         "QUEEN_LOG_LEVEL": "debug"}
    e.update(env)
    b = Broker(str(tmp_path / "d"), env=e)
    b.start(wait=False)

    def healthy():
        if b.proc.poll() is not None:
            raise AssertionError("queen exited during boot:\n" + b.stderr())
        return curl(b.port, "GET", "/health", certs["cert"])[0] == 200
    wait_until(healthy, 60, "/health over https")
    return b


def test_https_serves_push_and_fetch_and_refuses_plain_http(tmp_path, certs):
    b = start_tls(tmp_path, certs)
    try:
        ca = certs["cert"]
        st, _, body = curl(b.port, "GET", "/health", ca)
        assert st == 200 and json.loads(body)["status"] == "healthy"
        big = "x" * (1 << 20)  # many TLS records each way
        st, _, body = curl(b.port, "POST", "/api/v1/push", ca, body={
            "items": [{"queue": "orders", "payload": {"n": 1}},
                      {"queue": "orders", "payload": big}]})
        assert st == 201, body
        st, _, body = curl(b.port, "POST", "/api/v1/fetch", ca, body={
            "entries": [{"queue": "orders", "partition": "Default",
                         "offset": 0, "maxBytes": 4 << 20}]})
        assert st == 200, body
        recs = json.loads(body)["entries"][0]["records"]
        assert [r["payload"] for r in recs] == [{"n": 1}, big]
        # keep-alive: curl sends both requests on one TLS connection
        p = subprocess.run(["curl", "-sS", "--cacert", ca, "-o", "/dev/null",
                            "-o", "/dev/null", "-w", "%{http_code} %{num_connects}\n",
                            "https://127.0.0.1:%d/health" % b.port,
                            "https://127.0.0.1:%d/status" % b.port],
                           capture_output=True, timeout=60, check=True)
        assert p.stdout.decode().split("\n")[:2] == ["200 1", "200 0"], p
        # plain HTTP on the TLS port gets no HTTP answer
        st, _, err = curl(b.port, "GET", "/health", ca, scheme="http")
        assert st is None, err
        # a client that does not trust the certificate stops at the handshake
        p = subprocess.run(["curl", "-sS", "https://127.0.0.1:%d/health" %
                            b.port], capture_output=True, timeout=60)
        assert p.returncode == 60, p
        st, _, _ = curl(b.port, "GET", "/health", ca)
        assert st == 200
        assert re.search(r"listening on 127\.0\.0\.1:%d over https" % b.port,
                         b.stderr())
    finally:
        assert b.stop() == 0


def test_tokens_guard_every_route_but_health(tmp_path, certs):
    b = start_tls(tmp_path, certs, QUEEN_AUTH_TOKENS=certs["tokens"],
                  QUEEN_TENANCY_HEADER="true")
    try:
        ca = certs["cert"]
        st, _, _ = curl(b.port, "GET", "/health", ca)
        assert st == 200
        routes = [("POST", "/api/v1/push",
                   {"items": [{"queue": "q", "payload": 1}]}),
                  ("POST", "/api/v1/fetch",
                   {"entries": [{"queue": "q", "partition": "Default",
                                 "offset": 0}]}),
                  ("POST", "/api/v1/partitions/changed", {"entries": []}),
                  ("POST", "/api/v1/configure", {"queue": "q"}),
                  ("GET", "/api/v1/resources/queues", None),
                  ("POST", "/api/v1/kv", {"ops": []}),
                  ("GET", "/api/v1/kv/app/k1", None),
                  ("PUT", "/api/v1/kv/app/k1", {"value": "v"}),
                  ("DELETE", "/api/v1/kv/app/k1", None),
                  ("GET", "/status", None),
                  ("GET", "/metrics/prometheus", None),
                  ("GET", "/no/such/route", None)]
        for method, path, body in routes:
            st, h, out = curl(b.port, method, path, ca, body=body)
            assert st == 401, (method, path, out)
            assert h["www-authenticate"] == 'Bearer realm="queen"'
            assert json.loads(out)["code"] == "unauthorized"
            st, h, out = curl(b.port, method, path, ca, token=TOK_WRONG,
                              body=body)
            assert st == 401, (method, path, out)
            assert h["www-authenticate"].startswith("Bearer ")
            assert 'error="invalid_token"' in h["www-authenticate"]
            assert TOK_WRONG.encode() not in out
        st, _, out = curl(b.port, "GET", "/status", ca,
                          headers=["Authorization: Basic " + TOK_ADMIN])
        assert st == 401, out
        st, _, out = curl(b.port, "GET", "/status", ca, token=TOK_ADMIN)
        assert st == 200, out
        # nothing refused above was written
        st, _, out = curl(b.port, "GET", "/api/v1/resources/queues", ca,
                          token=TOK_ADMIN)
        assert st == 200 and json.loads(out)["queues"] == [], out
        metrics = curl(b.port, "GET", "/metrics/prometheus", ca,
                       token=TOK_ADMIN)[2].decode()
        assert ('queen_http_requests_total{route="/api/v1/push",'
                'status="401"} 2') in metrics
    finally:
        assert b.stop() == 0
    log = b.stderr()
    for t in (TOK_A, TOK_ADMIN, TOK_WRONG):
        assert t not in log


def _head_only(port, lines, line="POST /api/v1/push HTTP/1.1"):
    """Send a request's head over TLS, never its body; (socket, what came
    back up to the end of the first answer's head)."""
    ctx = ssl.create_default_context()
    ctx.check_hostname = False
    ctx.verify_mode = ssl.CERT_NONE
    s = ctx.wrap_socket(socket.create_connection(("127.0.0.1", port),
                                                 timeout=10))
    s.sendall(("\r\n".join([line, "Host: q",
                             "Content-Type: application/json"] + lines) +
               "\r\n\r\n").encode())
    got = b""
    while b"\r\n\r\n" not in got:
        chunk = s.recv(65536)
        if not chunk:
            break
        got += chunk
    return s, got


def _until_closed(s, got):
    while True:
        chunk = s.recv(65536)
        if not chunk:
            return got
        got += chunk


def test_a_body_without_a_token_is_refused_before_it_is_read(tmp_path,
                                                             certs):
    """The token is checked on the head of a request that carries a body:
    a client without a valid one gets its 401 before it sends a byte of
    the body (no 100 Continue) and the connection closes, so it cannot
    make the node hold up to QUEEN_MAX_BODY_BYTES for it. The 401 is the
    guard's own and counted under its route. A valid token's head is
    answered 100 Continue."""
    b = start_tls(tmp_path, certs, QUEEN_AUTH_TOKENS=certs["tokens"])
    try:
        big = "Content-Length: %d" % (60 << 20)
        cases = [([big, "Expect: 100-continue"], "Bearer realm=\"queen\"",
                  "this route needs Authorization: Bearer <token>"),
                 ([big, "Authorization: Bearer " + TOK_WRONG],
                  'error="invalid_token"', "the bearer token is not valid"),
                 (["Transfer-Encoding: chunked", "Expect: 100-continue"],
                  "Bearer realm=\"queen\"", "this route needs")]
        for lines, challenge, why in cases:
            s, got = _head_only(b.port, lines)
            assert got.startswith(b"HTTP/1.1 401 "), (lines, got)
            text = _until_closed(s, got).decode()
            s.close()
            assert challenge in text and why in text, (lines, text)
            assert TOK_WRONG not in text
        s, got = _head_only(b.port, [big, "Expect: 100-continue",
                                     "Authorization: Bearer " + TOK_ADMIN])
        assert got.startswith(b"HTTP/1.1 100 Continue"), got
        s.close()
        # /health needs no token, so it takes no body either; its other
        # methods need one like any route
        for line, want, why in (
                ("GET /health HTTP/1.1", b"HTTP/1.1 400 ",
                 "GET /health takes no body"),
                ("POST /health HTTP/1.1", b"HTTP/1.1 401 ",
                 "this route needs Authorization")):
            s, got = _head_only(b.port, [big, "Expect: 100-continue"], line)
            assert got.startswith(want), (line, got)
            text = _until_closed(s, got).decode()
            s.close()
            assert why in text, (line, text)
        metrics = curl(b.port, "GET", "/metrics/prometheus", certs["cert"],
                       token=TOK_ADMIN)[2].decode()
        assert ('queen_http_requests_total{route="/api/v1/push",'
                'status="401"} 3') in metrics, metrics
    finally:
        assert b.stop() == 0


def test_a_connection_no_token_let_in_is_closed_when_idle(tmp_path, certs):
    """4096 connections that each sent one request needing no token (GET
    /health, or anything answered 401) were kept for the 120 s idle
    timeout and locked every client out. With tokens, a connection keeps
    the first-head deadline (10 s) as its idle timeout until a request of
    it was let in by its token."""
    b = start_tls(tmp_path, certs, QUEEN_AUTH_TOKENS=certs["tokens"])
    ctx = ssl.create_default_context()
    ctx.check_hostname = False
    ctx.verify_mode = ssl.CERT_NONE
    try:
        conns = {}
        for name, hdrs, path in (("anon", {}, "/health"),
                                 ("refused", {}, "/status"),
                                 ("token", {"Authorization": "Bearer " +
                                            TOK_ADMIN}, "/status")):
            c = http.client.HTTPSConnection("127.0.0.1", b.port,
                                            context=ctx, timeout=60)
            c.request("GET", path, headers=hdrs)
            r = c.getresponse()
            r.read()
            assert r.status in (200, 401), (name, r.status)
            conns[name] = c
        t0 = time.monotonic()
        for name in ("anon", "refused"):
            sock = conns[name].sock
            sock.settimeout(60)
            assert sock.recv(1) == b"", name  # closed by the node
        assert time.monotonic() - t0 < 40
        c = conns["token"]  # idle as long, and still served
        c.request("GET", "/status",
                  headers={"Authorization": "Bearer " + TOK_ADMIN})
        r = c.getresponse()
        r.read()
        assert r.status == 200
        for c in conns.values():
            c.close()
    finally:
        assert b.stop() == 0


def test_two_authorization_headers_name_no_token(tmp_path, certs):
    """A second Authorization header (a proxy that appends one) does not
    let the first one through: 401 invalid_token, in either order."""
    b = start_tls(tmp_path, certs, QUEEN_AUTH_TOKENS=certs["tokens"])
    try:
        ca = certs["cert"]
        st, _, out = curl(b.port, "GET", "/api/v1/resources/queues", ca,
                          token=TOK_ADMIN)
        assert st == 200, out
        for first, second in ((TOK_ADMIN, TOK_WRONG), (TOK_WRONG, TOK_ADMIN),
                              (TOK_ADMIN, TOK_ADMIN)):
            st, hdrs, out = curl(b.port, "GET", "/api/v1/resources/queues",
                                 ca, token=first,
                                 headers=["Authorization: Bearer " + second])
            assert st == 401, (first, second, out)
            assert json.loads(out)["error"] == \
                "the bearer token is not valid", out
            assert 'error="invalid_token"' in hdrs["www-authenticate"], hdrs
    finally:
        assert b.stop() == 0


def _fetch(b, ca, token, tenant=None, queue="q"):
    hdrs = ["x-queen-tenant: " + tenant] if tenant else []
    st, _, out = curl(b.port, "POST", "/api/v1/fetch", ca, token=token,
                      headers=hdrs, body={"entries": [
                          {"queue": queue, "partition": "Default",
                           "offset": 0}]})
    assert st == 200, out
    return [r["payload"] for r in json.loads(out)["entries"][0]["records"]]


def _kv_get(b, ca, token, tenant=None):
    hdrs = ["x-queen-tenant: " + tenant] if tenant else []
    st, _, out = curl(b.port, "GET", "/api/v1/kv/app/k", ca, token=token,
                      headers=hdrs)
    assert st == 200, out
    return json.loads(out)


@pytest.mark.parametrize("tenancy_header", ["true", "false"])
def test_a_bound_token_acts_for_its_tenant_only(tmp_path, certs,
                                                tenancy_header):
    b = start_tls(tmp_path, certs, QUEEN_AUTH_TOKENS=certs["tokens"],
                  QUEEN_TENANCY_HEADER=tenancy_header)
    try:
        ca = certs["cert"]
        push = {"items": [{"queue": "q", "payload": "from-a"}]}
        # no tenant header: the token's tenant
        st, _, out = curl(b.port, "POST", "/api/v1/push", ca, token=TOK_A,
                          body=push)
        assert st == 201, out
        st, _, out = curl(b.port, "POST", "/api/v1/push", ca, token=TOK_A,
                          body=push, headers=["x-queen-tenant: " +
                                              TENANT_A.upper()])
        assert st == 201, out
        # another tenant's header: 403, and nothing written anywhere
        st, _, out = curl(b.port, "POST", "/api/v1/push", ca, token=TOK_A,
                          body={"items": [{"queue": "q", "payload": "x"}]},
                          headers=["x-queen-tenant: " + TENANT_B])
        assert st == 403, out
        assert json.loads(out)["code"] == "forbidden"
        assert TENANT_A in json.loads(out)["error"]
        st, _, out = curl(b.port, "PUT", "/api/v1/kv/app/k", ca, token=TOK_A,
                          body={"value": "x", "forever": True},
                          headers=["x-queen-tenant: " + TENANT_B])
        assert st == 403, out
        st, _, out = curl(b.port, "PUT", "/api/v1/kv/app/k", ca, token=TOK_A,
                          body={"value": "a's", "forever": True})
        assert st in (200, 201), out
        assert _fetch(b, ca, TOK_A) == ["from-a", "from-a"]
        if tenancy_header == "true":
            # the unbound token picks tenants with the header
            assert _fetch(b, ca, TOK_ADMIN, TENANT_A) == ["from-a", "from-a"]
            assert _fetch(b, ca, TOK_ADMIN, TENANT_B) == []
            assert _kv_get(b, ca, TOK_ADMIN, TENANT_A)["found"]
            assert not _kv_get(b, ca, TOK_ADMIN, TENANT_B)["found"]
        # the default tenant (the unbound token without a header) saw none
        assert _fetch(b, ca, TOK_ADMIN) == []
        assert not _kv_get(b, ca, TOK_ADMIN)["found"]
        assert _kv_get(b, ca, TOK_A)["found"]
    finally:
        assert b.stop() == 0


def _boot_env(tmp_path, **kw):
    env = boot_env(tmp_path / "d")
    env.update(kw)
    return env


def _refused(tmp_path, env, want):
    p = subprocess.run([queen_bin()], env=env, capture_output=True,
                       timeout=60)
    err = p.stderr.decode()
    assert p.returncode == 2, err
    fatal = [ln["msg"] for ln in loglines.parse(err)
             if ln["level"] == "error" and ln["area"] == "boot"]
    assert len(fatal) == 1, err
    assert re.match(FATAL + re.escape(want), fatal[0]), fatal[0]
    assert not (tmp_path / "d").exists()
    return err


def test_bad_tls_files_stop_the_boot_naming_the_setting_and_path(tmp_path,
                                                                 certs):
    missing = str(tmp_path / "nope.crt")
    _refused(tmp_path, _boot_env(tmp_path, QUEEN_TLS_CERT=missing,
                                 QUEEN_TLS_KEY=certs["key"]),
             "QUEEN_TLS_CERT=%s: cannot read: No such file or directory" %
             missing)
    _refused(tmp_path, _boot_env(tmp_path, QUEEN_TLS_CERT=certs["cert"],
                                 QUEEN_TLS_KEY=missing),
             "QUEEN_TLS_KEY=%s: cannot read: " % missing)
    _refused(tmp_path, _boot_env(tmp_path, QUEEN_TLS_CERT=certs["cert"],
                                 QUEEN_TLS_KEY=certs["other_key"]),
             "QUEEN_TLS_KEY=%s: the private key does not match the "
             "certificate in QUEEN_TLS_CERT" % certs["other_key"])
    _refused(tmp_path, _boot_env(tmp_path, QUEEN_TLS_CERT=certs["key"],
                                 QUEEN_TLS_KEY=certs["key"]),
             "QUEEN_TLS_CERT=%s: not a PEM certificate chain" % certs["key"])
    _refused(tmp_path, _boot_env(tmp_path, QUEEN_TLS_CERT=certs["cert"]),
             "QUEEN_TLS_CERT=%s: QUEEN_TLS_CERT and QUEEN_TLS_KEY go "
             "together; set QUEEN_TLS_KEY too, or neither" % certs["cert"])


def test_a_bad_token_file_stops_the_boot_and_never_prints_a_token(tmp_path):
    missing = str(tmp_path / "none")
    _refused(tmp_path, _boot_env(tmp_path, QUEEN_AUTH_TOKENS=missing),
             "QUEEN_AUTH_TOKENS=%s: cannot read: No such file or directory" %
             missing)
    bad = tmp_path / "tokens"
    bad.write_text("%s\n# fine so far\n%s %s extra\n" %
                   (TOK_ADMIN, TOK_A, TENANT_A))
    err = _refused(tmp_path, _boot_env(tmp_path, QUEEN_AUTH_TOKENS=str(bad)),
                   "QUEEN_AUTH_TOKENS=%s: line 3: more than two fields" % bad)
    bad.write_text("%s\n%s %s\n" % (TOK_A, TOK_A, TENANT_B))
    err += _refused(tmp_path, _boot_env(tmp_path, QUEEN_AUTH_TOKENS=str(bad)),
                    "QUEEN_AUTH_TOKENS=%s: line 2: the same token as line 1" %
                    bad)
    bad.write_text("# no token at all\n")
    err += _refused(tmp_path, _boot_env(tmp_path, QUEEN_AUTH_TOKENS=str(bad)),
                    "QUEEN_AUTH_TOKENS=%s: no token" % bad)
    assert TOK_A not in err and TOK_ADMIN not in err
