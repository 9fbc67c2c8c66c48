#!/usr/bin/env python3
"""Module cycles and oversized files in the workspace's crates (decision D9).

For each crate under crates/*/src, walks the module tree from lib.rs / main.rs (`mod x;`
declarations, `x.rs` or `x/mod.rs`) and collects the edges between modules: `crate::a::b`
paths (in `use` trees, nested braces included, and in expressions), `super::` and `self::`
paths, and bare paths through a module's own child modules (`child::item`). A path resolves to
the longest module prefix it names. Test code (`#[cfg(test)]` items) is left out, and so is the
crate root: every module reaches the root's re-exports, so cycles through the root are not the
coupling this check is about. Inline modules count as part of their file's module.

Fails (exit 1) when a crate's module graph has a cycle: each cycle is printed with the lines
that make its edges. Files with more than --max-lines lines of non-test code (default 600) are
listed as warnings; with --strict-size they fail too.

Usage: scripts/modcycles.py [--root DIR] [--max-lines N] [--strict-size] [--self-test]
"""

import argparse
import os
import re
import sys

IDENT = r"[A-Za-z_][A-Za-z0-9_]*"
KEYWORDS = {"crate", "super", "self", "Self"}


def strip_comments_and_strings(src):
    """Blanks comments, string and char literals (keeping newlines, so line numbers hold)."""
    out = []
    i, n = 0, len(src)
    while i < n:
        c = src[i]
        if src.startswith("//", i):
            j = src.find("\n", i)
            j = n if j < 0 else j
            out.append(" " * (j - i))
            i = j
        elif src.startswith("/*", i):
            depth, j = 1, i + 2
            while j < n and depth:
                if src.startswith("/*", j):
                    depth, j = depth + 1, j + 2
                elif src.startswith("*/", j):
                    depth, j = depth - 1, j + 2
                else:
                    j += 1
            out.append(re.sub(r"[^\n]", " ", src[i:j]))
            i = j
        elif c == "r" and re.match(r'r#*"', src[i:i + 10]) and not re.match(r"[A-Za-z0-9_]", src[i - 1:i] or " "):
            m = re.match(r'r(#*)"', src[i:])
            end = '"' + m.group(1)
            j = src.find(end, i + len(m.group(0)))
            j = n if j < 0 else j + len(end)
            out.append(re.sub(r"[^\n]", " ", src[i:j]))
            i = j
        elif c == '"':
            j = i + 1
            while j < n and src[j] != '"':
                j += 2 if src[j] == "\\" else 1
            j = min(j + 1, n)
            out.append(re.sub(r"[^\n]", " ", src[i:j]))
            i = j
        elif c == "'":
            # A char literal ('a', '\n', '\u{..}'), not a lifetime ('a without a closing quote).
            m = re.match(r"'(\\.[^']*|[^\\'])'", src[i:])
            if m:
                out.append(" " * len(m.group(0)))
                i += len(m.group(0))
            else:
                out.append(c)
                i += 1
        else:
            out.append(c)
            i += 1
    return "".join(out)


def matching_brace(text, open_at):
    depth = 0
    for j in range(open_at, len(text)):
        if text[j] == "{":
            depth += 1
        elif text[j] == "}":
            depth -= 1
            if depth == 0:
                return j
    return len(text) - 1


def test_regions(code):
    """(start, end) offsets of `#[cfg(test)]` items in comment-free code."""
    regions = []
    for m in re.finditer(r"#\[cfg\(test\)\]", code):
        start = m.start()
        j = m.end()
        # Further attributes of the same item.
        while True:
            a = re.match(r"\s*#\[[^\]]*\]", code[j:])
            if not a:
                break
            j += a.end()
        semi = code.find(";", j)
        brace = code.find("{", j)
        if brace < 0 or (0 <= semi < brace):
            end = semi if semi >= 0 else len(code) - 1
        else:
            end = matching_brace(code, brace)
        regions.append((start, end + 1))
    return regions


def blank_regions(text, regions):
    chars = list(text)
    for s, e in regions:
        for k in range(s, min(e, len(chars))):
            if chars[k] != "\n":
                chars[k] = " "
    return "".join(chars)


