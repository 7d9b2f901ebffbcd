"""Shared pytest set-up for every Python suite: the test bucket's module on
sys.path (and the lake verifier's), and a function-scoped `bucket` fixture (a
started TestBucket holding the bucket "lake", stopped after the test)."""

import os
import sys

import pytest

TESTS = os.path.dirname(os.path.abspath(__file__))
for sub in ("bucket", "e2e", "integration"):
    path = os.path.join(TESTS, sub)
    if path not in sys.path:
        sys.path.insert(0, path)

from bucket import TestBucket  # noqa: E402


@pytest.fixture
def bucket(tmp_path):
    b = TestBucket(buckets=["lake"], workdir=str(tmp_path / "bucket"))
    b.start()
    try:
        yield b
    finally:
        b.stop()
