"""POST /api/v1/configure (docs/design/http-api.md §5): defaults, typing,
clamps,
refusals, null restores, merge/replace and the answer's shape."""
import pytest

CONFIGURED = {
    "priority": 0, "leaseTime": 300, "retryLimit": 3, "retryDelay": 1000,
    "maxSize": 0, "maxQueueSize": 0, "ttl": 3600, "deadLetterQueue": True,
    "dlqAfterMaxRetries": True, "delayedProcessing": 0, "windowBuffer": 0,
    "retentionSeconds": 0, "completedRetentionSeconds": 0,
    "retentionEnabled": False, "encryptionEnabled": False,
    "maxWaitTimeSeconds": 0, "minPopWaitTime": 0, "dedupWindowSeconds": 3600,
    "retentionSinkHold": "", "retentionSinkHoldMaxSeconds": 604800,
}
OPTION_ORDER = [
    "priority", "leaseTime", "retryLimit", "retryDelay", "maxSize",
    "maxQueueSize", "ttl", "deadLetterQueue", "dlqAfterMaxRetries",
    "delayedProcessing", "windowBuffer", "retentionSeconds",
    "completedRetentionSeconds", "retentionEnabled", "encryptionEnabled",
    "maxWaitTimeSeconds", "minPopWaitTime", "dedupWindowSeconds",
    "retentionSinkHold", "retentionSinkHoldMaxSeconds",
]
INTS = ["priority", "leaseTime", "retryLimit", "retryDelay", "maxSize", "ttl",
        "delayedProcessing", "windowBuffer", "retentionSeconds",
        "completedRetentionSeconds", "maxWaitTimeSeconds", "minPopWaitTime",
        "dedupWindowSeconds", "retentionSinkHoldMaxSeconds"]
BOOLS = ["deadLetterQueue", "dlqAfterMaxRetries", "retentionEnabled",
         "encryptionEnabled"]


def configure(broker, body, expect=200):
    r = broker.post("/api/v1/configure", body)
    assert r.status == expect, r
    return r


def current(broker, queue):
    """The stored options: a merge with nothing in it changes nothing."""
    return configure(broker, {"queue": queue, "options": {}}).json()


def test_new_queue_gets_configured_defaults_in_order(broker):
    r = configure(broker, {"queue": "c1"})
    pairs = r.pairs()
    assert [k for k, _ in pairs] == [
        "configured", "queueId", "partitionId", "queue", "namespace", "task",
        "storage", "options"]
    body = r.json()
    assert body["configured"] is True
    assert body["partitionId"] is None
    assert body["queue"] == "c1"
    assert body["namespace"] == "" and body["task"] == ""
    assert body["storage"] == "segments"
    assert len(body["queueId"]) == 36 and body["queueId"].count("-") == 4
    opts = dict(pairs)["options"]
    assert [k for k, _ in opts] == OPTION_ORDER
    assert body["options"] == CONFIGURED


def test_every_option_is_stored_and_kept_by_merge(broker):
    want = {"priority": 7, "leaseTime": 11, "retryLimit": 5,
            "retryDelay": 250, "maxSize": 1000, "ttl": 99,
            "delayedProcessing": 3, "windowBuffer": 4,
            "retentionSeconds": 120, "completedRetentionSeconds": 60,
            "maxWaitTimeSeconds": 30, "minPopWaitTime": 500,
            "dedupWindowSeconds": 10, "retentionSinkHoldMaxSeconds": 3600,
            "deadLetterQueue": False, "dlqAfterMaxRetries": False,
            "retentionEnabled": True, "encryptionEnabled": True,
            "retentionSinkHold": "default"}
    body = dict(want, namespace="ns", task="t")
    r = configure(broker, {"queue": "c2", "options": body}).json()
    expected = dict(want, maxQueueSize=1000)
    assert r["options"] == expected
    assert r["namespace"] == "ns" and r["task"] == "t"
    again = current(broker, "c2")
    assert again["options"] == expected
    assert again["queueId"] == r["queueId"]
    assert again["namespace"] == "ns" and again["task"] == "t"


