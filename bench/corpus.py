#!/usr/bin/python3
"""bench/corpus: the payloads every benchmark can run on, generated
deterministically (no downloads), record i of a corpus always the same
bytes, so a bench can make any slice of it on its own:

  events     nested e-commerce / clickstream JSON of 300-800 bytes: the
             same keys in every record, enums, ids from bounded pools,
             decimals, ISO stamps moving forward, arrays of line items;
             about 6:1 under `zstd -3`.
  telemetry  small IoT readings of 60-150 bytes; about 10:1.
  entropy    ~500 bytes of JSON around hex of a hash chain (the worst case,
             what bench/sink ran on before; about 2:1).

    payload(corpus, i) -> bytes          (one JSON text, no newline)
    bench/corpus.py CORPUS N [--out F]   writes N payloads, one per line,
                                         and prints their zstd -3 ratio
    bench/corpus.py --ratios [N]         the ratio of each corpus (N=20000)
    bench/corpus.py --parquet-in CORPUS N PARTITIONS OUT
                                         N records as parquet_tool's input

Never a test: the benches only print."""
import hashlib
import json
import os
import random
import subprocess
import sys
import tempfile

CORPORA = ("events", "telemetry", "entropy")
EPOCH_S = 1793520000  # 2026-10-31T08:00:00Z: stamps move forward from here

_EVENT_TYPES = ["page_view", "page_view", "page_view", "product_view",
                "add_to_cart", "search", "checkout_started", "purchase",
                "remove_from_cart", "login"]
_PAGES = ["/", "/search", "/cart", "/checkout", "/account", "/deals",
          "/c/shoes", "/c/outdoor", "/c/kitchen", "/c/electronics",
          "/c/toys", "/c/books"]
_REFERRERS = ["https://www.google.com/", "https://www.bing.com/",
              "https://t.co/", "https://news.ycombinator.com/", "direct",
              "email:newsletter", "https://www.facebook.com/"]
_DEVICES = ["desktop", "mobile", "mobile", "tablet"]
_OS = ["iOS 18.1", "Android 15", "Windows 11", "macOS 15.1", "Linux"]
_BROWSERS = ["Safari 18", "Chrome 131", "Firefox 133", "Edge 131"]
_COUNTRIES = [("DE", "Berlin", "EUR"), ("FR", "Paris", "EUR"),
              ("US", "Austin", "USD"), ("US", "Seattle", "USD"),
              ("GB", "Leeds", "GBP"), ("NL", "Utrecht", "EUR"),
              ("IT", "Milano", "EUR"), ("ES", "Valencia", "EUR")]
_CATEGORIES = ["shoes", "outdoor", "kitchen", "electronics", "toys", "books"]
_CAMPAIGNS = [None, None, "bf-2026", "winter-sale", "retarget-7d"]
_PAYMENT = ["card", "card", "paypal", "klarna", "apple_pay"]
_SENSORS = ["temp", "humidity", "pressure", "co2", "vibration"]
_SITES = ["plant-a", "plant-b", "warehouse-3", "office-hq"]
_STATUS = ["ok", "ok", "ok", "ok", "degraded", "fault"]


