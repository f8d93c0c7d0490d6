#!/usr/bin/env python3
"""Fails when src/ has a dependency cycle between modules (docs/architecture.md, "Layers").

Three graphs are built from the `crate::` and `super::` paths in src/ (use trees included):
- top level: one node per module of the crate root (src/X.rs or src/X/);
- within each folder of src/: one node per file or subfolder, mod.rs being the folder's node;
- every file: one node per file (mod.rs is its folder's), an edge to the deepest file a path
  names, wherever it is: a file in a subfolder naming its parent's siblings counts too.
A `#[cfg(test)]` module is left out: tests use the code, nothing uses them. A folder's
mod.rs declaring or re-exporting its own children (`pub use child::X`) is not an
edge: a folder holds its files. A cycle in any graph is printed with the lines that make its
edges, and the exit status is 1. `--graph` prints the top-level edges instead.

It also fails when a file outside src/http/, src/cli/, the crate root (lib.rs, main.rs,
metrics.rs) and the chain node's client (chain/node.rs) names a web framework (axum, tower, tower_http, hyper) or `crate::http`: the
layers point http -> domain -> store, and only the top knows HTTP.
"""

import re
import sys
from collections import defaultdict
from pathlib import Path

SRC = Path(__file__).resolve().parent.parent / "src"
# The crate root's own files: they build the application and may name anything.
ROOTS = {"lib", "main"}
TOKEN = re.compile(r"[A-Za-z_][A-Za-z0-9_]*|::|[{},;]|[^\s\w]")


# Comments, raw strings, strings and char literals, matched in one left-to-right pass so that
# a quote inside a comment or a `//` inside a string cannot pair with the wrong delimiter.
LITERAL = re.compile(
    r"//[^\n]*|/\*[\s\S]*?\*/|(?<![\w])b?r(#*)\"[\s\S]*?\"\1|\"(?:\\[\s\S]|[^\"\\])*\"|'(?:\\.|[^'\\\n])'"
)


def strip(text: str) -> str:
    """Drops comments, string and char literals (they may hold `crate::` as text), keeping
    every newline so that line numbers still match the file."""
    text = LITERAL.sub(lambda m: " " + "\n" * m.group(0).count("\n"), text)
    return drop_test_modules(text)


def drop_test_modules(text: str) -> str:
    """Blanks every `#[cfg(test)] mod name { ... }` block, keeping its newlines."""
    out, pos = [], 0
    for m in re.finditer(r"#\[cfg\(test\)\]\s*(?:pub(?:\([^)]*\))?\s+)?mod\s+\w+\s*\{", text):
        if m.start() < pos:
            continue
        depth, i = 1, m.end()
        while i < len(text) and depth:
            depth += {"{": 1, "}": -1}.get(text[i], 0)
            i += 1
        out.append(text[pos : m.start()])
        out.append("\n" * text.count("\n", m.start(), i))
        pos = i
    out.append(text[pos:])
    return "".join(out)


def paths(text: str):
    """Yields (line, [segments]) for every path starting at `crate` or `super`, use trees expanded."""
    tokens = [(m.group(0), text.count("\n", 0, m.start()) + 1) for m in TOKEN.finditer(text)]

    def tree(i, prefix, line):
        # tokens[i] is the first token after `::`; returns the index after the tree.
        tok = tokens[i][0] if i < len(tokens) else ""
        if tok == "{":
            i += 1
            while i < len(tokens) and tokens[i][0] != "}":
                if tokens[i][0] == ",":
                    i += 1
                    continue
                i = tree(i, prefix, tokens[i][1])
            return i + 1
        segs = list(prefix)
        while i < len(tokens) and re.match(r"[A-Za-z_]", tokens[i][0]):
            segs.append(tokens[i][0])
            if i + 1 < len(tokens) and tokens[i + 1][0] == "::":
                if i + 2 < len(tokens) and tokens[i + 2][0] == "{":
                    return tree(i + 2, segs, line)
                i += 2
            else:
                i += 1
                break
        results.append((line, segs))
        return i

    results = []
    for i, (tok, line) in enumerate(tokens):
        if tok in ("crate", "super") and i + 1 < len(tokens) and tokens[i + 1][0] == "::":
            if i > 0 and tokens[i - 1][0] == "::":
                continue
            tree(i + 2, [tok], line)
    return results


