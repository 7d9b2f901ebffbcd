"""The test bucket itself (docs/design/scenarios.md §9 `s3` scenario, as far as
it applies
to s3rver behind our proxy): signatures, digests, keys, listing, multipart,
abort, faults, the request log and process hygiene."""

import base64
import hashlib
import http.client
import json
import os
import signal
import socket
import subprocess
import threading
import time
import urllib.parse
import xml.etree.ElementTree as ET

import pytest
from botocore.auth import S3SigV4Auth
from botocore.awsrequest import AWSRequest
from botocore.credentials import Credentials
from botocore.exceptions import ClientError

from bucket import PYTHON, TestBucket, wait_until
from queenproc import Background

SPECIAL_KEYS = ["a=b/c.txt", "100%/x", "plus+sign", "with space",
                "caffé/été", "日本/語.jsonl"]
MIB = 1024 * 1024


def signed(b, method, path, body=b"", headers=None, secret=None,
           payload_hash=None, sign_path=None, query=""):
    """Send one SigV4-signed request (signed with botocore) to the proxy.
    path is sent as given; sign_path (default path) is what gets signed.
    Returns (status, headers dict lowercase, body bytes)."""
    host = "127.0.0.1:%d" % b.port
    h = {"host": host}
    h.update(headers or {})
    url = "http://%s%s%s" % (host, sign_path or path,
                             "?" + query if query else "")
    req = AWSRequest(method=method, url=url, headers=h, data=body)
    forced = payload_hash or hashlib.sha256(body).hexdigest()

    class Auth(S3SigV4Auth):
        def payload(self, request):
            return forced
    Auth(Credentials(b.access_key, secret or b.secret_key), "s3",
         b.region).add_auth(req)
    if payload_hash is False:
        del req.headers["X-Amz-Content-SHA256"]
    conn = http.client.HTTPConnection("127.0.0.1", b.port, timeout=30)
    try:
        send = {k: v for k, v in req.headers.items() if k.lower() != "host"}
        send["Host"] = host
        conn.request(method, path + ("?" + query if query else ""),
                     body=body or None, headers=send)
        resp = conn.getresponse()
        return (resp.status, {k.lower(): v for k, v in resp.getheaders()},
                resp.read())
    finally:
        conn.close()


def s3_code(body):
    return ET.fromstring(body).findtext("Code")


def code_of(excinfo):
    return excinfo.value.response["Error"]["Code"]


def status_of(excinfo):
    return excinfo.value.response["ResponseMetadata"]["HTTPStatusCode"]


def test_signed_put_get_head_round_trip_special_keys(bucket):
    c = bucket.boto3()
    for i, key in enumerate(SPECIAL_KEYS):
        body = ("body %d of %s" % (i, key)).encode()
        r = c.put_object(Bucket="lake", Key=key, Body=body)
        assert r["ETag"] == '"%s"' % hashlib.md5(body).hexdigest()
        assert c.get_object(Bucket="lake", Key=key)["Body"].read() == body
        head = c.head_object(Bucket="lake", Key=key)
        assert head["ContentLength"] == len(body)
        assert head["ETag"] == r["ETag"]
        assert bucket.read_object("lake", key) == body
    want = sorted(SPECIAL_KEYS, key=lambda k: k.encode())
    assert bucket.list_keys("lake") == want


