#!/usr/bin/env python3
"""house.py: measures the structure of corelog's own code (Python standard library only).

Per crate (server/src, client/src, runtime/src, history/src, loadgen/src, benches/src, the Python package
client/python/src/corelog; tests left out), one module = one file:
  circles     groups of modules that import each other (strongly connected components),
              each shown as one cycle `a -> b -> a` with the file:line of every arrow,
              then all members of the group.
  up          arrows back up: an import of a module of a HIGHER layer in LAYERS below
              (lower = more basic), `from (L) -> to (L)` at the first reference.
              Modules no layer covers are listed under `unlayered:` (not an error).
  files       files over --max-file-lines (default 600, every line counted).
  functions   Rust functions over --max-fn-lines (default 100, `fn` line to closing
              brace), #[cfg(test)] code left out.
  exceptions  a file whose first line, or a function whose `fn` line or comment and
              attribute lines right above it, has a comment `house: <reason>`: listed
              with the reason instead of counted. E.g. above a long fn:
              // house: one match over every request kind, split would hide the order
Rust edges: `crate::`, `super::`, `self::` paths (use trees and inline code), paths
through a child module (`use cell::X` in coord/mod.rs) or a module brought in by `use`
(`use crate::wal;` .. `wal::batch::MAX`), and in a binary's module tree (main.rs,
bin/x.rs, bin/x/main.rs with the modules beside it) the crate's library name
(`corelog_server::`), each resolved to the longest prefix naming a module file
(`crate::wal::Log` -> wal = wal/mod.rs). `mod x;` is not an import, and arrows
between a directory module and its own descendants are not counted (one unit); a
crate root (lib.rs, main.rs, bin/x/main.rs) is no such unit with its modules. Comments,
strings, char literals and #[cfg(test)] items/files are stripped before scanning.
Python edges: relative and `corelog.` imports, also those inside a function or under
TYPE_CHECKING (marked so: they still tie the modules together).

Output: a summary line of counts, then circles, arrows up, files and functions over
(longest first), exceptions, unlayered modules, warnings (brackets that do not balance).
Usage: python3 tools/house.py [--check] [--json] [--crate NAME]... [--max-file-lines N]
[--max-fn-lines N]; --crate: server, client, loadgen, benches, client/python (default
all); --check exits 1 while a circle, arrow up, file over or function over remains.
"""
import argparse, ast, bisect, json, os, re, sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

