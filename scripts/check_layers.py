#!/usr/bin/env python3
"""Check the module layering of every crate in the workspace, and the size of its files.

1. Cycles. For each crate (the members of the root `Cargo.toml`'s `[workspace]`, and the
   root package, the facade, in `src/`), the graph of its top-level modules: every `mod`
   declared in the crate root (`lib.rs`), a folder module counting as one node. An edge
   `a -> b` is a path from inside `a` that names `b`: `use crate::b::...`, a fully qualified
   `crate::b::...` anywhere in code, a `super::` chain that climbs out of `a` into `b`, or
   `crate::X` where the root re-exports `X` from `b` (`pub use b::X` in `lib.rs`). A
   `super::` that stays inside `a` (a file of a folder naming its folder, a `mod tests`
   naming its file) is internal. Comments and string literals are skipped, test code is
   not (a test module's imports are imports too). Every elementary cycle is printed with
   one place that makes each of its edges. The same inside every folder module: the files
   (and subfolders) that name each other by path (`super::b::...`), `mod.rs` aside, must
   form no cycle either.
2. Size. Every non-test `.rs` file under a crate's `src/` longer than 600 lines whose first
   15 lines contain no `//!` line mentioning "lines" (the stated reason for its length).
   Test files are those named `tests.rs` or `*_tests.rs`, or inside a `tests/` folder.

Usage: python3 scripts/check_layers.py   (from anywhere; exits 1 on a cycle or an
unexplained long file, 0 otherwise)
"""

import re
import sys
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
LONGEST = 600
HEADER_LINES = 15
MAX_CYCLES = 500


def crates():
    """(name, src folder) of every crate in the workspace, the facade last."""
    manifest = tomllib.loads((ROOT / "Cargo.toml").read_text())
    found = []
    for member in manifest.get("workspace", {}).get("members", []):
        for folder in sorted(ROOT.glob(member)):
            cargo = folder / "Cargo.toml"
            if cargo.exists():
                name = tomllib.loads(cargo.read_text()).get("package", {}).get("name", folder.name)
                found.append((name, folder / "src"))
    if "package" in manifest:
        found.append((manifest["package"]["name"], ROOT / "src"))
    return found


# --- A small Rust lexer: enough to skip comments and literals and to see paths. ---

TOKEN = re.compile(
    r"""
    (?P<ws>\s+)
  | (?P<line_comment>//[^\n]*)
  | (?P<block_comment>/\*)
  | (?P<raw_string>b?r(?P<hashes>\#*)")
  | (?P<string>b?"(?:[^"\\]|\\.)*")
  | (?P<char>b?'(?:[^'\\\n]|\\(?:[nrt\\0'"]|x[0-9a-fA-F]{2}|u\{[0-9a-fA-F]{1,6}\}))')
  | (?P<lifetime>'[A-Za-z_][A-Za-z0-9_]*)
  | (?P<ident>r\#[A-Za-z_][A-Za-z0-9_]*|[A-Za-z_][A-Za-z0-9_]*)
  | (?P<path_sep>::)
  | (?P<punct>.)
    """,
    re.VERBOSE | re.DOTALL,
)


def tokens(text):
    """(kind, text, line) of every token that is not a comment, whitespace or a literal's
    content (a string is one token of kind `literal`)."""
    pos, line = 0, 1
    while pos < len(text):
        m = TOKEN.match(text, pos)
        kind = m.lastgroup if m.lastgroup != "hashes" else "raw_string"
        if m.group("raw_string") is not None:
            kind = "raw_string"
        end = m.end()
        if kind == "block_comment":
            depth, end = 1, m.end()
            while depth and end < len(text):
                if text.startswith("/*", end):
                    depth, end = depth + 1, end + 2
                elif text.startswith("*/", end):
                    depth, end = depth - 1, end + 2
                else:
                    end += 1
        elif kind == "raw_string":
            close = '"' + m.group("hashes")
            found = text.find(close, m.end())
            end = len(text) if found < 0 else found + len(close)
            kind = "literal"
        elif kind in ("string", "char"):
            kind = "literal"
        if kind not in ("ws", "line_comment", "block_comment"):
            yield kind, text[pos:end], line
        line += text.count("\n", pos, end)
        pos = end


# --- Modules and their paths. ---


def top_modules(lib):
    """The modules declared in the crate root: {name: inline?}, and the root's re-exports
    {name: module} (from `pub use module::...` items)."""
    toks = list(tokens(lib.read_text()))
    modules, reexports = {}, {}
    depth = 0
    i = 0
    while i < len(toks):
        kind, text, _ = toks[i]
        if text == "{":
            depth += 1
        elif text == "}":
            depth -= 1
        elif depth == 0 and text == "mod" and i + 1 < len(toks) and toks[i + 1][0] == "ident":
            name = toks[i + 1][1]
            inline = i + 2 < len(toks) and toks[i + 2][1] == "{"
            modules[name] = inline
        elif depth == 0 and text == "use":
            j = i + 1
            if j < len(toks) and toks[j][1] == "crate" and toks[j + 1][1] == "::":
                j += 2
            if j < len(toks) and toks[j][0] == "ident":
                head = toks[j][1]
                for leaf in use_leaves(toks, j):
                    reexports[leaf] = head
        i += 1
    reexports = {k: v for k, v in reexports.items() if v in modules}
    return modules, reexports