def test_merge_changes_only_named_options_replace_resets(broker):
    configure(broker, {"queue": "c3", "options": {"ttl": 5, "priority": 2}})
    r = configure(broker, {"queue": "c3", "options": {"priority": 9}}).json()
    assert r["options"]["ttl"] == 5 and r["options"]["priority"] == 9
    first_id = r["queueId"]
    r = configure(broker, {"queue": "c3", "mode": "replace",
                           "options": {"retryLimit": 1}}).json()
    assert r["queueId"] == first_id
    assert r["options"] == dict(CONFIGURED, retryLimit=1)


def test_null_restores_the_default(broker):
    configure(broker, {"queue": "c4", "options": {
        "ttl": 5, "retentionEnabled": True, "retentionSinkHold": "x",
        "retentionSinkHoldMaxSeconds": 120, "namespace": "n"}})
    r = configure(broker, {"queue": "c4", "options": {
        "ttl": None, "retentionEnabled": None, "retentionSinkHold": None,
        "retentionSinkHoldMaxSeconds": None, "namespace": None}}).json()
    assert r["options"] == CONFIGURED
    assert r["namespace"] == ""


@pytest.mark.parametrize("key", INTS)
def test_integer_typing(broker, key):
    for bad in ["1", 1.5, True, 2**31, -2**31 - 1, [1], {"a": 1}]:
        r = configure(broker, {"queue": "ci", "options": {key: bad}}, 400)
        assert r.json()["error"] == "%s must be an integer" % key, (key, bad)
    # extremes of i32 are integers (the hold ceiling refuses them below)
    if key != "retentionSinkHoldMaxSeconds":
        configure(broker, {"queue": "ci", "options": {key: 2**31 - 1}})


@pytest.mark.parametrize("key", BOOLS)
def test_boolean_typing(broker, key):
    for bad in [1, 0, "true", [], {}]:
        r = configure(broker, {"queue": "cb", "options": {key: bad}}, 400)
        assert r.json()["error"] == "%s must be a boolean" % key, (key, bad)
    r = configure(broker, {"queue": "cb", "options": {key: True}}).json()
    assert r["options"][key] is True


def test_clamps(broker):
    o = configure(broker, {"queue": "cc", "options": {
        "minPopWaitTime": 60001, "dedupWindowSeconds": -5}}).json()["options"]
    assert o["minPopWaitTime"] == 60000 and o["dedupWindowSeconds"] == 0
    o = configure(broker, {"queue": "cc", "options": {
        "minPopWaitTime": -1}}).json()["options"]
    assert o["minPopWaitTime"] == 0
    # no clamp elsewhere: negative values are stored as given
    o = configure(broker, {"queue": "cc", "options": {
        "retentionSeconds": -3}}).json()["options"]
    assert o["retentionSeconds"] == -3


def test_hold_ceiling_refused_and_previous_config_kept(broker):
    configure(broker, {"queue": "ch", "options": {
        "retentionSinkHoldMaxSeconds": 600, "ttl": 42}})
    msg = "retentionSinkHoldMaxSeconds must be between 60 and 31536000"
    for bad in [59, 0, -1, 31536001]:
        r = configure(broker, {"queue": "ch", "options": {
            "retentionSinkHoldMaxSeconds": bad, "ttl": 1}}, 400)
        assert r.json()["error"] == msg
    for ok in [60, 31536000]:
        o = configure(broker, {"queue": "ch2", "options": {
            "retentionSinkHoldMaxSeconds": ok}}).json()["options"]
        assert o["retentionSinkHoldMaxSeconds"] == ok
    o = current(broker, "ch")["options"]
    assert o["retentionSinkHoldMaxSeconds"] == 600 and o["ttl"] == 42


def test_hold_pattern(broker):
    msg = "retentionSinkHold must match [A-Za-z0-9._-]{0,64}"
    for bad in ["a b", "a/b", "é", "x" * 65, 5, True]:
        r = configure(broker, {"queue": "cp", "options": {
            "retentionSinkHold": bad}}, 400)
        assert r.json()["error"] == msg, bad
    for ok in ["", "A-z_0.9", "x" * 64]:
        o = configure(broker, {"queue": "cp", "options": {
            "retentionSinkHold": ok}}).json()["options"]
        assert o["retentionSinkHold"] == ok