def _iso(sec, us):
    import time as _t
    return _t.strftime("%Y-%m-%dT%H:%M:%S", _t.gmtime(sec)) + \
        ".%03dZ" % (us // 1000)


def _dump(obj):
    return json.dumps(obj, separators=(",", ":")).encode()


def _event(i):
    r = random.Random(i * 2654435761 + 17)
    t = EPOCH_S + i // 40
    kind = r.choice(_EVENT_TYPES)
    country, city, cur = r.choice(_COUNTRIES)
    user = r.randrange(250000)
    ev = {
        "event_id": "evt_%012d" % (i * 7919 % 10 ** 12),
        "request_id": "%016x" % r.getrandbits(64),
        "type": kind,
        "ts": _iso(t, r.randrange(1000000)),
        "user": {"id": "u_%06d" % user, "anon": user % 11 == 0,
                 "segment": r.choice(["new", "returning", "vip"])},
        "session": {"id": "s_%08x" % (user * 31 + i // 500),
                    "page": r.choice(_PAGES),
                    "referrer": r.choice(_REFERRERS)},
        "device": {"type": r.choice(_DEVICES), "os": r.choice(_OS),
                   "browser": r.choice(_BROWSERS),
                   "ip": "%d.%d.%d.%d" % (r.choice([81, 93, 172, 203]),
                                          r.randrange(256), r.randrange(256),
                                          r.randrange(1, 255)),
                   },
        "geo": {"country": country, "city": city,
                "lat": round(r.uniform(35, 60), 4),
                "lon": round(r.uniform(-10, 20), 4)},
    }
    if kind in ("product_view", "add_to_cart", "remove_from_cart",
                "checkout_started", "purchase"):
        items = []
        for _ in range(r.choice([1, 1, 2, 3])):
            sku = r.randrange(5000)
            items.append({"sku": "SKU-%05d" % sku,
                          "category": _CATEGORIES[sku % len(_CATEGORIES)],
                          "qty": r.choice([1, 1, 1, 2, 3]),
                          "price": "%d.%02d" % (5 + sku % 195,
                                                (sku * 37) % 100)})
        ev["cart"] = {"currency": cur, "items": items}
        if kind == "purchase":
            total = sum(int(float(x["price"]) * 100) * x["qty"]
                        for x in items)
            ev["order"] = {"id": "ord_%09d" % i, "payment": r.choice(_PAYMENT),
                           "total": "%d.%02d" % divmod(total, 100),
                           "shipping": r.choice(["standard", "express"])}
    elif kind == "search":
        ev["search"] = {"query": r.choice(["running shoes", "tent",
                                           "espresso machine", "usb-c cable",
                                           "lego", "novel"]),
                        "results": r.randrange(400)}
    if kind in ("page_view", "search"):
        ev["perf"] = {"ttfb_ms": r.randrange(20, 900),
                      "dom_ms": r.randrange(100, 4000)}
    camp = r.choice(_CAMPAIGNS)
    ev["marketing"] = {"campaign": camp, "utm_source": None if camp is None
                       else r.choice(["google", "meta", "email"])}
    return _dump(ev)


def _telemetry(i):
    r = random.Random(i * 40503 + 5)
    dev = r.randrange(400)
    sensor = _SENSORS[dev % len(_SENSORS)]
    rec = {"dev": "d-%04d" % dev, "site": _SITES[dev % len(_SITES)],
           "s": sensor, "t": EPOCH_S + i // 100,
           "v": round(20 + (dev % 17) + r.random() * 2, 2),
           "st": r.choice(_STATUS)}
    if rec["st"] != "ok":
        rec["alarm"] = {"code": "E%03d" % (dev % 40), "fw": "4.2.%d" % (dev % 9)}
    return _dump(rec)


def _entropy(i):
    """~500 bytes of JSON whose note is hex of a hash chain (what the sink
    bench ran on before: it compresses like text, not like a run of one
    letter, but far less than events do)."""
    head = b'{"order":%d,"status":"paid","total":42.00,"note":"' % i
    note = b""
    h = b"%d" % i
    while len(note) < 500 - len(head) - 2:
        h = hashlib.sha256(h).digest()
        note += h.hex().encode()
    return head + note[:500 - len(head) - 2] + b'"}'


def payload(corpus, i):
    if corpus == "events":
        return _event(i)
    if corpus == "telemetry":
        return _telemetry(i)
    if corpus == "entropy":
        return _entropy(i)
    raise ValueError("no corpus %r (one of %s)" % (corpus, ", ".join(CORPORA)))


def zstd3_ratio(path):
    """Uncompressed / `zstd -3` bytes of the file at path."""
    out = subprocess.run(["zstd", "-3", "-q", "-c", path],
                         check=True, stdout=subprocess.PIPE).stdout
    return os.path.getsize(path) / max(1, len(out))


def write(corpus, n, path):
    with open(path, "wb") as f:
        for i in range(n):
            f.write(payload(corpus, i) + b"\n")
    return os.path.getsize(path)


def parquet_input(corpus, n, parts, path):
    """N records of the corpus as tests/tools/parquet_tool's input (its
    header says the format): record j in partition cust-<j % parts> at
    offset j // parts, ts growing with j (8 records per 250 us stamp),
    sorted by (partition, offset) as a window is. Returns the bytes of
    payload written."""
    import struct
    total = 0
    with open(path, "wb") as f:
        for p in range(parts):
            name = b"cust-%06d" % p
            for j in range(p, n, parts):
                ts = 1791007200000000 + (j // 8) * 250
                txn = b"%016x-%08d" % (ts, j)
                pl = payload(corpus, j)
                total += len(pl)
                f.write(struct.pack("<I", len(name)) + name +
                        struct.pack("<q", j // parts) +
                        struct.pack("<I", len(txn)) + txn +
                        struct.pack("<q", ts) +
                        struct.pack("<I", len(pl)) + pl)
    return total


def main(argv):
    if argv and argv[0] == "--parquet-in":
        corpus_name, n, parts, out = argv[1], int(argv[2]), int(argv[3]), \
            argv[4]
        parquet_input(corpus_name, n, parts, out)
        return 0
    if argv and argv[0] == "--ratios":
        n = int(argv[1]) if len(argv) > 1 else 20000
        with tempfile.TemporaryDirectory() as d:
            for c in CORPORA:
                p = os.path.join(d, c)
                size = write(c, n, p)
                print("corpus %-9s records %d  mean %.0f B  zstd -3 %.2f:1"
                      % (c, n, size / n - 1, zstd3_ratio(p)))
        return 0
    if len(argv) < 2:
        print(__doc__, file=sys.stderr)
        return 2
    corpus, n = argv[0], int(argv[1])
    out = argv[3] if len(argv) > 3 and argv[2] == "--out" else None
    with tempfile.TemporaryDirectory() as d:
        path = out or os.path.join(d, "corpus")
        size = write(corpus, n, path)
        print("corpus %s records %d bytes %d zstd -3 %.2f:1"
              % (corpus, n, size, zstd3_ratio(path)))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
