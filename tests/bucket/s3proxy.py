#!/usr/bin/python3
"""The test bucket's server: npm s3rver behind a SigV4-verifying proxy of ours.

One process, started by bucket.py (TestBucket), owns everything a test bucket
needs and nothing else:

  client --SigV4--> data port (this proxy) --anonymous--> s3rver (child)
  test   ---------> control port (faults, stats, uploads; JSON)

Why a proxy: s3rver 3.7.1 (docs/design/dependencies.md §5) accepts any
signature, any Content-MD5 and any x-amz-content-sha256, has no
AbortMultipartUpload, ListParts or ListMultipartUploads, answers a multipart
completion with a plain MD5 ETag, lists keys in directory-walk order (not
byte order) and reports CommonPrefixes wrongly.  The proxy therefore:

  (1) verifies every request's SigV4 Authorization header with Debian's
      botocore against the configured credentials, over the canonical form
      AWS computes (path and query decoded, then encoded once by SigV4
      rules), so a client that signs a raw '=' fails here as on AWS;
  (2) checks Content-MD5 (400 BadDigest) and a hex x-amz-content-sha256
      (400 XAmzContentSHA256Mismatch) before anything is stored;
  (3) answers ListObjects (v1 and v2), ListMultipartUploads, ListParts and
      AbortMultipartUpload itself from s3rver's directory, and validates
      CompleteMultipartUpload (NoSuchUpload, InvalidPart, InvalidPartOrder,
      EntityTooSmall) before forwarding it, then gives the object S3's
      multipart ETag md5(part MD5s)-N;
  (4) forwards everything else to s3rver unchanged (same path and query,
      without the Authorization header, so s3rver sees an anonymous call);
  (5) injects faults by method, key prefix and query parameter (down,
      down503, 503 SlowDown with Retry-After, 500 InternalError, PUTs held
      for a time or until released, 403 AccessDenied (a refusal no client
      retries), "drop": the request is carried out and
      its answer never sent, the connection closed instead, "stall": the
      request is carried out, its status line, headers and half its body
      sent, then nothing for ms (or until released) before the connection
      closes, as a bucket that hangs mid-answer, "opaque_etag":
      a PUT's answer carries a random 32-hex ETag that is no MD5, as AWS
      answers under SSE-KMS, "error200": a 200 whose body is an S3
      <Error> document (InternalError), the request not carried out, as
      AWS documents for CompleteMultipartUpload, "error200_done": the
      same answer for a request that was carried out) and counts what
      fired;
  (6) logs one JSON line per request (never a secret), with the
      encryption the request asked for (x-amz-server-side-encryption and
      its KMS key id).

It listens on 127.0.0.1 only (the data port on the config's "host" when
given: the cluster partition tests bind it to an address their network
namespaces reach; the control port stays on 127.0.0.1).  It dies with its
parent: when the process that started it goes away, it stops s3rver and
exits, so nothing leaks.

RGW mode (config "rgw": {endpoint, access_key, secret_key}; tests/bucket/
rgw.py runs the Ceph cell): no s3rver is started; after (1), (2) and the
faults of (5), every request goes to RGW as the client sent it (path style),
its signature replaced by one with the RGW user's key, and RGW answers it
all itself (listing, multipart, errors); /uploads asks RGW.
"""

import argparse
import base64
import calendar
import datetime
import hashlib
import http.client
import http.server
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
import traceback
import urllib.parse
import xml.etree.ElementTree as ET
from xml.sax.saxutils import escape as xml_escape


OBJ_SUFFIX = "._S3rver_object"
UPLOADS_DIR = "._S3rver_uploads"
MIN_PART = 5 * 1024 * 1024
MAX_BODY = 1 << 30  # the proxy holds a body in memory before forwarding it
MAX_SKEW_S = 15 * 60
EMPTY_SHA256 = hashlib.sha256(b"").hexdigest()
HOP_HEADERS = {"connection", "keep-alive", "proxy-connection", "te",
               "trailer", "transfer-encoding", "upgrade", "expect",
               "authorization", "content-length", "host"}
AUTH_RE = re.compile(
    r"AWS4-HMAC-SHA256 Credential=([^/,]+)/(\d{8})/([^/,]+)/([^/,]+)/"
    r"aws4_request,\s*SignedHeaders=([^,\s]+),\s*Signature=([0-9a-f]{64})$")
HEX64_RE = re.compile(r"^[0-9a-fA-F]{64}$")
UPLOAD_ID_RE = re.compile(r"^[0-9a-zA-Z_-]{1,128}$")
LIST_PARAMS = {"list-type", "prefix", "delimiter", "max-keys", "start-after",
               "continuation-token", "encoding-type", "fetch-owner", "marker"}
FAULT_KINDS = ("down", "down503", "503", "500", "403", "hold", "drop",
               "stall", "opaque_etag", "error200", "error200_done")

INTERNAL_ERROR = "We encountered an internal error. Please try again."


class S3Fail(Exception):
    """An S3 error answer: HTTP status, <Code>, <Message>, extra elements."""

    def __init__(self, status, code, message, extra=None, headers=None):
        super().__init__(message)
        self.status = status
        self.code = code
        self.message = message
        self.extra = extra or {}
        self.headers = headers or {}


def error_body(err, resource):
    out = ['<?xml version="1.0" encoding="UTF-8"?>\n<Error><Code>',
           err.code, "</Code><Message>", xml_escape(err.message),
           "</Message>"]
    for name, value in err.extra.items():
        out.append("<%s>%s</%s>" % (name, xml_escape(str(value)), name))
    out.append("<Resource>%s</Resource><RequestId>%016X</RequestId></Error>"
               % (xml_escape(resource), time.time_ns() & (2**64 - 1)))
    return "".join(out).encode()


# ---------------------------------------------------------------------------
# s3rver's directory (layout in docs/design/dependencies.md §5)

def key_is_storable(key):
    """A key s3rver can hold as a file: no empty, '.' or '..' segment, no
    trailing slash, no NUL, every segment short enough for a file name."""
    if not key or "\0" in key:
        return False
    for seg in key.split("/"):
        if seg in ("", ".", "..") or len(seg.encode()) > 200:
            return False
    return True


def object_path(data_dir, bucket, key, suffix=OBJ_SUFFIX):
    parts = key.split("/")
    return os.path.join(data_dir, bucket, *parts[:-1], parts[-1] + suffix)


def object_etag(path):
    try:
        with open(path + ".md5", encoding="utf-8") as f:
            return f.read().strip()
    except FileNotFoundError:
        h = hashlib.md5()
        with open(path, "rb") as f:
            for chunk in iter(lambda: f.read(1 << 20), b""):
                h.update(chunk)
        return h.hexdigest()


def utf8(s):
    return s.encode("utf-8", "surrogateescape")


