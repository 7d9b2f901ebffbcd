"""What the sink benches (bench/sink_run.py, bench/sink_lag.py and, through
sink_lag, bench/sink_mem.py) share: tests/ on sys.path, the node's
environment with the sink's default window settings, the run's temp dir,
test bucket and node with their cleanup, and the broker's log stamps.
Never a test: the benches only print."""
import os
import subprocess
import sys
import tempfile

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), ".."))
sys.path[:0] = [os.path.join(ROOT, "tests", "integration"),
                os.path.join(ROOT, "tests", "bucket"),
                os.path.join(ROOT, "tests", "e2e")]
import lake  # noqa: E402
import loglines  # noqa: E402
from bucket import TestBucket  # noqa: E402
from queenproc import Broker  # noqa: E402
from sinkenv import sink_env  # noqa: E402

# Settings sink_env() pins for the e2e tests; here they keep their defaults.
TEST_ONLY = ("QUEEN_S3_ALIGN", "QUEEN_S3_DISCOVERY_INTERVAL_MS",
             "QUEEN_S3_SAFE_GUARD_MS", "QUEEN_S3_LEASE_TTL_MS",
             "QUEEN_S3_SHUTDOWN_GRACE_MS", "QUEEN_S3_CHECKPOINT_EVERY")



def log_lines(stderr_text):
    """The broker's log lines (src/base/log.h: text by default since
    2f2875b, or logfmt or JSON with QUEEN_LOG_FORMAT) as dicts, each line
    read in its own format; a line in none of them (none should be) is
    skipped."""
    out = []
    for line in stderr_text.splitlines():
        try:
            out.extend(loglines.parse(line))
        except (ValueError, KeyError, IndexError):
            continue
    return out


def bench_env(bucket, **over):
    """sink_env() with the test-only settings back at their defaults, and
    QUEEN_S3_MAX_WINDOW_MS too unless `over` names it."""
    env = sink_env(bucket, **over)
    for k in TEST_ONLY:
        env.pop(k)
    if "QUEEN_S3_MAX_WINDOW_MS" not in over:
        env.pop("QUEEN_S3_MAX_WINDOW_MS")
    return env


class BenchRun:
    """`with BenchRun(prefix) as run:` a temp dir (run.tmp) and the test
    bucket (run.bucket, of tests/bucket's `kind`: s3rver or rgw, by
    default $QUEEN_TEST_BUCKET or s3rver); run.start_node(env) boots a
    node in tmp/data.  On the way out the node (unless run.node was set to
    None) and the bucket are stopped and the dir removed."""

    def __init__(self, prefix, kind=None):
        self.prefix = prefix
        self.kind = kind
        self.tmp = self.bucket = self.node = None

    def __enter__(self):
        self.tmp = tempfile.mkdtemp(prefix=self.prefix)
        self.bucket = TestBucket(buckets=["lake"], kind=self.kind).start()
        return self

    def start_node(self, env):
        self.node = Broker(os.path.join(self.tmp, "data"), env=env).start()
        return self.node

    def __exit__(self, *exc):
        if self.node is not None:
            self.node.stop()
        self.bucket.stop()
        subprocess.run(["rm", "-rf", self.tmp])
        return False


def iso_s(text):
    """Seconds since the epoch of an ISO-µs stamp (2026-...T..:..:..Z)."""
    return lake.parse_iso_us(text) / 1e6


def commit_times(stderr_text, queue):
    """k -> wall seconds of the broker's "window committed" line."""
    out = {}
    for r in log_lines(stderr_text):
        if r.get("msg") == "window committed" and r.get("queue") == queue:
            out[int(r["k"])] = iso_s(r["ts"])
    return out
