"""bridge/parity's modules import in any order: each one alone in a fresh
interpreter, and the import graph of the package (every import statement,
including those inside functions and under TYPE_CHECKING) has no cycle."""
from __future__ import annotations

import ast
import os
import subprocess
import sys
from typing import Dict, List, Optional, Set

import pytest

import bridge.parity

PACKAGE_DIR = os.path.dirname(bridge.parity.__file__)
PACKAGE = "bridge.parity"


def module_files(package_dir: str, package: str) -> Dict[str, str]:
    """{dotted module name: file} for every .py under `package_dir`."""
    out = {}
    for root, _, files in os.walk(package_dir):
        rel = os.path.relpath(root, package_dir)
        parts = [package] + ([] if rel == "." else rel.split(os.sep))
        for f in files:
            if not f.endswith(".py"):
                continue
            name = ".".join(parts) if f == "__init__.py" else ".".join(parts + [f[:-3]])
            out[name] = os.path.join(root, f)
    return out


def import_graph(files: Dict[str, str]) -> Dict[str, Set[str]]:
    """{module: modules of the same package it imports}, from the source text."""
    known = set(files)
    graph: Dict[str, Set[str]] = {}
    for name, path in files.items():
        is_package = path.endswith("__init__.py")
        with open(path, encoding="utf-8") as fh:
            tree = ast.parse(fh.read(), path)
        targets: Set[str] = set()
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                targets.update(a.name for a in node.names)
            elif isinstance(node, ast.ImportFrom):
                base = _absolute(node, name, is_package)
                if base is None:
                    continue
                for a in node.names:
                    sub = f"{base}.{a.name}"
                    targets.add(sub if sub in known else base)
        graph[name] = {t for t in targets if t in known and t != name}
    return graph


def _absolute(node: ast.ImportFrom, importer: str, is_package: bool) -> Optional[str]:
    if not node.level:
        return node.module
    parts = importer.split(".")
    if not is_package:
        parts = parts[:-1]
    parts = parts[:len(parts) - (node.level - 1)]
    return ".".join(parts + ([node.module] if node.module else []))


def find_cycle(graph: Dict[str, Set[str]]) -> Optional[List[str]]:
    """One import cycle as [a, b, ..., a], or None."""
    state: Dict[str, int] = {}   # 1: on the current path, 2: done
    path: List[str] = []

    def visit(m: str) -> Optional[List[str]]:
        state[m] = 1
        path.append(m)
        for t in sorted(graph.get(m, ())):
            if state.get(t) == 1:
                return path[path.index(t):] + [t]
            if t not in state:
                found = visit(t)
                if found:
                    return found
        path.pop()
        state[m] = 2
        return None

    for m in sorted(graph):
        if m not in state:
            found = visit(m)
            if found:
                return found
    return None


def test_parity_import_graph_has_no_cycle():
    graph = import_graph(module_files(PACKAGE_DIR, PACKAGE))
    assert f"{PACKAGE}.source" in graph and f"{PACKAGE}.runtimes.tf" in graph
    assert f"{PACKAGE}.unavailable" in graph[f"{PACKAGE}.export"]
    cycle = find_cycle(graph)
    assert cycle is None, "import cycle in bridge/parity: " + " -> ".join(cycle)


def test_unavailable_is_a_leaf_and_one_class():
    graph = import_graph(module_files(PACKAGE_DIR, PACKAGE))
    assert graph[f"{PACKAGE}.unavailable"] == set()
    from bridge.parity import runtime, unavailable
    assert runtime.Unavailable is unavailable.Unavailable is bridge.parity.Unavailable


def _write(root, rel, text):
    path = os.path.join(root, rel)
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w") as fh:
        fh.write(text)


def test_cycle_finder_sees_lazy_relative_and_type_checking_imports(tmp_path):
    """The walker itself: a cycle closed only by a function-level import, a
    relative import or a TYPE_CHECKING import is still a cycle."""
    root = str(tmp_path / "pkg")
    _write(root, "__init__.py", "")
    _write(root, "a.py", "from pkg.b import thing\n")
    _write(root, "b.py", "def f():\n    from . import c\n")
    _write(root, "c.py", "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from .sub.d import X\n")
    _write(root, "sub/__init__.py", "")
    _write(root, "sub/d.py", "from .. import a\n")
    graph = import_graph(module_files(root, "pkg"))
    assert graph["pkg.sub.d"] == {"pkg.a"}
    assert find_cycle(graph) == ["pkg.a", "pkg.b", "pkg.c", "pkg.sub.d", "pkg.a"]
    _write(root, "sub/d.py", "import numpy\n")
    assert find_cycle(import_graph(module_files(root, "pkg"))) is None


@pytest.mark.parametrize("module", sorted(module_files(PACKAGE_DIR, PACKAGE)))
def test_parity_module_imports_alone(module):
    done = subprocess.run([sys.executable, "-c", f"import importlib; importlib.import_module({module!r})"],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