# Layers per crate: module-path prefix -> layer (lower = more basic; a module may import
# its own layer and lower ones). The longest matching prefix wins ("replica::handshake"
# over "replica"). "crate" is lib.rs, "main" is main.rs, "bin::x" is src/bin/x.rs or
# src/bin/x/main.rs, "bin::x::m" is a module of the latter (src/bin/x/m.rs, m/mod.rs);
# Python modules are dotted ("corelog._client", "corelog.__init__").
LAYERS = {
    "server": {
        # 0: basics that know nothing of a shard: lib.rs (`fatal`), wake-ups, timeouts,
        #    byte decoders, histograms, CPUs, logging, settings, sans-IO access policy,
        #    and the atomics the control and data planes share (coord::cell)
        "crate": 0, "sync": 0, "watchdog": 0, "le": 0, "hist": 0, "cpus": 0, "logging": 0,
        "config": 0, "principal": 0, "authz": 0, "access": 0, "coord::cell": 0,
        # re-executing the process (a role change, a seed): both planes call it
        "reexec": 0,
        # 1: transport: TLS settings and I/O, kernel TLS, peer names, the fd limit
        "net::tls": 1, "net::tls_io": 1, "net::ktls": 1, "net::peer": 1, "net::fds": 1,
        # 2: metrics handles and the /metrics, /health endpoints; the probe that reads them
        "metrics": 2, "probe": 2,
        # 3: storage: the write-ahead log and the per-shard epoch files
        "wal": 3, "control": 3,
        # 4: what a shard derives from its records (consumer groups too), and its on-disk forms
        "index": 4, "streams": 4, "producers": 4, "streamread": 4, "checkpoint": 4,
        "snapshot": 4, "group": 4,
        # 5: the start of a shard's storage: which checkpoint and segments to trust
        "boot": 5,
        # 6: pure replica logic (no I/O): recent batches, handshake decisions
        "replica::recent": 6, "replica::handshake": 6,
        # 7: the shard: admission, group commit, acks
        "shard": 7,
        # 8: what runs beside a shard's writes: sealing, retention, scrubbing, the
        #    consumer groups' streams
        "seal": 8, "retention": 8, "scrub": 8, "grouplog": 8,
        # 9: replication I/O: leader link, follower port, catch-up, seeding
        "replica": 9,
        # 10: client connections: listeners, connections, answers, certificate reloads
        "net": 10,
        # 11: the control plane: coordinator mode (etcd), graceful shutdown
        "coord": 11, "shutdown": 11,
        # 12: a node: start-up and wiring of everything above
        "node": 12,
        # 13: what a tool, not a node, runs: a backup over the client port, certificates
        "backup": 13, "certs": 13,
        # 14-16: the `corelog` binary (src/bin/corelog), above the whole library: 14 the
        # client subcommands and `inspect`; 15 the tools built on them (`workload`,
        # `quickstart`); 16 main.rs, the command line that dispatches to all of them
        "bin::corelog::cli": 14, "bin::corelog::inspect": 14, "bin::corelog::workload": 15,
        "bin::corelog::quickstart": 15, "bin::corelog": 16,
    },
    # client: 0 rustls settings; 1 the wire format; 2 who leads; 3 the client
    # (connections, retries, requests); 4 the APIs on a client; 5 lib.rs (re-exports)
    "client": {"tls": 0, "record": 1, "codec": 1, "leadership": 2, "client": 3,
               "producer": 4, "streams": 4, "subscribe": 4, "group": 4, "crate": 5},
    # loadgen: 0 lib.rs (log label, parsing), /proc and /metrics readers; 1 one run;
    # 2 a run's results; 3 tables and plots; 4 a sweep of runs; 5 the command line
    "loadgen": {"crate": 0, "procstat": 0, "scrape": 0, "run": 1, "merge": 2, "result": 2,
                "report": 3, "svg": 3, "sweep": 4, "main": 5},
    # runtime: 0 wake-ups, CPUs, open files, the watchdog; 1 kernel TLS; 2 TLS I/O over it
    "runtime": {"crate": 0, "sync": 0, "cpus": 0, "fds": 0, "watchdog": 0, "ktls": 1, "tls_io": 2},
    # history: 0 lib.rs (re-exports); 1 the recorded run; 2 reading a log back; 3 the
    # checker; 4 Porcupine
    "history": {"run": 1, "readback": 2, "check": 3, "porcupine": 4, "crate": 5},
    # benches: 0 helpers shared by the benchmark binaries; 1 the binaries
    "benches": {"crate": 0, "pair_wire": 0, "bin": 1},
    # Python: 0 the wire format; 1 exceptions; 2 public value types; 3 who leads; 4 one
    # connection; 5 retry decisions; 6 producers, subscriptions, tails; 7 the asyncio
    # client; 8 the public asyncio API; 9 the blocking API; 10 the package's re-exports
    "client/python": {"corelog.codec": 0, "corelog.errors": 1, "corelog.types": 2,
                      "corelog._leadership": 3, "corelog._connection": 4, "corelog._retry": 5,
                      "corelog._producer": 6, "corelog._push": 6, "corelog._group": 6, "corelog._client": 7,
                      "corelog.aio": 8, "corelog.sync": 9, "corelog.__init__": 10},
}

RUST_CRATES = ["server", "client", "runtime", "history", "loadgen", "benches"]
PY_PACKAGE = ("client/python", "client/python/src", "corelog")  # (crate, sys.path dir, package)


