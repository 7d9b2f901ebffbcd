#!/usr/bin/python3
"""bench/s3put: PUT throughput of our S3 client beside the `curl` command.

Same run, same server (s3rver behind the SigV4-verifying test bucket proxy),
same files: 256 objects of 1 MiB (single PUT) and 8 objects of 64 MiB
(multipart, 16 MiB parts), uploaded one object after another (our client
keeps 2 parts of one upload in flight, its default part_concurrency).

  ours: build/tools/s3tool put-many (one process, our SigV4, libcurl as a
        transport, SHA-256 + MD5 per object, kept-alive connections).
  order: each set is split in two halves run ours, curl, curl, ours, after
        a few untimed warm-up PUTs.
  peer: the curl command, one process per request, `curl --aws-sigv4` with
        the header fixes of docs/design/dependencies.md §4 (an explicit
        x-amz-content-sha256 computed here inside the timed loop, an explicit
        Content-Type, a sorted and encoded query, `uploads=`); its multipart
        is create / parts / complete driven from here, the parts pre-split
        into files before the clock starts (our tool reads its files before
        its clock starts too).

Prints MB/s for both and the ratio ours/curl per set, then one JSON line.
Usage: bench/s3put.py [--small N] [--large N] [--workdir DIR]
Not a test: figures depend on the machine; nothing here asserts a speed."""

import argparse
import hashlib
import json
import os
import re
import subprocess
import sys
import tempfile
import time
import urllib.parse

ROOT = os.environ.get("QUEEN_ROOT") or os.path.dirname(
    os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "tests", "bucket"))
from bucket import TestBucket  # noqa: E402

MIB = 1 << 20
PART = 16 * MIB
AK, SK, REGION = "queen", "queen-secret-key", "us-east-1"


def s3tool_bin():
    tools = os.environ.get("QUEEN_TOOLS") or os.path.join(ROOT, "build",
                                                          "tools")
    return os.path.join(tools, "s3tool")


def make_files(d, n, size, tag):
    paths = []
    for i in range(n):
        p = os.path.join(d, "%s-%04d.bin" % (tag, i))
        with open(p, "wb") as f:
            f.write(os.urandom(size))
        paths.append(p)
    return paths


def ours(b, prefix, paths, threshold_mb):
    env = dict(os.environ, QUEEN_S3_ENDPOINT=b.endpoint,
               QUEEN_S3_BUCKET="lake", QUEEN_S3_REGION=REGION,
               QUEEN_S3_ACCESS_KEY=AK, QUEEN_S3_SECRET_KEY=SK,
               QUEEN_S3_PATH_STYLE="true",
               QUEEN_S3_MULTIPART_THRESHOLD_MB=str(threshold_mb))
    p = subprocess.run([s3tool_bin(), "put-many", prefix, *paths], env=env,
                       capture_output=True, text=True, check=False)
    out = json.loads(p.stdout.strip().splitlines()[-1])
    if not out["ok"]:
        raise SystemExit("s3tool failed: %s" % out["error"])
    return out["bytes"], out["seconds"], out["requests"]


def q(s, safe=""):
    return urllib.parse.quote(s, safe=safe)


def curl(url, method, sha, body_args, dump_headers=False):
    cmd = ["curl", "-sS", "--fail", "--aws-sigv4",
           "aws:amz:%s:s3" % REGION, "--user", "%s:%s" % (AK, SK),
           "-H", "x-amz-content-sha256: " + sha,
           "-H", "Content-Type: application/octet-stream",
           "-X", method, *body_args, url]
    if dump_headers:
        cmd[1:1] = ["-D", "-"]
    p = subprocess.run(cmd, capture_output=True, check=False)
    if p.returncode != 0:
        raise SystemExit("curl %s %s failed: %s" % (method, url,
                                                      p.stderr.decode()))
    return p.stdout.decode("utf-8", "replace")


def file_sha(path):
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(MIB), b""):
            h.update(chunk)
    return h.hexdigest()


def curl_single(b, key, path):
    url = "%s/lake/%s" % (b.endpoint, q(key, "/"))
    curl(url, "PUT", file_sha(path), ["-T", path])


