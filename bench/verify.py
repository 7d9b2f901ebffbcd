#!/usr/bin/env python3
"""bench/verify: `queen lake verify` beside `zstd -d` alone on the same
objects, in the same run.

A JSONL zstd lake of the events corpus (bench/corpus.py payload("events",
i): nested clickstream JSON of 300-800 bytes, about 6.5:1 under zstd),
16 partitions, windows of about 8 MB decoded, merged layout, is written
with tests/e2e/lake.py's make_lake into the suite's fastest bucket:
Ceph RGW (tests/bucket/rgw.py, memstore OSD), which queen reads DIRECTLY
(its endpoint, path style, the tenant user's key), not through the
signing proxy. BENCH_BUCKET=s3rver reads s3rver through the proxy as the
first version of this bench did. Then BENCH_RUNS (3) interleaved rounds:

- queen: `queen lake verify --json` over the whole lake (LIST, GET of every
  manifest and object, sha256, zstd, every line parsed and checked, every
  rule). Its rate is decoded MB/s, its peak RSS read from wait4.
- zstd: `zstd -d -c` of the same objects' bytes (fetched once from the
  bucket into a local directory) into /dev/null, one process (its
  MB per CPU-second is the CPU peer), and `xargs -P<cores> zstd -d` for
  the same files across every core (the wall peer).

The summary prints the bucket, the median of each figure, and both ratios
(goal: at least 0.8 on the wall, with RSS under 256 MB). It also prints the
CPU the rest of the machine spent while queen ran (mostly the bucket
serving the GETs, on the same cores) and the wall that queen's CPU and
that CPU allow at best: their sum over the cores. That bounds the wall
ratio against zstd on every core, which reads local files.

Usage: bench/verify.py [build-dir]   BENCH_MB (default 256) sets the lake's
decoded size; the issue's figure is BENCH_MB=1024. BENCH_BEFORE=path/queen
adds a second build (the one before a change) to every round, run right
after the first on the same lake, so both meet the same load.
"""
import json
import os
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
sys.path.insert(0, os.path.join(ROOT, "bench"))
import corpus  # noqa: E402

TENANT = "00000000-0000-0000-0000-000000000001"
QUEUE = "orders"
T0 = 1790812800 * 10**6
WINDOW_BYTES = 8 << 20


def make_windows(total):
    windows, offsets, size, i, k = [], {}, 0, 0, 0
    while size < total:
        recs, wsize = [], 0
        t_start = T0 + k * 10**6
        while wsize < WINDOW_BYTES and size + wsize < total:
            p = "p-%02d" % (i % 16)
            o = offsets.get(p, 0)
            offsets[p] = o + 1
            payload = corpus.payload("events", i)
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


def busy_seconds():
    """CPU-seconds the whole machine has spent busy since boot (all cores;
    /proc/stat's first line less idle and iowait)."""
    with open("/proc/stat", encoding="ascii") as f:
        v = [int(x) for x in f.readline().split()[1:]]
    return (sum(v[:8]) - v[3] - v[4]) / os.sysconf("SC_CLK_TCK")


def run_verify(qbin, target):
    """(wall s, CPU s, decoded bytes, peak RSS MB, CPU-s the rest of the
    machine spent meanwhile: the bucket serving the GETs, and any other
    load)."""
    endpoint, ak, sk = target
    env = dict(os.environ, QUEEN_S3_ACCESS_KEY=ak, QUEEN_S3_SECRET_KEY=sk)
    busy = busy_seconds()
    wall, cpu, rss, out = timed([qbin, "lake", "verify", "--endpoint",
                                 endpoint, "--bucket", "lake",
                                 "--path-style", "--queue", QUEUE, "--json"],
                                env=env)
    rest = max(0.0, busy_seconds() - busy - cpu)
    q = json.loads(out)["queues"][0]
    assert q["exact"], q
    return wall, cpu, q["decodedBytes"], rss, rest


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


def fetch_objects(b, c, into):
    """The lake's data objects' stored bytes, one local file each."""
    files = []
    for page in c.get_paginator("list_objects_v2").paginate(Bucket="lake"):
        for o in page.get("Contents", []):
            k = o["Key"]
            if "/queue=" not in k or "/_queen/" in k or "/dt=" not in k:
                continue
            path = os.path.join(into, "%05d.zst" % len(files))
            with open(path, "wb") as f:
                f.write(c.get_object(Bucket="lake", Key=k)["Body"].read())
            files.append(path)
    return files


