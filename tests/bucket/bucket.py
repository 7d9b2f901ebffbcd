#!/usr/bin/python3
"""The test bucket: npm s3rver behind our SigV4-verifying, fault-injecting
proxy (s3proxy.py), for every end-to-end test, `make demo` and benchmarks.

    b = TestBucket(buckets=["lake"]).start()     # or: with TestBucket() as b:
    client = b.boto3()                           # signed, path style
    b.fault("503", count=2, method="PUT", prefix="queen/tenant=")
    b.read_object("lake", key)                   # straight from s3rver's files
    b.stop()

Two kinds (`kind=`, by default $QUEEN_TEST_BUCKET or "s3rver"): "s3rver"
(npm s3rver, its files on disk) and "rgw" (Ceph's RADOS Gateway in a
loopback cell, rgw.py, started once per process and shared: each bucket is
an RGW tenant of its own, so buckets of the same name never meet).  Faults,
checks and the request log are the proxy's, the same for both.

One child process (the proxy, in its own process group, with s3rver as its
child) is started per bucket.  stop() ends that process group; an atexit
handler does it too, and the proxy exits by itself when its parent dies, so
nothing outlives the test.  A test reads the lake from s3rver's files or with
boto3, never through the broker's own S3 client.  See README.md beside this
file for the proxy's rules, the control API and the request log.

CLI (make demo, benchmarks):
    /usr/bin/python3 tests/bucket/bucket.py serve --buckets lake \\
        --access-key K --secret-key S [--region R] [--port P] \\
        [--workdir D] --ready-file F
"""

import argparse
import atexit
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.parse
import urllib.request

HERE = os.path.dirname(os.path.abspath(__file__))
if HERE not in sys.path:
    sys.path.insert(0, HERE)

import s3proxy  # noqa: E402  (needs HERE on sys.path)

TESTS_DIR = os.path.dirname(HERE)
S3RVER_BIN = os.path.join(TESTS_DIR, "node_modules", ".bin", "s3rver")
PYTHON = "/usr/bin/python3"
_live = set()
_seq = [0]
KINDS = ("s3rver", "rgw")


def default_kind():
    kind = os.environ.get("QUEEN_TEST_BUCKET") or "s3rver"
    if kind not in KINDS:
        raise ValueError("QUEEN_TEST_BUCKET=%r: one of %s" % (kind, KINDS))
    return kind
_install_lock = threading.Lock()


def ensure_s3rver():
    """Install the npm packages of tests/package.json when s3rver is
    missing (what scripts/setup.sh does), and return s3rver's path."""
    with _install_lock:
        if not os.path.exists(S3RVER_BIN):
            subprocess.run(["npm", "install", "--no-audit", "--no-fund",
                            "--loglevel=error"], cwd=TESTS_DIR, check=True,
                           stdout=subprocess.DEVNULL)
        if not os.path.exists(S3RVER_BIN):
            raise RuntimeError("npm install did not provide %s" % S3RVER_BIN)
    return S3RVER_BIN


def wait_until(pred, timeout, what):
    """Poll pred() until it returns a true value (returned) or the deadline
    passes (AssertionError naming what was awaited)."""
    deadline = time.monotonic() + timeout
    while True:
        v = pred()
        if v:
            return v
        if time.monotonic() > deadline:
            raise AssertionError("timed out after %.1fs waiting for %s"
                                 % (timeout, what))
        time.sleep(0.02)


class RgwReader:
    """A lake reader (list_keys, read) over an RGW bucket, for
    tests/e2e/lake.py.  A listing notes each key's ETag; the next read() of
    that key GETs it only when that ETag is not the one of the bytes it
    holds, so polling a lake of a thousand objects costs a LIST, not a
    thousand GETs (on s3rver the reader opens files instead).  A read not
    preceded by a listing of its key always GETs."""

    def __init__(self, client, bucket):
        self.client = client
        self.bucket = bucket
        self.listed = {}  # key -> ETag at the last listing
        self.cache = {}   # key -> (ETag, bytes)

    def list_keys(self, prefix=""):
        keys = []
        pages = self.client.get_paginator("list_objects_v2").paginate(
            Bucket=self.bucket, Prefix=prefix)
        for page in pages:
            for o in page.get("Contents", []):
                self.listed[o["Key"]] = o["ETag"]
                keys.append(o["Key"])
        return sorted(keys, key=lambda k: k.encode())

    def read(self, key):
        hit = self.cache.get(key)
        listed = self.listed.pop(key, None)  # good for one read
        if hit is not None and listed == hit[0]:
            return hit[1]
        try:
            r = self.client.get_object(Bucket=self.bucket, Key=key)
        except self.client.exceptions.NoSuchKey:
            self.cache.pop(key, None)
            return None
        data = r["Body"].read()
        self.cache[key] = (r["ETag"], data)
        return data


