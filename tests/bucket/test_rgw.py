"""The RGW kind of test bucket (README.md, "The RGW bucket"): a Ceph cell
of our own on loopback, RGW behind the same checking, fault-injecting
proxy, a tenant per test bucket."""
import os

import pytest
from botocore.exceptions import ClientError

import rgw
from bucket import TestBucket


def alive(pid):
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # a zombie is gone for our purposes
    try:
        with open("/proc/%d/stat" % pid, encoding="utf-8") as f:
            return f.read().split(") ", 1)[1][0] != "Z"
    except OSError:
        return False


def test_a_cell_starts_on_loopback_and_stops_every_daemon(tmp_path):
    cell = rgw.Cell(str(tmp_path / "cell")).start()
    try:
        pids = {n: p.pid for n, p in cell.procs.items()}
        assert sorted(pids) == ["mon", "osd", "rgw"]
        assert all(alive(p) for p in pids.values())
        with open(cell.conf, encoding="utf-8") as f:
            conf = f.read()
        assert "beast endpoint=127.0.0.1:%d" % cell.rgw_port in conf
        assert "v2:127.0.0.1:%d" % cell.mon_port in conf
        cell.add_user(None, "u", "cell-ak", "cell-sk")
        s3 = cell.client("cell-ak", "cell-sk")
        s3.create_bucket(Bucket="bkt")
        s3.put_object(Bucket="bkt", Key="k", Body=b"v")
        assert s3.get_object(Bucket="bkt", Key="k")["Body"].read() == b"v"
    finally:
        cell.stop()
    assert not any(alive(p) for p in pids.values()), pids


def test_rgw_buckets_are_apart_checked_and_faulted_by_the_proxy():
    a = TestBucket(buckets=["lake"], kind="rgw").start()
    b = TestBucket(buckets=["lake"], kind="rgw").start()
    try:
        a.boto3().put_object(Bucket="lake", Key="only/in/a", Body=b"A")
        assert a.read_object("lake", "only/in/a") == b"A"
        assert b.read_object("lake", "only/in/a") is None
        assert b.list_keys("lake") == []
        # the proxy checks the client's signature (suite keys, not RGW's)
        with pytest.raises(ClientError) as e:
            a.boto3(secret_key="wrong").put_object(Bucket="lake", Key="x",
                                                   Body=b"x")
        assert e.value.response["Error"]["Code"] == "SignatureDoesNotMatch"
        a.fault("503", count=1, method="PUT", retry_after=1)
        with pytest.raises(ClientError) as e:
            a.boto3().put_object(Bucket="lake", Key="y", Body=b"y")
        assert e.value.response["Error"]["Code"] == "SlowDown"
        assert a.read_object("lake", "y") is None
        c = a.boto3()
        up = c.create_multipart_upload(Bucket="lake", Key="m")
        c.upload_part(Bucket="lake", Key="m", UploadId=up["UploadId"],
                      PartNumber=1, Body=b"p" * 100)
        ups = a.uploads("lake")
        assert [(u["key"], [p["size"] for p in u["parts"]]) for u in ups] \
            == [("m", [100])]
        assert b.uploads("lake") == []
        assert a.stats()["requests"]["PUT"] == {"200": 2, "403": 1,
                                                "503": 1}
    finally:
        a.stop()
        b.stop()
