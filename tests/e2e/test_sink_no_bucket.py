"""Issue 19 item 4: a bucket that does not exist fails the start check.
The sink names QUEEN_S3_BUCKET, shows the bucket as not reachable with
that reason, shows a row for every queue and starts none (no lease, no
intent) until the bucket exists; once it does, the lake fills as usual. Meanwhile the sink's ok is
false and /health, which never looks at the sink, still answers 200."""
import http.server
import socketserver
import threading

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
        pushed = node.request("POST", "/api/v1/push",
                              body=lake.push_body(items))
        assert pushed.status == 201, pushed
        wait_until(lambda: "QUEEN_S3_BUCKET=nosuchbucket: no such bucket" in
                   node.stderr(), 60, "the log line naming the setting")
        assert kv_get(node, "s3:default:orders:lease")["found"] is False
        assert kv_get(node, "s3:default:orders:intent")["found"] is False
        health = node.get("/status").json()["s3"]["sinks"][0]
        assert health["bucket"]["reachable"] is False, health
        # Every queue has a row (docs/s3-sink.md, Status), the bucket
        # answering or not: the one named waits to claim, owned by nobody.
        rows = {q["name"]: q for q in health["queues"]}
        assert set(rows) == {"orders"}, health["queues"]
        assert rows["orders"]["state"] == "claiming", rows
        assert rows["orders"]["heldBy"] is None, rows
        assert rows["orders"]["ownedHere"] is False, rows
        assert health["placement"]["queues"] == 1, health["placement"]
        assert health["placement"]["held"] == 0, health["placement"]
        # The sink's ok is false while its bucket does not answer, and
        # /health does not look at the sink (docs/s3-sink.md, Status).
        assert health["ok"] is False, health
        r = node.get("/health")
        assert r.status == 200 and "s3" not in r.json(), r
        # Once the bucket exists, a later probe finds it and the queue
        # starts from its first record.
        b.boto3().create_bucket(Bucket="nosuchbucket")
        lake.wait_queue(lake.bucket_reader(b, "nosuchbucket"), PREFIX, TENANT,
                        "orders", lake.acked_from_push(items, pushed.json()),
                        timeout=120, compression="zstd", align="none")
        wait_until(lambda: node.get("/status").json()["s3"]["sinks"][0][
            "bucket"]["reachable"] is True, 60, "bucket.reachable true")
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


class _WrongRegion(http.server.BaseHTTPRequestHandler):
    """An endpoint answering as AWS does a request signed for another
    region than its bucket's: 301 with the bucket's region in
    x-amz-bucket-region (and, but to a HEAD, a PermanentRedirect
    document)."""
    protocol_version = "HTTP/1.1"

    def log_message(self, *a):
        pass

    def answer(self):
        n = int(self.headers.get("Content-Length") or 0)
        if n:
            self.rfile.read(n)
        body = (b'<?xml version="1.0" encoding="UTF-8"?>\n<Error><Code>'
                b'PermanentRedirect</Code><Message>The bucket you are '
                b'attempting to access must be addressed using the specified '
                b'endpoint.</Message><Bucket>lake</Bucket></Error>')
        self.send_response(301)
        self.send_header("x-amz-bucket-region", "eu-west-1")
        self.send_header("Content-Type", "application/xml")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(body)

    do_GET = do_PUT = do_POST = do_DELETE = do_HEAD = answer


def test_a_bucket_in_another_region_names_the_region(broker_factory):
    """A region typo against AWS: the probe's answer says where the bucket
    is, and the bucket's error names both regions and the setting (it said
    only "301 Moved Permanently")."""
    srv = socketserver.ThreadingTCPServer(("127.0.0.1", 0), _WrongRegion)
    srv.daemon_threads = True
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    try:
        ep = "http://127.0.0.1:%d" % srv.server_address[1]
        node = broker_factory(env=sink_env(
            None, QUEEN_S3_ENDPOINT=ep, QUEEN_S3_REGION="us-east-1"))

        def refused():
            s3 = node.get("/status").json()["s3"]["sinks"][0]
            return s3["bucket"]["reachable"] is False and \
                s3["bucket"]["error"]
        err = wait_until(refused, 60, "bucket.reachable false")
        assert ("The bucket is in region eu-west-1 (x-amz-bucket-region), "
                "and requests are signed for us-east-1: set QUEEN_S3_REGION "
                "to eu-west-1") in err, err
    finally:
        srv.shutdown()
        srv.server_close()