def use_leaves(toks, j):
    """The names a `use` item starting at token j brings into scope (its last segments,
    or their `as` renames)."""
    leaves = []
    stack_last = [None]
    k = j
    while k < len(toks) and toks[k][1] != ";":
        text = toks[k][1]
        if text == "{":
            stack_last.append(None)
        elif text in (",", "}"):
            if stack_last[-1] not in (None, "self", "*"):
                leaves.append(stack_last[-1])
            stack_last[-1] = None
            if text == "}":
                stack_last.pop()
        elif text == "as" and k + 1 < len(toks):
            stack_last[-1] = toks[k + 1][1]
            k += 1
        elif toks[k][0] == "ident":
            stack_last[-1] = text
        k += 1
    if stack_last and stack_last[-1] not in (None, "self", "*"):
        leaves.append(stack_last[-1])
    return leaves


def files_of(src, name, inline):
    """The files of a top-level module, with each one's module path inside the crate."""
    if inline:
        return []
    out = []
    single = src / f"{name}.rs"
    folder = src / name
    if single.exists():
        out.append((single, [name]))
    elif (folder / "mod.rs").exists():
        out.append((folder / "mod.rs", [name]))
    if folder.is_dir():
        for f in sorted(folder.rglob("*.rs")):
            if f.name == "mod.rs" and f.parent == folder:
                continue
            rel = f.relative_to(src).with_suffix("")
            parts = list(rel.parts)
            if parts[-1] == "mod":
                parts = parts[:-1]
            out.append((f, parts))
    return out


def references(toks, base, top, modules, reexports):
    """(target top-level module, line) of every path in these tokens that leaves `top`.
    `base` is the module path of the file; inline `mod x { ... }` blocks extend it."""
    found = []
    for target, line in targets(toks, base):
        head = target[0]
        if head not in modules:
            head = reexports.get(head) if len(target) == 1 else None
            if head is None:
                continue
        if head != top:
            found.append((head, line))
    return found


def targets(toks, base):
    """(module path, line) of every `crate::` or `super::` path in these tokens, as a path
    from the crate root (its first segments: the item named may be the last one). `base` is
    the module path of the file; inline `mod x { ... }` blocks extend it."""
    found = []
    scopes = []  # (brace depth at which an inline module closes, its name)
    depth = 0
    i = 0
    n = len(toks)

    def here():
        return base + [name for _, name in scopes]

    def groups(k):
        """First segments of the items of a `{...}` group starting at token k."""
        heads, nest, expect = [], 0, True
        while k < n:
            text = toks[k][1]
            if text == "{":
                nest += 1
                if nest == 1:
                    expect = True
                    k += 1
                    continue
            elif text == "}":
                nest -= 1
                if nest == 0:
                    return heads
            elif text == "," and nest == 1:
                expect = True
                k += 1
                continue
            if expect and nest == 1 and toks[k][0] == "ident":
                heads.append(text)
            expect = False
            k += 1
        return heads

    while i < n:
        kind, text, line = toks[i]
        if text == "{":
            depth += 1
        elif text == "}":
            if scopes and scopes[-1][0] == depth:
                scopes.pop()
            depth -= 1
        elif text == "mod" and i + 2 < n and toks[i + 1][0] == "ident" and toks[i + 2][1] == "{":
            scopes.append((depth + 1, toks[i + 1][1]))
        prev = toks[i - 1][1] if i else ""
        if kind == "ident" and text in ("crate", "super") and prev != "::" and i + 1 < n and toks[i + 1][1] == "::":
            path = [] if text == "crate" else here()[:-1]
            k = i + 2
            if text == "super":
                while k + 1 < n and toks[k][1] == "super" and toks[k + 1][1] == "::":
                    path = path[:-1]
                    k += 2
            if k < n and toks[k][1] == "{":
                firsts = [path + [h] for h in groups(k)]
            elif k < n and toks[k][0] == "ident":
                firsts = [path + [toks[k][1]]]
            else:
                firsts = []
            for target in firsts:
                if target and target[0] not in ("self", "super"):
                    found.append((target, line))
        i += 1
    return found


def graph(src):
    """{module: {target: (file, line)}} of one crate."""
    lib = src / "lib.rs"
    if not lib.exists():
        return {}
    modules, reexports = top_modules(lib)
    edges = {m: {} for m in modules}
    # The root itself is not a node; its inline modules are, each read from its block.
    root_toks = list(tokens(lib.read_text()))
    for head, line, inline_name in inline_references(root_toks, modules, reexports):
        edges[inline_name].setdefault(head, (lib, line))
    for name, inline in modules.items():
        for path, base in files_of(src, name, inline):
            toks = list(tokens(path.read_text()))
            for head, line in references(toks, base, name, modules, reexports):
                edges[name].setdefault(head, (path, line))
    return edges


