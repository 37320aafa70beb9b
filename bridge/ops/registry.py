"""Where op specs come from: found, never listed.

- bridge's own ops: every op folder of this package (bridge/ops/<op>/, its
  __init__ defining `SPEC`; the folder's name is the spec's `module`), or a module
  of it that defines `SPEC`;
- a team's ops: a spec file given on the command line (`--op-spec my_ops.py`,
  `load_spec_file`), or a module named by a Python entry point in the group
  `bridge.ops` (`load_entry_points`). A file or module defines `SPEC` (one
  OpSpec) or `SPECS` (several).

Every spec is checked when it is registered, and a bad one is refused with the
file and the field named (`SpecError`). Layers read the registry after the
specs are loaded: the CLI loads `--op-spec` files before it imports any layer.
"""
from __future__ import annotations

import dataclasses
import importlib
import importlib.util
import pkgutil
import re
import sys
from pathlib import Path
from typing import Dict, List, Optional

from bridge.errors import BridgeError

from . import fusion, graph_fusion, shape_rules
from .spec import REQUIRED, OpError, OpSpec, Tolerance, _coerce

ENTRY_POINT_GROUP = "bridge.ops"
_DTYPES = ("float32", "float16", "bfloat16", "float64")

SPECS: Dict[str, OpSpec] = {}
ORIGINS: Dict[str, str] = {}   # op name -> where its spec came from ("bridge" for the built-ins)
_FOLDERS: Dict[str, Path] = {}  # built-in op name -> its op folder (bridge/ops/<op>/)


class SpecError(BridgeError, ValueError):
    """A spec that cannot be used: names the file (or module), the op and the field."""

    def __init__(self, origin: str, field: str, message: str, op: Optional[str] = None):
        self.origin, self.field = origin, field
        where = f"{origin}: {op}" if op else origin
        super().__init__(f"{where}: field '{field}': {message}")


def check(spec, origin: str) -> OpSpec:
    """The checks every spec passes before any layer sees it."""
    if not isinstance(spec, OpSpec):
        raise SpecError(origin, "SPEC", f"must be a bridge.ops.OpSpec, got {type(spec).__name__}")
    op = spec.name
    if not re.fullmatch(r"[A-Z][A-Za-z0-9]*", op or ""):
        raise SpecError(origin, "name", f"{op!r} is not an op type (CamelCase letters and digits, as TensorFlow "
                        f"requires of REGISTER_OP names)")
    if not re.fullmatch(r"[a-z][a-z0-9_]*", spec.module or ""):
        raise SpecError(origin, "module", f"{spec.module!r} is not a snake_case module name", op)
    if not re.fullmatch(r"[A-Za-z0-9_.\-]+", spec.domain or ""):
        raise SpecError(origin, "domain", f"{spec.domain!r} is not an ONNX domain name", op)
    for field in ("_reference", "_to_onnx", "_from_onnx"):
        if not callable(getattr(spec, field)):
            raise SpecError(origin, field, "must be a function (the numpy reference and attribute mappings are "
                            "part of every op)", op)
    if spec._infer is not None and not callable(spec._infer):
        raise SpecError(origin, "_infer", "must be a function (the shape function) or None", op)
    if spec._infer is None and not spec.shape_rule:
        raise SpecError(origin, "shape_rule", "an op states its shape rule (bridge.ops.shape_rules statements; "
                        "shape_rules.same_as_first_input(n) is the simplest), or gives a shape function `_infer`", op)
    if not spec.inputs or not spec.outputs:
        raise SpecError(origin, "inputs" if not spec.inputs else "outputs", "an op has at least one", op)
    names = [a.name for a in spec.inputs + spec.outputs]
    if len(set(names)) != len(names):
        raise SpecError(origin, "inputs", f"tensor names must be unique, got {names}", op)
    if not spec.dtypes or any(d not in _DTYPES for d in spec.dtypes):
        raise SpecError(origin, "dtypes", f"{list(spec.dtypes)} must be a non-empty subset of {list(_DTYPES)}", op)
    for d in spec.dtypes:
        if not isinstance(spec.tolerance.get(d), Tolerance):
            raise SpecError(origin, "tolerance", f"needs a Tolerance for {d} (one per dtype)", op)
    for field, attrs in (("attrs", spec.attrs), ("onnx_attrs", spec.onnx_attrs)):
        for a in attrs:
            if a.type not in ("float", "int", "string", "list(int)", "list(float)"):
                raise SpecError(origin, f"{field}.{a.name}", f"type {a.type!r} is not one of float, int, string, "
                                f"list(int), list(float)", op)
            if a.default is not REQUIRED:
                try:
                    _coerce(op, a, a.default)
                except OpError:
                    raise SpecError(origin, f"{field}.{a.name}", f"default {a.default!r} is not a {a.type}",
                                    op) from None
    for message in shape_rules.problems(spec.shape_rule, [a.name for a in spec.inputs], len(spec.outputs),
                                        {a.name: a.type for a in spec.onnx_attrs}):
        raise SpecError(origin, "shape_rule", message, op)
    if spec.body is not None and not callable(spec.body):
        raise SpecError(origin, "body", "the decomposition must be a function body(b, *inputs, outputs)", op)
    _check_fusion(spec, origin)
    return spec


