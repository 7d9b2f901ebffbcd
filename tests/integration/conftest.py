"""Fixtures for the broker's integration suite.

`broker` starts build/queen on free 127.0.0.1 ports with a temporary
QUEEN_RAFT_DIR, waits for /health to answer 200 (with a deadline, failing
early if the process dies), collects its stderr into a file and kills it at
the end. `broker_factory` makes more brokers (custom env, restarts on the same
directory). Only the standard library is used (http.client, no requests).
"""

# The broker fixtures (broker, broker_factory) live in tests/conftest.py so
# every suite shares them; the helpers are in queenproc.py.


def pytest_configure(config):
    config.addinivalue_line(
        "markers",
        "membership: runtime cluster membership (issue 14 item 1); "
        "deselect with -m 'not membership' where it is not built")
