"""/status and the metrics under bearer tokens bound to tenants (issue 15:
a tenant sees only its own status rows).

The node runs the environment sink for the default tenant. A token bound
to another tenant read its bucket, endpoint, queue names and counts in
/status, and every tenant's series in /metrics. Now /status shows a bound
token its own tenant's sinks only, and the metrics, the whole node's,
need a token bound to no tenant (403 otherwise)."""
from sinkenv import sink_env, wait_until

DEFAULT = "00000000-0000-0000-0000-000000000001"
OTHER = "7f000000-0000-4000-8000-00000000000a"
TOK_OTHER = "tok-other-0123456789abcdef"
TOK_DEFAULT = "tok-default-0123456789abcdef"
TOK_ADMIN = "tok-admin-0123456789abcdef"
QUEUE = "st.private-orders"


def as_(node, token, path):
    return node.get(path, headers={"authorization": "Bearer " + token})


def test_a_bound_token_sees_its_own_sinks_and_no_node_metrics(
        broker_factory, bucket, tmp_path):
    tokens = tmp_path / "tokens"
    tokens.write_text("%s %s\n%s %s\n%s\n" % (TOK_OTHER, OTHER, TOK_DEFAULT,
                                               DEFAULT, TOK_ADMIN))
    node = broker_factory(env=sink_env(bucket, QUEEN_S3_QUEUES="*",
                                       QUEEN_AUTH_TOKENS=str(tokens)))
    r = node.request("POST", "/api/v1/push",
                     body={"items": [{"queue": QUEUE, "payload": {"n": 1}}]},
                     headers={"authorization": "Bearer " + TOK_ADMIN})
    assert r.status == 201, r

    def listed():
        body = as_(node, TOK_ADMIN, "/status").body
        return QUEUE.encode() in body and b'"windowsCommitted":1' in body
    wait_until(listed, 60, "the admin token's /status to show the queue")

    r = as_(node, TOK_DEFAULT, "/status")
    assert r.status == 200, r
    (mine,) = r.json()["s3"]["sinks"]
    assert mine["tenant"] == DEFAULT, mine
    assert [q["name"] for q in mine["queues"]] == [QUEUE], mine

    r = as_(node, TOK_OTHER, "/status")
    assert r.status == 200, r
    s3 = r.json()["s3"]
    assert QUEUE.encode() not in r.body, s3
    assert bucket.endpoint.encode() not in r.body, s3
    assert DEFAULT.encode() not in r.body, s3
    assert s3["sinks"] == [], s3
    # The stages count every tenant's records read (node-wide, like the
    # metrics): the admin sees them, a bound token does not.
    assert "stages" not in s3, s3
    assert "stages" not in as_(node, TOK_DEFAULT, "/status").json()["s3"]
    stages = as_(node, TOK_ADMIN, "/status").json()["s3"]["stages"]
    assert stages["recordsRead"] >= 1, stages

    for path in ("/metrics", "/metrics/prometheus"):
        r = as_(node, TOK_OTHER, path)
        assert r.status == 403, r
        assert r.json()["code"] == "forbidden", r.json()
        assert QUEUE.encode() not in r.body
        r = as_(node, TOK_ADMIN, path)
        assert r.status == 200, r
        assert ('queen_s3_windows_committed_total{queue="%s"}' % QUEUE
                ).encode() in r.body, r.body[-2000:]
    assert node.stop() == 0