def test_list_pages_by_token_and_start_after_in_byte_order(bucket):
    c = bucket.boto3()
    for key in SPECIAL_KEYS + ["a-c", "a/b"]:
        c.put_object(Bucket="lake", Key=key, Body=b"x")
    want = sorted(SPECIAL_KEYS + ["a-c", "a/b"], key=lambda k: k.encode())
    pages, got, token = 0, [], None
    while True:
        kw = {"ContinuationToken": token} if token else {}
        r = c.list_objects_v2(Bucket="lake", MaxKeys=2, **kw)
        got += [o["Key"] for o in r.get("Contents", [])]
        pages += 1
        if not r["IsTruncated"]:
            break
        token = r["NextContinuationToken"]
    assert got == want and pages == 4
    got = []
    while True:
        r = c.list_objects_v2(Bucket="lake", MaxKeys=2,
                              StartAfter=got[-1] if got else "")
        got += [o["Key"] for o in r.get("Contents", [])]
        if not r["IsTruncated"]:
            break
    assert got == want
    r = c.list_objects_v2(Bucket="lake", Prefix="caffé/")
    assert [o["Key"] for o in r["Contents"]] == ["caffé/été"]
    r = c.list_objects_v2(Bucket="lake", MaxKeys=0)
    assert r["KeyCount"] == 0 and r["IsTruncated"] is False
    r = c.list_objects(Bucket="lake", MaxKeys=3)  # v1, marker paging
    assert [o["Key"] for o in r["Contents"]] == want[:3]
    r = c.list_objects(Bucket="lake", Marker=r["NextMarker"])
    assert [o["Key"] for o in r["Contents"]] == want[3:]


def test_delimiter_reports_common_prefixes_for_deep_keys(bucket):
    c = bucket.boto3()
    for key in ["q/tenant=a/queue=x/dt=1/o1", "q/tenant=a/queue=y/o2",
                "q/tenant=b/o3", "q/top"]:
        c.put_object(Bucket="lake", Key=key, Body=b"x")
    r = c.list_objects_v2(Bucket="lake", Prefix="q/", Delimiter="/")
    assert [p["Prefix"] for p in r["CommonPrefixes"]] == \
        ["q/tenant=a/", "q/tenant=b/"]
    assert [o["Key"] for o in r["Contents"]] == ["q/top"]
    r = c.list_objects_v2(Bucket="lake", Prefix="q/tenant=a/",
                          Delimiter="/", MaxKeys=1)
    assert [p["Prefix"] for p in r["CommonPrefixes"]] == ["q/tenant=a/queue=x/"]
    r = c.list_objects_v2(Bucket="lake", Prefix="q/tenant=a/",
                          Delimiter="/", MaxKeys=1,
                          ContinuationToken=r["NextContinuationToken"])
    assert [p["Prefix"] for p in r["CommonPrefixes"]] == ["q/tenant=a/queue=y/"]
    assert r["IsTruncated"] is False


def test_head_of_missing_key_or_prefix_probe_is_404(bucket):
    bucket.boto3().put_object(Bucket="lake", Key="queen/obj", Body=b"x")
    for path in ("/lake/queen/", "/lake/missing"):
        status, _, body = signed(bucket, "HEAD", path)
        assert (status, body) == (404, b"")
    status, _, body = signed(bucket, "GET", "/lake/missing")
    assert status == 404 and s3_code(body) == "NoSuchKey"
    assert ET.fromstring(body).findtext("Key") == "missing"
    status, _, body = signed(bucket, "GET", "/other/k")
    assert status == 404 and s3_code(body) == "NoSuchBucket"


def test_wrong_secret_unknown_key_and_anonymous_are_refused(bucket):
    bad = bucket.boto3(secret_key="not-the-secret")
    with pytest.raises(ClientError) as e:
        bad.put_object(Bucket="lake", Key="k", Body=b"x")
    assert (status_of(e), code_of(e)) == (403, "SignatureDoesNotMatch")
    with pytest.raises(ClientError) as e:
        bucket.boto3(access_key="nobody").get_object(Bucket="lake", Key="k")
    assert (status_of(e), code_of(e)) == (403, "InvalidAccessKeyId")
    conn = http.client.HTTPConnection("127.0.0.1", bucket.port, timeout=10)
    conn.request("PUT", "/lake/k", body=b"x")
    resp = conn.getresponse()
    assert resp.status == 403 and s3_code(resp.read()) == "AccessDenied"
    assert bucket.read_object("lake", "k") is None


