"""The sink's control plane on one node (reference 3.1, 3.4, 6.1): a boot
whose HTTP listener cannot bind stops with one FATAL line and starts no
sink thread (so it claims nothing), and the status block shows the host's
phase, the run's restart keys and the trivial placement of one node."""
import re
import socket

from sinkenv import kv_get, sink_env, sink_row, wait_until


def test_a_taken_http_port_with_the_sink_on_fails_the_boot_cleanly(
        broker_factory, bucket):
    node = broker_factory(env=sink_env(bucket), start=False)
    taken = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    try:
        taken.bind(("127.0.0.1", node.port))
        taken.listen(1)
        node.start(wait=False)
        rc = node.wait_exit(20)
        log = node.stderr()
        node._reap()
    finally:
        taken.close()
    assert rc == 1, log
    errors = [ln for ln in log.splitlines() if " ERROR " in ln]
    assert len(errors) == 1, log
    assert re.search(r" ERROR boot: FATAL: .*127\.0\.0\.1:%d.*in use"
                     % node.port, errors[0]), errors[0]
    # The sink never ran: no queue task, no claim, no thread left behind.
    assert "starting the S3 sink in-process" in log
    assert "starting a queue task" not in log, log
    assert "this node owns the queue" not in log, log
    # The same data directory, sink off: no lease row was left behind.
    again = broker_factory(env=sink_env(bucket, QUEEN_S3_EMBEDDED="false"),
                           data_dir=node.data_dir)
    assert kv_get(again, "s3:default:orders:lease")["found"] is False


def test_the_status_block_shows_the_phase_the_run_and_the_placement(
        broker_factory, bucket):
    node = broker_factory(env=sink_env(bucket))
    node.push([{"queue": "orders", "partition": "p", "payload": {"a": 1}}])
    wait_until(lambda: (sink_row(node, "orders") or {}).get("k", 0) >= 1,
               30, "the sink to commit window 1 of orders")
    s3 = node.get("/status").json()["s3"]
    assert s3["phase"] == "running", s3
    sink = s3["sinks"][0]
    assert sink["phase"] == "running", sink
    assert sink["restarts"] == 0 and sink["lastExit"] is None, sink
    assert sink["error"] is None and sink["backoffMs"] == 0, sink
    assert sink["uptimeMs"] >= 0, sink
    assert sink["placement"] == {"givingBack": None, "held": 1, "nodes": 1,
                                 "queues": 1, "share": 1}, sink
    assert node.stop() == 0
