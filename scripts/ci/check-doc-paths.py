#!/usr/bin/env python3
"""Checks that every file path docs/architecture.md names exists (run by scripts/test.sh).

A path is any `backticked` token that ends in a source or doc suffix (.rs .sh .py .md .toml)
or that starts with one of the repository's top folders. Paths are written from the
repository root (`crates/tunnel/src/dev/udp/mod.rs`, not `udp/mod.rs`), so a bare file name
is an error too: it cannot be checked. Exit 1 with each bad path and its line.
"""
import os
import re
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
DOCS = sys.argv[1:] or ["docs/architecture.md"]
TOPS = ("crates/", "src/", "scripts/", "docs/", "tests/", "fuzz/", "benches/", "examples/", "dist/", ".ci/")
SUFFIX = re.compile(r"\.(rs|sh|py|md|toml)$")
TOKEN = re.compile(r"`([^`\s]+)`")

bad = []
for doc in DOCS:
    with open(os.path.join(ROOT, doc), encoding="utf-8") as f:
        lines = f.readlines()
    fence = False
    for n, line in enumerate(lines, 1):
        if line.lstrip().startswith("```"):
            fence = not fence
            continue
        if fence:
            continue
        for tok in TOKEN.findall(line):
            tok = tok.rstrip(",.;:")
            path = tok.split("#")[0].split("::")[0]
            if not (path.startswith(TOPS) or SUFFIX.search(path)):
                continue
            if "*" in path or "{" in path or "<" in path or path.startswith("http"):
                continue
            if not path.startswith(TOPS):
                bad.append(f"{doc}:{n}: `{tok}`: write the path from the repository root")
            elif not os.path.exists(os.path.join(ROOT, path)):
                bad.append(f"{doc}:{n}: `{tok}`: no such file or folder")
for b in bad:
    print(b)
if bad:
    print(f"check-doc-paths: {len(bad)} path(s) in {', '.join(DOCS)} do not exist or are not whole")
    sys.exit(1)
print(f"check-doc-paths: every path in {', '.join(DOCS)} exists")