# ---------------------------------------------------------------- Rust lexing
def blank(s): return re.sub(r"[^\n]", " ", s)
def word(ch): return ch.isalnum() or ch == "_"

def strip_rust(text):
    """Blank comments and the insides of string/char literals, keeping newlines (offsets
    and line numbers stay valid). Returns (code, {line: comment text})."""
    out, comments, i, n = [], {}, 0, len(text)
    line = lambda k: text.count("\n", 0, k) + 1
    while i < n:
        c, prev = text[i], text[i - 1] if i else " "
        if text.startswith("//", i) or text.startswith("/*", i):
            if text[i + 1] == "/": j = text.find("\n", i) % (n + 1)
            else:  # block comments nest
                depth, j = 1, i + 2
                while j < n and depth:
                    step = text[j:j + 2]
                    depth += (step == "/*") - (step == "*/"); j += 2 if step in ("/*", "*/") else 1
            for k, part in enumerate(text[i:j].split("\n")):
                comments[line(i) + k] = comments.get(line(i) + k, "") + part
            out.append(blank(text[i:j])); i = j; continue
        raw = None if word(prev) else re.match(r'[bc]?r(#*)"', text[i:i + 300])
        if raw:  # r"..", r#".."#, br"..", cr".."
            close = '"' + raw.group(1)
            end = text.find(close, i + raw.end()); end = n if end < 0 else end
            out.append(raw.group(0) + blank(text[i + raw.end():end]) + close); i = end + len(close); continue
        if c == '"' or (c in "bc" and text[i + 1:i + 2] == '"' and not word(prev)):
            j = i + (1 if c == '"' else 2)
            while j < n and text[j] != '"': j += 2 if text[j] == "\\" else 1
            out.append(text[i:i + (1 if c == '"' else 2)] + blank(text[i + (1 if c == '"' else 2):j]) + '"')
            i = j + 1; continue
        if c == "'" or (c == "b" and text[i + 1:i + 2] == "'" and not word(prev)):
            q = i if c == "'" else i + 1
            if text[q + 1:q + 2] == "\\":                       # '\n', '\'', '\u{7b}'
                j = q + 3
                while j < n and text[j] not in "'\n": j += 1
                out.append(text[i:q + 1] + blank(text[q + 1:j]) + "'"); i = j + 1; continue
            if text[q + 2:q + 3] == "'":                        # 'x', '"', '{'
                out.append(text[i:q + 1] + " '"); i = q + 3; continue
            out.append(text[i:q + 1]); i = q + 1; continue      # a lifetime or label: 'a, 'static
        out.append(c); i += 1
    return "".join(out), comments

def match_close(code, i, open_c="{", close_c="}"):
    """Index of the bracket closing the one at code[i]."""
    depth = 0
    for j in range(i, len(code)):
        depth += (code[j] == open_c) - (code[j] == close_c)
        if depth == 0: return j
    return len(code) - 1

TEST_ATTR = re.compile(r"#\[cfg\(([^\]]*)\)\]")
VIS = r"(?:pub(?:\([^)]*\))?\s+)?"
ITEM = re.compile(r"\s*(?:#\[[^\]]*\]\s*)*" + VIS +
                  r"(?:mod|fn|impl|use|struct|enum|const|static|type|trait|async|unsafe|extern|macro_rules)\b")

def item_end(code, j, item):
    """Where what starts at j ends: an item at its `;` or its body's closing brace; a
    statement, field or variant at its `;` or `,`, or before the enclosing closer."""
    depth, block = 0, code[j:].lstrip().startswith("{")
    field = not item and re.match(r"\s*" + VIS + r"\w+\s*:[^:]", code[j:])
    while j < len(code):
        ch = code[j]
        if field and ch in "<>" and code[j - 1] not in "-=": depth += 1 if ch == "<" else -1
        if depth == 0 and (ch == ";" or (ch == "," and not item)): return j
        if depth == 0 and ch == "{" and (item or block or code[:j].rstrip().endswith("!")):
            return match_close(code, j)  # an item's body, a block, a `macro! { .. }`
        depth += (ch in "([{") - (ch in ")]}")
        if depth < 0: return j - 1
        j += 1
    return j