def test_signature_is_over_the_aws_canonical_form(bucket):
    # Signing a raw '=' fails (AWS encodes it as %3D); the encoded one passes.
    status, _, body = signed(bucket, "PUT", "/lake/t=1/k", b"v")
    assert status == 403 and s3_code(body) == "SignatureDoesNotMatch"
    status, _, _ = signed(bucket, "PUT", "/lake/t%3D1/k", b"v")
    assert status == 200 and bucket.read_object("lake", "t=1/k") == b"v"
    # Query parameters are sorted and encoded before checking.
    for path in ("/lake", "/lake/"):
        status, _, body = signed(bucket, "GET", path,
                                 query="prefix=t%3D1%2F&list-type=2")
        assert status == 200 and b"<Key>t=1/k</Key>" in body
    status, _, body = signed(bucket, "GET", "/lake/t%3D1/k",
                             payload_hash="UNSIGNED-PAYLOAD")
    assert (status, body) == (200, b"v")
    # Without x-amz-content-sha256 a SigV4 request is 400, as on AWS.
    status, _, body = signed(bucket, "GET", "/lake/t%3D1/k",
                             payload_hash=False)
    assert status == 400 and s3_code(body) == "InvalidRequest"


def test_wrong_content_md5_is_bad_digest_and_stores_nothing(bucket):
    body = b"the body"
    wrong = base64.b64encode(hashlib.md5(b"other").digest()).decode()
    status, _, resp = signed(bucket, "PUT", "/lake/md5", body,
                             {"content-md5": wrong})
    assert status == 400 and s3_code(resp) == "BadDigest"
    assert bucket.read_object("lake", "md5") is None
    right = base64.b64encode(hashlib.md5(body).digest()).decode()
    status, h, _ = signed(bucket, "PUT", "/lake/md5", body,
                          {"content-md5": right})
    assert status == 200
    assert h["etag"] == '"%s"' % hashlib.md5(body).hexdigest()


def test_wrong_content_sha256_is_400_and_stores_nothing(bucket):
    status, _, resp = signed(bucket, "PUT", "/lake/sha", b"body",
                             payload_hash=hashlib.sha256(b"x").hexdigest())
    assert status == 400 and s3_code(resp) == "XAmzContentSHA256Mismatch"
    assert bucket.read_object("lake", "sha") is None


def upload_parts(c, key, sizes):
    up = c.create_multipart_upload(Bucket="lake", Key=key)["UploadId"]
    parts, data = [], b""
    for n, size in enumerate(sizes, 1):
        chunk = bytes([n]) * size
        r = c.upload_part(Bucket="lake", Key=key, UploadId=up, PartNumber=n,
                          Body=chunk)
        assert r["ETag"] == '"%s"' % hashlib.md5(chunk).hexdigest()
        parts.append({"PartNumber": n, "ETag": r["ETag"]})
        data += chunk
    return up, parts, data


def test_multipart_completes_with_dash_n_etag(bucket):
    c = bucket.boto3()
    up, parts, data = upload_parts(c, "big/obj", [5 * MIB, 1234])
    listed = bucket.uploads("lake")
    assert [(u["key"], u["uploadId"]) for u in listed] == [("big/obj", up)]
    assert [(p["partNumber"], p["size"]) for p in listed[0]["parts"]] == \
        [(1, 5 * MIB), (2, 1234)]
    r = c.list_parts(Bucket="lake", Key="big/obj", UploadId=up)
    assert [p["Size"] for p in r["Parts"]] == [5 * MIB, 1234]
    assert [u["UploadId"] for u in
            c.list_multipart_uploads(Bucket="lake")["Uploads"]] == [up]
    xml = "<CompleteMultipartUpload>%s</CompleteMultipartUpload>" % "".join(
        "<Part><PartNumber>%d</PartNumber><ETag>%s</ETag></Part>"
        % (p["PartNumber"], p["ETag"]) for p in parts)
    status, _, body = signed(bucket, "POST", "/lake/big/obj", xml.encode(),
                             {"content-type": "application/xml"},
                             query="uploadId=" + up)
    md5s = b"".join(hashlib.md5(bytes([n]) * s).digest()
                    for n, s in ((1, 5 * MIB), (2, 1234)))
    want = '"%s-2"' % hashlib.md5(md5s).hexdigest()
    assert status == 200
    assert b"<ETag>&quot;%s&quot;</ETag>" % want[1:-1].encode() in body
    assert c.head_object(Bucket="lake", Key="big/obj")["ETag"] == want
    got = c.get_object(Bucket="lake", Key="big/obj")
    assert got["ETag"] == want and got["Body"].read() == data
    assert bucket.read_object("lake", "big/obj") == data
    assert bucket.uploads("lake") == []


