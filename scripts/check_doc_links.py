#!/usr/bin/python3
"""Check that every relative markdown link in README.md and docs/ names a
file (or directory) inside the repository. External links (http, https,
mailto) and pure anchors are skipped; an anchor after a path is ignored.
Prints each broken link and exits 1 when there is one."""
import os
import re
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)(?:\s+\"[^\"]*\")?\)")


def pages():
    yield os.path.join(ROOT, "README.md")
    for d, _, files in os.walk(os.path.join(ROOT, "docs")):
        for f in sorted(files):
            if f.endswith(".md"):
                yield os.path.join(d, f)


def main():
    bad = 0
    n = 0
    for page in pages():
        text = open(page, encoding="utf-8").read()
        # Links inside fenced code blocks are not links.
        text = re.sub(r"```.*?```", "", text, flags=re.S)
        for m in LINK.finditer(text):
            target = m.group(1)
            if re.match(r"^[a-z]+:", target) or target.startswith("#"):
                continue
            n += 1
            path = target.split("#", 1)[0]
            full = os.path.normpath(os.path.join(os.path.dirname(page), path))
            inside = full == ROOT or full.startswith(ROOT + os.sep)
            if not inside or not os.path.exists(full):
                print("%s: %s" % (os.path.relpath(page, ROOT), target))
                bad += 1
    print("%d links checked, %d broken" % (n, bad))
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