def blank_tests(code):
    """Blank what #[cfg(test)] (or all(test, ..)) covers: a `mod tests {..}`, fn, `use`,
    statement or field. Returns (code, names declared `#[cfg(test)] mod x;`)."""
    test_children = set()
    for m in reversed(list(TEST_ATTR.finditer(code))):
        if not re.search(r"\btest\b", m.group(1)) or re.search(r"not\s*\(\s*test", m.group(1)): continue
        end = item_end(code, m.end(), bool(ITEM.match(code, m.end())))
        decl = re.match(r"\s*" + VIS + r"mod\s+(\w+)\s*;", code[m.end():end + 1])
        if decl: test_children.add(decl.group(1))
        code = code[:m.start()] + blank(code[m.start():end + 1]) + code[end + 1:]
    return code, test_children


# ---------------------------------------------------------------- Rust modules and edges
class Module:
    """One .rs file. tree: which module tree `crate::` means in it ("lib", "main" or a
    bin's name); segs: its path in that tree; name: how it is printed."""
    def __init__(self, crate, name, path, tree, segs):
        self.crate, self.name, self.path, self.tree, self.segs = crate, name, path, tree, segs
        self.raw = open(path, encoding="utf-8").read()
        self.code, self.comments = strip_rust(self.raw)
        self.code, self.test_children = blank_tests(self.code)
        self.nl = [k for k, ch in enumerate(self.code) if ch == "\n"]

    def line_of(self, offset): return bisect.bisect_left(self.nl, offset) + 1

def rust_modules(crate):
    src = os.path.join(ROOT, crate, "src")
    has_lib, mods = os.path.exists(os.path.join(src, "lib.rs")), []
    for dirpath, _, files in sorted(os.walk(src)):
        for f in sorted(x for x in files if x.endswith(".rs")):
            r = os.path.relpath(os.path.join(dirpath, f), src)[:-3].split(os.sep)
            if r == ["lib"]: tree, segs, name = "lib", [], "crate"
            elif r == ["main"] and has_lib: tree, segs, name = "main", [], "main"
            elif r[0] == "bin" and len(r) == 2: tree, segs, name = "::".join(r), [], "::".join(r)
            elif r[0] == "bin":  # bin/x/main.rs and its modules: a module tree of its own
                tree, rest = "bin::" + r[1], r[2:]
                segs = [] if rest == ["main"] else (rest[:-1] if rest[-1] == "mod" else rest)
                name = "::".join([tree] + segs)
            else:
                tree, segs = ("lib" if has_lib else "main"), (r[:-1] if r[-1] == "mod" else r)
                name = "::".join(segs) or tree.replace("lib", "crate")
            mods.append(Module(crate, name, os.path.join(dirpath, f), tree, segs))
    tests = {(m.tree, tuple(m.segs + [c])) for m in mods for c in m.test_children}
    return [m for m in mods if (m.tree, tuple(m.segs)) not in tests]

def lib_name(crate):
    try: toml = open(os.path.join(ROOT, crate, "Cargo.toml"), encoding="utf-8").read()
    except OSError: return None
    for section in ("lib", "package"):
        m = re.search(r"^\[" + section + r"\][^\[]*?^name\s*=\s*\"([^\"]+)\"", toml, re.M | re.S)
        if m: return m.group(1).replace("-", "_")

