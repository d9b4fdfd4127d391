#!/usr/bin/env python3
"""The top-level module graph of src/ and its cycles (docs/architecture.md, "Module map").

An edge A -> B means a file under module A names `crate::B` (in a `use` or a path). Only
top-level modules count: `src/foo.rs` or `src/foo/**` is module `foo`. Comments and string
literals are skipped; `#[cfg(test)]` code counts like any other (a test that needs a cycle is
a cycle).

Usage: scripts/module-graph.py [--check] [--doc FILE] [--dot] [--root SRC]
  --check  exit 1 and list every strongly connected component of more than one module
  --doc    with --check: also exit 1 when the module map in FILE (a Markdown table whose rows
           are | `module` | owns | may use |) lacks a module, names one that does not exist,
           does not allow an import the code makes, or lists one it does not make
  --dot    print the graph in Graphviz form
  --root   the source tree to read (default: this repository's src/)
Without flags, prints one line per module: the modules it uses.
"""
import pathlib
import re
import sys

ROOT = pathlib.Path(__file__).resolve().parent.parent / "src"
SKIP = {"main", "lib"}  # the binary and the crate root may use everything


def strip(text: str) -> str:
    """Drops comments and string/char literals so `crate::x` inside them is not an edge."""
    out = []
    i, n = 0, len(text)
    while i < n:
        c = text[i]
        if text.startswith("//", i):
            j = text.find("\n", i)
            i = n if j < 0 else j
        elif text.startswith("/*", i):
            j = text.find("*/", i + 2)
            i = n if j < 0 else j + 2
        elif c == "r" and re.match(r'r#*"', text[i:i + 8]) and (i == 0 or not (text[i - 1].isalnum() or text[i - 1] == "_")):
            m = re.match(r'r(#*)"', text[i:])
            end = '"' + m.group(1)
            j = text.find(end, i + len(m.group(0)))
            i = n if j < 0 else j + len(end)
        elif c == '"':
            j = i + 1
            while j < n and text[j] != '"':
                j += 2 if text[j] == "\\" else 1
            i = j + 1
        elif c == "'" and re.match(r"'(\\.|[^\\'])'", text[i:i + 4]):
            i += len(re.match(r"'(\\.|[^\\'])'", text[i:]).group(0))
        else:
            out.append(c)
            i += 1
    return "".join(out)


def module_of(path: pathlib.Path) -> str:
    rel = path.relative_to(ROOT)
    return rel.parts[0].removesuffix(".rs")


def graph() -> dict[str, set[str]]:
    modules = {module_of(p) for p in ROOT.glob("*.rs")} | {p.name for p in ROOT.iterdir() if p.is_dir()}
    modules -= SKIP
    edges: dict[str, set[str]] = {m: set() for m in modules}
    for path in ROOT.rglob("*.rs"):
        src_mod = module_of(path)
        if src_mod in SKIP:
            continue
        text = strip(path.read_text())
        used = set(re.findall(r"\bcrate::(\w+)", text))
        # `use crate::{a, b::c}` groups
        for group in re.findall(r"\bcrate::\{([^;]*)\}", text):
            used |= set(re.findall(r"(?:^|[{,])\s*(\w+)", group))
        edges[src_mod] |= {u for u in used if u in modules and u != src_mod}
    return edges


def sccs(edges: dict[str, set[str]]) -> list[list[str]]:
    """Tarjan's strongly connected components."""
    index, low, stack, on, out = {}, {}, [], set(), []
    counter = [0]

    def visit(v: str) -> None:
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in sorted(edges[v]):
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
            out.append(sorted(comp))

    for v in sorted(edges):
        if v not in index:
            visit(v)
    return out


def doc_map(path: pathlib.Path) -> dict[str, set[str]]:
    """The module map of docs/architecture.md: module -> the modules it may use."""
    allowed = {}
    for line in path.read_text().splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) == 3 and cells[0].startswith("`") and cells[0].endswith("`"):
            uses = {u.strip() for u in cells[2].split(",") if u.strip()}
            allowed[cells[0].strip("`")] = uses
    return allowed


def doc_problems(edges: dict[str, set[str]], allowed: dict[str, set[str]]) -> list[str]:
    problems = []
    for m in sorted(set(edges) - set(allowed)):
        problems.append(f"module map: `{m}` is missing")
    for m in sorted(set(allowed) - set(edges)):
        problems.append(f"module map: `{m}` is not a module of src/")
    for m in sorted(set(edges) & set(allowed)):
        for used in sorted(edges[m] - allowed[m]):
            problems.append(f"module map: `{m}` uses `{used}`, which its row does not allow")
        for unused in sorted(allowed[m] - edges[m]):
            problems.append(f"module map: `{m}`'s row lists `{unused}`, which it does not use")
    return problems


def main() -> int:
    global ROOT
    if "--root" in sys.argv:
        ROOT = pathlib.Path(sys.argv[sys.argv.index("--root") + 1]).resolve()
    edges = graph()
    if "--dot" in sys.argv:
        print("digraph modules {")
        for a in sorted(edges):
            for b in sorted(edges[a]):
                print(f'  "{a}" -> "{b}";')
        print("}")
        return 0
    if "--check" in sys.argv:
        cycles = [c for c in sccs(edges) if len(c) > 1]
        problems = []
        if "--doc" in sys.argv:
            doc = pathlib.Path(sys.argv[sys.argv.index("--doc") + 1])
            problems = doc_problems(edges, doc_map(doc))
        for problem in problems:
            print(problem)
        if not cycles and not problems:
            matched = ", as the module map allows" if "--doc" in sys.argv else ""
            print(f"module graph: {len(edges)} top-level modules, no cycles{matched}")
            return 0
        for comp in cycles:
            print(f"cycle among {len(comp)} modules: {', '.join(comp)}")
            members = set(comp)
            for a in comp:
                inside = sorted(edges[a] & members)
                print(f"  {a} -> {', '.join(inside)}")
        return 1
    for a in sorted(edges):
        print(f"{a}: {', '.join(sorted(edges[a]))}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
