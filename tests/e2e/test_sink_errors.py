"""Issue 19 item 7: S3 errors name their cause, and the bucket probe's hint
fits it. A 403 without an S3 code (a HEAD has no body) printed
`(status 403: )`; it now carries the status text. The path-style hint was
given for every failure, a refused connection included; it now comes only
when a virtual-host name did not resolve, and the credentials hint only for
a refusal."""
from sinkenv import PREFIX, it, sink_env, wait_until


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


def test_a_refused_connection_gets_no_path_style_hint(broker_factory):
    class Closed:
        endpoint = "http://127.0.0.1:%d" % it.free_port()
    node = broker_factory(env=sink_env(Closed))
    err = bucket_error(node)
    assert "Couldn't connect to server" in err, err
    assert "QUEEN_S3_PATH_STYLE" not in err, err
    assert "_SECRET_KEY" not in err, err


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
