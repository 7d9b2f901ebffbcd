#!/usr/bin/env python3
"""bench/verify: `queen lake verify` beside `zstd -d` alone on the same
objects, in the same run.

A JSONL zstd lake of realistic event JSON (about 600-byte order events,
16 partitions, windows of about 8 MB decoded, merged layout) is written
into the test bucket (s3rver behind the signing proxy, tests/bucket) with
tests/e2e/lake.py's make_lake. Then BENCH_RUNS (3) interleaved rounds:

- queen: `queen lake verify --json` over the whole lake (LIST, GET of every
  manifest and object through the proxy, sha256, streaming zstd, every line
  parsed and rebuilt, every rule). Its rate is decoded MB/s, its peak RSS
  read from wait4.
- zstd: `zstd -d -c` of the same object files straight from s3rver's
  directory into /dev/null, one process (zstd decodes a frame on one core),
  and `xargs -P<cores> zstd -d` for the same files across every core.

The summary prints the median of each figure and the ratio queen / zstd on
all cores (goal: at least 0.8, with RSS under 256 MB).

Usage: bench/verify.py [build-dir]   BENCH_MB (default 256) sets the lake's
decoded size; the issue's figure is BENCH_MB=1024.
"""
import glob
import json
import os
import random
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "tests", "bucket"))
sys.path.insert(0, os.path.join(ROOT, "tests", "e2e"))
sys.path.insert(0, os.path.join(ROOT, "tests", "integration"))
from bucket import TestBucket  # noqa: E402
import lake  # noqa: E402

TENANT = "00000000-0000-0000-0000-000000000001"
QUEUE = "orders"
T0 = 1790812800 * 10**6
WINDOW_BYTES = 8 << 20


def event(rng, i):
    items = ",".join(
        '{"sku":"SKU-%05d","qty":%d,"price":%d.%02d,"name":"%s"}'
        % (rng.randrange(99999), rng.randrange(1, 5), rng.randrange(1, 300),
           rng.randrange(100), rng.choice(["lamp", "chair", "mug", "desk",
                                           "cable", "book"]))
        for _ in range(rng.randrange(1, 4)))
    return ('{"type":"order.%s","orderId":"ord-%09d","customer":{"id":"c-%06d",'
            '"country":"%s","tier":"%s"},"items":[%s],"amount":%d,'
            '"currency":"EUR","channel":"%s","session":"%032x",'
            '"createdAt":"2026-10-01T00:%02d:%02d.%03dZ","tags":["%s","%s"]}'
            % (rng.choice(["paid", "created", "shipped", "refunded"]), i,
               rng.randrange(999999), rng.choice(["DE", "FR", "IT", "ES"]),
               rng.choice(["gold", "silver", "basic"]), items,
               rng.randrange(100, 99999), rng.choice(["web", "app", "pos"]),
               rng.getrandbits(128), i // 60 % 60, i % 60, i % 1000,
               rng.choice(["promo", "repeat", "new"]),
               rng.choice(["eu", "b2c", "b2b"]))).encode()


def make_windows(total):
    rng = random.Random(7)
    windows, offsets, size, i, k = [], {}, 0, 0, 0
    while size < total:
        recs, wsize = [], 0
        t_start = T0 + k * 10**6
        while wsize < WINDOW_BYTES and size + wsize < total:
            p = "p-%02d" % (i % 16)
            o = offsets.get(p, 0)
            offsets[p] = o + 1
            payload = event(rng, i)
            recs.append((p, o, "019a%028x" % i, t_start + i % 10**6 // 2,
                         payload))
            wsize += len(payload) + 120
            i += 1
        recs.sort(key=lambda r: (r[0].encode(), r[1], r[3]))
        # ts non-decreasing with offset inside each partition
        fixed, last = [], {}
        for p, o, x, t, v in recs:
            t = max(t, last.get(p, t))
            last[p] = t
            fixed.append((p, o, x, t, v))
        windows.append((t_start, t_start + 10**6, fixed))
        size += wsize
        k += 1
    return windows, i


def timed(cmd, **kw):
    """Run cmd under /usr/bin/time: (wall s, CPU s, peak RSS MB, stdout)."""
    t = time.monotonic()
    p = subprocess.run(["/usr/bin/time", "-f", "@@ %U %S %M", *cmd],
                       capture_output=True, **kw)
    wall = time.monotonic() - t
    assert p.returncode == 0, p.stderr[-2000:]
    u, s_, m = p.stderr.decode().rsplit("@@", 1)[1].split()
    return wall, float(u) + float(s_), int(m) / 1024.0, p.stdout