def test_multipart_checks_part_size_and_etags(bucket):
    c = bucket.boto3()
    up, parts, _ = upload_parts(c, "small", [1000, 1000])
    with pytest.raises(ClientError) as e:
        c.complete_multipart_upload(Bucket="lake", Key="small", UploadId=up,
                                    MultipartUpload={"Parts": parts})
    assert (status_of(e), code_of(e)) == (400, "EntityTooSmall")
    bad = [{"PartNumber": 1, "ETag": '"%s"' % ("0" * 32)}]
    with pytest.raises(ClientError) as e:
        c.complete_multipart_upload(Bucket="lake", Key="small", UploadId=up,
                                    MultipartUpload={"Parts": bad})
    assert (status_of(e), code_of(e)) == (400, "InvalidPart")
    with pytest.raises(ClientError) as e:
        c.complete_multipart_upload(Bucket="lake", Key="small", UploadId=up,
                                    MultipartUpload={"Parts": parts[::-1]})
    assert (status_of(e), code_of(e)) == (400, "InvalidPartOrder")
    assert bucket.read_object("lake", "small") is None
    assert len(bucket.uploads("lake")) == 1


def test_abort_removes_the_upload(bucket):
    c = bucket.boto3()
    up, parts, _ = upload_parts(c, "aborted", [5 * MIB, 10])
    r = c.abort_multipart_upload(Bucket="lake", Key="aborted", UploadId=up)
    assert r["ResponseMetadata"]["HTTPStatusCode"] == 204
    assert bucket.uploads("lake") == []
    with pytest.raises(ClientError) as e:
        c.complete_multipart_upload(Bucket="lake", Key="aborted", UploadId=up,
                                    MultipartUpload={"Parts": parts})
    assert (status_of(e), code_of(e)) == (404, "NoSuchUpload")
    with pytest.raises(ClientError) as e:
        c.abort_multipart_upload(Bucket="lake", Key="aborted", UploadId=up)
    assert (status_of(e), code_of(e)) == (404, "NoSuchUpload")
    with pytest.raises(ClientError) as e:
        c.upload_part(Bucket="lake", Key="aborted", UploadId=up,
                      PartNumber=1, Body=b"x")
    assert code_of(e) == "NoSuchUpload"
    assert bucket.read_object("lake", "aborted") is None


def test_delete_twice_is_204_and_get_after_is_404(bucket):
    c = bucket.boto3()
    c.put_object(Bucket="lake", Key="d/k", Body=b"x")
    for _ in range(2):
        r = c.delete_object(Bucket="lake", Key="d/k")
        assert r["ResponseMetadata"]["HTTPStatusCode"] == 204
    with pytest.raises(ClientError) as e:
        c.get_object(Bucket="lake", Key="d/k")
    assert code_of(e) == "NoSuchKey"


