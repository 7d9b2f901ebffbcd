#!/usr/bin/env python3
"""bench/restore: `queen lake restore` beside bench/push's load and a
bare pusher of the same batches, in the same run.

A JSONL zstd lake of BENCH_RECORDS (200,000) records, 16 partitions,
~200-byte JSON payloads, is written into the test bucket (tests/bucket;
BENCH_BUCKET=rgw for Ceph RGW behind the proxy) with tests/e2e/lake.py's
make_lake. BENCH_RUNS (3) interleaved rounds, each peer into a fresh
single-node broker (raft log and LMDB in a temp dir, no sink):

- queen: `queen lake restore --threads C` (LIST, GET and sha256 of every
  object, decoding, push bodies, POST /api/v1/push on C keep-alive
  connections, partitions sharded over them, BENCH_CONNS, default 4;
  `--batch BENCH_BATCH` when that is set, else the tool's default);
- push: bench/push.sh's queen round, the issue's peer: wrk with 16
  connections POSTing 100 items of a 200-byte payload per request for
  BENCH_SECONDS (10);
- bare: push bodies of the lake's records, BENCH_BATCH items each
  (default 2000, restore's default batch), POSTed by Python's http.client
  on one keep-alive connection, nothing read from the bucket.

The summary prints records/s of each and the ratios restore/push (the
issue's goal: at least 0.8) and restore/bare, and the broker's CPU time
per record (utime + stime of its process over the restore, or over the
wrk run), which a loaded machine moves less than records/s. With BENCH_BEFORE=<an older
queen binary> each round also runs that binary's restore (same flags,
into a fresh broker of this build) right after this one's, so a change is
measured against its before in the same rounds.

Usage: bench/restore.py [build-dir]
"""
import http.client
import json
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


HZ = os.sysconf("SC_CLK_TCK")


def cpu_us(b):
    """The broker's CPU time so far (utime + stime of every thread), µs."""
    with open("/proc/%d/stat" % b.proc.pid) as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) * 1e6 / HZ


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


PAYLOAD = ('{"order":123456,"status":"paid","total":42.00,"note":"'
           + "x" * 144 + '"}')


def wrk_push(b, tmp, secs):
    """bench/push.sh's queen round against broker b: records/s."""
    items = ",".join('{"queue":"bench","partition":"p%d","payload":%s}'
                     % (i % 4, PAYLOAD) for i in range(100))
    lua = os.path.join(tmp, "push.lua")
    with open(lua, "w") as f:
        f.write('wrk.method = "POST"\n')
        f.write('wrk.headers["Content-Type"] = "application/json"\n')
        f.write("wrk.body = %s\n" % json.dumps('{"items":[%s]}' % items))
    c0 = cpu_us(b)
    out = subprocess.run(["wrk", "-t2", "-c16", "-d%ds" % secs, "-s", lua,
                          "http://127.0.0.1:%d/api/v1/push" % b.port],
                         check=True, capture_output=True, text=True).stdout
    c1 = cpu_us(b)
    assert "Non-2xx" not in out, out
    rps = [ln.split()[1] for ln in out.splitlines()
           if ln.startswith("Requests/sec:")]
    return float(rps[0]) * 100, (c1 - c0) / (float(rps[0]) * 100 * secs)


def main():
    build = sys.argv[1] if len(sys.argv) > 1 else "build"
    qbin = os.environ.get("QUEEN_BIN") or os.path.join(ROOT, build, "queen")
    os.environ.setdefault("QUEEN_BIN", qbin)
    n = int(os.environ.get("BENCH_RECORDS", "200000"))
    runs = int(os.environ.get("BENCH_RUNS", "3"))
    conns = int(os.environ.get("BENCH_CONNS", "4"))
    batch_flag = (["--batch", os.environ["BENCH_BATCH"]]
                  if os.environ.get("BENCH_BATCH") else [])
    batch = int(os.environ.get("BENCH_BATCH") or "2000")
    secs = int(os.environ.get("BENCH_SECONDS", "10"))
    tmp = tempfile.mkdtemp(prefix="queen-bench-restore-")
    bucket = TestBucket(buckets=["lake"], workdir=os.path.join(tmp, "b"),
                        kind=os.environ.get("BENCH_BUCKET", "s3rver"))
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
        bodies = [lake.push_body(items[i:i + batch])
                  for i in range(0, len(items), batch)]
        env = dict(os.environ, QUEEN_S3_ACCESS_KEY="queen",
                   QUEEN_S3_SECRET_KEY="queen-secret-key")
        before = os.environ.get("BENCH_BEFORE")

        def restore(binary, name):
            b = broker(tmp, name)
            try:
                c0 = cpu_us(b)
                t = time.monotonic()
                subprocess.run([binary, "lake", "restore", "--endpoint",
                                bucket.endpoint, "--bucket", "lake",
                                "--path-style", "--queue", QUEUE, "--to",
                                "http://127.0.0.1:%d" % b.port, "--threads",
                                str(conns)] + batch_flag, env=env,
                               check=True,
                               stdout=subprocess.DEVNULL)
                el = time.monotonic() - t
                return el, (cpu_us(b) - c0) / n
            finally:
                b.stop()

        q, bare, push, old = [], [], [], []
        cq, cp, co = [], [], []  # broker CPU-us per record
        for r in range(runs):
            el, c = restore(qbin, "q%d" % r)
            q.append(el)
            cq.append(c)
            if before:
                el, c = restore(before, "o%d" % r)
                old.append(el)
                co.append(c)
            b = broker(tmp, "w%d" % r)
            try:
                rate, c = wrk_push(b, tmp, secs)
                push.append(rate)
                cp.append(c)
            finally:
                b.stop()
            b = broker(tmp, "b%d" % r)
            try:
                bare.append(bare_push(b, bodies))
            finally:
                b.stop()
            print("round %d: queen lake restore %.2fs (%.0f/s, %.2f "
                  "CPU-us/rec), bench/push %.0f/s (%.2f CPU-us/rec), bare "
                  "pusher %.2fs%s"
                  % (r + 1, q[-1], n / q[-1], cq[-1], push[-1], cp[-1],
                     bare[-1],
                     ", before %.2fs (%.0f/s, %.2f CPU-us/rec)"
                     % (old[-1], n / old[-1], co[-1]) if before else ""))
        mq, mb = statistics.median(q), statistics.median(bare)
        mp = statistics.median(push)
        print("%-34s %12s %16s" % ("", "records/s", "broker CPU-us/rec"))
        print("%-34s %12.0f %16.2f" % ("queen lake restore (%d conns)" % conns,
                                        n / mq, statistics.median(cq)))
        print("%-34s %12.0f %16.2f" % ("bench/push (wrk, 16 conns, 100/req)",
                                        mp, statistics.median(cp)))
        print("%-34s %12.0f" % ("bare pusher (1 conn, %d/req)" % batch,
                                 n / mb))
        if before:
            mo = statistics.median(old)
            print("%-34s %12.0f %16.2f" % ("restore before (%d conns)" % conns,
                                            n / mo, statistics.median(co)))
            print("ratio before/push %.2f" % (n / mo / mp))
        print("ratio restore/push %.2f (goal >= 0.8), restore/bare %.2f; "
              "%d records, median of %d; bucket %s; load average %s"
              % (n / mq / mp, mb / mq, n, runs, bucket.kind,
                 " ".join(open("/proc/loadavg").read().split()[:3])))
    finally:
        bucket.stop()
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