def expand_use(tree):
    """`a::{b, c::{d as e, self}}` -> [('a::b', 'b'), ('a::c::d', 'e'), ('a::c', 'c')]."""
    tree = re.sub(r"\s+as\s+", "@", tree.strip())
    k = tree.find("{")
    if k < 0:
        path, _, alias = re.sub(r"\s+", "", tree).partition("@")
        return [(path, alias or path.split("::")[-1])]
    prefix, inner, parts, depth, cur = re.sub(r"\s+", "", tree[:k]).rstrip(":"), tree[k + 1:match_close(tree, k)], [], 0, ""
    for ch in inner:
        if ch == "," and depth == 0: parts.append(cur); cur = ""; continue
        depth += (ch == "{") - (ch == "}"); cur += ch
    out = []
    for q, alias in (x for p in filter(str.strip, parts + [cur]) for x in expand_use(p)):
        out.append((prefix, prefix.split("::")[-1] if alias == "self" else alias) if q == "self"
                   else (prefix + "::" + q, alias))
    return out

USE = re.compile(r"\buse\s+([^;]+);")
PATH = re.compile(r"(?<![\w:$])\$?(\w+(?:::\w+)+)")

def rust_edges(mods, crate):
    """[(from, to, file, line)] of one crate, in file order."""
    lib, trees = lib_name(crate), {}
    for m in mods: trees.setdefault(m.tree, {})[tuple(m.segs)] = m.name

    def absolute(m, segs, aliases):
        """(module tree, absolute segments) of a path, or None when it leaves the crate."""
        tree = trees[m.tree]
        if segs[0] == "crate": return tree, segs[1:]
        if segs[0] == lib and m.tree != "lib" and "lib" in trees: return trees["lib"], segs[1:]
        if segs[0] in ("self", "super"):
            base, segs = list(m.segs), (segs[1:] if segs[0] == "self" else segs)
            while segs and segs[0] == "super": base, segs = base[:-1], segs[1:]
            return tree, base + segs
        if segs[0] in aliases: return aliases[segs[0]][0], aliases[segs[0]][1] + segs[1:]
        if tuple(m.segs + segs[:1]) in tree: return tree, m.segs + segs  # a child module
        return None

    edges = []
    for m in mods:
        refs, aliases = [], {}  # refs: (offset, segments)
        for u in USE.finditer(m.code):
            for path, alias in expand_use(u.group(1)):
                segs = [x for x in path.split("::") if x]
                if path.startswith("::") or not segs: continue  # an external crate
                refs.append((u.start(), segs))
                found = absolute(m, segs, {})
                if found and tuple(found[1]) in found[0]: aliases[alias] = found  # (its tree, its path)
        rest = USE.sub(lambda u: blank(u.group(0)), m.code)
        refs += [(x.start(), x.group(1).split("::")) for x in PATH.finditer(rest)]
        for off, segs in sorted(refs, key=lambda r: r[0]):
            found = absolute(m, segs, aliases)
            if not found: continue
            tree, full = found
            to = next(tree[tuple(full[:k])] for k in range(len(full), -1, -1) if tuple(full[:k]) in tree)
            if to != m.name: edges.append((m.name, to, rel(m.path), m.line_of(off)))
    return edges

def rel(p): return os.path.relpath(p, ROOT)


# ---------------------------------------------------------------- Rust sizes
FN = re.compile(r"\bfn\s+(\w+)")
IMPL = re.compile(r"^[ \t]*" + VIS + r"(?:unsafe\s+)?(impl|trait)\b([^{;]*)\{", re.M)
HOUSE = re.compile(r"house:\s*(.+?)\s*(?:\*/)?$")

def impl_spans(code):
    """(open, close, type name) of every impl/trait block, for names like `Conn::open_now`."""
    spans = []
    for m in IMPL.finditer(code):
        head = re.sub(r"^\s*<.*?>\s", "", m.group(2)) if m.group(1) == "impl" else m.group(2)
        name = re.findall(r"\w+", re.sub(r"<.*", "", head.split(" for ")[-1].split(" where ")[0]).split("::")[-1])
        spans.append((m.end() - 1, match_close(code, m.end() - 1), name[0] if name else "?"))
    return spans