def walk_keys(data_dir, bucket, prefix=""):
    """Every object key of the bucket that starts with prefix, sorted by
    UTF-8 bytes as S3 sorts them.  Walks only below the prefix's directory."""
    root = os.path.join(data_dir, bucket)
    head = prefix.rsplit("/", 1)[0] if "/" in prefix else ""
    if head and not key_is_storable(head):
        return []
    start = os.path.join(root, *head.split("/")) if head else root
    keys = []
    for dirpath, dirnames, filenames in os.walk(start):
        if dirpath == root and UPLOADS_DIR in dirnames:
            dirnames.remove(UPLOADS_DIR)
        rel = os.path.relpath(dirpath, root)
        base = "" if rel == "." else rel + "/"
        for name in filenames:
            if name.endswith(OBJ_SUFFIX):
                key = base + name[: -len(OBJ_SUFFIX)]
                if key.startswith(prefix):
                    keys.append(key)
    keys.sort(key=utf8)
    return keys


def uploads_root(data_dir, bucket):
    return os.path.join(data_dir, bucket, UPLOADS_DIR)


def read_upload(data_dir, bucket, upload_id):
    """The upload's key, initiation time and parts, or None when unknown."""
    if not UPLOAD_ID_RE.match(upload_id):
        return None
    d = os.path.join(uploads_root(data_dir, bucket), upload_id)
    try:
        with open(os.path.join(d, "key"), encoding="utf-8") as f:
            key = f.read()
        started = os.stat(os.path.join(d, "key")).st_mtime
        names = os.listdir(d)
    except (FileNotFoundError, NotADirectoryError):
        return None
    parts = []
    for name in names:
        if not name.isdigit():
            continue
        p = os.path.join(d, name)
        try:
            st = os.stat(p)
            with open(p + ".md5", encoding="utf-8") as f:
                md5 = f.read().strip()
        except FileNotFoundError:
            continue  # a part still being written has no .md5 yet
        parts.append({"partNumber": int(name), "size": st.st_size,
                      "md5": md5, "mtime": st.st_mtime})
    parts.sort(key=lambda p: p["partNumber"])
    return {"key": key, "uploadId": upload_id, "initiated": started,
            "parts": parts, "dir": d}


def list_uploads(data_dir, bucket):
    root = uploads_root(data_dir, bucket)
    try:
        ids = sorted(os.listdir(root))
    except FileNotFoundError:
        return []
    out = []
    for upload_id in ids:
        u = read_upload(data_dir, bucket, upload_id)
        if u is not None:
            out.append(u)
    out.sort(key=lambda u: (utf8(u["key"]), u["initiated"]))
    return out


