"""No import cycle among bridge's modules, function-level imports included.

Every module of the installed packages is parsed with `ast`; every `import` and
`from ... import` at any depth (relative ones too) becomes an edge, and
`from pkg import name` where `name` is a submodule of `pkg` is an edge to the
submodule (any other name is an edge to `pkg`). Importing `a.b.c` runs
`a/__init__` and `a/b/__init__` first, so those are edges too, except the
packages the importing module already lies in (they are running already).
`importlib.import_module("literal")` counts as an import; a computed name (the
discovery of op folders, runtimes and fusion hooks from spec data) cannot be
seen here. Imports under `if TYPE_CHECKING:` are left out: they never run.
"""
from __future__ import annotations

import ast
import textwrap
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

# the [tool.setuptools.package-dir] mapping of pyproject.toml: top-level folders
# that install under the one namespace `bridge`
PACKAGE_DIRS = {
    "bridge": "bridge",
    "bridge.tf_ops": "tf_ops",
    "bridge.onnx_plugins": "onnx_plugins",
    "bridge.converters": "converters",
    "bridge.models": "models",
}


def package_dirs(root: Path) -> dict[str, Path]:
    """Package name -> folder, read from pyproject.toml (the fallback above if absent)."""
    mapping = dict(PACKAGE_DIRS)
    pyproject = root / "pyproject.toml"
    if pyproject.exists():
        import tomllib

        data = tomllib.loads(pyproject.read_text())
        found = data.get("tool", {}).get("setuptools", {}).get("package-dir")
        if found:
            mapping = {name: folder for name, folder in found.items()}
    return {name: root / folder for name, folder in mapping.items()}


def discover(root: Path) -> dict[str, Path]:
    """Every module name -> its file, over every package folder (packages as their __init__)."""
    modules: dict[str, Path] = {}
    dirs = package_dirs(root)
    for pkg, folder in sorted(dirs.items()):
        for path in sorted(folder.rglob("*.py")):
            rel = path.relative_to(folder)
            parts = list(rel.with_suffix("").parts)
            # a sub-folder that another mapping installs elsewhere is not this package's
            if any(f"{pkg}.{'.'.join(parts[:i])}" in dirs and i for i in range(1, len(parts))):
                continue
            if not all(p.isidentifier() for p in parts):
                continue
            if not (path.parent / "__init__.py").exists():
                continue  # a script folder (e.g. cuda_harness's tools), not a package
            if parts[-1] == "__init__":
                parts = parts[:-1]
            name = ".".join([pkg, *parts])
            modules[name] = path
    return modules


def _is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING")


def _import_module_call(node: ast.AST):
    """`importlib.import_module("a.b")` (or `import_module("a.b")`) with a literal
    name, as an Import node; None for anything else (a computed name is discovery)."""
    if not (isinstance(node, ast.Call) and node.args and isinstance(node.args[0], ast.Constant)
            and isinstance(node.args[0].value, str)):
        return None
    f = node.func
    name = f.attr if isinstance(f, ast.Attribute) else f.id if isinstance(f, ast.Name) else ""
    if name != "import_module" or node.args[0].value.startswith("."):
        return None
    return ast.copy_location(ast.Import(names=[ast.alias(name=node.args[0].value)]), node)


def _imports(tree: ast.AST):
    """Every Import/ImportFrom node at any depth (and literal import_module calls),
    skipping `if TYPE_CHECKING:` bodies."""
    stack = [tree]
    while stack:
        node = stack.pop()
        if isinstance(node, ast.If) and _is_type_checking(node.test):
            stack.extend(node.orelse)
            continue
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            yield node
        call = _import_module_call(node)
        if call is not None:
            yield call
        stack.extend(ast.iter_child_nodes(node))


def _owner(name: str, modules: dict[str, Path]) -> str | None:
    """The longest known module that `name` is or lies inside."""
    while name:
        if name in modules:
            return name
        name = name.rpartition(".")[0]
    return None


def _ancestors(name: str, is_pkg: bool) -> set[str]:
    """The packages Python has run (or is running) before module `name` runs."""
    parts = name.split(".")
    found = {".".join(parts[:i]) for i in range(1, len(parts))}
    return found | ({name} if is_pkg else set())


