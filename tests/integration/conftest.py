"""Fixtures for the broker's integration suite.

`broker` starts build/queen on free 127.0.0.1 ports with a temporary
QUEEN_RAFT_DIR, waits for /health to answer 200 (with a deadline, failing
early if the process dies), collects its stderr into a file and kills it at
the end. `broker_factory` makes more brokers (custom env, restarts on the same
directory). Only the standard library is used (http.client, no requests).
"""

import os
import tempfile

import pytest

# Re-exported: tests/e2e/conftest.py loads this file by path and uses them.
from queenproc import (  # noqa: F401
    Broker, Response, free_port, queen_bin, queen_root, wait_until)


@pytest.fixture
def broker_factory():
    made = []
    tmp = tempfile.TemporaryDirectory(prefix="queen-it-")

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
    tmp.cleanup()


@pytest.fixture
def broker(broker_factory):
    return broker_factory()