def iso_ms(t):
    return datetime.datetime.fromtimestamp(
        t, datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.000Z")


def multipart_etag(md5s):
    digest = hashlib.md5(b"".join(bytes.fromhex(m) for m in md5s))
    return "%s-%d" % (digest.hexdigest(), len(md5s))


# ---------------------------------------------------------------------------
# SigV4 verification

def sigv4_quote(s, safe):
    return urllib.parse.quote(s, safe=safe)


def canonical_target(raw_path, raw_query):
    """Path and query as AWS canonicalises them: decoded, then encoded once
    (unreserved kept, '/' kept in the path only), pairs sorted."""
    path = sigv4_quote(urllib.parse.unquote(raw_path, errors="surrogateescape"),
                       "/~")
    pairs = []
    if raw_query:
        for item in raw_query.split("&"):
            name, _, value = item.partition("=")
            pairs.append((sigv4_quote(urllib.parse.unquote(name), "~"),
                          sigv4_quote(urllib.parse.unquote(value), "~")))
    query = "&".join("%s=%s" % p for p in sorted(pairs))
    return path, query


class Verifier:
    def __init__(self, keys, region):
        # botocore is imported here, while s3rver is starting (saves ~0.5 s)
        global S3SigV4Auth, AWSRequest, HTTPHeaders, Credentials
        from botocore.auth import S3SigV4Auth
        from botocore.awsrequest import AWSRequest, HTTPHeaders
        from botocore.credentials import Credentials
        self.keys = keys
        self.region = region

    def verify(self, method, raw_path, raw_query, headers):
        """Raise S3Fail unless the Authorization header is a valid SigV4
        signature by a known key.  headers: lowercase name -> value."""
        auth = headers.get("authorization")
        if auth is None:
            raise S3Fail(403, "AccessDenied",
                         "Anonymous access is refused by the test bucket")
        m = AUTH_RE.match(auth.strip())
        if not m:
            raise S3Fail(400, "AuthorizationHeaderMalformed",
                         "The authorization header is not a SigV4 header")
        ak, day, region, service, signed, sig = m.groups()
        if ak not in self.keys:
            raise S3Fail(403, "InvalidAccessKeyId",
                         "The AWS Access Key Id you provided does not exist "
                         "in our records.", {"AWSAccessKeyId": ak})
        if region != self.region or service != "s3":
            raise S3Fail(400, "AuthorizationHeaderMalformed",
                         "the region '%s' is wrong; expecting '%s'"
                         % (region, self.region), {"Region": self.region})
        self._check_date(headers.get("x-amz-date"), day)
        payload = headers.get("x-amz-content-sha256")
        if payload is None:
            raise S3Fail(400, "InvalidRequest", "Missing required header for "
                         "this request: x-amz-content-sha256")
        names = signed.split(";")
        if "host" not in names or any(n not in headers for n in names):
            raise S3Fail(403, "SignatureDoesNotMatch",
                         "SignedHeaders must include host and name only "
                         "headers that were sent")
        expected = self._signature(method, raw_path, raw_query, headers,
                                   names, ak, region)
        if expected != sig:
            raise S3Fail(403, "SignatureDoesNotMatch",
                         "The request signature we calculated does not match "
                         "the signature you provided. Check your key and "
                         "signing method.", {"AWSAccessKeyId": ak})

    @staticmethod
    def _check_date(amz_date, day):
        try:
            t = calendar.timegm(time.strptime(amz_date or "",
                                              "%Y%m%dT%H%M%SZ"))
        except ValueError:
            raise S3Fail(403, "AccessDenied",
                         "x-amz-date is missing or not YYYYMMDDTHHMMSSZ")
        if not amz_date.startswith(day):
            raise S3Fail(400, "AuthorizationHeaderMalformed",
                         "the credential date %s is not the date of "
                         "x-amz-date %s" % (day, amz_date))
        if abs(time.time() - t) > MAX_SKEW_S:
            raise S3Fail(403, "RequestTimeTooSkewed",
                         "The difference between the request time and the "
                         "current time is too large.")

    def _signature(self, method, raw_path, raw_query, headers, names, ak,
                   region):
        path, query = canonical_target(raw_path, raw_query)
        signed = {n: headers[n] for n in names}
        req_headers = dict(signed)
        req_headers["x-amz-content-sha256"] = headers["x-amz-content-sha256"]
        url = "http://%s%s%s" % (headers["host"], path,
                                 "?" + query if query else "")
        req = AWSRequest(method=method, url=url, headers=req_headers, data=b"")
        req.context["timestamp"] = headers["x-amz-date"]
        auth = S3SigV4Auth(Credentials(ak, self.keys[ak]), "s3", region)
        auth.headers_to_sign = lambda r: HTTPHeaders.from_dict(signed)
        canonical = auth.canonical_request(req)
        return auth.signature(auth.string_to_sign(req, canonical), req)


# ---------------------------------------------------------------------------
# Faults and counters

class Faults:
    """Active faults, first match wins; a count below 0 never runs out."""

    def __init__(self):
        self.lock = threading.Lock()
        self.items = []
        self.next_id = 1
        self.fired = {k: 0 for k in FAULT_KINDS}
        self.requests = {}
        self.held = 0
        self.inflight = 0
        # release() wakes every held PUT: each waits for its `ms` or for the
        # generation to move, whichever comes first.
        self.released = threading.Condition(self.lock)
        self.release_gen = 0

    def add(self, spec):
        kind = spec.get("kind")
        if kind not in FAULT_KINDS:
            raise ValueError("kind must be one of %s" % ", ".join(FAULT_KINDS))
        if kind in ("hold", "stall") and \
                not isinstance(spec.get("ms"), (int, float)):
            raise ValueError("a %s fault needs ms" % kind)
        count = spec.get("count", 1)
        if not isinstance(count, int):
            raise ValueError("count must be an integer")
        with self.lock:
            f = {"id": self.next_id, "kind": kind, "remaining": count,
                 "method": spec.get("method"), "prefix": spec.get("prefix"),
                 "query": spec.get("query"),
                 "retry_after": spec.get("retry_after"),
                 "ms": spec.get("ms"), "fired": 0}
            self.next_id += 1
            self.items.append(f)
            return dict(f)

    def clear(self):
        with self.lock:
            self.items = []

    def has(self, kind):
        with self.lock:
            return any(f["kind"] == kind for f in self.items)

    def take(self, kinds, method, key, query=None):
        """The first live fault of one of kinds matching the request (its
        method, key prefix and, where the fault names one, a query
        parameter the request carries), with its count decremented, or
        None."""
        with self.lock:
            for f in self.items:
                if f["kind"] not in kinds or f["remaining"] == 0:
                    continue
                if f["method"] and f["method"].upper() != method:
                    continue
                if f["query"] and f["query"] not in (query or {}):
                    continue
                if f["prefix"] is not None and not key.startswith(f["prefix"]):
                    continue
                if f["remaining"] > 0:
                    f["remaining"] -= 1
                f["fired"] += 1
                self.fired[f["kind"]] += 1
                return dict(f)
        return None

    def hold(self, ms):
        """Block the calling request for ms milliseconds, or until
        release() is called; stats()["held"] counts it meanwhile."""
        deadline = time.monotonic() + ms / 1000.0
        with self.released:
            self.held += 1
            gen = self.release_gen
            try:
                while self.release_gen == gen:
                    left = deadline - time.monotonic()
                    if left <= 0:
                        break
                    self.released.wait(left)
            finally:
                self.held -= 1

    def release(self):
        """Let every PUT held right now go on; returns how many."""
        with self.released:
            n = self.held
            self.release_gen += 1
            self.released.notify_all()
            return n

    def count_down(self, kind):
        with self.lock:
            self.fired[kind] += 1

    def count_request(self, method, status):
        with self.lock:
            by = self.requests.setdefault(method, {})
            by[str(status)] = by.get(str(status), 0) + 1

    def snapshot(self):
        with self.lock:
            return {"requests": json.loads(json.dumps(self.requests)),
                    "faults": dict(self.fired),
                    "active": [dict(f) for f in self.items],
                    "held": self.held, "inflight": self.inflight}


# ---------------------------------------------------------------------------
# The data port

def vhost_bucket(host):
    """The bucket of a virtual-hosted request, or None: a Host of the form
    <bucket>.localhost[:port] (curl resolves every *.localhost name to the
    loopback address itself, so virtual-host addressing works against
    http://localhost:<port> without any DNS)."""
    if not host:
        return None
    name = host.rsplit(":", 1)[0] if not host.endswith("]") else host
    name = name.lower()
    if name.endswith(".localhost") and len(name) > len(".localhost"):
        return name[:-len(".localhost")]
    return None


class Request:
    """One parsed S3 request: bucket and key decoded from the raw path, or
    (virtual-host style, Host <bucket>.localhost) the bucket from the Host
    and the key from the whole path.  raw_path is what the client signed;
    upstream_path is the path-style path s3rver is asked."""

    def __init__(self, method, target, host=None):
        self.method = method
        raw_path, _, self.raw_query = target.partition("?")
        self.raw_path = raw_path or "/"
        self.upstream_path = self.raw_path
        rest = self.raw_path[1:]
        bucket, sep, key = rest.partition("/")
        self.vhost = vhost_bucket(host)
        if self.vhost is not None:
            bucket, key = urllib.parse.quote(self.vhost, safe=""), rest
            self.upstream_path = "/" + bucket + self.raw_path
        self.bucket = urllib.parse.unquote(bucket)
        # "/bucket/" is the bucket itself, as on AWS
        self.key = urllib.parse.unquote(key, errors="surrogateescape") \
            if key else None
        self.query = {}
        for item in self.raw_query.split("&") if self.raw_query else []:
            name, _, value = item.partition("=")
            self.query[urllib.parse.unquote(name)] = \
                urllib.parse.unquote(value)
        self.resource = "/" + self.bucket + ("/" + self.key if key else "")


class Handler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server_version = "queen-test-bucket"
    disable_nagle_algorithm = True
    app = None  # the App, set before the server starts

    def log_message(self, format, *args):  # noqa: A002 (base class name)
        pass

    def setup(self):
        super().setup()
        self.app.port.track(self.connection, True)

    def finish(self):
        self.app.port.track(self.connection, False)
        try:
            super().finish()
        except OSError:
            pass

    def do_GET(self):
        self.serve()

    do_PUT = do_POST = do_DELETE = do_HEAD = do_GET

    def serve(self):
        app = self.app
        if app.port.is_down:
            app.faults.count_down("down")
            self.close_connection = True
            return
        self.t0 = time.monotonic()
        self.req = req = Request(self.command, self.path,
                                 self.headers.get("Host"))
        # What the client asked of encryption, logged per request (no
        # secret: a mode and a key id).
        req.sse = self.headers.get("x-amz-server-side-encryption")
        req.sse_kms_key_id = self.headers.get(
            "x-amz-server-side-encryption-aws-kms-key-id")
        self.status, self.code, self.sent, self.fault = 0, None, 0, None
        self.drop, self.etag, self.stall_ms = False, None, None
        self.error_doc = False
        self.n_in, self.logged = 0, False
        with app.faults.lock:
            app.faults.inflight += 1
        try:
            body = self.read_body()
            self.n_in = len(body)
            self.dispatch(req, body)
        except S3Fail as e:
            self.try_send_error(e, req)
        except (ConnectionError, socket.timeout, http.client.HTTPException,
                OSError) as e:
            self.close_connection = True
            self.try_send_error(S3Fail(503, "ServiceUnavailable",
                                       "upstream s3rver failed: %s" % e), req)
        except Exception as e:  # a bug here: answer 500, keep serving
            traceback.print_exc()
            self.close_connection = True
            self.try_send_error(S3Fail(500, "InternalError",
                                       "test bucket proxy error: %r" % e), req)
        finally:
            self.log_once(self.sent)
            with app.faults.lock:
                app.faults.inflight -= 1

    def try_send_error(self, err, req):
        if self.status != 0:
            return  # an answer has started: the connection just closes
        try:
            self.send_error_xml(err, req)
        except OSError:
            self.close_connection = True  # the client is gone

    def log_once(self, n_out):
        """Count and log the request, once: called just before the answer's
        headers leave, so a client that has its answer finds the log line."""
        if self.logged:
            return
        self.logged = True
        self.app.faults.count_request(self.req.method, self.status)
        self.app.log_request_line(self.req, self.status, self.n_in, n_out,
                                  (time.monotonic() - self.t0) * 1000.0,
                                  self.fault, self.code)

    def read_body(self):
        if "chunked" in self.headers.get("Transfer-Encoding", "").lower():
            return self.read_chunked()
        n = self.headers.get("Content-Length")
        if n is None:
            return b""
        if not n.isdigit():
            self.close_connection = True
            raise S3Fail(400, "InvalidArgument", "bad Content-Length")
        n = int(n)
        if n > MAX_BODY:
            self.close_connection = True
            raise S3Fail(400, "EntityTooLarge",
                         "the test bucket holds bodies up to %d bytes"
                         % MAX_BODY)
        body = self.rfile.read(n)
        if len(body) != n:
            self.close_connection = True
            raise ConnectionError("client sent %d of %d bytes"
                                  % (len(body), n))
        return body

    def read_chunked(self):
        out = bytearray()
        while True:
            size = int(self.rfile.readline(1024).split(b";")[0].strip(), 16)
            if size == 0:
                while self.rfile.readline(1024) not in (b"\r\n", b"\n", b""):
                    pass
                return bytes(out)
            if len(out) + size > MAX_BODY:
                self.close_connection = True
                raise S3Fail(400, "EntityTooLarge", "body too large")
            out += self.rfile.read(size)
            self.rfile.readline(1024)

    def lower_headers(self):
        out = {}
        for name in self.headers.keys():
            low = name.lower()
            if low not in out:
                out[low] = ",".join(v.strip() for v in
                                    self.headers.get_all(name))
        return out

    def dispatch(self, req, body):
        app = self.app
        key = req.key or ""
        if app.faults.has("down503"):
            self.fault = "down503"
            app.faults.count_down("down503")
            raise S3Fail(503, "ServiceUnavailable",
                         "The test bucket is down (fault down503).")
        f = app.faults.take(("503", "500", "403"), req.method, key)
        if f is not None:
            self.fault = f["kind"]
            if f["kind"] == "503":
                ra = f["retry_after"] if f["retry_after"] is not None else 1
                raise S3Fail(503, "SlowDown", "Please reduce your request "
                             "rate.", headers={"Retry-After": str(ra)})
            if f["kind"] == "403":  # not retriable: the caller gives up
                raise S3Fail(403, "AccessDenied", "Access Denied (fault "
                             "403).")
            raise S3Fail(500, "InternalError", INTERNAL_ERROR)
        f = app.faults.take(("hold",), req.method, key) \
            if req.method == "PUT" else None
        if f is not None:
            self.fault = "hold"
            app.faults.hold(f["ms"])
        headers = self.lower_headers()
        app.verifier.verify(req.method, req.raw_path, req.raw_query, headers)
        check_digests(headers, body)
        f = app.faults.take(("error200",), req.method, key, req.query)
        if f is not None:
            self.fault = "error200"
            raise S3Fail(200, "InternalError", INTERNAL_ERROR)
        f = app.faults.take(("drop", "stall", "opaque_etag", "error200_done"),
                            req.method, key, req.query)
        if f is not None:
            self.error_doc = f["kind"] == "error200_done"
            self.fault = f["kind"]
            self.drop = f["kind"] == "drop"
            if f["kind"] == "stall":
                self.stall_ms = f["ms"]
            if f["kind"] == "opaque_etag":
                self.etag = '"%s"' % os.urandom(16).hex()
        app.route(self, req, headers, body)

    # -- answers --

    def send_error_xml(self, err, req):
        self.code = err.code
        body = b"" if req.method == "HEAD" else error_body(err, req.resource)
        extra = dict(err.headers)
        extra["Content-Type"] = "application/xml"
        self.answer(err.status, body, extra)

    def dropped(self, status):
        """Under a "drop" fault: the request was carried out; log it, send
        nothing and close the connection, as a lost answer looks."""
        if not self.drop:
            return False
        self.status = status
        self.log_once(0)
        self.close_connection = True
        return True

    def answer(self, status, body=b"", headers=None, length=None):
        if self.dropped(status):
            return
        if self.error_doc and 200 <= status < 300:
            self.error_doc, self.code = False, "InternalError"
            body = error_body(S3Fail(200, "InternalError", INTERNAL_ERROR),
                              self.req.resource)
            headers, length = {"Content-Type": "application/xml"}, None
        self.status = status
        self.send_response(status)
        for name, value in (headers or {}).items():
            self.send_header(name, value)
        if status != 204:
            self.send_header("Content-Length",
                             str(len(body) if length is None else length))
        self.log_once(len(body))
        self.end_headers()
        if self.stall_ms is not None:
            self.stalled(body)
            return
        if body:
            self.wfile.write(body)
            self.sent += len(body)

    def end_headers(self):
        """Every answer under a "stall" fault closes its connection, so
        that no client sends its next request into the hold. getattr:
        http.server's own errors come before serve() sets the field."""
        if getattr(self, "stall_ms", None) is not None:
            self.send_header("Connection", "close")
        super().end_headers()

    def stalled(self, body):
        """Under a "stall" fault, after the status line and headers (with
        Connection: close, so that no client sends its next request into
        the hold): half the body, then nothing for the fault's ms (or until
        released), then the connection closes."""
        self.wfile.write(body[:len(body) // 2])
        self.sent += len(body) // 2
        self.wfile.flush()
        self.app.faults.hold(self.stall_ms)
        self.close_connection = True

    def relay(self, resp, req, rewrite=None):
        """Send s3rver's answer on, streaming large bodies."""
        self.status = resp.status
        length = resp.getheader("Content-Length")
        small = length is None or int(length) <= 65536 or rewrite or \
            self.stall_ms is not None
        data = resp.read() if small and req.method != "HEAD" else None
        if resp.status >= 300 and data:
            m = re.search(rb"<Code>([^<]*)</Code>", data)
            self.code = m.group(1).decode() if m else None
        if rewrite is not None and data is not None:
            data = rewrite(data)
        if self.dropped(resp.status) or \
                (self.error_doc and 200 <= resp.status < 300):
            if data is None:
                while resp.read(1 << 20):
                    pass
            if self.error_doc:
                self.answer(resp.status)  # the body becomes the <Error>
            return
        self.send_response(resp.status)
        for name, value in resp.getheaders():
            if name.lower() == "etag" and self.etag is not None:
                value = self.etag
            if name.lower() not in HOP_HEADERS:
                self.send_header(name, value)
        if data is not None:
            if resp.status != 204:
                self.send_header("Content-Length", str(len(data)))
            self.log_once(len(data))
            self.end_headers()
            if self.stall_ms is not None:
                self.stalled(data)
                return
            self.wfile.write(data)
            self.sent += len(data)
            return
        if length is not None:
            self.send_header("Content-Length", length)
        self.log_once(int(length or 0) if req.method != "HEAD" else 0)
        self.end_headers()
        if req.method == "HEAD":
            if self.stall_ms is not None:
                self.stalled(b"")
            return
        while True:
            chunk = resp.read(1 << 20)
            if not chunk:
                break
            self.wfile.write(chunk)
            self.sent += len(chunk)


def check_digests(headers, body):
    md5 = headers.get("content-md5")
    if md5 is not None:
        try:
            want = base64.b64decode(md5, validate=True)
        except ValueError:
            want = b""
        if len(want) != 16:
            raise S3Fail(400, "InvalidDigest", "The Content-MD5 you "
                         "specified was invalid.", {"Content-MD5": md5})
        if hashlib.md5(body).digest() != want:
            raise S3Fail(400, "BadDigest", "The Content-MD5 you specified "
                         "did not match what we received.",
                         {"ExpectedDigest": md5,
                          "CalculatedDigest": base64.b64encode(
                              hashlib.md5(body).digest()).decode()})
    sha = headers.get("x-amz-content-sha256")
    if sha is None or sha == "UNSIGNED-PAYLOAD":
        return
    if sha.startswith("STREAMING-"):
        raise S3Fail(501, "NotImplemented", "The test bucket does not take "
                     "aws-chunked (STREAMING-*) payloads.")
    if not HEX64_RE.match(sha):
        raise S3Fail(400, "InvalidArgument", "x-amz-content-sha256 must be "
                     "UNSIGNED-PAYLOAD, STREAMING-..., or a valid sha256 "
                     "value.")
    got = hashlib.sha256(body).hexdigest() if body else EMPTY_SHA256
    if got != sha.lower():
        raise S3Fail(400, "XAmzContentSHA256Mismatch", "The provided "
                     "'x-amz-content-sha256' header does not match what was "
                     "computed.", {"ClientComputedContentSHA256": sha,
                                   "S3ComputedContentSHA256": got})


# ---------------------------------------------------------------------------
# Routing: what the proxy answers itself, what goes to s3rver

class App:
    def __init__(self, cfg):
        self.data_dir = cfg["data_dir"]
        self.upstream = cfg["upstream"]
        # RGW mode: no s3rver; every request that passes our checks and
        # faults goes to RGW, signed again with the RGW user's own key
        self.rgw = cfg.get("rgw")
        self.signer = None
        self.verifier = Verifier(cfg["access_keys"], cfg["region"])
        self.faults = Faults()
        self.port = None
        self.log_lock = threading.Lock()
        self.log_file = open(cfg["log"], "a", encoding="utf-8")
        self.tls = threading.local()

    def log_request_line(self, req, status, n_in, n_out, ms, fault, code):
        line = json.dumps({
            "t": datetime.datetime.now(datetime.timezone.utc).strftime(
                "%Y-%m-%dT%H:%M:%S.%fZ"),
            "method": req.method, "bucket": req.bucket,
            "key": req.key.encode("utf-8", "replace").decode()
            if req.key is not None else None,
            "query": req.raw_query, "status": status, "bytes": n_in,
            "bytes_out": n_out, "ms": round(ms, 3), "fault": fault,
            "code": code, "vhost": req.vhost is not None,
            "sse": getattr(req, "sse", None),
            "sse_kms_key_id": getattr(req, "sse_kms_key_id", None)},
            ensure_ascii=False)
        with self.log_lock:
            self.log_file.write(line + "\n")
            self.log_file.flush()

    def route(self, h, req, headers, body):
        if self.rgw is not None:
            return self.forward_rgw(h, req, headers, body)
        q = req.query
        if not req.bucket:
            return self.forward(h, req, headers, body)
        bucket_dir = os.path.join(self.data_dir, req.bucket)
        if "/" in req.bucket or req.bucket in (".", "..") or \
                not os.path.isdir(bucket_dir):
            if req.method == "PUT" and req.key is None and not q:
                return self.forward(h, req, headers, body)  # CreateBucket
            raise S3Fail(404, "NoSuchBucket", "The specified bucket does not "
                         "exist", {"BucketName": req.bucket})
        if req.key is None:
            if req.method == "GET" and "uploads" in q:
                return self.list_multipart_uploads(h, req)
            if req.method == "GET" and set(q) <= LIST_PARAMS:
                return self.list_objects(h, req)
            return self.forward(h, req, headers, body)
        if "uploadId" in q:
            return self.multipart(h, req, headers, body)
        if not key_is_storable(req.key):
            if req.method in ("GET", "HEAD"):
                raise S3Fail(404, "NoSuchKey", "The specified key does not "
                             "exist.", {"Key": req.key})
            if req.method == "DELETE":
                return h.answer(204)
            raise S3Fail(400, "InvalidArgument", "the test bucket cannot "
                         "store a key with an empty, '.' or '..' segment or "
                         "a trailing slash", {"Key": req.key})
        if req.method == "PUT" and headers.get("if-none-match") == "*" and \
                os.path.exists(object_path(self.data_dir, req.bucket,
                                           req.key)):
            raise S3Fail(412, "PreconditionFailed", "At least one of the "
                         "pre-conditions you specified did not hold",
                         {"Condition": "If-None-Match"})
        return self.forward(h, req, headers, body)

    # -- forwarding --

    def upstream_call(self, method, target, headers, body):
        for attempt in (0, 1):
            conn = getattr(self.tls, "conn", None)
            fresh = conn is None
            if fresh:
                host, port = self.upstream.rsplit(":", 1)
                conn = http.client.HTTPConnection(host, int(port),
                                                  timeout=120)
                self.tls.conn = conn
            try:
                conn.request(method, target, body=body, headers=headers)
                return conn.getresponse()
            except (http.client.RemoteDisconnected, ConnectionResetError,
                    BrokenPipeError, ConnectionAbortedError):
                conn.close()
                self.tls.conn = None
                if fresh or attempt:
                    raise
        raise AssertionError("unreachable")

    def forward(self, h, req, headers, body, rewrite=None):
        out = {name: value for name, value in headers.items()
               if name not in HOP_HEADERS}
        out["Host"] = self.upstream
        if body or req.method in ("PUT", "POST"):
            out["Content-Length"] = str(len(body))
        target = req.upstream_path + ("?" + req.raw_query
                                      if req.raw_query else "")
        resp = self.upstream_call(req.method, target, out, body)
        try:
            h.relay(resp, req, rewrite)
        finally:
            resp.close()
        return resp.status

    def rgw_headers(self, method, path, raw_query, headers, body):
        """The client's headers (less its signature, date and hop-by-hop
        ones) signed again with the RGW user's key: the client signed with
        the suite's key, which only this proxy knows; RGW knows the
        user's."""
        from botocore.auth import S3SigV4Auth
        from botocore.awsrequest import AWSRequest
        from botocore.credentials import Credentials
        out = {name: value for name, value in headers.items()
               if name not in HOP_HEADERS and name not in
               ("x-amz-date", "x-amz-content-sha256",
                "x-amz-security-token", "user-agent")}
        cpath, cquery = canonical_target(path, raw_query)
        url = "http://%s%s%s" % (self.upstream, cpath,
                                 "?" + cquery if cquery else "")
        areq = AWSRequest(method=method, url=url, headers=out, data=body)
        S3SigV4Auth(Credentials(self.rgw["access_key"],
                                self.rgw["secret_key"]), "s3",
                    "us-east-1").add_auth(areq)
        signed = dict(areq.headers.items())
        signed["Host"] = self.upstream
        if body or method in ("PUT", "POST"):
            signed["Content-Length"] = str(len(body))
        return signed

    def forward_rgw(self, h, req, headers, body):
        path = req.upstream_path  # path style, as the client encoded it
        out = self.rgw_headers(req.method, path, req.raw_query, headers, body)
        target = path + ("?" + req.raw_query if req.raw_query else "")
        resp = self.upstream_call(req.method, target, out, body)
        try:
            h.relay(resp, req)
        finally:
            resp.close()
        return resp.status

    def rgw_uploads(self, bucket):
        """The uploads in progress, with their parts, asked of RGW."""
        import boto3
        from botocore.config import Config
        c = boto3.client("s3", endpoint_url="http://" + self.upstream,
                         region_name="us-east-1",
                         aws_access_key_id=self.rgw["access_key"],
                         aws_secret_access_key=self.rgw["secret_key"],
                         config=Config(s3={"addressing_style": "path"},
                                       signature_version="s3v4"))
        out = []
        for page in c.get_paginator("list_multipart_uploads").paginate(
                Bucket=bucket):
            for u in page.get("Uploads", []):
                parts = []
                for pp in c.get_paginator("list_parts").paginate(
                        Bucket=bucket, Key=u["Key"], UploadId=u["UploadId"]):
                    parts += [{"partNumber": p["PartNumber"],
                               "size": p["Size"],
                               "md5": p["ETag"].strip('"')}
                              for p in pp.get("Parts", [])]
                out.append({"key": u["Key"], "uploadId": u["UploadId"],
                            "parts": parts, "initiated": u["Initiated"]})
        out.sort(key=lambda u: (utf8(u["key"]), u["initiated"]))
        for u in out:
            del u["initiated"]
        return out

    # -- listing --

    def list_objects(self, h, req):
        q = req.query
        v2 = q.get("list-type") == "2"
        prefix, delim = q.get("prefix", ""), q.get("delimiter", "")
        mk = q.get("max-keys", "1000")
        if not re.match(r"^\d+$", mk):
            raise S3Fail(400, "InvalidArgument", "Provided max-keys not an "
                         "integer or within integer range",
                         {"ArgumentName": "max-keys", "ArgumentValue": mk})
        max_keys = min(int(mk), 1000)
        after, after_cp = self.list_start(q, v2)
        contents, prefixes, truncated, last = [], [], False, None
        for key in walk_keys(self.data_dir, req.bucket, prefix):
            if after is not None and (utf8(key) <= utf8(after) or
                                      (after_cp and key.startswith(after))):
                continue
            cut = key.find(delim, len(prefix)) if delim else -1
            item = key[:cut + len(delim)] if cut >= 0 else key
            if cut >= 0 and prefixes and prefixes[-1] == item:
                continue
            if len(contents) + len(prefixes) >= max_keys:
                truncated = max_keys > 0  # max-keys=0 lists nothing, done
                break
            (prefixes if cut >= 0 else contents).append(item)
            last = (item, cut >= 0)
        enc = (lambda s: urllib.parse.quote(s, safe="/~")) \
            if q.get("encoding-type") == "url" else (lambda s: s)
        x = ['<?xml version="1.0" encoding="UTF-8"?>\n<ListBucketResult '
             'xmlns="http://s3.amazonaws.com/doc/2006-03-01/">']
        add = lambda name, v: x.append("<%s>%s</%s>" % (  # noqa: E731
            name, xml_escape(str(v)), name))
        add("Name", req.bucket)
        add("Prefix", enc(prefix))
        if v2:
            if "start-after" in q:
                add("StartAfter", enc(q["start-after"]))
            if "continuation-token" in q:
                add("ContinuationToken", q["continuation-token"])
            add("KeyCount", len(contents) + len(prefixes))
        else:
            add("Marker", enc(q.get("marker", "")))
        add("MaxKeys", max_keys)
        if delim:
            add("Delimiter", enc(delim))
        add("IsTruncated", "true" if truncated else "false")
        if truncated and v2:
            add("NextContinuationToken", base64.urlsafe_b64encode(
                json.dumps(last).encode()).decode())
        elif truncated:
            add("NextMarker", enc(last[0]))
        for key in contents:
            path = object_path(self.data_dir, req.bucket, key)
            try:
                st = os.stat(path)
                etag = object_etag(path)
            except FileNotFoundError:
                continue
            x.append("<Contents>")
            add("Key", enc(key))
            add("LastModified", iso_ms(st.st_mtime))
            add("ETag", '"%s"' % etag)
            add("Size", st.st_size)
            add("StorageClass", "STANDARD")
            x.append("</Contents>")
        for p in prefixes:
            x.append("<CommonPrefixes>")
            add("Prefix", enc(p))
            x.append("</CommonPrefixes>")
        if q.get("encoding-type") == "url":
            add("EncodingType", "url")
        x.append("</ListBucketResult>")
        h.answer(200, "".join(x).encode(), {"Content-Type": "application/xml"})

    @staticmethod
    def list_start(q, v2):
        """(key to list after, whether it was a common prefix)."""
        if v2 and "continuation-token" in q:
            try:
                after, is_cp = json.loads(base64.urlsafe_b64decode(
                    q["continuation-token"].encode()))
                return str(after), bool(is_cp)
            except (ValueError, TypeError):
                raise S3Fail(400, "InvalidArgument", "The continuation token "
                             "provided is incorrect",
                             {"ArgumentName": "continuation-token"})
        after = q.get("start-after" if v2 else "marker")
        return after, False

    def list_multipart_uploads(self, h, req):
        prefix = req.query.get("prefix", "")
        x = ['<?xml version="1.0" encoding="UTF-8"?>\n'
             '<ListMultipartUploadsResult xmlns="http://s3.amazonaws.com/doc/'
             '2006-03-01/"><Bucket>%s</Bucket><Prefix>%s</Prefix>'
             '<MaxUploads>10000</MaxUploads><IsTruncated>false</IsTruncated>'
             % (xml_escape(req.bucket), xml_escape(prefix))]
        for u in list_uploads(self.data_dir, req.bucket):
            if u["key"].startswith(prefix):
                x.append("<Upload><Key>%s</Key><UploadId>%s</UploadId>"
                         "<StorageClass>STANDARD</StorageClass><Initiated>%s"
                         "</Initiated></Upload>" % (
                             xml_escape(u["key"]), u["uploadId"],
                             iso_ms(u["initiated"])))
        x.append("</ListMultipartUploadsResult>")
        h.answer(200, "".join(x).encode(), {"Content-Type": "application/xml"})

    # -- multipart --

    def multipart(self, h, req, headers, body):
        upload_id = req.query["uploadId"]
        u = read_upload(self.data_dir, req.bucket, upload_id)
        if u is None or u["key"] != req.key:
            raise S3Fail(404, "NoSuchUpload", "The specified upload does not "
                         "exist. The upload ID may be invalid, or the upload "
                         "may have been aborted or completed.",
                         {"UploadId": upload_id})
        if req.method == "DELETE":
            shutil.rmtree(u["dir"], ignore_errors=True)
            return h.answer(204)
        if req.method == "GET":
            return self.list_parts(h, req, u)
        if req.method == "PUT":
            n = req.query.get("partNumber", "")
            if not n.isdigit() or not 1 <= int(n) <= 10000:
                raise S3Fail(400, "InvalidArgument", "Part number must be an "
                             "integer between 1 and 10000, inclusive",
                             {"ArgumentName": "partNumber"})
            return self.forward(h, req, headers, body)
        if req.method == "POST":
            return self.complete(h, req, headers, body, u)
        raise S3Fail(405, "MethodNotAllowed", "The specified method is not "
                     "allowed against this resource.")

    def list_parts(self, h, req, u):
        x = ['<?xml version="1.0" encoding="UTF-8"?>\n<ListPartsResult xmlns='
             '"http://s3.amazonaws.com/doc/2006-03-01/"><Bucket>%s</Bucket>'
             '<Key>%s</Key><UploadId>%s</UploadId><StorageClass>STANDARD'
             '</StorageClass><MaxParts>10000</MaxParts><IsTruncated>false'
             '</IsTruncated>' % (xml_escape(req.bucket), xml_escape(req.key),
                                 u["uploadId"])]
        for p in u["parts"]:
            x.append("<Part><PartNumber>%d</PartNumber><LastModified>%s"
                     "</LastModified><ETag>&quot;%s&quot;</ETag><Size>%d"
                     "</Size></Part>" % (p["partNumber"], iso_ms(p["mtime"]),
                                         p["md5"], p["size"]))
        x.append("</ListPartsResult>")
        h.answer(200, "".join(x).encode(), {"Content-Type": "application/xml"})

    def complete(self, h, req, headers, body, u):
        listed = parse_complete(body)
        have = {p["partNumber"]: p for p in u["parts"]}
        numbers = [n for n, _ in listed]
        if numbers != sorted(set(numbers)):
            raise S3Fail(400, "InvalidPartOrder", "The list of parts was not "
                         "in ascending order. The parts list must be "
                         "specified in order by part number.")
        for i, (n, etag) in enumerate(listed):
            p = have.get(n)
            if p is None or p["md5"].lower() != etag.lower():
                raise S3Fail(400, "InvalidPart", "One or more of the "
                             "specified parts could not be found. The part "
                             "may not have been uploaded, or the specified "
                             "entity tag may not match the part's entity "
                             "tag.", {"PartNumber": n, "ETag": etag})
            if i + 1 < len(listed) and p["size"] < MIN_PART:
                raise S3Fail(400, "EntityTooSmall", "Your proposed upload is "
                             "smaller than the minimum allowed object size.",
                             {"ProposedSize": p["size"],
                              "MinSizeAllowed": MIN_PART, "PartNumber": n})
        etag = multipart_etag([have[n]["md5"] for n, _ in listed])
        md5_path = object_path(self.data_dir, req.bucket, req.key) + ".md5"

        def rewrite(data):
            if b"<Error>" in data:
                return data
            with open(md5_path, "w", encoding="utf-8") as f:
                f.write(etag)
            return re.sub(rb"<ETag>[^<]*</ETag>",
                          ("<ETag>&quot;%s&quot;</ETag>" % etag).encode(),
                          data)
        return self.forward(h, req, headers, body, rewrite)


def parse_complete(body):
    try:
        root = ET.fromstring(body)
    except ET.ParseError:
        root = None
    parts = []
    for el in root.iter() if root is not None else []:
        if el.tag.rsplit("}", 1)[-1] != "Part":
            continue
        n = etag = None
        for child in el:
            name = child.tag.rsplit("}", 1)[-1]
            if name == "PartNumber":
                n = (child.text or "").strip()
            elif name == "ETag":
                etag = (child.text or "").strip().replace('"', "")
        if n is None or not n.isdigit() or etag is None:
            root = None
            break
        parts.append((int(n), etag))
    if root is None or not parts:
        raise S3Fail(400, "MalformedXML", "The XML you provided was not "
                     "well-formed or did not validate against our published "
                     "schema.")
    return parts


# ---------------------------------------------------------------------------
# The data port can go down (connection refused) and come back on the same
# port; the control port stays up throughout.

class Server(http.server.ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True
    request_queue_size = 128


class DataPort:
    def __init__(self, app, port, host="127.0.0.1"):
        self.app = app
        self.port = port
        self.host = host
        self.lock = threading.Lock()
        self.server = None
        self.conns = set()
        self.is_down = False

    def track(self, sock, alive):
        with self.lock:
            if alive:
                self.conns.add(sock)
            else:
                self.conns.discard(sock)

    def up(self, timeout=10.0):
        deadline = time.monotonic() + timeout
        while True:
            try:
                server = Server((self.host, self.port), Handler)
                break
            except OSError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.05)
        self.port = server.server_address[1]
        with self.lock:
            self.server = server
            self.is_down = False
        threading.Thread(target=server.serve_forever, args=(0.05,),
                         daemon=True).start()

    def down(self):
        with self.lock:
            server, self.server = self.server, None
            self.is_down = True
            conns = list(self.conns)
        if server is not None:
            server.shutdown()
            server.server_close()
        for sock in conns:
            try:
                sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass


class Control(http.server.BaseHTTPRequestHandler):
    """POST /faults {kind,count,method,prefix,retry_after,ms} -> the fault;
    DELETE /faults -> clears them (and brings the data port back);
    POST /faults/release -> lets every PUT held right now go on;
    GET /faults, GET /stats, GET /uploads?bucket=B, GET /health."""

    protocol_version = "HTTP/1.1"
    app = None

    def log_message(self, format, *args):  # noqa: A002
        pass

    def reply(self, status, obj):
        data = json.dumps(obj).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def do_GET(self):
        app = self.app
        path, _, query = self.path.partition("?")
        q = dict(urllib.parse.parse_qsl(query))
        if path == "/health":
            return self.reply(200, {"ok": True, "port": app.port.port,
                                    "down": app.port.is_down})
        if path == "/stats":
            return self.reply(200, app.faults.snapshot())
        if path == "/faults":
            return self.reply(200, app.faults.snapshot()["active"])
        if path == "/uploads":
            bucket = q.get("bucket", "")
            if not bucket or "/" in bucket or bucket in (".", ".."):
                return self.reply(400, {"error": "bucket= is required"})
            if app.rgw is not None:
                return self.reply(200, app.rgw_uploads(bucket))
            out = [{"key": u["key"], "uploadId": u["uploadId"],
                    "parts": [{k: p[k] for k in ("partNumber", "size", "md5")}
                              for p in u["parts"]]}
                   for u in list_uploads(app.data_dir, bucket)]
            return self.reply(200, out)
        return self.reply(404, {"error": "no such route"})

    def do_POST(self):
        if self.path == "/faults/release":
            return self.reply(200, {"released": self.app.faults.release()})
        if self.path != "/faults":
            return self.reply(404, {"error": "no such route"})
        n = int(self.headers.get("Content-Length") or 0)
        try:
            spec = json.loads(self.rfile.read(n) or b"{}")
            f = self.app.faults.add(spec)
        except ValueError as e:
            return self.reply(400, {"error": str(e)})
        if f["kind"] == "down":
            self.app.port.down()
        return self.reply(200, f)

    def do_DELETE(self):
        if self.path != "/faults":
            return self.reply(404, {"error": "no such route"})
        self.app.faults.clear()
        if self.app.port.is_down:
            self.app.port.up()
        return self.reply(200, {"cleared": True})


# ---------------------------------------------------------------------------
# s3rver, our child in our process group

def start_s3rver(cfg):
    log_path = os.path.join(cfg["workdir"], "s3rver.log")
    env = dict(os.environ)
    env["NODE_OPTIONS"] = "--openssl-legacy-provider"
    with open(log_path, "wb") as log:
        return subprocess.Popen(
            [cfg["s3rver_bin"], "-d", cfg["data_dir"], "-a", "127.0.0.1",
             "-p", str(cfg.get("s3rver_port") or 0), "--silent",
             "--no-vhost-buckets"],
            stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
            env=env)


def s3rver_port(cfg, proc, timeout=30.0):
    """The port s3rver reports once it listens."""
    log_path = os.path.join(cfg["workdir"], "s3rver.log")
    deadline = time.monotonic() + timeout
    pat = re.compile(rb"S3rver listening on 127\.0\.0\.1:(\d+)")
    while time.monotonic() < deadline:
        with open(log_path, "rb") as f:
            m = pat.search(f.read())
        if m:
            return int(m.group(1))
        if proc.poll() is not None:
            break
        time.sleep(0.05)
    proc.kill()
    with open(log_path, "rb") as f:
        tail = f.read()[-2000:].decode(errors="replace")
    raise RuntimeError("s3rver did not start: %s" % tail)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("config", help="JSON config file written by bucket.py")
    args = ap.parse_args()
    with open(args.config, encoding="utf-8") as f:
        cfg = json.load(f)
    parent = os.getppid()
    s3rver = start_s3rver(cfg) if cfg.get("rgw") is None else None
    stopping = threading.Event()

    def stop(*_):
        stopping.set()

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    try:
        cfg["upstream"] = "127.0.0.1:0"
        app = App(cfg)
        if s3rver is not None:
            s3port = s3rver_port(cfg, s3rver)
            app.upstream = "127.0.0.1:%d" % s3port
        else:
            s3port = None
            app.upstream = cfg["rgw"]["endpoint"]
        Handler.app = app
        Control.app = app
        app.port = DataPort(app, cfg.get("port") or 0,
                            cfg.get("host") or "127.0.0.1")
        app.port.up()
        control = Server(("127.0.0.1", cfg.get("control_port") or 0), Control)
        threading.Thread(target=control.serve_forever, args=(0.05,),
                         daemon=True).start()
        ready = {"port": app.port.port,
                 "control_port": control.server_address[1],
                 "s3rver_port": s3port, "pid": os.getpid(),
                 "s3rver_pid": s3rver.pid if s3rver else None}
        tmp = cfg["ready_file"] + ".tmp"
        with open(tmp, "w", encoding="utf-8") as f:
            json.dump(ready, f)
        os.rename(tmp, cfg["ready_file"])
        while not stopping.wait(0.25):
            if os.getppid() != parent or \
                    (s3rver is not None and s3rver.poll() is not None):
                break  # orphaned, or s3rver died: stop everything
    finally:
        if s3rver is None:
            return 0
        s3rver.terminate()
        try:
            s3rver.wait(5)
        except subprocess.TimeoutExpired:
            s3rver.kill()
    return 0


if __name__ == "__main__":
    sys.exit(main())
