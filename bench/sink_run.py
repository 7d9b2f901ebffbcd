"""bench/sink helper: the embedded sink's throughput beside `zstd -3` on one
core, as the median of several rounds. Each corpus of bench/corpus.py named
in BENCH_CORPUS (a comma list; all three by default: events, telemetry,
entropy) is run in turn, with its own preload and summary. A queue
`bench.sink` is pre-loaded once with N records (BENCH_SINK_RECORDS, default
1,000,000) of the corpus over 64 partitions, pushed with the sink off in
batches of 1000; the node is stopped and its data directory copied aside
(pristine). Then each of BENCH_SINK_ROUNDS rounds (default 3) replaces the
node's data directory with a fresh copy of the pristine one, gives the sink
a prefix of its own (QUEEN_S3_PREFIX=queen-r<i>, so that no round sees
another's objects) and boots the node with the sink on
(QUEEN_S3_START=earliest, default window settings, zstd) against a test
bucket (tests/bucket): BENCH_BUCKET=s3rver (the default) is s3rver behind
the Python proxy; BENCH_BUCKET=rgw is Ceph RGW of tests/bucket/rgw.py
(memstore), which the sink writes to directly, not through the proxy. On a
two-core machine s3rver is the faster of the two for the sink (RGW's
daemons take CPU from it: 160 against 138 MB/s, medians of 3 rounds each,
events, 2026-12-06), so it is the default. A round measures the time from
the sink's start to the commit pointer announcing every record, both read
from the node's info log (the broker's own boot, which replays its log,
comes before and is printed apart), or up to the last commit when none came
for QUIET_S: the tail window under target MB closes only by age, so it is
left out, its time and its bytes. The objects of the windows the round
committed are decompressed into the JSONL they hold (a window still in
upload is left out too), and the peers compress those same bytes in the
same round: `zstd -3 --single-thread --no-asyncio` (one core: one thread
does the I/O and the compression; the goal's peer) and `zstd -3 -T1` (for
reference: zstd 1.5's CLI overlaps file I/O on extra threads, so its CPU
exceeds its wall time). Per round it prints MB/s of uncompressed JSONL per
sink thread, the peers' MB/s and the ratios to both, the bucket's share of
the time (sum of `ms` in the proxy's request log, this round's lines only;
not measured when the sink writes to RGW directly), and the CPU-seconds per
record of the sink (the queen-s3 threads, zstd's worker among them, plus
the helper threads that exited meanwhile: one uploader per window) and of
the whole process. The summary prints medians (and ranges) over the rounds:
sink MB/s, each peer's MB/s, the per-round ratios to each peer (the goal:
sink / zstd on one core >= 0.8), the CPU ratio and the bucket's share; then
the load average. Per round and as medians it also prints where the sink's
CPU went, from the sink's own counters (queen_s3_stage_cpu_seconds_total of
/metrics, docs/design/observability.md §2) between the sink's start and its
last commit: CPU-us per record and share of each stage (read, merge,
format, compress, sha256, upload, rest), beside zstd one core's CPU-us per
record over the same bytes, and what every stage but compress costs as a
multiple of that floor (the goal: at most 0.25). Reads run ahead of the
commits (into the tail window, which is not counted), so read and merge are
per record read (/status s3.stages.recordsRead), the others per record
committed (a window built ahead while the one before goes up makes those a
little high). With BENCH_SINK_PERF=FILE the first round's sink phase runs
under `perf record` into FILE (BENCH_SINK_PERF_HZ samples a second, 250 by
default); with BENCH_SINK_STDERR=FILE the first round's node log is copied
to FILE.
Never a test: it only prints.
Usage: /usr/bin/python3 bench/sink_run.py [build-dir]"""
import json
import os
import statistics
import subprocess
import sys
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import corpus  # noqa: E402
from sink_common import (BenchRun, bench_env, commit_times,  # noqa: E402
                         iso_s, log_lines)