def exception_reason(m, fn_line):
    """A `house: reason` comment on the fn line or on the comment/attribute lines above it."""
    lines, attr = m.code.split("\n"), set()
    for a in re.finditer(r"#!?\[", m.code):
        attr.update(range(m.line_of(a.start()), m.line_of(match_close(m.code, a.end() - 1, "[", "]")) + 1))
    ln = fn_line
    while ln >= 1 and (ln == fn_line or ln in attr or (ln in m.comments and not lines[ln - 1].strip())):
        hit = HOUSE.search(m.comments.get(ln, ""))
        if hit: return hit.group(1)
        ln -= 1
    return None

def rust_sizes(m, max_file, max_fn):
    """(files over, functions over, exceptions) of one module."""
    over_files, over_fns, exc = [], [], []
    n_lines = len(m.raw.splitlines())
    if n_lines > max_file:
        hit, rec = HOUSE.search(m.comments.get(1, "")), {"file": rel(m.path), "lines": n_lines}
        exc.append(dict(rec, reason=hit.group(1))) if hit else over_files.append(rec)
    spans = impl_spans(m.code)
    for f in FN.finditer(m.code):
        j, depth = f.end(), 0
        while j < len(m.code) and not (depth == 0 and m.code[j] in "{;"):
            depth += (m.code[j] in "([") - (m.code[j] in ")]"); j += 1
        if j >= len(m.code) or m.code[j] == ";": continue  # no body
        start, end = m.line_of(f.start()), m.line_of(match_close(m.code, j))
        owner = [s[2] for s in spans if s[0] < f.start() < s[1]][-1:]
        rec = {"file": rel(m.path), "line": start, "name": "::".join([m.name] + owner + [f.group(1)]),
               "lines": end - start + 1}
        if rec["lines"] > max_fn:
            reason = exception_reason(m, start)
            exc.append(dict(rec, reason=reason)) if reason else over_fns.append(rec)
    return over_files, over_fns, exc


# ---------------------------------------------------------------- Python package
def py_graph(max_file):
    """(module names, edges, files over, exceptions) of the Python package."""
    crate, sysdir, pkg = PY_PACKAGE
    files = {}
    for dirpath, _, fs in os.walk(os.path.join(ROOT, sysdir, pkg)):
        for f in (x for x in fs if x.endswith(".py")):
            parts = os.path.relpath(os.path.join(dirpath, f), os.path.join(ROOT, sysdir))[:-3].split(os.sep)
            files[tuple(parts[:-1] if parts[-1] == "__init__" else parts)] = os.path.join(dirpath, f)
    def name(key):  # a package is named by its __init__ file, so no layer prefix covers its modules
        return ".".join(key) + (".__init__" if files[key].endswith("__init__.py") else "")
    def resolve(parts):
        return next((name(tuple(parts[:k])) for k in range(len(parts), 0, -1) if tuple(parts[:k]) in files), None)
    edges, over, exc = [], [], []
    for mod, path in sorted(files.items()):
        src = open(path, encoding="utf-8").read()
        tree = ast.parse(src, path)
        parents = {c: p for p in ast.walk(tree) for c in ast.iter_child_nodes(p)}
        for node in ast.walk(tree):
            targets = []
            if isinstance(node, ast.Import): targets = [resolve(a.name.split(".")) for a in node.names]
            elif isinstance(node, ast.ImportFrom):
                package = list(mod if path.endswith("__init__.py") else mod[:-1])
                base = (package[:len(package) - node.level + 1] if node.level else []) + (node.module or "").split(".")
                base = [x for x in base if x]
                targets = [resolve(base + [a.name]) if tuple(base + [a.name]) in files else resolve(base) for a in node.names]
            note, p = "", parents.get(node)
            while p is not None and not note:
                if isinstance(p, (ast.FunctionDef, ast.AsyncFunctionDef)): note = " (inside a function)"
                elif isinstance(p, ast.If) and "TYPE_CHECKING" in ast.dump(p.test): note = " (TYPE_CHECKING)"
                p = parents.get(p)
            for t in sorted(set(filter(None, targets)) - {name(mod)}):
                edges.append((name(mod), t, rel(path), f"{node.lineno}{note}"))
        if len(src.splitlines()) > max_file:
            rec, hit = {"file": rel(path), "lines": len(src.splitlines())}, re.search(r"#.*house:\s*(.+)", src.split("\n")[0])
            exc.append(dict(rec, reason=hit.group(1))) if hit else over.append(rec)
    return [name(k) for k in files], edges, over, exc


