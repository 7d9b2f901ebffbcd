"""Issue 19 item 7: S3 errors name their cause, and the bucket probe's hint
fits it. A 403 without an S3 code (a HEAD has no body) printed
`(status 403: )`; it now carries the status text. The path-style hint was
given for every failure, a refused connection included; it now comes only
when a virtual-host name did not resolve, and the credentials hint only for
a refusal."""
import datetime
import time

import lake
import tlsfront
from sinkenv import PREFIX, TENANT, it, sink_env, sink_row, wait_until


def bucket_error(node):
    def failed():
        s3 = node.get("/status").json()["s3"]["sinks"][0]
        return s3["bucket"]["reachable"] is False and s3["bucket"]["error"]
    return wait_until(failed, 60, "bucket.reachable false")


def test_a_403_without_a_code_names_the_status_text(sink_node, bucket):
    bucket.fault("403", count=-1, method="HEAD", prefix=PREFIX + "/")
    node = sink_node()
    err = bucket_error(node)
    assert "(status 403 Forbidden)" in err, err
    assert "status 403: )" not in err, err
    assert "QUEEN_S3_ACCESS_KEY/_SECRET_KEY must be allowed" in err, err
    assert "QUEEN_S3_PATH_STYLE" not in err, err
    assert "(status 403 Forbidden)" in node.stderr()


def test_a_wrong_region_is_named_by_the_bucket(sink_node, bucket):
    """A wrong QUEEN_S3_REGION is answered 400 to the probe's HEAD, which
    has no body to say why: the probe asks once more with a LIST, and
    bucket.error carries the store's code and message."""
    node = sink_node({"QUEEN_S3_REGION": "xx-yy-1"})
    err = bucket_error(node)
    assert "AuthorizationHeaderMalformed" in err, err
    assert "xx-yy-1" in err and "us-east-1" in err, err
    assert "queen-secret-key" not in err


def test_a_refused_connection_gets_no_path_style_hint(broker_factory):
    class Closed:
        endpoint = "http://127.0.0.1:%d" % it.free_port()
    node = broker_factory(env=sink_env(Closed))
    err = bucket_error(node)
    assert "Couldn't connect to server" in err, err
    assert "QUEEN_S3_PATH_STYLE" not in err, err
    assert "_SECRET_KEY" not in err, err


def test_the_first_probe_of_a_bucket_that_refuses_connections_fails_at_once(
        broker_factory):
    """The probe is one request, retried by the sink's own backoff (1 s,
    doubling): it does not run the client's retry ladder first, which kept
    /status at `reachable: null` and `ok: true` for about 15 s."""
    class Closed:
        endpoint = "http://127.0.0.1:%d" % it.free_port()
    node = broker_factory(env=sink_env(Closed))
    started = time.monotonic()

    def failed():
        s3 = node.get("/status").json()["s3"]
        return s3["sinks"][0]["bucket"]["reachable"] is False and s3
    s3 = wait_until(failed, 60, "bucket.reachable false")
    took = time.monotonic() - started
    assert took < 5, "the first probe failed %.1f s after boot" % took
    assert s3["sinks"][0]["ok"] is False, s3["sinks"][0]
    retried = [ln for ln in node.stderr().splitlines()
               if "HEAD " in ln and "; retrying in" in ln]
    assert not retried, retried


def test_an_unresolved_virtual_host_name_gets_the_path_style_hint(
        broker_factory):
    class Unresolvable:  # .invalid never resolves (RFC 6761)
        endpoint = "http://s3.invalid:9"
    node = broker_factory(env=sink_env(Unresolvable,
                                       QUEEN_S3_PATH_STYLE="false"))
    err = bucket_error(node)
    assert "resolve" in err, err
    assert "lake.<host of QUEEN_S3_ENDPOINT> did not resolve: " \
        "QUEEN_S3_PATH_STYLE=true puts it in the path instead" in err, err
    assert "_SECRET_KEY" not in err, err


def test_a_long_key_leaves_room_for_the_status_and_code(sink_node, bucket):
    """A refused PUT of an object whose key is long (a partition name of 120
    bytes, per-partition layout: a key of about 290) names the status and
    the S3 code in lastError and the log; the key was printed whole before
    them and the message cut at 255 bytes, with neither left."""
    part = "p" * 120
    bucket.fault("403", count=-1, method="PUT",
                 prefix=PREFIX + "/tenant=")
    node = sink_node({"QUEEN_S3_LAYOUT": "per-partition",
                      "QUEEN_S3_QUEUES": "longkey"})
    node.push([{"queue": "longkey", "partition": part, "payload": {"a": 1}}])

    def error():
        row = sink_row(node, "longkey")
        return row and row["lastError"] and row["lastError"]["message"]
    msg = wait_until(error, 60, "the refused PUT in lastError")
    assert msg.startswith("PUT " + PREFIX + "/tenant="), msg
    assert "..." in msg and part not in msg, msg
    assert "status 403: AccessDenied" in msg, msg
    wait_until(lambda: "status 403: AccessDenied" in node.stderr(), 10,
               "the log names the status and code")


