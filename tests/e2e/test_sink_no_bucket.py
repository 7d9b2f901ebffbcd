"""Issue 19 item 4: a bucket that does not exist fails the start check.
The sink names QUEEN_S3_BUCKET, shows the bucket as not reachable with
that reason, and starts no queue (no lease, no intent) until the bucket
exists; once it does, the lake fills as usual. Meanwhile the sink's ok is
false and /health, which never looks at the sink, still answers 200."""
from bucket import TestBucket
from sinkenv import PREFIX, TENANT, kv_get, sink_env, wait_until

import lake


def test_a_missing_bucket_is_named_and_no_queue_starts(broker_factory,
                                                       tmp_path):
    b = TestBucket(buckets=["lake"], workdir=str(tmp_path / "bucket"))
    b.start()
    try:
        node = broker_factory(env=sink_env(b, QUEEN_S3_BUCKET="nosuchbucket"))

        def refused():
            s3 = node.get("/status").json()["s3"]["sinks"][0]
            return s3["bucket"]["reachable"] is False and \
                s3["bucket"]["error"]
        err = wait_until(refused, 60, "bucket.reachable false")
        assert err.startswith("QUEEN_S3_BUCKET=nosuchbucket: no such bucket "
                              "at %s (NoSuchBucket)" % b.endpoint), err
        items = [{"queue": "orders", "partition": "p",
                  "payload": b'{"n":%d}' % i} for i in range(3)]
        r = node.request("POST", "/api/v1/push",
                         body=lake.push_body(items))
        assert r.status == 201, r
        wait_until(lambda: "QUEEN_S3_BUCKET=nosuchbucket: no such bucket" in
                   node.stderr(), 60, "the log line naming the setting")
        assert kv_get(node, "s3:default:orders:lease")["found"] is False
        assert kv_get(node, "s3:default:orders:intent")["found"] is False
        health = node.get("/status").json()["s3"]["sinks"][0]
        assert health["bucket"]["reachable"] is False, health
        # The sink's ok is false while its bucket does not answer, and
        # /health does not look at the sink (docs/s3-sink.md, Status).
        assert health["ok"] is False, health
        r = node.get("/health")
        assert r.status == 200 and "s3" not in r.json(), r
    finally:
        b.stop()


def test_an_existing_empty_bucket_passes_the_check(sink_node, bucket):
    node = sink_node()
    items = [{"queue": "orders", "partition": "p", "payload": b'{"n":1}'}]
    r = node.request("POST", "/api/v1/push", body=lake.push_body(items))
    assert r.status == 201, r
    acked = lake.acked_from_push(items, r.json())
    lake.wait_queue(lake.bucket_reader(bucket), PREFIX, TENANT, "orders",
                    acked, timeout=60, compression="zstd", align="none")
    s3 = node.get("/status").json()["s3"]["sinks"][0]
    assert s3["bucket"]["reachable"] is True, s3