def test_fault_503_fires_count_times_with_retry_after(bucket):
    c = bucket.boto3()
    bucket.fault("503", count=2, method="PUT", prefix="data/",
                 retry_after=2)
    c.put_object(Bucket="lake", Key="side/k", Body=b"x")  # prefix differs
    for _ in range(2):
        with pytest.raises(ClientError) as e:
            c.put_object(Bucket="lake", Key="data/k", Body=b"x")
        assert (status_of(e), code_of(e)) == (503, "SlowDown")
        assert e.value.response["ResponseMetadata"]["HTTPHeaders"][
            "retry-after"] == "2"
        assert bucket.read_object("lake", "data/k") is None
    c.put_object(Bucket="lake", Key="data/k", Body=b"x")
    assert bucket.read_object("lake", "data/k") == b"x"
    s = bucket.stats()
    assert s["faults"]["503"] == 2
    assert s["requests"]["PUT"] == {"200": 2, "503": 2}


def test_fault_500_matches_method_and_runs_out(bucket):
    c = bucket.boto3()
    c.put_object(Bucket="lake", Key="k", Body=b"x")
    bucket.fault("500", count=1, method="GET")
    c.head_object(Bucket="lake", Key="k")  # HEAD is not GET
    with pytest.raises(ClientError) as e:
        c.get_object(Bucket="lake", Key="k")
    assert (status_of(e), code_of(e)) == (500, "InternalError")
    assert c.get_object(Bucket="lake", Key="k")["Body"].read() == b"x"
    assert bucket.stats()["faults"]["500"] == 1


def test_down_refuses_connections_until_cleared(bucket):
    c = bucket.boto3()
    c.put_object(Bucket="lake", Key="k", Body=b"x")
    bucket.fault("down")
    with pytest.raises(ConnectionRefusedError):
        socket.create_connection(("127.0.0.1", bucket.port), timeout=5)
    assert bucket.stats()["requests"]  # the control port still answers
    bucket.clear_faults()
    assert c.get_object(Bucket="lake", Key="k")["Body"].read() == b"x"


def test_down503_answers_everything_until_cleared(bucket):
    c = bucket.boto3()
    bucket.fault("down503")
    for _ in range(3):
        with pytest.raises(ClientError) as e:
            c.list_objects_v2(Bucket="lake")
        assert (status_of(e), code_of(e)) == (503, "ServiceUnavailable")
    bucket.clear_faults()
    c.list_objects_v2(Bucket="lake")
    assert bucket.stats()["faults"]["down503"] == 3


def test_held_put_lands_late(bucket):
    c = bucket.boto3()
    bucket.fault("hold", count=1, method="PUT", prefix="held/", ms=3000)

    def put():
        t0 = time.monotonic()
        c.put_object(Bucket="lake", Key="held/k", Body=b"late")
        return time.monotonic() - t0
    held_put = Background(put)
    wait_until(lambda: bucket.stats()["faults"]["hold"] == 1, 60,
               "the PUT to be held")
    # Not there while it is held. A look that a loaded machine only got to
    # after the hold ended proves nothing either way.
    early = bucket.read_object("lake", "held/k")
    if bucket.stats()["held"] == 1:
        assert early is None
    c.put_object(Bucket="lake", Key="free/k", Body=b"now")  # others pass
    assert held_put.result(60) >= 3.0
    assert bucket.read_object("lake", "held/k") == b"late"
    assert bucket.stats()["faults"]["hold"] == 1


def test_release_ends_a_long_hold_at_once(bucket):
    c = bucket.boto3()
    bucket.fault("hold", count=1, method="PUT", prefix="held/", ms=60000)
    def put():
        c.put_object(Bucket="lake", Key="held/k", Body=b"late")
        return time.monotonic()
    held_put = Background(put)
    wait_until(lambda: bucket.stats()["held"] == 1, 60, "the PUT to be held")
    assert bucket.read_object("lake", "held/k") is None
    released = time.monotonic()
    assert bucket.release_held() == 1
    assert held_put.result(60) - released < 30  # not the hold's 60 s
    assert bucket.read_object("lake", "held/k") == b"late"
    assert bucket.stats()["held"] == 0
    assert bucket.release_held() == 0  # nothing held: a no-op
    c.put_object(Bucket="lake", Key="held/k2", Body=b"now")  # count used up


