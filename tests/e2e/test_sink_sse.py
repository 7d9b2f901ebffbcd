"""The sink under server-side encryption: QUEEN_S3_SSE reaches the wire on
every object the sink writes, and a bucket that answers SSE-KMS PUTs with an
opaque 32-hex ETag (no MD5 of the body, as AWS does) still commits: the
sink's integrity rests on the Content-MD5 and x-amz-content-sha256 the
service checks, not on the ETag."""
import lake
from sinkenv import PREFIX, TENANT, sink_row, wait_until


def push(node, n, tag):
    items = [{"queue": "orders", "partition": "p-%d" % (i % 2),
              "payload": b'{"n":%d,"tag":"%s"}' % (i, tag.encode())}
             for i in range(n)]
    r = node.request("POST", "/api/v1/push", body=lake.push_body(items))
    assert r.status == 201, r
    return lake.acked_from_push(items, r.json())


def sink_puts(bucket):
    """The proxy's log lines of the sink's object writes (single PUTs and
    multipart creations) under the lake's prefix."""
    return [ln for ln in bucket.log_lines()
            if ln["key"] and ln["key"].startswith(PREFIX + "/") and
            (ln["method"] == "PUT" and "partNumber" not in ln["query"] or
             ln["method"] == "POST" and "uploads" in ln["query"])]


def test_sse_kms_with_opaque_etags_commits_and_sends_the_headers(sink_node,
                                                                 bucket):
    bucket.fault("opaque_etag", count=-1, method="PUT")
    node = sink_node({"QUEEN_S3_SSE": "aws:kms",
                      "QUEEN_S3_SSE_KMS_KEY_ID": "arn:aws:kms:key/test-1"})
    acked = push(node, 20, "a")
    reader = lake.bucket_reader(bucket)
    got = lake.wait_queue(reader, PREFIX, TENANT, "orders", acked,
                          timeout=60, compression="zstd", align="none")
    assert got["records"] == 20
    row = wait_until(lambda: (lambda q: q if q and q["records"] == 20
                              else None)(sink_row(node, "orders")),
                     30, "the /status row to count every record")
    assert row["recordsLost"] == 0
    assert bucket.stats()["faults"]["opaque_etag"] >= 2  # data + manifest
    puts = sink_puts(bucket)
    assert puts, "the sink wrote no object"
    for ln in puts:
        assert ln["status"] == 200, ln
        assert ln["sse"] == "aws:kms", ln
        assert ln["sse_kms_key_id"] == "arn:aws:kms:key/test-1", ln


def test_sse_aes256_reaches_the_wire_and_no_sse_sends_none(sink_node,
                                                           bucket):
    node = sink_node({"QUEEN_S3_SSE": "AES256"})
    acked = push(node, 5, "b")
    reader = lake.bucket_reader(bucket)
    lake.wait_queue(reader, PREFIX, TENANT, "orders", acked, timeout=60,
                    compression="zstd", align="none")
    puts = sink_puts(bucket)
    assert puts
    for ln in puts:
        assert ln["sse"] == "AES256" and ln["sse_kms_key_id"] is None, ln
