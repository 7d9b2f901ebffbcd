#!/usr/bin/python3
"""Check that the repository stands alone: every relative markdown link in
README.md and docs/ names a file (or directory) inside the repository, and
no source, test, script or doc cites a document outside it (the old
implementation reference by section number, ../shared, DESIGN.md, STYLE.md
or notes/). External links (http, https, mailto) and pure anchors are
skipped; an anchor after a path is ignored. Prints each broken link or
outside citation and exits 1 when there is one. `make check` runs it."""
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


OUTSIDE = re.compile(r"[Rr]eference [0-9§]|\.\./shared|DESIGN\.md|DESIGN §|"
                     r"STYLE\.md|notes/dependencies")
CITING = ("src", "tests", "docs", "scripts", "bench")


def cited_outside():
    """Lines that cite a document outside the repository."""
    files = [os.path.join(ROOT, "README.md"), os.path.join(ROOT, "Makefile")]
    for top in CITING:
        for d, dirs, names in os.walk(os.path.join(ROOT, top)):
            dirs[:] = [x for x in dirs if x not in ("node_modules", "corpus",
                                                    "__pycache__")]
            files += [os.path.join(d, f) for f in sorted(names)]
    for path in files:
        rel = os.path.relpath(path, ROOT)
        if rel in ("docs/design/citations.tsv", "scripts/check_doc_links.py"):
            continue  # the map from the old citations, and this check
        try:
            text = open(path, encoding="utf-8").read()
        except (UnicodeDecodeError, OSError):
            continue
        for i, line in enumerate(text.splitlines(), 1):
            if OUTSIDE.search(line):
                yield "%s:%d: %s" % (rel, i, line.strip()[:100])


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
    outside = list(cited_outside())
    for line in outside:
        print("cites a document outside the repository: " + line)
    print("%d citations of documents outside the repository" % len(outside))
    return 1 if bad or outside else 0


if __name__ == "__main__":
    sys.exit(main())