def test_refused_call_changes_nothing_and_creates_nothing(broker):
    configure(broker, {"queue": "cr", "options": {"ttl": 77}})
    r = configure(broker, {"queue": "cr", "options": {
        "ttl": 1, "priority": "high"}}, 400)
    assert r.json()["error"] == "priority must be an integer"
    assert current(broker, "cr")["options"]["ttl"] == 77
    configure(broker, {"queue": "never", "options": {"leaseTime": "x"}}, 400)
    names = [q["name"] for q in
             broker.get("/api/v1/resources/queues").json()["queues"]]
    assert "never" not in names and "cr" in names


def test_request_shape_errors(broker):
    r = configure(broker, {"options": {}}, 400)
    assert r.json() == {"error": "queue is required", "code": "bad_request"}
    r = configure(broker, {"queue": "", "options": {}}, 400)
    assert r.json()["error"] == "queue is required"
    r = configure(broker, {"queue": 5}, 400)
    assert r.json()["error"] == "queue is required"
    r = configure(broker, {"queue": "m", "mode": "upsert"}, 400)
    assert r.json() == {
        "error": 'mode must be "merge" or "replace", got "upsert"'}
    r = broker.post("/api/v1/configure", b"{not json")
    assert r.status == 400 and r.json()["code"] == "bad_body"


def test_a_repeated_field_is_refused_and_changes_nothing(broker):
    configure(broker, {"queue": "cd", "options": {"ttl": 42}})
    for body, msg in (
            (b'{"queue":"cd","options":{"ttl":1,"ttl":2}}',
             'bad configure body: options: duplicate key "ttl"'),
            (b'{"queue":"cd","ttl":1,"ttl":2}',
             'bad configure body: duplicate key "ttl"'),
            (b'{"queue":"cd","queue":"cd2","options":{"ttl":1}}',
             'bad configure body: duplicate key "queue"'),
            (b'{"queue":"cd","mode":"merge","mode":"replace"}',
             'bad configure body: duplicate key "mode"')):
        r = broker.post("/api/v1/configure", body)
        assert r.status == 400, (body, r)
        assert r.json() == {"error": msg, "code": "bad_body"}
    assert current(broker, "cd")["options"]["ttl"] == 42
    names = [q["name"] for q in
             broker.get("/api/v1/resources/queues").json()["queues"]]
    assert "cd2" not in names


def test_options_at_root_and_top_level_namespace(broker):
    # options not an object: the root's other keys are the options
    r = configure(broker, {"queue": "cx", "ttl": 12, "namespace": "a",
                           "task": "b", "mode": "merge"}).json()
    assert r["options"]["ttl"] == 12
    assert (r["namespace"], r["task"]) == ("a", "b")
    # top-level namespace/task copied when the options lack them
    r = configure(broker, {"queue": "cy", "namespace": "top", "task": "t1",
                           "options": {"task": "inner", "ttl": 3}}).json()
    assert (r["namespace"], r["task"]) == ("top", "inner")
    assert r["options"]["ttl"] == 3


def test_implicit_queue_keeps_push_defaults_until_merged(broker):
    broker.push([{"queue": "ip", "payload": 1}])
    r = current(broker, "ip")["options"]
    # DDL defaults: lease 60; a stored hold ceiling of 0 reads as 604800
    assert r["leaseTime"] == 60
    assert r["retentionSinkHoldMaxSeconds"] == 604800
    assert r["retentionEnabled"] is False and r["retentionSinkHold"] == ""
    # pushes still work on the configured queue and keep the partition
    broker.push([{"queue": "ip", "payload": 2}])
    assert broker.fetch_one("ip")["highWatermark"] == 2


def test_queue_name_bounds(broker):
    o = configure(broker, {"queue": "n" * 447}).json()
    assert o["queue"] == "n" * 447
    for name in ["n" * 448, "n" * 2000]:
        r = configure(broker, {"queue": name}, 413)
        assert r.json() == {
            "error": "queue: name of %d bytes is over the 447-byte limit"
                     % len(name), "code": "too_large"}
    o = configure(broker, {"queue": "n\u0000\t"}).json()
    assert o["queue"] == "n\u0000\t"
    names = [q["name"] for q in
             broker.get("/api/v1/resources/queues").json()["queues"]]
    assert sorted(names) == sorted(["n" * 447, "n\u0000\t"])