def curl_multipart(b, key, parts):
    base = "%s/lake/%s" % (b.endpoint, q(key, "/"))
    empty = hashlib.sha256(b"").hexdigest()
    answer = curl(base + "?uploads=", "POST", empty, ["--data-binary", ""])
    upload = re.search(r"<UploadId>([^<]+)</UploadId>", answer).group(1)
    etags = []
    for n, part in enumerate(parts, 1):
        url = "%s?partNumber=%d&uploadId=%s" % (base, n, q(upload))
        head = curl(url, "PUT", file_sha(part), ["-T", part],
                    dump_headers=True)
        etags.append(re.search(r"(?im)^etag:\s*(\S+)", head).group(1))
    xml = "<CompleteMultipartUpload>%s</CompleteMultipartUpload>" % "".join(
        "<Part><PartNumber>%d</PartNumber><ETag>%s</ETag></Part>" % (n, e)
        for n, e in enumerate(etags, 1))
    body = xml.encode()
    curl(base + "?uploadId=" + q(upload), "POST",
         hashlib.sha256(body).hexdigest(), ["--data-binary", xml])


def split_parts(path):
    parts = []
    with open(path, "rb") as f:
        for n in range(1, 10001):
            chunk = f.read(PART)
            if not chunk:
                break
            p = "%s.part%d" % (path, n)
            with open(p, "wb") as g:
                g.write(chunk)
            parts.append(p)
    return parts


def curl_set(b, prefix, paths, multipart):
    parts = {p: split_parts(p) for p in paths} if multipart else {}
    t0 = time.monotonic()
    for p in paths:
        key = prefix + os.path.basename(p)
        if multipart:
            curl_multipart(b, key, parts[p])
        else:
            curl_single(b, key, p)
    secs = time.monotonic() - t0
    return sum(os.path.getsize(p) for p in paths), secs


def check_landed(b, prefix, paths):
    for p in (paths[0], paths[-1]):
        with open(p, "rb") as f:
            want = f.read()
        got = b.read_object("lake", prefix + os.path.basename(p))
        if got != want:
            raise SystemExit("bench: %s%s did not land intact" %
                             (prefix, os.path.basename(p)))


def run_set(b, name, paths, multipart):
    """ABBA order over two halves of the files (ours, curl, curl, ours), so
    neither side profits from a server that warms up during the run."""
    half = max(1, len(paths) // 2)
    halves = [paths[:half], paths[half:]] if len(paths) > 1 else [paths]
    ob = osecs = cb = csecs = 0.0
    reqs = {}
    for i, h in enumerate(halves):
        steps = ["ours", "curl"] if i % 2 == 0 else ["curl", "ours"]
        for who in steps:
            if who == "ours":
                n, t, r = ours(b, "ours/%s/" % name, h,
                               16 if multipart else 64)
                ob, osecs = ob + n, osecs + t
                for row in r:
                    k = "%s %d" % (row["op"], row["code"])
                    reqs[k] = reqs.get(k, 0) + row["count"]
            else:
                n, t = curl_set(b, "curl/%s/" % name, h, multipart)
                cb, csecs = cb + n, csecs + t
    check_landed(b, "ours/%s/" % name, paths)
    check_landed(b, "curl/%s/" % name, paths)
    o_mbs, c_mbs = ob / MIB / osecs, cb / MIB / csecs
    print("s3put %-22s ours %8.1f MB/s   curl %8.1f MB/s   ratio %.2f"
          % ("%s (%d x %d MiB)" % (name, len(paths),
                                   os.path.getsize(paths[0]) // MIB),
             o_mbs, c_mbs, o_mbs / c_mbs))
    return {"set": name, "objects": len(paths), "bytes": int(ob),
            "ours_mb_s": round(o_mbs, 2), "curl_mb_s": round(c_mbs, 2),
            "ratio": round(o_mbs / c_mbs, 3), "ours_requests": reqs}


def warm_up(b, paths):
    """A few untimed PUTs so the first timed request does not pay for the
    server's start (Node's JIT, first files)."""
    ours(b, "warmup/", paths[:4], 64)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--small", type=int, default=256)
    ap.add_argument("--large", type=int, default=8)
    ap.add_argument("--workdir", default=None)
    a = ap.parse_args()
    if not os.path.exists(s3tool_bin()):
        raise SystemExit("bench: %s is missing (make tools)" % s3tool_bin())
    work = a.workdir or tempfile.mkdtemp(prefix="queen-s3put-")
    files = os.path.join(work, "files")
    os.makedirs(files, exist_ok=True)
    small = make_files(files, a.small, MIB, "small")
    large = make_files(files, a.large, 64 * MIB, "large")
    results = []
    with TestBucket(buckets=["lake"], access_key=AK, secret_key=SK,
                    region=REGION,
                    workdir=os.path.join(work, "bucket")) as b:
        warm_up(b, small or large)
        if small:
            results.append(run_set(b, "single-1MiB", small, False))
        if large:
            results.append(run_set(b, "multipart-64MiB", large, True))
    print(json.dumps({"bench": "s3put", "results": results}))


if __name__ == "__main__":
    main()