# ---------------------------------------------------------------- graph checks
def tarjan(nodes, adj):
    """Strongly connected components with more than one node (iterative Tarjan)."""
    index, low, on, stack, sccs = {}, {}, set(), [], []
    def visit(v):
        index[v] = low[v] = len(index); stack.append(v); on.add(v)
        return (v, iter(sorted(adj.get(v, ()))))
    for root in nodes:
        if root in index: continue
        work = [visit(root)]
        while work:
            v, it = work[-1]
            w = next(it, None)
            if w is not None:
                if w not in index: work.append(visit(w))
                elif w in on: low[v] = min(low[v], index[w])
                continue
            work.pop()
            if work: low[work[-1][0]] = min(low[work[-1][0]], low[v])
            if low[v] == index[v]:
                comp = [stack.pop()]
                while comp[-1] != v: comp.append(stack.pop())
                on.difference_update(comp)
                if len(comp) > 1: sccs.append(sorted(comp))
    return sccs

def one_cycle(scc, adj):
    """A shortest cycle through the SCC's first member (breadth-first inside the SCC)."""
    start, members, prev, queue = scc[0], set(scc), {}, [scc[0]]
    while queue:
        v = queue.pop(0)
        for w in sorted(adj.get(v, set()) & members):
            if w == start:
                path = [v]
                while path[-1] != start: path.append(prev[path[-1]])
                return path[::-1] + [start]
            if w not in prev: prev[w] = v; queue.append(w)

def layer_of(crate, name):
    table = LAYERS.get(crate, {})
    keys = [k for k in table if name == k or name.startswith(k + "::") or name.startswith(k + ".")]
    return table[max(keys, key=len)] if keys else None

def kin(a, b, roots):
    """A directory module and its descendants are one unit: the parent declares and
    re-exports its children, and they use its types (`shard` and `shard::commit`). A
    crate root is not: its modules are its parts, and an arrow back to it goes up."""
    return any(x not in roots and y.startswith(x + "::") for x, y in ((a, b), (b, a)))

def analyse(crate, names, edges, roots):
    """(circles, arrows up, unlayered modules) of one crate's graph; roots: the names of
    its crate roots (lib.rs, main.rs, the binaries)."""
    adj, first = {}, {}
    for a, b, f, ln in edges:
        if kin(a, b, roots): continue
        adj.setdefault(a, set()).add(b); first.setdefault((a, b), f"{f}:{ln}")
    # A parent holds its children: an arrow into a child is an arrow into the unit, so
    # `seal -> shard -> shard::commit -> seal` is a circle.
    for n in names:
        parent = n.rsplit("::", 1)[0] if "::" in n else None
        if parent in names and parent not in roots:
            adj.setdefault(parent, set()).add(n); first.setdefault((parent, n), "(holds its child)")
    circles = []
    for scc in tarjan(sorted(names), adj):
        cyc = one_cycle(scc, adj)
        circles.append({"crate": crate, "cycle": cyc, "members": scc, "at": [first[e] for e in zip(cyc, cyc[1:])]})
    ups = [{"crate": crate, "from": a, "from_layer": layer_of(crate, a), "to": b, "to_layer": layer_of(crate, b),
            "at": at} for (a, b), at in sorted(first.items()) if at != "(holds its child)"
           if None not in (layer_of(crate, a), layer_of(crate, b)) and layer_of(crate, b) > layer_of(crate, a)]
    unlayered = sorted(n for n in names if layer_of(crate, n) is None) if crate in LAYERS else []
    return circles, ups, unlayered


