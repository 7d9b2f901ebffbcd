"""A small JSON reader that keeps every value's exact bytes.

Python's json module normalises numbers and strings, so it cannot tell
whether the broker emitted a payload byte for byte. `parse(b)` returns a tree
of Node objects: each has .raw (the value's bytes in the answer), and .value
(a dict of key -> Node, a list of Node, or the decoded scalar). The input is
assumed valid JSON (json.loads is run over it first).
"""
import json

WS = b" \t\r\n"


class Node:
    def __init__(self, raw, value):
        self.raw = raw
        self.value = value

    def __getitem__(self, k):
        return self.value[k]

    def plain(self):
        return json.loads(self.raw)


def _ws(b, i):
    while i < len(b) and b[i] in WS:
        i += 1
    return i


def _string_end(b, i):
    i += 1
    while b[i] != 0x22:
        i += 2 if b[i] == 0x5C else 1
    return i + 1


def _value(b, i):
    i = _ws(b, i)
    c = b[i]
    if c == 0x7B:  # {
        return _container(b, i, 0x7D, True)
    if c == 0x5B:  # [
        return _container(b, i, 0x5D, False)
    if c == 0x22:
        j = _string_end(b, i)
    else:
        j = i
        while j < len(b) and b[j] not in b",]} \t\r\n":
            j += 1
    return Node(b[i:j], json.loads(b[i:j])), j


def _container(b, start, close, is_obj):
    i = _ws(b, start + 1)
    out = {} if is_obj else []
    if b[i] == close:
        return Node(b[start:i + 1], out), i + 1
    while True:
        if is_obj:
            i = _ws(b, i)
            j = _string_end(b, i)
            key = json.loads(b[i:j])
            i = _ws(b, j) + 1  # ':'
            node, i = _value(b, i)
            out.setdefault(key, node)
        else:
            node, i = _value(b, i)
            out.append(node)
        i = _ws(b, i)
        if b[i] == close:
            return Node(b[start:i + 1], out), i + 1
        i += 1  # ','


def parse(b):
    json.loads(b)
    node, i = _value(b, 0)
    assert _ws(b, i) == len(b), "trailing bytes"
    return node


def fetch_payloads(body, entry=0):
    """The raw payload bytes of each record of one fetch answer entry."""
    root = parse(body)
    return [r["payload"].raw for r in root["entries"][entry]["records"].value]
