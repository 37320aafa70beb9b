"""`--import MODULE|FILE.py` (repeatable, on export, parity, ops, fuse): a
team's Python module imported before the model loads, as tf2onnx's
`--load_op_libraries` does for kernels. What it registers is then there: Keras
classes (`@keras.saving.register_keras_serializable`) for a `.keras` file that
uses them, and op specs (a module-level `SPEC` or `SPECS`, as an `--op-spec`
file defines them).

MODULE is a dotted name importable here; anything ending in `.py` or holding a
path separator is a file, read relative to the working directory, never to the
model. Nothing from the model chooses what is imported: Keras itself imports
only modules of the keras family by the names a `.keras` file holds, and this
flag is the one way a team's code runs.
"""
from __future__ import annotations

import hashlib
import importlib
import importlib.util
import os
import re
import sys
from types import ModuleType
from typing import Iterable, List

from bridge.errors import BridgeError

FLAG = "--import"
_DOTTED = re.compile(r"[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*")


class ImportFailed(BridgeError, ImportError):
    """A module given with --import that cannot be imported; the message says which and why."""


def is_file(item: str) -> bool:
    return item.endswith(".py") or os.sep in item or "/" in item


def import_modules(items: Iterable[str]) -> List[ModuleType]:
    """Imports each item (a module name or a .py file) in order and registers
    the op specs it defines; returns the modules."""
    return [_register_specs(_import(str(item)), str(item)) for item in items or ()]


def _import(item: str) -> ModuleType:
    if is_file(item):
        return _import_file(item)
    if not _DOTTED.fullmatch(item):
        raise ImportFailed(f"{FLAG} {item!r}: expected a module name (a.b.c) or the path of a .py file")
    try:
        return importlib.import_module(item)
    except ModuleNotFoundError as e:
        if e.name and (item == e.name or item.startswith(e.name + ".")):
            raise ImportFailed(f"{FLAG} {item}: no module {e.name!r} is importable here (give the path of its "
                               f".py file, or install its package)") from None
        raise ImportFailed(f"{FLAG} {item}: importing it failed: {type(e).__name__}: {e}") from None
    except Exception as e:
        raise ImportFailed(f"{FLAG} {item}: importing it failed: {type(e).__name__}: {_first_line(e)}") from None


def _import_file(item: str) -> ModuleType:
    path = os.path.abspath(os.path.expanduser(item))
    if not path.endswith(".py"):
        raise ImportFailed(f"{FLAG} {item}: a file to import must be a Python source file (.py)")
    if not os.path.isfile(path):
        raise ImportFailed(f"{FLAG} {item}: no such file")
    stem = re.sub(r"\W", "_", os.path.basename(path)[:-3]) or "module"
    # a name of its own: the file never shadows an importable module, and the same file imports once
    name = f"bridge_import_{stem}_{hashlib.sha256(path.encode()).hexdigest()[:10]}"
    if name in sys.modules:
        return sys.modules[name]
    spec = importlib.util.spec_from_file_location(name, path)
    if spec is None or spec.loader is None:
        raise ImportFailed(f"{FLAG} {item}: is not a Python module")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    try:
        spec.loader.exec_module(module)
    except Exception as e:
        del sys.modules[name]
        raise ImportFailed(f"{FLAG} {item}: importing it failed: {type(e).__name__}: {_first_line(e)}") from None
    return module


def _register_specs(module: ModuleType, item: str) -> ModuleType:
    specs = ([module.SPEC] if hasattr(module, "SPEC") else []) + list(getattr(module, "SPECS", ()))
    if specs:
        from bridge.ops import registry
        for spec in specs:
            registry.register(spec, f"{FLAG} {item}")
    return module


def _first_line(e: BaseException) -> str:
    lines = str(e).strip().splitlines()
    return lines[0][:300] if lines else ""


def missing_class_message(path: str, error: BaseException):
    """Keras' "Could not locate class 'X'" (many lines, the whole config) as one
    line naming the class and this flag; None for any other error. The class
    name comes from the file: shown escaped."""
    from bridge.untrusted import shown
    text = str(error)
    m = re.search(r"Could not locate class '([^']*)'", text)
    if not m:
        return None
    registered = re.search(r"'registered_name': '([^']*)'", text[m.end():])
    also = f" (registered as {shown(registered.group(1))})" if registered and registered.group(1) != m.group(1) else ""
    return (f"cannot load the Keras file {path}: it uses the class {shown(m.group(1))}{also}, which no imported "
            f"module registers: give the module that defines it with {FLAG} MODULE|FILE.py")
