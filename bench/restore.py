#!/usr/bin/env python3
"""bench/restore: `queen lake restore` beside a bare pusher of the same
batches, in the same run.

A JSONL zstd lake of BENCH_RECORDS (200,000) records, 16 partitions,
~200-byte JSON payloads, is written into the test bucket (tests/bucket)
with tests/e2e/lake.py's make_lake. BENCH_RUNS (3) interleaved rounds, each
into a fresh single-node broker (raft log and LMDB in a temp dir, no sink):

- queen: `queen lake restore --batch 1000` (LIST, GET and sha256 of every
  object, decoding, push bodies, POST /api/v1/push one batch at a time on
  one keep-alive connection, the answers checked);
- bare: the same 1000-item push bodies, built beforehand, POSTed by Python's
  http.client on one keep-alive connection, nothing read from the bucket.

Both are bound by the broker's push path on one connection; the ratio
says what reading and checking the lake costs on top. bench/push measures
the broker with 16 connections (wrk); restore uses one, so compare with
that figure knowing the connection count differs.

Usage: bench/restore.py [build-dir]
"""
import http.client
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
for d in ("tests/bucket", "tests/e2e", "tests/integration"):
    sys.path.insert(0, os.path.join(ROOT, d))
from bucket import TestBucket  # noqa: E402
import lake  # noqa: E402
import queenproc  # noqa: E402

TENANT = "00000000-0000-0000-0000-000000000001"
QUEUE = "orders"
T0 = 1790812800 * 10**6


def make_windows(n):
    windows, per = [], 20000
    for w in range(0, n, per):
        recs = []
        for i in range(w, min(n, w + per)):
            p = "p-%02d" % (i % 16)
            payload = (b'{"type":"order.paid","orderId":"ord-%09d","amount":'
                       b'%d,"currency":"EUR","customer":"c-%06d","note":"%s"}'
                       % (i, i % 99999, i % 999999, b"x" * 90))
            recs.append((p, i // 16, "019a%028x" % i, T0 + w + i - w,
                         payload))
        recs.sort(key=lambda r: (r[0].encode(), r[1]))
        windows.append((T0 + w, T0 + w + per, recs))
    return windows


def broker(tmp, name):
    d = os.path.join(tmp, name)
    os.makedirs(d)
    b = queenproc.Broker(d)
    b.start()
    return b


def bare_push(b, bodies):
    c = http.client.HTTPConnection("127.0.0.1", b.port, timeout=120)
    t = time.monotonic()
    for body in bodies:
        c.request("POST", "/api/v1/push", body=body,
                  headers={"Content-Type": "application/json"})
        r = c.getresponse()
        r.read()
        assert r.status == 201, r.status
    return time.monotonic() - t


def main():
    build = sys.argv[1] if len(sys.argv) > 1 else "build"
    qbin = os.environ.get("QUEEN_BIN") or os.path.join(ROOT, build, "queen")
    os.environ.setdefault("QUEEN_BIN", qbin)
    n = int(os.environ.get("BENCH_RECORDS", "200000"))
    runs = int(os.environ.get("BENCH_RUNS", "3"))
    tmp = tempfile.mkdtemp(prefix="queen-bench-restore-")
    bucket = TestBucket(buckets=["lake"], workdir=os.path.join(tmp, "b"))
    bucket.start()
    try:
        windows = make_windows(n)
        c = bucket.boto3()
        lake.make_lake(lambda k, body: c.put_object(Bucket="lake", Key=k,
                                                    Body=body),
                       "queen", TENANT, QUEUE, windows, compression="zstd",
                       align="hour")
        items = [{"queue": QUEUE, "partition": p, "transactionId": x,
                  "payload": v} for _, _, recs in windows
                 for p, _, x, _, v in recs]
        bodies = [lake.push_body(items[i:i + 1000])
                  for i in range(0, len(items), 1000)]
        env = dict(os.environ, QUEEN_S3_ACCESS_KEY="queen",
                   QUEEN_S3_SECRET_KEY="queen-secret-key")
        q, bare = [], []
        for r in range(runs):
            b = broker(tmp, "q%d" % r)
            try:
                t = time.monotonic()
                subprocess.run([qbin, "lake", "restore", "--endpoint",
                                bucket.endpoint, "--bucket", "lake",
                                "--path-style", "--queue", QUEUE, "--to",
                                "http://127.0.0.1:%d" % b.port, "--batch",
                                "1000"], env=env, check=True,
                               stdout=subprocess.DEVNULL)
                q.append(time.monotonic() - t)
            finally:
                b.stop()
            b = broker(tmp, "b%d" % r)
            try:
                bare.append(bare_push(b, bodies))
            finally:
                b.stop()
            print("round %d: queen lake restore %.2fs, bare pusher %.2fs"
                  % (r + 1, q[-1], bare[-1]))
        mq, mb = statistics.median(q), statistics.median(bare)
        print("%-22s %12s" % ("", "records/s"))
        print("%-22s %12.0f" % ("queen lake restore", n / mq))
        print("%-22s %12.0f" % ("bare pusher", n / mb))
        print("ratio restore/bare %.2f (goal >= 0.8 of bench/push; one "
              "connection each), %d records, median of %d"
              % (mb / mq, n, runs))
    finally:
        bucket.stop()
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
