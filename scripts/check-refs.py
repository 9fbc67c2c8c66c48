#!/usr/bin/env python3
"""Fails when a section reference in the tree does not resolve inside the repository.

Code and docs cite the contract as `NN §X[.Y]` (01..05, as docs/semantics.md numbers its parts).
Every such reference must name a heading of docs/semantics.md, and nothing may point at the
specification outside the repository (`../shared/...`), so the repo stands alone.
"""
import pathlib
import re
import sys

root = pathlib.Path(__file__).resolve().parent.parent
heads = set()
for line in (root / "docs/semantics.md").read_text().splitlines():
    m = re.match(r"#+\s+(0\d) §([\d.]+)", line)
    if m:
        heads.add((m.group(1), m.group(2).rstrip(".")))

ref = re.compile(r"\b(0[1-5]) §(\d+(?:\.\d+)*)")
outside = re.compile(r"\.\./shared/|\.\./\.\./spec/")
skip = {"target", "node_modules", ".git", "fixtures"}
bad = []
for path in root.rglob("*"):
    if path.is_dir() or any(p in skip for p in path.relative_to(root).parts):
        continue
    if path.suffix not in {".rs", ".md", ".toml", ".sh", ".mjs", ".js", ".py"}:
        continue
    text = path.read_text(errors="replace")
    rel = path.relative_to(root)
    for n, line in enumerate(text.splitlines(), 1):
        for m in ref.finditer(line):
            if (m.group(1), m.group(2)) not in heads:
                bad.append(f"{rel}:{n}: {m.group(0)} is not a heading of docs/semantics.md")
        if outside.search(line) and rel.as_posix() != "scripts/check-refs.py":
            bad.append(f"{rel}:{n}: points outside the repository")
for b in bad:
    print(b)
print(f"check-refs: {len(heads)} sections, {len(bad)} unresolved references")
sys.exit(1 if bad else 0)
