"""Acceptance of the S3 client (issue 4, part 1) against the test bucket: a
real s3rver behind the SigV4-verifying, fault-injecting proxy. The client is
driven through build/tools/s3tool, which prints one JSON line per command;
bytes are checked on s3rver's disk and with boto3, never with our client."""

import hashlib
import json
import os
import subprocess
import time

import pytest

ROOT = os.environ.get("QUEEN_ROOT") or os.path.dirname(
    os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
TOOLS = os.environ.get("QUEEN_TOOLS") or os.path.join(ROOT, "build", "tools")
S3TOOL = os.path.join(TOOLS, "s3tool")
MIB = 1 << 20

SPECIAL_KEYS = [
    "plain.txt",
    "a=b.txt",
    "100%.txt",
    "a+b.txt",
    "a b.txt",
    "caf\u00e9.txt",
    "\u65e5\u672c/\u30c7\u30fc\u30bf.txt",
    "tenant=x/queue=q y/mix =%+ \u00e9 \u65e5\u672c.jsonl",
]


def s3tool(bucket, *args, timeout=120, **env_extra):
    env = dict(os.environ,
               QUEEN_S3_ENDPOINT=bucket.endpoint,
               QUEEN_S3_BUCKET="lake",
               QUEEN_S3_REGION="us-east-1",
               QUEEN_S3_ACCESS_KEY="queen",
               QUEEN_S3_SECRET_KEY="queen-secret-key",
               QUEEN_S3_PATH_STYLE="true")
    env.update({k: str(v) for k, v in env_extra.items()})
    p = subprocess.run([S3TOOL, *args], env=env, capture_output=True,
                       text=True, timeout=timeout)
    assert p.returncode in (0, 1), p.stderr
    lines = p.stdout.strip().splitlines()
    assert len(lines) == 1, (p.stdout, p.stderr)
    out = json.loads(lines[0])
    out["stderr"] = p.stderr
    assert out["ok"] == (p.returncode == 0)
    return out


def counters(out):
    return {(r["op"], r["code"]): r["count"] for r in out["requests"]}


def write(tmp_path, name, data):
    path = tmp_path / name
    path.write_bytes(data)
    return str(path)


@pytest.fixture(autouse=True)
def _need_tool():
    if not os.path.exists(S3TOOL):
        pytest.fail("build/tools/s3tool is missing: run make tools")


def test_every_operation_round_trips_keys_with_special_characters(
        bucket, tmp_path):
    s3 = bucket.boto3()
    for i, key in enumerate(SPECIAL_KEYS):
        data = ("object %d for %s\n" % (i, key)).encode() * (i + 1)
        src = write(tmp_path, "src%d" % i, data)
        put = s3tool(bucket, "put", key, src, "text/plain")
        assert put["ok"], put
        assert put["etag"] == hashlib.md5(data).hexdigest()
        assert counters(put) == {("put", 200): 1}
        assert bucket.read_object("lake", key) == data
        assert s3.get_object(Bucket="lake", Key=key)["Body"].read() == data

        head = s3tool(bucket, "head", key)
        assert head["found"] and head["size"] == len(data)
        assert head["etag"] == put["etag"]

        dst = str(tmp_path / ("dst%d" % i))
        get = s3tool(bucket, "get", key, dst)
        assert get["found"] and get["size"] == len(data)
        with open(dst, "rb") as f:
            assert f.read() == data

    listed = s3tool(bucket, "list-all", "")
    assert listed["ok"]
    assert sorted(listed["keys"]) == sorted(SPECIAL_KEYS)
    assert listed["keys"] == bucket.list_keys("lake")

    for key in SPECIAL_KEYS:
        s3.delete_object(Bucket="lake", Key=key)  # the sink never deletes
        head = s3tool(bucket, "head", key)
        assert head["ok"] and not head["found"] and head["status"] == 404
        assert counters(head) == {("head", 404): 1}
        assert bucket.read_object("lake", key) is None


def test_head_and_get_of_a_missing_key_are_absent_not_errors(bucket,
                                                            tmp_path):
    get = s3tool(bucket, "get", "nope/x", str(tmp_path / "out"))
    assert get["ok"] and not get["found"]
    assert counters(get) == {("get", 404): 1}
    assert not (tmp_path / "out").exists()


def test_list_pages_with_start_after_through_special_prefixes(bucket,
                                                             tmp_path):
    prefix = "p=1 %+\u00e9/"
    keys = sorted(prefix + "k%d \u65e5\u672c" % i for i in range(5))
    src = write(tmp_path, "small", b"x")
    for key in keys:
        assert s3tool(bucket, "put", key, src)["ok"]
    assert s3tool(bucket, "put", "other/k", src)["ok"]
    seen, after = [], ""
    for _ in range(10):
        page = s3tool(bucket, "list", prefix, after, "2")
        assert page["ok"], page
        assert len(page["keys"]) <= 2
        seen += page["keys"]
        if not page["truncated"]:
            break
        after = page["keys"][-1]
    assert seen == keys
    everything = s3tool(bucket, "list-all", prefix)
    assert everything["keys"] == keys


def test_multipart_of_three_16_mib_parts_and_a_tail(bucket, tmp_path):
    data = os.urandom(3 * 16 * MIB + 12345)
    src = write(tmp_path, "big", data)
    out = s3tool(bucket, "multipart-put", "lake/big \u00e9=1.bin", src)
    assert out["ok"], out
    assert out["multipart"] and out["parts"] == 4
    head = bucket.boto3().head_object(Bucket="lake", Key="lake/big \u00e9=1.bin")
    assert head["ETag"].strip('"').endswith("-4")
    # RGW 16.2 answers CompleteMultipartUpload with an empty <ETag>, so the
    # client HEADs the object and takes its "-4" ETag from there; s3rver
    # behind the proxy answers the multipart ETag itself
    assert out["etag"] == head["ETag"].strip('"')
    want = {("multipart_create", 200): 1, ("multipart_part", 200): 4,
            ("multipart_complete", 200): 1}
    if bucket.kind == "rgw":
        want[("head", 200)] = 1
    assert counters(out) == want
    on_disk = bucket.read_object("lake", "lake/big \u00e9=1.bin")
    assert on_disk is not None and len(on_disk) == len(data)
    assert hashlib.sha256(on_disk).digest() == hashlib.sha256(data).digest()
    assert bucket.uploads("lake") == []


def test_a_body_over_the_threshold_goes_multipart_by_itself(bucket,
                                                           tmp_path):
    data = os.urandom(17 * MIB)
    src = write(tmp_path, "mid", data)
    out = s3tool(bucket, "put", "mid.bin", src,
                 QUEEN_S3_MULTIPART_THRESHOLD_MB=16)
    assert out["ok"] and out["multipart"] and out["parts"] == 2
    assert bucket.read_object("lake", "mid.bin") == data


def test_a_failing_multipart_upload_is_aborted(bucket, tmp_path):
    src = write(tmp_path, "big", os.urandom(17 * MIB))
    bucket.fault("500", count=-1, method="PUT", prefix="doomed")
    out = s3tool(bucket, "multipart-put", "doomed.bin", src,
                 S3TOOL_MAX_ATTEMPTS=2, S3TOOL_RANDOM=0,
                 S3TOOL_PART_CONCURRENCY=1)
    assert not out["ok"]
    assert out["status"] == 500 and out["s3_code"] == "InternalError"
    c = counters(out)
    assert c[("multipart_create", 200)] == 1
    assert c[("multipart_part", 500)] == 2
    assert c[("multipart_abort", 204)] == 1
    assert bucket.uploads("lake") == []
    assert bucket.read_object("lake", "doomed.bin") is None


def test_a_wrong_secret_is_answered_403_and_not_retried(bucket, tmp_path):
    src = write(tmp_path, "f", b"secret stuff")
    out = s3tool(bucket, "put", "k.txt", src,
                 QUEEN_S3_SECRET_KEY="not-the-secret")
    assert not out["ok"]
    assert out["status"] == 403 and not out["retriable"]
    assert out["s3_code"] == "SignatureDoesNotMatch"
    assert out["attempts"] == 1
    assert counters(out) == {("put", 403): 1}
    assert "not-the-secret" not in out["stderr"] + json.dumps(out)
    assert bucket.stats()["requests"]["PUT"] == {"403": 1}
    assert bucket.read_object("lake", "k.txt") is None


def test_slowdown_and_500_are_retried_honouring_retry_after(bucket,
                                                           tmp_path):
    data = b"retry me\n" * 100
    src = write(tmp_path, "f", data)
    bucket.fault("503", count=1, method="PUT", retry_after=1)
    bucket.fault("500", count=1, method="PUT")
    t0 = time.monotonic()
    out = s3tool(bucket, "put", "retried.txt", src, S3TOOL_RANDOM=0)
    elapsed = time.monotonic() - t0
    assert out["ok"], out
    assert out["attempts"] == 3
    assert out["waits_ms"][0] >= 1000   # Retry-After: 1 beats the 100 ms step
    assert out["waits_ms"][1] == 200    # attempt 2, no Retry-After, u = 0
    assert elapsed >= 1.2
    assert counters(out) == {("put", 503): 1, ("put", 500): 1,
                             ("put", 200): 1}
    st = bucket.stats()
    assert st["faults"]["503"] == 1 and st["faults"]["500"] == 1
    assert st["requests"]["PUT"] == {"503": 1, "500": 1, "200": 1}
    assert bucket.read_object("lake", "retried.txt") == data


def test_a_held_put_completes_late(bucket, tmp_path):
    data = b"late\n"
    src = write(tmp_path, "f", data)
    bucket.fault("hold", count=1, method="PUT", ms=2500)
    out = s3tool(bucket, "put", "held.txt", src)
    assert out["ok"] and out["attempts"] == 1
    assert out["elapsed_ms"] >= 2500
    assert bucket.read_object("lake", "held.txt") == data


def test_a_down_bucket_is_a_transport_error_with_code_0(bucket, tmp_path):
    src = write(tmp_path, "f", b"nobody home")
    bucket.fault("down")
    out = s3tool(bucket, "put", "down.txt", src, S3TOOL_RANDOM=0)
    assert not out["ok"]
    assert out["kind"] == "transport" and out["status"] == 0
    assert out["retriable"] and out["attempts"] == 6
    assert out["error"].startswith("transport: ")
    assert counters(out) == {("put", 0): 6}
    assert out["waits_ms"] == [100, 200, 400, 800, 1600]
    bucket.clear_faults()
    assert s3tool(bucket, "put", "down.txt", src)["ok"]


def test_sse_headers_are_signed_and_accepted(bucket, tmp_path):
    data = b"encrypted at rest\n"
    src = write(tmp_path, "f", data)
    out = s3tool(bucket, "put", "sse.txt", src, QUEEN_S3_SSE="AES256")
    assert out["ok"], out
    assert bucket.read_object("lake", "sse.txt") == data
    # the header reached the wire, signed (the proxy verified the
    # signature over it), as the proxy's log of what it received shows
    puts = [ln for ln in bucket.log_lines()
            if ln["method"] == "PUT" and ln["key"] == "sse.txt"]
    assert len(puts) == 1 and puts[0]["status"] == 200, puts
    assert puts[0]["sse"] == "AES256", puts
    assert puts[0]["sse_kms_key_id"] is None, puts


def test_an_opaque_hex_etag_under_sse_kms_is_a_success(bucket, tmp_path):
    """AWS answers SSE-KMS PUTs with a 32-hex ETag that is no MD5 of the
    body; the service checked the Content-MD5, so the PUT succeeded."""
    data = b"kms encrypted\n" * 100
    src = write(tmp_path, "f", data)
    bucket.fault("opaque_etag", count=1, method="PUT", prefix="kms")
    out = s3tool(bucket, "put", "kms.txt", src, QUEEN_S3_SSE="aws:kms",
                 QUEEN_S3_SSE_KMS_KEY_ID="key-1")
    assert out["ok"], out
    assert counters(out) == {("put", 200): 1}
    assert len(out["etag"]) == 32
    assert out["etag"] != hashlib.md5(data).hexdigest()
    assert bucket.stats()["faults"]["opaque_etag"] == 1
    assert bucket.read_object("lake", "kms.txt") == data


def test_a_completion_whose_answer_was_lost_is_found_by_head(bucket,
                                                             tmp_path):
    """The first CompleteMultipartUpload is carried out and its answer
    dropped; the retry answers 404 NoSuchUpload, and the client finds the
    object complete (our size and multipart ETag) instead of failing."""
    data = os.urandom(2 * 16 * MIB + 777)
    src = write(tmp_path, "big", data)
    bucket.fault("drop", count=1, method="POST", prefix="lost",
                 query="uploadId")
    out = s3tool(bucket, "multipart-put", "lost/complete.bin", src)
    assert out["ok"], out
    assert out["parts"] == 3 and out["etag"].endswith("-3")
    c = counters(out)
    assert c[("multipart_complete", 0)] == 1
    if bucket.kind == "rgw":
        # RGW 16.2 completes an upload it already completed once more (200
        # with the object's ETag), where AWS and s3rver answer 404
        # NoSuchUpload: the client's HEAD fallback is not needed there
        assert c[("multipart_complete", 200)] == 1
        assert ("head", 200) not in c
    else:
        assert c[("multipart_complete", 404)] == 1
        assert c[("head", 200)] == 1
    assert ("multipart_abort", 204) not in c
    assert bucket.stats()["faults"]["drop"] == 1
    head = bucket.boto3().head_object(Bucket="lake", Key="lost/complete.bin")
    assert head["ETag"].strip('"') == out["etag"]
    assert bucket.read_object("lake", "lost/complete.bin") == data
    assert bucket.uploads("lake") == []


def test_a_complete_answered_200_with_an_error_document_is_retried(
        bucket, tmp_path):
    """AWS may answer CompleteMultipartUpload 200 with an <Error> document
    (InternalError): not a success, and tried again like a 5xx, not handed
    to the sink as a final failure."""
    data = os.urandom(16 * MIB + 999)
    src = write(tmp_path, "big", data)
    bucket.fault("error200", count=2, method="POST", prefix="e200",
                 query="uploadId")
    out = s3tool(bucket, "multipart-put", "e200/retried.bin", src)
    assert out["ok"], out
    assert out["parts"] == 2 and out["etag"].endswith("-2")
    c = counters(out)
    assert c[("multipart_complete", 200)] == 3
    assert ("multipart_abort", 204) not in c
    assert "attempt 1 of 6: status 200: InternalError" in out["stderr"]
    assert bucket.stats()["faults"]["error200"] == 2
    assert bucket.read_object("lake", "e200/retried.bin") == data
    assert bucket.uploads("lake") == []


def test_a_complete_carried_out_behind_a_200_error_is_found(bucket,
                                                            tmp_path):
    """The Complete was carried out, and its answer is a 200 <Error> all
    the same: the retry finds the upload gone and the object ours."""
    data = os.urandom(16 * MIB + 999)
    src = write(tmp_path, "big", data)
    bucket.fault("error200_done", count=1, method="POST", prefix="e200d",
                 query="uploadId")
    out = s3tool(bucket, "multipart-put", "e200d/done.bin", src)
    assert out["ok"], out
    c = counters(out)
    if bucket.kind == "rgw":  # completes it once more (see above)
        assert c[("multipart_complete", 200)] == 2
    else:
        assert c[("multipart_complete", 200)] == 1
        assert c[("multipart_complete", 404)] == 1
        assert c[("head", 200)] == 1
    assert bucket.stats()["faults"]["error200_done"] == 1
    assert bucket.read_object("lake", "e200d/done.bin") == data
    assert bucket.uploads("lake") == []


def test_a_create_whose_answer_was_lost_leaves_no_upload_behind(bucket,
                                                                tmp_path):
    """The first CreateMultipartUpload is carried out and its answer lost:
    the retry is an attempt the client counts (never a silent resend by the
    transport), and once the object is complete the upload the lost answer
    named is aborted, so no parts stay billed."""
    data = os.urandom(16 * MIB + 999)
    src = write(tmp_path, "big", data)
    bucket.fault("drop", count=1, method="POST", prefix="lostc",
                 query="uploads")
    out = s3tool(bucket, "multipart-put", "lostc/create.bin", src)
    assert out["ok"], out
    c = counters(out)
    assert c[("multipart_create", 0)] == 1
    assert c[("multipart_create", 200)] == 1
    assert c[("multipart_abort", 204)] == 1
    assert bucket.stats()["faults"]["drop"] == 1
    assert bucket.read_object("lake", "lostc/create.bin") == data
    assert bucket.uploads("lake") == []


def test_a_lost_create_never_retried_is_cleaned_by_the_next_put(bucket,
                                                                 tmp_path):
    """A CreateMultipartUpload carried out whose only attempt lost its
    answer (no retry was left): the put fails, and the upload the bucket
    made is still there. The client's next put of that key lands and then
    lists the key's uploads and aborts what is left, so no parts stay
    billed."""
    data = os.urandom(16 * MIB + 999)
    src = write(tmp_path, "big", data)
    bucket.fault("drop", count=1, method="POST", prefix="lost1",
                 query="uploads")
    out = s3tool(bucket, "multipart-put", "lost1/create.bin", src,
                 S3TOOL_MAX_ATTEMPTS=1, S3TOOL_PUT_TRIES=2)
    assert out["ok"], out
    c = counters(out)
    assert c[("multipart_create", 0)] == 1
    assert c[("multipart_create", 200)] == 1
    assert c[("multipart_abort", 204)] == 1
    assert bucket.stats()["faults"]["drop"] == 1
    assert bucket.read_object("lake", "lost1/create.bin") == data
    assert bucket.uploads("lake") == []