def _check_fusion(spec: OpSpec, origin: str) -> None:
    if not isinstance(spec.fusion, (tuple, list)):
        raise SpecError(origin, "fusion", f"a tuple of bridge.ops.fusion.Pattern, got {type(spec.fusion).__name__}",
                        spec.name)
    keys = [getattr(p, "key", None) for p in spec.fusion]
    for i, pattern in enumerate(spec.fusion):
        for name, message in fusion.problems(pattern, spec):
            raise SpecError(origin, f"fusion[{i}]" + (f".{name}" if name else ""), message, spec.name)
        if keys.count(pattern.key) > 1:
            raise SpecError(origin, f"fusion[{i}].key", f"{pattern.key!r} is the key of another pattern of the op",
                            spec.name)
        if pattern.folded_into is not None and pattern.folded_into not in keys:
            raise SpecError(origin, f"fusion[{i}].folded_into", f"{pattern.folded_into!r} is no pattern of the op",
                            spec.name)
    if not isinstance(spec.graph_fusion, (tuple, list)):
        raise SpecError(origin, "graph_fusion", "a tuple of bridge.ops.graph_fusion.GraphPattern, got "
                        f"{type(spec.graph_fusion).__name__}", spec.name)
    for i, pattern in enumerate(spec.graph_fusion):
        for name, message in graph_fusion.problems(pattern, spec):
            raise SpecError(origin, f"graph_fusion[{i}]" + (f".{name}" if name else ""), message, spec.name)


def register(spec: OpSpec, origin: str) -> OpSpec:
    check(spec, origin)
    if spec.name in SPECS and ORIGINS.get(spec.name) != origin:
        raise SpecError(origin, "name", f"op {spec.name} is already defined by {ORIGINS[spec.name]}", spec.name)
    clash = next((s for s in SPECS.values() if s.module == spec.module and s.name != spec.name), None)
    if clash is not None:
        raise SpecError(origin, "module", f"{spec.module!r} is already the module of {clash.name}", spec.name)
    for i, pattern in enumerate(spec.fusion):
        other = next((s for s in SPECS.values() if s.name != spec.name and pattern.key in pattern_keys(s)), None)
        if other is not None:
            raise SpecError(origin, f"fusion[{i}].key", f"{pattern.key!r} is already a fusion pattern of {other.name}",
                            spec.name)
    SPECS[spec.name] = spec
    ORIGINS[spec.name] = origin
    return spec


def _specs_of(module, origin: str) -> List[OpSpec]:
    found = []
    if hasattr(module, "SPEC"):
        found.append(module.SPEC)
    found.extend(getattr(module, "SPECS", ()))
    if not found:
        raise SpecError(origin, "SPEC", "the module defines no SPEC (an OpSpec) and no SPECS (a list of them)")
    return found


