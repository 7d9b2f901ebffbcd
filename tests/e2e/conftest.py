"""Fixtures of the sink's end-to-end tests: real queen processes with the
embedded S3 sink, pointed at the test bucket (tests/bucket, the `bucket`
fixture of tests/conftest.py).

`sink_node(env=None, data_dir=None, start=True)` makes a broker (the
integration suite's Broker class) with the sink settings of
docs/design/scenarios.md §9
adapted to one node: JSONL, align none, max window 1000 ms, discovery
100 ms, guard 0, lease TTL 3000 ms, grace 10000 ms, checkpoint every 2,
start earliest; `env` overrides any of them.
"""
import pytest

from sinkenv import sink_env


@pytest.fixture
def sink_node(broker_factory, bucket):
    def make(env=None, data_dir=None, start=True):
        return broker_factory(env=sink_env(bucket, **(env or {})),
                              data_dir=data_dir, start=start)
    return make