def module_of(path: Path):
    """The module path of a file: src/store/outbox.rs -> ['store', 'outbox'], mod.rs -> its folder."""
    parts = list(path.relative_to(SRC).with_suffix("").parts)
    if parts[-1] == "mod":
        parts.pop()
    return parts


def resolve(own: list, segs: list):
    """Absolute module path named by segs (from `crate` or `super`), as far as files exist."""
    if segs[0] == "crate":
        base, rest = [], segs[1:]
    else:
        base, rest = list(own), list(segs)
        while rest and rest[0] == "super":
            base = base[:-1]
            rest = rest[1:]
    out = list(base)
    for seg in rest:
        folder = SRC.joinpath(*out, seg)
        if folder.is_dir() or folder.with_suffix(".rs").is_file():
            out.append(seg)
        else:
            break
    return out


def cycles(edges):
    """Strongly connected components with more than one node (Tarjan)."""
    index, low, stack, on, comps, counter = {}, {}, [], set(), [], [0]

    def visit(v):
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in sorted(edges.get(v, ())):
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
            if len(comp) > 1:
                comps.append(sorted(comp))

    sys.setrecursionlimit(10000)
    for v in sorted(edges):
        if v not in index:
            visit(v)
    return comps


# Files that may know HTTP: the HTTP layer, the CLI, and the crate root that wires them; and
# the chain node's client, whose transport is alloy's interface, a tower Service (outbound).
HTTP_ALLOWED = ("http/", "cli/", "lib.rs", "main.rs", "metrics.rs", "chain/node.rs")
HTTP_NAMES = re.compile(r"\b(?:axum|tower_http|tower|hyper)\s*::|\bcrate\s*::\s*http\b")


def main():
    top = defaultdict(set)
    layer_breaches = []
    files = defaultdict(set)
    inner = defaultdict(lambda: defaultdict(set))
    where = defaultdict(list)
    for file in sorted(SRC.rglob("*.rs")):
        own = module_of(file)
        if not own or own[0] in ROOTS:
            continue
        text = strip(file.read_text())
        rel_file = str(file.relative_to(SRC))
        if not rel_file.startswith(HTTP_ALLOWED):
            for m in HTTP_NAMES.finditer(text):
                layer_breaches.append(f"src/{rel_file}:{text.count(chr(10), 0, m.start()) + 1}: {m.group(0)}")
        for line, segs in paths(text):
            target = resolve(own, segs)
            if not target:
                continue
            rel = f"{file.relative_to(SRC.parent)}:{line}"
            if target != own and target[0] not in ROOTS:
                a, b = "/".join(own), "/".join(target)
                files[a].add(b)
                where[("file", a, b)].append(rel)
            if target[0] != own[0] and target[0] not in ROOTS:
                top[own[0]].add(target[0])
                where[(own[0], target[0])].append(rel)
            # Sibling files of one folder (mod.rs is the folder's node).
            folder = own[:-1] if file.name != "mod.rs" else own
            depth = len(folder)
            if depth and target[:depth] == folder and own != target:
                a = own[depth] if len(own) > depth else "mod"
                b = target[depth] if len(target) > depth else "mod"
                if a != b:
                    key = "/".join(folder)
                    inner[key][a].add(b)
                    where[(key, a, b)].append(rel)

    if "--graph" in sys.argv:
        for a in sorted(top):
            print(f"{a} -> {', '.join(sorted(top[a]))}")
        return 0
    found = 0
    graphs = [("between top-level modules", top, lambda a, b: (a, b))]
    for key in sorted(inner):
        graphs.append((f"inside src/{key}/", inner[key], lambda a, b, key=key: (key, a, b)))
    graphs.append(("between files", files, lambda a, b: ("file", a, b)))
    for title, edges, where_key in graphs:
        for comp in cycles(edges):
            found += 1
            print(f"cycle {title}: {' <-> '.join(comp)}")
            for a in comp:
                for b in sorted(edges[a] & set(comp)):
                    print(f"  {a} -> {b}: {', '.join(where[where_key(a, b)][:3])}")
    for breach in layer_breaches:
        found += 1
        print(f"HTTP named below the HTTP layer: {breach}")
    if found:
        print(f"{found} problem(s): layers must point one way (docs/architecture.md)")
        return 1
    print("no module cycles")
    return 0


if __name__ == "__main__":
    sys.exit(main())