import lake  # noqa: E402  (sink_common put tests/ on sys.path)
from sinkenv import PREFIX, TENANT, kv_get  # noqa: E402

QUEUE = "bench.sink"
PARTS = 64
BATCH = 1000
# A full window here commits every 1-2 s; 10 s without a commit means only
# the tail window is left, which closes by age alone (300 s later).
QUIET_S = 10.0
# Before the first commit: the sink's start plus a whole window on a busy
# machine.
FIRST_S = 60.0
# (name, flags) of the peers, run on the same bytes in each round.  The
# goal's peer is the first: zstd on one core.  `--single-thread` alone is
# not (zstd 1.5.4 keeps its asynchronous I/O: 3 threads, CPU above wall);
# with `--no-asyncio` it runs 1 thread.  `-T1` is the figure printed
# before, for reference: its CLI overlaps file I/O on extra threads (4).
PEERS = (("zstd -3 --single-thread --no-asyncio",
          ["--single-thread", "--no-asyncio"]),
         ("zstd -3 -T1", ["-T1"]))


def preload(node, total, corpus_name, threads=2):
    """Push `total` records in batches; returns the bytes of payload."""
    lock = threading.Lock()
    state = {"next": 0}

    def worker():
        while True:
            with lock:
                start = state["next"]
                if start >= total:
                    return
                state["next"] = min(total, start + BATCH)
                end = state["next"]
            items = [{"queue": QUEUE, "partition": "p%02d" % (i % PARTS),
                      "payload": corpus.payload(corpus_name, i)}
                     for i in range(start, end)]
            r = node.request("POST", "/api/v1/push",
                             body=lake.push_body(items), timeout=120)
            if r.status != 201:
                raise SystemExit("bench/sink: push answered %r" % r)
    ts = [threading.Thread(target=worker) for _ in range(threads)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()


def committed_records(node):
    row = kv_get(node, "s3:default:%s:committed" % QUEUE)
    if not row["found"]:
        return 0
    v = row["value"]
    v = json.loads(v) if isinstance(v, str) else v
    return v


def stat_secs(path):
    """(comm, utime + stime in seconds) of a /proc stat file."""
    with open(path) as f:
        st = f.read()
    f = st[st.rindex(")") + 2:].split()
    return (st[st.index("(") + 1:st.rindex(")")],
            (int(f[11]) + int(f[12])) / os.sysconf("SC_CLK_TCK"))


def cpu_seconds(pid):
    """(CPU-s of the live threads named queen-s3, CPU-s of threads that
    exited, CPU-s of the whole process) from /proc."""
    sink = live = 0.0
    for tid in os.listdir("/proc/%d/task" % pid):
        try:
            comm, secs = stat_secs("/proc/%d/task/%s/stat" % (pid, tid))
        except OSError:
            continue
        live += secs
        sink += secs if comm.startswith("queen-s3") else 0
    whole = stat_secs("/proc/%d/stat" % pid)[1]
    return sink, whole - live, whole


def sink_cpu(at_start, now):
    """(CPU-s of the sink, of the whole process) at `now`: the queen-s3
    threads' own time plus that of threads which exited since `at_start`
    (the sink's short-lived helpers: one uploader per window, multipart
    workers), whose time lives on only in the process total."""
    return now[0] + now[1] - at_start[1], now[2]


STAGES = ("read", "merge", "format", "compress", "sha256", "upload", "rest")
STAGE_FAMILY = "queen_s3_stage_cpu_seconds_total"


# Stages whose work runs ahead of the commits, with the reads: their cost
# per record is over the records read, the others' over those committed.
READ_AHEAD = ("read", "merge")


def stage_seconds(node):
    """({stage: CPU-s}, records read) of the sink's own counters (/status
    s3.stages, the same as queen_s3_stage_cpu_seconds_total of /metrics)."""
    st = node.get("/status").json()["s3"].get("stages")
    if st is None or set(st["cpuNs"]) != set(STAGES):
        raise SystemExit("bench/sink: /status lacks the stage counters")
    return {k: v / 1e9 for k, v in st["cpuNs"].items()}, st["recordsRead"]


def watch(node, total, quiet=QUIET_S):
    """Poll /status until every record is committed, or until no commit
    for `quiet` s (FIRST_S before the first one): the tail window (under
    target MB) only closes by age, maxWindowMs (300 s) of log clock later,
    and is not counted.  Returns (records committed, monotonic times of the
    first and last commits, CPU seconds (sink, whole process) at the last
    commit, the sink's stage CPU-s from the start to the last commit)."""
    seen, last, first = 0, time.monotonic(), None
    at_start = cpu_seconds(node.proc.pid)
    st0, read0 = stage_seconds(node)
    cpu = (0.0, 0.0)
    stages = {k: 0.0 for k in STAGES}
    read = 0
    while seen < total and \
            time.monotonic() - last < (quiet if seen else FIRST_S):
        rows = node.get("/status").json()["s3"]["sinks"][0]["queues"]
        n = sum(q["records"] for q in rows if q["name"] == QUEUE)
        if n != seen:
            seen, last = n, time.monotonic()
            first = first or last
            cpu = sink_cpu(at_start, cpu_seconds(node.proc.pid))
            st, n_read = stage_seconds(node)
            stages = {k: st[k] - st0[k] for k in STAGES}
            read = n_read - read0
        time.sleep(0.1)
    if seen == 0:
        raise SystemExit("bench/sink: nothing was committed in %.0f s: "
                         "records too few to close a window by size close "
                         "only by age, 300 s later; raise BENCH_SINK_RECORDS"
                         " (300000 commits one window)" % FIRST_S)
    return seen, first, last, cpu, (stages, read)


def sink_stamps(log):
    """From the node's info log: the wall time the sink started and those
    of every `window committed` line of the queue."""
    start = None
    for r in log_lines(log):
        if r.get("msg") == "starting the S3 sink in-process":
            start = iso_s(r["ts"])
            break
    commits = sorted(commit_times(log, QUEUE).values())
    if start is None or not commits:
        raise SystemExit("bench/sink: no sink start or commit in the log")
    return start, commits


def committed_keys(keys, log):
    """The data keys of the windows the node's log says were committed
    (a window in upload has its objects in the bucket before its commit,
    and is not counted)."""
    ks = commit_times(log, QUEUE)
    return [key for key in keys
            if int(key.rsplit("/", 1)[1].split("-")[1]) in ks]


def lake_jsonl(b, keys):
    """The uncompressed JSONL bytes of the queue's data objects `keys`."""
    reader = lake.bucket_reader(b)
    out = []
    for key in keys:
        data = reader.read(key)
        out.append(lake.decompress(data, "zstd", key)
                   if key.endswith(".zst") else data)
    return b"".join(out)


def zstd_peer(flags, path):
    """(wall s, CPU s) of `zstd -3 <flags>` compressing the file `path`."""
    z0, c0 = time.monotonic(), os.times()
    subprocess.run(["zstd", "-3", *flags, "-q", "-f", "-o", path + ".zst",
                    path], check=True)
    secs, c1 = time.monotonic() - z0, os.times()
    return secs, (c1.children_user + c1.children_system -
                  c0.children_user - c0.children_system)


def run_peers(data, path, order):
    """{peer name: (wall s, CPU s)} of each of PEERS on the bytes `data`,
    written to `path` (removed again); `order` alternates which goes
    first from round to round."""
    with open(path, "wb") as f:
        f.write(data)
    out = {}
    for name, flags in (PEERS if order % 2 else PEERS[::-1]):
        out[name] = zstd_peer(flags, path)
    os.remove(path)
    os.remove(path + ".zst")
    return out


def fresh_data_dir(node, pristine):
    """Replace the node's data directory with a copy of `pristine`, on
    disk before the round starts (else the copy's writeback, a gigabyte,
    runs beside the sink)."""
    subprocess.run(["rm", "-rf", node.data_dir], check=True)
    subprocess.run(["cp", "-a", pristine, node.data_dir], check=True)
    os.sync()


def sink_phase(node, b, total, prefix, first):
    """Boot the node with the sink on under `prefix`, wait for the commits
    (watch()) and stop it.  Returns the round's raw figures: the lake's
    data keys, the bucket's request ms of this round, the node's log and
    watch()'s figures.  BENCH_SINK_PERF / BENCH_SINK_STDERR apply when
    `first`."""
    node.extra_env["QUEEN_S3_PREFIX"] = prefix
    n0 = len(b.log_lines())  # the bucket's log spans every round
    t0 = time.monotonic()
    node.start(timeout=300)  # the boot replays the preloaded log
    r = {"ready": time.monotonic() - t0,
         "threads": node.get("/status").json()["s3"].get("threads") or 1}
    perf = None
    if first and os.environ.get("BENCH_SINK_PERF"):
        perf = subprocess.Popen(
            ["perf", "record", "--call-graph", "dwarf", "-F",
             os.environ.get("BENCH_SINK_PERF_HZ", "250"),
             "-q", "-o", os.environ["BENCH_SINK_PERF"], "-p",
             str(node.proc.pid)], stdout=subprocess.DEVNULL)
    r["committed"], _, last, r["cpu"], (r["stages"], r["read"]) = \
        watch(node, total)
    r["from_proc"] = last - t0
    if perf is not None:
        perf.send_signal(2)
        perf.wait()
    keys = lake.bucket_reader(b).list_keys(
        lake.queue_root(prefix, TENANT, QUEUE) + "/")
    r["ms"] = (None if b.kind == "rgw" else  # direct: no proxy log
               sum(x.get("ms") or 0 for x in b.log_lines()[n0:]))
    r["log"] = node.stderr()
    r["keys"] = committed_keys(keys, r["log"])
    node.stop()  # its drain may commit the tail window: not counted
    if first and os.environ.get("BENCH_SINK_STDERR"):
        subprocess.run(["cp", node.stderr_path,
                        os.environ["BENCH_SINK_STDERR"]], check=True)
    return r


def run_round(run, node, pristine, i, total):
    """Round `i` (from 1) on a fresh copy of the pristine data dir; prints
    its lines and returns its figures (see print_round())."""
    b = run.bucket
    fresh_data_dir(node, pristine)
    r = sink_phase(node, b, total, "%s-r%d" % (PREFIX, i), i == 1)
    start, commits = sink_stamps(r["log"])
    data = lake_jsonl(b, r["keys"])
    r.update(mb=len(data) / 1e6, elapsed=commits[-1] - start,
             commits=[c - start for c in commits],
             peers=run_peers(data, os.path.join(run.tmp, "lake.jsonl"), i))
    r["ours"] = r["mb"] / r["elapsed"] / r["threads"]
    r["ratio"] = {name: r["ours"] / (r["mb"] / secs)
                  for name, (secs, _) in r["peers"].items()}
    r["share"] = None if r["ms"] is None else r["ms"] / 1000 / r["elapsed"]
    r["load"] = os.getloadavg()
    print_round(i, total, r)
    return r


def print_round(i, total, r):
    one, ref = (r["peers"][name] for name, _ in PEERS)
    cpu, n = r["cpu"], r["committed"]
    print("round %d: sink %.1f MB/s per thread (%.1f MB of JSONL, %d of %d "
          "records, %.2f s from the sink's start to the last commit, %d "
          "thread(s)); zstd one core %.1f MB/s (CPU %.2f s), -T1 %.1f MB/s "
          "(CPU %.2f s); ratio %.2f / %.2f; bucket %s of the time"
          % (i, r["ours"], r["mb"], n, total, r["elapsed"], r["threads"],
             r["mb"] / one[0], one[1], r["mb"] / ref[0], ref[1],
             r["ratio"][PEERS[0][0]], r["ratio"][PEERS[1][0]],
             "n/a" if r["share"] is None else "%.0f%%" % (100 * r["share"])))
    print("  commits at %s s after the sink's start; process start to last "
          "commit %.2f s (boot to /health %.2f s); CPU: sink %.2f us/record, "
          "whole process %.2f us/record; load %.2f"
          % (", ".join("%.2f" % c for c in r["commits"]), r["from_proc"],
             r["ready"], cpu[0] / n * 1e6, cpu[1] / n * 1e6, r["load"][0]))
    print("  " + stage_line(r))


def stage_us(r, k):
    """CPU-us per record of stage k: over the records read for READ_AHEAD,
    else over those committed."""
    n = r["read"] if k in READ_AHEAD else r["committed"]
    return r["stages"][k] / max(n, 1) * 1e6


def stages_us(r):
    """The sum of every stage per record (stage_us)."""
    return sum(stage_us(r, k) for k in STAGES)


def stage_line(r):
    """The sink's stage counters per record, each with its share, beside
    zstd one core's CPU per record over the same bytes."""
    total = stages_us(r) or 1e-9
    other = total - stage_us(r, "compress")
    return ("stages, CPU-us/record (share): %s; sum %.2f us/record (%d "
            "records read, %d committed); zstd one core %.2f us/record; "
            "every stage but compress %.2f us/record = %.2f x zstd one core"
            % (", ".join("%s %.2f (%.0f%%)" % (k, stage_us(r, k),
                                                100 * stage_us(r, k) / total)
                         for k in STAGES),
               total, r["read"], r["committed"], zstd_us(r), other,
               other / zstd_us(r)))


def zstd_us(r):
    """CPU-us per committed record of zstd -3 on one core over the
    round's bytes (the goal's floor)."""
    return r["peers"][PEERS[0][0]][1] / r["committed"] * 1e6


def med(rounds, f, fmt="%.2f"):
    """'median (min-max)' of f(round) over the rounds, each in `fmt`."""
    xs = [f(r) for r in rounds]
    return "%s (%s-%s)" % tuple(fmt % x for x in
                                (statistics.median(xs), min(xs), max(xs)))


def if_none_were(r, peer):
    """The ratio to `peer` had the sink never waited on the bucket (None
    when the bucket's summed request time reaches the sink's time)."""
    rest = r["elapsed"] - r["ms"] / 1000
    if rest <= 0:
        return None
    return r["mb"] / rest / r["threads"] / (r["mb"] / r["peers"][peer][0])


def print_summary(rounds):
    one, ref = (name for name, _ in PEERS)
    mbps = (lambda name: lambda r: r["mb"] / r["peers"][name][0])
    print("summary of %d round(s): medians (min-max)" % len(rounds))
    print("sink: %s MB/s of JSONL per sink thread; sink CPU %s us/record"
          % (med(rounds, lambda r: r["ours"], "%.1f"),
             med(rounds, lambda r: r["cpu"][0] / r["committed"] * 1e6)))
    print("%s (one core; the goal's peer): %s MB/s"
          % (one, med(rounds, mbps(one), "%.1f")))
    print("%s (for reference: zstd 1.5 overlaps file I/O on extra threads, "
          "so this is more than one core): %s MB/s"
          % (ref, med(rounds, mbps(ref), "%.1f")))
    print("ratio sink/zstd (one core): %s (goal >= 0.8; median of the "
          "per-round ratios)" % med(rounds, lambda r: r["ratio"][one]))
    print("ratio sink/zstd -T1: %s" % med(rounds, lambda r: r["ratio"][ref]))
    print("  per CPU-second (zstd one core's CPU / the sink threads' CPU, "
          "which the machine's other load does not move): ratio %s" %
          med(rounds, lambda r: r["peers"][one][1] / r["cpu"][0]
              if r["cpu"][0] else 0))
    print("stages, median CPU-us/record (share of the sink's stage sum): " +
          ", ".join("%s %s (%s%%)" % (
              k, med(rounds, lambda r, k=k: stage_us(r, k)),
              med(rounds, lambda r, k=k: 100 * stage_us(r, k) /
                  (stages_us(r) or 1e-9), "%.0f"))
              for k in STAGES))
    other = (lambda r: stages_us(r) - stage_us(r, "compress"))
    print("  beside zstd -3 one core: %s CPU-us/record; the sink's stages "
          "other than compress: %s us/record, %s x that floor (goal <= 0.25)"
          % (med(rounds, zstd_us), med(rounds, other),
             med(rounds, lambda r: other(r) / zstd_us(r))))
    if rounds[0]["share"] is None:
        print("bucket: Ceph RGW (memstore), written to directly: its share "
              "of the time is not measured (no proxy log)")
        print("load average: %.2f %.2f %.2f" % os.getloadavg())
        return
    nones = [x for x in (if_none_were(r, one) for r in rounds) if x]
    print("test bucket time (sum of request ms): %s %% of the sink's time "
          "(a window's PUTs run beside the next window's reads, so only "
          "part of it is waited for; if none were: ratio to one core %s)"
          % (med(rounds, lambda r: 100 * r["share"], "%.0f"),
             "%.2f" % statistics.median(nones) if nones else "n/a"))
    print("load average: %.2f %.2f %.2f" % os.getloadavg())


def run_corpus(corpus_name, total, rounds):
    """Preload `total` records of the corpus, run the rounds on copies of
    that preload and print the summary."""
    with BenchRun("queen-bench-sink.",
                  kind=os.environ.get("BENCH_BUCKET", "s3rver")) as run:
        endpoint, key, secret = run.bucket.fastest_target()
        # default window settings
        env = bench_env(run.bucket, QUEEN_S3_QUEUES=QUEUE,
                        QUEEN_S3_EMBEDDED="false", QUEEN_LOG_LEVEL="warn",
                        QUEEN_S3_ENDPOINT=endpoint,
                        QUEEN_S3_ACCESS_KEY=key, QUEEN_S3_SECRET_KEY=secret)
        node = run.start_node(env)
        t0 = time.monotonic()
        preload(node, total, corpus_name)
        print("== corpus %s: preload of %d records over %d partitions in "
              "%.1f s" % (corpus_name, total, PARTS, time.monotonic() - t0))
        assert node.stop() == 0
        pristine = os.path.join(run.tmp, "pristine")
        subprocess.run(["cp", "-a", node.data_dir, pristine], check=True)
        node.extra_env["QUEEN_S3_EMBEDDED"] = "true"
        node.extra_env["QUEEN_LOG_LEVEL"] = "info"  # the sink's own stamps
        print("%d round(s), each on a fresh copy of the preloaded data dir "
              "under its own prefix; ratios are against `%s` (one core) / "
              "`%s`; BENCH_SINK_PERF and BENCH_SINK_STDERR apply to round 1"
              % (rounds, PEERS[0][0], PEERS[1][0]))
        results = [run_round(run, node, pristine, i, total)
                   for i in range(1, rounds + 1)]
        print("corpus %s:" % corpus_name)
        print_summary(results)


def main():
    total = int(os.environ.get("BENCH_SINK_RECORDS", "1000000"))
    rounds = int(os.environ.get("BENCH_SINK_ROUNDS", "3"))
    names = os.environ.get("BENCH_CORPUS", ",".join(corpus.CORPORA))
    if rounds < 1:
        raise SystemExit("bench/sink: BENCH_SINK_ROUNDS must be >= 1")
    for name in names.split(","):
        if name not in corpus.CORPORA:
            raise SystemExit("bench/sink: no corpus %r (BENCH_CORPUS is a "
                             "comma list of %s)" % (name,
                                                    ", ".join(corpus.CORPORA)))
    for name in names.split(","):
        run_corpus(name, total, rounds)


if __name__ == "__main__":
    main()