def test_a_refused_write_makes_the_bucket_unreachable_at_once(sink_node,
                                                              bucket):
    """Credentials revoked after the start: every PUT answers 403. The
    queue then waits a minute between writes, so three failed writes took
    about three minutes to turn bucket.reachable false; one refusal now
    does, with the cause in bucket.error and the sink's ok false."""
    node = sink_node({"QUEEN_S3_QUEUES": "refused"})
    node.push([{"queue": "refused", "partition": "p", "payload": {"a": 1}}])
    wait_until(lambda: (sink_row(node, "refused") or {}).get(
        "windowsCommitted") == 1, 60, "window 1 committed")
    bucket.fault("403", count=-1, method="PUT", prefix=PREFIX + "/")
    checked = node.get("/status").json()["s3"]["sinks"][0]["bucket"][
        "checkedAt"]
    faulted = time.time()
    node.push([{"queue": "refused", "partition": "p", "payload": {"a": 2}}])

    def unreachable():
        s3 = node.get("/status").json()["s3"]["sinks"][0]
        return s3["bucket"]["reachable"] is False and s3
    s3 = wait_until(unreachable, 30, "bucket.reachable false")
    assert s3["ok"] is False, s3
    # the verdict is the refused write's, and checkedAt says when it came
    assert checked is not None and s3["bucket"]["checkedAt"] > checked, \
        (checked, s3["bucket"])
    at = datetime.datetime.strptime(s3["bucket"]["checkedAt"],
                                    "%Y-%m-%dT%H:%M:%S.%fZ").replace(
        tzinfo=datetime.timezone.utc).timestamp()
    assert faulted - 1 <= at <= time.time() + 1, (faulted, s3["bucket"])
    assert s3["bucket"]["error"].startswith(
        "the last write to the bucket lake at %s was refused (status 403)"
        % bucket.endpoint), s3["bucket"]


def test_a_tls_bucket_of_a_private_authority_needs_its_ca_file(
        broker_factory, bucket, tmp_path):
    """An https endpoint whose certificate a private authority signed:
    without QUEEN_S3_CA_FILE the bucket is unreachable with the certificate
    named and the setting as the way out; with it the queue ships exactly;
    a CA file that cannot be read stops the boot with one line."""
    ca, cert, key = tlsfront.make_ca(str(tmp_path / "pki"))
    port = int(bucket.endpoint.rsplit(":", 1)[1])
    with tlsfront.TlsFront(cert, key, to_port=port) as front:
        class Tls:
            endpoint = front.url
        node = broker_factory(env=sink_env(Tls, QUEEN_S3_QUEUES="tls"))
        err = bucket_error(node)
        assert "certificate" in err and "QUEEN_S3_CA_FILE" in err, err
        assert node.stop() == 0

        node = broker_factory(env=sink_env(Tls, QUEEN_S3_QUEUES="tls",
                                           QUEEN_S3_CA_FILE=ca))
        its = [{"queue": "tls", "partition": "p%d" % (i % 2),
                "transactionId": "t%d" % i,
                "payload": b'{"i":%d}' % i} for i in range(20)]
        r = node.request("POST", "/api/v1/push", body=lake.push_body(its))
        assert r.status == 201, r
        acked = lake.acked_from_push(its, r.json())
        reader = lake.bucket_reader(bucket)
        lake.wait_queue(reader, PREFIX, TENANT, "tls", acked, timeout=60,
                        broker=node, compression="zstd", align="none")
        assert front.handshakes >= 1
        assert node.stop() == 0

    missing = str(tmp_path / "no-such.pem")
    node = broker_factory(env=sink_env(bucket, QUEEN_S3_CA_FILE=missing),
                          start=False)
    node.start(wait=False)
    rc = node.wait_exit(60)
    log = node.stderr()
    node._reap()
    assert rc == 2, log
    assert ("FATAL: QUEEN_S3_EMBEDDED=true: QUEEN_S3_CA_FILE=%s: cannot "
            "read it (No such file or directory)" % missing) in log, log
    assert "queen-secret-key" not in log