def test_a_stalled_get_sends_its_head_and_half_then_hangs(bucket):
    """Under a "stall" fault a GET gets its status line, its headers (the
    whole length) and half the body, then nothing until the hold ends
    (here: released), then the connection closes: the body stays short."""
    c = bucket.boto3()
    body = bytes(range(256)) * 8
    c.put_object(Bucket="lake", Key="st/k", Body=body)
    bucket.fault("stall", count=1, method="GET", prefix="st/", ms=120000)

    def get():
        r = c.get_object(Bucket="lake", Key="st/k")
        got = (r["ResponseMetadata"]["HTTPStatusCode"], r["ContentLength"])
        try:
            r["Body"].read()
        except Exception as e:  # the short body, whatever botocore calls it
            return got + (type(e).__name__,)
        return got + ("whole",)
    stalled = Background(get)
    wait_until(lambda: bucket.stats()["held"] == 1, 60, "the GET to stall")
    assert bucket.release_held() == 1
    status, length, end = stalled.result(60)
    assert (status, length) == (200, len(body))
    assert end != "whole", end
    assert bucket.stats()["faults"]["stall"] == 1
    assert c.get_object(Bucket="lake", Key="st/k")["Body"].read() == body


def test_request_log_has_one_json_line_per_request(bucket):
    c = bucket.boto3()
    c.put_object(Bucket="lake", Key="log/é k", Body=b"12345")
    c.get_object(Bucket="lake", Key="log/é k")["Body"].read()
    with pytest.raises(ClientError):
        c.head_object(Bucket="lake", Key="log/none")
    lines = bucket.log_lines()
    assert [(x["method"], x["key"], x["status"]) for x in lines] == [
        ("PUT", "log/é k", 200), ("GET", "log/é k", 200),
        ("HEAD", "log/none", 404)]
    assert lines[0]["bytes"] == 5 and lines[1]["bytes_out"] == 5
    assert all(x["ms"] >= 0 for x in lines)
    with open(bucket.log_path, encoding="utf-8") as f:
        text = f.read()
    assert bucket.secret_key not in text


def pid_alive(pid):
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # a zombie is gone for our purposes
    try:
        with open("/proc/%d/stat" % pid) as f:
            return f.read().split(") ")[1][0] != "Z"
    except OSError:
        return False


def test_stop_ends_proxy_and_s3rver(tmp_path):
    b = TestBucket(workdir=str(tmp_path / "b")).start()
    pids = (b.ready["pid"], b.ready["s3rver_pid"])
    assert all(pid_alive(p) for p in pids)
    b.stop()
    wait_until(lambda: not any(pid_alive(p) for p in pids), 60,
               "proxy and s3rver to exit")


def test_bucket_dies_with_its_owner(tmp_path):
    here = os.path.dirname(os.path.abspath(__file__))
    code = ("import json, sys, time; sys.path.insert(0, %r); "
            "from bucket import TestBucket; "
            "b = TestBucket(workdir=%r).start(); "
            "print(json.dumps(b.ready), flush=True); time.sleep(600)"
            % (here, str(tmp_path / "b")))
    owner = subprocess.Popen([PYTHON, "-c", code], stdout=subprocess.PIPE,
                             start_new_session=True)
    try:
        ready = json.loads(owner.stdout.readline())
        pids = (ready["pid"], ready["s3rver_pid"])
        assert all(pid_alive(p) for p in pids)
        owner.kill()  # no atexit: the proxy must notice by itself
        owner.wait(60)
        wait_until(lambda: not any(pid_alive(p) for p in pids), 60,
                   "proxy and s3rver to exit after their owner died")
    finally:
        if owner.poll() is None:
            owner.kill()
        owner.stdout.close()