def edges(modules: dict[str, Path]) -> dict[str, list[tuple[str, str]]]:
    """module -> [(imported module, "file:line")]"""
    graph: dict[str, list[tuple[str, str]]] = {m: [] for m in modules}
    for mod, path in modules.items():
        is_pkg = path.name == "__init__.py"
        tree = ast.parse(path.read_text(), str(path))
        for node in _imports(tree):
            where = f"{path.relative_to(ROOT) if path.is_relative_to(ROOT) else path}:{node.lineno}"
            targets: list[str] = []
            if isinstance(node, ast.Import):
                targets = [alias.name for alias in node.names]
            else:
                if node.level:
                    base = mod if is_pkg else mod.rpartition(".")[0]
                    for _ in range(node.level - 1):
                        base = base.rpartition(".")[0]
                    base = f"{base}.{node.module}" if node.module else base
                else:
                    base = node.module or ""
                # `from pkg import sub` imports the submodule; any other name is read
                # from pkg itself (its __init__)
                subs = [f"{base}.{alias.name}" for alias in node.names
                        if f"{base}.{alias.name}" in modules]
                targets = subs + ([base] if len(subs) < len(node.names) else [])
            for target in targets:
                owner = _owner(target, modules)
                if not owner:
                    continue
                # importing a.b.c runs a/__init__ and a/b/__init__ first: those
                # not already running for `mod` itself are edges too
                mine = _ancestors(mod, is_pkg)
                for module in [owner, *_ancestors(owner, False)]:
                    if module != mod and module not in mine and module in modules:
                        graph[mod].append((module, where))
    return graph


def cycles(graph: dict[str, list[tuple[str, str]]]) -> list[list[str]]:
    """The strongly connected components with more than one module (Tarjan, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    on_stack: set[str] = set()
    stack: list[str] = []
    found: list[list[str]] = []
    counter = 0
    for start in sorted(graph):
        if start in index:
            continue
        work = [(start, iter(sorted({t for t, _ in graph[start]})))]
        index[start] = low[start] = counter; counter += 1
        stack.append(start); on_stack.add(start)
        while work:
            node, children = work[-1]
            advanced = False
            for child in children:
                if child not in index:
                    index[child] = low[child] = counter; counter += 1
                    stack.append(child); on_stack.add(child)
                    work.append((child, iter(sorted({t for t, _ in graph[child]}))))
                    advanced = True
                    break
                if child in on_stack:
                    low[node] = min(low[node], index[child])
            if advanced:
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop(); on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1:
                    found.append(sorted(component))
    return found


def describe(graph, components) -> str:
    lines = []
    for component in components:
        members = set(component)
        lines.append(f"cycle of {len(component)} modules: {', '.join(component)}")
        for mod in component:
            for target, where in graph[mod]:
                if target in members:
                    lines.append(f"    {mod} -> {target}  ({where})")
    return "\n".join(lines)


def find(root: Path = ROOT) -> str:
    graph = edges(discover(root))
    return describe(graph, cycles(graph))


def test_no_import_cycle():
    report = find()
    assert not report, "import cycles among bridge's modules:\n" + report


def _tree(tmp_path: Path, files: dict[str, str]) -> Path:
    (tmp_path / "pyproject.toml").write_text(textwrap.dedent("""\
        [tool.setuptools.package-dir]
        "bridge" = "bridge"
        "bridge.converters" = "converters"
        """))
    for rel, text in files.items():
        path = tmp_path / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(textwrap.dedent(text))
    return tmp_path


def test_planted_cycle_through_a_function_level_import_is_found(tmp_path):
    root = _tree(tmp_path, {
        "bridge/__init__.py": "",
        "bridge/ops/__init__.py": "",
        "bridge/ops/spec.py": "import numpy\n",
        "bridge/parity/__init__.py": "",
        # relative, and `from pkg import submodule`
        "bridge/parity/source.py": "from . import export\n",
        "bridge/parity/export.py": "def f():\n    from bridge.converters.shared import x\n",
        "converters/__init__.py": "",
        "converters/shared.py": "def g():\n    from ..parity.source import y\n",
        "converters/late.py": "import importlib\ndef h():\n    importlib.import_module('bridge.converters.lazy')\n",
        "converters/lazy.py": "from bridge.converters import late\n",
        "converters/typed.py": ("from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n"
                                "    from bridge.parity import export\n"),
    })
    global ROOT
    saved, ROOT = ROOT, root
    try:
        report = find(root)
    finally:
        ROOT = saved
    assert "cycle of 3 modules: bridge.converters.shared, bridge.parity.export, bridge.parity.source" in report
    assert "bridge.parity.export -> bridge.converters.shared  (bridge/parity/export.py:2)" in report
    assert "bridge.converters.shared -> bridge.parity.source  (converters/shared.py:2)" in report
    assert "bridge.parity.source -> bridge.parity.export  (bridge/parity/source.py:1)" in report
    assert "cycle of 2 modules: bridge.converters.late, bridge.converters.lazy" in report
    assert "bridge.converters.late -> bridge.converters.lazy  (converters/late.py:3)" in report
    assert "typed" not in report  # TYPE_CHECKING-only imports never run
    assert "bridge.ops" not in report


def test_no_cycle_in_a_layered_tree(tmp_path):
    root = _tree(tmp_path, {
        "bridge/__init__.py": "",
        "bridge/ops/__init__.py": "",
        "bridge/ops/spec.py": "",
        "converters/__init__.py": "from bridge.ops import spec\n",
        "converters/a.py": "def f():\n    from . import b\n",
        "converters/b.py": "from bridge.ops.spec import x\n",
    })
    assert find(root) == ""


if __name__ == "__main__":
    print(find() or "no import cycle")
