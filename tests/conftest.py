"""Shared pytest set-up for every Python suite: the helper modules on sys.path
(tests/bucket, tests/e2e, tests/integration), a function-scoped `bucket`
fixture (a started TestBucket holding the bucket "lake", stopped after the
test), and the broker fixtures: `broker_factory` makes build/queen processes
(custom env, restarts on the same directory) and kills them at the end;
`broker` is one of them."""

import os
import sys
import tempfile

import pytest

TESTS = os.path.dirname(os.path.abspath(__file__))
for sub in ("bucket", "e2e", "integration"):
    path = os.path.join(TESTS, sub)
    if path not in sys.path:
        sys.path.insert(0, path)

from bucket import TestBucket  # noqa: E402
from queenproc import Broker  # noqa: E402


def pytest_configure(config):
    # An assert that fails in a thread other than the test's own is only a
    # PytestUnhandledThreadExceptionWarning to pytest ("1 passed, 1
    # warning"): make it fail the test. Tests still collect their threads'
    # results and assert in the test's own thread.
    config.addinivalue_line(
        "filterwarnings",
        "error::pytest.PytestUnhandledThreadExceptionWarning")
    # The long cluster tests (network partitions, issue 14 item 5): run by
    # `make check-cluster`; tests/run_py.sh (make check) deselects them.
    config.addinivalue_line(
        "markers", "cluster_long: a long cluster test (make check-cluster)")


@pytest.fixture(scope="session", autouse=True)
def _rgw_cell():
    """The Ceph cell of RGW buckets (QUEEN_TEST_BUCKET=rgw) is started by
    the first one and shared by the session: stop it at the session's end."""
    yield
    if "rgw" in sys.modules:
        sys.modules["rgw"].stop_shared()


@pytest.fixture
def bucket(tmp_path):
    b = TestBucket(buckets=["lake"], workdir=str(tmp_path / "bucket"))
    b.start()
    try:
        yield b
    finally:
        b.stop()


@pytest.fixture
def broker_factory():
    made = []
    tmp = tempfile.TemporaryDirectory(prefix="queen-test-")

    def make(env=None, start=True, data_dir=None):
        d = data_dir or os.path.join(tmp.name, "data-%d" % len(made))
        os.makedirs(d, exist_ok=True)
        b = Broker(d, env=env)
        made.append(b)
        if start:
            b.start()
        return b

    make.tmp = tmp.name
    yield make
    for b in made:
        if b.proc is not None:
            b.proc.kill()
            b.proc.wait(10)
            b._reap()
    keep = os.environ.get("QUEEN_TEST_KEEP_LOGS")
    if keep:  # the brokers' logs, for a run that is investigated
        import glob
        import shutil
        os.makedirs(keep, exist_ok=True)
        for f in glob.glob(os.path.join(tmp.name, "queen-stderr-*.log")):
            shutil.copy(f, keep)
    tmp.cleanup()


@pytest.fixture
def broker(broker_factory):
    return broker_factory()
