# SPDX-License-Identifier: MIT
"""The Python package's layers (docs/LAYOUT.md), checked on its source: no
import circle anywhere, and no module imports one of a higher layer. Every
import counts, those inside functions too (a lazy import is still a
dependency). The C side's counterpart is tests/check_layering.sh."""

import ast
import os

import pytest

PKG_DIR = os.path.join(os.path.dirname(__file__), "..", "..", "engine-hooks",
                       "v05")

# Layer of each top-level part of the package; a module may import its own
# layer and those below. The package's __init__ and v05.ctl are the public
# face of the core; v05.verl and v05.verl_rollout are the names verl
# configurations already use for the trainers' modules.
LAYERS = {"core": 0, "__init__": 0, "ctl": 0, "_version": 0,
          "engines": 1, "trainers": 2, "servers": 2, "verl": 2,
          "verl_rollout": 2, "demos": 3}


def modules(pkg_dir):
    """{dotted name: path} of every module of the package in pkg_dir."""
    out = {}
    root = os.path.dirname(os.path.abspath(pkg_dir))
    for d, dirs, files in os.walk(pkg_dir):
        dirs[:] = [x for x in dirs if x != "__pycache__"]
        for f in files:
            if not f.endswith(".py"):
                continue
            rel = os.path.relpath(os.path.join(d, f), root)[:-3]
            parts = rel.split(os.sep)
            if parts[-1] == "__init__":
                parts.pop()
            out[".".join(parts)] = os.path.join(d, f)
    return out


def imports_of(name, path, known):
    """The package's modules that module `name` imports."""
    is_pkg = path.endswith("__init__.py")
    here = name.split(".") if is_pkg else name.split(".")[:-1]
    with open(path) as f:
        tree = ast.parse(f.read(), path)
    out = set()

    def add(target):
        # The innermost module the name reaches (a from-import may name a
        # submodule or an attribute of a module).
        parts = target.split(".")
        while parts and ".".join(parts) not in known:
            parts.pop()
        if parts:
            out.add(".".join(parts))

    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for a in node.names:
                add(a.name)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = here[:len(here) - (node.level - 1)]
                mod = ".".join(base + ([node.module] if node.module else []))
            else:
                mod = node.module or ""
            for a in node.names:
                add(f"{mod}.{a.name}")
            add(mod)
    out.discard(name)
    return out


def graph(pkg_dir):
    known = modules(pkg_dir)
    return {n: imports_of(n, p, known) for n, p in known.items()}


def cycles(g):
    """Strongly connected components of more than one module (Tarjan)."""
    index, low, stack, on, out = {}, {}, [], set(), []
    counter = [0]

    def visit(v):
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in sorted(g.get(v, ())):
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
                out.append(sorted(comp))

    for v in sorted(g):
        if v not in index:
            visit(v)
    return out


def layer(name):
    parts = name.split(".")
    return LAYERS[parts[1] if len(parts) > 1 else "__init__"]


def upward(g):
    return sorted((a, b) for a, deps in g.items() for b in deps
                  if layer(b) > layer(a))


def test_the_checker_finds_what_it_looks_for():
    g = {"v05.core.a": {"v05.core.b"}, "v05.core.b": {"v05.core.a"},
         "v05.core.c": {"v05.engines.d"}, "v05.engines.d": set()}
    assert cycles(g) == [["v05.core.a", "v05.core.b"]]
    assert upward(g) == [("v05.core.c", "v05.engines.d")]


def test_every_module_has_a_layer():
    names = modules(PKG_DIR)
    assert len(names) > 20
    for n in names:
        assert layer(n) in LAYERS.values(), n


def test_no_import_circle():
    assert cycles(graph(PKG_DIR)) == []


def test_no_module_imports_a_higher_layer():
    assert upward(graph(PKG_DIR)) == []


@pytest.mark.parametrize("name", sorted(modules(PKG_DIR)))
def test_every_file_opens_with_its_job(name):
    """A module's docstring says what it is for (an empty package marker
    would still say which layer it is)."""
    with open(modules(PKG_DIR)[name]) as f:
        doc = ast.get_docstring(ast.parse(f.read()))
    assert doc and len(doc.split()) >= 4, name