def main():
    build = sys.argv[1] if len(sys.argv) > 1 else "build"
    qbin = os.environ.get("QUEEN_BIN") or os.path.join(ROOT, build, "queen")
    total = int(os.environ.get("BENCH_MB", "256")) << 20
    runs = int(os.environ.get("BENCH_RUNS", "3"))
    kind = os.environ.get("BENCH_BUCKET", "rgw")
    before = os.environ.get("BENCH_BEFORE")
    cores = os.cpu_count() or 2
    with tempfile.TemporaryDirectory(prefix="queen-bench-verify-") as tmp:
        b = TestBucket(buckets=["lake"], workdir=os.path.join(tmp, "b"),
                       kind=kind)
        b.start()
        try:
            windows, n = make_windows(total)
            c = b.boto3()
            lake.make_lake(lambda k, body: c.put_object(Bucket="lake", Key=k,
                                                        Body=body),
                           "queen", TENANT, QUEUE, windows, compression="zstd",
                           align="hour")
            os.makedirs(os.path.join(tmp, "z"))
            files = fetch_objects(b, c, os.path.join(tmp, "z"))
            target = b.fastest_target()
            where = ("Ceph RGW 16.2 (memstore), read directly"
                     if kind == "rgw" else "s3rver behind the Python proxy")
            stored = sum(os.path.getsize(f) for f in files)
            print("lake: %d windows, %d records, %d objects, %.0f MB stored "
                  "(events corpus); bucket: %s" % (len(windows), n,
                                                   len(files), stored / 1e6,
                                                   where))
            q, qc, z1, z1c, zn, rss, dec = [], [], [], [], [], [], 0
            rest = []
            bq, bqc = [], []
            for r in range(runs):
                secs, cpu, dec, mb, other = run_verify(qbin, target)
                rest.append(other)
                q.append(secs)
                qc.append(cpu)
                rss.append(mb)
                if before:
                    bs, bc, _, _, _ = run_verify(before, target)
                    bq.append(bs)
                    bqc.append(bc)
                    print("round %d: before %.2fs (CPU %.2fs)"
                          % (r + 1, bs, bc))
                w1, c1 = run_zstd(files, 1)
                z1.append(w1)
                z1c.append(c1)
                zn.append(run_zstd(files, cores)[0])
                print("round %d: queen %.2fs (CPU %.2fs, RSS %.0f MB; the "
                      "rest of the machine %.2f CPU-s meanwhile), "
                      "zstd -d %.2fs (CPU %.2fs), zstd -d x%d %.2fs"
                      % (r + 1, secs, cpu, mb, other, w1, c1, cores,
                         zn[-1]))
            mq, mqc, m1, m1c, mn = (statistics.median(x)
                                    for x in (q, qc, z1, z1c, zn))
            mbs = dec / 1e6
            print("%-22s %10s %12s %10s" % ("", "MB/s wall", "MB/CPU-s",
                                             "peak RSS"))
            print("%-22s %10.1f %12.1f %9.0fM" % (
                "queen lake verify", mbs / mq, mbs / mqc,
                statistics.median(rss)))
            if before:
                mb_, mbc = statistics.median(bq), statistics.median(bqc)
                print("%-22s %10.1f %12.1f   ratio %.2f wall, %.2f CPU" % (
                    "  the build before", mbs / mb_, mbs / mbc, mn / mb_,
                    m1c / mbc))
            print("%-22s %10.1f %12.1f" % ("zstd -d (1 process)", mbs / m1,
                                           mbs / m1c))
            print("%-22s %10.1f" % ("zstd -d (x%d)" % cores, mbs / mn))
            print("ratio queen/zstd: %.2f wall (zstd on all %d cores; goal "
                  ">= 0.8), %.2f wall against one zstd -d process, %.2f "
                  "CPU (MB per CPU-second); %.0f MB decoded, "
                  "median of %d; bucket: %s; zstd reads the same objects "
                  "from local files; load average %s"
                  % (mn / mq, cores, m1 / mq, m1c / mqc, mbs, runs, where,
                     " ".join(open("/proc/loadavg").read().split()[:3])))
            # The bucket runs on the same cores: while queen verified, the
            # machine spent queen's CPU and the rest's. No schedule finishes
            # before their sum over the cores, so that bounds the wall
            # ratio against zstd on every core (which reads local files).
            floor = (mqc + statistics.median(rest)) / cores
            print("the bucket shares the cores: queen %.2f CPU-s + the rest "
                  "of the machine %.2f CPU-s over %d cores = %.2fs, the "
                  "shortest wall this CPU allows; it bounds the wall ratio "
                  "against zstd x%d at %.2f (and %.2f if queen spent no CPU "
                  "beyond one zstd -d)"
                  % (mqc, statistics.median(rest), cores, floor, cores,
                     mn / floor,
                     mn / ((m1c + statistics.median(rest)) / cores)))
        finally:
            b.stop()


if __name__ == "__main__":
    main()