# ---------------------------------------------------------------- main
def measure(args):
    """Everything, as lists of dicts (what --json prints)."""
    want = lambda c: not args.crate or c in args.crate
    res = {k: [] for k in ("circles", "up", "files_over", "functions_over", "exceptions", "warnings")}
    res["unlayered"], graphs = {}, []
    for crate in filter(want, RUST_CRATES):
        mods = rust_modules(crate)
        roots = {m.name for m in mods if not m.segs}
        graphs += [(crate, [m.name for m in mods], rust_edges(mods, crate), roots)] if mods else []
        for m in mods:
            if any(m.code.count(o) != m.code.count(c) for o, c in ("{}", "()", "[]")):
                res["warnings"].append(f"{rel(m.path)}: brackets do not balance (mid-edit?); its function lengths may be wrong")
            fo, fn, ex = rust_sizes(m, args.max_file_lines, args.max_fn_lines)
            res["files_over"] += fo; res["functions_over"] += fn; res["exceptions"] += ex
    if want(PY_PACKAGE[0]):
        names, edges, over, exc = py_graph(args.max_file_lines)
        graphs += [(PY_PACKAGE[0], names, edges, set())] if names else []
        res["files_over"] += over; res["exceptions"] += exc
    for crate, names, edges, roots in graphs:
        c, u, nl = analyse(crate, names, edges, roots)
        res["circles"] += c; res["up"] += u
        if nl: res["unlayered"][crate] = nl
    res["functions_over"].sort(key=lambda f: -f["lines"])
    res["summary"] = {k: len(res[k]) for k in ("circles", "up", "files_over", "functions_over", "exceptions")}
    return res

def report(res, args):
    n = res["summary"]
    print(f"circles {n['circles']} | arrows up {n['up']} | files over {args.max_file_lines}: {n['files_over']} | "
          f"functions over {args.max_fn_lines}: {n['functions_over']} | exceptions {n['exceptions']}\n")
    for c in res["circles"]:
        print(f"circle [{c['crate']}]: " + " -> ".join(c["cycle"]))
        for a, b, at in zip(c["cycle"], c["cycle"][1:], c["at"]): print(f"    {a} -> {b}  at {at}")
        print("    members: " + ", ".join(c["members"]))
    for u in res["up"]:
        print(f"up [{u['crate']}]: {u['from']} ({u['from_layer']}) -> {u['to']} ({u['to_layer']})  at {u['at']}")
    for f in res["files_over"]: print(f"file over: {f['file']}  {f['lines']} lines")
    for f in res["functions_over"]: print(f"function over: {f['file']}:{f['line']}  {f['name']}  {f['lines']} lines")
    if res["exceptions"]: print("exceptions:")
    for e in res["exceptions"]:
        where = f"{e['file']}:{e['line']}  {e['name']}" if "name" in e else e["file"]
        print(f"    {where}  {e['lines']} lines  -- {e['reason']}")
    for crate, names in res["unlayered"].items(): print(f"unlayered [{crate}]: " + ", ".join(names))
    for w in res["warnings"]: print(f"warning: {w}")

def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--check", action="store_true", help="exit 1 while a circle, arrow up or size overrun remains")
    ap.add_argument("--json", action="store_true", help="machine-readable output")
    ap.add_argument("--crate", action="append", choices=RUST_CRATES + [PY_PACKAGE[0]], help="only this crate (repeatable)")
    ap.add_argument("--max-file-lines", type=int, default=600)
    ap.add_argument("--max-fn-lines", type=int, default=100)
    args = ap.parse_args()
    res = measure(args)
    print(json.dumps(res, indent=1)) if args.json else report(res, args)
    n = res["summary"]
    return 1 if args.check and n["circles"] + n["up"] + n["files_over"] + n["functions_over"] else 0

if __name__ == "__main__":
    sys.exit(main())