def run_verify(qbin, b):
    env = dict(os.environ, QUEEN_S3_ACCESS_KEY="queen",
               QUEEN_S3_SECRET_KEY="queen-secret-key")
    wall, cpu, rss, out = timed([qbin, "lake", "verify", "--endpoint",
                                 b.endpoint, "--bucket", "lake",
                                 "--path-style", "--queue", QUEUE, "--json"],
                                env=env)
    q = json.loads(out)["queues"][0]
    assert q["exact"], q
    return wall, cpu, q["decodedBytes"], rss


def run_zstd(files, parallel):
    """(wall s, CPU s) of zstd -d over files into /dev/null."""
    if parallel == 1:
        wall, cpu, _, _ = timed(["sh", "-c", 'zstd -q -d -c "$@" >/dev/null',
                                 "_", *files])
        return wall, cpu
    t = time.monotonic()
    _xargs(files, parallel)
    return time.monotonic() - t, None


def _xargs(files, parallel):
    p = subprocess.Popen(["xargs", "-0", "-n", "8", "-P", str(parallel),
                          "zstd", "-q", "-d", "-c"], stdin=subprocess.PIPE,
                         stdout=subprocess.DEVNULL)
    p.communicate(b"\0".join(f.encode() for f in files))
    assert p.returncode == 0


def main():
    build = sys.argv[1] if len(sys.argv) > 1 else "build"
    qbin = os.environ.get("QUEEN_BIN") or os.path.join(ROOT, build, "queen")
    total = int(os.environ.get("BENCH_MB", "256")) << 20
    runs = int(os.environ.get("BENCH_RUNS", "3"))
    cores = os.cpu_count() or 2
    with tempfile.TemporaryDirectory(prefix="queen-bench-verify-") as tmp:
        b = TestBucket(buckets=["lake"], workdir=os.path.join(tmp, "b"))
        b.start()
        try:
            windows, n = make_windows(total)
            c = b.boto3()
            lake.make_lake(lambda k, body: c.put_object(Bucket="lake", Key=k,
                                                        Body=body),
                           "queen", TENANT, QUEUE, windows, compression="zstd",
                           align="hour")
            files = [f for f in glob.glob(os.path.join(
                b.data_dir, "**", "*"), recursive=True)
                if "/queue=" in f and "/_queen/" not in f and
                "/dt=" in f and f.endswith("._S3rver_object")]
            stored = sum(os.path.getsize(f) for f in files)
            print("lake: %d windows, %d records, %d objects, %.0f MB stored"
                  % (len(windows), n, len(files), stored / 1e6))
            q, qc, z1, z1c, zn, rss, dec = [], [], [], [], [], [], 0
            for r in range(runs):
                secs, cpu, dec, mb = run_verify(qbin, b)
                q.append(secs)
                qc.append(cpu)
                rss.append(mb)
                w1, c1 = run_zstd(files, 1)
                z1.append(w1)
                z1c.append(c1)
                zn.append(run_zstd(files, cores)[0])
                print("round %d: queen %.2fs (CPU %.2fs, RSS %.0f MB), "
                      "zstd -d %.2fs (CPU %.2fs), zstd -d x%d %.2fs"
                      % (r + 1, secs, cpu, mb, w1, c1, cores, zn[-1]))
            mq, mqc, m1, m1c, mn = (statistics.median(x)
                                    for x in (q, qc, z1, z1c, zn))
            mbs = dec / 1e6
            print("%-22s %10s %12s %10s" % ("", "MB/s wall", "MB/CPU-s",
                                             "peak RSS"))
            print("%-22s %10.1f %12.1f %9.0fM" % (
                "queen lake verify", mbs / mq, mbs / mqc,
                statistics.median(rss)))
            print("%-22s %10.1f %12.1f" % ("zstd -d (1 process)", mbs / m1,
                                           mbs / m1c))
            print("%-22s %10.1f" % ("zstd -d (x%d)" % cores, mbs / mn))
            print("ratio queen/zstd-all-cores %.2f wall (goal >= 0.8), "
                  "queen/zstd CPU %.2f; %.0f MB decoded, median of %d. "
                  "queen reads through the test bucket (s3rver behind a "
                  "Python proxy), zstd from its files on disk."
                  % (mn / mq, m1c / mqc, mbs, runs))
        finally:
            b.stop()


if __name__ == "__main__":
    main()