def file_graphs(src):
    """{folder module path: {file: {sibling file: (file, line)}}}: inside each folder module,
    the graph of its files and subfolders (the folder's own `mod.rs` is not a node: it is the
    module the others belong to). An edge `a -> b` is a path from inside `a` that names the
    file `b` (`super::b::...`, `crate::folder::b::...`)."""
    lib = src / "lib.rs"
    if not lib.exists():
        return {}
    modules, _ = top_modules(lib)
    files = []
    for name, inline in modules.items():
        files.extend(files_of(src, name, inline))
    by_path = {tuple(parts): path for path, parts in files}
    graphs = {}
    for folder in by_path:
        children = {parts[len(folder)] for parts in by_path if len(parts) > len(folder) and parts[: len(folder)] == folder}
        if not children:
            continue
        edges = {c: {} for c in children}
        for parts, path in by_path.items():
            if len(parts) <= len(folder) or parts[: len(folder)] != folder:
                continue
            child = parts[len(folder)]
            for target, line in targets(list(tokens(path.read_text())), list(parts)):
                if len(target) <= len(folder) or tuple(target[: len(folder)]) != folder:
                    continue
                head = target[len(folder)]
                # A sibling named by its path; an item of the folder's own (`super::X`,
                # re-exported or not) is the folder's vocabulary, not an edge.
                if head in children and head != child:
                    edges[child].setdefault(head, (path, line))
        graphs["::".join(folder)] = edges
    return graphs


def inline_references(root_toks, modules, reexports):
    """References made from inside the root's inline modules (`pub mod prelude { ... }`)."""
    out = []
    depth = 0
    i = 0
    n = len(root_toks)
    while i < n:
        text = root_toks[i][1]
        if text == "{":
            depth += 1
        elif text == "}":
            depth -= 1
        elif depth == 0 and text == "mod" and i + 2 < n and root_toks[i + 1][0] == "ident" and root_toks[i + 2][1] == "{":
            name = root_toks[i + 1][1]
            nest, k = 0, i + 2
            while k < n:
                if root_toks[k][1] == "{":
                    nest += 1
                elif root_toks[k][1] == "}":
                    nest -= 1
                    if nest == 0:
                        break
                k += 1
            body = root_toks[i + 3 : k]
            for head, line in references(body, [name], name, modules, reexports):
                out.append((head, line, name))
            i = k
        i += 1
    return out


def cycles(edges):
    """Every elementary cycle (Johnson's idea, small graphs), each starting at its least node."""
    found = []
    nodes = sorted(edges)
    for start in nodes:
        stack = [(start, [start])]
        while stack and len(found) < MAX_CYCLES:
            node, path = stack.pop()
            for nxt in sorted(edges.get(node, {}), reverse=True):
                if nxt == start:
                    found.append(path + [start])
                elif nxt > start and nxt not in path:
                    stack.append((nxt, path + [nxt]))
    return found


def long_files(src):
    out = []
    for f in sorted(src.rglob("*.rs")):
        rel = f.relative_to(src)
        if f.name == "tests.rs" or f.name.endswith("_tests.rs") or "tests" in rel.parts[:-1]:
            continue
        lines = f.read_text().splitlines()
        if len(lines) <= LONGEST:
            continue
        stated = any(l.lstrip().startswith("//!") and "lines" in l for l in lines[:HEADER_LINES])
        if not stated:
            out.append((f, len(lines)))
    return out


def main():
    failed = False
    for name, src in crates():
        edges = graph(src)
        found = cycles(edges)
        count = sum(len(t) for t in edges.values())
        print(f"{name} ({src.relative_to(ROOT)}): {len(edges)} top-level modules, {count} edges, "
              f"{len(found)} cycle{'s' if len(found) != 1 else ''}")
        for cycle in found:
            failed = True
            print("  cycle: " + " -> ".join(cycle))
            for a, b in zip(cycle, cycle[1:]):
                path, line = edges[a][b]
                print(f"    {a} -> {b}: {path.relative_to(ROOT)}:{line}")
        for folder, file_edges in sorted(file_graphs(src).items()):
            for cycle in cycles(file_edges):
                failed = True
                print(f"  cycle between the files of `{folder}`: " + " -> ".join(cycle))
                for a, b in zip(cycle, cycle[1:]):
                    path, line = file_edges[a][b]
                    print(f"    {a} -> {b}: {path.relative_to(ROOT)}:{line}")
        for path, count in long_files(src):
            failed = True
            print(f"  long file without a stated reason: {path.relative_to(ROOT)} ({count} lines)")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