def load_builtins() -> None:
    """Registers every op folder (and spec module) of this package's path: a folder
    on `bridge.ops.__path__` is found wherever it lies."""
    package = sys.modules[__package__]
    for info in sorted(pkgutil.iter_modules(package.__path__), key=lambda m: m.name):
        if info.name.startswith("_") or info.name in ("spec", "registry", "op_error", "shape_rules"):
            continue
        module = importlib.import_module(f"{__package__}.{info.name}")
        if not hasattr(module, "SPEC"):
            continue
        origin = module.__file__
        if info.ispkg and module.SPEC.module != info.name:
            raise SpecError(origin, "module", f"{module.SPEC.module!r} is not the name of its op folder "
                            f"({info.name!r})", module.SPEC.name)
        register(module.SPEC, "bridge")
        if info.ispkg:
            _FOLDERS[module.SPEC.name] = Path(module.__file__).resolve().parent


def op_folder(spec: OpSpec) -> Optional[Path]:
    """A built-in op's folder (bridge/ops/<op>/: its spec's parts, kernel.h, bench.py,
    its Keras side), or None for an op without one (a team's)."""
    return _FOLDERS.get(spec.name) if is_builtin(spec) else None


def part(spec: OpSpec, name: str):
    """The module `name` of the op's folder (bridge.ops.<op>.<name>: "bench",
    "keras_layer", ...), or None where the op has no folder or the folder no such
    file. The hosts load an op's parts by name, so a new op folder needs no edit
    outside itself."""
    folder = op_folder(spec)
    if folder is None or not (folder / f"{name}.py").is_file():
        return None
    return importlib.import_module(f"{__package__}.{spec.module}.{name}")


def load_spec_file(path) -> List[OpSpec]:
    """Registers the specs a Python file defines (`--op-spec`)."""
    path = Path(path).expanduser().resolve()
    origin = str(path)
    if not path.is_file():
        raise SpecError(origin, "file", "no such file (give the Python file that defines SPEC)")
    name = "bridge_user_ops_" + re.sub(r"\W", "_", path.stem) + "_" + str(abs(hash(origin)) % 10 ** 8)
    if name in sys.modules:  # loaded before: its specs are registered
        return _specs_of(sys.modules[name], origin)
    spec = importlib.util.spec_from_file_location(name, path)
    if spec is None or spec.loader is None:
        raise SpecError(origin, "file", "is not a Python module")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    try:
        spec.loader.exec_module(module)
    except SpecError:
        del sys.modules[name]
        raise
    except Exception as e:
        del sys.modules[name]
        unknown = re.match(r"OpSpec\.__init__\(\) got an unexpected keyword argument '(\w+)'", str(e))
        if isinstance(e, TypeError) and unknown:
            raise SpecError(origin, unknown.group(1), f"unknown field; an OpSpec has "
                            f"{[f.name for f in dataclasses.fields(OpSpec)]}") from None
        raise SpecError(origin, "file", f"importing it failed: {type(e).__name__}: {e}") from None
    return [register(s, origin) for s in _specs_of(module, origin)]


def load_entry_points() -> List[OpSpec]:
    """Registers the specs of every installed `bridge.ops` entry point."""
    from importlib import metadata
    loaded = []
    for ep in metadata.entry_points(group=ENTRY_POINT_GROUP):
        origin = f"entry point {ep.name} = {ep.value}"
        try:
            target = ep.load()
        except Exception as e:
            raise SpecError(origin, "entry point", f"loading it failed: {type(e).__name__}: {e}") from None
        specs = [target] if isinstance(target, OpSpec) else _specs_of(target, origin)
        loaded.extend(register(s, origin) for s in specs)
    return loaded


def pattern_keys(spec: OpSpec) -> List[str]:
    return [p.key for p in spec.fusion]


def is_builtin(spec: OpSpec) -> bool:
    return ORIGINS.get(spec.name) == "bridge"