def parse_use_tree(text, i):
    """Parses a path or use tree at text[i:] (just after `crate::`, `super::`, ...).
    Returns the list of paths (lists of segments) it names."""
    tokens = []
    pat = re.compile(r"\s*(::|\{|\}|,|\*|" + IDENT + r")")
    j = i
    # Tokenize until the tree (or path) ends.
    depth = 0
    while True:
        m = pat.match(text, j)
        if not m:
            break
        tok = m.group(1)
        if tok == "{":
            depth += 1
        elif tok == "}":
            if depth == 0:
                break
            depth -= 1
        elif tok == "," and depth == 0:
            break
        if not tokens and tok == "::":
            break
        # A path outside braces ends at the first identifier not preceded by `::`.
        if depth == 0 and tokens and re.match(IDENT, tok) and tokens[-1] not in ("::", "{", ","):
            break
        tokens.append(tok)
        j = m.end()
        if depth == 0 and tok == "}":
            break

    pos = 0

    def tree(prefix):
        nonlocal pos
        paths = []
        segs = list(prefix)
        while pos < len(tokens):
            t = tokens[pos]
            if t == "{":
                pos += 1
                while pos < len(tokens) and tokens[pos] != "}":
                    if tokens[pos] == ",":
                        pos += 1
                        continue
                    paths.extend(tree(segs))
                if pos < len(tokens):
                    pos += 1
                return paths or [segs]
            if t == "*":
                pos += 1
                return [segs]
            if re.fullmatch(IDENT, t):
                if t == "as":
                    pos += 2
                    return [segs]
                segs.append(t)
                pos += 1
                if pos < len(tokens) and tokens[pos] == "::":
                    pos += 1
                    continue
                # `as alias`
                if pos < len(tokens) and tokens[pos] == "as":
                    pos += 2
                return [segs]
            break
        return paths or [segs]

    return tree([])


class Crate:
    def __init__(self, name, src):
        self.name, self.src = name, src
        self.modules = {}  # module path (tuple) -> file
        self.children = {}  # module path -> set of child names

    def walk(self, root_file):
        self._visit((), root_file, os.path.dirname(root_file))

    def _visit(self, path, file, child_dir):
        if path in self.modules:
            return
        self.modules[path] = file
        self.children.setdefault(path, set())
        with open(file, encoding="utf-8") as f:
            code = strip_comments_and_strings(f.read())
        code = blank_regions(code, test_regions(code))
        for m in re.finditer(r"(?m)^\s*(?:pub(?:\([^)]*\))?\s+)?mod\s+(" + IDENT + r")\s*;", code):
            name = m.group(1)
            for cand, sub in ((os.path.join(child_dir, name + ".rs"), os.path.join(child_dir, name)),
                              (os.path.join(child_dir, name, "mod.rs"), os.path.join(child_dir, name))):
                if os.path.isfile(cand):
                    self.children[path].add(name)
                    self._visit(path + (name,), cand, sub)
                    break

    def resolve(self, segs):
        """The longest module prefix of an absolute path; () for the root."""
        best = ()
        for k in range(1, len(segs) + 1):
            if tuple(segs[:k]) in self.modules:
                best = tuple(segs[:k])
            else:
                break
        return best


def inline_mod_depth_at(code):
    """For each offset, how many inline (non-file) modules enclose it."""
    marks = []
    for m in re.finditer(r"\bmod\s+" + IDENT + r"\s*\{", code):
        open_at = m.end() - 1
        marks.append((open_at, matching_brace(code, open_at)))

    def depth(off):
        return sum(1 for s, e in marks if s < off < e)

    return depth


def edges_of(crate, path, file):
    with open(file, encoding="utf-8") as f:
        code = strip_comments_and_strings(f.read())
    code = blank_regions(code, test_regions(code))
    depth_at = inline_mod_depth_at(code)
    out = []  # (target module, line)
    children = crate.children.get(path, set())
    for m in re.finditer(r"(?<![A-Za-z0-9_$:])((?:super::)+|crate::|self::|" + IDENT + r"::)", code):
        head = m.group(1)
        before = code[max(0, m.start() - 4):m.start()]
        if before.endswith("pub(") or before.endswith("in "):
            continue
        line = code.count("\n", 0, m.start()) + 1
        if head == "crate::":
            bases = [()]
        elif head.startswith("super::"):
            ups = head.count("super::") - depth_at(m.start())
            if ups <= 0:
                continue  # inside an inline module: its file's own module
            if ups > len(path):
                continue
            bases = [path[: len(path) - ups]]
        elif head == "self::":
            bases = [path]
        else:
            name = head[:-2]
            if name in KEYWORDS or name not in children:
                continue
            # A bare path through one of this module's own child modules.
            for tree in parse_use_tree(code, m.end()):
                target = crate.resolve(list(path) + [name] + tree)
                if target and target != path:
                    out.append((target, line))
            continue
        for base in bases:
            for tree in parse_use_tree(code, m.end()):
                target = crate.resolve(list(base) + tree)
                if target and target != path:
                    out.append((target, line))
    return out


def code_lines(file):
    with open(file, encoding="utf-8") as f:
        raw = f.read()
    code = strip_comments_and_strings(raw)
    tests = sum(code.count("\n", s, e) + 1 for s, e in test_regions(code))
    return raw.count("\n") + (0 if raw.endswith("\n") else 1) - tests