def test_serve_cli_writes_ready_file_and_stops_on_sigterm(tmp_path):
    ready = tmp_path / "ready.json"
    here = os.path.dirname(os.path.abspath(__file__))
    proc = subprocess.Popen(
        [PYTHON, os.path.join(here, "bucket.py"), "serve", "--buckets",
         "lake,other", "--access-key", "k1", "--secret-key", "s1",
         "--workdir", str(tmp_path / "w"), "--ready-file", str(ready)],
        start_new_session=True)
    try:
        wait_until(ready.exists, 60, "the ready file")
        info = json.loads(ready.read_text())
        assert set(info) >= {"endpoint", "control_endpoint", "data_dir"}
        b = TestBucket(access_key="k1", secret_key="s1")
        b.ready = {"port": int(info["endpoint"].rsplit(":", 1)[1])}
        b.boto3().put_object(Bucket="other", Key="k", Body=b"v")
        with open(os.path.join(info["data_dir"], "other",
                               "k._S3rver_object"), "rb") as f:
            assert f.read() == b"v"
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(60) == 0
        port = urllib.parse.urlsplit(info["endpoint"]).port
        with pytest.raises(ConnectionRefusedError):
            socket.create_connection(("127.0.0.1", port), timeout=5)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)


def test_concurrent_puts_fire_a_fault_exactly_count_times(bucket):
    bucket.fault("503", count=5, method="PUT")
    results = []
    lock = threading.Lock()

    def worker(w, c):
        for i in range(10):
            try:
                c.put_object(Bucket="lake", Key="c/%d-%d" % (w, i), Body=b"x")
                r = 200
            except ClientError as e:
                r = e.response["ResponseMetadata"]["HTTPStatusCode"]
            with lock:
                results.append(r)
    # boto3 builds clients unsafely across threads: build them here
    workers = [Background(worker, w, bucket.boto3()) for w in range(8)]
    for w in workers:
        w.result(120)  # a worker's exception is raised here
    assert sorted(results).count(503) == 5 and len(results) == 80
    assert len(bucket.list_keys("lake", "c/")) == 75
    assert bucket.stats()["requests"]["PUT"] == {"200": 75, "503": 5}


def raw_signed_head(bucket, method, path, body, extra):
    """Request head bytes signed over a hex payload hash (for raw sockets)."""
    host = "127.0.0.1:%d" % bucket.port
    h = {"host": host, "x-amz-content-sha256":
         hashlib.sha256(body).hexdigest()}
    h.update(extra)
    req = AWSRequest(method=method, url="http://%s%s" % (host, path),
                     headers=h, data=body)
    S3SigV4Auth(Credentials(bucket.access_key, bucket.secret_key), "s3",
                bucket.region).add_auth(req)
    lines = ["%s %s HTTP/1.1" % (method, path)]
    lines += ["%s: %s" % (k, v) for k, v in req.headers.items()]
    return ("\r\n".join(lines) + "\r\n\r\n").encode()


def test_expect_100_continue_and_chunked_bodies(bucket):
    body = b"chunked body " * 1000
    s = socket.create_connection(("127.0.0.1", bucket.port), timeout=10)
    try:
        s.sendall(raw_signed_head(bucket, "PUT", "/lake/expect", body, {
            "content-length": str(len(body)), "expect": "100-continue"}))
        assert s.recv(64).startswith(b"HTTP/1.1 100")
        s.sendall(body)
        assert s.recv(4096).startswith(b"HTTP/1.1 200")
        chunks = b"".join(b"%x\r\n%s\r\n" % (len(body[i:i + 999]),
                                             body[i:i + 999])
                          for i in range(0, len(body), 999)) + b"0\r\n\r\n"
        s.sendall(raw_signed_head(bucket, "PUT", "/lake/chunked", body, {
            "transfer-encoding": "chunked"}) + chunks)
        assert s.recv(4096).startswith(b"HTTP/1.1 200")
    finally:
        s.close()
    assert bucket.read_object("lake", "expect") == body
    assert bucket.read_object("lake", "chunked") == body