class TestBucket:
    __test__ = False  # not a pytest test class despite its name

    def __init__(self, buckets=("lake",), access_key="queen",
                 secret_key="queen-secret-key", region="us-east-1",
                 port=None, workdir=None, extra_keys=None, keep=None,
                 host="127.0.0.1", kind=None):
        self.kind = kind or default_kind()
        if self.kind not in KINDS:
            raise ValueError("kind %r: one of %s" % (self.kind, KINDS))
        self.buckets = list(buckets)
        self.host = host
        self.access_key = access_key
        self.secret_key = secret_key
        self.region = region
        self.port = port
        self.keys = {access_key: secret_key}
        self.keys.update(extra_keys or {})
        self.own_workdir = workdir is None
        # a temp workdir we made is removed by stop() unless kept
        self.keep = keep if keep is not None else \
            os.environ.get("QUEEN_KEEP_BUCKET") == "1"
        self.workdir = workdir
        self.proc = None
        self.ready = None
        self.direct = None  # rgw: a boto3 client of RGW itself
        self.data_dir = None

    # -- life cycle --

    def start(self, timeout=60.0):
        if self.workdir is None:
            self.workdir = tempfile.mkdtemp(prefix="queen-bucket-")
        os.makedirs(self.workdir, exist_ok=True)
        rgw_cfg = None
        if self.kind == "rgw":
            rgw_cfg = self._rgw_tenant()
        else:
            self.data_dir = os.path.join(self.workdir, "s3rver")
            for b in self.buckets:
                os.makedirs(os.path.join(self.data_dir, b), exist_ok=True)
        self.log_path = os.path.join(self.workdir, "requests.jsonl")
        ready_file = os.path.join(self.workdir, "proxy.ready")
        if os.path.exists(ready_file):
            os.unlink(ready_file)
        cfg = {"workdir": self.workdir, "data_dir": self.data_dir,
               "s3rver_bin": ensure_s3rver() if rgw_cfg is None else None,
               "rgw": rgw_cfg, "access_keys": self.keys,
               "region": self.region, "host": self.host, "port": self.port,
               "control_port": 0,
               "log": self.log_path, "ready_file": ready_file}
        cfg_path = os.path.join(self.workdir, "proxy.json")
        fd = os.open(cfg_path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            json.dump(cfg, f)  # holds the secret: mode 0600, not argv
        with open(os.path.join(self.workdir, "proxy.err"), "ab") as err:
            self.proc = subprocess.Popen(
                [PYTHON, os.path.join(HERE, "s3proxy.py"), cfg_path],
                stdin=subprocess.DEVNULL, stdout=err, stderr=err,
                start_new_session=True)
        _live.add(self)

        def is_ready():
            if self.proc.poll() is not None:
                raise RuntimeError("the test bucket's proxy exited (%s): %s"
                                   % (self.proc.returncode, self._err_tail()))
            return os.path.exists(ready_file)
        try:
            wait_until(is_ready, timeout, "the test bucket to start")
        except BaseException:
            self.stop()
            raise
        with open(ready_file, encoding="utf-8") as f:
            self.ready = json.load(f)
        self.port = self.ready["port"]
        return self

    def _rgw_tenant(self):
        """A tenant of the shared RGW cell with a user of its own (random
        key: the proxy signs for it) holding self.buckets, empty."""
        import rgw
        cell = rgw.shared()
        _seq[0] += 1
        tenant = "tb%d_%d" % (os.getpid(), _seq[0])
        ak, sk = "ak" + tenant, os.urandom(20).hex()
        cell.add_user(tenant, "queen", ak, sk)
        self.direct = cell.client(ak, sk, self.region)
        for b in self.buckets:
            self.direct.create_bucket(Bucket=b)
        self.rgw_endpoint = "http://" + cell.endpoint
        self.rgw_keys = (ak, sk)
        return {"endpoint": cell.endpoint, "access_key": ak,
                "secret_key": sk}

    def _rgw_empty(self):
        """Free the memstore OSD's RAM: delete what the buckets hold."""
        c = self.direct
        for b in self.buckets:
            try:
                for page in c.get_paginator(
                        "list_multipart_uploads").paginate(Bucket=b):
                    for u in page.get("Uploads", []):
                        c.abort_multipart_upload(Bucket=b, Key=u["Key"],
                                                 UploadId=u["UploadId"])
                for page in c.get_paginator("list_objects_v2").paginate(
                        Bucket=b):
                    objs = [{"Key": o["Key"]}
                            for o in page.get("Contents", [])]
                    if objs:
                        c.delete_objects(Bucket=b,
                                         Delete={"Objects": objs})
            except Exception:  # best effort: the cell goes at exit anyway
                pass

    def _err_tail(self):
        try:
            with open(os.path.join(self.workdir, "proxy.err"), "rb") as f:
                return f.read()[-2000:].decode(errors="replace")
        except OSError:
            return ""

    def stop(self):
        proc, self.proc = self.proc, None
        _live.discard(self)
        if proc is None:
            return
        self._end(proc)
        if self.direct is not None and not self.keep:
            self._rgw_empty()
        if self.own_workdir and not self.keep:
            shutil.rmtree(self.workdir, ignore_errors=True)

    @staticmethod
    def _end(proc):
        for sig, wait in ((signal.SIGTERM, 5), (signal.SIGKILL, 5)):
            try:
                os.killpg(proc.pid, sig)
            except ProcessLookupError:
                break
            try:
                proc.wait(wait)
            except subprocess.TimeoutExpired:
                continue
            # the proxy is gone; s3rver shares its group: make sure of it
            try:
                os.killpg(proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            break

    def __enter__(self):
        return self.start() if self.proc is None else self

    def __exit__(self, *exc):
        self.stop()

    # -- addresses --

    @property
    def endpoint(self):
        return "http://%s:%d" % (self.host, self.ready["port"])

    @property
    def vhost_endpoint(self):
        """The proxy for virtual-host clients: a request to
        <bucket>.localhost:<port> is the bucket's (curl resolves any
        *.localhost itself; glibc does not, so Python clients cannot)."""
        return "http://localhost:%d" % self.ready["port"]

    @property
    def s3rver_endpoint(self):
        """The server behind the proxy (s3rver, or RGW, which wants the
        RGW user's signature); for debugging only."""
        if self.kind == "rgw":
            return self.rgw_endpoint
        return "http://127.0.0.1:%d" % self.ready["s3rver_port"]

    def fastest_target(self):
        """(endpoint, access key, secret key) for a client that should
        reach the bucket the fastest way, in benchmarks: RGW itself for the
        rgw kind (the tenant user's key; no proxy, so no faults and no
        request log), else the proxy."""
        if self.kind == "rgw":
            return (self.rgw_endpoint,) + self.rgw_keys
        return self.endpoint, self.access_key, self.secret_key

    @property
    def control_endpoint(self):
        return "http://127.0.0.1:%d" % self.ready["control_port"]

    # -- reading the bucket from disk --

    def object_path(self, bucket, key):
        if self.kind == "rgw":
            raise NotImplementedError("an RGW bucket has no files")
        return s3proxy.object_path(self.data_dir, bucket, key)

    def read_object(self, bucket, key):
        if self.kind == "rgw":  # from RGW itself, not through the proxy
            try:
                return self.direct.get_object(Bucket=bucket,
                                              Key=key)["Body"].read()
            except self.direct.exceptions.NoSuchKey:
                return None
        if not s3proxy.key_is_storable(key):
            return None
        try:
            with open(self.object_path(bucket, key), "rb") as f:
                return f.read()
        except (FileNotFoundError, NotADirectoryError):
            return None

    def reader(self, bucket="lake"):
        """A lake reader (tests/e2e/lake.py) for an RGW bucket."""
        return RgwReader(self.direct, bucket)

    def list_keys(self, bucket, prefix=""):
        if self.kind == "rgw":
            pages = self.direct.get_paginator("list_objects_v2").paginate(
                Bucket=bucket, Prefix=prefix)
            return sorted((o["Key"] for p in pages
                           for o in p.get("Contents", [])),
                          key=lambda k: k.encode())
        return s3proxy.walk_keys(self.data_dir, bucket, prefix)

    def boto3(self, retries=0, access_key=None, secret_key=None):
        """A Debian boto3 S3 client for the proxy; retries=0 so that a test
        sees every fault (botocore would otherwise retry 500 and 503)."""
        import boto3
        from botocore.config import Config
        return boto3.client(
            "s3", endpoint_url=self.endpoint, region_name=self.region,
            aws_access_key_id=access_key or self.access_key,
            aws_secret_access_key=secret_key or self.secret_key,
            config=Config(s3={"addressing_style": "path"},
                          signature_version="s3v4",
                          retries={"total_max_attempts": retries + 1,
                                   "mode": "standard"}))

    # -- control API --

    def _control(self, method, path, body=None):
        data = json.dumps(body).encode() if body is not None else None
        req = urllib.request.Request(self.control_endpoint + path, data=data,
                                     method=method)
        if data is not None:
            req.add_header("Content-Type", "application/json")
        try:
            with urllib.request.urlopen(req, timeout=30) as resp:
                return json.loads(resp.read())
        except urllib.error.HTTPError as e:
            raise ValueError("control %s %s: %s" % (
                method, path, e.read().decode(errors="replace"))) from None

    def fault(self, kind, count=1, method=None, prefix=None,
              retry_after=None, ms=None, query=None):
        """Add a fault; returns it (with its id).  count < 0 never runs
        out; "down" and "down503" last until clear_faults().  query names
        a query parameter the request must carry (e.g. "uploadId")."""
        return self._control("POST", "/faults", {
            "kind": kind, "count": count, "method": method,
            "prefix": prefix, "retry_after": retry_after, "ms": ms,
            "query": query})

    def clear_faults(self):
        self._control("DELETE", "/faults")

    def release_held(self):
        """Let every PUT a `hold` fault holds right now go on at once
        (handled normally, it lands); returns how many were held."""
        return self._control("POST", "/faults/release", {})["released"]

    def stats(self):
        return self._control("GET", "/stats")

    def uploads(self, bucket):
        return self._control("GET", "/uploads?bucket=" +
                             urllib.parse.quote(bucket, safe=""))

    def log_lines(self):
        try:
            with open(self.log_path, encoding="utf-8") as f:
                return [json.loads(line) for line in f if line.strip()]
        except FileNotFoundError:
            return []


@atexit.register
def _stop_all():
    for b in list(_live):
        b.stop()


def serve(argv):
    ap = argparse.ArgumentParser(prog="bucket.py serve")
    ap.add_argument("--buckets", default="lake",
                    help="comma-separated bucket names")
    ap.add_argument("--access-key", required=True)
    ap.add_argument("--secret-key", required=True)
    ap.add_argument("--region", default="us-east-1")
    ap.add_argument("--port", type=int, default=None)
    ap.add_argument("--workdir", default=None)
    ap.add_argument("--ready-file", required=True)
    ap.add_argument("--kind", choices=KINDS, default=None)
    a = ap.parse_args(argv)
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    signal.signal(signal.SIGINT, lambda *_: stop.set())
    b = TestBucket(buckets=[x for x in a.buckets.split(",") if x],
                   access_key=a.access_key, secret_key=a.secret_key,
                   region=a.region, port=a.port, workdir=a.workdir,
                   kind=a.kind).start()
    try:
        line = json.dumps({"endpoint": b.endpoint,
                           "control_endpoint": b.control_endpoint,
                           "s3rver_endpoint": b.s3rver_endpoint,
                           "data_dir": b.data_dir, "workdir": b.workdir,
                           "log": b.log_path, "region": b.region,
                           "buckets": b.buckets})
        tmp = a.ready_file + ".tmp"
        with open(tmp, "w", encoding="utf-8") as f:
            f.write(line + "\n")
        os.rename(tmp, a.ready_file)
        while not stop.wait(0.5):
            if b.proc is None or b.proc.poll() is not None:
                print("bucket: the proxy exited", file=sys.stderr)
                return 1
    finally:
        b.stop()
    return 0


if __name__ == "__main__":
    if len(sys.argv) >= 2 and sys.argv[1] == "serve":
        sys.exit(serve(sys.argv[2:]))
    print(__doc__, file=sys.stderr)
    sys.exit(2)