def sccs(nodes, adj):
    index, low, on, stack, out = {}, {}, set(), [], []
    counter = [0]

    def visit(v):
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in sorted(adj.get(v, ())):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            out.append(comp)

    sys.setrecursionlimit(10000)
    for v in sorted(nodes):
        if v not in index:
            visit(v)
    return out


SELF_TEST = {
    # A cycle a -> b -> a through a nested use tree and a `super::` path.
    "cyc/src/lib.rs": "mod a;\nmod b;\npub use a::X;\n",
    "cyc/src/a.rs": "use crate::{b::{self, Y as Z}, X};\npub struct X;\n",
    "cyc/src/b/mod.rs": "mod c;\npub struct Y;\nfn f() { c::g(); }\n",
    "cyc/src/b/c.rs": "pub fn g() { let _ = super::super::a::X; }\n",
    # No cycle: edges only in tests, in strings, in comments, in `pub(crate)`, and through the
    # crate root; a child's `super::` item that its parent does not use back.
    "ok/src/lib.rs": "mod a;\nmod b;\npub use b::Y;\n",
    "ok/src/a.rs": (
        "use crate::b::Y;\npub(crate) fn f() {}\n"
        "#[cfg(test)]\nmod tests {\n    use super::*;\n}\n"
    ),
    "ok/src/b.rs": (
        "// crate::a::f\npub struct Y;\nconst S: &str = \"crate::a::f\";\n"
        "fn h() { let _ = crate::Y; }\n"
        "#[cfg(test)]\nfn t() { crate::a::f(); }\n"
        "mod inner {\n    fn k() { let _ = super::Y; }\n}\n"
    ),
}


def self_test():
    import tempfile

    with tempfile.TemporaryDirectory() as d:
        for rel, text in SELF_TEST.items():
            path = os.path.join(d, "crates", rel)
            os.makedirs(os.path.dirname(path), exist_ok=True)
            with open(path, "w", encoding="utf-8") as f:
                f.write(text)
        found = {}
        for name in ("cyc", "ok"):
            c = Crate(name, os.path.join(d, "crates", name, "src"))
            c.walk(os.path.join(d, "crates", name, "src", "lib.rs"))
            found[name] = {
                "::".join(p): sorted({"::".join(t) for t, _ in edges_of(c, p, f) if t})
                for p, f in c.modules.items()
                if p
            }
    want = {
        "cyc": {"a": ["b"], "b": ["b::c"], "b::c": ["a"]},
        "ok": {"a": ["b"], "b": []},
    }
    if found != want:
        print(f"self-test failed:\n  found {found}\n  wanted {want}")
        return 1
    print("self-test ok")
    return 0


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--root", default=os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
    ap.add_argument("--max-lines", type=int, default=600)
    ap.add_argument("--strict-size", action="store_true")
    ap.add_argument("--self-test", action="store_true", help="check the checker on small crates")
    args = ap.parse_args()
    if args.self_test:
        return self_test()
    crates_dir = os.path.join(os.path.abspath(args.root), "crates")
    cycles, big = 0, []
    for name in sorted(os.listdir(crates_dir)):
        src = os.path.join(crates_dir, name, "src")
        if not os.path.isdir(src):
            continue
        for root_name in ("lib.rs", "main.rs"):
            root = os.path.join(src, root_name)
            if not os.path.isfile(root):
                continue
            crate = Crate(name, src)
            crate.walk(root)
            adj, why = {}, {}
            for path, file in crate.modules.items():
                n = code_lines(file)
                rel = os.path.relpath(file, os.path.abspath(args.root))
                if n > args.max_lines and (rel, n) not in big:
                    big.append((rel, n))
                if path == ():
                    continue
                for target, line in edges_of(crate, path, file):
                    if target == ():
                        continue
                    adj.setdefault(path, set()).add(target)
                    why.setdefault((path, target), f"{rel}:{line}")
            for comp in sccs(list(crate.modules), adj):
                if len(comp) < 2:
                    continue
                cycles += 1
                members = set(comp)
                label = lambda p: "::".join(p)
                print(f"cycle in {name} ({root_name}): " + ", ".join(sorted(label(p) for p in comp)))
                for a in sorted(members):
                    for b in sorted(adj.get(a, ())):
                        if b in members:
                            print(f"  {label(a)} -> {label(b)}  ({why[(a, b)]})")
    for rel, n in sorted(big, key=lambda x: -x[1]):
        kind = "error" if args.strict_size else "warning"
        print(f"{kind}: {rel} has {n} lines of non-test code (more than {args.max_lines})")
    if cycles:
        print(f"{cycles} module cycle(s) found")
    else:
        print("no module cycles")
    return 1 if cycles or (args.strict_size and big) else 0


if __name__ == "__main__":
    sys.exit(main())
