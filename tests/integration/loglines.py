"""Strict readers of the broker's log lines (src/base/log.h): text, the
default (`<ts> <LEVEL> <area>: <msg> k=v ...`), logfmt
(QUEEN_LOG_FORMAT=logfmt) and JSON (QUEEN_LOG_FORMAT=json). Each returns
one dict per line whose first keys are ts, level, area, msg; a line that is
not valid in its format raises ValueError naming it, so a test that reads
the log through these also checks every line of it. parse() and records()
tell the format of each line by its start unless told."""
import json
import re

HEAD = ["ts", "level", "area", "msg"]
LEVELS = ("error", "warn", "info", "debug")
TS = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{6}Z$")
KEY = re.compile(r"[A-Za-z0-9_.\-]+")
ESCAPES = {'"': '"', "\\": "\\", "n": "\n", "r": "\r", "t": "\t"}


def _quoted(line, i):
    """The string that starts after the quote at line[i]: (text, next i)."""
    out = []
    i += 1
    while True:
        if i >= len(line):
            raise ValueError("unterminated quote")
        c = line[i]
        if c == '"':
            return "".join(out), i + 1
        if c == "\\":
            e = line[i + 1:i + 2]
            if e in ESCAPES:
                out.append(ESCAPES[e])
                i += 2
            elif e == "u" and re.match(r"[0-9a-f]{4}", line[i + 2:i + 6]):
                out.append(chr(int(line[i + 2:i + 6], 16)))
                i += 6
            else:
                raise ValueError("bad escape \\%s" % e)
            continue
        if ord(c) < 0x20 or c == "\x7f":
            raise ValueError("raw control byte in a quoted value")
        out.append(c)
        i += 1


def parse_logfmt(line):
    """One logfmt line: key=value pairs split by one space; a value is bare
    (no space, '"', '=', '\\' or control byte, not empty) or quoted."""
    fields = {}
    order = []
    i = 0
    while i < len(line):
        m = KEY.match(line, i)
        if not m or line[m.end():m.end() + 1] != "=":
            raise ValueError("no key= at %d: %r" % (i, line))
        key = m.group(0)
        i = m.end() + 1
        if line[i:i + 1] == '"':
            value, i = _quoted(line, i)
        else:
            j = i
            while j < len(line) and line[j] != " ":
                c = line[j]
                if c in '"=\\' or ord(c) < 0x20 or c == "\x7f":
                    raise ValueError("bare value holds %r: %r" % (c, line))
                j += 1
            if j == i:
                raise ValueError("empty bare value for %s: %r" % (key, line))
            value, i = line[i:j], j
        if key in fields:
            raise ValueError("key %s twice: %r" % (key, line))
        fields[key] = value
        order.append(key)
        if i < len(line):
            if line[i] != " ":
                raise ValueError("no space after %s: %r" % (key, line))
            i += 1
            if i == len(line):
                raise ValueError("trailing space: %r" % line)
    _check_head(order, fields, line)
    return fields


TEXT_HEAD = re.compile(r"^(\S+) (ERROR| WARN| INFO|DEBUG) ([^ :]+): ")
# one field at the end of a text line: " key=value", the value bare or quoted
TEXT_FIELD = re.compile(r' ([a-z_][a-z0-9_.\-]*)=("(?:[^"\\]|\\.)*"'
                        r'|[^ "=\\\x00-\x1f\x7f]+)$')


def parse_text(line):
    """One text line: ts, the level right-aligned in five columns, the area
    and ": ", then the message and its fields, read from the end: each
    " key=value" (a lower-case key; the value bare or quoted as in logfmt)
    that ends the line is a field, and what is left is the message (a
    message never ends in such a pair when a field follows it)."""
    m = TEXT_HEAD.match(line)
    if not m:
        raise ValueError("not <ts> <LEVEL> <area>: : %r" % line)
    rest = line[m.end():]
    pairs = []
    while True:
        f = TEXT_FIELD.search(rest)
        if not f:
            break
        v = f.group(2)
        if v.startswith('"'):
            v, end = _quoted(v, 0)
            if end != len(f.group(2)):
                break
        pairs.append((f.group(1), v))
        rest = rest[:f.start()]
    for c in rest:
        if ord(c) < 0x20 or c == "\x7f":
            raise ValueError("raw control byte in the message: %r" % line)
    fields = {"ts": m.group(1), "level": m.group(2).strip().lower(),
              "area": m.group(3), "msg": rest}
    order = list(HEAD)
    for k, v in reversed(pairs):
        if k in fields:
            raise ValueError("key %s twice: %r" % (k, line))
        fields[k] = v
        order.append(k)
    _check_head(order, fields, line)
    return fields


def parse_json(line):
    """One JSON line: an object of strings (and truncated: true)."""
    obj = json.loads(line, object_pairs_hook=_no_dup)
    if not isinstance(obj, dict):
        raise ValueError("not an object: %r" % line)
    for k, v in obj.items():
        if not isinstance(v, str) and not (k == "truncated" and v is True):
            raise ValueError("%s is not a string: %r" % (k, line))
    _check_head(list(obj), obj, line)
    return obj


def _no_dup(pairs):
    keys = [k for k, _ in pairs]
    if len(set(keys)) != len(keys):
        raise ValueError("a key twice: %r" % keys)
    return dict(pairs)


def _check_head(order, fields, line):
    if order[:4] != HEAD:
        raise ValueError("the line does not start with %s: %r" % (HEAD, line))
    if not TS.match(fields["ts"]) or fields["level"] not in LEVELS:
        raise ValueError("bad ts or level: %r" % line)


def _any(line):
    if line.startswith("{"):
        return parse_json(line)
    if line.startswith("ts="):
        return parse_logfmt(line)
    return parse_text(line)


def parse(text, fmt="auto"):
    """Every line of a log, parsed; raises ValueError on the first bad one.
    fmt: "text", "logfmt", "json", or "auto" (each line by its start)."""
    one = {"json": parse_json, "logfmt": parse_logfmt,
           "text": parse_text}.get(fmt, _any)
    out = []
    lines = text.split("\n")
    if lines and lines[-1] == "":
        lines.pop()
    for n, line in enumerate(lines, 1):
        try:
            out.append(one(line))
        except ValueError as e:
            raise ValueError("log line %d: %s" % (n, e)) from None
    return out


def records(text, fmt="auto", **want):
    """The lines whose fields equal every item of want (msg matched as a
    prefix when it ends with '*')."""
    out = []
    for r in parse(text, fmt):
        ok = True
        for k, v in want.items():
            if isinstance(v, str) and v.endswith("*"):
                ok = ok and r.get(k, "").startswith(v[:-1])
            else:
                ok = ok and r.get(k) == v
        if ok:
            out.append(r)
    return out
