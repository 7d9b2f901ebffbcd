"""`make demo` (issue 5 item 10): scripts/demo.sh runs the product page's
"Try it" against the test bucket and prints what the page shows; its output
is checked here line by line."""
import json
import os
import re
import subprocess

from sinkenv import it

PAGE_LINES = [
    ("cust-1", 0, b'{"order":1,"status":"new","total":42.00}'),
    ("cust-1", 1, b'{"order":1,"status":"paid","total":42.00}'),
    ("cust-2", 0, b'{"order":2,"status":"new","total":17.50}'),
]
TENANT = "00000000-0000-0000-0000-000000000001"


def test_demo_prints_what_the_page_shows():
    root = it.queen_root()
    env = dict(os.environ, QUEEN_BIN=it.queen_bin())
    p = subprocess.run(["bash", os.path.join(root, "scripts", "demo.sh")],
                       env=env, stdout=subprocess.PIPE,
                       stderr=subprocess.STDOUT, timeout=240)
    out = p.stdout.decode("utf-8", "replace")
    assert p.returncode == 0, out
    lines = out.splitlines()

    status = json.loads(lines[lines.index("demo: status") + 1])
    assert list(status) == ["state", "k", "windowsCommitted", "records",
                            "lagSeconds"]
    assert status["k"] == 1 and status["windowsCommitted"] == 1
    assert status["records"] == 3
    # a float as on the page (6.366447), also when the lag is a whole
    # number of seconds (an idle queue's is the 5 s guard exactly)
    assert isinstance(status["lagSeconds"], float), status
    assert status["state"] in ("filling", "intent", "upload", "commit")

    at = lines.index("demo: the keys in the bucket") + 1
    keys = lines[at:at + 2]
    assert re.fullmatch(
        r"queen/_queen/tenant=%s/queue=orders/windows/0000000001\.json"
        % TENANT, keys[0]), keys
    assert re.fullmatch(
        r"queen/tenant=%s/queue=orders/dt=\d{4}-\d\d-\d\d/hour=\d\d/"
        r"w-0000000001-\d{16}-\d{16}\.jsonl\.zst" % TENANT, keys[1]), keys

    at = lines.index("demo: the data object, decompressed") + 1
    data = p.stdout.splitlines()[at:at + 3]
    for raw, (part, off, payload) in zip(data, PAGE_LINES):
        head = b'{"partition":"%s","offset":%d,"transactionId":"' % (
            part.encode(), off)
        assert raw.startswith(head), raw
        assert raw.endswith(b',"payload":' + payload + b"}"), raw

    at = lines.index("demo: DuckDB over the lake's files") + 1
    assert "read_json(" in lines[at] and "hive_partitioning = true" in lines[at]
    rows = [json.loads(x) for x in lines[at + 1:at + 4]]
    assert [(r["partition"], str(r["offset"])) for r in rows] == [
        ("cust-1", "0"), ("cust-1", "1"), ("cust-2", "0")]
    assert rows[0]["payload"]["total"] == 42
    assert lines[-1] == "demo: broker stopped cleanly (exit 0)"
